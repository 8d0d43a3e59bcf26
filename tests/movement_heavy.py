"""Movement-heavy random programs for the search's memory and size bounds (issue 30,
docs/algebra.md "Movement algebra": why the movement sets once grew egglog's e-graph
without bound).

`heavy_movement_programs()` draws up to `max_ops` steps over two values of one shape,
mixing what made the e-graph grow: reshapes (to one axis, reversed, with a size-1 axis in
front or behind, back to the input shape), permutes, broadcasts (a new leading axis or a
size-1 axis grown), pointwise ops of a value with itself (`max(a, a)`, `a * a`, `min(a,
a)`, `a + a`), exact identities (`a * 1.0`, `-(-a)`, `a / 1.0`, `where(a > 0, a, a)`),
binary ops of the two values, keepdims reductions (`min`, `max`, `sum`) broadcast back and
multiplied in (a row min times the value), and matrix products with a constant square
weight. `build(ts, xp)` runs the same steps on svod tensors or numpy arrays (the
reference). `exact` in the result says whether the program is bit-identical to numpy
(no sums and no products: those reorder additions).

`python3 -m tests.movement_heavy [N] [--seed S]` runs N drawn programs through
`search.plan_search` with the default rule sets and prints each one's saturation
(iterations, e-nodes, stop reason, time): the stress run of docs/algebra.md.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st

import svod

STEPS = ("reshape", "permute", "expand", "unary", "self", "ident", "binary", "reduce_bcast", "matmul")


def _apply(kind: str, r: int, a, b, base: tuple, xp):
    """One step over the values (a, b) of one shape; returns (a, b, reassociates)."""
    s = tuple(a.shape)
    if kind == "reshape":
        new = [(-1,), s[::-1], (1, *s), s + (1,), base][r % 5]
        if math.prod(new if new != (-1,) else (math.prod(s),)) != math.prod(s):
            return a, b, False
        return xp.reshape(a, new), xp.reshape(b, new), False
    if kind == "permute" and len(s) > 1:
        perm = tuple(np.random.default_rng(r).permutation(len(s)).tolist())
        return xp.permute_dims(a, perm), xp.permute_dims(b, perm), False
    if kind == "expand" and math.prod(s) <= 48:
        k = 2 + r % 2
        ones = [j for j, d in enumerate(s) if d == 1]
        if ones and r % 2:
            new = tuple(k if j == ones[0] else d for j, d in enumerate(s))
            return xp.broadcast_to(a, new), xp.broadcast_to(b, new), False
        return (xp.broadcast_to(xp.reshape(a, (1, *s)), (k, *s)),
                xp.broadcast_to(xp.reshape(b, (1, *s)), (k, *s)), False)
    if kind == "unary":  # (not sin: svod's and numpy's differ far from 0 after a few squarings)
        f = [xp.tanh, xp.negative, xp.abs][r % 3]
        return f(a), (f(b) if r % 2 else b), False
    if kind == "self":
        f = [xp.maximum, xp.multiply, xp.minimum, xp.add][r % 4]
        return f(a, a), b, False
    if kind == "ident":
        i = r % 4
        if i == 0:
            return a * 1.0, b, False
        if i == 1:
            return xp.negative(xp.negative(a)), b, False
        if i == 2:
            return a / 1.0, b, False
        return xp.where(a > 0, a, a), b, False
    if kind == "binary":
        f = [xp.add, xp.multiply, xp.maximum, xp.subtract][r % 4]
        return f(a, b), b, False
    if kind == "reduce_bcast" and len(s) > 0:
        f = [xp.min, xp.max, xp.sum][r % 3]
        m = xp.broadcast_to(f(a, axis=r % len(s), keepdims=True), s)
        return m * a, b, f is xp.sum
    if kind == "matmul" and 0 < len(s) and s[-1] <= 8:
        w = np.random.default_rng(r).standard_normal((s[-1], s[-1])).astype(np.float32) / s[-1]
        wt = w if xp is np else svod.asarray(w)
        return a @ wt, b, True
    return a, b, False


@st.composite
def heavy_movement_programs(draw, max_ops: int = 10):
    """Returns (inputs: two float32 arrays of one shape, build: callable(list of two
    tensors, xp=svod) -> (outputs, exact), description)."""
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(1, 4)) for _ in range(rank))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    inputs = [rng.standard_normal(shape).astype(np.float32) for _ in range(2)]
    # the ops the stress found growing the e-graph come first (shrinking keeps them)
    steps = [(draw(st.sampled_from(STEPS)), draw(st.integers(0, 10**6)))
             for _ in range(draw(st.integers(1, max_ops)))]
    n_out = draw(st.integers(1, 2))

    def build(ts, xp=svod):
        a, b = ts
        exact = True
        for kind, r in steps:
            a, b, re = _apply(kind, r, a, b, shape, xp)
            exact &= not re
        return [a, b][:n_out], exact

    return inputs, build, f"shape={shape} steps={steps} n_out={n_out}"


# the e-graph's size bound the tests assert: the declarations' ~130 e-nodes and a constant
# number per node of the program (the stress runs of docs/algebra.md: at most 75 per node)
def enode_bound(nodes: int) -> int:
    return 200 + 100 * nodes


def check(prog) -> None:
    """Search one drawn program with the default rule sets (and a time limit no search
    of these reaches), assert the saturation ended by saturating within `enode_bound`,
    and compare the realized result with numpy's: within float32 rounding for exact
    programs (svod's tanh is its own polynomial), within the reassociation bound for
    programs with sums and products; a non-finite reference element must be non-finite
    in svod too (inf - inf orders differ)."""
    from search import plan_search
    from svod.config import SearchLimits
    from svod.key import compact

    inputs, build, desc = prog
    outs, exact = build([svod.asarray(x) for x in inputs])
    key, _ = compact([o.uop for o in outs])
    # the e-graph's bound, not the clock's: a time limit a loaded machine cannot reach
    sat = plan_search(key, limits=SearchLimits(seconds=60.0)).report.saturation
    assert sat.stop_reason == "saturated" and sat.enodes <= enode_bound(len(key.nodes)), (desc, str(sat))
    want, _ = build([x.copy() for x in inputs], xp=np)
    for o, w in zip(outs, want):
        got = o.numpy()
        w = np.asarray(w, np.float32)
        assert got.shape == w.shape, (desc, got.shape, w.shape)
        fin = np.isfinite(w)
        assert not np.isfinite(got[~fin]).any(), (desc, got, w)
        scale = float(np.abs(w[fin]).max()) if fin.any() else 1.0
        tol = 1e-5 if exact else 1e-3
        np.testing.assert_allclose(got[fin], w[fin], rtol=tol, atol=tol * max(scale, 1.0), err_msg=desc)


def run_checks(n: int, seed: int = 0) -> None:
    """`check` on `n` drawn programs (hypothesis, derandomised by `seed`); raises with the
    falsifying program on a failure. Meant for a process held to a few GB
    (tests/test_algebra_movement.py)."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hseed

    @hseed(seed)
    @settings(max_examples=n, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(heavy_movement_programs())
    def run(prog):
        check(prog)

    run()


def _main(argv=None) -> None:
    import argparse
    import time

    from hypothesis import HealthCheck, given, seed, settings

    from search import plan_search
    from svod.key import compact

    ap = argparse.ArgumentParser()
    ap.add_argument("n", type=int, nargs="?", default=50)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rows = []

    @seed(args.seed)
    @settings(max_examples=args.n, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(heavy_movement_programs())
    def run(prog):
        inputs, build, desc = prog
        outs, _ = build([svod.asarray(x) for x in inputs])
        key, _ = compact([o.uop for o in outs])
        t0 = time.perf_counter()
        r = plan_search(key)
        sat = r.report.saturation
        rows.append((sat.enodes, len(key.nodes), sat.iterations, sat.stop_reason, time.perf_counter() - t0, desc))
        print(f"{len(key.nodes):3d} nodes {sat.iterations:2d} it {sat.enodes:6d} e-nodes {sat.stop_reason:10s} "
              f"{(time.perf_counter() - t0) * 1e3:7.1f} ms  {desc}", flush=True)

    run()
    rows.sort(key=lambda t: -t[0])
    print("largest:", *(f"{e} e-nodes ({n} nodes, {s})" for e, n, _, s, _, _ in rows[:5]), sep="\n  ")


if __name__ == "__main__":
    _main()
