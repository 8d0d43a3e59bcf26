"""What small steps really cost against what the calibrated model prices them at
(docs/costmodels.md, "a library step's fixed cost").

Run: ``python3 bench/bench_small_steps.py [steps|realize|probe] ...`` (the checked-in
profile unless ``SVOD_MACHINE_PROFILE`` names another; a private ``SVOD_CACHE_DIR`` is
made when none is set).

- ``steps``: for the small attention shapes, the searched plan, the greedy (fused) plan
  and the cover the search picked without the term (blas, reduce, rowwise, blas): each
  kernel's model price, the whole `GraphProgram.run`, each native segment,
  and inside each library step `LibraryProgram.run`, `matmul_into` and `np.matmul`.
- ``realize [NAME,...]``: realize() loops of the plan the model picks without the
  library-step term (``library_step_seconds = 0``) against the plan it picks with it,
  alternating in one process. Names are workloads (small shapes) or ``attn:b/m/n/d/dv``;
  default: the three small attention shapes and the four workloads whose small plans
  the term changed.
- ``probe``: `costmodels.stepprobes._library_step_cost` a few times.

Times are the best of 7 batches of 200-300 calls after warm-up calls, in µs.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
os.environ.setdefault("SVOD_MACHINE_PROFILE", os.path.join(HERE, "..", "tests", "machine_profile.json"))
os.environ.setdefault("SVOD_CACHE_DIR", tempfile.mkdtemp(prefix="svod-bench-steps-"))

import numpy as np  # noqa: E402

import svod  # noqa: E402
from svod import engine, workloads  # noqa: E402
from svod.executable import KernelPlan  # noqa: E402

ATTENTION = [(2, 16, 32, 8, 32), (1, 7, 32, 24, 64), (2, 12, 32, 8, 32)]
CHANGED = ["matmul_transposed", "residual", "swiglu", "w4_mlp"]


def best(fn, *args, n: int = 300, reps: int = 7, warm: int = 50) -> float:
    """Seconds per call of fn(*args): the fastest of `reps` batches of `n` calls."""
    for _ in range(warm):
        fn(*args)
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(n):
            fn(*args)
        out.append((time.perf_counter() - t0) / n)
    return min(out)


def us(x: float) -> str:
    return f"{x * 1e6:7.2f}"


def _attention(b, m, n, d, dv):
    rng = np.random.default_rng(0)
    shapes = {"q": (b, m, d), "k": (b, n, d), "v": (b, n, dv)}
    ts = {k: svod.asarray(rng.standard_normal(s).astype(np.float32)) for k, s in shapes.items()}
    return shapes, lambda: (svod.nn.scaled_dot_product_attention(ts["q"], ts["k"], ts["v"]),)


def _workload(name: str):
    if name.startswith("attn:"):
        return _attention(*map(int, name[5:].split("/")))
    w = workloads.get(name)
    ts = w.tensors(w.make_inputs(w.small_shapes, 0))

    def build():
        out = w.build(**ts)
        return out if isinstance(out, tuple) else (out,)

    return w.small_shapes, build


def steps() -> None:
    from svod.codegen.blas import matmul_into
    from svod.codegen.graphprog import data_address
    from svod.codegen.program import _operand
    from svod.costing import plan_prices
    from svod.lower import lower
    from svod.plan_greedy import plan_greedy
    from svod.planner import cost_model

    for shape in ATTENTION:
        shapes, build = _attention(*shape)
        (t,) = build()
        key, exe = engine.plan_for([t])
        _, bufs = engine.PIPELINE.compact([t.uop])
        arrs = bufs.arrays
        print(f"== {shapes}")
        mats = {i for i, nd in enumerate(key.nodes)  # the cover the search picked before: blas, reduce, rowwise, blas
                if nd.op.name in ("MATMUL", "DIV") or (nd.op.name == "REDUCE" and nd.arg[0] == "max")}
        for name, plan in (("search", exe.plan), ("greedy", plan_greedy(key)), ("unfused", lower(key, mats))):
            kp = KernelPlan(key, plan)
            prices = plan_prices(plan, cost_model())
            print(f"  {name}: {[k.kind for k in plan.kernels]} model {[us(p.seconds) for p in prices]} "
                  f"sum {us(sum(p.seconds for p in prices))}")
            gp = kp.graph_program()
            for _ in range(3):
                kp.run(arrs)
            print(f"    KernelPlan.run {us(best(kp.run, arrs))}   GraphProgram.run {us(best(gp.run, arrs))}"
                  f"   segments {[s[0] for s in gp.segments]}")
            slots, addr, blocks = gp._state if gp._state is not None else gp._new_state(True)
            outs = {s: np.empty(int(np.prod(sh)) + 16, plan.slots[s].dtype.np) for s, sh in plan.outputs}
            for i, a in enumerate(arrs[:gp.n_inputs]):  # addresses of arrays kept alive here
                slots[i] = data_address(a)
            for s, a in outs.items():
                slots[s] = data_address(a)
            for i, seg in enumerate(gp.segments):
                if seg[0] == "native":
                    print(f"    segment {i} native   {us(best(seg[1], addr, gp._fns, None))}")
                    continue
                _, prog, needed = seg
                views = gp._views(needed, arrs, outs, blocks)
                k = prog.kernel
                mm = k.matmul
                a = _operand(views[k.inputs[mm.a].slot], k.inputs[mm.a].view)
                b = _operand(views[k.inputs[mm.b].slot], k.inputs[mm.b].view)
                o = np.empty(k.shape, np.float32)
                print(f"    segment {i} library  {us(best(prog.run, views, 1))}"
                      f"   matmul_into {us(best(matmul_into, a, b, o))}"
                      f"   np.matmul {us(best(np.matmul, a, b, o))}   a {a.shape} b {b.shape}")


def realize(names: list[str]) -> None:
    from costmodels.analytic import CalibratedModel
    from costmodels.profile import Profile, profile
    from svod.costing import plan_prices
    from svod.planner import cost_model, search_plan

    old_model = CalibratedModel(Profile(dict(profile().data, library_step_seconds=0.0)))
    new_model = cost_model()
    for name in names:
        shapes, build = _workload(name)
        key, _ = engine.PIPELINE.compact([o.uop for o in build()])
        exes = {"old": search_plan(key, model=old_model)[0], "new": search_plan(key, model=new_model)[0]}
        res: dict[str, float] = {}
        for _ in range(2):
            for tag, exe in exes.items():
                engine.reset_caches()
                engine.PLAN_CACHE.put(key, exe)

                def run(build=build):
                    outs = build()
                    svod.realize(*outs)
                    for o in outs:
                        o.numpy()

                res[tag] = min(res.get(tag, 1.0), best(run, n=200, warm=30))
        print(f"{name} {shapes}")
        for tag, exe in exes.items():
            kinds = "+".join(k.kind for k in exe.plan.kernels)
            price = sum(p.seconds for p in plan_prices(exe.plan, new_model))
            print(f"   {tag}: {kinds:50s} priced {us(price)}   realize {us(res[tag])}", flush=True)


def probe(n: int = 4) -> None:
    from costmodels.stepprobes import _library_step_cost

    print("library step (µs):", [round(_library_step_cost() * 1e6, 2) for _ in range(n)])


def main(argv: list[str]) -> int:
    what = argv[0] if argv else "steps"
    if what == "steps":
        steps()
    elif what == "realize":
        realize(argv[1].split(",") if len(argv) > 1 else [f"attn:{'/'.join(map(str, s))}" for s in ATTENTION] + CHANGED)
    elif what == "probe":
        probe()
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
