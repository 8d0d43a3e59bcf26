"""Symbolic row counts (svod/shapes.py): automatic dynamic, size buckets, and the
results of a bucket's plan bound to every size in it equal numpy's."""

from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import svod
from svod import engine, shapes
from svod.ir import Ops

C = 24
_RNG = np.random.default_rng(0)
_W = _RNG.standard_normal((C, 8)).astype(np.float32)
_B = _RNG.standard_normal(C).astype(np.float32)


def _softmax_ln(x):
    return svod.nn.softmax(svod.nn.layer_norm(x, (C,)))


def _softmax_ln_ref(x):
    x = x.astype(np.float64)
    m = x.mean(-1, keepdims=True)
    y = (x - m) / np.sqrt(((x - m) ** 2).mean(-1, keepdims=True) + 1e-5)
    e = np.exp(y - y.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


PROGRAMS = {
    "softmax_layer_norm": (_softmax_ln, _softmax_ln_ref),
    "bias_tanh": (lambda x: svod.tanh(x * 2.0 + svod.asarray(_B)),
                  lambda x: np.tanh(x.astype(np.float64) * 2.0 + _B)),
    "linear_relu": (lambda x: svod.maximum(x @ svod.asarray(_W), 0.0),
                    lambda x: np.maximum(x.astype(np.float64) @ _W, 0.0)),
    "row_max_and_argmax": (lambda x: (svod.max(x, axis=1), svod.argmax(x, axis=1)),
                           lambda x: (x.max(axis=1), x.argmax(axis=1))),
    # a free result next to row-carrying ones, and a free reduction broadcast back to the rows
    "mixed_outputs": (lambda x: (svod.exp(x - svod.mean(svod.asarray(_B))), svod.asarray(_W) * 2.0),
                      lambda x: (np.exp(x.astype(np.float64) - _B.astype(np.float64).mean()), _W * 2.0)),
    "batched_matmul": (lambda x: svod.reshape(x, (-1, 4, 6)) @ svod.reshape(x, (-1, 6, 4)),
                       lambda x: x.astype(np.float64).reshape(-1, 4, 6) @ x.astype(np.float64).reshape(-1, 6, 4)),
}


def _run(name, x):
    f, ref = PROGRAMS[name]
    got = f(svod.asarray(x))
    got = [g.numpy() for g in got] if isinstance(got, tuple) else [got.numpy()]
    want = ref(x)
    want = list(want) if isinstance(want, tuple) else [want]
    for g, w in zip(got, want):
        assert g.shape == w.shape, (name, x.shape, g.shape, w.shape)
        if g.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5)
        else:
            np.testing.assert_array_equal(g, w)


class _FreshCache:
    """Empty persistent and in-memory caches and fresh counters for one example."""

    def __enter__(self):
        from svod.codegen.program import clear_programs
        from svod.store import reset_default_store

        self._old = os.environ.get("SVOD_CACHE_DIR")
        self._tmp = tempfile.TemporaryDirectory(prefix="svod-shapes-")
        os.environ["SVOD_CACHE_DIR"] = self._tmp.name
        reset_default_store()
        engine.reset_caches()
        clear_programs()
        svod.reset_stats()
        return self

    def __exit__(self, *exc):
        from svod.store import reset_default_store

        engine.reset_caches()
        reset_default_store()
        os.environ["SVOD_CACHE_DIR"] = self._old
        self._tmp.cleanup()


@pytest.mark.parametrize("name", ["softmax_layer_norm", "linear_relu"])
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(2, 300), min_size=1, max_size=5))
def test_plans_and_compiles_once_per_bucket(name, sizes, monkeypatch):
    """Random row counts of one program: one plan for the first size, then one per bucket
    of the other sizes (automatic dynamic; [88, 81] is one plan), as many compiles as plans times kernels, and
    every result equals numpy."""
    from svod.codegen import rows

    monkeypatch.setenv("SVOD_SEARCH", "0")  # the greedy planner: the count is what matters here
    variants = []  # kernels compiled for rows variants (svod.codegen.rows: a bucket plan's first run)
    real = rows._variant

    def counted(kernel):
        c0 = svod.stats()["kernels_compiled"]
        got = real(kernel)
        variants.append(svod.stats()["kernels_compiled"] - c0)
        return got

    monkeypatch.setattr(rows, "_variant", counted)
    with _FreshCache():
        for n in sizes:
            _run(name, _RNG.standard_normal((n, C)).astype(np.float32))
        s = svod.stats()
    # a bucket's plan is the exact plan of the bucket's size: a first size that is itself a
    # bucket (88, then 81 in the bucket 88) shares its plan
    buckets = {shapes.bucket(n) for n in sizes if n != sizes[0]}
    plans = len({sizes[0]} | buckets)
    assert s["searches"] == plans, (sizes, s["searches"])
    # a bucket plan compiles its rows variants (one-axis elementwise kernels, GEMMs: which ones its
    # kernels at that size are) once, with its first run
    assert len(variants) <= 3 * len(buckets), variants
    compiled = s["kernels_compiled"] - sum(variants)
    assert compiled % plans == 0 and compiled > 0, (sizes, s["kernels_compiled"], variants)
    assert compiled // plans <= 3


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_every_size_of_a_dynamic_structure_equals_numpy(name):
    """Sizes that pad a lot and a little, 0/1 (exact), the first size again."""
    for n in (5, 7, 2, 17, 64, 65, 1, 0, 5, 130):
        _run(name, _RNG.standard_normal((n, C)).astype(np.float32) * 3)
    made = [int(m.split("new bucket ")[1].split()[0]) for m in shapes.recompiles() if "new bucket" in m]
    assert made and sorted(set(made)) == [2, 8, 18, 64, 72, 144] and len(made) % 6 == 0  # per structure


def test_a_new_size_in_a_known_bucket_neither_plans_nor_compiles():
    for n in (100, 101):
        _run("softmax_layer_norm", _RNG.standard_normal((n, C)).astype(np.float32))
    before = svod.stats()
    for n in (102, 103, 110, 112):  # bucket(101) == 104 .. 112
        _run("softmax_layer_norm", _RNG.standard_normal((n, C)).astype(np.float32))
    after = svod.stats()
    assert after["searches"] == before["searches"] + 1  # 110 and 112: the bucket 112
    assert after["kernels_compiled"] - before["kernels_compiled"] <= 1
    log = shapes.recompiles()  # one line per plan made again (svod.recompiles)
    assert len(log) == 2, log
    assert log[0].startswith("new bucket:") and "sizes 100 and 101 seen" in log[0] and "new bucket 104" in log[0]
    assert log[1].startswith("new bucket:") and "new bucket 112" in log[1]


def test_nan_inf_and_signed_zero_rows_survive_padding():
    x = np.array([[np.nan, 1.0, -0.0], [np.inf, -np.inf, 0.0], [-0.0, 2.0, 3.0]], np.float32)
    for n in (2, 3):
        got = svod.maximum(svod.asarray(x[:n]) * -1.0, -0.0).numpy()
        want = np.maximum(x[:n] * -1.0, np.float32(-0.0))
        np.testing.assert_array_equal(got, want)
        real = ~np.isnan(want)
        assert np.array_equal(np.signbit(got)[real], np.signbit(want)[real])


def test_dynamic_off_plans_every_size():
    os.environ["SVOD_DYNAMIC"] = "0"
    try:
        for n in (40, 41, 42):
            _run("bias_tanh", _RNG.standard_normal((n, C)).astype(np.float32))
    finally:
        del os.environ["SVOD_DYNAMIC"]
    log = shapes.recompiles()  # each size planned exactly: new shapes, no bucket
    assert [m.split(":")[0] for m in log] == ["new shapes", "new shapes"], log
    assert f"input 0 shape (41, {C}), was (40, {C})" in log[0] and f"(42, {C}), was (41, {C})" in log[1]


# ----------------------------------------------------------------------------- the row axis


def _key(f, *arrays):
    from svod.key import compact

    outs = f(*[svod.asarray(a) for a in arrays])
    outs = outs if isinstance(outs, tuple) else (outs,)
    return compact([o.uop for o in outs])[0]


@pytest.mark.parametrize("f", [
    lambda x: svod.sum(x, axis=0),  # a reduction over the rows
    lambda x: x[1:] * 2.0,  # a slice of the rows
    lambda x: svod.reshape(x, (-1,)) + 1.0,  # rows merged with the columns
    lambda x: x.T * 2.0,  # rows moved off axis 0
    lambda x: svod.flip(x, axis=0) * 2.0,
    lambda x: x[::2] * 2.0,
    lambda x: svod.concatenate([x, x], axis=0) * 2.0,
    lambda x: svod.sort(x, axis=1),  # a library step
])
def test_uses_of_the_row_axis_that_keep_a_graph_exact(f):
    assert shapes.row_axis(_key(f, np.ones((6, 4), np.float32))) is None


def test_a_row_graph_rewritten_to_its_bucket():
    key = _key(lambda x: svod.nn.softmax(x) + svod.asarray(np.ones(4, np.float32)), np.ones((6, 4), np.float32))
    n, cls = shapes.row_axis(key)
    assert n == 6
    big = shapes.rewrite(key, cls, 8)
    assert all(nd.shape[0] == 8 for nd, c in zip(big.nodes, cls) if c)
    assert [nd.shape for nd, c in zip(big.nodes, cls) if not c] == [nd.shape for nd, c in zip(key.nodes, cls) if not c]
    assert any(nd.op is Ops.EXPAND and c for nd, c in zip(key.nodes, cls))  # the bias broadcast to the rows


def test_bucket_rule():
    sizes = (0, 1, 2, 3, 5, 16, 17, 33, 1000, 1025)
    assert [shapes.bucket(n) for n in sizes] == [0, 1, 2, 4, 8, 16, 18, 36, 1024, 1152]
    for n in range(17, 5000):
        b = shapes.bucket(n)
        assert n <= b <= n * 1.125 and shapes.bucket(b) == b


def test_explain_shows_the_bucket_plan_and_why():
    x = _RNG.standard_normal((100, C)).astype(np.float32)
    e = svod.explain(_softmax_ln(svod.asarray(x)))
    assert e.shapes.startswith("exact shapes: the first row count (100)")
    _run("softmax_layer_norm", x)
    _run("softmax_layer_norm", x[:99])
    e = svod.explain(_softmax_ln(svod.asarray(x[:98])))
    assert e.shapes.startswith("bucket 104 for 98 rows") and "sizes 100 and 99 seen" in e.shapes
    assert e.key.nodes[e.key.outputs[0]].shape == (104, C)
    assert str(e).startswith("shapes: bucket 104")


def test_jit_new_row_counts_share_the_bucket_plan():
    f = svod.jit(_softmax_ln)
    for n in (100, 101):
        x = _RNG.standard_normal((n, C)).astype(np.float32)
        np.testing.assert_allclose(f(svod.asarray(x)).numpy(), _softmax_ln_ref(x), rtol=2e-5, atol=2e-5)
    before = svod.stats()
    for n in (102, 103, 102):
        x = _RNG.standard_normal((n, C)).astype(np.float32)
        for _ in range(2):  # the trace's replay, too
            np.testing.assert_allclose(f(svod.asarray(x)).numpy(), _softmax_ln_ref(x), rtol=2e-5, atol=2e-5)
    after = svod.stats()
    assert after["searches"] == before["searches"] and after["kernels_compiled"] == before["kernels_compiled"]
    assert any("new bucket 104" in m for m in shapes.recompiles())


def test_inputs_made_with_room_bind_to_their_bucket_without_a_copy():
    x = _RNG.standard_normal((100, C)).astype(np.float32)
    a = shapes.with_room(x)
    assert a.shape == x.shape and np.array_equal(a, x) and not a.flags.writeable
    padded = shapes.pad_rows(a, 104)
    assert np.shares_memory(padded, a) and padded.shape == (104, C) and padded.flags.c_contiguous
    np.testing.assert_array_equal(padded[100:], np.repeat(x[-1:], 4, axis=0))
    other = shapes.pad_rows(x, 104)  # an array without room: a copy, the last row repeated
    assert not np.shares_memory(other, x) and np.array_equal(other[:100], x) and np.array_equal(other[103], x[-1])
    assert np.shares_memory(shapes.pad_rows(a[:99], 104), a)  # a prefix with room, too
    big = _RNG.standard_normal((130, C)).astype(np.float32)
    assert np.shares_memory(shapes.pad_rows(big[:100], 104), big)  # a prefix of a bigger array
    assert not np.shares_memory(shapes.pad_rows(big[30:], 104), big)  # 100 rows, 4 short of the end
    assert not np.shares_memory(shapes.pad_rows(big[:100, :8], 104), big)  # not contiguous
    # svod.asarray copies with room once a structure of the process is dynamic
    for n in (60, 61):
        _run("bias_tanh", _RNG.standard_normal((n, C)).astype(np.float32))
    t = svod.asarray(x)
    assert t.uop.arg.array.base is not None and t.uop.arg.array.base.shape == (104, C)
    np.testing.assert_array_equal(t.numpy(), x)


def test_svod_debug_says_why_a_plan_was_made_again(monkeypatch, capsys, caplog):
    monkeypatch.setenv("SVOD_DEBUG", "1")
    with caplog.at_level("INFO", logger="svod"):
        for n in (40, 41):
            _run("bias_tanh", _RNG.standard_normal((n, C)).astype(np.float32))
    text = capsys.readouterr().err + caplog.text
    lines = [ln for ln in text.splitlines() if "svod recompile:" in ln]  # one line per plan made (svod.recompiles)
    assert any(": new bucket (" in ln and "sizes 40 and 41 seen" in ln and "new bucket 44" in ln for ln in lines), text
