"""The command line and explain: usage errors, messages without tracebacks, outputs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import svod

ROOT = Path(__file__).resolve().parents[1]


def _svod(*args, cwd=ROOT, env_extra=None):
    env = dict(os.environ, PYTHONPATH=str(ROOT), **(env_extra or {}))
    return subprocess.run([sys.executable, "-m", "svod", *args], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=300)


def test_help_and_usage_errors():
    r = _svod("--help")
    assert r.returncode == 0 and "demo" in r.stdout and "explain" in r.stdout
    for cmd in ("demo", "explain", "cache"):
        assert _svod(cmd, "--help").returncode == 0
    r = _svod("bogus")
    assert r.returncode == 2 and "invalid choice" in r.stderr
    assert _svod("cache", "wipe").returncode == 2


def test_explain_a_script(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text("import svod\nx = svod.random.randn(8, 16)\nprint(float(svod.nn.softmax(x).sum()))\n")
    r = _svod("explain", str(script), "--variants", "3", env_extra={"SVOD_CACHE_DIR": str(tmp_path / "c")})
    assert r.returncode == 0, r.stderr
    assert "graph 0" in r.stdout and "saturation" in r.stdout and "variants" in r.stdout


def test_explain_bad_scripts_give_messages_not_tracebacks(tmp_path):
    r = _svod("explain", str(tmp_path / "missing.py"))
    assert r.returncode == 1 and "no such file" in r.stderr and "Traceback" not in r.stderr
    bad = tmp_path / "bad.py"
    bad.write_text("raise RuntimeError('boom')\n")
    r = _svod("explain", str(bad))
    assert r.returncode == 1 and "RuntimeError: boom" in r.stderr and "Traceback" not in r.stderr


def test_cache_info_and_clear(tmp_path):
    env = {"SVOD_CACHE_DIR": str(tmp_path / "c"), "SVOD_DISK_CACHE_MB": "64", "SVOD_PLAN_CACHE_ENTRIES": "99"}
    r = _svod("cache", "info", env_extra=env)
    assert r.returncode == 0, r.stderr
    for line in ("plan cache:   0 plans, 0 B (bounds 99 plans", "programs:", "jit traces:", "replay table:",
                 "buffer pool:", "bounded at 64.0 MiB"):
        assert line in r.stdout, r.stdout
    r = _svod("cache", "clear", env_extra=env)
    assert r.returncode == 0 and "cleared" in r.stdout


def test_explain_object(tmp_path):
    x = svod.random.randn(16, 32)
    e = svod.explain(svod.nn.softmax(x * 2.0))
    assert len(e.kernels) == 1 and e.variants and e.variants[0].seconds <= e.variants[-1].seconds
    text = str(e)
    assert "saturation" in text and "chosen" in text
    # the chosen plan's kernels with their prices in the plan and each buffer's reach
    big = svod.explain(svod.nn.softmax(svod.random.randn(512, 1024) * 2.0))
    table = big.costs_table()
    assert "costs of the chosen plan" in str(big) and "reach" in table
    rows = table.splitlines()[1:]
    assert len(rows) == len(big.kernels)
    total = sum(float(r.split()[1].rstrip("us")) for r in rows) * 1e-6
    assert total == pytest.approx(big.variants[0].seconds, rel=1e-3)
    assert e.to_dot().startswith("digraph")
    assert "define" in e.ir(0)
    out = e.picture(str(tmp_path / "eg.svg"))
    assert out.startswith("digraph") or Path(out).exists()
    with pytest.raises(ValueError, match="already realized"):
        y = svod.exp(x)
        y.realize()
        svod.explain(y)


# ----------------------------------------------------------------------------- bad arguments: one line, exit 2

BAD_ARGUMENTS = [
    (["demo", "--rows", "0"], "--rows: must be a positive integer, got 0"),
    (["demo", "--cols", "-5"], "--cols: must be a positive integer"),
    (["demo", "--repeats", "many"], "--repeats: expected an integer, got 'many'"),
    (["explain", "prog.py", "--variants", "-3"], "--variants: must be a positive integer, got -3"),
    (["explain", "prog.py", "--max-graphs", "0"], "--max-graphs: must be a positive integer"),
    (["explain"], "required: file"),
    (["viz"], "required: file"),
    (["viz", "prog.py", "--port", "70000"], "--port: must be a port number"),
    (["viz", "prog.py", "--max-graphs", "0"], "--max-graphs: must be a positive integer"),
    (["cache", "clear", "--kind", "bogus"], "--kind: invalid choice: 'bogus'"),
    (["cache", "wipe"], "invalid choice: 'wipe'"),
    (["bench", "--repeats", "0"], "--repeats: must be a positive integer, got 0"),
    (["bench", "--only", "w99"], "--only"),
    (["tune", "w2_softmax", "-k", "0"], "-k: must be a positive integer, got 0"),
    (["tune", "w2_softmax", "--shapes", "x=0x5"], "zero dimension"),
    (["tune", "w2_softmax", "--repeats", "0"], "--repeats: must be a positive integer"),
    (["tune", "w2_softmax", "--oracle-choices", "-1"], "--oracle-choices: must be 0 or more"),
    (["tune", "no_such_workload"], "unknown workload 'no_such_workload'"),
    (["tune", "prog.py"], "give the input shapes with --shapes"),
    (["calibrate", "--budget", "0"], "--budget: must be a positive number of seconds"),
    (["calibrate", "--budget", "nan"], "--budget: expected a number"),
    (["costmodel", "report", "--max-variants", "1"], "--max-variants: must be at least 2"),
    (["costmodel", "report", "--doubt", "2"], "--doubt: must be between 0 and 1"),
    (["costmodel", "report", "--instances", "0"], "--instances: must be a positive integer"),
    (["costmodel", "report", "--workloads", "nope"], "unknown workload(s) nope"),
    (["costmodel", "rescore"], "required: report"),
    (["costmodel"], "required"),
    (["bogus"], "invalid choice: 'bogus'"),
    ([], "required"),
]


@pytest.mark.parametrize("argv, message", BAD_ARGUMENTS, ids=[" ".join(a) or "(none)" for a, _ in BAD_ARGUMENTS])
def test_bad_arguments_exit_2_with_one_line(argv, message, tmp_path, capsys, monkeypatch):
    from svod import cli

    monkeypatch.chdir(tmp_path)
    (tmp_path / "prog.py").write_text("import svod\n")
    monkeypatch.setenv("SVOD_CACHE_DIR", str(tmp_path / "c"))
    try:
        code = cli.main(argv)
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr()
    assert code == 2, (argv, out)
    lines = out.err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], (argv, out.err)
    assert lines[0].startswith("svod") and "Traceback" not in out.err and not out.out


def test_every_subcommand_is_in_the_table():
    from svod import cli

    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, __import__("argparse")._SubParsersAction))
    covered = {argv[0] for argv, _ in BAD_ARGUMENTS if argv}
    assert set(sub.choices) <= covered


def test_explain_says_what_max_graphs_left_out(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text("import svod\nx = svod.random.randn(8, 16)\nfor f in (svod.exp, svod.sin, svod.cos):\n"
                      "    f(x).numpy()\n")
    r = _svod("explain", str(script), "--max-graphs", "1", env_extra={"SVOD_CACHE_DIR": str(tmp_path / "c")})
    assert r.returncode == 0, r.stderr
    assert "2 more graph(s) not explained" in r.stdout and "--max-graphs 1" in r.stdout


def test_calibrate_peak_probe_is_quick_and_plausible(tmp_path):
    import json
    import time

    out = tmp_path / "peak.json"
    t0 = time.perf_counter()
    r = _svod("calibrate", "--peak", "--json", str(out))
    assert r.returncode == 0, r.stderr
    assert time.perf_counter() - t0 < 30  # the probe itself ~0.5-1 s; the rest is starting Python
    assert "FMA" in r.stdout and "DRAM" in r.stdout
    pk = json.loads(out.read_text())
    assert pk["vector_bits"] in (128, 256, 512) and pk["seconds"] < 5
    assert pk["fma_gflops_core"] > 1 and pk["fma_gflops"] > 1  # (shares of a busy machine vary: no ratio)
    assert pk["l2_gbps"] > 0 and pk["dram_gbps"] > 0
