"""One-axis elementwise kernels of a dynamic structure at the caller's row count
(svod/codegen/rows.py, ``("chunk", ...)`` launches): the bucket's kernel runs as its rows
variant, whose last chunk stops at element ``n * elements per row``, on the caller's own
arrays. Checked here: results equal numpy and the constant-shape (exact) plan bit for bit
at odd sizes in a bucket (not multiples of the vector width or of the 4,096-element chunk,
a single partial chunk, the bucket's own size), no input copied (`svod.shapes.pad_rows`
copies nothing, the kernels read the caller's addresses), nothing written past row ``n``
(guard elements after every output block), nothing read past row ``n`` (inputs ending at
an inaccessible page), and nothing compiled for a new size in a known bucket."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import svod
from svod import engine, shapes

_RNG = np.random.default_rng(7)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _w1(a, b, c):
    return svod.nn.relu(a * b + c) * 0.5 - a / (1 + svod.exp(-b))


def _w1_ref(a, b, c):
    f = np.float32
    return np.maximum(a * b + c, f(0)) * f(0.5) - a / (f(1) + np.exp(-b))


# name -> (program, numpy reference, input dtypes, elements per row (None: 1-D), exact compare)
PROGRAMS = {
    "w1_float32_1d": (_w1, _w1_ref, (np.float32,) * 3, None, False),
    "where_float64_rows_of_7": (lambda x, y: svod.where(x > 0, x * y, -y) + 1.0,
                                lambda x, y: np.where(x > 0, x * y, -y) + 1.0, (np.float64,) * 2, 7, False),
    "int32_rows_of_3": (lambda x, y: svod.maximum(x * 3 + y, y) - 7, lambda x, y: np.maximum(x * 3 + y, y) - 7,
                        (np.int32,) * 2, 3, True),
    "two_outputs_float32_rows_of_5": (lambda x: (svod.exp(x) * 2.0, svod.abs(x) - 1.0),
                                      lambda x: (np.exp(x) * np.float32(2), np.abs(x) - np.float32(1)),
                                      (np.float32,), 5, False),
}
# buckets (lowest size, the bucket) per program: one of at most 16 rows (a single partial chunk of
# 4,096 elements), one whose sizes span chunks; a first size (exact) outside both
BUCKETS = {None: ((9, 16), (7681, 8192)), 7: ((9, 16), (1025, 1152)), 3: ((9, 16), (2561, 2816)),
           5: ((9, 16), (1665, 1792))}


def _inputs(name: str, n: int) -> list[np.ndarray]:
    _, _, dtypes, cols, _ = PROGRAMS[name]
    shape = (n,) if cols is None else (n, cols)
    out = []
    for dt in dtypes:
        if np.dtype(dt).kind == "i":
            out.append(_RNG.integers(-10_000, 10_000, shape).astype(dt))
            continue
        x = (_RNG.standard_normal(shape) * 3).astype(dt)
        flat = x.reshape(-1)
        flat[[0, 1, 2, 3]] = np.nan, np.inf, -np.inf, -0.0
        flat[-1] = np.nan  # the last element of row n - 1: the end of the last chunk
        out.append(x)
    return out


def _results(out) -> list[np.ndarray]:
    outs = list(out) if isinstance(out, tuple) else [out]
    return [o.numpy() for o in svod.realize(*outs)] if len(outs) > 1 else [outs[0].numpy()]


def _numpy_check(name: str, got: list, arrays: list) -> None:
    _, ref, _, _, exact = PROGRAMS[name]
    with np.errstate(all="ignore"):
        want = ref(*arrays)
    want = list(want) if isinstance(want, tuple) else [want]
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (name, g.shape, w.shape, g.dtype, w.dtype)
        if exact:
            np.testing.assert_array_equal(g, w)
            continue
        np.testing.assert_allclose(g, w, rtol=2e-6, atol=1e-6)
        zero = w == 0
        assert np.array_equal(np.signbit(g)[zero], np.signbit(w)[zero]), name


class _FreshCache:
    """Empty persistent and in-memory caches for one example (a plan loaded from the disk
    store replays its warm record, whose rows program is built off the call)."""

    def __enter__(self):
        from svod.codegen.program import clear_programs
        from svod.store import reset_default_store

        self._old = os.environ.get("SVOD_CACHE_DIR")
        self._tmp = tempfile.TemporaryDirectory(prefix="svod-rowsew-")
        os.environ["SVOD_CACHE_DIR"] = self._tmp.name
        reset_default_store()
        svod.reset()
        clear_programs()
        return self

    def __exit__(self, *exc):
        from svod.store import reset_default_store

        svod.reset()
        reset_default_store()
        if self._old is None:
            os.environ.pop("SVOD_CACHE_DIR", None)
        else:
            os.environ["SVOD_CACHE_DIR"] = self._old
        self._tmp.cleanup()


def _rows_program(name: str, n: int):
    f = PROGRAMS[name][0]
    outs = f(*[svod.asarray(a) for a in _inputs(name, n)])
    _, exe = engine.plan_for(list(outs) if isinstance(outs, tuple) else [outs])
    return exe, (None if exe._gp is None else exe._gp.__dict__.get("_rows_program"))


@pytest.mark.parametrize("name", sorted(PROGRAMS))
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_sizes_in_a_bucket_equal_numpy_and_the_constant_plan_bit_for_bit(name, data, monkeypatch):
    monkeypatch.setenv("SVOD_SEARCH", "0")  # the greedy planner: one elementwise kernel either way
    lo, b = data.draw(st.sampled_from(BUCKETS[PROGRAMS[name][3]]), label="bucket")
    sizes = data.draw(st.lists(st.integers(lo, b), min_size=1, max_size=3), label="sizes")
    with _FreshCache():
        _sizes_in_a_bucket(name, lo, b, sizes, monkeypatch)


def _sizes_in_a_bucket(name: str, lo: int, b: int, sizes: list, monkeypatch) -> None:
    f = PROGRAMS[name][0]
    first = 2 * b + 3  # the structure's first size: an exact plan
    x = _inputs(name, first)
    _numpy_check(name, _results(f(*[svod.asarray(a) for a in x])), x)
    s0 = svod.stats()
    x = _inputs(name, lo)
    _numpy_check(name, _results(f(*[svod.asarray(a) for a in x])), x)  # the bucket's first (padded) run
    compiled = svod.stats()["kernels_compiled"] - s0["kernels_compiled"]
    exe, rp = _rows_program(name, lo)
    assert rp is not None and rp.ok, getattr(rp, "reason", "no rows program")
    chunks = [sp for sp in rp.specs.values() if sp[0] == "chunk"]
    assert chunks, rp.specs
    assert compiled <= 2 * len(exe.plan.kernels), compiled  # its kernels and their rows variants
    runs0 = rp.runs
    copies = []
    real_pad = shapes.pad_rows

    def pad(a, bb):
        got = real_pad(a, bb)
        if got.ctypes.data != a.ctypes.data:
            copies.append(a.shape)
        return got

    monkeypatch.setattr(shapes, "pad_rows", pad)
    cases = []
    c0 = svod.stats()["kernels_compiled"]
    for n in sizes:
        arrays = _inputs(name, n)
        tensors = [svod.asarray(a) for a in arrays]
        got = _results(f(*tensors))
        _numpy_check(name, got, arrays)
        if n != b:  # the rows program's slots (its last run's): the tensors' own memory
            bound = {rp._state[0][i] for i in range(len(rp._ins))}
            assert {t.uop.arg.array.ctypes.data for t in tensors} <= bound, (n, b)
        cases.append((arrays, got))
    assert svod.stats()["kernels_compiled"] == c0, "a new size in a known bucket compiled"
    assert copies == [], copies
    assert rp.runs - runs0 == sum(n != b for n in sizes)
    # the constant-shape plan of each size (the replay table and plan cache forgotten: a
    # replay by signature would run the bucket's plan again)
    engine.reset_caches()
    monkeypatch.setenv("SVOD_DYNAMIC", "0")
    try:
        for arrays, got in cases:
            tensors = [svod.asarray(a) for a in arrays]
            outs = f(*tensors)
            _, exe = engine.plan_for(list(outs) if isinstance(outs, tuple) else [outs])
            n, b = len(arrays[0]), shapes.bucket(len(arrays[0]))  # the exact plan: no node of the bucket's rows
            assert n == b or all(nd.shape[:1] != (b,) for nd in exe.key.nodes), "not the exact plan"
            want = _results(outs)
            for g, w in zip(got, want):
                assert g.shape == w.shape and g.dtype == w.dtype and g.tobytes() == w.tobytes(), \
                    (name, len(arrays[0]))
    finally:
        monkeypatch.undo()


class _GuardPool:
    """Hands out output blocks followed by guard elements (a pattern), and checks them: as
    the pool (the rows program's general path) and as numpy for `np.empty` (the
    straight-line runner's outputs, `svod.codegen.quick`)."""

    GUARD = 4096 + 64

    def __init__(self, real):
        self.real = real
        self.blocks = []

    def _block(self, shape, dt, count):
        dt = np.dtype(dt)
        raw = np.full((count + self.GUARD) * dt.itemsize, 0xA5, np.uint8)
        self.blocks.append((raw, count * dt.itemsize))
        return raw[:count * dt.itemsize].view(dt).reshape(shape)

    def array(self, shape, dt):
        return self._block(shape, dt, int(np.prod(shape)))

    def small_array(self, shape, dt, count):
        return self._block(shape, dt, count)

    def empty(self, shape, dt):
        return self.array(shape, dt)

    def __getattr__(self, name):
        return getattr(self.real, name)

    def untouched(self) -> bool:
        return all((raw[end:] == 0xA5).all() for raw, end in self.blocks)


@pytest.mark.parametrize("which", [0, 1])  # the bucket 16 (the straight-line runner), a bigger one
@pytest.mark.parametrize("name", ["w1_float32_1d", "two_outputs_float32_rows_of_5"])
def test_nothing_is_written_past_row_n(name, which, monkeypatch):
    with _FreshCache():
        _written(name, which, monkeypatch)


def _written(name: str, which: int, monkeypatch) -> None:
    from svod.codegen import rows

    f = PROGRAMS[name][0]
    cols = PROGRAMS[name][3]
    lo, b = BUCKETS[cols][which]
    for n in (2 * b + 3, lo):  # exact, then the bucket's first run
        _results(f(*[svod.asarray(a) for a in _inputs(name, n)]))
    _, rp = _rows_program(name, lo + 1)
    assert rp is not None and rp.ok and rp.runs == 0, getattr(rp, "reason", "no rows program")
    from svod.codegen import quick

    guard = _GuardPool(rows._pool.POOL)
    monkeypatch.setattr(rows._pool, "POOL", guard)
    as_numpy = _GuardPool(np)  # np.empty: the straight-line runner's outputs
    as_numpy.blocks = guard.blocks
    monkeypatch.setattr(quick, "np", as_numpy)
    for n in (lo + 1, b - 1, (lo + b) // 2 + 1):
        arrays = _inputs(name, n)
        got = _results(f(*[svod.asarray(a) for a in arrays]))
        _numpy_check(name, got, arrays)
    assert guard.blocks, "the rows program took no output block from the pool"
    assert guard.untouched(), "a launch wrote past row n"
    assert rp.ok and rp.runs == 3
    if which == 0:
        assert any(rp._runners.values()), "the straight-line runner was not exercised"
    outs = 2 if name.startswith("two_outputs") else 1
    # every output of every run was guarded (SVOD_VALIDATE's padded run of the first takes its own)
    assert len(guard.blocks) >= 3 * outs, len(guard.blocks)


_GUARD_SCRIPT = textwrap.dedent("""
    import ctypes, mmap, sys
    import numpy as np
    sys.path.insert(0, {root!r})
    import svod
    from svod.workloads import get

    PAGE = mmap.PAGESIZE
    libc = ctypes.CDLL(None)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    keep = []

    def at_page_end(a):
        # a copy of `a` whose last byte is the last before an inaccessible page
        pages = -(-a.nbytes // PAGE) + 1
        m = mmap.mmap(-1, (pages + 1) * PAGE)
        base = ctypes.addressof(ctypes.c_char.from_buffer(m))
        assert libc.mprotect(base + pages * PAGE, PAGE, 0) == 0  # PROT_NONE
        out = np.frombuffer(m, a.dtype, a.size, pages * PAGE - a.nbytes).reshape(a.shape)
        out[...] = a
        keep.append(m)
        return out

    w = get("w1_elementwise")
    f = w.build
    rng = np.random.default_rng(0)
    def inputs(n):
        return [rng.standard_normal(n).astype(np.float32) for _ in range(3)]
    for n in (20000, 7681):  # exact, then the bucket 8192's first run
        f(*[svod.asarray(a) for a in inputs(n)]).numpy()
    for n in (7683, 8191, 7700, 8000):
        xs = inputs(n)
        got = f(*[svod.asarray(at_page_end(a), copy=False) for a in xs]).numpy()
        np.testing.assert_allclose(got, w.reference(*xs), rtol=2e-6, atol=1e-6)
    outs = f(*[svod.asarray(a) for a in inputs(7700)])
    from svod import engine
    _, exe = engine.plan_for([outs])
    rp = exe._gp.__dict__["_rows_program"]
    assert rp.ok and rp.runs >= 4 and any(s[0] == "chunk" for s in rp.specs.values()), (rp.reason, rp.runs)
    print("ok", rp.runs)
""")


def test_nothing_is_read_past_row_n():
    """Inputs whose last row ends at an inaccessible page (a read past it faults): the
    rows program reads the caller's memory (`copy=False`) and stops at row n. In a child
    process, so that a fault fails this test only."""
    from svod.workloads import get

    assert hasattr(get("w1_elementwise"), "reference")
    env = dict(os.environ, SVOD_SEARCH="0", SVOD_VALIDATE="0")
    got = subprocess.run([sys.executable, "-c", _GUARD_SCRIPT.format(root=ROOT)], capture_output=True, text=True,
                         env=env, timeout=600)
    assert got.returncode == 0 and got.stdout.startswith("ok"), (got.returncode, got.stdout, got.stderr[-3000:])
