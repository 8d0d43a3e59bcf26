"""bench/bench_mlp.py on the small shapes: each contender in its own one-thread process,
checked against numpy; the table, the breakdown and the JSON (no timing assertions: the
machine is shared)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "bench", "bench_mlp.py")


def _run(tmp_path, *args):
    env = dict(os.environ, SVOD_CACHE_DIR=str(tmp_path / "cache"))
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=300)


def test_small_run_checks_and_reports_each_contender_per_core(tmp_path):
    out = tmp_path / "mlp.json"
    p = _run(tmp_path, "--small", "--rounds", "2", "--repeats", "2", "--only", "svod,numpy", "--json", str(out))
    assert p.returncode == 0, p.stdout + p.stderr
    res = json.loads(out.read_text())
    assert sorted(res) == ["numpy", "svod"]
    for who, runs in res.items():
        assert len(runs) == 2, who  # one process per round
        for r in runs:
            assert r["ok"] and r["err"] < 1e-4, r
            assert len(r["cpu"]) == len(r["wall"]) == 2 and all(t > 0 for t in r["cpu"])
    svod_runs = res["svod"]
    assert svod_runs[0]["peak"] > 0
    # the breakdown: every kernel of svod's plan, then the first product without its epilogue
    bd = svod_runs[0]["breakdown"]
    assert len(bd) >= 2 and bd[-1][0].startswith("x @ W1 alone")
    assert "breakdown" not in svod_runs[1]  # only the first round's svod process breaks down
    assert "| svod (svod.jit) |" in p.stdout and "| numpy " in p.stdout and "PASS" in p.stdout
    assert "FAIL" not in p.stdout


def test_bad_arguments_are_one_line_errors(tmp_path):
    p = _run(tmp_path, "--only", "svod,nope")
    assert p.returncode == 2 and "unknown contender" in p.stderr and "Traceback" not in p.stderr
    p = _run(tmp_path, "--rounds", "0")
    assert p.returncode == 2 and "must be positive" in p.stderr


def test_kind_ab_times_the_mlp_kernel_against_two_gemms(tmp_path):
    """--kind-ab: both plans lowered with their boundaries forced, checked against numpy,
    one row each in the table."""
    p = _run(tmp_path, "--kind-ab", "--small", "--repeats", "2", "--threads", "1")
    assert p.returncode == 0, p.stdout + p.stderr
    rows = [ln for ln in p.stdout.splitlines() if ln.startswith("| ") and "plan" not in ln]
    assert [r.split("|")[2].strip() for r in rows] == ["mlp", "matmul+matmul"], p.stdout


def test_switch_ab_runs_a_workload_with_the_kind_on_and_off(tmp_path, monkeypatch):
    # the MLP kind alone: at these small shapes the rmsnorm kind (search/kinds.py) prices
    # rmsnorm(x) @ W1 as one kernel below the MLP kernel (docs/algebra.md)
    monkeypatch.setenv("SVOD_FUSE_RMSNORM", "0")
    p = _run(tmp_path, "--switch-ab", "residual_rmsnorm_mlp", "--small", "--rounds", "1", "--repeats", "2",
             "--threads", "1")
    assert p.returncode == 0, p.stdout + p.stderr
    rows = [ln.split("|") for ln in p.stdout.splitlines() if ln.startswith("| 1 ") or ln.startswith("| 0 ")]
    assert [(r[1].strip(), r[2].strip(), r[5].strip()) for r in rows] == [
        ("1", "rowwise+mlp", "PASS"), ("0", "rowwise+matmul+matmul", "PASS")], p.stdout
