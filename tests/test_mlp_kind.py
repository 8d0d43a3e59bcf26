"""The fused MLP kernel kind (search/kinds.py `mlp`, svod.lower.mlp, svod.codegen.mlp):
``act(x @ W1 + b1) @ W2 + b2`` as one kernel, against numpy and against the two-GEMM
plan it replaces — shapes around the micro-tile and row-block edges, every activation,
with and without biases, float32 and float64, NaN and inf — plus the rule, the switch,
the interpreter path, the JSON form, the spec checks and the search's choice.

The kernel tests force the kind's choice: the graph lowered with only its inputs and its
output materialised (`_forced`), which is what the extraction's "inline the hidden
value" choice lowers to. Whether the search picks it is the cost model's call
(`test_search_prices_the_kind`, `test_w4_keeps_two_gemms`)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import svod
from svod.ir import Ops
from svod.kernel import ACC, KernelError, KNode, plan_from_json, plan_to_json
from svod.key import compact

ACTS = {
    "relu": (svod.nn.relu, lambda h: np.maximum(h, 0)),
    "gelu": (lambda h: svod.nn.gelu(h, approximate="tanh"),
             lambda h: 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h ** 3)))),
    "silu": (svod.nn.silu, lambda h: h / (1 + np.exp(-h))),
    "none": (lambda h: h, lambda h: h),
}


def _arrays(m, d, h, n, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((m, d)).astype(dtype), (rng.standard_normal((d, h)) / np.sqrt(d)).astype(dtype),
            rng.standard_normal(h).astype(dtype), (rng.standard_normal((h, n)) / np.sqrt(h)).astype(dtype),
            rng.standard_normal(n).astype(dtype))


def _graph(arrs, act, bias1=True, bias2=True):
    x, w1, b1, w2, b2 = (svod.asarray(a) for a in arrs)
    with svod.eager_mode(False):
        hid = x @ w1
        if bias1:
            hid = hid + b1
        out = ACTS[act][0](hid) @ w2
        if bias2:
            out = out + b2
    return out


def _ref(arrs, act, bias1=True, bias2=True):
    x, w1, b1, w2, b2 = (a.astype(np.float64) for a in arrs)
    with np.errstate(all="ignore"):
        hid = x @ w1 + (b1 if bias1 else 0)
        out = ACTS[act][1](hid) @ w2
        return out + (b2 if bias2 else 0)


def _forced(t, keep=()):
    """(key, bindings, plan) of t lowered with only its inputs, its output and `keep`
    materialised: the choice that inlines the hidden value into the second product."""
    from svod.lower import lower

    key, b = compact([t.uop])
    choice = {i for i, n in enumerate(key.nodes) if n.op is Ops.BUFFER} | set(key.outputs) | set(keep)
    return key, b, lower(key, choice)


def _native(plan, arrays):
    """The plan's output, every kernel compiled (`compile_kernel`)."""
    from svod.codegen.program import compile_kernel

    bufs = {i: np.ascontiguousarray(a).reshape(-1) for i, a in enumerate(arrays)}
    for k in plan.kernels:
        for o in k.outputs:
            bufs[o.slot] = np.empty(int(np.prod(o.shape)), o.dtype.np)
        compile_kernel(k).run(bufs)
    slot, shape = plan.outputs[0]
    return bufs[slot].reshape(shape)


def _hidden(key):
    """The node the second matmul reads as its A operand (the hidden value)."""
    mms = [i for i, n in enumerate(key.nodes) if n.op is Ops.MATMUL]
    return key.nodes[max(mms)].src[0]


def _tol(dtype):
    return dict(rtol=2e-5, atol=2e-5) if dtype == np.float32 else dict(rtol=1e-11, atol=1e-11)


# ----------------------------------------------------------------------------- the kernel


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(m=st.integers(1, 40), d=st.integers(1, 33), h=st.integers(1, 70), n=st.integers(1, 40),
       act=st.sampled_from(sorted(ACTS)), bias1=st.booleans(), bias2=st.booleans(),
       dtype=st.sampled_from([np.float32, np.float64]))
def test_mlp_kernel_matches_numpy_and_the_two_gemm_plan(m, d, h, n, act, bias1, bias2, dtype):
    """Odd sizes around the micro-tile (MR rows) and the row blocks: the forced MLP kernel,
    compiled and interpreted, equals numpy at the GEMM's tolerance and the two-GEMM plan
    (the same sums in the same order) to the last bit when that plan's products are
    generated GEMMs too."""
    from svod.interp import run_plan

    arrs = _arrays(m, d, h, n, dtype, seed=m * 7 + h)
    t = _graph(arrs, act, bias1, bias2)
    key, b, plan = _forced(t)
    want = _ref(arrs, act, bias1, bias2)
    kinds = [k.kind for k in plan.kernels]
    if act == "none" and not bias1:  # x @ w1 @ w2: no elementwise hidden value, not this kind
        assert "mlp" not in kinds
    else:
        assert kinds == ["mlp"], kinds
    got = _native(plan, b.arrays)
    assert got.dtype == dtype
    np.testing.assert_allclose(got, want, **_tol(dtype))
    np.testing.assert_allclose(run_plan(plan, b.arrays)[0], want, **_tol(dtype))
    if kinds == ["mlp"]:
        _, _, two = _forced(t, keep=(_hidden(key),))
        two_kinds = [k.kind for k in two.kernels]
        assert "mlp" not in two_kinds
        if set(two_kinds) == {"matmul"}:  # generated GEMMs: the same sums (a BLAS step sums its own way)
            np.testing.assert_array_equal(got, _native(two, b.arrays))


@pytest.mark.parametrize("m", [1, 5, 6, 13, 200])
def test_row_blocks_edges(m):
    """m below, at and past the micro-tile and over several row blocks (a short last
    block); a wide hidden layer makes several blocks at m = 200."""
    from svod.codegen.schedule import block_rows

    arrs = _arrays(m, 24, 3000, 17, seed=m)
    key, b, plan = _forced(_graph(arrs, "gelu"))
    (k,) = plan.kernels
    assert k.kind == "mlp"
    rows = block_rows(k)
    assert 1 <= rows <= m and (m <= rows or rows % 6 == 0)
    np.testing.assert_allclose(_native(plan, b.arrays), _ref(arrs, "gelu"), rtol=2e-5, atol=2e-5)


def test_nan_and_inf_propagate_as_numpy():
    """A NaN or an inf in x spreads through both products as numpy's: the same elements
    NaN, the same infinities, the rest equal."""
    arrs = list(_arrays(9, 8, 20, 7, seed=3))
    x = arrs[0]
    x[1, 2] = np.nan
    x[4, 0] = np.inf
    x[6, 3] = -np.inf
    arrs[2][5] = np.inf  # b1: one hidden column infinite for every row
    key, b, plan = _forced(_graph(arrs, "relu"))
    assert [k.kind for k in plan.kernels] == ["mlp"]
    got = _native(plan, b.arrays)
    xs, w1, b1, w2, b2 = arrs
    with np.errstate(all="ignore"):
        want = np.maximum(xs @ w1 + b1, 0) @ w2 + b2
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=2e-5, atol=2e-5)


def test_transposed_and_strided_operands():
    """x and the weights read through views (a transposed w2, a column slice of x): the
    blocks move along x's rows with its own strides."""
    rng = np.random.default_rng(5)
    xbig = rng.standard_normal((19, 30)).astype(np.float32)
    w1 = rng.standard_normal((10, 33)).astype(np.float32) / 3
    w2t = rng.standard_normal((9, 33)).astype(np.float32) / 5
    b1 = rng.standard_normal(33).astype(np.float32)
    with svod.eager_mode(False):
        X = svod.asarray(xbig)[:, 5:15]
        t = svod.nn.silu(X @ svod.asarray(w1) + svod.asarray(b1)) @ svod.asarray(w2t).mT
    key, b, plan = _forced(t)
    assert [k.kind for k in plan.kernels] == ["mlp"]
    hid = xbig[:, 5:15].astype(np.float64) @ w1 + b1
    want = (hid / (1 + np.exp(-hid))) @ w2t.T.astype(np.float64)
    np.testing.assert_allclose(_native(plan, b.arrays), want, rtol=2e-5, atol=2e-5)


def test_residual_epilogue_reads_rows_of_its_block():
    """An epilogue operand that varies along the rows (a residual) is read at each
    block's rows."""
    arrs = _arrays(150, 16, 3000, 16, seed=9)
    x, w1, b1, w2, b2 = (svod.asarray(a) for a in arrs)
    with svod.eager_mode(False):
        t = x + svod.nn.relu(x @ w1 + b1) @ w2
    key, b, plan = _forced(t)
    assert [k.kind for k in plan.kernels] == ["mlp"]
    assert plan.kernels[0].mlp.m == 150
    xs = arrs[0].astype(np.float64)
    want = xs + np.maximum(xs @ arrs[1] + arrs[2], 0) @ arrs[3]
    np.testing.assert_allclose(_native(plan, b.arrays), want, rtol=2e-5, atol=2e-5)


# ----------------------------------------------------------------------------- the form


def test_json_roundtrip_interpreter_and_text():
    from svod.codegen.program import InterpretedProgram

    arrs = _arrays(7, 5, 9, 4)
    key, b, plan = _forced(_graph(arrs, "gelu"))
    again = plan_from_json(plan_to_json(plan))
    again.check()
    assert str(again) == str(plan) and again.kernels[0].key() == plan.kernels[0].key()
    kern = plan.kernels[0]
    assert "[mlp]" in str(kern) and "mlp(in0 @ in1" in str(kern)
    bufs = {i: np.ascontiguousarray(a).reshape(-1) for i, a in enumerate(b.arrays)}
    InterpretedProgram(kern).run(bufs)  # the numpy path (SVOD_CODEGEN=0, a failed compile)
    np.testing.assert_allclose(bufs[kern.outputs[0].slot].reshape(7, 4), _ref(arrs, "gelu"), rtol=2e-5, atol=2e-5)


def test_mlp_spec_checks():
    import dataclasses

    arrs = _arrays(7, 5, 9, 4)
    _, _, plan = _forced(_graph(arrs, "relu"))
    good = plan.kernels[0]
    good.check()
    ml = good.mlp
    with pytest.raises(KernelError, match="exactly one ACC"):
        dataclasses.replace(good, nodes=good.nodes + (KNode(ACC, good.nodes[0].dtype),)).check()
    with pytest.raises(KernelError, match="is not \\(m, n\\)"):
        dataclasses.replace(good, mlp=dataclasses.replace(ml, n=ml.n + 1)).check()
    with pytest.raises(KernelError, match="viewed as"):
        dataclasses.replace(good, mlp=dataclasses.replace(ml, h=ml.h + 1)).check()
    with pytest.raises(KernelError, match="outside its MLP part"):  # part 2 reading part 1's ACC directly
        nodes = list(good.nodes)
        nodes[-1] = dataclasses.replace(nodes[-1], src=(0,) + nodes[-1].src[1:])
        dataclasses.replace(good, nodes=tuple(nodes)).check()
    with pytest.raises(KernelError, match="split"):
        dataclasses.replace(good, mlp=dataclasses.replace(ml, split=0)).check()


def test_chains_the_kind_leaves_alone():
    """A batch axis, a reduction in the hidden value (a softmax), a hidden value used twice
    (an output too): no MLP kernel, the results still numpy's."""
    rng = np.random.default_rng(2)
    x3 = rng.standard_normal((2, 5, 6)).astype(np.float32)
    w1, w2 = rng.standard_normal((6, 7)).astype(np.float32), rng.standard_normal((7, 3)).astype(np.float32)
    with svod.eager_mode(False):
        t = svod.nn.relu(svod.asarray(x3) @ svod.asarray(w1)) @ svod.asarray(w2)
    _, b, plan = _forced(t)
    assert "mlp" not in [k.kind for k in plan.kernels]
    np.testing.assert_allclose(_native(plan, b.arrays), np.maximum(x3 @ w1, 0) @ w2, rtol=2e-5, atol=2e-5)
    x = rng.standard_normal((5, 6)).astype(np.float32)
    with svod.eager_mode(False):
        t = svod.nn.softmax(svod.asarray(x) @ svod.asarray(w1), axis=-1) @ svod.asarray(w2)
    _, b, plan = _forced(t)
    assert "mlp" not in [k.kind for k in plan.kernels]
    s = x.astype(np.float64) @ w1
    e = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(_native(plan, b.arrays), (e / e.sum(-1, keepdims=True)) @ w2, rtol=2e-5, atol=2e-5)


# ----------------------------------------------------------------------------- the search


def test_rule_fires_once_per_mlp_and_the_switch(monkeypatch):
    from search import kinds

    arrs = _arrays(8, 6, 10, 4)
    key, _ = compact([_graph(arrs, "gelu").uop])
    facts = [f for i in range(len(key.nodes)) for f in kinds._facts(key, i, None) if f.startswith("(KindMlpAt")]
    assert facts == [f"(KindMlpAt {max(i for i, n in enumerate(key.nodes) if n.op is Ops.MATMUL)} {_hidden(key)})"]
    monkeypatch.setenv("SVOD_FUSE_MLP", "0")
    assert not [f for i in range(len(key.nodes)) for f in kinds._facts(key, i, None) if f.startswith("(KindMlpAt")]
    from svod.lower import lower

    choice = {i for i, n in enumerate(key.nodes) if n.op is Ops.BUFFER} | set(key.outputs)
    assert "mlp" not in [k.kind for k in lower(key, choice).kernels]  # the lowering builds none either
    from svod.flags import PLAN_SWITCHES

    assert ("SVOD_FUSE_MLP", "1") in PLAN_SWITCHES


def test_residual_rmsnorm_mlp_picks_the_kind():
    """The residual RMSNorm MLP block at its default shapes (x 1024x512, h 1024): two row
    blocks, no weight packed more often than by the two GEMMs, the hidden layer's 4 MB
    round trip saved: the extraction picks the MLP kernel (measured 4-9% less CPU time,
    docs/codegen.md) and the result is numpy's."""
    from svod import workloads

    w = workloads.get("residual_rmsnorm_mlp")
    arrs = w.make_inputs()
    with svod.eager_mode(False):
        t = w.build(**w.tensors(arrs))
    e = svod.explain(t)
    assert [k.kind for k in e.plan.kernels] == ["rowwise", "mlp"]
    np.testing.assert_allclose(t.numpy(), w.reference(**arrs), rtol=w.rtol, atol=w.atol)


def test_search_prices_the_kind():
    """The extraction prices the MLP variant against the two-GEMM plans and says so in
    explain; a one-block MLP (a few rows: no weight packed twice) is the cheaper plan."""
    arrs = _arrays(4, 64, 256, 64, seed=1)
    t = _graph(arrs, "gelu")
    e = svod.explain(t)
    lines = [ln for ln in e.variants_table().splitlines() if ln.startswith("kernel kind mlp")]
    assert lines and lines[0].startswith("kernel kind mlp: chosen"), e.variants_table()
    assert [k.kind for k in e.plan.kernels] == ["mlp"]
    np.testing.assert_allclose(t.numpy(), _ref(arrs, "gelu"), rtol=2e-5, atol=2e-5)


def test_w4_keeps_two_gemms():
    """W4 (512 x 1024 x 4096): the MLP kernel packs w1 once per row block (two) where the
    first GEMM packs it once; it measured a tie with the two GEMMs (docs/codegen.md, "The
    MLP block") and is priced 1-2% dearer, so the extraction keeps two kernels; forced,
    the kind is one kernel."""
    from svod import engine, workloads
    from svod.lower import lower

    w = workloads.get("w4_mlp")
    arrs = {k: np.zeros(s, np.float32) for k, s in w.default_shapes.items()}
    with svod.eager_mode(False):
        t = w.build(**w.tensors(arrs))
    with svod.search_limits(enabled=True):
        key, exe = engine.plan_for([t])
    assert [k.kind for k in exe.plan.kernels] == ["matmul", "matmul"]
    key, _ = compact([t.uop])
    choice = {i for i, n in enumerate(key.nodes) if n.op is Ops.BUFFER} | set(key.outputs)
    assert [k.kind for k in lower(key, choice).kernels] == ["mlp"]


def test_an_mlp_kernel_merges_with_no_sibling():
    """A sibling elementwise kernel over the MLP's output space reading the same x stays a
    kernel of its own (sibling merging concatenates elementwise bodies only)."""
    from svod.interp import run_plan

    rng = np.random.default_rng(4)
    x = rng.standard_normal((6, 8)).astype(np.float32)
    w1, w2 = rng.standard_normal((8, 12)).astype(np.float32), rng.standard_normal((12, 8)).astype(np.float32)
    X, W1, W2 = (svod.asarray(a) for a in (x, w1, w2))
    with svod.eager_mode(False):
        y = svod.nn.relu(X @ W1) @ W2 + X
        z = X * 2.0
    from svod.lower import lower

    key, b = compact([y.uop, z.uop])
    plan = lower(key, {i for i, n in enumerate(key.nodes) if n.op is Ops.BUFFER} | set(key.outputs))
    assert sorted(k.kind for k in plan.kernels) == ["elementwise", "mlp"]
    plan.check()
    got = run_plan(plan, b.arrays)
    np.testing.assert_allclose(got[0], np.maximum(x @ w1, 0) @ w2 + x, rtol=2e-5, atol=2e-5)
    np.testing.assert_array_equal(got[1], 2 * x)


def test_three_layers():
    """relu(relu(x @ w1) @ w2) @ w3 with nothing but inputs and output materialised: the
    first two products form one MLP kernel whose output (its epilogue, relu) is the third
    product's materialised operand — an MLP kernel is never the hidden side of another —
    and the result is numpy's."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((20, 9)).astype(np.float32)
    ws = [rng.standard_normal(s).astype(np.float32) / 3 for s in ((9, 14), (14, 11), (11, 5))]
    X, W1, W2, W3 = (svod.asarray(a) for a in (x, *ws))
    with svod.eager_mode(False):
        t = svod.nn.relu(svod.nn.relu(X @ W1) @ W2) @ W3
    key, b, plan = _forced(t)
    assert [k.kind for k in plan.kernels][0] == "mlp" and len(plan.kernels) == 2
    want = np.maximum(np.maximum(x.astype(np.float64) @ ws[0], 0) @ ws[1], 0) @ ws[2]
    np.testing.assert_allclose(_native(plan, b.arrays), want, rtol=2e-5, atol=2e-5)


# ----------------------------------------------------------------------------- blocks, threads, rows variant


def _slots(plan, arrays):
    """(kernel, its program, the bufs by slot, the output array) of a forced one-kernel plan."""
    from svod.codegen.program import compile_kernel

    (k,) = plan.kernels
    bufs = {i: np.ascontiguousarray(a).reshape(-1) for i, a in enumerate(arrays)}
    for o in k.outputs:
        bufs[o.slot] = np.empty(int(np.prod(o.shape)), o.dtype.np)
    return k, compile_kernel(k), bufs, bufs[plan.outputs[0][0]].reshape(plan.outputs[0][1])


@pytest.mark.parametrize("m", [200, 257])
def test_blocks_threads_and_repeated_calls_are_bit_identical(m):
    """Several row blocks with a short last one (one pair of GEMM rows variants serves
    both): on 1 and 2 threads and over repeated calls the result is the two-GEMM plan's to the last bit, and numpy's."""
    from svod.codegen.schedule import block_rows

    arrs = _arrays(m, 37, 3000, 23, seed=m)
    t = _graph(arrs, "gelu")
    key, b, plan = _forced(t)
    k, prog, bufs, out = _slots(plan, b.arrays)
    rows = block_rows(k)
    assert m % rows and m // rows >= 1, (m, rows)  # full blocks and a short last one
    _, _, two = _forced(t, keep=(_hidden(key),))
    assert {kk.kind for kk in two.kernels} == {"matmul"}
    want = _native(two, b.arrays)
    np.testing.assert_allclose(want, _ref(arrs, "gelu"), rtol=2e-5, atol=2e-5)
    for threads in (1, 2, 1, 2):
        out[...] = np.nan
        prog.run(bufs, threads)
        assert np.array_equal(out.view(np.uint32), want.view(np.uint32)), threads


def test_concurrent_calls_keep_their_own_hidden_blocks():
    """Calls of one MLP program from several Python threads at once (each body call has
    its own hidden block): every result is its inputs'."""
    import threading

    arrs = _arrays(150, 16, 2500, 9, seed=3)
    key, b, plan = _forced(_graph(arrs, "silu"))
    (k,) = plan.kernels
    assert k.kind == "mlp"
    from svod.codegen.program import compile_kernel

    prog = compile_kernel(k)
    xslot = next(i for i, a in enumerate(b.arrays) if a.shape == arrs[0].shape)
    errors = []

    def worker(seed):
        rng = np.random.default_rng(seed)
        bufs = {i: np.ascontiguousarray(a).reshape(-1).copy() for i, a in enumerate(b.arrays)}
        for o in k.outputs:
            bufs[o.slot] = np.empty(int(np.prod(o.shape)), o.dtype.np)
        slot, shape = plan.outputs[0]
        for _ in range(6):
            x = rng.standard_normal(arrs[0].shape).astype(np.float32)
            bufs[xslot][...] = x.reshape(-1)
            prog.run(bufs, 1)
            want = _ref((x,) + arrs[1:], "silu")
            if not np.allclose(bufs[slot].reshape(shape), want, rtol=2e-5, atol=2e-5):
                errors.append(seed)

    ts = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for th in ts:
        th.start()
    for th in ts:
        th.join()
    assert errors == []


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rows_variant_reads_and_writes_only_n_rows(dtype):
    """The MLP kernel's rows variant (`svod.codegen.rows._variant`: the row count read
    at run time, whole blocks of R rows): its first n rows are the kernel's own, bit for
    bit (the same sums), and no row past n is written — n inside a block, at a block's
    end, one past it, and all m rows."""
    import ctypes

    from svod.codegen.rows import _variant
    from svod.codegen.schedule import block_rows

    m = 203
    arrs = _arrays(m, 19, 2200, 11, dtype, seed=9)
    arrs[0][4, 3] = np.nan
    arrs[0][7, 1] = np.inf
    key, b, plan = _forced(_graph(arrs, "gelu"))
    k, prog, bufs, out = _slots(plan, b.arrays)
    prog.run(bufs, 1)
    full = out.copy()
    rows = block_rows(k)
    assert rows < m
    mod, symbol = _variant(k)
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)(mod.address(symbol))
    ins = [np.ascontiguousarray(b.arrays[inp.slot]) for inp in k.inputs]
    ity = np.uint32 if dtype == np.float32 else np.uint64
    for n in (1, 5, rows - 1, rows, rows + 1, m - 1, m):
        res = np.full((m + 2, k.shape[1]), -7, dtype)
        args = (ctypes.c_void_p * (len(ins) + 2))(*[a.ctypes.data for a in ins], res.ctypes.data, n)
        fn(ctypes.addressof(args), 0, -(-n // rows))
        assert np.array_equal(res[:n].view(ity), full[:n].view(ity)), n
        assert (res[n:] == -7).all(), f"rows past {n} written"
