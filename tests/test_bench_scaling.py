"""bench/bench_scaling.py in --quick mode on 1 and 2 threads: the table and JSON structure
(no timing assertions: the machine is shared)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "bench", "bench_scaling.py")


def _module():
    spec = importlib.util.spec_from_file_location("bench_scaling", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("scaling") / "scaling.json"
    env = dict(os.environ, SVOD_CACHE_DIR=str(tmp_path_factory.mktemp("cache")))
    p = subprocess.run([sys.executable, SCRIPT, "--quick", "--threads", "1,2", "--repeats", "1", "--inner", "1",
                        "--json", str(out)], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout, json.loads(out.read_text())


def test_quick_run_reports_every_case_at_every_thread_count(quick_run):
    text, res = quick_run
    assert res["threads"] == [1, 2] and res["quick"] is True
    cases = ["w1_elementwise", "w2_softmax", "w4_mlp", "w5_attention", "gemm"]
    assert [(r["case"], r["threads"]) for r in res["rows"]] == [(c, t) for c in cases for t in (1, 2)]
    for r in res["rows"]:
        assert r["check"], r
        assert r["seconds"] > 0 and r["speedup"] > 0 and r["ceiling_speedup"] > 0
        assert r["other_load"] != r["other_load"] or 0 <= r["other_load"] <= 1  # NaN: no /proc/stat
        assert abs(r["efficiency"] - r["speedup"] / r["threads"]) < 1e-12
        assert ("gbps" in r) == (r["case"] in ("w1_elementwise", "w2_softmax"))
        if "gbps" in r:
            assert r["probe_share"] > 0 and r["read_probe_gbps"] > 0
        else:
            assert r["gflops"] > 0
    one = [r for r in res["rows"] if r["threads"] == 1]
    assert all(r["speedup"] == 1.0 for r in one)
    # each thread count ran in its own process with the pool sized to it
    assert [run["threads"] for run in res["raw"]["1"]] == [1] and [run["threads"] for run in res["raw"]["2"]] == [2]
    assert all(r["kernels"] and all(isinstance(k, str) for k in r["kernels"]) for r in one)
    for r in res["rows"]:
        assert r["label"] in text
    assert "vs ceiling" in text and "GFLOP/s" in text and "other load" in text


def test_bad_thread_list_is_refused():
    mod = _module()
    with pytest.raises(SystemExit):
        mod.main(["--threads", "0,2"])
    assert mod._int_list("4,1,2,2") == [1, 2, 4]
