"""Measured profiles (svod.profiler): one row per kernel of the plan realize() runs, times
positive, the values computed, the Chrome-trace JSON with the right events; SVOD_PROFILE=1
and the SVOD_PROFILE / SVOD_MACHINE_PROFILE split."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import svod
from svod import engine, flags

ROOT = Path(__file__).resolve().parents[1]


def test_profile_times_every_kernel_of_the_plan(tmp_path):
    rng = np.random.default_rng(0)
    x_np = rng.standard_normal((256, 512)).astype(np.float32)
    w_np = rng.standard_normal((512, 64)).astype(np.float32)
    x, w = svod.asarray(x_np), svod.asarray(w_np)
    y = svod.nn.gelu(svod.nn.layer_norm(x, (512,)) @ w)
    s = svod.nn.softmax(x, axis=0)
    _, exe = engine.plan_for([svod.nn.gelu(svod.nn.layer_norm(x, (512,)) @ w), svod.nn.softmax(x, axis=0)])
    path = tmp_path / "trace.json"
    p = svod.profile(y, s, repeats=3, trace=str(path))
    assert len(p.kernels) == len(exe.plan.kernels) >= 2
    assert [k.name for k in p.kernels] == [k.name for k in exe.plan.kernels]
    for k in p.kernels:
        assert k.seconds > 0 and k.best > 0 and k.best <= k.seconds
        assert k.bytes > 0 and k.gbps > 0 and k.predicted is not None and k.predicted > 0
        assert k.bandwidth_share is None or k.bandwidth_share > 0
    assert any(k.gflops > 0 for k in p.kernels) and p.runs == 3 and p.total > 0
    # the tensors are realized with the right values
    assert y.is_realized and s.is_realized
    ref = x_np - x_np.mean(1, keepdims=True)
    ref = ref / np.sqrt((ref * ref).mean(1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(y.numpy(), svod.nn.gelu(svod.asarray(ref @ w_np)).numpy(), rtol=2e-3, atol=2e-3)
    e = np.exp(x_np - x_np.max(0))
    np.testing.assert_allclose(s.numpy(), e / e.sum(0), rtol=1e-5, atol=1e-6)
    text = p.table()
    assert all(k.name[:14] in text for k in p.kernels) and "GB/s" in text and "predicted" in text
    # the trace: JSON with the graph's steps, the compile span, thread names
    doc = json.loads(path.read_text())
    events = doc["traceEvents"]
    cats = {e.get("cat") for e in events}
    assert {"kernel", "step", "compile", "run", "search"} <= cats
    launches = [e for e in events if e.get("cat") == "kernel"]
    assert len(launches) == len(p.kernels) and all(e["ph"] == "X" and e["dur"] >= 0 for e in launches)
    steps = {e["name"].split()[0] for e in events if e.get("cat") == "step"}
    assert "Allocate" in steps and "Free" in steps
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert "MainThread" in names
    par = [e for e in events if e.get("cat") == "slice"]
    if any(k.threads > 1 for k in p.kernels):  # each slice on the pool thread that ran it
        assert par and {e["tid"] for e in par} <= {e["tid"] for e in events if e["ph"] == "M"}
        assert any(n.startswith("svod-worker") for n in names)


def test_profile_bad_input():
    with pytest.raises(TypeError, match="svod.profile"):
        svod.profile(np.ones(3))
    x = svod.exp(svod.asarray([1.0]))
    with pytest.raises(ValueError, match="repeats"):
        svod.profile(x, repeats=0)
    x.realize()
    with pytest.raises(ValueError, match="already realized"):
        svod.profile(x)


def test_profile_switch_and_machine_profile_path(monkeypatch):
    for v, on in (("1", True), ("true", True), ("0", False), ("", False), ("p.json", False)):
        monkeypatch.setenv("SVOD_PROFILE", v)
        assert flags.profile_switch() is on
    monkeypatch.delenv("SVOD_MACHINE_PROFILE", raising=False)
    monkeypatch.setenv("SVOD_PROFILE", "tests/machine_profile.json")
    assert flags.machine_profile_path() == "tests/machine_profile.json"  # the old spelling
    monkeypatch.setenv("SVOD_PROFILE", "1")
    assert flags.machine_profile_path() is None
    monkeypatch.setenv("SVOD_MACHINE_PROFILE", "m.json")
    assert flags.machine_profile_path() == "m.json"


def test_svod_profile_env_prints_kernels_and_writes_the_timeline(tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text("import svod\nx = svod.random.randn(128, 256)\n"
                    "print(round(float(svod.nn.softmax(x * 2).sum())))\n"
                    "print((x @ svod.random.randn(256, 32)).numpy().shape)\n")
    trace = tmp_path / "t.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT), SVOD_PROFILE="1", SVOD_TRACE=str(trace),
               SVOD_CACHE_DIR=str(tmp_path / "c"))
    env.pop("SVOD_MACHINE_PROFILE", None)
    r = subprocess.run([sys.executable, str(prog)], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["128", "(128,", "32)"]
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("svod profile ") and "GB/s" in ln]
    assert len(lines) >= 2 and any("blas" in ln or "matmul" in ln for ln in lines)
    doc = json.loads(trace.read_text())
    assert sum(1 for e in doc["traceEvents"] if e.get("cat") == "kernel") == len(lines)
