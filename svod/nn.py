"""Neural-network building blocks composed from svod ops (so the fusion search sees them).

>>> import svod
>>> svod.nn.softmax(svod.asarray([0.0, 0.0])).tolist()
[0.5, 0.5]
"""

from __future__ import annotations

import builtins
import math

from svod import _ddgraph, dtype
from svod import elementwise as E
from svod import reductions as R
from svod import tensor as T
from svod.errors import ShapeError, SvodValueError
from svod.ir import shape_str


def relu(x):
    """max(x, 0); NaN propagates."""
    return E.maximum(x, 0)


def _float(x):
    x = T.asarray(x)
    return x if x.dtype.is_float else x.astype(dtype.default_float)


def sigmoid(x):
    """1 / (1 + exp(-x)), within 3 ulp everywhere: e = exp(-|x|) never overflows, and
    x < 0 gives e / (1 + e), so results down to the subnormals (x < -88 in float32) keep
    their digits instead of flushing to 0. Integers compute in the default float dtype."""
    x = _float(x)
    e = E.exp(E.negative(E.abs(x)))
    r = E.reciprocal(E.add(e, 1))
    return E.where(E.greater_equal(x, 0), r, E.multiply(e, r))


def silu(x):
    """x * sigmoid(x), within 4 ulp also where the result is subnormal (x < -87 in float32,
    x < -708 in float64: x times a subnormal sigmoid was 50 / 370 ulp off); silu(-inf) is
    -0.0 (the limit). float32 computes in float64, float64 scales the tail
    (svod/_ddgraph.py). Integers compute in float32 like gelu/softmax."""
    x = T.asarray(x)
    if not x.dtype.is_float:
        x = x.astype("float32")
    if x.dtype == dtype.float64:
        return _ddgraph.silu(x, exact=True)
    return _ddgraph.silu(x.astype(dtype.float64), exact=False).astype(x.dtype)


def gelu(x, approximate: str = "none"):
    """GELU: x * Phi(x) ("none", Phi the normal CDF: 0.5 * x * erfc(-x / sqrt(2))) or the
    GPT-2 form x * sigmoid(2u), u = sqrt(2/pi) * (x + 0.044715 x^3) ("tanh", which is
    0.5 * x * (1 + tanh(u))). Within 4 ulp of the exact function everywhere, both dtypes:
    neither form adds 1 to a value near -1 (1 + erf and 1 + tanh cancel for x < 0: the
    result came out -0.0 for x < -6 in float32), subnormal results keep their digits, and
    gelu(-inf) is -0.0 (the limit; the formula gave NaN), gelu(-0.0) = -0.0.

    float32 computes in float64 (rounded once at the end: the argument of erfc or of the
    sigmoid is exact enough there); float64 carries that argument as a double-double
    (Dekker products, svod/_ddgraph.py) and corrects for its low part, and scales the
    far tail so results near the underflow threshold round once. Integers compute in
    float32. Measured errors: docs/codegen.md, 'Accuracy of the math ops'."""
    x = T.asarray(x)
    if not x.dtype.is_float:
        x = x.astype("float32")
    if not isinstance(approximate, str) or approximate not in ("tanh", "none"):
        raise SvodValueError(f"gelu: approximate must be 'none' or 'tanh', got {T._show(approximate)}")
    f = _ddgraph.gelu_tanh if approximate == "tanh" else _ddgraph.gelu_erf
    if x.dtype == dtype.float64:
        return f(x, exact=True)
    return f(x.astype(dtype.float64), exact=False).astype(x.dtype)


def softmax(x, axis: int = -1):
    """exp(x - max) / sum(exp(x - max)) along `axis` (one row-wise kernel once fused)."""
    x = T.asarray(x)
    if not x.dtype.is_float:
        x = x.astype("float32")
    m = R.max(x, axis=axis, keepdims=True)
    e = E.exp(E.subtract(x, m))
    return E.divide(e, R.sum(e, axis=axis, keepdims=True))


def log_softmax(x, axis: int = -1):
    """x - max - log(sum(exp(x - max))) along `axis`, accurate to a few ulp also where one
    entry dominates: there log(sum) is log(1 + t) with t tiny, and rounding 1 + t would
    lose t (the max entry's result, -t, came out 0). So the sum leaves the max entries
    out: log1p(sum of the others + (number of max entries - 1)). Each term is exp(s) with
    s = x - max rounded; its rounding error ``lo`` (TwoSum, exact) goes back in as
    exp(s) * (1 + lo), else a term 40 below the max would carry 20 ulp into the max's result."""
    x = T.asarray(x)
    if not x.dtype.is_float:
        x = x.astype("float32")
    m = R.max(x, axis=axis, keepdims=True)
    s = E.subtract(x, m)
    bb = E.subtract(s, x)
    lo = E.subtract(E.subtract(x, E.subtract(s, bb)), E.add(m, bb))  # x - m - s exactly
    lo = E.where(E.isnan(lo), 0, lo)  # -inf entries: exp(s) = 0 whatever lo is
    e = E.exp(s)
    top = E.equal(s, 0)  # the max entries (NaN rows: none; the sums are NaN then)
    rest = R.sum(E.where(top, 0, E.add(e, E.multiply(e, lo))), axis=axis, keepdims=True)
    ties = R.sum(top.astype(x.dtype), axis=axis, keepdims=True)
    return E.subtract(s, E.log1p(E.add(rest, E.subtract(ties, 1))))


def _norm_axes(x, normalized_shape, op):
    normalized_shape = T._check_shape(normalized_shape, op)
    k = len(normalized_shape)
    if k > x.ndim or tuple(x.shape[x.ndim - k:]) != normalized_shape:
        raise ShapeError(f"{op}: normalized_shape {shape_str(normalized_shape)} does not match the trailing "
                         f"dimensions of input shape {shape_str(x.shape)}")
    return tuple(range(x.ndim - k, x.ndim))


def layer_norm(x, normalized_shape, weight=None, bias=None, eps: float = 1e-5):
    """(x - mean) / sqrt(var + eps) * weight + bias over the trailing `normalized_shape`."""
    x = T.asarray(x)
    axes = _norm_axes(x, normalized_shape, "layer_norm")
    m = R.mean(x, axis=axes, keepdims=True)
    d = E.subtract(x, m)
    v = R.mean(E.multiply(d, d), axis=axes, keepdims=True)
    y = E.multiply(d, E.reciprocal(E.sqrt(E.add(v, eps))))
    if weight is not None:
        y = E.multiply(y, weight)
    if bias is not None:
        y = E.add(y, bias)
    return y


def rms_norm(x, normalized_shape, weight=None, eps: float = 1e-6):
    x = T.asarray(x)
    axes = _norm_axes(x, normalized_shape, "rms_norm")
    ms = R.mean(E.multiply(x, x), axis=axes, keepdims=True)
    y = E.multiply(x, E.reciprocal(E.sqrt(E.add(ms, eps))))
    if weight is not None:
        y = E.multiply(y, weight)
    return y


def linear(x, weight, bias=None):
    """x @ weight.T + bias, with weight of shape (out_features, in_features) as in torch."""
    x, weight = T.asarray(x), T.asarray(weight)
    if x.ndim == 0 or weight.ndim == 0 or x.shape[-1] != weight.shape[-1]:
        raise ShapeError(f"linear: input of shape {shape_str(x.shape)} needs weight of shape (out_features, "
                         f"{x.shape[-1] if x.ndim else 'in_features'}), got {shape_str(weight.shape)}")
    y = R.matmul(x, weight.mT if weight.ndim >= 2 else weight)
    return y if bias is None else E.add(y, bias)


def scaled_dot_product_attention(q, k, v, attn_mask=None, is_causal: bool = False, scale: float | None = None):
    """softmax(q @ kᵀ * scale + mask) @ v over the last two dims (batch/head dims broadcast)."""
    q, k, v = T.asarray(q), T.asarray(k), T.asarray(v)
    if builtins.min(q.ndim, k.ndim, v.ndim) < 2:
        raise ShapeError(f"scaled_dot_product_attention: q, k and v need at least 2 dimensions, got shapes "
                         f"{shape_str(q.shape)}, {shape_str(k.shape)}, {shape_str(v.shape)}")
    if q.shape[-1] != k.shape[-1]:
        raise ShapeError(f"scaled_dot_product_attention: q {shape_str(q.shape)} and k {shape_str(k.shape)} "
                         f"differ in the last dimension")
    if k.shape[-2] != v.shape[-2]:
        raise ShapeError(f"scaled_dot_product_attention: k {shape_str(k.shape)} and v {shape_str(v.shape)} "
                         f"differ in the sequence dimension (second to last)")
    s = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = E.multiply(R.matmul(q, k.mT), s)
    L, S = q.shape[-2], k.shape[-2]
    if is_causal:
        import numpy as np

        keep = T.asarray(np.tril(np.ones((L, S), dtype=bool)))
        scores = E.where(keep, scores, float("-inf"))
    if attn_mask is not None:
        attn_mask = T.asarray(attn_mask)
        scores = E.where(attn_mask, scores, float("-inf")) if attn_mask.dtype.is_bool else E.add(scores, attn_mask)
    return R.matmul(softmax(scores, axis=-1), v)
