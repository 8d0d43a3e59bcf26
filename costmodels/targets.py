"""What `svod tune` and `svod costmodel report` work on: a program, as a GraphKey with
input arrays and a numpy reference to compare against.

A target is a named workload (`svod/workloads.py`) at given shapes, or a Python file
defining a function of Tensors, with shapes for its parameters::

    svod tune w2_softmax --shapes x=4096x4096
    svod tune model.py:block --shapes x=512x1024,w=1024x1024

Shapes are `name=AxB` items separated by commas (or given as several arguments); a
scalar input is `name=` (shape `()`); `--small` picks a workload's small shapes.

>>> t = workload_target("w2_softmax", small=True)
>>> t.label, len(t.arrays)
('w2_softmax x=37x129', 1)
"""

from __future__ import annotations

import inspect
import os
import runpy
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


class TargetError(ValueError):
    """A bad program or shape description (a message for the user, no traceback)."""


@dataclass
class Target:
    label: str  # "w2_softmax x=4096x4096"
    key: object  # GraphKey
    arrays: list  # the bound input arrays, in slot order
    reference: Callable[[], object]  # numpy (the workload's hand-written code, or the reference interpreter)
    outputs: int = 1
    # how to build this target again in another process (a farm's worker): JSON data,
    # `target_from_spec(spec)`; None for targets made some other way
    spec: dict | None = None


def parse_shapes(text: str | list[str] | None) -> dict[str, tuple[int, ...]]:
    """`"x=4096x1024,w=1024"` (or a list of such items) -> {"x": (4096, 1024), "w": (1024,)}.

    >>> parse_shapes("x=2x3, b=3,s=")
    {'x': (2, 3), 'b': (3,), 's': ()}
    """
    if text is None:
        return {}
    items = text if isinstance(text, list) else [text]
    out: dict[str, tuple[int, ...]] = {}
    for chunk in items:
        for item in chunk.split(","):
            item = item.strip()
            if not item:
                continue
            name, eq, dims = item.partition("=")
            name = name.strip()
            if not eq or not name.isidentifier():
                raise TargetError(f"malformed shape {item!r}: expected NAME=AxB (e.g. x=4096x1024)")
            dims = dims.strip().lower()
            try:
                shape = tuple(int(d) for d in dims.split("x")) if dims else ()
            except ValueError:
                raise TargetError(f"malformed shape {item!r}: dimensions must be integers joined by 'x'") from None
            if any(d < 0 for d in shape):
                raise TargetError(f"malformed shape {item!r}: negative dimension")
            if name in out:
                raise TargetError(f"shape of {name!r} given twice")
            out[name] = shape
    return out


def _dims(shape) -> str:
    return "x".join(map(str, shape))


def _label(name: str, shapes: dict) -> str:
    return name + " " + ",".join(f"{k}={_dims(v)}" for k, v in shapes.items())


def _key_of(outs):
    from svod.key import compact
    from svod.tensor import Tensor

    outs = outs if isinstance(outs, tuple) else (outs,)
    if not outs or not all(isinstance(o, Tensor) for o in outs):
        raise TargetError("the program must return a Tensor or a tuple of Tensors")
    pending = [o.uop for o in outs if not o.is_realized]
    if not pending:
        raise TargetError("the program computes nothing (its results are already realized)")
    key, bindings = compact(pending)
    return key, list(bindings.arrays), len(pending)


def workload_target(name: str, shapes: dict | None = None, small: bool = False, seed: int = 0) -> Target:
    """The target of workload `name` (TargetError for unknown names and bad shapes)."""
    from svod import workloads

    try:
        w = workloads.get(name)
    except KeyError as e:
        raise TargetError(str(e.args[0])) from None
    base = dict(w.small_shapes if small else w.default_shapes)
    if shapes:
        unknown = sorted(set(shapes) - set(base))
        if unknown:
            raise TargetError(f"workload {name} has no input(s) {', '.join(unknown)}; its inputs: "
                              f"{', '.join(base)}")
        base.update(shapes)
    try:
        arrays = w.make_inputs(base, seed)
        out = w.build(**w.tensors(arrays))
    except (ValueError, TypeError, IndexError) as e:
        raise TargetError(f"workload {name} cannot run at shapes {base}: {e}") from None
    key, bound, n_out = _key_of(out)
    spec = {"workload": name, "shapes": {k: list(v) for k, v in (shapes or {}).items()}, "small": small,
            "seed": seed}
    return Target(_label(name, base), key, bound, lambda: w.reference(**arrays), n_out, spec)


def script_target(spec: str, shapes: dict, seed: int = 0) -> Target:
    """The target of `FILE.py[:FUNC]` called on random float32 Tensors of `shapes`.

    Without `:FUNC` the file must define exactly one public function (or one called
    `main`). Its parameters are matched to the shapes by name."""
    import svod
    from svod.interp import eval_key

    path, _, fn_name = spec.partition(":") if not os.path.isfile(spec) else (spec, "", "")
    if not os.path.isfile(path):
        raise TargetError(f"no such file: {path}")
    try:
        ns = runpy.run_path(path, run_name="svod_tune")
    except SystemExit:
        raise TargetError(f"{path} called sys.exit() while loading") from None
    except Exception as e:  # noqa: BLE001 - the user's file failed: say so, no traceback
        raise TargetError(f"{path} raised {type(e).__name__}: {e}") from None
    fns = {k: v for k, v in ns.items() if inspect.isfunction(v) and not k.startswith("_")
           and getattr(v, "__module__", None) == "svod_tune"}
    if fn_name:
        fn = fns.get(fn_name) or (ns.get(fn_name) if callable(ns.get(fn_name)) else None)
        if fn is None:
            raise TargetError(f"{path} defines no function {fn_name!r}; functions: {', '.join(fns) or 'none'}")
    elif "main" in fns:
        fn_name, fn = "main", fns["main"]
    elif len(fns) == 1:
        fn_name, fn = next(iter(fns.items()))
    else:
        raise TargetError(f"{path} defines {len(fns)} functions ({', '.join(fns) or 'none'}); name one as "
                          f"{path}:FUNCTION")
    params = [p.name for p in inspect.signature(fn).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty]
    missing = [p for p in params if p not in shapes]
    extra = [s for s in shapes if s not in params]
    if missing or extra:
        raise TargetError(f"{fn_name}({', '.join(params)}) needs shapes for exactly its parameters; "
                          f"missing: {', '.join(missing) or 'none'}, unknown: {', '.join(extra) or 'none'}")
    rng = np.random.default_rng(seed)
    arrays = {p: rng.standard_normal(shapes[p]).astype(np.float32) for p in params}
    try:
        out = fn(**{p: svod.asarray(a) for p, a in arrays.items()})
        key, bound, n_out = _key_of(out)
    except TargetError:
        raise
    except Exception as e:  # noqa: BLE001 - the user's function failed: say so, no traceback
        raise TargetError(f"{path}:{fn_name} raised {type(e).__name__}: {e}") from None
    with open(path, encoding="utf-8", errors="replace") as fh:
        source = fh.read()
    spec_data = {"script": os.path.basename(path), "function": fn_name, "source": source,
                 "shapes": {k: list(v) for k, v in shapes.items()}, "seed": seed}
    return Target(_label(f"{os.path.basename(path)}:{fn_name}", {p: shapes[p] for p in params}), key, bound,
                  lambda: eval_key(key, bound), n_out, spec_data)


def target_from_spec(spec: dict) -> Target:
    """Build a target again from its `Target.spec` (in another process, on another machine):
    the same graph over the same seeded inputs. A script's source travels in the spec, so
    the file need not exist where this runs.

    >>> t = workload_target("w2_softmax", small=True)
    >>> target_from_spec(t.spec).key.hash == t.key.hash
    True
    """
    shapes = {k: tuple(v) for k, v in spec.get("shapes", {}).items()}
    if "workload" in spec:
        return workload_target(spec["workload"], shapes or None, small=bool(spec.get("small")),
                               seed=int(spec.get("seed", 0)))
    import tempfile

    folder = tempfile.mkdtemp(prefix="svod-target-")
    path = os.path.join(folder, spec["script"])
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(spec["source"])
    try:
        return script_target(f"{path}:{spec['function']}", shapes, seed=int(spec.get("seed", 0)))
    finally:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
