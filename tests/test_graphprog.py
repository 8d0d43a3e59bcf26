"""Graph programs: one native call per segment equals kernel-by-kernel `run_graph`."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod.codegen.graphprog import GraphProgram, compile_graph
from svod.codegen.program import InterpretedProgram, compile_kernel
from svod.graph import Copy, build_graph, run_graph
from svod.key import compact
from svod.lower import lower
from svod.plan_greedy import plan_greedy


def _graph(tensors, *, every_node=False, threads=None):
    key, b = compact([t.uop for t in tensors])
    if every_node:
        ops = {i for i, n in enumerate(key.nodes) if n.op.name in ("MUL", "TANH", "EXP")}
        plan = lower(key, ops, merge_siblings=False)
    else:
        plan = plan_greedy(key)
    g = build_graph(plan, threads=threads)
    return g, b.arrays, [compile_kernel(k) for k in g.kernels]


def _check_same(g, arrays, progs, kind="native"):
    gp = compile_graph(g, progs)
    assert gp.kind == kind, gp.reason
    want = run_graph(g, arrays, progs)
    for _ in range(2):  # the second run reuses the slot table and scratch
        got = gp.run(arrays)
        assert len(got) == len(want)
        for a, w in zip(got, want):
            assert a.shape == w.shape and a.dtype == w.dtype
            np.testing.assert_array_equal(a, w)
        _no_alias(got, arrays)
    return gp


def _no_alias(outs, arrays):
    for i, o in enumerate(outs):
        for a in arrays:
            assert not np.shares_memory(o, a)
        for p in outs[i + 1:]:
            assert not np.shares_memory(o, p)


def _x(*shape, seed=0):
    return svod.asarray(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def test_chain_materialised_at_every_node():
    x = _x(8, 8)
    t = x
    for i in range(12):
        t = t * 1.01 if i % 2 else svod.tanh(t)
    g, arrays, progs = _graph([t], every_node=True)
    assert len(g.kernels) == 12 and g.temp_storages == 2
    gp = _check_same(g, arrays, progs)
    assert [s[0] for s in gp.segments] == ["native"]


def test_softmax_and_layernorm_and_copy():
    x = _x(16, 32)
    outs = [svod.nn.softmax(x), svod.nn.layer_norm(x, (32,)), x.reshape(32, 16).contiguous()]
    g, arrays, progs = _graph(outs)
    assert any(isinstance(s, Copy) for s in g.steps)
    _check_same(g, arrays, progs)


def test_mlp_with_a_blas_step_in_the_middle():
    x, w1, w2 = _x(8, 16), _x(16, 32, seed=1), _x(32, 4, seed=2)
    y = svod.nn.relu(svod.tanh(x) @ w1 + 0.5) @ w2 * 2.0
    g, arrays, progs = _graph([y])
    assert sum(p.kind == "library" for p in progs) == 2
    gp = _check_same(g, arrays, progs)
    kinds = [s[0] for s in gp.segments]
    assert kinds.count("library") == 2 and "native" in kinds


def test_multi_output():
    x = _x(16, 16)
    a = svod.exp(x).contiguous()
    g, arrays, progs = _graph([a * 2, a + 1, svod.tanh(a).sum(axis=1)])
    _check_same(g, arrays, progs)


def test_a_repeated_output_gets_its_own_buffer():
    x = _x(16)
    y = svod.exp(x)
    key, b = compact([y.uop, y.uop, x.reshape(4, 4).uop])
    g = build_graph(plan_greedy(key))
    assert g.plan.outputs[0][0] == g.plan.outputs[1][0]
    gp = compile_graph(g, [compile_kernel(k) for k in g.kernels])
    got = gp.run(b.arrays)
    np.testing.assert_array_equal(got[0], got[1])
    np.testing.assert_array_equal(got[2], b.arrays[0].reshape(4, 4))
    _no_alias(got, b.arrays)


def test_threaded_launches_match():
    x = _x(256, 256)
    t = svod.exp(x) * 2.0 + svod.nn.softmax(x)
    g, arrays, progs = _graph([t], threads={i: 2 for i in range(8)})
    assert any(getattr(s, "threads", 1) > 1 for s in g.steps)
    gp = _check_same(g, arrays, progs)
    from svod.runtime import pool_size

    assert gp._parallel == (pool_size() > 1)  # the segment calls the runtime's dispatcher


def test_interpreted_kernel_falls_back():
    x = _x(8, 8)
    g, arrays, progs = _graph([svod.tanh(svod.exp(x) * 2)], every_node=True)
    progs[0] = InterpretedProgram(g.kernels[0], "forced")
    gp = _check_same(g, arrays, progs, kind="fallback")
    assert isinstance(gp, GraphProgram) and gp.calls == 0


def test_engine_falls_back_when_a_kernel_is_interpreted(monkeypatch):
    from svod import executable as engine

    real = engine._programs

    def one_interpreted(plan):
        progs = real(plan)
        progs[-1] = InterpretedProgram(plan.kernels[-1], "forced")
        return progs

    monkeypatch.setattr(engine, "_programs", one_interpreted)
    x = np.linspace(-1, 1, 64, dtype=np.float32)
    got = svod.nn.softmax(svod.asarray(x) * 3.0).numpy()
    assert svod.stats()["interpreter_fallbacks"] > 0
    e = np.exp(x * 3.0 - (x * 3.0).max())
    np.testing.assert_allclose(got, e / e.sum(), rtol=1e-5)


def test_bad_inputs_are_rejected():
    g, arrays, progs = _graph([svod.exp(_x(4, 4))])
    gp = compile_graph(g, progs)
    with pytest.raises(ValueError, match="dtype"):
        gp.run([arrays[0].astype(np.float64)])
    with pytest.raises(ValueError, match="elements"):
        gp.run([arrays[0].reshape(-1)[:3]])
    # a non-contiguous input is copied, not misread
    big = np.zeros((4, 8), np.float32)
    big[:, ::2] = arrays[0]
    np.testing.assert_array_equal(gp.run([big[:, ::2]])[0], run_graph(g, arrays, progs)[0])


def test_jit_replay_is_one_graph_program_call():
    @svod.jit
    def f(x):
        y = x * 1.5 + 0.25
        return svod.exp(-svod.sqrt(svod.abs(svod.tanh(y) * x - 0.5)))

    x = _x(1000)
    first = f(x)
    entry = next(iter(f._entries.values()))
    gp = entry.exe.graph_program()
    assert gp.kind == "native"
    before = gp.calls
    outs = [f(_x(1000, seed=i)) for i in range(5)]
    assert gp.calls - before == 5
    xs = np.random.default_rng(3).standard_normal(1000).astype(np.float32)
    want = np.exp(-np.sqrt(np.abs(np.tanh(xs * np.float32(1.5) + np.float32(0.25)) * xs - np.float32(0.5))))
    np.testing.assert_allclose(f(svod.asarray(xs)).numpy(), want, rtol=1e-5, atol=1e-6)
    arrs = [first.numpy()] + [o.numpy() for o in outs]
    _no_alias(arrs, [x.numpy()])
