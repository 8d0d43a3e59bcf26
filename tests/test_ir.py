"""The UOp graph: hash-consing, weak collection, stable content hashes, iterative walks."""

from __future__ import annotations

import gc
import subprocess
import sys

import numpy as np

from svod import dtype as d
from svod.ir import Ops, UOp, live_nodes, substitute, toposort


def _chain(n: int) -> UOp:
    x = UOp.const(1.0, d.float32)
    one = UOp.const(1.0, d.float32)
    for _ in range(n):
        x = UOp(Ops.ADD, d.float32, (x, one))
    return x


def test_same_structure_same_object():
    a = UOp.const(2.0, d.float32)
    b = UOp.const(2.0, d.float32)
    assert a is b
    assert UOp(Ops.MUL, d.float32, (a, b)) is UOp(Ops.MUL, d.float32, (a, a))


def test_constants_keep_sign_type_and_nan_apart():
    assert UOp.const(0.0, d.float32) is not UOp.const(-0.0, d.float32)
    assert UOp.const(1, d.int64) is not UOp.const(1.0, d.float64)
    assert UOp.const(True, d.bool_) is not UOp.const(1, d.int64)
    assert UOp.const(float("nan"), d.float32) is UOp.const(float("nan"), d.float32)


def test_buffers_are_distinct_leaves():
    arr = np.zeros(3, np.float32)
    assert UOp.buffer(arr, d.float32) is not UOp.buffer(arr, d.float32)


def test_live_count_falls_after_gc():
    gc.collect()
    before = live_nodes()
    x = _chain(500)
    assert live_nodes() >= before + 500
    del x
    gc.collect()
    assert live_nodes() <= before + 2


def test_shapes_are_inferred():
    x = UOp.buffer(np.zeros((2, 3), np.float32), d.float32)
    assert UOp(Ops.PERMUTE, d.float32, (x,), (1, 0)).shape == (3, 2)
    assert UOp(Ops.REDUCE, d.float32, (x,), ("sum", (1,))).shape == (2, 1)
    assert UOp(Ops.PAD, d.float32, (x,), (((1, 0), (0, 2)), 0.0)).shape == (3, 5)
    assert UOp(Ops.CAT, d.float32, (x, x), 1).shape == (2, 6)


def test_content_hash_stable_across_processes():
    code = ("from svod.ir import UOp, Ops; from svod import dtype as d\n"
            "a = UOp.const(3.5, d.float32); b = UOp(Ops.EXP, d.float32, (a,))\n"
            "print(UOp(Ops.RESHAPE, d.float32, (b,), (1, 1)).content_hash)")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env={"PYTHONHASHSEED": str(seed), "PATH": ""}, check=True).stdout
            for seed in (1, 2)}
    assert len(outs) == 1


def test_deep_chain_walks_without_recursion():
    x = _chain(100_000)
    order = toposort([x])
    assert len(order) == 100_002 - 1  # 100k adds + x0 const (the `one` const is shared)
    assert order[-1] is x
    mapping = {x.src[0]: UOp.const(5.0, d.float32)}
    (y,) = substitute([x], mapping)
    assert y.src[0] is mapping[x.src[0]]
    del x, y, order, mapping
    gc.collect()


def test_toposort_is_deterministic_and_sources_first():
    a = UOp.const(1.0, d.float32)
    b = UOp(Ops.EXP, d.float32, (a,))
    c = UOp(Ops.ADD, d.float32, (b, a))
    order = toposort([c])
    pos = {id(n): i for i, n in enumerate(order)}
    for n in order:
        for s in n.src:
            assert pos[id(s)] < pos[id(n)]
    assert [n.op for n in toposort([c])] == [n.op for n in order]
