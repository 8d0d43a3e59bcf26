"""A bucket's plan run at its caller's row count (svod/codegen/rows.py, svod/shapes.py):
the graph program reads the row count at run time, so a size in a known bucket computes
no padding rows and copies no input; every result equals numpy's."""

from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import svod
from svod import engine, shapes

C = 24
_RNG = np.random.default_rng(1)
_B = _RNG.standard_normal(C).astype(np.float32)
_W = _RNG.standard_normal((C, 8)).astype(np.float32)


def _ln_softmax(x):
    return svod.nn.softmax(svod.nn.layer_norm(x, (C,)))


def _ln_softmax_ref(x):
    x = x.astype(np.float64)
    m = x.mean(-1, keepdims=True)
    y = (x - m) / np.sqrt(((x - m) ** 2).mean(-1, keepdims=True) + 1e-5)
    e = np.exp(y - y.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


# name -> (svod program, numpy reference, dtype, whether its bucket plan runs n rows)
PROGRAMS = {
    "softmax_layer_norm": (_ln_softmax, _ln_softmax_ref, np.float32, True),
    "bias_tanh": (lambda x: svod.tanh(x * 2.0 + svod.asarray(_B)),
                  lambda x: np.tanh(x.astype(np.float64) * 2.0 + _B), np.float32, True),
    # one merged axis: flat chunks of 4,096 elements spanning rows
    "flat_elementwise": (lambda x: svod.exp(x) * 2.0 + 1.0, lambda x: np.exp(x.astype(np.float64)) * 2.0 + 1.0,
                         np.float32, True),
    "row_max_argmax_sum": (lambda x: (svod.max(x, axis=1), svod.argmax(x, axis=1), svod.sum(x * x, axis=1)),
                           lambda x: (x.max(axis=1), x.argmax(axis=1), (x.astype(np.float64) ** 2).sum(axis=1)),
                           np.float32, True),
    "float64_minimum": (lambda x: svod.minimum(x, svod.asarray(_B.astype(np.float64))) - 0.5,
                        lambda x: np.minimum(x, _B.astype(np.float64)) - 0.5, np.float64, True),
    "int32_rows": (lambda x: (x * 3 + svod.asarray(np.arange(C, dtype=np.int32)), svod.sum(x, axis=1)),
                   lambda x: (x * 3 + np.arange(C, dtype=np.int32), x.sum(axis=1)), np.int32, True),
    # a free result next to row-carrying ones: the free kernel keeps its unit count
    "mixed_outputs": (lambda x: (svod.exp(x - svod.mean(svod.asarray(_B))), svod.asarray(_W) * 2.0),
                      lambda x: (np.exp(x.astype(np.float64) - _B.astype(np.float64).mean()), _W * 2.0),
                      np.float32, True),
    # GEMM row tiles span rows: padded to the bucket
    "linear_relu": (lambda x: svod.maximum(x @ svod.asarray(_W), 0.0),
                    lambda x: np.maximum(x.astype(np.float64) @ _W, 0.0), np.float32, False),
}


def _data(n: int, dtype, special: bool = True) -> np.ndarray:
    if np.dtype(dtype).kind == "i":
        return _RNG.integers(-1000, 1000, (n, C)).astype(dtype)
    x = (_RNG.standard_normal((n, C)) * 3).astype(dtype)
    if special and n > 3:
        x[1, 2] = np.nan
        x[2, 3], x[2, 4] = np.inf, -np.inf
        x[3, 5] = -0.0
    return x


def _check(name: str, x: np.ndarray):
    f, ref, _, _ = PROGRAMS[name]
    got = f(svod.asarray(x))
    got = [g.numpy() for g in svod.realize(*got)] if isinstance(got, tuple) else [got.numpy()]  # one plan
    want = ref(x)
    want = list(want) if isinstance(want, tuple) else [want]
    for g, w in zip(got, want):
        assert g.shape == w.shape, (name, x.shape, g.shape, w.shape)
        if g.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=3e-5, atol=3e-5)
            real = ~np.isnan(w)
            zero = real & (w == 0)
            assert np.array_equal(np.signbit(g)[zero], np.signbit(w)[zero]), name
        else:
            np.testing.assert_array_equal(g, w)
    return got


def _rows_program(f, x):
    """The RowsProgram of the bucket plan realize uses for `f(x)` (None if none built)."""
    outs = f(svod.asarray(x))
    outs = list(outs) if isinstance(outs, tuple) else [outs]
    _, exe = engine.plan_for(outs)
    gp = exe._gp
    return None if gp is None else gp.__dict__.get("_rows_program")


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_sizes_in_a_bucket_run_their_own_rows_and_equal_numpy(name):
    f, _, dtype, runs_rows = PROGRAMS[name]
    for n in (100, 101):  # exact plan, then the bucket 104's plan (its first run pads)
        _check(name, _data(n, dtype))
    for n in (102, 97, 103, 99, 102):  # the same bucket: n rows at run time
        _check(name, _data(n, dtype))
    rp = _rows_program(f, _data(102, dtype))
    assert rp is not None
    assert rp.ok is runs_rows, rp.reason
    if runs_rows:
        assert rp.runs >= 5
    else:
        assert "matmul" in rp.reason and rp.runs == 0


def test_results_have_exactly_n_rows_and_inputs_are_not_copied(monkeypatch):
    name = "softmax_layer_norm"
    for n in (60, 61, 63):  # (63: the rows program's first run, which SVOD_VALIDATE compares with the padded one)
        _check(name, _data(n, np.float32))
    calls = []
    real = shapes.pad_rows
    monkeypatch.setattr(shapes, "pad_rows", lambda a, b: calls.append(a.shape) or real(a, b))
    x = _data(62, np.float32, special=False)
    # an input without room after its rows: the result of an exact plan (a copy before)
    t = svod.asarray(x) * 1.0
    t.numpy()
    assert t.uop.arg.array.base is None or t.uop.arg.array.base.shape[0] == 62
    out = _ln_softmax(t)
    got = out.numpy()
    np.testing.assert_allclose(got, _ln_softmax_ref(x), rtol=3e-5, atol=3e-5)
    arr = out.uop.arg.array
    assert arr.shape == (62, C) and (arr.base is None or arr.base.size == arr.size), "not a view of a bucket block"
    assert calls == [], calls  # neither padded nor copied into the bucket's rows


def test_rows_off_pads_as_before(monkeypatch):
    for n in (60, 61):
        _check("bias_tanh", _data(n, np.float32))
    monkeypatch.setenv("SVOD_ROWS", "0")
    _check("bias_tanh", _data(62, np.float32))
    rp = _rows_program(PROGRAMS["bias_tanh"][0], _data(62, np.float32))
    assert rp.ok and rp.runs == 0  # built with the bucket's first run (61 rows), not run with SVOD_ROWS=0
    monkeypatch.setenv("SVOD_ROWS", "1")
    _check("bias_tanh", _data(63, np.float32))
    assert _rows_program(PROGRAMS["bias_tanh"][0], _data(62, np.float32)).runs == 1


def test_threaded_launches_with_few_rows_at_run_time():
    """A big bucket (threads > 1 in its plan) run at sizes whose unit counts differ."""
    f = lambda x: svod.nn.softmax(x * 2.0)  # noqa: E731
    ref = lambda x: np.exp(2.0 * x - (2.0 * x).max(-1, keepdims=True)) / \
        np.exp(2.0 * x - (2.0 * x).max(-1, keepdims=True)).sum(-1, keepdims=True)  # noqa: E731
    for n in (3000, 3001, 3071, 2900, 3050):
        x = _RNG.standard_normal((n, 256)).astype(np.float32)
        np.testing.assert_allclose(f(svod.asarray(x)).numpy(), ref(x.astype(np.float64)), rtol=3e-5, atol=1e-7)
    rp = _rows_program(f, _RNG.standard_normal((3050, 256)).astype(np.float32))
    assert rp.ok and rp.runs >= 2


def test_replay_by_signature_and_jit_run_their_rows():
    x = _data(70, np.float32, special=False)
    for n in (68, 69):
        _check("bias_tanh", _data(n, np.float32))
    t = svod.asarray(x)
    for _ in range(3):  # the same expression again: the replay table's entry
        _check("bias_tanh", x)
        PROGRAMS["bias_tanh"][0](t).numpy()
    jf = svod.jit(PROGRAMS["bias_tanh"][0])
    for n in (68, 69, 70, 71):
        y = _data(n, np.float32)
        for _ in range(2):
            np.testing.assert_allclose(jf(svod.asarray(y)).numpy(), PROGRAMS["bias_tanh"][1](y), rtol=3e-5, atol=3e-5)
    assert _rows_program(PROGRAMS["bias_tanh"][0], x).runs >= 6


def test_explain_says_how_a_size_runs_in_its_bucket():
    for n in (100, 101, 102):
        _check("softmax_layer_norm", _data(n, np.float32))
        _check("linear_relu", _data(n, np.float32))
    e = svod.explain(_ln_softmax(svod.asarray(_data(99, np.float32))))
    assert e.shapes.startswith("bucket 104 for 99 rows") and "runs its 99 rows" in e.shapes.splitlines()[0]
    e = svod.explain(PROGRAMS["linear_relu"][0](svod.asarray(_data(99, np.float32))))
    assert "padded to 104 rows" in e.shapes and "matmul" in e.shapes


class _FreshCache:
    def __enter__(self):
        from svod.codegen.program import clear_programs
        from svod.store import reset_default_store

        self._old = os.environ.get("SVOD_CACHE_DIR")
        self._tmp = tempfile.TemporaryDirectory(prefix="svod-rows-")
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
        if self._old is None:
            os.environ.pop("SVOD_CACHE_DIR", None)
        else:
            os.environ["SVOD_CACHE_DIR"] = self._old
        self._tmp.cleanup()


@pytest.mark.parametrize("name", ["softmax_layer_norm", "row_max_argmax_sum"])
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(2, 300), min_size=2, max_size=7))
def test_searches_and_compiles_equal_the_buckets_touched(name, sizes, monkeypatch):
    monkeypatch.setenv("SVOD_SEARCH", "0")
    f, _, dtype, _ = PROGRAMS[name]
    with _FreshCache():
        for n in sizes:
            _check(name, _data(n, dtype))
        s = svod.stats()
        plans = len({sizes[0]} | {shapes.bucket(n) for n in sizes if n != sizes[0]})
        assert s["searches"] == plans, (sizes, s["searches"])
        per_plan = s["kernels_compiled"] // plans
        assert s["kernels_compiled"] == per_plan * plans and per_plan >= 1, (sizes, s["kernels_compiled"])


def test_flat_chunks_run_the_chunks_covering_n_rows(monkeypatch):
    """A one-axis elementwise kernel (chunks of 4,096 elements spanning rows): its launch
    runs the chunks covering n rows; inputs without room after their rows are copied into
    the bucket's rows (a chunk may read past row n), with room they are read in place."""
    f = lambda x, y: svod.exp(x) * 2.0 - y  # noqa: E731
    cols = 100  # n * cols is not a multiple of the chunk
    for n in (1000, 1001):
        x, y = _RNG.standard_normal((2, n, cols)).astype(np.float32)
        got = f(svod.asarray(x), svod.asarray(y)).numpy()
        np.testing.assert_allclose(got, np.exp(x) * 2.0 - y, rtol=1e-5, atol=1e-6)
    calls = []
    real = shapes.pad_rows
    monkeypatch.setattr(shapes, "pad_rows", lambda a, b: calls.append(a.shape) or real(a, b))
    for n in (1003, 990, 1020):
        x, y = _RNG.standard_normal((2, n, cols)).astype(np.float32)
        x[0, 0], y[1, 1] = np.nan, -np.inf
        got = f(svod.asarray(x), svod.asarray(y)).numpy()
        np.testing.assert_allclose(got, np.exp(x) * 2.0 - y, rtol=1e-5, atol=1e-6)
        assert got.shape == (n, cols)
    x, y = _RNG.standard_normal((2, 1003, cols)).astype(np.float32)
    rp = _rows_program(lambda a: f(a, svod.asarray(y)), x)
    assert rp.ok and rp.runs == 3 and any(s[0] == "chunk" for s in rp.specs.values()), rp.specs
    checks = 2 if os.environ.get("SVOD_VALIDATE", "0") != "0" else 0  # the padded run SVOD_VALIDATE compares with
    assert len(calls) == 6 + checks
    assert all(shapes._room(svod.asarray(a).uop.arg.array, 1024) is not None for a in (x, y))
    # an input without room (the exact-size result of another plan): copied, still right
    t = svod.asarray(x) + 0.0
    t.numpy()
    np.testing.assert_allclose(f(t, svod.asarray(y)).numpy(), np.exp(x + 0.0) * 2.0 - y, rtol=1e-5, atol=1e-6)


def test_validate_compares_the_first_rows_run_with_the_padded_run(monkeypatch):
    from svod.codegen import rows

    monkeypatch.setenv("SVOD_VALIDATE", "1")
    for n in (50, 51, 49):  # 51 and 49: the bucket 52
        _check("softmax_layer_norm", _data(n, np.float32))
    rp = _rows_program(_ln_softmax, _data(49, np.float32))
    assert rp.ok and rp.checked and rp.runs == 1
    # a rows program that computes too few rows is caught, and the bucket pads from then on
    for n in (70, 71):
        _check("bias_tanh", _data(n, np.float32))
    bad = _rows_program(PROGRAMS["bias_tanh"][0], _data(69, np.float32))
    assert bad.ok and not bad.checked
    real = bad.run
    # a broken rows program: a wrong last row
    monkeypatch.setattr(bad, "run", lambda gp, arrays, n, pad: [np.concatenate([o[:-1], np.full_like(o[:1], 7)])
                                                                 for o in real(gp, arrays, n, pad)])
    _check("bias_tanh", _data(69, np.float32))  # the padded run's result
    assert bad.checked and not bad.ok and "differed from the padded run" in bad.reason
    _check("bias_tanh", _data(68, np.float32))
    assert bad.runs == 1 and isinstance(bad, rows.RowsProgram)
