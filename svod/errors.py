"""Exceptions raised where the user wrote the op (never at realize time), and the
machinery that makes their messages name the function the user called.

Each message names the op and the shapes, axes, dtypes or values involved. The classes
subclass the builtin exceptions numpy raises for the same mistakes, so `except
ValueError` keeps working.

Labelling (`SvodError`): a message starts with ``"<function>: "``. svod functions
delegate (`zeros` calls `full`, `nn.softmax` calls `max`, `tile` calls `broadcast_to`),
and the helper that finds the mistake only knows its own name; so when a `SvodError` is
constructed it walks the stack out to the first frame outside svod's packages (the
user's code) and relabels the message with the *outermost* svod function on the way —
the one the user called. Rules (`entry_point`):

- Wrapper frames (`TRANSPARENT`: `__call__` of a ufunc, NEP 13/18 dispatch, lambdas) are
  skipped inward: the function they forward to is the one called.
- An entry point that is private or a dunder (``x + y``, ``x[i]``, ``float(x)``) keeps
  the message's own label (``add``, ``getitem``, ...), which already names the operator;
  an unlabelled message gets the operator's function (``__matmul__``: ``matmul``).
- A label that already names the entry point (``linalg.inv`` for `inv`) is kept.
- Functions of `svod.linalg`, `svod.fft` and `svod.random` (and their `svod.numpy`
  twins) are labelled ``linalg.<name>`` etc.

The walk costs a few microseconds, only when an error is constructed; the happy path
pays nothing. Generated wrappers carry their public name in their code object
(`named`), since a frame only knows its code's name.

`user_stacklevel()` is the same walk for warnings: the `stacklevel` that points a
warning at the user's line instead of into svod.
"""

from __future__ import annotations

import os
import re
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# svod's packages (the same list as svod.fingerprint._SOURCE_PACKAGES, which imports more)
_PREFIXES = tuple(os.path.join(_ROOT, p) + os.sep for p in ("svod", "search", "costmodels"))

# frames that only forward to the function that does the work
TRANSPARENT = frozenset({"__call__", "__array_function__", "__array_ufunc__", "array_function", "array_ufunc",
                         "_call", "call_numpy", "call_svod"})
_NAMESPACES = {"linalg": "linalg.", "fft": "fft.", "random": "random."}
_LABEL = re.compile(r"([A-Za-z_][\w.]*): ")


def _in_svod(code) -> bool:
    return code.co_filename.startswith(_PREFIXES)


# operator methods -> the function they are (labels a message that has none)
_OPERATORS = {"add": "add", "sub": "subtract", "mul": "multiply", "truediv": "divide", "floordiv": "floor_divide",
              "mod": "remainder", "pow": "pow", "matmul": "matmul", "and": "bitwise_and", "or": "bitwise_or",
              "xor": "bitwise_xor", "lshift": "bitwise_left_shift", "rshift": "bitwise_right_shift",
              "neg": "negative", "pos": "positive", "abs": "abs", "invert": "bitwise_invert", "lt": "less",
              "le": "less_equal", "gt": "greater", "ge": "greater_equal", "eq": "equal", "ne": "not_equal",
              "getitem": "getitem", "setitem": "setitem"}


def _dunder_op(name: str) -> str | None:
    if not (name.startswith("__") and name.endswith("__")):
        return None
    core = name[2:-2]
    if core not in _OPERATORS and core[:1] in ("r", "i"):
        core = core[1:]
    return _OPERATORS.get(core)


def entry_point(frame, operators: bool = False) -> str | None:
    """The public name of the svod function the user called, seen from `frame` (a frame
    inside it), or None when it is private, a dunder, or there is no svod frame. With
    `operators`, an operator method gives the function it is (``__rmatmul__``: matmul)."""
    chain = []
    f = frame
    while f is not None and _in_svod(f.f_code):
        chain.append(f)
        f = f.f_back
    for f in reversed(chain):  # outermost first
        name = f.f_code.co_name
        if name in TRANSPARENT or name.startswith("<"):
            continue
        if name.startswith("_") or not name.isidentifier():
            return _dunder_op(name) if operators else None
        mod = os.path.splitext(os.path.basename(f.f_code.co_filename))[0]
        return _NAMESPACES.get(mod, "") + name
    return None


def relabel(message: str, frame) -> str:
    """`message` labelled with the entry point seen from `frame` (see the module docstring)."""
    m = _LABEL.match(message)
    name = entry_point(frame, operators=m is None)
    if name is None:
        return message
    if m is None:
        return f"{name}: {message}"
    old, rest = m.group(1), message[m.end():]
    while rest.startswith(f"{old}: ") or rest.startswith(f"{name}: "):  # a wrapped message: one label
        rest = rest.split(": ", 1)[1]
    short = name.rpartition(".")[2]
    if old == name or old == short or old.endswith("." + short):
        return f"{old}: {rest}"
    return f"{name}: {rest}"


def strip_label(message: str) -> str:
    """`message` without its leading ``"<function>: "`` label (to wrap it under another)."""
    m = _LABEL.match(message)
    return message[m.end():] if m else message


def user_stacklevel(skip: int = 1) -> int:
    """The `warnings.warn` stacklevel that points at the first frame outside svod's
    packages (the user's line), for a `warnings.warn` called by the frame `skip` levels
    up (1: this function's caller)."""
    level, f = 1, sys._getframe(skip)
    while f is not None and _in_svod(f.f_code):
        level, f = level + 1, f.f_back
    return level


def named(fn, name: str):
    """`fn` (a generated wrapper) under its public `name`: `__name__`, `__qualname__` and the
    code object's name, which is all a frame (and so `entry_point`) can see."""
    fn.__name__ = fn.__qualname__ = name
    if name.isidentifier():
        try:
            fn.__code__ = fn.__code__.replace(co_name=name, co_qualname=name)
        except TypeError:  # Python < 3.11 has no co_qualname
            fn.__code__ = fn.__code__.replace(co_name=name)
    return fn


class SvodError(Exception):
    """Base of svod's user-facing errors: the message names the function the user called."""

    def __init__(self, *args):
        if len(args) == 1 and isinstance(args[0], str):
            args = (relabel(args[0], sys._getframe(1)),)
        super().__init__(*args)


class ShapeError(SvodError, ValueError):
    """Incompatible shapes: broadcasting, reshape, matmul, concat; a shape too big to address."""


class AxisError(SvodError, ValueError, IndexError):
    """An axis out of range or repeated (numpy's AxisError is both, too)."""


class SvodIndexError(SvodError, IndexError):
    """Bad index: out of range, too many indices, unsupported index type."""


class DTypeError(SvodError, TypeError):
    """An unsupported or incompatible dtype."""


class SvodValueError(SvodError, ValueError):
    """A bad argument value: a negative count, a non-finite bound, an unknown mode."""


class SvodTypeError(SvodError, TypeError):
    """An argument of the wrong type: a float where an integer is needed, a non-scalar."""


class SvodOverflowError(SvodError, OverflowError):
    """A value that does not fit its dtype."""


class numpy_errors:
    """Context for an eager call into numpy (random sampling, `fftfreq`, ...): a bare
    ValueError, TypeError, OverflowError or ZeroDivisionError (exactly those builtin
    classes) raised inside becomes svod's class, labelled `op` with the arguments'
    `detail`. For what validation ahead of the call does not catch."""

    __slots__ = ("op", "detail")

    def __init__(self, op: str, detail: str = ""):
        self.op, self.detail = op, detail

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        svod_cls = _BARE.get(kind)  # the builtin classes only: svod's own (JitError...) pass through
        if svod_cls is None:
            return False
        detail = f" ({self.detail})" if self.detail else ""
        raise svod_cls(f"{self.op}: {exc}{detail}") from None


_BARE = {ValueError: SvodValueError, TypeError: SvodTypeError, OverflowError: SvodOverflowError,
         ZeroDivisionError: SvodValueError}


class SvodWarning(UserWarning):
    """A fallback was taken: results stay correct, but slower."""


__all__ = ["SvodError", "ShapeError", "AxisError", "SvodIndexError", "DTypeError", "SvodValueError", "SvodTypeError",
           "SvodOverflowError", "SvodWarning", "user_stacklevel", "named", "numpy_errors"]
