"""The op table (svod/ops.py): every `Ops` member has a complete entry, the entries are
consistent, and the modules that need a fact about an op read it from the table rather
than keep a copy (no module-level table of `Ops` members anywhere else)."""

from __future__ import annotations

import ast
import pathlib

import numpy as np
import pytest

from svod import dtype as d
from svod import ir
from svod.ops import (
    COSTS,
    FEATURE_CLASSES,
    KINDS,
    LATENCIES,
    TABLE,
    OpInfo,
    Ops,
    complex_factors,
    feature_classes,
    feature_units,
    fusion_class,
    long_latency,
    long_latency_features,
    ops_where,
    phrase,
    vector_math,
    weights,
)

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_every_op_has_a_complete_entry():
    assert list(TABLE) == list(Ops), "one entry per Ops member, in the enum's order"
    for op, e in TABLE.items():
        assert isinstance(e, OpInfo) and e.op is op
        assert e.kind in KINDS and e.cost in COSTS and e.latency in LATENCIES, op
        assert e.feature in FEATURE_CLASSES and e.units > 0 and e.weight >= 1 and e.complex_factor >= 1, op
        assert e.arity is None or e.arity >= 0
        assert e.interp is not None or op in (Ops.BUFFER, Ops.LIBRARY), f"{op}: no numpy implementation"
        assert isinstance(e.fusion_classes, tuple) and isinstance(e.phrase, str)
    assert Ops("EXP") is Ops.EXP and ir.Ops is Ops  # svod.ir re-exports the enum


def test_entries_are_consistent():
    for op, e in TABLE.items():
        # a cheap op is one simple vector instruction or two: weight 1 exactly
        assert (e.cost == "cheap") == (e.weight == 1), op
        assert e.latency == "short" or e.cost != "cheap", op
        if e.math is not None:
            assert e.kind in ("unary", "binary") and e.latency == "long", op
        if e.bool_result:
            assert e.kind in ("unary", "binary"), op
        if e.kind in ("unary", "binary", "ternary"):
            assert "Elementwise" in e.fusion_classes, op
    # integer division: a divide, but no vector instruction's latency chain
    assert TABLE[Ops.IDIV].cost == "divide" and TABLE[Ops.IDIV].latency == "short"


def test_ir_op_classes_are_the_tables():
    assert ir.UNARY == {o for o, e in TABLE.items() if e.arity == 1 and e.kind == "unary"}
    assert ir.BINARY == ops_where(kind="binary") and Ops.COMPLEX in ir.BINARY
    assert ir.ELEMENTWISE == ir.UNARY | ir.BINARY | {Ops.WHERE}
    assert ir.BOOL_UNARY == {Ops.ISNAN, Ops.ISINF, Ops.SIGNBIT}
    assert ir.COMPARE == {Ops.CMPLT, Ops.CMPLE, Ops.CMPEQ, Ops.CMPNE}
    assert ir.REDUCTIONS == {Ops.REDUCE, Ops.ARGMAX, Ops.ARGMIN}
    assert ir.MOVEMENT == {Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.SHRINK, Ops.FLIP, Ops.PAD}
    assert ir._GROWS == ops_where(grows=True) and ir._SAME_SHAPE == ir.UNARY | {Ops.CONTIGUOUS}


def test_consumers_read_the_table():
    from costmodels import learned
    from search import rules
    from svod import costing

    for op, e in TABLE.items():
        assert costing.OP_WEIGHT.get(op, 1) == e.weight, op
        assert costing.complex_units(op, [d.complex64])[0] == e.complex_factor, op
        for cls, members in rules.CLASSES.items():
            assert (op.value in members) == (cls in e.fusion_classes), (op, cls)
    assert costing.OP_WEIGHT == weights() and costing.COMPLEX_FACTOR == complex_factors()
    assert rules.ELEMENTWISE_OPS == sorted(fusion_class("Elementwise"))
    assert rules.REDUCTION_OPS == ["REDUCE", "ARGMAX", "ARGMIN"] and rules.MATMUL_OPS == ["MATMUL"]
    assert set(learned._TRANS) == long_latency_features() == {"EXP", "LOG", "SIN", "COS", "TANH", "ERF", "POW",
                                                              "DIV", "SQRT"}
    # a CONTIGUOUS consumer fuses its elementwise producer; a BUFFER or a library step is no op class
    assert rules.fusing_ruleset("EXP", "CONTIGUOUS") == "fuse_elementwise"
    assert "BUFFER" not in rules.ELEMENTWISE_OPS and "LIBRARY" not in rules.ELEMENTWISE_OPS


def test_projections_for_the_codegen_and_the_features():
    """The facts codegen/lower.py, costmodels/features.py and boundaries.py keep copies of
    until the merge (docs/ops.md lists the replacements)."""
    assert long_latency() == {Ops.EXP, Ops.EXPM1, Ops.LOG, Ops.LOG1P, Ops.SQRT, Ops.SIN, Ops.COS, Ops.TANH,
                              Ops.ERF, Ops.ERFC, Ops.DIV, Ops.POW, Ops.ASIN, Ops.ACOS, Ops.ATAN, Ops.SINH,
                              Ops.COSH, Ops.ASINH, Ops.ACOSH, Ops.ATANH, Ops.ATAN2, Ops.HYPOT, Ops.LOGADDEXP}
    assert vector_math(2) == {Ops.ATAN2: "atan2", Ops.HYPOT: "hypot", Ops.LOGADDEXP: "logaddexp"}
    assert vector_math(1)[Ops.ERFC] == "erfc" and Ops.POW not in vector_math(1)
    assert feature_classes()[Ops.ASINH] == "POW" and Ops.ADD not in feature_classes()
    assert feature_units() == {Ops.LOGADDEXP: 3.0}
    assert phrase(Ops.ARGMAX) == "a reduction" and phrase(Ops.PAD) == "a view" and phrase(Ops.CAT) == \
        "an elementwise op" and phrase(Ops.LIBRARY) == "a library step"


def test_vector_math_names_are_the_codegens():
    pytest.importorskip("llvmlite")
    from svod.codegen import vecmath_inv

    assert set(vector_math(2).values()) == set(vecmath_inv.BINARY)
    for name in vector_math(1).values():  # every unary name lowers (vecmath or its inverse functions)
        assert name in vecmath_inv.FUNCTIONS or name in ("exp", "log", "sqrt", "sin", "cos", "tanh", "erf",
                                                         "erfc", "expm1", "log1p"), name


@pytest.mark.parametrize("op", [o for o, e in TABLE.items() if e.kind in ("unary", "binary")
                                and o not in (Ops.CAST, Ops.COMPLEX, Ops.REAL, Ops.IMAG, Ops.CONJ)])
def test_interp_of_every_elementwise_op_matches_numpy_on_plain_floats(op):
    """Away from the special cases the table's numpy implementation is numpy's own (erf and
    the double-double forms to a few ulps)."""
    import math

    from svod.interp import eval_node

    x = np.array([0.25, 0.5, 0.75], np.float64)
    y = np.array([0.5, 1.5, 0.125], np.float64)
    integer = op in (Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR, Ops.NOT)
    if integer:
        x, y = np.array([5, 12, 7], np.int64), np.array([1, 2, 3], np.int64)
    srcs = [x] if TABLE[op].arity == 1 else [x, y]
    out_dtype = d.bool_ if TABLE[op].bool_result else (d.int64 if integer else d.float64)
    got = eval_node(op, out_dtype, None, x.shape, srcs)
    name = {"NEG": "negative", "ABS": "absolute", "ASIN": "arcsin", "ACOS": "arccos", "ATAN": "arctan",
            "ASINH": "arcsinh", "ACOSH": "arccosh", "ATANH": "arctanh", "ATAN2": "arctan2", "DIV": "true_divide",
            "IDIV": "floor_divide", "MOD": "remainder", "POW": "power", "MAX": "maximum", "MIN": "minimum",
            "CMPLT": "less", "CMPLE": "less_equal", "CMPEQ": "equal", "CMPNE": "not_equal", "AND": "bitwise_and",
            "OR": "bitwise_or", "XOR": "bitwise_xor", "SHL": "left_shift", "SHR": "right_shift",
            "NOT": "invert", "ROUND": "rint", "SUB": "subtract", "MUL": "multiply"}.get(op.name, op.name.lower())
    if op in (Ops.ERF, Ops.ERFC):
        want = np.array([math.erf(v) if op is Ops.ERF else math.erfc(v) for v in x])
    else:
        with np.errstate(all="ignore"):
            want = getattr(np, name)(*srcs)
    assert got.dtype == out_dtype.np, op
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-14, err_msg=str(op))


def _names_op(e: ast.AST) -> bool:
    return isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id in ("Ops", "OP")


def _module_tables(path: pathlib.Path) -> list[str]:
    """Names of the module-level assignments of `path` whose value names `Ops` members
    (a set or tuple of several ops, a dict keyed by ops: a copy of a table fact)."""
    out = []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            if (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Tuple)
                    and isinstance(node.value, ast.Tuple) and all(_names_op(e) for e in node.value.elts)):
                continue  # `_BUFFER, _CONST = Ops.BUFFER, Ops.CONST`: local names for single ops, no table
            n = sum(1 for e in ast.walk(node.value) if _names_op(e))
            keyed = isinstance(node.value, ast.Dict) and any(_names_op(k) for k in node.value.keys if k is not None)
            if n >= 2 or keyed:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                out += [ast.unparse(t) for t in targets]
    return out


# tables that map something else onto ops are their owners': a lowering's emission tables
# (LLVM predicates, the complex inverse functions' emitters) and the frontend's
# Python-operator table (dunder -> function, with the op its fast path builds)
LOWERING = {("svod/codegen/scalar.py", "_FCMP"), ("svod/codegen/cplx.py", "_INVERSE"), ("svod/methods.py", "_BINARY"),
            ("svod/viewfold.py", "TOP_OPS"),  # and the view fold's rule of which views end a folded chain
            ("search/contract.py", "_CHAIN"),  # and the views a contraction's operand chain may hold
            ("search/algebra_movement.py", "VIEWS"),  # and the views the movement rule sets move
            ("svod/lower/build.py", "KERNEL_KINDS"),  # and the kernel kinds' builders, by the op they compute
            ("svod/lower/build.py", "KERNEL_KINDS_EPILOGUE"),  # (those that also take a consumer's epilogue)
            # and the ops the row-column kernel's emitter has vector code for (svod/codegen/rowcol.py)
            ("svod/lower/rowcol.py", "VECTOR_OPS"), ("svod/lower/rowcol.py", "VECTOR_FLOAT_OPS"),
            # and the ops the short-row reduction's emitter computes on row vectors (svod/codegen/narrow.py)
            ("svod/codegen/schedule.py", "NARROW_OPS"), ("svod/codegen/schedule.py", "NARROW_FLOAT_OPS")}


def test_no_other_module_keeps_an_op_table():
    found = set()
    for pkg in ("svod", "search", "costmodels"):
        for p in sorted((ROOT / pkg).rglob("*.py")):
            rel = p.relative_to(ROOT).as_posix()
            if rel != "svod/ops.py":
                found |= {(rel, n) for n in _module_tables(p)}
    assert found - LOWERING == set(), "op facts belong in svod/ops.py's table"
