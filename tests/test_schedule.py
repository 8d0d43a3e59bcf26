"""Codegen's decisions have one owner (svod/codegen/schedule.py): the emitter and the cost
features read the same `Schedule`, and changing a schedule constant moves both."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from costmodels import features as feat
from costmodels import stepprobes
from svod.codegen import lower, schedule
from svod.codegen.lower import lower_kernel
from svod.kernel_examples import matmul_bias_gelu_kernel, softmax_kernel

ROOT = Path(__file__).resolve().parent.parent


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out


def test_schedule_is_pure():
    """No llvmlite in the schedule or its target (not even in a function), and importing
    them loads none."""
    for name in ("schedule.py", "target.py"):
        mods = _imports(ROOT / "svod" / "codegen" / name)
        assert not any(m.split(".")[0] == "llvmlite" for m in mods), (name, mods)
    code = ("import sys, svod.codegen.schedule, svod.codegen.target; "
            "print(sorted(m for m in sys.modules if m.startswith('llvmlite')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


class _Spy:
    """Records the schedules a module's `schedule(...)` calls return."""

    def __init__(self):
        self.got = []

    def __call__(self, kernel, target=None):
        s = schedule.schedule(kernel, target)
        self.got.append(s)
        return s


def _corpus_kernels():
    """Every kernel of every named workload's plan at its small shapes on the snapshot's
    reference host (tests/snapshot.py)."""
    from svod import engine, workloads
    from tests.snapshot import reference_host

    out = []
    with reference_host():
        for name in workloads.names():
            w = workloads.get(name)
            arrays = {k: np.zeros(s, np.float32) for k, s in w.small_shapes.items()}
            res = w.build(**w.tensors(arrays))
            _, exe = engine.plan_for(list(res if isinstance(res, tuple) else (res,)))
            plan = getattr(exe, "plan", None)
            out += [(name, k) for k in (plan.kernels if plan is not None else ())]
    return out


def test_features_and_emitter_read_the_same_schedule(monkeypatch):
    """For every corpus kernel with native code, the Schedule the emitter lowers from is
    the object the cost features count over."""
    from tests.snapshot import reference_host

    kernels = _corpus_kernels()
    assert len(kernels) > 31
    seen = 0
    with reference_host():
        for name, k in kernels:
            spy_low, spy_feat = _Spy(), _Spy()
            monkeypatch.setattr(lower, "schedule", spy_low)
            monkeypatch.setattr(feat, "schedule", spy_feat)
            f = feat._count(k)
            if k.library is not None or (k.matmul is not None and k.matmul.library):
                continue  # numpy's code: nothing emitted
            low = lower_kernel(k)
            assert len(spy_low.got) == 1 and len(spy_feat.got) == 1, name
            assert spy_low.got[0] is spy_feat.got[0], name
            assert low.units == f.units == spy_low.got[0].loops.units, name
            seen += 1
    assert seen > 31


def _both(kernel):
    schedule.clear_cache()
    return lower_kernel(kernel).ir, feat._count(kernel)


def test_a_stash_constant_moves_ir_and_features(monkeypatch):
    k = softmax_kernel(16, 256)
    ir0, f0 = _both(k)
    assert "stash" in ir0 and f0.ops["EXP"] == 16 * 256
    monkeypatch.setattr(schedule, "STASH_ELEMS", 128)
    ir1, f1 = _both(k)
    assert "stash" not in ir1 and f1.ops["EXP"] == 2 * 16 * 256  # recomputed in the last pass
    schedule.clear_cache()


def test_a_chunk_constant_moves_ir_and_features(monkeypatch):
    k = stepprobes.one_kernel(lambda x: x * 2.0 + 1.0, (1 << 14,), dtype=np.float32)
    ir0, f0 = _both(k)
    assert f0.units == (1 << 14) // schedule.CHUNK
    monkeypatch.setattr(schedule, "CHUNK", 1024)
    ir1, f1 = _both(k)
    assert f1.units == 16 and re.search(r"mul i64 %\S+, 1024\n", ir1) and not re.search(r"mul i64 %\S+, 1024\n", ir0)
    schedule.clear_cache()


def test_a_gemm_block_moves_ir_and_features(monkeypatch):
    """The GEMM tiling (a K block, unit tiles) is the schedule's: the emitted loops, the
    features' units and the B packing they count, and the roofline's GEMM price follow it."""
    from svod.costing import Machine, RooflineModel

    k = stepprobes._matmul_kernel(256, 512, 256, library=False, b_t=True)
    ir0, f0 = _both(k)
    g0 = schedule.plan_gemm(k)
    # (a third: the balanced K block is then an odd constant no other loop of the IR uses)
    monkeypatch.setenv("SVOD_GEMM", f"kc={g0.kc // 3},nt={g0.cfg.nr * 8},mt={g0.cfg.mr * 8}")
    ir1, f1 = _both(k)
    g1 = schedule.plan_gemm(k)
    assert g1.nkb >= 3 * g0.nkb and g1.units > g0.units
    assert re.search(rf"mul i64 %\S+, {g1.kc}\n", ir1) and not re.search(rf"mul i64 %\S+, {g1.kc}\n", ir0)
    assert f1.units == g1.units != f0.units and f1.b_packed == g1.batch * g1.tiles_m * 512 * 256 > f0.b_packed
    mach = Machine(cores=2, vector_bits=256)
    tiles = schedule.gemm_tiling(1, 256, 256, 512, 4, __import__("svod.costing").costing.gemm_target(mach))
    assert tiles.cfg.kc == g1.cfg.kc  # the price uses the same rule (and the override)
    assert RooflineModel().price(k, mach).seconds > 0
    monkeypatch.delenv("SVOD_GEMM")
    schedule.clear_cache()


@pytest.mark.parametrize("rows,cols", [(4, 8), (3, 100)])
def test_schedule_doc_facts(rows, cols):
    s = schedule.schedule(softmax_kernel(rows, cols))
    assert s.loops.units == rows and not s.column and s.inner_dim == 1
    assert s.per_row[0] is False and all(p in range(3) for p in s.stash.values())
    mm = schedule.schedule(matmul_bias_gelu_kernel(100, 300, 70))
    assert mm.gemm is not None and mm.loops.units == mm.gemm.units


def test_features_follow_the_emitters_loops_where_the_old_copy_did_not():
    """Two kernels whose features the copy of lower's rules counted wrong: a variance over
    axis 0 (two passes) is a column reduce reading its input once (Chan's merge), and a
    one-axis elementwise concat runs in chunks that are never cut at the masks."""
    import svod

    var0 = stepprobes.one_kernel(lambda x: svod.var(x, axis=0), (256, 64), dtype=np.float32)
    s, f = schedule.schedule(var0), feat._count(var0)
    assert s.column and f.column and f.access == {"contig": 256.0 * 64}
    cat = stepprobes.one_kernel(lambda x, y: svod.concat([x, y], axis=0) * 2.0, (100,), (60,), dtype=np.float32)
    s, f = schedule.schedule(cat), feat._count(cat)
    assert s.loops.chunk and s.elementwise_pieces() is None and f.access == {"masked": 320.0}
    cut = stepprobes.one_kernel(lambda x, y: svod.concat([x, y], axis=1) * 2.0, (8, 4), (8, 4), dtype=np.float32)
    s, f = schedule.schedule(cut), feat._count(cut)
    assert s.elementwise_pieces() == ((0, 4), (4, 8)) and f.access == {"contig": 128.0}


def _module_imports(root: Path, package: str) -> dict[str, set[str]]:
    """module -> svod modules it imports (function-level imports included)."""
    mods = {}
    for p in (root / package.replace(".", "/")).rglob("*.py"):
        name = ".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        mods[name] = p
    mods["svod.runtime"] = root / "svod" / "runtime.py"
    out = {}
    for name, p in mods.items():
        deps = set()
        for node in ast.walk(ast.parse(p.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            deps.update(n for n in names if n in mods and n != name)
        out[name] = deps
    return out


def test_codegen_and_runtime_have_no_import_cycle():
    """No cycle among svod/codegen/* and svod/runtime.py, counting imports inside
    functions (a lazy import that only hides a cycle is still one)."""
    graph = _module_imports(ROOT, "svod.codegen")
    state: dict[str, int] = {}

    def visit(m, path):
        state[m] = 1
        for d in sorted(graph[m]):
            assert state.get(d) != 1, f"import cycle: {' -> '.join(path + [m, d])}"
            if d not in state:
                visit(d, path + [m])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])
    assert "svod.codegen.lower" in graph and "svod.codegen.schedule" in graph["svod.codegen.lower"]
