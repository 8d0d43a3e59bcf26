"""Named workloads: the programs tests, `svod tune`, `svod bench` and notebooks share.

Each `Workload` says which inputs it takes (`default_shapes` for measuring, `small_shapes`
for tests and notebooks), makes seeded inputs, builds the lazy svod graph from Tensors,
and carries a plain numpy implementation (`reference`) to check results and to time
numpy against. W1–W7 are the measured workloads of DESIGN "Workloads and measuring";
the model blocks and the smaller programs after them feed the fusion-search corpus.

>>> import numpy as np
>>> from svod import workloads
>>> "w2_softmax" in workloads.names()
True
>>> w = workloads.get("w2_softmax")
>>> arrays = w.make_inputs(w.small_shapes, seed=0)
>>> got = workloads.run("w2_softmax", small=True)
>>> bool(np.allclose(got, w.reference(**arrays), rtol=w.rtol, atol=w.atol))
True
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

import svod as T  # the Array API functions (T.exp, T.sum, ...)
from svod import nn
from svod.tensor import Tensor

Shapes = dict[str, tuple[int, ...]]
Arrays = dict[str, np.ndarray]


@dataclass(frozen=True)
class Workload:
    """One named program: inputs by name, a lazy svod build and a numpy reference.

    `make_inputs(shapes, seed)` returns float32 arrays keyed like `shapes`;
    `build(**tensors)` returns lazy Tensor(s); `reference(**arrays)` the same values with
    numpy (float32, as a numpy user would write it). `rtol`/`atol` are the tolerances a
    float32 result is checked with against the reference.
    """

    name: str
    description: str
    default_shapes: Shapes
    small_shapes: Shapes
    build: Callable[..., Tensor | tuple[Tensor, ...]]
    reference: Callable[..., np.ndarray | tuple[np.ndarray, ...]]
    inputs: dict[str, str] = field(default_factory=dict)  # input name -> distribution (see _DRAW)
    rtol: float = 1e-5
    atol: float = 1e-5
    tags: tuple[str, ...] = ()

    def make_inputs(self, shapes: Shapes | None = None, seed: int = 0) -> Arrays:
        """Seeded float32 inputs for `shapes` (default: `default_shapes`)."""
        shapes = self.default_shapes if shapes is None else shapes
        missing = set(self.default_shapes) - set(shapes)
        if missing:
            raise ValueError(f"workload {self.name}: shapes lack inputs {sorted(missing)}")
        rng = np.random.default_rng(seed)
        out = {}
        for k in self.default_shapes:  # a fixed order: the same seed gives the same data
            out[k] = _DRAW[self.inputs.get(k, "normal")](rng, tuple(shapes[k])).astype(np.float32)
        return out

    def tensors(self, arrays: Arrays) -> dict[str, Tensor]:
        return {k: T.asarray(v) for k, v in arrays.items()}


def _scaled_normal(rng, shape):
    # weights: N(0, 1/fan_in), so activations stay O(1) through a matmul
    fan_in = shape[0] if len(shape) >= 2 else 1
    return rng.standard_normal(shape) / math.sqrt(fan_in)


_DRAW: dict[str, Callable[[np.random.Generator, tuple[int, ...]], np.ndarray]] = {
    "normal": lambda rng, s: rng.standard_normal(s),
    "uniform": lambda rng, s: rng.uniform(-1.0, 1.0, s),
    "positive": lambda rng, s: rng.uniform(0.5, 2.0, s),
    "weight": _scaled_normal,
    "small": lambda rng, s: 0.1 * rng.standard_normal(s),
}

WORKLOADS: dict[str, Workload] = {}


def register(w: Workload) -> Workload:
    if w.name in WORKLOADS:
        raise ValueError(f"workload {w.name!r} is already registered")
    if set(w.small_shapes) != set(w.default_shapes):
        raise ValueError(f"workload {w.name!r}: small_shapes and default_shapes name different inputs")
    WORKLOADS[w.name] = w
    return w


def get(name: str) -> Workload:
    """The workload called `name` (KeyError lists the known names)."""
    try:
        return WORKLOADS[name]
    except KeyError:
        raise KeyError(f"unknown workload {name!r}; known: {', '.join(names())}") from None


def names() -> list[str]:
    return list(WORKLOADS)


def run(name: str, shapes: Shapes | None = None, small: bool = False, seed: int = 0):
    """Make inputs, build, realize all outputs in one plan, return numpy output(s)."""
    w = get(name)
    if shapes is None:
        shapes = w.small_shapes if small else w.default_shapes
    arrays = w.make_inputs(shapes, seed)
    out = w.build(**w.tensors(arrays))
    outs = out if isinstance(out, tuple) else (out,)
    T.realize(*outs)
    res = tuple(o.numpy() for o in outs)
    return res if isinstance(out, tuple) else res[0]


# ----------------------------------------------------------------------------- numpy helpers

_F32 = np.float32


def _np_erf(x: np.ndarray) -> np.ndarray:
    try:
        from scipy.special import erf  # optional: numpy has no erf

        return erf(x)
    except ImportError:  # pragma: no cover - scipy is not a dependency
        return np.vectorize(math.erf, otypes=[np.float64])(x).astype(x.dtype)


def _np_softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _np_log_softmax(x, axis=-1):
    s = x - x.max(axis=axis, keepdims=True)
    return s - np.log(np.exp(s).sum(axis=axis, keepdims=True))


def _np_layer_norm(x, w=None, b=None, eps=1e-5):
    m = x.mean(axis=-1, keepdims=True)
    d = x - m
    y = d / np.sqrt((d * d).mean(axis=-1, keepdims=True) + _F32(eps))
    if w is not None:
        y = y * w
    if b is not None:
        y = y + b
    return y


def _np_gelu_tanh(x):
    c = _F32(math.sqrt(2.0 / math.pi))
    return _F32(0.5) * x * (_F32(1) + np.tanh(c * (x + _F32(0.044715) * x * x * x)))


def _np_gelu_erf(x):
    return _F32(0.5) * x * (_F32(1) + _np_erf(x * _F32(1 / math.sqrt(2.0))).astype(x.dtype))


# ----------------------------------------------------------------------------- W1–W7


def _w1(a, b, c):
    return nn.relu(a * b + c) * 0.5 - a / (1 + T.exp(-b))


def _w1_ref(a, b, c):
    return np.maximum(a * b + c, _F32(0)) * _F32(0.5) - a / (_F32(1) + np.exp(-b))


register(Workload(
    "w1_elementwise", "W1: relu(a*b+c)*0.5 - a/(1+exp(-b)) over 16M float32 (memory-bound elementwise)",
    {"a": (16 * 1024 * 1024,), "b": (16 * 1024 * 1024,), "c": (16 * 1024 * 1024,)},
    {"a": (4099,), "b": (4099,), "c": (4099,)},
    _w1, _w1_ref, tags=("elementwise",)))


register(Workload(
    "w2_softmax", "W2: softmax over the last axis of 4096x4096 (row-wise reduce-then-broadcast)",
    {"x": (4096, 4096)}, {"x": (37, 129)},
    lambda x: nn.softmax(x, axis=-1), lambda x: _np_softmax(x, -1), rtol=1e-5, atol=1e-6, tags=("rowwise",)))


register(Workload(
    "w3_layernorm", "W3: layer norm of 8192x1024 with weight and bias (mean, variance, normalise)",
    {"x": (8192, 1024), "weight": (1024,), "bias": (1024,)}, {"x": (33, 64), "weight": (64,), "bias": (64,)},
    lambda x, weight, bias: nn.layer_norm(x, x.shape[-1:], weight, bias),
    lambda x, weight, bias: _np_layer_norm(x, weight, bias),
    inputs={"weight": "positive", "bias": "small"}, rtol=1e-4, atol=1e-4, tags=("rowwise",)))


def _w4(x, w1, b1, w2, b2):
    return nn.gelu(x @ w1 + b1, approximate="tanh") @ w2 + b2


register(Workload(
    "w4_mlp", "W4: MLP block gelu_tanh(x@W1+b1)@W2+b2, x 512x1024, W1 1024x4096, W2 4096x1024",
    {"x": (512, 1024), "w1": (1024, 4096), "b1": (4096,), "w2": (4096, 1024), "b2": (1024,)},
    {"x": (8, 32), "w1": (32, 64), "b1": (64,), "w2": (64, 16), "b2": (16,)},
    _w4, lambda x, w1, b1, w2, b2: _np_gelu_tanh(x @ w1 + b1) @ w2 + b2,
    inputs={"w1": "weight", "w2": "weight", "b1": "small", "b2": "small"}, rtol=1e-4, atol=1e-4,
    tags=("matmul",)))


def _w5_ref(q, k, v):
    s = (q @ np.swapaxes(k, -1, -2)) * _F32(1 / math.sqrt(q.shape[-1]))
    return _np_softmax(s, -1) @ v


register(Workload(
    "w5_attention", "W5: attention softmax(q@kT/sqrt(d))@v, 8 heads, sequence 1024, head dim 64",
    {"q": (8, 1024, 64), "k": (8, 1024, 64), "v": (8, 1024, 64)},
    {"q": (2, 16, 8), "k": (2, 16, 8), "v": (2, 16, 8)},
    lambda q, k, v: nn.scaled_dot_product_attention(q, k, v), _w5_ref, rtol=1e-4, atol=1e-5,
    tags=("matmul", "rowwise")))


def _w6(x):
    return (T.sum(x, axis=0), T.sum(x, axis=1), T.sum(x), T.max(x, axis=0), T.max(x, axis=1), T.max(x))


def _w6_ref(x):
    return (x.sum(axis=0), x.sum(axis=1), x.sum(), x.max(axis=0), x.max(axis=1), x.max())


register(Workload(
    "w6_reductions", "W6: sum and max over axis 0, axis 1 and all of 4096x4096 (six outputs, sibling fusion)",
    {"x": (4096, 4096)}, {"x": (37, 53)}, _w6, _w6_ref, rtol=1e-5, atol=1e-3, tags=("reduction", "multi-output")))


def _w7(x):
    y = x * 1.5
    y = y + 0.25
    y = T.tanh(y)
    y = y * x
    y = y - 0.5
    y = T.abs(y)
    y = T.sqrt(y)
    y = -y
    y = T.exp(y)
    return T.maximum(y, 0.1)


def _w7_ref(x):
    y = np.sqrt(np.abs(np.tanh(x * _F32(1.5) + _F32(0.25)) * x - _F32(0.5)))
    return np.maximum(np.exp(-y), _F32(0.1))


register(Workload(
    "w7_small_chain", "W7: a 10-op elementwise chain on 1,000 float32 elements (dispatch overhead)",
    {"x": (1000,)}, {"x": (1000,)}, _w7, _w7_ref, rtol=1e-5, atol=1e-6, tags=("elementwise", "small")))


# ----------------------------------------------------------------------------- model blocks


register(Workload(
    "gelu", "model block: exact (erf) GELU over 2048x4096",
    {"x": (2048, 4096)}, {"x": (17, 65)},
    lambda x: nn.gelu(x), _np_gelu_erf, rtol=1e-5, atol=1e-6, tags=("elementwise", "model")))


def _residual(x, weight, bias, w, b):
    return x + nn.gelu(nn.layer_norm(x, x.shape[-1:], weight, bias) @ w + b, approximate="tanh")


def _residual_ref(x, weight, bias, w, b):
    return x + _np_gelu_tanh(_np_layer_norm(x, weight, bias) @ w + b)


register(Workload(
    "residual", "model block: x + gelu_tanh(layernorm(x) @ W + b), x 2048x1024, W 1024x1024",
    {"x": (2048, 1024), "weight": (1024,), "bias": (1024,), "w": (1024, 1024), "b": (1024,)},
    {"x": (9, 32), "weight": (32,), "bias": (32,), "w": (32, 32), "b": (32,)},
    _residual, _residual_ref, inputs={"weight": "positive", "bias": "small", "w": "weight", "b": "small"},
    rtol=1e-4, atol=1e-4, tags=("matmul", "rowwise", "model")))


register(Workload(
    "rmsnorm", "model block: RMS norm of 8192x1024 with weight",
    {"x": (8192, 1024), "weight": (1024,)}, {"x": (33, 64), "weight": (64,)},
    lambda x, weight: nn.rms_norm(x, x.shape[-1:], weight),
    lambda x, weight: x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + _F32(1e-6)) * weight,
    inputs={"weight": "positive"}, rtol=1e-4, atol=1e-5, tags=("rowwise", "model")))


# ----------------------------------------------------------------------------- search corpus


register(Workload(
    "mean_var", "mean and variance over the last axis of 4096x1024 (two outputs sharing a pass)",
    {"x": (4096, 1024)}, {"x": (19, 70)},
    lambda x: (T.mean(x, axis=-1), T.var(x, axis=-1)),
    lambda x: (x.mean(axis=-1), x.var(axis=-1)), rtol=1e-4, atol=1e-5, tags=("reduction", "multi-output")))


register(Workload(
    "multi_axis_reduce", "sum over axes (0, 2) and max over axes (1, 2) of 64x128x256",
    {"x": (64, 128, 256)}, {"x": (5, 6, 7)},
    lambda x: (T.sum(x, axis=(0, 2)), T.max(x, axis=(1, 2)), T.mean(x, axis=(0, 1), keepdims=True)),
    lambda x: (x.sum(axis=(0, 2)), x.max(axis=(1, 2)), x.mean(axis=(0, 1), keepdims=True)),
    rtol=1e-5, atol=1e-4, tags=("reduction", "multi-output")))


register(Workload(
    "broadcast_bias", "broadcast patterns: (x + row_bias) * col_scale - col_bias over 4096x1024",
    {"x": (4096, 1024), "row_bias": (1024,), "col_scale": (4096, 1), "col_bias": (4096, 1)},
    {"x": (13, 24), "row_bias": (24,), "col_scale": (13, 1), "col_bias": (13, 1)},
    lambda x, row_bias, col_scale, col_bias: (x + row_bias) * col_scale - col_bias,
    lambda x, row_bias, col_scale, col_bias: (x + row_bias) * col_scale - col_bias,
    inputs={"col_scale": "positive"}, rtol=1e-6, atol=1e-6, tags=("elementwise", "broadcast")))


register(Workload(
    "softmax_axis0", "softmax over axis 0 of 4096x1024 (a column-wise reduce-then-broadcast)",
    {"x": (4096, 1024)}, {"x": (41, 17)},
    lambda x: nn.softmax(x, axis=0), lambda x: _np_softmax(x, 0), rtol=1e-5, atol=1e-6, tags=("rowwise",)))


register(Workload(
    "log_softmax", "log_softmax over the last axis of 2048x2048",
    {"x": (2048, 2048)}, {"x": (23, 45)},
    lambda x: nn.log_softmax(x, axis=-1), lambda x: _np_log_softmax(x, -1), rtol=1e-5, atol=1e-5,
    tags=("rowwise",)))


def _diamond(x, y):
    p = T.exp(-T.abs(x)) * y  # the shared producer: materialise once or recompute in both
    return T.sqrt(T.abs(p)) + T.tanh(p) * 2


register(Workload(
    "diamond", "diamond: a shared producer p = exp(-|x|)*y used by two branches that join again",
    {"x": (4096, 1024), "y": (4096, 1024)}, {"x": (31, 33), "y": (31, 33)},
    _diamond, lambda x, y: (lambda p: np.sqrt(np.abs(p)) + np.tanh(p) * _F32(2))(np.exp(-np.abs(x)) * y),
    rtol=1e-5, atol=1e-6, tags=("elementwise", "diamond")))


# ----------------------------------------------------------------------------- more of the search corpus


def _np_sigmoid(x):
    return _F32(1) / (_F32(1) + np.exp(-x))


register(Workload(
    "swiglu", "model block: SwiGLU silu(x@Wg) * (x@Wu) @ Wd, x 512x1024, Wg/Wu 1024x2816, Wd 2816x1024",
    {"x": (512, 1024), "wg": (1024, 2816), "wu": (1024, 2816), "wd": (2816, 1024)},
    {"x": (9, 16), "wg": (16, 24), "wu": (16, 24), "wd": (24, 16)},
    lambda x, wg, wu, wd: (nn.silu(x @ wg) * (x @ wu)) @ wd,
    lambda x, wg, wu, wd: ((lambda g: g * _np_sigmoid(g))(x @ wg) * (x @ wu)) @ wd,
    inputs={"wg": "weight", "wu": "weight", "wd": "weight"}, rtol=1e-4, atol=1e-4, tags=("matmul", "model")))

register(Workload(
    "linear_relu", "matmul + bias + relu (epilogue fusion against the BLAS step), 1024x1024 @ 1024x1024",
    {"x": (1024, 1024), "w": (1024, 1024), "b": (1024,)}, {"x": (7, 12), "w": (12, 10), "b": (10,)},
    lambda x, w, b: nn.relu(x @ w + b), lambda x, w, b: np.maximum(x @ w + b, _F32(0)),
    inputs={"w": "weight"}, rtol=1e-4, atol=1e-4, tags=("matmul",)))

register(Workload(
    "matmul_transposed", "x @ w.T * scale with a transposed operand read through a view, 1024x512 @ (768x512).T",
    {"x": (1024, 512), "w": (768, 512)}, {"x": (6, 8), "w": (5, 8)},
    lambda x, w: (x @ w.T) * 0.125, lambda x, w: (x @ w.T) * _F32(0.125),
    inputs={"w": "weight"}, rtol=1e-4, atol=1e-4, tags=("matmul", "movement")))

register(Workload(
    "batched_matmul_softmax", "batched scores softmax(a @ b) over 16 batches of 256x64 @ 64x256",
    {"a": (16, 256, 64), "b": (16, 64, 256)}, {"a": (3, 5, 4), "b": (3, 4, 6)},
    lambda a, b: nn.softmax(a @ b, axis=-1), lambda a, b: _np_softmax(a @ b, -1),
    inputs={"b": "small"}, rtol=1e-4, atol=1e-5, tags=("matmul", "rowwise")))

register(Workload(
    "sigmoid_gate", "elementwise gate x * sigmoid(y) + (1 - sigmoid(y)) * z over 4096x1024",
    {"x": (4096, 1024), "y": (4096, 1024), "z": (4096, 1024)},
    {"x": (11, 13), "y": (11, 13), "z": (11, 13)},
    lambda x, y, z: (lambda g: x * g + (1.0 - g) * z)(nn.sigmoid(y)),
    lambda x, y, z: (lambda g: x * g + (_F32(1) - g) * z)(_np_sigmoid(y)),
    rtol=1e-5, atol=1e-6, tags=("elementwise", "diamond")))

register(Workload(
    "l2_normalize", "rows divided by their L2 norm: x / sqrt(sum(x*x) + eps) over 8192x512",
    {"x": (8192, 512)}, {"x": (17, 29)},
    lambda x: x / T.sqrt(T.sum(x * x, axis=-1, keepdims=True) + 1e-12),
    lambda x: x / np.sqrt((x * x).sum(axis=-1, keepdims=True) + _F32(1e-12)),
    rtol=1e-5, atol=1e-6, tags=("rowwise",)))

register(Workload(
    "standardize_columns", "columns standardised: (x - mean_0) / std_0 over 4096x256 (axis-0 statistics)",
    {"x": (4096, 256)}, {"x": (23, 9)},
    lambda x: (x - T.mean(x, axis=0, keepdims=True)) / T.sqrt(T.var(x, axis=0, keepdims=True) + 1e-5),
    lambda x: (x - x.mean(axis=0, keepdims=True)) / np.sqrt(x.var(axis=0, keepdims=True) + _F32(1e-5)),
    rtol=1e-4, atol=1e-5, tags=("rowwise", "columns")))

register(Workload(
    "argmax_rows", "argmax and max of each row of 4096x1024 (sibling reductions)",
    {"x": (4096, 1024)}, {"x": (15, 21)},
    lambda x: (T.argmax(x, axis=1), T.max(x, axis=1)),
    lambda x: (np.argmax(x, axis=1), x.max(axis=1)), tags=("reduction", "multi-output")))

register(Workload(
    "logsumexp", "log(sum(exp(x - max))) + max per row of 4096x2048",
    {"x": (4096, 2048)}, {"x": (13, 37)},
    lambda x: (lambda m: T.log(T.sum(T.exp(x - m), axis=-1)) + T.squeeze(m, -1))(T.max(x, axis=-1, keepdims=True)),
    lambda x: (lambda m: np.log(np.exp(x - m).sum(axis=-1)) + m[..., 0])(x.max(axis=-1, keepdims=True)),
    rtol=1e-5, atol=1e-5, tags=("rowwise", "reduction")))

register(Workload(
    "cross_entropy", "mean softmax cross-entropy against one-hot targets over 2048x1000",
    {"x": (2048, 1000), "t": (2048, 1000)}, {"x": (9, 11), "t": (9, 11)},
    lambda x, t: -T.mean(T.sum(nn.log_softmax(x, axis=-1) * t, axis=-1)),
    lambda x, t: -(_np_log_softmax(x, -1) * t).sum(axis=-1).mean(),
    inputs={"t": "positive"}, rtol=1e-4, atol=1e-4, tags=("rowwise", "reduction")))

register(Workload(
    "padded_stencil", "3-point stencil with zero padding: x[i-1] + 2x[i] + x[i+1] along the rows of 4096x1024",
    {"x": (4096, 1024)}, {"x": (7, 19)},
    lambda x: (lambda p: p[:, :-2] + 2.0 * p[:, 1:-1] + p[:, 2:])(T.pad(x, ((0, 0), (1, 1)))),
    lambda x: (lambda p: p[:, :-2] + _F32(2) * p[:, 1:-1] + p[:, 2:])(np.pad(x, ((0, 0), (1, 1)))),
    rtol=1e-6, atol=1e-6, tags=("elementwise", "movement")))

register(Workload(
    "concat_norm", "concat([x, y], axis=1) then layer norm over 2048x(512+512)",
    {"x": (2048, 512), "y": (2048, 512)}, {"x": (5, 6), "y": (5, 7)},
    lambda x, y: nn.layer_norm(T.concat([x, y], axis=1), (x.shape[1] + y.shape[1],)),
    lambda x, y: _np_layer_norm(np.concatenate([x, y], axis=1)), rtol=1e-4, atol=1e-5,
    tags=("rowwise", "movement")))

register(Workload(
    "transpose_add", "x.T + y with a permuted read, then tanh, over 2048x2048",
    {"x": (2048, 2048), "y": (2048, 2048)}, {"x": (6, 9), "y": (9, 6)},
    lambda x, y: T.tanh(x.T + y), lambda x, y: np.tanh(x.T + y), rtol=1e-5, atol=1e-6,
    tags=("elementwise", "movement")))

register(Workload(
    "flip_center", "flip the rows, scale, and subtract the row mean over 4096x1024",
    {"x": (4096, 1024)}, {"x": (8, 14)},
    lambda x: (lambda f: f - T.mean(f, axis=1, keepdims=True))(T.flip(x, axis=1) * 3.0),
    lambda x: (lambda f: f - f.mean(axis=1, keepdims=True))(np.flip(x, axis=1) * _F32(3)),
    rtol=1e-5, atol=1e-5, tags=("rowwise", "movement")))

register(Workload(
    "residual_rmsnorm_mlp", "model block: x + relu(rmsnorm(x) @ W1) @ W2, x 1024x512, W1 512x1024, W2 1024x512",
    {"x": (1024, 512), "g": (512,), "w1": (512, 1024), "w2": (1024, 512)},
    {"x": (6, 8), "g": (8,), "w1": (8, 12), "w2": (12, 8)},
    lambda x, g, w1, w2: x + nn.relu(nn.rms_norm(x, x.shape[-1:], g) @ w1) @ w2,
    lambda x, g, w1, w2: x + np.maximum((x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + _F32(1e-6)) * g) @ w1,
                                        _F32(0)) @ w2,
    inputs={"g": "positive", "w1": "weight", "w2": "weight"}, rtol=1e-4, atol=1e-4, tags=("matmul", "model")))


__all__ = ["Workload", "WORKLOADS", "get", "names", "run", "register"]
