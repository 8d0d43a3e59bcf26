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
_WI = _RNG.integers(-5, 5, (C, 8)).astype(np.int32)


def _gelu_ref(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def _ln_softmax(x):
    return svod.nn.softmax(svod.nn.layer_norm(x, (C,)))


def _ln_softmax_ref(x):
    x = x.astype(np.float64)
    m = x.mean(-1, keepdims=True)
    y = (x - m) / np.sqrt(((x - m) ** 2).mean(-1, keepdims=True) + 1e-5)
    e = np.exp(y - y.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.fixture(autouse=True)
def _two_gemm_plans(monkeypatch):
    """The GEMM programs here are planned as GEMMs (their rows variants are what is tested):
    the fused MLP kind (`SVOD_FUSE_MLP`) has its own rows variant, see
    `test_an_mlp_kernel_plan_runs_n_rows`."""
    monkeypatch.setenv("SVOD_FUSE_MLP", "0")


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
    # generated GEMM: its rows variant reads the row count (the last row tile stops at row n)
    "linear_relu": (lambda x: svod.maximum(x @ svod.asarray(_W), 0.0),
                    lambda x: np.maximum(x.astype(np.float64) @ _W, 0.0), np.float32, True),
    # two GEMMs, bias and GELU in the first's epilogue, a row temp between them (W4's shape)
    "mlp_gelu": (lambda x: svod.nn.gelu(x @ svod.asarray(_W) + svod.asarray(_B[:8]), approximate="tanh")
                 @ svod.asarray(_W.T.copy()) + svod.asarray(_B),
                 lambda x: _gelu_ref(x.astype(np.float64) @ _W + _B[:8]) @ _W.T + _B, np.float32, True),
    # an integer matmul (blocks of 16 rows, its rows variant too)
    "int_matmul": (lambda x: x @ svod.asarray(_WI) + 1, lambda x: x @ _WI + 1, np.int32, True),
    # a batched product whose batch axis is the rows: whole batch indices, no variant
    "batched_matmul": (lambda x: svod.matmul(svod.reshape(x, (-1, 4, 6)), svod.reshape(x * 0.5, (-1, 6, 4))),
                       lambda x: np.matmul(x.astype(np.float64).reshape(-1, 4, 6), 0.5 * x.reshape(-1, 6, 4)),
                       np.float32, True),
    # a column reduce (a kept innermost axis after the reduced one), one unit per row
    "column_sum": (lambda x: svod.sum(svod.reshape(x, (-1, 4, 6)), axis=1),
                   lambda x: x.astype(np.float64).reshape(-1, 4, 6).sum(axis=1), np.float32, True),
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
        assert rp.reason and rp.runs == 0


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
    assert "runs its 99 rows" in e.shapes.splitlines()[0]


@pytest.mark.parametrize("form", ["row", "column"])
def test_split_reductions_run_their_rows_as_a_rows_variant(form, monkeypatch):
    """A few long rows cut into chunks (a split reduction: units (group, chunk), partials
    combined by the unit completing a group): the bucket's kernel runs as its rows variant,
    whose launch of every unit at n rows keeps to private scratch (a part of the units
    would share the kernel's global scratch); equal to numpy, and to the padded run bit for
    bit (SVOD_VALIDATE compares the first rows run); SVOD_ROWS=0 pads and says so."""
    from svod.codegen.schedule import schedule

    if form == "row":
        f = lambda x: svod.sum(x, axis=1)  # noqa: E731
        ref = lambda x: x.astype(np.float64).sum(1)  # noqa: E731
        cols = 600_000
    else:  # a column reduce cut along its reduced axis
        f = lambda x: svod.sum(svod.reshape(x, (x.shape[0], -1, 64)), axis=1)  # noqa: E731
        ref = lambda x: x.astype(np.float64).reshape(x.shape[0], -1, 64).sum(1)  # noqa: E731
        cols = 64 * 20_000
    for n in (3, 5, 6, 7, 5):  # 5-7: the bucket 8
        x = _RNG.standard_normal((n, cols)).astype(np.float32)
        x[0, 1], x[1, 2] = np.inf, -0.0
        np.testing.assert_allclose(f(svod.asarray(x)).numpy(), ref(x), rtol=1e-4, atol=1e-2)
    rp = _rows_program(f, x)
    _, exe = engine.plan_for([f(svod.asarray(x))])
    assert any(schedule(k).loops.split for k in exe.plan.kernels), "not a split reduction"
    assert rp.ok and rp.runs >= 2 and any(sp[0] == "tiles" for sp in rp.specs.values()), (rp.reason, rp.specs)
    monkeypatch.setenv("SVOD_ROWS", "0")
    e = svod.explain(f(svod.asarray(x)))
    assert "padded to 8 rows (SVOD_ROWS=0)" in e.shapes, e.shapes


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


@pytest.mark.parametrize("name", ["softmax_layer_norm", "row_max_argmax_sum", "mlp_gelu"])
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
    runs the chunks covering n rows as its rows variant, whose last chunk stops at row n:
    only the bucket's first (padded) run binds inputs with `pad_rows`; later sizes read
    the caller's arrays in place, with or without room after their rows."""
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
    assert len(calls) == checks  # 1001 was the bucket's first (padded) run: no size pads since
    assert all(shapes._room(svod.asarray(a).uop.arg.array, 1024) is not None for a in (x, y))
    # an input without room (the exact-size result of another plan): read in place, still right
    t = svod.asarray(x) + 0.0
    t.numpy()
    np.testing.assert_allclose(f(t, svod.asarray(y)).numpy(), np.exp(x + 0.0) * 2.0 - y, rtol=1e-5, atol=1e-6)
    assert len(calls) == checks and rp.runs == 4


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
    monkeypatch.setattr(bad, "run", lambda gp, arrays, n: [np.concatenate([o[:-1], np.full_like(o[:1], 7)])
                                                           for o in real(gp, arrays, n)])
    _check("bias_tanh", _data(69, np.float32))  # the padded run's result
    assert bad.checked and not bad.ok and "differed from the padded run" in bad.reason
    _check("bias_tanh", _data(68, np.float32))
    assert bad.runs == 1 and isinstance(bad, rows.RowsProgram)


@pytest.mark.parametrize("k", [300, 700])  # one K block; two (partial sums kept in the output)
def test_gemm_rows_variant_reads_and_writes_only_n_rows(k):
    """The rows variant of a generated GEMM (row count read at run time): on `n` rows it
    equals the constant-size kernel bit for bit, reads no row of A past `n` and writes
    no row of C past `n`, whatever the unit ranges it is called with (threads)."""
    import ctypes

    from svod.codegen.program import compile_kernel
    from svod.codegen.rows import _variant
    from svod.codegen.schedule import schedule
    from svod.kernel_examples import matmul_bias_gelu_kernel

    m, cols = 100, 70
    kern = matmul_bias_gelu_kernel(m, k, cols)
    g = schedule(kern).gemm
    mod, symbol = _variant(kern)
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)(mod.address(symbol))
    a = _RNG.standard_normal((m, k)).astype(np.float32)
    w = (_RNG.standard_normal((k, cols)) / np.sqrt(k)).astype(np.float32)
    bias = _RNG.standard_normal(cols).astype(np.float32)
    full = {0: a.reshape(-1), 1: w.reshape(-1), 2: bias, 3: np.empty(m * cols, np.float32)}
    compile_kernel(kern).run(full)
    want = full[3].reshape(m, cols)
    for n in (2, 5, g.mt - 1, g.mt, g.mt + 1, 77, m):
        a_n = np.full((m + 4, k), np.nan, np.float32)  # rows past n: NaN (no read of them may reach C)
        a_n[:n] = a[:n]
        out = np.full((m + 4, cols), 7.0, np.float32)
        units = -(-n // g.mt) * g.tiles_n
        args = (ctypes.c_void_p * 5)(a_n.ctypes.data, w.ctypes.data, bias.ctypes.data, out.ctypes.data, n)
        for lo, hi in ((0, units // 2), (units // 2, units)):  # two slices, as two threads would run them
            fn(ctypes.addressof(args), lo, hi)
        assert out[:n].tobytes() == want[:n].tobytes(), n
        assert (out[n:] == 7.0).all(), f"rows past {n} written"


@pytest.mark.parametrize("name", ["linear_relu", "mlp_gelu", "int_matmul", "batched_matmul"])
def test_matmul_plans_run_n_rows_and_new_sizes_compile_nothing(name, monkeypatch):
    """Matmul plans in a bucket (generated GEMMs with their rows variants, or BLAS steps on
    the operands' first n rows, whichever the search chose): results of exactly n rows, no
    input padded or copied into the bucket's rows, and a new size of a known bucket
    searches and compiles nothing (the rows variants are built with the bucket's first run)."""
    f, _, dtype, _ = PROGRAMS[name]
    for n in (120, 121):
        _check(name, _data(n, dtype))
    ins = []
    for n in (122, 126, 127, 124):  # the bucket 128 (121-128)
        t = svod.asarray(_data(n, dtype)) * 1  # inputs without room after their rows (results of a plan)
        t.numpy()
        ins.append(t)
    s0 = svod.stats()
    calls = []
    real = shapes.pad_rows
    monkeypatch.setattr(shapes, "pad_rows", lambda a, b: calls.append(a.shape) or real(a, b))
    for t in ins:
        got = f(t)
        got = [g.numpy() for g in svod.realize(*got)] if isinstance(got, tuple) else [got.numpy()]
        want = PROGRAMS[name][1](t.numpy())
        for g, w in zip(got, list(want) if isinstance(want, tuple) else [want]):
            assert g.shape == w.shape and g.shape[0] == t.shape[0]
            np.testing.assert_allclose(g, w, rtol=3e-5, atol=3e-5)
    s1 = svod.stats()
    assert (s1["searches"], s1["kernels_compiled"]) == (s0["searches"], s0["kernels_compiled"])
    rp = _rows_program(f, _data(126, dtype))
    assert rp.ok and rp.runs >= 4, rp.reason
    kinds = {sp[0] for sp in rp.specs.values()}
    assert kinds & {"tiles", "lib", "row"}, rp.specs
    if not any(sp[0] == "chunk" for sp in rp.specs.values()):
        # no chunk reads past row n: nothing is bound to the bucket's rows (but the padded run
        # SVOD_VALIDATE compares the first rows run with)
        checks = 1 if os.environ.get("SVOD_VALIDATE", "0") != "0" else 0
        assert len(calls) == checks, calls


def test_blas_steps_run_on_the_first_n_rows(monkeypatch):
    """The greedy plan (no search) runs products as BLAS steps: between native segments,
    each on views of its operands' first n rows."""
    monkeypatch.setenv("SVOD_SEARCH", "0")
    with _FreshCache():
        for n in (90, 91, 93, 89, 95):  # 91-95: the bucket 96
            _check("mlp_gelu", _data(n, np.float32))
        rp = _rows_program(PROGRAMS["mlp_gelu"][0], _data(94, np.float32))
        assert rp.ok and rp.runs >= 3, rp.reason
        assert sum(sp[0] == "lib" for sp in rp.specs.values()) == 2, rp.specs
        assert sum(seg[0] == "native" for seg in rp._segments) >= 2


def test_integer_matmul_rows_variant_reads_and_writes_only_n_rows():
    """The integer matmul's rows variant (blocks of 16 rows, the row count read at run
    time): the first n rows equal numpy's, no row past n written."""
    import ctypes

    from svod.codegen.rows import _variant
    from svod.codegen.schedule import MM_ROWS
    from svod.dtype import int32
    from svod.kernel import ACC, Kernel, KInput, KNode, KOutput, MatmulSpec
    from svod.view import ViewChain

    m, k, cols = 50, 13, 9
    ins = (KInput(0, int32, ViewChain.of((m, k))), KInput(1, int32, ViewChain.of((k, cols))))
    kern = Kernel("mm_i32", (m, cols), ins, (KNode(ACC, int32),), (KOutput(2, 0, int32, (m, cols)),), (),
                  MatmulSpec(0, 1, m, cols, k))
    mod, symbol = _variant(kern)
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)(mod.address(symbol))
    a = _RNG.integers(-100, 100, (m, k)).astype(np.int32)
    w = _RNG.integers(-100, 100, (k, cols)).astype(np.int32)
    for n in (2, 15, 16, 17, 49, 50):
        out = np.full((m + 2, cols), -7, np.int32)
        args = (ctypes.c_void_p * 4)(a.ctypes.data, w.ctypes.data, out.ctypes.data, n)
        fn(ctypes.addressof(args), 0, -(-n // MM_ROWS))
        np.testing.assert_array_equal(out[:n], a[:n] @ w)
        assert (out[n:] == -7).all(), f"rows past {n} written"


_WARM_ROWS = """
    import json, numpy as np, svod, svod.nn as nn
    from svod import engine
    rng = np.random.default_rng(5)

    def f(x):
        return nn.softmax(nn.layer_norm(x, (48,)))

    def ref(x):
        m = x.mean(-1, keepdims=True); v = ((x - m) ** 2).mean(-1, keepdims=True)
        z = (x - m) / np.sqrt(v + 1e-5)
        w = np.exp(z - z.max(-1, keepdims=True))
        return w / w.sum(-1, keepdims=True)

    ok = True
    for n in (200, 201):  # the exact plan, then the bucket 208's
        x = rng.standard_normal((n, 48)).astype(np.float32)
        ok &= bool(np.allclose(f(svod.asarray(x)).numpy(), ref(x), rtol=1e-4, atol=1e-6))
    _, exe = engine.plan_for([f(svod.asarray(x))])
    later = exe.__dict__.get("_rows_later")
    if later is not None:
        later.join(60)
    for n in (203, 205, 207):
        x = rng.standard_normal((n, 48)).astype(np.float32)
        ok &= bool(np.allclose(f(svod.asarray(x)).numpy(), ref(x), rtol=1e-4, atol=1e-6))
    gp = exe._gp
    rp = gp.__dict__.get("_rows_program") if gp is not None else None
    s = svod.stats()
    print(json.dumps({"ok": ok, "warm": type(exe).__name__, "later": later is not None,
                      "runs": rp.runs if rp is not None else -1, "compiled": s["kernels_compiled"],
                      "searches": s["searches"]}))
"""


def test_a_warm_process_builds_the_rows_program_off_the_call(tmp_path):
    """A bucket plan replayed from its warm record (shared libraries, no Kernels, no
    GraphProgram) pads its first calls and builds its graph program and rows program on a
    background thread; later sizes of the bucket run their own rows. Nothing is compiled."""
    import json
    import subprocess
    import sys
    import textwrap
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent

    def child() -> dict:
        env = dict(os.environ, PYTHONPATH=str(root), SVOD_CACHE_DIR=str(tmp_path), SVOD_PREFETCH="0",
                   SVOD_VALIDATE="0")
        r = subprocess.run([sys.executable, "-c", textwrap.dedent(_WARM_ROWS)], capture_output=True, text=True,
                           env=env, cwd=root, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        return json.loads(r.stdout.strip().splitlines()[-1])

    cold = child()
    assert cold["ok"] and cold["warm"] == "KernelPlan" and cold["runs"] == 3 and not cold["later"]
    warm = child()
    assert warm["ok"] and warm["compiled"] == 0 and warm["searches"] == 0, warm
    if warm["warm"] == "WarmPlan":  # (a record needs a linker: without one the plan is a KernelPlan)
        assert warm["later"] and warm["runs"] == 3, warm


def test_threaded_gemm_launches_at_run_time_row_counts():
    """A GEMM big enough for several threads (its row tiles dispatched to the pool at the
    run-time unit count) and its epilogue, at sizes across its bucket: equal to numpy."""
    w = (_RNG.standard_normal((256, 192)) / 16).astype(np.float32)
    b = _RNG.standard_normal(192).astype(np.float32)
    f = lambda x: svod.nn.gelu(x @ svod.asarray(w) + svod.asarray(b), approximate="tanh")  # noqa: E731
    for n in (600, 601, 577, 640, 613, 579):  # 601-640: the bucket 640
        x = _RNG.standard_normal((n, 256)).astype(np.float32)
        got = f(svod.asarray(x)).numpy()
        assert got.shape == (n, 192)
        np.testing.assert_allclose(got, _gelu_ref(x.astype(np.float64) @ w + b), rtol=2e-4, atol=2e-4)
    rp = _rows_program(f, _RNG.standard_normal((613, 256)).astype(np.float32))
    assert rp.ok and rp.runs >= 3, rp.reason


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(2, 200), min_size=3, max_size=7))
def test_gemm_plans_compile_only_for_new_buckets(sizes):
    """Searched plans (generated GEMMs with their rows variants, or BLAS steps) over random
    row counts: searches equal the plans touched (the first size's, then one per bucket),
    nothing is compiled at a size whose bucket ran before, every result equals numpy."""
    with _FreshCache():
        seen: set = set()
        for n in sizes:
            plan = ("exact", n) if n == sizes[0] else ("bucket", shapes.bucket(n))
            s0 = svod.stats()
            _check("linear_relu", _data(n, np.float32))
            s1 = svod.stats()
            if plan in seen:  # (a bucket whose plan is the first size's builds its rows program at its first use)
                assert s1["kernels_compiled"] == s0["kernels_compiled"], (sizes, n)
            seen.add(plan)
        buckets = {shapes.bucket(n) for n in sizes if n != sizes[0]}
        assert svod.stats()["searches"] == len({sizes[0]} | buckets), sizes


@pytest.mark.parametrize("threads", ["1", "2"])
def test_an_mlp_kernel_plan_runs_n_rows(threads, monkeypatch):
    """A plan holding a fused MLP kernel runs n rows through the kernel's rows variant
    (`svod.codegen.mlp`, ``rows=True``: whole blocks of R rows, the last one stopping at
    row n): results of exactly n rows equal to numpy's (NaN, ±inf, -0.0 included) and bit
    for bit to the exact plan's, no input padded, and a new size compiles nothing."""
    monkeypatch.setenv("SVOD_FUSE_MLP", "1")
    monkeypatch.setenv("SVOD_THREADS", threads)
    f = PROGRAMS["mlp_gelu"][0]
    for n in (500, 501):  # the exact plan, then the bucket 512's (several MLP blocks)
        _check("mlp_gelu", _data(n, np.float32))
    _, exe = engine.plan_for([f(svod.asarray(_data(502, np.float32)))])
    if not any(k.kind == "mlp" for k in exe.plan.kernels):
        pytest.skip("the search did not choose the MLP kernel for this program")
    ins = []
    for n in (502, 509, 503, 512, 505):
        t = svod.asarray(_data(n, np.float32)) * 1  # inputs without room after their rows
        t.numpy()
        ins.append(t)
    s0 = svod.stats()
    calls = []
    real = shapes.pad_rows
    monkeypatch.setattr(shapes, "pad_rows", lambda a, b: calls.append(a.shape) or real(a, b))
    got = [f(t).numpy() for t in ins]
    s1 = svod.stats()
    monkeypatch.setattr(shapes, "pad_rows", real)
    assert (s1["searches"], s1["kernels_compiled"]) == (s0["searches"], s0["kernels_compiled"])
    for t, g in zip(ins, got):
        x = t.numpy()
        assert g.shape == (x.shape[0], C)
        np.testing.assert_allclose(g, PROGRAMS["mlp_gelu"][1](x), rtol=3e-5, atol=3e-5)
        nan = np.isnan(g)
        assert nan.any() and np.array_equal(nan, np.isnan(PROGRAMS["mlp_gelu"][1](x)))
    rp = _rows_program(f, _data(502, np.float32))
    assert rp.ok and rp.runs >= 4, rp.reason  # 502, 509, 503, 505 (512: the bucket's own size)
    specs = [sp for sp in rp.specs.values() if sp[0] == "tiles"]
    assert specs, rp.specs
    checks = 1 if os.environ.get("SVOD_VALIDATE", "0") != "0" else 0  # the padded run it is compared with
    assert len([c for c in calls if c[0] != 512]) == checks, calls  # 512 rows: the bucket's size, nothing to pad
    monkeypatch.setenv("SVOD_DYNAMIC", "0")  # exact plans: the rows variant's sums are the same, bit for bit
    for t, g in zip(ins[:2], got[:2]):
        exact = f(svod.asarray(t.numpy().copy())).numpy()
        assert np.array_equal(g.view(np.uint32), exact.view(np.uint32)), t.shape[0]


def test_an_mlp_kernel_with_a_residual_runs_n_rows(monkeypatch):
    """The MLP kernel's epilogue reading x again (a residual: a row-carrying operand
    besides x) runs n rows too; a size past the last full block of R rows included."""
    monkeypatch.setenv("SVOD_FUSE_MLP", "1")
    w1 = svod.asarray(_W)
    w2 = svod.asarray(_W.T.copy())

    def f(x):
        return svod.nn.gelu(x @ w1 + svod.asarray(_B[:8]), approximate="tanh") @ w2 + x

    def ref(x):
        return _gelu_ref(x.astype(np.float64) @ _W + _B[:8]) @ _W.T + x

    for n in (300, 301, 302, 317, 319, 305):  # 301-320: one bucket
        x = _data(n, np.float32)
        got = f(svod.asarray(x)).numpy()
        assert got.shape == (n, C)
        np.testing.assert_allclose(got, ref(x), rtol=3e-5, atol=3e-5)
    _, exe = engine.plan_for([f(svod.asarray(_data(302, np.float32)))])
    if not any(k.kind == "mlp" for k in exe.plan.kernels):
        pytest.skip("the search did not choose the MLP kernel for this program")
    rp = _rows_program(f, _data(302, np.float32))
    assert rp is not None and rp.ok and rp.runs >= 4, rp and rp.reason
    assert any(sp[0] == "tiles" for sp in rp.specs.values()), rp.specs


@pytest.mark.parametrize("mask", [None, "free", "rows"])
def test_attention_whose_batch_axis_is_the_rows_runs_n_rows(mask, monkeypatch):
    """A fused attention kernel (svod.codegen.attention) whose first batch axis is the rows:
    its units (batch index, block of query rows) run for the batch indices below n, the
    kernel unchanged — equal to numpy and to the constant-shape plan bit for bit; a mask
    free of the rows is read broadcast, one carrying them row by row."""
    monkeypatch.setenv("SVOD_SEARCH", "0")  # the greedy planner fuses the chain (tests/test_attention.py)
    m, d = 37, 16
    free = _RNG.standard_normal((m, m)).astype(np.float32)

    def f(q, k, v, extra):
        return svod.nn.scaled_dot_product_attention(q, k, v, attn_mask=extra)

    def inputs(n):
        q, k, v = (_RNG.standard_normal((n, m, d)).astype(np.float32) for _ in range(3))
        extra = None if mask is None else free if mask == "free" else \
            _RNG.standard_normal((n, m, m)).astype(np.float32)
        return q, k, v, extra

    def ref(q, k, v, extra):
        s = (q.astype(np.float64) @ np.swapaxes(k, -1, -2)) / np.sqrt(d) + (0 if extra is None else extra)
        e = np.exp(s - s.max(-1, keepdims=True))
        return (e / e.sum(-1, keepdims=True)) @ v

    def run(arrays):
        return f(*[None if a is None else svod.asarray(a) for a in arrays])

    cases = []
    for n in (40, 33, 35, 34, 36, 34):  # exact, then the bucket 36 (33: its first run; 36: its own size)
        arrays = inputs(n)
        got = run(arrays).numpy()
        np.testing.assert_allclose(got, ref(*arrays), rtol=3e-5, atol=3e-6)
        cases.append((arrays, got))
    out = run(inputs(35))
    _, exe = engine.plan_for([out])
    assert [k.kind for k in exe.plan.kernels] == ["attention"]
    rp = exe._gp.__dict__.get("_rows_program")
    assert rp is not None and rp.ok, getattr(rp, "reason", None)
    assert list(rp.specs.values()) == [("row", -(-m // tile_rows()))] and rp.runs == 3
    engine.reset_caches()  # the constant-shape plan of each size (not a replay of the bucket's)
    monkeypatch.setenv("SVOD_DYNAMIC", "0")
    for arrays, got in cases[1:]:
        out = run(arrays)
        _, exe = engine.plan_for([out])
        n, b = len(arrays[0]), shapes.bucket(len(arrays[0]))  # the exact plan: no node of the bucket's rows
        assert n == b or all(nd.shape[:1] != (b,) for nd in exe.key.nodes), "not the exact plan"
        assert out.numpy().tobytes() == got.tobytes()


def tile_rows() -> int:
    from svod.codegen.attention import tile

    return tile()[0]


def test_attention_whose_query_rows_are_the_rows_runs_its_rows_variant(monkeypatch):
    """A 2-D attention (q's rows dynamic, K and V free: cross-attention over a fixed memory):
    its blocks of query rows run as the kernel's rows variant, whose last block reads and
    stores rows below n only — equal to numpy and to the constant-shape plan bit for bit,
    nothing written past row n."""
    from svod.codegen import rows

    monkeypatch.setenv("SVOD_SEARCH", "0")
    s, d, dv = 45, 16, 24
    k = _RNG.standard_normal((s, d)).astype(np.float32)
    v = _RNG.standard_normal((s, dv)).astype(np.float32)

    def f(q):
        return svod.nn.scaled_dot_product_attention(q, svod.asarray(k), svod.asarray(v))

    def ref(q):
        sc = (q.astype(np.float64) @ k.T) / np.sqrt(d)
        e = np.exp(sc - sc.max(-1, keepdims=True))
        return (e / e.sum(-1, keepdims=True)) @ v

    cases = []
    for n in (100, 97, 99, 101, 103, 104, 98):  # exact, then the bucket 104 (97: its first run)
        q = _RNG.standard_normal((n, d)).astype(np.float32)
        q[0, 1] = np.nan
        got = f(svod.asarray(q)).numpy()
        assert got.shape == (n, dv)
        np.testing.assert_allclose(got[1:], ref(q)[1:], rtol=3e-5, atol=3e-6)
        assert np.isnan(got[0]).all()
        cases.append((q, got))
    _, exe = engine.plan_for([f(svod.asarray(cases[-1][0]))])
    assert [kk.kind for kk in exe.plan.kernels] == ["attention"]
    rp = exe._gp.__dict__.get("_rows_program")
    assert rp is not None and rp.ok, getattr(rp, "reason", None)
    assert list(rp.specs.values()) == [("tiles", tile_rows(), 1)] and rp.runs == 4
    # the variant alone: rows past n of a guarded output keep their pattern
    kern = exe.plan.kernels[0]
    mod, symbol = rows._variant(kern)
    import ctypes

    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)(mod.address(symbol))
    n, b = 98, 104
    q = cases[-1][0]
    out = np.full((b, dv), 7.0, np.float32)
    ins = {kern.inputs[i].slot: a for i, a in ((kern.attention.q, q), (kern.attention.k, k), (kern.attention.v, v))}
    ptrs = [ins[inp.slot].ctypes.data for inp in kern.inputs] + [out.ctypes.data, n]
    argv = (ctypes.c_void_p * len(ptrs))(*ptrs)
    fn(ctypes.addressof(argv), 0, -(-n // tile_rows()))
    assert out[:n].tobytes() == cases[-1][1].tobytes() and (out[n:] == 7.0).all()
    engine.reset_caches()  # the constant-shape plan of each size (not a replay of the bucket's)
    monkeypatch.setenv("SVOD_DYNAMIC", "0")
    for q, got in cases[1:]:
        out = f(svod.asarray(q))
        _, exe = engine.plan_for([out])
        assert all(nd.shape[:1] != (104,) for nd in exe.key.nodes) or len(q) == 104, "not the exact plan"
        assert out.numpy().tobytes() == got.tobytes()


def test_straight_line_runners_per_row_count_are_bounded_and_never_rebuilt_per_call(monkeypatch):
    """`RowsProgram.runner` keeps at most 256 row counts; past them a new count takes the
    Python path without building (and dropping) a runner on every call."""
    x = _data(70, np.float32, special=False)
    for n in (68, 69, 70, 70, 70):
        _check("bias_tanh", _data(n, np.float32))
    rp = _rows_program(PROGRAMS["bias_tanh"][0], x)
    assert rp is not None and rp.ok
    for i in range(256 - len(rp._runners)):
        rp._runners[-1 - i] = False  # row counts never asked for: only the table's size matters
    built = []
    real = type(rp).quick_parts
    monkeypatch.setattr(type(rp), "quick_parts", lambda self, gp, n: built.append(n) or real(self, gp, n))
    y = _data(67, np.float32)
    for _ in range(3):
        _check("bias_tanh", y)
    assert built == [] and 67 not in rp._runners
