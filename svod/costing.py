"""The cost-model contract shared by the search and `costmodels/`, and a placeholder
roofline model so planning works before calibration exists.

`CostModel.price(kernel, machine) -> Price(seconds, threads)`; the thread count is part
of the price (not of the kernel's content key) and travels on the Launch step.

>>> from svod.kernel_examples import softmax_kernel
>>> p = RooflineModel().price(softmax_kernel(4096, 4096), Machine.host())
>>> p.seconds > 0, p.threads in (1, 2)
(True, True)
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from svod.codegen.schedule import MM_ROWS, SMALL_FLOPS, direct_a, gemm_tiling
from svod.codegen.target import DEFAULT_CACHES, Target
from svod.ir import Ops
from svod.kernel import ACC, LOAD, VALID, Kernel, Plan
from svod.ops import complex_factors, weights


@dataclass(frozen=True)
class Price:
    seconds: float
    threads: int = 1


@dataclass(frozen=True)
class Machine:
    """What a cost model knows of the machine. Defaults are this project's reference
    machine: a 2-core AVX-512 x86-64 VM with ~16 GB/s DRAM bandwidth (re-measured;
    FACTS.md says 39 GB/s for the bare-metal Zen 5). `svod calibrate` replaces these."""

    name: str = "reference"
    cores: int = 2
    dram_bandwidth: float = 16e9  # bytes/s: np.copyto 14 GB/s, fused kernels 16.6 GB/s on the CI VM
    cache_bandwidth: float = 60e9  # bytes/s for working sets that fit the last-level cache
    llc_bytes: int = 32 << 20
    l2_bytes: int = 2 << 20
    flops_per_core: float = 32e9  # simple float ops/s per core (16-lane FMA units, not peak)
    launch_seconds: float = 2e-6  # one kernel call from a compiled graph
    thread_dispatch_seconds: float = 5e-6  # waking the worker pool
    vector_bits: int = 512

    @staticmethod
    def host() -> Machine:
        """This machine: its core count and SIMD width (the JIT's target: AVX-512 or
        AVX2 decides how many lanes a core's float throughput has)."""
        return _host_machine()


@functools.lru_cache(maxsize=1)
def _host_machine() -> Machine:
    bits = 512
    try:
        from svod.codegen.jit import host_target_info

        bits = int(host_target_info().get("vector_bits", 512))
    except Exception:  # noqa: BLE001 - no llvmlite: the reference machine's width
        pass
    return Machine(name="host", cores=os.cpu_count() or 1, vector_bits=bits,
                   flops_per_core=Machine.flops_per_core * bits / 512)


# Relative cost of one element of each op, in simple float ops, and the multiplier of a
# complex node (result or operand complex) at its parts' width: the op table's `weight` and
# `complex_factor` columns (svod.ops; docs/ops.md has their figures)
OP_WEIGHT: dict = weights()
COMPLEX_FACTOR: dict = complex_factors()


def complex_units(op, dtypes) -> tuple[float, int]:
    """(multiplier, itemsize of a lane) of a node whose result or operands have `dtypes`:
    (1, the widest itemsize) for real ones; complex ones count `COMPLEX_FACTOR` (2 for the
    part-by-part ops) at the parts' itemsize."""
    if any(d.kind == "c" for d in dtypes):
        return float(COMPLEX_FACTOR.get(op, 2)), max(d.real.itemsize for d in dtypes)
    return 1.0, max(d.itemsize for d in dtypes)


@runtime_checkable
class CostModel(Protocol):
    """Prices a kernel on a machine. Implementations: RooflineModel (here),
    costmodels.CalibratedModel, costmodels.MeasuredModel.

    A model may also price kernels in the context of their plan —
    `price_plan(plan, machine) -> list[Price]`, one per kernel, where what the other
    kernels leave in the caches counts (`costmodels.reuse`); `plan_prices` uses it when
    the model has it, else prices each kernel alone."""

    name: str

    def price(self, kernel: Kernel, machine: Machine) -> Price: ...

    def price_batch(self, kernels: Sequence[Kernel], machine: Machine) -> list[Price]: ...


def input_bytes_each(kernel: Kernel) -> tuple[int, ...]:
    """Bytes each input (by index) reads from memory once: a broadcast axis counts once,
    a masked (padded) border not at all, a chain of views at most its own size. A chain
    with a fully masked view reads nothing (every element is the pad value: the emitter
    loads nothing, `svod.codegen.schedule.Access.dead`)."""
    out = []
    for inp in kernel.inputs:
        if any(v.fully_masked for v in inp.view.views):
            out.append(0)
            continue
        v = inp.view.views[0]
        elems = 1
        for (_size, stride, lo, hi) in v.axes():
            if stride != 0:
                elems *= hi - lo
        if len(inp.view.views) > 1:
            elems = min(elems, inp.view.size)
        out.append(elems * inp.dtype.itemsize)
    return tuple(out)


def input_bytes(kernel: Kernel) -> int:
    """Bytes a kernel reads from memory once (`input_bytes_each`, summed)."""
    return sum(input_bytes_each(kernel))


def output_bytes(kernel: Kernel) -> int:
    total = 0
    for o in kernel.outputs:
        n = 1
        for s in o.shape:
            n *= s
        total += n * o.dtype.itemsize
    return total


def flop_count(kernel: Kernel) -> float:
    """Weighted element operations over the iteration space (per-row values per row)."""
    size = kernel.size
    if kernel.matmul is not None:
        mm = kernel.matmul
        batch = size // max(mm.m * mm.n, 1)
        return 2.0 * batch * mm.m * mm.n * mm.k + size * (len(kernel.nodes) - 1)
    total = 0.0
    for n in kernel.nodes:
        if n.op in (LOAD, VALID, ACC, Ops.CONST):
            continue
        w = OP_WEIGHT.get(n.op, 1)
        if n.dtype.kind == "c" or any(kernel.nodes[s].dtype.kind == "c" for s in n.src):
            factor, item = complex_units(n.op, [n.dtype] + [kernel.nodes[s].dtype for s in n.src])
            w *= factor * (2 if item == 8 else 1)
        elif n.dtype.itemsize == 8:
            w *= 2  # half the lanes
        total += w * size
    return total


class RooflineModel:
    """Placeholder: max(bytes / bandwidth, work / throughput) + launch overhead.

    Row-wise kernels re-read each row once per pass, from cache when a row fits in L2.
    Two threads when the kernel is large enough that the split pays for its dispatch.
    """

    name = "roofline"

    def price(self, kernel: Kernel, machine: Machine) -> Price:
        if kernel.matmul is not None:
            return price_matmul(kernel, machine)
        if kernel.library is not None:
            return price_library(kernel, machine)
        nbytes = input_bytes(kernel) + output_bytes(kernel)
        working = nbytes
        bw = machine.cache_bandwidth if working <= machine.llc_bytes else machine.dram_bandwidth
        mem = nbytes / bw
        if kernel.passes > 1:
            row = 1
            for a in kernel.reduce_axes:
                row *= kernel.shape[a]
            row_bytes = row * sum(i.dtype.itemsize for i in kernel.inputs)
            reread = input_bytes(kernel) * (kernel.passes - 1)
            mem += reread / (machine.cache_bandwidth if row_bytes <= machine.l2_bytes else machine.dram_bandwidth)
        work = flop_count(kernel)
        one = max(mem, work / machine.flops_per_core)
        threads = 1
        best = one
        if machine.cores > 1:
            # memory bandwidth does not scale with cores here (one core saturates DRAM)
            split = max(mem, work / (machine.flops_per_core * machine.cores)) + machine.thread_dispatch_seconds
            if split < one:
                threads, best = machine.cores, split
            elif one > 50 * machine.thread_dispatch_seconds:
                # NOTE: big kernels this model calls memory-bound still split: a DRAM-bound
                # kernel loses nothing on more cores, while compute the roofline
                # underestimates gains (docs/costmodels.md, "Threads in the roofline")
                threads = machine.cores
        return Price(best + machine.launch_seconds, threads)

    def price_batch(self, kernels: Sequence[Kernel], machine: Machine) -> list[Price]:
        return [self.price(k, machine) for k in kernels]


# ----------------------------------------------------------------------------- matmul
# The roofline prices the generated GEMM and the BLAS step at one rate per core, a
# multiple of `flops_per_core` (docs/costmodels.md: the measurements behind it); the
# GEMM's tiling (micro-tile padding, unit tiles, repacking) is the schedule's.
GEMM_FLOPS_PER_OP = 4.0  # generated GEMM flop/s per unit of `flops_per_core` (large shapes)
BLAS_FLOPS_PER_OP = 4.0  # the BLAS step, same unit (OpenBLAS uses every core by itself)
BLAS_CALL_SECONDS = 8e-6  # np.matmul through the library step: Python, checks, OpenBLAS wake-up
BLAS_BATCH_SECONDS = 1e-6  # numpy loops over batch matrices, one BLAS call each
GEMM_SETUP_SECONDS = 2e-6  # malloc of the packing buffers per slice of units


def gemm_target(machine: Machine) -> Target:
    """The codegen target `machine` describes, for the GEMM tiling its price assumes
    (`svod.codegen.schedule.gemm_tiling`): its vector width and cores, its L2 shared
    out per core, the default L1 (a `Machine` does not describe one)."""
    return Target(vector_bits=machine.vector_bits, l1=DEFAULT_CACHES[0], l2=machine.l2_bytes // max(1, machine.cores),
                  l3=machine.llc_bytes, workers=machine.cores)


def price_matmul(kernel: Kernel, machine: Machine) -> Price:
    """Matmul kernels: the generated GEMM (packing, padded micro-tiles, K blocks, fused
    epilogue, units over cores) or the BLAS step (per-call overhead, all cores)."""
    mm = kernel.matmul
    size = kernel.size
    batch = size // max(mm.m * mm.n, 1) if mm.m * mm.n else 0
    item = kernel.inputs[mm.a].dtype.itemsize
    width = 4 / item  # float64: half the lanes
    nbytes = input_bytes(kernel) + output_bytes(kernel)
    bw = machine.cache_bandwidth if nbytes <= machine.llc_bytes else machine.dram_bandwidth
    mem = nbytes / bw
    flops = 2.0 * batch * mm.m * mm.n * mm.k
    if mm.library:
        rate = BLAS_FLOPS_PER_OP * machine.flops_per_core * width * blas_relative_rate(machine, flops)
        cores = machine.cores if flops > SMALL_FLOPS else 1  # small products run on the calling thread
        gather = 0.0
        for i in (mm.a, mm.b):  # masked / chained operand views are gathered into a copy first
            v = kernel.inputs[i].view
            if len(v.views) > 1 or v.views[0].mask is not None:
                gather += 2 * v.size * item / bw
        sec = max(mem, flops / (rate * cores)) + gather + BLAS_CALL_SECONDS + BLAS_BATCH_SECONDS * batch
        return Price(sec + machine.launch_seconds, 1)
    tiling = gemm_tiling(batch, mm.m, mm.n, mm.k, item, gemm_target(machine), a_direct=direct_a(kernel))
    mr, nr, tiles_m, tiles_n = tiling.cfg.mr, tiling.cfg.nr, tiling.tiles_m, tiling.tiles_n
    # the micro-kernel always computes whole MR x NR tiles: padding is work
    padded = 2.0 * batch * (-(-mm.m // mr) * mr) * (-(-mm.n // nr) * nr) * mm.k
    units = max(1, batch * tiles_m * tiles_n)
    rate = GEMM_FLOPS_PER_OP * machine.flops_per_core * width
    if not kernel.inputs[mm.a].dtype.is_float:  # integer/bool matmuls: the simple tile loop
        padded, rate, tiles_m, tiles_n = flops, machine.flops_per_core * width, 1, 1
        units = max(1, batch * -(-mm.m // MM_ROWS))
    # packing is in the measured rate; repacking when there are many unit tiles is not:
    # every unit packs its A rows (unless it reads A in place) and B columns once (the BLAS
    # packs each once)
    a_packs = 0 if tiling.a_direct else mm.m * mm.k * (tiles_n - 1)
    pack = batch * (a_packs + mm.k * mm.n * (tiles_m - 1)) * item * 2 / machine.cache_bandwidth
    epi = 0.0
    for n in kernel.nodes:
        if n.op in (LOAD, VALID, ACC, Ops.CONST):
            continue
        epi += OP_WEIGHT.get(n.op, 1) * size / (machine.flops_per_core * width)
    work = padded / rate + pack + epi
    one = max(mem, work) + GEMM_SETUP_SECONDS
    threads = min(machine.cores, units)
    if threads > 1:
        per_thread = -(-units // threads) / units  # the busiest thread's share of the units
        split = max(mem, work * per_thread) + GEMM_SETUP_SECONDS + machine.thread_dispatch_seconds
        if split < one:
            return Price(split + machine.launch_seconds, threads)
    return Price(one + machine.launch_seconds, 1)


# ----------------------------------------------------------------------------- bare products
# A matmul with no elementwise epilogue runs as the BLAS step or as the generated GEMM; the
# lowering asks `bare_matmul_choice` (svod/lower/build.py), which prices both. Per core on
# the AVX-512 CI VM (bench/bench_matmul.py --products, thread CPU time, docs/codegen.md
# "Bare products"), the generated GEMM ran 1.05-1.21x numpy's OpenBLAS on products up to
# ~1e8 flops (128³, 256³, 512×256×512, 512×64×512, float32 and float64) and 0.94-1.00x on
# 2048×768×768; its padded micro-tiles cost it 6-10% where m pads badly (64×512×512). So
# on a host of at least `BARE_GEMM_MIN_BITS` the BLAS step's rate is `BLAS_CACHED_RATE` of
# the GEMM's up to `BLAS_CACHED_FLOPS`, equal above; the GEMM's price counts its padding
# and repacking. Narrower hosts were not measured: the BLAS step stays (the snapshot's
# reference host is AVX2).
BARE_GEMM_MIN_BITS = 512
BLAS_CACHED_RATE = 0.91  # BLAS per-core rate / the GEMM's up to BLAS_CACHED_FLOPS (1 / the median 1.10x)
BLAS_CACHED_FLOPS = float(1 << 28)
BARE_GEMM_MIN_FLOPS = SMALL_FLOPS  # below: the BLAS step (no JIT compile for a tiny product)


# Above BLAS_CACHED_FLOPS, since A is read in place (2026-11-28, the same per-core runs):
# 1.04-1.12x float32 (2048³ 1.07-1.09x, W4's products 1.08x and 1.12x, 2048×768×2304
# 1.04x), float64 2048³ 1.01x, 2048×768×768 1.05x: the BLAS step's rate is BLAS_LARGE_RATE
BLAS_LARGE_RATE = 0.97


def blas_relative_rate(machine: Machine, flops: float) -> float:
    """The BLAS step's per-core rate relative to the generated GEMM's unit rate (see above)."""
    if machine.vector_bits >= BARE_GEMM_MIN_BITS:
        return BLAS_CACHED_RATE if flops <= BLAS_CACHED_FLOPS else BLAS_LARGE_RATE
    return 1.0


def bare_matmul_choice(kernel: Kernel, machine: Machine | None = None) -> tuple[bool, str]:
    """(library, why) for a matmul kernel with no epilogue (`kernel.matmul` set, its flag
    ignored): True runs the BLAS step, False svod's generated GEMM. Deterministic for a
    host (its `Machine`) and the kernel's shapes and dtypes. The BLAS step when: the
    operands are not float32/float64 (numpy's matmul), ``SVOD_BARE_GEMM=0``, a
    matrix-vector product (BLAS gemv runs at memory bandwidth; the GEMM pads a row or
    column to a whole micro-tile), a product below `BARE_GEMM_MIN_FLOPS`, a host narrower
    than `BARE_GEMM_MIN_BITS` bits (not measured), or when it prices no dearer than the
    GEMM (`price_matmul` of both forms)."""
    import dataclasses

    machine = machine or Machine.host()
    mm = kernel.matmul
    dt = kernel.inputs[mm.a].dtype
    batch = kernel.size // max(mm.m * mm.n, 1) if mm.m * mm.n else 0
    flops = 2.0 * batch * mm.m * mm.n * mm.k
    if dt.name not in ("float32", "float64") or kernel.inputs[mm.b].dtype != dt:
        return True, f"{dt.name} operands: numpy's matmul"
    if os.environ.get("SVOD_BARE_GEMM", "1") in ("0", "false", "False"):
        return True, "SVOD_BARE_GEMM=0"
    if mm.m == 1 or mm.n == 1:
        return True, "matrix-vector product: BLAS gemv at memory bandwidth"
    if flops < BARE_GEMM_MIN_FLOPS:
        return True, f"{flops:.3g} flops < {BARE_GEMM_MIN_FLOPS:.3g}: BLAS, no GEMM to compile"
    if machine.vector_bits < BARE_GEMM_MIN_BITS:
        return True, f"{machine.vector_bits}-bit host: the GEMM is not measured faster than BLAS here"
    gemm = dataclasses.replace(kernel, matmul=dataclasses.replace(mm, library=False))
    lib = dataclasses.replace(kernel, matmul=dataclasses.replace(mm, library=True))
    pg, pb = price_matmul(gemm, machine).seconds, price_matmul(lib, machine).seconds
    if pg < pb:
        return False, f"generated GEMM priced {pg * 1e6:.1f}us < BLAS {pb * 1e6:.1f}us"
    return True, f"BLAS priced {pb * 1e6:.1f}us <= generated GEMM {pg * 1e6:.1f}us"


def is_bare_matmul(kernel: Kernel) -> bool:
    """Whether `kernel` is a product alone (no epilogue): the kernels `bare_matmul_choice`
    decides between the BLAS step and the generated GEMM."""
    return kernel.matmul is not None and kernel.attention is None and getattr(kernel, "mlp", None) is None and \
        all(n.op == ACC for n in kernel.nodes) and len(kernel.outputs) == 1


def bare_matmul_lines(plan: Plan, machine: Machine | None = None) -> list[str]:
    """One line per bare product of `plan`: which step runs it and why (`svod.explain`)."""
    out = []
    for k in plan.kernels:
        if is_bare_matmul(k):
            mm = k.matmul
            _, why = bare_matmul_choice(k, machine)
            step = "BLAS step" if mm.library else "generated GEMM"
            out.append(f"{k.name}: {mm.m}x{mm.k}x{mm.n} {k.inputs[mm.a].dtype.name}: {step} ({why})")
    return out


LIBRARY_CALL_SECONDS = 5e-6  # a library step: Python, operand views, numpy's checks


def price_library(kernel: Kernel, machine: Machine) -> Price:
    """A library step (`Kernel.library`, numpy's code on one thread of ours): its bytes,
    its estimated flops (`svod.library.work`) at the scalar rate, a call's overhead. Every
    variant of a plan has the same library steps (their operands are always materialised),
    so this only has to be of the right order."""
    from svod.library import work

    nbytes = input_bytes(kernel) + output_bytes(kernel)
    bw = machine.cache_bandwidth if nbytes <= machine.llc_bytes else machine.dram_bandwidth
    flops = work(kernel.library.fn, kernel.library.params, [i.view.shape for i in kernel.inputs])
    sec = max(nbytes / bw, flops / machine.flops_per_core) + LIBRARY_CALL_SECONDS
    return Price(sec + machine.launch_seconds, 1)


KERNEL_TIE = 0.01  # variants priced within this (relative) of the cheapest count as a tie


def fewer_kernels_on_ties(ranked: Sequence, seconds=lambda v: v.seconds, kernels=lambda v: len(v.plan.kernels)) -> list:
    """`ranked` (cheapest first) with the variant of fewest kernels among those priced
    within `KERNEL_TIE` of the cheapest moved to the front. A 1% difference is below any
    model's resolution, and each extra kernel boundary costs what models under-price
    (a launch, a pass over memory, a thread hand-off): on a tie, fewer kernels is the
    better bet.

    >>> from types import SimpleNamespace as V
    >>> [v.k for v in fewer_kernels_on_ties([V(seconds=1.0, k=6), V(seconds=1.005, k=3), V(seconds=1.2, k=1)],
    ...                                     kernels=lambda v: v.k)]
    [3, 6, 1]
    """
    ranked = list(ranked)
    if len(ranked) < 2:
        return ranked
    limit = seconds(ranked[0]) * (1 + KERNEL_TIE)
    tied = [i for i, v in enumerate(ranked) if seconds(v) <= limit]
    first = min(tied, key=lambda i: (kernels(ranked[i]), seconds(ranked[i])))
    return [ranked[first]] + ranked[:first] + ranked[first + 1:]


def plan_prices(plan: Plan, model: CostModel | None = None, machine: Machine | None = None) -> list[Price]:
    """Prices of `plan`'s kernels: in the plan's context when the model prices plans
    (`price_plan`), else each kernel alone."""
    model = model or RooflineModel()
    machine = machine or Machine.host()
    in_plan = getattr(model, "price_plan", None)
    if in_plan is not None:
        return in_plan(plan, machine)
    return model.price_batch(list(plan.kernels), machine)


def plan_seconds(kernels: Sequence[Kernel] | Plan, model: CostModel | None = None,
                 machine: Machine | None = None) -> float:
    """Total price of a plan (each kernel in a plan runs once); bare kernels are priced
    alone, a `Plan` in its context (`plan_prices`)."""
    if isinstance(kernels, Plan):
        return sum(p.seconds for p in plan_prices(kernels, model, machine))
    model = model or RooflineModel()
    machine = machine or Machine.host()
    return sum(p.seconds for p in model.price_batch(list(kernels), machine))
