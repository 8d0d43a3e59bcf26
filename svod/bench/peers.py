"""Peer implementations of the measured workloads (the optional `bench` extra).

Each peer is a function `make(wname, arrays) -> callable` returning a zero-argument
callable that computes the workload's output(s) and waits for them (JAX dispatches
asynchronously, so `block_until_ready` belongs inside the timed call). A peer raises
`Skip` with a one-line reason when it has no version of a workload; any other exception
is caught by the harness and reported as "skipped: <error>", never crashing the run.

`available()` says, per peer, whether it can run at all here (import, and for tinygrad a
`clang` on PATH, which its CPU backend compiles with), with the reason when not.
"""

from __future__ import annotations

import importlib
import math
import shutil

import numpy as np


class Skip(Exception):
    """This peer has no version of this workload (a reason, not an error)."""


_SQ2PI = math.sqrt(2.0 / math.pi)


def _w1_np(a, b, c):
    return np.maximum(a * b + c, np.float32(0)) * np.float32(0.5) - a / (np.float32(1) + np.exp(-b))


# ----------------------------------------------------------------------------- numexpr


def _numexpr(wname, arr):
    import numexpr as ne

    if wname != "w1_elementwise":  # numexpr has no reductions over one axis worth comparing
        raise Skip("numexpr: elementwise W1 only")
    a, b, c = arr["a"], arr["b"], arr["c"]
    ex = "where(a*b+c > 0, a*b+c, 0) * 0.5 - a / (1 + exp(-b))"
    return lambda: ne.evaluate(ex, local_dict={"a": a, "b": b, "c": c})


# ----------------------------------------------------------------------------- numba

_NUMBA: dict = {}


def _numba_kernels():
    # compiled once per process: numba's njit is lazy, so building these costs nothing until called
    if _NUMBA:
        return _NUMBA
    import numba
    from numba import prange

    @numba.njit(parallel=True, fastmath=False)
    def w1(a, b, c):
        out = np.empty_like(a)
        for i in prange(a.size):
            t = a[i] * b[i] + c[i]
            out[i] = max(t, np.float32(0)) * np.float32(0.5) - a[i] / (np.float32(1) + np.exp(-b[i]))
        return out

    @numba.njit(parallel=True)
    def w2(x):
        out = np.empty_like(x)
        for r in prange(x.shape[0]):
            m = x[r].max()
            e = np.exp(x[r] - m)
            out[r] = e / e.sum()
        return out

    @numba.njit(parallel=True)
    def w3(x, w, b):
        out = np.empty_like(x)
        n = x.shape[1]
        for r in prange(x.shape[0]):
            m = x[r].sum() / n
            d = x[r] - m
            v = (d * d).sum() / n
            out[r] = d / np.sqrt(v + np.float32(1e-5)) * w + b
        return out

    @numba.njit(parallel=True)
    def w6(x):
        rs = np.empty(x.shape[0], x.dtype)
        rm = np.empty(x.shape[0], x.dtype)
        for r in prange(x.shape[0]):
            rs[r] = x[r].sum()
            rm[r] = x[r].max()
        cs = x[0].copy()
        cm = x[0].copy()
        for r in range(1, x.shape[0]):  # row-major sweep: contiguous, no temporaries
            for j in range(x.shape[1]):
                cs[j] += x[r, j]
                cm[j] = max(cm[j], x[r, j])
        return cs, rs, rs.sum(), cm, rm, rm.max()

    @numba.njit
    def w7(x):
        y = np.sqrt(np.abs(np.tanh(x * np.float32(1.5) + np.float32(0.25)) * x - np.float32(0.5)))
        return np.maximum(np.exp(-y), np.float32(0.1))

    _NUMBA.update(w1_elementwise=w1, w2_softmax=w2, w3_layernorm=w3, w6_reductions=w6, w7_small_chain=w7)
    return _NUMBA


def _numba(wname, arr):
    ks = _numba_kernels()
    if wname not in ks:
        raise Skip("numba: matmul workloads not written (BLAS-bound through np.dot)")
    f, args = ks[wname], list(arr.values())
    return lambda: f(*args)


# ----------------------------------------------------------------------------- JAX


def _jax_fns(jnp, jax):
    return {
        "w1_elementwise": lambda a, b, c: jnp.maximum(a * b + c, 0) * 0.5 - a / (1 + jnp.exp(-b)),
        "w2_softmax": lambda x: jax.nn.softmax(x, axis=-1),
        "w3_layernorm": lambda x, weight, bias: (lambda d: d / jnp.sqrt((d * d).mean(-1, keepdims=True) + 1e-5))(
            x - x.mean(-1, keepdims=True)) * weight + bias,
        "w4_mlp": lambda x, w1, b1, w2, b2: jax.nn.gelu(x @ w1 + b1, approximate=True) @ w2 + b2,
        "w5_attention": lambda q, k, v: jax.nn.softmax(q @ jnp.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1]), -1) @ v,
        "w6_reductions": lambda x: (x.sum(0), x.sum(1), x.sum(), x.max(0), x.max(1), x.max()),
        "w7_small_chain": lambda x: jnp.maximum(
            jnp.exp(-jnp.sqrt(jnp.abs(jnp.tanh(x * 1.5 + 0.25) * x - 0.5))), 0.1),
    }


def _jax(wname, arr):
    import jax
    import jax.numpy as jnp

    f = jax.jit(_jax_fns(jnp, jax)[wname])
    args = [jnp.asarray(v) for v in arr.values()]
    return lambda: jax.block_until_ready(f(*args))


# ----------------------------------------------------------------------------- PyTorch


def _torch_fns(torch):
    F = torch.nn.functional
    return {
        "w1_elementwise": lambda a, b, c: torch.relu(a * b + c) * 0.5 - a / (1 + torch.exp(-b)),
        "w2_softmax": lambda x: torch.softmax(x, -1),
        "w3_layernorm": lambda x, weight, bias: F.layer_norm(x, x.shape[-1:], weight, bias, 1e-5),
        "w4_mlp": lambda x, w1, b1, w2, b2: F.gelu(x @ w1 + b1, approximate="tanh") @ w2 + b2,
        "w5_attention": lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
        "w6_reductions": lambda x: (x.sum(0), x.sum(1), x.sum(), x.amax(0), x.amax(1), x.amax()),
        "w7_small_chain": lambda x: torch.clamp_min(
            torch.exp(-torch.sqrt(torch.abs(torch.tanh(x * 1.5 + 0.25) * x - 0.5))), 0.1),
    }


def _torch_eager(wname, arr):
    import torch

    f, args = _torch_fns(torch)[wname], [torch.from_numpy(v) for v in arr.values()]
    return lambda: f(*args)


def _torch_compile(wname, arr):
    import torch

    f, args = torch.compile(_torch_fns(torch)[wname]), [torch.from_numpy(v) for v in arr.values()]
    return lambda: f(*args)


# ----------------------------------------------------------------------------- tinygrad


def _tinygrad(wname, arr):
    from tinygrad import Tensor

    fns = {
        "w1_elementwise": lambda a, b, c: (a * b + c).relu() * 0.5 - a / (1 + (-b).exp()),
        "w2_softmax": lambda x: x.softmax(-1),
        "w3_layernorm": lambda x, weight, bias: x.layernorm(-1, 1e-5) * weight + bias,
        "w4_mlp": lambda x, w1, b1, w2, b2: (x @ w1 + b1).gelu() @ w2 + b2,
        "w5_attention": lambda q, k, v: q.scaled_dot_product_attention(k, v),
        "w6_reductions": lambda x: (x.sum(0), x.sum(1), x.sum(), x.max(0), x.max(1), x.max()),
        "w7_small_chain": lambda x: (-((x * 1.5 + 0.25).tanh() * x - 0.5).abs().sqrt()).exp().maximum(0.1),
    }
    f, args = fns[wname], [Tensor(v).realize() for v in arr.values()]

    def run():
        out = f(*args)
        outs = out if isinstance(out, tuple) else (out,)
        Tensor.realize(*outs)  # one schedule for all outputs, like svod's realize
        return tuple(o.numpy() for o in outs) if isinstance(out, tuple) else outs[0].numpy()

    return run


# ----------------------------------------------------------------------------- registry

# name -> (module to import, maker)
PEERS: dict[str, tuple[str, object]] = {
    "numexpr": ("numexpr", _numexpr),
    "numba": ("numba", _numba),
    "jax.jit": ("jax", _jax),
    "torch eager": ("torch", _torch_eager),
    "torch.compile": ("torch", _torch_compile),
    "tinygrad": ("tinygrad", _tinygrad),
}


def available() -> dict[str, str | None]:
    """Peer name -> None when it can run here, else a one-line reason it is skipped."""
    out: dict[str, str | None] = {}
    for name, (mod, _) in PEERS.items():
        try:
            importlib.import_module(mod)
        except Exception as e:  # noqa: BLE001 - an optional peer may fail to import in any way
            reason = "not installed" if isinstance(e, ModuleNotFoundError) else f"import failed: {type(e).__name__}"
            out[name] = f"{reason} (pip install 'svod[bench]' or {mod})"
            continue
        out[name] = None
        if name == "tinygrad" and not (shutil.which("clang") or shutil.which("clang-18") or shutil.which("clang-17")):
            out[name] = "tinygrad's CPU backend needs clang, not found on PATH"
    return out


def to_numpy(x):
    """A peer's output (numpy, jax, torch, tuple of them) as numpy arrays."""
    if isinstance(x, tuple | list):
        return tuple(to_numpy(v) for v in x)
    if hasattr(x, "detach"):  # torch
        x = x.detach().numpy()
    return np.asarray(x)


__all__ = ["PEERS", "Skip", "available", "to_numpy"]
