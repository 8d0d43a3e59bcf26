"""Benchmark svod's generated GEMM against numpy's BLAS (and jax.jit when installed).

    python3 bench/bench_matmul.py [--repeats 11] [--sizes 1024,2048] [--threads 2] [--f64] [--no-mlp] [--no-gemv]
    python3 bench/bench_matmul.py --breakdown [--f64] [--sizes ...]   # micro-kernel alone vs whole, 1 thread
    python3 bench/bench_matmul.py --products [MxKxN,...] [--f64]      # W4's / the algebra rows' products

Same run, interleaved repeats (each repeat runs every contender once), medians and
bests. Reports:

* square float32 matmuls (default 1024^3 and 2048^3): svod's generated kernel
  (`compile_kernel` of a `Kernel` with `MatmulSpec(library=False)`, `--threads` threads)
  vs `np.matmul(out=...)`, vs `jax.jit(jnp.matmul)`; GFLOP/s = 2·m·n·k / time;
* the FMA peak of `svod.bench.peak` on `--threads` threads, measured before each square
  row, and each contender's share of it; the probe's L2/L3/DRAM read bandwidths;
  svod / numpy as the ratio of the medians and, in brackets, the range of the per-repeat
  ratios (each repeat times both, back to back);
* svod's GEMM on one thread timed in the thread's CPU time, interleaved with the FMA
  probe timed alike (`fma_peak(1, cpu_time=True)`): its share of one core's peak while
  it holds the core — the figure that stays put when other processes load the machine;
* matrix-vector products (A 4000x5000 float32/float64, A transposed): svod's library
  step against numpy, as shares of the DRAM read-bandwidth probe of the same run;
* the MLP block ``gelu(x@W1+b1)@W2+b2`` (x 512x1024, W1 1024x4096, W2 4096x1024, the
  tanh GELU so numpy computes it natively): svod through `svod.jit` (the planner's
  choice, kernels listed), svod with both matmuls fused into their epilogues (the
  generated GEMM, forced), numpy unfused, jax.jit;
* `--products`: rectangular products (default W4's two, bench_algebra's contract/einsum
  and siblings products, 2048³): svod's generated GEMM and OpenBLAS each on one thread in
  CPU time (the per-core rate, robust to other load), both on `--threads` threads in wall
  time, the unit tiling and the elements it packs per 1000 flops;
* which BLAS numpy ran (threadpoolctl when installed, else numpy's build config) and
  the OpenBLAS environment variables, the GEMM blocking, and how busy the machine was
  with other processes during the run (/proc/stat), since a shared 2-core VM is noisy.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import svod  # noqa: E402
from svod.codegen.jit import host_target_info  # noqa: E402
from svod.codegen.program import compile_kernel  # noqa: E402
from svod.codegen.schedule import gemm_config, plan_gemm  # noqa: E402
from svod.costing import Machine, RooflineModel  # noqa: E402
from svod.dtype import float32, float64  # noqa: E402
from svod.kernel import ACC, Kernel, KInput, KNode, KOutput, MatmulSpec  # noqa: E402
from svod.key import compact  # noqa: E402
from svod.lower import initial_materialized, lower  # noqa: E402
from svod.view import ViewChain  # noqa: E402


def matmul_kernel(m: int, k: int, n: int, dt=float32) -> Kernel:
    return Kernel(f"bench_mm_{m}x{k}x{n}", (m, n), (KInput(0, dt, ViewChain.of((m, k))),
                                                    KInput(1, dt, ViewChain.of((k, n)))),
                  (KNode(ACC, dt),), (KOutput(2, 0, dt, (m, n)),), (), MatmulSpec(0, 1, m, n, k))


GAP = 0.2  # seconds of rest before each timed call (--gap)


def interleaved(fns: dict, repeats: int, raw: dict | None = None) -> dict:
    """name -> sorted list of seconds; every repeat runs each contender once (`raw`, when
    given, receives the lists in repeat order, for per-repeat ratios).

    NOTE: OpenBLAS's worker threads busy-wait for a while after each call; without a
    pause the contender timed next shares the cores with them (measured: the first
    contender after np.matmul ran at half speed)."""
    for f in fns.values():  # warm-up (compile, page in)
        f()
    times: dict = {name: [] for name in fns}
    for _ in range(repeats):
        for name, f in fns.items():
            time.sleep(GAP)
            t0 = time.perf_counter()
            f()
            times[name].append(time.perf_counter() - t0)
    if raw is not None:
        raw.update(times)
    return {k: sorted(v) for k, v in times.items()}


def median(xs):
    return xs[len(xs) // 2]


def blas_info() -> str:
    try:
        from threadpoolctl import threadpool_info

        rows = [f"{d.get('internal_api')} {d.get('version')} core={d.get('architecture')} "
                f"threads={d.get('num_threads')}" for d in threadpool_info() if d.get("user_api") == "blas"]
        return "; ".join(rows) or "threadpoolctl: no BLAS found"
    except ImportError:
        cfg = np.show_config(mode="dicts") if "mode" in np.show_config.__code__.co_varnames else {}
        blas = cfg.get("Build Dependencies", {}).get("blas", {}) if isinstance(cfg, dict) else {}
        return (f"{blas.get('name', '?')} {blas.get('version', '')} ({blas.get('openblas configuration', '')}); "
                "threadpoolctl not installed: the kernel chosen at run time is not reported")


class CpuLoad:
    """Share of the machine's CPU time used by *other* processes while the block ran."""

    def __enter__(self):
        self.t0, self.s0, self.p0 = time.perf_counter(), self._stat(), os.times()
        return self

    def __exit__(self, *exc):
        s1, p1 = self._stat(), os.times()
        if self.s0 is None or s1 is None:
            self.other = float("nan")
            return
        hz = os.sysconf("SC_CLK_TCK")
        busy = (s1[0] - self.s0[0]) / hz
        total = (s1[1] - self.s0[1]) / hz
        mine = (p1.user + p1.system) - (self.p0.user + self.p0.system)
        self.other = max(0.0, busy - mine) / total if total else float("nan")

    @staticmethod
    def _stat():
        try:
            with open("/proc/stat") as fh:
                v = [int(x) for x in fh.readline().split()[1:]]
            idle = v[3] + v[4]
            return sum(v) - idle, sum(v)
        except OSError:
            return None


def bench_square(sizes, dtypes, threads, repeats, jax_mm):
    print(f"\n## square matmuls (threads={threads}, {repeats} interleaved repeats; GFLOP/s median / best; "
          "peak: svod.bench.peak's FMA loop on as many threads, measured before each row, float64 half of it)\n")
    print("| case | svod generated | numpy (BLAS) | jax.jit | svod / numpy (range over repeats) | FMA peak | "
          "svod / peak | numpy / peak | svod 1 thread, CPU time / core peak | max abs diff | other load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for dt in dtypes:
        for n in sizes:
            print(square_row(n, dt, threads, repeats, jax_mm))


def bench_gemv(threads, repeats):
    """Matrix-vector products too big for the caches: svod's library step (cblas gemv calls
    on svod's pool: output bands for A @ x, bands of A's rows with partial vectors and a
    combine for Aᵀ @ x, bands of A's columns for a short A @ x) against numpy, as a share
    of the DRAM read bandwidth probe."""
    from svod.bench.peak import read_bandwidth
    from svod.codegen.blas import gemv_split, matmul_into

    print(f"\n## matrix-vector products (A 4000x5000, short: 8x2500000; {repeats} interleaved repeats; "
          "ms median / best; "
          "share: A's bytes / time against the read-bandwidth probe of this run; split: how svod's "
          "library step cuts the product on its pool)\n")
    print("| case | svod | svod library step alone | numpy | svod / numpy | DRAM probe | svod share | step share | "
          "numpy share | other load | split |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    rng = np.random.default_rng(1)
    probe_buf = np.ones(64 << 20, np.float32)
    for dt, trans, (m, k) in ((np.float32, False, (4000, 5000)), (np.float32, True, (4000, 5000)),
                              (np.float64, False, (4000, 5000)), (np.float64, True, (4000, 5000)),
                              (np.float32, False, (8, 2_500_000))):
        a = rng.standard_normal((k, m) if trans else (m, k)).astype(dt)
        a2 = a.T if trans else a
        x = rng.standard_normal(k).astype(dt)
        ta, tx = svod.asarray(a), svod.asarray(x)
        x2, y2 = x.reshape(-1, 1), np.empty((m, 1), dt)
        split = gemv_split(a2, x2, y2)

        def mv(ta=ta, tx=tx, trans=trans):
            return ((ta.T if trans else ta) @ tx).numpy()

        np.testing.assert_allclose(mv(), a2 @ x, rtol=1e-3, atol=1e-2 * math.sqrt(k / 5000))
        bw: list[float] = []
        # the step alone: `matmul_into` on the same views, without the realize around it
        fns = {"svod": mv, "step": lambda a2=a2, x2=x2, y2=y2: matmul_into(a2, x2, y2),
               "numpy": lambda a2=a2, x=x: a2 @ x,
               "probe": lambda bw=bw: bw.append(read_bandwidth(256 << 20, threads, repeats=1, buf=probe_buf)["gbps"])}
        with CpuLoad() as load:
            t = interleaved(fns, repeats)
        probe = sorted(bw)[len(bw) // 2]
        sv, st, nv = median(t["svod"]), median(t["step"]), median(t["numpy"])
        print(f"| A{'ᵀ' if trans else ''} @ x {np.dtype(dt).name}{' (8 rows)' if m == 8 else ''} | "
              f"{sv * 1e3:.2f} / {t['svod'][0] * 1e3:.2f} | "
              f"{st * 1e3:.2f} / {t['step'][0] * 1e3:.2f} | {nv * 1e3:.2f} / {t['numpy'][0] * 1e3:.2f} | "
              f"{nv / sv:.2f}x | {probe:.1f} GB/s | {a.nbytes / sv / 1e9 / probe:.0%} | "
              f"{a.nbytes / st / 1e9 / probe:.0%} | {a.nbytes / nv / 1e9 / probe:.0%} | {load.other:.0%} | {split} |")


def square_row(n: int, dt, threads: int, repeats: int, jax_mm) -> str:
    rng = np.random.default_rng(n)
    a = rng.standard_normal((n, n)).astype(dt.np)
    b = rng.standard_normal((n, n)).astype(dt.np)
    out = np.empty(n * n, dt.np)
    out_np = np.empty((n, n), dt.np)
    prog = compile_kernel(matmul_kernel(n, n, n, dt))
    bufs = {0: a.reshape(-1), 1: b.reshape(-1), 2: out}
    fns = {"svod": lambda: prog.run(bufs, threads), "numpy": lambda: np.matmul(a, b, out=out_np)}
    if jax_mm is not None:
        ja, jb = jax_mm[1](a), jax_mm[1](b)
        if ja.dtype == a.dtype:  # never a product of another precision under this row's name
            fns["jax"] = lambda: jax_mm[0](ja, jb).block_until_ready()
    from svod.bench.peak import fma_peak

    peak = fma_peak(threads, seconds=0.1)["gflops"] / (2 if dt.np == np.float64 else 1)
    raw: dict = {}
    with CpuLoad() as load:
        t = interleaved(fns, repeats, raw)
    err = float(np.max(np.abs(out.reshape(n, n) - out_np)))
    gf = {k: 2 * n ** 3 / median(v) / 1e9 for k, v in t.items()}
    best = {k: 2 * n ** 3 / v[0] / 1e9 for k, v in t.items()}

    def cell(k):
        return f"{gf[k]:.1f} / {best[k]:.1f}" if k in gf else "—"

    # one thread in thread CPU time, interleaved with the probe timed alike: the share of
    # a core's peak the GEMM reaches while it holds the core, whatever other processes do
    one, core = [], []
    for _ in range(repeats):
        t0 = time.thread_time()
        prog.run(bufs, 1)
        one.append(2 * n ** 3 / max(time.thread_time() - t0, 1e-9) / 1e9)
        core.append(fma_peak(1, seconds=0.05, cpu_time=True)["gflops"] / (2 if dt.np == np.float64 else 1))
    one1, core1 = median(sorted(one)), median(sorted(core))
    ratios = sorted(tn / ts for ts, tn in zip(raw["svod"], raw["numpy"]))  # svod / numpy speed, per repeat

    return (f"| {n}³ {dt.name} | {cell('svod')} | {cell('numpy')} | {cell('jax')} | "
            f"{gf['svod'] / gf['numpy']:.2f}x ({ratios[0]:.2f}-{ratios[-1]:.2f}) | {peak:.0f} | "
            f"{gf['svod'] / peak:.0%} | {gf['numpy'] / peak:.0%} | {one1:.1f} / {core1:.0f} = {one1 / core1:.0%} | "
            f"{err:.1e} | {load.other:.0%} |")


def microkernel_alone(dt, repeats: int) -> tuple[float, float]:
    """(GFLOP/s, the core's FMA peak) of the GEMM's micro-kernel alone on one thread, in
    CPU time: a driver calls it, for each of 16 Ap panels, over the NC/NR Bp panels of
    one packed B block (in L2, as the GEMM does), adding into a C tile that stays in L1
    — the speed the loop nest around it (packing, C traffic, edges) can at best keep."""
    import ctypes

    import llvmlite.ir as ir

    from svod.bench.peak import fma_peak
    from svod.codegen.gemm import C_PREFETCH_STEPS, emit_microkernel
    from svod.codegen.jit import compile_ir

    cfg = gemm_config(dt.itemsize)
    ty = ir.FloatType() if dt.itemsize == 4 else ir.DoubleType()
    i64 = ir.IntType(64)
    m = ir.Module("svod_bench_uk")
    uk = emit_microkernel(m, "uk", ty, cfg, cfg.kc, 1, C_PREFETCH_STEPS)  # A in rows (k contiguous), as packed
    pt = ir.PointerType(ty)
    fn = ir.Function(m, ir.FunctionType(ir.VoidType(), [pt, pt, pt, i64, i64, i64]), "drive")
    ap, bp, c, calls, npa, npb = fn.args
    b = ir.IRBuilder(fn.append_basic_block("e"))
    loop, done = fn.append_basic_block("l"), fn.append_basic_block("d")
    b.branch(loop)
    b.position_at_end(loop)
    i = b.phi(i64)
    i.add_incoming(ir.Constant(i64, 0), fn.blocks[0])
    qa, qb = b.urem(b.udiv(i, npb), npa), b.urem(i, npb)  # per A panel, a sweep of B panels
    kc = ir.Constant(i64, cfg.kc)
    b.call(uk, [b.gep(ap, [b.mul(qa, ir.Constant(i64, cfg.mr * cfg.kc))]),
                b.gep(bp, [b.mul(qb, ir.Constant(i64, cfg.nr * cfg.kc))]), kc, c, ir.Constant(i64, cfg.nr),
                ir.Constant(ir.IntType(1), 1), c, ir.Constant(i64, cfg.nr)])
    i1 = b.add(i, ir.Constant(i64, 1))
    i.add_incoming(i1, loop)
    b.cbranch(b.icmp_signed("<", i1, calls), loop, done)
    b.position_at_end(done)
    b.ret_void()
    cm = compile_ir(str(m), name="svod_bench_uk")
    drive = cm.ctypes_fn("drive", None, [ctypes.c_void_p] * 3 + [ctypes.c_int64] * 3)

    def aligned(n):  # Bp's vector loads are 64-byte aligned, as the GEMM's malloc'd panels
        x = np.random.default_rng(n).standard_normal(n + 64).astype(dt.np)
        o = (-x.ctypes.data % 64) // x.itemsize
        return x[o:o + n]

    npa, npb = 16, max(1, (cfg.nc or cfg.nt) // cfg.nr)
    a_p, b_p, c_t = aligned(npa * cfg.mr * cfg.kc), aligned(npb * cfg.nr * cfg.kc), aligned(cfg.mr * cfg.nr)
    calls = max(npa * npb, int(2e9 / (2 * cfg.mr * cfg.nr * cfg.kc)))
    flops = 2.0 * cfg.mr * cfg.nr * cfg.kc * calls
    drive(a_p.ctypes.data, b_p.ctypes.data, c_t.ctypes.data, calls, npa, npb)
    got, peak = [], []
    for _ in range(repeats):
        t0 = time.thread_time()
        drive(a_p.ctypes.data, b_p.ctypes.data, c_t.ctypes.data, calls, npa, npb)
        got.append(flops / max(time.thread_time() - t0, 1e-9) / 1e9)
        peak.append(fma_peak(1, seconds=0.05, cpu_time=True)["gflops"] / (dt.itemsize // 4))
    return median(sorted(got)), median(sorted(peak))


def bench_breakdown(sizes, dtypes, repeats):
    """The micro-kernel alone and the whole GEMM on one thread, both in CPU time against
    the probe timed alike: what the loop nest (packing, C traffic, edges) costs."""
    from svod.bench.peak import fma_peak

    print(f"\n## where the time goes: one thread, thread CPU time, {repeats} repeats (medians), "
          "each beside the FMA probe timed alike\n")
    print("| case | GFLOP/s | core peak | share of peak |")
    print("|---|---|---|---|")
    for dt in dtypes:
        cfg = gemm_config(dt.itemsize)
        g, p = microkernel_alone(dt, repeats)
        print(f"| micro-kernel alone {cfg.mr}x{cfg.nr} kc {cfg.kc} {dt.name} | {g:.1f} | {p:.0f} | {g / p:.0%} |")
        for n in sizes:
            a = np.random.default_rng(n).standard_normal((n, n)).astype(dt.np)
            bm = np.random.default_rng(n + 1).standard_normal((n, n)).astype(dt.np)
            out = np.empty(n * n, dt.np)
            prog = compile_kernel(matmul_kernel(n, n, n, dt))
            bufs = {0: a.reshape(-1), 1: bm.reshape(-1), 2: out}
            prog.run(bufs, 1)
            np.testing.assert_allclose(out.reshape(n, n), a @ bm, rtol=1e-3, atol=1e-2 if dt.itemsize == 4 else 1e-9)
            got, peak = [], []
            for _ in range(repeats):
                t0 = time.thread_time()
                prog.run(bufs, 1)
                got.append(2 * n ** 3 / max(time.thread_time() - t0, 1e-9) / 1e9)
                peak.append(fma_peak(1, seconds=0.05, cpu_time=True)["gflops"] / (dt.itemsize // 4))
            g, p = median(sorted(got)), median(sorted(peak))
            print(f"| whole GEMM {n}³ {dt.name} (units {plan_gemm(matmul_kernel(n, n, n, dt)).units}) | {g:.1f} | "
                  f"{p:.0f} | {g / p:.0%} |")


# W4's two products (x 512x1024 @ W1 1024x4096, h 512x4096 @ W2 4096x1024), bench_algebra's
# contract_bmr / einsum product (512x256 @ 256x512), its siblings (2048x768 @ 768x768) and
# their merged form (2048x768 @ 768x2304), and the big square for reference
PRODUCTS = "512x1024x4096,512x4096x1024,512x256x512,2048x768x768,2048x768x2304,2048x2048x2048"


def parse_products(text: str) -> list[tuple[int, int, int]]:
    """``"MxKxN,..."`` -> [(m, k, n), ...] (an error names the bad item)."""
    out = []
    for item in text.split(","):
        if not item.strip():
            continue
        parts = item.lower().split("x")
        if len(parts) != 3 or not all(p.strip().isdigit() and int(p) > 0 for p in parts):
            raise SystemExit(f"bench_matmul --products: {item!r} is not MxKxN with positive sizes")
        out.append(tuple(int(p) for p in parts))
    return out


def packed_per_flop(m: int, k: int, n: int, dt=float32) -> float:
    """Elements the generated GEMM packs (A rows once per column tile — read in place, only
    a partial last MR-row panel —, B columns once per row tile, micro-tile padding
    included) per 1000 flops of the product: the unit tiling's repacking, which the
    per-core rate pays for."""
    p = plan_gemm(matmul_kernel(m, k, n, dt))
    rows = (p.cfg.mr if m % p.cfg.mr else 0) if p.a_direct else -(-m // p.cfg.mr) * p.cfg.mr
    cols = -(-n // p.cfg.nr) * p.cfg.nr
    return 1000.0 * k * (p.tiles_n * rows + p.tiles_m * cols) / (2.0 * m * n * k)


def bench_products(shapes, dtypes, threads: int, repeats: int) -> None:
    """Rectangular products (W4's, the algebra benchmark's): per core, svod's generated GEMM
    and OpenBLAS on one thread (svod's library step with one thread: the same cblas call),
    interleaved and timed in this thread's CPU time — what each does with a core, whatever
    other processes do; then both on `threads` threads in wall time (numpy's own matmul),
    with the plan's unit tiling and how much it packs."""
    print(f"\n## products (per core: thread CPU time, one thread each, {repeats} interleaved repeats, medians; "
          f"{threads} threads: wall time)\n")
    print("| product m×k×n | dtype | svod 1 core GFLOP/s | OpenBLAS 1 core | svod / OpenBLAS per core | "
          f"svod {threads} thr | numpy {threads} thr | svod / numpy | units (tiles m×n of mt×nt) | K blocks × kc | "
          "packed elements per kflop | other load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for dt in dtypes:
        for m, k, n in shapes:
            print(product_row(m, k, n, dt, threads, repeats))


def product_row(m: int, k: int, n: int, dt, threads: int, repeats: int) -> str:
    """One row of `bench_products`."""
    from svod.codegen.blas import matmul_into

    rng = np.random.default_rng(m + k + n)
    a = rng.standard_normal((m, k)).astype(dt.np)
    b = rng.standard_normal((k, n)).astype(dt.np)
    out = np.empty(m * n, dt.np)
    out_b = np.empty((m, n), dt.np)
    out_np = np.empty((m, n), dt.np)
    kern = matmul_kernel(m, k, n, dt)
    prog = compile_kernel(kern)
    bufs = {0: a.reshape(-1), 1: b.reshape(-1), 2: out}
    prog.run(bufs, 1)
    if not matmul_into(a, b, out_b, 1):
        np.matmul(a, b, out=out_b)
    tol = dict(rtol=1e-3, atol=1e-2) if dt.itemsize == 4 else dict(rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(out.reshape(m, n), a @ b, **tol)
    np.testing.assert_allclose(out_b, a @ b, **tol)
    flop = 2.0 * m * n * k
    inner = max(1, int(2e8 // flop))  # small products: several calls per timing
    one: dict[str, list[float]] = {"svod": [], "blas": []}
    calls = {"svod": lambda: prog.run(bufs, 1),
             "blas": lambda: matmul_into(a, b, out_b, 1) or np.matmul(a, b, out=out_b)}
    for _ in range(repeats):
        for name, f in calls.items():
            t0 = time.thread_time()
            for _ in range(inner):
                f()
            one[name].append(flop * inner / max(time.thread_time() - t0, 1e-9) / 1e9)
    g1 = {name: median(sorted(v)) for name, v in one.items()}
    with CpuLoad() as load:
        t = interleaved({"svod": lambda: prog.run(bufs, threads),
                         "numpy": lambda: np.matmul(a, b, out=out_np)}, repeats)
    gt = {name: flop / median(v) / 1e9 for name, v in t.items()}
    p = plan_gemm(kern)
    return (f"| {m}×{k}×{n} | {dt.name} | {g1['svod']:.1f} | {g1['blas']:.1f} | {g1['svod'] / g1['blas']:.2f}x | "
          f"{gt['svod']:.1f} | {gt['numpy']:.1f} | {gt['svod'] / gt['numpy']:.2f}x | "
          f"{p.units} ({p.tiles_m}×{p.tiles_n} of {p.mt}×{p.nt}) | {p.nkb} × {p.kc} | "
          f"{packed_per_flop(m, k, n, dt):.1f} | {load.other:.0%} |")


def gelu_tanh_np(h):
    return 0.5 * h * (1 + np.tanh(np.float32(math.sqrt(2 / math.pi)) * (h + np.float32(0.044715) * h * h * h)))


def bench_mlp(threads, repeats, jax_mod):
    print(f"\n## MLP block gelu(x@W1+b1)@W2+b2, x 512x1024, W1 1024x4096, W2 4096x1024 float32 "
          f"(tanh GELU; {repeats} interleaved repeats)\n")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((512, 1024)).astype(np.float32)
    w1 = (rng.standard_normal((1024, 4096)) / 32).astype(np.float32)
    b1 = rng.standard_normal(4096).astype(np.float32)
    w2 = (rng.standard_normal((4096, 1024)) / 64).astype(np.float32)
    b2 = rng.standard_normal(1024).astype(np.float32)
    flops = 2 * 512 * 1024 * 4096 * 2

    def mlp(x, w1, b1, w2, b2):
        return svod.nn.gelu(x @ w1 + b1, approximate="tanh") @ w2 + b2

    args = [svod.asarray(t) for t in (x, w1, b1, w2, b2)]
    jitted = svod.jit(mlp)
    key, bind = compact([mlp(*args).uop])
    chosen = svod.explain(mlp(*args))
    kinds = [k.kind for k in chosen.kernels]
    fused = lower(key, initial_materialized(key))
    model, mach = RooflineModel(), Machine.host()
    progs = [(compile_kernel(k), model.price(k, mach).threads) for k in fused.kernels]
    bufs = {i: np.ascontiguousarray(a).reshape(-1) for i, a in enumerate(bind.arrays)}
    for k in fused.kernels:
        for o in k.outputs:
            bufs.setdefault(o.slot, np.empty(int(np.prod(o.shape)), o.dtype.np))

    def run_fused():
        for p, _ in progs:
            p.run(bufs, threads)

    def run_numpy():
        return gelu_tanh_np(x @ w1 + b1) @ w2 + b2

    fns = {"svod (planner's choice, svod.jit)": lambda: jitted(*args).numpy(),
           "svod (generated GEMMs, epilogues fused)": run_fused,
           "numpy unfused": run_numpy}
    if jax_mod is not None:
        jax, jnp = jax_mod
        jf = jax.jit(lambda x, w1, b1, w2, b2: jax.nn.gelu(x @ w1 + b1, approximate=True) @ w2 + b2)
        jargs = [jnp.asarray(t) for t in (x, w1, b1, w2, b2)]
        fns["jax.jit"] = lambda: jf(*jargs).block_until_ready()
    with CpuLoad() as load:
        t = interleaved(fns, repeats)
    ref = run_numpy()
    got = bufs[fused.outputs[0][0]].reshape(512, 1024)
    print("| contender | median ms | best ms | GFLOP/s (median) | vs numpy |")
    print("|---|---|---|---|---|")
    base = median(t["numpy unfused"])
    for name, v in t.items():
        print(f"| {name} | {median(v) * 1e3:.1f} | {v[0] * 1e3:.1f} | {flops / median(v) / 1e9:.1f} | "
              f"{base / median(v):.2f}x |")
    print(f"\nplanner's kernels: {kinds}; fused plan: {[k.kind for k in fused.kernels]}; "
          f"max |fused - numpy| {float(np.max(np.abs(got - ref))):.1e}; other load {load.other:.0%}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=11)
    ap.add_argument("--sizes", default="1024,2048")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--f64", action="store_true", help="also float64")
    ap.add_argument("--no-mlp", action="store_true")
    ap.add_argument("--no-gemv", action="store_true")
    ap.add_argument("--gap", type=float, default=GAP, help="seconds of rest before each timed call")
    ap.add_argument("--products", nargs="?", const=PRODUCTS, default=None, metavar="MxKxN,...",
                    help="only: rectangular products per core (CPU time, svod vs OpenBLAS) and on --threads "
                         f"(default {PRODUCTS})")
    ap.add_argument("--breakdown", action="store_true",
                    help="only: the micro-kernel alone vs the whole GEMM on one thread, in CPU time, vs the probe")
    opts = ap.parse_args()
    globals()["GAP"] = opts.gap
    info = host_target_info()
    c4 = gemm_config(4)
    print("# svod GEMM benchmark\n")
    print(f"- machine: {platform.processor() or platform.machine()}, cpu {info['cpu']}, {os.cpu_count()} CPUs, "
          f"vector {info['vector_bits']} bits, FMA {info['has_fma']}")
    print(f"- GEMM f32: micro-tile {c4.mr}x{c4.nr} ({c4.mr * c4.nv} accumulators of {c4.vw} lanes), KC {c4.kc}, "
          f"MC {c4.mc}, unit tiles up to {c4.mt}x{c4.nt}; 1024³ plan {plan_gemm(matmul_kernel(1024, 1024, 1024))}")
    print(f"- numpy {np.__version__} BLAS: {blas_info()}")
    env = {k: v for k, v in os.environ.items() if k.startswith(("OPENBLAS", "OMP_", "MKL_", "GOTO"))}
    print(f"- BLAS environment: {env or 'none set'}")
    jax_mm = jax_mod = None
    try:
        import jax
        import jax.numpy as jnp

        # without x64, jnp.asarray of a float64 array is float32: its float64 rows would time
        # a float32 product (seen on a 16-core Xeon: above the float64 FMA peak). float32
        # inputs stay float32 with it on.
        jax.config.update("jax_enable_x64", True)
        jax_mm = (jax.jit(jnp.matmul), jnp.asarray)
        jax_mod = (jax, jnp)
        print(f"- jax {jax.__version__}")
    except ImportError:
        print("- jax: not installed")
    sizes = [int(s) for s in opts.sizes.split(",") if s]
    if opts.products:
        bench_products(parse_products(opts.products), [float32] + ([float64] if opts.f64 else []), opts.threads,
                       opts.repeats)
        return
    if opts.breakdown:
        bench_breakdown(sizes, [float32] + ([float64] if opts.f64 else []), opts.repeats)
        return
    from svod.bench.peak import describe, probe

    print(f"- {describe(probe(opts.threads))}")
    bench_square(sizes, [float32] + ([float64] if opts.f64 else []), opts.threads, opts.repeats, jax_mm)
    if not opts.no_gemv:
        bench_gemv(opts.threads, opts.repeats)
    if not opts.no_mlp:
        bench_mlp(opts.threads, opts.repeats, jax_mod)


if __name__ == "__main__":
    main()
