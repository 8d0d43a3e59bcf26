"""`svod calibrate`: measure the calibrated model's constants on this machine.

Every probe is a small svod program (built with Tensors, planned by the greedy planner,
compiled by the real codegen) timed with `costmodels.measure.time_kernel`; the
constants are read off the timings:

- **bandwidth** per working-set size (L1/L2, L3, DRAM), for reads (a row sum) and for
  read+write streams (x + 1), on one thread and on all cores;
- **per-op cost** of every op class (each transcendental on its own, division, sqrt,
  cheap ALU ops, float64 variants, reductions), from kernels applying the op K times
  to cache-resident data minus the same kernel without it;
- **access patterns**: transposed (strided) reads, masked (padded) reads, chains of
  views (reshape after permute), broadcasts;
- **overheads**: per work unit (row), per kernel in a graph program (launch), per
  library (BLAS) step in a graph program besides its flops (the Python call between
  native segments), waking the thread pool (dispatch), and the efficiency of compute on
  all cores;
- **matmul** throughput of the generated tiles (one thread, and at 1024^3 on every
  core) and of the BLAS step (which runs on the same pool: `svod.codegen.blas`); like
  every probe, at its fastest round. What the search decides between is measured side
  by side: the BLAS step's rate curve is the GEMM's all-core rate over the two's time
  ratio at each BLAS probe product, and its slow-down with a transposed B is the same
  product timed both ways.

`calibrate(progress=True, budget=60)` returns the `Profile` and stores it
(`costmodels.profile.save`); `costmodels.digest.summary` describes one.
"""

from __future__ import annotations

import functools
import operator
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from costmodels.features import features
from costmodels.measure import Timing, time_kernel
from costmodels.profile import PROFILE_FORMAT, Profile
from costmodels.stepprobes import (
    _alloc_cost,
    _blas_against_gemm,
    _blas_probe_kernels,
    _blas_transposed_cost,
    _epilogue_cost,
    _held,
    _launch_cost,
    _library_step_cost,
    _matmul_aging,
    _matmul_kernel,
    _seconds,
    aging_factor,
    kernels_of,
    one_kernel,
)
from svod.ops import TABLE, Ops

KIB, MIB = 1 << 10, 1 << 20
L1_PROBE = 16 * KIB  # the L1-resident bandwidth probe: W7-sized kernels (1,000 floats in, 1,000 out)


@dataclass
class Probe:
    name: str
    build: Callable[[], object]  # -> list[Kernel] (the greedy plan's kernels)
    threads: int = 1
    budget: float = 0.2


# ----------------------------------------------------------------------------- probe programs


def _add1(x):
    return x + 1.0


def _rowsum(x):
    import svod

    return svod.sum(x, axis=-1)


def _colsum(x):
    import svod

    return svod.sum(x, axis=0)


def _summed(k: int, term):
    """sum_j term(x, j) for j < k: k applications to distinct values (no CSE)."""
    return lambda x: functools.reduce(operator.add, (term(x, j) for j in range(k)))


def _repeat(op: str, k: int):
    """sum_j op(x * c_j): the probe of a feature class runs its namesake op (svod.ops),
    ROUND a floor, ALU four cheap ops; NONE only the scaling and the sum."""
    import svod

    def term(x, j):
        v = x * (1.0 + 0.01 * j)
        math_fn = TABLE[Ops[op]].math if op in Ops.__members__ else None
        if math_fn is not None:
            return getattr(svod, math_fn)(v)
        if op == "POW":
            return v ** (1.5 + 0.01 * j)
        if op == "DIV":
            return (1.0 + 0.01 * j) / v
        if op == "ALU":
            return svod.maximum(v * 0.5 + 0.25, 0.75) - 0.125  # 4 cheap ops
        return svod.floor(v) if op == "ROUND" else v

    return _summed(k, term)


def _mix(k: int):
    """sum_j exp(tanh(x * c_j)): the TANH probe with an inline exp after each call."""
    import svod

    return _summed(k, lambda x, j: svod.exp(svod.tanh(x * (1.0 + 0.01 * j))))


def _repeat_int(op: str, k: int):
    def term(x, j):
        v = x + (j + 1)
        return v // (j + 3) if op == "IDIV" else (v % (j + 3) if op == "MOD" else v * (j + 2))

    return _summed(k, term)


OPS_F32 = ("EXP", "LOG", "SQRT", "SIN", "COS", "TANH", "ERF", "POW", "DIV", "ALU", "ROUND")
OPS_F64 = ("EXP", "LOG", "TANH", "ERF", "DIV", "ALU")
OP_ELEMS = 64 * 1024  # 256 KB of float32: L2-resident
OP_REPEAT = 4


def probes(quick: bool = False) -> list[Probe]:
    """Every probe `calibrate` runs, in order."""
    import svod

    out: list[Probe] = []
    # working sets: L1 (one thread only: a 16 KiB kernel is one unit, never split), L2, L3, DRAM
    sizes = [L1_PROBE, 256 * KIB, 1 * MIB, 4 * MIB, 12 * MIB, 24 * MIB, 48 * MIB, 96 * MIB, 256 * MIB]
    if quick:
        sizes = [1 * MIB, 32 * MIB, 96 * MIB]
    for ws in sizes:
        n = ws // 8  # float32 in + float32 out
        rows = max(ws // 4 // 1024, 1)
        for t in ((1,) if ws <= L1_PROBE else (1, 2)):
            out.append(Probe(f"copy:{ws}:{t}", lambda n=n: [one_kernel(_add1, (n,))], t))
            out.append(Probe(f"read:{ws}:{t}", lambda r=rows: [one_kernel(_rowsum, (r, 1024))], t))
    ops32 = OPS_F32 if not quick else ("EXP", "DIV", "ALU", "TANH")
    out.append(Probe("op:NONE:f32", lambda: [one_kernel(_repeat("NONE", OP_REPEAT), (OP_ELEMS,))]))
    for op in ops32:
        out.append(Probe(f"op:{op}:f32", lambda op=op: [one_kernel(_repeat(op, OP_REPEAT), (OP_ELEMS,))]))
    if not quick:
        out.append(Probe("op:NONE:f64", lambda: [one_kernel(_repeat("NONE", OP_REPEAT), (OP_ELEMS,),
                                                            dtype=np.float64)]))
        for op in OPS_F64:
            out.append(Probe(f"op:{op}:f64", lambda op=op: [one_kernel(_repeat(op, OP_REPEAT), (OP_ELEMS,),
                                                                       dtype=np.float64)]))
        out.append(Probe("op:NONE:i32", lambda: [one_kernel(_repeat_int("MUL", OP_REPEAT), (OP_ELEMS,),
                                                            dtype=np.int32)]))
        for op in ("IDIV", "MOD"):
            out.append(Probe(f"op:{op}:i32", lambda op=op: [one_kernel(_repeat_int(op, OP_REPEAT), (OP_ELEMS,),
                                                                       dtype=np.int32)]))
    # a vector-library call in a loop makes the inline math around it slower (spills)
    out.append(Probe("mix:TANH_EXP:f32", lambda: [one_kernel(_mix(OP_REPEAT), (OP_ELEMS,))]))
    # reductions: the row-length sweep (short rows miss the vector loop), max, argmax, columns
    for cols in ROW_LENGTHS if not quick else (8, 64, 1024):
        out.append(Probe(f"rows:{cols}", lambda c=cols: [one_kernel(_rowsum, (RED_ELEMS // c, c))]))
    out.append(Probe("rowmax:1024", lambda: [one_kernel(lambda x: svod.max(x, axis=-1), (RED_ELEMS // 1024, 1024))]))
    out.append(Probe("argmax:1024", lambda: [one_kernel(lambda x: svod.argmax(x, axis=-1),
                                                        (RED_ELEMS // 1024, 1024))]))
    out.append(Probe("argmaxmax:1024", lambda: [one_kernel(lambda x: (svod.argmax(x, axis=-1), svod.max(x, axis=-1)),
                                                           (RED_ELEMS // 1024, 1024))]))
    # column reductions (sum(x, axis=0)): cache-resident and streaming from DRAM
    for rows, tag in ((RED_ELEMS // 256, "l2"), (4096, "dram")):
        cols = 256 if tag == "l2" else 4096
        out.append(Probe(f"colsum:{tag}", lambda r=rows, c=cols: [one_kernel(_colsum, (r, c))]))
        out.append(Probe(f"colmax:{tag}", lambda r=rows, c=cols: [one_kernel(lambda x: svod.max(x, axis=0), (r, c))]))
    out.append(Probe("rowsum:dram", lambda: [one_kernel(_rowsum, (4096, 4096))]))
    # access patterns, L2-resident and L3/DRAM-sized, against the plain 2-D kernel
    for n in (256, 2048):
        out.append(Probe(f"plain2d:{n}", lambda n=n: [one_kernel(lambda x: x + 1.0, (n, n))]))
        out.append(Probe(f"transpose:{n}", lambda n=n: [one_kernel(lambda x: x.T + 1.0, (n, n))]))
        out.append(Probe(f"reverse:{n}", lambda n=n: [one_kernel(lambda x: svod.flip(x, axis=1) + 1.0, (n, n))]))
        out.append(Probe(f"masked:{n}", lambda n=n: [one_kernel(lambda x, y: svod.concat([x, y], axis=1) + 1.0,
                                                                (n, n // 2), (n, n // 2))]))
        out.append(Probe(f"chain:{n}", lambda n=n: [one_kernel(lambda x: x.T.reshape((n // 2, 2 * n)) + 1.0,
                                                               (n, n))]))
        # a masked load inside a reduction loop does not vectorise as it does elementwise
        out.append(Probe(f"plainsum:{n}", lambda n=n: [one_kernel(lambda x: svod.sum(x, axis=1), (n, n))]))
        out.append(Probe(f"maskedsum:{n}", lambda n=n: [one_kernel(
            lambda x, y: svod.sum(svod.concat([x, y], axis=1), axis=1), (n, n // 2), (n, n // 2))]))
    # a row-wise kernel streaming from DRAM: reads a row, re-reads it, writes it (not a stream)
    out.append(Probe("rowwise:dram", lambda: [one_kernel(
        lambda x: x / svod.sqrt(svod.mean(x * x, axis=-1, keepdims=True) + 1e-6), (8192, 1024))], 2))
    out.append(Probe("stream:dram", lambda: [one_kernel(lambda x: x * 2.0 + 1.0, (8192, 1024))], 2))
    # how much of compute and memory time overlap: compute-heavy kernels streaming from DRAM
    out.append(Probe("overlap:softmax", lambda: [one_kernel(lambda x: svod.nn.softmax(x, axis=-1), (4096, 4096))]))
    out.append(Probe("overlap:tanh", lambda: [one_kernel(lambda x: svod.tanh(x), (16 << 20,))]))
    # overheads: dispatch (a split of little work), compute scaling on all cores
    out.append(Probe("small:1", lambda: [one_kernel(_add1, (16 * 1024,))], 1, 0.05))
    out.append(Probe("small:2", lambda: [one_kernel(_add1, (16 * 1024,))], 2, 0.05))
    out.append(Probe("exp:1M:1", lambda: [one_kernel(_repeat("EXP", 2), (1 << 20,))], 1))
    out.append(Probe("exp:1M:2", lambda: [one_kernel(_repeat("EXP", 2), (1 << 20,))], 2))
    # matmul: generated tiles and the BLAS step
    out.append(Probe("matmul:native", lambda: [_matmul_kernel(128, 256, 256, library=False)], 1, 0.3))
    out.append(Probe("matmul:nativeT", lambda: [_matmul_kernel(*NATIVE_T_SHAPE, library=False, b_t=True)], 1, 0.3))
    out.append(Probe("matmul:blas:256", lambda: [_blas_probe_kernels()["256"]], 1, 0.3))
    if not quick:
        out.append(Probe("matmul:blas:1024", lambda: [_blas_probe_kernels()["1024"]], 1, 0.5))
        # the generated GEMM on every core at the same size: its thread scaling, measured
        # the way the BLAS step beside it is (the two run on the same pool)
        out.append(Probe("matmul:native2:1024", lambda: [_matmul_kernel(1024, 1024, 1024, library=False)],
                         2, 0.5))
        # low arithmetic intensity (attention scores: k = 64), batched
        out.append(Probe("matmul:blas:k64", lambda: [_blas_probe_kernels()["k64"]], 1, 0.3))
    return out


ROW_LENGTHS = (8, 32, 64, 128, 1024)
NATIVE_T_SHAPE = (64, 64, 128)  # (m, k, n) of the transposed-B matmul probe
RED_ELEMS = 256 * 1024  # 1 MB of float32


HOLD_BYTES = 4 * MIB  # the cache-hold probe's buffer: L3-resident, as the temps between kernels are
HOLD_AGES = (0.25e-3, 0.5e-3, 1e-3, 2e-3, 4e-3, 8e-3, 16e-3)  # seconds left alone before the read


def _spin(seconds: float) -> None:
    """Busy for `seconds` without touching memory (the core stays awake and ours)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _cache_hold(trials: int = 15) -> dict[str, float]:
    """The share of a buffer still cached after it is left alone for each of `HOLD_AGES`:
    a read kernel over `HOLD_BYTES`, timed once right after a warm call and once after
    each wait (busy, touching nothing), against the same read right after a sweep of 64 MB
    (cold). Share = (cold - after the wait) / (cold - right after), clipped to [0, 1],
    medians over interleaved trials, then made non-increasing (1 on a dedicated core;
    lower where other guests share the caches: docs/ops.md)."""
    import statistics

    from costmodels.measure import kernel_buffers
    from svod.codegen.program import compile_kernel

    k = one_kernel(_rowsum, (HOLD_BYTES // 4 // 1024, 1024))
    prog, bufs = compile_kernel(k), kernel_buffers(k)
    sweep = np.ones(16 * MIB, np.float32)  # 64 MB: past the L3

    def once() -> float:
        return _seconds(lambda: prog.run(bufs, 1))

    warm, cold, waited = [], [], {a: [] for a in HOLD_AGES}
    for _ in range(trials):
        prog.run(bufs, 1)
        warm.append(once())
        for age in HOLD_AGES:
            prog.run(bufs, 1)
            _spin(age)
            waited[age].append(once())
        sweep += 1.0
        cold.append(once())
    return hold_shares(statistics.median(warm), statistics.median(cold),
                       {age: statistics.median(ts) for age, ts in waited.items()})


def hold_shares(warm: float, cold: float, waited: dict[float, float]) -> dict[str, float]:
    """The cache-hold curve from a read's seconds right after a warm call (`warm`), after
    a sweep past the L3 (`cold`) and after each wait (`waited`: age -> seconds): per age,
    (cold - waited) / (cold - warm), clipped to [0, 1] and made non-increasing.

    >>> hold_shares(1.0, 3.0, {1e-3: 1.2, 2e-3: 1.0, 4e-3: 2.0, 8e-3: 4.0})
    {'0.001': 0.9, '0.002': 0.9, '0.004': 0.5, '0.008': 0.0}
    """
    out, low = {}, 1.0
    for age in sorted(waited):
        low = min(low, _held(warm, cold, waited[age]))
        out[repr(age)] = round(low, 4)
    return out


# ----------------------------------------------------------------------------- running and fitting


def run_probes(plist: list[Probe], progress: bool = True, budget: float | None = None,
               rounds: int = 3) -> dict[str, dict]:
    """Time every probe `rounds` times, round-robin (a slow spell of a shared machine
    then hits one round of each probe, not every round of some), keeping each probe's
    fastest round: name -> {"seconds", "median", "size", ...}."""
    from costmodels.progress import bar

    scale = 1.0
    if budget is not None:  # the probes' own budgets, scaled to the whole budget (compiling aside)
        scale = max(0.05, min(3.0, 0.5 * budget / max(rounds * sum(p.budget for p in plist), 1e-9)))
    raw: dict[str, dict] = {}
    built: dict[str, object] = {}
    with bar(total=rounds * len(plist) + 1, desc="calibrate", enabled=progress, unit="probe") as pb:
        for r in range(rounds):
            for p in plist:
                pb.set_postfix_str(p.name)
                k = built.get(p.name)
                if k is None:
                    k = built[p.name] = p.build()[0]
                    if p.name.startswith("overlap:"):
                        _OVERLAP_KERNELS[p.name] = k
                t: Timing = time_kernel(k, p.threads, budget=p.budget * scale, min_runs=3 if r else 2)
                prev = raw.get(p.name)
                if prev is None or t.seconds < prev["seconds"]:
                    f = features(k)
                    raw[p.name] = {"seconds": t.seconds, "median": t.median, "runs": t.runs, "threads": p.threads,
                                   "size": f.size, "units": f.units, "read_bytes": f.read_bytes,
                                   "write_bytes": f.write_bytes, "flops": f.flops,
                                   "rounds": (prev or {}).get("rounds", [])}
                raw[p.name]["rounds"].append(t.seconds)
                pb.update(1)
        pb.set_postfix_str("launch")
        raw["launch"] = {"seconds": _launch_cost()}
        raw["alloc"] = {"seconds": _alloc_cost()}
        raw["library_step"] = {"seconds": _library_step_cost()}
        raw["blas_trans"] = {"factor": _blas_transposed_cost()}
        full = any(p.name == "matmul:native2:1024" for p in plist)  # not --quick
        raw["cache_hold"] = _cache_hold(25 if full else 5)
        if full:
            from svod.costing import Machine

            cores = Machine.host().cores
            raw["blas_pairs"] = _blas_against_gemm(cores)
            raw["epilogue"] = {"seconds_per_byte": _epilogue_cost(cores)}
            raw["matmul_aging"] = _matmul_aging(cores)
        pb.update(1)
    return raw


def _decreasing(points: list) -> list:
    """Bandwidth can only fall as the working set grows (L2 -> L3 -> DRAM): pool adjacent
    violators (isotonic regression on the harmonic scale) smooths the noise of a shared
    machine out of a measured curve."""
    pts = sorted(points)
    blocks: list[list] = []  # [sum of seconds per byte, count, first index]
    for i, (_, bw) in enumerate(pts):
        blocks.append([1.0 / bw, 1, i])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            a = blocks.pop()
            blocks[-1][0] += a[0]
            blocks[-1][1] += a[1]
    out = []
    for tot, n, first in blocks:
        for j in range(first, first + n):
            out.append([pts[j][0], n / tot])
    return out


def _net_ratio(pair: dict, step: float) -> float:
    """A BLAS/GEMM pair's time ratio with the library step's fixed cost `step` taken out
    of the BLAS time (pairs stored without their BLAS seconds: as measured); it matters
    at the smallest BLAS probe only (docs/costmodels.md)."""
    sec = pair.get("seconds")
    if not sec or not step:
        return pair["ratio"]
    return pair["ratio"] * max(sec - step, 0.5 * sec) / sec


def _per(raw: dict, name: str, attr: str) -> float:
    r = raw[name]
    return r["seconds"] / max(r[attr], 1)


def fit(raw: dict[str, dict], cores: int) -> dict:
    """The profile's constants from the probes' timings (see the module docstring)."""
    prof: dict = {"format": PROFILE_FORMAT, "cores": cores, "l2_bytes": _cache_bytes(2, 1 * MIB),
                  "l3_bytes": _cache_bytes(3, 32 * MIB)}
    # overheads first: the bandwidth of a split kernel is measured net of its dispatch
    dispatch = 5e-6
    if "small:1" in raw and "small:2" in raw:
        dispatch = max(raw["small:2"]["seconds"] - raw["small:1"]["seconds"] / 2, 2e-7)
    prof["dispatch_seconds"] = dispatch
    prof["launch_seconds"] = raw.get("launch", {}).get("seconds", 1e-7)
    prof["alloc_seconds"] = raw.get("alloc", {}).get("seconds", 1e-6)
    if "library_step" in raw:  # else the profile's default (`costmodels.profile.LIBRARY_STEP_SECONDS`)
        prof["library_step_seconds"] = raw["library_step"]["seconds"]
    # NOTE: on a shared VM the second vCPU is sometimes a busy core's sibling: the round
    # with the best split says what the machine can do
    prof["compute_scaling"] = float(cores)
    if "exp:1M:1" in raw and "exp:1M:2" in raw:
        e1s = raw["exp:1M:1"].get("rounds") or [raw["exp:1M:1"]["seconds"]]
        e2s = raw["exp:1M:2"].get("rounds") or [raw["exp:1M:2"]["seconds"]]
        ratio = max(a / max(b - dispatch, 1e-9) for a, b in zip(e1s, e2s))
        prof["compute_scaling"] = max(1.0, min(float(cores), ratio))
    # bandwidth curves: bytes moved / seconds, by working set
    bw: dict[str, list] = {"copy1": [], "copy2": [], "read1": [], "read2": []}
    for name, r in raw.items():
        parts = name.split(":")
        if parts[0] in ("copy", "read") and len(parts) == 3:
            t = int(parts[2])
            sec = r["seconds"] - (dispatch if t > 1 else 0.0)
            sec = max(sec, r["seconds"] / 4)
            moved = r["read_bytes"] + r["write_bytes"]
            bw[f"{parts[0]}{t}"].append([moved, moved / sec])
    prof["bandwidth"] = {k: _decreasing(v) for k, v in bw.items() if v} or {"copy1": [[1, 2e10]]}
    # per-op costs: (T(op) - T(NONE)) / (K * n), single thread, L2-resident
    ops: dict[str, float] = {}
    for dt, suffix in (("f32", ""), ("f64", "64"), ("i32", "")):
        base = raw.get(f"op:NONE:{dt}")
        if base is None:
            continue
        for name, r in raw.items():
            p = name.split(":")
            if p[0] != "op" or p[2] != dt or p[1] == "NONE":
                continue
            per = (r["seconds"] - base["seconds"]) / (OP_REPEAT * r["size"])
            if p[1] == "ALU":
                per /= 4  # four cheap ops per application
            ops[p[1] + suffix] = max(per, 1e-12)
    if "ALU" in ops and "ALU64" not in ops:
        ops["ALU64"] = 2 * ops["ALU"]
    prof["op_seconds"] = ops
    if "EXP64" in ops and "EXP" in ops:
        prof["f64_factor"] = ops["EXP64"] / ops["EXP"]
    mix = raw.get("mix:TANH_EXP:f32")
    if mix is not None and "op:TANH:f32" in raw and ops.get("EXP"):
        extra = (mix["seconds"] - raw["op:TANH:f32"]["seconds"]) / (OP_REPEAT * mix["size"])
        prof["call_mix"] = max(1.0, min(4.0, extra / ops["EXP"]))
    # reductions: long rows stream at the read bandwidth (the memory term); what is left
    # is the accumulate (max and argmax against sum) and the tail cost of short rows
    long_row = raw["rows:1024"]["seconds"] / raw["rows:1024"]["size"] if "rows:1024" in raw else 5e-11
    alu = ops.get("ALU", 2e-11)
    red: dict = {"SUM": alu}
    if "rowmax:1024" in raw:
        red["MAXR"] = max(_per(raw, "rowmax:1024", "size") - long_row, 0.0) + alu
    if "argmax:1024" in raw:
        red["ARG"] = _per(raw, "argmax:1024", "size")
        if "argmaxmax:1024" in raw:  # a reduction sharing a loop with argmax runs scalar
            red["SCALAR"] = max(_per(raw, "argmaxmax:1024", "size") - red["ARG"], alu)
    prof["reduce_seconds"] = red
    # column reductions: seconds per element by working set (the whole cost: the tiles
    # stream row segments, slower than rows from DRAM)
    col: dict[str, dict[str, float]] = {}
    for op in ("sum", "max"):
        for tag in ("l2", "dram"):
            r = raw.get(f"col{op}:{tag}")
            if r is not None:
                col.setdefault(op.upper(), {})[str(r["read_bytes"] + r["write_bytes"])] = r["seconds"] / r["size"]
    prof["column_seconds"] = col
    short = {}
    for name, r in raw.items():
        if name.startswith("rows:"):
            short[name.split(":")[1]] = max(r["seconds"] / r["size"] - long_row, 0.0)
    prof["short_row_seconds"] = short
    prof["unit_seconds"] = 1e-9
    # access patterns: extra seconds per gathered element against the plain 2-D kernel,
    # by working set (transposed, reversed, masked (two half-valid inputs), chained views)
    acc: dict[str, dict[str, float]] = {}
    for n in (256, 2048):
        plain = raw.get(f"plain2d:{n}")
        if plain is None:
            continue
        for pat, loads in (("transpose", 1), ("reverse", 1), ("masked", 2), ("chain", 1)):
            r = raw.get(f"{pat}:{n}")
            if r is not None:
                acc.setdefault(pat, {})[str(r["read_bytes"] + r["write_bytes"])] = \
                    max((r["seconds"] - plain["seconds"]) / (loads * r["size"]), 0.0)
    for n in (256, 2048):
        plain, masked = raw.get(f"plainsum:{n}"), raw.get(f"maskedsum:{n}")
        if plain is not None and masked is not None:
            acc.setdefault("masked_reduce", {})[str(masked["read_bytes"] + masked["write_bytes"])] = \
                max((masked["seconds"] - plain["seconds"]) / (2 * masked["size"]), 0.0)
    prof["access_seconds"] = acc
    # matmul throughput (flop/s)
    mm: dict[str, float] = {}
    blas: dict[str, float] = {}  # BLAS flop/s by arithmetic intensity (flops per byte moved)
    for name, r in raw.items():
        if name.startswith("matmul:"):
            mm[name.split(":", 1)[1]] = r["flops"] / r["seconds"]
            if name.startswith("matmul:blas:"):
                blas[str(r["flops"] / max(r["read_bytes"] + r["write_bytes"], 1))] = r["flops"] / r["seconds"]
    prof["matmul_flops"] = mm
    gemm = mm.get("native2:1024")
    if raw.get("blas_pairs") and gemm:
        # the BLAS step at each probe's intensity: the GEMM's all-core rate over the two's
        # measured time ratio (the model prices the GEMM's tiles at that rate), with the
        # BLAS step's fixed Python side taken out: the model prices it apart
        # (library_step_seconds)
        step = raw.get("library_step", {}).get("seconds", 0.0)
        blas = {str(r["flops"] / max(r["bytes"], 1)): gemm / max(_net_ratio(r, step), 1e-3)
                for r in raw["blas_pairs"].values()}
    prof["blas_flops"] = blas
    if raw.get("cache_hold"):
        prof["cache_hold"] = dict(raw["cache_hold"])
    if raw.get("epilogue"):
        prof["epilogue_seconds"] = raw["epilogue"]["seconds_per_byte"]
    if raw.get("matmul_aging") and raw.get("cache_hold"):
        hold = raw["cache_hold"]
        prof["matmul_age_factor"] = {name: round(aging_factor(hold, r["share"], r["seconds"], r["read"]), 3)
                                     for name, r in raw["matmul_aging"].items()}
    if "blas_trans" in raw:
        prof["blas_trans_factor"] = max(1.0, min(1.5, raw["blas_trans"]["factor"]))
    t_raw, n_raw = raw.get("matmul:nativeT"), raw.get("matmul:native")
    if t_raw is not None and n_raw is not None:
        # the probe with a transposed B against the contiguous rate: what its packing adds
        packed = features(_matmul_kernel(*NATIVE_T_SHAPE, library=False, b_t=True)).b_packed
        extra = t_raw["seconds"] - t_raw["flops"] / mm["native"]
        prof["pack_strided_seconds"] = max(extra, 0.0) / max(packed, 1.0)
    prof.setdefault("footprint_factor", 1.5)
    rw, st = raw.get("rowwise:dram"), raw.get("stream:dram")
    if rw is not None and st is not None:
        # both read and write the same bytes; the row-wise one stops and goes per row
        prof["rowwise_dram_factor"] = max(1.0, min(4.0, (rw["seconds"] - dispatch) / max(st["seconds"] - dispatch,
                                                                                         1e-9)))
    prof["overlap"] = 0.0
    return prof


def fit_overlap(prof: dict, raw: dict) -> float:
    """The share of the smaller of memory and compute time that does not hide behind the
    larger, from compute-heavy kernels streaming from DRAM (needs the rest of the profile)."""
    from costmodels.analytic import CalibratedModel

    model = CalibratedModel(Profile.from_json(prof))
    ks = []
    for name in ("overlap:softmax", "overlap:tanh"):
        r = raw.get(name)
        k = _OVERLAP_KERNELS.get(name)
        if r is None or k is None:
            continue
        f = features(k)
        mem, comp = model.memory(f, 1), model.compute(f)
        lo, hi = min(mem, comp), max(mem, comp)
        if lo > 0:
            ks.append((r["seconds"] - hi - prof["launch_seconds"]) / lo)
    return max(0.0, min(0.6, sum(ks) / len(ks))) if ks else 0.3


_OVERLAP_KERNELS: dict = {}


def _cache_bytes(level: int, default: int) -> int:
    try:
        from svod.bench.harness import _cache_size

        return int(_cache_size(level) or default)
    except Exception:  # noqa: BLE001 - no sysfs: the reference machine's sizes
        return default


def calibrate(progress: bool = True, budget: float = 60.0, quick: bool = False, save: bool = True,
              rounds: int | None = None) -> Profile:
    """Measure this machine and return (and by default store) its profile."""
    from svod.costing import Machine
    from svod.store import cpu_name, machine_fingerprint

    t0 = time.perf_counter()
    rounds = rounds if rounds is not None else (1 if quick else 5)
    raw = run_probes(probes(quick), progress=progress, budget=budget, rounds=rounds)
    data = fit(raw, Machine.host().cores)
    data["overlap"] = fit_overlap(data, raw)
    data["peak"] = peak()
    data["machine"] = {"fingerprint": machine_fingerprint(), "cpu": cpu_name(), "cores": Machine.host().cores,
                       "vector_bits": Machine.host().vector_bits}
    data["created"] = time.time()
    data["calibrate_seconds"] = round(time.perf_counter() - t0, 2)
    data["raw"] = {k: {kk: (round(vv, 12) if isinstance(vv, float) else vv) for kk, vv in v.items()}
                   for k, v in raw.items()}
    prof = Profile.from_json(data)
    if save:
        from costmodels.profile import save as save_profile

        save_profile(prof)
    return prof


def peak(threads: int | None = None) -> dict:
    """The machine's peaks in about half a second (`svod.bench.peak.probe`): the FMA
    peak of one core and of all (widest vectors, registers only) and the read bandwidth
    from L2, L3 and DRAM on all threads. `svod calibrate --peak` prints only this; a
    full calibration stores it in the profile (``data["peak"]``) beside the fitted
    constants, as the yardstick benchmarks report shares of."""
    from svod.bench.peak import probe

    return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in probe(threads).items()}


__all__ = ["Probe", "calibrate", "fit", "kernels_of", "peak", "probes", "run_probes"]
