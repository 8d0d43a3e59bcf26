"""Codegen: every kernel compiled by svod.codegen equals the kernel interpreter.

Differential tests (compiled Program vs `interp.run_kernel`/`run_plan`) over the golden
kernels, hypothesis programs planned by the greedy planner, every dtype, special values
(NaN, inf, -0.0, division by zero, INT_MIN // -1), odd shapes and views; plus the
structure of the code (zmm registers), the object cache across processes and the
fallback on a compile failure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import svod
from svod.codegen import program as program_mod
from svod.codegen.program import compile_kernel
from svod.dtype import float32, int64
from svod.errors import SvodWarning
from svod.interp import run_kernel, run_plan
from svod.ir import Ops
from svod.kernel import ACC, LOAD, Kernel, KInput, KNode, KOutput, MatmulSpec
from svod.kernel_examples import examples, matmul_bias_gelu_kernel
from svod.key import compact
from svod.plan_greedy import plan_greedy
from svod.view import View, ViewChain
from tests.programs import programs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _close(got: np.ndarray, want: np.ndarray, what: str = "") -> None:
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, want.dtype, got.shape, want.shape)
    if want.dtype.kind == "f":
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"NaN positions {what}")
        tol = 2e-5 if want.dtype == np.float32 else 1e-12
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol, equal_nan=True, err_msg=what)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


def run_compiled(plan, arrays, threads: int = 1) -> list[np.ndarray]:
    """Run a Plan with compiled Programs (outputs allocated here, as the engine does)."""
    bufs: dict[int, np.ndarray] = {i: np.ascontiguousarray(a).reshape(-1) for i, a in enumerate(arrays)}
    for k in plan.kernels:
        for o in k.outputs:
            bufs.setdefault(o.slot, np.empty(int(np.prod(o.shape)), o.dtype.np))
        compile_kernel(k).run(bufs, threads)
    return [bufs[s].reshape(sh).copy() for s, sh in plan.outputs]


def check(*outs, threads: int = 1):
    """Plan `outs` greedily; every kernel compiled natively and equal to the interpreter."""
    key, b = compact([t.uop for t in outs])
    plan = plan_greedy(key)
    plan.check()
    before = svod.stats()["interpreter_fallbacks"]
    got = run_compiled(plan, b.arrays, threads)
    assert svod.stats()["interpreter_fallbacks"] == before, "a kernel fell back to the interpreter"
    want = run_plan(plan, b.arrays)
    for i, (g, w) in enumerate(zip(got, want)):
        _close(g, w, f"output {i}\n{plan}")
    return plan, got


def _rng(seed=0):
    return np.random.default_rng(seed)


# ----------------------------------------------------------------------------- golden kernels


@pytest.mark.parametrize("rows,cols", [(6, 10), (1, 1), (3, 37), (5, 300), (2, 1)])
@pytest.mark.parametrize("idx", range(5))
def test_golden_kernels(idx, rows, cols):
    name, k, ins, _ = examples(seed=idx, rows=rows, cols=cols)[idx]
    bufs = {j: np.ascontiguousarray(a).reshape(-1) for j, a in enumerate(ins)}
    ref = dict(bufs)
    run_kernel(k, ref)
    prog = compile_kernel(k)
    assert prog.kind == "native", prog
    prog.run(bufs)
    for o in k.outputs:
        _close(bufs[o.slot], ref[o.slot], name)


def test_matmul_kernel_bigger_than_tiles():
    rng = _rng(1)
    m, kk, n = 37, 70, 300  # more rows than MM_ROWS, more columns than one tile
    k = matmul_bias_gelu_kernel(m, kk, n)
    a, b, bias = (rng.standard_normal(s).astype(np.float32) for s in ((m, kk), (kk, n), (n,)))
    bufs = {0: a.reshape(-1), 1: b.reshape(-1), 2: bias}
    ref = dict(bufs)
    run_kernel(k, ref)
    compile_kernel(k).run(bufs, threads=2)
    np.testing.assert_allclose(bufs[3], ref[3], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dt", ["float32", "float64", "int32", "int64", "bool"])
def test_batched_matmul_kernel_transposed_operand(dt):
    rng = _rng(2)
    d = svod.dtype.dtype(dt)
    bt = ViewChain((View.contiguous((2, 7, 3)).permute((0, 2, 1)),))  # B stored (batch, n, k)
    nodes = (KNode(ACC, d), KNode(LOAD, d, (), 2), KNode(Ops.ADD, d, (0, 1)))
    k = Kernel("bmm", (2, 5, 7), (KInput(0, d, ViewChain.of((2, 5, 3))), KInput(1, d, bt),
                                  KInput(2, d, ViewChain((View.contiguous((1, 1, 7)).expand((2, 5, 7)),)))),
               nodes, (KOutput(3, 2, d, (2, 5, 7)),), (), MatmulSpec(0, 1, 5, 7, 3))
    k.check()
    ins = [(rng.standard_normal(s) * 3).astype(d.np) for s in ((2, 5, 3), (2, 7, 3), (7,))]
    bufs = {j: a.reshape(-1) for j, a in enumerate(ins)}
    ref = dict(bufs)
    run_kernel(k, ref)
    compile_kernel(k).run(bufs)
    _close(bufs[3], ref[3], dt)


# ----------------------------------------------------------------------------- planned programs


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_hypothesis_programs(prog):
    inputs, build, desc = prog
    outs = build([svod.asarray(a) for a in inputs])
    check(*outs)


@pytest.mark.parametrize("n", [0, 1, 15, 16, 17, 4096 * 3 + 5])
def test_elementwise_sizes(n):
    x = svod.asarray(_rng().standard_normal(n).astype(np.float32))
    check(svod.tanh(x) * 2.0 + svod.exp(-x))


def test_views_strided_flipped_padded_broadcast():
    rng = _rng(3)
    a = svod.asarray(rng.standard_normal((6, 9)).astype(np.float32))
    b = svod.asarray(rng.standard_normal((9,)).astype(np.float32))
    c = svod.asarray(rng.standard_normal((9, 6)).astype(np.float32))
    check(a + b, a * c.T, svod.flip(a, axis=1) - a[::-1, ::2].sum(), a[1:5:2, ::3] * 2.0)
    check(svod.pad(a, ((1, 2), (3, 0))) + 1.0, svod.pad(a, ((0, 1), (0, 1)), constant_values=-2.5) * 3.0)
    check(svod.concat([a, c.T], axis=0) * 2.0)
    # reshape after permute: a multi-view chain (unravel via div/mod)
    check(svod.reshape(c.T, (3, 18)) + 1.0, svod.reshape(svod.flip(c.T, axis=0), (54,)) * 2.0)


def test_zero_size_and_scalars():
    e = svod.asarray(np.zeros((0, 4), np.float32))
    check(e * 2.0, svod.sum(e, axis=0), svod.sum(e, axis=1))
    s = svod.asarray(np.float32(3.5))
    check(s * 2.0 + 1.0)
    one = svod.asarray(np.ones((1, 1), np.float32))
    check(svod.exp(one), svod.sum(one, axis=1))


SPECIAL = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1.0, -1.0, 0.5, 1.5, 2.5, -2.5, 3e9, -3e9, 1e20, 7.0, -7.0,
                    np.finfo(np.float32).max, np.finfo(np.float32).tiny, 2.0**31, -(2.0**31), 2.0**63], np.float64)


@pytest.mark.parametrize("fdt", [np.float32, np.float64])
def test_float_special_values(fdt):
    x = svod.asarray(SPECIAL.astype(fdt))
    y = svod.asarray(np.roll(SPECIAL, 5).astype(fdt))
    check(svod.maximum(x, y), svod.minimum(x, y), svod.maximum(x, 0.0), svod.sign(x), svod.round(x),
          svod.floor(x), svod.ceil(x), svod.abs(x), -x, svod.isnan(x), svod.isinf(x), x < y, x <= y, svod.equal(x, y),
          svod.not_equal(x, y))
    check(svod.exp(x), svod.log(x), svod.sqrt(x), svod.tanh(x), svod.erf(x))
    # NOTE: scalar vecmath sin/cos are exact only for |x| < 4e9 (see docs/codegen.md, known gaps)
    small = svod.asarray(np.where(np.abs(SPECIAL) < 4e9, SPECIAL, 1.0).astype(fdt))
    check(svod.sin(small), svod.cos(small))
    check(svod.floor_divide(x, y), svod.remainder(x, y), x / y, svod.pow(x, y))
    check(*(svod.astype(x, d) for d in (svod.int32, svod.int64, svod.bool, svod.float32, svod.float64)))


INT_EDGE = [0, 1, -1, 2, -2, 7, -7, 3, 100, -100]


@pytest.mark.parametrize("idt", [np.int32, np.int64])
def test_integer_ops(idt):
    info = np.iinfo(idt)
    av = np.array(INT_EDGE + [info.min, info.max, info.min, 5, -5], idt)
    bv = np.array([3, 0, -1, 0, 5, -2, 2, -4, 7, 9, -1, 2, 0, 0, -3], idt)
    a, b = svod.asarray(av), svod.asarray(bv)
    check(svod.floor_divide(a, b), svod.remainder(a, b), a + b, a - b, a * b, svod.maximum(a, b), svod.minimum(a, b))
    check(a < b, a <= b, svod.equal(a, b), svod.not_equal(a, b), svod.bitwise_and(a, b), svod.bitwise_or(a, b),
          svod.bitwise_xor(a, b), svod.bitwise_invert(a), svod.abs(a), -a, svod.sign(a))
    e = svod.asarray(np.array([0, 1, 2, 3, -1, -2, 5, 62, -3, 4, 1, 2, 0, 3, 31], idt))
    check(svod.pow(a, e))
    check(*(svod.astype(a, d) for d in (svod.int32, svod.int64, svod.bool, svod.float32, svod.float64)))


def test_int_min_floor_divide_minus_one():
    for idt in (np.int32, np.int64):
        a = svod.asarray(np.array([np.iinfo(idt).min] * 3, idt))
        b = svod.asarray(np.array([-1, 0, 1], idt))
        _, (q, r) = check(svod.floor_divide(a, b), svod.remainder(a, b))
        assert q.tolist() == [np.iinfo(idt).min, 0, np.iinfo(idt).min] and r.tolist() == [0, 0, 0]


def test_bool_ops():
    rng = _rng(4)
    a = svod.asarray(rng.random(37) < 0.5)
    b = svod.asarray(rng.random(37) < 0.5)
    check(svod.logical_and(a, b), svod.logical_or(a, b), svod.logical_xor(a, b), svod.logical_not(a),
          svod.bitwise_and(a, b), a == b, a != b, svod.astype(a, svod.float32), svod.astype(a, svod.int32))
    m = svod.asarray(rng.random((5, 8)) < 0.3)
    check(svod.any(m, axis=1), svod.all(m, axis=0), svod.argmax(m, axis=1))


@pytest.mark.parametrize("dt", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("axis", [0, 1, None, (0, 2)])
def test_reductions(dt, axis):
    rng = _rng(5)
    x = svod.asarray((rng.standard_normal((4, 33, 5)) * 10).astype(dt))
    outs = [svod.sum(x, axis=axis), svod.max(x, axis=axis), svod.min(x, axis=axis),
            svod.prod(svod.astype(x, svod.float64) * 0.01 + 1.0, axis=axis)]
    if axis is not None and not isinstance(axis, tuple):
        outs += [svod.argmax(x, axis=axis), svod.argmin(x, axis=axis)]
    check(*outs)


def test_argmax_ties_and_nan():
    x = np.array([[1.0, 3.0, 3.0, 0.0], [np.nan, 1.0, np.nan, 5.0], [2.0, 2.0, 2.0, 2.0], [-np.inf] * 4,
                  [1.0, np.inf, np.nan, np.inf]], np.float32)
    t = svod.asarray(x)
    _, (amax, amin) = check(svod.argmax(t, axis=1), svod.argmin(t, axis=1))
    assert amax.tolist() == [1, 0, 0, 0, 2] and amin.tolist() == [3, 0, 0, 0, 2]
    check(svod.max(t, axis=1), svod.min(t, axis=1))


def test_rowwise_kernels_odd_sizes():
    rng = _rng(6)
    for rows, cols in ((3, 1), (5, 257), (2, 1000), (7, 31)):
        x = svod.asarray(rng.standard_normal((rows, cols)).astype(np.float32))
        w = svod.asarray(rng.standard_normal(cols).astype(np.float32))
        check(svod.nn.softmax(x, axis=-1), svod.nn.layer_norm(x, (cols,), w, w))
        check(svod.mean(x, axis=1), svod.std(x, axis=1), svod.nn.softmax(x, axis=0))


def test_float_sum_accuracy_at_least_pairwise():
    rng = _rng(7)
    x = (rng.random((2, 1 << 20)) + 1000.0).astype(np.float32)  # large common offset: naive sums drift
    _, (got,) = check(svod.sum(svod.asarray(x), axis=1))
    exact = x.astype(np.float64).sum(axis=1)
    assert np.all(np.abs(got - exact) <= np.abs(x.sum(axis=1) - exact) + 1e-6 * exact)


def test_threads_bit_identical():
    rng = _rng(8)
    x = svod.asarray(rng.standard_normal((64, 3000)).astype(np.float32))
    outs = (svod.nn.softmax(x, axis=-1), svod.sum(x, axis=1), svod.exp(x) * 2.0)
    key, b = compact([t.uop for t in outs])
    plan = plan_greedy(key)
    one = run_compiled(plan, b.arrays, threads=1)
    two = run_compiled(plan, b.arrays, threads=2)
    for p, q in zip(one, two):
        assert np.array_equal(p, q, equal_nan=True)


# ----------------------------------------------------------------------------- structure


def test_elementwise_asm_uses_wide_vectors():
    from svod.codegen.jit import host_target_info

    x = svod.asarray(np.ones((64, 64), np.float32))
    key, _ = compact([(svod.maximum(x * 2.0 + 1.0, 0.0) * 0.5).uop])
    prog = compile_kernel(plan_greedy(key).kernels[0])
    bits = host_target_info()["vector_bits"]
    reg = {512: "zmm", 256: "ymm"}.get(bits, "xmm")
    assert reg in prog.asm
    assert prog.units >= 1 and "define" in prog.ir


def test_contiguous_2d_kernel_is_one_loop():
    from svod.codegen.schedule import plan_loops

    x = svod.asarray(np.ones((256, 512), np.float32))
    key, _ = compact([(x * 2.0).uop])
    plan = plan_loops(plan_greedy(key).kernels[0])
    assert len(plan.axes) == 1 and plan.axes[0].size == 256 * 512 and plan.chunk


def test_library_step_program():
    rng = _rng(9)
    a = svod.asarray(rng.standard_normal((5, 7)).astype(np.float32))
    b = svod.asarray(rng.standard_normal((4, 7)).astype(np.float32))
    plan, _ = check(a @ b.T)
    assert any(k.kind == "blas" for k in plan.kernels)


# ----------------------------------------------------------------------------- cache and fallback


def test_object_cache_across_processes(tmp_path):
    script = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {ROOT!r})
        import numpy as np, svod
        from svod.kernel_examples import softmax_kernel
        from svod.codegen.program import compile_kernel
        x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
        bufs = {{0: x.reshape(-1), 1: np.empty(32, np.float32)}}
        compile_kernel(softmax_kernel(4, 8)).run(bufs)
        s = svod.stats()
        print(json.dumps({{"compiled": s["kernels_compiled"], "loaded": s["kernels_loaded"],
                          "sum": float(bufs[1].sum())}}))
    """)
    env = dict(os.environ, SVOD_CACHE_DIR=str(tmp_path), SVOD_OBJECT_CACHE="1")
    runs = [json.loads(subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                                      check=True, timeout=120).stdout.strip().splitlines()[-1]) for _ in range(2)]
    assert runs[0]["compiled"] == 1 and runs[0]["loaded"] == 0
    assert runs[1]["compiled"] == 0 and runs[1]["loaded"] >= 1
    assert abs(runs[1]["sum"] - 4.0) < 1e-4


def test_compile_failure_falls_back_with_one_warning(monkeypatch):
    from svod.codegen import lower

    monkeypatch.setenv("SVOD_OBJECT_CACHE", "0")
    real = lower.lower_kernel

    def broken(kernel, symbol=None):
        low = real(kernel, symbol)
        return lower.Lowered(low.ir.replace("ret void", "ret i32 0", 1), low.symbol, low.units, low.plan)

    monkeypatch.setattr(lower, "lower_kernel", broken)
    program_mod.clear_programs()
    k = examples(rows=3, cols=5)[0][1]
    x = _rng().standard_normal((3, 5)).astype(np.float32)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        prog = compile_kernel(k)
        prog2 = compile_kernel(k)
    assert [type(x.message) for x in w] == [SvodWarning] and k.name in str(w[0].message)
    assert prog.kind == "interpreted" and prog2 is prog
    path = str(w[0].message).rsplit("IR: ", 1)[1]
    assert os.path.exists(path)
    os.unlink(path)
    bufs = {0: x.reshape(-1), 1: np.empty(15, np.float32)}
    before = svod.stats()["interpreter_fallbacks"]
    prog.run(bufs)
    assert svod.stats()["interpreter_fallbacks"] == before + 1
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(bufs[1].reshape(3, 5), e / e.sum(axis=1, keepdims=True), rtol=1e-6)
    program_mod.clear_programs()


def test_programs_are_memoised_and_rebound_to_slots():
    k = examples(rows=2, cols=3)[0][1]
    moved = Kernel(k.name, k.shape, tuple(KInput(7, i.dtype, i.view) for i in k.inputs), k.nodes,
                   tuple(KOutput(9, o.node, o.dtype, o.shape, o.reduced, o.pass_) for o in k.outputs), k.reduce_axes)
    p1, p2 = compile_kernel(k), compile_kernel(moved)
    assert p1.module is p2.module and p2.slots == (7, 9)
    x = np.ones(6, np.float32)
    bufs = {7: x}
    p2.run(bufs)
    np.testing.assert_allclose(bufs[9], np.full(6, 1 / 3, np.float32), rtol=1e-6)
    for _ in range(3):  # a missing output is allocated afresh each call (never a stale address)
        bufs = {7: np.ones(6, np.float32) * 2}
        p2.run(bufs)
        np.testing.assert_allclose(bufs[9], np.full(6, 1 / 3, np.float32), rtol=1e-6)


def test_reduced_output_of_int_sum_kernel_by_hand():
    k = Kernel("isum", (3, 4), (KInput(0, int64, ViewChain.of((3, 4))),),
               (KNode(LOAD, int64, (), 0), KNode(Ops.REDUCE, int64, (0,), "sum", 0)),
               (KOutput(1, 1, int64, (3,), True),), (1,))
    k.check()
    bufs = {0: np.arange(12, dtype=np.int64)}
    compile_kernel(k).run(bufs)
    assert bufs[1].tolist() == [6, 22, 38]
    assert float32.is_float


# ----------------------------------------------------------------------------- sin/cos, every input


def _sincos_sweep(dt) -> np.ndarray:
    fi = np.finfo(dt)
    rng = np.random.default_rng(11)
    top = 88.0 if dt == np.float32 else 709.0
    vals = [1e10, -3e9, 5e9, 4e9, -4e9, 1e20, 3e38, -3e38, float(fi.max), -float(fi.max),
            np.inf, -np.inf, np.nan, 0.0, -0.0, float(fi.tiny), float(fi.tiny) / 3, -float(fi.tiny) / 7,
            float(fi.smallest_subnormal), 0.5, -2.5, 100.0, 1e6]
    huge = np.exp(rng.uniform(21.0, top, 3000)) * rng.choice([-1.0, 1.0], 3000)
    return np.concatenate([np.array(vals), huge, rng.uniform(-50, 50, 3000)]).astype(dt)


def _ulp_close(got: np.ndarray, want: np.ndarray, dt, atol64: float = 0.0) -> None:
    assert np.array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    g, w = got[ok].astype(np.float64), want[ok].astype(np.float64)
    err = np.abs(g - w)
    spacing = np.spacing(np.abs(want[ok]).astype(dt)).astype(np.float64)
    atol = 1e-6 if dt == np.float32 else atol64
    bad = (err > 4 * spacing) & (err > atol)
    assert not bad.any(), (got[ok][bad][:5], want[ok][bad][:5])


@pytest.mark.parametrize("libmvec", [True, False], ids=["libmvec", "poly"])
@pytest.mark.parametrize("dt", [np.float32, np.float64], ids=["f32", "f64"])
def test_fused_sincos_exact_for_every_input(dt, libmvec, monkeypatch):
    from svod.codegen import jit

    monkeypatch.delenv("SVOD_VALIDATE", raising=False)
    monkeypatch.setenv("SVOD_OBJECT_CACHE", "0")
    program_mod.clear_programs()
    jit.set_libmvec_enabled(None if libmvec else False)
    try:
        xs = _sincos_sweep(dt)
        for n in (xs.size, 7, 1):  # vector loop, and lengths that only reach the scalar code
            x = xs[:n] if n < xs.size else xs
            sx = svod.asarray(x)
            before = svod.stats()["interpreter_fallbacks"]
            got = (svod.sin(sx) * 2 + svod.cos(sx)).numpy()
            assert svod.stats()["interpreter_fallbacks"] == before
            with np.errstate(invalid="ignore"):
                want = (np.sin(x.astype(np.float64)) * 2 + np.cos(x.astype(np.float64))).astype(dt)
                _ulp_close(svod.sin(sx).numpy(), np.sin(x.astype(np.float64)).astype(dt), dt)
                _ulp_close(svod.cos(sx).numpy(), np.cos(x.astype(np.float64)).astype(dt), dt)
            _ulp_close(got, want, dt, atol64=1e-15)  # 2 sin + cos cancels near 0
            s = svod.sin(svod.asarray(np.array([-0.0, 0.0], dt))).numpy()
            assert np.signbit(s[0]) and not np.signbit(s[1])
    finally:
        jit.set_libmvec_enabled(None)
        program_mod.clear_programs()


@pytest.mark.parametrize("libmvec", [True, False], ids=["libmvec", "poly"])
@pytest.mark.parametrize("dt", [np.float32, np.float64], ids=["f32", "f64"])
def test_sincos_kernel_stays_vectorised(dt, libmvec):
    from svod.codegen import jit

    program_mod.clear_programs()
    jit.set_libmvec_enabled(None if libmvec else False)
    try:
        x = svod.asarray(np.ones(1 << 14, dt))
        key, _ = compact([(svod.sin(x) * 2).uop])
        prog = compile_kernel(plan_greedy(key).kernels[0])
    finally:
        jit.set_libmvec_enabled(None)
        program_mod.clear_programs()
    bits = jit.host_target_info()["vector_bits"]
    reg = {512: "zmm", 256: "ymm"}.get(bits, "xmm")
    assert reg in prog.asm
    # the loop calls a vector function (libmvec or vecmath's huge-argument fix-up)
    assert "call <" in prog.ir.replace("tail call", "call").replace("call fastcc", "call")


# ----------------------------------------------------------------------------- column reduce


@pytest.mark.parametrize("shape,axis", [((600, 300), 0), ((3, 700, 5), (0, 1)), ((4, 5, 513), 1),
                                        ((2, 3, 4, 257), (0, 2)), ((1000, 2), 0), ((257, 1), 0)])
@pytest.mark.parametrize("threads", [1, 2])
def test_column_reduce_matches_interpreter(shape, axis, threads):
    """Reductions over outer axes with a kept innermost axis stream rows into column
    tiles (plan_loops cols > 0); sums, products, max/min, int and bool, NaN included."""
    from svod.codegen.schedule import plan_loops

    rng = _rng(1)
    a = rng.standard_normal(shape).astype(np.float32)
    a.reshape(-1)[::97] = np.nan
    x = svod.asarray(a)
    xi = svod.asarray(rng.integers(-50, 50, shape).astype(np.int32))
    xb = svod.asarray(rng.random(shape) > 0.5)
    plan, _ = check(svod.sum(x, axis=axis), svod.max(x, axis=axis), svod.min(x * 2.0, axis=axis),
                    svod.mean(x, axis=axis), threads=threads)
    check(svod.sum(xi, axis=axis), svod.max(xi, axis=axis), svod.prod(xi % 3 + 1, axis=axis), threads=threads)
    check(svod.any(xb, axis=axis), svod.all(xb, axis=axis), threads=threads)
    if shape[-1] > 1:
        assert any(plan_loops(k).cols for k in plan.kernels), plan


def test_column_sum_is_accurate_over_many_rows():
    """Float sums over many rows are blocked (SUM_BLOCK rows per block tile)."""
    a = np.full((20000, 3), 0.1, np.float32)
    got = svod.sum(svod.asarray(a), axis=0).numpy()
    np.testing.assert_allclose(got, a.astype(np.float64).sum(0), rtol=1e-5)


def test_rowwise_stash_computes_each_exp_once():
    """softmax's exp(x - max) is summed in one pass and divided in the next: the kernel
    stores it in a row buffer instead of computing it twice (bit-identical results)."""
    import re

    from svod.codegen.lower import lower_kernel

    x = svod.asarray(_rng(3).standard_normal((8, 300)).astype(np.float32))
    plan, got = check(svod.nn.softmax(x, axis=-1))
    (kern,) = plan.kernels
    assert kern.passes >= 2
    calls = re.findall(r'call \S+ @"?(svod\.exp[\w.]*)', lower_kernel(kern).ir)
    assert len(calls) == 1, calls
    a = x.numpy()
    e = np.exp(a - a.max(-1, keepdims=True))
    np.testing.assert_allclose(got[0], e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("cols", [(5, 7), (256, 256), (300, 700), (512, 512, 3)])
def test_loops_cut_at_mask_boundaries_match_interpreter(cols):
    """Concats and pads fused into elementwise and row kernels: the inner loop is cut where
    a mask starts or ends (`KernelLowering._segments`), blocked float sums included."""
    rng = _rng(11)
    parts = [svod.asarray(rng.standard_normal((6, c)).astype(np.float32)) for c in cols]
    cat = svod.concat(parts, axis=1)
    n = sum(cols)
    w = svod.asarray(rng.standard_normal(n).astype(np.float32))
    check(cat * 2.0 + 1.0)  # elementwise, several axes
    check(svod.nn.layer_norm(cat, (n,), w, w))  # row passes, cascaded sums when n > SUM_BLOCK
    check(svod.max(cat, axis=1), svod.argmax(cat, axis=1))
    padded = svod.pad(parts[0], ((0, 0), (3, 5)), constant_values=0.0)
    check(svod.sum(svod.exp(padded), axis=1), padded * 3.0)


def test_fused_concat_reads_without_masked_loads(monkeypatch):
    """In each piece of a cut loop every load is plain: the optimised IR of a concat +
    layer norm kernel is vectorised without masked loads (29 `llvm.masked.*` before)."""
    monkeypatch.setenv("SVOD_OBJECT_CACHE", "0")  # the IR of this compile, not a cached object's
    x = svod.asarray(np.ones((4, 512), np.float32))
    y = svod.asarray(np.ones((4, 512), np.float32))
    t = svod.nn.layer_norm(svod.concat([x, y], axis=1), (1024,))
    key, _ = compact([t.uop])
    plan = plan_greedy(key)
    (kern,) = [k for k in plan.kernels if k.kind == "rowwise"]
    assert len([i for i in kern.inputs if i.view.views[-1].mask is not None]) == 2
    ir_text = compile_kernel(kern).ir
    assert "<8 x float>" in ir_text or "<16 x float>" in ir_text, "not vectorised"
    assert "llvm.masked" not in ir_text, "a masked load is left"
