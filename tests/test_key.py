"""compact(): equal keys under renaming and new data, different keys under every
structural change."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import svod
from svod.key import GraphKey, compact


def _key(fn, *arrays):
    ts = [svod.asarray(a) for a in arrays]
    outs = fn(*ts)
    outs = outs if isinstance(outs, tuple) else (outs,)
    return compact([t.uop for t in outs])[0]


def _f(x, y):
    return svod.exp(x) * y + 1.0


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 5), st.integers(1, 5), st.integers(0, 1000))
def test_equal_keys_for_new_data_and_new_ids(r, c, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((r, c)).astype(np.float32)
    b = rng.standard_normal((r, c)).astype(np.float32)
    k1 = _key(_f, a, b)
    k2 = _key(_f, b + 1, a * 3)  # other data, other UOp identities
    assert k1 == k2 and k1.hash == k2.hash


def test_different_keys_for_every_structural_change():
    a = np.ones((3, 4), np.float32)
    base = _key(_f, a, a)
    variants = {
        "op": _key(lambda x, y: svod.log(x) * y + 1.0, a, a),
        "dtype": _key(_f, a.astype(np.float64), a.astype(np.float64)),
        "shape": _key(_f, np.ones((4, 3), np.float32), np.ones((4, 3), np.float32)),
        "constant": _key(lambda x, y: svod.exp(x) * y + 2.0, a, a),
        "wiring": _key(lambda x, y: svod.exp(x) * x + y, a, a),
        "wiring base": _key(lambda x, y: svod.exp(x) * y + x, a, a),
        "axis": _key(lambda x, y: (svod.exp(x) * y).sum(axis=0), a, a),
        "axis2": _key(lambda x, y: (svod.exp(x) * y).sum(axis=1), a, a),
        "signed zero": _key(lambda x, y: svod.exp(x) * y + -0.0, a, a),
        "zero": _key(lambda x, y: svod.exp(x) * y + 0.0, a, a),
    }
    hashes = {name: k.hash for name, k in variants.items()}
    hashes["base"] = base.hash
    assert len(set(hashes.values())) == len(hashes), hashes


def test_shared_input_differs_from_two_inputs():
    a = np.ones((3,), np.float32)
    x = svod.asarray(a)
    k_shared = compact([(svod.exp(x) * x).uop])[0]
    k_two = compact([(svod.exp(svod.asarray(a)) * svod.asarray(a)).uop])[0]
    assert k_shared.hash != k_two.hash


def test_key_hash_is_stable_across_processes_and_json_roundtrips():
    code = ("import numpy as np, svod\nfrom svod.key import compact\n"
            "x = svod.asarray(np.zeros((2, 3), np.float32))\n"
            "print(compact([svod.nn.softmax(x * 0.5).uop])[0].hash)")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
            for _ in range(2)}
    assert len(outs) == 1
    k = _key(lambda x: svod.nn.softmax(x * 0.5), np.zeros((2, 3), np.float32))
    assert outs.pop().strip() == k.hash
    assert GraphKey.from_json(k.to_json()) == k


# ----------------------------------------------------------------------------- signatures

_OPS = [lambda p, q: p + q, lambda p, q: p * q, lambda p, q: p - q, lambda p, q: svod.maximum(p, q),
        lambda p, q: svod.exp(p), lambda p, q: p * 2.0, lambda p, q: svod.sum(p, axis=0, keepdims=True) + q,
        lambda p, q: svod.where(p > q, p, q)]


def _program(script, leaves):
    vals = list(leaves)
    for op, i, j in script:
        vals.append(_OPS[op](vals[i % len(vals)], vals[j % len(vals)]))
    return vals[-1]


_scripts = st.lists(st.tuples(st.integers(0, len(_OPS) - 1), st.integers(0, 50), st.integers(0, 50)),
                    min_size=1, max_size=8)


@settings(max_examples=60, deadline=None)
@given(_scripts, _scripts, st.lists(st.integers(0, 2), min_size=3, max_size=3),
       st.lists(st.integers(0, 2), min_size=3, max_size=3))
def test_signature_equal_iff_key_equal(s1, s2, alias1, alias2):
    """Signatures (svod.ir) name the compacted key: equal signature <=> equal GraphKey,
    and the signature's leaves correspond to the key's bindings by a fixed permutation."""
    from svod.ir import signature_of

    def build(script, alias):
        arrs = [np.full((3, 4), float(k), np.float32) for k in range(3)]
        pool = [svod.asarray(a) for a in arrs]
        leaves = [pool[k] for k in alias]  # repeated indices: one buffer used twice
        return _program(script, leaves)

    outs = []
    for script, alias in ((s1, alias1), (s2, alias2), (s1, alias1)):
        t = build(script, alias)
        if t.uop.op.name == "BUFFER":
            return
        sig, leaves = signature_of([t.uop])
        key, b = compact([t.uop])
        perm = [next(i for i, lf in enumerate(leaves) if lf is buf) for buf in b.buffers]
        outs.append((sig, key.hash, perm, len(leaves)))
    assert outs[0] == outs[2]  # rebuilt with new data: same signature, same key, same order
    assert (outs[0][0] == outs[1][0]) == (outs[0][1] == outs[1][1])
    if outs[0][0] == outs[1][0]:
        assert outs[0][2:] == outs[1][2:]


def test_replay_by_signature_matches_fresh_realize():
    """A structure replayed by signature computes the same values as a fresh realize."""
    from svod import engine

    rng = np.random.default_rng(0)
    for _ in range(3):
        a, b = rng.standard_normal((2, 5, 7)).astype(np.float32)
        x, y = svod.asarray(a), svod.asarray(b)
        got = (svod.exp(x) * y + x * 2.0).numpy()
        np.testing.assert_allclose(got, np.exp(a) * b + a * 2.0, rtol=1e-5)
    assert len(engine.REPLAY) >= 1
    engine.reset_caches()
    assert len(engine.REPLAY) == 0


# ----------------------------------------------------------------------------- shared partial reductions


def _reduce_nodes(key: GraphKey):
    return [(i, n) for i, n in enumerate(key.nodes) if n.op is svod.ir.Ops.REDUCE]


def test_full_reduction_reuses_the_partial_one():
    """sum(x) next to sum(x, axis=1): the full sum reduces the row sums (W6), max alike;
    the ops and the sources have to match."""
    x = np.random.default_rng(0).standard_normal((6, 5)).astype(np.float32)
    key = _key(lambda t: (svod.sum(t), svod.sum(t, axis=1), svod.max(t), svod.max(t, axis=1)), x)
    full = [(i, n) for i, n in _reduce_nodes(key) if key.nodes[n.src[0]].op is svod.ir.Ops.REDUCE]
    assert sorted(n.arg[0] for _, n in full) == ["max", "sum"]
    assert all(key.nodes[n.src[0]].arg == (n.arg[0], (1,)) and n.arg[1] == (0,) for _, n in full)
    mixed = _key(lambda t: (svod.sum(t), svod.max(t, axis=1)), x)  # other op: nothing to share
    assert all(mixed.nodes[n.src[0]].op is svod.ir.Ops.BUFFER for _, n in _reduce_nodes(mixed))


def test_a_chain_of_partials_is_reused_once_each():
    x = np.random.default_rng(1).standard_normal((3, 4, 5)).astype(np.float32)
    key = _key(lambda t: (svod.sum(t), svod.sum(t, axis=(1, 2)), svod.sum(t, axis=2)), x)
    reds = _reduce_nodes(key)
    assert len(reds) == 3  # no reduction of x computed twice
    assert sum(1 for _, n in reds if key.nodes[n.src[0]].op is svod.ir.Ops.BUFFER) == 1


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(["sum", "max", "min", "prod"]), st.lists(st.sampled_from([(0,), (1,), (2,), (0, 1), (1, 2),
                                                                                  (0, 2), (0, 1, 2)]),
                                                                min_size=2, max_size=4, unique=True),
       st.integers(0, 1000))
def test_shared_reductions_equal_numpy(op, axes_list, seed):
    x = np.random.default_rng(seed).uniform(0.5, 1.5, (3, 4, 5)).astype(np.float32)
    t = svod.asarray(x)
    outs = [getattr(svod, op)(t, axis=a) for a in axes_list]
    svod.realize(*outs)
    for a, o in zip(axes_list, outs):
        np.testing.assert_allclose(o.numpy(), getattr(np, op)(x, axis=a), rtol=2e-6, atol=1e-6)
