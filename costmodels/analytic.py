"""The calibrated analytic model: a kernel's time from its counted features and the
machine profile's measured constants.

    seconds(t) = launch + dispatch[t > 1] + alloc[output above the pool's small size]
                 + units * unit / t + max(M, C) + overlap * min(M, C)
    a BLAS step: launch + library_step + max(flops / BLAS rate, its bytes)
    M = memory(t) + gathers / speedup(t),   C = compute / speedup(t)

- memory: bytes read and written on `t` threads, at the bandwidth measured for the
  cache they come from (L1, L2, L3 or DRAM). In a plan (`price_plan`) each buffer access
  is priced at its reach — the bytes the program touched since the buffer's previous
  access (`costmodels.reuse`); out of context, at the kernel's working set times a
  footprint factor. Where the profile has the caches' hold curve, a second pass prices
  the share of each access that its age (seconds since the previous access, from the
  first pass's times: `costmodels.reuse.ages`) has evicted at DRAM bandwidth. Row-wise
  kernels whose rows do not fit the L2 re-read them once per extra pass;
- gathers: loads that do not stream (transposed, reversed, masked, chained views) at
  their measured extra cost for the working set — latency that overlaps compute; the
  transposed and chained ones wait on a miss each, and the kernel's contiguous input
  streams run meanwhile (hidden up to the gathers' time);
- compute: every op evaluation (counted as the codegen emits them) at its measured
  per-element cost (inline math next to a vector-library call at the measured
  slowdown), reductions at the cost measured for the row length (columns: by working
  set along the read-bandwidth curve, sibling columns sharing the read, scaled across
  threads like streaming; beside an argmax: scalar), matmul tiles at the measured flop
  rate (a strided B operand: the same rate plus its packing, at the measured gather cost
  per packed element; on all cores at the GEMM's own measured 1024^3 scaling), the BLAS
  step at its rate for the product's arithmetic intensity (or its bytes, whichever is
  slower; a transposed B at the measured slow-down of its packing) plus its fixed cost
  in a graph program (`library_step`: the Python call between native segments,
  measured per step against the same products as generated GEMMs; tens of µs, which
  decides small products: docs/costmodels.md);
- threads: 1 or all cores, whichever is cheaper (the price carries the choice).

>>> from svod.costing import Machine
>>> from svod.kernel_examples import softmax_kernel
>>> from costmodels.profile import reference
>>> p = CalibratedModel(reference()).price(softmax_kernel(1024, 1024), Machine.host())
>>> p.seconds > 0 and p.threads >= 1
True
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from costmodels.features import Features, features
from costmodels.profile import Profile
from costmodels.reuse import Access
from svod.costing import Machine, Price, price_library
from svod.kernel import Kernel, Plan


def _interp_log(points: dict, x: float, default: float) -> float:
    """Piecewise-linear in log(x) over {str(x): y} points, flat beyond them."""
    if not points:
        return default
    pts = sorted((float(k), float(v)) for k, v in points.items())
    lx = math.log(max(x, 1.0))
    xs = [math.log(max(a, 1.0)) for a, _ in pts]
    if lx <= xs[0]:
        return pts[0][1]
    if lx >= xs[-1]:
        return pts[-1][1]
    for i in range(1, len(xs)):
        if lx <= xs[i]:
            w = (lx - xs[i - 1]) / (xs[i] - xs[i - 1])
            return pts[i - 1][1] * (1 - w) + pts[i][1] * w
    return pts[-1][1]


# loads that do not stream: the transposed and chained ones wait on a cache miss each (latency:
# the kernel's contiguous streams run meanwhile: x.T + y costs what x.T alone does, docs/ops.md),
# reversed and masked ones are slower vector loads
GATHERS = ("strided", "chain", "reverse", "masked")
LATENCY_BOUND = ("strided", "chain")
OTHER_GATHERS = ("reverse", "masked")

# Bumped whenever the formulas change (it lives in costmodels/version.py: the plan-cache
# key needs it without this module)
from costmodels.version import MODEL_VERSION  # noqa: E402, F401


class CalibratedModel:
    """`svod.costing.CostModel` over a machine `Profile` (default: `costmodels.profile()`)."""

    name = "calibrated"

    def __init__(self, profile: Profile | None = None):
        if profile is None:
            from costmodels.profile import profile as current

            profile = current()
        self.profile = profile
        self._cache: dict[str, Price] = {}
        self._in_plan: dict[tuple, Price] = {}  # (kernel key, its accesses in a plan) -> price
        self._hold_points: tuple[list[float], list[float]] | None = None  # the hold curve, sorted

    # ---- the protocol
    def price(self, kernel: Kernel, machine: Machine | None = None) -> Price:
        key = kernel.key()
        p = self._cache.get(key)
        if p is None and kernel.library is not None:  # numpy's code: the core model's estimate
            p = price_library(kernel, machine or Machine.host())
        if p is None:
            p = self.price_features(features(kernel))
            if len(self._cache) > 200_000:
                self._cache.clear()
            self._cache[key] = p
        return p

    def price_batch(self, kernels: Sequence[Kernel], machine: Machine | None = None) -> list[Price]:
        return [self.price(k, machine) for k in kernels]

    def price_plan(self, plan: Plan, machine: Machine | None = None) -> list[Price]:
        """Prices of `plan`'s kernels as they run in it: each buffer access at the
        bandwidth of its reach in the program (`costmodels.reuse`) — what the other
        kernels touched since — instead of the kernel's own working set times the
        footprint factor (`price`, for a kernel out of context)."""
        from costmodels.reuse import ages, plan_accesses

        accesses = plan_accesses(plan)
        out = self._priced(plan, accesses)
        if self.profile.get("cache_hold"):  # what the caches still hold decays with time too
            timed = ages(accesses, [self._aged_seconds(p, k) for p, k in zip(out, plan.kernels)])
            accesses = [tuple(dataclasses.replace(a, age=float(f"{t:.2g}")) for a, t in zip(acc, ts))
                        for acc, ts in zip(accesses, timed)]
            out = self._priced(plan, accesses)
        return out

    def _priced(self, plan: Plan, accesses: Sequence[tuple[Access, ...]]) -> list[Price]:
        out = []
        for k, acc in zip(plan.kernels, accesses):
            key = (k.key(), tuple((a.nbytes, a.reach, a.write, a.age) for a in acc))
            p = self._in_plan.get(key)
            if p is None and k.library is not None:
                p = self.price(k)
            if p is None:
                p = self.price_features(features(k), acc)
                if len(self._in_plan) > 200_000:
                    self._in_plan.clear()
                self._in_plan[key] = p
            out.append(p)
        return out

    def _aged_seconds(self, price: Price, kernel: Kernel) -> float:
        """The hold curve's idle seconds `kernel`'s run is worth: its work at `aging`, a
        library step's fixed Python side (`Profile.library_step_seconds`) as idle time."""
        fixed = self.profile.library_step_seconds if kernel.matmul is not None and kernel.matmul.library else 0.0
        fixed = min(fixed, price.seconds)
        return fixed + (price.seconds - fixed) * self.aging(kernel)

    def aging(self, kernel: Kernel) -> float:
        """How many seconds of the hold curve's idle waiting one second of `kernel` is
        worth: calibrate's matmul_age_factor for a product (its packing streams evict the
        caches faster than idle time; docs/ops.md has the figures), at most
        `stepprobes.AGING_MAX`, else 1."""
        mm = kernel.matmul
        if mm is None:
            return 1.0
        return float((self.profile.get("matmul_age_factor") or {}).get("blas" if mm.library else "gemm", 1.0))

    def hold(self, age: float) -> float:
        """The share of a buffer's lines still cached `age` seconds after it was last
        touched, with nothing of ours touching memory in between (calibrate's cache-hold
        probe; 1 for profiles without it). On a shared VM the caches are shared with
        other guests — the L3 with other cores, L1 and L2 with the SMT sibling — and what
        they touch evicts ours at their pace, not ours (docs/ops.md has figures)."""
        pts = self._hold_points
        if pts is None:  # (ages, shares) from (0, 1): all is held right after a touch
            curve = sorted((float(t), float(h)) for t, h in (self.profile.get("cache_hold") or {}).items())
            pts = self._hold_points = ([0.0] + [t for t, _ in curve], [1.0] + [h for _, h in curve])
        if len(pts[0]) < 2 or age <= 0.0:
            return 1.0
        return float(np.interp(age, *pts))  # linear between the measured ages, flat past the last

    # ---- the model
    def price_features(self, f: Features, accesses: Sequence[Access] | None = None) -> Price:
        """The cheaper of one thread and all cores; `accesses`: the kernel's buffer
        accesses in a plan (`costmodels.reuse`), else it is priced out of context."""
        cores = max(1, self.profile.cores)
        best = Price(self.seconds(f, 1, accesses), 1)
        if cores > 1 and f.units > 1 and not f.library:
            t = self.seconds(f, cores, accesses)
            if t < best.seconds:
                best = Price(t, cores)
        return best

    def seconds(self, f: Features, threads: int, accesses: Sequence[Access] | None = None) -> float:
        """Predicted seconds of a kernel with features `f` on `threads` threads (in a
        plan when its `accesses` are given)."""
        p = self.profile
        ws = self.effective_working_set(f, accesses)
        te = max(1, min(threads, f.units))
        over = p.launch_seconds + (p.dispatch_seconds if te > 1 else 0.0)
        if f.write_bytes > (64 << 10):  # an output block from the buffer pool, every run
            over += p.get("alloc_seconds", 0.0)
        if f.library:  # the BLAS step splits itself over the pool (svod.codegen.blas);
            # small-k products are bound by their bytes; a transposed B costs OpenBLAS's
            # packing from the other layout (calibrate's blas_trans pair)
            flops = f.flops * (p.get("blas_trans_factor", 1.0) if f.matmul_strided else 1.0)
            over += p.library_step_seconds
            return over + max(flops / self._blas_rate(f), self.memory(f, 2, accesses))
        speed = 1.0 if te == 1 else self._speedup(te)
        latency = self.gathers(f, ws, LATENCY_BOUND) / speed
        mem = self.memory(f, te, accesses) + self.gathers(f, ws, OTHER_GATHERS) / speed + latency
        if latency and f.contig_read_bytes:  # streams run while the gathers wait on their misses
            mem -= min(latency, f.contig_read_bytes * self._stream_costs(1 if te == 1 else 2, ws)[0])
        # a column reduction's cost is mostly its strided reads: more threads help it as
        # much as they help streaming at its working set, not as much as they help compute
        cspeed = min(speed, self._stream_scaling(f, ws)) if f.column and te > 1 else speed
        if f.flops and te > 1:  # matmul tiles: the GEMM's own measured scaling when there is one
            cspeed = self._gemm_scaling(te) or cspeed
        comp = self.compute(f, ws) / cspeed
        units = f.units * p.unit_seconds / te
        epi = f.epilogue_read_bytes * p.get("epilogue_seconds", 0.0) * max(1, p.cores) / te if f.flops else 0.0
        return over + units + max(mem, comp) + p.get("overlap", 0.0) * min(mem, comp) + epi

    def _stream_scaling(self, f: Features, ws: float | None = None) -> float:
        ws = ws or self.effective_working_set(f)
        return max(1.0, self.profile.bandwidth_at("read2", ws) / self.profile.bandwidth_at("read1", ws))

    def _column_cost(self, base: str, f: Features, ws: float | None = None) -> tuple[float, float]:
        """(seconds per element of a column reduction at the kernel's working set, the part
        of it that is the read). The two calibrated points (L2-sized and DRAM-sized) are
        joined along the measured read-bandwidth curve, so an L3-resident table costs
        close to the L2 figure; the read part is shared by sibling column reductions."""
        p = self.profile
        table = p.get("column_seconds", {}).get("MAX" if base == "MAXR" else "SUM", {})
        red = p.get("reduce_seconds", {})
        ws = ws or self.effective_working_set(f)
        if len(table) < 2:
            return _interp_log(table, ws, red.get("SUM", 5e-11)), 0.0
        (s_lo, c_lo), (s_hi, c_hi) = sorted((float(k), float(v)) for k, v in table.items())[::len(table) - 1]
        inv = [1.0 / p.bandwidth_at("read1", x) for x in (s_lo, s_hi, ws)]
        w = min(1.0, max(0.0, (inv[2] - inv[0]) / max(inv[1] - inv[0], 1e-30)))
        cost = c_lo + (c_hi - c_lo) * w
        return cost, min(4.0 * inv[2], cost)  # float32 elements: 4 bytes read each

    def _gemm_scaling(self, te: int) -> float | None:
        """Speed-up of the generated GEMM on `te` threads: its 1024^3 all-core rate over the
        one-thread tile rate (calibrate's matmul:native2:1024 and matmul:native), spread
        linearly over the threads; None for profiles without the probe. It may pass the
        core count a little (up to 1.25x): big products also run faster per core than the
        small L2-sized probe (docs/ops.md)."""
        mm = self.profile.get("matmul_flops", {})
        two, one = mm.get("native2:1024"), mm.get("native")
        if not two or not one:
            return None
        cores = max(1, self.profile.cores)
        full = min(1.25 * cores, max(1.0, two / one))
        return 1.0 + (full - 1.0) * (te - 1) / max(cores - 1, 1)

    def _speedup(self, te: int) -> float:
        s = self.profile.compute_scaling
        return 1.0 + (s - 1.0) * (te - 1) / max(self.profile.cores - 1, 1)

    def _blas_rate(self, f: Features) -> float:
        table = self.profile.get("blas_flops")
        if table:  # by arithmetic intensity: flops per byte read and written
            return _interp_log(table, f.flops / max(f.working_set, 1), 1e11)
        mm = self.profile.get("matmul_flops", {})
        small, big = mm.get("blas:256", 5e10), mm.get("blas:1024", 1e11)
        # the BLAS rate grows with the problem: interpolate in log(flops) between the probes
        return _interp_log({str(2.0 * 256 ** 3): small, str(2.0 * 1024 ** 3): big}, f.flops, big)

    def effective_working_set(self, f: Features, accesses: Sequence[Access] | None = None) -> float:
        """The cache the kernel's data needs: in a plan, the farthest reach of its
        accesses (`costmodels.reuse`); out of context, its bytes times the profile's
        footprint factor (other live values compete for the caches: a 16 MB kernel does
        not get the L3 to itself)."""
        if accesses:
            return max(max(a.reach for a in accesses), 1.0)
        return max(f.working_set, 1) * self.profile.get("footprint_factor", 1.0)

    def _far(self) -> float:
        """A working set past every cache: the bandwidth curves' largest point."""
        pts = self.profile.bandwidth.get("read1") or [[256 * (1 << 20), 0.0]]
        return float(max(p[0] for p in pts))

    def _stream_costs(self, t: int, ws: float) -> tuple[float, float]:
        """(seconds per byte read, per byte written) streaming over working set `ws` on
        one (`t` 1) or all cores (`t` 2)."""
        p = self.profile
        c_read = 1.0 / p.bandwidth_at(f"read{t}", ws)
        c_copy = 1.0 / p.bandwidth_at(f"copy{t}", ws)
        return c_read, max(2.0 * c_copy - c_read, 0.25 * c_copy)

    def memory(self, f: Features, te: int, accesses: Sequence[Access] | None = None) -> float:
        """Seconds of streaming the kernel's bytes (no gathers, no compute): in a plan
        each access at the bandwidth of its reach, else all of them at the effective
        working set's."""
        p = self.profile
        ws = self.effective_working_set(f, accesses)
        t = 1 if te == 1 else 2
        c_read, c_write = self._stream_costs(t, ws)
        if accesses:  # each access at its reach's bandwidth, the lines its age evicted from DRAM
            far = self._stream_costs(t, self._far())
            costs = []
            for a in accesses:
                near, h = self._stream_costs(t, a.reach), self.hold(a.age)
                costs.append((a, near if h >= 1.0 else tuple(h * x + (1.0 - h) * y for x, y in zip(near, far))))
            writes = sum(a.nbytes * c[1] for a, c in costs if a.write)
            reads = sum(a.nbytes * c[0] for a, c in costs if not a.write)
        else:
            writes, reads = f.write_bytes * c_write, f.read_bytes * c_read
        if f.column:
            return writes  # the column tables hold the whole cost of the reads
        sec = reads + writes
        if f.passes > 1 and f.row_bytes:
            # later passes re-read the row: from L1/L2 when it fits, else from further away
            if f.row_bytes * 2 > p.get("l2_bytes", 1 << 20):
                sec += (f.passes - 1) * f.read_bytes * c_read
            # streaming from DRAM, a row-wise kernel stops and goes per row (its later
            # passes issue no new reads): measured against a plain stream
            factor = p.get("rowwise_dram_factor", 1.0)
            if factor > 1.0:
                l3 = p.get("l3_bytes", 32 << 20)
                w = min(1.0, max(0.0, math.log(ws / (l3 / 4)) / math.log(4))) if ws > l3 / 4 else 0.0
                sec *= 1.0 + (factor - 1.0) * w
        return sec

    def gathers(self, f: Features, ws: float | None = None, patterns: Sequence[str] = GATHERS) -> float:
        """Single-thread seconds of loads that do not stream (`patterns` of them):
        transposed, reversed, masked or chained reads (latency that overlaps compute, not
        bandwidth)."""
        acc = self.profile.get("access_seconds", {})
        ws = ws or self.effective_working_set(f)
        sec = 0.0
        for pat, n in f.access.items():
            if pat not in patterns:
                continue
            key = {"strided": "transpose", "reverse": "reverse", "masked": "masked", "chain": "chain"}.get(pat)
            if key is None or not n:
                continue
            if key == "masked" and f.reduce_elems and "masked_reduce" in acc:
                key = "masked_reduce"  # inside a reduction loop a masked load does not vectorise
            table = acc.get(key) or (acc.get("pad") if key == "masked" else None) or {}
            # a transpose costs by the reach of its inner loop, not by the tensor's size: the
            # calibration's square transposes of n^2 elements span half their working set
            x = 2.0 * f.strided_span if key == "transpose" and f.strided_span else ws
            sec += n * max(_interp_log(table, x, 0.0), 0.0)
        return sec

    def compute(self, f: Features, ws: float | None = None) -> float:
        """Single-thread seconds of the work (ops, reductions, matmul tiles)."""
        p = self.profile
        ops = p.op_seconds
        alu = ops.get("ALU", 2e-11)
        sec = 0.0
        inline = 0.0  # math around a vector-library call runs slower (values spilled across it)
        has_arg = any(c.startswith("RED_ARG") for c in f.ops)
        col_read = 0.0  # sibling column reductions stream their rows once
        for cls, n in f.ops.items():
            if cls.startswith("RED_"):
                if f.column:
                    op = cls[4:]
                    cost, read = self._column_cost(op[:-2] if op.endswith("64") else op, f, ws)
                    wide = 2.0 if op.endswith("64") else 1.0
                    sec += n * wide * (cost - read)
                    col_read = max(col_read, n * wide * read)
                    continue
                sec += n * self._reduce_cost(cls[4:], f, has_arg)
                continue
            c = ops.get(cls)
            if c is None:
                base = cls[:-2] if cls.endswith("64") else cls
                c = ops.get(base, alu) * (p.get("f64_factor", 3.0) if cls.endswith("64") else 1.0)
            if cls in f.calls:
                sec += n * c
            else:
                inline += n * c
        sec += col_read + inline * (p.get("call_mix", 1.0) if f.calls else 1.0)
        if f.flops and not f.library:
            mm = p.get("matmul_flops", {})
            pack = p.get("pack_strided_seconds")
            if f.matmul_strided and pack is not None and f.b_packed:  # the tiles run as fast; packing gathers
                sec += f.flops / mm.get("native", 2e10) + f.b_packed * pack
            else:
                rate = mm.get("nativeT", mm.get("native", 2e10) / 8) if f.matmul_strided else mm.get("native", 2e10)
                sec += f.flops / rate
        return sec

    def _reduce_cost(self, op: str, f: Features, has_arg: bool = False) -> float:
        p = self.profile
        red = p.get("reduce_seconds", {})
        base = op[:-2] if op.endswith("64") else op
        wide = 2.0 if op.endswith("64") else 1.0
        if has_arg and base != "ARG":
            return wide * red.get("SCALAR", red.get("ARG", 1e-9) / 2)  # the argmax loop does not vectorise
        c = red.get(base, red.get("SUM", 5e-11))
        short = p.get("short_row_seconds", {})  # extra per element of short rows (vector tails)
        if short and base != "ARG":
            c += max(_interp_log(short, f.row_len, 0.0), 0.0)
        return c * wide
