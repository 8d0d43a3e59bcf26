"""Pictures for notebooks and reports: the e-graph, a plan's kernels and slots, and the
buffer lifetimes and memory curve of a compiled graph.

Everything here works without graphviz's `dot`: layouts are computed in Python (layered,
leaves at the bottom) and drawn with matplotlib, which is imported only when a drawing
function runs. The data functions (`egraph_to_networkx`, `plan_graph`, `lifetimes`,
`memory_curve`, `chosen_nodes`, `ir_excerpt`) need neither and are what tests check.
Drawing functions take an optional matplotlib `ax` and return the `Figure` they drew on
(a bare `matplotlib.figure.Figure`, not a pyplot window: nothing is shown or leaked).

>>> import svod
>>> from svod import viz
>>> from svod.key import compact
>>> from svod.plan_greedy import plan_greedy
>>> from svod.graph import build_graph
>>> x = svod.asarray([[1.0, 2.0], [3.0, 4.0]])
>>> g = build_graph(plan_greedy(compact([svod.nn.softmax(x).uop])[0]))
>>> [(lt.role, lt.nbytes) for lt in viz.lifetimes(g)]
[('output', 16)]
>>> max(viz.memory_curve(g)) == g.peak_bytes
True
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

import networkx as nx

from svod.graph import Allocate, CompiledGraph, Free, Launch, slot_nbytes
from svod.kernel import Plan
from svod.key import GraphKey, KeyNode

# e-node operators drawn: the terms of the language. `Node`/`Body` are handles, the
# relations (`Elementwise`, ...) are facts, primitives and `Cons`/`Nil` are folded away.
_DRAWN = ("Input", "Kernel", "Load", "E")

_KIND_COLOURS = {"elementwise": "#8dd3c7", "reduce": "#fdb462", "rowwise": "#fb8072", "matmul": "#80b1d3",
                 "blas": "#bebada"}
_ROLE_COLOURS = {"input": "#d9d9d9", "temp": "#80b1d3", "output": "#b3de69"}


# ----------------------------------------------------------------------------- e-graph


def _strip(s: str) -> str:
    return s[1:-1] if len(s) >= 2 and s[0] == s[-1] == '"' else s


def egraph_to_networkx(egraph: dict, key: GraphKey | None = None) -> nx.DiGraph:
    """The serialised e-graph (`Explanation.egraph_json`) as a bipartite DiGraph.

    Nodes are e-classes (`kind="eclass"`, `sort` "T" or "F", `members`) and e-nodes
    (`kind="enode"`, `op` one of Input/Kernel/Load/E, `label` (the op), `title` (what
    tells it from the other e-nodes of its class: `div(exp, ld sum)`), `children` (its
    child classes in order, repeats kept), `eclass`, and `node`: the GraphKey node an `E`
    computes or the binding index of an `Input`). Edges go from an
    e-class to each member (`rel="member"`) and from an e-node to each child e-class in
    order (`rel="child"`); the source lists of `E` are flattened. `T`-classes also carry
    `key_nodes`: the GraphKey nodes whose tensor they are (through the `Node i` handles).
    With the GraphKey `key`, titles name reductions by their combining op (`max`, `sum`).
    """
    if not egraph:
        raise ValueError("no e-graph to draw: the plan did not come from an e-graph search (size policy or "
                         "fallback: the greedy planner)")
    nodes = egraph["nodes"]
    by_class: dict[str, list[str]] = defaultdict(list)
    for nid, n in nodes.items():
        by_class[n["eclass"]].append(nid)

    def items(fl_class: str) -> list[str]:
        out: list[str] = []
        seen: set[str] = set()
        c = fl_class
        while c not in seen:  # lists are never unioned: one Cons per class
            seen.add(c)
            cons = next((m for m in by_class[c] if nodes[m]["op"] == "Cons"), None)
            if cons is None:
                break
            head, tail = nodes[cons]["children"]
            out.append(nodes[head]["eclass"])
            c = nodes[tail]["eclass"]
        return out

    g = nx.DiGraph()
    key_nodes: dict[str, list[int]] = defaultdict(list)
    rewritten: dict[str, set[str]] = defaultdict(set)  # class -> the algebra rule sets that rewrote it
    for n in nodes.values():
        if n["op"] == "Node":
            key_nodes[n["eclass"]].append(int(nodes[n["children"][0]]["op"]))
        elif n["op"] == "Rewritten":
            c, name = n["children"]
            rewritten[nodes[c]["eclass"]].add(_strip(nodes[name]["op"]))
    for nid, n in nodes.items():
        op = n["op"]
        if op not in _DRAWN:
            continue
        kids = n["children"]
        node = None
        if op == "E":
            label, node = _strip(nodes[kids[0]]["op"]), int(nodes[kids[1]]["op"])
            children = items(nodes[kids[2]]["eclass"])
        elif op == "Input":
            node = int(nodes[kids[0]]["op"])
            label, children = f"Input {node}", []
        else:
            label, children = op, [nodes[kids[0]]["eclass"]]
        cls = n["eclass"]
        if "kind" not in g.nodes.get(cls, {}):  # new, or so far only seen as a child
            g.add_node(cls, kind="eclass", sort=cls.split("-")[0], members=[], key_nodes=key_nodes.get(cls, []))
        g.nodes[cls]["members"].append(nid)
        g.add_node(nid, kind="enode", op=op, label=label, eclass=cls, node=node, children=list(children))
        g.add_edge(cls, nid, rel="member")
        for c in children:
            g.add_edge(nid, c, rel="child")
    for c in [c for c, d in g.nodes(data=True) if "kind" not in d]:  # a child class with no drawn e-node
        g.nodes[c].update(kind="eclass", sort=c.split("-")[0], members=[], key_nodes=key_nodes.get(c, []))
    for c, d in g.nodes(data=True):
        if d.get("kind") == "eclass":
            d["rewritten"] = tuple(sorted(rewritten.get(c, ())))
    _mark_constants(g)
    _titles(g, key)
    return g


_VIEWS = ("RESHAPE", "EXPAND", "PERMUTE", "SHRINK", "FLIP", "PAD")


def _mark_constants(g: nx.DiGraph) -> None:
    """Set `const` on every e-class: a constant, a view of one, or a kernel or load of
    one (they cost nothing inline and never become a kernel; pictures fold them away)."""
    classes = [c for c, d in g.nodes(data=True) if d.get("kind") == "eclass"]
    const = set()
    changed = True
    while changed:
        changed = False
        for c in classes:
            if c in const:
                continue
            for m in g.nodes[c]["members"]:
                d = g.nodes[m]
                kids = d["children"]
                if (d["op"] == "E" and (d["label"] == "CONST" or (d["label"] in _VIEWS and kids and
                                                                  all(k in const for k in kids)))) or \
                        (d["op"] in ("Kernel", "Load") and kids and kids[0] in const):
                    const.add(c)
                    changed = True
                    break
    for c in classes:
        g.nodes[c]["const"] = c in const


def _op_short(d: dict, key: GraphKey | None) -> str:
    if key is not None and d["label"] == "REDUCE" and d["node"] is not None and d["node"] < len(key.nodes):
        return str(key.nodes[d["node"]].arg[0])
    return d["label"].lower()


def _titles(g: nx.DiGraph, key: GraphKey | None = None) -> None:
    """Give every e-node a `title` that tells it from the other e-nodes of its class:
    an op with how it reads each operand, `div(exp, ld sum)` (`ld`: from memory, through
    a kernel boundary; bare: the operand's expression fused in), `kernel div`, `load exp`."""
    short: dict[str, str] = {}

    def name(c: str, depth: int = 0) -> str:
        if c in short:
            return short[c]
        if g.nodes[c].get("const"):
            return "const"
        members = [g.nodes[m] for m in g.nodes[c].get("members", ())]
        out = "?"
        for want in ("E", "Input", "Kernel", "Load"):
            d = next((d for d in members if d["op"] == want), None)
            if d is None:
                continue
            if want == "E":
                out = _op_short(d, key)
            elif want == "Input":
                out = f"in{d['node']}"
            elif depth < 4 and d["children"]:
                out = ("ld " if want == "Load" else "") + name(d["children"][0], depth + 1)
            break
        short[c] = out
        return out

    for _, d in g.nodes(data=True):
        if d.get("kind") != "enode":
            continue
        kids = d["children"]
        if d["op"] == "E":
            d["title"] = f"{_op_short(d, key)}({', '.join(name(c) for c in kids)})"
        elif d["op"] == "Input":
            d["title"] = d["label"]
        else:
            d["title"] = f"{d['op'].lower()} {name(kids[0]) if kids else ''}".strip()


def egraph_dot(egraph: dict, chosen: Iterable[int] = (), *, max_nodes: int = 400, fold_constants: bool = True,
               key: GraphKey | None = None) -> str:
    """The e-graph as DOT text: a dashed cluster per e-class (green, labelled with the rule
    sets: an F-class an algebra rewrite added to; red, solid: a `T`-class of
    a node in `chosen`), its e-nodes inside labelled by their `title`, an edge from each
    e-node to the first e-node of each child class (inputs at the bottom)."""
    g = egraph_to_networkx(egraph, key)
    chosen = set(chosen)
    classes = [c for c, d in g.nodes(data=True) if d.get("kind") == "eclass" and d["members"] and
               not (fold_constants and d.get("const"))]
    ids: dict[str, str] = {}
    out = ["digraph egraph {", "  compound=true; rankdir=BT; node [shape=box, fontsize=10, fontname=monospace];"]
    for ci, c in enumerate(classes):
        d = g.nodes[c]
        members = [m for m in d["members"] if len(ids) < max_nodes]
        if not members:
            break
        hot = bool(set(d["key_nodes"]) & chosen)
        style = 'style=solid; color="#d62728"; penwidth=2' if hot else "style=dashed; color=gray"
        fill = "#dbe9f6" if d["sort"] == "T" else ("#d8f0d0" if d.get("rewritten") else "#fff5cc")
        label = f"{c} rewritten: {', '.join(d['rewritten'])}" if d.get("rewritten") else c
        out.append(f'  subgraph cluster_{ci} {{ {style}; bgcolor="{fill}"; label="{label}";')
        for m in members:
            ids[m] = f"n{len(ids)}"
            out.append(f'    {ids[m]} [label="{g.nodes[m]["title"]}"];')
        out.append("  }")
    first = {c: ids[g.nodes[c]["members"][0]] for c in classes if g.nodes[c]["members"][0] in ids}
    for m, nid in ids.items():
        for k in dict.fromkeys(g.nodes[m]["children"]):
            if k in first:
                out.append(f"  {nid} -> {first[k]};")
    out.append("}")
    return "\n".join(out)


def match_nodes(decoded: GraphKey, key: GraphKey) -> dict[int, int]:
    """decoded node -> node of `key` with the same operation on the same (matched) sources.

    The search plans a *decoded* graph (the input graph read back from the e-graph,
    renumbered, possibly simplified); this maps it back. Nodes an algebraic rewrite
    changed have no counterpart and are left out."""
    index = {n.encode(): i for i, n in enumerate(key.nodes)}
    out: dict[int, int] = {}
    for d, n in enumerate(decoded.nodes):
        if all(s in out for s in n.src):
            i = index.get(KeyNode(n.op, n.dtype, tuple(out[s] for s in n.src), n.arg, n.shape).encode())
            if i is not None:
                out[d] = i
    return out


def chosen_nodes(explanation) -> set[int]:
    """GraphKey nodes the chosen plan of a `svod.Explanation` writes to memory (the
    outputs of its kernels): the e-classes where extraction picked `Kernel` (the search's
    pick, `.searched`; the lowering's plan passes ran inside it)."""
    plan = getattr(explanation, "searched", None) or explanation.plan
    ext = getattr(explanation.report, "extraction", None)
    decoded = getattr(ext, "key", None)
    back = match_nodes(decoded, explanation.key) if decoded is not None else None
    out: set[int] = set()
    for k in plan.kernels:
        for o in k.outputs:
            d = o.slot - plan.n_inputs
            if back is None:
                out.add(d)
            elif d in back:
                out.add(back[d])
    return out


def _layers(dag: nx.DiGraph) -> dict:
    """Layer per node: 0 for leaves, else the highest child plus the edge's `step`
    (default 1; 0 keeps a node in its child's layer); a cycle shares one layer."""
    cond = nx.condensation(dag)
    member = cond.graph["mapping"]
    step: dict[tuple[int, int], int] = {}
    for u, v, d in dag.edges(data=True):
        a, b = member[u], member[v]
        if a != b:
            step[(a, b)] = max(step.get((a, b), 0), d.get("step", 1))
    level: dict[int, int] = {}
    for c in reversed(list(nx.topological_sort(cond))):
        level[c] = max((level[s] + step[(c, s)] for s in cond.successors(c)), default=0)
    return {n: level[member[n]] for n in dag}


def _order(layers: dict, children: dict, sweeps: int = 4) -> dict:
    """x position per node: rows ordered by the barycentre of their children, then of
    their parents (a few sweeps of the classic Sugiyama heuristic)."""
    rows: dict[int, list] = defaultdict(list)
    for n, lv in layers.items():
        rows[lv].append(n)
    parents: dict = defaultdict(list)
    for p, cs in children.items():
        for c in cs:
            parents[c].append(p)
    pos = {}
    for row in rows.values():
        for i, n in enumerate(row):
            pos[n] = float(i)
    for sweep in range(sweeps):
        order = sorted(rows) if sweep % 2 == 0 else sorted(rows, reverse=True)
        for lv in order:
            nbrs = children if sweep % 2 == 0 else parents
            row = rows[lv]
            bary = {n: (sum(pos[c] for c in nbrs.get(n, ()) if c in pos) / max(len(nbrs.get(n, ())), 1)
                        if nbrs.get(n) else pos[n]) for n in row}
            row.sort(key=lambda n: (bary[n], pos[n]))
            for i, n in enumerate(row):
                pos[n] = float(i)
    return pos


def _figure(ax, size):
    if ax is not None:
        return ax.figure, ax
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, layout="constrained")
    return fig, fig.add_subplot()


def draw_egraph(egraph: dict, *, chosen: Iterable[int] = (), ax=None, title: str | None = None,
                rankdir: str = "BT", max_classes: int = 300, fold_constants: bool = True,
                key: GraphKey | None = None):
    """Draw the e-graph: one dashed box per e-class around its e-nodes, an arrow from
    each e-node to each child e-class; `rankdir="BT"` puts the inputs at the bottom and
    the output on top (tall pictures suit notebooks), `"LR"` inputs left, output right.
    `T`-classes (a materialised tensor: `Input`, `Kernel`) are blue, `F`-classes (an
    in-kernel expression: `Load`, an op) yellow; a `Load` sits in the rank of the tensor
    it reads. An op's class with several e-nodes is a fusion choice: one e-node reads its
    source through `Load` (a kernel boundary), another reads the source's expression
    directly (fused). The `T`-classes of the GraphKey nodes in `chosen` (see
    `chosen_nodes`: where the plan put a kernel boundary) are outlined red.
    Each e-node is labelled by what tells it from the others of its class (`title`:
    `div(exp, ld sum)` reads `sum` from memory); boxes are as wide as their labels, so
    nothing overlaps (a 100+ e-node picture is wide: save it as SVG or PDF and zoom).
    `fold_constants`: constants and their broadcasts are not drawn (operands name them
    `const`). With the GraphKey `key`, reductions are named `max`/`sum`. Returns the
    matplotlib Figure.
    """
    from matplotlib.patches import FancyBboxPatch

    if rankdir not in ("BT", "LR"):
        raise ValueError(f"draw_egraph: rankdir must be 'BT' or 'LR', got {rankdir!r}")
    g = egraph_to_networkx(egraph, key)
    classes = [n for n, d in g.nodes(data=True) if d["kind"] == "eclass" and
               not (fold_constants and d.get("const"))][:max_classes]
    keep = set(classes)
    children = {c: list(dict.fromkeys(k for m in g.nodes[c]["members"] for k in g.successors(m) if k in keep))
                for c in classes}
    cg = nx.DiGraph()
    cg.add_nodes_from(classes)
    for c, ks in children.items():
        loads_only = all(g.nodes[m]["op"] == "Load" for m in g.nodes[c]["members"])
        cg.add_edges_from((c, k, {"step": 0 if loads_only else 1}) for k in ks if k != c)
    layers = _layers(cg)
    order = _order(layers, children)
    ranks: dict[int, list[str]] = defaultdict(list)
    beside: dict[str, str] = {}  # a Load class -> the tensor class it reads, in the same rank
    for c in classes:
        ks = children[c]
        if len(ks) == 1 and ks[0] != c and layers[ks[0]] == layers[c] and \
                all(g.nodes[m]["op"] == "Load" for m in g.nodes[c]["members"]):
            beside[c] = ks[0]
    for c in sorted(classes, key=lambda c: order[c]):
        if c not in beside:
            ranks[layers[c]].append(c)
    for lv, row in ranks.items():  # each Load just left of its tensor: short arrows
        loads: dict[str, list[str]] = defaultdict(list)
        for c, t in beside.items():
            if layers[c] == lv:
                loads[t].append(c)
        ranks[lv] = [x for c in row for x in (*sorted(loads.get(c, ()), key=lambda c: order[c]), c)]
    # layout in (rank, p) space: e-nodes side by side along p inside their class's box
    tall = rankdir == "BT"
    R, P, GAP = (1.0, 1.4, 0.4) if tall else (2.2, 0.5, 0.35)  # rank pitch, e-node pitch, gap between boxes
    HALF = 0.3 if tall else 0.92  # half the box's thickness across p
    if not tall:  # labels run along the rank axis: widen the ranks to the longest label
        R = max(R, max((0.12 * len(g.nodes[m]["title"]) + 0.5 for c in classes for m in g.nodes[c]["members"]),
                       default=R))
        HALF = R * 0.42
    # NOTE: at 7 pt a character is ~0.06 in, 0.12 data units at the 0.5 in per unit below
    pitch = {m: (max(P, 0.12 * len(g.nodes[m]["title"]) + 0.35) if tall else P)
             for c in classes for m in g.nodes[c]["members"]}
    span: dict[str, tuple[float, float, float]] = {}  # class -> (rank coordinate, p0, p1)
    at: dict[str, tuple[float, float]] = {}
    width = {c: max(sum(pitch[m] for m in g.nodes[c]["members"]), P) for c in classes}
    widest = max((sum(width[c] + GAP for c in row) for row in ranks.values()), default=1.0)
    for lv, row in ranks.items():
        p = (widest - sum(width[c] + GAP for c in row)) / 2
        for c in row:
            span[c] = (lv * R, p, p + width[c])
            q = p
            for m in g.nodes[c]["members"]:
                at[m] = (lv * R, q + pitch[m] / 2)
                q += pitch[m]
            p += width[c] + GAP

    def xy(r: float, p: float) -> tuple[float, float]:
        return (p, r) if tall else (r, widest - p)

    n_ranks = max(ranks, default=0) + 1
    # one data unit is 0.5 in across the ranks (labels must fit), 0.55 in along them (tall)
    size = ((min(max(5.0, widest * 0.5), 80.0), min(max(2.5, n_ranks * 0.55), 60.0)) if tall else
            (min(max(6.0, n_ranks * R * 0.5), 80.0), min(max(3.0, widest * 0.45), 40.0)))
    fig, ax = _figure(ax, size)
    chosen = set(chosen)
    chosen_classes = {c for c in classes if set(g.nodes[c]["key_nodes"]) & chosen}
    for c in classes:
        r, p0, p1 = span[c]
        hot = c in chosen_classes
        (x0, y0), (x1, y1) = xy(r - HALF, p0 + 0.04), xy(r + HALF, p1 - 0.04)
        ax.add_patch(FancyBboxPatch((min(x0, x1), min(y0, y1)), abs(x1 - x0), abs(y1 - y0), boxstyle="round,pad=0.02",
                                    linestyle="-" if hot else "--", linewidth=2.2 if hot else 0.8,
                                    edgecolor="#d62728" if hot else "#777777",
                                    facecolor="#dbe9f6" if g.nodes[c]["sort"] == "T" else
                                    ("#d8f0d0" if g.nodes[c].get("rewritten") else "#fff5cc"), zorder=1))
    for c in classes:
        for m in g.nodes[c]["members"]:
            d = g.nodes[m]
            r, p = at[m]
            ax.text(*xy(r, p), d["title"], ha="center", va="center", fontsize=7, zorder=3,
                    fontweight="bold" if d["op"] == "Kernel" and c in chosen_classes else "normal")
            for k in g.successors(m):
                if k not in span:
                    continue
                kr, kp0, kp1 = span[k]
                if kr < r:  # the usual case: a child in a lower rank
                    src, dst, bend = xy(r - HALF, p), xy(kr + HALF, min(max(p, kp0 + 0.2), kp1 - 0.2)), 0.0
                elif kr == r and k != c:  # a Load beside the tensor it reads
                    near = kp0 if kp0 > p else kp1
                    src, dst, bend = xy(r, p + (0.45 * P if kp0 > p else -0.45 * P)), xy(r, near), 0.0
                else:  # a cycle (an exact rewrite unioned a value with its own operand)
                    src, dst, bend = xy(r + HALF, p), xy(kr + HALF, (kp0 + kp1) / 2), 0.6
                ax.annotate("", xy=dst, xytext=src, zorder=2,
                            arrowprops=dict(arrowstyle="-|>", lw=0.5, color="#555555", shrinkA=0, shrinkB=0,
                                            connectionstyle=f"arc3,rad={bend}"))
    (x0, y0), (x1, y1) = xy(-R / 2, -0.2), xy((n_ranks - 1) * R + R / 2, widest + 0.2)
    ax.set_xlim(min(x0, x1), max(x0, x1))
    ax.set_ylim(min(y0, y1), max(y0, y1))
    ax.axis("off")
    n_enodes = sum(len(g.nodes[c]["members"]) for c in classes)
    ax.set_title(title or f"e-graph: {len(classes)} e-classes, {n_enodes} e-nodes\n"
                          "blue: tensor (T), yellow: expression (F), green: rewritten by algebra, "
                          "red: chosen boundary", fontsize=9)
    return fig


# ----------------------------------------------------------------------------- plans


def plan_graph(plan: Plan) -> nx.DiGraph:
    """A plan as a DiGraph of kernels and slots: `k<i>` nodes (`kind="kernel"`, `name`,
    `kernel_kind`, `label`) and `s<slot>` nodes (`kind="slot"`, `role`, `shape`, `dtype`,
    `nbytes`); edges slot -> kernel (reads) and kernel -> slot (writes)."""
    g = nx.DiGraph()
    for s, info in plan.slots.items():
        n = 1
        for d in info.shape:
            n *= d
        shape = "x".join(map(str, info.shape)) or "scalar"
        g.add_node(f"s{s}", kind="slot", slot=s, role=info.role, shape=info.shape, dtype=info.dtype.name,
                   nbytes=n * info.dtype.itemsize, label=f"slot {s}\n{shape}")
    for i, k in enumerate(plan.kernels):
        g.add_node(f"k{i}", kind="kernel", name=k.name, kernel_kind=k.kind, index=i,
                   label=f"{k.name}\n[{k.kind}]" + (f" {k.passes} passes" if k.passes > 1 else ""))
        for inp in k.inputs:
            g.add_edge(f"s{inp.slot}", f"k{i}")
        for o in k.outputs:
            g.add_edge(f"k{i}", f"s{o.slot}")
    return g


def draw_plan(plan: Plan, *, ax=None, title: str | None = None):
    """Kernels (boxes, coloured by kind) and the slots they read and write (rounded,
    coloured by role: input grey, temp blue, output green), left to right."""
    g = plan_graph(plan)
    layers = {n: i for i, gen in enumerate(nx.topological_generations(g)) for n in gen}
    for n in g:  # inputs just left of their first reader, not all in the first column
        if g.in_degree(n) == 0 and g.out_degree(n):
            layers[n] = min(layers[k] for k in g.successors(n)) - 1
    order = _order({n: -lv for n, lv in layers.items()}, {n: list(g.predecessors(n)) for n in g})
    rows: dict[int, list] = defaultdict(list)
    for n in sorted(g, key=lambda n: order[n]):
        rows[layers[n]].append(n)
    tall = max((len(r) for r in rows.values()), default=1)
    pos = {n: (lv * 2.2, (len(row) - 1) / 2 - j) for lv, row in rows.items() for j, n in enumerate(row)}
    fig, ax = _figure(ax, (min(max(5.0, 1.4 * len(rows)), 40.0), min(max(2.5, 1.1 * tall), 20.0)))
    for u, v in g.edges:
        ax.annotate("", xy=pos[v], xytext=pos[u], zorder=1,
                    arrowprops=dict(arrowstyle="-|>", lw=0.8, color="#555555", shrinkA=22, shrinkB=22))
    for n, d in g.nodes(data=True):
        x, y = pos[n]
        if d["kind"] == "kernel":
            style = dict(boxstyle="square,pad=0.4", facecolor=_KIND_COLOURS.get(d["kernel_kind"], "white"))
        else:
            style = dict(boxstyle="round,pad=0.3", facecolor=_ROLE_COLOURS.get(d["role"], "white"))
        ax.text(x, y, d["label"], ha="center", va="center", fontsize=7, zorder=2, bbox=style)
    ax.set_xlim(-1.2, 2.2 * (len(rows) - 1) + 1.2)
    ax.set_ylim(-(tall - 1) / 2 - 0.8, (tall - 1) / 2 + 0.8)
    ax.axis("off")
    ax.set_title(title or f"plan: {len(plan.kernels)} kernel(s)", fontsize=9)
    return fig


def draw_variants(variants, *, ax=None, title: str | None = None, limit: int = 40):
    """Predicted cost of each variant (objects with `.seconds` and `.plan`: search
    `Variant`s or oracle `Cover`s), cheapest first; the kernel count is written on each
    bar; bar 0 (the chosen one when the list comes from the search) is highlighted."""
    vs = list(variants)[:limit]
    fig, ax = _figure(ax, (min(max(5.0, 0.35 * len(vs) + 2), 16.0), 3.2))
    unit, scale = ("ms", 1e3) if vs and max(v.seconds for v in vs) >= 5e-3 else ("µs", 1e6)
    bars = ax.bar(range(len(vs)), [v.seconds * scale for v in vs],
                  color=["#d62728" if i == 0 else "#80b1d3" for i in range(len(vs))])
    for b, v in zip(bars, vs):
        ax.text(b.get_x() + b.get_width() / 2, b.get_height(), str(len(v.plan.kernels)), ha="center",
                va="bottom", fontsize=7)
    ax.set_xlabel("variant (cheapest first; number on bar = kernels)")
    ax.set_ylabel(f"predicted {unit}")
    ax.set_title(title or f"{len(vs)} fusion variant(s) priced by the cost model", fontsize=9)
    return fig


# ----------------------------------------------------------------------------- memory


@dataclass(frozen=True)
class Lifetime:
    """One slot's tenancy of a storage: written from step `start`, dead after `end`."""

    slot: int
    storage: int
    nbytes: int
    role: str  # "temp" | "output"
    start: int  # index of its Allocate step
    end: int  # index of its Free step (len(steps) for outputs: they outlive the graph)
    writer: str  # name of the kernel that writes it ("copy" for a Copy step)


def lifetimes(g: CompiledGraph) -> list[Lifetime]:
    """Every written slot's lifetime in `g`, in allocation order (inputs are the
    caller's: not in `g`'s storage, not listed)."""
    start: dict[int, int] = {}
    end: dict[int, int] = {}
    writer: dict[int, str] = {}
    for i, s in enumerate(g.steps):
        if isinstance(s, Allocate):
            start[s.slot] = i
        elif isinstance(s, Free):
            end[s.slot] = i
        elif isinstance(s, Launch):
            for o in g.plan.kernels[s.kernel].outputs:
                writer.setdefault(o.slot, g.plan.kernels[s.kernel].name)
    outs = {s for s, _ in g.plan.outputs}
    return [Lifetime(slot, g.slot_storage[slot], slot_nbytes(g.plan, slot),
                     "output" if slot in outs else "temp", i, end.get(slot, len(g.steps)), writer.get(slot, "copy"))
            for slot, i in start.items()]


def memory_curve(g: CompiledGraph, what: str = "storage") -> list[int]:
    """Bytes held at each step 0..len(steps) (entry i: while step i runs).

    `what="storage"`: the storages of the memory plan — with reuse a storage is held from
    its first Allocate to the Free of its last tenant, without reuse until the graph ends
    (so `max(curve) == g.peak_bytes` either way). `what="values"`: bytes of live values
    only, the floor any memory plan could reach without splitting buffers."""
    n = len(g.steps)
    curve = [0] * (n + 1)
    if what == "values":
        spans = [(lt.start, lt.end, lt.nbytes) for lt in lifetimes(g)]
    elif what == "storage":
        first: dict[int, int] = {}
        last: dict[int, int] = {}
        for i, s in enumerate(g.steps):
            if isinstance(s, Allocate):
                first.setdefault(s.storage, i)
                last[s.storage] = n
            elif isinstance(s, Free) and g.reuse:
                last[g.slot_storage[s.slot]] = i
        spans = [(first[st], last[st], g.storage_bytes[st]) for st in first]
    else:
        raise ValueError(f"memory_curve: what must be 'storage' or 'values', got {what!r}")
    for a, b, nb in spans:
        for i in range(a, b + 1):
            curve[i] += nb
    return curve


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover


def draw_lifetimes(g: CompiledGraph, *, ax=None, title: str | None = None):
    """The buffer-lifetime timeline: one row per storage, one bar per slot living in
    it (from its Allocate to its Free step), coloured by role; grey ticks mark the
    Launch steps. With reuse several slots take turns in one row."""
    lts = lifetimes(g)
    storages = sorted({lt.storage for lt in lts})
    row = {st: i for i, st in enumerate(storages)}
    size = (min(max(6.0, 0.12 * len(g.steps) + 3), 18.0), min(max(2.0, 0.3 * len(storages) + 1.2), 14.0))
    fig, ax = _figure(ax, size)
    for i, s in enumerate(g.steps):
        if isinstance(s, Launch):
            ax.axvline(i, color="#eeeeee", lw=0.8, zorder=0)
    for lt in lts:
        y = row[lt.storage]
        ax.barh(y, lt.end - lt.start + 0.8, left=lt.start - 0.4, height=0.7, color=_ROLE_COLOURS[lt.role],
                edgecolor="#333333", linewidth=0.5, zorder=2)
        if lt.end - lt.start >= 3:
            small = lt.nbytes < g.storage_bytes[lt.storage]  # a tenant smaller than its storage
            text = f"slot {lt.slot}" + (f" ({_fmt_bytes(lt.nbytes)})" if small else "")
            ax.text((lt.start + lt.end) / 2, y, text, ha="center", va="center", fontsize=6, zorder=3)
    ax.set_yticks(range(len(storages)))
    ax.set_yticklabels([f"storage {st} ({_fmt_bytes(g.storage_bytes[st])})" for st in storages], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("step (Allocate / Copy / Launch / Free)")
    ax.set_xlim(-1, len(g.steps) + 1)
    ax.set_title(title or f"buffer lifetimes: {len(lts)} slot(s) in {len(storages)} storage(s), peak "
                          f"{_fmt_bytes(g.peak_bytes)}{'' if g.reuse else ' (no reuse)'}", fontsize=9)
    return fig


def draw_memory(graphs: dict, *, ax=None, title: str | None = None):
    """Bytes held per step for each compiled graph in `graphs` (label -> CompiledGraph),
    plus the live-value floor of the first one (dotted)."""
    fig, ax = _figure(ax, (7.0, 3.0))
    first = None
    for label, g in graphs.items():
        first = first if first is not None else g
        curve = memory_curve(g)
        ax.step(range(len(curve)), curve, where="post", label=f"{label} (peak {_fmt_bytes(g.peak_bytes)})")
    if first is not None:
        floor = memory_curve(first, "values")
        ax.step(range(len(floor)), floor, where="post", linestyle=":", color="black",
                label=f"live values ({next(iter(graphs))})")
    from matplotlib.ticker import FuncFormatter

    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _fmt_bytes(v)))
    ax.set_xlabel("step")
    ax.set_ylabel("bytes held")
    ax.legend(fontsize=7)
    ax.set_title(title or "memory held while the graph runs", fontsize=9)
    return fig


# ----------------------------------------------------------------------------- text


def ir_excerpt(ir: str, max_lines: int = 30) -> str:
    """The interesting part of a kernel's LLVM IR: the kernel's `define` line and a
    window around its first vector instruction (`<N x type>`), at most `max_lines`."""
    lines = ir.splitlines()
    define = next((i for i, ln in enumerate(lines) if ln.startswith("define") and "svod_k_" in ln),
                  next((i for i, ln in enumerate(lines) if ln.startswith("define")), None))
    if define is None:
        return "\n".join(lines[:max_lines])
    vec = re.compile(r"= .*<\d+ x (float|double|i\d+)>")
    first = next((i for i in range(define, len(lines)) if vec.search(lines[i])), define + 1)
    lo = max(define + 1, first - 3)
    body = lines[lo:lo + max_lines - 2]
    head = [lines[define], "  ..." if lo > define + 1 else None]
    return "\n".join([h for h in head if h is not None] + body + (["  ..."] if lo + len(body) < len(lines) else []))
