"""Every named workload (svod/workloads.py) equals its numpy reference at small shapes."""

from __future__ import annotations

import doctest

import numpy as np
import pytest

import svod
from svod import workloads

REQUIRED = {"w1_elementwise", "w2_softmax", "w3_layernorm", "w4_mlp", "w5_attention", "w6_reductions",
            "w7_small_chain", "gelu", "residual", "rmsnorm", "mean_var", "multi_axis_reduce", "broadcast_bias",
            "softmax_axis0", "log_softmax", "diamond"}


def _as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


def test_registry_has_the_design_workloads():
    assert REQUIRED <= set(workloads.names())
    assert workloads.names() == list(workloads.WORKLOADS)
    for name in workloads.names():
        w = workloads.get(name)
        assert w.name == name and w.description
        assert set(w.small_shapes) == set(w.default_shapes)
    with pytest.raises(KeyError, match="w2_softmax"):
        workloads.get("no_such_workload")


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_small_shapes_match_reference(name):
    w = workloads.get(name)
    arrays = w.make_inputs(w.small_shapes, seed=1)
    for k, a in arrays.items():
        assert a.dtype == np.float32 and a.shape == tuple(w.small_shapes[k])
    outs = w.build(**w.tensors(arrays))
    assert all(isinstance(o, svod.Tensor) for o in _as_tuple(outs))
    assert not any(o.is_realized for o in _as_tuple(outs)), "build must stay lazy"
    svod.realize(*_as_tuple(outs))
    with np.errstate(all="ignore"):
        want = _as_tuple(w.reference(**{k: v.copy() for k, v in arrays.items()}))
    got = _as_tuple(outs)
    assert len(got) == len(want)
    for g, r in zip(got, want):
        r = np.asarray(r)
        assert g.dtype == svod.float32 and r.dtype == np.float32, (g.dtype, r.dtype)
        assert g.shape == r.shape
        np.testing.assert_allclose(g.numpy(), r, rtol=w.rtol, atol=w.atol)


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_default_shapes_build_lazily(name):
    """The graph at measuring size builds without computing anything (zeros are lazy consts)."""
    w = workloads.get(name)
    svod.reset_stats()
    outs = _as_tuple(w.build(**{k: svod.zeros(s) for k, s in w.default_shapes.items()}))
    assert all(o.dtype == svod.float32 for o in outs)
    assert svod.stats()["realizes"] == 0
    small = _as_tuple(w.reference(**w.make_inputs(w.small_shapes)))
    assert [o.ndim for o in outs] == [np.ndim(s) for s in small]


def test_run_and_seeds():
    a = workloads.run("w7_small_chain", small=True)
    b = workloads.run("w7_small_chain", small=True)
    np.testing.assert_array_equal(a, b)
    c = workloads.run("w7_small_chain", shapes={"x": (10,)}, seed=3)
    assert c.shape == (10,) and c.dtype == np.float32
    w = workloads.get("w7_small_chain")
    np.testing.assert_allclose(c, w.reference(**w.make_inputs({"x": (10,)}, seed=3)), rtol=w.rtol, atol=w.atol)
    outs = workloads.run("w6_reductions", small=True)
    assert isinstance(outs, tuple) and len(outs) == 6
    assert [o.shape for o in outs] == [(53,), (37,), (), (53,), (37,), ()]
    s0 = workloads.get("w3_layernorm").make_inputs(workloads.get("w3_layernorm").small_shapes, seed=0)
    s1 = workloads.get("w3_layernorm").make_inputs(workloads.get("w3_layernorm").small_shapes, seed=1)
    assert not np.array_equal(s0["x"], s1["x"])
    with pytest.raises(ValueError, match="lack inputs"):
        workloads.get("w3_layernorm").make_inputs({"x": (2, 4)})


def test_module_docstring_runs():
    res = doctest.testmod(workloads, verbose=False)
    assert res.attempted > 0 and res.failed == 0
