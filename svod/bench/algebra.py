"""Programs where algebra matters (issue 30's benchmark; `bench/bench_algebra.py`,
`svod bench --only algebra`), each written once against an array module and run as
written by numpy, svod and the installed peers (torch eager, torch.compile, jax.jit):

* ``chain_vec``: ``(A @ B) @ v`` — as written an n³ GEMM; associated, two n² GEMVs;
* ``contract_bmr``: ``(x[:, None, :] * w[None]).sum(-1)`` — a broadcast-multiply-reduce
  that is ``x @ w.T`` (numpy materialises the (m, n, k) product);
* ``einsum``: the same contraction as ``einsum('ik,jk->ij', x, w)`` (svod writes it as the
  same broadcast sum, which the search's ``contract`` rule set makes a matmul; numpy's
  default ``optimize=False`` runs its C loop);
* ``siblings``: ``x @ Wq, x @ Wk, x @ Wv`` — three products of one input (one wider GEMM);
* ``distribute``: ``A @ B + A @ C`` — two GEMMs, or one of ``A @ (B + C)``;
* ``scaled_reductions``: ``sum(3 * x, axis=1)``, ``max(x + 1.5, axis=1)``;
* ``bcast_sum``: ``sum(broadcast_to(v, (n, n)), axis=0)`` and its mean — a multiply by
  the count;
* ``sum_of_sums``: ``sum(a, 0) + sum(b, 0)`` — one reduction of ``a + b``;
* ``sum_rows``: ``sum(a, 1) - sum(b, 1)`` — the row sums ``sum_merge`` may merge into one
  reduction of ``a - b`` (docs/algebra.md, "Measured");
* ``transposed_chain``: ``(tanh(a.T + b.T) * 2).T`` — the transposes cancel: one
  contiguous elementwise pass, memory-bound (it costs what ``a + b`` costs; the gap to
  jax.jit is the output's write-allocate traffic, docs/algebra.md);
* ``attention`` / ``attention_softcap``: ``softmax(q k^T / sqrt(d)) v``, the second with
  a ``30 * tanh(s / 30)`` prologue on the scores;
* ``rmsnorm_matmul``: ``(x / sqrt(mean(x², -1) + 1e-6) * g) @ W`` — a row kernel and a GEMM,
  or one kernel whose GEMM normalises x while packing it (the ``rmsnorm`` kernel kind,
  docs/algebra.md, "Kernel kinds").

Per program and contender: the median seconds of interleaved repeats (each repeat runs
every contender once; calls shorter than 2 ms are timed in batches), svod's first call
(plan + compile, or a cache load) apart, and every result checked against numpy's
(``max |svod - numpy| <= 1e-3 * max |numpy|``; a mismatch is a FAIL). svod is run lazily
(build + realize per call, plan-cache hits after the first).

>>> rows = run(sizes="tiny", repeats=1, only=["sum_of_sums"], peers=())
>>> rows[0]["program"], rows[0]["ok"], sorted(rows[0]["ms"])
('sum_of_sums', True, ['numpy', 'svod'])
"""

from __future__ import annotations

import importlib.util
import math
import statistics
import time
from collections.abc import Callable

import numpy as np

# ----------------------------------------------------------------------------- the programs


def chain_vec(xp, a, b, v):
    return ((a @ b) @ v,)


def contract_bmr(xp, x, w):
    return (xp.sum(x[:, None, :] * w[None], axis=-1),)


def einsum(xp, x, w):
    return (xp.einsum("ik,jk->ij", x, w),)


def siblings(xp, x, wq, wk, wv):
    return (x @ wq, x @ wk, x @ wv)


def distribute(xp, a, b, c):
    return (a @ b + a @ c,)


def scaled_reductions(xp, x):
    return (xp.sum(3.0 * x, axis=1), xp.max(x + 1.5, axis=1))


def bcast_sum(xp, v):
    n = v.shape[0]
    s = xp.sum(xp.broadcast_to(v, (n, n)), axis=0)
    return (s, xp.sum(xp.broadcast_to(v[:, None], (n, n)), axis=1) / n)


def sum_of_sums(xp, a, b):
    return (xp.sum(a, axis=0) + xp.sum(b, axis=0),)


def sum_rows(xp, a, b):
    return (xp.sum(a, axis=1) - xp.sum(b, axis=1),)


def transposed_chain(xp, a, b):
    t = xp.tanh(xp.matrix_transpose(a) + xp.matrix_transpose(b)) * 2.0
    return (xp.matrix_transpose(t),)


def _softmax(xp, s):
    e = xp.exp(s - xp.max(s, axis=-1, keepdims=True))
    return e / xp.sum(e, axis=-1, keepdims=True)


def attention(xp, q, k, v):
    s = (q @ xp.matrix_transpose(k)) * (1.0 / math.sqrt(q.shape[-1]))
    return (_softmax(xp, s) @ v,)


def attention_softcap(xp, q, k, v):
    s = (q @ xp.matrix_transpose(k)) * (1.0 / math.sqrt(q.shape[-1]))
    return (_softmax(xp, 30.0 * xp.tanh(s / 30.0)) @ v,)


def rmsnorm_matmul(xp, x, g, w):
    return ((x / xp.sqrt(xp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * g) @ w,)


def _shapes(n: int, m: int, d: int) -> dict[str, tuple[Callable, list[tuple[int, ...]]]]:
    """program -> (function, input shapes) at sizes n (matrix side), m (rows), d (head)."""
    h = max(1, n // 256)
    return {
        "chain_vec": (chain_vec, [(n, n), (n, n), (n,)]),
        "contract_bmr": (contract_bmr, [(m, m // 2), (m, m // 2)]),
        "einsum": (einsum, [(m, m // 2), (m, m // 2)]),
        "siblings": (siblings, [(n, 3 * n // 8), (3 * n // 8, 3 * n // 8), (3 * n // 8, 3 * n // 8),
                                (3 * n // 8, 3 * n // 8)]),
        "distribute": (distribute, [(n // 2, n // 2)] * 3),
        "scaled_reductions": (scaled_reductions, [(2 * n, 2 * n)]),
        "bcast_sum": (bcast_sum, [(2 * n,)]),
        "sum_of_sums": (sum_of_sums, [(2 * n, 2 * n), (2 * n, 2 * n)]),
        "sum_rows": (sum_rows, [(n, n), (n, n)]),
        "transposed_chain": (transposed_chain, [(n, n), (n, n)]),
        "attention": (attention, [(h, n // 2, d)] * 3),
        "attention_softcap": (attention_softcap, [(h, n // 2, d)] * 3),
        "rmsnorm_matmul": (rmsnorm_matmul, [(n, n // 2), (n // 2,), (n // 2, 2 * n)]),
    }


SIZES = {"default": (2048, 512, 64), "quick": (1024, 256, 64), "tiny": (64, 32, 16)}
PROGRAMS = tuple(_shapes(*SIZES["tiny"]))

# ----------------------------------------------------------------------------- contenders


class _TorchXP:
    """The few numpy names the programs use, on torch tensors."""

    def __init__(self, torch):
        self.t = torch

    def sum(self, x, axis=None, keepdims=False):
        return x.sum() if axis is None else self.t.sum(x, dim=axis, keepdim=keepdims)

    def max(self, x, axis=None, keepdims=False):
        return x.max() if axis is None else self.t.amax(x, dim=axis, keepdim=keepdims)

    def exp(self, x):
        return self.t.exp(x)

    def tanh(self, x):
        return self.t.tanh(x)

    def matrix_transpose(self, x):
        return x.mT

    def broadcast_to(self, x, shape):
        return self.t.broadcast_to(x, shape)

    def einsum(self, sub, *ops):
        return self.t.einsum(sub, *ops)

    def mean(self, x, axis=None, keepdims=False):
        return x.mean() if axis is None else self.t.mean(x, dim=axis, keepdim=keepdims)

    def sqrt(self, x):
        return self.t.sqrt(x)


def available_peers() -> dict[str, str | None]:
    """peer -> None when it can run here, else why not."""
    out: dict[str, str | None] = {}
    for name, mod in (("torch eager", "torch"), ("torch.compile", "torch"), ("jax.jit", "jax")):
        out[name] = None if importlib.util.find_spec(mod) else f"{mod} is not installed"
    return out


def _peer(name: str, fn, arrays):
    if name.startswith("torch"):
        import torch

        xp, args = _TorchXP(torch), [torch.from_numpy(a) for a in arrays]
        f = (lambda *a: fn(xp, *a)) if name == "torch eager" else torch.compile(lambda *a: fn(xp, *a))

        def call():
            with torch.no_grad():
                return f(*args)

        return call
    import jax
    import jax.numpy as jnp

    f = jax.jit(lambda *a: fn(jnp, *a))
    args = [jnp.asarray(a) for a in arrays]
    return lambda: jax.block_until_ready(f(*args))


def _to_numpy(x):
    if hasattr(x, "detach"):
        return x.detach().numpy()
    return np.asarray(x)


# ----------------------------------------------------------------------------- timing


def _batch(fn: Callable, target_s: float) -> int:
    fn()
    t0 = time.perf_counter()
    fn()
    dt = time.perf_counter() - t0
    return max(1, min(1000, math.ceil(target_s / max(dt, 1e-7)))) if dt < target_s else 1


def _interleaved(contenders: dict[str, Callable], repeats: int, target_s: float = 2e-3) -> dict[str, list[float]]:
    inner = {k: _batch(f, target_s) for k, f in contenders.items()}
    times: dict[str, list[float]] = {k: [] for k in contenders}
    for _ in range(repeats):
        for name, f in contenders.items():
            t0 = time.perf_counter()
            for _ in range(inner[name]):
                f()
            times[name].append((time.perf_counter() - t0) / inner[name])
    return times


# ----------------------------------------------------------------------------- the run


def run(sizes: str = "default", repeats: int = 5, only=None, peers=None, seed: int = 0) -> list[dict]:
    """One row per program: ``ms`` (median ms per contender), ``spread`` (min, max ms),
    ``first_ms`` (svod's first call), ``kernels`` (svod kernels launched per call),
    ``ok``/``max_err``/``detail`` (svod against numpy), ``skipped`` (peer -> why).
    `peers`: names among `available_peers()` (None: every available one; () none)."""
    import os

    import svod

    # before a peer loads its OpenMP runtime (as svod.bench.harness does): spinning idle
    # threads would steal the cores from the contender timed next
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if sizes not in SIZES:
        raise ValueError(f"unknown sizes {sizes!r}; known: {', '.join(SIZES)}")
    progs = _shapes(*SIZES[sizes])
    names = list(progs) if only is None else list(only)
    unknown = [n for n in names if n not in progs]
    if unknown:
        raise ValueError(f"unknown algebra program(s) {unknown}; choose from {', '.join(progs)}")
    avail = available_peers()
    want = [p for p, why in avail.items() if why is None] if peers is None else list(peers)
    rng = np.random.default_rng(seed)
    rows = []
    for name in names:
        fn, shapes = progs[name]
        arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        ts = [svod.asarray(a) for a in arrays]
        row: dict = {"program": name, "shapes": [list(s) for s in shapes], "skipped": {}}

        def run_svod(fn=fn, ts=ts):
            return svod.realize(*fn(svod, *ts))

        t0 = time.perf_counter()
        got = run_svod()
        row["first_ms"] = 1e3 * (time.perf_counter() - t0)
        got = got if isinstance(got, (list, tuple)) else (got,)
        want_np = fn(np, *arrays)
        errs, scale = [], max(float(np.max(np.abs(w))) if w.size else 0.0 for w in want_np)
        for g, w in zip(got, want_np):
            g = g.numpy()
            errs.append(float(np.max(np.abs(g.astype(np.float64) - w))) if w.size else 0.0)
        row["max_err"] = max(errs)
        row["ok"] = row["max_err"] <= 1e-3 * max(scale, 1e-30) and all(np.isfinite(errs))
        row["detail"] = f"max |svod - numpy| {row['max_err']:.3g} vs max |numpy| {scale:.3g}"
        s0 = svod.stats()["kernels_launched"]
        run_svod()
        row["kernels"] = svod.stats()["kernels_launched"] - s0
        contenders: dict[str, Callable] = {"numpy": lambda fn=fn, arrays=arrays: fn(np, *arrays), "svod": run_svod}
        for p in want:
            if avail.get(p, "unknown peer") is not None:
                row["skipped"][p] = avail.get(p) or "unknown peer"
                continue
            try:
                call = _peer(p, fn, arrays)
                res = call()  # compile (torch.compile, jax.jit) outside the timing
                res = res if isinstance(res, (list, tuple)) else (res,)
                for r, w in zip(res, want_np):
                    if not np.allclose(_to_numpy(r), w, rtol=1e-3, atol=1e-3 * max(scale, 1e-30)):
                        row["skipped"][p] = "its result differs from numpy's"
                        break
                else:
                    contenders[p] = call
            except Exception as e:  # a peer failing is a row note, never a crash of the benchmark
                row["skipped"][p] = f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"
        times = _interleaved(contenders, repeats)
        row["ms"] = {k: 1e3 * statistics.median(v) for k, v in times.items()}
        row["spread"] = {k: (1e3 * min(v), 1e3 * max(v)) for k, v in times.items()}
        rows.append(row)
    return rows


def format_rows(rows: list[dict]) -> str:
    """The table: per program, each contender's median (min-max) and its time / svod's."""
    lines = [f"{'program':20} {'contender':16} {'median':>11} {'min-max':>21} {'x/svod':>8}"]
    for r in rows:
        status = "PASS" if r["ok"] else "*** FAIL ***"
        lines.append(f"{r['program']:20} shapes {r['shapes']}: svod first call {r['first_ms']:.1f} ms, "
                     f"{r['kernels']} kernel(s) a call; check {status} ({r['detail']})")
        sv = r["ms"]["svod"]
        for name, ms in r["ms"].items():
            lo, hi = r["spread"][name]
            ratio = "" if name == "svod" else f"{ms / sv:7.2f}x"
            lines.append(f"{'':20} {name:16} {_fmt(ms):>11} {_fmt(lo) + ' - ' + _fmt(hi):>21} {ratio:>8}")
        for name, why in r["skipped"].items():
            lines.append(f"{'':20} {name:16} skipped: {why}")
    return "\n".join(lines)


def _fmt(ms: float) -> str:
    return f"{ms * 1e3:.1f} us" if ms < 1 else f"{ms:.2f} ms"


__all__ = ["PROGRAMS", "SIZES", "run", "format_rows", "available_peers"]
