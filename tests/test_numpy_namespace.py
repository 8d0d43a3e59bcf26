"""`import svod.numpy as np`, numpy's protocols on svod tensors, DLPack.

- A dozen numpy programs (tests/programs_numpy.py) run unchanged with numpy and with
  svod.numpy: equal results, equal dtypes.
- ``np.<fn>(tensor)`` for every numpy function svod implements (the dispatch table) and
  every ufunc gives a svod tensor, lazy unless the function is documented eager; a
  function svod lacks raises a TypeError naming it.
- numpy's defaults in the namespace (float64), svod's outside it (float32).
"""

from __future__ import annotations

import math

import numpy
import pytest

import svod
import svod.numpy as snp
from svod.interop import NotImplementedByNumpyDispatch
from tests.programs_numpy import PROGRAMS


@pytest.mark.parametrize("program", PROGRAMS, ids=[p.__name__ for p in PROGRAMS])
def test_numpy_program_runs_unchanged(program):
    want = program(numpy)
    got = program(snp)
    assert set(got) == set(want)
    for name in want:
        w = numpy.asarray(want[name])
        g = got[name]
        assert isinstance(g, (svod.Tensor, float, int, numpy.generic)), f"{name}: {type(g).__name__}"
        g = numpy.asarray(g)
        assert g.dtype == w.dtype, f"{program.__name__}.{name}: dtype {g.dtype} != numpy's {w.dtype}"
        assert g.shape == w.shape, f"{program.__name__}.{name}: shape {g.shape} != numpy's {w.shape}"
        numpy.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-12, err_msg=f"{program.__name__}.{name}")
    assert svod.stats()["interpreter_fallbacks"] == 0


# ----------------------------------------------------------------------------- defaults and types


def test_numpy_defaults_inside_the_namespace_svod_defaults_outside():
    assert snp.array([1.0, 2.0]).dtype == svod.float64
    assert snp.zeros(3).dtype == snp.ones((2,)).dtype == snp.empty(2).dtype == svod.float64
    assert (snp.arange(4) / 2).dtype == svod.float64
    assert snp.mean(snp.arange(4)).dtype == svod.float64
    assert snp.sqrt(snp.arange(4)).dtype == svod.float64
    assert (snp.arange(3) * 1.5).dtype == svod.float64
    assert snp.linspace(0, 1, 5).dtype == svod.float64
    assert svod.asarray([1.0]).dtype == svod.float32 and svod.zeros(2).dtype == svod.float32
    assert (svod.arange(4) / 2).dtype == svod.float32
    x = snp.arange(3.0)
    assert type(x) is snp.ndarray and type(x + 1) is snp.ndarray and type(x.sum()) is numpy.float64
    with svod.eager_mode(False):  # a lazy 0-d result stays an array (fused with what uses it)
        assert type(x.sum()) is snp.ndarray
    assert isinstance(svod.ones(2), snp.ndarray) and isinstance(x, svod.Tensor)
    assert issubclass(svod.Tensor, snp.ndarray)
    a = snp.ndarray((2, 3), dtype=snp.int32)
    assert a.shape == (2, 3) and a.dtype == svod.int32 and a.sum().item() == 0
    assert snp.float64(1.5) == 1.5 and type(snp.float32(1)) is numpy.float32
    assert snp.issubdtype(snp.float32, snp.floating) and not snp.issubdtype(snp.int64, snp.floating)


def test_numpy_calling_conventions():
    x = snp.arange(12.0).reshape(3, 4)
    assert snp.zeros((2, 2), snp.int32).dtype == svod.int32
    numpy.testing.assert_array_equal(snp.triu(x, 1), numpy.triu(numpy.arange(12.0).reshape(3, 4), 1))
    numpy.testing.assert_array_equal(snp.sum(x, 0), numpy.arange(12.0).reshape(3, 4).sum(0))
    out = snp.empty((3, 4))
    r = snp.multiply(x, 2, out)
    assert r is out and out.tolist() == (numpy.arange(12.0).reshape(3, 4) * 2).tolist()
    assert snp.transpose(x).shape == (4, 3)
    x.shape = (4, 3)
    assert x.shape == (4, 3) and x[3, 2].item() == 11.0
    with pytest.raises(ValueError, match="reshape"):
        x.shape = (5, 3)
    y = x.copy()
    x.fill(7)
    assert x.sum().item() == 84 and y.sum().item() == 66
    assert x.astype(snp.int32).dtype == svod.int32 and y.flatten().shape == (12,) and y.ravel().ndim == 1
    assert y.dot(snp.ones(3)).shape == (4,) and y.item(5) == 5.0 and y.item(1, 2) == 5.0


def test_ufunc_methods():
    a, b = snp.arange(3), snp.arange(4)
    numpy.testing.assert_array_equal(snp.add.outer(a, b), numpy.add.outer(numpy.arange(3), numpy.arange(4)))
    numpy.testing.assert_array_equal(snp.multiply.reduce(snp.arange(1, 5)), 24)
    numpy.testing.assert_array_equal(snp.maximum.reduce(snp.arange(6).reshape(2, 3), axis=1), [2, 5])
    numpy.testing.assert_array_equal(snp.add.accumulate(snp.arange(5)), numpy.add.accumulate(numpy.arange(5)))
    acc = snp.zeros(3)
    snp.add.at(acc, snp.asarray([0, 2, 0]), 1.5)
    assert acc.tolist() == [3.0, 0.0, 1.5]
    with pytest.raises(NotImplementedByNumpyDispatch, match="subtract.reduce"):
        snp.subtract.reduce(a)


# ----------------------------------------------------------------------------- protocols


def _t():
    """A lazy svod tensor (a result a function passes through stays unrealized)."""
    return svod.asarray(numpy.array([[4.0, 1.0, 0.5], [1.0, 3.0, 0.2], [0.5, 0.2, 2.0]])) * 1.0


# numpy name -> a call on a svod tensor (default: f(t)); None: returns a Python value
CALLS = {
    "array": None, "asarray": None, "iscomplexobj": None, "isrealobj": None,
    "ascontiguousarray": None, "shape": None, "ndim": None, "size": None,
    "allclose": None, "array_equal": None, "array_equiv": None, "result_type": None,
    "zeros": lambda f, t: f(t.shape, like=t), "ones": lambda f, t: f(t.shape, like=t),
    "empty": lambda f, t: f(t.shape, like=t), "full": lambda f, t: f(t.shape, 2.0, like=t),
    "arange": lambda f, t: f(3, like=t), "eye": lambda f, t: f(3, like=t), "identity": lambda f, t: f(3, like=t),
    "tri": lambda f, t: f(3, like=t), "linspace": lambda f, t: f(t[0, 0], t[0, 1], 4),
    "logspace": lambda f, t: f(t[0, 0], t[0, 1], 4), "full_like": lambda f, t: f(t, 3.0),
    "meshgrid": lambda f, t: f(t[0], t[1])[0], "take": lambda f, t: f(t, [0, 2]),
    "take_along_axis": lambda f, t: f(t, numpy.zeros((3, 1), int), 1),
    "searchsorted": lambda f, t: f(t[0], t[1]), "where": lambda f, t: f(t > 1, t, 0.0),
    "clip": lambda f, t: f(t, 0.5, 2.0), "isclose": lambda f, t: f(t, t), "dot": lambda f, t: f(t, t),
    "vdot": lambda f, t: f(t, t), "inner": lambda f, t: f(t, t), "outer": lambda f, t: f(t, t),
    "matmul": lambda f, t: f(t, t), "tensordot": lambda f, t: f(t, t), "kron": lambda f, t: f(t, t),
    "cross": lambda f, t: f(t, t), "concatenate": lambda f, t: f([t, t]), "stack": lambda f, t: f([t, t]),
    "hstack": lambda f, t: f([t, t]), "vstack": lambda f, t: f([t, t]), "dstack": lambda f, t: f([t, t]),
    "row_stack": None,
    "column_stack": lambda f, t: f([t, t]), "split": lambda f, t: f(t, 3)[0],
    "array_split": lambda f, t: f(t, 2)[0], "tile": lambda f, t: f(t, 2), "repeat": lambda f, t: f(t, 2),
    "roll": lambda f, t: f(t, 1), "broadcast_to": lambda f, t: f(t, (2, 3, 3)),
    "broadcast_arrays": lambda f, t: f(t, t)[0], "reshape": lambda f, t: f(t, (9,)),
    "swapaxes": lambda f, t: f(t, 0, 1), "moveaxis": lambda f, t: f(t, 0, 1),
    "expand_dims": lambda f, t: f(t, 0), "pad": lambda f, t: f(t, 1), "einsum": lambda f, t: f("ij,jk->ik", t, t),
    "cov": lambda f, t: f(t), "quantile": lambda f, t: f(t, 0.3), "percentile": lambda f, t: f(t, 30),
    "histogram": lambda f, t: f(t)[0], "histogram_bin_edges": lambda f, t: f(t),
    "atleast_1d": lambda f, t: f(t), "fmax": None, "fmin": None,
    "bincount": lambda f, t: f(svod.asarray([0, 2, 2])),
    "average": lambda f, t: f(t, axis=0, weights=t[0]), "diff": lambda f, t: f(t),
    "linalg.solve": lambda f, t: f(t, t[0]), "linalg.lstsq": lambda f, t: f(t, t[0])[0],
    "linalg.cross": lambda f, t: f(t, t), "linalg.outer": lambda f, t: f(t[0], t[1]),
    "linalg.vecdot": lambda f, t: f(t, t), "linalg.tensordot": lambda f, t: f(t, t),
    "linalg.matmul": lambda f, t: f(t, t), "linalg.matrix_power": lambda f, t: f(t, 3),
    "linalg.multi_dot": lambda f, t: f([t, t, t]),
    "fft.fftfreq": lambda f, t: f(4, t[0, 0]), "fft.rfftfreq": lambda f, t: f(4, t[0, 0]),
}
# documented eager: data-dependent shapes, numpy's accumulate, realized-indices helpers
EAGER = {"unique", "argwhere", "bincount", "cumsum", "cumprod", "nonzero", "flatnonzero", "take_along_axis",
         "linalg.lstsq", "histogram_bin_edges", "linalg.eig", "linalg.eigvals"}


def _numpy_fn(name: str):
    mod = numpy
    for part in name.split(".")[:-1]:
        mod = getattr(mod, part)
    return getattr(mod, name.split(".")[-1], None)


def _first_tensor(r):
    while isinstance(r, (tuple, list)):
        r = r[0]
    return r


@pytest.mark.parametrize("name", sorted(snp._dispatch_table()))
def test_numpy_function_on_a_tensor_stays_svod(name):
    fn = _numpy_fn(name)
    if fn is None or isinstance(fn, numpy.ufunc):
        pytest.skip(f"numpy {numpy.__version__} has no function numpy.{name} (or it is a ufunc: tested below)")
    call = CALLS.get(name, lambda f, t: f(t))
    if call is None:
        return
    t = _t()
    if call == "raises":
        with pytest.raises(TypeError, match=name.split(".")[-1]):
            fn(t)
        return
    r = _first_tensor(call(fn, t))
    assert isinstance(r, svod.Tensor) and not isinstance(r, numpy.ndarray), f"numpy.{name} gave {type(r)}"
    assert type(r) is svod.Tensor, "a plain svod tensor in, a plain svod tensor out (svod's defaults)"
    if name not in EAGER and r.ndim > 0:
        assert not r.is_realized or name in ("zeros", "ones", "empty", "full", "eye", "identity", "arange",
                                             "tri", "linspace", "fft.fftfreq", "fft.rfftfreq"), \
            f"numpy.{name} computed eagerly"


@pytest.mark.parametrize("name", sorted(snp._ufuncs.UFUNCS))
def test_numpy_ufunc_on_a_tensor_is_a_lazy_svod_op(name):
    u = getattr(numpy, name, None)
    if not isinstance(u, numpy.ufunc):
        pytest.skip(f"numpy.{name} is not a ufunc in numpy {numpy.__version__}")
    t = svod.asarray(numpy.array([[1, 2], [3, 4]], numpy.int64)) if name in (
        "left_shift", "right_shift", "bitwise_and", "bitwise_or", "bitwise_xor", "invert") else \
        svod.asarray(numpy.array([[0.5, 0.25], [0.75, 0.125]]))
    t = t + 0  # lazy
    r = u(*([t] * u.nin))
    assert type(r) is svod.Tensor and not r.is_realized
    expected = u(*([t.numpy()] * u.nin))
    numpy.testing.assert_allclose(r.numpy(), expected, rtol=1e-6)
    assert r.dtype.np == expected.dtype
    if u.nin == 2 and u.signature is None:  # generalised ufuncs (matmul, vecdot) have no outer
        assert type(u.outer(t[0], t[1])) is svod.Tensor


def test_numpy_protocols_mixed_operands_and_errors():
    t = svod.asarray([1.0, 4.0, 9.0])
    a = numpy.array([1.0, 1.0, 1.0], numpy.float32)
    r = a * t
    assert type(r) is svod.Tensor and r.tolist() == [1.0, 4.0, 9.0]
    assert type(numpy.exp(t)) is svod.Tensor and type(numpy.mean(t)) is svod.Tensor
    assert numpy.sum(t).item() == 14.0 and numpy.sum(t, 0).item() == 14.0
    c = numpy.concatenate([t, a])
    assert type(c) is svod.Tensor and c.shape == (6,) and c.dtype == svod.float32
    assert numpy.mean(svod.arange(4)).dtype == svod.float32  # svod's rules for svod tensors
    assert numpy.mean(snp.arange(4)).dtype == svod.float64  # numpy's for svod.numpy arrays
    assert type(numpy.mean(snp.arange(4))) is numpy.float64  # (computed at once: numpy's scalar)
    assert type(numpy.cumsum(snp.arange(4))) is snp.ndarray
    with pytest.raises(TypeError, match="numpy.polyfit is not implemented by svod"):
        numpy.polyfit(t, t, 1)
    with pytest.raises(TypeError, match="numpy.gradient is not implemented by svod"):
        numpy.gradient(t)
    f = numpy.fft.rfft(t)  # numpy's dispatch to svod: a pocketfft library step
    assert type(f) is svod.Tensor and f.dtype == svod.complex64
    numpy.testing.assert_array_equal(f.numpy(), numpy.fft.rfft(t.numpy()))
    assert isinstance(numpy.asarray(t), numpy.ndarray)  # the explicit conversion leaves svod
    out = numpy.zeros(3, numpy.float32)
    numpy.add(t, 1, out=out)
    assert out.tolist() == [2.0, 5.0, 10.0]


# ----------------------------------------------------------------------------- DLPack


def test_dlpack_with_numpy_is_zero_copy():
    t = svod.asarray(numpy.arange(6.0).reshape(2, 3)) * 2
    view = numpy.from_dlpack(t)
    assert numpy.shares_memory(view, t.numpy()) and not view.flags.writeable
    assert view.tolist() == (numpy.arange(6.0).reshape(2, 3) * 2).tolist()
    assert t.__dlpack_device__() == (1, 0)
    src = numpy.arange(5.0)
    s = svod.from_dlpack(src)
    assert numpy.shares_memory(s.numpy(), src) and (s * 2).tolist() == [0.0, 2.0, 4.0, 6.0, 8.0]
    assert not numpy.shares_memory(svod.from_dlpack(src, copy=True).numpy(), src)
    legacy = t.__dlpack__()  # a consumer of DLPack < 1.0 cannot be told "read-only": it gets a copy
    assert legacy is not None
    with pytest.raises(BufferError):
        t.__dlpack__(copy=False)


def test_dlpack_with_torch():
    torch = pytest.importorskip("torch")
    t = svod.asarray(numpy.arange(4.0, dtype=numpy.float32)) + 1
    tt = torch.from_dlpack(t)
    assert tt.tolist() == [1.0, 2.0, 3.0, 4.0]
    back = svod.from_dlpack(torch.arange(3, dtype=torch.float64))
    assert back.dtype == svod.float64 and (back * 2).tolist() == [0.0, 2.0, 4.0]


def test_array_namespace_info():
    info = svod.__array_namespace_info__()
    assert info.default_device() == "cpu" and info.devices() == ["cpu"]
    assert info.default_dtypes()["real floating"] == svod.float32
    assert set(info.dtypes()) == {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                                  "float32", "float64", "complex64", "complex128"}
    assert set(info.dtypes(kind="real floating")) == {"float32", "float64"}
    assert set(info.dtypes(kind="complex floating")) == {"complex64", "complex128"}
    assert info.default_dtypes()["complex floating"] == svod.complex64
    assert set(info.dtypes(kind="unsigned integer")) == {"uint8", "uint16", "uint32", "uint64"}
    assert set(info.dtypes(kind=("bool", "signed integer"))) == {"bool", "int8", "int16", "int32", "int64"}
    assert svod.asarray([1.0]).to_device("cpu").device == "cpu"
    assert math.isclose(float(svod.asarray([2.0]).__array_namespace__().sqrt(svod.asarray(4.0))), 2.0)


@pytest.mark.parametrize("d", ["int8", "int16", "uint8", "uint16", "uint32", "uint64"])
def test_numpy_ufuncs_on_the_integer_widths(d):
    """Every ufunc of svod.numpy on each narrow or unsigned integer dtype equals numpy's,
    dtype included -- except where numpy computes in float16 (float functions of 1-byte
    integers), which svod does not have: float32 there."""
    a = numpy.array([[0, 1, 2, 3], [7, 64, 100, 127]], d)
    b = numpy.array([[3, 1, 0, 2], [2, 7, 9, 1]], d)
    got, want = {}, {}
    for name in sorted(snp._ufuncs.UFUNCS):
        nu = getattr(numpy, name, None)
        if not isinstance(nu, numpy.ufunc) or nu.signature or name == "reciprocal":  # integer 1/x: platform C
            continue
        args = [a, b][:nu.nin]
        try:
            with numpy.errstate(all="ignore"):
                want[name] = numpy.asarray(nu(*args))
                if want[name].dtype == numpy.float16:  # the same function in float32, as svod computes it
                    want[name] = numpy.asarray(nu(*[x.astype(numpy.float32) for x in args]))
        except TypeError:
            with pytest.raises(TypeError):
                getattr(snp, name)(*[snp.asarray(x) for x in args])
            continue
        got[name] = getattr(snp, name)(*[snp.asarray(x) for x in args])
    svod.realize(*got.values())
    for name, w in want.items():
        g = got[name].numpy()
        assert g.dtype == w.dtype, f"{name} on {d}: dtype {g.dtype} != numpy's {w.dtype}"
        numpy.testing.assert_allclose(g, w, rtol=1e-6, err_msg=f"{name} on {d}")
    assert svod.stats()["interpreter_fallbacks"] == 0


@pytest.mark.parametrize("d", ["int8", "uint8", "int16", "uint32", "uint64"])
def test_numpy_reductions_and_functions_on_the_integer_widths(d):
    a = numpy.array([[4, 1, 7, 200], [1, 3, 2, 255], [5, 2, 2, 9]]).astype(d)
    x = snp.asarray(a)
    with numpy.errstate(all="ignore"):
        cases = {
            "sum": (snp.sum(x, axis=0), numpy.sum(a, axis=0)),
            "prod": (snp.prod(x), numpy.prod(a)),
            "mean": (snp.mean(x, axis=1), numpy.mean(a, axis=1)),
            "max": (snp.max(x, 1), numpy.max(a, 1)),
            "argmin": (snp.argmin(x, axis=1), numpy.argmin(a, axis=1)),
            "cumsum": (snp.cumsum(x), numpy.cumsum(a)),
            "cumprod": (snp.cumprod(x, axis=1), numpy.cumprod(a, axis=1)),
            "clip": (snp.clip(x, 2, 6), numpy.clip(a, 2, 6)),
            "clip_float": (snp.clip(x, 0.5, 6), numpy.clip(a, 0.5, 6)),
            "sort": (snp.sort(x, axis=0), numpy.sort(a, axis=0)),
            "diff": (snp.diff(x), numpy.diff(a)),
            "where": (snp.where(x > 3, x, 0), numpy.where(a > 3, a, 0)),
            "dot": (snp.dot(x, x.T), numpy.dot(a, a.T)),
            "bincount": (snp.bincount(snp.ravel(x[:, :3]).astype(snp.int64)),
                         numpy.bincount(numpy.ravel(a[:, :3]).astype(numpy.int64))),
            "unique": (snp.unique(x), numpy.unique(a)),
            "count_nonzero": (snp.count_nonzero(x > 4), numpy.count_nonzero(a > 4)),
            "astype": (x.astype(snp.float32), a.astype(numpy.float32)),
            "zeros": (snp.zeros(3, snp.dtype(d)), numpy.zeros(3, d)),
            "arange": (snp.arange(5, dtype=d), numpy.arange(5, dtype=d)),
            "full": (snp.full(2, 7, d), numpy.full(2, 7, d)),
        }
    for name, (g, w) in cases.items():
        g, w = numpy.asarray(g.numpy() if isinstance(g, svod.Tensor) else g), numpy.asarray(w)
        assert g.dtype == w.dtype, f"{name} on {d}: dtype {g.dtype} != numpy's {w.dtype}"
        numpy.testing.assert_allclose(g, w, rtol=1e-12, err_msg=f"{name} on {d}")
    assert snp.iinfo(snp.dtype(d)).max == numpy.iinfo(d).max
    assert getattr(snp, d) is getattr(svod, d) and snp.dtype(d) is getattr(svod, d)
