"""First-call latency (issue 28, point 5), each figure from fresh processes.

    python3 bench/bench_first_call.py [--runs 5] [--jax PATH]

For `exp(x) * 2 + 1` and `softmax(layer_norm(x) * a + b)` on x (1024, 256) float32:

- **cold**: a fresh process and an empty cache directory (SVOD_CACHE_DIR): the time of
  the first realize (plan + compile + run), `import svod` apart;
- **warm**: a fresh process over the cache the cold run left (plans, objects, shared
  libraries and warm records on disk: `svod.warmplan`), started `--settle` seconds after
  the cold one (under tiered planning the search process persists the searched plan
  after the cold process exits);
- **new size**: in one process, after the program ran at 1024 rows, the time of a size
  whose bucket is already compiled (1001 after 1024 and 1000: `svod.shapes`), and of the
  second distinct size (1000: the structure turns dynamic, its bucket is planned);
- **jax** (with `--jax PATH`, a directory holding jax, put on that subprocess's path
  only): jax.jit's first call of the same function in a fresh process, `import jax` apart.

With tiered planning (the default, `svod.tiered`) the cold first call of a graph with
fusion choices runs its greedy plan; the search runs afterwards in the search process
and its plan is persisted when the cold process exits (not timed), so the warm process
loads the searched plan. The notes say what was imported at the first result (egglog,
llvmlite.binding) and the counters at exit.

Prints the median and the spread (min-max) of `--runs` processes per figure; each child
prints one JSON line. Beside the wall time, the CPU seconds of the process over the same
call (`time.process_time`: every thread, the pool's spinning workers included): on a
loaded machine the steadier of the two. The machine and its load are the reader's to note.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import numpy as np
import svod
import svod.nn as nn
t_import = time.perf_counter() - t0
prog, mode = sys.argv[1], sys.argv[2]
rng = np.random.default_rng(0)
a = svod.asarray(rng.standard_normal(256, dtype=np.float32))
b = svod.asarray(rng.standard_normal(256, dtype=np.float32))

cpu = {}

def run(n, name):
    x = svod.asarray(rng.standard_normal((n, 256), dtype=np.float32))
    t, c = time.perf_counter(), time.process_time()
    y = svod.exp(x) * 2 + 1 if prog == "exp" else nn.softmax(nn.layer_norm(x, (256,)) * a + b)
    y.numpy()
    cpu[name] = time.process_time() - c
    return time.perf_counter() - t

out = {"import_svod": t_import, "first": run(1024, "first")}
out["egglog_imported"] = "egglog" in sys.modules  # at the first result (a background search imports it later)
out["llvmlite_binding"] = "llvmlite.binding" in sys.modules
out["kernel_module"] = "svod.kernel" in sys.modules  # a warm record's replay builds no Kernel (svod.warmplan)
out["warm_records"] = sys.modules["svod.warmplan"].STARTED[0] if "svod.warmplan" in sys.modules else 0
if mode == "sizes":
    out["second_size"] = run(1000, "second_size")
    out["known_bucket"] = run(1001, "known_bucket")
out["cpu"] = cpu
out["stats"] = {k: svod.stats().get(k)
                for k in ("searches", "searches_skipped", "searches_deferred", "kernels_compiled", "kernels_loaded")}
print(json.dumps(out))
"""

JAX_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import numpy as np
import jax, jax.numpy as jnp
t_import = time.perf_counter() - t0
prog = sys.argv[1]
rng = np.random.default_rng(0)
x = rng.standard_normal((1024, 256), dtype=np.float32)
a = rng.standard_normal(256, dtype=np.float32); b = rng.standard_normal(256, dtype=np.float32)

def ln(x):
    m = x.mean(-1, keepdims=True); v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / jnp.sqrt(v + 1e-5)

f = (lambda x, a, b: jnp.exp(x) * 2 + 1) if prog == "exp" else (lambda x, a, b: jax.nn.softmax(ln(x) * a + b, -1))
t = time.perf_counter()
jax.jit(f)(x, a, b).block_until_ready()
print(json.dumps({"import_jax": t_import, "first": time.perf_counter() - t}))
"""


def _child(code: str, args: list[str], env: dict) -> dict:
    r = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"bench_first_call: child {args} failed:\n{r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def _fmt(xs: list[float]) -> str:
    ms = [x * 1e3 for x in xs]
    return f"{statistics.median(ms):8.1f} ms  ({min(ms):.1f}-{max(ms):.1f}, n={len(ms)})"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--jax", default=None, help="a directory holding jax (pip install --target DIR 'jax[cpu]')")
    ap.add_argument("--only", default="exp,softmax_ln")
    ap.add_argument("--settle", type=float, default=5.0,
                    help="seconds between the cold and the warm process (the background search persists its plan)")
    args = ap.parse_args(argv)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # a user's install has its bytecode cached
    for prog in args.only.split(","):
        rows: dict[str, list[float]] = {}
        notes = set()
        for _ in range(args.runs):
            with tempfile.TemporaryDirectory() as d:
                e = dict(env, SVOD_CACHE_DIR=d)
                cold = _child(CHILD, [prog, "one"], e)
                time.sleep(args.settle)  # the search process persists the searched plan after cold exits
                warm = _child(CHILD, [prog, "one"], e)
                sizes = _child(CHILD, [prog, "sizes"], e)
            rows.setdefault("import svod", []).append(cold["import_svod"])
            rows.setdefault("cold first call", []).append(cold["first"])
            rows.setdefault("  cold, CPU seconds of the process", []).append(cold["cpu"]["first"])
            rows.setdefault("warm first call", []).append(warm["first"])
            rows.setdefault("  warm, CPU seconds of the process", []).append(warm["cpu"]["first"])
            rows.setdefault("second size (turns dynamic)", []).append(sizes["second_size"])
            rows.setdefault("size in a known bucket", []).append(sizes["known_bucket"])
            for name, r in (("cold", cold), ("warm", warm)):
                notes.add(f"{name}: at the first result egglog imported={r['egglog_imported']}, llvmlite.binding "
                          f"imported={r['llvmlite_binding']}, svod.kernel imported={r['kernel_module']}, warm "
                          f"records run={r['warm_records']}; stats at exit {r['stats']}")
            if args.jax:
                j = _child(JAX_CHILD, [prog], dict(env, PYTHONPATH=args.jax, JAX_PLATFORMS="cpu"))
                rows.setdefault("jax.jit first call", []).append(j["first"])
        print(f"{prog} (1024, 256) float32")
        for name, xs in rows.items():
            print(f"  {name:<30} {_fmt(xs)}")
        for n in sorted(notes):
            print(f"  {n}")


if __name__ == "__main__":
    main()
