"""Thread scaling of svod's pool, generated GEMM and fused kernels: 1, 2, ... N threads.

    python3 bench/bench_scaling.py [--threads 1,2] [--repeats 3] [--quick] [--json out.json]

For every thread count t (default 1..os.cpu_count()) each repeat starts one subprocess with
``SVOD_THREADS=t`` (the pool's size is read once per process) and the repeats interleave
the thread counts (repeat 1: t=1, t=2, ...; repeat 2: t=1, t=2, ...), so a burst of load
from other processes hits every thread count alike. A child measures, on t threads:

* W1 (elementwise), W2 (softmax), W4 (MLP block), W5 (attention) of `svod.workloads`,
  through `svod.jit` (the planner's own kernels: W4's products may be BLAS steps on svod's
  pool or generated GEMMs, whichever the plan picked; the kernel kinds are reported);
* a float32 GEMM (2048^3; 512^3 with --quick) through svod's generated kernel
  (`compile_kernel` of a `MatmulSpec(library=False)` kernel, as bench/bench_matmul.py),
  never the BLAS step;
* the ceiling: `svod.bench.peak.fma_peak` (a register-only FMA loop, trivially parallel),
  once at the start and again right before each case (its speed-up at t threads is the
  case's ceiling), and `read_bandwidth` over 256 MiB (64 MiB with --quick), so a speed-up can be read
  against what the machine itself gave t threads during the same run (a shared machine's
  second core is not always free).

Each child times every case `--inner` times after a warm-up and reports its median; the
parent reports the median over repeats, the speed-up over 1 thread, the parallel
efficiency (speed-up / t), the speed-up against the FMA loop's own speed-up at t threads
("vs ceiling") and, for the memory-bound rows (W1, W2), the achieved GB/s as a share of
the read-bandwidth probe at the same t, and "other load": the share of the machine's CPU
time other processes took while the case ran (/proc/stat less this process; 50% on two
cores is one core busy elsewhere, and no 2-thread speed-up can be expected). The --json
output holds every raw time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

WORKLOADS = ("w1_elementwise", "w2_softmax", "w4_mlp", "w5_attention")
LABELS = {"w1_elementwise": "W1 elementwise", "w2_softmax": "W2 softmax", "w4_mlp": "W4 MLP",
          "w5_attention": "W5 attention", "gemm": "GEMM (generated)"}
MEMORY_BOUND = ("w1_elementwise", "w2_softmax")
QUICK_SHAPES = {
    "w1_elementwise": {"a": (1 << 20,), "b": (1 << 20,), "c": (1 << 20,)},
    "w2_softmax": {"x": (1024, 1024)},
    "w4_mlp": {"x": (128, 256), "w1": (256, 1024), "b1": (1024,), "w2": (1024, 256), "b2": (256,)},
    "w5_attention": {"q": (4, 256, 64), "k": (4, 256, 64), "v": (4, 256, 64)},
}


def _median(xs):
    s = sorted(xs)
    return s[len(s) // 2]


def _bytes_moved(name: str, arrays: dict, out_nbytes: int) -> int:
    """Compulsory traffic of a memory-bound workload: inputs read once, output written once."""
    return sum(a.nbytes for a in arrays.values()) + out_nbytes


def _flops(name: str, shapes: dict) -> float:
    if name == "gemm":
        n = shapes["n"]
        return 2.0 * n ** 3
    if name == "w4_mlp":
        m, k = shapes["x"]
        h = shapes["w1"][1]
        return 2.0 * m * k * h * 2
    if name == "w5_attention":
        b, s, d = shapes["q"]
        return 2.0 * b * s * s * d * 2
    return 0.0


def _cpu_stat():
    """(busy, total) clock ticks of the whole machine from /proc/stat, or None."""
    try:
        with open("/proc/stat") as fh:
            v = [int(x) for x in fh.readline().split()[1:]]
        return sum(v) - v[3] - v[4], sum(v)
    except (OSError, ValueError, IndexError):
        return None


def _other_load(fn):
    """Run fn(); return (its result, the share of the machine's CPU time that *other*
    processes used meanwhile: 0.5 on 2 cores = one core busy elsewhere; NaN unknown)."""
    s0, p0 = _cpu_stat(), os.times()
    res = fn()
    s1, p1 = _cpu_stat(), os.times()
    if s0 is None or s1 is None or s1[1] == s0[1]:
        return res, float("nan")
    hz = os.sysconf("SC_CLK_TCK")
    mine = (p1.user + p1.system - p0.user - p0.system) * hz
    return res, max(0.0, (s1[0] - s0[0]) - mine) / (s1[1] - s0[1])


def child(args) -> dict:
    """Run inside a subprocess with SVOD_THREADS set: every case on the pool's threads."""
    import numpy as np

    import svod
    from svod import runtime, workloads
    from svod.bench.peak import fma_peak, read_bandwidth

    t = runtime.pool_size()
    out: dict = {"threads": t, "cases": {}}
    inner = args.inner

    def timed(fn):
        fn()  # warm-up: plan, compile, page in
        ts = []
        for _ in range(inner):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        return ts

    fma = fma_peak(t, seconds=0.05 if args.quick else 0.1)
    out["fma_gflops"] = fma["gflops"]
    probe_bytes = (64 if args.quick else 256) << 20
    probe_buf = np.ones(probe_bytes // 4 + 64, np.float32)
    out["read_gbps"] = read_bandwidth(probe_bytes, t, repeats=3 if args.quick else 5, buf=probe_buf)["gbps"]
    del probe_buf

    for name in args.cases:
        # the ceiling again right before each case: a shared machine's load drifts
        ceiling = fma_peak(t, seconds=0.02)["gflops"]
        if name == "gemm":
            (ts, info), load = _other_load(lambda: _gemm(args, timed))
            out["cases"]["gemm"] = {"seconds": ts, "fma_gflops": ceiling, "other_load": load, **info}
            continue
        w = workloads.get(name)
        shapes = QUICK_SHAPES[name] if args.quick else w.default_shapes
        arrays = w.make_inputs(shapes, seed=0)
        tens = w.tensors(arrays)
        f = svod.jit(w.build)
        argv = [tens[k] for k in arrays]

        def call(f=f, argv=argv):
            r = f(*argv)
            return r if isinstance(r, tuple) else (r,)

        ts, load = _other_load(lambda: timed(call))
        res = call()
        outs = tuple(o.numpy() for o in res)
        want = w.reference(**arrays)
        want = want if isinstance(want, tuple) else (want,)
        ok = all(np.allclose(g, e, rtol=w.rtol, atol=w.atol) for g, e in zip(outs, want))
        rec = {"seconds": ts, "fma_gflops": ceiling, "other_load": load, "check": bool(ok),
               "shapes": {k: list(v) for k, v in shapes.items()}, "flops": _flops(name, shapes)}
        if name in MEMORY_BOUND:
            rec["bytes"] = _bytes_moved(name, arrays, sum(o.nbytes for o in outs))
        if args.kinds:
            rec["kernels"] = _kernel_kinds(w, tens)
        out["cases"][name] = rec
    return out


def _kernel_kinds(w, tens) -> list[str]:
    """The kinds of the kernels the plan of `w` runs (e.g. ["matmul", "elementwise"])."""
    try:
        import svod

        ex = svod.explain(*(lambda r: r if isinstance(r, tuple) else (r,))(w.build(**tens)))
        return [k.kind for k in ex.plan.kernels]
    except Exception as e:  # the report is a courtesy; the timing stands without it
        return [f"unknown ({type(e).__name__})"]


def _gemm(args, timed):
    import numpy as np

    from svod import runtime
    from svod.codegen.program import compile_kernel
    from svod.dtype import float32
    from svod.kernel import ACC, Kernel, KInput, KNode, KOutput, MatmulSpec
    from svod.view import ViewChain

    n = 512 if args.quick else args.gemm
    kern = Kernel(f"scaling_mm_{n}", (n, n), (KInput(0, float32, ViewChain.of((n, n))),
                                               KInput(1, float32, ViewChain.of((n, n)))),
                  (KNode(ACC, float32),), (KOutput(2, 0, float32, (n, n)),), (), MatmulSpec(0, 1, n, n, n))
    rng = np.random.default_rng(n)
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    c = np.empty(n * n, np.float32)
    prog = compile_kernel(kern)
    t = runtime.pool_size()
    bufs = {0: a.reshape(-1), 1: b.reshape(-1), 2: c}
    ts = timed(lambda: prog.run(bufs, t))
    ok = bool(np.allclose(c.reshape(n, n), a @ b, rtol=1e-3, atol=1e-3))
    return ts, {"check": ok, "shapes": {"n": n}, "flops": _flops("gemm", {"n": n}), "kernels": ["matmul (generated)"]}


def _run_child(t: int, args, cache_dir: str, kinds: bool = False) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--inner", str(args.inner),
           "--gemm", str(args.gemm), "--cases", ",".join(args.cases)] + (["--quick"] if args.quick else [])
    cmd += ["--kinds"] if kinds else []
    env = dict(os.environ, SVOD_THREADS=str(t), SVOD_CACHE_DIR=cache_dir, SVOD_PROGRESS="0",
               OPENBLAS_NUM_THREADS=os.environ.get("OPENBLAS_NUM_THREADS", "1"))
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT, timeout=args.child_timeout)
    if p.returncode != 0:
        raise RuntimeError(f"bench_scaling: the child with SVOD_THREADS={t} failed (rc {p.returncode}):\n"
                           f"{p.stderr[-4000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def run(threads: list[int], repeats: int = 3, quick: bool = False, inner: int | None = None,
        cases: list[str] | None = None, gemm: int = 2048, cache_dir: str | None = None,
        child_timeout: float = 600.0) -> dict:
    """Measure every case at every thread count: the result dict (see `format_table`)."""
    args = argparse.Namespace(kinds=False, quick=quick, inner=inner or (3 if quick else 5), gemm=gemm,
                              cases=list(cases or (*WORKLOADS, "gemm")), child_timeout=child_timeout)
    tmp = None
    if cache_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="svod-scaling-")
        cache_dir = tmp.name
    runs: dict[int, list[dict]] = {t: [] for t in threads}
    t0 = time.perf_counter()
    try:
        for rep in range(repeats):
            for i, t in enumerate(threads):
                runs[t].append(_run_child(t, args, cache_dir, kinds=rep == 0 and i == 0))
    finally:
        if tmp is not None:
            tmp.cleanup()
    return summarise(runs, args, time.perf_counter() - t0)


def summarise(runs: dict[int, list[dict]], args, wall: float) -> dict:
    threads = sorted(runs)
    base_t = threads[0]
    fma = {t: _median([r["fma_gflops"] for r in runs[t]]) for t in threads}
    bw = {t: _median([r["read_gbps"] for r in runs[t]]) for t in threads}
    rows = []
    for name in args.cases:
        per_t = {}
        for t in threads:
            meds = [_median(r["cases"][name]["seconds"]) for r in runs[t]]
            per_t[t] = _median(meds)
        first = runs[base_t][0]["cases"][name]
        case_fma = {t: _median([r["cases"][name]["fma_gflops"] for r in runs[t]]) for t in threads}
        for t in threads:
            sec = per_t[t]
            # speed-ups are over the smallest thread count measured, scaled as if it were linear
            speed = per_t[base_t] / sec * base_t
            ceiling = case_fma[t] / case_fma[base_t] * base_t
            row = {"case": name, "label": LABELS.get(name, name), "threads": t, "seconds": sec,
                   "repeat_medians": [_median(r["cases"][name]["seconds"]) for r in runs[t]],
                   "speedup": speed, "efficiency": speed / t, "ceiling_speedup": ceiling,
                   "vs_ceiling": speed / ceiling,
                   "other_load": _median([r["cases"][name]["other_load"] for r in runs[t]]),
                   "check": all(r["cases"][name]["check"] for r in runs[t]),
                   "kernels": first.get("kernels", []), "shapes": first.get("shapes", {})}
            if first.get("flops"):
                row["gflops"] = first["flops"] / sec / 1e9
            if name in MEMORY_BOUND:
                row["gbps"] = first["bytes"] / sec / 1e9
                row["read_probe_gbps"] = bw[t]
                row["probe_share"] = row["gbps"] / bw[t]
            rows.append(row)
    return {"threads": threads, "repeats": len(runs[base_t]), "quick": bool(args.quick), "inner": args.inner,
            "fma_gflops": {str(t): fma[t] for t in threads}, "read_gbps": {str(t): bw[t] for t in threads},
            "rows": rows, "wall_seconds": wall, "machine": _machine(), "raw": {str(t): runs[t] for t in threads}}


def _machine() -> dict:
    import platform

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = float("nan")
    return {"cpu": cpu, "cores": os.cpu_count(), "loadavg_1m": load}


def format_table(res: dict) -> str:
    m = res["machine"]
    lines = [f"thread scaling ({m['cpu']}, {m['cores']} cores, load {m['loadavg_1m']:.1f}; "
             f"{res['repeats']} interleaved repeats x {res['inner']} runs, medians; "
             f"{'quick' if res['quick'] else 'default'} sizes; {res['wall_seconds']:.0f} s)", "",
             "ceiling (register-only FMA loop, read probe): " + ", ".join(
                 f"{t} thr {res['fma_gflops'][str(t)]:.0f} GFLOP/s, {res['read_gbps'][str(t)]:.1f} GB/s"
                 for t in res["threads"]), "",
             "| case | threads | ms | speed-up | efficiency | FMA-loop speed-up | vs ceiling | GFLOP/s or GB/s "
             "(probe share) | other load | check |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        if "gbps" in r:
            rate = f"{r['gbps']:.1f} GB/s ({r['probe_share']:.0%})"
        elif "gflops" in r:
            rate = f"{r['gflops']:.0f} GFLOP/s"
        else:
            rate = ""
        lines.append(f"| {r['label']} | {r['threads']} | {r['seconds'] * 1e3:.2f} | {r['speedup']:.2f}x | "
                     f"{r['efficiency']:.0%} | {r['ceiling_speedup']:.2f}x | {r['vs_ceiling']:.0%} | {rate} | "
                     f"{r['other_load']:.0%} | "
                     f"{'PASS' if r['check'] else 'FAIL'} |")
    return "\n".join(lines)


def _int_list(s: str) -> list[int]:
    out = sorted({int(x) for x in s.split(",") if x.strip()})
    if not out or out[0] < 1:
        raise argparse.ArgumentTypeError(f"--threads wants positive integers like 1,2,4, got {s!r}")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=_int_list, default=None, help="thread counts, e.g. 1,2,4 (default 1..cpu_count)")
    ap.add_argument("--repeats", type=int, default=3, help="subprocesses per thread count, interleaved")
    ap.add_argument("--inner", type=int, default=None, help="timed calls per case per subprocess (default 5; 3 quick)")
    ap.add_argument("--quick", action="store_true", help="small shapes (seconds, for tests)")
    ap.add_argument("--gemm", type=int, default=2048, help="size of the square float32 GEMM (default 2048)")
    ap.add_argument("--cases", default=",".join((*WORKLOADS, "gemm")), help="comma-separated subset")
    ap.add_argument("--json", default=None, help="write the result (rows and raw times) here")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--kinds", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--child-timeout", type=float, default=600.0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.cases = [c for c in args.cases.split(",") if c]
    unknown = [c for c in args.cases if c not in LABELS]
    if unknown:
        ap.error(f"unknown --cases {unknown}; known: {', '.join(LABELS)}")
    if args.child:
        args.inner = args.inner or (3 if args.quick else 5)
        print(json.dumps(child(args)))
        return 0
    threads = args.threads or list(range(1, (os.cpu_count() or 1) + 1))
    res = run(threads, repeats=args.repeats, quick=args.quick, inner=args.inner, cases=args.cases,
              gemm=args.gemm, child_timeout=args.child_timeout)
    print(format_table(res))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(res, fh, indent=1)
    return 0 if all(r["check"] for r in res["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
