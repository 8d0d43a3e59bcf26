"""svod.codegen.jit: O3 + vectorisers reach the host's widest registers, object-code
reload gives the same results, engines outlive their callers' references, compile is
thread-safe."""

from __future__ import annotations

import ctypes
import gc
import time

import numpy as np
import pytest

from svod.codegen import jit
from tests.threads import run_threads

# relu(a*b + c) * 0.5 on float32, written as a scalar loop: the loop vectoriser must
# widen it. relu is compare+select so NaN propagates (llvm.maxnum would drop it).
FUSED_IR = """
define void @fused(float* noalias %out, float* noalias %a, float* noalias %b, float* noalias %c, i64 %n) {
entry:
  %empty = icmp sle i64 %n, 0
  br i1 %empty, label %done, label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %inext, %loop ]
  %pa = getelementptr float, float* %a, i64 %i
  %pb = getelementptr float, float* %b, i64 %i
  %pc = getelementptr float, float* %c, i64 %i
  %va = load float, float* %pa, align 4
  %vb = load float, float* %pb, align 4
  %vc = load float, float* %pc, align 4
  %m = fmul float %va, %vb
  %s = fadd float %m, %vc
  %neg = fcmp olt float %s, 0.0
  %r = select i1 %neg, float 0.0, float %s
  %h = fmul float %r, 0.5
  %po = getelementptr float, float* %out, i64 %i
  store float %h, float* %po, align 4
  %inext = add i64 %i, 1
  %more = icmp slt i64 %inext, %n
  br i1 %more, label %loop, label %done
done:
  ret void
}
"""
P = ctypes.c_void_p
ARGS = [P, P, P, P, ctypes.c_int64]


def _run(fn, a, b, c):
    out = np.empty_like(a)
    fn(out.ctypes.data, a.ctypes.data, b.ctypes.data, c.ctypes.data, a.size)
    return out


def _inputs(n=1003):
    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
    a[5] = np.nan
    return a, b, c


def _expected(a, b, c):
    return np.maximum(a * b + c, np.float32(0)) * np.float32(0.5)


def test_host_target_info():
    info = jit.host_target_info()
    assert info["triple"] and info["cpu"]
    assert info["vector_bits"] in (128, 256, 512)
    assert jit.host_target_info() is info  # cached


def test_fused_kernel_vectorises_to_widest_registers():
    t0 = time.perf_counter()
    mod = jit.compile_ir(FUSED_IR, name="fused")
    print(f"\ncompile of a fresh module: {1e3 * (time.perf_counter() - t0):.1f} ms "
          f"({', '.join(f'{k} {1e3 * v:.1f}' for k, v in mod.timings.items())} ms)")
    reg = {512: "zmm", 256: "ymm", 128: "xmm"}[jit.host_target_info()["vector_bits"]]
    assert f"%{reg}" in mod.asm
    assert "<16 x float>" in mod.ir or "<8 x float>" in mod.ir or "<4 x float>" in mod.ir
    a, b, c = _inputs()
    got = _run(mod.ctypes_fn("fused", None, ARGS), a, b, c)
    np.testing.assert_array_equal(got, _expected(a, b, c))  # NaN at [5] included


def test_object_code_roundtrip():
    mod = jit.compile_ir(FUSED_IR, name="fused_obj")
    obj = mod.object_code
    assert isinstance(obj, bytes) and obj[:4] == b"\x7fELF"
    t0 = time.perf_counter()
    loaded = jit.load_object(obj, ["fused"], name="fused_loaded")
    print(f"\nload_object: {1e3 * (time.perf_counter() - t0):.2f} ms")
    a, b, c = _inputs(4099)
    want = _run(mod.ctypes_fn("fused", None, ARGS), a, b, c)
    np.testing.assert_array_equal(_run(loaded.ctypes_fn("fused", None, ARGS), a, b, c), want)
    with pytest.raises(KeyError):
        loaded.address("nope")
    with pytest.raises(ValueError):
        _ = loaded.asm


def test_object_with_libmvec_calls_roundtrips():
    from svod.codegen.vecmath import math_kernel_ir

    mod = jit.compile_ir(math_kernel_ir("sin", "float32", use_libmvec=True), name="sin_obj")
    loaded = jit.load_object(mod.object_code, ["kernel"])
    x = np.linspace(-10, 10, 1001, dtype=np.float32)
    outs = []
    for m in (mod, loaded):
        out = np.empty_like(x)
        m.ctypes_fn("kernel", None, [P, P, ctypes.c_int64])(out.ctypes.data, x.ctypes.data, x.size)
        outs.append(out)
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_allclose(outs[0], np.sin(x), rtol=1e-6, atol=1e-7)


def test_ctypes_fn_keeps_engine_alive():
    fn = jit.compile_ir(FUSED_IR, name="alive").ctypes_fn("fused", None, ARGS)
    gc.collect()
    for _ in range(3):  # churn other engines so freed code pages would get reused
        jit.compile_ir(FUSED_IR.replace("0.5", "0.25"), name="churn")
        gc.collect()
    a, b, c = _inputs()
    np.testing.assert_array_equal(_run(fn, a, b, c), _expected(a, b, c))


def test_bad_ir_raises_with_module_name():
    with pytest.raises(RuntimeError) as ei:
        jit.compile_ir("define i32 @f( {", name="broken")
    assert any("broken" in n for n in getattr(ei.value, "__notes__", []))


def test_compile_is_thread_safe():
    results, errors = [], []

    def work(k):
        try:
            src = FUSED_IR.replace("0.5", f"{0.5 + k}")
            fn = jit.compile_ir(src, name=f"t{k}").ctypes_fn("fused", None, ARGS)
            a, b, c = _inputs(257)
            results.append(np.allclose(_run(fn, a, b, c), np.maximum(a * b + c, 0) * (0.5 + k),
                                       equal_nan=True))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    run_threads(work, [(k,) for k in range(4)])
    assert not errors and results == [True] * 4
