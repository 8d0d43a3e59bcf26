"""The structure refactor's safety net: for every named workload (default and small
shapes), the plan svod runs, each kernel's unoptimised LLVM IR and each kernel's cost
features, computed on a fixed reference host so the text is the same on every machine.

Moving code between modules must leave this text byte-identical (`tests/test_snapshot.py`);
a change that means to change plans, IR or features regenerates it with

    PYTHONPATH=. python3 -m tests.snapshot --write

and says why in its commit. The reference host: x86-64 with AVX2 (256-bit vectors, FMA),
2 cores, 32 KiB L1d / 512 KiB L2 / 32 MiB L3, the checked-in machine profile, libmvec off,
an empty tuning database.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "golden" / "snapshot"
PROFILE = HERE / "machine_profile.json"

_HOST = {
    "triple": "x86_64-unknown-linux-gnu",
    "cpu": "znver3",
    "features": "+avx,+avx2,+fma,+sse4.2,+f16c,+bmi2",
    "feature_set": frozenset({"avx", "avx2", "fma", "sse4.2", "f16c", "bmi2"}),
    "vector_bits": 256,
    "has_fma": True,
}


def _cached_host_functions():
    """The functools caches derived from the host (cleared when the host is swapped)."""
    from svod import costing
    from svod.codegen import jit, schedule, target, vecmath

    out = [jit.host_target_info, target.cache_sizes, schedule.gemm_config, costing._host_machine]
    out += [getattr(vecmath, n) for n in dir(vecmath)
            if hasattr(getattr(vecmath, n), "cache_clear") and callable(getattr(vecmath, n))]
    return out


@contextlib.contextmanager
def reference_host():
    """Pretend to run on the reference host (see the module docstring)."""
    from svod import costing
    from svod.codegen import jit, target

    saved = (jit.host_target_info, target.cache_sizes, costing._host_machine, os.environ.get("SVOD_PROFILE"))
    for f in _cached_host_functions():
        f.cache_clear()
    jit.host_target_info = functools.cache(lambda: dict(_HOST))
    target.cache_sizes = functools.cache(lambda: (32 << 10, 512 << 10, 32 << 20))
    host = costing.Machine(name="host", cores=2, vector_bits=256, flops_per_core=costing.Machine.flops_per_core / 2)
    costing._host_machine = functools.lru_cache(maxsize=1)(lambda: host)
    os.environ["SVOD_PROFILE"] = str(PROFILE)
    libmvec = jit.libmvec_enabled()
    jit.set_libmvec_enabled(False)
    try:
        yield
    finally:
        jit.set_libmvec_enabled(None if libmvec == jit.has_libmvec() else libmvec)
        jit.host_target_info, target.cache_sizes, costing._host_machine = saved[:3]
        if saved[3] is None:
            os.environ.pop("SVOD_PROFILE", None)
        else:
            os.environ["SVOD_PROFILE"] = saved[3]
        for f in _cached_host_functions():
            f.cache_clear()


def _features_text(kernel) -> str:
    from costmodels.features import _count

    f = _count(kernel)
    rows = []
    for fld in dataclasses.fields(f):
        v = getattr(f, fld.name)
        if isinstance(v, dict):
            v = "{" + ", ".join(f"{k}: {v[k]!r}" for k in sorted(v)) + "}"
        rows.append(f"  {fld.name} = {v!r}" if not isinstance(v, str) or not v.startswith("{") else
                    f"  {fld.name} = {v}")
    return "\n".join(rows)


def workload_text(name: str, small: bool) -> str:
    """The snapshot text of one workload at its small or default shapes."""
    from svod import engine, workloads
    from svod.codegen.lower import lower_kernel

    w = workloads.get(name)
    shapes = w.small_shapes if small else w.default_shapes
    # NOTE: inputs are zero-filled placeholders: plans depend on shapes and dtypes only
    import numpy as np

    import svod

    arrays = {k: np.zeros(s, np.float32) for k, s in shapes.items()}
    with svod.eager_mode(False):  # the snapshot is of the planner's plans: small shapes too build a graph
        out = w.build(**w.tensors(arrays))
    outs = out if isinstance(out, tuple) else (out,)
    engine.reset_caches()
    key, exe = engine.plan_for(list(outs))
    parts = [f"# {name} {'small' if small else 'default'} {shapes}", f"key {key.hash}", exe.describe()]
    plan = getattr(exe, "plan", None)
    for i, k in enumerate(plan.kernels if plan is not None else ()):
        parts.append(f"## kernel {i}: {k.name}\n### features\n{_features_text(k)}")
        try:
            ir_text = lower_kernel(k).ir
        except Exception as e:  # noqa: BLE001 - library steps and the like have no IR
            ir_text = f"(no IR: {type(e).__name__}: {e})"
        parts.append("### ir\n" + ir_text)
    return "\n".join(parts) + "\n"


def snapshot() -> dict[str, str]:
    """file name -> text, for every workload at both shape sets."""
    from svod import workloads

    out = {}
    with reference_host():
        for name in workloads.names():
            for small in (True, False):
                out[f"{name}.{'small' if small else 'default'}.txt"] = workload_text(name, small)
    return out


def main(argv: list[str]) -> int:
    os.environ.setdefault("SVOD_CACHE_DIR", tempfile.mkdtemp(prefix="svod-snapshot-"))
    texts = snapshot()
    if "--write" in argv:
        GOLDEN.mkdir(parents=True, exist_ok=True)
        for old in GOLDEN.glob("*.txt"):
            old.unlink()
        for fname, text in texts.items():
            (GOLDEN / fname).write_text(text)
        print(f"wrote {len(texts)} files to {GOLDEN}")
        return 0
    bad = [f for f, t in texts.items() if not (GOLDEN / f).exists() or (GOLDEN / f).read_text() != t]
    print("\n".join(bad) or "snapshot identical")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
