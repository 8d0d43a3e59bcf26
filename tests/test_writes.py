"""The write side of a loop (svod/writes.py): `x[key] = v` on a realized `x` runs as the
value's own plan written into x's array (in place when nothing else can read it, else
into a copy) once its structure has written a second region, so a loop writing rows (or
columns, blocks, elements) of a realized array plans a bounded number of times; every
result equals numpy's, and every alias of x's old array keeps seeing its old values."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import svod
from svod import writes
from svod.recompiles import RECOMPILES

_RNG = np.random.default_rng(3)


def _plans() -> int:
    """Plans made so far that did not come from the memory cache (svod.recompiles)."""
    return len(RECOMPILES.log)


def test_a_row_write_loop_of_50_offsets_makes_at_most_two_plans():
    a = _RNG.standard_normal((64, 512))
    y = svod.asarray(a)
    x = svod.asarray(np.zeros((64, 512)))
    ref = np.zeros((64, 512))
    p0, c0, r0 = _plans(), svod.stats()["kernels_compiled"], writes.WRITES.runs
    for i in range(50):
        x[i] = svod.exp(y[i + 1]) * 2.0 + y[i]
        ref[i] = np.exp(a[i + 1]) * 2.0 + a[i]
        np.testing.assert_allclose(x.numpy(), ref, rtol=1e-12, atol=1e-14)
        if i == 2:
            c2 = svod.stats()["kernels_compiled"]
    assert _plans() - p0 <= 2, RECOMPILES.log[p0:]
    assert svod.stats()["kernels_compiled"] == c2 and c2 - c0 <= 4  # nothing compiled after the third offset
    assert writes.WRITES.runs - r0 == 49  # the first region keeps its exact plan
    assert any("dynamic in its region" in m and "((0, 63), (0, 0))" in m for m in writes.recompiles())


def _loop(keys, shape, dtype, value):
    """Writes `value(i, y)` at `keys[i]` of a realized x, realizing each step, against numpy."""
    base = (_RNG.standard_normal(shape) * 4).astype(dtype)
    base.flat[::7] = -0.0 if np.dtype(dtype).kind == "f" else 0
    y_np = (_RNG.standard_normal(shape) * 4).astype(dtype)
    if np.dtype(dtype).kind == "f":
        y_np.flat[::5] = np.nan
        y_np.flat[1::5] = np.inf
        y_np.flat[2::5] = -0.0
    x, y, ref = svod.asarray(base), svod.asarray(y_np), base.copy()
    kept = x.numpy()
    r0 = writes.WRITES.runs
    for i, key in enumerate(keys):
        v, v_np = value(i, y, y_np, key)
        x[key] = v
        ref[key] = v_np
        got = x.numpy()
        assert got.dtype == ref.dtype and got.shape == ref.shape
        np.testing.assert_array_equal(got, ref)
        zero = ref == 0
        assert np.array_equal(np.signbit(got[zero]), np.signbit(ref[zero])), key
    np.testing.assert_array_equal(kept, base)  # the first array is never written
    return writes.WRITES.runs - r0


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int32])
def test_rows_columns_blocks_and_elements_equal_numpy(dtype):
    shape = (12, 10)
    assert _loop([i for i in range(6)], shape, dtype, lambda i, y, yn, k: (y[k + 1] * 3, yn[k + 1] * 3)) == 5
    assert _loop([(slice(None), j) for j in range(5)], shape, dtype,  # columns: strided regions
                 lambda i, y, yn, k: (y[:, k[1] + 2] - y[:, 0], yn[:, k[1] + 2] - yn[:, 0])) == 4
    assert _loop([(slice(i, i + 3), slice(1, -1)) for i in range(4)], shape, dtype,
                 lambda i, y, yn, k: (-y[k], -yn[k])) == 3
    assert _loop([(i, i) for i in range(5)], shape, dtype, lambda i, y, yn, k: (y[k] + 1, yn[k] + 1)) == 4
    # a scalar value broadcast to the region
    assert _loop([i for i in range(4)], shape, dtype, lambda i, y, yn, k: (7, 7)) == 3


def test_a_value_reading_the_array_being_written():
    a = _RNG.standard_normal((20, 16)).astype(np.float32)
    x, ref = svod.asarray(a), a.copy()
    for i in range(1, 20):
        x[i] = x[i - 1] * 0.5 + x[i]
        ref[i] = ref[i - 1] * 0.5 + ref[i]
        x.numpy()
    np.testing.assert_allclose(x.numpy(), ref, rtol=1e-6)


def test_realized_with_other_roots_and_off_with_dynamic_off(monkeypatch):
    a = _RNG.standard_normal((16, 8))
    x = svod.asarray(a)
    ref = a.copy()
    for i in range(4):
        x[i] = x[i] + 1.0
        ref[i] += 1.0
        s = svod.sum(x, axis=1)  # another root reading the written array, realized with it
        x2, s2 = svod.realize(x, s)
        np.testing.assert_allclose(x2.numpy(), ref)
        np.testing.assert_allclose(s2.numpy(), ref.sum(axis=1))
        x = x2
    monkeypatch.setenv("SVOD_DYNAMIC", "0")
    r0 = writes.WRITES.runs
    for i in range(4, 8):
        x[i] = x[i] + 1.0
        ref[i] += 1.0
        np.testing.assert_allclose(x.numpy(), ref)
    assert writes.WRITES.runs == r0


def test_what_is_not_a_region_write():
    x = svod.asarray(np.zeros((6, 4)))
    m = svod.asarray(np.eye(6, 4) > 0)
    assert writes.match(svod.where(m, 1.0, x).uop) is None  # a mask that is not a placed region
    x2 = svod.asarray(np.zeros((6, 4)))
    x2[::2] = 1.0  # a step slice: PAD inside the placement
    assert writes.match(x2.uop) is None
    x3 = svod.asarray(np.zeros((6, 4)))
    x3[1:3, 2] = 5.0
    got = writes.match(x3.uop)
    assert got is not None and got[1] == (slice(1, 3), slice(2, 3))


@settings(max_examples=8, deadline=None)
@given(rows=st.lists(st.integers(0, 15), min_size=3, max_size=12), width=st.integers(1, 9),
       start=st.integers(0, 3))
def test_random_row_segment_writes_equal_numpy_and_plan_a_bounded_number_of_times(rows, width, start):
    """Random rows, one segment width per example: after the structure's first two writes
    (its exact plan, then the value's folded one) nothing is planned again."""
    a = _RNG.standard_normal((16, 12)).astype(np.float32)
    y = svod.asarray(a)
    x, ref = svod.asarray(np.zeros((16, 12), np.float32)), np.zeros((16, 12), np.float32)
    stop = start + width
    plans = []
    for r in rows:
        x[r, start:stop] = svod.sqrt(svod.abs(y[15 - r, start:stop])) - y[r, 0:width]
        ref[r, start:stop] = np.sqrt(np.abs(a[15 - r, start:stop])) - a[r, 0:width]
        np.testing.assert_allclose(x.numpy(), ref, rtol=1e-6, atol=1e-6)
        plans.append(_plans())
    distinct = len(dict.fromkeys(rows))
    if distinct >= 3:
        first_new = [i for i, r in enumerate(rows) if r not in rows[:i]][2]  # the third distinct row
        assert plans[-1] == plans[first_new], (rows, RECOMPILES.log[-5:])


def test_explain_shows_the_plan_a_region_write_runs():
    """Once a structure writes regions dynamically, `svod.explain` of the next write
    explains what realize runs: the value's plan (its key the one realize compacts, view
    reads folded), with a note; before that, the write's own exact plan."""
    a = _RNG.standard_normal((32, 256))
    y = svod.asarray(a)
    x = svod.asarray(np.zeros((32, 256)))
    x[0] = svod.exp(y[1]) * 2.0
    first = svod.explain(x)
    assert "region write" not in first.shapes  # the first region: the where's exact plan
    x.numpy()
    x[1] = svod.exp(y[2]) * 2.0
    x.numpy()  # the second region: dynamic from now on
    x[2] = svod.exp(y[3]) * 2.0
    e = svod.explain(x)
    assert "region write" in e.shapes and e.key.hash != first.key.hash
    assert not any(n.op.name == "WHERE" for n in e.key.nodes)  # the value's plan, not the where's
    before = svod.stats()["searches"] + svod.stats()["kernels_compiled"]
    np.testing.assert_allclose(x.numpy()[2], np.exp(a[3]) * 2.0)
    assert svod.stats()["searches"] + svod.stats()["kernels_compiled"] == before  # explain planned what ran


# ---------------------------------------------------------------- writes in place (svod.writes.exclusive)


def _row_loop(x, ref, rows, value):
    """x[i] = value(x, i) for i in rows, realizing each step; returns the writes done in place."""
    p0 = writes.WRITES.in_place
    for i in rows:
        x[i] = value(x, i, svod)
        ref[i] = value(ref, i, np)
        np.testing.assert_allclose(x.numpy(), ref, rtol=1e-13, atol=0)  # exp: within ulps of numpy's
    return writes.WRITES.in_place - p0


def _fresh(shape=(12, 16), dtype=np.float64):
    a = (_RNG.standard_normal(shape) * 3).astype(dtype)
    a[0, 0], a[1, 1], a[2, 2] = np.nan, -np.inf, -0.0
    return svod.asarray(a), a.copy()


def test_a_loop_nothing_else_sees_writes_in_place():
    """After the structure's exact first write and the copy that turns it dynamic, every
    write of a plain loop goes into x's own array: no copy of x per row."""
    y = svod.asarray(_RNG.standard_normal((12, 16)))
    x, ref = _fresh()
    yn = y.numpy()
    n = _row_loop(x, ref, range(10), lambda a, i, m: m.exp(y[i] if m is svod else yn[i]) * 2.0)
    assert n >= 8, n
    # a recurrence reading the array being written: in place too (the value is computed first)
    n = _row_loop(x, ref, range(1, 12), lambda a, i, m: a[i - 1] * 0.5 - a[i])
    assert n >= 9, n


@pytest.mark.parametrize("alias", ["numpy", "asarray", "view", "lazy", "tensor", "dlpack", "value"])
def test_aliases_of_the_written_array_keep_numpy_semantics(alias):
    """Anything that can still read x's old array — an exported ndarray (``.numpy()``,
    ``np.asarray``), a Tensor view or lazy expression over it, a second Tensor of the same
    buffer, a DLPack capsule, a value Tensor that reads x — makes the write copy: the alias
    keeps seeing the values it saw, as with numpy arrays (each svod array is written once)."""
    x, ref = _fresh()
    for i in range(3):  # the structure turns dynamic; x's array is now the write's own
        x[i] = x[i] * 2.0 + 1.0
        ref[i] = ref[i] * 2.0 + 1.0
        x.numpy()
    assert writes.WRITES.in_place >= 1  # (the same loop without an alias writes in place)
    before = ref.copy()
    holders = []
    if alias == "numpy":
        holders.append(x.numpy())
    elif alias == "asarray":
        holders.append(np.asarray(x)[2:])
    elif alias == "view":
        holders.append(x[3:5])
    elif alias == "lazy":
        holders.append(svod.exp(x) + 1.0)
    elif alias == "tensor":
        holders.append(type(x)(_uop=x.uop))  # a second Tensor of the same buffer node
    elif alias == "dlpack":
        holders.append(x.__dlpack__(max_version=(1, 0)))  # versioned: svod's buffer itself, read-only
    p0 = writes.WRITES.in_place
    for i in range(3, 6):
        if alias == "value":
            w = x[i - 1] * 2.0 + 1.0  # the value Tensor, held: realizing it again must read the old x
            holders.append((w, ref[i - 1] * 2.0 + 1.0))
            x[i] = w
            ref[i] = ref[i - 1] * 2.0 + 1.0
        else:
            x[i] = x[i] * 2.0 + 1.0  # the loop's own structure: its writes run in svod.writes
            ref[i] = ref[i] * 2.0 + 1.0
        np.testing.assert_array_equal(x.numpy(), ref)
    if alias == "value":
        for w, want in holders:
            np.testing.assert_array_equal(w.numpy(), want)
        return
    assert writes.WRITES.in_place - p0 <= 2  # the first write copies: later ones own their copy
    assert writes.WRITES.runs >= 5
    h = holders[0]
    if alias == "numpy":
        np.testing.assert_array_equal(h, before)
    elif alias == "asarray":
        np.testing.assert_array_equal(h, before[2:])
    elif alias == "view":
        np.testing.assert_array_equal(h.numpy(), before[3:5])
    elif alias == "lazy":
        np.testing.assert_allclose(h.numpy(), np.exp(before) + 1.0, rtol=1e-13, atol=0)
    elif alias == "tensor":
        np.testing.assert_array_equal(np.asarray(h), before)
    elif alias == "dlpack":
        class _Cap:
            def __init__(self, c):
                self.c = c

            def __dlpack__(self, **kw):
                return self.c

            def __dlpack_device__(self):
                return (1, 0)

        np.testing.assert_array_equal(np.from_dlpack(_Cap(h)), before)


def test_in_place_off_copies(monkeypatch):
    monkeypatch.setenv("SVOD_WRITES_IN_PLACE", "0")
    x, ref = _fresh()
    assert _row_loop(x, ref, range(6), lambda a, i, m: a[i] - 1.0) == 0
