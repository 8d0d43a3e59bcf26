"""Benchmark svod's vector math against numpy: speed (Gelem/s) and accuracy (max ulp).

Run: ``python3 bench/bench_vecmath.py [--n 16777216] [--repeats 7] [--funcs exp,log,tanh,sin]``

Speed: for each function and dtype, svod's kernel (polynomial path, and libmvec path
when glibc's libmvec is present) and ``numpy.<fn>(x, out=y)`` run interleaved; the table
shows the median over repeats. Accuracy: max ulp error over a dense sweep, against a
float64 reference for float32 and a long-double (or mpmath, for erf) reference for float64.
"""

from __future__ import annotations

import argparse
import ctypes
import math
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from svod.codegen.jit import compile_ir, has_libmvec, host_target_info  # noqa: E402
from svod.codegen.vecmath import math_kernel_ir  # noqa: E402

LD = np.longdouble
_NUMPY = {"exp": np.exp, "log": np.log, "tanh": np.tanh, "sin": np.sin, "cos": np.cos,
          "expm1": np.expm1, "log1p": np.log1p, "sqrt": np.sqrt, "pow": np.power}


def kernel(name: str, dtype: str, use_libmvec: bool):
    m = compile_ir(math_kernel_ir(name, dtype, use_libmvec=use_libmvec), name=f"bench_{name}")
    nin = 2 if name == "pow" else 1
    P = ctypes.c_void_p
    f = m.ctypes_fn("kernel", None, [P] * (1 + nin) + [ctypes.c_int64])

    def call(out, *xs):
        f(out.ctypes.data, *[x.ctypes.data for x in xs], out.size)
        return out
    return call


def ulp_error(got: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """|got - ref| in units of the spacing of ref rounded to got's dtype (0 where equal)."""
    dt = got.dtype
    with np.errstate(all="ignore"):
        refc = ref.astype(dt)
        same = (got == refc) | (np.isnan(got) & np.isnan(refc))
        e = np.abs(got.astype(LD) - ref.astype(LD)) / np.spacing(np.abs(refc)).astype(LD)
    e[same] = 0
    e[np.isnan(e)] = np.inf
    return e.astype(np.float64)


def _sweeps(dtype):
    f32 = dtype == np.float32
    rng = np.random.default_rng(1)
    tiny = np.finfo(dtype).tiny
    return {
        "exp": np.linspace(-104 if f32 else -746, 89 if f32 else 710, 1_000_001),
        "log": np.concatenate([np.exp(rng.uniform(-80 if f32 else -700, 80 if f32 else 700, 500_000)),
                               rng.uniform(0, 4 * tiny, 1000)]),
        "tanh": np.linspace(-20, 20, 1_000_001),
        "sigmoid": np.linspace(-110 if f32 else -750, 40, 1_000_001),
        "erf": np.linspace(-7, 7, 1_000_001 if f32 else 20_001),
        "sin": np.concatenate([np.linspace(-100, 100, 1_000_001), rng.uniform(-1e6, 1e6, 100_000)]),
        "cos": np.concatenate([np.linspace(-100, 100, 1_000_001), rng.uniform(-1e6, 1e6, 100_000)]),
        "expm1": np.linspace(-30, 88 if f32 else 709, 1_000_001),
        "log1p": np.concatenate([np.linspace(-0.999, 3, 1_000_001), np.exp(rng.uniform(-80, 80, 100_000))]),
        "pow": (np.exp(rng.uniform(-20, 20, 500_000)), rng.uniform(-4, 4, 500_000)),
    }


def reference(name: str, x, y=None):
    X = np.asarray(x, LD)
    with np.errstate(all="ignore"):
        if name == "pow":
            return np.power(X, np.asarray(y, LD))
        if name == "sigmoid":
            return 1 / (1 + np.exp(-X))
        if name == "erf":
            import mpmath

            return np.array([LD(mpmath.erf(float(v))) for v in x], LD)
        return _NUMPY[name](X)


def accuracy_table(funcs, paths) -> list[tuple]:
    rows = []
    for name in funcs:
        for dtype in (np.float32, np.float64):
            sw = _sweeps(dtype)[name]
            args = [np.asarray(a, dtype) for a in (sw if isinstance(sw, tuple) else (sw,))]
            ref = reference(name, *args)
            for path in paths:
                out = kernel(name, np.dtype(dtype).name, path == "libmvec")(np.empty_like(args[0]), *args)
                rows.append((name, np.dtype(dtype).name, path, float(ulp_error(out, ref).max())))
    return rows


def speed_table(funcs, paths, n: int, repeats: int) -> list[tuple]:
    rows = []
    rng = np.random.default_rng(0)
    for name in funcs:
        for dtype in (np.float32, np.float64):
            lo, hi = (0.01, 100.0) if name in ("log", "log1p") else (-10.0, 10.0)
            x = rng.uniform(lo, hi, n).astype(dtype)
            xs = [x] + ([rng.uniform(-3, 3, n).astype(dtype)] if name == "pow" else [])
            out = np.empty_like(x)
            runners = {p: kernel(name, np.dtype(dtype).name, p == "libmvec") for p in paths}
            if name in _NUMPY:
                runners["numpy"] = lambda o, *a, f=_NUMPY[name]: f(*a, out=o)
            times: dict[str, list[float]] = {k: [] for k in runners}
            for r in runners.values():  # warm up (page faults, lazy init)
                r(out, *xs)
            for _ in range(repeats):
                for k, r in runners.items():  # interleaved
                    t0 = time.perf_counter()
                    r(out, *xs)
                    times[k].append(time.perf_counter() - t0)
            for k, ts in times.items():
                rows.append((name, np.dtype(dtype).name, k, n / statistics.median(ts) / 1e9))
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1 << 24)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--funcs", default="exp,log,tanh,sin")
    ap.add_argument("--acc-funcs", default="exp,log,tanh,sigmoid,erf,sin,cos,pow,expm1,log1p")
    a = ap.parse_args(argv)
    info = host_target_info()
    paths = ["poly"] + (["libmvec"] if has_libmvec() else [])
    print(f"host: {info['cpu']} {info['vector_bits']}-bit vectors, libmvec={has_libmvec()}, "
          f"numpy {np.__version__}, n={a.n}, repeats={a.repeats}")
    print("\nspeed (Gelem/s, median of interleaved repeats)")
    print(f"{'fn':8s} {'dtype':8s} " + " ".join(f"{p:>8s}" for p in paths + ["numpy"]))
    rows = speed_table(a.funcs.split(","), paths, a.n, a.repeats)
    by = {}
    for name, dt, k, g in rows:
        by.setdefault((name, dt), {})[k] = g
    for (name, dt), d in by.items():
        print(f"{name:8s} {dt:8s} " + " ".join(f"{d.get(p, math.nan):8.2f}" for p in paths + ["numpy"]))
    print("\naccuracy (max ulp)")
    print(f"{'fn':8s} {'dtype':8s} " + " ".join(f"{p:>8s}" for p in paths))
    acc = {}
    for name, dt, p, e in accuracy_table(a.acc_funcs.split(","), paths):
        acc.setdefault((name, dt), {})[p] = e
    for (name, dt), d in acc.items():
        print(f"{name:8s} {dt:8s} " + " ".join(f"{d.get(p, math.nan):8.2f}" for p in paths))


if __name__ == "__main__":
    main()
