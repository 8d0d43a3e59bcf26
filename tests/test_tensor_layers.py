"""The tensor layer's import order (svod/tensor.py's docstring; docs/semantics.md, "The
tensor layer"): every import, function-level ones included, goes down the layers, so no
import cycle runs through the Tensor class; and svod/methods.py gives `Tensor` its
delegating methods."""

from __future__ import annotations

import ast
from pathlib import Path

import svod

ROOT = Path(svod.__file__).parent

# bottom to top; a module may import modules of its own rank or lower (never higher)
LAYERS = [
    ["svod.tensor"],
    ["svod.creation"],
    ["svod.elementwise"],
    ["svod.movement"],
    ["svod.reductions"],
    ["svod._ddgraph", "svod.nn", "svod.indexing", "svod.linalg", "svod.fft", "svod.sorting", "svod.searching",
     "svod.gather", "svod.sets", "svod.grids", "svod.random", "svod.interop"],
    ["svod.numpy"],
    ["svod.methods"],
]
RANK = {m: i for i, layer in enumerate(LAYERS) for m in layer}


def _rank(module: str) -> int | None:
    """The layer of `module` (a svod.numpy submodule counts as svod.numpy), None outside."""
    if module.startswith("svod.numpy"):
        return RANK["svod.numpy"]
    return RANK.get(module)


def _imports(path: Path, name: str) -> set[str]:
    """Every svod module `path` imports, at any depth (function bodies included)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.split(".")[0] == "svod")
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "svod":
            for a in node.names:  # `from svod import nn` imports svod.nn
                full = f"{node.module}.{a.name}"
                out.add(full if (ROOT.parent / (full.replace(".", "/") + ".py")).exists() else node.module)
    out.discard(name)
    return out


def _module_files():
    for name in RANK:
        if name == "svod.numpy":
            for p in sorted((ROOT / "numpy").glob("*.py")):
                yield ("svod.numpy" if p.stem == "__init__" else f"svod.numpy.{p.stem}"), p
        else:
            yield name, ROOT.parent / (name.replace(".", "/") + ".py")


def test_tensor_layer_imports_go_down():
    upward = []
    for name, path in _module_files():
        for target in _imports(path, name):
            if target == "svod":
                upward.append(f"{name} imports the svod package (above every layer)")
                continue
            r = _rank(target)
            if r is not None and r > _rank(name):
                upward.append(f"{name} imports {target}")
    assert not upward, "imports going up the tensor layers (a cycle through Tensor): " + "; ".join(upward)


def test_methods_bind_the_tensor_api():
    t = svod.Tensor
    for name in ("__add__", "__radd__", "__iadd__", "__getitem__", "__setitem__", "__lt__", "__neg__", "sum",
                 "reshape", "T", "mT", "cumsum", "__array_ufunc__", "__array_function__", "__dlpack__"):
        assert hasattr(t, name), name
    assert t.__hash__ is not None and hash(svod.ones(2)) != 0  # __eq__ is bound, __hash__ stays identity
    assert t.shape.fset is not None  # x.shape = ... (svod/methods.py)
    assert t.sum.__qualname__ == "Tensor.sum"
    x = svod.arange(6)
    x.shape = (2, 3)
    assert (x + 1).T.shape == (3, 2) and (x < 3).dtype == svod.bool and float(x.sum()) == 15.0
