"""The reference interpreter: evaluates graphs with numpy. The oracle of every test.

`eval_uops(roots)` evaluates UOps directly; `eval_key(key, arrays)` evaluates a compacted
GraphKey with new input data (what the engine's interpreter path replays). Each op's
numpy implementation is the op table's (`svod.ops`); those *define* svod's semantics
where numpy has a choice (documented in docs/semantics.md):
integer `//` and `%` give 0 on division by zero, integer `**` with a negative exponent
gives 0 unless the base is ±1, float->int casts follow numpy on this platform.

>>> import numpy as np
>>> from svod.ir import UOp, Ops
>>> from svod import dtype as d
>>> x = UOp.buffer(np.array([1.0, 4.0], np.float32), d.float32)
>>> eval_uops([UOp(Ops.SQRT, d.float32, (x,))])[0]
array([1., 2.], dtype=float32)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from svod.ir import Ops, UOp
from svod.ops import TABLE, reduce_numpy
from svod.view import View, ViewChain


def eval_node(op: Ops, dtype, arg, shape, srcs: Sequence[np.ndarray]) -> np.ndarray:
    """Evaluate one non-leaf node on numpy arrays: the op table's numpy implementation
    (`svod.ops`, the single source of op semantics), or the library call of a LIBRARY node."""
    npd = dtype.np
    with np.errstate(all="ignore"):
        info = TABLE.get(op)
        if info is not None and info.interp is not None:
            return info.interp(srcs, npd, arg)
        if op is Ops.LIBRARY:
            from svod.library import execute

            return np.asarray(execute(arg[0], arg[1], srcs)[arg[2]]).astype(npd, copy=False).reshape(arg[3])
    raise NotImplementedError(f"interpreter: no rule for {op}")


def eval_key(key, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Evaluate a GraphKey on input arrays; returns fresh contiguous outputs."""
    vals: list[np.ndarray | None] = [None] * len(key.nodes)
    last_use = [-1] * len(key.nodes)
    for i, n in enumerate(key.nodes):
        for s in n.src:
            last_use[s] = i
    keep = set(key.outputs)
    for i, n in enumerate(key.nodes):
        if n.op is Ops.BUFFER:
            vals[i] = arrays[n.arg[0]]
        else:
            vals[i] = eval_node(n.op, n.dtype, n.arg, n.shape, [vals[s] for s in n.src])
            assert vals[i].shape == n.shape, f"{n.op}: {vals[i].shape} != {n.shape}"
        for s in n.src:  # free intermediates early: big graphs must fit in memory
            if last_use[s] == i and s not in keep:
                vals[s] = None
    return [np.array(vals[o], dtype=key.nodes[o].dtype.np, copy=True, order="C") for o in key.outputs]


def eval_uops(roots: Sequence[UOp]) -> list[np.ndarray]:
    """Evaluate UOps with numpy (the oracle)."""
    from svod.key import compact

    key, bindings = compact(list(roots))
    return eval_key(key, bindings.arrays)


# ----------------------------------------------------------------------------- kernels


def _gather(flat: np.ndarray, view) -> np.ndarray:
    """`view` over the 1-D buffer `flat`. An unmasked single view is a read-only strided
    view of the buffer, never a copy: a broadcast (stride 0) operand, of a matmul above
    all, stays the size of its buffer, so the interpreter needs no more memory than the
    compiled kernel would. A masked or chained view is gathered without its broadcast
    axes (stride 0 and unmasked in the outermost view), which are broadcast back after."""
    views = getattr(view, "views", (view,))
    outer = views[-1]
    bc = [i for i, (n, s) in enumerate(zip(outer.shape, outer.strides))
          if n > 1 and s == 0 and (outer.mask is None or tuple(outer.mask[i]) == (0, n))]
    if bc:  # read once per broadcast row: the value does not depend on those indices
        shape = tuple(1 if i in bc else n for i, n in enumerate(outer.shape))
        mask = None if outer.mask is None else tuple((0, 1) if i in bc else m for i, m in enumerate(outer.mask))
        small = View(shape, outer.strides, outer.offset, mask)
        inner = small if len(views) == 1 else ViewChain((*views[:-1], small), getattr(view, "pad_value", 0))
        return np.broadcast_to(_gather(flat, inner), outer.shape)
    v = views[0]
    if len(views) == 1 and v.mask is None and v.size:
        flat = np.asarray(flat).reshape(-1)
        lo = v.offset + sum((n - 1) * s for n, s in zip(v.shape, v.strides) if s < 0)
        hi = v.offset + sum((n - 1) * s for n, s in zip(v.shape, v.strides) if s > 0)
        if 0 <= lo and hi < flat.size:
            strides = tuple(s * flat.itemsize for s in v.strides)
            return np.lib.stride_tricks.as_strided(flat[v.offset:], v.shape, strides, writeable=False)
    return view.gather(flat, pad_value=0)


def run_kernel(kernel, buffers: dict[int, np.ndarray]) -> None:
    """Execute one Kernel with numpy over flat slot buffers (writes its output slots).

    The whole iteration space is evaluated at once; REDUCE nodes keep their reduced
    axes (size 1) and broadcast in later nodes — the same values the passes compute.
    An attention kernel's nodes give the softmax input t over the scores; its output is
    ``softmax(t) @ v``.
    """
    if kernel.library is not None:
        from svod.library import execute, store

        results = execute(kernel.library.fn, kernel.library.params,
                          [i.view.gather(buffers[i.slot], pad_value=0) for i in kernel.inputs])
        for o in kernel.outputs:
            if buffers.get(o.slot) is None or buffers[o.slot].size < math.prod(o.shape):
                buffers[o.slot] = np.empty(math.prod(o.shape), o.dtype.np)
        store(kernel, results, buffers)
        return
    if kernel.rowcol is not None:
        _run_rowcol(kernel, buffers)
        return
    if kernel.mlp is not None:
        _run_mlp(kernel, buffers)
        return
    if kernel.rmsnorm is not None:
        _run_rmsnorm(kernel, buffers)
        return
    at = kernel.attention
    if at is None:
        vals = _eval_body(kernel, buffers)
    else:
        q, k, v = (_gather(buffers[kernel.inputs[i].slot], kernel.inputs[i].view) for i in at.operands)
        t = _eval_body(kernel, buffers, np.matmul(q, np.swapaxes(k, -1, -2)))[kernel.outputs[0].node]
        with np.errstate(all="ignore"):
            e = np.exp(t - t.max(axis=-1, keepdims=True))
            vals = {kernel.outputs[0].node: np.matmul(e / e.sum(axis=-1, keepdims=True), v)}
    for o in kernel.outputs:
        space = kernel.reduced_shape if o.reduced else kernel.shape
        val = vals[o.node]
        if o.reduced and np.ndim(val) == len(space):
            # a per-row output is evaluated once per row: an epilogue's load of a per-row value
            # (stride 0 along the reduced axes) spans the whole space here, constant along them
            val = val[tuple(slice(0, 1) if a in kernel.reduce_axes and np.shape(val)[a] > 1 else slice(None)
                            for a in range(len(space)))]
        v = np.broadcast_to(val, space)
        dst = buffers.get(o.slot)
        if dst is not None and dst.size == v.size and dst.dtype == o.dtype.np:
            np.copyto(dst.reshape(space), v, casting="unsafe")  # a pre-allocated slot buffer
        else:
            buffers[o.slot] = np.array(v, dtype=o.dtype.np, order="C").reshape(-1)


def _run_rowcol(kernel, buffers: dict[int, np.ndarray]) -> None:
    """A row-column kernel (`svod.kernel.RowColSpec`): each node over its space's shape —
    elements (m, n), per row (m, 1), per column (1, n), one value (1, 1)."""
    from svod.kernel import ALL, COL, ELEM, LOAD, ROW

    m, n = kernel.shape
    shape = {ELEM: (m, n), ROW: (m, 1), COL: (1, n), ALL: (1, 1)}
    sp = kernel.rowcol.spaces
    vals: list[np.ndarray] = []
    with np.errstate(all="ignore"):
        for nd, s in zip(kernel.nodes, sp):
            if nd.op == LOAD:
                inp = kernel.inputs[nd.arg]
                v = _gather(buffers[inp.slot], inp.view)
            elif nd.op is Ops.REDUCE:
                src = sp[nd.src[0]]
                axes = (1,) if s == ROW else (0,) if s == COL else (0, 1)
                x = np.broadcast_to(vals[nd.src[0]], shape[src])
                v = np.asarray(reduce_numpy(nd.arg, x, axes, nd.dtype.np)).astype(nd.dtype.np, copy=False)
            else:
                v = eval_node(nd.op, nd.dtype, nd.arg, None, [vals[i] for i in nd.src])
            vals.append(np.asarray(v))
    for o in kernel.outputs:
        v = np.broadcast_to(vals[o.node], shape[sp[o.node]]).reshape(-1)
        dst = buffers.get(o.slot)
        if dst is not None and dst.size == v.size and dst.dtype == o.dtype.np:
            np.copyto(dst.reshape(-1), v, casting="unsafe")  # a pre-allocated slot buffer
        else:
            buffers[o.slot] = np.array(v, dtype=o.dtype.np, order="C")


def _run_mlp(kernel, buffers: dict[int, np.ndarray]) -> None:
    """An MLP kernel (`svod.kernel.MlpSpec`): nodes ``[:split]`` over (m, h) with ACC =
    x @ w1, then nodes ``[split:]`` over (m, n) with ACC = hidden @ w2."""
    from svod.kernel import ACC, LOAD

    ml = kernel.mlp
    x, w1, w2 = (_gather(buffers[kernel.inputs[i].slot], kernel.inputs[i].view) for i in ml.operands)
    vals: list[np.ndarray] = []
    with np.errstate(all="ignore"):
        for i, n in enumerate(kernel.nodes):
            if n.op == LOAD:
                inp = kernel.inputs[n.arg]
                v = _gather(buffers[inp.slot], inp.view)
            elif n.op == ACC and i < ml.split:
                v = np.matmul(x, w1).astype(n.dtype.np, copy=False)
            elif n.op == ACC:
                hidden = np.broadcast_to(vals[ml.hidden], (ml.m, ml.h))
                v = np.matmul(hidden, w2).astype(n.dtype.np, copy=False)
            else:
                v = eval_node(n.op, n.dtype, n.arg, None, [vals[s] for s in n.src])
            vals.append(np.asarray(v))
    for o in kernel.outputs:
        v = np.broadcast_to(vals[o.node], kernel.shape)
        dst = buffers.get(o.slot)
        if dst is not None and dst.size == v.size and dst.dtype == o.dtype.np:
            np.copyto(dst.reshape(kernel.shape), v, casting="unsafe")  # a pre-allocated slot buffer
        else:
            buffers[o.slot] = np.array(v, dtype=o.dtype.np, order="C").reshape(-1)


def _run_rmsnorm(kernel, buffers: dict[int, np.ndarray]) -> None:
    """A row-prologue matmul kernel (`svod.kernel.RmsNormSpec`): nodes ``[:split]`` over
    (m, k), REDUCE nodes over axis 1 (kept as size 1); then nodes ``[split:]`` over (m, n)
    with ACC = A @ w, A node `a` over (m, k)."""
    from svod.kernel import ACC, LOAD

    rs = kernel.rmsnorm
    w = _gather(buffers[kernel.inputs[rs.w].slot], kernel.inputs[rs.w].view)
    vals: list[np.ndarray] = []
    with np.errstate(all="ignore"):
        for n in kernel.nodes:
            if n.op == LOAD:
                inp = kernel.inputs[n.arg]
                v = _gather(buffers[inp.slot], inp.view)
            elif n.op is Ops.REDUCE:
                src = np.broadcast_to(vals[n.src[0]], (rs.m, rs.k))
                v = np.asarray(reduce_numpy(n.arg, src, (1,), n.dtype.np)).astype(n.dtype.np, copy=False)
            elif n.op == ACC:
                a = np.broadcast_to(vals[rs.a], (rs.m, rs.k))
                v = np.matmul(a, w).astype(n.dtype.np, copy=False)
            else:
                v = eval_node(n.op, n.dtype, n.arg, None, [vals[s] for s in n.src])
            vals.append(np.asarray(v))
    for o in kernel.outputs:
        v = np.broadcast_to(vals[o.node], kernel.shape)
        dst = buffers.get(o.slot)
        if dst is not None and dst.size == v.size and dst.dtype == o.dtype.np:
            np.copyto(dst.reshape(kernel.shape), v, casting="unsafe")  # a pre-allocated slot buffer
        else:
            buffers[o.slot] = np.array(v, dtype=o.dtype.np, order="C").reshape(-1)


def _eval_body(kernel, buffers: dict[int, np.ndarray], acc: np.ndarray | None = None) -> list[np.ndarray]:
    """Every node of `kernel` over its whole space; ACC is the matmul of its operands, or
    `acc` when given (an attention kernel's scores)."""
    from svod.kernel import ACC, LOAD, VALID

    r = tuple(kernel.reduce_axes)
    vals: list[np.ndarray] = []
    with np.errstate(all="ignore"):
        for n in kernel.nodes:
            if n.op == LOAD:
                inp = kernel.inputs[n.arg]
                v = _gather(buffers[inp.slot], inp.view)
            elif n.op == VALID:
                v = n.arg.index_arrays()[1]
            elif n.op == ACC and acc is not None:
                v = acc.astype(n.dtype.np, copy=False)
            elif n.op == ACC:
                mm = kernel.matmul
                a = _gather(buffers[kernel.inputs[mm.a].slot], kernel.inputs[mm.a].view)
                b = _gather(buffers[kernel.inputs[mm.b].slot], kernel.inputs[mm.b].view)
                v = np.matmul(a, b).astype(n.dtype.np, copy=False)
            elif n.op is Ops.REDUCE:
                src = np.broadcast_to(vals[n.src[0]], kernel.shape)  # NOTE: a CONST source is 0-d
                v = np.asarray(reduce_numpy(n.arg, src, r, n.dtype.np)).astype(n.dtype.np, copy=False)
            elif n.op in (Ops.ARGMAX, Ops.ARGMIN):
                v = _arg_reduce_axes(n.op, np.broadcast_to(vals[n.src[0]], kernel.shape), r)
            else:
                v = eval_node(n.op, n.dtype, n.arg, None, [vals[s] for s in n.src])
            vals.append(np.asarray(v))
    return vals


def _arg_reduce_axes(op: Ops, x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """argmax/argmin over several axes: the row-major index within the reduced axes."""
    keep = [i for i in range(x.ndim) if i not in axes]
    moved = np.transpose(x, keep + list(axes))
    flat = moved.reshape(moved.shape[:len(keep)] + (-1,))
    idx = (np.argmax if op is Ops.ARGMAX else np.argmin)(flat, axis=-1).astype(np.int64)
    out_shape = tuple(1 if i in axes else s for i, s in enumerate(x.shape))
    return idx.reshape(out_shape)


def run_plan(plan, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Execute a Plan (list of Kernels over slots) with numpy; returns its outputs."""
    buffers: dict[int, np.ndarray] = {}
    for i, a in enumerate(arrays):
        buffers[i] = np.ascontiguousarray(a).reshape(-1)
    for k in plan.kernels:
        run_kernel(k, buffers)
    return [np.array(buffers[slot].reshape(shape), copy=True) for slot, shape in plan.outputs]
