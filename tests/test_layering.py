"""DESIGN.md's module layering, enforced by parsing imports.

svod core never imports `search` or `costmodels`; only `svod/engine.py` and its plan
decision `svod/planner.py` (lazily, inside functions), explain and the CLI may; `search`
and `costmodels` may import svod core; `import svod` leaves egglog (and llvmlite's JIT)
unimported; and there is no import cycle among svod/, search/ and costmodels/, lazy
imports included (`python3 tests/test_layering.py` prints the cycles left).
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
# the plan decision (svod/planner.py, the engine's planning part); explain and its viewer,
# why-not-fused and the profiler sit above the pipeline like the CLI
MAY_IMPORT_SEARCH = {"svod/engine.py", "svod/planner.py", "svod/cli.py", "svod/cli_args.py", "svod/explain.py",
                     "svod/boundaries.py", "svod/viewer.py", "svod/viewer_serve.py", "svod/profiler.py"}


def _imports(path: pathlib.Path):
    tree = ast.parse(path.read_text(), filename=str(path))
    top_level = set(id(n) for n in tree.body)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, id(node) in top_level or _in_toplevel_block(tree, node)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module, id(node) in top_level or _in_toplevel_block(tree, node)


def _in_toplevel_block(tree, target) -> bool:
    """True when `target` runs at import time (module body, or an if/try at top level)."""
    stack = list(tree.body)
    while stack:
        n = stack.pop()
        if n is target:
            return True
        if isinstance(n, (ast.If, ast.Try, ast.With)):
            stack.extend(ast.iter_child_nodes(n))
    return False


def _py_files(pkg: str):
    return sorted((ROOT / pkg).rglob("*.py"))


def test_core_never_imports_search_or_costmodels():
    bad = []
    for f in _py_files("svod"):
        rel = f.relative_to(ROOT).as_posix()
        for mod, at_import_time in _imports(f):
            root = mod.split(".")[0]
            if root in ("search", "costmodels"):
                if rel not in MAY_IMPORT_SEARCH:
                    bad.append(f"{rel} imports {mod}")
                elif at_import_time:
                    bad.append(f"{rel} imports {mod} at import time (must be lazy)")
    assert not bad, "\n".join(bad)


def test_search_and_costmodels_only_import_core():
    bad = []
    for pkg, forbidden in (("search", {"costmodels"}), ("costmodels", {"search"})):
        for f in _py_files(pkg):
            for mod, _ in _imports(f):
                if mod.split(".")[0] in forbidden:
                    bad.append(f"{f.relative_to(ROOT)} imports {mod}")
    assert not bad, "\n".join(bad)


def test_import_svod_is_light():
    code = ("import sys, time; t = time.perf_counter(); import svod; dt = time.perf_counter() - t\n"
            "heavy = [m for m in ('egglog', 'llvmlite.binding', 'search', 'costmodels', 'matplotlib', 'ray', "
            "'dask', 'distributed') "
            "if m in sys.modules]\n"
            "print(heavy, dt)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=ROOT).stdout.split(" ", 1)
    assert out[0] == "[]", out


# ---- import cycles -------------------------------------------------------------------
# The import graph of svod/, search/ and costmodels/ counts an import wherever it stands:
# the module body, a function, a class, a try/if block (a lazy import still ties the two
# modules together); only `if TYPE_CHECKING:` blocks are left out. `from pkg import name`
# imports the submodule pkg.name when there is one, else pkg; a package is its __init__.

CYCLE_PACKAGES = ("svod", "search", "costmodels")


def _module_files(root: pathlib.Path = ROOT) -> dict[str, pathlib.Path]:
    mods = {}
    for pkg in CYCLE_PACKAGES:
        for p in sorted((root / pkg).rglob("*.py")):
            parts = p.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join(parts)] = p
    return mods


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _known(name: str, mods) -> str | None:
    """`name` or its nearest enclosing module that is one of ours (None: outside)."""
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def _import_edges(name: str, path: pathlib.Path, mods) -> list[tuple[str, int]]:
    """(imported module, line) for every import in `path` (module `name`) of a module of ours."""
    is_pkg = path.name == "__init__.py"
    out = []

    def visit(node):
        for c in ast.iter_child_nodes(node):
            if isinstance(c, ast.If) and _is_type_checking(c.test):
                for e in c.orelse:
                    visit_one(e)
                continue
            visit_one(c)

    def visit_one(c):
        if isinstance(c, ast.Import):
            for a in c.names:
                t = _known(a.name, mods)
                if t:
                    out.append((t, c.lineno))
        elif isinstance(c, ast.ImportFrom):
            if c.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[:len(base) - (c.level - 1)]
                module = ".".join(base + ([c.module] if c.module else []))
            else:
                module = c.module or ""
            for a in c.names:
                sub = f"{module}.{a.name}"
                t = sub if sub in mods else _known(module, mods)
                if t:
                    out.append((t, c.lineno))
        else:
            visit(c)

    visit(ast.parse(path.read_text(), filename=str(path)))
    return [(t, line) for t, line in out if t != name]


def import_graph(root: pathlib.Path = ROOT) -> dict[str, dict[str, int]]:
    """module -> {imported module: first line importing it}."""
    mods = _module_files(root)
    graph: dict[str, dict[str, int]] = {}
    for name, path in mods.items():
        edges = graph.setdefault(name, {})
        for t, line in _import_edges(name, path, mods):
            edges.setdefault(t, line)
    return graph


def _sccs(graph) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return sorted(out)


def _shortest_path(graph, src: str, dst: str, within: set[str]) -> list[str] | None:
    prev = {src: None}
    frontier = [src]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v]):
                if w in within and w not in prev:
                    prev[w] = v
                    if w == dst:
                        path = [w]
                        while prev[path[-1]] is not None:
                            path.append(prev[path[-1]])
                        return path[::-1]
                    nxt.append(w)
        frontier = nxt
    return None


def import_cycles(root: pathlib.Path = ROOT) -> list[list[str]]:
    """One shortest cycle through each import edge that lies on a cycle, deduplicated:
    each a list of modules, the first repeated at the end. Empty when the graph is acyclic."""
    graph = import_graph(root)
    cycles, seen = [], set()
    for comp in _sccs(graph):
        within = set(comp)
        for a in comp:
            for b in sorted(graph[a]):
                if b not in within:
                    continue
                back = _shortest_path(graph, b, a, within) if b != a else [a]
                cyc = [a] + back
                body = cyc[:-1]
                i = body.index(min(body))
                canon = tuple(body[i:] + body[:i])
                if canon not in seen:
                    seen.add(canon)
                    cycles.append(list(canon) + [canon[0]])
    return sorted(cycles, key=lambda c: (len(c), c))


def describe_cycles(root: pathlib.Path = ROOT) -> str:
    graph = import_graph(root)
    mods = _module_files(root)
    lines = []
    for comp in _sccs(graph):
        lines.append(f"cycle among {len(comp)} modules: {', '.join(comp)}")
    for cyc in import_cycles(root):
        lines.append("  " + " -> ".join(cyc))
        for a, b in zip(cyc, cyc[1:]):
            lines.append(f"      {mods[a].relative_to(root).as_posix()}:{graph[a][b]} imports {b}")
    return "\n".join(lines)


def test_import_cycle_finder_sees_lazy_and_submodule_imports(tmp_path):
    (tmp_path / "svod" / "sub").mkdir(parents=True)
    for pkg in ("search", "costmodels"):
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "svod" / "__init__.py").write_text("from svod.a import f\n")
    (tmp_path / "svod" / "a.py").write_text("def f():\n    from svod.sub import b\n")
    (tmp_path / "svod" / "sub" / "__init__.py").write_text("")
    (tmp_path / "svod" / "sub" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from svod import a\nfrom .. import c\n")
    (tmp_path / "svod" / "c.py").write_text("import svod.sub.b\n")
    (tmp_path / "svod" / "d.py").write_text("import svod\n")
    assert import_cycles(tmp_path) == [["svod.c", "svod.sub.b", "svod.c"]]
    assert "svod/c.py:1 imports svod.sub.b" in describe_cycles(tmp_path)
    (tmp_path / "svod" / "a.py").write_text("def f():\n    import svod.d\n")
    assert ["svod", "svod.a", "svod.d", "svod"] in import_cycles(tmp_path)


def test_no_import_cycles():
    """No import cycle among svod/, search/ and costmodels/, lazy imports included: a
    lower layer that must trigger a higher one does it through a hook the higher module
    registers at its import (e.g. svod.hooks), never by importing it."""
    text = describe_cycles()
    assert not text, "import cycles (each shortest cycle through an edge, with the lines):\n" + text


if __name__ == "__main__":  # python3 tests/test_layering.py: print the cycles left
    print(describe_cycles() or "no import cycles")
