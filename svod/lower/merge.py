"""The sibling-merging plan pass: kernels over the same iteration space and reduce axes
that do not depend on each other become one multi-output kernel (one pass over their
shared inputs).

Contract: `sibling_groups(kernels)` is a pure function of the kernel list (the lowering
asks it which kernels will share a kernel before it decides which reductions to
materialise once, `svod.lower.build.build_plan`); `merge_siblings(plan)` merges exactly
those groups, each where its members may all run (no kernel reads a slot before it is
written), bodies and inputs shared where equal. Linear in the kernels: a kernel looks at
most `MERGE_WINDOW` groups back, and a group stops growing past `MERGE_MAX_BODY` body
nodes (each merged kernel compiles in bounded time).
"""

from __future__ import annotations

import dataclasses

from svod.kernel import LOAD, Kernel, KInput, KNode, KOutput, Plan
from svod.lower.build import MAX_BODY, assign_passes

MERGE_WINDOW = 32  # sibling merging looks this many kernels back (planning stays linear in the kernels)
MERGE_MAX_BODY = 2 * MAX_BODY  # body nodes of a merged multi-output kernel at most (compile time bounded)


class _Group:
    """Kernels merged into one multi-output kernel (built once, at the end)."""

    __slots__ = ("roots", "kernels", "first", "reads", "writes", "size")

    def __init__(self, root: int, k: Kernel):
        self.roots, self.kernels, self.first = [root], [k], k  # roots: indices in the plan
        self.reads = {i.slot for i in k.inputs}
        self.writes = {o.slot for o in k.outputs}
        self.size = len(k.nodes)

    def add(self, root: int, k: Kernel) -> None:
        self.roots.append(root)
        self.kernels.append(k)
        self.reads.update(i.slot for i in k.inputs)
        self.writes.update(o.slot for o in k.outputs)
        self.size += len(k.nodes)

    def kernel(self) -> Kernel:
        if len(self.kernels) == 1:
            return self.first
        if self.first.library is not None:
            out = self.first
            for k in self.kernels[1:]:
                out = _merge_results(out, k)
            return out
        return _concat_kernels(self.kernels)


def _groups(kernels: list[Kernel] | tuple[Kernel, ...]) -> list[_Group]:
    """The groups of kernels (over the same space and reduce axes, not depending on each
    other) each merged kernel computes, in execution order (see the module docstring)."""
    out: list[_Group] = []
    for root, k in enumerate(kernels):
        merged = False
        if k.library is not None:  # results of one call (same function, parameters, operands): one step
            for g in out[-MERGE_WINDOW:]:
                if g.first.library == k.library and g.first.inputs == k.inputs:
                    g.add(root, k)
                    merged = True
                    break
        elif k.matmul is None:
            reads = {i.slot for i in k.inputs}
            for gi in range(len(out) - 1, max(len(out) - MERGE_WINDOW, 0) - 1, -1):
                g = out[gi]
                f = g.first
                if reads & g.writes:
                    break  # k depends on g: it cannot join g or anything before it
                if f.matmul is None and f.library is None and f.shape == k.shape and \
                        f.reduce_axes == k.reduce_axes and (g.reads & reads):
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


def sibling_groups(kernels: list[Kernel] | tuple[Kernel, ...]) -> list[list[int]]:
    """The indices of `kernels` each merged kernel computes, in the merged plan's order."""
    return [g.roots for g in _groups(kernels)]


def merge_siblings(plan: Plan) -> Plan:
    """`plan` with its sibling kernels merged (see the module docstring); the plan itself
    when nothing merges."""
    groups = _groups(plan.kernels)
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
        for j, n in enumerate(b.nodes):
            arg = n.arg
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

