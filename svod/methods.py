"""The methods of `Tensor` that delegate to svod's function modules, attached at import.

`svod/tensor.py` defines the class with the methods that need nothing above it; this
module binds the rest — operators (``+``, ``x[i]``, ``+=``, ...), the method forms of
the functions (``x.sum()``, ``x.reshape(...)``, ``x.T``), numpy's ndarray methods
(``x.cumsum()``, ``x.sort()``), the ``x.shape = ...`` setter, DLPack export and numpy's
NEP 13/18 protocols — and the weak-scalar operators of `WeakScalar` (svod.jit). It is
the one place where the class meets its frontends (as `jax/_src/numpy/array_methods.py`
does for JAX), so the function modules import `svod.tensor` and never the reverse.
`svod/__init__.py` imports it: any use of svod has the full API.

Contract: each method is the function it names, with the method's argument order
(``x.sum(axis)`` is ``svod.sum(x, axis=axis)``); operators build the same nodes as the
functions; in-place operators and ``x[k] = v`` rebind the tensor (values, not views).
svod.numpy (numpy's conventions, above this layer) is imported on first use of a
method that needs it, not with svod.
"""

from __future__ import annotations

import builtins

import numpy as np

from svod import dtype as dt
from svod import eager as _eager
from svod import elementwise as E
from svod import reductions as R
from svod import tensor as _T
from svod.creation import full
from svod.dtype import DTypeError
from svod.eager import _ELEMENTWISE
from svod.errors import ShapeError, SvodOverflowError, named
from svod.gather import take
from svod.indexing import getitem, setitem
from svod.interop import to_dlpack
from svod.ir import OP, Ops, UOp, shape_str
from svod.movement import expand_dims, flip, permute_dims, reshape, squeeze
from svod.nn import relu, sigmoid, softmax
from svod.searching import nonzero, searchsorted
from svod.sorting import sort
from svod.tensor import Tensor, WeakScalar, _cast, _const, _node2, _normalize_axis, _realized, _register, _weak_kind

# ----------------------------------------------------------------------------- Tensor


def _fast_binary(op: Ops, f, reflected: bool):
    """A binary operator method with the float-tensor cases inline — a float tensor with a
    Python float or int (weak: the tensor's dtype), or two float tensors of one dtype and
    shape — and the rest through the function `f` (promotion, broadcasting,
    errors). Same nodes either way; the inline path calls no other function."""

    interp = _ELEMENTWISE[op]

    def method(self, o):
        u = self.uop
        d = u.dtype
        if d.kind == "f":
            t = type(o)
            if t is float or t is int:
                if u.op is _BUFFER and _T._EAGER is not None and (t is float or -2**53 <= o <= 2**53):
                    # eager small work (svod.eager; `_EAGER` None: no thread can run any yet)
                    r = _eager_direct(interp, d, u, o, reflected, scalar=True)
                    if r is not None:
                        return r
                c = _const(o, d, u.shape)
                return _node2(op, d, c, u) if reflected else _node2(op, d, u, c)
            if t is Tensor or t is not WeakScalar and isinstance(o, Tensor):
                v = o.uop
                if v.dtype is d:
                    same = v.shape == u.shape
                    if u.op is _BUFFER and v.op is _BUFFER and _T._EAGER is not None and \
                            (same or not v.shape or not u.shape):
                        # (a 0-d operand broadcasts alike in numpy and svod: `row / x[i, i]`)
                        r = _eager_direct(interp, d, u, v.arg.array, reflected, u.shape if same or v.shape == ()
                                          else v.shape)
                        if r is not None:
                            return r
                    if same:
                        return _node2(op, d, v, u) if reflected else _node2(op, d, u, v)
        return f(o, self) if reflected else f(self, o)

    return named(method, f"__{'r' if reflected else ''}{f.__name__}__")


_BUFFER = OP.BUFFER


def _eager_direct(interp, d, u: UOp, other, reflected: bool, shape=None, scalar: bool = False) -> Tensor | None:
    """`u OP other` of a realized float `u` (and a buffer's array, or with `scalar` a Python
    float or int taken as a 0-d value of its dtype) computed at once when eager small work
    is on and the result is small: the op table's numpy implementation, as
    `svod.eager.try_eager` would run on the node."""
    lim = _eager.limit()
    if not lim or _T._READ_HOOK is not None:
        return None
    if scalar:  # (made after the checks: the lazy path never needs it)
        other = np.array(other, d.np)
    shape = u.shape if shape is None else shape
    n = 1
    for s in shape:
        n *= s
    if n > lim:
        return None
    a = u.arg.array
    v = _eager.run(interp, [other, a] if reflected else [a, other], d.np, None)
    arr = np.asarray(v)
    if arr.shape != shape or arr.dtype != d.np:
        return None
    if arr.base is not None or not arr.flags.owndata or arr is a or arr is other:
        arr = np.array(arr, order="C", copy=True)
    arr.flags.writeable = False
    return Tensor._from(UOp.buffer(arr, d))


class _TensorMethods:
    """The delegating methods of `Tensor` (copied onto it by `_attach`, below)."""

    @property
    def T(self) -> Tensor:
        return permute_dims(self, tuple(reversed(range(self.ndim))))

    @property
    def mT(self) -> Tensor:
        if self.ndim < 2:
            raise ShapeError(f"mT: needs at least 2 dimensions, got shape {shape_str(self.shape)}")
        order = list(range(self.ndim))
        order[-1], order[-2] = order[-2], order[-1]
        return permute_dims(self, tuple(order))

    # in-place operators rebind this tensor to a functional update (same dtype required)
    def _inplace(self, fn, o, name: str) -> Tensor:
        res = fn(self, o)
        if res.dtype != self.dtype:
            raise DTypeError(f"{name}: result dtype {res.dtype} cannot be cast to the in-place "
                             f"operand's dtype {self.dtype}")
        if res.shape != self.shape:
            raise ShapeError(f"{name}: result shape {shape_str(res.shape)} differs from the in-place "
                             f"operand's shape {shape_str(self.shape)}")
        self.uop = u = res.uop
        if u.op is OP.BUFFER:  # computed eagerly (svod.eager): nothing to rebind later
            _realized(self)
        else:
            _register(self)  # now pending: later realizes must rebind it
        return self

    # --- indexing
    def __getitem__(self, key) -> Tensor:
        return getitem(self, key)

    def __setitem__(self, key, value) -> None:
        self.uop = u = setitem(self, key, value).uop
        if u.op is OP.BUFFER:  # written eagerly (svod.eager)
            _realized(self)
        else:
            _register(self)

    # --- method forms of the common functions
    def reshape(self, *shape, copy=None) -> Tensor:
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return reshape(self, shape)

    def permute(self, *axes) -> Tensor:
        if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = tuple(axes[0])
        return permute_dims(self, axes)

    def transpose(self, *axes) -> Tensor:
        if not axes or axes == (None,):
            return self.T
        return self.permute(*axes)

    def flatten(self) -> Tensor:
        return reshape(self, (-1,))

    def ravel(self) -> Tensor:
        return reshape(self, (-1,))

    def broadcast_to(self, shape) -> Tensor:
        return E.broadcast_to(self, shape)

    def expand_dims(self, axis) -> Tensor:
        return expand_dims(self, axis)

    def squeeze(self, axis=None) -> Tensor:
        return squeeze(self, axis)

    def flip(self, axis=None) -> Tensor:
        return flip(self, axis=axis)

    def clip(self, min=None, max=None):
        return E.clip(self, min, max)

    def round(self, decimals: int = 0):
        if decimals:
            from svod.numpy._mathfuncs import around

            return around(self, decimals)
        return E.round(self)

    def softmax(self, axis=-1):
        return softmax(self, axis=axis)

    def matmul(self, o):
        return R.matmul(self, o)

    def dot(self, o):
        from svod.numpy._mathfuncs import dot

        return dot(self, o)

    def fill(self, value) -> None:
        """Set every element to `value` (rebinds this tensor, as `x[...] = value`)."""
        if isinstance(value, Tensor):
            value = value.item()
        if self.dtype.is_int and not dt.can_cast_scalar(self.dtype, value):
            raise SvodOverflowError(f"fill: {value} does not fit {self.dtype}")
        self.uop = full(self.shape, np.array(value).astype(self.dtype.np).item(), dtype=self.dtype).uop
        _register(self)

    @property
    def real(self) -> Tensor:
        return E.real(self) if self.dtype.kind == "c" else self

    @property
    def imag(self) -> Tensor:
        return E.imag(self)

    def conj(self) -> Tensor:
        return E.conj(self) if self.dtype.kind == "c" else self

    conjugate = conj

    def swapaxes(self, axis1: int, axis2: int) -> Tensor:
        order = list(range(self.ndim))
        a, b = _normalize_axis(axis1, self.ndim, "swapaxes"), _normalize_axis(axis2, self.ndim, "swapaxes")
        order[a], order[b] = order[b], order[a]
        return permute_dims(self, tuple(order))

    def _np(self, name: str, *args, **kwargs):
        from svod.numpy import _FUNCTIONS  # svod.numpy's functions, svod's dtype defaults

        return _FUNCTIONS[name](self, *args, **kwargs)

    def cumsum(self, axis=None, dtype=None):
        return self._np("cumsum", axis, dtype)

    def cumprod(self, axis=None, dtype=None):
        return self._np("cumprod", axis, dtype)

    def ptp(self, axis=None, keepdims=False):
        return self._np("ptp", axis, keepdims=keepdims)

    def nonzero(self):
        return nonzero(self)

    def sort(self, axis: int = -1, kind=None, order=None) -> None:
        """Sort in place along `axis` (stable; rebinds this tensor), as numpy's method."""
        self.uop = sort(self, axis=axis).uop
        _register(self)

    def argsort(self, axis: int = -1, kind=None, order=None):
        return self._np("argsort", axis, kind)

    def searchsorted(self, v, side="left", sorter=None):
        return searchsorted(self, v, side=side, sorter=sorter)

    def repeat(self, repeats, axis=None):
        return self._np("repeat", repeats, axis)

    def take(self, indices, axis=None):
        return take(self, indices, axis=axis)

    def diagonal(self, offset=0, axis1=0, axis2=1):
        return self._np("diagonal", offset, axis1, axis2)

    def trace(self, offset=0, axis1=0, axis2=1, dtype=None):
        return self._np("trace", offset, axis1, axis2, dtype)

    # --- interchange (svod/interop.py) and numpy's protocols (svod/numpy/_protocols.py)
    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        return to_dlpack(self, stream=stream, max_version=max_version, dl_device=dl_device, copy=copy)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        from svod.numpy._protocols import array_ufunc

        return array_ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        from svod.numpy._protocols import array_function

        return array_function(func, types, args, kwargs)


def _set_shape(self, value) -> None:
    """numpy's ``x.shape = (...)``: rebinds `x` to the reshape (-1 allowed)."""
    self.uop = reshape(self, value).uop
    _register(self)


# not copied: the class machinery, and __hash__ (None in a class body that defines __eq__)
_SKIP = frozenset({"__module__", "__qualname__", "__doc__", "__dict__", "__weakref__", "__hash__"})


def _attach(cls: type, methods: type) -> None:
    """Copy `methods`' attributes onto `cls`, each function renamed as `cls`'s own
    (its ``__qualname__``: tracebacks and `help` show ``Tensor.sum``)."""
    for name, value in vars(methods).items():
        if name in _SKIP:
            continue
        fn = value.fget if isinstance(value, property) else value
        if hasattr(fn, "__qualname__") and fn.__qualname__.startswith(methods.__name__ + "."):
            fn.__qualname__ = f"{cls.__name__}.{fn.__qualname__.split('.', 1)[1]}"
        setattr(cls, name, value)


_attach(Tensor, _TensorMethods)
Tensor.shape = Tensor.shape.setter(_set_shape)


# ----------------------------------------------------------------------------- operators and method forms, by table


def _operator(fn, name: str, reflected: bool = False):
    """``__name__`` (``__rname__`` when `reflected`): `fn(self, o)` (`fn(o, self)`)."""
    def method(self, o):
        return fn(self, o)

    def rmethod(self, o):
        return fn(o, self)

    return named(rmethod if reflected else method, f"__{'r' if reflected else ''}{name}__")


def _inplace_operator(fn, name: str):
    """``__iname__``: rebinds `self` to `fn(self, o)` (`Tensor._inplace`)."""
    label = f"__i{name}__"

    def method(self, o):
        return self._inplace(fn, o, label)

    return named(method, label)


def _unary_method(fn, name: str):
    """``x.name()``: `fn(x)`."""
    def method(self):
        return fn(self)

    return named(method, name)


def _reduction_method(fn, with_dtype: bool = False):
    """``x.fn(axis, keepdims[, dtype])``: `fn(x, axis=..., keepdims=...[, dtype=...])`."""
    def method(self, axis=None, keepdims=False):
        return fn(self, axis=axis, keepdims=keepdims)

    def dtype_method(self, axis=None, keepdims=False, dtype=None):
        return fn(self, axis=axis, keepdims=keepdims, dtype=dtype)

    return named(dtype_method if with_dtype else method, fn.__name__)


def _moment_method(fn):
    """``x.var`` / ``x.std``: `correction`, or numpy's `ddof` in its place."""
    def method(self, axis=None, correction=0.0, keepdims=False, ddof=None):
        return fn(self, axis=axis, correction=correction if ddof is None else ddof, keepdims=keepdims)

    return named(method, fn.__name__)


def _bind(name: str, fn) -> None:
    """`Tensor.<name> = fn`; a method made in this module is named ``Tensor.<name>``."""
    if fn.__module__ == __name__:
        fn.__qualname__ = f"Tensor.{name}"
    setattr(Tensor, name, fn)


# (name, function, op of the inline float path of `_fast_binary` or None); each gives the
# operator, its reflected form and its in-place form
_BINARY = (("add", E.add, OP.ADD), ("sub", E.subtract, OP.SUB), ("mul", E.multiply, OP.MUL),
           ("truediv", E.divide, OP.DIV), ("floordiv", E.floor_divide, None), ("mod", E.remainder, None),
           ("pow", E.pow, None), ("matmul", R.matmul, None),
           ("and", E.bitwise_and, None), ("or", E.bitwise_or, None), ("xor", E.bitwise_xor, None),
           ("lshift", E.bitwise_left_shift, None), ("rshift", E.bitwise_right_shift, None))
for _name, _fn, _op in _BINARY:
    _bind(f"__{_name}__", _operator(_fn, _name) if _op is None else _fast_binary(_op, _fn, False))
    _bind(f"__r{_name}__", _operator(_fn, _name, True) if _op is None else _fast_binary(_op, _fn, True))
    _bind(f"__i{_name}__", _inplace_operator(_fn, _name))
for _name, _fn in (("lt", E.less), ("le", E.less_equal), ("gt", E.greater), ("ge", E.greater_equal), ("eq", E.equal),
                   ("ne", E.not_equal)):
    _bind(f"__{_name}__", _operator(_fn, _name))
for _name, _fn in (("neg", E.negative), ("pos", E.positive), ("abs", E.abs), ("invert", E.bitwise_invert)):
    _bind(f"__{_name}__", _unary_method(_fn, f"__{_name}__"))
for _fn in (R.max, R.min, R.mean, R.argmax, R.argmin, R.any, R.all):
    _bind(_fn.__name__, _reduction_method(_fn))
for _fn in (R.sum, R.prod):
    _bind(_fn.__name__, _reduction_method(_fn, with_dtype=True))
for _fn in (R.var, R.std):
    _bind(_fn.__name__, _moment_method(_fn))
for _fn in (E.exp, E.log, E.sqrt, E.abs, E.tanh, sigmoid, relu, E.square, E.reciprocal):
    _bind(_fn.__name__, _unary_method(_fn, _fn.__name__))
del _name, _fn, _op


# ----------------------------------------------------------------------------- WeakScalar (svod.jit)


_WEAK_DT = {"b": dt.bool_, "i": dt.int64, "f": dt.float64}


def _weak_binary(fn, a, b, kind_rule: str) -> WeakScalar:
    """`fn(a, b)` for two weak operands, computed at the weak dtype of the higher kind and
    weak again. `kind_rule`: "arith" (bool computes as int, as in Python), "div" (float),
    "bits" (bool stays bool)."""
    ka, kb = _weak_kind(a), _weak_kind(b)
    kind = "f" if kind_rule == "div" else builtins.max(ka, kb, key="bif".index)
    if kind == "b" and kind_rule == "arith":
        kind = "i"
    d = _WEAK_DT[kind]
    conv = {"b": bool, "i": int, "f": float}[kind]
    ua = a.uop if type(a) is WeakScalar else UOp.const(conv(a), d)
    ub = b.uop if type(b) is WeakScalar else UOp.const(conv(b), d)
    return WeakScalar._wrap(fn(Tensor._from(_cast(ua, d)), Tensor._from(_cast(ub, d))).uop)


def _weak_method(fn, reflected: bool, kind_rule: str = "arith"):
    def method(self, o):
        if _weak_kind(o) is not None:
            return _weak_binary(fn, o, self, kind_rule) if reflected else _weak_binary(fn, self, o, kind_rule)
        return fn(o, self) if reflected else fn(self, o)

    return named(method, f"__{'r' if reflected else ''}{fn.__name__}__")


def _weak_unary(fn):
    def method(self):
        u = self.uop
        if u.dtype.is_bool:  # Python: -True == -1, ~True == -2
            u = _cast(u, dt.int64)
        return WeakScalar._wrap(fn(Tensor._from(u)).uop)

    return method


for _name, _fn, _rule in (("add", E.add, "arith"), ("sub", E.subtract, "arith"), ("mul", E.multiply, "arith"),
                          ("truediv", E.divide, "div"), ("floordiv", E.floor_divide, "arith"),
                          ("mod", E.remainder, "arith"), ("pow", E.pow, "arith"), ("and", E.bitwise_and, "bits"),
                          ("or", E.bitwise_or, "bits"), ("xor", E.bitwise_xor, "bits")):
    setattr(WeakScalar, f"__{_name}__", _weak_method(_fn, False, _rule))
    setattr(WeakScalar, f"__r{_name}__", _weak_method(_fn, True, _rule))
for _name, _fn in (("lt", E.less), ("le", E.less_equal), ("gt", E.greater), ("ge", E.greater_equal),
                   ("eq", E.equal), ("ne", E.not_equal)):
    setattr(WeakScalar, f"__{_name}__", _weak_method(_fn, False))
for _name, _fn in (("neg", E.negative), ("pos", E.positive), ("abs", E.abs), ("invert", E.bitwise_invert)):
    setattr(WeakScalar, f"__{_name}__", _weak_unary(_fn))
del _name, _fn, _rule
