"""CompiledGraph: a Plan turned into Allocate / Copy / Launch / Free steps over slots,
with a memory plan that lets intermediates share storage (seeds 003 and 004).

Slots are the plan's numbered values. Inputs are bound from the caller's arrays and
never written; outputs get storage of their own (they are handed to the user); temps
whose live ranges do not overlap share one storage (a plan, not an IR rewrite:
`reuse=False` gives every temp its own storage, for comparison). `check_graph` rejects
any step sequence that reads a slot before it is written, after it is freed, or after
its storage was reused by another slot.

>>> import svod
>>> from svod.key import compact
>>> from svod.plan_greedy import plan_greedy
>>> x = svod.asarray([[1.0, 2.0]])
>>> key, _ = compact([svod.nn.softmax(x).uop])
>>> g = build_graph(plan_greedy(key))
>>> [type(s).__name__ for s in g.steps]
['Allocate', 'Launch']
"""

from __future__ import annotations

from dataclasses import dataclass, field

from svod.kernel import LOAD, Kernel, Plan


@dataclass(frozen=True)
class Allocate:
    slot: int
    nbytes: int
    storage: int  # storage id: slots with the same id share memory (never at the same time)


@dataclass(frozen=True)
class Copy:
    """dst = the first len(dst) elements of src (same dtype)."""

    src: int
    dst: int


@dataclass(frozen=True)
class Launch:
    kernel: int  # index into CompiledGraph.kernels
    slots: tuple[int, ...]  # slots the kernel reads, then the slots it writes
    threads: int = 1


@dataclass(frozen=True)
class Free:
    slot: int


Step = Allocate | Copy | Launch | Free


@dataclass
class CompiledGraph:
    """The executable form of a Plan: steps over slots plus the storage plan."""

    plan: Plan
    steps: list[Step]
    storage_bytes: dict[int, int]  # storage id -> bytes
    slot_storage: dict[int, int]  # slot -> storage id (inputs are bound, not stored)
    reuse: bool = True
    threads: dict[int, int] = field(default_factory=dict)

    @property
    def kernels(self) -> tuple[Kernel, ...]:
        return self.plan.kernels

    @property
    def peak_bytes(self) -> int:
        """Peak bytes of storage live at once (outputs + temps; inputs are the caller's).

        A storage is live from its first Allocate to the Free of its last tenant. Without
        reuse there is no memory plan: every storage lives for the whole graph."""
        if not self.reuse:
            return sum(self.storage_bytes.values())
        first: dict[int, int] = {}
        last: dict[int, int] = {}
        for i, s in enumerate(self.steps):
            if isinstance(s, Allocate):
                first.setdefault(s.storage, i)
                last[s.storage] = len(self.steps)  # until freed
            elif isinstance(s, Free):
                last[self.slot_storage[s.slot]] = i
        peak = 0
        for i in range(len(self.steps) + 1):
            cur = sum(self.storage_bytes[st] for st in first if first[st] <= i <= last[st])
            peak = max(peak, cur)
        return peak

    @property
    def temp_storages(self) -> int:
        """Distinct storages used by intermediates (not outputs)."""
        outs = {s for s, _ in self.plan.outputs}
        return len({st for slot, st in self.slot_storage.items()
                    if slot >= self.plan.n_inputs and slot not in outs})

    def __str__(self) -> str:
        lines = [f"compiled graph: {len(self.plan.kernels)} kernel(s), {len(self.storage_bytes)} storage(s), "
                 f"peak {self.peak_bytes} bytes{'' if self.reuse else ' (no reuse)'}"]
        for s in self.steps:
            if isinstance(s, Allocate):
                lines.append(f"  Allocate slot {s.slot} ({s.nbytes} B) in storage {s.storage}")
            elif isinstance(s, Copy):
                lines.append(f"  Copy slot {s.src} -> slot {s.dst}")
            elif isinstance(s, Launch):
                k = self.plan.kernels[s.kernel]
                lines.append(f"  Launch {k.name} [{k.kind}] slots {s.slots} threads {s.threads}")
            else:
                lines.append(f"  Free slot {s.slot}")
        return "\n".join(lines)


class GraphError(ValueError):
    """A CompiledGraph whose steps would read garbage."""


def slot_nbytes(plan: Plan, slot: int) -> int:
    """Bytes of slot `slot`'s value."""
    info = plan.slots[slot]
    n = 1
    for d in info.shape:
        n *= d
    return n * info.dtype.itemsize


def _is_copy(k: Kernel) -> bool:
    """A kernel that only copies a contiguous input of the same size: a Copy step."""
    return (k.matmul is None and not k.reduce_axes and len(k.nodes) == 1 and k.nodes[0].op == LOAD
            and len(k.outputs) == 1 and k.inputs[0].view.is_contiguous and k.inputs[0].dtype == k.outputs[0].dtype)


@dataclass(frozen=True)
class Storages:
    """Where a plan's written slots live: each in a storage (a block the steps allocate),
    a temp taking over a freed storage of at least its size when storages are reused."""

    slot_storage: dict[int, int]  # written slot -> storage
    storage_bytes: dict[int, int]  # storage -> bytes
    frees: tuple[tuple[int, ...], ...]  # per kernel: the slots freed right after it


def assign_storages(plan: Plan, reuse: bool = True) -> Storages:
    """Storages for `plan`'s written slots, as `build_graph` allocates them: each slot
    just before its first write, a temp freed after its last read (a dead temp at once),
    and with `reuse` a new temp takes the smallest freed storage that fits. The cost
    model reads it too: which buffers share memory decides what the caches hold."""
    outputs = {s for s, _ in plan.outputs}
    n_in = plan.n_inputs
    last_read: dict[int, int] = {}
    for ki, k in enumerate(plan.kernels):
        for inp in k.inputs:
            last_read[inp.slot] = ki
    storage_bytes: dict[int, int] = {}
    slot_storage: dict[int, int] = {}
    free_pool: list[int] = []  # storages whose tenant was freed
    frees: list[tuple[int, ...]] = []
    for ki, k in enumerate(plan.kernels):
        writes = [o.slot for o in k.outputs]
        for slot in writes:
            nb = slot_nbytes(plan, slot)
            st = None
            if reuse and slot not in outputs:
                fits = [s for s in free_pool if storage_bytes[s] >= nb]
                if fits:  # the smallest freed storage that fits
                    st = min(fits, key=lambda s: (storage_bytes[s], s))
                    free_pool.remove(st)
            if st is None:
                st = len(storage_bytes)
                storage_bytes[st] = nb
            slot_storage[slot] = st
        freed = [slot for slot in dict.fromkeys(i.slot for i in k.inputs)
                 if slot >= n_in and slot not in outputs and last_read.get(slot) == ki]
        # written but never read (a dead temp): free at once
        freed += [slot for slot in writes if slot not in outputs and slot not in last_read]
        free_pool.extend(slot_storage[slot] for slot in freed)
        frees.append(tuple(freed))
    return Storages(slot_storage, storage_bytes, tuple(frees))


def build_graph(plan: Plan, *, reuse: bool = True, threads: dict[int, int] | None = None) -> CompiledGraph:
    """Steps for `plan`: allocate each written slot just before its first write, free it
    after its last read (temps) — and let a temp take over a freed storage of at least
    its size when `reuse` (`assign_storages`)."""
    st = assign_storages(plan, reuse)
    steps: list[Step] = []
    for ki, k in enumerate(plan.kernels):
        writes = [o.slot for o in k.outputs]
        for slot in writes:
            steps.append(Allocate(slot, slot_nbytes(plan, slot), st.slot_storage[slot]))
        reads = tuple(dict.fromkeys(i.slot for i in k.inputs))
        if _is_copy(k):
            steps.append(Copy(k.inputs[0].slot, writes[0]))
        else:
            steps.append(Launch(ki, reads + tuple(writes), (threads or {}).get(ki, 1)))
        steps.extend(Free(slot) for slot in st.frees[ki])
    g = CompiledGraph(plan, steps, dict(st.storage_bytes), dict(st.slot_storage), reuse, dict(threads or {}))
    check_graph(g)
    return g


def check_graph(g: CompiledGraph) -> None:
    """Simulate the steps; raise GraphError on a read of an unwritten, freed or clobbered
    slot, on a write to an input, or on an output that is freed or never written."""
    plan = g.plan
    n_in = plan.n_inputs
    written: set[int] = set(range(n_in))
    freed: set[int] = set()
    owner: dict[int, int] = {}  # storage -> slot currently holding it
    allocated: set[int] = set()

    def read(slot: int, where: str) -> None:
        if slot < n_in:
            return
        if slot in freed:
            raise GraphError(f"{where} reads slot {slot} after it was freed")
        if slot not in written:
            raise GraphError(f"{where} reads slot {slot} before it is written")
        if owner.get(g.slot_storage[slot]) != slot:
            raise GraphError(f"{where} reads slot {slot}, whose storage {g.slot_storage[slot]} now holds "
                             f"slot {owner.get(g.slot_storage[slot])}")

    def write(slot: int, where: str) -> None:
        if slot < n_in:
            raise GraphError(f"{where} writes input slot {slot}")
        if slot not in allocated:
            raise GraphError(f"{where} writes slot {slot}, which was never allocated")
        st = g.slot_storage[slot]
        prev = owner.get(st)
        if prev is not None and prev != slot and prev not in freed:
            raise GraphError(f"{where} writes slot {slot} into storage {st}, still held by live slot {prev}")
        owner[st] = slot
        written.add(slot)

    for i, s in enumerate(g.steps):
        where = f"step {i} ({type(s).__name__})"
        if isinstance(s, Allocate):
            if s.slot in allocated:
                raise GraphError(f"{where} allocates slot {s.slot} twice")
            if g.slot_storage.get(s.slot) != s.storage:
                raise GraphError(f"{where} puts slot {s.slot} in storage {s.storage}, the plan says "
                                 f"{g.slot_storage.get(s.slot)}")
            if g.storage_bytes[s.storage] < s.nbytes:
                raise GraphError(f"{where}: storage {s.storage} is smaller than slot {s.slot}")
            allocated.add(s.slot)
        elif isinstance(s, Copy):
            read(s.src, where)
            write(s.dst, where)
        elif isinstance(s, Launch):
            k = plan.kernels[s.kernel]
            for inp in k.inputs:
                read(inp.slot, where)
            for o in k.outputs:
                write(o.slot, where)
        elif isinstance(s, Free):
            if s.slot in freed or s.slot not in written:
                raise GraphError(f"{where} frees slot {s.slot}, which is not live")
            if s.slot in {o for o, _ in plan.outputs}:
                raise GraphError(f"{where} frees output slot {s.slot}")
            freed.add(s.slot)
    for slot, _ in plan.outputs:
        if slot not in written:
            raise GraphError(f"output slot {slot} is never written")


# ----------------------------------------------------------------------------- running


def run_graph(g: CompiledGraph, arrays, programs, pool=None) -> list:
    """Bind the inputs, execute the steps, hand back the output arrays.

    `programs[i]` runs kernel i: `programs[i].run(buffers, threads)` with `buffers` a
    dict slot -> flat array. Storage comes from the buffer pool: temps return to it when
    the run ends, outputs when the user drops every view of them.
    """
    import numpy as np

    from svod.pool import POOL

    pool = pool or POOL
    plan = g.plan
    buffers: dict[int, np.ndarray] = {}
    for i, a in enumerate(arrays):
        buffers[i] = np.ascontiguousarray(a).reshape(-1)
    storage: dict[int, np.ndarray] = {}
    for s in g.steps:
        if isinstance(s, Allocate):
            blk = storage.get(s.storage)
            if blk is None:
                blk = storage[s.storage] = pool.array((g.storage_bytes[s.storage],), np.uint8)
            info = plan.slots[s.slot]
            buffers[s.slot] = blk[: s.nbytes].view(info.dtype.np)
        elif isinstance(s, Launch):
            programs[s.kernel].run(buffers, s.threads)
        elif isinstance(s, Copy):
            dst = buffers[s.dst]
            np.copyto(dst, buffers[s.src][: dst.size].view(dst.dtype))  # a contiguous prefix
        # Free: the storage stays bound for a later tenant; the pool gets it back after the run
    return [buffers[slot].reshape(shape) for slot, shape in plan.outputs]
