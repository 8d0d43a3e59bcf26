"""A named generator of small random tensor programs (hypothesis strategy).

`programs()` draws programs of up to ~8 ops mixing elementwise chains, diamonds (a
value used twice), broadcasts, keepdims reductions (reduce-then-broadcast), movement
ops, concat, pad, matmul and in-place slice updates of matmul results (``v[key] = (v @ w)[key]``,
whose fused epilogue reads the matmul's own operand) — not only chains. Used by the greedy planner tests and the
search's optimality tests.

`algebra_programs()` draws programs of the shapes issue 30's algebraic rewrites act on
(contractions written as broadcast-multiply-reduce, matmul chains, sibling projections,
reductions of scaled and broadcast values, transposed elementwise chains, attention), each
built from one source for svod and for numpy; tests/test_algebra_programs.py runs them
against numpy at the documented tolerance.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st

import svod

UNARY = ["exp", "tanh", "neg", "abs", "sqrt_abs", "sigmoid", "square"]
BINARY = ["add", "sub", "mul", "max", "div_safe"]


def _unary(name, x):
    if name == "exp":
        return svod.exp(svod.clip(x, -10, 10))
    if name == "sqrt_abs":
        return svod.sqrt(svod.abs(x))
    if name == "sigmoid":
        return svod.nn.sigmoid(x)
    if name == "square":
        return x * x
    return getattr(svod, {"tanh": "tanh", "neg": "negative", "abs": "abs"}[name])(x)


def _binary(name, a, b):
    if name == "div_safe":
        return a / (svod.abs(b) + 1.0)
    return {"add": svod.add, "sub": svod.subtract, "mul": svod.multiply, "max": svod.maximum}[name](a, b)


@st.composite
def programs(draw, max_ops: int = 8):
    """Returns (inputs: list[np.ndarray], build: callable(list[Tensor]) -> list[Tensor], description)."""
    rows = draw(st.integers(1, 5))
    cols = draw(st.integers(1, 6))
    n_inputs = draw(st.integers(1, 3))
    shapes = [draw(st.sampled_from([(rows, cols), (rows, cols), (cols,), (rows, 1)])) for _ in range(n_inputs)]
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    inputs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    steps = []
    for _ in range(draw(st.integers(1, max_ops))):
        kind = draw(st.sampled_from(["unary", "binary", "binary", "reduce_bcast", "reduce", "move", "matmul",
                                     "matmul_update", "pad", "concat", "diamond"]))
        steps.append((kind, draw(st.integers(0, 10**6))))
    n_out = draw(st.integers(1, 2))

    def build(ts):
        vals = [svod.broadcast_to(t, (rows, cols)) if t.shape != (rows, cols) else t for t in ts]
        for kind, r in steps:
            a = vals[r % len(vals)]
            b = vals[(r // 7) % len(vals)]
            if kind == "unary":
                v = _unary(UNARY[r % len(UNARY)], a)
            elif kind == "binary":
                v = _binary(BINARY[r % len(BINARY)], a, b)
            elif kind == "reduce_bcast":
                op = ["sum", "max", "mean"][r % 3]
                axis = (r // 3) % 2
                v = a - getattr(svod, op)(a, axis=axis, keepdims=True)
            elif kind == "reduce":
                op = ["sum", "max", "min"][r % 3]
                red = getattr(svod, op)(a, axis=(r // 3) % 2, keepdims=True)
                v = svod.broadcast_to(red, (rows, cols)) * 1.0
            elif kind == "move":
                v = svod.flip(a, axis=r % 2) if r % 3 else svod.reshape(svod.reshape(a, (-1,)), (rows, cols))
            elif kind == "matmul":
                w = svod.asarray(np.random.default_rng(r).standard_normal((cols, cols)).astype(np.float32))
                v = a @ w
            elif kind == "matmul_update":  # a[key] = (a @ w)[key] on a fresh tensor (the inputs stay as drawn)
                w = svod.asarray(np.random.default_rng(r).standard_normal((cols, cols)).astype(np.float32))
                v = a * 1.0
                lo = (r // 5) % cols
                key = [slice(None), (slice(None), slice(lo, cols)), (slice(lo % rows, rows),), (lo % rows,),
                       (slice(None), slice(None, None, 2))][r % 5]
                v[key] = (v @ w)[key]
            elif kind == "pad":
                v = svod.pad(a, ((1, 0), (0, 1)), constant_values=float(r % 3))[1:, :-1]
            elif kind == "concat":
                v = svod.concat([a[:, : cols // 2], b[:, cols // 2:]], axis=1)
            else:  # diamond: one producer, two consumers joined again
                p = svod.tanh(a)
                v = p * 2.0 + svod.exp(svod.clip(p, -5, 5))
            vals.append(v)
        return vals[-n_out:]

    return inputs, build, f"shapes={shapes} steps={steps} n_out={n_out}"


# ----------------------------------------------------------------------------- algebra programs
#
# Programs of the shapes issue 30's rewrites act on, written once against an array module
# `xp` (svod or numpy) so the same source gives svod's result and numpy's reference:
# broadcast-multiply-reduce contractions, matmul chains of mixed sizes, sibling
# projections of one input, distributivity, transposed products, reductions of scaled,
# shifted and broadcast values, sums of sums, means, transposed elementwise chains and
# attention. Non-finite inputs: NaN may be placed in any input (its positions in the
# result do not depend on association); ±inf only in motifs where every rewrite issue 30
# names keeps numpy's inf/NaN (not matmul chains: `(A @ B) @ v` and `A @ (B @ v)` can
# give NaN and inf from one inf in A; numpy gives the first).

MOTIFS = ["contract_rows", "contract_mid", "contract_batched", "contract_T", "contract_2axes", "contract_gemv",
          "contract_heads", "row_dots", "chain_vec", "chain_mat",
          "siblings", "distribute", "matmul_T", "scaled_sum", "bcast_sum", "shifted_max", "sum_of_sums",
          "mean", "transposed_chain", "reshape_chain", "permute_compose", "attention", "einsum"]
CHAINS = {"chain_vec", "chain_mat", "attention", "siblings", "matmul_T", "contract_rows", "contract_mid",
          "contract_batched", "contract_T", "contract_2axes", "contract_gemv", "contract_heads", "row_dots",
          "distribute", "einsum"}  # products of sums: no inf in their inputs


def _softmax(xp, s):
    e = xp.exp(s - xp.max(s, axis=-1, keepdims=True))
    return e / xp.sum(e, axis=-1, keepdims=True)


def _motif(xp, name, ins, r):
    """The motif `name` over its inputs `ins` (arrays of `xp`), returning a list of results;
    `r` (an int) picks variants."""
    if name == "contract_rows":  # (x[:, None, :] * w[None]).sum(-1): x @ w.T
        x, w = ins
        return [xp.sum(x[:, None, :] * w[None], axis=-1)]
    if name == "contract_mid":  # (x[:, :, None] * w[None]).sum(1): x @ w
        x, w = ins
        return [xp.sum(x[:, :, None] * w[None], axis=1)]
    if name == "contract_batched":  # batched: (b, m, k) x (b, n, k) -> (b, m, n)
        x, w = ins
        return [xp.sum(x[:, :, None, :] * w[:, None, :, :], axis=-1)]
    if name == "contract_T":  # transposed operands: (x.T[:, :, None] * w.T[None]).sum(1): x.T @ w.T
        x, w = ins
        xt, wt = xp.matrix_transpose(x), xp.matrix_transpose(w)
        return [xp.sum(xt[:, :, None] * wt[None], axis=1)]
    if name == "contract_2axes":  # two summed axes: (a[:, :, :, None] * b[None]).sum((1, 2)): 'ijk,jkl->il'
        a, b = ins
        return [xp.sum(a[:, :, :, None] * b[None], axis=(1, 2), keepdims=bool(r % 2))]
    if name == "contract_gemv":  # (A * v).sum(-1) and (A * u[:, None]).sum(0): matrix-vector products
        a, v, u = ins
        return [xp.sum(a * v, axis=-1), xp.sum(a * u[:, None], axis=0)]
    if name == "contract_heads":  # 4-D batched, heads: (q[:, :, :, None, :] * k[:, :, None, :, :]).sum(-1)
        q, k = ins
        return [xp.sum(q[:, :, :, None, :] * k[:, :, None, :, :], axis=-1) * 0.5]
    if name == "row_dots":  # (a * b).sum(-1)
        a, b = ins
        return [xp.sum(a * b, axis=-1, keepdims=bool(r % 2))]
    if name == "chain_vec":  # (A @ B) @ v, left to right as written
        a, b, v = ins
        return [(a @ b) @ v]
    if name == "chain_mat":  # (A @ B) @ C, mixed sizes
        a, b, c = ins
        return [(a @ b) @ c] if r % 2 else [a @ (b @ c)]
    if name == "siblings":  # x @ Wq, x @ Wk, x @ Wv (+ a bias on one, as a projection has)
        x, wq, wk, wv = ins
        q, k, v = x @ wq, x @ wk, x @ wv
        return [q, xp.tanh(k), v + 0.5] if r % 2 else [q, k, v]
    if name == "distribute":  # A @ B + A @ C, A @ B - A @ C
        a, b, c = ins
        return [a @ b + a @ c] if r % 2 else [a @ b - a @ c]
    if name == "matmul_T":  # (A @ B).T and B.T @ A.T, then an elementwise consumer
        a, b = ins
        return [xp.matrix_transpose(a @ b) * 2.0] if r % 2 else [xp.matrix_transpose(b) @ xp.matrix_transpose(a)]
    if name == "scaled_sum":  # sum(c * x) over an axis, all axes
        (x,) = ins
        c = [3.0, -0.5, 2.0][r % 3]
        return [xp.sum(c * x, axis=r % 2), xp.sum(x * c)]
    if name == "bcast_sum":  # sum(broadcast(v)) over the broadcast axis
        (v,) = ins
        n = 3 + r % 4
        return [xp.sum(xp.broadcast_to(v, (n,) + v.shape), axis=0), xp.sum(xp.broadcast_to(v[:, None], v.shape + (n,)))]
    if name == "shifted_max":  # max(x + c), min(x - c)
        (x,) = ins
        c = [1.5, -2.0, 0.25][r % 3]
        return [xp.max(x + c, axis=-1), xp.min(x - c, axis=0, keepdims=True)]
    if name == "sum_of_sums":  # sum(a) ± sum(b) over the same axes
        a, b = ins
        ax = r % 2
        return [xp.sum(a, axis=ax) + xp.sum(b, axis=ax)] if r % 3 else [xp.sum(a, axis=ax) - xp.sum(b, axis=ax)]
    if name == "mean":  # a sum divided by its count
        (x,) = ins
        ax = r % 2
        return [xp.sum(x, axis=ax) / x.shape[ax], xp.sum(x * 2.0, axis=ax, keepdims=True) / x.shape[ax]]
    if name == "transposed_chain":  # transpose(a) + transpose(b), through elementwise ops, transposed back
        a, b = ins
        t = xp.matrix_transpose(a) + xp.matrix_transpose(b)
        t = xp.tanh(t) * 2.0
        return [xp.matrix_transpose(t)] if r % 2 else [xp.matrix_transpose(xp.matrix_transpose(t)) - 1.0]
    if name == "reshape_chain":  # reshape round trip around elementwise work
        (x,) = ins
        flat = xp.reshape(x, (-1,))
        return [xp.reshape(xp.exp(xp.clip(flat, -5.0, 5.0)) * 0.5, x.shape) + x]
    if name == "permute_compose":  # two permutes (composed into one, or cancelled) around a pointwise op
        (x,) = ins
        p, q = [((1, 0, 2), (0, 2, 1)), ((2, 0, 1), (2, 0, 1)), ((1, 2, 0), (2, 0, 1))][r % 3]
        return [xp.permute_dims(xp.tanh(xp.permute_dims(x, p)), q) + 1.0]
    if name == "attention":  # softmax(q @ k.T * scale [+ bias]) @ v
        q, k, v = ins
        s = (q @ xp.matrix_transpose(k)) * (1.0 / math.sqrt(q.shape[-1]))
        if r % 2:
            s = s + 0.5 * xp.tanh(s)  # an elementwise prologue before the softmax
        return [_softmax(xp, s) @ v]
    if name == "einsum":  # xp.einsum: a three-operand chain (explicit, implicit), a transposed contraction
        a, b, v = ins
        sub = ["ij,jk,k->i", "ij,jk->ki", "ij,jk,k"][r % 3]
        return [xp.einsum(sub, a, b, v) if sub.count(",") == 2 else xp.einsum(sub, a, b)]
    raise ValueError(name)


def _motif_shapes(name, d):
    """Input shapes of motif `name` with sizes `d` (m, k, n, b, p)."""
    m, k, n, b, p = d
    return {"contract_rows": [(m, k), (n, k)], "contract_mid": [(m, k), (k, n)],
            "contract_batched": [(b, m, k), (b, n, k)], "contract_T": [(k, m), (n, k)],
            "contract_2axes": [(m, b, k), (b, k, n)], "contract_gemv": [(m, k), (k,), (m,)],
            "contract_heads": [(b, p, m, k), (b, p, n, k)], "row_dots": [(m, k), (m, k)],
            "chain_vec": [(m, k), (k, n), (n,)], "chain_mat": [(m, k), (k, n), (n, p)],
            "siblings": [(m, k), (k, n), (k, p), (k, n)], "distribute": [(m, k), (k, n), (k, n)],
            "matmul_T": [(m, k), (k, n)], "scaled_sum": [(m, k)], "bcast_sum": [(k,)], "shifted_max": [(m, k)],
            "sum_of_sums": [(m, k), (m, k)], "mean": [(m, k)], "transposed_chain": [(m, k), (m, k)],
            "reshape_chain": [(m, k)], "permute_compose": [(b, m, k)], "attention": [(b, m, k), (b, n, k), (b, n, p)],
            "einsum": [(m, k), (k, n), (n,)]}[name]


@st.composite
def algebra_programs(draw, max_motifs: int = 3, nonfinite: bool = True):
    """Returns (inputs: list[np.ndarray float32], build: callable(list[array], xp=svod,
    trace=None) -> list[array], description). `build` runs the drawn motifs (1 to
    `max_motifs`) over `xp`'s arrays; with `trace` (a list) every intermediate result is
    appended to it (the differential test's error scale). A later motif may take an
    earlier one's 2-D result as its first input (`x @ W` then a reduction of it ...)."""
    names = draw(st.lists(st.sampled_from(MOTIFS), min_size=1, max_size=max_motifs))
    dims = (draw(st.integers(1, 7)), draw(st.integers(1, 9)), draw(st.integers(1, 7)), draw(st.integers(1, 3)),
            draw(st.integers(1, 5)))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    inputs, plan = [], []
    for name in names:
        shapes = _motif_shapes(name, dims)
        chain_from = None
        if plan and len(shapes[0]) == 2 and draw(st.integers(0, 2)) == 0:
            chain_from = len(plan) - 1  # the previous motif's first result, if 2-D of this shape
        idx = []
        for s in shapes:
            a = rng.standard_normal(s).astype(np.float32)
            if nonfinite and a.size and draw(st.integers(0, 7)) == 0:
                a.flat[draw(st.integers(0, a.size - 1))] = np.nan
            if nonfinite and name not in CHAINS and a.size and draw(st.integers(0, 7)) == 0:
                a.flat[draw(st.integers(0, a.size - 1))] = draw(st.sampled_from([np.inf, -np.inf]))
            idx.append(len(inputs))
            inputs.append(a)
        plan.append((name, idx, shapes, chain_from, draw(st.integers(0, 10**6))))
    n_out = draw(st.integers(1, 3))

    def build(ts, xp=svod, trace=None):
        results, outs = [], []
        for name, idx, shapes, chain_from, r in plan:
            ins = [ts[i] for i in idx]
            if chain_from is not None:
                prev = results[chain_from][0]
                if tuple(prev.shape) == tuple(shapes[0]) and name not in CHAINS:
                    ins[0] = prev  # chaining into a chain motif could put inf into a product of sums
            res = _motif(xp, name, ins, r)
            results.append(res)
            outs.extend(res)
            if trace is not None:
                trace.extend(res)
        return outs[-n_out:]

    return inputs, build, f"motifs={names} dims={dims} n_out={n_out}"


# ----------------------------------------------------------------------------- movement programs
#
# Chains of permutes, reshapes and broadcasts around pointwise ops, applied alike to two
# values of one shape (so `T(a) op T(b)` and `reshape(a) op reshape(b)` occur), with
# reductions: the programs the movement rule sets (search/algebra_movement.py) rewrite.

MOVE_STEPS = ["permute", "reshape", "reshape_back", "unary", "binary", "bcast", "reduce"]


@st.composite
def movement_programs(draw, max_steps: int = 6, reductions: bool = True):
    """Returns (inputs: two float32 arrays of one shape with NaN, ±inf and -0.0 among
    them, build: callable(list[Tensor], xp=svod) -> list[Tensor], description); `build`
    also runs on numpy arrays (xp=np) for the reference."""
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(1, 4)) for _ in range(rank))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    inputs = []
    for _ in range(2):
        a = (rng.standard_normal(shape) * 4).astype(np.float32)
        for v in (np.nan, np.inf, -np.inf, -0.0):
            if a.size and draw(st.integers(0, 3)) == 0:
                a.flat[draw(st.integers(0, a.size - 1))] = v
        inputs.append(a)
    kinds = MOVE_STEPS if reductions else MOVE_STEPS[:-1]
    n_steps = draw(st.integers(1, max_steps))
    steps = [(draw(st.sampled_from(kinds)), draw(st.integers(0, 10**6))) for _ in range(n_steps)]
    n_out = draw(st.integers(1, 2))

    def build(ts, xp=svod):
        a, b = ts
        for kind, r in steps:
            s = tuple(a.shape)
            if kind == "permute" and len(s) > 1:
                perm = tuple(np.random.default_rng(r).permutation(len(s)).tolist())
                a, b = xp.permute_dims(a, perm), xp.permute_dims(b, perm)
            elif kind == "reshape":
                new = [(-1,), s[::-1], (1, *s), s + (1,)][r % 4]
                a, b = xp.reshape(a, new), xp.reshape(b, new)
            elif kind == "reshape_back" and math.prod(s) == math.prod(shape):
                a, b = xp.reshape(a, shape), xp.reshape(b, shape)
            elif kind == "unary":
                f = [xp.tanh, xp.negative, xp.abs, xp.sin, lambda v: xp.sqrt(xp.abs(v))][r % 5]
                a = f(a)
                if r % 2:
                    b = f(b)
            elif kind == "binary":
                f = [xp.add, xp.multiply, xp.maximum, xp.subtract][r % 4]
                a = f(a, b)
            elif kind == "bcast" and math.prod(s) <= 32:
                k = 1 + r % 3
                a, b = (xp.broadcast_to(xp.reshape(v, (1, *s)), (k, *s)) for v in (a, b))
            elif kind == "reduce" and len(s) > 0:
                f = [xp.sum, xp.max, xp.min][r % 3]
                a = f(a, axis=r % len(s), keepdims=bool(r % 2))
                b = f(b, axis=r % len(s), keepdims=bool(r % 2))
        return [a, b][:n_out]

    return inputs, build, f"shape={shape} steps={steps} n_out={n_out}"
