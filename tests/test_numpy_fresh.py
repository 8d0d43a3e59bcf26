"""Fast-path results as unmaterialized nodes (`svod.eager.Fresh`): every reader of `.uop` sees
a correct realized node; 0-d values held as numpy scalars; in-place writes of fresh
values; numpy's floating-point warnings off only where svod's compiled code is quiet."""

from __future__ import annotations

import pickle
import sys

import numpy as np
import pytest

import svod
import svod.numpy as snp
from svod import eager
from svod.eager import Fresh
from svod.errors import ShapeError, SvodIndexError
from svod.ir import Ops, UOp
from svod.numpy import _fast


def _warm(fn, times=2):
    """fn() called so that the memo has learned its combinations; its last result."""
    for _ in range(times):
        r = fn()
    return r


def _fresh_row():
    a = snp.asarray(np.arange(12.0).reshape(3, 4))
    r = _warm(lambda: a[1] + a[2])
    return a, r


def test_a_fast_result_is_an_unmaterialized_realized_leaf():
    a, r = _fresh_row()
    u = r.uop
    assert type(u) is Fresh and isinstance(u, UOp) and u.op is Ops.BUFFER and r.is_realized
    assert u._a is not None and r.shape == (4,) and r.dtype is snp.float64
    assert type(r) is snp.ndarray


def test_materialization_gives_what_uop_buffer_gives():
    _, r = _fresh_row()
    u = r.uop
    arr = u._a
    ref = u.arg  # the first read of a lazy slot
    assert u._a is None and ref.array is arr and not arr.flags.writeable
    twin = UOp.buffer(arr, u.dtype)
    assert u.src == () and u._depth == 0 and u._sig == twin._sig and u._leaves == (ref,)
    assert u._hash is None and u._kb is None and u.shape == twin.shape
    np.testing.assert_array_equal(r.numpy(), np.arange(4.0, 8.0) + np.arange(8.0, 12.0))
    with pytest.raises(AttributeError):
        _ = u.no_such_slot


def test_an_element_is_numpys_scalar_and_a_0d_fresh_value_a_scalar_until_read_as_an_array():
    a = snp.asarray(np.arange(12.0).reshape(3, 4))
    e = _warm(lambda: a[1, 2])
    assert type(e) is np.float64 and e == 6.0  # numpy's scalar, as numpy gives it
    assert a[1:2, 3:4].item() == 7.0 and a[1].item(2) == 6.0 and list(range(10))[int(e)] == 6
    with pytest.raises(ValueError, match="item"):
        a[1].item()
    # a 0-d svod array (numpy's asarray of a scalar gives one too) written in place holds a scalar
    z = snp.asarray(np.float64(6.0))
    z += 0.0
    z += 1.0  # (learned: the fast path)
    assert type(z) is snp.ndarray and type(z.uop) is Fresh and isinstance(z.uop._a, np.generic)
    assert z.shape == () and z.ndim == 0 and z.dtype is snp.float64
    assert float(z) == 7.0 and int(z) == 7 and bool(z) and z.item() == 7.0 and type(z.item()) is float
    assert type(z.uop) is Fresh and z.uop._a is not None, "reading a value builds no node"
    t = _warm(lambda: z > 5)
    assert type(t) is np.bool_ and t  # (a 0-d result of an op: numpy's scalar)
    n = z.numpy()  # materialized: a read-only 0-d array
    assert isinstance(n, np.ndarray) and n.shape == () and n.dtype == np.float64 and float(n) == 7.0
    assert type(z.uop._a) is type(None)
    z[()] = 2.5  # a write into a 0-d value (into a copy: it was exported)
    assert float(z) == 2.5 and float(n) == 7.0


def test_consumers_explain_jit_lazy_mode_and_protocols():
    a, r = _fresh_row()
    # a lazy graph over a fresh value (eager off): the node is read as a leaf, the value is right
    with svod.eager_mode(False):
        g = r * 2.0 + a[0]
        assert not g.is_realized
        svod.explain(g)  # reads the graph, the fresh leaf included
    np.testing.assert_array_equal(g.numpy(), (np.arange(4.0, 8.0) + np.arange(8.0, 12.0)) * 2 + np.arange(4.0))
    # svod.jit: a fresh value as an argument and as a closure constant
    _, r2 = _fresh_row()
    f = svod.jit(lambda x: x * 3.0 + r2)
    np.testing.assert_allclose(f(r).numpy(), r.numpy() * 3.0 + r2.numpy())
    _, r3 = _fresh_row()
    np.testing.assert_allclose(f(r3).numpy(), r3.numpy() * 3.0 + r2.numpy())
    # numpy protocols, pickling, DLPack
    _, r4 = _fresh_row()
    want = np.arange(4.0, 8.0) + np.arange(8.0, 12.0)
    np.testing.assert_array_equal(np.asarray(r4), want)
    _, r5 = _fresh_row()
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(r5)).numpy(), want)
    _, r6 = _fresh_row()
    np.testing.assert_array_equal(np.from_dlpack(r6), want)
    _, r7 = _fresh_row()
    assert repr(r7).startswith("array(") and str(r7) == str(want)


def test_in_place_writes_of_fresh_values_and_their_aliases():
    a = snp.asarray(np.arange(12.0).reshape(3, 4))
    x = _warm(lambda: a[1] * 1.0)
    x[0] = 9.0
    x[0] = 1.5  # sole owner: in place
    assert eager.sole_owner(x)
    arr_id = id(x.uop._a)
    assert x.uop._a.flags.owndata
    x[1:3] = _warm(lambda: a[0, :2] + 0.0)
    assert id(x.uop._a) == arr_id, "a sole owner is written in place (no copy)"
    np.testing.assert_array_equal(x.numpy(), [1.5, 0.0, 1.0, 7.0])
    # an alias (the same Python object) sees the write; an exported view and a copy do not
    y = x
    held = x.numpy()
    c = x[:]
    x[3] = -0.0
    assert float(y[3]) == 0.0 and np.signbit(y.numpy()[3])
    np.testing.assert_array_equal(held, [1.5, 0.0, 1.0, 7.0])
    np.testing.assert_array_equal(c.numpy(), [1.5, 0.0, 1.0, 7.0])
    # another holder of the node keeps the old value (reference counts: not the sole owner)
    z = _warm(lambda: a[2] + 0.0)
    keep = z.uop
    assert not eager.sole_owner(z)
    z[0] = 100.0
    assert float(z[0]) == 100.0 and type(keep) is Fresh
    np.testing.assert_array_equal(keep.arg.array, np.arange(8.0, 12.0))


def test_fast_setitem_keeps_svods_errors_and_leaves_the_target_unchanged():
    a = snp.asarray(np.arange(12.0).reshape(3, 4))
    x = _warm(lambda: a[1] + 0.0)
    _warm(lambda: x.__setitem__(0, 1.0))
    before = x.numpy().copy()
    with pytest.raises(ShapeError, match="setitem"):
        x[1:3] = _warm(lambda: snp.asarray(np.ones((1, 1, 2))) * 1.0)  # numpy would broadcast this
    with pytest.raises(SvodIndexError, match="setitem"):
        x[7] = 2.0
    with pytest.raises(ShapeError):
        x[0:2] = _warm(lambda: a[0] + 0.0)  # 4 values into 2
    np.testing.assert_array_equal(x.numpy(), before)


def test_fast_ops_silence_numpy_warnings_and_leave_the_users_errstate():
    x = snp.asarray(np.array([np.inf, 1e308, 0.0, np.nan]))
    y = snp.asarray(np.array([np.inf, 1e308, 0.0, 1.0]))
    c = snp.asarray(np.array([np.nan + 1j, 1 + 1j]))
    before = _fast.stats()["fast"]
    before_err = np.geterr()
    with np.errstate(all="raise"):
        for _ in range(2):  # the first call learns, the second is fast
            d = x - y  # inf - inf: invalid
            m = x * y  # overflow
            q = x / y  # 0/0
            lt = x < y  # NaN comparisons
            cl = c == c  # complex comparisons flag "invalid" on numpy
            n = -x
    assert _fast.stats()["fast"] > before
    assert np.geterr() == before_err, "the error state is the user's again"
    with np.errstate(all="raise"):
        np.testing.assert_array_equal(d.numpy(), [np.nan, 0.0, 0.0, np.nan])
        np.testing.assert_array_equal(m.numpy(), [np.inf, np.inf, 0.0, np.nan])
        np.testing.assert_array_equal(q.numpy(), [np.nan, 1.0, np.nan, np.nan])
        np.testing.assert_array_equal(lt.numpy(), [False, False, False, False])
        np.testing.assert_array_equal(cl.numpy(), [False, True])
        np.testing.assert_array_equal(n.numpy(), [-np.inf, -1e308, -0.0, np.nan])
        assert np.signbit(n.numpy()[2])
    with pytest.raises(FloatingPointError):  # the user's own numpy keeps its error state
        with np.errstate(all="raise"):
            np.array([np.inf]) - np.array([np.inf])


def test_quiet_state_is_skipped_only_where_numpy_cannot_flag():
    import svod as s
    assert not _fast._noisy(("add", s.int64, s.int64)) and not _fast._noisy(("less", s.int32, int))
    assert _fast._noisy(("divide", s.int64, s.int64)) and _fast._noisy(("add", s.float64, float))
    assert _fast._noisy(("less", s.complex128, s.complex128)) and _fast._noisy(("less", s.float64, complex))
    assert _fast._noisy(("sqrt", s.int64, None))
    assert _fast._noisy(("less", s.float64, s.float64)) is not _fast._COMPARE_EXACT


def test_fresh_values_in_a_loop_program_equal_numpy():
    from svod.bench import loops

    rows = loops.run(n=6, repeats=2)
    assert all(r["ok"] for r in rows), [(r["program"], r["ok"]) for r in rows]
    assert all(r["searches"] == 0 and r["kernels_compiled"] == 0 for r in rows)


def test_refcounts_for_fresh_nodes_were_calibrated():
    assert eager._BASE_FU >= 2 and eager._BASE_FA >= 2
    t = snp.asarray(np.arange(3.0))
    v = _warm(lambda: t + 1.0)
    assert eager.sole_owner(v)
    other = v.uop._a
    assert not eager.sole_owner(v)  # a local holding the array
    del other
    assert eager.sole_owner(v)
    assert sys.getrefcount(v) >= 2


def test_a_value_with_more_axes_than_the_region_takes_the_full_path():
    """numpy would write a (1,)-shaped value into one element (and a (1, 1, n) one into a
    row); svod's broadcast rule decides, as with the fast path off."""
    a = snp.asarray(np.arange(12.0).reshape(3, 4))
    one = _warm(lambda: a[0, :1] + 0.0)
    outcomes = []
    for mode in (True, False):
        x = _warm(lambda: a[1] + 0.0)
        with svod.eager_mode(mode):
            try:
                x[0] = one
                outcomes.append(("ok", x.numpy().tolist()))
            except Exception as e:  # noqa: BLE001 - the two paths must agree on the outcome
                outcomes.append((type(e), str(e)))
    assert outcomes[0] == outcomes[1], outcomes


SPECIAL = [0.0, -0.0, 1.5, -2.25, np.inf, -np.inf, np.nan, 1e308, 5e-324, 3.0]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("op", ["add", "sub", "mul", "truediv", "lt", "le", "gt", "ge", "eq", "ne"])
def test_scalar_math_of_0d_values_is_the_ufuncs_bit_for_bit(dtype, op):
    """An element is numpy's scalar (bits and type of numpy's element), and what it meets is
    numpy's: two of them (or one and a Python float/int) are numpy's scalar math itself, in
    the caller's error state. A 0-d *svod array* (`asarray` of a scalar) with them is svod's
    op — quiet, as svod's compiled code — whose result is numpy's scalar with the ufunc's
    bits and dtype."""
    import operator as o

    ufunc = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "truediv": np.true_divide, "lt": np.less,
             "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal, "eq": np.equal, "ne": np.not_equal}[op]
    f = getattr(o, op)
    vals = snp.asarray(np.array(SPECIAL, dtype=dtype))
    arr = np.array(SPECIAL, dtype=dtype)
    for i in range(len(SPECIAL)):
        x = vals[i]
        assert type(x) is type(arr[i]) and x.tobytes() == arr[i].tobytes()
        z = snp.asarray(arr[i])  # a 0-d svod array
        for j in range(len(SPECIAL)):
            for other, ref in ((vals[j], arr[j:j + 1].reshape(())), (SPECIAL[j], SPECIAL[j]), (2, 2)):
                with np.errstate(all="raise"):
                    f(z, other)  # (learns the combination: the full path)
                    got = f(z, other)
                    f(other, z)
                    rgot = f(other, z)
                with np.errstate(all="ignore"):
                    want = ufunc(arr[i:i + 1].reshape(()), ref)
                    rwant = ufunc(ref, arr[i:i + 1].reshape(()))
                for g, w in ((got, want), (rgot, rwant)):
                    assert type(g) is type(w) and g.tobytes() == w.tobytes(), (op, dtype, SPECIAL[i], SPECIAL[j], g, w)
                # the element itself: numpy's scalar math, numpy's flags in numpy's error state
                nref = arr[j] if type(other) is not type(ref) else ref  # (numpy's own element)
                for args in ((x, other), (other, x)):
                    with np.errstate(all="ignore"):
                        w = f(arr[i], nref) if args[0] is x else f(nref, arr[i])
                        g = f(*args)
                    assert type(g) is type(w) and g.tobytes() == w.tobytes()
                    errs = []
                    for a_ in (args, (arr[i], nref) if args[0] is x else (nref, arr[i])):
                        try:
                            with np.errstate(all="raise"):
                                f(*a_)
                            errs.append(None)
                        except FloatingPointError as e:
                            errs.append(str(e))
                    assert errs[0] == errs[1], (op, dtype, SPECIAL[i], SPECIAL[j], errs)


def test_materialization_turns_a_fresh_node_into_a_plain_leaf():
    """A Fresh node has no `__getattr__` (attribute reads of the fast path stay specialized):
    its lazy slots are properties, its shape is its value's; the first read of a lazy slot
    fills UOp's slots and makes it a FreshLeaf, whose reads are plain slot reads."""
    from svod.eager import FreshLeaf

    _, r = _fresh_row()
    u = r.uop
    assert type(u) is Fresh and "__getattr__" not in vars(Fresh) and "__getattr__" not in vars(FreshLeaf)
    assert u.shape == (4,) and u.op is Ops.BUFFER and type(u) is Fresh, "shape and op build nothing"
    ref = u._leaves[0]  # a lazy slot: materializes
    assert type(u) is FreshLeaf and isinstance(u, UOp) and u._a is None and u.arg is ref
    assert u.shape == (4,) and u.op is Ops.BUFFER and u.src == () and u._depth == 0
    assert not eager.sole_owner(r) or r.uop is u  # (a materialized leaf: the BufferRef path)
    # a FreshLeaf is a realized BUFFER for the fast path, the frontend and the engine
    s = _warm(lambda: r + 1.0)
    np.testing.assert_array_equal(s.numpy(), np.arange(4.0, 8.0) + np.arange(8.0, 12.0) + 1.0)
    with svod.eager_mode(False):
        g = r * 2.0
    np.testing.assert_array_equal(g.numpy(), (np.arange(4.0, 8.0) + np.arange(8.0, 12.0)) * 2.0)
    r[0] = -0.0  # written: in place or into a copy, rebound to a new Fresh node
    assert type(r.uop) is Fresh and np.signbit(r.numpy()[0])


def test_memo_tables_follow_the_memo():
    """The hot paths read `_memo.table(name)[dtype][kind]`; writes and `clear()` of the memo
    keep the tables in step (a cleared memo relearns; a combination marked slow stays slow)."""
    x = snp.asarray(np.arange(3.0))
    _fast._memo.clear()
    assert not _fast._memo.table("add")
    x + x
    key = ("add", snp.float64, snp.float64)
    assert _fast._memo[key] == _fast._memo.table("add")[snp.float64][snp.float64] and _fast._memo[key][0] is snp.float64
    _fast._memo[key] = False
    before = _fast.stats()["fast"]
    np.testing.assert_array_equal((x + x).numpy(), np.arange(3.0) * 2)
    assert _fast.stats()["fast"] == before, "marked slow: the full path"
    _fast._memo.clear()
    assert _fast._memo.table("add") == {} and key not in _fast._memo
    x + x
    before = _fast.stats()["fast"]
    x + x
    assert _fast.stats()["fast"] == before + 1


def test_keys_with_zero_steps_or_other_bounds_take_the_full_path():
    a = snp.asarray(np.arange(12.0).reshape(3, 4))
    a[1, ::2]  # (warm)
    for bad in (lambda: a[1, ::0], lambda: a[::0], lambda: a.__setitem__((1, slice(None, None, 0)), 1.0)):
        with pytest.raises(ValueError, match="step"):  # the full path's error (numpy's too)
            bad()
    want = np.arange(12.0).reshape(3, 4)
    # basic keys with numpy ints as bounds, None, Ellipsis: numpy's basic indexing (a view: fast)
    for key in [(1, slice(np.int64(1), None)), (1, slice(None, 3, np.int64(2))), (None, 1), (Ellipsis, 2),
                (np.int64(2), slice(1, 3))]:
        before = _fast.stats()["fast"]
        np.testing.assert_array_equal(np.asarray(a[key]), want[key])
        assert _fast.stats()["fast"] == before + 1
    # advanced keys (lists, integer and boolean arrays, a bool): the full path, numpy's answer
    for key in [[0, 2], (1, [0, 3]), np.array([True, False, True]), (np.array([0, 2]), slice(1, 3)), True]:
        before = _fast.stats()["fast"]
        np.testing.assert_array_equal(np.asarray(a[key]), want[key])
        assert _fast.stats()["fast"] == before


def test_the_quiet_context_per_thread_and_when_entered_already():
    """Noisy fast ops run in a per-thread context whose numpy error state is quiet
    (`_fast._QuietContext`); another thread gets its own; an op run while this thread's
    context is entered (a finaliser during the call) falls back to setting the state."""
    import threading

    x = snp.asarray(np.array([np.inf, 1e308, 0.0, -0.0]))
    y = snp.asarray(np.array([np.inf, 1e308, 0.0, 1.0]))
    _warm(lambda: x - y)
    _warm(lambda: x / y)
    with np.errstate(all="ignore"):  # (numpy's own bits: the NaN of inf - inf has its sign bit set on x86)
        want_d = x.numpy() - y.numpy()
        want_q = x.numpy() / y.numpy()
    out, errors = {}, []

    def work(i):
        try:
            with np.errstate(all="raise"):
                for _ in range(50):
                    d, q = x - y, x / y
            out[i] = (d.numpy(), q.numpy())
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(out) == 4
    for d, q in out.values():
        _bits = lambda a, b: a.tobytes() == b.tobytes() or (np.array_equal(a, b, equal_nan=True)  # noqa: E731
                                                            and np.array_equal(np.signbit(a), np.signbit(b)))
        assert _bits(d, want_d) and _bits(q, want_q), (d, q)
    before = _fast.stats()["fast"]
    with np.errstate(all="raise"):
        nested = _fast._q.run(lambda: x / y)  # this thread's quiet context entered: the fallback
    assert _fast.stats()["fast"] == before + 1
    np.testing.assert_array_equal(nested.numpy(), want_q)
    with pytest.raises(FloatingPointError):  # the caller's state is untouched
        with np.errstate(all="raise"):
            np.array([np.inf]) - np.array([np.inf])
