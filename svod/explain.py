"""`svod.explain(*tensors)`: the plan realize runs for these tensors, where it came from,
and what the fusion search did and why.

>>> import svod
>>> x = svod.asarray([[1.0, 2.0], [3.0, 4.0]])
>>> e = svod.explain(svod.nn.softmax(x))
>>> len(e.kernels), e.report.saturation.stop_reason, e.source
(1, 'saturated', 'search')

The plan shown is the one `realize()` runs: `svod.planner.decide` gives it to both
(memory cache, tuning database, disk cache, or a search with the active cost model), so
explaining a graph and then realizing it runs the plan explained. An `Explanation` has
that plan (`.plan`, `.kernels`, each kernel's LLVM IR through `.ir(i)`), where it came
from (`.source`, `.detail`) and the cost model (`.model_name`), the search report
(`.report`), the search's variants with their predicted costs (`.variants`; `.searched`
is the search's own pick, the one the e-graph pictures mark; every variant is a plan
through the lowering's plan passes, attention fusion included, so what is priced is what
would run), why each kernel boundary is one (`.why_not_fused()`, `svod.boundaries`),
`str()`, the e-graph as DOT text (`.to_dot()`), as a picture (`.picture()`: SVG through
graphviz's `dot` when installed, else svod's layered layout drawn with matplotlib) and
in the interactive viewer (`.show()`: a notebook widget, or a page on 127.0.0.1 in the
browser; `svod.viewer`). When the plan came from a cache or the tuning database, the
report and the variants come from a search run for the explanation with the same model.
`.shapes` says whether the key has exact shapes or a size bucket of a dynamic structure,
and why that structure was planned again (`svod.shapes`: a second row count, a new
bucket); a dynamic size is explained with its bucket's plan, the one realize runs.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field

from svod.key import GraphKey, compact


@dataclass
class Explanation:
    key: GraphKey
    plan: object  # svod.kernel.Plan: the plan realize() runs
    report: object  # search.SearchReport
    variants: list  # search.extract.Variant, cheapest first
    egraph_json: dict | None = None
    searched: object = None  # the search's own pick (variants[0]'s plan)
    cost_model: object = None  # the model the search priced with
    machine: object = None
    source: str = "search"  # where the plan came from: one of svod.planner.SOURCES
    detail: str = ""  # why a fallback, which planner made a cached plan, provisional
    model_name: str = ""  # the cost model in words (svod.planner.describe_model)
    sources: dict = field(default_factory=dict)  # node of `key` -> "file.py:LINE: code" (svod.sources)
    shapes: str = ""  # why this key: exact shapes or a size bucket, and why re-planned (svod.shapes)
    program: object = None  # search.extract.Decoded: the program the search chose (after its rewrites):
    # its GraphKey, fusible edges and node map, which why-not-fused and the viewer read
    _programs: dict = field(default_factory=dict)

    @property
    def origin(self) -> str:
        """"tuned" when the plan realize runs is `svod tune`'s choice (from the tuning
        database, directly or through the memory cache), else "search"."""
        return "tuned" if "tuning database" in (self.source, self.detail.replace("planned by ", "")) else "search"

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
        """The variants, cheapest first: each kernel by its ops (`svod.boundaries`)."""
        from svod.boundaries import describe_plan

        lines = [f"{'#':>3} {'kernels':>7}  {'predicted':>12}  {'vs best':>8}  kernels by their ops"]
        best = self.variants[0].seconds if self.variants else 0.0
        for i, v in enumerate(self.variants):
            lines.append(f"{i:>3} {len(v.plan.kernels):>7}  {v.seconds * 1e6:>10.2f}us  "
                         f"{v.seconds / best:>7.2f}x  {describe_plan(v.plan)}")
        return "\n".join(lines + self.kinds_lines())

    def kinds_lines(self) -> list[str]:
        """One line per kernel kind (`svod.lower.build.KIND_NAMES`, search/kinds.py) among
        the variants: its cheapest variant's price against the cheapest variant without
        it, and whether the chosen plan uses it."""
        from svod.lower.build import KIND_NAMES

        out = []
        chosen = {k.kind for k in self.plan.kernels}
        for name in KIND_NAMES:
            has = [v for v in self.variants if any(k.kind == name for k in v.plan.kernels)]
            if not has:
                continue
            without = [v for v in self.variants if all(k.kind != name for k in v.plan.kernels)]
            other = (f"{without[0].seconds * 1e6:.2f}us without it ({without[0].seconds / has[0].seconds:.2f}x)"
                     if without else "no variant without it")
            out.append(f"kernel kind {name}: {'chosen' if name in chosen else 'not chosen'}; "
                       f"{has[0].seconds * 1e6:.2f}us with it, {other}")
        return out

    def bare_products(self) -> list[str]:
        """One line per product of the plan with no epilogue: whether the BLAS step or svod's
        generated GEMM runs it, and why (`svod.costing.bare_matmul_choice`)."""
        from svod.costing import bare_matmul_lines

        return bare_matmul_lines(self.plan)

    def why_not_fused(self) -> list:
        """Every kernel boundary of the chosen plan with its reason (`svod.boundaries`)."""
        from svod.boundaries import why_not_fused

        return why_not_fused(self)

    def show(self, **kw):
        """The interactive viewer: a widget in a notebook, else a page on 127.0.0.1
        opened in the browser (`svod.viewer_serve.show`)."""
        from svod.viewer_serve import show

        return show(self, **kw)

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

    @property
    def rewrites(self) -> list:
        """The algebraic rewrites the chosen program uses (`search.Rewrite`: which rule
        sets turned which node into what; docs/algebra.md)."""
        return list(getattr(self.report, "rewrites", None) or [])

    def __str__(self) -> str:
        where = f"{self.source}{f' ({self.detail})' if self.detail else ''}"
        shapes = f"shapes: {self.shapes}\n" if self.shapes else ""
        model = self.model_name or getattr(self.cost_model, "name", "model")
        out = (f"{shapes}plan from: {where}\ncost model: {model}\n"
               f"{self.report}\n\nchosen {self.plan}\n\ncosts of the chosen plan "
               f"({getattr(self.cost_model, 'name', 'model')}, kernels priced in the plan):\n{self.costs_table()}"
               f"\n\nthe search's variants (cheapest first):\n{self.variants_table()}")
        bare = self.bare_products()
        if bare:
            out += "\n\nproducts without an epilogue (the BLAS step or the generated GEMM, by price):\n" + \
                "\n".join(bare)
        if self.searched is not None and _sig(self.searched) != _sig(self.plan):
            out += f"\n\nthe chosen plan is not the search's pick #0: it came from the {self.source}"
        from svod.boundaries import format_boundaries

        try:
            why = format_boundaries(self.why_not_fused())
            out += f"\n\nwhy not fused (each kernel boundary and its reason):\n{why}"
        except Exception as e:  # noqa: BLE001 - a section, never a failure of explain
            out += f"\n\nwhy not fused: (not available: {type(e).__name__}: {e})"
        return out

    def _repr_pretty_(self, p, cycle):  # IPython
        p.text(str(self))

    # ------------------------------------------------------------------ pictures
    def to_dot(self, max_nodes: int = 400) -> str:
        """The saturated e-graph as DOT: one cluster per e-class, e-nodes inside, labelled
        by what tells them apart (`svod.viz.egraph_dot`)."""
        from svod.viz import chosen_nodes, egraph_dot

        if self.egraph_json is None:
            return "digraph egraph { label=\"e-graph not kept\" }"
        return egraph_dot(self.egraph_json, chosen_nodes(self), max_nodes=max_nodes)

    def picture(self, path: str | None = None) -> str:
        """Draw the e-graph; returns the path written: SVG through graphviz's `dot` when it
        is installed, else svod's layered layout (`svod.viz.draw_egraph`) as PNG, SVG or
        PDF by the path's suffix (default egraph.png)."""
        if shutil.which("dot"):
            path = path or "egraph.svg"
            subprocess.run(["dot", "-Tsvg", "-o", path], input=self.to_dot().encode(), check=True)
            return path
        from svod.viz import chosen_nodes, draw_egraph

        path = path or "egraph.png"
        if self.egraph_json is None:
            raise ValueError("picture: this explanation kept no e-graph (the plan came from the greedy planner)")
        draw_egraph(self.egraph_json, chosen=chosen_nodes(self), key=self.key).savefig(path, dpi=110,
                                                                                        bbox_inches="tight")
        return path


def _sig(plan) -> tuple:
    return tuple(k.key() for k in plan.kernels) if plan is not None else ()


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
        raise ValueError("explain: every tensor is already realized; explain them before .numpy()/realize() "
                         "(small ops on realized values run eagerly in svod.numpy: build the graph under "
                         "`with svod.eager_mode(False):` to see its plan; docs/semantics.md, 'Eager small work')")
    from svod.viewfold import fold_now
    from svod.writes import explained

    roots, written = explained(pending)
    if roots is pending:
        key, _ = compact(pending)
    else:
        with fold_now():  # as realize compacts a region write's value (svod.writes.run)
            key, _ = compact(roots)
    from svod.shapes import DYNAMIC

    dyn, shapes = DYNAMIC.peek(key)
    if dyn is not None:  # realize runs this size in its bucket's plan (svod.shapes)
        key = dyn.key
    from svod.recompiles import RECOMPILES

    replanned = RECOMPILES.describe(key)  # before explain_key plans it (svod.recompiles)
    e = explain_key(key, k=k, cost_model=cost_model, machine=machine)
    if cost_model is None and e.source != "memory cache":  # planned here: the realize that follows will not
        RECOMPILES.note(key, e.source)
    e.shapes = f"{shapes}\n{replanned}" + (f"\n{written}" if written else "")
    from svod.sources import key_sources

    e.sources = key_sources(pending, text=True)  # empty unless svod.sources.record() was on
    return e


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
        return Explanation(key, r.plan, r.report, r.variants or [], r.egraph, r.plan,
                           cost_model, machine, "search with a given model",
                           "not the active model: realize() may run another plan", planner.describe_model(cost_model),
                           program=r.program)
    d = planner.decide(key, k=k, keep_egraph=True)
    model = planner.cost_model()
    r = d.search
    if r is None or r.egraph is None:  # the plan came from a cache: search for the report and the variants
        r = plan_search(key, cost_model=model, machine=machine, k=k, keep_egraph=True)
    plan = d.plan
    if plan is None:  # the whole-graph interpreter: show the search's plan it stands in for
        plan = r.plan
    return Explanation(key, plan, r.report, r.variants or [], r.egraph, r.plan, model, machine, d.source, d.detail,
                       planner.describe_model(model), program=r.program)
