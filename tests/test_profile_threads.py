"""The reference profile on a machine of another size: thread counts follow the pool.

The shipped reference profile was measured on 2 cores. On an uncalibrated machine the
planner used it as it is, so every split kernel got 2 threads on a 16-core Xeon
(bench_scaling: W1/W2 flat from 1 to 16 threads; bench_kernels: full reductions at 21%
of the read probe). `costmodels.profile.host_reference` scales it to the pool.
"""

from __future__ import annotations

import pytest

from costmodels.analytic import CalibratedModel
from costmodels.profile import host_reference, reference
from svod.costing import Machine
from svod.kernel_examples import softmax_kernel


@pytest.mark.parametrize("threads", [1, 2, 4, 16])
def test_the_reference_scaled_to_a_pool_splits_a_big_kernel_over_the_whole_pool(threads):
    p = host_reference(threads)
    assert p.cores == threads
    price = CalibratedModel(p).price(softmax_kernel(4096, 4096), Machine.host())
    assert price.threads == threads  # a 64 MB softmax splits on any pool, over all of it


def test_scaling_keeps_the_measured_profile_at_its_own_size_and_extends_its_gains():
    ref = reference()
    assert host_reference(ref.cores).data == ref.data  # the measured size: unchanged
    one, big = host_reference(1), host_reference(16)
    assert one.compute_scaling == 1.0
    assert ref.compute_scaling < big.compute_scaling <= 16
    mm, mm16 = ref.data["matmul_flops"], big.data["matmul_flops"]
    assert mm16["native2:1024"] > mm["native2:1024"] and mm16["native2:1024"] <= 16 * mm["native"]
    assert big.id != ref.id  # another plan generation: plans priced for 2 threads are not reused
    assert "scaled to 16 threads" in big.source


def test_a_small_kernel_stays_on_one_thread_on_a_big_pool():
    price = CalibratedModel(host_reference(16)).price(softmax_kernel(8, 64), Machine.host())
    assert price.threads == 1


def test_an_uncalibrated_process_plans_its_kernels_on_its_whole_pool(tmp_path):
    """End to end, in a fresh process with a pool of 4 (SVOD_THREADS=4, any machine) and
    an empty store: the profile is the scaled reference and the planned elementwise
    kernel of 16M floats runs on 4 threads."""
    import json
    import os
    import subprocess
    import sys
    import textwrap
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    code = textwrap.dedent("""
        import json, numpy as np, svod
        from svod import engine
        from costmodels.profile import profile
        x = svod.asarray(np.ones(1 << 24, np.float32))
        y = svod.exp(x) * 2.0 + 1.0
        key, exe = engine.plan_for([y])
        print(json.dumps({"cores": profile().cores, "source": profile().source,
                          "threads": sorted(exe.thread_map().values())}))
    """)
    env = {k: v for k, v in os.environ.items() if k not in ("SVOD_MACHINE_PROFILE", "SVOD_PROFILE")}
    env.update(PYTHONPATH=str(root), SVOD_CACHE_DIR=str(tmp_path), SVOD_THREADS="4", SVOD_TIERED="0")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=root, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["cores"] == 4 and got["source"].startswith("reference"), got
    assert got["threads"] == [4], got
