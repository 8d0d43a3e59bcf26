"""The lowering as a stage (svod/lower/): named plan passes in a listed order, Plan.check
between them under SVOD_VALIDATE, the boundary helpers defined once and shared by the
search, the oracle, the greedy planner and why-not-fused, and a worklist that lowers deep
expressions without Python recursion."""

from __future__ import annotations

import ast
import dataclasses
import pathlib
import sys
import warnings

import numpy as np
import pytest

import svod
from svod.interp import eval_key, run_plan
from svod.kernel import KernelError, KNode
from svod.key import compact
from svod.lower import PLAN_PASSES, PlanPass, initial_materialized, lower
from svod.lower import build as build_mod
from svod.lower.attention import softmax_input

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _x(*shape, seed=0):
    return svod.asarray(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def _attention_key():
    q, k, v = _x(2, 16, 8), _x(2, 32, 8, seed=1), _x(2, 32, 32, seed=2)
    key, b = compact([svod.nn.scaled_dot_product_attention(q, k, v).uop])
    return key, b


def _greedy_choice(key):
    from svod.lower import greedy_boundaries

    return greedy_boundaries(key)


def test_passes_are_listed_named_and_ordered():
    assert [p.name for p in PLAN_PASSES] == ["sibling merge", "attention fusion", "row-column fusion"]
    assert all(isinstance(p, PlanPass) and callable(p.run) for p in PLAN_PASSES)
    assert PLAN_PASSES[1].switch == "SVOD_FUSE_ATTENTION" and PLAN_PASSES[0].switch is None
    assert PLAN_PASSES[2].switch == "SVOD_FUSE_ROWCOL" and PLAN_PASSES[2].planners is None


def test_attention_fusion_is_a_pass_of_the_lowering(monkeypatch):
    key, b = _attention_key()
    fused = lower(key, _greedy_choice(key))
    assert [k.kind for k in fused.kernels] == ["attention"]
    unfused = lower(key, _greedy_choice(key), passes=PLAN_PASSES[:1])
    assert [k.kind for k in unfused.kernels] == ["blas", "rowwise", "blas"]
    monkeypatch.setenv("SVOD_FUSE_ATTENTION", "0")
    assert [k.kind for k in lower(key, _greedy_choice(key)).kernels] == ["blas", "rowwise", "blas"]
    for plan in (fused, unfused):
        for got, want in zip(run_plan(plan, b.arrays), eval_key(key, b.arrays)):
            np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)


def test_merge_siblings_false_leaves_the_merge_pass_out():
    x = _x(5, 7)
    key, _ = compact([x.mean(axis=1).uop, (x * x).sum(axis=1).uop])
    assert len(lower(key, initial_materialized(key)).kernels) == 1
    assert len(lower(key, initial_materialized(key), merge_siblings=False).kernels) == 2


def _drop_first_kernel(plan):
    return dataclasses.replace(plan, kernels=plan.kernels[1:])


def test_a_broken_pass_is_caught_between_passes_under_validate(monkeypatch):
    x = _x(8, 16)
    key, _ = compact([svod.exp(svod.nn.softmax(x).contiguous()).uop])  # two kernels: dropping one breaks it
    broken = PlanPass("drop a kernel", _drop_first_kernel)
    monkeypatch.setenv("SVOD_VALIDATE", "1")
    with pytest.raises(KernelError, match="after the plan pass 'drop a kernel' is invalid"):
        lower(key, initial_materialized(key), passes=PLAN_PASSES + (broken,))
    monkeypatch.setenv("SVOD_VALIDATE", "0")
    plan = lower(key, initial_materialized(key), passes=PLAN_PASSES + (broken,))  # unchecked: the bug goes through
    with pytest.raises(KernelError):
        plan.check()


def test_a_pass_that_raises_leaves_the_plan_with_one_warning():
    x = _x(8, 16)
    key, _ = compact([svod.nn.softmax(x).uop])

    def boom(plan):
        raise RuntimeError("boom")

    want = lower(key, initial_materialized(key))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        got = lower(key, initial_materialized(key), passes=PLAN_PASSES + (PlanPass("boom pass", boom),))
    assert str(got) == str(want)
    assert any("boom pass failed (RuntimeError: boom)" in str(m.message) for m in w)


def test_boundary_helpers_are_one_copy():
    import search
    import search.extract
    import search.oracle
    import svod.boundaries
    import svod.lower
    import svod.plan_greedy
    from svod.lower import cover

    assert search.extract.lower is search.oracle.lower is svod.plan_greedy.lower is svod.lower.lower
    assert search.const_like is svod.boundaries.const_like is cover.const_like
    assert search.extract.candidates is search.oracle.candidates is cover.candidates
    assert search.extract.subsets is search.oracle.subsets is cover.subsets
    assert search.extract.initial_materialized is search.oracle.initial_materialized is cover.initial_materialized
    assert search.extract.greedy_boundaries is svod.plan_greedy.greedy_boundaries is cover.greedy_boundaries
    # and no other module defines them again
    owned = {"_const_like", "const_like", "initial_materialized", "greedy_materialized", "shared_heavy",
             "candidates", "subsets"}
    again = []
    for pkg in ("svod", "search"):
        for f in sorted((ROOT / pkg).rglob("*.py")):
            rel = f.relative_to(ROOT).as_posix()
            if rel in ("svod/lower/cover.py", "svod/lower/__init__.py") or rel.startswith("svod/codegen/"):
                continue
            for node in ast.walk(ast.parse(f.read_text())):
                if isinstance(node, ast.FunctionDef) and node.name in owned:
                    again.append(f"{rel}: {node.name}")
    assert not again, again


def test_oracle_and_extraction_agree_on_the_choices():
    from search.extract import boundaries
    from search.oracle import choices

    x, w = _x(16, 8), _x(8, 4)
    key, _ = compact([svod.nn.gelu(x @ w + 1.0).uop])
    every_edge = {(u, i) for i, us in enumerate(key.users()) for u in us}
    fixed, free = boundaries(key, every_edge)
    assert free == choices(key) and not set(free) & fixed


@pytest.mark.parametrize("cap", [None, 10_000])
def test_a_3000_op_chain_lowers_without_recursion(monkeypatch, cap):
    """3,000 elementwise ops: cut every MAX_DEPTH ops by default, or one kernel 3,000 deep
    when the caps allow it — either way without touching the recursion limit."""
    from svod import tensor

    monkeypatch.setattr(tensor, "PENDING_DEPTH", 0)  # the frontend must not realize parts of the chain
    y = _x(4, 8)
    for i in range(3000):
        y = y * 1.0001 if i % 3 else y + 0.25
    key, b = compact([y.uop])
    if cap is not None:
        monkeypatch.setattr(build_mod, "MAX_DEPTH", cap)
        monkeypatch.setattr(build_mod, "MAX_BODY", cap)
    limit = sys.getrecursionlimit()
    monkeypatch.setattr(sys, "setrecursionlimit", lambda n: pytest.fail("the lowering set the recursion limit"))
    monkeypatch.setenv("SVOD_VALIDATE", "0")  # checking a 3,000-node body is the codegen tests' business
    plan = lower(key, initial_materialized(key))
    assert sys.getrecursionlimit() == limit
    if cap is None:
        assert len(plan.kernels) >= 3000 // (build_mod.MAX_DEPTH + 1)
    else:
        assert len(plan.kernels) == 1 and len(plan.kernels[0].nodes) > 3000
    got = run_plan(plan, b.arrays)[0]
    np.testing.assert_allclose(got, eval_key(key, b.arrays)[0], rtol=1e-4)


def test_deep_chain_body_is_the_same_as_a_short_walk():
    """The worklist visits sources left to right, depth first: a diamond's shared value is
    emitted once, before both users (local CSE through the memo)."""
    x = _x(4, 8)
    s = svod.exp(x)
    key, _ = compact([(svod.sin(s) + svod.cos(s)).uop])
    (k,) = lower(key, initial_materialized(key)).kernels
    ops = [n.op.value if hasattr(n.op, "value") else n.op for n in k.nodes]
    assert ops == ["LOAD", "EXP", "SIN", "COS", "ADD"]


def test_softmax_is_matched_by_structure_not_position():
    key, _ = _attention_key()
    plan = lower(key, _greedy_choice(key), passes=PLAN_PASSES[:1])
    sm = plan.kernels[1]
    t = softmax_input(sm)
    assert t is not None
    # a dead elementwise node after the softmax: the five nodes are no longer the last five
    moved = dataclasses.replace(sm, nodes=sm.nodes + (KNode(svod.ir.Ops.CONST, sm.nodes[t].dtype, (), 2.0),))
    assert softmax_input(moved) == t
    # a node reading the softmax's max is not a row softmax any more
    mx = next(i for i, n in enumerate(sm.nodes) if n.op is svod.ir.Ops.REDUCE and n.arg == "max")
    bad = dataclasses.replace(sm, nodes=sm.nodes + (KNode(svod.ir.Ops.NEG, sm.nodes[t].dtype, (mx,)),))
    assert softmax_input(bad) is None
