"""What the caches hold when a kernel runs inside a program: the *reach* of each of its
buffer accesses.

A kernel looped alone keeps its working set W in whatever cache W fits; calibration
measures the bandwidth curves that way. Inside a program a buffer's lines come back only
after everything touched since: kernels stream their buffers in order, so a line kernel
`i` touched is touched again by kernel `j` after the part of `i`'s traffic that followed
it (half of it, on average), everything the kernels in between touched, and the part of
`j`'s traffic before it reaches the line (half again). That sum is the access's reach —
the cache it needs to hit. Programs run again and again (replays), so a buffer touched
once per run reaches back around the end of the previous run.

The calibration loops are the one-kernel case: every access of a kernel looped over W
has reach W, so pricing each access at the bandwidth curve's value at its reach agrees
with the curves by construction. What a program adds: a temp consumed right after it
is written reaches back only over the two kernels' traffic; inputs that the whole
program fits around stay in the L3 between runs; a program whose temps push its
footprint past the L3 streams everything from DRAM, however small each kernel is.

Which buffers share memory comes from `svod.graph.assign_storages` (a temp takes over a
freed storage), as the compiled graph allocates them.

>>> import svod
>>> from svod.key import compact
>>> from svod.plan_greedy import plan_greedy
>>> x = svod.asarray([[1.0, 2.0]] * 64)
>>> key, _ = compact([svod.nn.softmax(x).uop])
>>> [[(a.nbytes, a.reach, a.write) for a in acc] for acc in plan_accesses(plan_greedy(key))]
[[(512, 1024.0, False), (512, 1024.0, True)]]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from costmodels.features import read_bytes_by_slot
from svod.graph import assign_storages
from svod.kernel import Plan


@dataclass(frozen=True)
class Access:
    slot: int
    storage: tuple[str, int]  # ("in", slot) for a graph input, ("st", n) for a written storage
    nbytes: int  # bytes of the buffer the kernel touches
    reach: float  # bytes touched between the buffer's previous access and this one (see above)
    write: bool
    prev: int = -1  # the kernel that touched the buffer before (this one itself: a run ago)
    age: float = 0.0  # seconds since then (`ages`; 0 until the plan's kernels are priced)


def ages(accesses: Sequence[tuple[Access, ...]], seconds: Sequence[float]) -> list[tuple[float, ...]]:
    """Per kernel, the seconds since each access's buffer was last touched, given each
    kernel's running time: the kernels in between, half of the kernel before (it wrote
    or read the line somewhere in its run) and half of this one — the reach's rule, in
    time instead of bytes. A buffer only this kernel touches was touched a run ago: the
    whole program.

    >>> acc = [(Access(0, ("in", 0), 8, 8.0, False, 0),), (Access(1, ("st", 0), 8, 8.0, False, 0),)]
    >>> ages(acc, [2.0, 1.0])
    [(3.0,), (1.5,)]
    """
    n, total = len(seconds), float(sum(seconds))
    out = []
    for j, acc in enumerate(accesses):
        row = []
        for a in acc:
            q = a.prev if a.prev >= 0 else j
            if q == j:
                row.append(total)
                continue
            between = sum(seconds[(q + s) % n] for s in range(1, (j - q) % n))
            row.append(between + 0.5 * (seconds[q] + seconds[j]))
        out.append(tuple(row))
    return out


def plan_accesses(plan: Plan) -> list[tuple[Access, ...]]:
    """Per kernel of `plan` (in order): its reads, then its writes, with their reach."""
    st = assign_storages(plan)

    def where(slot: int) -> tuple[str, int]:
        return ("in", slot) if slot < plan.n_inputs else ("st", st.slot_storage[slot])

    touched: list[list[tuple[int, tuple[str, int], int, bool]]] = []
    for k in plan.kernels:
        acc = [(slot, where(slot), n, False) for slot, n in read_bytes_by_slot(k).items()]
        acc += [(o.slot, where(o.slot), math.prod(o.shape) * o.dtype.itemsize, True) for o in k.outputs]
        touched.append(acc)
    n = len(touched)
    sizes = [{} for _ in touched]  # kernel -> {buffer: bytes it touches}
    for k, acc in enumerate(touched):
        for a in acc:
            sizes[k][a[1]] = max(sizes[k].get(a[1], 0), a[2])
    out: list[tuple[Access, ...]] = []
    for j in range(n):
        reach: dict[tuple[str, int], float] = {}
        prev: dict[tuple[str, int], int] = {}
        between: dict[tuple[str, int], int] = {}  # buffers the kernels walked back over touch
        left = set(sizes[j])
        for step in range(1, n + 1):  # back to each buffer's previous toucher, cyclically
            q = (j - step) % n
            found = left & sizes[q].keys()
            if found:  # every buffer `q` was the last to touch reaches back equally far
                r = _reach(between, sizes[q], sizes[j], q == j)
                reach.update(dict.fromkeys(found, r))
                prev.update(dict.fromkeys(found, q))
            left -= sizes[q].keys()
            if not left:
                break
            for b, nb in sizes[q].items():
                between[b] = max(between.get(b, 0), nb)
        out.append(tuple(Access(slot, buf, nbytes, reach[buf], write, prev[buf])
                         for slot, buf, nbytes, write in touched[j]))
    return out


def _reach(between: dict, before: dict, now: dict, same: bool) -> float:
    """Distinct bytes since a line's previous touch: the part of each buffer the kernel
    before touched after it (half, on average), the part this kernel touches before
    reaching it (half again) — the whole kernel once when it is the same kernel, a run
    ago — and whatever the kernels in between touched."""
    halves: dict = {}
    for part in ((before,) if same else (before, now)):
        for b, nb in part.items():
            halves[b] = halves.get(b, 0.0) + (nb if same else nb / 2)
    return float(sum(max(between.get(b, 0), halves.get(b, 0.0)) for b in between.keys() | halves.keys()))
