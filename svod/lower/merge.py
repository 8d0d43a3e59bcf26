"""The sibling-merging plan pass: kernels over the same iteration space and reduce axes
that do not depend on each other become one multi-output kernel (one pass over their
shared inputs); and an elementwise kernel whose output is stored anyway (a graph output,
or a value some kernel reads another way) and is read element for element by a later
elementwise kernel over the same space becomes one kernel with it: the value is computed
once, stored, and used in registers by its consumer (one launch and one read of the
stored value fewer). Opt-in: `SVOD_MERGE_STORED=1` turns the second kind on (`stored_merging`).

A consumer joins its producer's group only when both are plain elementwise kernels over
the same space, the value it reads is stored anyway (`_stored_anyway`; a temporary only
such consumers read keeps its boundary: its store would be dead), every read of the
group's outputs is the identity read (a contiguous, unmasked view of the kernel's space,
the output's dtype) and the merged expression is at most `MAX_DEPTH` deep (the
lowering's depth cut stays a cut). Iteration i of the merged kernel both writes the value
and uses it, so the result is bit-identical to the two kernels (no fused multiply-add
forms across the boundary: the elementwise codegen sets no `contract` flag).

Contract: `sibling_groups(kernels, outputs)` is a pure function of the kernel list and
the plan's output slots (the lowering
asks it which kernels will share a kernel before it decides which reductions to
materialise once, `svod.lower.build.build_plan`); `merge_siblings(plan)` merges exactly
those groups, each where its members may all run (no kernel reads a slot before it is
written), bodies and inputs shared where equal. Linear in the kernels: a kernel looks at
most `MERGE_WINDOW` groups back, and a group stops growing past `MERGE_MAX_BODY` body
nodes (each merged kernel compiles in bounded time).
"""

from __future__ import annotations

import dataclasses
import os

from svod.kernel import LOAD, Kernel, KernelError, KInput, KNode, KOutput, Plan
from svod.lower import build as _build
from svod.lower.build import MAX_BODY, assign_passes

MERGE_WINDOW = 32  # sibling merging looks this many kernels back (planning stays linear in the kernels)
MERGE_MAX_BODY = 2 * MAX_BODY  # body nodes of a merged multi-output kernel at most (compile time bounded)


def stored_merging() -> bool:
    """Producer -> elementwise consumer merging is on (`SVOD_MERGE_STORED=1`; off by default:
    it merges a chain of `contiguous()` values that reductions also read into one kernel
    that keeps them all alive at once, raising the plan's peak memory, and the cost model
    does not price memory; notebooks/04_memory_planning.ipynb's skip chain showed it)."""
    return os.environ.get("SVOD_MERGE_STORED", "0") not in ("0", "false", "False")


def _plain_elementwise(k: Kernel) -> bool:
    return not k.reduce_axes and k.matmul is None and k.library is None and k.attention is None and k.mlp is None \
        and k.rmsnorm is None


def _identity_read(k: Kernel, inp: KInput, out: KOutput) -> bool:
    """`k` reads output `out` (of an elementwise kernel over `k.shape`) through `inp` at
    the element its own iteration writes: the same flat index, the same dtype."""
    n = 1
    for s in k.shape:
        n *= s
    m = 1
    for s in out.shape:
        m *= s
    return (inp.dtype == out.dtype and inp.view.is_contiguous and tuple(inp.view.shape) == tuple(k.shape)
            and m == n and not out.reduced)


def _depths(k: Kernel, given: dict[int, int]) -> list[int]:
    """Each body node's expression depth (a leaf 0), a load of a slot in `given` at that
    slot's depth (the value it is replaced by in a merged kernel)."""
    d: list[int] = []
    for n in k.nodes:
        if n.op == LOAD:
            d.append(given.get(k.inputs[n.arg].slot, 0))
        else:
            d.append(1 + max((d[s] for s in n.src), default=-1))
    return d


def _feeds(g: _Group, k: Kernel, in_memory: set[int]) -> bool:
    """`k` may join `g` as the consumer of its outputs: both plain elementwise over one
    space, every read `k` makes of `g`'s outputs the identity read of a value stored
    anyway (`in_memory`), and the merged expression no deeper than `MAX_DEPTH` (the
    lowering's depth cut stays a cut)."""
    if not (_plain_elementwise(k) and all(_plain_elementwise(m) and m.shape == k.shape for m in g.kernels)):
        return False
    outs = {o.slot: o for m in g.kernels for o in m.outputs}
    if not all(i.slot in in_memory and _identity_read(k, i, outs[i.slot]) for i in k.inputs if i.slot in outs):
        return False
    return max(_depths(k, g.depth), default=0) <= _build.MAX_DEPTH


def _stored_anyway(kernels, outputs: set[int] | None) -> set[int]:
    """Slots of elementwise kernels' outputs whose value is in memory whatever the merge
    does: an output of the plan (`outputs`; None: any slot no kernel reads), or a slot a
    kernel reads other than element for element over the producer's space (a transposed
    or broadcast read, a reduction, a matmul, ...). A temporary only elementwise
    consumers read element for element is not merged into them: its store would be dead,
    and the planner's (or the user's `contiguous()`) boundary stays a boundary."""
    producer = {o.slot: (k, o) for k in kernels if _plain_elementwise(k) for o in k.outputs}
    read: set[int] = set()
    out: set[int] = set()
    for r in kernels:
        for i in r.inputs:
            got = producer.get(i.slot)
            if got is None:
                continue
            read.add(i.slot)
            k, o = got
            if not (_plain_elementwise(r) and r.shape == k.shape and _identity_read(r, i, o)):
                out.add(i.slot)
    if outputs is None:
        return out | (set(producer) - read)
    return out | (set(producer) & outputs)


class _Group:
    """Kernels merged into one multi-output kernel (built once, at the end)."""

    __slots__ = ("roots", "kernels", "first", "reads", "writes", "size", "depth")

    def __init__(self, root: int, k: Kernel):
        self.roots, self.kernels, self.first = [root], [k], k  # roots: indices in the plan
        self.reads = {i.slot for i in k.inputs}
        self.writes = {o.slot for o in k.outputs}
        self.size = len(k.nodes)
        self.depth: dict[int, int] = {}  # output slot -> its expression depth in the merged kernel
        self._note_depths(k)

    def add(self, root: int, k: Kernel) -> None:
        self.roots.append(root)
        self.kernels.append(k)
        self.reads.update(i.slot for i in k.inputs)
        self.writes.update(o.slot for o in k.outputs)
        self.size += len(k.nodes)
        self._note_depths(k)

    def _note_depths(self, k: Kernel) -> None:
        if _plain_elementwise(k):  # only elementwise outputs are ever used in registers
            d = _depths(k, self.depth)
            self.depth.update((o.slot, d[o.node]) for o in k.outputs)

    def kernel(self) -> Kernel:
        if len(self.kernels) == 1:
            return self.first
        if self.first.library is not None:
            out = self.first
            for k in self.kernels[1:]:
                out = _merge_results(out, k)
            return out
        return _concat_kernels(self.kernels)


def _groups(kernels: list[Kernel] | tuple[Kernel, ...], stored: bool | None = None,
            outputs: set[int] | None = None) -> list[_Group]:
    """The groups of kernels (over the same space and reduce axes, not depending on each
    other, or elementwise consumers of a group's stored outputs) each merged kernel
    computes, in execution order (see the module docstring). `stored`: merge consumers
    (default `stored_merging()`); `outputs`: the plan's output slots (see
    `_stored_anyway`)."""
    stored = stored_merging() if stored is None else stored
    in_memory = _stored_anyway(kernels, outputs) if stored else set()
    out: list[_Group] = []
    for root, k in enumerate(kernels):
        merged = False
        if k.library is not None:  # results of one call (same function, parameters, operands): one step
            for g in out[-MERGE_WINDOW:]:
                if g.first.library == k.library and g.first.inputs == k.inputs:
                    g.add(root, k)
                    merged = True
                    break
        elif k.matmul is None and k.mlp is None and k.rmsnorm is None:  # NOTE: MLP/rmsnorm kernels merge with nothing
            reads = {i.slot for i in k.inputs}
            for gi in range(len(out) - 1, max(len(out) - MERGE_WINDOW, 0) - 1, -1):
                g = out[gi]
                f = g.first
                if reads & g.writes and not (stored and _feeds(g, k, in_memory)):
                    break  # k depends on g: it cannot join g or anything before it
                if f.matmul is None and f.library is None and f.mlp is None and f.rmsnorm is None and \
                        f.shape == k.shape and f.reduce_axes == k.reduce_axes and (g.reads & reads or reads & g.writes):
                    if g.size + len(k.nodes) > MERGE_MAX_BODY:
                        break  # full: k starts a group of its own
                    # the merged kernel runs where g ran when k reads nothing written after g
                    # (k moves earlier), else where k runs when nothing after g reads g's
                    # outputs (g moves later)
                    later = out[gi + 1:]
                    if not any(reads & h.writes for h in later):
                        g.add(root, k)
                        merged = True
                    elif not any(h.reads & g.writes for h in later):
                        out.pop(gi)
                        g.add(root, k)
                        out.append(g)
                        merged = True
                    break
        if not merged:
            out.append(_Group(root, k))
    return out


def sibling_groups(kernels: list[Kernel] | tuple[Kernel, ...], outputs: set[int] | None = None) -> list[list[int]]:
    """The indices of `kernels` each merged kernel computes, in the merged plan's order
    (`outputs`: the plan's output slots)."""
    return [g.roots for g in _groups(kernels, outputs=outputs)]


def merge_siblings(plan: Plan) -> Plan:
    """`plan` with its sibling kernels merged (see the module docstring); the plan itself
    when nothing merges."""
    groups = _groups(plan.kernels, outputs={s for s, _ in plan.outputs})
    if len(groups) == len(plan.kernels):
        return plan
    return dataclasses.replace(plan, kernels=tuple(g.kernel() for g in groups))


def _merge_results(a: Kernel, b: Kernel) -> Kernel:
    """One library step writing the outputs of two steps of the same call."""
    base = len(a.nodes)
    outs = a.outputs + tuple(KOutput(o.slot, base + o.node, o.dtype, o.shape) for o in b.outputs)
    return Kernel(f"{a.name}+{b.name}", a.shape, a.inputs, a.nodes + b.nodes, outs, library=a.library)


def _concat_kernels(kernels: list[Kernel]) -> Kernel:
    """One multi-output kernel computing every kernel of `kernels` (same space and reduce
    axes), inputs and body nodes shared where equal."""
    a = kernels[0]
    inputs: list[KInput] = list(a.inputs)
    in_ids = {(i.slot, i.view.key()): j for j, i in enumerate(inputs)}
    nodes: list[KNode] = [KNode(n.op, n.dtype, n.src, n.arg) for n in a.nodes]
    node_ids = {n.key(): j for j, n in enumerate(nodes)}
    outs = [KOutput(o.slot, o.node, o.dtype, o.shape, o.reduced) for o in a.outputs]
    for b in kernels[1:]:
        remap: dict[int, int] = {}
        written = {o.slot: o for o in outs}  # outputs of earlier members: used in registers
        for j, n in enumerate(b.nodes):
            arg = n.arg
            if n.op == LOAD and b.inputs[arg].slot in written:
                inp, o = b.inputs[arg], written[b.inputs[arg].slot]
                if not (_plain_elementwise(b) and _identity_read(b, inp, o) and nodes[o.node].dtype == n.dtype):
                    raise KernelError(f"sibling merge: kernel {b.name} reads slot {inp.slot} written in the same "
                                      f"merged kernel through a view other than the identity")
                remap[j] = o.node
                continue
            if n.op == LOAD:
                inp = b.inputs[arg]
                k = (inp.slot, inp.view.key())
                if k not in in_ids:
                    inputs.append(inp)
                    in_ids[k] = len(inputs) - 1
                arg = in_ids[k]
            nn = KNode(n.op, n.dtype, tuple(remap[s] for s in n.src), arg)
            nk = nn.key()
            if nk in node_ids:
                remap[j] = node_ids[nk]
            else:
                nodes.append(nn)
                node_ids[nk] = remap[j] = len(nodes) - 1
        outs.extend(KOutput(o.slot, remap[o.node], o.dtype, o.shape, o.reduced) for o in b.outputs)
    nodes2, outs2 = assign_passes(nodes, outs)
    return Kernel("+".join(k.name for k in kernels), a.shape, tuple(inputs), tuple(nodes2), tuple(outs2),
                  a.reduce_axes)

