"""Timing kernels and plans on this machine: the ground truth every model is judged by.

- `time_kernel(kernel, threads)`: compile with the real codegen, run on random inputs of
  the kernel's shapes and dtypes; warm-up, then batches of calls; the result is the
  minimum over batches with an early stop once the minimum stops improving (the
  tinygrad BEAM habit: min of N is the least noisy estimate of what the code costs).
  Kernels bigger than the last-level cache are timed cold (caches evicted before each
  call), as they run inside a program. A warm kernel on one thread runs R times in a
  row from native code per timed call (`NativeProgram.repeat`; R so a call lasts
  ≥ 50 µs), so no Python call is in the figure: what it costs inside a graph program.
  Otherwise the Python call overhead of `Program.run` (measured once per process on
  an empty kernel) is taken off.
- `PlanRunner` / `time_plans`: whole plans as `realize()` runs them (a GraphProgram
  over the plan's CompiledGraph), medians of interleaved repeats — for comparing
  variants of one graph against each other.

>>> from svod.kernel_examples import softmax_kernel
>>> t = time_kernel(softmax_kernel(64, 256), threads=1, budget=0.05)
>>> t.seconds > 0 and t.runs >= 1
True
"""

from __future__ import annotations

import functools
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from svod.kernel import Kernel, Plan


@dataclass(frozen=True)
class Timing:
    seconds: float  # min over batches, per call, call overhead removed
    median: float  # median over batches, per call
    runs: int  # batches timed
    calls: int  # calls per batch


def random_array(dtype, n: int, rng: np.random.Generator) -> np.ndarray:
    """Benign values for any op: floats in [0.5, 2] (log, sqrt, pow, division stay on
    their fast paths), small positive integers, random bools."""
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return rng.uniform(0.5, 2.0, n).astype(dt)
    if dt.kind == "b":
        return rng.integers(0, 2, n).astype(bool)
    return rng.integers(1, 8, n).astype(dt)


def kernel_buffers(kernel: Kernel, seed: int = 0) -> dict[int, np.ndarray]:
    """Flat buffers for every slot the kernel reads or writes."""
    from svod.codegen.program import _extent

    rng = np.random.default_rng(seed)
    need: dict[int, tuple[object, int]] = {}
    for inp in kernel.inputs:
        dt, n = need.get(inp.slot, (inp.dtype.np, 0))
        need[inp.slot] = (dt, max(n, _extent(inp.view), 1))
    bufs = {slot: random_array(dt, n, rng) for slot, (dt, n) in need.items()}
    for o in kernel.outputs:
        bufs[o.slot] = np.empty(max(math.prod(o.shape), 1), o.dtype.np)
    return bufs


WARM_CALLS = 3  # calls before a batch is sized (state, replay closure, first-touch pages)


def _batch(fn: Callable[[], object], target: float) -> int:
    """Calls per timed batch so a batch lasts about `target` seconds, sized from warm
    calls at their fastest: the first calls of a fresh program build its state (its
    second call compiles the replay closure), and one slow call taken for the typical
    one would size a microsecond program's batch at a few calls, whose time is then
    mostly the switch from the previous runner (docs/engine.md)."""
    for _ in range(WARM_CALLS):
        fn()
    n, per = 1, math.inf
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        dt = time.perf_counter() - t0
        per = min(per, dt / n)
        if (dt >= target / 8 and n >= 4) or dt >= target or n >= 10000:
            break
        n *= 4
    return max(1, min(10000, int(target / max(per, 1e-9))))


def time_callable(fn: Callable[[], object], *, min_runs: int = 3, max_runs: int = 20, budget: float = 0.25,
                  target: float = 2e-3, patience: int = 3, setup: Callable[[], object] | None = None) -> Timing:
    """Min (and median) seconds per call of `fn`: one warm-up call, batches of about
    `target` seconds, stop after `max_runs` batches, after `budget` seconds (once
    `min_runs` are in), or when the minimum has not improved by 1% for `patience`
    batches. `setup` (untimed) runs before every call, and then every batch is one call."""
    fn()  # warm-up: compile, page in, caches
    calls = _batch(fn, target) if setup is None else 1
    best = math.inf
    times: list[float] = []
    stale = 0
    t_start = time.perf_counter()
    while len(times) < max_runs:
        if setup is not None:
            setup()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        dt = (time.perf_counter() - t0) / calls
        times.append(dt)
        if dt < best * 0.99:
            best, stale = dt, 0
        else:
            best = min(best, dt)
            stale += 1
        if len(times) >= min_runs and (stale >= patience or time.perf_counter() - t_start > budget):
            break
    return Timing(best, statistics.median(times), len(times), calls)


@functools.lru_cache(maxsize=1)
def call_overhead() -> float:
    """Seconds `Program.run` costs around the native call itself (Python, ctypes),
    measured on a kernel over one element."""
    from svod.codegen.program import compile_kernel
    from svod.dtype import float32
    from svod.kernel import LOAD, KInput, KNode, KOutput
    from svod.view import ViewChain

    k = Kernel("svod_noop", (1,), (KInput(0, float32, ViewChain.of((1,))),), (KNode(LOAD, float32, (), 0),),
               (KOutput(1, 0, float32, (1,)),))
    prog = compile_kernel(k)
    bufs = kernel_buffers(k)
    t = time_callable(lambda: prog.run(bufs, 1), min_runs=5, max_runs=9, budget=0.05, target=5e-4)
    return t.seconds


COLD_BYTES = 24 << 20  # kernels touching at least this much are timed with cold caches
REPEAT_SECONDS = 50e-6  # a native repeat of a warm kernel lasts at least this long


_evict_buf: list = []


def evict_caches() -> None:
    """Write a buffer twice the last-level cache: whatever a kernel left there is gone
    (big kernels in a program read their inputs from DRAM, not from the cache the
    previous run of the same kernel warmed)."""
    if not _evict_buf:
        _evict_buf.append(np.zeros(64 << 20, np.uint8))
    b = _evict_buf[0]
    b += 1


def time_kernel(kernel: Kernel, threads: int = 1, *, budget: float = 0.25, min_runs: int = 3, max_runs: int = 15,
                seed: int = 0, cold: bool | None = None) -> Timing:
    """Compile `kernel` and time it on `threads` threads (see the module docstring).
    `cold` (default: when the kernel touches at least `COLD_BYTES`) evicts the caches
    before every call."""
    from svod.codegen.program import compile_kernel

    prog = compile_kernel(kernel)
    bufs = kernel_buffers(kernel, seed)
    if cold is None:
        cold = sum(b.nbytes for b in bufs.values()) >= COLD_BYTES
    if prog.kind == "native" and (threads <= 1 or prog.units <= 1) and not cold and prog.units:
        # warm and on one thread: the calls loop in native code, R per timed call, so a
        # microsecond kernel is not measured as a Python call minus an estimate of one
        prog.repeat(bufs, 1)
        t0 = time.perf_counter()
        prog.repeat(bufs, 8)
        per = (time.perf_counter() - t0) / 8
        reps = max(1, min(100_000, math.ceil(REPEAT_SECONDS / max(per, 1e-9))))
        t = time_callable(lambda: prog.repeat(bufs, reps), min_runs=min_runs, max_runs=max_runs, budget=budget)
        return Timing(t.seconds / reps, t.median / reps, t.runs, t.calls * reps)
    t = time_callable(lambda: prog.run(bufs, threads), min_runs=min_runs, max_runs=max_runs, budget=budget,
                      setup=evict_caches if cold else None)
    over = call_overhead() if prog.kind == "native" else 0.0
    floor = 0.05 * t.seconds
    return Timing(max(t.seconds - over, floor), max(t.median - over, floor), t.runs, t.calls)


# ----------------------------------------------------------------------------- plans


class PlanRunner:
    """A plan compiled into a GraphProgram with given thread counts, ready to time.

    `threads`: kernel index -> threads (absent: one). `relocate`: the native kernels are
    fresh copies of their machine code at new addresses (`NativeProgram.relocated`), not
    the process's shared programs."""

    def __init__(self, plan: Plan, arrays: Sequence[np.ndarray], threads: dict[int, int] | None = None,
                 relocate: bool = False):
        from svod.codegen.graphprog import compile_graph
        from svod.codegen.program import NativeProgram, compile_kernel
        from svod.graph import build_graph

        self.plan = plan
        self.arrays = list(arrays)
        self.graph = build_graph(plan, threads=threads or {})
        progs = [compile_kernel(k) for k in self.graph.kernels]
        if relocate:
            progs = [p.relocated() if isinstance(p, NativeProgram) else p for p in progs]
        self.program = compile_graph(self.graph, progs)

    def __call__(self) -> list[np.ndarray]:
        return self.program.run(self.arrays)


class RoundTimes(list):
    """times[runner][round] (seconds per call), and `order[round]`: the runners in the
    order they ran in that round — what `steady` needs to take the machine's speed at
    each moment out of the timings."""

    def __init__(self, times=(), order=None):
        super().__init__(times)
        self.order: list[list[int]] = list(order) if order is not None else []


def time_rounds(runners: Sequence[Callable[[], object]], repeats: int = 9, target: float = 2e-3,
                seed: int = 0, on_round: Callable[[int], None] | None = None, budget: float = 0.0,
                max_repeats: int | None = None, warm: bool = False) -> RoundTimes:
    """Seconds per call of each runner in each round: a round times every runner once (a
    batch of about `target` seconds), in a fresh random order, so slow spells of a shared
    machine and the position in the round hit all runners alike. `repeats` rounds, then
    more while the timing has taken less than `budget` seconds (up to `max_repeats`,
    default 5 x `repeats`): cheap programs get more rounds, so their medians resolve
    smaller differences. Returns times[runner][round] with each round's order.

    `warm`: one untimed call of the runner before each timed batch, so it is timed in its
    steady state, not in the cache state the runner before it left (off by default: the
    reports ranked worse with it, docs/engine.md)."""
    import random

    calls = [_batch(r, target) for r in runners]  # also the warm-up
    rng = random.Random(seed)
    times = RoundTimes([[] for _ in runners])
    order = list(range(len(runners)))
    cap = max(repeats, max_repeats if max_repeats is not None else 5 * repeats)
    t_start = time.perf_counter()
    i = 0
    while i < repeats or (i < cap and time.perf_counter() - t_start < budget):
        rng.shuffle(order)
        times.order.append(list(order))
        for j in order:
            r, n = runners[j], calls[j]
            if warm:
                r()
            t0 = time.perf_counter()
            for _ in range(n):
                r()
            times[j].append((time.perf_counter() - t0) / n)
        if on_round is not None:
            on_round(i)
        i += 1
    return times


NEIGHBOURS = 2  # runners on each side of a timing that tell the machine's speed at that moment


def steady(times: list[list[float]], width: int = NEIGHBOURS, passes: int = 3) -> list[list[float]]:
    """times[runner][round] with the machine's speed at each moment taken out: each time
    divided by how slow the machine ran its neighbours in the round (the median, over the
    `width` runners timed just before and just after it, of their time over their own
    typical time), in seconds at the run's typical speed. The typical times start from
    the round-relative medians and are refined `passes` times.

    Why: a shared machine's cores change speed within seconds, and a round of a big
    workload lasts seconds: dividing by the whole round's median leaves those swings in,
    dividing by the neighbours' takes them out (docs/engine.md: the rankings with and
    without it). Without the order (`RoundTimes.order`), each time
    is divided by its round's median, scaled back by the median round.

    >>> t = RoundTimes([[1.0, 2.0], [2.0, 4.0], [3.0, 6.0]], order=[[0, 1, 2], [2, 1, 0]])
    >>> [round(x, 6) for x in steady(t)[2]]
    [4.5, 4.5]
    """
    n = len(times[0]) if times else 0
    if n == 0:
        return [[] for _ in times]
    round_med = [statistics.median(t[i] for t in times) for i in range(n)]
    scale = statistics.median(round_med)
    base = [[t[i] / round_med[i] * scale for i in range(n)] for t in times]
    order = getattr(times, "order", None)
    if not order or len(order) != n or len(times) < 2:
        return base
    est = [statistics.median(b) for b in base]
    adj = base
    for _ in range(passes):
        adj = [[0.0] * n for _ in times]
        for i, seq in enumerate(order):
            slow = [times[j][i] / est[j] for j in seq]
            for p, j in enumerate(seq):
                near = slow[max(0, p - width):p] + slow[p + 1:p + 1 + width]
                adj[j][i] = times[j][i] / statistics.median(near)
        est = [statistics.median(a) for a in adj]
    return adj


def robust_medians(times: list[list[float]], rounds: Sequence[int] | None = None) -> list[float]:
    """Per runner, the median over `rounds` (default all) of its `steady` times: a moment
    the machine ran slow counts like any other (the ranking at that moment is what it
    measured).

    >>> robust_medians([[1.0, 2.0], [2.0, 4.0], [3.0, 6.0]])
    [1.5, 3.0, 4.5]
    """
    n = len(times[0]) if times else 0
    idx = list(rounds) if rounds is not None else list(range(n))
    if not idx:
        return [math.nan] * len(times)
    adj = steady(times)
    return [statistics.median(a[i] for i in idx) for a in adj]


def time_plans(runners: Sequence[Callable[[], object]], repeats: int = 9, target: float = 2e-3,
               on_round: Callable[[int], None] | None = None) -> list[float]:
    """Robust medians (`robust_medians`, of `steady` times) of interleaved rounds
    (`time_rounds`)."""
    return robust_medians(time_rounds(runners, repeats, target, on_round=on_round))


def resolved_ranks(times: list[list[float]], z: float = 2.0, rel: float = 0.03) -> list[float]:
    """Ranks of the runners' robust medians under the timing's resolution: two runners the
    measurement cannot tell apart — medians within `z` combined standard errors, or within
    `rel` of the faster (differences of a few percent come and go with memory placement
    and the other programs in the cache; no model of the code can rank them, and a tuning
    run, not the model, settles them) — count as a tie between them. Each runner's standard
    error comes from the spread of its round-relative times (1.4826 MAD / sqrt(rounds));
    its rank is one plus the runners measurably faster plus half of those it ties with
    (`pairwise_ranks`): exact ties get their average rank, as in Spearman's rho, and a dense
    run of variants gets close ranks without a cut point for noise to move variants across.

    >>> resolved_ranks([[1.0, 1.0, 1.0, 1.0], [1.001, 0.999, 1.0, 1.002], [2.0, 2.0, 2.1, 1.9]])
    [1.5, 1.5, 3.0]
    >>> resolved_ranks([[1.0, 1.0, 1.0], [1.1, 1.1, 1.1]], rel=0.0)
    [1.0, 2.0]
    """
    n = len(times[0]) if times else 0
    if n == 0:
        return []
    round_med = [statistics.median(t[i] for t in times) for i in range(n)]
    meds, ses = [], []
    for t in times:
        ratios = [t[i] / round_med[i] for i in range(n)]
        m = statistics.median(ratios)
        mad = statistics.median(abs(v - m) for v in ratios)
        meds.append(m)
        ses.append(1.4826 * mad / math.sqrt(n))
    return pairwise_ranks(meds, lambda i, j: abs(meds[i] - meds[j]) <= max(
        z * math.sqrt(ses[i] ** 2 + ses[j] ** 2), rel * min(meds[i], meds[j])))


def pairwise_ranks(values: Sequence[float], ties: Callable[[int, int], bool]) -> list[float]:
    """Ranks of `values` under a resolution: value i's rank is 1 + the number of values
    below it that it does not tie with + half the number it ties with (`ties(i, j)`,
    symmetric). Without ties these are the ordinary ranks; a group whose members all tie
    gets its average rank; where ties overlap (a within 3% of b, b of c, a not of c) the
    ranks move smoothly with the values instead of at a group's edge.

    >>> v = [1.0, 1.02, 1.04, 2.0]
    >>> pairwise_ranks(v, lambda i, j: abs(v[i] - v[j]) < 0.03)
    [1.5, 2.0, 2.5, 4.0]
    """
    out = []
    for i, v in enumerate(values):
        r = 1.0
        for j, w in enumerate(values):
            if j != i:
                r += 0.5 if ties(i, j) else (1.0 if w < v else 0.0)
        out.append(r)
    return out


def group_ranks(values: Sequence[float], joins: Callable[[int, int], bool]) -> list[float]:
    """Ranks of `values` in which, walking up from each group's smallest (index `first`),
    the next index `j` joins the group while `joins(first, j)`; a group shares its
    average rank (as ties do in Spearman's rho).

    >>> group_ranks([3.0, 1.0, 1.1, 5.0], lambda first, j: True)
    [2.5, 2.5, 2.5, 2.5]
    """
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    pos = 0
    while pos < len(order):
        end = pos + 1
        while end < len(order) and joins(order[pos], order[end]):
            end += 1
        for q in range(pos, end):
            ranks[order[q]] = (pos + end - 1) / 2 + 1
        pos = end
    return ranks


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Spearman rank correlation (average ranks for ties); nan for fewer than 2 points
    or a constant side.

    >>> spearman([1, 2, 3, 4], [10, 20, 30, 25])
    0.8
    """
    if len(xs) != len(ys) or len(xs) < 2:
        return math.nan
    rx, ry = _ranks(xs), _ranks(ys)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    if sxx == 0 or syy == 0:
        return math.nan
    return sxy / math.sqrt(sxx * syy)


def _ranks(xs: Sequence[float]) -> list[float]:
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    ranks = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for t in range(i, j + 1):
            ranks[order[t]] = (i + j) / 2 + 1
        i = j + 1
    return ranks
