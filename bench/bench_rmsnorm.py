"""The row-prologue matmul kind (search/kinds.py `rmsnorm`): ``rmsnorm(x) @ W`` as one kernel
against the row kernel + GEMM plan it replaces, numpy, torch.compile and jax.jit.

    python3 bench/bench_rmsnorm.py --kind-ab --shape 2048,1024,4096 --threads 2 --repeats 9
    python3 bench/bench_rmsnorm.py --peers --shape 2048,1024,4096 --threads 2 --repeats 9
    python3 bench/bench_rmsnorm.py --switch-ab residual --rounds 3 --repeats 9 --threads 2

`--kind-ab`: one process; the graph ``(x * rsqrt(mean(x²) + 1e-6) * g) @ W`` (float32) lowered
three ways with its boundaries forced — the kind's kernel, the row kernel + generated GEMM,
the row kernel + BLAS step — each compiled, checked against numpy, then timed interleaved
(A, B, C, A, ...) on `--threads` threads (wall time, and the process's CPU time over all its
threads — BLAS's included —, which a loaded machine disturbs less), plus numpy's two steps. The kind's result is
compared with the generated-GEMM plan's bit for bit.

`--peers`: the same program through `svod.jit` (the plan the search chooses: ``SVOD_TIERED=0``,
no provisional plan while the search runs in the background), numpy,
torch.compile and jax.jit (each where importable; jax from ``PYTHONPATH=/tmp/jaxenv``),
medians of `--repeats` calls after warm-up, wall and process CPU time (all threads; with
``--threads 1`` each contender is held to one thread: OpenBLAS by ``OPENBLAS_NUM_THREADS=1``
in the environment, torch by ``set_num_threads``, XLA by its flags).

`--switch-ab WORKLOAD`: any workload of `svod.workloads` with ``SVOD_FUSE_RMSNORM=1`` and
``=0`` in alternating processes (`--rounds`), `--repeats` jitted calls each, wall and CPU
medians per round and the plan's kernel kinds.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def _arrays(m: int, k: int, n: int):
    rng = np.random.default_rng(0)
    return (rng.standard_normal((m, k)).astype(np.float32), (rng.random(k) + 0.5).astype(np.float32),
            (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32))


def _numpy(x, g, w):
    return (x / np.sqrt((x * x).mean(-1, keepdims=True) + np.float32(1e-6)) * g) @ w


def _svod_fn(x, g, w):
    import svod

    return svod.nn.rms_norm(x, x.shape[-1:], g) @ w


def kind_ab(m: int, k: int, n: int, threads: int, repeats: int) -> str:
    import svod
    from svod.codegen.program import compile_kernel
    from svod.ir import Ops
    from svod.key import compact
    from svod.lower import lower

    xa, ga, wa = _arrays(m, k, n)
    with svod.eager_mode(False):
        y = _svod_fn(*(svod.asarray(a) for a in (xa, ga, wa)))
    key, b = compact([y.uop])
    inputs = {i for i, nd in enumerate(key.nodes) if nd.op is Ops.BUFFER}
    a_node = key.nodes[max(i for i, nd in enumerate(key.nodes) if nd.op is Ops.MATMUL)].src[0]
    fused = lower(key, inputs | set(key.outputs))
    two = lower(key, inputs | set(key.outputs) | {a_node})
    gemm = [dataclasses.replace(q, matmul=dataclasses.replace(q.matmul, library=False)) if q.matmul else q
            for q in two.kernels]
    blas = [dataclasses.replace(q, matmul=dataclasses.replace(q.matmul, library=True)) if q.matmul else q
            for q in two.kernels]
    plans = {"kind": list(fused.kernels), "row+GEMM": gemm, "row+BLAS": blas}
    want = _numpy(xa, ga, wa)

    def runner(kernels):
        progs = [compile_kernel(q) for q in kernels]
        bufs = {i: np.ascontiguousarray(a).reshape(-1) for i, a in enumerate(b.arrays)}
        for q in kernels:
            for o in q.outputs:
                bufs[o.slot] = np.empty(int(np.prod(o.shape)), o.dtype.np)

        def run():
            for p in progs:
                p.run(bufs, threads)
            return bufs[kernels[-1].outputs[0].slot].reshape(m, n)
        return run

    runs = {name: runner(ks) for name, ks in plans.items()}
    outs = {name: r().copy() for name, r in runs.items()}
    for name, got in outs.items():
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=name)
    same = np.array_equal(outs["kind"].view(np.uint32), outs["row+GEMM"].view(np.uint32))
    runs["numpy"] = lambda: _numpy(xa, ga, wa)
    wall = {name: [] for name in runs}
    cpu = {name: [] for name in runs}
    for _ in range(repeats):
        for name, r in runs.items():
            c0, t0 = time.process_time(), time.perf_counter()
            r()
            cpu[name].append(time.process_time() - c0)
            wall[name].append(time.perf_counter() - t0)
    flop = 2.0 * m * n * k
    lines = [f"# rmsnorm(x) @ W, ({m}, {k}) @ ({k}, {n}) float32, {threads} thread(s), {repeats} interleaved calls, "
             f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; kind == row+GEMM bit for bit: {same}",
             "| plan | kernels | wall ms median (min-max) | GFLOP/s | process CPU ms median |", "|---|---|---|---|---|"]
    for name in runs:
        w = sorted(wall[name])
        kinds = "+".join(q.kind for q in plans[name]) if name in plans else "numpy"
        c = np.median(cpu[name]) * 1e3
        note = ""
        lines.append(f"| {name} | {kinds} | {np.median(w) * 1e3:.2f} ({w[0] * 1e3:.2f}-{w[-1] * 1e3:.2f}) | "
                     f"{flop / np.median(w) / 1e9:.0f} | {c:.2f}{note} |")
    return "\n".join(lines)


def peers(m: int, k: int, n: int, threads: int, repeats: int) -> str:
    xa, ga, wa = _arrays(m, k, n)
    want = _numpy(xa, ga, wa)
    res, cpu = {}, {}
    if threads == 1:  # XLA's CPU client on one thread too (set before jax is imported)
        os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")

    def timed(name, fn, check):
        try:
            got = np.asarray(check())
            np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)
            for _ in range(2):
                fn()
            ts, cs = [], []
            for _ in range(repeats):
                c0, t0 = time.process_time(), time.perf_counter()
                fn()
                ts.append(time.perf_counter() - t0)
                cs.append(time.process_time() - c0)
            res[name] = sorted(ts)
            cpu[name] = float(np.median(cs))
        except Exception as e:  # noqa: BLE001 - a peer that is missing or fails is reported, not fatal
            res[name] = f"{type(e).__name__}: {str(e)[:80]}"

    os.environ.setdefault("SVOD_THREADS", str(threads))
    os.environ.setdefault("SVOD_TIERED", "0")  # the searched plan from the first call (no provisional greedy plan)
    import svod

    args = [svod.asarray(a) for a in (xa, ga, wa)]
    jf = svod.jit(_svod_fn)
    timed("svod.jit", lambda: jf(*args).numpy(), lambda: jf(*args).numpy())
    with svod.eager_mode(False):
        kinds = "+".join(q.kind for q in svod.explain(_svod_fn(*args)).plan.kernels)
    timed("numpy", lambda: _numpy(xa, ga, wa), lambda: _numpy(xa, ga, wa))
    try:
        import torch

        torch.set_num_threads(threads)
        tx, tg, tw = (torch.from_numpy(a) for a in (xa, ga, wa))
        tf = torch.compile(lambda x, g, w: (x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * g) @ w)
        timed("torch.compile", lambda: tf(tx, tg, tw), lambda: tf(tx, tg, tw).numpy())
    except ImportError as e:
        res["torch.compile"] = f"not installed ({e})"
    try:
        import jax
        import jax.numpy as jnp

        jx, jg, jw = (jnp.asarray(a) for a in (xa, ga, wa))
        jfn = jax.jit(lambda x, g, w: (x * jax.lax.rsqrt((x * x).mean(-1, keepdims=True) + 1e-6) * g) @ w)
        timed("jax.jit", lambda: jfn(jx, jg, jw).block_until_ready(), lambda: jfn(jx, jg, jw))
    except ImportError as e:
        res["jax.jit"] = f"not installed ({e})"
    lines = [f"# rmsnorm(x) @ W, ({m}, {k}) @ ({k}, {n}) float32, {threads} thread(s), {repeats} calls, load average "
             f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; svod's plan: {kinds}",
             "| contender | wall ms median (min-max) | GFLOP/s | process CPU ms median |", "|---|---|---|---|"]
    for name, ts in res.items():
        if isinstance(ts, str):
            lines.append(f"| {name} | {ts} | | |")
        else:
            lines.append(f"| {name} | {np.median(ts) * 1e3:.2f} ({ts[0] * 1e3:.2f}-{ts[-1] * 1e3:.2f}) | "
                         f"{2.0 * m * n * k / np.median(ts) / 1e9:.0f} | {cpu[name] * 1e3:.2f} |")
    return "\n".join(lines)


def switch_worker(name: str, repeats: int, small: bool) -> dict:
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
    res: dict[str, list[dict]] = {"1": [], "0": []}
    for _ in range(rounds):
        for flag in res:
            env = dict(os.environ, SVOD_FUSE_RMSNORM=flag, SVOD_THREADS=str(threads))
            env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH", "")) if p)
            cmd = [sys.executable, os.path.abspath(__file__), "--switch-worker", name, "--repeats", str(repeats)]
            cmd += ["--small"] if small else []
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
            if proc.returncode != 0:
                raise RuntimeError(f"bench_rmsnorm --switch-ab: the SVOD_FUSE_RMSNORM={flag} process failed: "
                                   f"{proc.stderr.strip().splitlines()[-1:]}")
            res[flag].append(json.loads(proc.stdout.strip().splitlines()[-1]))
    lines = [f"# {name} ({'small' if small else 'default'} shapes), {threads} thread(s): SVOD_FUSE_RMSNORM=1 vs 0, "
             f"{rounds} alternating rounds x {repeats} calls, load average {os.getloadavg()[0]:.1f} on "
             f"{os.cpu_count()} CPUs\n", "| SVOD_FUSE_RMSNORM | kernels | wall ms per round (medians) | "
             "CPU ms per round (medians) | check |", "|---|---|---|---|---|"]
    for flag, runs in res.items():
        walls = " / ".join(f"{np.median(r['wall']) * 1e3:.3g}" for r in runs)
        cpus = " / ".join(f"{np.median(r['cpu']) * 1e3:.3g}" for r in runs)
        lines.append(f"| {flag} | {'+'.join(runs[0]['kinds'])} | {walls} | {cpus} | "
                     f"{'PASS' if all(r['ok'] for r in runs) else 'FAIL'} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kind-ab", action="store_true")
    ap.add_argument("--peers", action="store_true")
    ap.add_argument("--shape", default="2048,1024,4096", help="m,k,n")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--switch-ab", default=None, metavar="WORKLOAD")
    ap.add_argument("--switch-worker", default=None, help=argparse.SUPPRESS)
    opts = ap.parse_args()
    m, k, n = (int(s) for s in opts.shape.split(","))
    if opts.switch_worker:
        print(json.dumps(switch_worker(opts.switch_worker, opts.repeats, opts.small)))
    elif opts.switch_ab:
        print(switch_ab(opts.switch_ab, opts.rounds, opts.repeats, max(1, opts.threads), opts.small))
    elif opts.peers:
        print(peers(m, k, n, opts.threads, opts.repeats))
    else:
        print(kind_ab(m, k, n, opts.threads, opts.repeats))


if __name__ == "__main__":
    main()
