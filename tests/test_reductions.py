"""Reductions at bandwidth: column reduces over whole rows, split reductions (chunks of
the outer reduce axis combined by the unit that completes a group), multi-pass column
reduces (variance over axis 0). Differential against numpy, structure, determinism."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import svod
from svod.codegen.program import compile_kernel
from svod.codegen.schedule import SUM_BLOCK, plan_loops
from svod.key import compact
from svod.plan_greedy import plan_greedy
from tests.threads import run_threads

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _one_kernel(*outs):
    key, b = compact([t.uop for t in outs])
    plan = plan_greedy(key)
    assert len(plan.kernels) == 1, plan
    return plan.kernels[0], b.arrays


def _run(kernel, arrays, threads):
    bufs = {i: np.ascontiguousarray(a).reshape(-1) for i, a in enumerate(arrays)}
    for o in kernel.outputs:
        bufs[o.slot] = np.full(int(np.prod(o.shape)), 7, o.dtype.np)
    compile_kernel(kernel).run(bufs, threads)
    return [bufs[o.slot].reshape(o.shape).copy() for o in kernel.outputs]


# ----------------------------------------------------------------------------- structure


def test_column_reduce_streams_whole_rows_and_splits_rows():
    k, _ = _one_kernel(svod.sum(svod.asarray(np.ones((8192, 1000), np.float32)), axis=0))
    p = plan_loops(k)
    assert p.cols == 1000  # a unit reads whole rows: sequential memory
    assert p.split > 1 and p.units == p.split  # rows cut into chunks for the threads
    assert p.chunk_len % SUM_BLOCK == 0  # a chunk holds whole float-sum blocks
    wide, _ = _one_kernel(svod.sum(svod.asarray(np.ones((300, 70000), np.float32)), axis=0))
    pw = plan_loops(wide)
    assert pw.cols % 64 == 0 and pw.cols < 70000  # tiles too big for whole rows: blocks


def test_full_reduction_is_split_into_chunks():
    k, _ = _one_kernel(svod.sum(svod.asarray(np.ones(1 << 22, np.float32))))
    p = plan_loops(k)
    assert p.split >= 2 and p.units == p.split and p.chunk_len % SUM_BLOCK == 0
    few, _ = _one_kernel(svod.max(svod.asarray(np.ones((3, 1 << 20), np.float32)), axis=1))
    pf = plan_loops(few)
    assert pf.split >= 2 and pf.units == 3 * pf.split
    small, _ = _one_kernel(svod.sum(svod.asarray(np.ones(1000, np.float32))))
    assert plan_loops(small).split == 0 and plan_loops(small).units == 1
    many, _ = _one_kernel(svod.sum(svod.asarray(np.ones((4096, 1024), np.float32)), axis=1))
    assert plan_loops(many).split == 0  # enough rows: rows are the units


def test_variance_over_axis0_reads_its_input_once_in_chunks():
    from svod.codegen.schedule import chan_variance

    for fn in (lambda t: svod.var(t, axis=0), lambda t: svod.std(t, axis=0, correction=1)):
        k, _ = _one_kernel(fn(svod.asarray(np.ones((4096, 4096), np.float32))))
        p = plan_loops(k)
        assert k.passes == 2 and chan_variance(k) is not None
        assert p.cols == 4096 and p.split > 1 and p.units == p.split  # whole rows, rows cut into chunks


def test_other_two_pass_column_reduces_cut_columns_not_rows():
    from svod.codegen.schedule import chan_variance

    x = np.random.default_rng(8).standard_normal((3000, 2048)).astype(np.float32)
    t = svod.asarray(x)
    got = svod.max(t - svod.mean(t, axis=0), axis=0)
    k, arrays = _one_kernel(got)
    p = plan_loops(k)
    assert k.passes == 2 and chan_variance(k) is None
    assert p.cols > 0 and p.split == 0 and p.units >= 8
    want = (x - x.mean(axis=0)).max(axis=0)
    for threads in (1, 2):
        (g,) = _run(k, arrays, threads)
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_chunked_variance_accuracy_against_numpy(dtype):
    rng = np.random.default_rng(12)
    # a large common offset and a small spread: E[x^2] - E[x]^2 would lose every digit
    x = (1e4 + rng.standard_normal((20000, 130))).astype(dtype)
    x[5, 3] = np.nan
    x[7, 4] = np.inf
    t = svod.asarray(x)
    exact = x.astype(np.float64).var(axis=0)
    for fn, ref in ((lambda a: svod.var(a, axis=0), lambda a: a.var(axis=0)),
                    (lambda a: svod.std(a, axis=0, correction=1), lambda a: a.std(axis=0, ddof=1))):
        k, arrays = _one_kernel(fn(t))
        assert plan_loops(k).split > 1
        want64 = ref(x.astype(np.float64))
        for threads in (1, 2):
            (g,) = _run(k, arrays, threads)
            assert g.dtype == dtype
            np.testing.assert_array_equal(np.isnan(g), np.isnan(want64))
            ok = ~np.isnan(want64)
            err, np_err = np.abs(g[ok] - want64[ok]), np.abs(ref(x)[ok] - want64[ok])
            # per column either may be luckier; over the columns svod's error is no larger
            if dtype == np.float64:  # numpy's float64 result is the reference itself
                assert err.max() <= 1e-11 * float(want64[ok].max()), err.max()
                continue
            slack = 4 * np.finfo(dtype).eps * float(want64[ok].max())
            assert err.max() <= np_err.max() + slack, (err.max(), np_err.max())
            assert np.sqrt(np.mean(err ** 2)) <= np.sqrt(np.mean(np_err ** 2)) + slack
    assert np.isnan(exact[3]) and np.isnan(exact[4])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_one_read_variance_on_drifting_columns_outliers_and_constants(dtype):
    """The shifted sub-chunks and compensated mean of `ColumnLowering._chan_unit`:
    columns that drift far from the first rows' mean, outliers in the first rows and in
    a late one, constant columns (a variance of 0: never negative, a std never NaN),
    squares that overflow (+inf, as numpy), +-inf (NaN, as numpy). Per column no less
    accurate than numpy's two-pass variance (against an 80-bit reference) within 4 ulps;
    bit-identical for 1 and 2 threads."""
    n = 41000  # > 2 MiB of float32: the rows split into chunks, each of many sub-chunks
    rng = np.random.default_rng(21)
    i = np.arange(n, dtype=np.float64)
    cols = [
        i,  # a ramp: every sub-chunk's mean lies far from the running mean
        1e5 + 1e-3 * i,  # a slow drift on a large offset
        -i ** 2 / n,  # an accelerating drift
        np.where(i < 40, 1e6, 0.0) + rng.standard_normal(n),  # the first rows far out
        np.where(i == n - 3, -1e7, 1.0) + 1e-3 * rng.standard_normal(n),  # one late outlier
        np.sin(i / 50) * 1e4 + 5e4,  # oscillating
        rng.standard_normal(n) + 1e4,
        1e4 + 1e-2 * i + rng.standard_normal(n),
        np.full(n, 3.3), np.full(n, -7e15),  # constants (columns 8, 9)
        rng.standard_normal(n) * (1e18 if dtype == np.float32 else 1e152),  # squares overflow (10)
        rng.standard_normal(n), rng.standard_normal(n),  # +inf (11), +inf and -inf (12)
    ]
    x = np.stack(cols, axis=1).astype(dtype)
    x[4, 11] = np.inf
    x[n - 1, 12], x[7, 12] = -np.inf, np.inf
    t = svod.asarray(x)
    xl = x[:, :8].astype(np.longdouble)
    exact = ((xl - xl.mean(axis=0)) ** 2).mean(axis=0)
    eps = np.finfo(dtype).eps
    with np.errstate(all="ignore"):
        npv = x.var(axis=0)
    for fn, post in ((lambda a: svod.var(a, axis=0), lambda v: v), (lambda a: svod.std(a, axis=0), np.sqrt)):
        k, arrays = _one_kernel(fn(t))
        assert plan_loops(k).split > 1
        outs = [_run(k, arrays, threads)[0] for threads in (1, 2)]
        assert outs[0].tobytes() == outs[1].tobytes()
        g = outs[0]
        err = np.abs(g[:8] - post(exact)) / post(exact)
        np_err = np.abs(post(npv[:8]) - post(exact)) / post(exact)
        assert np.all(err <= np.maximum(np_err, 4 * eps)), (err, np_err)
        assert np.all((g[8:10] >= 0) & (g[8:10] <= post(1e-6 * x[0, 8:10].astype(np.float64) ** 2)))
        assert np.isposinf(g[10]) and np.isposinf(npv[10])
        assert np.isnan(g[11]) and np.isnan(g[12]) and np.isnan(npv[11]) and np.isnan(npv[12])


def test_split_kernel_ir_combines_with_an_atomic_counter():
    k, _ = _one_kernel(svod.sum(svod.asarray(np.ones(1 << 22, np.float32))))
    ir = compile_kernel(k).ir
    assert "atomicrmw add" in ir and ".split.count" in ir and "calloc" in ir


# ----------------------------------------------------------------------------- numpy


CASES = [
    ((8192, 1000), 0, "sum"), ((8192, 1000), 0, "max"), ((8192, 1000), 0, "min"), ((8192, 1000), 0, "mean"),
    ((4099, 257), 0, "sum"), ((4099, 3, 129), (0, 1), "sum"), ((3000, 77), 0, "prod"),
    (((1 << 21) + 17,), None, "sum"), (((1 << 21) + 17,), None, "max"), (((1 << 21) + 17,), None, "mean"),
    ((3, 700001), 1, "sum"), ((3, 700001), 1, "min"), ((5, 300, 997), None, "sum"),
    ((4097, 1031), 0, "var"), ((4097, 1031), 0, "std"), ((600, 7, 131), 0, "var"), ((600, 7, 131), (0, 1), "var"),
]


@pytest.mark.parametrize("shape,axis,op", CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_reductions_match_numpy(shape, axis, op, dtype):
    rng = np.random.default_rng(len(shape) * 7 + len(op))
    x = rng.standard_normal(shape).astype(dtype)
    if op == "prod":
        x = (1 + x * 1e-3).astype(dtype)
    if op in ("var", "std"):
        x += dtype(3.0)
    t = svod.asarray(x)
    got = getattr(svod, op)(t, axis=axis)
    k, arrays = _one_kernel(got)
    want = getattr(np, op)(x.astype(np.float64), axis=axis)
    tol = 2e-5 if dtype == np.float32 else 1e-12
    for threads in (1, 2):
        (g,) = _run(k, arrays, threads)
        assert g.dtype == dtype
        np.testing.assert_allclose(g.reshape(np.shape(want)), want, rtol=tol, atol=tol * max(1.0, np.sqrt(x.size)))


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.bool_])
def test_integer_and_bool_split_reductions(dtype):
    rng = np.random.default_rng(3)
    x = rng.integers(0, 3, size=(6000, 515)).astype(dtype)
    t = svod.asarray(x)
    for fn, ref in ((lambda a: svod.sum(a, axis=0), lambda a: a.sum(axis=0)),
                    (lambda a: svod.max(a), lambda a: a.max()),
                    (lambda a: svod.sum(a), lambda a: a.sum()),
                    (lambda a: svod.any(a, axis=0), lambda a: a.any(axis=0)),
                    (lambda a: svod.all(a), lambda a: a.all())):
        k, arrays = _one_kernel(fn(t))
        want = np.asarray(ref(x))
        for threads in (1, 2):
            (g,) = _run(k, arrays, threads)
            assert g.dtype == want.dtype
            np.testing.assert_array_equal(g.reshape(want.shape), want)


def test_nan_inf_and_signed_zero_in_one_chunk():
    x = np.zeros((8192, 300), np.float32)
    x[8000, 5] = np.nan  # in the last chunk only
    x[10, 6], x[9000 % 8192, 6] = np.inf, -np.inf
    x[:, 7] = -0.0
    x[:, 8] = np.inf
    t = svod.asarray(x)
    for fn, ref in ((lambda a: svod.sum(a, axis=0), lambda a: a.sum(axis=0)),
                    (lambda a: svod.max(a, axis=0), lambda a: a.max(axis=0)),
                    (lambda a: svod.min(a, axis=0), lambda a: a.min(axis=0))):
        k, arrays = _one_kernel(fn(t))
        want = ref(x)
        for threads in (1, 2):
            (g,) = _run(k, arrays, threads)
            np.testing.assert_array_equal(g, want)
            assert np.array_equal(np.signbit(g), np.signbit(want))
    flat = x.reshape(-1)
    for fn, ref in ((svod.sum, np.sum), (svod.max, np.max), (svod.min, np.min)):
        k, arrays = _one_kernel(fn(svod.asarray(flat)))
        assert plan_loops(k).split > 1
        (g,) = _run(k, arrays, 2)
        assert np.isnan(g) and np.isnan(ref(flat))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_row_max_and_min_beside_a_blocked_sum(dtype):
    """A float max/min in the same row pass as a blocked float sum restarts every
    SUM_BLOCK (`Reduction.per_block`) and meets the row's value after it: NaN in any
    block, +-inf, rows of -0.0, a partial last block, as numpy; bit-identical for 1 and
    2 threads, and the same bits as the max/min computed alone."""
    rng = np.random.default_rng(17)
    x = rng.standard_normal((64, 3 * SUM_BLOCK + 77)).astype(dtype)
    x[1, 5] = np.nan  # first block
    x[2, 2 * SUM_BLOCK + 3] = np.nan  # a later block
    x[3, -1] = np.nan  # the partial last block
    x[4, :] = -0.0
    x[5, SUM_BLOCK + 1] = np.inf
    x[6, 7] = -np.inf
    x[7, :] = -np.inf
    x[8, -2] = 1e30
    t = svod.asarray(x)
    k, arrays = _one_kernel(svod.sum(t, axis=1), svod.max(t, axis=1), svod.min(t, axis=1))
    assert plan_loops(k).cols == 0 and not plan_loops(k).split
    one, two = _run(k, arrays, 1), _run(k, arrays, 2)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(one, two))
    s, mx, mn = one
    np.testing.assert_array_equal(mx, x.max(axis=1))
    np.testing.assert_array_equal(mn, x.min(axis=1))
    assert np.signbit(mx[4]) and np.signbit(mn[4])
    with np.errstate(invalid="ignore"):
        np.testing.assert_allclose(s, x.astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-3)
    for fn, got in ((svod.max, mx), (svod.min, mn)):
        ka, aa = _one_kernel(fn(t, axis=1))
        assert _run(ka, aa, 1)[0].tobytes() == got.tobytes()


def test_float32_split_sum_at_least_as_accurate_as_numpy():
    rng = np.random.default_rng(11)
    x = (rng.random(1 << 23) + 1000.0).astype(np.float32)  # a common offset: naive sums drift
    k, arrays = _one_kernel(svod.sum(svod.asarray(x)))
    assert plan_loops(k).split > 1
    exact = x.astype(np.float64).sum()
    for threads in (1, 2):
        (g,) = _run(k, arrays, threads)
        assert abs(float(g) - exact) <= abs(float(x.sum()) - exact) + 1e-7 * exact
    y = (rng.random((16384, 64)) + 1000.0).astype(np.float32)
    k, arrays = _one_kernel(svod.sum(svod.asarray(y), axis=0))
    (g,) = _run(k, arrays, 2)
    exact = y.astype(np.float64).sum(axis=0)
    assert np.all(np.abs(g - exact) <= np.abs(y.sum(axis=0) - exact) + 1e-7 * exact)


# ----------------------------------------------------------------------------- determinism


def test_split_reductions_bit_identical_across_threads_and_launches():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((8192, 520)).astype(np.float32)
    t = svod.asarray(x)
    for outs in ((svod.sum(t, axis=0), svod.max(t, axis=0)), (svod.sum(t),), (svod.mean(t, axis=1)[None],)):
        k, arrays = _one_kernel(*outs) if len(outs) > 1 else _one_kernel(outs[0])
        one = _run(k, arrays, 1)
        for _ in range(3):  # the shared counters are reset by each launch's combining unit
            two = _run(k, arrays, 2)
            for p, q in zip(one, two):
                assert p.tobytes() == q.tobytes()


def test_split_results_equal_for_svod_threads_1_2_and_3_in_subprocesses():
    code = textwrap.dedent("""
        import numpy as np, svod
        x = np.random.default_rng(9).standard_normal((6000, 700)).astype(np.float32)
        t = svod.asarray(x)
        outs = svod.realize(svod.sum(t, axis=0), svod.sum(t), svod.max(t), svod.var(t, axis=0),
                            svod.sum(t.reshape(-1)[:4000001]), svod.std(t.astype(np.float64), axis=0))
        print("".join(o.numpy().tobytes().hex() for o in outs))
    """)
    got = []
    for n in ("1", "2", "3"):  # 3: the units do not divide evenly among the threads
        env = {**os.environ, "SVOD_THREADS": n, "PYTHONPATH": ROOT}
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300,
                           cwd=ROOT)
        assert r.returncode == 0, r.stderr
        got.append(r.stdout.strip())
    assert got[0] and got[0] == got[1] == got[2]


def test_split_kernel_from_several_python_threads_at_once():
    rng = np.random.default_rng(2)
    x = rng.standard_normal(1 << 21).astype(np.float32)
    k, arrays = _one_kernel(svod.sum(svod.asarray(x)))
    want = _run(k, arrays, 1)[0]
    errors = []

    def work(threads):
        for _ in range(5):
            g = _run(k, arrays, threads)[0]
            if g.tobytes() != want.tobytes():
                errors.append((threads, g, want))

    run_threads(work, [(1,), (2,), (1,), (2,)])
    assert not errors


def test_column_reduce_code_reads_whole_vectors_rows_at_a_time():
    from svod.codegen.jit import host_target_info

    k, _ = _one_kernel(svod.sum(svod.asarray(np.ones((4096, 1024), np.float32)), axis=0))
    prog = compile_kernel(k)
    reg = {512: "zmm", 256: "ymm"}.get(host_target_info()["vector_bits"], "xmm")
    asm = prog.asm
    assert "vaddps" in asm and reg in asm  # the column loop is vectorised at the widest width
    from svod.codegen.lower import lower_kernel

    ir = lower_kernel(k).ir  # the unoptimised IR keeps the loops' names
    import re

    assert re.search(r"rq\d+\.body", ir)  # the ROW_UNROLL loop over groups of rows
    assert "ctiles" in ir  # one tile block (skewed tiles)


def test_split_reductions_over_padded_concatenated_and_flipped_views():
    rng = np.random.default_rng(6)
    a = rng.standard_normal((3000, 300)).astype(np.float32)
    b = rng.standard_normal((2000, 300)).astype(np.float32)
    ta, tb = svod.asarray(a), svod.asarray(b)
    both = np.concatenate([a, b])
    padded = np.pad(a, ((700, 1300), (0, 0)))
    for got, want in ((svod.sum(svod.concat([ta, tb]), axis=0), both.sum(axis=0)),
                      (svod.max(svod.concat([ta, tb])), both.max()),
                      (svod.sum(svod.concat([ta, tb]).reshape(-1)), both.sum()),
                      (svod.sum(svod.pad(ta, ((700, 1300), (0, 0))), axis=0), padded.sum(axis=0)),
                      (svod.sum(svod.pad(ta, ((700, 1300), (0, 0)))), padded.sum()),
                      (svod.sum(svod.flip(ta, axis=0), axis=0), a[::-1].sum(axis=0)),
                      (svod.var(svod.concat([ta, tb]), axis=0), both.var(axis=0)),  # masked rows, one read
                      (svod.var(svod.pad(ta, ((700, 1300), (0, 0))), axis=0), padded.var(axis=0)),
                      (svod.std(svod.flip(ta, axis=0)[::2, 5:290], axis=0), a[::-2, 5:290].std(axis=0))):
        key, bnd = compact([got.uop])
        plan = plan_greedy(key)
        for threads in (1, 2):
            bufs = {i: np.ascontiguousarray(x).reshape(-1) for i, x in enumerate(bnd.arrays)}
            for k in plan.kernels:
                for o in k.outputs:
                    bufs.setdefault(o.slot, np.empty(int(np.prod(o.shape)), o.dtype.np))
                compile_kernel(k).run(bufs, threads)
            s, sh = plan.outputs[0]
            np.testing.assert_allclose(bufs[s].reshape(sh), want, rtol=2e-5, atol=2e-3)


def test_empty_and_tiny_reductions_are_not_split():
    for shape, axis in (((0, 5), 0), ((5, 0), 0), ((70000, 0), 0), ((0,), None), ((1, 1 << 20), 0)):
        x = np.ones(shape, np.float32)
        got = svod.sum(svod.asarray(x), axis=axis).numpy()
        np.testing.assert_array_equal(got, x.sum(axis=axis))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_child_resets_half_counted_split_counters():
    import ctypes

    x = np.random.default_rng(13).standard_normal(1 << 21).astype(np.float32)
    k, arrays = _one_kernel(svod.sum(svod.asarray(x)))
    want = _run(k, arrays, 1)[0]
    prog = compile_kernel(k)
    addr, nbytes = prog._split_counts
    assert nbytes == 8
    ctypes.c_int64.from_address(addr).value = 1  # as if a launch in another thread had counted one unit
    pid = os.fork()
    if pid == 0:  # the child: its first pool launch must combine at the right unit
        ok = False
        try:
            ok = _run(k, arrays, 2)[0].tobytes() == want.tobytes()
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    ctypes.c_int64.from_address(addr).value = 0  # the parent's own launch never ran: undo the simulation
    assert os.WEXITSTATUS(status) == 0
    assert _run(k, arrays, 2)[0].tobytes() == want.tobytes()


def test_interpreter_runs_a_reduce_kernel_whose_epilogue_reads_a_per_row_value():
    """svod.interp.run_plan (the fallback of a kernel that fails to compile, and
    SVOD_VALIDATE's reference) on `sum(x, 1) + sum(y, (1, 2))`: the second kernel's
    epilogue loads the first kernel's row sums with stride 0 along its reduced axes."""
    from search import plan_search
    from svod.executable import KernelPlan
    from svod.interp import run_plan
    from svod.key import compact

    rng = np.random.default_rng(3)
    x, y = rng.random((8, 5)).astype(np.float32), rng.random((8, 3, 4)).astype(np.float32)
    out = svod.sum(svod.asarray(x), axis=1) + svod.sum(svod.asarray(y), axis=(1, 2))
    key, b = compact([out.uop])
    plan = plan_search(key).plan
    got = run_plan(plan, b.arrays)[0]
    np.testing.assert_allclose(got, x.sum(1) + y.sum((1, 2)), rtol=1e-6)
    np.testing.assert_allclose(got, KernelPlan(key, plan).run(b.arrays)[0], rtol=1e-6)
