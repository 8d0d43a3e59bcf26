"""Streaming (non-temporal) stores of large one-axis elementwise kernels
(`svod.codegen.schedule.streams`, `KernelLowering._stream_chunk`).

The path only changes how the output is written, so every result must be bit-identical to
the ordinary path's: the tests shrink the last-level cache the schedule sees (1 KiB) so
that small kernels stream, and compare with the same program compiled without streaming
and with numpy, over dtypes, lengths around the vector/block sizes, unaligned starts
(slices), masks (concatenation), broadcasts and both thread counts."""

from __future__ import annotations

import functools
import re

import numpy as np
import pytest

import svod
from svod.codegen import schedule as sched_mod
from svod.codegen import target as target_mod


@pytest.fixture
def small_llc(monkeypatch, tmp_path):
    """The schedule sees a 1 KiB last-level cache (and a private cache dir)."""
    monkeypatch.setenv("SVOD_CACHE_DIR", str(tmp_path / "cache"))
    l1, l2, _ = target_mod.cache_sizes()
    monkeypatch.setattr(target_mod, "cache_sizes", functools.cache(lambda: (l1, l2, 1 << 10)))
    sched_mod.clear_cache()
    svod.reset()
    yield
    sched_mod.clear_cache()
    svod.reset()


def _values(dtype, n, seed):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        v = rng.standard_normal(n).astype(dtype)
        if n > 8:
            v[[1, 3, 5, 7]] = [np.nan, np.inf, -np.inf, -0.0]
        return v
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, -100), min(info.max, 100), n).astype(dtype)


PROGRAMS = {
    "axpy": lambda xp, a, b: a * 3 + b,
    "slices": lambda xp, a, b: a[1:] - b[:-1],
    "concat": lambda xp, a, b: xp.concat([a, b]) * 2,
    "where": lambda xp, a, b: xp.where(a > b, a, b),
    "bcast": lambda xp, a, b: a * b[:1] - b[-1:],
}


def _run(fn, a, b):
    return svod.asarray(fn(svod, svod.asarray(a), svod.asarray(b))).numpy()


@pytest.mark.parametrize("name", sorted(PROGRAMS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8, np.uint16, np.int64])
def test_streaming_results_equal_the_ordinary_path_and_numpy(small_llc, monkeypatch, name, dtype):
    fn = PROGRAMS[name]
    for n in (127, 128 * 8 + 3, 20_011):  # (under a block; blocks and tails; many units)
        a, b = _values(dtype, n, 1), _values(dtype, n, 2)
        want = np.asarray(fn(np, a, b))
        for threads in ("1", "2") if n > 20_000 else ("2",):
            monkeypatch.setenv("SVOD_THREADS", threads)
            got = _run(fn, a, b)
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_array_equal(got, want)
    with monkeypatch.context() as m:
        m.setattr(sched_mod, "streams", lambda *_: False)
        sched_mod.clear_cache()
        svod.reset()
        plain = _run(fn, a, b)
    sched_mod.clear_cache()
    svod.reset()
    assert plain.tobytes() == _run(fn, a, b).tobytes()


def test_a_large_elementwise_kernel_streams_and_a_small_one_does_not(small_llc):
    a = np.arange(100_000, dtype=np.float32)
    t = svod.asarray(a) * 2 + 1
    k = svod.explain(t).plan.kernels[0]
    assert sched_mod.schedule(k).stream
    asm = svod.explain(t).asm(0)
    if re.search(r"\bvmov\w*ps\b", asm):  # an x86 host: the stores are non-temporal moves
        assert re.search(r"\bv?movnt", asm), asm[:2000]
    np.testing.assert_array_equal(t.numpy(), a * 2 + 1)
    small = svod.asarray(a[:40]) * 2 + 1
    assert not sched_mod.schedule(svod.explain(small).plan.kernels[0]).stream
    # multiple outputs, reductions and bool outputs keep ordinary stores
    x = svod.asarray(a)
    assert not sched_mod.schedule(svod.explain(x > 3).plan.kernels[0]).stream
    assert not sched_mod.schedule(svod.explain(svod.sum(x)).plan.kernels[0]).stream
