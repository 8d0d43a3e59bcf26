"""A variance of every element read once (`schedule.flat_variance`,
`ColumnLowering._lower_flat_variance`): the one merged axis as rows of a power-of-two
number of columns, each column's (mean, M2) in one read, chunks of rows split over the
threads, the chunks and then the columns merged in fixed pairwise trees.

The tests lower the size threshold (`FLAT_VAR_BYTES`) so that small inputs take the path,
check that they do (`plan_loops`), and compare with numpy (float64 truth for accuracy,
numpy's NaN/inf), across 1, 2 and 3 threads bit for bit and against the two-pass form."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod.codegen import program as program_mod
from svod.codegen import schedule as sched_mod
from svod.codegen.program import compile_kernel
from svod.codegen.schedule import flat_variance, merge_axes, plan_loops
from svod.key import compact
from svod.plan_greedy import plan_greedy


@pytest.fixture
def small_flat(monkeypatch, tmp_path):
    """Every variance of every element of >= 1 KiB takes the flat path (private cache)."""
    monkeypatch.setenv("SVOD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(sched_mod, "FLAT_VAR_BYTES", 1024)
    sched_mod.clear_cache()
    svod.reset()
    yield
    sched_mod.clear_cache()
    svod.reset()


def _kernel(out):
    key, b = compact([out.uop])
    plan = plan_greedy(key)
    assert len(plan.kernels) == 1, plan
    return plan.kernels[0], b.arrays


def _run(kernel, arrays, threads, prog=None):
    bufs = {i: np.ascontiguousarray(a).reshape(-1) for i, a in enumerate(arrays)}
    for o in kernel.outputs:
        bufs[o.slot] = np.full(int(np.prod(o.shape)), 7, o.dtype.np)
    (prog or compile_kernel(kernel)).run(bufs, threads)
    return [bufs[o.slot].reshape(o.shape).copy() for o in kernel.outputs]


def _cols(kernel) -> int:
    return flat_variance(kernel, merge_axes(kernel.shape, [i.view.views[-1] for i in kernel.inputs],
                                            kernel.reduce_axes))


# (shape, dtype, columns the flat path reads it as; 0: the two-pass form)
CASES = [
    ((64, 512), np.float32, 16),
    ((3, 1024), np.float64, 16),
    ((8, 64, 128), np.float32, 16),
    ((1 << 14,), np.float32, 16),
    ((512, 4096), np.float32, 16),  # 8 MiB: split into chunks of rows
    ((256, 4096), np.float64, 16),  # 8 MiB: split, float64
    ((3, 1000), np.float64, 8),  # 16 does not divide 3000: 8 columns
    ((1001, 301), np.float32, 0),  # odd length: the two-pass form
    ((2, 100), np.float32, 0),  # 800 bytes: under the (lowered) threshold
]


@pytest.mark.parametrize("shape,dtype,cols", CASES)
def test_flat_variance_matches_numpy(small_flat, shape, dtype, cols):
    rng = np.random.default_rng(sum(shape))
    x = (rng.standard_normal(shape) * 3 + 50).astype(dtype)
    t = svod.asarray(x)
    k, _ = _kernel(svod.var(t))
    assert _cols(k) == cols
    if cols:
        lp = plan_loops(k)
        assert lp.cols == cols and lp.units == (lp.split or 1)
    truth = x.astype(np.float64).var()
    got = svod.var(t).numpy()
    assert got.dtype == x.var().dtype and got.shape == ()
    tol = 4e-7 if dtype == np.float32 else 1e-15
    assert abs(float(got) - truth) <= tol * truth
    np.testing.assert_allclose(svod.std(t, correction=1).numpy(), x.std(ddof=1), rtol=4 * tol)
    kd = svod.var(t, keepdims=True).numpy()
    assert kd.shape == x.var(keepdims=True).shape
    np.testing.assert_allclose(kd, x.var(keepdims=True), rtol=4 * tol)


def test_split_path_is_taken(small_flat):
    k, _ = _kernel(svod.var(svod.asarray(np.ones((512, 4096), np.float32))))
    lp = plan_loops(k)
    assert lp.split >= 2 and lp.units == lp.split and lp.cols == 16


@pytest.mark.parametrize("offset,rows", [(0.0, 512), (1e3, 512), (1e5, 512), (1e3, 4096)])
def test_large_mean_is_as_accurate_as_numpy(small_flat, offset, rows):
    """A mean far from 0 (cancellation in a one-pass formula): within numpy's own error;
    4096 rows: 64 MiB, 64 chunks of 64 sub-chunks each."""
    rng = np.random.default_rng(3)
    x = (offset + rng.standard_normal((rows, 4096)) * np.linspace(0.5, 2, 4096)).astype(np.float32)
    truth = x.astype(np.float64).var()
    ours = abs(float(svod.var(svod.asarray(x)).numpy()) - truth) / truth
    theirs = abs(float(x.var()) - truth) / truth
    assert ours <= max(2 * theirs, 1e-6), (ours, theirs)


def test_drifting_values(small_flat):
    """Rows whose mean drifts (each column's sub-chunks shift): float64 truth."""
    x = (np.arange(1 << 20, dtype=np.float64) * 1e-3 + np.sin(np.arange(1 << 20))).astype(np.float32)
    truth = x.astype(np.float64).var()
    assert abs(float(svod.var(svod.asarray(x.reshape(256, 4096))).numpy()) - truth) <= 1e-6 * truth


@pytest.mark.parametrize("special", ["nan", "inf", "-inf", "both_inf", "overflow"])
def test_specials_as_numpy(small_flat, special):
    x = np.random.default_rng(4).standard_normal((128, 1024)).astype(np.float32)
    if special == "nan":
        x[77, 3] = np.nan
    elif special == "inf":
        x[5, 1000] = np.inf
    elif special == "-inf":
        x[127, 0] = -np.inf
    elif special == "both_inf":
        x[0, 0], x[100, 100] = np.inf, -np.inf
    else:  # squares overflow float32: numpy's sum of squares is +inf
        x[::2] = 3e38
        x[1::2] = -3e38
    with np.errstate(all="ignore"):
        want = x.var()
    got = svod.var(svod.asarray(x)).numpy()
    np.testing.assert_array_equal(got, want)


def test_expression_and_integer_inputs(small_flat):
    rng = np.random.default_rng(6)
    x = rng.standard_normal((64, 1024)).astype(np.float32)
    t = svod.asarray(x)
    k, _ = _kernel(svod.var(svod.exp(t) * 2 - t))
    assert _cols(k) == 16  # the element is an expression, read through the same index
    np.testing.assert_allclose(svod.var(svod.exp(t) * 2 - t).numpy(), (np.exp(x) * 2 - x).var(), rtol=1e-6)
    i = rng.integers(-1000, 1000, (64, 1024)).astype(np.int32)
    np.testing.assert_allclose(svod.var(svod.asarray(i)).numpy(), i.var(), rtol=1e-6)
    c = (x + 1j * x[::-1]).astype(np.complex64)  # complex: the parts' sums, not this path
    np.testing.assert_allclose(svod.var(svod.asarray(c)).numpy(), c.var(), rtol=1e-5)


@pytest.mark.parametrize("shape,dtype", [((512, 4096), np.float32), ((64, 1024), np.float64)])
def test_bit_identical_across_threads_and_launches(small_flat, shape, dtype):
    x = (np.random.default_rng(8).standard_normal(shape) + 7).astype(dtype)
    k, arrays = _kernel(svod.var(svod.asarray(x)))
    assert _cols(k)
    one = _run(k, arrays, 1)[0]
    for _ in range(3):  # the shared counters are reset by each launch's combining unit
        for threads in (2, 3):
            assert _run(k, arrays, threads)[0].tobytes() == one.tobytes()


def test_flat_is_closer_to_truth_than_or_as_close_as_two_passes(small_flat, monkeypatch):
    """The same kernel compiled both ways: the flat result within the two-pass one's error."""
    x = (np.random.default_rng(9).standard_normal((256, 4096)) * 0.01 + 1e4).astype(np.float32)
    truth = x.astype(np.float64).var()
    k, arrays = _kernel(svod.var(svod.asarray(x)))
    flat = _run(k, arrays, 2)[0]
    monkeypatch.setattr(sched_mod, "FLAT_VAR_BYTES", 1 << 60)
    sched_mod.clear_cache()
    program_mod._programs.clear()
    monkeypatch.setenv("SVOD_OBJECT_CACHE", "0")
    assert plan_loops(k).cols == 0
    two = _run(k, arrays, 2)[0]
    e_flat, e_two = abs(float(flat) - truth) / truth, abs(float(two) - truth) / truth
    assert e_flat <= max(2 * e_two, 1e-6), (e_flat, e_two)
    program_mod._programs.clear()


def test_default_threshold_results_equal_for_svod_threads_1_2_and_3_in_subprocesses():
    """At the default threshold (no patching) a 16 MiB input takes the flat path, and the
    result bytes are the same whatever SVOD_THREADS says (3: units do not divide evenly)."""
    import os
    import subprocess
    import sys
    import textwrap

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = textwrap.dedent("""
        import numpy as np, svod
        from svod.key import compact
        from svod.plan_greedy import plan_greedy
        from svod.codegen.schedule import plan_loops
        x = (np.random.default_rng(11).standard_normal((2048, 2048)) + 5).astype(np.float32)
        t = svod.asarray(x)
        k = plan_greedy(compact([svod.var(t).uop])[0]).kernels[0]
        assert plan_loops(k).cols == 16 and plan_loops(k).split >= 2, plan_loops(k)
        outs = svod.realize(svod.var(t), svod.std(t.astype(np.float64), correction=1))
        print("".join(o.numpy().tobytes().hex() for o in outs))
    """)
    got = []
    for n in ("1", "2", "3"):
        env = {**os.environ, "SVOD_THREADS": n, "PYTHONPATH": root}
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300,
                           cwd=root)
        assert r.returncode == 0, r.stderr
        got.append(r.stdout.strip())
    assert got[0] and got[0] == got[1] == got[2]


def test_realize_runs_the_one_read_kernel(tmp_path, monkeypatch):
    """The plan `realize` runs for x.var() (the search, its cost model: the flat kernel is
    priced as one read, `costmodels.features`) is the one flat kernel, not two full sums
    each reading x."""
    monkeypatch.setenv("SVOD_CACHE_DIR", str(tmp_path / "cache"))
    svod.reset()
    x = np.random.default_rng(12).standard_normal((2048, 2048)).astype(np.float32)  # 16 MiB
    t = svod.asarray(x)
    ks = svod.explain(svod.var(t)).kernels
    big = [k for k in ks if k.size >= x.size]
    assert len(big) == 1, ks
    assert plan_loops(big[0]).cols == 16
    np.testing.assert_allclose(svod.var(t).numpy(), x.var(), rtol=1e-6)
    svod.reset()
