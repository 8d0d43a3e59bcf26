"""Benchmark compiled kernels against numpy and a hand-written C loop (same run).

    python3 bench/bench_kernels.py [--repeats 9] [--threads N] [--reductions [--match WORDS] | --wake]

Kernels are built with svod's frontend + the greedy planner + `compile_kernel`, output
buffers allocated with numpy. Times are medians of interleaved repeats (each repeat
runs every contender once). Reports: W1 ``relu(a*b+c)*0.5 - a/(1+exp(-b))`` on 16M
float32 with a fresh result per call (vs numpy, vs gcc -O3 -march=native -fopenmp when
gcc exists), exp on 16M float32, softmax (4096, 4096) and layernorm (8192, 1024) as one
kernel each, a chain of kernels handing 1 MB to each other, the call overhead of a
tiny kernel, thread dispatch, compile time of W1,
and the object-cache load time; then reductions of DRAM-sized inputs (axis 0: sum,
mean, var, std; to one value: sum, max, mean; axis 1; W6) with their share of the
read-bandwidth probe of `svod.bench.peak` measured in the same repeats, the spread of
each median, and the one-kernel cases' kernel on 1 thread and on --threads
(``--reductions``: only those).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import svod  # noqa: E402
from svod import runtime  # noqa: E402
from svod.bench.harness import compile_shared  # noqa: E402
from svod.codegen import program as program_mod  # noqa: E402
from svod.codegen.program import compile_kernel  # noqa: E402
from svod.key import compact  # noqa: E402
from svod.plan_greedy import plan_greedy  # noqa: E402

N = 1 << 24

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


def build_c(flags: list[str]):
    gcc = shutil.which("gcc")
    if not gcc:
        return None
    d = tempfile.mkdtemp(prefix="svod-bench-")
    src, lib = os.path.join(d, "w1.c"), os.path.join(d, "w1.so")
    with open(src, "w") as fh:
        fh.write(C_W1)
    try:
        fn = ctypes.CDLL(compile_shared(gcc, src, lib, flags)).w1
    except (subprocess.SubprocessError, OSError):
        return None
    fn.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int64]
    return fn


def plan_of(fn, *arrays):
    ts = [svod.asarray(a) for a in arrays]
    outs = fn(*ts)
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    key, b = compact([t.uop for t in outs])
    plan = plan_greedy(key)
    assert len(plan.kernels) == 1, plan
    return plan.kernels[0], b.arrays


def interleaved_all(contenders: dict, repeats: int) -> dict:
    """Every time of each contender: one warm-up call each, then `repeats` rounds that
    call every contender once, in order."""
    times = {k: [] for k in contenders}
    for f in contenders.values():
        f()  # warm-up (compile, page-in)
    for _ in range(repeats):
        for name, f in contenders.items():
            t0 = time.perf_counter()
            f()
            times[name].append(time.perf_counter() - t0)
    return times


def interleaved(contenders: dict, repeats: int) -> dict:
    """The median time of each contender (`interleaved_all`)."""
    return {k: float(np.median(v)) for k, v in interleaved_all(contenders, repeats).items()}


def runner(kernel, arrays, threads, fresh=True):
    prog = compile_kernel(kernel)
    bufs = {i: np.ascontiguousarray(a).reshape(-1) for i, a in enumerate(arrays)}
    outs = [(o.slot, o.dtype.np, int(np.prod(o.shape))) for o in kernel.outputs]
    for s, dt, n in outs:
        bufs[s] = np.empty(n, dt)

    def f():
        if fresh:
            for s, dt, n in outs:
                bufs[s] = np.empty(n, dt)
        prog.run(bufs, threads)
        return bufs[outs[0][0]]

    return f, prog


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--threads", type=int, default=runtime.pool_size())
    ap.add_argument("--reductions", action="store_true", help="only the reductions (DRAM-sized, bandwidth shares)")
    ap.add_argument("--match", default="",
                    help="with --reductions: only the cases whose name holds one of these comma-separated words")
    ap.add_argument("--wake", action="store_true",
                    help="only the pool's wake-up after idle gaps (svod.bench.peak.wake_latency)")
    args = ap.parse_args()
    R, T = args.repeats, args.threads
    if args.wake:
        from svod.bench.peak import wake_latency

        for work in (50.0, 200.0):
            res = wake_latency(work, repeats=max(R, 15))
            print(f"job of 2 units x {work:g} us on 2 threads (1x: the worker took its unit, 2x: it never came):")
            for k, v in res.items():
                print(f"  {k:22} {v * 1e6:8.1f} us  {v * 1e6 / work:5.2f}x")
        return
    if args.reductions:
        print("\n".join(reductions(R, T, [w for w in args.match.split(",") if w])))
        return
    rng = np.random.default_rng(0)
    rows = []

    def row(name, ours, peer, peer_name, target):
        rows.append((name, ours, peer, peer_name, target))

    # ---- W1
    a, b, c = (rng.standard_normal(N).astype(np.float32) for _ in range(3))
    w1 = lambda a, b, c: svod.maximum(a * b + c, 0.0) * 0.5 - a / (1 + svod.exp(-b))
    k, arrs = plan_of(w1, a, b, c)
    f1, _ = runner(k, arrs, 1)
    fT, _ = runner(k, arrs, T)
    half = np.float32(0.5)

    def np_w1():
        return np.maximum(a * b + c, 0) * half - a / (1 + np.exp(-b))

    cont = {"svod_1t": f1, f"svod_{T}t": fT, "numpy": np_w1}
    cfn = build_c(["-O3", "-march=native", "-fopenmp"])
    if cfn is not None:
        def c_w1():
            out = np.empty(N, np.float32)
            cfn(a.ctypes.data, b.ctypes.data, c.ctypes.data, out.ctypes.data, N)
            return out

        cont["c_gcc"] = c_w1
    # NOTE: without -ffast-math gcc calls scalar expf; with it, glibc's libmvec vector expf
    # (the practical limit for this loop).
    cfast = build_c(["-O3", "-march=native", "-fopenmp", "-ffast-math"])
    if cfast is not None:
        def c_w1_fast():
            out = np.empty(N, np.float32)
            cfast(a.ctypes.data, b.ctypes.data, c.ctypes.data, out.ctypes.data, N)
            return out

        cont["c_gcc_fast"] = c_w1_fast
    np.testing.assert_allclose(f1(), np_w1(), rtol=1e-5, atol=1e-6)
    t = interleaved(cont, R)
    best = min(t["svod_1t"], t[f"svod_{T}t"])
    row("W1 16M f32 (fresh out)", best, t["numpy"], "numpy", "")
    if "c_gcc" in t:
        row("W1 vs C gcc -O3 -march=native -fopenmp", best, t["c_gcc"], "C loop", "within 1.1x")
    if "c_gcc_fast" in t:
        row("W1 vs C same + -ffast-math (libmvec)", best, t["c_gcc_fast"], "C loop", "within 1.1x")

    # ---- exp
    k, arrs = plan_of(lambda a: svod.exp(a), a)
    fe, _ = runner(k, arrs, T)
    fe1, _ = runner(k, arrs, 1)
    t = interleaved({"svod_1t": fe1, "svod": fe, "numpy": lambda: np.exp(a)}, R)
    row("exp 16M f32", min(t["svod"], t["svod_1t"]), t["numpy"], "numpy", ">= 1x")

    # ---- softmax
    x = rng.standard_normal((4096, 4096)).astype(np.float32)
    k, arrs = plan_of(lambda x: svod.nn.softmax(x, axis=-1), x)
    fs, _ = runner(k, arrs, T, fresh=False)

    def np_softmax():
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    t = interleaved({"svod": fs, "numpy": np_softmax}, R)
    row("softmax 4096x4096 f32", t["svod"], t["numpy"], "numpy", ">= 3x")

    # ---- layernorm
    x = rng.standard_normal((8192, 1024)).astype(np.float32)
    w, bb = rng.standard_normal(1024).astype(np.float32), rng.standard_normal(1024).astype(np.float32)
    k, arrs = plan_of(lambda x, w, b: svod.nn.layer_norm(x, (1024,), w, b), x, w, bb)
    fl, _ = runner(k, arrs, T, fresh=False)
    eps = np.float32(1e-5)

    def np_layernorm():
        m = x.mean(axis=1, keepdims=True)
        d = x - m
        v = (d * d).mean(axis=1, keepdims=True)
        return d / np.sqrt(v + eps) * w + bb

    t = interleaved({"svod": fl, "numpy": np_layernorm}, R)
    row("layernorm 8192x1024 f32", t["svod"], t["numpy"], "numpy", ">= 3x")

    # ---- a chain of T-thread kernels, each reading what the one before wrote: 1 MB
    # arrays, so each core's share stays in its L2 when it runs the same rows every time
    # (`svod.runtime` slice ranges; with slices shared out by whoever was awake, 2 threads
    # ran this no faster than 1); native dispatch, as a compiled graph replays
    h = rng.standard_normal(1 << 18).astype(np.float32)
    h2 = np.empty_like(h)
    k, _ = plan_of(lambda p: p * -1.0, h)
    prog = compile_kernel(k)
    there = np.array([h.ctypes.data, h2.ctypes.data], np.uint64)
    back = np.array([h2.ctypes.data, h.ctypes.data], np.uint64)

    def chain():
        for _ in range(8):
            runtime.run_parallel(prog.address, there.ctypes.data, prog.units, T)
            runtime.run_parallel(prog.address, back.ctypes.data, prog.units, T)

    def np_chain():
        for _ in range(8):
            np.multiply(h, -1.0, out=h2)
            np.multiply(h2, -1.0, out=h)

    t = interleaved({"svod": chain, "numpy": np_chain}, R)
    row("16 chained kernels handing on 1 MB", t["svod"], t["numpy"], "numpy", ">= 1.3x")

    # ---- tiny call overhead
    s1 = rng.standard_normal(16).astype(np.float32)
    k, arrs = plan_of(lambda p: p * 2.0 + 1.0, s1)
    prog = compile_kernel(k)
    bufs = {0: arrs[0].reshape(-1), k.outputs[0].slot: np.empty(16, np.float32)}
    prog.run(bufs)
    n_calls = 20000
    t0 = time.perf_counter()
    for _ in range(n_calls):
        prog.run(bufs)
    tiny = (time.perf_counter() - t0) / n_calls
    rows.append(("tiny kernel Program.run", tiny, None, "", "<= 2 us"))

    # ---- dispatch
    rows.append((f"thread dispatch ({T} threads, empty job)", runtime.dispatch_cost(T, 3000), None, "", "few us"))

    # ---- compile and cache load (W1 kernel)
    k, _ = plan_of(w1, a[:10], b[:10], c[:10])
    os.environ["SVOD_OBJECT_CACHE"] = "0"
    comp = []
    for _ in range(5):
        program_mod.clear_programs()
        t0 = time.perf_counter()
        compile_kernel(k)
        comp.append(time.perf_counter() - t0)
    rows.append(("compile W1 kernel (lower+O3+codegen)", float(np.median(comp)), None, "", "<= 30 ms"))
    os.environ["SVOD_OBJECT_CACHE"] = "1"
    program_mod.clear_programs()
    compile_kernel(k)  # stores the object
    loads = []
    for _ in range(9):
        program_mod.clear_programs()
        before = svod.stats()["kernels_loaded"]
        t0 = time.perf_counter()
        compile_kernel(k)
        loads.append(time.perf_counter() - t0)
        assert svod.stats()["kernels_loaded"] == before + 1
    rows.append(("object-cache load W1 kernel", float(np.median(loads)), None, "", "<= 2 ms"))

    red = reductions(R, T)

    print(f"svod kernel benchmark: {R} interleaved repeats, median; svod threads={T}; cpu={os.cpu_count()}")
    print(f"{'case':44} {'svod':>11} {'peer':>11}  {'ratio':>7}  target")
    for name, ours, peer, pname, target in rows:
        if peer is None:
            unit = f"{ours * 1e6:8.2f} us" if ours < 1e-3 else f"{ours * 1e3:8.2f} ms"
            print(f"{name:44} {unit:>11} {'':>11}  {'':>7}  {target}")
        else:
            print(f"{name:44} {ours * 1e3:8.2f} ms {peer * 1e3:8.2f} ms  {peer / ours:6.2f}x  "
                  f"{pname} {target}".rstrip())
    for line in red:
        print(line)


def _spread(v: list[float]) -> str:
    """The middle half of `v` as a percentage around its median (the 25th-75th percentile)."""
    med = float(np.median(v))
    lo, hi = np.percentile(v, [25, 75])
    return f"-{(med - lo) / med:.0%}/+{(hi - med) / med:.0%}"


def reductions(R: int, T: int, match: list[str] | None = None) -> list[str]:
    """Reductions of DRAM-sized float32 inputs through `svod.realize` (the planner's
    kernels) against numpy, and the share of the read-bandwidth probe of
    `svod.bench.peak` (run between the contenders, on T threads) each reaches: the
    input's bytes over the time. W6 is the workload (six outputs of one 4096x4096).

    Axis-0 rows (sum, mean, var, std: column reduces, var and std in one read) and
    full reductions (to one value: split into chunks over the threads, combined in a
    fixed order; var and std in one read, `schedule.flat_variance`), then float64,
    tall-skinny (4M x 16) and wide (64 x 1M) inputs of the same 256 MiB, and row
    reductions of short rows (16, 3 and 24 elements: read across rows,
    svod/codegen/narrow.py); for the
    one-kernel cases also the kernel alone on one thread and on T (the split's
    speed-up), and every median's spread (25th-75th percentile)."""
    from svod.bench.peak import describe, probe, read_bandwidth

    rng = np.random.default_rng(1)
    big = rng.standard_normal((16384, 4096)).astype(np.float32)  # 256 MiB
    w6 = big[:4096]  # 64 MiB, twice the L3 here
    tb, t6 = svod.asarray(big), svod.asarray(w6)
    probe_buf = np.ones(64 << 20, np.float32)
    one = [
        ("sum axis 0, 16384x4096", lambda t: svod.sum(t, axis=0), lambda: big.sum(axis=0)),
        ("mean axis 0, 16384x4096", lambda t: svod.mean(t, axis=0), lambda: big.mean(axis=0)),
        ("var axis 0, 16384x4096", lambda t: svod.var(t, axis=0), lambda: big.var(axis=0)),
        ("std axis 0, 16384x4096", lambda t: svod.std(t, axis=0), lambda: big.std(axis=0)),
        ("sum, 16384x4096 -> one value", lambda t: svod.sum(t), lambda: big.sum()),
        ("max, 16384x4096 -> one value", lambda t: svod.max(t), lambda: big.max()),
        ("mean, 16384x4096 -> one value", lambda t: svod.mean(t), lambda: big.mean()),
        ("var, 16384x4096 -> one value", lambda t: svod.var(t), lambda: big.var()),
        ("std, 16384x4096 -> one value", lambda t: svod.std(t), lambda: big.std()),
        ("sum axis 1, 16384x4096", lambda t: svod.sum(t, axis=1), lambda: big.sum(axis=1)),
    ]
    cases = [(name, lambda fn=fn: svod.realize(fn(tb)), nm, big, fn) for name, fn, nm in one]
    # other dtypes and aspect ratios, 256 MiB each: float64, tall-skinny, wide
    b64 = rng.standard_normal((8192, 4096))
    tall = rng.standard_normal((1 << 22, 16)).astype(np.float32)
    wide = rng.standard_normal((64, 1 << 20)).astype(np.float32)
    tall3 = rng.standard_normal((1 << 24, 3)).astype(np.float32)  # 192 MiB
    tall24 = rng.standard_normal((1 << 21, 24)).astype(np.float32)  # 192 MiB
    more = [
        ("var axis 0, 8192x4096 float64", b64, lambda t: svod.var(t, axis=0), lambda a: a.var(axis=0)),
        ("var, 8192x4096 float64 -> one value", b64, lambda t: svod.var(t), lambda a: a.var()),
        ("sum axis 0, 4Mx16 (tall)", tall, lambda t: svod.sum(t, axis=0), lambda a: a.sum(axis=0)),
        ("var axis 0, 4Mx16 (tall)", tall, lambda t: svod.var(t, axis=0), lambda a: a.var(axis=0)),
        ("var, 4Mx16 (tall) -> one value", tall, lambda t: svod.var(t), lambda a: a.var()),
        ("var axis 0, 64x1M (wide)", wide, lambda t: svod.var(t, axis=0), lambda a: a.var(axis=0)),
        ("var, 64x1M (wide) -> one value", wide, lambda t: svod.var(t), lambda a: a.var()),
        ("sum axis 1, 4Mx16 (short rows)", tall, lambda t: svod.sum(t, axis=1), lambda a: a.sum(axis=1)),
        ("max axis 1, 4Mx16 (short rows)", tall, lambda t: svod.max(t, axis=1), lambda a: a.max(axis=1)),
        ("sum axis 1, 16Mx3 (short rows)", tall3, lambda t: svod.sum(t, axis=1), lambda a: a.sum(axis=1)),
        ("sum axis 1, 2Mx24 (short rows)", tall24, lambda t: svod.sum(t, axis=1), lambda a: a.sum(axis=1)),
    ]
    for name, arr, fn, nf in more:
        ta = svod.asarray(arr)
        cases.append((name, lambda fn=fn, ta=ta: svod.realize(fn(ta)), lambda nf=nf, arr=arr: nf(arr), arr, fn))
    cases.append(("W6: sum/max over 0, 1, all of 4096x4096",
                  lambda: svod.realize(svod.sum(t6, axis=0), svod.sum(t6, axis=1), svod.sum(t6),
                                       svod.max(t6, axis=0), svod.max(t6, axis=1), svod.max(t6)),
                  lambda: (w6.sum(axis=0), w6.sum(axis=1), w6.sum(), w6.max(axis=0), w6.max(axis=1), w6.max()),
                  w6, None))
    pk = probe(T)
    lines = ["", f"reductions ({describe(pk)}); share = input bytes / time / read probe of the same repeats;",
             "spread = 25th-75th percentile around the median; kernel: the planner's one kernel alone, "
             f"1 thread -> {T}",
             f"{'case':40} {'svod':>9} {'spread':>9} {'numpy':>9}  {'ratio':>6}  {'GB/s':>5}  {'probe':>5}  "
             f"{'share':>5}  kernel 1 -> {T} threads"]
    for name, sv, nm, arr, fn in cases:
        if match and not any(w in name for w in match):
            continue
        got = sv()
        want = nm()
        for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
            np.testing.assert_allclose(g.numpy(), w, rtol=1e-3, atol=1e-2)
        bw: list[float] = []
        contenders = {"svod": sv, "numpy": nm, "probe": lambda bw=bw: bw.append(
            read_bandwidth(256 << 20, T, repeats=1, buf=probe_buf)["gbps"])}
        if fn is not None:
            kernel, arrays = plan_of(fn, arr)
            contenders["k1"] = runner(kernel, arrays, 1)[0]
            contenders[f"k{T}"] = runner(kernel, arrays, T)[0]
        t = interleaved_all(contenders, R)
        med = {k: float(np.median(v)) for k, v in t.items()}
        gbps = arr.nbytes / med["svod"] / 1e9
        pb = float(np.median(bw))
        kern = f"{med['k1'] * 1e3:7.2f} -> {med[f'k{T}'] * 1e3:6.2f} ms ({med['k1'] / med[f'k{T}']:.2f}x)" \
            if fn is not None else ""
        lines.append(f"{name:40} {med['svod'] * 1e3:6.2f} ms {_spread(t['svod']):>9} {med['numpy'] * 1e3:6.2f} ms  "
                     f"{med['numpy'] / med['svod']:5.2f}x  {gbps:5.1f}  {pb:5.1f}  {gbps / pb:5.0%}  {kern}")
    return lines


if __name__ == "__main__":
    main()
