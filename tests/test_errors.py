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
    ("float16-array-op", lambda: _ones(3) + np.zeros(3, np.float16), TypeError, [r"add", r"asarray", r"float16"],
     True),
    ("complex-array", lambda: svod.asarray(np.zeros(3, np.complex64)), TypeError, [r"asarray", r"complex64"], True),
    ("float16-array", lambda: svod.asarray(np.zeros(3, np.float16)), TypeError, [r"float16"], True),
    ("uint8-overflow-scalar", lambda: svod.asarray(np.zeros(3, np.uint8)) + 300, OverflowError,
     [r"add", r"uint8", r"300"], True),
    ("uint8-negative-scalar", lambda: svod.asarray(np.zeros(3, np.uint8)) * -1, OverflowError,
     [r"multiply", r"uint8", r"-1"], True),
    ("int8-clip-overflow", lambda: svod.clip(svod.asarray(np.zeros(3, np.int8)), 200, None), OverflowError,
     [r"clip", r"int8", r"200"], True),
    ("complex-scalar", lambda: svod.asarray(1j), TypeError, [r"asarray", r"complex"], True),
    ("float16-dtype-kw", lambda: svod.zeros((2,), dtype="float16"), TypeError, [r"float16"], True),
    ("complex-dtype-kw", lambda: svod.asarray([1], dtype=np.complex128), TypeError, [r"complex128"], True),
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
    ("linear-shape", lambda: svod.nn.linear(_ones(2, 3), _ones(4, 5)), ValueError, [r"matmul", r"\(2, 3\)"], True),
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
