"""A named generator of small random tensor programs (hypothesis strategy).

`programs()` draws programs of up to ~8 ops mixing elementwise chains, diamonds (a
value used twice), broadcasts, keepdims reductions (reduce-then-broadcast), movement
ops, concat, pad, matmul and in-place slice updates of matmul results (``v[key] = (v @ w)[key]``,
whose fused epilogue reads the matmul's own operand) — not only chains. Used by the greedy planner tests and the
search's optimality tests.
"""

from __future__ import annotations

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
