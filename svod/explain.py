"""`svod.explain(*tensors)`: what the fusion search did for these tensors and why.

>>> import svod
>>> x = svod.asarray([[1.0, 2.0], [3.0, 4.0]])
>>> e = svod.explain(svod.nn.softmax(x))
>>> len(e.kernels), e.report.saturation.stop_reason
(1, 'saturated')

An `Explanation` has the chosen plan (`.plan`, `.kernels`, each kernel's LLVM IR through
`.ir(i)`), the search report (`.report`), the rejected variants with their predicted
costs (`.variants`), `str()`, the e-graph as DOT text (`.to_dot()`) and as a picture
(`.picture()`: SVG through graphviz's `dot` when installed, else a PNG drawn with
networkx + matplotlib, else the DOT text).
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field

from svod.key import GraphKey, compact


@dataclass
class Explanation:
    key: GraphKey
    plan: object  # svod.kernel.Plan
    report: object  # search.SearchReport
    variants: list  # search.extract.Variant, cheapest first (the chosen plan is variants[0])
    egraph_json: dict | None = None
    executed: object = None  # the plan realize() runs: `plan` after attention fusion (svod.fuse_attention)
    cost_model: object = None  # the model the search priced with
    machine: object = None
    _programs: dict = field(default_factory=dict)

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
        out = (f"{self.report}\n\nchosen {self.plan}\n\ncosts of the chosen plan "
               f"({getattr(self.cost_model, 'name', 'model')}, kernels priced in the plan):\n{self.costs_table()}"
               f"\n\nvariants (cheapest first; #0 is chosen):\n{self.variants_table()}")
        if self.executed is not None and self.executed is not self.plan:
            out += f"\n\nrealize() runs it with attention fused (svod.fuse_attention): {self.executed}"
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


def explain(*tensors, k: int = 8, cost_model=None, machine=None) -> Explanation:
    """Run the search for these (unrealized) tensors and explain its choice."""
    from svod.engine import _import_search
    from svod.tensor import Tensor

    for t in tensors:
        if not isinstance(t, Tensor):
            raise TypeError(f"explain: expected Tensors, got {type(t).__name__}")
    pending = [t.uop for t in tensors if not t.is_realized]
    if not pending:
        raise ValueError("explain: every tensor is already realized; explain them before .numpy()/realize()")
    _import_search()
    from svod.engine import cost_model as default_model

    key, _ = compact(pending)
    return explain_key(key, k=k, cost_model=cost_model or default_model(), machine=machine)


def explain_key(key: GraphKey, *, k: int = 8, cost_model=None, machine=None) -> Explanation:
    """Explain the search of a compacted graph (what `svod explain FILE.py` uses)."""
    from svod.engine import _import_search

    _import_search()
    from search import plan_search
    from svod.engine import fuse_plan

    r = plan_search(key, cost_model=cost_model, machine=machine, k=k, keep_egraph=True)
    return Explanation(key, r.plan, r.report, r.variants or [], r.egraph, fuse_plan(r.plan), cost_model, machine)
