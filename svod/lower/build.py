"""The lowering's first step: GraphKey + materialised set -> one Kernel per materialised
node, and the unmerged Plan over them (`build_plan`; `svod.lower.lower` then runs the
plan passes).

Contract:

- A kernel computes one materialised node (its *root*) and inlines every producer that
  is not materialised, recomputing it in each kernel that reads it. Movement ops become
  the views of its loads; a reduction is hosted when its input is the kernel's iteration
  space (reduce-then-broadcast: softmax, layernorm as one row-wise multi-pass kernel); a
  matmul is computed in the kernel of its elementwise epilogue, or alone: the BLAS step
  or the generated GEMM, whichever `svod.costing.bare_matmul_choice` prices cheaper.
- Kernel kinds (`KERNEL_KINDS`, search/kinds.py): a matmul whose A operand's producer is
  not materialised is built by a kind's builder when one takes it (the attention kernel:
  the row softmax of a scaled/masked matmul inlined, `svod.lower.attention`); else the
  producer is materialised like any operand that is not a view.
- Legality adds boundaries, never removes them: a producer a kernel cannot compute (a
  matmul or `contiguous()` inside an expression, an unhostable reduction, a matmul
  operand that is not a view, a body past `MAX_BODY` nodes or an expression deeper than
  `MAX_DEPTH`) is materialised and built as a kernel of its own; a reduction that two
  kernels would each compute (after sibling merging) is materialised once.
- Node i's value lives in slot `n_inputs + i` (inputs keep their binding index), so a
  kernel's slots do not depend on which other values are materialised; kernels run in
  node order.
- No Python recursion: bodies are built by an explicit worklist (`_KernelBuilder.lower`)
  and kernels by a heap of roots; a forced boundary is a returned value, not an exception.
"""

from __future__ import annotations

import dataclasses
import heapq
from dataclasses import dataclass

from svod.costing import bare_matmul_choice
from svod.dtype import bool_
from svod.ir import ELEMENTWISE, MOVEMENT, Ops
from svod.kernel import (
    ACC,
    LOAD,
    RESULT,
    VALID,
    Kernel,
    KInput,
    KNode,
    KOutput,
    LibrarySpec,
    MatmulSpec,
    Plan,
    SlotInfo,
)
from svod.key import GraphKey, KeyNode
from svod.lower.attention import build_attention
from svod.lower.cover import initial_materialized
from svod.lower.mlp import build_mlp
from svod.lower.rmsnorm import build_rmsnorm
from svod.view import View, ViewChain, apply_movement

MAX_BODY = 384  # body nodes per kernel before a producer is materialised (compile time stays bounded)
# Kernel kinds (search/kinds.py): consumer op -> builders tried, in order, when a kernel of
# that op finds an operand's producer not materialised; each returns what `_build_kernel`
# returns, or None (the producer is then materialised, as without the kind)
KERNEL_KINDS = {Ops.MATMUL: (build_attention, build_mlp, build_rmsnorm)}
# the kinds whose kernel also computes the consumer's elementwise epilogue: tried, like
# KERNEL_KINDS, when a matmul with an epilogue finds its A operand's producer not materialised
KERNEL_KINDS_EPILOGUE = {Ops.MATMUL: (build_mlp, build_rmsnorm)}
KIND_NAMES = ("attention", "mlp", "rmsnorm")  # the `Kernel.kind` of each kind's kernels (svod.explain's variants table)
MAX_DEPTH = 200  # expression depth below a kernel's root (movement ops count) before a producer is materialised

Stack = tuple[tuple[str, object], ...]  # movement ops from the kernel's root down


@dataclass(frozen=True)
class Cut:
    """A kernel could not be built: node `node` must be materialised first."""

    node: int


_CHAINS: dict[tuple[tuple[int, ...], Stack], ViewChain] = {}  # (base shape, stack) -> its chain
_CHAINS_MAX = 4096  # entries (a few MB at most: a stack holds up to MAX_DEPTH ops)


def _try_chain(base_shape: tuple[int, ...], stack: Stack) -> ViewChain | None:
    """The view of a value of `base_shape` under the movement ops of `stack` (root first),
    None when a movement op cannot be composed into a view.
    Memoised across kernels and plans (chains are immutable): the steps of a loop load
    their values through equal stacks, so a plan of many similar kernels composes each
    distinct view once. NOTE: the lowering's PAD entries always pad with 0 (the pad value
    is a WHERE of its own), so equal keys never differ by a -0.0 pad value."""
    k = (base_shape, stack)
    chain = _CHAINS.get(k)
    if chain is not None:
        return chain
    chain = ViewChain.of(base_shape)
    for op, arg in reversed(stack):
        chain = apply_movement(chain, op, arg)
        if chain is None:
            return None
    if len(_CHAINS) >= _CHAINS_MAX:
        _CHAINS.clear()
    _CHAINS[k] = chain
    return chain


def _chain(base_shape: tuple[int, ...], stack: Stack) -> ViewChain:
    """`_try_chain` where the lowering built `stack` from ops a view can express."""
    chain = _try_chain(base_shape, stack)
    assert chain is not None, (base_shape, stack)
    return chain


class _KernelBuilder:
    """Lowers the expression below one materialised root into one Kernel body.

    `lower(i, stack)` walks the expression with an explicit worklist of (node, stack)
    visits — an "enter" that emits leaves and decides legality, an "exit" that emits the
    node from its sources' body nodes — in the order a depth-first walk would (sources
    left to right), with local CSE (`emit`) and a memo per (node, stack). When the walk
    meets a producer the kernel cannot compute (a matmul or `contiguous()` inside the
    expression, a reduction it cannot host, a body past `MAX_BODY`, an expression deeper
    than `MAX_DEPTH`), it stops and records that producer in `cut`: the caller
    materialises it and builds again."""

    def __init__(self, key: GraphKey, materialized: set[int], slot_of: dict[int, int],
                 space: tuple[int, ...], reduce_axes: tuple[int, ...] | None, seen: set[int]):
        self.key = key
        self.materialized = materialized
        self.slot_of = slot_of
        self.space = space
        self.reduce_axes = reduce_axes
        self.nodes: list[KNode] = []
        self.inputs: list[KInput] = []
        self._node_ids: dict[tuple, int] = {}
        self._input_ids: dict[tuple, int] = {}
        self._memo: dict[tuple[int, Stack], int] = {}
        self.inlined_reduces: set[int] = set()
        self.root = -1  # the node this kernel computes (materialised, but not loaded)
        self.matmul_node = -1  # a MATMUL computed in this kernel (its result is the ACC node)
        self.seen = seen  # nodes whose boundary status this kernel depended on
        self.cut: int | None = None  # a producer that must be materialised first

    # body construction with local CSE
    def emit(self, op, dtype, src=(), arg=None) -> int:
        k = KNode(op, dtype, tuple(src), arg).key()
        if k in self._node_ids:
            return self._node_ids[k]
        self.nodes.append(KNode(op, dtype, tuple(src), arg))
        self._node_ids[k] = len(self.nodes) - 1
        return len(self.nodes) - 1

    def add_input(self, slot: int, dtype, view: ViewChain, operand: bool = False) -> int:
        """The input reading `view` of `slot`. A matmul operand (`operand`) never shares
        its entry with an elementwise LOAD of the same view: the operands are read by the
        packer, the epilogue's loads in kernel space (`Kernel.check`)."""
        k = (slot, view.key(), operand)
        if k not in self._input_ids:
            self.inputs.append(KInput(slot, dtype, view))
            self._input_ids[k] = len(self.inputs) - 1
        return self._input_ids[k]

    def load(self, i: int, stack: Stack) -> int:
        n = self.key.nodes[i]
        inp = self.add_input(self.slot_of[i], n.dtype, _chain(n.shape, stack))
        return self.emit(LOAD, n.dtype, (), inp)

    def lower(self, i: int, stack: Stack) -> int | None:
        """The body node computing node `i` read through the movement ops of `stack`;
        None when a producer must be materialised first (`self.cut`)."""
        # (exit?, node, stack, depth, the sources an exit reads)
        work: list[tuple[bool, int, Stack, int, tuple]] = [(False, i, stack, 0, ())]
        while work:
            leave, j, st, depth, srcs = work.pop()
            if leave:
                self._memo[(j, st)] = self._exit(j, st, srcs)
                continue
            if (j, st) in self._memo:
                continue
            got = self._enter(j, st, depth)
            if got is None:
                return None
            if isinstance(got, int):
                self._memo[(j, st)] = got
                continue
            work.append((True, j, st, depth, got))
            work.extend((False, s, s_st, depth + 1, ()) for s, s_st in reversed(got))
        return self._memo[(i, stack)]

    def _enter(self, i: int, stack: Stack, depth: int) -> int | tuple[tuple[int, Stack], ...] | None:
        """First visit of (i, stack): the body node of a leaf, else the (source, stack)
        visits its exit needs; None (and `cut` set) when i must be materialised."""
        n: KeyNode = self.key.nodes[i]
        self.seen.add(i)
        if (i in self.materialized and i != self.root) or n.op is Ops.BUFFER:
            return self.load(i, stack)
        if depth > MAX_DEPTH or (len(self.nodes) > MAX_BODY and n.op not in MOVEMENT):
            return self.stop_at(i)
        if n.op is Ops.CONST:
            return self.emit(Ops.CONST, n.dtype, (), n.arg)
        if n.op in MOVEMENT and n.op is not Ops.PAD:
            return ((n.src[0], stack + ((n.op.value, n.arg),)),)
        if n.op is Ops.PAD:
            return ((n.src[0], stack + (("PAD", (n.arg[0], 0)),)),)
        if n.op is Ops.CAT:
            return tuple((s, stack + (("PAD", (pads, 0)),)) for s, pads in _cat_pads(self.key, n))
        if n.op in ELEMENTWISE:
            return tuple((s, stack) for s in n.src)
        if n.op in (Ops.REDUCE, Ops.ARGMAX, Ops.ARGMIN):
            axes = n.arg[1] if n.op is Ops.REDUCE else (n.arg,)
            if not self._hostable(n, axes, self.key.nodes[n.src[0]].shape, stack):
                return self.stop_at(i)
            self.reduce_axes = tuple(axes)
            self.inlined_reduces.add(i)
            return ((n.src[0], ()),)
        if n.op is Ops.CONTIGUOUS and i == self.root:  # the kernel that materialises it
            return ((n.src[0], stack),)
        if n.op is Ops.MATMUL and i == self.matmul_node:
            chain = _chain(n.shape, stack)
            if len(chain.views) == 1 and chain.views[0] == View.contiguous(self.space):
                return self.emit(ACC, n.dtype)
        # MATMUL, CONTIGUOUS inside an expression: always their own kernel
        return self.stop_at(i)

    def _exit(self, i: int, stack: Stack, srcs: tuple[tuple[int, Stack], ...]) -> int:
        """The body node of (i, stack) once every source visit of `srcs` is lowered."""
        n: KeyNode = self.key.nodes[i]
        vals = [self._memo[s] for s in srcs]
        if n.op is Ops.PAD:
            value = n.arg[1]
            inner = vals[0]
            zero = value == 0 and not (isinstance(value, float) and str(value) == "-0.0")
            if zero and self.nodes[inner].op == LOAD:
                return inner  # a masked load already reads 0 outside
            valid = self.emit(VALID, bool_, (), _chain(self.key.nodes[n.src[0]].shape, srcs[0][1]))
            c = self.emit(Ops.CONST, n.dtype, (), value)
            return self.emit(Ops.WHERE, n.dtype, (valid, inner, c))
        if n.op is Ops.CAT:
            acc = vals[-1]
            for val, (s, st) in reversed(list(zip(vals[:-1], srcs[:-1]))):
                valid = self.emit(VALID, bool_, (), _chain(self.key.nodes[s].shape, st))
                acc = self.emit(Ops.WHERE, n.dtype, (valid, val, acc))
            return acc
        if n.op in ELEMENTWISE:
            return self.emit(n.op, n.dtype, vals, n.arg if n.op is not Ops.CAST else None)
        if n.op in (Ops.REDUCE, Ops.ARGMAX, Ops.ARGMIN):
            return self.emit(n.op, n.dtype, (vals[0],), n.arg[0] if n.op is Ops.REDUCE else None)
        return vals[0]  # a movement op or the root's CONTIGUOUS: its source's value

    def stop_at(self, i: int) -> None:
        """Record that node i must be materialised first; None (the walk stops)."""
        self.cut = i
        return None

    def _hostable(self, n: KeyNode, axes, in_shape, stack: Stack) -> bool:
        if self.matmul_node >= 0:
            return False  # a matmul kernel's epilogue is elementwise only
        if in_shape != self.space or (self.reduce_axes is not None and tuple(self.reduce_axes) != tuple(axes)):
            return False
        chain = _try_chain(n.shape, stack)
        return chain is not None and len(chain.views) == 1 and \
            chain.views[0] == View.contiguous(n.shape).expand(self.space)


def _cat_pads(key: GraphKey, n: KeyNode):
    """(source, pads) per part of a CAT: each part padded to the whole along the axis."""
    axis = n.arg
    total = n.shape[axis]
    off = 0
    out = []
    for s in n.src:
        length = key.nodes[s].shape[axis]
        out.append((s, tuple((off, total - off - length) if a == axis else (0, 0) for a in range(len(n.shape)))))
        off += length
    return out


def _find_reduced_space(key: GraphKey, root: int, materialized: set[int], seen: set[int]):
    """If the root's value is an epilogue over a reduction (its elements in the reduction's
    output order), return (input space, axes) so the kernel hosts the reduction."""
    stack_nodes = [(root, ())]
    seen = set()
    steps = 0
    while stack_nodes and steps < 4 * MAX_BODY:
        i, stack = stack_nodes.pop()
        seen.add(i)
        steps += 1
        if (i, stack) in seen or (i in materialized and i != root):
            continue
        seen.add((i, stack))
        n = key.nodes[i]
        if n.op in (Ops.REDUCE, Ops.ARGMAX, Ops.ARGMIN):
            axes = n.arg[1] if n.op is Ops.REDUCE else (n.arg,)
            chain = _chain(n.shape, stack)
            if len(chain.views) == 1 and chain.views[0].is_contiguous and chain.views[0].mask is None:
                return key.nodes[n.src[0]].shape, tuple(axes)
            continue
        if n.op in (Ops.RESHAPE,):
            stack_nodes.append((n.src[0], stack + (("RESHAPE", n.arg),)))
        elif n.op in ELEMENTWISE:
            stack_nodes.extend((s, stack) for s in n.src)
    return None


def _build_kernel(key: GraphKey, root: int, materialized: set[int], slot_of: dict[int, int], name: str):
    """One kernel computing materialised node `root`: (kernel, inlined reductions, seen),
    or `Cut(node)` when `node` must be materialised first. `seen` holds every node whose
    boundary status the kernel depended on, so a cached kernel stays valid while the
    materialised set agrees on `seen` (the search re-lowers many similar choices)."""
    seen: set[int] = {root}
    rn = key.nodes[root]
    inner = root
    while key.nodes[inner].op is Ops.RESHAPE and key.nodes[inner].src[0] not in materialized:
        seen.add(key.nodes[inner].src[0])
        inner = key.nodes[inner].src[0]
    seen.add(key.nodes[inner].src[0] if key.nodes[inner].src else inner)
    n = key.nodes[inner]

    def builder(space, axes):
        return _KernelBuilder(key, materialized, slot_of, space, axes, seen)

    if n.op is Ops.LIBRARY:  # a library call: operands are views of materialised values
        b = builder(rn.shape, None)
        ins = []
        for s in n.src:
            inp = _operand_view(b, key, s, materialized)
            if inp is None:
                return Cut(b.cut)
            ins.append(inp)
        fn, params, j, _ = n.arg
        k = Kernel(name, rn.shape, tuple(ins), (KNode(RESULT, n.dtype, (), j),),
                   (KOutput(slot_of[root], 0, n.dtype, rn.shape),), library=LibrarySpec(fn, params))
        return k, set(), seen
    if n.op is Ops.MATMUL:
        b = builder(rn.shape, None)
        a_shape, b_shape = key.nodes[n.src[0]].shape, key.nodes[n.src[1]].shape
        ia = _operand_input(b, key, n.src[0], materialized)
        ib = None if ia is None else _operand_input(b, key, n.src[1], materialized)
        if ib is None:
            if inner == root:  # a kernel kind may compute the operand's producer with the matmul
                for kind in KERNEL_KINDS.get(n.op, ()):
                    got = kind(key, root, materialized, slot_of, _build_kernel)
                    if got is not None:
                        return got
            return Cut(b.cut)
        acc = b.emit(ACC, n.dtype)
        spec = MatmulSpec(ia, ib, a_shape[-2], b_shape[-1], a_shape[-1], library=True)
        k = Kernel(name, n.shape, tuple(b.inputs), tuple(b.nodes),
                   (KOutput(slot_of[root], acc, n.dtype, rn.shape),), (), spec)
        library, _ = bare_matmul_choice(k)  # the BLAS step or the generated GEMM, by price
        if not library:
            k = dataclasses.replace(k, matmul=dataclasses.replace(spec, library=False))
        return k, set(), seen
    is_reduce = n.op in (Ops.REDUCE, Ops.ARGMAX, Ops.ARGMIN)
    mm = None if is_reduce else _find_matmul(key, inner, materialized, seen)
    if mm is not None:  # a matmul with its elementwise epilogue in one kernel
        j = key.nodes[mm]
        space = j.shape
        b = builder(space, None)
        b.root, b.matmul_node = inner, mm
        ia = _operand_input(b, key, j.src[0], materialized)
        ib = None if ia is None else _operand_input(b, key, j.src[1], materialized)
        stack = (("RESHAPE", space),) if n.shape != space else ()
        body_root = None if ib is None else b.lower(inner, stack)
        if ia is None and inner == root:  # a kernel kind may compute the A operand's producer too
            for kind in KERNEL_KINDS_EPILOGUE.get(Ops.MATMUL, ()):
                got = kind(key, root, materialized, slot_of, _build_kernel)
                if got is not None:
                    return got
        if body_root is None:
            return Cut(b.cut)
        a_shape, b_shape = key.nodes[j.src[0]].shape, key.nodes[j.src[1]].shape
        spec = MatmulSpec(ia, ib, a_shape[-2], b_shape[-1], a_shape[-1])
        out = KOutput(slot_of[root], body_root, rn.dtype, rn.shape)
        k = Kernel(name, space, tuple(b.inputs), tuple(b.nodes), (out,), (), spec)
        return k, b.inlined_reduces, seen
    if is_reduce:
        space = key.nodes[n.src[0]].shape
        axes = tuple(n.arg[1] if n.op is Ops.REDUCE else (n.arg,))
        reduced = True
    else:
        found = _find_reduced_space(key, inner, materialized, seen)
        if found is not None:
            space, axes = found
            reduced = True
        else:
            space, axes, reduced = n.shape, None, False
    b = builder(space, axes if reduced else None)
    b.root = inner
    if reduced:
        red_shape = tuple(1 if a in axes else s for a, s in enumerate(space))
        stack: Stack = (("EXPAND", space),) + ((("RESHAPE", red_shape),) if n.shape != red_shape else ())
        body_root = b.lower(inner, stack)
    else:
        body_root = b.lower(inner, ())
    if body_root is None:
        return Cut(b.cut)
    r_axes = tuple(b.reduce_axes or ())
    if reduced and not r_axes:  # the reduction was materialised elsewhere: plain elementwise
        raise AssertionError("reduced kernel without a reduction")
    outs = [KOutput(slot_of[root], body_root, rn.dtype, rn.shape, reduced=bool(reduced))]
    nodes, outs = assign_passes(b.nodes, outs)
    return Kernel(name, space, tuple(b.inputs), tuple(nodes), tuple(outs), r_axes), b.inlined_reduces, seen


def _find_matmul(key: GraphKey, root: int, materialized: set[int], seen: set[int]) -> int | None:
    """A non-materialised MATMUL the root's value is an elementwise epilogue of (reached
    through elementwise ops and order-preserving reshapes only), if any."""
    todo, found = [root], None
    visited: set[int] = set()
    while todo and len(visited) < 4 * MAX_BODY:  # a kernel body is bounded: so is the walk
        i = todo.pop()
        seen.add(i)
        if i in visited or (i in materialized and i != root):
            continue
        visited.add(i)
        n = key.nodes[i]
        if n.op is Ops.MATMUL:
            if found is not None and found != i:
                return None  # two matmuls: not one kernel
            found = i
        elif n.op in ELEMENTWISE or n.op is Ops.RESHAPE:
            todo.extend(n.src)
        elif n.op in (Ops.EXPAND,) and key.nodes[n.src[0]].op is not Ops.MATMUL:
            todo.extend(n.src)
    return found


def _operand_input(b: _KernelBuilder, key: GraphKey, i: int, materialized: set[int]) -> int | None:
    """A matmul operand must be a view of a materialised value (None: `b.cut` set)."""
    inp = _operand_view(b, key, i, materialized)
    return None if inp is None else b.add_input(inp.slot, inp.dtype, inp.view, operand=True)


def _operand_view(b: _KernelBuilder, key: GraphKey, i: int, materialized: set[int]) -> KInput | None:
    """The input reading node `i` as a view of a materialised value (movement ops become
    the view); None, with `b.cut` the producer to materialise, when it is not one."""
    stack: Stack = ()
    j = i
    while b.seen.add(j) or (j not in materialized and key.nodes[j].op is not Ops.BUFFER):
        n = key.nodes[j]
        if n.op in MOVEMENT and n.op is not Ops.PAD:
            stack = stack + ((n.op.value, n.arg),)
            j = n.src[0]
        else:
            return b.stop_at(j)
    return KInput(b.slot_of[j], key.nodes[j].dtype, _chain(key.nodes[j].shape, stack))


def assign_passes(nodes: list[KNode], outputs: list[KOutput]) -> tuple[list[KNode], list[KOutput]]:
    """`nodes` with each reduction's pass (one more than the latest pass among its
    sources' reductions), and each non-reduced output's pass (the pass its value is
    ready in). Kept by every rewrite of a kernel body (`svod.lower.merge`)."""
    avail = [0] * len(nodes)
    out_nodes = []
    for i, n in enumerate(nodes):
        a = max((avail[s] for s in n.src), default=0)
        if n.op in (Ops.REDUCE, Ops.ARGMAX, Ops.ARGMIN):
            n = KNode(n.op, n.dtype, n.src, n.arg, a)
            avail[i] = a + 1
        else:
            avail[i] = a
        out_nodes.append(n)
    outs = [KOutput(o.slot, o.node, o.dtype, o.shape, o.reduced, 0 if o.reduced else avail[o.node])
            for o in outputs]
    return out_nodes, outs


def _slots(key: GraphKey, m: set[int]) -> dict[int, int]:
    """Inputs keep their binding index; node i's value lives in slot n_inputs + i."""
    slot_of = {}
    n_in = len(key.inputs)
    for i in key.inputs:
        slot_of[i] = key.nodes[i].arg[0]
    for i in m:
        if i not in slot_of:
            slot_of[i] = n_in + i
    return slot_of


def _cached_kernel(key: GraphKey, root: int, m: set[int], slot_of: dict[int, int], cache: dict | None):
    """`_build_kernel`, reusing a kernel built earlier for the same root while `m` agrees
    with the boundaries that kernel depended on: (kernel, inlined reductions) or a Cut."""
    if cache is not None:
        for seen, m_part, k, inl in cache.get(root, ()):
            if all((i in m) == (i in m_part) for i in seen):
                return k, inl
    got = _build_kernel(key, root, m, slot_of, f"k{root}")
    if isinstance(got, Cut):
        return got
    k, inl, seen = got
    if cache is not None:
        entries = cache.setdefault(root, [])
        if len(entries) < 64:
            entries.append((frozenset(seen), frozenset(i for i in seen if i in m), k, inl))
    return k, inl


def build_kernels(key: GraphKey, m: set[int], cache: dict | None = None):
    """One kernel per materialised node of `m`, in node order: ([(root, kernel)],
    reduction -> roots of the kernels inlining it, node -> slot). Consumers are built
    first (a heap on node index), so a producer a consumer forces to materialise (added
    to `m`) is built after it. Raises AssertionError when a forced producer is already
    materialised (a lowering bug, never a choice)."""
    slot_of = _slots(key, m)
    todo = [-i for i in m if key.nodes[i].op is not Ops.BUFFER]
    heapq.heapify(todo)
    built: dict[int, Kernel] = {}
    inlined_by: dict[int, set[int]] = {}
    while todo:
        root = -heapq.heappop(todo)
        if root in built:
            continue
        got = _cached_kernel(key, root, m, slot_of, cache)
        if isinstance(got, Cut):
            if got.node in m or got.node == root:
                raise AssertionError(f"cannot lower node {got.node} ({key.nodes[got.node].op})")
            m.add(got.node)
            slot_of[got.node] = len(key.inputs) + got.node
            heapq.heappush(todo, -root)
            heapq.heappush(todo, -got.node)
            continue
        k, inl = got
        built[root] = k
        for r in inl:
            inlined_by.setdefault(r, set()).add(root)
    return [(i, built[i]) for i in sorted(built)], inlined_by, slot_of


def build_plan(key: GraphKey, materialized, *, planner: str = "greedy", cache: dict | None = None,
               group=None) -> Plan:
    """The unmerged Plan computing the materialised nodes (`materialized`, the forced
    boundaries and what legality adds), one kernel per node in node order. `group` maps
    the kernels to the groups a later pass merges into one kernel (default: each alone):
    a reduction inlined into kernels of two groups is materialised once, and the kernels
    built again until none is."""
    m = set(materialized) | initial_materialized(key)
    while True:
        built, inlined_by, slot_of = build_kernels(key, m, cache)
        if group is None:
            group_of = {r: gi for gi, (r, _) in enumerate(built)}
        else:
            roots = [r for r, _ in built]
            group_of = {roots[ki]: gi for gi, members in enumerate(group([k for _, k in built])) for ki in members}
        shared = {r for r, users in inlined_by.items() if len({group_of[x] for x in users}) > 1}
        if not shared:
            break
        m |= shared
    slots = {}
    for i, n in enumerate(key.nodes):
        if i in slot_of:
            role = "input" if n.op is Ops.BUFFER else "output" if i in key.outputs else "temp"
            slots[slot_of[i]] = SlotInfo(n.shape, n.dtype, role)
    return Plan(tuple(k for _, k in built), slots, len(key.inputs),
                tuple((slot_of[o], key.nodes[o].shape) for o in key.outputs), planner)
