"""svod.viz: the data behind the pictures (e-graph as a graph, plan graph, lifetimes,
memory curves) and the drawings themselves (Figures with the expected marks; nothing is
shown)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import svod
from svod import viz
from svod.graph import Free, build_graph
from svod.key import compact
from svod.plan_greedy import plan_greedy

pytest.importorskip("matplotlib")


def _softmax():
    return svod.nn.softmax(svod.asarray(np.arange(12, dtype=np.float32).reshape(3, 4)), axis=-1)


def _chain(n_ops: int = 20, materialise: bool = True, size: int = 64):
    y = svod.asarray(np.linspace(-1, 1, size, dtype=np.float32))
    for i in range(n_ops):
        y = svod.sin(y) if i % 2 else y * 1.5 + 0.25
        if materialise:
            y = y.contiguous()
    return y


def _graph(t, reuse: bool = True):
    key, _ = compact([t.uop])
    return build_graph(plan_greedy(key), reuse=reuse)


@pytest.fixture(scope="module")
def softmax_explained():
    return svod.explain(_softmax())


# ----------------------------------------------------------------------------- e-graph


def test_egraph_to_networkx_is_bipartite_with_the_ops(softmax_explained):
    g = viz.egraph_to_networkx(softmax_explained.egraph_json)
    kinds = {d["kind"] for _, d in g.nodes(data=True)}
    assert kinds == {"eclass", "enode"}
    enodes = {n: d for n, d in g.nodes(data=True) if d["kind"] == "enode"}
    assert {d["op"] for d in enodes.values()} == {"Input", "Kernel", "Load", "E"}
    labels = {d["label"] for d in enodes.values() if d["op"] == "E"}
    assert {"REDUCE", "SUB", "EXP", "DIV", "EXPAND"} <= labels
    for u, v, d in g.edges(data=True):  # member: class -> e-node; child: e-node -> class
        assert (g.nodes[u]["kind"], g.nodes[v]["kind"]) == (("eclass", "enode") if d["rel"] == "member"
                                                            else ("enode", "eclass"))
    for n, d in enodes.items():
        assert n in g.nodes[d["eclass"]]["members"]
    # every graph node's tensor has a T-class (found through its `Node i` handle)
    named = {i for _, d in g.nodes(data=True) if d["kind"] == "eclass" for i in d["key_nodes"]}
    assert named == set(range(len(softmax_explained.key.nodes)))
    # softmax has fusion choices: some op class holds a Load-reading and a fused e-node
    assert any(d["kind"] == "eclass" and len(d["members"]) > 1 for _, d in g.nodes(data=True))


@pytest.mark.parametrize("name", ["w2_softmax", "w3_layernorm", "w4_mlp"])
def test_chosen_nodes_are_the_searched_plans_boundaries(name):
    from search import plan_search
    from svod import workloads

    w = workloads.get(name)
    out = w.build(**w.tensors(w.make_inputs(w.small_shapes)))
    e = svod.explain(out)
    key, _ = compact([out.uop])
    r = plan_search(key, keep_egraph=True, cost_model=svod.engine.cost_model())
    want = {r.decoded_to_key[o.slot - r.plan.n_inputs] for k in r.plan.kernels for o in k.outputs}
    assert viz.chosen_nodes(e) == want
    assert set(key.outputs) <= want


def test_match_nodes_is_the_identity_on_the_same_graph():
    key, _ = compact([_softmax().uop])
    assert viz.match_nodes(key, key) == {i: i for i in range(len(key.nodes))}


def test_draw_egraph_marks_every_enode_and_the_chosen_classes(softmax_explained):
    from matplotlib.figure import Figure

    e = softmax_explained
    g = viz.egraph_to_networkx(e.egraph_json)
    chosen = viz.chosen_nodes(e)
    fig = viz.draw_egraph(e.egraph_json, chosen=chosen)
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    drawn = [c for c, d in g.nodes(data=True) if d["kind"] == "eclass" and not d.get("const")]  # constants folded
    n_enodes = sum(len(g.nodes[c]["members"]) for c in drawn)
    n_classes = len(drawn)
    assert len([t for t in ax.texts if t.get_text()]) == n_enodes
    assert len(ax.patches) == n_classes
    red = [p for p in ax.patches if p.get_linewidth() > 2]
    hot = {c for c, d in g.nodes(data=True) if d["kind"] == "eclass" and set(d["key_nodes"]) & chosen}
    assert len(red) == len(hot) == 1  # softmax: one kernel, one boundary (its output)
    fig_lr = viz.draw_egraph(e.egraph_json, rankdir="LR")
    assert len(fig_lr.axes[0].patches) == n_classes
    with pytest.raises(ValueError):
        viz.draw_egraph(e.egraph_json, rankdir="TB")
    with pytest.raises(ValueError, match="no e-graph"):
        viz.draw_egraph(None)


# ----------------------------------------------------------------------------- plans


def test_plan_graph_has_kernels_and_slots():
    key, _ = compact([_chain(4).uop])
    plan = plan_greedy(key)
    g = viz.plan_graph(plan)
    kernels = [n for n, d in g.nodes(data=True) if d["kind"] == "kernel"]
    slots = [n for n, d in g.nodes(data=True) if d["kind"] == "slot"]
    assert len(kernels) == len(plan.kernels) == 4
    assert len(slots) == len(plan.slots) == 5  # the input and four written values
    for i, k in enumerate(plan.kernels):
        assert set(g.predecessors(f"k{i}")) == {f"s{x.slot}" for x in k.inputs}
        assert set(g.successors(f"k{i}")) == {f"s{o.slot}" for o in k.outputs}
    roles = sorted(d["role"] for _, d in g.nodes(data=True) if d["kind"] == "slot")
    assert roles == ["input", "output", "temp", "temp", "temp"]
    fig = viz.draw_plan(plan)
    assert len([t for t in fig.axes[0].texts if t.get_text()]) == g.number_of_nodes()


def test_draw_variants_one_bar_per_variant(softmax_explained):
    vs = softmax_explained.variants
    fig = viz.draw_variants(vs)
    assert len(fig.axes[0].patches) == len(vs)


def test_drawing_into_a_given_axes_returns_its_figure():
    from matplotlib.figure import Figure

    fig = Figure()
    ax = fig.add_subplot()
    assert viz.draw_lifetimes(_graph(_chain(3)), ax=ax) is fig


# ----------------------------------------------------------------------------- memory


def test_lifetimes_of_a_materialised_chain():
    g = _graph(_chain(20))
    lts = viz.lifetimes(g)
    assert len(lts) == 20
    assert [lt.role for lt in lts] == ["temp"] * 19 + ["output"]
    assert all(lt.nbytes == 64 * 4 for lt in lts)
    frees = {s.slot: i for i, s in enumerate(g.steps) if isinstance(s, Free)}
    for lt in lts:
        assert lt.start < lt.end
        assert lt.end == frees.get(lt.slot, len(g.steps))
    # tenants of one storage never overlap
    by_storage: dict[int, list] = {}
    for lt in lts:
        by_storage.setdefault(lt.storage, []).append((lt.start, lt.end))
    for spans in by_storage.values():
        spans.sort()
        assert all(a_end < b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:]))
    assert len(by_storage) == 3  # two temps ping-pong, the output has its own
    assert len({lt.storage for lt in viz.lifetimes(_graph(_chain(20), reuse=False))}) == 20


@pytest.mark.parametrize("reuse", [True, False])
def test_memory_curve_peaks_at_peak_bytes(reuse):
    g = _graph(_chain(20), reuse=reuse)
    curve = viz.memory_curve(g)
    assert len(curve) == len(g.steps) + 1
    assert max(curve) == g.peak_bytes
    values = viz.memory_curve(g, "values")
    assert all(v <= s for v, s in zip(values, curve))
    assert max(values) == 2 * 64 * 4  # at most: the value a kernel reads and the one it writes
    with pytest.raises(ValueError):
        viz.memory_curve(g, "bytes")


def test_reuse_lowers_the_peak_of_a_chain():
    assert _graph(_chain(20)).peak_bytes * 5 < _graph(_chain(20), reuse=False).peak_bytes


def test_draw_lifetimes_and_memory():
    g = _graph(_chain(10))
    fig = viz.draw_lifetimes(g)
    ax = fig.axes[0]
    assert len(ax.patches) == len(viz.lifetimes(g))  # one bar per slot
    assert len(ax.get_yticklabels()) == len(set(g.slot_storage.values()))
    fig = viz.draw_memory({"reuse": g, "no reuse": _graph(_chain(10), reuse=False)})
    assert len(fig.axes[0].lines) == 3  # two graphs and the live-value floor


# ----------------------------------------------------------------------------- text


def test_ir_excerpt_keeps_the_entry_and_the_first_vector_code():
    ir = "\n".join(["; ModuleID = 'k'", "declare float @llvm.maximum.f32(float, float)",
                    "define void @svod_k_1(ptr %a) {", "entry:"]
                   + [f"  %s{i} = add i64 {i}, 1" for i in range(50)]
                   + ["  %v = load <8 x float>, ptr %a", "  %w = fadd <8 x float> %v, %v"]
                   + [f"  %t{i} = add i64 {i}, 1" for i in range(50)] + ["}"])
    out = viz.ir_excerpt(ir, max_lines=10).splitlines()
    assert out[0] == "define void @svod_k_1(ptr %a) {"
    assert any("<8 x float>" in ln for ln in out)
    assert len(out) <= 10 + 1
    assert viz.ir_excerpt("", 5) == ""


def test_ir_excerpt_of_a_compiled_kernel(softmax_explained):
    text = viz.ir_excerpt(softmax_explained.ir(0), 20)
    assert text.startswith("define")
    assert " x float>" in text or " x double>" in text


def test_import_viz_does_not_import_matplotlib():
    code = "import sys, svod.viz; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_docstring_examples_run():
    import doctest

    assert doctest.testmod(viz, verbose=False).failed == 0
