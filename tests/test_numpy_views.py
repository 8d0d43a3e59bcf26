"""Big parts `x[key]` on svod.numpy's fast path are views of x's memory (svod/numpy/_fast.py,
`_getitem`), yet values: no write ever shows through one. Writes detach the views the fast
path recorded (`svod.eager.detach_views`) and then go in place; any other holder of x's
memory (a view in a local, an exported array, a materialized node) makes the write go into
a copy. Differential against numpy with explicit copies (svod's slices are values)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import svod
import svod.numpy as snp
from svod import eager
from svod.eager import Fresh
from svod.ir import UOp
from svod.numpy import _fast

N = 600  # float64 elements: parts of more than _fast._VIEW_MIN bytes are views
SPECIAL = [np.nan, -0.0, np.inf, -np.inf, 5e-324, 1e308]


def _owned(values) -> snp.ndarray:
    """A realized svod array that owns its memory (written once: the caller's array copied)."""
    x = snp.asarray(np.array(values, dtype=np.float64))
    x[0] = x[0]  # (the first write copies the caller's array into one of ours)
    return x


def _arr(t) -> np.ndarray:
    return eager.array_of(t.uop)


def _base():
    v = np.arange(float(N))
    v[:len(SPECIAL)] = SPECIAL
    return v


def test_a_big_part_is_a_view_and_a_small_one_a_copy():
    assert (N - 2) * 8 > 2 * _fast._VIEW_MIN and 18 * 29 * 8 > _fast._VIEW_MIN and 400 * 8 > _fast._VIEW_MIN
    x = _owned(_base())
    v = x[1:-1]
    assert type(v.uop) is Fresh and _arr(v).base is _arr(x), "a big part shares x's memory"
    s = x[2:10]
    assert _arr(s).base is None, "a small part is copied"
    m = _owned(_base().reshape(20, 30))
    col = m[:, 3]  # 20 elements: a copy
    slab = m[2:, 1:]  # a strided 2-D view
    assert _arr(col).base is None and _arr(slab).base is _arr(m) and not _arr(slab).flags.c_contiguous
    np.testing.assert_array_equal(slab.numpy(), _base().reshape(20, 30)[2:, 1:])


def test_writes_of_x_never_show_through_a_view():
    want = _base()
    x = _owned(want)
    addr = _arr(x).__array_interface__["data"][0]
    v = x[1:-1]
    w = v[10:-10]  # a view of the view: its base is x's array too
    x[5] = -1.0
    x[100:200] = 7.0
    want_v, want_w = want[1:-1].copy(), want[11:-11].copy()
    np.testing.assert_array_equal(v.numpy(), want_v)
    np.testing.assert_array_equal(w.numpy(), want_w)
    assert np.signbit(v.numpy()[0]) and np.isnan(x.numpy()[0])  # (-0.0 and NaN kept)
    got = x.numpy()
    want[5] = -1.0
    want[100:200] = 7.0
    np.testing.assert_array_equal(got, want)
    assert _arr(x).__array_interface__["data"][0] == addr, "the recorded views were detached: in place"


def test_a_view_held_elsewhere_makes_the_write_copy():
    want = _base()
    x = _owned(want)
    v = x[1:-1]
    held = _arr(v)  # a local holding the view itself (not only its node)
    exported = np.asarray(x[:-1])  # an exported (materialized) part: its own copy
    addr = _arr(x).__array_interface__["data"][0]
    x[3] = 42.0
    assert _arr(x).__array_interface__["data"][0] != addr, "a live view in a local: the write copies x"
    np.testing.assert_array_equal(held, want[1:-1])
    np.testing.assert_array_equal(exported, want[:-1])
    np.testing.assert_array_equal(v.numpy(), want[1:-1])
    assert x.numpy()[3] == 42.0


def test_materializing_a_view_copies_it_into_c_order():
    m = _owned(_base().reshape(20, 30))
    slab = m[2:, 1:]
    u = slab.uop
    arr = u.arg.array  # materialization
    assert arr.base is None and arr.flags.c_contiguous and not arr.flags.writeable
    assert u._sig == UOp.buffer(np.ascontiguousarray(arr), u.dtype)._sig, "a copy's signature"
    m[5, 5] = -3.0  # x is written in place again (the materialized node holds its own copy)
    np.testing.assert_array_equal(arr, _base().reshape(20, 30)[2:, 1:])


def test_views_under_lazy_consumers_jit_and_pickle():
    import pickle

    want = _base()
    x = _owned(want)
    v = x[1:-1]
    with svod.eager_mode(False):
        g = v * 2.0 + 1.0
    x[7] = 0.5
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(g.numpy(), want[1:-1] * 2.0 + 1.0)
    p = x[2:]
    f = svod.jit(lambda t: t + p)
    y = _owned(want)
    x[9] = 0.25
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(f(y[:-2]).numpy(), want[:-2] + want[2:])
    q = x[3:]
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(q)).numpy(), x.numpy()[3:])
    np.testing.assert_array_equal(np.from_dlpack(x[4:]), x.numpy()[4:])


def test_overlapping_writes_of_x_into_itself():
    want = _base()
    x = _owned(want)
    x[1:] = x[:-1]  # the value is x's memory: it must be read before x is written
    want[1:] = want[:-1].copy()
    np.testing.assert_array_equal(x.numpy(), want)
    x[:-3] = x[3:] * 1.0
    want[:-3] = want[3:].copy()
    np.testing.assert_array_equal(x.numpy(), want)


def _keep_row(xp, a):
    """Rows held while others are written (numpy needs the copies; svod's parts are values)."""
    n = a.shape[0]
    for k in range(n - 1):
        pivot = a[k] if xp is not np else a[k].copy()
        for i in range(k + 1, n):
            a[i] = a[i] - 0.5 * pivot
        a[k] = pivot * 2.0
    return a


def _jacobi(xp, a, steps=5):
    b = xp.zeros_like(a)
    for _ in range(steps):
        b[1:-1] = 0.33333 * (a[:-2] + a[1:-1] + a[2:])
        a[1:-1] = 0.33333 * (b[:-2] + b[1:-1] + b[2:])
    return a


@pytest.mark.parametrize("prog,shape", [(_keep_row, (6, 400)), (_jacobi, (2000,))])
def test_loops_over_views_equal_numpy(prog, shape):
    rng = np.random.default_rng(0)
    a = rng.standard_normal(shape)
    a.flat[:len(SPECIAL)] = SPECIAL
    with np.errstate(all="ignore"):
        want = prog(np, a.copy())
        for _ in range(2):  # (the second run: every combination learned, all on the fast path)
            got = prog(snp, snp.asarray(a.copy())).numpy()
    np.testing.assert_array_equal(got, want)


def test_keeping_a_row_copies_the_row_not_the_matrix():
    """A loop that holds a big row while it writes others: the first write detaches the row
    (one copy of it), the later writes go in place."""
    x = _owned(np.arange(8.0 * 400).reshape(8, 400))
    pivot = x[0]
    assert _arr(pivot).base is _arr(x)
    addr = _arr(x).__array_interface__["data"][0]
    for i in range(1, 8):
        x[i] = pivot * 1.0
    assert _arr(x).__array_interface__["data"][0] == addr and _arr(pivot).base is None
    np.testing.assert_array_equal(x.numpy()[1:], np.tile(np.arange(400.0), (7, 1)))


def test_the_view_registry_stays_bounded():
    for _ in range(3 * eager._VIEWS_MAX):
        x = _owned(np.zeros(N))
        x[1:]  # noqa: B018 - a view recorded, then dropped
    assert len(eager._views) <= eager._VIEWS_MAX
    assert sys.getrefcount(x) >= 2
    held = [_owned(np.zeros(N)) for _ in range(eager._VIEWS_MAX + 10)]
    views = [h[1:] for h in held]  # more owners with live views than the sweep limit
    assert eager._views_limit >= len(eager._views) >= eager._VIEWS_MAX
    for h, v in zip(held, views):
        h[3] = 1.0  # detached: in place; the view keeps its value
        assert v.numpy()[2] == 0.0 and h.numpy()[3] == 1.0
