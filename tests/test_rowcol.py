"""Row-column kernels (svod/lower/rowcol.py, svod/codegen/rowcol.py): reductions of one
2-D input over axis 1 and axis 0, and full reductions of those, in one kernel reading
the input once — against numpy (NaN, +-inf, -0.0, float and integer dtypes), across
thread counts bit for bit, and the plans they make."""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest

import svod
from svod import workloads
from svod.codegen.program import compile_kernel
from svod.codegen.schedule import rowcol_blocks
from svod.kernel import ALL, COL, ELEM, ROW, KernelError, RowColSpec, kernel_from_json, kernel_to_json
from svod.key import compact
from svod.lower.rowcol import fuse_rowcol
from svod.plan_greedy import plan_greedy


def _w6(t):
    return (svod.sum(t, axis=0), svod.sum(t, axis=1), svod.sum(t), svod.max(t, axis=0), svod.max(t, axis=1),
            svod.max(t))


def _w6_np(x):
    return (x.sum(axis=0), x.sum(axis=1), x.sum(), x.max(axis=0), x.max(axis=1), x.max())


def _plan(*outs):
    key, b = compact([t.uop for t in outs])
    return plan_greedy(key), b.arrays


def _check(outs, want, rtol=1e-5, atol=1e-5):
    got = svod.realize(*outs)
    for g, w in zip(got, want):
        g = g.numpy()
        assert g.shape == np.shape(w) and g.dtype == np.asarray(w).dtype, (g.shape, np.shape(w), g.dtype)
        if np.asarray(w).dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, equal_nan=True)
            np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
        else:
            np.testing.assert_array_equal(g, w)


# ----------------------------------------------------------------------------- plans


def test_w6_is_one_rowcol_kernel_reading_x_once():
    w = workloads.get("w6_reductions")
    arrs = w.make_inputs({"x": (64, 48)})
    outs = w.build(**w.tensors(arrs))
    plan, _ = _plan(*outs)
    assert [k.kind for k in plan.kernels] == ["rowcol"], plan
    (k,) = plan.kernels
    assert len(k.inputs) == 1 and k.inputs[0].slot == 0
    assert sorted(k.rowcol.spaces[o.node] for o in k.outputs) == [ROW, ROW, COL, COL, ALL, ALL]
    _check(outs, w.reference(**arrs), rtol=w.rtol, atol=w.atol)


def test_search_plan_of_w6_is_one_kernel():
    from svod import engine

    w = workloads.get("w6_reductions")
    arrs = w.make_inputs({"x": (40, 33)})
    outs = w.build(**w.tensors(arrs))
    _, exe = engine.plan_for(list(outs))
    assert [k.kind for k in exe.plan.kernels] == ["rowcol"], exe.plan


def test_switch_off_keeps_separate_kernels(monkeypatch):
    monkeypatch.setenv("SVOD_FUSE_ROWCOL", "0")
    t = svod.asarray(np.ones((32, 40), np.float32))
    plan, _ = _plan(*_w6(t))
    assert "rowcol" not in [k.kind for k in plan.kernels] and len(plan.kernels) > 1


def test_shared_prologue_computed_once_and_means():
    x = np.random.default_rng(0).standard_normal((50, 70)).astype(np.float32)
    t = svod.asarray(x)
    sq = t * t
    outs = (svod.sum(sq, axis=0), svod.sum(sq, axis=1), svod.mean(t, axis=0), svod.mean(t, axis=1))
    plan, _ = _plan(*outs)
    assert [k.kind for k in plan.kernels] == ["rowcol"], plan
    (k,) = plan.kernels
    assert sum(1 for n in k.nodes if n.op is svod.ir.Ops.MUL and k.rowcol.spaces[k.nodes.index(n)] == ELEM) == 1
    _check(outs, ((x * x).sum(0), (x * x).sum(1), x.mean(0), x.mean(1)))


def test_unrelated_or_two_pass_reductions_are_left_alone():
    x = np.random.default_rng(1).standard_normal((40, 30)).astype(np.float32)
    y = np.random.default_rng(2).standard_normal((40, 30)).astype(np.float32)
    tx, ty = svod.asarray(x), svod.asarray(y)
    plan, _ = _plan(svod.sum(tx, axis=0), svod.sum(ty, axis=1))  # different inputs: nothing shared
    assert "rowcol" not in [k.kind for k in plan.kernels]
    outs = (svod.var(tx, axis=0), svod.sum(tx, axis=1))  # a variance is two passes: not merged
    plan, _ = _plan(*outs)
    assert "rowcol" not in [k.kind for k in plan.kernels]
    _check(outs, (x.var(0), x.sum(1)))


def test_fuse_rowcol_is_identity_without_pairs():
    t = svod.asarray(np.ones((8, 8), np.float32))
    plan, _ = _plan(svod.sum(t, axis=0) + 1)
    assert fuse_rowcol(plan) is plan


# ----------------------------------------------------------------------------- values


@pytest.mark.parametrize("shape", [(2, 2), (3, 17), (17, 3), (16, 16), (37, 53), (300, 5), (5, 300), (1000, 37),
                                   (400, 20), (33, 7), (129, 129)])
def test_w6_shapes_against_numpy(shape):
    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
    _check(_w6(svod.asarray(x)), _w6_np(x), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.int8, np.uint8])
def test_dtypes_against_numpy(dtype):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((45, 67)) * 50).astype(dtype)
    t = svod.asarray(x)
    # sums in the input's dtype (numpy's default widens small integers: a cast before the
    # reduction, which the row-column kernel does not take)
    outs = (svod.sum(t, axis=0, dtype=dtype), svod.sum(t, axis=1, dtype=dtype), svod.min(t, axis=0),
            svod.max(t, axis=1), svod.min(t), svod.max(t))
    with np.errstate(over="ignore"):
        want = (x.sum(0, dtype=dtype), x.sum(1, dtype=dtype), x.min(0), x.max(1), x.min(), x.max())
    plan, _ = _plan(*outs)
    assert "rowcol" in [k.kind for k in plan.kernels], plan
    tol = 1e-12 if dtype == np.float64 else 1e-5
    _check(outs, want, rtol=tol, atol=tol * 100)


def test_nan_inf_and_signed_zeros_as_numpy():
    x = np.random.default_rng(4).standard_normal((40, 50)).astype(np.float32)
    x[3, 7] = np.nan  # row 3 and column 7: NaN max, min and sum
    x[10, :] = -np.inf  # a row of -inf: its max is -inf
    x[:, 20] = np.inf  # a column of +inf; row 10 then sums inf + -inf = NaN
    x[:, 30] = -0.0
    x[12, 31:] = 0.0
    x[12, :31] = -0.0
    t = svod.asarray(x)
    outs = (*_w6(t), svod.min(t, axis=0), svod.min(t, axis=1), svod.min(t))
    with np.errstate(invalid="ignore"):
        want = (*_w6_np(x), x.min(0), x.min(1), x.min())
    _check(outs, want, rtol=1e-5, atol=1e-4)
    got = svod.realize(svod.sum(t, axis=0), svod.max(t, axis=1))
    assert np.signbit(got[0].numpy()[30]) == np.signbit(x.sum(0)[30])  # -0.0 + -0.0 + ... stays -0.0


def test_nan_only_in_one_block_and_in_the_tail_columns():
    x = np.ones((500, 45), np.float32)  # several blocks; 45 = 2 vectors of 16 + a tail of 13
    x[400, 44] = np.nan
    t = svod.asarray(x)
    _check(_w6(t), _w6_np(x))


def test_integer_sums_wrap_as_numpy():
    x = np.full((70, 40), 2 ** 30, np.int32)
    t = svod.asarray(x)
    outs = (svod.sum(t, axis=0, dtype=np.int32), svod.sum(t, axis=1, dtype=np.int32))
    with np.errstate(over="ignore"):
        _check(outs, (x.sum(0, dtype=np.int32), x.sum(1, dtype=np.int32)))


def test_strided_and_broadcast_inputs():
    base = np.random.default_rng(6).standard_normal((60, 80)).astype(np.float32)
    x = base[::2, 1::3]  # strided rows and columns: the scalar form
    t = svod.asarray(base)[::2, 1::3]
    _check(_w6(t), _w6_np(x), atol=1e-4)
    xt = base.T  # transposed: column stride 80
    _check(_w6(svod.asarray(base).T), _w6_np(xt), atol=1e-4)


# ----------------------------------------------------------------------------- threads


def _run(kernel, arrays, threads):
    bufs = {i: np.ascontiguousarray(a).reshape(-1) for i, a in enumerate(arrays)}
    for o in kernel.outputs:
        bufs[o.slot] = np.full(int(np.prod(o.shape)), 7, o.dtype.np)
    compile_kernel(kernel).run(bufs, threads)
    return [bufs[o.slot].reshape(o.shape).copy() for o in kernel.outputs]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_bit_identical_across_thread_counts_and_launches(dtype):
    x = np.random.default_rng(7).standard_normal((2003, 301)).astype(dtype)
    t = svod.asarray(x)
    plan, arrays = _plan(*_w6(t), svod.min(t, axis=1), svod.sum(svod.sum(t, axis=1)))
    (k,) = [k for k in plan.kernels if k.kind == "rowcol"]
    assert rowcol_blocks(k)[1] > 3  # several blocks: the combine runs
    one = _run(k, arrays, 1)
    for threads in (2, 3, 2):  # the shared counter is reset by each launch's combining unit
        got = _run(k, arrays, threads)
        for p, q in zip(one, got):
            assert p.tobytes() == q.tobytes()


# ----------------------------------------------------------------------------- the kernel


def test_kernel_json_round_trip_and_key():
    t = svod.asarray(np.ones((20, 30), np.float32))
    plan, _ = _plan(*_w6(t))
    (k,) = plan.kernels
    back = kernel_from_json(kernel_to_json(k))
    assert back == k and back.key() == k.key()
    assert "rowcol(" in str(k)


def test_check_rejects_bad_spaces():
    t = svod.asarray(np.ones((20, 30), np.float32))
    plan, _ = _plan(*_w6(t))
    (k,) = plan.kernels
    sp = list(k.rowcol.spaces)
    red = next(i for i, n in enumerate(k.nodes) if n.op is svod.ir.Ops.REDUCE and sp[i] == ROW)
    sp[red] = ALL  # a reduction of elements into one value: not a row-column kernel's node
    with pytest.raises(KernelError, match="space"):
        dataclasses.replace(k, rowcol=RowColSpec(tuple(sp))).check()
    with pytest.raises(KernelError, match="one space per node"):
        dataclasses.replace(k, rowcol=RowColSpec(tuple(sp[:-1]))).check()


def test_env_switch_name_is_documented():
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(here, "docs", "codegen.md")) as fh:
        assert "SVOD_FUSE_ROWCOL" in fh.read()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_nan_and_inf_across_blocks_rows_and_columns(dtype):
    rng = np.random.default_rng(8)
    x = rng.standard_normal((700, 130)).astype(dtype)
    x[300, 5] = np.nan  # in the vector columns, a later block
    x[650, 64] = np.inf
    x[10, 100] = -np.inf
    x[:, 77] = np.nan  # a whole column
    x[123, :] = np.nan  # a whole row
    x[400, 129] = np.nan  # a tail column
    t = svod.asarray(x)
    outs = (svod.max(t, axis=0), svod.max(t, axis=1), svod.min(t, axis=0), svod.min(t, axis=1), svod.max(t),
            svod.min(t), svod.sum(t, axis=0))
    plan, _ = _plan(*outs)
    assert [k.kind for k in plan.kernels] == ["rowcol"], plan
    with np.errstate(invalid="ignore"):
        want = (x.max(0), x.max(1), x.min(0), x.min(1), x.max(), x.min(), x.sum(0))
    _check(outs, want, rtol=1e-5, atol=1e-3)


def test_interpreter_runs_rowcol_kernels_as_numpy():
    """The reference interpreter (svod.interp: SVOD_VALIDATE, and the fallback when a kernel
    does not compile) runs a row-column kernel by its spaces."""
    from svod.interp import run_plan

    x = np.random.default_rng(10).standard_normal((23, 41)).astype(np.float32)
    x[4, 9] = np.nan
    t = svod.asarray(x)
    plan, arrays = _plan(*_w6(t), svod.mean(t, axis=1))
    assert [k.kind for k in plan.kernels] == ["rowcol"]
    got = run_plan(plan, arrays)
    with np.errstate(invalid="ignore"):
        want = (*_w6_np(x), x.mean(1))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, equal_nan=True)


def test_two_inputs_broadcasts_keepdims_and_epilogues():
    rng = np.random.default_rng(11)
    x, y = (rng.standard_normal((70, 90)).astype(np.float32) for _ in range(2))
    v, w = rng.standard_normal(70).astype(np.float32), rng.standard_normal(90).astype(np.float32)
    cases = [  # fresh tensors per case: realized results are reused by later graphs
        (lambda tx, ty, tv, tw: ((tx + ty).sum(0), (tx - ty).max(1)), ((x + y).sum(0), (x - y).max(1))),
        (lambda tx, ty, tv, tw: ((tx * tw).sum(0), (tx * tw).sum(1)), ((x * w).sum(0), (x * w).sum(1))),
        (lambda tx, ty, tv, tw: ((tx + tv[:, None]).sum(0), (tx + tv[:, None]).min(1)),
         ((x + v[:, None]).sum(0), (x + v[:, None]).min(1))),
        (lambda tx, ty, tv, tw: (svod.sum(tx, axis=0, keepdims=True), svod.max(tx, axis=1, keepdims=True),
                                 svod.sum(tx, keepdims=True)),
         (x.sum(0, keepdims=True), x.max(1, keepdims=True), x.sum(keepdims=True))),
        (lambda tx, ty, tv, tw: (svod.mean(tx, axis=0), svod.mean(tx, axis=1), svod.mean(tx)),
         (x.mean(0), x.mean(1), x.mean())),
        (lambda tx, ty, tv, tw: (tx.sum(0) * 3 + 1, tx.max(1) - 2), (x.sum(0) * 3 + 1, x.max(1) - 2)),
    ]
    for c, (make, want) in enumerate(cases):
        outs = make(*(svod.asarray(a.copy()) for a in (x, y, v, w)))
        plan, _ = _plan(*outs)
        assert [k.kind for k in plan.kernels] == ["rowcol"], (c, str(plan))
        _check(outs, want, rtol=1e-5, atol=1e-4)
    tx = svod.asarray(x.copy())
    plan, _ = _plan(tx.T.sum(0), tx.T.max(1))  # a transposed input: scalar code, left to the two kernels
    assert "rowcol" not in [k.kind for k in plan.kernels]
