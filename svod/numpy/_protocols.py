"""numpy's dispatch protocols on svod tensors: NEP 13 (`Tensor.__array_ufunc__`) and
NEP 18 (`Tensor.__array_function__`) hand numpy's call to `svod.numpy`'s implementation
of the same function (see `svod.interop` for the rules). A numpy function svod does not
implement raises `NotImplementedByNumpyDispatch` naming it.

The dtype rules are the operands': svod's for plain `svod.Tensor` operands, numpy's
(float64 defaults) when one is a `svod.numpy.ndarray`.
"""

from __future__ import annotations

from svod.interop import NotImplementedByNumpyDispatch
from svod.numpy import _dispatch_table, _ufuncs
from svod.numpy._ndarray import SCALAR_FUNCTIONS, call_numpy, call_svod, ndarray, scalar_result


def _numpy_mode(objs) -> bool:
    """Whether a svod.numpy.ndarray is among the operands (numpy's dtype defaults then)."""
    stack = list(objs)
    while stack:
        o = stack.pop()
        if type(o) is ndarray:
            return True
        if isinstance(o, (list, tuple)):
            stack.extend(o)
    return False


def _call(fn, args, kwargs, name: str, scalar: bool = False):
    """`fn` with numpy's defaults when a `svod.numpy.ndarray` is among the operands — then a
    0-d result of a function numpy gives scalars for (`scalar`) is numpy's scalar, as
    `svod.numpy`'s own function gives it (`scalar_result`) — else with svod's."""
    if _numpy_mode(args) or _numpy_mode(kwargs.values()):
        out = call_numpy(fn, args, kwargs)
        return scalar_result(out, args, kwargs) if scalar else out
    return call_svod(fn, args, kwargs)


def array_ufunc(ufunc, method: str, inputs, kwargs):
    """NEP 13: ``np.<ufunc>.<method>(...)`` with a svod tensor among the operands."""
    u = _ufuncs.UFUNCS.get(ufunc.__name__)
    if u is None:
        raise NotImplementedByNumpyDispatch(f"numpy.{ufunc.__name__} is not implemented by svod; compute it in "
                                            f"numpy on t.numpy() (or np.asarray(t))")
    fn = u if method == "__call__" else getattr(u, method, None)
    if fn is None:
        raise NotImplementedByNumpyDispatch(f"numpy.{ufunc.__name__}.{method} is not implemented by svod")
    return _call(fn, inputs, kwargs, f"{ufunc.__name__}.{method}", method in ("__call__", "reduce"))


def array_function(func, types, args, kwargs):
    """NEP 18: a numpy function called with a svod tensor among its arguments."""
    mod = getattr(func, "__module__", "") or ""
    sub = next((s for s in ("linalg", "fft", "random") if mod.startswith(f"numpy.{s}")), "")
    name = f"{sub}.{func.__name__}" if sub else func.__name__
    impl = _dispatch_table().get(name)
    if impl is None:
        raise NotImplementedByNumpyDispatch(f"numpy.{name} is not implemented by svod; compute it in numpy on "
                                            f"t.numpy() (or np.asarray(t)), or see docs/semantics.md for what "
                                            f"svod.numpy covers")
    return _call(impl, args, kwargs, name, name in SCALAR_FUNCTIONS or name in ("amax", "amin", "round_"))
