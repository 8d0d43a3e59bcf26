"""The greedy planner: GraphKey -> Plan (Kernels over slots) with the obvious fusions.

Fusions it makes: elementwise chains (movement ops become index arithmetic in the
loads), a reduction with its prologue, an elementwise epilogue after a reduction,
reduce-then-broadcast row fusion (softmax, layernorm: one row-wise multi-pass kernel),
and sibling kernels over the same iteration space merged into one multi-output kernel.
Matmuls run as the library (BLAS) step. Cheap shared producers are recomputed in each
consumer; a reduction that two kernels would recompute is materialised once.

The search (search/) produces Plans through the same `lower()`; this planner is its
fallback for graphs too big to search, and the engine's planner until the search lands.

>>> import svod
>>> from svod.key import compact
>>> x = svod.asarray([[1.0, 2.0], [3.0, 4.0]])
>>> key, _ = compact([svod.nn.softmax(x).uop])
>>> len(plan_greedy(key).kernels)
1
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

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
from svod.view import View, ViewChain, apply_movement

MAX_BODY = 384  # body nodes per kernel before a producer is materialised (compile time stays bounded)
MAX_DEPTH = 200  # lowering depth (Python recursion) before a producer is materialised

Stack = tuple[tuple[str, object], ...]  # movement ops from the kernel's root down


class _Materialize(Exception):
    def __init__(self, node: int):
        self.node = node


_CHAINS: dict[tuple[tuple[int, ...], Stack], ViewChain] = {}  # (base shape, stack) -> its chain
_CHAINS_MAX = 4096  # entries (a few MB at most: a stack holds up to MAX_DEPTH ops)


def _chain(base_shape: tuple[int, ...], stack: Stack) -> ViewChain:
    """The view of a value of `base_shape` under the movement ops of `stack` (root first).
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
        assert chain is not None, (op, arg)
    if len(_CHAINS) >= _CHAINS_MAX:
        _CHAINS.clear()
    _CHAINS[k] = chain
    return chain


def _peel_reshapes(key: GraphKey, i: int, materialized: set[int]) -> int:
    """A RESHAPE never changes row-major order: a kernel may compute the inner value."""
    while key.nodes[i].op is Ops.RESHAPE and key.nodes[i].src[0] not in materialized:
        i = key.nodes[i].src[0]
    return i


class _KernelBuilder:
    """Lowers the expression below one materialised root into one Kernel body."""

    def __init__(self, key: GraphKey, materialized: set[int], slot_of: dict[int, int],
                 space: tuple[int, ...], reduce_axes: tuple[int, ...] | None):
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
        self.seen: set[int] = set()  # nodes whose boundary status this kernel depended on

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

    def lower(self, i: int, stack: Stack, depth: int = 0) -> int:
        memo_key = (i, stack)
        if memo_key in self._memo:
            return self._memo[memo_key]
        out = self._lower(i, stack, depth)
        self._memo[memo_key] = out
        return out

    def _lower(self, i: int, stack: Stack, depth: int) -> int:
        n: KeyNode = self.key.nodes[i]
        self.seen.add(i)
        if (i in self.materialized and i != self.root) or n.op is Ops.BUFFER:
            return self.load(i, stack)
        if depth > MAX_DEPTH or (len(self.nodes) > MAX_BODY and n.op not in MOVEMENT):
            raise _Materialize(i)
        if n.op is Ops.CONST:
            return self.emit(Ops.CONST, n.dtype, (), n.arg)
        if n.op in MOVEMENT and n.op is not Ops.PAD:
            return self.lower(n.src[0], stack + ((n.op.value, n.arg),), depth + 1)
        if n.op is Ops.PAD:
            pads, value = n.arg
            inner_stack = stack + (("PAD", (pads, 0)),)
            inner = self.lower(n.src[0], inner_stack, depth + 1)
            zero = value == 0 and not (isinstance(value, float) and str(value) == "-0.0")
            if zero and self.nodes[inner].op == LOAD:
                return inner  # a masked load already reads 0 outside
            valid = self.emit(VALID, bool_, (), _chain(self.key.nodes[n.src[0]].shape, inner_stack))
            c = self.emit(Ops.CONST, n.dtype, (), value)
            return self.emit(Ops.WHERE, n.dtype, (valid, inner, c))
        if n.op is Ops.CAT:
            axis = n.arg
            total = n.shape[axis]
            parts = []
            off = 0
            for s in n.src:
                length = self.key.nodes[s].shape[axis]
                pads = tuple((off, total - off - length) if a == axis else (0, 0) for a in range(len(n.shape)))
                inner_stack = stack + (("PAD", (pads, 0)),)
                parts.append((self.lower(s, inner_stack, depth + 1),
                              _chain(self.key.nodes[s].shape, inner_stack)))
                off += length
            acc = parts[-1][0]
            for val, chain in reversed(parts[:-1]):
                valid = self.emit(VALID, bool_, (), chain)
                acc = self.emit(Ops.WHERE, n.dtype, (valid, val, acc))
            return acc
        if n.op in ELEMENTWISE:
            srcs = [self.lower(s, stack, depth + 1) for s in n.src]
            return self.emit(n.op, n.dtype, srcs, n.arg if n.op is not Ops.CAST else None)
        if n.op in (Ops.REDUCE, Ops.ARGMAX, Ops.ARGMIN):
            axes = n.arg[1] if n.op is Ops.REDUCE else (n.arg,)
            in_shape = self.key.nodes[n.src[0]].shape
            if not self._hostable(n, axes, in_shape, stack):
                raise _Materialize(i)
            self.reduce_axes = tuple(axes)
            self.inlined_reduces.add(i)
            src = self.lower(n.src[0], (), depth + 1)
            return self.emit(n.op, n.dtype, (src,), n.arg[0] if n.op is Ops.REDUCE else None)
        if n.op is Ops.CONTIGUOUS and i == self.root:  # the kernel that materialises it
            return self.lower(n.src[0], stack, depth + 1)
        if n.op is Ops.MATMUL and i == self.matmul_node:
            chain = _chain(n.shape, stack)
            if len(chain.views) == 1 and chain.views[0] == View.contiguous(self.space):
                return self.emit(ACC, n.dtype)
        # MATMUL, CONTIGUOUS inside an expression: always their own kernel
        raise _Materialize(i)

    def _hostable(self, n: KeyNode, axes, in_shape, stack: Stack) -> bool:
        if self.matmul_node >= 0:
            return False  # a matmul kernel's epilogue is elementwise only
        if in_shape != self.space or (self.reduce_axes is not None and tuple(self.reduce_axes) != tuple(axes)):
            return False
        try:
            chain = _chain(n.shape, stack)
        except AssertionError:
            return False
        return len(chain.views) == 1 and chain.views[0] == View.contiguous(n.shape).expand(self.space)


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


def _assign_passes(nodes: list[KNode], outputs: list[KOutput]) -> tuple[list[KNode], list[KOutput]]:
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


def _build_kernel(key: GraphKey, root: int, materialized: set[int], slot_of: dict[int, int], name: str):
    """One kernel computing materialised node `root`.

    Returns (kernel, inlined reductions, seen): `seen` holds every node whose boundary
    status the kernel depended on, so a cached kernel stays valid while the
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
        b = _KernelBuilder(key, materialized, slot_of, space, axes)
        b.seen = seen
        return b

    if n.op is Ops.LIBRARY:  # a library call: operands are views of materialised values
        b = builder(rn.shape, None)
        ins = tuple(_operand_view(b, key, s, materialized) for s in n.src)
        fn, params, j, _ = n.arg
        k = Kernel(name, rn.shape, ins, (KNode(RESULT, n.dtype, (), j),),
                   (KOutput(slot_of[root], 0, n.dtype, rn.shape),), library=LibrarySpec(fn, params))
        return k, set(), seen
    if n.op is Ops.MATMUL:
        b = builder(rn.shape, None)
        a_shape, b_shape = key.nodes[n.src[0]].shape, key.nodes[n.src[1]].shape
        ia = _operand_input(b, key, n.src[0], materialized)
        ib = _operand_input(b, key, n.src[1], materialized)
        acc = b.emit(ACC, n.dtype)
        spec = MatmulSpec(ia, ib, a_shape[-2], b_shape[-1], a_shape[-1], library=True)
        k = Kernel(name, n.shape, tuple(b.inputs), tuple(b.nodes),
                   (KOutput(slot_of[root], acc, n.dtype, rn.shape),), (), spec)
        return k, set(), seen
    is_reduce = n.op in (Ops.REDUCE, Ops.ARGMAX, Ops.ARGMIN)
    mm = None if is_reduce else _find_matmul(key, inner, materialized, seen)
    if mm is not None:  # a matmul with its elementwise epilogue in one kernel
        j = key.nodes[mm]
        space = j.shape
        b = builder(space, None)
        b.root, b.matmul_node = inner, mm
        ia = _operand_input(b, key, j.src[0], materialized)
        ib = _operand_input(b, key, j.src[1], materialized)
        stack = (("RESHAPE", space),) if n.shape != space else ()
        body_root = b.lower(inner, stack)
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
    r_axes = tuple(b.reduce_axes or ())
    if reduced and not r_axes:  # the reduction was materialised elsewhere: plain elementwise
        raise AssertionError("reduced kernel without a reduction")
    outs = [KOutput(slot_of[root], body_root, rn.dtype, rn.shape, reduced=bool(reduced))]
    nodes, outs = _assign_passes(b.nodes, outs)
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


def _operand_input(b: _KernelBuilder, key: GraphKey, i: int, materialized: set[int]) -> int:
    """A matmul operand must be a view of a materialised value."""
    inp = _operand_view(b, key, i, materialized)
    return b.add_input(inp.slot, inp.dtype, inp.view, operand=True)


def _operand_view(b: _KernelBuilder, key: GraphKey, i: int, materialized: set[int]) -> KInput:
    """The input reading node `i` as a view of a materialised value (movement ops become
    the view; anything else is materialised)."""
    stack: Stack = ()
    j = i
    while b.seen.add(j) or (j not in materialized and key.nodes[j].op is not Ops.BUFFER):
        n = key.nodes[j]
        if n.op in MOVEMENT and n.op is not Ops.PAD:
            stack = stack + ((n.op.value, n.arg),)
            j = n.src[0]
        else:
            raise _Materialize(j)
    return KInput(b.slot_of[j], key.nodes[j].dtype, _chain(key.nodes[j].shape, stack))


def initial_materialized(key: GraphKey) -> set[int]:
    """Nodes that are kernel boundaries before any choice: inputs, outputs, explicit
    `contiguous()`."""
    m = set(key.inputs) | set(key.outputs)
    for i, n in enumerate(key.nodes):
        if n.op is Ops.CONTIGUOUS:
            m.add(i)
    return m


def greedy_materialized(key: GraphKey) -> set[int]:
    """The greedy planner's boundaries: the forced ones, and every matmul (BLAS step)."""
    return initial_materialized(key) | {i for i, n in enumerate(key.nodes) if n.op is Ops.MATMUL}


def lower(key: GraphKey, materialized: Iterable[int], *, merge_siblings: bool = True,
          planner: str = "greedy", cache: dict | None = None) -> Plan:
    """Build the Plan whose kernels compute exactly the `materialized` nodes (plus any
    producer that legality forces to materialise: a reduction that cannot be hosted, a
    matmul operand that is not a view, a body over the size cap)."""
    m = set(materialized) | initial_materialized(key)
    while True:
        built, inlined_by, slot_of = _lower_all(key, m, cache)
        groups = _merge_siblings(built) if merge_siblings else [([r], k) for r, k in built]
        group_of = {r: gi for gi, (roots, _) in enumerate(groups) for r in roots}
        # a reduction recomputed by two kernels (after sibling merging) is materialised once
        shared = {r for r, roots in inlined_by.items() if len({group_of[x] for x in roots}) > 1}
        if not shared:
            break
        m |= shared
    kernels = [k for _, k in groups]
    slots = {}
    for i, n in enumerate(key.nodes):
        if i in slot_of:
            role = "input" if n.op is Ops.BUFFER else "output" if i in key.outputs else "temp"
            slots[slot_of[i]] = SlotInfo(n.shape, n.dtype, role)
    plan = Plan(tuple(kernels), slots, len(key.inputs), tuple((slot_of[o], key.nodes[o].shape) for o in key.outputs),
                planner)
    return plan


def _slots(key: GraphKey, m: set[int]) -> dict[int, int]:
    """Inputs keep their binding index; node i's value lives in slot n_inputs + i, so a
    kernel's slots do not depend on which other values are materialised."""
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
    with the boundaries that kernel depended on."""
    if cache is not None:
        for seen, m_part, k, inl in cache.get(root, ()):
            if all((i in m) == (i in m_part) for i in seen):
                return k, inl
    k, inl, seen = _build_kernel(key, root, m, slot_of, f"k{root}")
    if cache is not None:
        entries = cache.setdefault(root, [])
        if len(entries) < 64:
            entries.append((frozenset(seen), frozenset(i for i in seen if i in m), k, inl))
    return k, inl


def _lower_all(key: GraphKey, m: set[int], cache: dict | None = None):
    """Build one kernel per materialised node, consumers first, so that producers the
    lowering forces to materialise are built after (a heap on node index)."""
    import sys

    slot_of = _slots(key, m)
    todo = [-i for i in m if key.nodes[i].op is not Ops.BUFFER]
    heapq.heapify(todo)
    built: dict[int, Kernel] = {}
    inlined_by: dict[int, set[int]] = {}
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 4 * MAX_DEPTH + 200))
    try:
        while todo:
            root = -heapq.heappop(todo)
            if root in built:
                continue
            try:
                k, inl = _cached_kernel(key, root, m, slot_of, cache)
            except _Materialize as e:
                if e.node in m or e.node == root:
                    raise AssertionError(f"cannot lower node {e.node} ({key.nodes[e.node].op})") from None
                m.add(e.node)
                slot_of[e.node] = len(key.inputs) + e.node
                heapq.heappush(todo, -root)
                heapq.heappush(todo, -e.node)
                continue
            built[root] = k
            for r in inl:
                inlined_by.setdefault(r, set()).add(root)
    finally:
        sys.setrecursionlimit(limit)
    return [(i, built[i]) for i in sorted(built)], inlined_by, slot_of


MERGE_WINDOW = 32  # sibling merging looks this many kernels back (planning stays linear in the kernels)
MERGE_MAX_BODY = 2 * MAX_BODY  # body nodes of a merged multi-output kernel at most (compile time bounded)


class _Group:
    """Kernels merged into one multi-output kernel (built once, at the end)."""

    __slots__ = ("roots", "kernels", "first", "reads", "writes", "size")

    def __init__(self, root: int, k: Kernel):
        self.roots, self.kernels, self.first = [root], [k], k
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


def _merge_siblings(built: list[tuple[int, Kernel]]) -> list[tuple[list[int], Kernel]]:
    """Merge kernels over the same space and reduce axes that do not depend on each
    other into multi-output kernels (one pass over shared inputs). Returns
    (roots, kernel) groups in execution order. Linear in the kernels: a kernel looks at
    most `MERGE_WINDOW` groups back, and a group stops growing past `MERGE_MAX_BODY`
    body nodes."""
    out: list[_Group] = []
    for root, k in built:
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
    return [(g.roots, g.kernel()) for g in out]


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
    nodes2, outs2 = _assign_passes(nodes, outs)
    return Kernel("+".join(k.name for k in kernels), a.shape, tuple(inputs), tuple(nodes2), tuple(outs2),
                  a.reduce_axes)


def shared_heavy(key: GraphKey, threshold: int = 12) -> set[int]:
    """Values read by several consumers whose inlined cone is big: recomputing them in
    every consumer would multiply work (and kernel bodies), so the greedy planner
    materialises them. Cheap shared values (a cast, a scale) are still recomputed."""
    users = key.users()
    weight = [0] * len(key.nodes)
    out = set()
    for i, n in enumerate(key.nodes):
        if n.op in (Ops.BUFFER, Ops.CONST):
            continue
        w = (0 if n.op in MOVEMENT else 1) + sum(weight[s] for s in n.src)
        weight[i] = min(w, 10_000)
        if len(set(users[i])) >= 2 and weight[i] > threshold and n.op not in MOVEMENT:
            out.add(i)
            weight[i] = 0  # a boundary: consumers load it
    return out


def plan_greedy(key: GraphKey) -> Plan:
    """The greedy plan for `key` (obvious fusions, no search)."""
    return lower(key, greedy_materialized(key) | shared_heavy(key))
