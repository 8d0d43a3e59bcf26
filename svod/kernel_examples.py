"""Golden Kernels, written by hand from the spec: softmax, layernorm, matmul+bias+gelu,
mean+var, and an elementwise chain over broadcast and permuted inputs.

Each `*_kernel` returns a Kernel over slots 0..k-1 (inputs) and k.. (outputs); each
`*_reference` computes the same with numpy. Tests check both, and compare `str()` with
the golden text in tests/golden/.

>>> k = mean_var_kernel(3, 5)
>>> [o.reduced for o in k.outputs], k.passes
([True, True], 2)
"""

from __future__ import annotations

import math

import numpy as np

from svod.dtype import float32
from svod.ir import Ops
from svod.kernel import ACC, LOAD, Kernel, KInput, KNode, KOutput, MatmulSpec
from svod.view import View, ViewChain

F = float32


def _c(shape) -> ViewChain:
    return ViewChain.of(tuple(shape))


def _bcast_row(n_rows: int, n_cols: int) -> ViewChain:
    """A (n_cols,) vector read as (n_rows, n_cols)."""
    return ViewChain((View.contiguous((1, n_cols)).expand((n_rows, n_cols)),))


def softmax_kernel(rows: int, cols: int) -> Kernel:
    n = [KNode(LOAD, F, (), 0),
         KNode(Ops.REDUCE, F, (0,), "max", 0),
         KNode(Ops.SUB, F, (0, 1)),
         KNode(Ops.EXP, F, (2,)),
         KNode(Ops.REDUCE, F, (3,), "sum", 1),
         KNode(Ops.DIV, F, (3, 4))]
    return Kernel("softmax", (rows, cols), (KInput(0, F, _c((rows, cols))),), tuple(n),
                  (KOutput(1, 5, F, (rows, cols), False, 2),), (1,))


def softmax_reference(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def layernorm_kernel(rows: int, cols: int, eps: float = 1e-5) -> Kernel:
    """Two passes for the statistics (mean, then squared deviations), one to normalise."""
    n = [KNode(LOAD, F, (), 0),                      # 0 x
         KNode(Ops.REDUCE, F, (0,), "sum", 0),       # 1 sum x
         KNode(Ops.CONST, F, (), float(cols)),       # 2 n
         KNode(Ops.DIV, F, (1, 2)),                  # 3 mean
         KNode(Ops.SUB, F, (0, 3)),                  # 4 d
         KNode(Ops.MUL, F, (4, 4)),                  # 5 d*d
         KNode(Ops.REDUCE, F, (5,), "sum", 1),       # 6 sum d*d
         KNode(Ops.DIV, F, (6, 2)),                  # 7 var
         KNode(Ops.CONST, F, (), eps),               # 8
         KNode(Ops.ADD, F, (7, 8)),                  # 9
         KNode(Ops.SQRT, F, (9,)),                   # 10
         KNode(Ops.DIV, F, (4, 10)),                 # 11 normalised
         KNode(LOAD, F, (), 1),                      # 12 weight
         KNode(Ops.MUL, F, (11, 12)),                # 13
         KNode(LOAD, F, (), 2),                      # 14 bias
         KNode(Ops.ADD, F, (13, 14))]                # 15
    ins = (KInput(0, F, _c((rows, cols))), KInput(1, F, _bcast_row(rows, cols)), KInput(2, F, _bcast_row(rows, cols)))
    return Kernel("layernorm", (rows, cols), ins, tuple(n), (KOutput(3, 15, F, (rows, cols), False, 2),), (1,))


def layernorm_reference(x, w, b, eps: float = 1e-5):
    m = x.mean(axis=1, keepdims=True)
    d = x - m
    v = (d * d).mean(axis=1, keepdims=True)
    return d / np.sqrt(v + np.float32(eps)) * w + b


def matmul_bias_gelu_kernel(m: int, k: int, n: int) -> Kernel:
    """Tiled matmul with the epilogue gelu(acc + bias) (tanh form) applied in registers."""
    c = math.sqrt(2 / math.pi)
    nodes = [KNode(ACC, F),                              # 0 a @ b
             KNode(LOAD, F, (), 2),                      # 1 bias
             KNode(Ops.ADD, F, (0, 1)),                  # 2 y
             KNode(Ops.MUL, F, (2, 2)),                  # 3 y^2
             KNode(Ops.MUL, F, (3, 2)),                  # 4 y^3
             KNode(Ops.CONST, F, (), 0.044715),          # 5
             KNode(Ops.MUL, F, (4, 5)),                  # 6
             KNode(Ops.ADD, F, (2, 6)),                  # 7
             KNode(Ops.CONST, F, (), c),                 # 8
             KNode(Ops.MUL, F, (7, 8)),                  # 9
             KNode(Ops.TANH, F, (9,)),                   # 10
             KNode(Ops.CONST, F, (), 1.0),               # 11
             KNode(Ops.ADD, F, (10, 11)),                # 12
             KNode(Ops.CONST, F, (), 0.5),               # 13
             KNode(Ops.MUL, F, (2, 13)),                 # 14
             KNode(Ops.MUL, F, (14, 12))]                # 15
    ins = (KInput(0, F, _c((m, k))), KInput(1, F, _c((k, n))), KInput(2, F, _bcast_row(m, n)))
    return Kernel("matmul_bias_gelu", (m, n), ins, tuple(nodes), (KOutput(3, 15, F, (m, n)),), (),
                  MatmulSpec(0, 1, m, n, k))


def matmul_bias_gelu_reference(a, b, bias):
    y = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32) + bias
    return 0.5 * y * (1 + np.tanh(np.float32(math.sqrt(2 / math.pi)) * (y + np.float32(0.044715) * y ** 3)))


def mean_var_kernel(rows: int, cols: int) -> Kernel:
    """Sibling outputs: mean (pass 0) and variance (two-pass, pass 1), one value per row."""
    n = [KNode(LOAD, F, (), 0),
         KNode(Ops.REDUCE, F, (0,), "sum", 0),
         KNode(Ops.CONST, F, (), float(cols)),
         KNode(Ops.DIV, F, (1, 2)),
         KNode(Ops.SUB, F, (0, 3)),
         KNode(Ops.MUL, F, (4, 4)),
         KNode(Ops.REDUCE, F, (5,), "sum", 1),
         KNode(Ops.DIV, F, (6, 2))]
    return Kernel("mean_var", (rows, cols), (KInput(0, F, _c((rows, cols))),), tuple(n),
                  (KOutput(1, 3, F, (rows,), True), KOutput(2, 7, F, (rows,), True)), (1,))


def mean_var_reference(x):
    return x.mean(axis=1), x.var(axis=1)


def elementwise_chain_kernel(rows: int, cols: int) -> Kernel:
    """relu(a * bᵀ + c) * 0.5 with b stored transposed (cols, rows) and c a row vector."""
    b_t = ViewChain((View.contiguous((cols, rows)).permute((1, 0)),))
    n = [KNode(LOAD, F, (), 0),
         KNode(LOAD, F, (), 1),
         KNode(Ops.MUL, F, (0, 1)),
         KNode(LOAD, F, (), 2),
         KNode(Ops.ADD, F, (2, 3)),
         KNode(Ops.CONST, F, (), 0.0),
         KNode(Ops.MAX, F, (4, 5)),
         KNode(Ops.CONST, F, (), 0.5),
         KNode(Ops.MUL, F, (6, 7))]
    ins = (KInput(0, F, _c((rows, cols))), KInput(1, F, b_t), KInput(2, F, _bcast_row(rows, cols)))
    return Kernel("elementwise_chain", (rows, cols), ins, tuple(n), (KOutput(3, 8, F, (rows, cols)),))


def elementwise_chain_reference(a, b_t, c):
    return np.maximum(a * b_t.T + c, np.float32(0)) * np.float32(0.5)


def examples(seed: int = 0, rows: int = 6, cols: int = 10):
    """(name, kernel, inputs, reference outputs) for every golden kernel."""
    rng = np.random.default_rng(seed)
    r = lambda *s: rng.standard_normal(s).astype(np.float32)
    x, w, b = r(rows, cols), r(cols), r(cols)
    a, bm, bias = r(rows, 7), r(7, cols), r(cols)
    bt, c = r(cols, rows), r(cols)
    return [
        ("softmax", softmax_kernel(rows, cols), [x], [softmax_reference(x)]),
        ("layernorm", layernorm_kernel(rows, cols), [x, w, b], [layernorm_reference(x, w, b)]),
        ("matmul_bias_gelu", matmul_bias_gelu_kernel(rows, 7, cols), [a, bm, bias],
         [matmul_bias_gelu_reference(a, bm, bias)]),
        ("mean_var", mean_var_kernel(rows, cols), [x], list(mean_var_reference(x))),
        ("elementwise_chain", elementwise_chain_kernel(rows, cols), [x, bt, c],
         [elementwise_chain_reference(x, bt, c)]),
    ]
