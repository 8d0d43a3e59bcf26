"""svod.jit never replays a stale value (svod/capture.py, svod/tracing.py).

A differential test over jitted functions taking Python ints, floats and bools, index
arguments, masks, shape and axis arguments and value-dependent branches, each called with
several values: every call equals numpy on the same arguments (values) and the same
function run eagerly (dtypes), or raises the documented ConcretizationError at trace
time; the trace counts are the documented ones. Then keyword arguments, statics, globals
and closures, in-place updates, aliasing, the retrace warning, strict mode, the trace LRU,
bad input, and the debug log.
"""

from __future__ import annotations

import doctest
import gc
import weakref

import numpy as np
import pytest

import svod
from svod import capture, tensor, tracing

F32 = np.float32
A = np.array([10.0, 20.0, 30.0, 40.0], F32)
M = np.arange(24, dtype=F32).reshape(4, 6) - 11.5
I32 = np.array([3, -7, 11, 0], np.int32)


def _np(v):
    return v.numpy() if isinstance(v, svod.Tensor) else v


def _check(got, want, eager, case):
    """`got` (the jit's result) equals numpy's `want` and has the eager run's dtype."""
    gots = got if isinstance(got, (tuple, list)) else (got,)
    wants = want if isinstance(want, (tuple, list)) else (want,)
    eagers = eager if isinstance(eager, (tuple, list)) else (eager,)
    assert len(gots) == len(wants) == len(eagers), case
    for g, w, e in zip(gots, wants, eagers):
        assert isinstance(g, svod.Tensor), case
        assert g.dtype == svod.asarray(e).dtype, (case, g.dtype, svod.asarray(e).dtype)
        np.testing.assert_allclose(g.numpy().astype(np.float64), np.asarray(w, np.float64), rtol=1e-5, atol=1e-5,
                                   err_msg=str(case))


# (name, svod function, numpy reference, argument tuples, traces after all the calls, error on every call)
CASES = [
    ("float scalar arithmetic", lambda x, s: x * s + s / 4, lambda x, s: x * F32(s) + F32(s / 4),
     [(A, 2.0), (A, -3.5), (A, 0.1), (A, 2.0)], 1, None),
    ("int scalar keeps an int32 array's dtype", lambda x, n: x * n + n, lambda x, n: x * np.int32(n) + np.int32(n),
     [(I32, 3), (I32, -5), (I32, 0)], 1, None),
    ("bool scalar", lambda x, b: x * b + (b & True), lambda x, b: x * F32(b) + F32(b), [(A, True), (A, False)], 1,
     None),
    ("scalars combined before the array", lambda x, a, b: x * (a * b - 1) + a // 2,
     lambda x, a, b: x * F32(a * b - 1) + F32(a // 2), [(A, 3, 0.5), (A, 7, -2.0), (A, 1, 0.25)], 1, None),
    ("float64 array keeps the scalar's precision", lambda x, s: x * s, lambda x, s: x * s,
     [(A.astype(np.float64), 0.1), (A.astype(np.float64), 1 / 3)], 1, None),
    ("numpy scalars are strong", lambda x, s: x * s, lambda x, s: x * s,
     [(A, np.float64(0.1)), (A, np.float64(3.0))], 1, None),
    ("index argument: a guard", lambda x, i: x[i] + 1, lambda x, i: x[i] + 1,
     [(A, 0), (A, 2), (A, 0), (A, -1), (A, 2)], 3, None),
    ("slice bounds", lambda x, i, j: x[i:j].sum(), lambda x, i, j: x[i:j].sum(),
     [(A, 0, 2), (A, 1, 4), (A, 0, 2)], 2, None),
    ("shape argument", lambda x, n: x.reshape(n, -1).sum(axis=1), lambda x, n: x.reshape(n, -1).sum(axis=1),
     [(M, 2), (M, 4), (M, 2), (M, 3)], 3, None),
    ("axis argument", lambda x, k: x.max(axis=k), lambda x, k: x.max(axis=k), [(M, 0), (M, 1), (M, 0)], 2, None),
    ("range over an int", lambda x, n: sum(x * k for k in range(n)), lambda x, n: sum(x * F32(k) for k in range(n)),
     [(A, 2), (A, 3), (A, 2)], 2, None),
    ("branch on a scalar", lambda x, s: x * s if s > 0 else x - s, lambda x, s: x * F32(s) if s > 0 else x - F32(s),
     [(A, 2.0), (A, 2.0), (A, -1.0), (A, 3.0)], 3, None),
    ("mask as svod.where", lambda x, t: svod.where(x > t, x, 0.0), lambda x, t: np.where(x > t, x, F32(0)),
     [(A, 15.0), (A, 35.0)], 1, None),
    ("an API that needs a Python int", lambda x, n: svod.repeat(x, n) * n, lambda x, n: np.repeat(x, n) * F32(n),
     [(A, 2), (A, 3), (A, 2)], 2, None),
    ("boolean mask indexing", lambda x, t: x[x > t], lambda x, t: x[x > t], [(A, 15.0), (A, 35.0)], 0,
     "indexing with a boolean mask"),
    ("branch on tensor data", lambda x: x * 2 if float(x.sum()) > 0 else x * 3, None, [(A,), (-A,)], 0, "float(t)"),
    ("if on a tensor", lambda x: x * 2 if x.sum() > 0 else x * 3, None, [(A,)], 0, "bool(t)"),
    ("integer from the data", lambda x: x[int(x.argmax())], None, [(A,)], 0, "int(t)"),
    ("numpy() of an argument", lambda x: x * x.numpy()[0], None, [(A,)], 0, "t.numpy()"),
    ("tolist() of a result", lambda x: x * len([v for v in (x * 2).tolist() if v > 0]), None, [(A,)], 0,
     "t.tolist()"),
    ("index from the data", lambda x: x[x.argmax()], None, [(A,)], 0, "as a Python int"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_jit_differential(case):
    name, fn, ref, calls, traces, error = case
    f = svod.jit(fn)
    for args in calls:
        if error is not None:
            with pytest.raises(svod.ConcretizationError, match="needs the value of argument") as ei:
                f(*args)
            assert error in str(ei.value) and "Fix:" in str(ei.value)
            # raised at the user's line: the innermost frame outside svod is the lambda above
            tb = ei.traceback
            user = [e for e in tb if "/svod/" not in str(e.path)]
            assert user and user[-1].name == "<lambda>", name
            continue
        got = f(*args)
        eager = fn(*[svod.asarray(a) if isinstance(a, np.ndarray) else a for a in args])
        _check(got, ref(*args), _np(eager), (name, args))
    assert f.traces == traces, (name, f.reasons)
    assert tensor._READ_HOOK is None and tensor._WEAK_RANGE_HOOK is None  # no trace left behind


def test_the_issue_examples():
    a = np.array([10.0, 20.0, 30.0, 40.0], F32)
    pick = svod.jit(lambda x, i: x[i] + 1)
    assert pick(a, 0).numpy() == 11.0 and pick(a, 2).numpy() == 31.0

    @svod.jit
    def f(a, y=None, s=1.0):
        return a * s + y

    assert f(svod.ones(3), y=svod.ones(3)).tolist() == [2.0, 2.0, 2.0]
    assert f(svod.ones(3), y=svod.zeros(3)).tolist() == [1.0, 1.0, 1.0]
    assert f(svod.ones(3), svod.zeros(3), 4.0).tolist() == [4.0, 4.0, 4.0]  # positional: the same trace
    assert f(svod.ones(3), s=2.5, y=svod.zeros(3)).tolist() == [2.5, 2.5, 2.5]
    assert f.traces == 1
    # returning an argument unchanged: a copy, not the caller's array
    ident = svod.jit(lambda y: y)
    arr = np.ones(3, F32)
    out = ident(arr)
    arr[0] = 5.0
    assert out.tolist() == [1.0, 1.0, 1.0]
    p, q = svod.jit(lambda y: (y, y))(arr)
    r, s = svod.jit(lambda y: (y * 2, y * 2))(arr)
    for u, v in ((p, q), (r, s), (p, svod.asarray(arr))):
        assert not np.shares_memory(u.numpy(), v.numpy())


def test_traced_scalars_in_containers_and_keywords():
    @svod.jit
    def f(pair, opts, *, scale=1.0):
        x, y = pair
        return (x * opts["a"] + y) * scale, {"n": x.sum() * opts["b"]}

    x, y = svod.asarray(A), svod.asarray(A * 2)
    for a, b, scale in ((2.0, 1, 1.0), (-1.0, 3, 0.5)):
        out, extra = f((x, y), {"a": a, "b": b}, scale=scale)
        np.testing.assert_allclose(out.numpy(), (A * F32(a) + A * 2) * F32(scale))
        np.testing.assert_allclose(extra["n"].numpy(), A.sum() * b)
    assert f.traces == 1


def test_static_arguments():
    @svod.jit(static_argnames=("mode",), static_argnums=(1,))
    def f(x, n, mode="sum"):
        y = x * n
        return y.sum() if mode == "sum" else y.max()

    x = svod.asarray(A)
    assert f(x, 2).item() == 200.0 and f(x, 2, mode="max").item() == 80.0 and f(x, 3).item() == 300.0
    assert f(x, 2).item() == 200.0 and f.traces == 3
    assert "static argument 'n'" in f.reasons[-1] or "static argument 'mode'" in f.reasons[-1]


def test_globals_and_closures_are_guarded():
    scale = {"v": 2.0}
    c = svod.asarray([1.0, 2.0, 3.0, 4.0])
    glb = globals()
    glb["_SCALE"] = 3.0

    def make():
        k = scale["v"]

        @svod.jit
        def f(x):
            return x * k + c * _SCALE  # noqa: F821 - a module global set above

        return f

    f = make()
    x = svod.asarray(A)
    np.testing.assert_allclose(f(x).numpy(), A * 2 + np.array([1, 2, 3, 4], F32) * 3)
    c[0] = 100.0  # an in-place update of a closed-over tensor: traced again
    np.testing.assert_allclose(f(x).numpy(), A * 2 + np.array([100, 2, 3, 4], F32) * 3)
    glb["_SCALE"] = 5.0  # a rebound global: traced again
    np.testing.assert_allclose(f(x).numpy(), A * 2 + np.array([100, 2, 3, 4], F32) * 5)
    for _ in range(3):  # the fast paths check the guards too
        np.testing.assert_allclose(f(x).numpy(), A * 2 + np.array([100, 2, 3, 4], F32) * 5)
    assert f.traces == 3 and "'c' was updated" in f.reasons[1] and "'_SCALE' was rebound" in f.reasons[2]
    del glb["_SCALE"]


def test_in_place_updates_reach_the_caller():
    @svod.jit
    def f(x, v):
        x += 1.0
        x[0] = v
        return x * 2

    for jitted in (f, f.fn):
        x = svod.asarray(A)
        out = jitted(x, -1.0)
        assert x.tolist() == [-1.0, 21.0, 31.0, 41.0]
        assert out.tolist() == [-2.0, 42.0, 62.0, 82.0]
    arr = A.copy()
    f(arr, 7.0)
    assert arr.tolist() == [7.0, 21.0, 31.0, 41.0]  # a numpy argument is written back, as numpy would
    assert f.traces == 1  # arrays and Tensors of one shape and dtype share a trace


def test_realize_inside_a_trace_stays_lazy_and_nested_jit_inlines():
    inner = svod.jit(lambda x, s: (x * s).realize())

    @svod.jit
    def outer(x, s):
        y = inner(x, s) + 1
        y.realize()
        return y

    for s in (2.0, 3.0):
        np.testing.assert_allclose(outer(svod.asarray(A), s).numpy(), A * s + 1)
    assert outer.traces == 1 and inner.traces == 0


def test_printing_a_traced_value_reads_nothing(capsys):
    @svod.jit
    def f(x, s):
        print(x * s, s)
        return x * s

    for s in (2.0, 3.0):
        np.testing.assert_allclose(f(svod.asarray(A), s).numpy(), A * F32(s))
    assert f.traces == 1
    out = capsys.readouterr().out
    assert "<traced svod.Tensor shape=(4,) dtype=float32, from s, x> <traced Python scalar" in out


def test_random_inside_a_trace_raises():
    with pytest.raises(svod.JitError, match="svod.random inside a jitted function"):
        svod.jit(lambda x: x + svod.random.rand(4))(svod.asarray(A))


def test_retrace_warning_strict_and_counters():
    svod.reset_stats()
    f = svod.jit(lambda x, i: x[i] * 2, retrace_limit=3)
    with pytest.warns(svod.JitWarning, match="traced 4 times") as rec:
        for i in range(6):
            assert f(svod.asarray(A), i % 4).item() == A[i % 4] * 2
    assert len(rec) == 1 and rec[0].filename == __file__  # once, pointing at the call
    assert f.traces == 4 and svod.stats()["jit_traces"] == 4 and svod.stats()["jit_retraces"] == 3
    g = svod.jit(lambda x: x * 2, strict=True)
    g(svod.ones(3))
    g(svod.zeros(3))
    with pytest.raises(svod.JitError, match=r"strict=True.*new signature: argument 'x'"):
        g(svod.ones(4))


def test_trace_lru_releases_evicted_traces():
    f = svod.jit(lambda x: svod.exp(x) + 1, max_traces=2)
    xs = [svod.asarray(np.ones(n, F32)) for n in (3, 4, 5)]
    refs = []
    for x in xs + xs[:1]:
        for _ in range(3):  # up to the inlined replay
            f(x)
        refs.append(weakref.ref(next(reversed(f._entries.values()))))
    gc.collect()
    assert refs[0]() is None  # the first trace, evicted: nothing holds it (its replay code neither)
    assert f.traces == 4 and f.cached_traces == 2
    assert "evicted by the LRU bound (max_traces=2)" in f.reasons[-1]
    assert svod.stats()["jit_trace_evictions"] == 2
    assert len(f._quick) <= 2  # the evicted traces' replay code went with them
    entry = next(iter(f._entries.values()))
    ref = weakref.ref(entry)
    f.clear()
    del entry
    gc.collect()
    assert ref() is None and f.cached_traces == 0


@pytest.mark.parametrize("structure", ["one", "tuple", "dict"])
def test_a_dropped_result_is_freed_without_a_garbage_collection(structure):
    # a reference cycle in the result's rebuild held every result Tensor (and its pool
    # block) until a collection: each call of a big jitted kernel mapped fresh memory
    def fn(x):
        y = x * 2 + 1
        return {"one": y, "tuple": (y, x - 1), "dict": {"a": y}}[structure]

    f = svod.jit(fn)
    x = svod.asarray(np.ones(1 << 20, F32))
    for _ in range(4):  # trace, then every replay path
        f(x)
    gc.disable()
    try:
        for _ in range(3):
            r = f(x)
            first = r if structure == "one" else (r[0] if structure == "tuple" else r["a"])
            np.testing.assert_array_equal(first.numpy(), np.full(1 << 20, 3, F32))
            ref = weakref.ref(first)
            del r, first
            assert ref() is None
    finally:
        gc.enable()


def test_bad_input_raises_at_the_call_and_svod_keeps_working():
    with pytest.raises(svod.JitError, match=r"static_argnums=5 is out of range: .* takes 2 positional"):
        svod.jit(lambda x, n: x, static_argnums=5)
    with pytest.raises(svod.JitError, match="static_argnames names 'm'"):
        svod.jit(lambda x, n: x, static_argnames="m")
    f = svod.jit(lambda x, n: x[n[0]], static_argnums=1)
    with pytest.raises(svod.JitError, match=r"static argument 'n' must be hashable.*list \[0, 1\]"):
        f(svod.asarray(A), [0, 1])
    g = svod.jit(lambda x, i: x[i], static_argnames="i")
    with pytest.raises(svod.SvodIndexError, match="index 10 is out of bounds for axis 0 with size 4"):
        g(svod.asarray(A), i=10)
    with pytest.raises(svod.JitError, match="must return Tensors.*got int 3"):
        svod.jit(lambda x: 3)(svod.asarray(A))
    with pytest.raises(svod.JitError, match=r"argument 'cfg' is a object"):
        svod.jit(lambda x, cfg: x)(svod.asarray(A), object())
    with pytest.raises(TypeError, match="missing a required argument"):
        svod.jit(lambda x, y: x)(svod.asarray(A))
    # svod keeps working: no trace is left behind, the same functions work with good input
    assert tensor._READ_HOOK is None and tracing.current() is None and not tracing._placeholders
    assert g(svod.asarray(A), i=1).item() == 20.0 and f(svod.asarray(A), (2, 1)).item() == 30.0
    np.testing.assert_allclose((svod.asarray(A) * 2).numpy(), A * 2)


def test_weak_scalar_rules_match_eager_svod():
    """Traced Python scalars promote as the scalars themselves do outside the jit."""
    fns = [lambda x, s: x + s, lambda x, s: s - x, lambda x, s: x / s, lambda x, s: x // s, lambda x, s: x % s,
           lambda x, s: x ** s, lambda x, s: svod.maximum(x, s), lambda x, s: x < s, lambda x, s: -s * x,
           lambda x, s: svod.sqrt(s) * x, lambda x, s: svod.where(x > 0, s, x)]
    # NOTE: sqrt, not exp: SVOD_VALIDATE compares a float32 exp promoted to float64 at float64's
    # tolerance (a 1-ulp float32 difference fails it, jitted or not)
    for fn in fns:
        f = svod.jit(fn, retrace_limit=100)
        for arr in (A, I32, A > 15):
            for s in (2, 2.5, True):
                try:
                    want = fn(svod.asarray(arr), s)
                except Exception as e:  # noqa: BLE001 - the jit raises what eager raises
                    with pytest.raises(type(e)):
                        f(arr, s)
                    continue
                got = f(arr, s)
                assert got.dtype == want.dtype, (arr.dtype, s)
                np.testing.assert_allclose(got.numpy().astype(np.float64), want.numpy().astype(np.float64),
                                           rtol=1e-6, atol=1e-6)
    with pytest.raises(OverflowError, match="out of bounds for int32"):
        svod.jit(lambda x, n: x + n)(I32, 2 ** 40)


def test_debug_log_names_traces_retraces_and_replays(monkeypatch, capsys):
    monkeypatch.setenv("SVOD_DEBUG", "1")
    f = svod.jit(lambda x, i: x[i] * 2)
    x = svod.asarray(A)
    f(x, 0)
    f(x, 0)
    f(x, 1)
    g = svod.jit(lambda x: x + 1)
    for _ in range(3):
        g(x)
    (x * 3).sum().item()
    err = capsys.readouterr().err
    assert "<locals>.<lambda>: trace #1 (first call); graph" in err
    assert "retrace #2 (new value of guarded argument 'i': 0 -> 1)" in err
    for kind in ("general", "fast", "inlined"):
        assert f"replay ({kind})" in err
    assert "svod realize: key" in err and "svod plan" in err


def test_docstrings_run():
    for mod in (capture, tracing):
        assert doctest.testmod(mod).failed == 0
