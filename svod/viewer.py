"""The interactive viewer's data: an explained graph as one JSON document.

The viewer (`svod viz FILE.py`, `svod.explain(...).show()`) draws the e-graph with
egglog's own visualizer (egraph-visualizer: React Flow + ELK, shipped inside the egglog
package, no network) and puts svod's layer beside it (`svod/viewer_static/viewer.js`):
a slider steps through saturation, a click on an e-class lists its alternatives with the
kernels and prices of the variants that use each, the chosen plan is outlined, a kernel
jumps to its ops and source lines, a boundary tells why it is not fused, "focus" shows
one kernel's region of the e-graph and "show all" the whole again. This module builds
the JSON; `svod.viewer_serve` serves it, or wraps it in a notebook widget.

The e-graph handed to the visualizer is svod's language with the plumbing left out:
e-nodes `Input`, `Kernel`, `Load` and `E` only (lists flattened, `Node`/`Body` handles,
relations and primitives dropped, constants folded into their consumers), classes
renamed by what they hold — `T7` node 7's value in memory, `F7` its expression, `L7` a
load of it — and e-nodes labelled so that the members of a class differ:
`div(exp, ld sum)` reads `sum` from memory (a boundary) and `exp` fused.

>>> import svod
>>> e = svod.explain(svod.nn.softmax(svod.asarray([[1.0, 2.0], [3.0, 4.0]])))
>>> v = build(e)
>>> len(v["snapshots"]) >= 2, v["kernels"][0]["ops"]
(True, 'max·sub·exp·sum·div')
"""

from __future__ import annotations

import json

from svod.boundaries import (
    describe_plan,
    kernel_nodes,
    kernel_ops,
    materialized,
    node_label,
    op_name,
    plan_difference,
    why_not_fused,
)
from svod.key import GraphKey

FORMAT = 1


def _class_names(g, key: GraphKey | None) -> dict[str, str]:
    """egglog class id -> T<i> / F<i> / L<i> (see the module docstring), unique."""
    names: dict[str, str] = {}
    used: set[str] = set()

    def give(c: str, name: str) -> None:
        base, k = name, 2
        while name in used:
            name, k = f"{base}_{k}", k + 1
        used.add(name)
        names[c] = name

    order = []
    for c, d in g.nodes(data=True):
        if d.get("kind") != "eclass":
            continue
        members = [g.nodes[m] for m in d["members"]]
        if d["sort"] == "T" or any(m["op"] in ("Input", "Kernel") for m in members):
            nodes = list(d["key_nodes"]) or [m["node"] for m in members if m["op"] == "Input" and m["node"] is not None]
            if any(m["op"] == "Input" for m in members) and key is not None:
                k = next(m["node"] for m in members if m["op"] == "Input")
                nodes = [i for i in key.inputs if key.nodes[i].arg[0] == k] or nodes
            order.append((0, min(nodes) if nodes else 1 << 30, c, "T"))
        elif any(m["op"] == "E" for m in members):
            order.append((1, min(m["node"] for m in members if m["op"] == "E"), c, "F"))
        else:
            order.append((2, 1 << 30, c, "L"))
    for _, i, c, kind in sorted(order, key=lambda t: (t[0], t[1], t[2])):
        if kind != "L":
            give(c, f"{kind}{i}" if i < 1 << 30 else f"{kind}?")
    for _, _, c, kind in order:
        if kind == "L":
            d = g.nodes[c]
            load = next((g.nodes[m] for m in d["members"] if g.nodes[m]["op"] == "Load"), None)
            target = names.get(load["children"][0], "?") if load and load["children"] else "?"
            give(c, "L" + target[1:])
    return names


def _node_of(name: str) -> int | None:
    try:
        return int(name[1:].split("_")[0])
    except ValueError:
        return None


def visualizer_json(egraph: dict, key: GraphKey | None = None, sources: dict[int, str] | None = None,
                    fold_constants: bool = True) -> tuple[dict, dict[str, str], object]:
    """(the e-graph in the visualizer's format, egglog class -> svod class name, the
    `svod.viz.egraph_to_networkx` graph). The format is egglog's serialisation:
    `nodes{id: {op, children, eclass, cost}}` and `class_data{class: {type, extra...}}`
    (the visualizer colours classes by `type` and prints the extra fields)."""
    from svod.viz import egraph_to_networkx

    g = egraph_to_networkx(egraph, key)
    names = _class_names(g, key)
    keep = [c for c, d in g.nodes(data=True) if d.get("kind") == "eclass" and not (fold_constants and d.get("const"))
            and d["members"]]
    kept = set(keep)
    rep = {c: f"e{g.nodes[c]['members'][0]}" for c in keep}
    nodes: dict[str, dict] = {}
    class_data: dict[str, dict] = {}
    for c in keep:
        name = names[c]
        i = _node_of(name)
        kind = {"T": "tensor in memory (T)", "F": "expression (F)", "L": "load (F)"}[name[0]]
        extra: dict[str, str] = {}
        if key is not None and i is not None and i < len(key.nodes):
            extra[""] = f"{name}: {op_name(key, i)} {'x'.join(map(str, key.nodes[i].shape)) or 'scalar'}"
            src = (sources or {}).get(i)
            if src:
                extra["at"] = src.split(": ", 1)[0]
        else:
            extra[""] = name
        class_data[name] = {"type": kind, **extra}
        for m in g.nodes[c]["members"]:
            d = g.nodes[m]
            kids = [rep[k] for k in d["children"] if k in kept]
            nodes[f"e{m}"] = {"op": d["title"], "children": kids, "eclass": name, "cost": 1.0, "subsumed": False}
    return {"nodes": nodes, "class_data": class_data, "root_eclasses": []}, names, g


def _picked(e):
    """The search's pick (`Explanation.searched`), else the plan."""
    return getattr(e, "searched", None) or e.plan


def _decoded(e):
    """(planned graph, planned node -> node of e.key): the search plans a decoded copy."""
    ext = getattr(e.report, "extraction", None)
    dkey = ext.key if ext is not None else None
    if dkey is not None and materialized(dkey, _picked(e)) is not None:
        program = getattr(e, "program", None)
        if program is not None and program.key == dkey:  # the chosen program, rewrites and all
            return dkey, dict(program.orig_of)
        if e.egraph_json:
            from search.extract import decode

            _, _, orig_of = decode(e.egraph_json, e.key)
            return dkey, dict(orig_of)
        from svod.viz import match_nodes

        return dkey, match_nodes(dkey, e.key)
    return e.key, {i: i for i in range(len(e.key.nodes))}


def _plan_info(plan, dkey: GraphKey, back: dict[int, int], model, machine) -> dict:
    from svod.costing import plan_prices

    try:
        prices = plan_prices(plan, model, machine)
    except Exception:  # noqa: BLE001 - a picture without prices, never a failure
        prices = [None] * len(plan.kernels)
    m = materialized(dkey, plan) or set()
    per_kernel = kernel_nodes(dkey, plan, m)
    kernels = []
    for k, p, nodes in zip(plan.kernels, prices, per_kernel):
        kernels.append({"name": k.name, "kind": k.kind, "ops": kernel_ops(k), "passes": k.passes,
                        "us": None if p is None else p.seconds * 1e6, "threads": None if p is None else p.threads,
                        "nodes": sorted({back[i] for i in nodes if i in back})})
    return {"kernels": kernels, "materialized": sorted({back[i] for i in m if i in back}),
            "us": sum(k["us"] or 0.0 for k in kernels)}


def build(e, sources: dict[int, str] | None = None, snapshots: bool = True, title: str | None = None) -> dict:
    """The viewer's JSON for a `svod.Explanation` (see the module docstring).

    `sources`: node -> "file.py:LINE: code" (default: the explanation's own); with
    `snapshots` the saturation is run again to keep the e-graph after each iteration
    (else only the final one)."""
    sources = dict(sources if sources is not None else (getattr(e, "sources", None) or {}))
    key = e.key
    dkey, back = _decoded(e)
    model, machine = e.cost_model, e.machine
    snaps_js: list[dict] = []
    sat = getattr(e.report, "saturation", None)
    if e.egraph_json:
        if snapshots and sat is not None:
            from search.snapshots import saturation_snapshots

            try:
                snaps_js, _ = saturation_snapshots(key, rulesets=sat.rulesets)
            except Exception:  # noqa: BLE001 - fall back to the final e-graph alone
                snaps_js = []
        if not snaps_js:
            snaps_js = [e.egraph_json]
    snapshots_out = []
    names: dict[str, str] = {}
    g = None
    for js in snaps_js:
        vis, names, g = visualizer_json(js, key, sources)
        snapshots_out.append(json.dumps(vis))
    variants = []
    chosen_info = None
    for idx, v in enumerate(e.variants or []):
        info = _plan_info(v.plan, dkey, back, model, machine)
        info.update(index=idx, seconds=v.seconds, describe=describe_plan(v.plan),
                    difference="the chosen plan" if idx == 0 else plan_difference(v.plan, _picked(e), dkey))
        variants.append(info)
        if idx == 0:
            chosen_info = info
    if chosen_info is None:
        chosen_info = _plan_info(_picked(e), dkey, back, model, machine)
    classes = _classes(g, names, key, variants) if g is not None else {}
    try:
        bounds = why_not_fused(e)
    except Exception as err:  # noqa: BLE001 - the viewer still shows the rest
        bounds, bound_error = [], f"{type(err).__name__}: {err}"
    else:
        bound_error = ""
    nodes = {}
    for i, n in enumerate(key.nodes):
        nodes[str(i)] = {"label": node_label(key, i), "op": op_name(key, i), "source": sources.get(i),
                         "shape": list(n.shape), "dtype": n.dtype.name, "src": list(n.src)}
    chosen_nodes = set(chosen_info["materialized"])
    chosen_enodes = [a["enode"] for c in classes.values() for a in c["alternatives"] if 0 in a["variants"]]
    return {
        "format": FORMAT,
        "title": title or f"{len(key.nodes)}-node graph {key.hash[:12]}",
        "report": str(e.report),
        "snapshots": snapshots_out,
        "iterations": list(getattr(sat, "sizes", []) or []),
        "stop_reason": getattr(sat, "stop_reason", None) or getattr(e.report, "reason", ""),
        "nodes": nodes,
        "classes": classes,
        "variants": variants,
        "kernels": chosen_info["kernels"],
        "chosen_classes": sorted(f"T{i}" for i in chosen_nodes if key.nodes[i].op.value != "BUFFER"),
        "chosen_enodes": chosen_enodes,
        "boundaries": [{"producer": back.get(b.producer, b.producer), "consumer": back.get(b.consumer, b.consumer),
                        "reason": b.reason, "detail": b.detail,
                        "label": f"{b.producer_label} -> {b.consumer_label}"} for b in bounds],
        "boundary_error": bound_error,
        "cost_model": getattr(model, "name", type(model).__name__ if model is not None else "roofline"),
    }


def _classes(g, names: dict[str, str], key: GraphKey, variants: list[dict]) -> dict:
    """Per svod class name: what it holds and its alternatives (e-nodes), each with the
    variants that pick it and, per variant, the kernel computing the class's node."""
    mats = [set(v["materialized"]) | set(key.inputs) for v in variants]
    kernel_of = []
    for v in variants:
        where = {}
        for j, k in enumerate(v["kernels"]):
            for i in k["nodes"]:
                where.setdefault(i, j)
        kernel_of.append(where)
    out = {}
    for c, d in g.nodes(data=True):
        if d.get("kind") != "eclass" or c not in names or d.get("const"):
            continue
        name = names[c]
        i = _node_of(name)
        alts = []
        for m in d["members"]:
            en = g.nodes[m]
            modes = []
            for ch in en["children"]:
                cn = names.get(ch, "?")
                modes.append((cn[0], _node_of(cn)))
            users = []
            for vi, mat in enumerate(mats):
                if en["op"] == "E":
                    ok = i is not None and i in kernel_of[vi] and \
                        all((kind == "L") == (j in mat) for kind, j in modes if j is not None)
                elif en["op"] == "Kernel":
                    ok = i in mat
                elif en["op"] == "Load":
                    ok = i in mat
                else:
                    ok = True
                if ok:
                    users.append(vi)
            per = []
            for vi in users[:12]:
                j = kernel_of[vi].get(i)
                if j is not None:
                    k = variants[vi]["kernels"][j]
                    per.append({"variant": vi, "kernel": k["name"], "kind": k["kind"], "ops": k["ops"], "us": k["us"],
                                "plan_us": variants[vi]["us"]})
            alts.append({"enode": f"e{m}", "label": en["title"], "op": en["op"], "variants": users, "kernels": per})
        out[name] = {"node": i, "sort": name[0], "alternatives": alts,
                     "label": node_label(key, i) if i is not None and i < len(key.nodes) else name}
    return out
