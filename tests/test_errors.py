"""Bad input raises where the op is written, never at realize (DESIGN "Errors and bad input").

Each case checks: the exception subclasses the builtin numpy would raise (ValueError,
TypeError or IndexError), the message names the op and the shapes/axes/dtypes, nothing
was realized for a lazy op, and the library keeps working right afterwards.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import svod


def _ones(*shape):
    return svod.ones(shape)


# (id, thunk, exception class, regexes the message must match, lazy: no realize may happen)
CASES = [
    ("broadcast", lambda: _ones(2, 3) + _ones(4), ValueError, [r"add", r"\(2, 3\)", r"\(4,\)"], True),
    ("broadcast-fn", lambda: svod.maximum(_ones(2, 3), _ones(2, 2)), ValueError,
     [r"maximum", r"\(2, 3\)", r"\(2, 2\)"], True),
    ("broadcast-where", lambda: svod.where(_ones(2) > 0, _ones(3), 0.0), ValueError, [r"where", r"\(3,\)"], True),
    ("broadcast_to", lambda: svod.broadcast_to(_ones(3), (2, 4)), ValueError,
     [r"broadcast_to", r"\(3,\)", r"\(2, 4\)"], True),
    ("bad-axis-sum", lambda: _ones(2, 3).sum(axis=2), ValueError, [r"sum", r"axis 2", r"dimension 2"], True),
    ("bad-axis-neg-max", lambda: svod.max(_ones(2, 3), axis=-3), ValueError, [r"max", r"-3"], True),
    ("bad-axis-mean", lambda: svod.mean(_ones(2, 3), axis=5), ValueError, [r"mean", r"axis 5"], True),
    ("bad-axis-var", lambda: svod.var(_ones(2, 3), axis=(0, 4)), ValueError, [r"var", r"axis 4"], True),
    ("bad-axis-any", lambda: svod.any(_ones(2, 3), axis=3), ValueError, [r"any", r"axis 3"], True),
    ("bad-axis-argmax", lambda: svod.argmax(_ones(2, 3), axis=2), ValueError, [r"argmax", r"axis 2"], True),
    ("bad-axis-flip", lambda: svod.flip(_ones(2), axis=1), ValueError, [r"flip", r"axis 1"], True),
    ("bad-axis-concat", lambda: svod.concat([_ones(2), _ones(2)], axis=1), ValueError, [r"concat", r"axis 1"], True),
    ("bad-axis-expand_dims", lambda: svod.expand_dims(_ones(3), 2), ValueError, [r"expand_dims", r"axis 2"], True),
    ("bad-axis-roll", lambda: svod.roll(_ones(2), 1, axis=2), ValueError, [r"roll", r"axis 2"], True),
    ("repeated-axis", lambda: _ones(2, 3).sum(axis=(0, 0)), ValueError, [r"sum", r"repeated", r"\(0, 0\)"], True),
    ("repeated-axis-neg", lambda: svod.max(_ones(2, 3), axis=(1, -1)), ValueError, [r"max", r"repeated"], True),
    ("bad-reshape", lambda: _ones(2, 3).reshape(4, 2), ValueError,
     [r"reshape", r"\(2, 3\)", r"\(4, 2\)"], True),
    ("bad-reshape-minus1", lambda: _ones(2, 3).reshape(-1, 4), ValueError, [r"reshape", r"\(-1, 4\)"], True),
    ("two-minus-ones", lambda: _ones(2, 3).reshape(-1, -1), ValueError, [r"reshape", r"-1"], True),
    ("bad-permutation", lambda: svod.permute_dims(_ones(2, 3), (0, 0)), ValueError,
     [r"permute_dims", r"\(0, 0\)", r"\(2, 3\)"], True),
    ("short-permutation", lambda: svod.permute_dims(_ones(2, 3), (1,)), ValueError, [r"permute_dims"], True),
    ("permutation-oob", lambda: svod.permute_dims(_ones(2, 3), (0, 2)), ValueError, [r"permute_dims", r"2"], True),
    ("matmul-inner", lambda: _ones(2, 3) @ _ones(4, 5), ValueError, [r"matmul", r"\(2, 3\)", r"\(4, 5\)"], True),
    ("matmul-inner-1d", lambda: _ones(3) @ _ones(4), ValueError, [r"matmul", r"\(3,\)", r"\(4,\)"], True),
    ("matmul-batch", lambda: _ones(2, 2, 3) @ _ones(3, 3, 4), ValueError,
     [r"matmul", r"\(2, 2, 3\)", r"\(3, 3, 4\)"], True),
    ("matmul-0d", lambda: svod.matmul(svod.asarray(2.0), _ones(3)), ValueError, [r"matmul", r"\(\)"], True),
    ("concat-ndim", lambda: svod.concat([_ones(2, 3), _ones(3)]), ValueError,
     [r"concat", r"\(2, 3\)", r"\(3,\)"], True),
    ("concat-sizes", lambda: svod.concat([_ones(2, 3), _ones(2, 4)], axis=0), ValueError,
     [r"concat", r"\(2, 3\)", r"\(2, 4\)"], True),
    ("concat-0d", lambda: svod.concat([svod.asarray(1.0), svod.asarray(2.0)]), ValueError, [r"concat"], True),
    ("stack-shapes", lambda: svod.stack([_ones(2), _ones(3)]), ValueError, [r"stack", r"\(2,\)", r"\(3,\)"], True),
    ("ragged-list", lambda: svod.asarray([[1, 2], [3]]), ValueError, [r"asarray", r"ragged"], True),
    ("ragged-deep", lambda: svod.asarray([[[1.0]], [[1.0, 2.0]]]), ValueError, [r"asarray"], True),
    ("string-list", lambda: svod.asarray(["a", "b"]), TypeError, [r"asarray", r"str"], True),
    ("string-scalar", lambda: svod.asarray("abc"), TypeError, [r"asarray", r"string"], True),
    ("mixed-list", lambda: svod.asarray([1, "a"]), TypeError, [r"asarray"], True),
    ("object-array", lambda: svod.asarray(np.array([object()])), TypeError, [r"asarray", r"object"], True),
    ("string-array", lambda: svod.asarray(np.array(["x"])), TypeError, [r"asarray", r"<U1"], True),
    ("float16-array-op", lambda: _ones(3) + np.zeros(3, np.float16), TypeError, [r"add", r"float16"],
     True),
    ("complex-order", lambda: svod.asarray(np.zeros(3, np.complex64)) < 1, TypeError, [r"less", r"complex64"], True),
    ("float16-array", lambda: svod.asarray(np.zeros(3, np.float16)), TypeError, [r"float16"], True),
    ("uint8-overflow-scalar", lambda: svod.asarray(np.zeros(3, np.uint8)) + 300, OverflowError,
     [r"add", r"uint8", r"300"], True),
    ("uint8-negative-scalar", lambda: svod.asarray(np.zeros(3, np.uint8)) * -1, OverflowError,
     [r"multiply", r"uint8", r"-1"], True),
    ("int8-clip-overflow", lambda: svod.clip(svod.asarray(np.zeros(3, np.int8)), 200, None), OverflowError,
     [r"clip", r"int8", r"200"], True),
    ("complex-floor-divide", lambda: _ones(2) // 1j, TypeError, [r"floor_divide", r"complex64"], True),
    ("float16-dtype-kw", lambda: svod.zeros((2,), dtype="float16"), TypeError, [r"float16"], True),
    ("complex-maximum", lambda: svod.maximum(svod.asarray([1], dtype=np.complex128), 0), TypeError,
     [r"maximum", r"complex128"], True),
    ("astype-float16", lambda: _ones(2).astype(np.float16), TypeError, [r"float16"], True),
    ("uint-shift-float", lambda: svod.asarray(np.ones(2, np.uint16)) << 1.5, TypeError,
     [r"bitwise_left_shift", r"float"], True),
    ("string-operand", lambda: _ones(3) + "a", TypeError, [r"str|'a'"], True),
    ("none-operand", lambda: _ones(3) * None, TypeError, [r"NoneType"], True),
    ("int-overflow-scalar", lambda: svod.asarray(np.zeros(2, np.int32)) + 2 ** 40, OverflowError,
     [r"add", r"int32", r"1099511627776"], True),
    ("int-overflow-full", lambda: svod.full((2,), 2 ** 40, dtype=svod.int32), OverflowError,
     [r"full", r"int32"], True),
    ("int-overflow-list", lambda: svod.asarray([1, 2 ** 70]), OverflowError, [r"asarray"], True),
    ("bool-subtract", lambda: svod.asarray([True]) - svod.asarray([False]), TypeError,
     [r"subtract", r"bool"], True),
    ("float-bitwise", lambda: _ones(2) & _ones(2), TypeError, [r"bitwise_and", r"float32"], True),
    ("float-invert", lambda: ~_ones(2), TypeError, [r"bitwise_invert", r"float32"], True),
    ("bool-negative", lambda: -svod.asarray([True]), TypeError, [r"negative", r"bool"], True),
    ("inplace-dtype", lambda: svod.asarray([1, 2]).__iadd__(1.5), TypeError,
     [r"__iadd__", r"float32", r"int64"], True),
    ("inplace-shape", lambda: _ones(3).__iadd__(_ones(2, 3)), ValueError, [r"__iadd__", r"\(2, 3\)", r"\(3,\)"], True),
    ("index-out-of-range", lambda: _ones(2, 3)[5], IndexError, [r"index 5", r"axis 0", r"size 2"], True),
    ("index-out-of-range-neg", lambda: _ones(2, 3)[:, -4], IndexError, [r"-4", r"axis 1", r"size 3"], True),
    ("too-many-indices", lambda: _ones(2, 3)[0, 0, 0], IndexError, [r"too many indices", r"\(2, 3\)"], True),
    ("too-many-indices-0d", lambda: svod.asarray(1.0)[0], IndexError, [r"too many indices"], True),
    ("float-index", lambda: _ones(2, 3)[1.0], IndexError, [r"float"], True),
    ("float-index-in-tuple", lambda: _ones(2, 3)[0, 1.5], IndexError, [r"float"], True),
    ("string-index", lambda: _ones(2, 3)["a"], IndexError, [r"str"], True),
    ("two-ellipses", lambda: _ones(2, 3)[..., ...], IndexError, [r"ellipsis"], True),
    ("float-array-index", lambda: _ones(2, 3)[np.array([1.0])], IndexError, [r"float64"], False),
    ("bool-mask-shape", lambda: _ones(2, 3)[np.array([True, False, True])], IndexError, [r"boolean", r"\(2, 3\)"],
     False),
    ("int-array-oob", lambda: _ones(2, 3)[np.array([0, 5])], IndexError, [r"5", r"\(2, 3\)"], False),
    ("setitem-shape", lambda: _ones(2, 3).__setitem__(0, _ones(4)), ValueError, [r"setitem", r"\(4,\)", r"\(3,\)"],
     True),
    ("setitem-oob", lambda: _ones(2, 3).__setitem__(2, 0.0), IndexError, [r"index 2"], True),
    ("squeeze-non-1", lambda: _ones(2, 3).squeeze(0), ValueError, [r"squeeze", r"axis 0", r"\(2, 3\)"], True),
    ("squeeze-non-1-fn", lambda: svod.squeeze(_ones(1, 3), axis=(0, 1)), ValueError, [r"squeeze", r"axis 1"], True),
    ("max-empty", lambda: _ones(0, 3).max(), ValueError, [r"max", r"\(0, 3\)"], True),
    ("max-empty-axis", lambda: svod.max(_ones(0, 3), axis=0), ValueError, [r"max", r"\(0, 3\)"], True),
    ("min-empty", lambda: svod.min(_ones(2, 0), axis=1), ValueError, [r"min", r"\(2, 0\)"], True),
    ("argmax-empty", lambda: _ones(0).argmax(), ValueError, [r"argmax", r"empty"], True),
    ("argmin-empty-axis", lambda: svod.argmin(_ones(3, 0), axis=1), ValueError, [r"argmin", r"\(3, 0\)"], True),
    ("negative-shape", lambda: svod.zeros((-1, 2)), ValueError, [r"negative", r"\(-1, 2\)"], True),
    ("pad-width", lambda: svod.pad(_ones(2), ((1, 1), (1, 1), (1, 1))), ValueError, [r"pad", r"\(2,\)"], True),
    ("pad-negative", lambda: svod.pad(_ones(2), (-1, 0)), ValueError, [r"pad"], True),
    ("pad-mode", lambda: svod.pad(_ones(2), 1, mode="reflect"), ValueError, [r"pad", r"reflect"], True),
    ("arange-step0", lambda: svod.arange(0, 5, 0), ValueError, [r"arange", r"step"], True),
    ("linspace-num", lambda: svod.linspace(0, 1, -2), ValueError, [r"linspace", r"-2"], True),
    ("item-size", lambda: _ones(2).item(), ValueError, [r"item", r"\(2,\)"], False),
    ("bool-ambiguous", lambda: bool(_ones(2)), ValueError, [r"ambiguous", r"\(2,\)"], False),
    ("float-of-array", lambda: float(_ones(2)), TypeError, [r"size-1", r"\(2,\)"], False),
    ("index-of-float", lambda: [1, 2][svod.asarray(1.0)], TypeError, [r"float32"], False),
    ("len-0d", lambda: len(svod.asarray(1.0)), TypeError, [r"0-d"], True),
    ("mT-1d", lambda: _ones(3).mT, ValueError, [r"mT", r"\(3,\)"], True),
    ("layer_norm-shape", lambda: svod.nn.layer_norm(_ones(2, 3), (4,)), ValueError,
     [r"layer_norm", r"\(4,\)", r"\(2, 3\)"], True),
    ("rms_norm-shape", lambda: svod.nn.rms_norm(_ones(2, 3), (2,)), ValueError, [r"rms_norm"], True),
    ("gelu-approx", lambda: svod.nn.gelu(_ones(2), approximate="fast"), ValueError, [r"gelu", r"fast"], True),
    ("sdpa-head-dim", lambda: svod.nn.scaled_dot_product_attention(_ones(2, 3), _ones(2, 4), _ones(2, 4)),
     ValueError, [r"scaled_dot_product_attention", r"\(2, 3\)", r"\(2, 4\)"], True),
    ("linear-shape", lambda: svod.nn.linear(_ones(2, 3), _ones(4, 5)), ValueError,
     [r"linear", r"\(2, 3\)", r"\(4, 5\)"], True),
    ("device", lambda: svod.asarray([1.0], device="cuda"), ValueError, [r"asarray", r"cuda"], True),
    ("asarray-copy-false-cast", lambda: svod.asarray(np.zeros(2, np.float32), dtype=svod.float64, copy=False),
     ValueError, [r"asarray", r"copy=False"], True),
]


def _follow_up_works():
    """A small computation right after an error: the library is still usable."""
    x = svod.asarray([[1.0, 2.0], [3.0, 4.0]])
    y = (svod.exp(x - x.max(axis=1, keepdims=True)) @ svod.ones((2, 2))).sum()
    assert y.dtype == svod.float32
    want = (np.exp(np.array([[-1.0, 0.0], [-1.0, 0.0]], np.float32)) @ np.ones((2, 2), np.float32)).sum()
    assert abs(float(y) - float(want)) < 1e-5


@pytest.mark.parametrize("thunk,exc,patterns,lazy", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_raises_where_written(thunk, exc, patterns, lazy):
    svod.reset_stats()
    with pytest.raises(exc) as info:
        thunk()
    assert isinstance(info.value, (ValueError, TypeError, IndexError, OverflowError))
    msg = str(info.value)
    for p in patterns:
        assert re.search(p, msg), f"message {msg!r} does not mention {p!r}"
    if lazy:
        assert svod.stats()["realizes"] == 0, "the error came from realize, not from where the op was written"
    _follow_up_works()


def test_error_classes_are_exported_and_subclass_builtins():
    assert issubclass(svod.ShapeError, ValueError)
    assert issubclass(svod.AxisError, ValueError) and issubclass(svod.AxisError, IndexError)
    assert issubclass(svod.SvodIndexError, IndexError)
    assert issubclass(svod.DTypeError, TypeError)
    with pytest.raises(svod.ShapeError):
        _ones(2) + _ones(3)
    with pytest.raises(svod.AxisError):
        _ones(2).sum(axis=1)
    with pytest.raises(svod.SvodIndexError):
        _ones(2)[3]
    with pytest.raises(svod.DTypeError):
        svod.asarray(np.zeros(2, np.float16))


def test_errors_inside_a_long_lazy_graph_leave_it_usable():
    x = svod.arange(6, dtype=svod.float32).reshape(2, 3)
    y = svod.exp(x) * 2 + 1
    with pytest.raises(ValueError):
        y + _ones(4)
    with pytest.raises(IndexError):
        y[0, 7]
    with pytest.raises(ValueError):
        y.reshape(5)
    assert not y.is_realized
    want = np.exp(np.arange(6, dtype=np.float32).reshape(2, 3)) * 2 + 1
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-6)
    # a failed in-place update leaves the tensor as it was
    z = svod.asarray([1, 2, 3])
    with pytest.raises(TypeError):
        z += 0.5
    with pytest.raises(ValueError):
        z[0:2] = svod.asarray([1, 2, 3])
    assert z.dtype == svod.int64 and z.tolist() == [1, 2, 3]


def test_numpy_output_is_read_only():
    arr = (_ones(3) * 2).numpy()
    with pytest.raises(ValueError):
        arr[0] = 1.0
    _follow_up_works()


# ----------------------------------------------------------------------------- the called function's name
# (issue 26.7) Every bad call names the function the user called, never a helper it delegates
# to (`zeros` -> `full`, `tile` -> `broadcast_to`, `softmax` -> `max`), raises svod's error
# classes at the op (not at realize), and leaves svod working. Sizes that overflow the
# address space raise at the op (26.6), as numpy's "array is too big".

_A = lambda: _ones(2, 3)  # noqa: E731
_BIG = 2 ** 62

# (called function as labelled, thunk, builtin class, regexes beyond the label)
CALLED = [
    # creation functions: negative, non-integer and huge sizes, bad values
    ("zeros", lambda: svod.zeros(-1), ValueError, [r"negative", r"\(-1,\)"]),
    ("zeros", lambda: svod.zeros(2.5), TypeError, [r"integers", r"2\.5"]),
    ("zeros", lambda: svod.zeros((2 ** 40, 2 ** 40)), ValueError, [r"too big", r"1099511627776"]),
    ("ones", lambda: svod.ones((2, -3)), ValueError, [r"\(2, -3\)"]),
    ("ones", lambda: svod.ones((_BIG, 4)), ValueError, [r"too big"]),
    ("empty", lambda: svod.empty((2, 2.5)), TypeError, [r"2\.5"]),
    ("full", lambda: svod.full((_BIG // 4,), 1.0, dtype=svod.float64), ValueError, [r"too big", r"float64"]),
    ("full", lambda: svod.full((2,), [1, 2]), TypeError, [r"scalar", r"list"]),
    ("zeros_like", lambda: svod.zeros_like(_A(), dtype="float16"), TypeError, [r"float16"]),
    ("full_like", lambda: svod.full_like(_A(), "x"), TypeError, [r"scalar"]),
    ("arange", lambda: svod.arange(float("nan")), ValueError, [r"finite", r"nan"]),
    ("arange", lambda: svod.arange(0, float("inf")), ValueError, [r"finite", r"inf"]),
    ("arange", lambda: svod.arange(0, 5, 0), ValueError, [r"step"]),
    ("arange", lambda: svod.arange(0, _BIG), ValueError, [r"too big", r"int64"]),
    ("arange", lambda: svod.arange("3"), TypeError, [r"real number", r"'3'"]),
    ("linspace", lambda: svod.linspace(0, 1, 2.5), TypeError, [r"num", r"2\.5"]),
    ("linspace", lambda: svod.linspace(0, 1, -2), ValueError, [r"num", r"-2"]),
    ("linspace", lambda: svod.linspace(0, 1, _BIG), ValueError, [r"too big"]),
    ("eye", lambda: svod.eye(-2), ValueError, [r"n_rows", r"-2"]),
    ("eye", lambda: svod.eye(2.5), TypeError, [r"n_rows", r"2\.5"]),
    ("eye", lambda: svod.eye(3, k=0.5), TypeError, [r"k", r"0\.5"]),
    ("eye", lambda: svod.eye(2 ** 40), ValueError, [r"too big"]),
    ("tril", lambda: svod.tril(_ones(3)), ValueError, [r"2 dimensions", r"\(3,\)"]),
    ("triu", lambda: svod.triu(_A(), k=1.5), TypeError, [r"k", r"1\.5"]),
    ("meshgrid", lambda: svod.meshgrid(_ones(2), indexing="yx"), ValueError, [r"indexing", r"'yx'"]),
    ("asarray", lambda: svod.asarray([[1, 2], [3]]), ValueError, [r"ragged"]),
    ("random.rand", lambda: svod.random.rand(-3), ValueError, [r"negative", r"\(-3,\)"]),
    ("random.rand", lambda: svod.random.rand(2 ** 31, 2 ** 31), ValueError, [r"too big"]),
    ("random.randn", lambda: svod.random.randn(2.5), TypeError, [r"integers", r"2\.5"]),
    ("random.uniform", lambda: svod.random.uniform(size=-1), ValueError, [r"negative"]),
    ("random.normal", lambda: svod.random.normal(size=(2, 1.5)), TypeError, [r"1\.5"]),
    ("random.randint", lambda: svod.random.randint(5, 2), ValueError, [r"low", r"high=2"]),
    ("random.permutation", lambda: svod.random.permutation(-1), ValueError, [r"n", r"-1"]),
    # functions that delegate to helpers
    ("tile", lambda: svod.tile(_A(), (-1,)), ValueError, [r"repetitions", r"-1"]),
    ("tile", lambda: svod.tile(_A(), (1.5,)), TypeError, [r"repetitions", r"1\.5"]),
    ("tile", lambda: svod.tile(_A(), (_BIG, 1)), ValueError, [r"too big"]),
    ("repeat", lambda: svod.repeat(_A(), -2), ValueError, [r"repeats", r"-2"]),
    ("repeat", lambda: svod.repeat(_A(), 1.5), TypeError, [r"repeats", r"1\.5"]),
    ("repeat", lambda: svod.repeat(_A(), _BIG, axis=0), ValueError, [r"too big"]),
    ("broadcast_to", lambda: svod.broadcast_to(_ones(3), (_BIG, 3)), ValueError, [r"too big"]),
    ("pad", lambda: svod.pad(_A(), ((_BIG, 0), (0, 0))), ValueError, [r"too big"]),
    ("matmul", lambda: _ones(2 ** 32, 1) @ _ones(1, 2 ** 32), ValueError, [r"too big"]),
    ("reshape", lambda: _A().reshape(2.5), TypeError, [r"2\.5"]),
    ("tensordot", lambda: svod.tensordot(_A(), _A(), axes=((0, 1), (0,))), ValueError,
     [r"\(\(0, 1\), \(0,\)\)", r"\(2, 3\)"]),
    ("tensordot", lambda: svod.tensordot(_A(), _A(), axes=3), ValueError, [r"axes=3"]),
    ("softmax", lambda: svod.nn.softmax(_A(), axis=2), ValueError, [r"axis 2", r"dimension 2"]),
    ("log_softmax", lambda: svod.nn.log_softmax(_A(), axis=-3), ValueError, [r"-3"]),
    ("scaled_dot_product_attention", lambda: svod.nn.scaled_dot_product_attention(_ones(2, 4), _ones(3, 4),
                                                                                  _ones(5, 4)),
     ValueError, [r"\(3, 4\)", r"\(5, 4\)"]),
    # axis-taking functions
    ("sum", lambda: svod.sum(_A(), axis=2), ValueError, [r"axis 2"]),
    ("prod", lambda: svod.prod(_A(), axis=(0, 0)), ValueError, [r"repeated"]),
    ("mean", lambda: _A().mean(axis=-3), ValueError, [r"-3"]),
    ("std", lambda: svod.std(_A(), axis=2), ValueError, [r"axis 2"]),
    ("var", lambda: svod.var(_A(), axis=1.5), TypeError, [r"float"]),
    ("all", lambda: svod.all(_A(), axis=7), ValueError, [r"axis 7"]),
    ("argmin", lambda: svod.argmin(_A(), axis=-3), ValueError, [r"-3"]),
    ("cumulative_sum", lambda: svod.cumulative_sum(_A(), axis=2), ValueError, [r"axis 2"]),
    ("cumulative_sum", lambda: svod.cumulative_sum(_A()), ValueError, [r"axis"]),
    ("flip", lambda: svod.flip(_A(), axis=3), ValueError, [r"axis 3"]),
    ("roll", lambda: svod.roll(_A(), 1, axis=-3), ValueError, [r"-3"]),
    ("moveaxis", lambda: svod.moveaxis(_A(), 0, 2), ValueError, [r"2"]),
    ("squeeze", lambda: svod.squeeze(_A(), axis=3), ValueError, [r"axis 3"]),
    ("expand_dims", lambda: svod.expand_dims(_A(), axis=4), ValueError, [r"axis 4"]),
    ("stack", lambda: svod.stack([_A(), _A()], axis=3), ValueError, [r"axis 3"]),
    ("unstack", lambda: svod.unstack(_A(), axis=2), ValueError, [r"axis 2"]),
    ("concat", lambda: svod.concat([_A(), _A()], axis=-3), ValueError, [r"-3"]),
    ("permute_dims", lambda: svod.permute_dims(_A(), (0, 2)), ValueError, [r"\(0, 2\)"]),
    ("sort", lambda: svod.sort(_A(), axis=2), ValueError, [r"axis 2"]),
    ("argsort", lambda: svod.argsort(_A(), axis=-3), ValueError, [r"-3"]),
    ("take", lambda: svod.take(_A(), svod.asarray([0]), axis=2), ValueError, [r"axis 2"]),
    ("vecdot", lambda: svod.vecdot(_A(), _A(), axis=2), ValueError, [r"2"]),
    ("fft.fftshift", lambda: svod.fft.fftshift(_A(), axes=2), ValueError, [r"axis 2"]),
    ("linalg.vector_norm", lambda: svod.linalg.vector_norm(_A(), axis=2), ValueError, [r"axis 2"]),
    ("linalg.cross", lambda: svod.linalg.cross(_A(), _A(), axis=3), ValueError, [r"3"]),
    ("roll", lambda: svod.roll(_A(), 1.5, axis=0), TypeError, [r"shift", r"1\.5"]),
    ("roll", lambda: svod.roll(_A(), (1, 2, 3), axis=(0, 1)), ValueError, [r"\(1, 2, 3\)", r"\(0, 1\)"]),
    ("fft.fftfreq", lambda: svod.fft.fftfreq(0), ValueError, [r"n", r"0"]),
    ("fft.rfftfreq", lambda: svod.fft.rfftfreq(4.5), TypeError, [r"4\.5"]),
    ("layer_norm", lambda: svod.nn.layer_norm(_A(), 2.5), TypeError, [r"2\.5"]),
    ("gelu", lambda: svod.nn.gelu(_A(), approximate=_ones(2)), ValueError, [r"approximate"]),
    ("broadcast_shapes", lambda: svod.broadcast_shapes((2, 3), 2.5), TypeError, [r"2\.5"]),
    ("concat", lambda: svod.concat(1.5), TypeError, [r"sequence", r"float"]),
    # numpy's names are functions of their own: the message names the one called
    ("concatenate", lambda: svod.concatenate([_A(), _ones(3)]), ValueError, [r"\(2, 3\)", r"\(3,\)"]),
    ("transpose", lambda: svod.transpose(_A(), (0, 0)), ValueError, [r"\(0, 0\)"]),
    ("power", lambda: svod.power(_A(), _ones(4)), ValueError, [r"\(2, 3\)", r"\(4,\)"]),
    ("permute_dims", lambda: svod.permute_dims(_A(), 1), TypeError, [r"axes", r"1"]),
    ("float32", lambda: svod.float32("x"), TypeError, [r"'x'"]),
]


@pytest.mark.parametrize("called,thunk,exc,patterns", CALLED, ids=[f"{c[0]}-{i}" for i, c in enumerate(CALLED)])
def test_errors_name_the_called_function(called, thunk, exc, patterns):
    svod.reset_stats()
    with pytest.raises(exc) as info:
        thunk()
    assert isinstance(info.value, svod.SvodError), f"{type(info.value).__name__} is not one of svod's error classes"
    msg = str(info.value)
    assert msg.startswith(f"{called}: "), f"message {msg!r} does not start with the called function {called!r}"
    for p in patterns:
        assert re.search(p, msg), f"message {msg!r} does not mention {p!r}"
    assert svod.stats()["realizes"] == 0, "the error came from realize, not from where the op was written"
    _follow_up_works()


def test_the_table_covers_the_brief():
    assert len(CALLED) >= 40
    assert sum(1 for c in CALLED if "too big" in c[3]) >= 10


def test_methods_and_the_numpy_namespace_name_what_was_called():
    import svod.numpy as snp

    cases = [(lambda: _A().sum(axis=4), "sum"), (lambda: _A().reshape(7), "reshape"),
             (lambda: _A().flatten().reshape(4), "reshape"), (lambda: snp.zeros(-1), "zeros"),
             (lambda: snp.sum(snp.ones((2, 3)), axis=4), "sum"), (lambda: np.sum(_A(), axis=4), "sum"),
             (lambda: snp.linalg.inv(snp.ones((2, 3))), "linalg.inv"),
             (lambda: snp.random.default_rng(0).integers(5, 2), "integers"),
             (lambda: snp.power(snp.ones((2, 3)), snp.ones(4)), "power"),
             (lambda: snp.concatenate([snp.ones((2, 3)), snp.ones(3)]), "concatenate")]
    for thunk, called in cases:
        with pytest.raises((ValueError, TypeError)) as info:
            thunk()
        assert str(info.value).startswith(f"{called}: "), (called, str(info.value))
    _follow_up_works()


def test_operators_keep_their_op_name():
    for thunk, called in [(lambda: _A() + _ones(4), "add"), (lambda: _A() @ _ones(4), "matmul"),
                          (lambda: _ones(2 ** 32, 1) @ _ones(1, 2 ** 32), "matmul"),
                          (lambda: _A() - _ones(4), "subtract")]:
        with pytest.raises(ValueError) as info:
            thunk()
        assert str(info.value).startswith(f"{called}: "), (called, str(info.value))


def test_a_relabelled_error_keeps_its_class_and_pickles():
    import pickle

    with pytest.raises(svod.ShapeError) as info:
        svod.zeros(-1)
    e = pickle.loads(pickle.dumps(info.value))
    assert type(e) is svod.ShapeError and str(e) == str(info.value)


def test_huge_shapes_fail_at_the_op_like_numpy():
    """numpy refuses an array whose bytes overflow the address space at once ("array is
    too big"); so does svod, at the op, not at realize with an obscure pool error."""
    with pytest.raises(ValueError):
        np.zeros((2 ** 40, 2 ** 40))
    svod.reset_stats()
    with pytest.raises(svod.ShapeError, match=r"^zeros: array is too big"):
        svod.zeros((2 ** 40, 2 ** 40)) + 1
    x = svod.ones((2 ** 20,))
    with pytest.raises(svod.ShapeError, match=r"too big"):
        x[:, None] * svod.ones((1, 2 ** 44))  # each operand fits, the broadcast result does not
    assert svod.stats()["realizes"] == 0
    big_but_addressable = svod.zeros((2 ** 31, 2 ** 31), dtype=svod.bool)  # 4 EiB would not allocate, but is legal
    assert big_but_addressable.shape == (2 ** 31, 2 ** 31)
    _follow_up_works()


def test_a_compile_fallback_warning_points_at_the_users_line(monkeypatch):
    """svod's warnings point at the line the user wrote (here: the `.numpy()` below), not
    into svod/engine.py: their stacklevel is the walk out of svod's packages."""
    import warnings

    from svod.codegen import lower
    from svod.codegen import program as program_mod

    def broken(kernel, symbol=None):
        raise lower.LoweringError("broken on purpose")

    monkeypatch.setattr(lower, "lower_kernel", broken)
    program_mod.clear_programs()
    monkeypatch.setattr(program_mod, "_warned", set())
    x = svod.asarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        got = (svod.tanh(x) * 3.25 + 1.5).numpy(); line = __import__("inspect").currentframe().f_lineno  # noqa: E702
    ours = [r for r in w if issubclass(r.category, svod.SvodWarning)]
    assert ours and all((r.filename, r.lineno) == (__file__, line) for r in ours), [(r.filename, r.lineno) for r in w]
    np.testing.assert_allclose(got, np.tanh(np.arange(6, dtype=np.float32).reshape(2, 3)) * 3.25 + 1.5, rtol=1e-6)
    program_mod.clear_programs()
