"""A bucket's plan at its caller's row count (svod/codegen/rows.py) against the padded
run and the exact plan, interleaved in one process (fresh cache):

    python3 bench/bench_rows.py [--cols 256] [--steady 40]

Programs: row-wise, flat elementwise, a row reduction, a GEMM with bias and ReLU, an MLP
(two GEMMs, GELU). Per program: the first calls of the first size and of the bucket (kernels
compiled: the bucket's include its GEMMs' rows variants), the first call of two new sizes in a
known bucket (the first one builds the
bucket's rows program), then median (and min) ms of steady calls, alternating: the first
size (its exact plan), the first size + 1 in its bucket's plan with the row count read
at run time, and the same with SVOD_ROWS=0 (padded to the bucket: a copy of the input
when it has no room, the padding rows computed). Inputs: `svod.asarray` copies (with
room after the rows once a structure is dynamic) and, "no room", the exact-size result
of another plan. Figures: docs/shapes.md.

    python3 bench/bench_rows.py --vs-constant [--repeats 41] [--only w1]

Symbolic against constant shapes (issue 28: "a symbolic kernel must not be slower than
its constant-shape twin by more than 5%"): per program and size ``n``, two `svod.jit`
functions of the same program on the same Tensors, interleaved in one process: the
*constant* one traced with ``SVOD_DYNAMIC=0`` (the exact plan of ``n``), the *symbolic*
one run first at another size (the structure's first, exact size), so that ``n`` runs in
its bucket's plan (the rows program, or at the bucket's own size the bucket's plan).
Programs: W1 (``relu(a*b+c)*0.5 - a/(1+exp(-b))``, float32, one axis) at sizes in the
bucket 2**20, odd ones included; W2-style ``softmax(layer_norm(x))`` of (n, 256) and W3
(layer norm with weight and bias) of (n, 1024) at row counts in their buckets. Reported:
median and quartiles of wall and process CPU time per call (batches of calls of ~2 ms),
symbolic / constant, input copies per call (`svod.shapes.pad_rows` calls that copied) and
whether the two results are bit-identical. On a shared machine run it with
``SVOD_THREADS=1``: the process CPU time is then the calls' own work (with pool workers
it includes their waits). Figures: docs/shapes.md ("Symbolic against constant shapes").
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cols", type=int, default=256)
    ap.add_argument("--steady", type=int, default=40)
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--only", default="", help="comma-separated parts of program names")
    ap.add_argument("--vs-constant", action="store_true", help="symbolic against constant shapes (above)")
    ap.add_argument("--repeats", type=int, default=41, help="--vs-constant: interleaved samples per case")
    a = ap.parse_args()
    os.environ.setdefault("SVOD_CACHE_DIR", tempfile.mkdtemp(prefix="svod-rows-"))
    sys.path.insert(0, ROOT)
    if a.vs_constant:
        vs_constant(a.repeats, a.only)
        return
    import numpy as np

    import svod

    rng = np.random.default_rng(0)
    cols, n0 = a.cols, a.n
    weights: dict = {}

    def wt(name: str, shape) -> svod.Tensor:  # made on first use (a long-rows run needs none)
        if name not in weights:
            weights[name] = svod.asarray((rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32))
        return weights[name]

    w = lambda: wt("w", (cols, cols))  # noqa: E731
    bias = lambda: wt("b", (1, cols)).reshape(cols)  # noqa: E731
    w1 = lambda: wt("w1", (cols, 4 * cols))  # noqa: E731
    w2 = lambda: wt("w2", (4 * cols, cols))  # noqa: E731
    progs = {
        "softmax(layer_norm(x))": lambda x: svod.nn.softmax(svod.nn.layer_norm(x, (cols,))),
        "exp(x) * 2 + 1": lambda x: svod.exp(x) * 2.0 + 1.0,
        "sum(x * x, axis=1)": lambda x: svod.sum(x * x, axis=1),
        "relu(x @ W + b)": lambda x: svod.maximum(x @ w() + bias(), 0.0),
        "gelu(x @ W1) @ W2 + b (MLP)": lambda x: svod.nn.gelu(x @ w1(), approximate="tanh") @ w2() + bias(),
    }
    if a.only:
        progs = {k: v for k, v in progs.items() if any(o in k for o in a.only.split(","))}
    for name, f in progs.items():
        for n in (n0, n0 + 1):
            t = time.perf_counter()
            s0 = svod.stats()
            f(svod.asarray(rng.standard_normal((n, cols)).astype(np.float32))).numpy()
            s1 = svod.stats()
            print(f"{name}: first call at {n} rows {(time.perf_counter() - t) * 1e3:.0f} ms, "
                  f"{s1['kernels_compiled'] - s0['kernels_compiled']} kernel(s) compiled "
                  f"({s1['compile_seconds'] - s0['compile_seconds']:.2f} s)")
        firsts = []
        for n in (n0 + 2, n0 + 3):
            x = rng.standard_normal((n, cols)).astype(np.float32)
            s0 = svod.stats()
            t = time.perf_counter()
            f(svod.asarray(x)).numpy()
            firsts.append((time.perf_counter() - t) * 1e3)
            s1 = svod.stats()
            assert s1["searches"] == s0["searches"] and s1["kernels_compiled"] == s0["kernels_compiled"]
        xa = rng.standard_normal((n0, cols)).astype(np.float32)
        xb = rng.standard_normal((n0 + 1, cols)).astype(np.float32)
        noroom = svod.asarray(xb) * 1.0  # no svod.shapes.with_room room: the result of an exact plan
        noroom.numpy()
        cases = {"exact plan, n": (xa, "1", False), "rows, n + 1": (xb, "1", False),
                 "padded, n + 1": (xb, "0", False), "rows, n + 1, no room": (xb, "1", True),
                 "padded, n + 1, no room": (xb, "0", True)}
        times = {k: [] for k in cases}
        for _ in range(a.steady):
            for k, (x, rows, nr) in cases.items():
                os.environ["SVOD_ROWS"] = rows
                arg = noroom if nr else svod.asarray(x)
                t = time.perf_counter()
                f(arg).numpy()
                times[k].append((time.perf_counter() - t) * 1e3)
        os.environ["SVOD_ROWS"] = "1"
        news = {"1": [], "0": []}  # first calls of new sizes of the bucket, rows on and off alternating
        for n in range(n0 + 4, n0 + 24):
            rows = "1" if n % 2 else "0"
            os.environ["SVOD_ROWS"] = rows
            x = rng.standard_normal((n, cols)).astype(np.float32)
            t = time.perf_counter()
            f(svod.asarray(x)).numpy()
            news[rows].append((time.perf_counter() - t) * 1e3)
        os.environ["SVOD_ROWS"] = "1"
        print(f"{name}, x ({n0}.., {cols}) float32: first call of new sizes in the bucket "
              f"{firsts[0]:.2f}, {firsts[1]:.2f} ms")
        base = sorted(times["exact plan, n"])[a.steady // 2]
        for k, ts in times.items():
            ts = sorted(ts)
            med = ts[a.steady // 2]
            q1, q3 = ts[a.steady // 4], ts[3 * a.steady // 4]
            print(f"  {k:24s} median {med:7.3f} ms  (quartiles {q1:.3f}-{q3:.3f})  min {ts[0]:7.3f} ms  "
                  f"({med / base:.2f}x the exact plan)")
        on, off = (sorted(news[r])[len(news[r]) // 2] for r in ("1", "0"))
        print(f"  first call of a new size (median of 10): rows {on:.2f} ms, padded {off:.2f} ms")


def _samples(fns: dict, repeats: int, target_s: float = 2e-3) -> dict:
    """Per contender: (wall seconds per call, CPU seconds per call) samples, contenders
    interleaved; a batch of calls of about `target_s` per sample, after one untimed call."""
    inner = {}
    for k, f in fns.items():
        f()
        t = time.perf_counter()
        f()
        inner[k] = max(1, min(1000, int(target_s / max(time.perf_counter() - t, 1e-7))))
    out = {k: ([], []) for k in fns}
    for _ in range(repeats):
        for k, f in fns.items():
            f()
            w0, c0 = time.perf_counter(), time.process_time()
            for _ in range(inner[k]):
                f()
            out[k][0].append((time.perf_counter() - w0) / inner[k])
            out[k][1].append((time.process_time() - c0) / inner[k])
    return out


def _stat(xs: list) -> tuple:
    xs = sorted(xs)
    m = len(xs)
    return xs[m // 2], xs[m // 4], xs[(3 * m) // 4]


def vs_constant(repeats: int, only: str) -> None:
    import numpy as np

    import svod
    from svod import shapes
    from svod.workloads import get

    copies = [0]
    real = shapes.pad_rows

    def counted(arr, b):
        got = real(arr, b)
        copies[0] += got.ctypes.data != arr.ctypes.data
        return got

    shapes.pad_rows = counted
    rng = np.random.default_rng(0)
    w1, w3 = get("w1_elementwise"), get("w3_layernorm")
    cases = {  # name: (program, inputs at n rows, the symbolic function's first size, sizes)
        "w1": (w1.build, lambda n: w1.make_inputs({"a": (n,), "b": (n,), "c": (n,)}), 16 << 20,
               [1 << 20, (1 << 20) - 4096, 1_000_003, 999_999, 1_048_575]),
        "softmax(layer_norm(x)) (n, 256)": (
            lambda x: svod.nn.softmax(svod.nn.layer_norm(x, (256,))),
            lambda n: {"x": rng.standard_normal((n, 256)).astype(np.float32)}, 4096, [1000, 1001, 1023, 1024]),
        "w3 layer_norm (n, 1024)": (w3.build, lambda n: w3.make_inputs({"x": (n, 1024), "weight": (1024,),
                                                                        "bias": (1024,)}), 8192, [1000, 999]),
    }
    if only:
        cases = {k: v for k, v in cases.items() if any(o in k for o in only.split(","))}
    print(f"symbolic (bucket plan) against constant (exact plan) shapes, {repeats} interleaved samples; "
          f"median (quartiles) per call, wall and process CPU time")
    for name, (build, inputs, first, sizes) in cases.items():
        sym = svod.jit(build)
        args0 = list(inputs(first).values())
        sym(*[svod.asarray(x) for x in args0])  # the structure's first size: exact
        for n in sizes:
            arrs = inputs(n)
            tens = [svod.asarray(x) for x in arrs.values()]
            os.environ["SVOD_DYNAMIC"] = "0"
            const = svod.jit(build)
            want = const(*tens).numpy()
            os.environ["SVOD_DYNAMIC"] = "1"
            got = sym(*tens).numpy()
            same = got.dtype == want.dtype and got.shape == want.shape and got.tobytes() == want.tobytes()
            c0 = copies[0]
            sym(*tens).numpy()
            per_call = copies[0] - c0
            fns = {"constant": lambda c=const, t=tens: c(*t), "symbolic": lambda s=sym, t=tens: s(*t)}
            out = _samples(fns, repeats)
            (cw, cl, ch), (sw, sl, sh) = _stat(out["constant"][0]), _stat(out["symbolic"][0])
            (cc, ccl, cch), (sc, scl, sch) = _stat(out["constant"][1]), _stat(out["symbolic"][1])
            ratios = sorted(s / c for s, c in zip(out["symbolic"][1], out["constant"][1]))
            print(f"{name} n={n} (bucket {shapes.bucket(n)}): wall constant {cw * 1e3:.3f} ({cl * 1e3:.3f}-"
                  f"{ch * 1e3:.3f}) ms, symbolic {sw * 1e3:.3f} ({sl * 1e3:.3f}-{sh * 1e3:.3f}) ms, "
                  f"{sw / cw:.3f}x; CPU constant {cc * 1e3:.3f} ({ccl * 1e3:.3f}-{cch * 1e3:.3f}), symbolic "
                  f"{sc * 1e3:.3f} ({scl * 1e3:.3f}-{sch * 1e3:.3f}) ms, {sc / cc:.3f}x (paired ratio quartiles "
                  f"{ratios[len(ratios) // 4]:.3f}-{ratios[(3 * len(ratios)) // 4]:.3f}); "
                  f"input copies per call {per_call}; bit-identical {same}", flush=True)


if __name__ == "__main__":
    main()
