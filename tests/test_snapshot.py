"""Structure safety net: plans, kernel IR and cost features of every named workload are
byte-identical to `tests/golden/snapshot/` (see tests/snapshot.py for the reference host
and how to regenerate after an intended change)."""

from __future__ import annotations

import difflib
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_snapshot_is_unchanged(tmp_path):
    # a process of its own: a fresh persistent cache and tuning database, no state of other tests
    env = dict(os.environ, PYTHONPATH=str(ROOT), SVOD_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("SVOD_SEARCH_SECONDS", None)
    proc = subprocess.run([sys.executable, "-c", "import tests.snapshot as s, json, sys; "
                           "json.dump(s.snapshot(), sys.stdout)"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    import json

    texts = json.loads(proc.stdout)
    golden = ROOT / "tests" / "golden" / "snapshot"
    assert sorted(texts) == sorted(p.name for p in golden.glob("*.txt")), "workloads added or removed: regenerate"
    diffs = []
    for name, text in sorted(texts.items()):
        want = (golden / name).read_text()
        if text != want:
            diff = difflib.unified_diff(want.splitlines(), text.splitlines(), "golden/" + name, "now/" + name,
                                        lineterm="", n=2)
            diffs.append("\n".join(list(diff)[:40]))
    assert not diffs, ("the snapshot changed (regenerate with `PYTHONPATH=. python3 -m tests.snapshot --write` "
                       "only if the change is intended):\n" + "\n\n".join(diffs[:5]))
