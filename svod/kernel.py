"""The Kernel: one fused loop nest. The contract between search, codegen and cost models.

A `Kernel` iterates over `shape` (its iteration space). Its body is an expression DAG
(`nodes`, sources before users) over loads of its inputs, each input a buffer slot read
through a `ViewChain` that maps the iteration space to buffer elements (broadcast,
permute, flip, pad, ... all become index arithmetic).

Structure made explicit, so every consumer reads it the same way:

- **Reductions**: `reduce_axes` are the axes REDUCE (and ARGMAX/ARGMIN) nodes fold. A
  "row" is one index of the other axes. Values computed from a reduction are per-row.
- **Row-wise passes**: a REDUCE node accumulates during pass `pass_` over the row; its
  value is usable from pass `pass_ + 1` on. Softmax is three passes (max; exp-sum;
  normalise), layernorm three (mean; squared deviations; normalise) — variance by two
  passes over the row, never E[x²]−E[x]². A full-shape output is written in its pass;
  a reduced output (one value per row) after the row's last pass.
- **Multi-output**: several outputs, full or reduced.
- **Matmul**: `matmul` set; the ACC node is the dot product of inputs `a` and `b` at
  the (batch..., m, n) index; other nodes form the epilogue (bias, activation, ...).
  `matmul.library` marks the library step (numpy's BLAS, no epilogue).
- **Library call**: `library` set (`LibrarySpec`: a function of `svod/library.py` and
  its parameters): numpy's sorting, LAPACK, ... on the inputs (each read through its
  view, in call order, shapes of their own); one RESULT node per output, its arg the
  index of the call's result it writes. The outputs have shapes of their own; `shape`
  is the first output's.
- **Attention**: `attention` set; the kernel computes ``softmax(t, last axis) @ v`` over
  (batch..., m, dv) without materialising the (m, n) scores. Its nodes compute `t`, the
  output's node, over the score space (batch..., m, n) from ACC (the score ``q · kᵀ``)
  and loads of its other inputs (a scale, a causal or additive mask): elementwise only.
  `svod.fuse_attention` forms it from a matmul, a row softmax and a matmul.
- **Fused MLP**: `mlp` set (`MlpSpec`); the kernel computes ``e2(e1(x @ w1) @ w2)`` over
  (m, n) without materialising the (m, h) hidden layer: nodes ``[:split]`` are the first
  product's epilogue over the hidden space (m, h) (their ACC is ``x @ w1``; node `hidden`
  is the hidden value), nodes ``[split:]`` the second's over (m, n) (their ACC is
  ``hidden @ w2``). Inputs loaded by the first part are read over (m, h), by the second
  over (m, n) (`svod.lower.mlp`, `svod.codegen.mlp`).
- **Row-column reduction**: `rowcol` set (`RowColSpec`); over a 2-D space (m, n), each
  node lives in one space — the elements, per row (m,), per column (n,) or one value —
  and the kernel computes reductions over axis 1 and axis 0 (and full reductions of
  those) reading its inputs once (`svod.lower.rowcol`, `svod.codegen.rowcol`).
- **Row prologue + matmul** (RMSNorm, layer norm before a projection): `rmsnorm` set
  (`RmsNormSpec`); the kernel computes ``e(A @ w)`` over (m, n) where A is a row-wise
  function of its inputs over (m, k) — nodes ``[:split]``, with REDUCE nodes over the
  row (axis 1 of (m, k)) in passes as a row-wise kernel's — applied while the GEMM packs
  A, so A never exists in memory; nodes ``[split:]`` are the epilogue over (m, n) (their
  ACC is ``A @ w``) (`svod.lower.rmsnorm`, `svod.codegen.rmsnorm`).

`check()` enforces legality with messages that say what is wrong; `key()` is the
content key (slot numbers and thread counts excluded, so equal kernels in different
graphs share compiled code); `str()` is the readable (golden-tested) form.

>>> from svod.kernel_examples import softmax_kernel
>>> k = softmax_kernel(4, 8)
>>> k.check(); k.passes
3
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from svod.dtype import DType, bool_, int64
from svod.ir import BINARY, BOOL_UNARY, COMPARE, REDUCE_OPS, UNARY, Ops, _hash_arg
from svod.key import _arg_from_json, _arg_to_json
from svod.view import ViewChain

# Body ops that exist only inside kernels (the rest are ir.Ops).
LOAD = "LOAD"  # arg: input index
VALID = "VALID"  # arg: ViewChain whose masks say whether the index is in range
ACC = "ACC"  # matmul accumulator value at the output index
RESULT = "RESULT"  # a library call's result (arg: its index among the call's results)


class KernelError(ValueError):
    """An illegal kernel; the message names the kernel, the node and the rule."""


@dataclass(frozen=True)
class KInput:
    slot: int
    dtype: DType
    view: ViewChain  # maps the kernel's iteration space (or the matmul operand space) to the buffer

    def key(self) -> tuple:
        return (self.dtype.name, self.view.key())


@dataclass(frozen=True)
class KNode:
    op: Any  # an ir.Ops or one of LOAD / VALID / ACC
    dtype: DType
    src: tuple[int, ...] = ()
    arg: Any = None
    pass_: int | None = None  # REDUCE / ARGMAX / ARGMIN only: the pass that accumulates it

    def key(self) -> tuple:
        op = self.op.value if isinstance(self.op, Ops) else self.op
        arg = self.arg.key() if isinstance(self.arg, ViewChain) else _hash_arg(self.arg)
        return (op, self.dtype.name, self.src, arg, self.pass_)


@dataclass(frozen=True)
class KOutput:
    slot: int
    node: int
    dtype: DType
    shape: tuple[int, ...]  # the buffer's shape (row-major; same element order as the kernel's space)
    reduced: bool = False  # one value per row (written after the row's passes)
    pass_: int = 0  # full outputs: the pass that writes them

    def key(self) -> tuple:
        return (self.node, self.dtype.name, self.shape, self.reduced, self.pass_)


@dataclass(frozen=True)
class MatmulSpec:
    a: int  # input index of A, viewed as (batch..., m, k)
    b: int  # input index of B, viewed as (batch..., k, n)
    m: int
    n: int
    k: int
    library: bool = False  # numpy/BLAS step instead of generated code

    def key(self) -> tuple:
        return (self.a, self.b, self.m, self.n, self.k, self.library)


@dataclass(frozen=True)
class AttentionSpec:
    """``out = softmax(t) @ v`` per batch index, `t` an elementwise function of the scores
    ``q @ kᵀ`` (the kernel's nodes): inputs `q` (batch..., m, d), `k` (batch..., n, d) and
    `v` (batch..., n, dv), each read through its view; other inputs are read over the
    score space (batch..., m, n)."""

    q: int
    k: int
    v: int
    m: int
    n: int
    d: int
    dv: int

    def key(self) -> tuple:
        return (self.q, self.k, self.v, self.m, self.n, self.d, self.dv)

    @property
    def operands(self) -> tuple[int, int, int]:
        return (self.q, self.k, self.v)


@dataclass(frozen=True)
class MlpSpec:
    """``out = e2(e1(x @ w1) @ w2)``: inputs `x` (m, d), `w1` (d, h), `w2` (h, n), each read
    through its view; nodes ``[:split]`` are e1 over (m, h) (one ACC: ``x @ w1``; node
    `hidden` its value), nodes ``[split:]`` e2 over (m, n) (one ACC: ``hidden @ w2``);
    no node of one part reads a node of the other."""

    x: int
    w1: int
    w2: int
    m: int
    d: int
    h: int
    n: int
    split: int
    hidden: int

    def key(self) -> tuple:
        return (self.x, self.w1, self.w2, self.m, self.d, self.h, self.n, self.split, self.hidden)

    @property
    def operands(self) -> tuple[int, int, int]:
        return (self.x, self.w1, self.w2)


@dataclass(frozen=True)
class RmsNormSpec:
    """``out = e(A @ w)``: nodes ``[:split]`` are the row prologue over (m, k) — loads of
    inputs viewed over (m, k), elementwise ops, REDUCE nodes over axis 1 (the row) with
    the pass numbers of a row-wise kernel — and node `a` (of the operands' dtype) is A;
    nodes ``[split:]`` the epilogue over (m, n) (one ACC: ``A @ w``). Input `w` is B,
    viewed as (k, n). No node of one part reads a node of the other."""

    w: int
    m: int
    k: int
    n: int
    split: int
    a: int

    def key(self) -> tuple:
        return (self.w, self.m, self.k, self.n, self.split, self.a)


# the spaces of a row-column kernel's nodes (RowColSpec.spaces)
ELEM, ROW, COL, ALL = 0, 1, 2, 3


@dataclass(frozen=True)
class RowColSpec:
    """A row-column reduction over the space (m, n): `spaces[i]` is node i's space —
    ELEM (one value per element: loads and elementwise ops over them), ROW (per row:
    a REDUCE over axis 1 of an ELEM value, and elementwise ops over those), COL (per
    column: a REDUCE over axis 0) or ALL (one value: a REDUCE of a ROW or COL value, and
    constants). Each output writes one ROW, COL or ALL node (`reduced` outputs of m, n or
    1 elements). Checked by `Kernel.check`."""

    spaces: tuple[int, ...]

    def key(self) -> tuple:
        return self.spaces


@dataclass(frozen=True)
class LibrarySpec:
    """A library step: function `fn` of `svod/library.py` with parameters `params` (a
    tuple of scalars, strings, None and tuples of those)."""

    fn: str
    params: tuple = ()

    def key(self) -> tuple:
        return (self.fn, _hash_arg(self.params))


def _prod(xs) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


@dataclass(frozen=True)
class Kernel:
    name: str
    shape: tuple[int, ...]
    inputs: tuple[KInput, ...]
    nodes: tuple[KNode, ...]
    outputs: tuple[KOutput, ...]
    reduce_axes: tuple[int, ...] = ()
    matmul: MatmulSpec | None = None
    attention: AttentionSpec | None = None
    library: LibrarySpec | None = None
    rowcol: RowColSpec | None = None
    mlp: MlpSpec | None = None
    rmsnorm: RmsNormSpec | None = None
    # the memoised key: init=False, so `dataclasses.replace` gives the copy its own (a shared
    # list handed a changed kernel the original's key, and with it the original's Program)
    _key: list = field(default_factory=list, init=False, compare=False, repr=False)

    # ---- derived structure
    @property
    def passes(self) -> int:
        """Number of sweeps over each row (1 for plain elementwise kernels)."""
        p = 0
        for n in self.nodes:
            if n.pass_ is not None:
                p = max(p, n.pass_ + 1)
        for o in self.outputs:
            if not o.reduced:
                p = max(p, o.pass_ + 1)
        return max(p, 1)

    @property
    def reduced_shape(self) -> tuple[int, ...]:
        r = set(self.reduce_axes)
        return tuple(1 if i in r else s for i, s in enumerate(self.shape))

    @property
    def kind(self) -> str:
        if self.matmul is not None:
            return "blas" if self.matmul.library else "matmul"
        if self.library is not None:
            return "library"
        if self.attention is not None:
            return "attention"
        if self.rowcol is not None:
            return "rowcol"
        if self.mlp is not None:
            return "mlp"
        if self.rmsnorm is not None:
            return "rmsnorm"
        if not self.reduce_axes:
            return "elementwise"
        return "rowwise" if self.passes > 1 or any(not o.reduced for o in self.outputs) else "reduce"

    @property
    def size(self) -> int:
        return _prod(self.shape)

    def key(self) -> str:
        """Content key: structure only (no slot numbers, no thread count)."""
        if not self._key:
            h = hashlib.blake2b(digest_size=16)
            parts = (self.shape, self.reduce_axes, tuple(i.key() for i in self.inputs),
                     tuple(n.key() for n in self.nodes), tuple(o.key() for o in self.outputs),
                     self.matmul.key() if self.matmul else None,
                     self.attention.key() if self.attention else None)
            if self.library is not None:  # NOTE: appended only when set: other kernels keep their keys
                parts += (self.library.key(),)
            if self.rowcol is not None:  # likewise
                parts += (("rowcol",) + self.rowcol.key(),)
            if self.mlp is not None:  # likewise
                parts += (("mlp",) + self.mlp.key(),)
            if self.rmsnorm is not None:  # likewise
                parts += (("rmsnorm",) + self.rmsnorm.key(),)
            h.update(repr(parts).encode())
            self._key.append(h.hexdigest())
        return self._key[0]

    # ---- legality
    def check(self) -> None:
        """Raise KernelError if the kernel breaks a rule of the spec."""
        err = lambda msg: KernelError(f"kernel {self.name}: {msg}")
        nd = len(self.shape)
        if any(not isinstance(s, int) or s < 0 for s in self.shape):
            raise err(f"bad iteration space {self.shape}")
        if sorted(set(self.reduce_axes)) != list(self.reduce_axes) or any(not 0 <= a < nd for a in self.reduce_axes):
            raise err(f"reduce_axes {self.reduce_axes} must be sorted, unique axes of {self.shape}")
        if not self.outputs:
            raise err("has no outputs")
        if self.library is not None:
            self._check_library(err)
            return
        if self.rowcol is not None:
            self._check_rowcol(err)
            return
        if self.mlp is not None:
            self._check_mlp(err)
            return
        if self.rmsnorm is not None:
            self._check_rmsnorm(err)
            return
        mm = self.matmul
        at = self.attention
        if at is not None:
            self._check_attention(err)
        for i, inp in enumerate(self.inputs):
            want = self.shape
            if mm is not None and i == mm.a:
                want = self.shape[:-2] + (mm.m, mm.k)
            elif mm is not None and i == mm.b:
                want = self.shape[:-2] + (mm.k, mm.n)
            elif at is not None:
                per = {at.q: (at.m, at.d), at.k: (at.n, at.d), at.v: (at.n, at.dv)}
                want = self.shape[:-2] + per.get(i, (at.m, at.n))  # other inputs: over the scores
            if inp.view.shape != want:
                raise err(f"input {i} (slot {inp.slot}) is viewed as {inp.view.shape}, but the kernel "
                          f"reads it over {want}")
        if mm is not None:
            if self.reduce_axes:
                raise err("a matmul kernel cannot also reduce")
            if nd < 2 or self.shape[-2:] != (mm.m, mm.n):
                raise err(f"matmul output space {self.shape} does not end in (m, n) = ({mm.m}, {mm.n})")
            if not (0 <= mm.a < len(self.inputs) and 0 <= mm.b < len(self.inputs)):
                raise err(f"matmul operands {mm.a}, {mm.b} are not inputs")
            if self.inputs[mm.a].dtype != self.inputs[mm.b].dtype:
                raise err("matmul operands differ in dtype")
        per_row = [False] * len(self.nodes)  # the node's value is constant along the reduce axes
        avail = [0] * len(self.nodes)  # first pass in which the value exists
        r = set(self.reduce_axes)
        rows_of_one = all(self.shape[a] == 1 for a in r)  # every value is constant along size-1 axes
        for i, n in enumerate(self.nodes):
            for s in n.src:
                if not 0 <= s < i:
                    raise err(f"node %{i} ({_opname(n.op)}) reads %{s}, which is not an earlier node")
            srcs = [self.nodes[s] for s in n.src]
            self._check_node(i, n, srcs, err)
            if n.op == LOAD:
                v = self.inputs[n.arg].view
                per_row[i] = all(view_axes_stride0(v, a) for a in r)
            elif n.op == VALID:
                per_row[i] = all(self.shape[a] == 1 or (len(n.arg.views) == 1 and (
                    n.arg.views[0].mask is None or n.arg.views[0].mask[a] == (0, self.shape[a]))) for a in r)
            elif n.op in (Ops.CONST,):
                per_row[i] = True
            elif n.op == ACC:
                per_row[i] = True
            elif n.op in (Ops.REDUCE, Ops.ARGMAX, Ops.ARGMIN):
                if n.pass_ is None or n.pass_ < 0:
                    raise err(f"node %{i} ({_opname(n.op)}) needs a pass number")
                if avail[n.src[0]] > n.pass_:
                    raise err(f"node %{i} ({_opname(n.op)}) accumulates in pass {n.pass_} but its input %{n.src[0]} "
                              f"is only available from pass {avail[n.src[0]]} (a row pass reads a value of a "
                              f"later pass)")
                per_row[i] = True
                avail[i] = n.pass_ + 1
                continue
            else:
                per_row[i] = all(per_row[s] for s in n.src)
            per_row[i] = per_row[i] or rows_of_one
            avail[i] = max((avail[s] for s in n.src), default=0)
        for j, o in enumerate(self.outputs):
            if not 0 <= o.node < len(self.nodes):
                raise err(f"output {j} reads node %{o.node}, which does not exist")
            node = self.nodes[o.node]
            if node.dtype != o.dtype:
                raise err(f"output {j} is {o.dtype} but node %{o.node} is {node.dtype}")
            space = self.reduced_shape if o.reduced else self.shape
            if _prod(o.shape) != _prod(space):
                raise err(f"output {j} shape {o.shape} does not hold the {'reduced ' if o.reduced else ''}"
                          f"space {space}")
            if o.reduced:
                if not r:
                    raise err(f"output {j} is reduced but the kernel has no reduce axes")
                if not per_row[o.node]:
                    raise err(f"output {j} is reduced but node %{o.node} varies along the reduce axes "
                              f"{self.reduce_axes}")
            elif avail[o.node] > o.pass_:
                raise err(f"output {j} is written in pass {o.pass_} but node %{o.node} is only available "
                          f"from pass {avail[o.node]}")
        slots_out = [o.slot for o in self.outputs]
        if len(set(slots_out)) != len(slots_out):
            raise err(f"two outputs write the same slot ({slots_out})")
        both = sorted(set(slots_out) & {i.slot for i in self.inputs})
        if both:
            raise err(f"an output slot is also an input slot ({both})")
        if mm is not None and mm.library:
            if len(self.nodes) != 1 or self.nodes[0].op != ACC or len(self.outputs) != 1:
                raise err("a library (BLAS) step computes exactly one matmul, with no epilogue")

    def _check_library(self, err) -> None:
        if self.matmul is not None or self.attention is not None or self.reduce_axes:
            raise err("a library step cannot also be a matmul, attention or reduce kernel")
        if self.shape != self.outputs[0].shape:
            raise err(f"a library step's space {self.shape} is its first output's shape {self.outputs[0].shape}")
        for i, n in enumerate(self.nodes):
            if n.op != RESULT or n.src or not isinstance(n.arg, int) or n.arg < 0:
                raise err(f"node %{i} ({_opname(n.op)}): a library step's nodes are RESULT nodes")
        for j, o in enumerate(self.outputs):
            if not 0 <= o.node < len(self.nodes) or self.nodes[o.node].dtype != o.dtype or o.reduced:
                raise err(f"output {j} must write a RESULT node of dtype {o.dtype}")
        slots = [o.slot for o in self.outputs]
        if len(set(slots)) != len(slots) or set(slots) & {i.slot for i in self.inputs}:
            raise err(f"output slots {slots} repeat or are also inputs")

    def _check_rowcol(self, err) -> None:
        """The rules of `RowColSpec`: every node's space follows from its sources'."""
        sp = self.rowcol.spaces
        if self.matmul is not None or self.attention is not None or len(self.shape) != 2:
            raise err("a row-column kernel is 2-D, with no matmul or attention")
        if len(sp) != len(self.nodes) or any(s not in (ELEM, ROW, COL, ALL) for s in sp):
            raise err(f"rowcol spaces {sp} do not give one space per node")
        m, n = self.shape
        late = [False] * len(sp)  # a value of the whole (after every row): read by ALL nodes only
        for i, inp in enumerate(self.inputs):
            if inp.view.shape != self.shape:
                raise err(f"input {i} (slot {inp.slot}) is viewed as {inp.view.shape}, not over {self.shape}")
        for i, nd in enumerate(self.nodes):
            for s in nd.src:
                if not 0 <= s < i:
                    raise err(f"node %{i} ({_opname(nd.op)}) reads %{s}, which is not an earlier node")
            srcs = [self.nodes[s] for s in nd.src]
            if nd.op in (Ops.ARGMAX, Ops.ARGMIN, VALID, ACC, RESULT):
                raise err(f"node %{i} ({_opname(nd.op)}) is not allowed in a row-column kernel")
            self._check_node(i, nd, srcs, err)
            have = {sp[s] for s in nd.src}
            if nd.op == LOAD:
                want = {ELEM}
            elif nd.op is Ops.CONST:
                want = {ALL}
            elif nd.op is Ops.REDUCE:
                if nd.arg not in ("sum", "max", "min") or nd.dtype.is_complex:
                    raise err(f"node %{i} REDUCE({nd.arg}) of {nd.dtype}: a row-column kernel sums, maxes, mins")
                want = {ROW, COL} if have == {ELEM} else ({ALL} if have in ({ROW}, {COL}) else set())
            else:  # elementwise: the space of its non-constant sources (one of them)
                live = have - {ALL}
                want = live if len(live) == 1 else ({ALL} if not live else set())
            if sp[i] not in want:
                raise err(f"node %{i} ({_opname(nd.op)}) is in space {'eRCA'[sp[i]]}, its sources in "
                          f"{sorted('eRCA'[s] for s in have)}")
            late[i] = sp[i] == ALL and (nd.op is Ops.REDUCE or any(late[s] for s in nd.src))
            if sp[i] != ALL and any(late[s] for s in nd.src):
                raise err(f"node %{i} ({_opname(nd.op)}) reads a full reduction")
        for j, o in enumerate(self.outputs):
            if not 0 <= o.node < len(self.nodes) or self.nodes[o.node].dtype != o.dtype:
                raise err(f"output {j} must write a node of dtype {o.dtype}")
            s = sp[o.node]
            size = {ROW: m, COL: n, ALL: 1}.get(s)
            if size is None or not o.reduced or _prod(o.shape) != size:
                raise err(f"output {j} of shape {o.shape} writes node %{o.node} of space {'eRCA'[s]}")
        slots = [o.slot for o in self.outputs]
        if len(set(slots)) != len(slots) or set(slots) & {i.slot for i in self.inputs}:
            raise err(f"output slots {slots} repeat or are also inputs")

    def _check_attention(self, err) -> None:
        at = self.attention
        if self.matmul is not None or self.reduce_axes:
            raise err("an attention kernel cannot also be a matmul or reduce")
        ops = at.operands
        if len(set(ops)) != 3 or not all(0 <= i < len(self.inputs) for i in ops):
            raise err(f"attention operands q={at.q} k={at.k} v={at.v} must be three distinct inputs")
        if len(self.shape) < 2 or self.shape[-2:] != (at.m, at.dv):
            raise err(f"attention output space {self.shape} does not end in (m, dv) = ({at.m}, {at.dv})")
        if len({self.inputs[i].dtype for i in ops}) != 1 or not self.inputs[at.q].dtype.is_float:
            raise err("attention operands must share one float dtype")
        if len(self.outputs) != 1 or sum(1 for n in self.nodes if n.op == ACC) != 1:
            raise err("an attention kernel has one output and one ACC node (the scores)")
        for i, n in enumerate(self.nodes):
            if n.op in (Ops.REDUCE, Ops.ARGMAX, Ops.ARGMIN, VALID):
                raise err(f"node %{i} ({_opname(n.op)}): the scores of an attention kernel are elementwise")
        if self.nodes[self.outputs[0].node].dtype != self.inputs[at.q].dtype:
            raise err("the softmax input t must have the operands' dtype")

    def _check_mlp(self, err) -> None:
        """The rules of `MlpSpec` (no reductions, no VALID: two elementwise epilogues)."""
        ml = self.mlp
        if self.matmul is not None or self.attention is not None or self.reduce_axes or len(self.shape) != 2:
            raise err("an MLP kernel is 2-D, with no matmul, attention or reduce of its own")
        if self.shape != (ml.m, ml.n):
            raise err(f"MLP output space {self.shape} is not (m, n) = ({ml.m}, {ml.n})")
        ops = ml.operands
        if len(set(ops)) != 3 or not all(0 <= i < len(self.inputs) for i in ops):
            raise err(f"MLP operands x={ml.x} w1={ml.w1} w2={ml.w2} must be three distinct inputs")
        dt = self.inputs[ml.x].dtype
        if not dt.is_float or dt.is_complex or any(self.inputs[i].dtype != dt for i in ops):
            raise err("MLP operands must share one real float dtype")
        if not 0 < ml.split < len(self.nodes) or not 0 <= ml.hidden < ml.split:
            raise err(f"MLP split {ml.split} / hidden %{ml.hidden} out of range")
        if self.nodes[ml.hidden].dtype != dt:
            raise err(f"the hidden value %{ml.hidden} must have the operands' dtype {dt}")
        for part, (lo, hi) in enumerate(((0, ml.split), (ml.split, len(self.nodes)))):
            if sum(1 for n in self.nodes[lo:hi] if n.op == ACC) != 1:
                raise err(f"MLP part {part + 1} needs exactly one ACC node")
            for i in range(lo, hi):
                n = self.nodes[i]
                if any(not lo <= s < i for s in n.src):
                    raise err(f"node %{i} ({_opname(n.op)}) reads a node outside its MLP part or a later one")
                if n.op in (Ops.REDUCE, Ops.ARGMAX, Ops.ARGMIN, VALID, RESULT):
                    raise err(f"node %{i} ({_opname(n.op)}): MLP epilogues are elementwise")
                if n.op == ACC:
                    if n.dtype != dt:
                        raise err(f"node %{i} ACC has dtype {n.dtype}, operands {dt}")
                    continue
                if n.op == LOAD and isinstance(n.arg, int) and 0 <= n.arg < len(self.inputs):
                    want = (ml.m, ml.h) if part == 0 else (ml.m, ml.n)
                    if n.arg in ops:
                        raise err(f"node %{i} loads MLP operand {n.arg} elementwise")
                    if self.inputs[n.arg].view.shape != want:
                        raise err(f"input {n.arg} is viewed as {self.inputs[n.arg].view.shape}, but MLP part "
                                  f"{part + 1} reads it over {want}")
                self._check_node(i, n, [self.nodes[s] for s in n.src], err)
        want = {ml.x: (ml.m, ml.d), ml.w1: (ml.d, ml.h), ml.w2: (ml.h, ml.n)}
        for i, w in want.items():
            if self.inputs[i].view.shape != w:
                raise err(f"MLP operand {i} is viewed as {self.inputs[i].view.shape}, not {w}")
        for j, o in enumerate(self.outputs):
            if not ml.split <= o.node < len(self.nodes) or self.nodes[o.node].dtype != o.dtype or o.reduced or \
                    _prod(o.shape) != ml.m * ml.n:
                raise err(f"output {j} must write a node of MLP part 2 over (m, n) as {o.dtype}")
        slots = [o.slot for o in self.outputs]
        if len(set(slots)) != len(slots) or set(slots) & {i.slot for i in self.inputs}:
            raise err(f"output slots {slots} repeat or are also inputs")

    def _check_rmsnorm(self, err) -> None:
        """The rules of `RmsNormSpec`: a row prologue over (m, k), an elementwise epilogue
        over (m, n), B read as (k, n)."""
        rs = self.rmsnorm
        if self.matmul is not None or self.attention is not None or self.mlp is not None or self.rowcol is not None \
                or self.reduce_axes or self.shape != (rs.m, rs.n):
            raise err(f"a row-prologue matmul kernel is 2-D over (m, n) = ({rs.m}, {rs.n}), with no other spec "
                      f"(space {self.shape})")
        if not 0 <= rs.w < len(self.inputs) or self.inputs[rs.w].view.shape != (rs.k, rs.n):
            raise err(f"B operand {rs.w} must be an input viewed as (k, n) = ({rs.k}, {rs.n})")
        dt = self.inputs[rs.w].dtype
        if not dt.is_float or dt.is_complex:
            raise err(f"the operands must be of a real float dtype, not {dt}")
        if not 0 < rs.split < len(self.nodes) or not 0 <= rs.a < rs.split or self.nodes[rs.a].dtype != dt:
            raise err(f"split {rs.split} / A %{rs.a} out of range or A not of the operands' dtype {dt}")
        avail = [0] * len(self.nodes)
        for part, (lo, hi) in enumerate(((0, rs.split), (rs.split, len(self.nodes)))):
            want = (rs.m, rs.k) if part == 0 else (rs.m, rs.n)
            if sum(1 for n in self.nodes[lo:hi] if n.op == ACC) != part:
                raise err(f"part {part + 1} needs {part} ACC node(s)")
            for i in range(lo, hi):
                n = self.nodes[i]
                if any(not lo <= s < i for s in n.src):
                    raise err(f"node %{i} ({_opname(n.op)}) reads a node outside its part or a later one")
                if n.op in (Ops.ARGMAX, Ops.ARGMIN, VALID, RESULT) or (part == 1 and n.op is Ops.REDUCE):
                    raise err(f"node %{i} ({_opname(n.op)}) is not allowed in part {part + 1}")
                avail[i] = max((avail[s] for s in n.src), default=0)
                if n.op is Ops.REDUCE:
                    if n.pass_ is None or n.pass_ < avail[i] or n.arg not in REDUCE_OPS or \
                            self.nodes[n.src[0]].dtype != n.dtype:
                        raise err(f"node %{i} REDUCE needs a pass from {avail[i]} and its source's dtype")
                    avail[i] = n.pass_ + 1
                    continue
                if n.op == ACC:
                    if n.dtype != dt:
                        raise err(f"node %{i} ACC has dtype {n.dtype}, operands {dt}")
                    continue
                if n.op == LOAD:
                    if not isinstance(n.arg, int) or not 0 <= n.arg < len(self.inputs) or n.arg == rs.w:
                        raise err(f"node %{i} loads input {n.arg!r}: not an input, or the B operand")
                    if self.inputs[n.arg].view.shape != want:
                        raise err(f"input {n.arg} is viewed as {self.inputs[n.arg].view.shape}, but part "
                                  f"{part + 1} reads it over {want}")
                    if self.inputs[n.arg].dtype != n.dtype:
                        raise err(f"node %{i} loads input {n.arg} of dtype {self.inputs[n.arg].dtype} as {n.dtype}")
                    continue
                if n.op is Ops.CONST:
                    continue
                self._check_node(i, n, [self.nodes[s] for s in n.src], err)
        for j, o in enumerate(self.outputs):
            if not rs.split <= o.node < len(self.nodes) or self.nodes[o.node].dtype != o.dtype or o.reduced or \
                    _prod(o.shape) != rs.m * rs.n:
                raise err(f"output {j} must write a node of part 2 over (m, n) as {o.dtype}")
        slots = [o.slot for o in self.outputs]
        if len(set(slots)) != len(slots) or set(slots) & {i.slot for i in self.inputs}:
            raise err(f"output slots {slots} repeat or are also inputs")

    def _check_node(self, i: int, n: KNode, srcs: list[KNode], err) -> None:
        op = n.op
        if op == LOAD:
            if not isinstance(n.arg, int) or not 0 <= n.arg < len(self.inputs):
                raise err(f"node %{i} loads input {n.arg!r}, which does not exist")
            if self.matmul is not None and n.arg in (self.matmul.a, self.matmul.b):
                raise err(f"node %{i} loads matmul operand {n.arg} elementwise")
            if self.attention is not None and n.arg in self.attention.operands:
                raise err(f"node %{i} loads attention operand {n.arg} elementwise")
            if self.mlp is not None and n.arg in self.mlp.operands:
                raise err(f"node %{i} loads MLP operand {n.arg} elementwise")
            if self.inputs[n.arg].dtype != n.dtype:
                raise err(f"node %{i} loads input {n.arg} of dtype {self.inputs[n.arg].dtype} as {n.dtype}")
        elif op == VALID:
            if not isinstance(n.arg, ViewChain) or n.arg.shape != self.shape or n.dtype != bool_:
                raise err(f"node %{i} VALID needs a bool ViewChain over {self.shape}")
        elif op == ACC:
            if self.matmul is None and self.attention is None:
                raise err(f"node %{i} ACC in a kernel without matmul or attention")
            first = self.inputs[self.matmul.a if self.matmul is not None else 0].dtype
            if n.dtype != first:
                raise err(f"node %{i} ACC has dtype {n.dtype}, operands {first}")
        elif op is Ops.CONST:
            if srcs:
                raise err(f"node %{i} CONST has sources")
        elif op is Ops.REDUCE:
            if not self.reduce_axes:
                raise err(f"node %{i} REDUCE in a kernel without reduce axes")
            if n.arg not in REDUCE_OPS or len(srcs) != 1 or srcs[0].dtype != n.dtype:
                raise err(f"node %{i} REDUCE({n.arg!r}) needs one source of dtype {n.dtype}")
        elif op in (Ops.ARGMAX, Ops.ARGMIN):
            if not self.reduce_axes or n.dtype != int64 or len(srcs) != 1:
                raise err(f"node %{i} {op.name} needs reduce axes, one source and dtype int64")
        elif op in UNARY:
            if len(srcs) != 1:
                raise err(f"node %{i} {op.name} takes one source, got {len(srcs)}")
            want = srcs[0].dtype.real if op in (Ops.REAL, Ops.IMAG, Ops.ABS) else srcs[0].dtype
            if op is not Ops.CAST and op not in BOOL_UNARY and want != n.dtype:
                raise err(f"node %{i} {op.name}: source dtype {srcs[0].dtype}, result {n.dtype}")
        elif op in BINARY:
            if len(srcs) != 2 or srcs[0].dtype != srcs[1].dtype:
                raise err(f"node %{i} {op.name} needs two sources of one dtype, got "
                          f"{[s.dtype for s in srcs]}")
            want = bool_ if op in COMPARE else srcs[0].dtype
            if op is Ops.COMPLEX:
                from svod.dtype import complex_of

                want = complex_of(srcs[0].dtype)
            if n.dtype != want:
                raise err(f"node %{i} {op.name} has dtype {n.dtype}, expected {want}")
        elif op is Ops.WHERE:
            if len(srcs) != 3 or srcs[0].dtype != bool_ or srcs[1].dtype != srcs[2].dtype != n.dtype:
                raise err(f"node %{i} WHERE needs (bool, x, x) sources of dtype {n.dtype}")
        else:
            raise err(f"node %{i} has op {op!r}, which kernels do not support")

    # ---- text
    def __str__(self) -> str:
        head = f"kernel {self.name} [{self.kind}] space {_shape(self.shape)}"
        if self.reduce_axes:
            head += f" reduce {self.reduce_axes} passes {self.passes}"
        if self.matmul:
            mm = self.matmul
            head += f" matmul(in{mm.a} @ in{mm.b}, m={mm.m} n={mm.n} k={mm.k}{', library' if mm.library else ''})"
        if self.library:
            head += f" library({self.library.fn}{self.library.params!r})"
        if self.mlp:
            ml = self.mlp
            head += (f" mlp(in{ml.x} @ in{ml.w1} -> %{ml.hidden} @ in{ml.w2}, m={ml.m} d={ml.d} h={ml.h} n={ml.n}, "
                     f"part 2 from %{ml.split})")
        if self.rmsnorm:
            rs = self.rmsnorm
            head += f" rmsnorm(%{rs.a} @ in{rs.w}, m={rs.m} k={rs.k} n={rs.n}, part 2 from %{rs.split})"
        if self.rowcol:
            head += " rowcol(" + " ".join("eRCA"[s] for s in self.rowcol.spaces) + ")"
        if self.attention:
            at = self.attention
            head += (f" attention(softmax(%{self.outputs[0].node}) @ in{at.v}, ACC = in{at.q} @ in{at.k}.T, "
                     f"m={at.m} n={at.n} d={at.d} dv={at.dv})")
        lines = [head]
        for i, inp in enumerate(self.inputs):
            lines.append(f"  in{i}: slot {inp.slot} {inp.dtype} {_view_str(inp.view)}")
        for i, n in enumerate(self.nodes):
            if n.op == LOAD:
                rhs = f"LOAD in{n.arg}"
            elif n.op == VALID:
                rhs = f"VALID {_view_str(n.arg)}"
            elif n.op is Ops.CONST:
                rhs = f"CONST {n.arg!r}"
            elif n.op == RESULT:
                rhs = f"RESULT {n.arg}"
            else:
                name = _opname(n.op) + (f".{n.arg}" if n.op is Ops.REDUCE else "")
                rhs = f"{name} " + " ".join(f"%{s}" for s in n.src)
            tail = f"  @pass{n.pass_}" if n.pass_ is not None else ""
            lines.append(f"  %{i}: {n.dtype} = {rhs.rstrip()}{tail}")
        for j, o in enumerate(self.outputs):
            where = "per row" if o.reduced else f"@pass{o.pass_}"
            lines.append(f"  out{j}: slot {o.slot} {o.dtype} {_shape(o.shape)} <- %{o.node} {where}")
        return "\n".join(lines)


def view_axes_stride0(v: ViewChain, axis: int) -> bool:
    """Whether the chain reads the same element for every index along `axis`."""
    if len(v.views) == 1:
        view = v.views[0]
        return view.strides[axis] == 0 and (view.mask is None or view.mask[axis] == (0, v.shape[axis]))
    return v.shape[axis] == 1


def _opname(op) -> str:
    return op.name if isinstance(op, Ops) else str(op)


def _shape(s: tuple[int, ...]) -> str:
    return "(" + ", ".join(map(str, s)) + ("," if len(s) == 1 else "") + ")"


def _view_str(v: ViewChain) -> str:
    parts = []
    for view in v.views:
        s = f"{_shape(view.shape)} strides {view.strides}"
        if view.offset:
            s += f" offset {view.offset}"
        if view.mask is not None:
            s += f" mask {view.mask}"
        parts.append(s)
    return " | ".join(parts)


@dataclass(frozen=True)
class SlotInfo:
    shape: tuple[int, ...]
    dtype: DType
    role: str  # "input", "output" or "temp"


@dataclass(frozen=True)
class Plan:
    """Kernels in execution order over numbered slots.

    Slots `0..n_inputs-1` are the graph's inputs in binding order; `outputs[i]` is the
    slot (and the user-visible shape) of the i-th output of the GraphKey.
    """

    kernels: tuple[Kernel, ...]
    slots: dict[int, SlotInfo]
    n_inputs: int
    outputs: tuple[tuple[int, tuple[int, ...]], ...]
    planner: str = "greedy"

    def check(self) -> None:
        """Each kernel is legal, and reads only slots written earlier (or inputs)."""
        written = set(range(self.n_inputs))
        for k in self.kernels:
            k.check()
            for inp in k.inputs:
                if inp.slot not in written:
                    raise KernelError(f"plan: kernel {k.name} reads slot {inp.slot} before any kernel writes it")
            for o in k.outputs:
                info = self.slots.get(o.slot)
                if info is None or _prod(info.shape) != _prod(o.shape) or info.dtype != o.dtype:
                    raise KernelError(f"plan: kernel {k.name} writes slot {o.slot} as {o.dtype}{o.shape}, "
                                      f"which does not match the slot {info}")
                if o.slot < self.n_inputs:
                    raise KernelError(f"plan: kernel {k.name} overwrites input slot {o.slot}")
                written.add(o.slot)
        for slot, _ in self.outputs:
            if slot not in written:
                raise KernelError(f"plan: output slot {slot} is never written")

    def __str__(self) -> str:
        outs = ", ".join(f"slot {s}" for s, _ in self.outputs)
        return f"plan ({self.planner}): {len(self.kernels)} kernel(s), outputs {outs}\n" + \
            "\n".join(str(k) for k in self.kernels)


# ----------------------------------------------------------------------------- JSON form (no pickle)


def _chain_to_json(c: ViewChain) -> dict:
    pv = c.pad_value
    return {"views": [[list(v.shape), list(v.strides), v.offset, None if v.mask is None else [list(m) for m in v.mask]]
                      for v in c.views],
            "pad": pv.hex() if isinstance(pv, float) else _scalar_to_json(pv)}


def _chain_from_json(obj: dict) -> ViewChain:
    from svod.view import View

    views = tuple(View(tuple(s), tuple(st), off, None if m is None else tuple(tuple(x) for x in m))
                  for s, st, off, m in obj["views"])
    pad = obj["pad"]
    return ViewChain(views, float.fromhex(pad) if isinstance(pad, str) else _scalar_from_json(pad))


def _scalar_to_json(x):
    if isinstance(x, complex):
        return {"c": [x.real.hex(), x.imag.hex()]}
    return {"f": x.hex()} if isinstance(x, float) else x


def _scalar_from_json(x):
    if isinstance(x, dict) and "c" in x:
        return complex(float.fromhex(x["c"][0]), float.fromhex(x["c"][1]))
    return float.fromhex(x["f"]) if isinstance(x, dict) else x


def kernel_to_json(k: Kernel) -> dict:
    nodes = []
    for n in k.nodes:
        op = n.op.value if isinstance(n.op, Ops) else n.op
        arg = _chain_to_json(n.arg) if isinstance(n.arg, ViewChain) else _scalar_to_json(n.arg)
        nodes.append([op, n.dtype.name, list(n.src), arg, n.pass_])
    mm = k.matmul
    return {"name": k.name, "shape": list(k.shape), "reduce_axes": list(k.reduce_axes),
            "inputs": [[i.slot, i.dtype.name, _chain_to_json(i.view)] for i in k.inputs], "nodes": nodes,
            "outputs": [[o.slot, o.node, o.dtype.name, list(o.shape), o.reduced, o.pass_] for o in k.outputs],
            "matmul": None if mm is None else [mm.a, mm.b, mm.m, mm.n, mm.k, mm.library],
            "attention": None if k.attention is None else list(k.attention.key()),
            **({} if k.library is None else {"library": [k.library.fn, _arg_to_json(k.library.params)]}),
            **({} if k.rowcol is None else {"rowcol": list(k.rowcol.spaces)}),
            **({} if k.mlp is None else {"mlp": list(k.mlp.key())}),
            **({} if k.rmsnorm is None else {"rmsnorm": list(k.rmsnorm.key())})}


def kernel_from_json(obj: dict) -> Kernel:
    from svod.dtype import dtype as to_dtype

    nodes = []
    for op, dt, src, arg, p in obj["nodes"]:
        op = op if op in (LOAD, VALID, ACC, RESULT) else Ops(op)
        arg = _chain_from_json(arg) if op == VALID else _scalar_from_json(arg)
        nodes.append(KNode(op, to_dtype(dt), tuple(src), arg, p))
    mm = obj["matmul"]
    at = obj.get("attention")
    return Kernel(obj["name"], tuple(obj["shape"]),
                  tuple(KInput(s, to_dtype(d), _chain_from_json(v)) for s, d, v in obj["inputs"]), tuple(nodes),
                  tuple(KOutput(s, n, to_dtype(d), tuple(sh), r, p) for s, n, d, sh, r, p in obj["outputs"]),
                  tuple(obj["reduce_axes"]), None if mm is None else MatmulSpec(*mm),
                  None if at is None else AttentionSpec(*at),
                  None if "library" not in obj else LibrarySpec(obj["library"][0], _arg_from_json(obj["library"][1])),
                  None if "rowcol" not in obj else RowColSpec(tuple(obj["rowcol"])),
                  None if "mlp" not in obj else MlpSpec(*obj["mlp"]),
                  None if "rmsnorm" not in obj else RmsNormSpec(*obj["rmsnorm"]))


def plan_to_json(p: Plan) -> dict:
    return {"kernels": [kernel_to_json(k) for k in p.kernels],
            "slots": [[s, list(i.shape), i.dtype.name, i.role] for s, i in sorted(p.slots.items())],
            "n_inputs": p.n_inputs, "outputs": [[s, list(sh)] for s, sh in p.outputs], "planner": p.planner}


def plan_from_json(obj: dict) -> Plan:
    from svod.dtype import dtype as to_dtype

    return Plan(tuple(kernel_from_json(k) for k in obj["kernels"]),
                {s: SlotInfo(tuple(sh), to_dtype(d), r) for s, sh, d, r in obj["slots"]},
                obj["n_inputs"], tuple((s, tuple(sh)) for s, sh in obj["outputs"]), obj["planner"])
