"""The MLP block (W4) per core: svod against jax.jit, torch.compile and numpy in CPU time.

    python3 bench/bench_mlp.py [--rounds 3] [--repeats 7] [--only svod,jax] [--small]

W4 is ``gelu_tanh(x @ W1 + b1) @ W2 + b2`` (x 512x1024, W1 1024x4096, W2 4096x1024,
float32; `svod.workloads` "w4_mlp"): two products of 4.3 GFLOP each and a GELU over
the 512x4096 hidden layer. On a shared machine the wall time of a two-thread run says
more about the other processes than about the code (docs/codegen.md, "Thread scaling"),
so this benchmark measures what each contender does with one core:

* every contender runs single-threaded in a process of its own (svod ``SVOD_THREADS=1``,
  numpy ``OPENBLAS_NUM_THREADS=1``, jax ``--xla_cpu_multi_thread_eigen=false
  intra_op_parallelism_threads=1``, torch ``set_num_threads(1)``), warms up, then times
  `--repeats` calls in the process's CPU time (all its threads) and in wall time;
* the processes alternate over `--rounds` rounds (svod, jax, torch, numpy, svod, ...);
  the table gives the median over all calls, the spread of the per-round medians, GFLOP
  per CPU second and the ratio to svod, plus the FMA probe's one-core peak
  (`svod.bench.peak.fma_peak(1, cpu_time=True)`) measured in the svod process;
* svod's own breakdown (thread CPU time, one thread, interleaved): each kernel of the
  plan the planner chose, and the first product compiled without its epilogue, so the
  difference is what the fused bias + GELU costs.

Every contender's result is checked against the numpy reference (rtol/atol of the
workload). `--small` runs the workload's small shapes (a smoke test).

`--kind-ab` instead times the fused MLP kernel kind (search/kinds.py `mlp`: both
products a block of rows at a time, no hidden buffer; docs/codegen.md, "The MLP block")
against the two-GEMM plan, interleaved in one process (A, B, B, A, ...) on `--threads`
threads, each plan lowered with its boundaries forced, both checked against numpy::

    python3 bench/bench_mlp.py --kind-ab --threads 2 --repeats 15

`--switch-ab WORKLOAD` times any workload (`svod.workloads`) with the kind on and off
(`SVOD_FUSE_MLP=1` / `0`), each setting in processes of its own, alternating over
`--rounds`, `--repeats` `svod.jit` calls a process on `--threads` threads (each checked
against the workload's numpy reference; the plan's kernels named)::

    python3 bench/bench_mlp.py --switch-ab residual_rmsnorm_mlp --rounds 3 --repeats 15 --threads 1

Where the time goes inside svod's kernels (micro-kernel, packing, epilogue): run the svod
process alone under perf; `--perf-map` writes /tmp/perf-<pid>.map naming the JIT'd
functions::

    SVOD_THREADS=1 perf record -e cpu-clock:u -o w4.data \
        python3 bench/bench_mlp.py --worker svod --breakdown --perf-map --repeats 20
    perf report -i w4.data --sort symbol
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

CONTENDERS = ("svod", "jax", "torch", "numpy")
NAMES = ("x", "w1", "b1", "w2", "b2")
ONE_THREAD_ENV = {
    "SVOD_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
}


def _flops(shapes) -> float:
    (m, k), (_, h), (_, n) = shapes["x"], shapes["w1"], shapes["w2"]
    return 2.0 * m * k * h + 2.0 * m * h * n


def _contender(who: str, arrays: dict):
    """(call, name) for one contender, or None when it is not installed."""
    from svod import workloads

    w = workloads.get("w4_mlp")
    if who == "svod":
        import svod

        build = w.build
        fn = svod.jit(lambda x, w1, b1, w2, b2: build(x, w1, b1, w2, b2))
        args = [svod.asarray(arrays[k]) for k in NAMES]
        return (lambda: fn(*args).numpy()), "svod (svod.jit)"
    if who == "jax":
        try:
            import jax
            import jax.numpy as jnp
        except ImportError:
            return None
        jf = jax.jit(lambda x, w1, b1, w2, b2: jax.nn.gelu(x @ w1 + b1, approximate=True) @ w2 + b2)
        args = [jnp.asarray(arrays[k]) for k in NAMES]
        return (lambda: np.asarray(jf(*args).block_until_ready())), f"jax.jit {jax.__version__}"
    if who == "torch":
        try:
            import torch
        except ImportError:
            return None
        torch.set_num_threads(1)
        tf = torch.compile(lambda x, w1, b1, w2, b2: torch.nn.functional.gelu(x @ w1 + b1, approximate="tanh") @ w2
                           + b2)
        args = [torch.from_numpy(arrays[k]) for k in NAMES]

        def call():
            with torch.no_grad():
                return tf(*args).numpy()

        return call, f"torch.compile {torch.__version__}"
    if who == "numpy":
        ref = w.reference
        args = [arrays[k] for k in NAMES]
        return (lambda: ref(*args)), f"numpy {np.__version__}"
    raise ValueError(f"bench_mlp: unknown contender {who!r}; known: {', '.join(CONTENDERS)}")


def _text_size(mod) -> int | None:
    """Bytes of the .text section of a compiled module's object code (None if unknown)."""
    try:
        import llvmlite.binding as llvm

        obj = llvm.ObjectFileRef.from_data(mod.object_code)
        return sum(sec.size() for sec in obj.sections() if sec.is_text()) or None
    except Exception:  # noqa: BLE001 - a diagnostic: fall back to the next symbol's distance
        return None


def write_perf_map(programs) -> str:
    """Write ``/tmp/perf-<pid>.map`` naming the native functions of `programs` (each
    kernel's body and, for a GEMM, its micro-kernel ``<body>.uk``), so that ``perf
    record`` / ``perf report`` attribute samples in JIT'd code; returns the path. Within a
    module a function ends where the next begins, the last one at the end of the module's
    .text section (else 4 KiB on)."""
    import re

    lines = []
    for prog in programs:
        mod = getattr(prog, "module", None)
        if mod is None:
            continue
        names = {prog.symbol, prog.symbol + ".uk"} | set(re.findall(r'define [^@]*@"?([^"(\s]+)"?\(', mod.ir or ""))
        found = {}
        for name in names:
            try:
                found[mod.address(name)] = name
            except KeyError:
                pass
        addrs = sorted(found)
        if not addrs:
            continue
        text = _text_size(mod)
        end = addrs[0] + text if text and addrs[0] + text > addrs[-1] else addrs[-1] + 4096
        for a, nxt in zip(addrs, addrs[1:] + [end]):
            lines.append(f"{a:x} {nxt - a:x} {found[a]}")
    path = f"/tmp/perf-{os.getpid()}.map"
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    return path


def _breakdown(arrays: dict, repeats: int, perf_map: bool = False) -> list[tuple[str, float, float]]:
    """(what, median ms, min ms) in thread CPU time of each kernel of svod's plan for W4
    on one thread, and of the first product without its epilogue."""
    import svod
    from svod import workloads
    from svod.codegen.program import compile_kernel
    from svod.dtype import float32
    from svod.kernel import ACC, Kernel, KInput, KNode, KOutput, MatmulSpec
    from svod.key import compact
    from svod.view import ViewChain

    w = workloads.get("w4_mlp")
    tens = [svod.asarray(arrays[k]) for k in NAMES]
    out = w.build(*tens)
    kernels = svod.explain(out).kernels
    _, bind = compact([out.uop])
    bufs = {i: np.ascontiguousarray(a).reshape(-1) for i, a in enumerate(bind.arrays)}
    cases = []
    for kern in kernels:
        for o in kern.outputs:
            bufs.setdefault(o.slot, np.empty(int(np.prod(o.shape)), o.dtype.np))
        ops = sorted({getattr(n.op, "name", str(n.op)).lower() for n in kern.nodes} - {"acc", "load", "const"})
        cases.append((f"{kern.name} [{kern.kind}] {kern.shape}: {'·'.join(ops) or '-'}", compile_kernel(kern), bufs))
    (m, k), (_, n) = arrays["x"].shape, arrays["w1"].shape
    plain = Kernel("bench_mlp_first_product", (m, n), (KInput(0, float32, ViewChain.of((m, k))),
                                                         KInput(1, float32, ViewChain.of((k, n)))),
                   (KNode(ACC, float32),), (KOutput(2, 0, float32, (m, n)),), (), MatmulSpec(0, 1, m, n, k))
    pbufs = {0: arrays["x"].reshape(-1), 1: arrays["w1"].reshape(-1), 2: np.empty(m * n, np.float32)}
    cases.append((f"x @ W1 alone (no epilogue) {(m, n)}", compile_kernel(plain), pbufs))
    if perf_map:
        print(f"perf map: {write_perf_map([c[1] for c in cases])}", file=sys.stderr)
    for _, prog, b in cases:
        prog.run(b, 1)
    times: list[list[float]] = [[] for _ in cases]
    for _ in range(repeats):
        for i, (_, prog, b) in enumerate(cases):
            t0 = time.thread_time()
            prog.run(b, 1)
            times[i].append(time.thread_time() - t0)
    return [(what, float(np.median(t)) * 1e3, min(t) * 1e3) for (what, _, _), t in zip(cases, times)]


def kind_ab(repeats: int, threads: int, small: bool = False) -> str:
    """The MLP kernel kind against the two-GEMM plan for W4, interleaved in one process:
    a markdown table of wall and process CPU ms (median, min-max) per plan."""
    import svod
    from svod import workloads
    from svod.codegen.program import compile_kernel
    from svod.ir import Ops
    from svod.key import compact
    from svod.lower import lower

    w = workloads.get("w4_mlp")
    arrays = w.make_inputs(w.small_shapes if small else w.default_shapes)
    with svod.eager_mode(False):
        out = w.build(*[svod.asarray(arrays[k]) for k in NAMES])
    key, bind = compact([out.uop])
    inputs = {i for i, n in enumerate(key.nodes) if n.op is Ops.BUFFER} | set(key.outputs)
    second = max(i for i, n in enumerate(key.nodes) if n.op is Ops.MATMUL)
    plans = {"mlp kernel (one)": lower(key, inputs), "two GEMMs": lower(key, inputs | {key.nodes[second].src[0]})}
    want = w.reference(*[arrays[k] for k in NAMES])
    runs = {}
    for name, plan in plans.items():
        bufs = {i: np.ascontiguousarray(a).reshape(-1) for i, a in enumerate(bind.arrays)}
        for k in plan.kernels:
            for o in k.outputs:
                bufs[o.slot] = np.empty(int(np.prod(o.shape)), o.dtype.np)
        progs = [compile_kernel(k) for k in plan.kernels]

        def call(progs=progs, bufs=bufs):
            for prog in progs:
                prog.run(bufs, threads)

        call()
        slot, shape = plan.outputs[0]
        got = bufs[slot].reshape(shape)
        if not np.allclose(got, want, rtol=w.rtol, atol=w.atol):
            raise AssertionError(f"bench_mlp --kind-ab: {name} differs from numpy by {np.max(np.abs(got - want))}")
        runs[name] = (call, "+".join(k.kind for k in plan.kernels), [], [])
    order = list(runs)
    for r in range(repeats):
        for name in (order if r % 2 == 0 else order[::-1]):
            call, _, wall, cpu = runs[name]
            c0, t0 = time.process_time(), time.perf_counter()
            call()
            cpu.append(time.process_time() - c0)
            wall.append(time.perf_counter() - t0)
    lines = [f"# W4 ({'small' if small else 'default'} shapes): MLP kernel kind vs two GEMMs, {threads} thread(s), "
             f"{repeats} interleaved calls each, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs\n",
             "| plan | kernels | wall ms median (min-max) | CPU ms median (min-max) |", "|---|---|---|---|"]
    for name, (_, kinds, wall, cpu) in runs.items():
        ms = [f"{np.median(t) * 1e3:.1f} ({min(t) * 1e3:.1f}-{max(t) * 1e3:.1f})" for t in (wall, cpu)]
        lines.append(f"| {name} | {kinds} | {ms[0]} | {ms[1]} |")
    return "\n".join(lines)


def switch_worker(name: str, repeats: int, small: bool) -> dict:
    """In a child process: `repeats` svod.jit calls of workload `name` (this process's
    SVOD_FUSE_MLP and SVOD_THREADS), wall and CPU seconds, the plan's kernel kinds."""
    import svod
    from svod import workloads

    w = workloads.get(name)
    arrays = w.make_inputs(w.small_shapes if small else w.default_shapes)
    names = list(w.default_shapes)
    fn = svod.jit(lambda *a: w.build(*a))
    args = [svod.asarray(arrays[k]) for k in names]
    got = np.asarray(fn(*args).numpy())
    ok = bool(np.allclose(got, w.reference(*[arrays[k] for k in names]), rtol=w.rtol, atol=w.atol))
    with svod.eager_mode(False):
        kinds = [k.kind for k in svod.explain(w.build(*args)).plan.kernels]
    for _ in range(3):
        fn(*args).numpy()
    wall, cpu = [], []
    for _ in range(repeats):
        c0, t0 = time.process_time(), time.perf_counter()
        fn(*args).numpy()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - t0)
    return {"kinds": kinds, "wall": wall, "cpu": cpu, "ok": ok}


def switch_ab(name: str, rounds: int, repeats: int, threads: int, small: bool) -> str:
    """The workload with SVOD_FUSE_MLP=1 and =0 in alternating processes: a markdown table."""
    res: dict[str, list[dict]] = {"1": [], "0": []}
    for _ in range(rounds):
        for flag in res:
            env = dict(os.environ, SVOD_FUSE_MLP=flag, SVOD_THREADS=str(threads))
            env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH", "")) if p)
            cmd = [sys.executable, os.path.abspath(__file__), "--switch-worker", name, "--repeats", str(repeats)]
            cmd += ["--small"] if small else []
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
            if proc.returncode != 0:
                raise RuntimeError(f"bench_mlp --switch-ab: the SVOD_FUSE_MLP={flag} process failed: "
                                   f"{proc.stderr.strip().splitlines()[-1:]}")
            res[flag].append(json.loads(proc.stdout.strip().splitlines()[-1]))
    lines = [f"# {name} ({'small' if small else 'default'} shapes), {threads} thread(s): SVOD_FUSE_MLP=1 vs 0, "
             f"{rounds} alternating rounds x {repeats} calls, load average {os.getloadavg()[0]:.1f} on "
             f"{os.cpu_count()} CPUs\n", "| SVOD_FUSE_MLP | kernels | wall ms per round (medians) | "
             "CPU ms per round (medians) | check |", "|---|---|---|---|---|"]
    for flag, runs in res.items():
        walls = " / ".join(f"{np.median(r['wall']) * 1e3:.3g}" for r in runs)
        cpus = " / ".join(f"{np.median(r['cpu']) * 1e3:.3g}" for r in runs)
        lines.append(f"| {flag} | {'+'.join(runs[0]['kinds'])} | {walls} | {cpus} | "
                     f"{'PASS' if all(r['ok'] for r in runs) else 'FAIL'} |")
    return "\n".join(lines)


def worker(who: str, repeats: int, small: bool, breakdown: bool, perf_map: bool = False) -> dict:
    """Run in a child process: time `repeats` calls of contender `who` on one thread."""
    from svod import workloads

    w = workloads.get("w4_mlp")
    shapes = w.small_shapes if small else w.default_shapes
    arrays = w.make_inputs(shapes)
    got = _contender(who, arrays)
    if got is None:
        return {"who": who, "missing": True}
    call, name = got
    want = w.reference(*[arrays[k] for k in NAMES])
    res = np.asarray(call())
    for _ in range(2):
        call()
    cpu, wall = [], []
    for _ in range(repeats):
        c0, t0 = time.process_time(), time.perf_counter()
        call()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - t0)
    out = {"who": who, "name": name, "cpu": cpu, "wall": wall, "flops": _flops(shapes),
           "err": float(np.max(np.abs(res - want))), "ok": bool(np.allclose(res, want, rtol=w.rtol, atol=w.atol))}
    if who == "svod":
        from svod.bench.peak import fma_peak

        out["peak"] = float(np.median([fma_peak(1, seconds=0.05, cpu_time=True)["gflops"] for _ in range(3)]))
        if breakdown:
            out["breakdown"] = _breakdown(arrays, repeats, perf_map)
    return out


def run_child(who: str, repeats: int, small: bool, breakdown: bool) -> dict:
    env = dict(os.environ, **ONE_THREAD_ENV)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH", "")) if p)
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", who, "--repeats", str(repeats)]
    cmd += ["--small"] if small else []
    cmd += ["--breakdown"] if breakdown else []
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        return {"who": who, "failed": proc.stderr.strip().splitlines()[-1:] or [f"exit {proc.returncode}"]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def report(results: dict[str, list[dict]]) -> str:
    lines = ["| contender | CPU ms (median) | per-round medians | wall ms (median) | GFLOP per CPU-s | "
             "svod faster by | check |", "|---|---|---|---|---|---|---|"]
    base = None
    rows = []
    for who, runs in results.items():
        ok = [r for r in runs if "cpu" in r]
        if not ok:
            why = runs[0].get("failed") or ("not installed" if runs and runs[0].get("missing") else "no result")
            lines.append(f"| {who} | — | — | — | — | — | {why} |")
            continue
        cpu = sorted(c for r in ok for c in r["cpu"])
        wall = sorted(c for r in ok for c in r["wall"])
        per = sorted(float(np.median(r["cpu"])) * 1e3 for r in ok)
        med = float(np.median(cpu))
        if who == "svod":
            base = med
        rows.append((who, ok[0]["name"], med, per, float(np.median(wall)), ok[0]["flops"],
                     all(r["ok"] for r in ok), max(r["err"] for r in ok)))
    for _who, name, med, per, wall, flops, ok, err in rows:
        ratio = f"{med / base:.2f}x" if base else "—"
        lines.append(f"| {name} | {med * 1e3:.3g} | {per[0]:.3g}–{per[-1]:.3g} | {wall * 1e3:.3g} | "
                     f"{flops / med / 1e9:.0f} | {ratio} | {'PASS' if ok else 'FAIL'} ({err:.0e}) |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds of one process per contender")
    ap.add_argument("--repeats", type=int, default=7, help="timed calls per process")
    ap.add_argument("--only", default=",".join(CONTENDERS), help="contenders, e.g. svod,jax")
    ap.add_argument("--small", action="store_true", help="the workload's small shapes (a smoke test)")
    ap.add_argument("--no-breakdown", action="store_true", help="skip svod's per-kernel breakdown")
    ap.add_argument("--json", default=None, help="write the raw results to this file")
    ap.add_argument("--kind-ab", action="store_true", help="the MLP kernel kind against two GEMMs, interleaved")
    ap.add_argument("--threads", type=int, default=2, help="threads of the --kind-ab and --switch-ab runs")
    ap.add_argument("--switch-ab", default=None, metavar="WORKLOAD",
                    help="a workload with SVOD_FUSE_MLP=1 and =0 in alternating processes")
    ap.add_argument("--switch-worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--breakdown", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--perf-map", action="store_true", help=argparse.SUPPRESS)
    opts = ap.parse_args(argv)
    if opts.rounds < 1 or opts.repeats < 1:
        ap.error(f"--rounds and --repeats must be positive, got {opts.rounds} and {opts.repeats}")
    if opts.kind_ab:
        print(kind_ab(opts.repeats, max(1, opts.threads), opts.small))
        return 0
    if opts.switch_worker:
        print(json.dumps(switch_worker(opts.switch_worker, opts.repeats, opts.small)))
        return 0
    if opts.switch_ab:
        print(switch_ab(opts.switch_ab, opts.rounds, opts.repeats, max(1, opts.threads), opts.small))
        return 0
    if opts.worker:
        print(json.dumps(worker(opts.worker, opts.repeats, opts.small, opts.breakdown, opts.perf_map)))
        return 0
    who = [w.strip() for w in opts.only.split(",") if w.strip()]
    bad = [w for w in who if w not in CONTENDERS]
    if bad:
        ap.error(f"--only: unknown contender(s) {bad}; known: {', '.join(CONTENDERS)}")
    results: dict[str, list[dict]] = {w: [] for w in who}
    load0 = os.getloadavg()[0]
    for r in range(opts.rounds):
        for w in who:
            results[w].append(run_child(w, opts.repeats, opts.small, w == "svod" and r == 0 and not opts.no_breakdown))
    print(f"# W4 MLP block per core ({'small' if opts.small else 'default'} shapes): one thread per contender, "
          f"{opts.rounds} alternating rounds x {opts.repeats} calls, CPU time of the process\n")
    print(f"- load average {load0:.1f} -> {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    sv = [r for r in results.get("svod", []) if "peak" in r]
    if sv:
        peak = float(np.median([r["peak"] for r in sv]))
        print(f"- FMA probe, one core (float32, CPU time): {peak:.0f} GFLOP/s; svod's W4 at "
              f"{sv[0]['flops'] / float(np.median([c for r in sv for c in r['cpu']])) / 1e9 / peak:.0%} of it")
    print()
    print(report(results))
    bd = next((r["breakdown"] for r in results.get("svod", []) if r.get("breakdown")), None)
    if bd:
        print("\nsvod's kernels, one thread, thread CPU time (median / min ms):\n")
        print("| kernel | median ms | min ms |\n|---|---|---|")
        for what, med, lo in bd:
            print(f"| {what} | {med:.3g} | {lo:.3g} |")
    if opts.json:
        with open(opts.json, "w") as fh:
            json.dump(results, fh)
    return 0 if all(r.get("ok", True) for runs in results.values() for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
