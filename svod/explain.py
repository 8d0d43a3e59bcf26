"""`svod.explain(*tensors)`: the plan realize runs for these tensors, where it came from,
and what the fusion search did and why.

>>> import svod
>>> x = svod.asarray([[1.0, 2.0], [3.0, 4.0]])
>>> e = svod.explain(svod.nn.softmax(x))
>>> len(e.kernels), e.report.saturation.stop_reason, e.source
(1, 'saturated', 'search')

The plan shown is the one `realize()` runs: `svod.planner.decide` gives it to both
(memory cache, tuning database, disk cache, or a search with the active cost model,
through the plan passes), so explaining a graph and then realizing it runs the plan
explained. An `Explanation` has that plan (`.plan`, `.kernels`, each kernel's LLVM IR
through `.ir(i)`), where it came from (`.source`, `.detail`) and the cost model
(`.model_name`), the search report (`.report`), the search's variants with their
predicted costs (`.variants`, before the plan passes; `.searched` is the search's own
pick), `str()`, the e-graph as DOT text (`.to_dot()`) and as a picture (`.picture()`:
SVG through graphviz's `dot` when installed, else a PNG drawn with networkx + matplotlib,
else the DOT text). When the plan came from a cache or the tuning database, the report
and the variants come from a search run for the explanation with the same model.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field

from svod.key import GraphKey, compact


@dataclass
class Explanation:
    key: GraphKey
    plan: object  # svod.kernel.Plan: the plan realize() runs (after the plan passes)
    report: object  # search.SearchReport
    variants: list  # search.extract.Variant, cheapest first, before the plan passes
    egraph_json: dict | None = None
    searched: object = None  # the search's own pick (variants[0]'s plan), before the plan passes
    cost_model: object = None  # the model the search priced with
    machine: object = None
    source: str = "search"  # where the plan came from: one of svod.planner.SOURCES
    detail: str = ""  # why a fallback, which planner made a cached plan, provisional
    model_name: str = ""  # the cost model in words (svod.planner.describe_model)
    _programs: dict = field(default_factory=dict)

    @property
    def executed(self):
        """The plan realize() runs (the same as `.plan`; kept for older callers)."""
        return self.plan

    @property
    def kernels(self) -> list:
        return list(self.plan.kernels)

    def ir(self, i: int) -> str:
        """Optimised LLVM IR of kernel i (compiled on demand)."""
        return self._program(i).ir

    def asm(self, i: int) -> str:
        return self._program(i).asm

    def _program(self, i: int):
        if i not in self._programs:
            from svod.codegen.program import compile_kernel

            self._programs[i] = compile_kernel(self.plan.kernels[i])
        return self._programs[i]

    def variants_table(self) -> str:
        lines = [f"{'#':>3} {'kernels':>7}  {'predicted':>12}  {'vs best':>8}  kinds"]
        best = self.variants[0].seconds if self.variants else 0.0
        for i, v in enumerate(self.variants):
            kinds = ", ".join(k.kind for k in v.plan.kernels)
            lines.append(f"{i:>3} {len(v.plan.kernels):>7}  {v.seconds * 1e6:>10.2f}us  "
                         f"{v.seconds / best:>7.2f}x  {kinds}")
        return "\n".join(lines)

    def costs_table(self, min_bytes: int = 1 << 16) -> str:
        """The chosen plan's kernels as the search priced them in the plan: seconds and
        threads, and for each buffer access of at least `min_bytes` its size and reach —
        the bytes the program touches between two uses of that buffer, which decides the
        cache it comes from (`costmodels.reuse`)."""
        from svod.costing import plan_prices

        try:
            from costmodels.reuse import plan_accesses

            accesses = plan_accesses(self.plan)
            prices = plan_prices(self.plan, self.cost_model, self.machine)
        except Exception as e:  # noqa: BLE001 - a table, never a failure of explain
            return f"(no costs: {type(e).__name__}: {e})"
        mb = 1 << 20
        lines = [f"{'kernel':<12} {'predicted':>12} {'threads':>7}  buffers (size, reach)"]
        for k, p, acc in zip(self.plan.kernels, prices, accesses):
            bufs = ", ".join(f"{'writes' if a.write else 'reads'} slot {a.slot} {a.nbytes / mb:.2f} MB "
                             f"(reach {a.reach / mb:.1f} MB)" for a in acc if a.nbytes >= min_bytes)
            lines.append(f"{k.name:<12} {p.seconds * 1e6:>10.2f}us {p.threads:>7}  {bufs or '-'}")
        return "\n".join(lines)

    def __str__(self) -> str:
        where = f"{self.source}{f' ({self.detail})' if self.detail else ''}"
        out = (f"plan from: {where}\ncost model: {self.model_name or getattr(self.cost_model, 'name', 'model')}\n"
               f"{self.report}\n\nchosen {self.plan}\n\ncosts of the chosen plan "
               f"({getattr(self.cost_model, 'name', 'model')}, kernels priced in the plan):\n{self.costs_table()}"
               f"\n\nthe search's variants (cheapest first, before the plan passes):\n{self.variants_table()}")
        if self.searched is not None and _sig(self.searched) != _sig(self.plan):
            if self.source in ("search", "memory cache") and _sig(plan_after_passes(self.searched)) == \
                    _sig(self.plan):
                out += "\n\nthe chosen plan is variant #0 after the plan passes (attention fused: svod.fuse_attention)"
            else:
                out += f"\n\nthe chosen plan is not the search's pick #0: it came from the {self.source}"
        return out

    def _repr_pretty_(self, p, cycle):  # IPython
        p.text(str(self))

    # ------------------------------------------------------------------ pictures
    def to_dot(self, max_nodes: int = 400) -> str:
        """The saturated e-graph as DOT: one cluster per e-class, e-nodes inside."""
        if self.egraph_json is None:
            return "digraph egraph { label=\"e-graph not kept\" }"
        nodes = self.egraph_json["nodes"]
        hidden = ("Node", "Body", "Elementwise", "Movement", "Reduction", "Matmul", "ConstIs")
        keep = {nid: n for nid, n in nodes.items()
                if n["op"] not in hidden and not nid.startswith("primitive") and n["op"][:1].isupper()}
        keep = dict(list(keep.items())[:max_nodes])
        by_class: dict[str, list[str]] = {}
        for nid, n in keep.items():
            by_class.setdefault(n["eclass"], []).append(nid)
        out = ["digraph egraph {", "  compound=true; rankdir=BT; node [shape=box, fontsize=10];"]
        ids = {nid: f"n{i}" for i, nid in enumerate(keep)}
        for ci, (cls, members) in enumerate(by_class.items()):
            out.append(f'  subgraph cluster_{ci} {{ style=dashed; color=gray; label="{cls.split(".")[-1]}";')
            for nid in members:
                n = keep[nid]
                label = n["op"]
                if n["op"] == "E":
                    kids = n["children"]
                    label = f'{nodes[kids[0]]["op"].strip(chr(34))} #{nodes[kids[1]]["op"]}'
                elif n["op"] == "Input":
                    label = f'Input {nodes[n["children"][0]]["op"]}'
                out.append(f'    {ids[nid]} [label="{label}"];')
            out.append("  }")
        for nid, n in keep.items():
            for c in n["children"]:
                if c in ids:
                    out.append(f"  {ids[nid]} -> {ids[c]};")
        out.append("}")
        return "\n".join(out)

    def picture(self, path: str | None = None) -> str:
        """Draw the e-graph; returns the path written (or the DOT text without a drawer)."""
        dot = self.to_dot()
        if shutil.which("dot"):
            path = path or "egraph.svg"
            subprocess.run(["dot", "-Tsvg", "-o", path], input=dot.encode(), check=True)
            return path
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
            import networkx as nx
        except ImportError:
            return dot
        g = nx.DiGraph()
        nodes = (self.egraph_json or {}).get("nodes", {})
        for nid, n in nodes.items():
            if n["op"] in ("E", "Load", "Kernel", "Input"):
                g.add_node(nid, label=n["op"] if n["op"] != "E" else nodes[n["children"][0]]["op"].strip('"'),
                           cls=n["eclass"])
        for nid, n in nodes.items():
            if nid in g:
                for c in n["children"]:
                    # lists are drawn as direct edges from the op to its sources
                    stack = [c]
                    while stack:
                        x = stack.pop()
                        if x in g:
                            g.add_edge(nid, x)
                        elif nodes[x]["op"] == "Cons":
                            stack.extend(nodes[x]["children"])
        classes = sorted({d["cls"] for _, d in g.nodes(data=True)})
        colour = {c: i for i, c in enumerate(classes)}
        fig, ax = plt.subplots(figsize=(10, 8))
        pos = nx.spring_layout(g, seed=0)
        nx.draw_networkx(g, pos, ax=ax, labels=nx.get_node_attributes(g, "label"), node_size=500, font_size=7,
                         node_color=[colour[g.nodes[n]["cls"]] for n in g], cmap="tab20", arrows=True)
        ax.set_title("e-graph (colour = e-class)")
        ax.axis("off")
        path = path or "egraph.png"
        fig.savefig(path, dpi=100, bbox_inches="tight")
        plt.close(fig)
        return path


def _sig(plan) -> tuple:
    return tuple(k.key() for k in plan.kernels) if plan is not None else ()


def plan_after_passes(plan):
    from svod.planner import plan_passes

    return plan_passes(plan)


def explain(*tensors, k: int = 8, cost_model=None, machine=None) -> Explanation:
    """Explain the plan realize() runs for these (unrealized) tensors and the search behind
    it. With `cost_model`, explain instead what the search would choose with that model
    (a plan realize does not run unless that model is the active one)."""
    from svod.tensor import Tensor

    for t in tensors:
        if not isinstance(t, Tensor):
            raise TypeError(f"explain: expected Tensors, got {type(t).__name__}")
    pending = [t.uop for t in tensors if not t.is_realized]
    if not pending:
        raise ValueError("explain: every tensor is already realized; explain them before .numpy()/realize()")
    key, _ = compact(pending)
    return explain_key(key, k=k, cost_model=cost_model, machine=machine)


def explain_key(key: GraphKey, *, k: int = 8, cost_model=None, machine=None) -> Explanation:
    """Explain a compacted graph (what `svod explain FILE.py` uses): the plan
    `svod.planner.decide` gives realize() — searching now if no cache holds one — and the
    search's report and variants with the active cost model. An explicit `cost_model`
    explains that model's search instead (source "search with a given model")."""
    from svod import planner

    planner.import_search()
    from search import plan_search

    if cost_model is not None:
        r = plan_search(key, cost_model=cost_model, machine=machine, k=k, keep_egraph=True)
        return Explanation(key, planner.plan_passes(r.plan), r.report, r.variants or [], r.egraph, r.plan,
                           cost_model, machine, "search with a given model",
                           "not the active model: realize() may run another plan", planner.describe_model(cost_model))
    d = planner.decide(key, k=k, keep_egraph=True)
    model = planner.cost_model()
    r = d.search
    if r is None or r.egraph is None:  # the plan came from a cache: search for the report and the variants
        r = plan_search(key, cost_model=model, machine=machine, k=k, keep_egraph=True)
    plan = d.plan
    if plan is None:  # the whole-graph interpreter: show the search's plan it stands in for
        plan = planner.plan_passes(r.plan)
    return Explanation(key, plan, r.report, r.variants or [], r.egraph, r.plan, model, machine, d.source, d.detail,
                       planner.describe_model(model))
