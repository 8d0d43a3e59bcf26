"""Probe kernels and the matmul, step and overhead probes of `svod calibrate`.

`kernels_of` / `one_kernel` build a probe's kernels as the greedy planner makes them;
`_seconds` and `_held` time one call and read a cache-hold share. The probes here measure
what a plan pays besides its kernels' work: a GEMM's epilogue and the ageing of its
output in cache (`_epilogue_cost`, `_matmul_aging`, `aging_factor`), a kernel launch
(`_launch_cost`), a library (BLAS) step's fixed cost (`_library_step_cost`), the BLAS
step against the generated GEMM side by side (`_blas_against_gemm`, `_blas_transposed_cost`)
and an allocation (`_alloc_cost`). `costmodels.calibrate` runs them and fits the profile.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

import numpy as np

from costmodels.features import features

MIB = 1 << 20

def kernels_of(fn, *shapes, dtype=np.float32):
    """The kernels the greedy planner makes of `fn(*tensors)` over inputs of `shapes`."""
    import svod
    from svod.key import compact
    from svod.plan_greedy import plan_greedy

    ts = [svod.asarray(np.zeros(s, dtype)) for s in shapes]
    out = fn(*ts)
    outs = out if isinstance(out, tuple) else (out,)
    key, _ = compact([o.uop for o in outs])
    return list(plan_greedy(key).kernels)


def one_kernel(fn, *shapes, dtype=np.float32):
    ks = kernels_of(fn, *shapes, dtype=dtype)
    if len(ks) != 1:
        raise AssertionError(f"calibration probe made {len(ks)} kernels, expected 1")
    return ks[0]


def _seconds(fn: Callable[[], object]) -> float:
    """Wall seconds of one call of `fn`."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _held(warm: float, cold: float, t: float) -> float:
    """The share of a buffer still cached when a read of it took `t` seconds, between the
    read's `warm` and `cold` (after a sweep past the L3) seconds; clipped to [0, 1]."""
    return max(0.0, min(1.0, (cold - t) / max(cold - warm, 1e-12)))


def _matmul_kernel(m: int, k: int, n: int, library: bool, b_t: bool = False):
    from svod.dtype import float32
    from svod.kernel import ACC, Kernel, KInput, KNode, KOutput, MatmulSpec
    from svod.view import ViewChain

    b = ViewChain.of((n, k)).permute((1, 0)) if b_t else ViewChain.of((k, n))
    ins = (KInput(0, float32, ViewChain.of((m, k))), KInput(1, float32, b))
    return Kernel(f"cal_matmul_{'lib' if library else 'gen'}", (m, n), ins, (KNode(ACC, float32),),
                  (KOutput(2, 0, float32, (m, n)),), (), MatmulSpec(0, 1, m, n, k, library))


def _epilogue_kernel(m: int, k: int, n: int):
    """The generated GEMM of an (m, k) by (k, n) product plus a full (m, n) matrix in its
    epilogue (``a @ b + c`` as one kernel: what a plan that materialises c before the
    product runs): `_matmul_kernel`'s product with a third input added after the ACC."""
    import dataclasses

    from svod.dtype import float32
    from svod.ir import Ops
    from svod.kernel import LOAD, KInput, KNode, KOutput
    from svod.view import ViewChain

    plain = _matmul_kernel(m, k, n, library=False)
    return dataclasses.replace(plain, name="cal_matmul_epilogue",
                               inputs=plain.inputs + (KInput(2, float32, ViewChain.of((m, n))),),
                               nodes=plain.nodes + (KNode(LOAD, float32, arg=2), KNode(Ops.ADD, float32, (0, 1))),
                               outputs=(KOutput(3, 2, float32, (m, n)),))


# (m, k, n) of the GEMM timed with and without a matrix in its epilogue: a short k, so that
# the epilogue is a share of the product the pair resolves (docs/ops.md)
EPILOGUE_SHAPE = (1024, 256, 1024)


def _epilogue_cost(cores: int) -> float:
    """Seconds per byte a generated GEMM on every core spends reading a full matrix in its
    epilogue: the product with ``+ c`` against the product alone, side by side. The
    epilogue loads c in short row pieces per output tile, after the tile's K loop, which
    neither the prefetchers stream nor the FMAs hide (docs/ops.md has figures)."""
    m, k, n = EPILOGUE_SHAPE
    plain, epi = _side_by_side([(_matmul_kernel(m, k, n, library=False), cores), (_epilogue_kernel(m, k, n), cores)],
                               repeats=PAIR_REPEATS)
    return max(0.0, (epi - plain) / (4.0 * m * n))


AGING_SHAPE = (1024, 512, 768)  # (m, k, n): a product whose 3 MB output the next kernel reads
AGING_MAX = 4.0  # most a product's second may count for in the hold curve's idle seconds


def _matmul_aging(cores: int, trials: int = 25) -> dict[str, dict]:
    """How cold each kind of product leaves its output for the kernel after it: the
    generated GEMM (on `cores` threads) and the BLAS step, each followed by an all-core
    read kernel over its output, against the same read right after itself (hot) and after
    a 64 MB sweep (cold), interleaved trials. -> name -> {"share": (cold - after) / (cold
    - hot), "seconds": the product's median, "read": the read's median after it}
    (docs/ops.md: packing streams evict the caches faster than idle time does)."""
    import statistics

    from costmodels.measure import kernel_buffers
    from svod.codegen.program import compile_kernel

    m, k, n = AGING_SHAPE
    read = one_kernel(lambda a: a * 0.5, (m, n))
    rp, rb = compile_kernel(read), kernel_buffers(read)
    slot = read.inputs[0].slot
    prods = {}
    for name, lib in (("gemm", False), ("blas", True)):
        kk = _matmul_kernel(m, k, n, library=lib)
        prods[name] = (compile_kernel(kk), kernel_buffers(kk), kk.outputs[0].slot)
    sweep = np.ones(16 * MIB, np.float32)  # 64 MB: past the L3

    def read_of(buf) -> float:
        return _seconds(lambda: rp.run({**rb, slot: buf}, cores))

    times: dict[str, list[float]] = {}
    for _ in range(trials):
        for name, (prog, bufs, out) in prods.items():
            times.setdefault(name, []).append(_seconds(lambda prog=prog, bufs=bufs: prog.run(bufs, cores)))
            times.setdefault(name + ":read", []).append(read_of(bufs[out]))
        buf = prods["gemm"][1][prods["gemm"][2]]
        read_of(buf)
        times.setdefault("hot", []).append(read_of(buf))
        sweep += 1.0
        times.setdefault("cold", []).append(read_of(buf))
    med = {key: statistics.median(v) for key, v in times.items()}
    return {name: {"share": _held(med["hot"], med["cold"], med[name + ":read"]),
                   "seconds": med[name], "read": med[name + ":read"]} for name in prods}


def aging_factor(hold: dict[str, float], share: float, seconds: float, read: float) -> float:
    """The seconds of idle waiting (on the `hold` curve: age -> share still cached) that one
    second of a product is worth, from `_matmul_aging`'s share of its output still cached
    for the read after it: the age at which the curve falls to `share`, over the age the
    reuse rule gives that read (half the product's run plus half the read's), clipped to
    [1, AGING_MAX] (a product evicts at least what idle time does).

    >>> aging_factor({"0.002": 0.8, "0.004": 0.6, "0.008": 0.2}, 0.6, 0.002, 0.0)
    4.0
    >>> round(aging_factor({"0.002": 0.8, "0.004": 0.6, "0.008": 0.2}, 0.7, 0.004, 0.0), 6)
    1.5
    """
    pts = sorted((float(a), float(h)) for a, h in hold.items())
    age, prev = pts[-1][0] if pts else 0.0, (0.0, 1.0)
    for a, h in pts:
        if h <= share:
            a0, h0 = prev
            age = a0 + (a - a0) * (h0 - share) / max(h0 - h, 1e-12)
            break
        prev = (a, h)
    return max(1.0, min(AGING_MAX, (2.0 * age - read) / max(seconds, 1e-12)))


def _launch_cost() -> float:
    """Seconds a graph program spends per extra kernel: a chain of 32 tiny kernels against
    the same work fused into one."""
    import svod
    from costmodels.measure import PlanRunner, time_plans
    from svod.key import compact
    from svod.lower import lower

    x = svod.asarray(np.ones(16, np.float32))
    ys = [x]
    for j in range(32):
        ys.append(ys[-1] * 1.01 + j)
    key, b = compact([ys[-1].uop])
    adds = [i for i, n in enumerate(key.nodes) if n.op.name == "ADD"]
    one = lower(key, set(), planner="calibrate")
    many = lower(key, set(adds), planner="calibrate")
    t1, tn = time_plans([PlanRunner(one, b.arrays), PlanRunner(many, b.arrays)], repeats=9, target=2e-3)
    return max((tn - t1) / max(len(many.kernels) - len(one.kernels), 1), 1e-8)


LIBRARY_STEP_SHAPE = (8, 32, 16)  # (m, k, n) of the library-step probe's products: microseconds of flops


def _library_step_cost() -> float:
    """Seconds a graph program spends per library (BLAS) step besides its flops: two tiny
    products with a bias each, ``(x @ w1 + 1) @ w2 + 1``, run as BLAS steps with the adds
    in kernels of their own (library, native, library, native: three segments, no
    single-segment replay) against the same products as generated GEMMs with the adds
    in their epilogues (one native segment), timed side by side, per step. What the two
    plans' kernels compute is the same few thousand flops either way; the difference is
    what the model's `launch_seconds` does not cover (docs/costmodels.md)."""
    import svod
    from costmodels.measure import PlanRunner, time_rounds
    from svod.key import compact
    from svod.lower import lower

    m, k, n = LIBRARY_STEP_SHAPE
    rng = np.random.default_rng(0)
    x, w1, w2 = (svod.asarray(rng.standard_normal(s).astype(np.float32)) for s in ((m, k), (k, n), (n, n)))
    out = (x @ w1 + 1.0) @ w2 + 1.0
    key, b = compact([out.uop])
    mms = {i for i, nd in enumerate(key.nodes) if nd.op.name == "MATMUL"}
    adds = {i for i, nd in enumerate(key.nodes) if nd.op.name == "ADD"}
    blas = lower(key, mms | adds, planner="calibrate")
    gemm = lower(key, adds, planner="calibrate")
    steps = sum(1 for kk in blas.kernels if kk.matmul is not None and kk.matmul.library)
    if steps != 2 or any(kk.matmul is not None and kk.matmul.library for kk in gemm.kernels):
        raise AssertionError(f"library-step probe: unexpected plans\n{blas}\n{gemm}")
    # interleaved rounds, each plan at its fastest: the library step's Python side swings
    # between rounds on a loaded machine (docs/costmodels.md)
    t_blas, t_gemm = (min(t) for t in time_rounds([PlanRunner(blas, b.arrays), PlanRunner(gemm, b.arrays)],
                                                   repeats=15, target=2e-3))
    return max((t_blas - t_gemm) / steps, 0.0)


def _side_by_side(runs: list[tuple[object, int]], repeats: int) -> list[float]:
    """Seconds of each (kernel, threads), the kernels timed interleaved against each other:
    a ratio of two programs timed side by side holds where two probes timed minutes apart
    on a shared VM do not."""
    from costmodels.measure import kernel_buffers, time_plans
    from svod.codegen.program import compile_kernel

    calls = []
    for k, threads in runs:
        prog, bufs = compile_kernel(k), kernel_buffers(k)
        calls.append(lambda prog=prog, bufs=bufs, threads=threads: prog.run(bufs, threads))
    return time_plans(calls, repeats=repeats, target=2e-3)


PAIR_REPEATS = 45  # rounds of each side-by-side pair, 1-2 s a pair (docs/ops.md)
BLAS_T_SHAPE = (1024, 512, 768)  # (m, k, n) of the BLAS step timed with a contiguous and a transposed B


def _blas_transposed_cost() -> float:
    """How much slower the BLAS step runs when B is read transposed (x @ w.T: OpenBLAS
    packs B from its other layout) than with B contiguous, the same product timed both
    ways side by side."""
    plain, trans = _side_by_side([(_matmul_kernel(*BLAS_T_SHAPE, library=True, b_t=b_t), 1) for b_t in (False, True)],
                                 repeats=PAIR_REPEATS)
    return trans / plain


@functools.cache
def _blas_probe_kernels() -> dict[str, object]:
    """The BLAS step's probe products (name -> library Kernel): the shapes its rate curve
    is measured at, from compute-bound to bandwidth-bound (attention scores: k = 64). Built
    once: the three probes and the side-by-side pairs share them."""
    return {"256": _matmul_kernel(256, 256, 256, library=True),
            "1024": _matmul_kernel(1024, 1024, 1024, library=True),
            "k64": one_kernel(lambda a, b: a @ b, (8, 512, 64), (8, 64, 512))}


def _blas_against_gemm(cores: int) -> dict[str, dict]:
    """Each BLAS probe product timed side by side with the generated GEMM of the same product
    (on every core, as plans run it): name -> {"ratio": BLAS seconds over GEMM seconds,
    "flops", "bytes"}. What the search decides between is one against the other, so the
    two are timed interleaved, never minutes apart (docs/ops.md)."""
    import dataclasses

    out = {}
    for name, lib in _blas_probe_kernels().items():
        gen = dataclasses.replace(lib, name="cal_matmul_pair", matmul=dataclasses.replace(lib.matmul, library=False))
        t_lib, t_gen = _side_by_side([(lib, 1), (gen, cores)], repeats=PAIR_REPEATS)
        f = features(lib)
        out[name] = {"ratio": t_lib / t_gen, "flops": f.flops, "bytes": f.read_bytes + f.write_bytes, "seconds": t_lib}
    return out


def _alloc_cost() -> float:
    """Seconds to take a 1 MB output block from svod's buffer pool and give it back (every
    kernel output above the pool's small-block size pays it once per run)."""
    from costmodels.measure import time_callable
    from svod.pool import POOL

    return time_callable(lambda: POOL.array((1 << 18,), np.float32), budget=0.05, target=5e-4).seconds
