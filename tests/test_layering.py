"""DESIGN.md's module layering, enforced by parsing imports.

svod core never imports `search` or `costmodels`; only `svod/engine.py` and its plan
decision `svod/planner.py` (lazily, inside functions), explain and the CLI may; `search`
and `costmodels` may import svod core; and `import svod` leaves egglog (and llvmlite's JIT) unimported.
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
# the plan decision (svod/planner.py, the engine's planning part); explain and its viewer,
# why-not-fused and the profiler sit above the pipeline like the CLI
MAY_IMPORT_SEARCH = {"svod/engine.py", "svod/planner.py", "svod/cli.py", "svod/explain.py", "svod/boundaries.py",
                     "svod/viewer.py", "svod/viewer_serve.py", "svod/profiler.py"}


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
