"""`svod bench`: W1–W7 against numpy and the optional peers, in one run.

Method (DESIGN "Workloads and measuring"): every contender of a case is timed once per
repeat, repeats interleaved (so drift in clock speed or memory traffic hits all alike),
and the median is reported. svod is measured in steady state; its first call (plan,
compile or cache load) is timed apart as "first call". Every svod result is checked
against the workload's numpy `reference` with the workload's tolerances; a mismatch is a
FAIL in the table and in the JSON, and `svod bench` exits 1.

For the memory-bound workloads (W1, W2, W3, W6) the table gives GB/s of the minimum
traffic (inputs read once, outputs written once) and its share of a bandwidth probe
(`np.copyto` of an array sized for DRAM, or for the last-level cache when the case is
small) measured in the same run; W1 is also compared to a hand-written C loop compiled
with gcc in the same run (the practical limit), when gcc exists.

>>> from svod.bench import harness
>>> res = harness.run(sizes="tiny", only=["w7"], peers=False, out=None)
>>> [c["id"] for c in res["cases"]], all(c["check"]["ok"] for c in res["cases"])
(['w7_lazy', 'w7_jit'], True)
"""

from __future__ import annotations

import ctypes
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from svod import workloads

# ----------------------------------------------------------------------------- cases


@dataclass(frozen=True)
class Case:
    """One measured row group: a workload at given shapes, svod run lazily or via svod.jit."""

    id: str
    workload: str
    label: str
    shapes: dict[str, tuple[int, ...]]
    memory_bound: bool = False
    mode: str = "lazy"  # "lazy": build + realize per call; "jit": svod.jit replay
    c_kernel: bool = False  # compare with the hand-written C loop (W1 only)


def _w1(n):
    return {"a": (n,), "b": (n,), "c": (n,)}


def _w4(m, k, h):
    return {"x": (m, k), "w1": (k, h), "b1": (h,), "w2": (h, k), "b2": (k,)}


def _w5(h, s, d):
    return {"q": (h, s, d), "k": (h, s, d), "v": (h, s, d)}


# size set -> W-number -> shapes. "quick" keeps each case in the milliseconds so the whole
# run takes about a minute; "tiny" is for tests (microseconds, correctness of the harness).
_SHAPES = {
    "default": {
        "w1": [("16M", _w1(16 << 20)), ("1M", _w1(1 << 20))],
        "w2": {"x": (4096, 4096)}, "w3": {"x": (8192, 1024), "weight": (1024,), "bias": (1024,)},
        "w4": _w4(512, 1024, 4096), "w5": _w5(8, 1024, 64), "w6": {"x": (4096, 4096)}, "w7": {"x": (1000,)},
    },
    "quick": {
        "w1": [("1M", _w1(1 << 20))],
        "w2": {"x": (1024, 1024)}, "w3": {"x": (2048, 1024), "weight": (1024,), "bias": (1024,)},
        "w4": _w4(128, 512, 2048), "w5": _w5(4, 512, 64), "w6": {"x": (1024, 1024)}, "w7": {"x": (1000,)},
    },
    "tiny": {
        "w1": [("4K", _w1(4099))],
        "w2": {"x": (37, 129)}, "w3": {"x": (33, 64), "weight": (64,), "bias": (64,)},
        "w4": _w4(8, 32, 64), "w5": _w5(2, 16, 8), "w6": {"x": (37, 53)}, "w7": {"x": (1000,)},
    },
}
REPEATS = {"default": 11, "quick": 7, "tiny": 2}
# seconds one timing should last at least (fast calls are repeated inside it): long enough
# that timer resolution and one-off hiccups vanish in the median, short enough for the budget
TARGET_S = {"default": 0.05, "quick": 0.03, "tiny": 1e-3}
WNAMES = {"w1": "w1_elementwise", "w2": "w2_softmax", "w3": "w3_layernorm", "w4": "w4_mlp",
          "w5": "w5_attention", "w6": "w6_reductions", "w7": "w7_small_chain"}
_MEMORY_BOUND = {"w1", "w2", "w3", "w6"}


def _dims(shape):
    return "x".join(map(str, shape))


def cases(sizes: str = "default", only: list[str] | None = None) -> list[Case]:
    """The cases of a size set ("default", "quick", "tiny"), filtered by `only` (w-numbers)."""
    if sizes not in _SHAPES:
        raise ValueError(f"unknown sizes {sizes!r}; known: {', '.join(_SHAPES)}")
    keep = set(parse_only(only)) if only else set(WNAMES)
    out: list[Case] = []
    for w, spec in _SHAPES[sizes].items():
        if w not in keep:
            continue
        name, mb = WNAMES[w], w in _MEMORY_BOUND
        if w == "w1":
            out += [Case(f"w1_{tag}", name, f"W1 elementwise {tag} f32", s, True, c_kernel=True) for tag, s in spec]
        elif w == "w7":
            out.append(Case("w7_lazy", name, f"W7 10-op chain {spec['x'][0]} (lazy)", spec, mode="lazy"))
            out.append(Case("w7_jit", name, f"W7 10-op chain {spec['x'][0]} (svod.jit)", spec, mode="jit"))
        else:
            main = next(iter(spec.values()))
            out.append(Case(w, name, f"{w.upper()} {name.split('_', 1)[1]} {_dims(main)}", spec, mb))
    return out


# sections beside W1-W7: dask runs by default when installed, loops and algebra on request
EXTRAS = ("dask", "loops", "algebra")


def parse_only(only) -> list[str]:
    """`"w1,w2"` or `["w1", "w2_softmax"]` -> `["w1", "w2"]`; ValueError names unknown ones."""
    items = only.split(",") if isinstance(only, str) else list(only)
    out, by_full = [], {v: k for k, v in WNAMES.items()}
    for it in (s.strip().lower() for s in items):
        if not it:
            continue
        key = it if it in WNAMES or it in EXTRAS else by_full.get(it)
        if key is None:
            raise ValueError(f"unknown workload {it!r}; choose from {', '.join(WNAMES)}, {', '.join(EXTRAS)} "
                             "(comma-separated)")
        out.append(key)
    if not out:
        raise ValueError("--only names no workload")
    return out


# ----------------------------------------------------------------------------- timing


def _calibrate(fn: Callable, target_s: float) -> int:
    """Calls per timing: a microsecond call timed alone is mostly perf_counter noise. Sized
    from the fastest of a few warm calls: an early call can be slow (svod compiles a
    replay closure on a program's second call), and sized from it a W7 timing held a
    handful of calls instead of hundreds."""
    def timed() -> float:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    dt = timed()
    if dt < target_s:  # long calls run one per timing anyway
        fn()
        dt = min(timed() for _ in range(3))
    return max(1, min(2000, math.ceil(target_s / max(dt, 1e-7))))


def interleaved(contenders: dict[str, Callable], repeats: int, target_s: float = 2e-3) -> dict[str, float]:
    """Median seconds per call of each contender; each repeat runs every contender once.

    A contender whose call is shorter than `target_s` is timed over several calls, after
    one untimed call: the contender before it has just evicted the caches, and a case
    that fits them (W1 at 1M, 16 MB: the L3-sized one) is meant to be measured warm, as
    its bandwidth share is (against an L3-sized probe). Longer calls run cold, alone."""
    inner = {k: _calibrate(f, target_s) for k, f in contenders.items()}  # also a warm-up
    times: dict[str, list[float]] = {k: [] for k in contenders}
    for _ in range(repeats):
        for name, f in contenders.items():
            n = inner[name]
            if n > 1:
                f()
            t0 = time.perf_counter()
            for _ in range(n):
                f()
            times[name].append((time.perf_counter() - t0) / n)
    return {k: statistics.median(v) for k, v in times.items()}


# ----------------------------------------------------------------------------- environment


def _cache_size(level: int) -> int | None:
    try:
        for idx in os.listdir("/sys/devices/system/cpu/cpu0/cache"):
            base = f"/sys/devices/system/cpu/cpu0/cache/{idx}"
            with open(f"{base}/level") as fh:
                if int(fh.read()) != level:
                    continue
            with open(f"{base}/size") as fh:
                s = fh.read().strip()
            mult = {"K": 1 << 10, "M": 1 << 20}.get(s[-1], 1)
            return int(s.rstrip("KM")) * mult
    except (OSError, ValueError):
        pass
    return None


def probe_bandwidth(kind: str, repeats: int) -> dict:
    """GB/s of np.copyto (read + write) on an array sized for DRAM or for the L3 cache.

    NOTE: np.copyto is single-threaded, so a multi-threaded kernel can exceed 100% of it;
    the share says how close to a plain streaming copy a workload gets, not a hard limit.
    """
    l3 = _cache_size(3) or (32 << 20)
    if kind == "dram":  # several times the L3 so the copy streams from memory
        nbytes = min(max(4 * l3, 256 << 20), 1 << 30)
    else:  # both arrays fit well inside the L3
        nbytes = max(1 << 20, min(l3 // 4, 8 << 20))
    src = np.ones(nbytes // 4, np.float32)
    dst = np.empty_like(src)
    t = interleaved({"copy": lambda: np.copyto(dst, src)}, max(repeats, 3))["copy"]
    return {"kind": kind, "bytes": 2 * nbytes, "ms": t * 1e3, "gbps": 2 * nbytes / t / 1e9}


def blas_info() -> str:
    """Which BLAS numpy runs: threadpoolctl when installed, else numpy's build config."""
    try:
        from threadpoolctl import threadpool_info

        libs = [i for i in threadpool_info() if i.get("user_api") == "blas"]
        if libs:
            return "; ".join(f"{i.get('internal_api')} {i.get('version')} ({i.get('num_threads')} threads)"
                             for i in libs)
    except Exception:  # noqa: BLE001 - optional; fall through to numpy's config
        pass
    try:
        cfg = np.show_config(mode="dicts")
        b = cfg["Build Dependencies"]["blas"]
        return f"{b.get('name', '?')} {b.get('version', '')} (numpy build config)".replace("  ", " ")
    except Exception:  # noqa: BLE001 - old numpy without mode="dicts"
        return "unknown"


# ----------------------------------------------------------------------------- the C loop for W1

C_W1 = r"""
#include <math.h>
#include <stdint.h>
void w1(const float *restrict a, const float *restrict b, const float *restrict c, float *restrict out, int64_t n) {
    #pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++) {
        float t = a[i] * b[i] + c[i];
        t = t > 0.0f ? t : 0.0f;
        out[i] = t * 0.5f - a[i] / (1.0f + expf(-b[i]));
    }
}
"""
# NOTE: without -ffast-math gcc calls scalar expf; with it glibc's libmvec vector expf.
C_FLAGS = {"C gcc -O3 -march=native -fopenmp": ["-O3", "-march=native", "-fopenmp"],
           "C gcc ... -ffast-math": ["-O3", "-march=native", "-fopenmp", "-ffast-math"]}


def compile_shared(gcc: str, src: str, lib: str, flags: list[str]) -> str:
    """Compile `src` with `flags`, then link a shared library WITHOUT them.

    NOTE: linking with -ffast-math pulls in crtfastmath.o, whose constructor sets FTZ/DAZ
    in MXCSR for the whole process when the library is loaded: every later float op in
    numpy and in svod's kernels would flush subnormals to zero. Compile-only flags keep
    the fast code and leave the process's float state alone.
    """
    obj = lib + ".o"
    subprocess.run([gcc, *flags, "-fPIC", "-c", src, "-o", obj], check=True, capture_output=True, timeout=60)
    link = ["-fopenmp"] if "-fopenmp" in flags else []
    subprocess.run([gcc, "-shared", *link, obj, "-o", lib, "-lm"], check=True, capture_output=True, timeout=60)
    return lib


def build_c_kernels() -> tuple[dict[str, Callable], str | None]:
    """name -> ctypes function for each flag set, or ({}, reason) when gcc is missing/fails."""
    gcc = shutil.which("gcc")
    if not gcc:
        return {}, "gcc not found: no C reference loop"
    # NOTE: libgomp's idle workers spin by default; interleaved with svod's own pool on the
    # same cores that spinning would slow whichever contender runs next. Passive waiting
    # keeps the comparison fair (it must be set before libgomp is loaded).
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    d = tempfile.mkdtemp(prefix="svod-bench-")
    src = os.path.join(d, "w1.c")
    with open(src, "w") as fh:
        fh.write(C_W1)
    out, errors = {}, []
    for i, (name, flags) in enumerate(C_FLAGS.items()):
        lib = os.path.join(d, f"w1_{i}.so")
        try:
            fn = ctypes.CDLL(compile_shared(gcc, src, lib, flags)).w1
        except (subprocess.SubprocessError, OSError) as e:
            errors.append(f"{name}: {type(e).__name__}")
            continue
        fn.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int64]
        fn.restype = None
        out[name] = fn
    return out, ("; ".join(errors) or None)


def _c_caller(fn, a, b, c):
    n = a.size

    def call():  # a fresh output per call, as svod and numpy allocate theirs
        o = np.empty(n, np.float32)
        fn(a.ctypes.data, b.ctypes.data, c.ctypes.data, o.ctypes.data, n)
        return o

    return call


# ----------------------------------------------------------------------------- one case


def _as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


def check(got, want, rtol: float, atol: float) -> dict:
    """Compare output(s) with the reference: ok, worst absolute error, and why not ok."""
    got, want = _as_tuple(got), _as_tuple(want)
    if len(got) != len(want):
        return {"ok": False, "max_abs_err": None, "detail": f"{len(got)} outputs, expected {len(want)}"}
    worst, bad = 0.0, []
    for i, (g, w) in enumerate(zip(got, want)):
        g, w = np.asarray(g), np.asarray(w)
        if g.shape != w.shape:
            bad.append(f"output {i}: shape {g.shape} != {w.shape}")
            continue
        err = np.abs(g.astype(np.float64) - w.astype(np.float64))
        worst = max(worst, float(err.max()) if err.size else 0.0)
        if not np.allclose(g, w, rtol=rtol, atol=atol, equal_nan=True):
            bad.append(f"output {i}: max abs err {float(err.max()):.3g} (rtol={rtol}, atol={atol})")
    return {"ok": not bad, "max_abs_err": worst, "detail": "; ".join(bad)}


def _svod_callable(case: Case, w, arrays):
    from svod import tensor as T

    tens = w.tensors(arrays)
    if case.mode == "jit":
        import svod

        f, args = svod.jit(w.build), [tens[k] for k in arrays]
        return lambda: _as_tuple(f(*args))

    def lazy():  # the whole lazy path per call: build the graph, look the plan up, run it
        outs = _as_tuple(w.build(**tens))
        T.realize(*outs)
        return outs

    return lazy


def run_case(case: Case, repeats: int, peer_makers: dict, skipped: dict[str, str], state: dict,
             target_s: float = 2e-3) -> dict:
    """Measure one case; `state` carries things made once per run (probes, C kernels)."""
    import svod
    from svod.bench import peers as peers_mod

    w = workloads.get(case.workload)
    arrays = w.make_inputs(case.shapes, seed=0)
    want = w.reference(**arrays)
    res: dict = {"id": case.id, "workload": case.workload, "label": case.label, "mode": case.mode,
                 "shapes": {k: list(v) for k, v in case.shapes.items()}, "skipped": {}, "peer_checks": {}}

    svod_fn = _svod_callable(case, w, arrays)
    before = svod.stats()
    t0 = time.perf_counter()
    first = svod_fn()
    res["first_call_ms"] = (time.perf_counter() - t0) * 1e3
    svod.planner.settle()  # tiered planning (svod.tiered): time the searched plan, not the provisional one
    after = svod.stats()
    res["first_call_stats"] = {k: after[k] - before[k] for k in ("kernels_compiled", "kernels_loaded",
                                                                 "disk_cache_hits", "searches")}
    res["check"] = check(tuple(t.numpy() for t in first), want, w.rtol, w.atol)

    cont: dict[str, Callable] = {"svod": svod_fn, "numpy": lambda: w.reference(**arrays)}
    if case.c_kernel:
        if "c" not in state:
            state["c"] = build_c_kernels()
        fns, why = state["c"]
        for name, fn in fns.items():
            cont[name] = _c_caller(fn, arrays["a"], arrays["b"], arrays["c"])
            res["peer_checks"][name] = check(cont[name](), want, w.rtol, w.atol)["ok"]
        if why:
            res["skipped"]["C loop"] = why
    for name, reason in skipped.items():
        res["skipped"][name] = reason
    for name, make in peer_makers.items():
        try:
            fn = make(case.workload, arrays)
            got = fn()  # the first call compiles (numba, jax, torch.compile): outside the timing
            res["peer_checks"][name] = check(peers_mod.to_numpy(got), want, w.rtol, w.atol)["ok"]
            cont[name] = fn
        except peers_mod.Skip as e:
            res["skipped"][name] = str(e)
        except Exception as e:  # noqa: BLE001 - a failing peer is reported, never fatal
            res["skipped"][name] = f"error: {type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"

    times = interleaved(cont, repeats, target_s)
    ts = times["svod"]
    res["times_ms"] = {k: v * 1e3 for k, v in times.items()}
    # peer time / svod time: above 1 means svod is faster than that peer
    res["speedup"] = {k: v / ts for k, v in times.items() if k != "svod"}
    if case.memory_bound:
        traffic = sum(a.nbytes for a in arrays.values()) + sum(np.asarray(o).nbytes for o in _as_tuple(want))
        kind = "dram" if traffic >= (64 << 20) else "l3"
        if kind not in state:
            state[kind] = probe_bandwidth(kind, repeats)
        probe = state[kind]
        res["traffic_bytes"] = traffic
        res["gbps"] = {k: traffic / v / 1e9 for k, v in times.items()}
        res["probe"] = kind
        res["probe_share"] = res["gbps"]["svod"] / probe["gbps"]
    return res


# ----------------------------------------------------------------------------- the run


def run(sizes: str = "default", only=None, repeats: int | None = None, peers: bool = True,
        out=sys.stdout, progress: bool = True) -> dict:
    """Run the benchmark; print the table to `out` (None: silent; a progress bar on a
    terminal's stderr unless `progress` is False); return all results."""
    import svod
    from svod import runtime
    from svod.bench import peers as peers_mod

    # NOTE: before any peer loads its OpenMP runtime (torch's libgomp reads this once):
    # threads that spin after a call steal the cores from the contender timed next in an
    # interleaved run (docs/engine.md).
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    cs = cases(sizes, only)
    repeats = repeats or REPEATS[sizes]
    avail = peers_mod.available() if peers else {n: "peers disabled" for n in peers_mod.PEERS}
    makers = {n: peers_mod.PEERS[n][1] for n, why in avail.items() if why is None}
    skipped = {n: why for n, why in avail.items() if why is not None}
    result: dict = {
        "sizes": sizes, "repeats": repeats,
        "env": {"cpu_count": os.cpu_count(), "svod_threads": runtime.pool_size(), "numpy": np.__version__,
                "blas": blas_info(), "python": sys.version.split()[0], "gcc": shutil.which("gcc"),
                "omp_wait_policy": os.environ["OMP_WAIT_POLICY"]},
        "peers_skipped": skipped, "cases": [], "probes": {},
    }
    state: dict = {}
    t_start = time.perf_counter()
    from svod.progress import bar

    with bar(len(cs), "bench", enabled=progress and out is not None, unit="case") as pb:
        for case in cs:
            pb.set_postfix_str(case.label)
            result["cases"].append(run_case(case, repeats, makers, skipped, state, TARGET_S[sizes]))
            pb.update(1)
    result["probes"] = {k: v for k, v in state.items() if k in ("dram", "l3")}
    result["failures"] = [c["id"] for c in result["cases"] if not c["check"]["ok"]]
    if only is None or "dask" in parse_only(only):
        result["dask"] = _dask_case(sizes, out)
        if not result["dask"].get("check", {"ok": True})["ok"]:
            result["failures"].append("dask")
    if only is not None and "loops" in parse_only(only):
        result["loops"] = _loops_case(sizes, out)
        result["failures"] += [f"loops:{r['program']}" for r in result["loops"] if not r["ok"]]
    if only is not None and "algebra" in parse_only(only):
        result["algebra"] = _algebra_case(sizes, out, peers, repeats)
        result["failures"] += [f"algebra:{r['program']}" for r in result["algebra"] if not r["ok"]]
    result["seconds"] = time.perf_counter() - t_start
    result["svod_stats"] = svod.stats()
    if out is not None:
        print(format_table(result), file=out)
    return result


def _dask_case(sizes: str, out) -> dict:
    """The dask.array program on a 2-worker LocalCluster, numpy chunks against svod chunks
    (svod/bench/dask_bench.py), or why it was skipped."""
    from svod.bench import dask_bench

    why = dask_bench.available()
    if why:
        return {"skipped": why}
    if out is not None:
        print("... dask 2-worker LocalCluster", file=sys.stderr, flush=True)
    total, chunk = dask_bench.SIZES[sizes]
    return dask_bench.run(total, chunk, repeats=dask_bench.REPEATS[sizes], out=None)


LOOP_SIZES = {"default": 32, "quick": 16, "tiny": 8}


def _loops_case(sizes: str, out) -> list[dict]:
    """Loop-heavy numpy programs run unchanged on numpy and svod.numpy (svod/bench/loops.py)."""
    from svod.bench import loops

    if out is not None:
        print("... loop programs", file=sys.stderr, flush=True)
    return loops.run(n=LOOP_SIZES[sizes], repeats=3 if sizes == "tiny" else 5)


def _algebra_case(sizes: str, out, peers: bool, repeats: int) -> list[dict]:
    """Programs where algebra matters, svod against numpy and the peers (svod/bench/algebra.py)."""
    from svod.bench import algebra

    if out is not None:
        print("... algebra programs", file=sys.stderr, flush=True)
    return algebra.run(sizes=sizes, repeats=repeats, peers=None if peers else ())


def format_table(result: dict) -> str:
    """The human-readable report: one block per case, one line per contender."""
    e = result["env"]
    lines = [f"svod bench ({result['sizes']} sizes): median of {result['repeats']} interleaved repeats; "
             f"svod threads={e['svod_threads']}, cpus={e['cpu_count']}, numpy {e['numpy']}, BLAS: {e['blas']}"]
    for k, p in result["probes"].items():
        lines.append(f"bandwidth probe {k}: np.copyto {p['bytes'] / 2 ** 20:.0f} MiB moved, {p['gbps']:.1f} GB/s")
    if result["peers_skipped"]:
        lines.append("peers skipped: " + "; ".join(f"{n}: {r}" for n, r in result["peers_skipped"].items()))
    lines.append("'peer/svod' > 1 means svod is faster than that contender")
    lines.append(f"{'case':34} {'contender':34} {'median':>11} {'peer/svod':>9} {'GB/s':>7}")
    for c in result["cases"]:
        ok = c["check"]
        status = (f"check PASS (max err {ok['max_abs_err']:.2g})" if ok["ok"]
                  else f"check *** FAIL ***: {ok['detail']}")
        st = c["first_call_stats"]
        lines.append(f"{c['label']:34} first call {c['first_call_ms']:.1f} ms (compiled {st['kernels_compiled']}, "
                     f"loaded {st['kernels_loaded']}); {status}")
        for name, ms in c["times_ms"].items():
            ratio = "" if name == "svod" else f"{c['speedup'][name]:8.2f}x"
            gb = f"{c['gbps'][name]:7.1f}" if "gbps" in c else ""
            note = ""
            if name == "svod" and "probe_share" in c:
                note = f"  {100 * c['probe_share']:.0f}% of {c['probe']} probe"
            if name in c["peer_checks"] and not c["peer_checks"][name]:
                note += "  (peer result mismatch)"
            lines.append(f"{'':34} {name:34} {_fmt_ms(ms):>11} {ratio:>9} {gb:>7}{note}")
        own = {k: v for k, v in c["skipped"].items() if k not in result["peers_skipped"]}
        for name, why in own.items():
            lines.append(f"{'':34} {name:34} skipped: {why}")
    if "dask" in result:
        from svod.bench.dask_bench import format_result

        lines.append(format_result(result["dask"]))
    if "loops" in result:
        from svod.bench.loops import format_rows

        lines += ["", "loop programs (numpy code run unchanged with svod.numpy; ratio: svod steady / numpy)",
                  format_rows(result["loops"])]
    if "algebra" in result:
        from svod.bench.algebra import format_rows as algebra_rows

        lines += ["", "algebra programs (issue 30; x/svod > 1: svod is faster)", algebra_rows(result["algebra"])]
    if result["failures"]:
        lines.append(f"*** {len(result['failures'])} CHECK(S) FAILED: {', '.join(result['failures'])} ***")
    lines.append(f"total {result['seconds']:.1f} s")
    return "\n".join(lines)


def _fmt_ms(ms: float) -> str:
    return f"{ms * 1e3:.1f} us" if ms < 1 else f"{ms:.2f} ms"


def write_chart(result: dict, path: str) -> str | None:
    """A bar chart of svod's speedup over each contender per case; a message if no matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display needed
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no chart written (pip install matplotlib)"
    cs = result["cases"]
    names = sorted({n for c in cs for n in c["speedup"]})
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(cs)), 4.5))
    width = 0.8 / max(1, len(names))
    for j, n in enumerate(names):
        xs = [i + j * width for i, c in enumerate(cs) if n in c["speedup"]]
        ys = [c["speedup"][n] for c in cs if n in c["speedup"]]
        ax.bar(xs, ys, width, label=n)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(cs))], [c["id"] for c in cs], rotation=30)
    ax.set_ylabel("contender time / svod time (log)")
    ax.set_title(f"svod bench ({result['sizes']} sizes): > 1 means svod is faster")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return None


__all__ = ["Case", "cases", "parse_only", "interleaved", "run", "run_case", "check", "format_table",
           "write_chart", "probe_bandwidth", "blas_info", "build_c_kernels"]
