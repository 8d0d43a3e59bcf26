"""CompiledGraph: steps, memory plan, checker, buffer pool."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import svod
from svod.graph import Allocate, Free, GraphError, Launch, build_graph, check_graph, run_graph
from svod.interp import eval_key
from svod.key import compact
from svod.lower import lower
from svod.plan_greedy import plan_greedy
from svod.pool import BufferPool


class _Interp:
    def __init__(self, k):
        self.k = k

    def run(self, buffers, threads=1):
        from svod.interp import run_kernel

        run_kernel(self.k, buffers)


def _chain_plan(n=20):
    x = svod.asarray(np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8))
    t = x
    for i in range(n):
        t = t * 1.01 if i % 2 else svod.tanh(t)
    key, b = compact([t.uop])
    ops = {i for i, node in enumerate(key.nodes) if node.op.name in ("MUL", "TANH")}
    return key, b, lower(key, ops, merge_siblings=False)


def test_chain_of_20_materialised_needs_two_temp_buffers():
    key, b, plan = _chain_plan(20)
    assert len(plan.kernels) == 20
    g = build_graph(plan)
    g_no = build_graph(plan, reuse=False)
    assert g.temp_storages <= 2
    assert g_no.temp_storages == 19 and len(g_no.storage_bytes) == 20  # 19 temps + the output
    assert g.peak_bytes < g_no.peak_bytes
    want = eval_key(key, b.arrays)[0]
    progs = [_Interp(k) for k in plan.kernels]
    for graph in (g, g_no):
        np.testing.assert_allclose(run_graph(graph, b.arrays, progs)[0], want, rtol=1e-6)


def test_checker_rejects_broken_plans():
    _, _, plan = _chain_plan(6)
    g = build_graph(plan)
    steps = g.steps
    # read before write: drop the first Launch
    first_launch = next(i for i, s in enumerate(steps) if isinstance(s, Launch))
    with pytest.raises(GraphError, match="before it is written"):
        check_graph(dataclasses.replace(g, steps=steps[:first_launch] + steps[first_launch + 1:]))
    # read after free: move a Free before the Launch that reads the slot
    fi = next(i for i, s in enumerate(steps) if isinstance(s, Free))
    moved = steps[:fi - 1] + [steps[fi], steps[fi - 1]] + steps[fi + 1:]
    with pytest.raises(GraphError, match="after it was freed"):
        check_graph(dataclasses.replace(g, steps=moved))
    # clobbering: put every temp in one storage without frees in between
    one = {slot: 0 for slot in g.slot_storage}
    steps1 = [Allocate(s.slot, s.nbytes, 0) if isinstance(s, Allocate) else s for s in steps if not isinstance(s, Free)]
    with pytest.raises(GraphError, match="still held by live slot"):
        check_graph(dataclasses.replace(g, steps=steps1, slot_storage=one,
                                        storage_bytes={0: max(g.storage_bytes.values())}))
    # writing an input
    bad = [Launch(0, (0, 0))] + steps
    plan2 = dataclasses.replace(plan, kernels=(dataclasses.replace(plan.kernels[0], outputs=(
        dataclasses.replace(plan.kernels[0].outputs[0], slot=0),)),) + plan.kernels[1:])
    with pytest.raises(GraphError, match="input slot"):
        check_graph(dataclasses.replace(g, plan=plan2, steps=bad))


def test_outputs_never_share_storage_with_temps():
    x = svod.random.randn(16, 16)
    a = svod.exp(x).contiguous()
    outs = [a * 2, a + 1, svod.tanh(a).sum(axis=1)]
    key, _ = compact([t.uop for t in outs])
    g = build_graph(plan_greedy(key))
    out_storages = [g.slot_storage[s] for s, _ in g.plan.outputs]
    assert len(set(out_storages)) == len(out_storages)
    temps = [st for slot, st in g.slot_storage.items() if slot not in {s for s, _ in g.plan.outputs}]
    assert not set(temps) & set(out_storages)


def test_golden_graph_text():
    x = svod.asarray(np.zeros((4, 8), np.float32))
    key, _ = compact([svod.nn.softmax(svod.exp(x).contiguous()).uop])
    text = str(build_graph(plan_greedy(key)))
    assert text == (
        "compiled graph: 2 kernel(s), 2 storage(s), peak 256 bytes\n"
        "  Allocate slot 3 (128 B) in storage 0\n"
        "  Launch k2 [elementwise] slots (0, 3) threads 1\n"
        "  Allocate slot 10 (128 B) in storage 1\n"
        "  Launch k9 [rowwise] slots (3, 10) threads 1\n"
        "  Free slot 3")


def test_pool_reuses_blocks_only_when_no_view_is_alive():
    pool = BufferPool(max_bytes=1 << 26)
    a = pool.array((1024,), np.float32)
    view = a[10:20]
    del a
    b = pool.array((1024,), np.float32)
    assert pool.stats()["blocks_in_use"] == 2  # the view still holds the first block
    del view
    c = pool.array((1024,), np.float32)
    assert pool.stats()["hits"] == 1 and c is not b
    del b, c


def test_repeated_realize_stops_allocating():
    from svod.pool import POOL

    x = svod.random.randn(256, 256)
    (svod.exp(x) * 2).numpy()
    before = POOL.stats()["misses"]
    for _ in range(5):
        (svod.exp(x) * 2).realize()
    assert POOL.stats()["misses"] == before


def test_launch_threads_come_from_the_cost_model():
    """The thread count the cost model prices a kernel with is the one its Launch uses."""
    from svod import engine, planner
    from svod.costing import Machine
    from svod.graph import Launch

    x = svod.random.randn(1 << 20)
    small = svod.random.randn(64)
    _, exe = engine.plan_for([svod.exp(x) / (1.0 + x * x)])
    _, exe_small = engine.plan_for([svod.exp(small) + 1.0])
    launches = [s for s in exe.graph.steps if isinstance(s, Launch)]
    want = planner.kernel_threads(exe.plan)
    assert [s.threads for s in launches] == [want.get(s.kernel, 1) for s in launches]
    if Machine.host().cores > 1:
        assert max(s.threads for s in launches) > 1  # 1M elements of exp: worth both cores
    assert all(s.threads == 1 for s in exe_small.graph.steps if isinstance(s, Launch))
