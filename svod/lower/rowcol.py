"""Row-column fusion: reductions of one 2-D input over axis 1 and over axis 0 become one
kernel that reads the input once (`Kernel.rowcol`, lowered by `svod.codegen.rowcol`).

A kernel has one set of reduce axes, so ``x.sum(1)`` and ``x.max(0)`` of one (m, n)
input are two kernels (sibling merging joins reductions over the same axes only) and x
is read twice: for a DRAM-sized x the second read is half the time. The row-column
kernel computes each row's reductions in registers while the column partials of a fixed
block of rows accumulate in a cache-resident vector; the partials of the blocks are
combined in block order, so the result does not depend on the thread count.

`fuse_rowcol(plan)` is a plan pass (`svod.lower.passes.PLAN_PASSES`, after sibling
merging). It looks for

1. a *row* kernel (a single-pass reduce kernel over axis 1 of a 2-D space) and a
   *column* kernel (over axis 0 of the same space) reading a common input through the
   same view, every input of both written before the earlier of the two runs (neither
   reads the other's results); their bodies are merged (equal nodes once, so an
   elementwise prologue such as ``x * x`` is computed once for both) and the kernel runs
   where the earlier one ran;
2. then, repeatedly, a later kernel reading only results of the new kernel of one space
   (all per-row or all per-column values, read element for element): an elementwise
   kernel (a copy to an output's shape, ``mean = sum * (1/n)``) or a reduction of the
   whole (``x.sum()`` computed from the column sums) joins it; its values are computed
   in the kernel where the per-row / per-column values are, and results no kernel reads
   any longer are not stored.

REDUCE nodes must be sum, max or min of a real or integer dtype, and the element values
those the kernel computes as vectors (`vector_elements`: loads along unit-stride rows,
``+ - *``, float ``neg`` and ``/``); other kernels (a variance's two passes, an argmax, a
complex product, a transcendental or a cast before the reductions, a transposed input)
are left alone. The pass is exact
in the sense of every fusion: the same operations, sums in another (fixed) order. Off
with ``SVOD_FUSE_ROWCOL=0``.
"""

from __future__ import annotations

import dataclasses
import os

from svod.ir import ELEMENTWISE, Ops
from svod.kernel import ALL, COL, ELEM, LOAD, ROW, Kernel, KernelError, KInput, KNode, KOutput, Plan, RowColSpec

__all__ = ["fuse_rowcol", "rowcol_enabled"]

WINDOW = 32  # kernels looked ahead for the other reduction of a pair (linear planning)
_EW = ELEMENTWISE - {Ops.CONTIGUOUS}


def rowcol_enabled() -> bool:
    """`SVOD_FUSE_ROWCOL` is not 0."""
    return os.environ.get("SVOD_FUSE_ROWCOL", "1") not in ("0", "false", "False")


def _plain(k: Kernel) -> bool:
    return k.matmul is None and k.attention is None and k.library is None and k.rowcol is None


def _unmasked(inp: KInput) -> bool:
    return len(inp.view.views) == 1 and inp.view.views[0].mask is None and not inp.dtype.is_complex


def _reduce_spaces(k: Kernel) -> list[int] | None:
    """The spaces of a single-pass 2-D reduce kernel's nodes over axis 1 (ROW) or 0
    (COL), or None when the kernel is not one the row-column kernel computes."""
    if not _plain(k) or len(k.shape) != 2 or k.reduce_axes not in ((0,), (1,)) or k.passes != 1:
        return None
    if min(k.shape) < 2 or not all(_unmasked(i) for i in k.inputs):
        return None
    red = ROW if k.reduce_axes == (1,) else COL
    sp: list[int] = []
    for n in k.nodes:
        have = {sp[s] for s in n.src}
        if n.op == LOAD:
            s = ELEM
        elif n.op is Ops.CONST:
            s = ALL
        elif n.op is Ops.REDUCE:
            if n.arg not in ("sum", "max", "min") or n.dtype.is_complex or have != {ELEM}:
                return None
            s = red
        elif n.op in _EW and not n.dtype.is_complex:
            live = have - {ALL}
            if len(live) > 1:
                return None
            s = live.pop() if live else ALL
        else:
            return None
        sp.append(s)
    if not k.outputs or any(not o.reduced or sp[o.node] != red for o in k.outputs):
        return None
    return sp


class _Body:
    """The merged kernel's inputs, nodes (equal nodes once) and outputs."""

    def __init__(self):
        self.inputs: list[KInput] = []
        self.nodes: list[KNode] = []
        self.spaces: list[int] = []
        self.outputs: list[KOutput] = []
        self._seen: dict[tuple, int] = {}

    def input(self, inp: KInput) -> int:
        for i, have in enumerate(self.inputs):
            if have.slot == inp.slot and have.dtype == inp.dtype and have.view == inp.view:
                return i
        self.inputs.append(inp)
        return len(self.inputs) - 1

    def node(self, n: KNode, space: int) -> int:
        n = dataclasses.replace(n, pass_=0 if n.op is Ops.REDUCE else None)
        key = (n.key(), space)
        got = self._seen.get(key)
        if got is None:
            self.nodes.append(n)
            self.spaces.append(space)
            got = self._seen[key] = len(self.nodes) - 1
        return got

    def copy(self, k: Kernel, spaces: list[int], given: dict[int, int] | None = None) -> dict[int, int]:
        """Append kernel k's nodes (their spaces `spaces`), loads in `given` (node of k ->
        node here) replaced; the remapping."""
        remap = dict(given or {})
        for i, n in enumerate(k.nodes):
            if i in remap:
                continue
            if n.op == LOAD:
                n = dataclasses.replace(n, arg=self.input(k.inputs[n.arg]))
            else:
                n = dataclasses.replace(n, src=tuple(remap[s] for s in n.src))
            remap[i] = self.node(n, spaces[i])
        return remap

    def kernel(self, name: str, shape: tuple[int, int]) -> Kernel:
        return Kernel(name, shape, tuple(self.inputs), tuple(self.nodes), tuple(self.outputs), (0, 1),
                      rowcol=RowColSpec(tuple(self.spaces)))

    @classmethod
    def of(cls, k: Kernel) -> _Body:
        b = cls()
        b.inputs = list(k.inputs)
        b.nodes = list(k.nodes)
        b.spaces = list(k.rowcol.spaces)
        b.outputs = list(k.outputs)
        b._seen = {(n.key(), s): i for i, (n, s) in enumerate(zip(b.nodes, b.spaces))}
        return b


# element ops the row-column kernel writes as vector instructions (svod/codegen/rowcol.py)
VECTOR_OPS = (Ops.ADD, Ops.SUB, Ops.MUL)
VECTOR_FLOAT_OPS = (Ops.NEG, Ops.DIV)


def vector_elements(k: Kernel) -> bool:
    """The element values of row-column kernel `k` are loads along unit-stride (or
    broadcast) rows and `VECTOR_OPS` (float `VECTOR_FLOAT_OPS`) of them and of constants:
    what its code computes as vectors. Other prologues (a transcendental, a cast, a
    strided or transposed row) would run as scalar code there, slower than the two
    kernels' vectorised loops (measured: exp(tanh(sin x * cos x)) summed over both axes
    of 512 x 512, 3x the CPU time), so the pass leaves those pairs alone."""
    sp = k.rowcol.spaces
    for i, n in enumerate(k.nodes):
        if sp[i] != ELEM:
            continue
        if n.op == LOAD:
            if k.inputs[n.arg].view.views[0].strides[1] not in (0, 1):
                return False
        elif not (n.op in VECTOR_OPS or (n.op in VECTOR_FLOAT_OPS and n.dtype.is_float)):
            return False
    return True


def _identity(view, count: int) -> bool:
    """The (single, unmasked) view reads element i of a `count`-element buffer at the
    view's row-major index i."""
    if len(view.views) != 1:
        return False
    v = view.views[0]
    if v.mask is not None or v.offset != 0:
        return False
    size = 1
    for s in v.shape:
        size *= s
    if size != count:
        return False
    want = 1
    for s, st in reversed(list(zip(v.shape, v.strides))):
        if s != 1 and st != want:
            return False
        want *= s
    return True


def _derived(rc: Kernel, d: Kernel) -> tuple[int, dict[int, int]] | None:
    """(space, load node of d -> node of rc) when `d` reads only per-row or only
    per-column results of `rc`, each element for element, and is an elementwise kernel
    or a reduction of the whole; else None."""
    if not _plain(d) or d.passes != 1 or not d.inputs:
        return None
    out_node = {o.slot: o.node for o in rc.outputs}
    sp = rc.rowcol.spaces
    space = None
    given: dict[int, int] = {}
    for i, n in enumerate(d.nodes):
        if n.op != LOAD:
            continue
        inp = d.inputs[n.arg]
        src = out_node.get(inp.slot)
        if src is None or inp.dtype != rc.nodes[src].dtype:
            return None
        s = sp[src]
        if s not in (ROW, COL) or (space is not None and s != space):
            return None
        space = s
        if not _identity(inp.view, rc.shape[0] if s == ROW else rc.shape[1]):
            return None
        given[i] = src
    if space is None:
        return None
    count = rc.shape[0] if space == ROW else rc.shape[1]
    if d.size != count:
        return None
    whole = bool(d.reduce_axes)
    if whole:
        red = set(d.reduce_axes)
        if any(s != 1 for a, s in enumerate(d.shape) if a not in red):
            return None
    for n in d.nodes:
        if n.op == LOAD or n.op is Ops.CONST:
            continue
        if n.dtype.is_complex:
            return None
        if n.op is Ops.REDUCE:
            if not whole or n.arg not in ("sum", "max", "min"):
                return None
        elif n.op not in _EW:
            return None
    for o in d.outputs:
        if whole != o.reduced:
            return None
    return space, given


def _absorb(rc: Kernel, d: Kernel, space: int, given: dict[int, int]) -> Kernel:
    body = _Body.of(rc)
    spaces: list[int] = []
    for i, n in enumerate(d.nodes):
        if n.op is Ops.CONST:
            spaces.append(ALL)
            continue
        srcs = [spaces[s] for s in n.src]
        if i in given:
            spaces.append(space)
        elif n.op is Ops.REDUCE:
            spaces.append(ALL)
        else:
            live = set(srcs) - {ALL}
            spaces.append(live.pop() if live else ALL)
    remap = body.copy(d, spaces, given)
    for o in d.outputs:
        body.outputs.append(dataclasses.replace(o, node=remap[o.node], reduced=True))
    return body.kernel(rc.name + "+" + d.name, rc.shape)


def _pair(kc: Kernel, sc: list[int], kr: Kernel, sr: list[int]) -> Kernel:
    body = _Body()
    for k, sp in ((kc, sc), (kr, sr)):
        remap = body.copy(k, sp)
        body.outputs += [dataclasses.replace(o, node=remap[o.node]) for o in k.outputs]
    return body.kernel(f"{kc.name}+{kr.name}_rowcol", kc.shape)


def _prune(rc: Kernel, read: set[int]) -> Kernel:
    """`rc` without the outputs nobody reads (`read`: slots read later or plan outputs)
    and the nodes only they needed."""
    outs = [o for o in rc.outputs if o.slot in read]
    if len(outs) == len(rc.outputs):
        return rc
    need: set[int] = set()
    todo = [o.node for o in outs]
    while todo:
        i = todo.pop()
        if i not in need:
            need.add(i)
            todo.extend(rc.nodes[i].src)
    keep = sorted(need)
    new = {old: j for j, old in enumerate(keep)}
    used_in = sorted({rc.nodes[i].arg for i in keep if rc.nodes[i].op == LOAD})
    new_in = {old: j for j, old in enumerate(used_in)}
    nodes = []
    for i in keep:
        n = rc.nodes[i]
        n = dataclasses.replace(n, arg=new_in[n.arg]) if n.op == LOAD else \
            dataclasses.replace(n, src=tuple(new[s] for s in n.src))
        nodes.append(n)
    return dataclasses.replace(rc, inputs=tuple(rc.inputs[i] for i in used_in), nodes=tuple(nodes),
                               outputs=tuple(dataclasses.replace(o, node=new[o.node]) for o in outs),
                               rowcol=RowColSpec(tuple(rc.rowcol.spaces[i] for i in keep)))


def fuse_rowcol(plan: Plan) -> Plan:
    """`plan` with each row/column reduction pair of one input as one row-column kernel
    (see the module docstring); the plan itself when there is none."""
    if not rowcol_enabled():
        return plan
    kernels = list(plan.kernels)
    spaces = [_reduce_spaces(k) for k in kernels]
    if sum(1 for s in spaces if s is not None) < 2:
        return plan
    changed = False
    i = 0
    while i < len(kernels):
        si = spaces[i]
        if si is None:
            i += 1
            continue
        ki = kernels[i]
        written = set(range(plan.n_inputs)) | {o.slot for k in kernels[:i] for o in k.outputs}
        reads_i = {(x.slot, x.view, x.dtype) for x in ki.inputs}
        found = None
        for j in range(i + 1, min(len(kernels), i + 1 + WINDOW)):
            kj, sj = kernels[j], spaces[j]
            if sj is None or kj.shape != ki.shape or kj.reduce_axes == ki.reduce_axes:
                continue
            if not reads_i & {(x.slot, x.view, x.dtype) for x in kj.inputs}:
                continue
            if all(x.slot in written for x in kj.inputs):
                found = j
                break
        if found is None:
            i += 1
            continue
        j = found
        kc, sc, kr, sr = (ki, si, kernels[j], spaces[j]) if ki.reduce_axes == (0,) else (kernels[j], spaces[j], ki, si)
        rc = _pair(kc, sc, kr, sr)
        if not vector_elements(rc):
            i += 1
            continue
        del kernels[j], spaces[j]
        # later kernels computed from its per-row or per-column results join it
        q = i + 1
        while q < len(kernels):
            got = _derived(rc, kernels[q])
            if got is not None:
                new = _absorb(rc, kernels[q], *got)
                try:  # a kernel mixing its values with a reduction of them stays on its own
                    new.check()
                except KernelError:
                    new = None
                if new is not None:
                    rc = new
                    del kernels[q], spaces[q]
                    continue
            q += 1
        read = {s for s, _ in plan.outputs} | {x.slot for k in kernels[i + 1:] for x in k.inputs}
        rc = _prune(rc, read)
        kernels[i] = rc
        spaces[i] = None
        changed = True
        i += 1
    if not changed:
        return plan
    live = {o.slot for k in kernels for o in k.outputs} | set(range(plan.n_inputs))
    slots = {s: info for s, info in plan.slots.items() if s in live}
    out = dataclasses.replace(plan, kernels=tuple(kernels), slots=slots)
    out.check()
    return out
