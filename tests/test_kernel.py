"""The Kernel spec: golden kernels, legality checks, the kernel interpreter, JSON form."""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib

import numpy as np
import pytest

from svod.dtype import float32, int64
from svod.interp import run_kernel
from svod.ir import Ops
from svod.kernel import LOAD, KernelError, KNode, KOutput, kernel_from_json, kernel_to_json
from svod.kernel_examples import examples, softmax_kernel

GOLDEN = pathlib.Path(__file__).parent / "golden"


def _run(k, ins):
    bufs = {i: np.ascontiguousarray(a).reshape(-1) for i, a in enumerate(ins)}
    run_kernel(k, bufs)
    return [bufs[o.slot].reshape(o.shape) for o in k.outputs]


@pytest.mark.parametrize("name,kernel,ins,refs", examples(), ids=[e[0] for e in examples()])
def test_golden_kernels_check_and_match_numpy(name, kernel, ins, refs):
    kernel.check()
    for got, want in zip(_run(kernel, ins), refs):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("name,kernel", [(e[0], e[1]) for e in examples()], ids=[e[0] for e in examples()])
def test_golden_text(name, kernel):
    path = GOLDEN / f"kernel_{name}.txt"
    text = str(kernel) + "\n"
    if os.environ.get("SVOD_UPDATE_GOLDEN"):  # regenerate, then review the diff
        path.write_text(text)
    assert text == path.read_text()


def test_json_roundtrip_and_content_key():
    for _, k, _, _ in examples():
        k2 = kernel_from_json(json.loads(json.dumps(kernel_to_json(k))))
        assert k2 == k and k2.key() == k.key()
    k = softmax_kernel(4, 8)
    moved = dataclasses.replace(k, inputs=(dataclasses.replace(k.inputs[0], slot=7),))
    assert moved.key() == k.key()  # slots are not part of the content key
    assert softmax_kernel(4, 9).key() != k.key()


def test_a_replaced_kernel_gets_its_own_key_and_program():
    """`dataclasses.replace` of a kernel whose key is memoised: the copy keys (and
    compiles) as what it is. The memo used to be shared, so calibrate's generated-GEMM
    twin of the BLAS probe got the BLAS step's key and Program, and the BLAS/GEMM pairs
    timed the BLAS step against itself."""
    from svod.codegen.program import LibraryProgram, NativeProgram, compile_kernel
    from svod.kernel_examples import matmul_bias_gelu_kernel

    k = matmul_bias_gelu_kernel(32, 16, 24)
    lib = dataclasses.replace(k, matmul=dataclasses.replace(k.matmul, library=True), nodes=k.nodes[:1],
                              inputs=k.inputs[:2], outputs=(dataclasses.replace(k.outputs[0], node=0),))
    lib.check()
    key = lib.key()
    gen = dataclasses.replace(lib, matmul=dataclasses.replace(lib.matmul, library=False))
    assert gen.key() != key and lib.key() == key
    assert isinstance(compile_kernel(lib), LibraryProgram)
    assert isinstance(compile_kernel(gen), NativeProgram)


def _broken(k, **changes):
    return dataclasses.replace(k, **changes)


def test_check_rejects_wrong_shapes():
    k = softmax_kernel(4, 8)
    with pytest.raises(KernelError, match="viewed as"):
        _broken(k, shape=(4, 9)).check()
    with pytest.raises(KernelError, match="does not hold"):
        _broken(k, outputs=(KOutput(1, 5, float32, (4, 9), False, 2),)).check()


def test_check_rejects_pass_order_violation():
    k = softmax_kernel(4, 8)
    nodes = list(k.nodes)
    nodes[4] = KNode(Ops.REDUCE, float32, (3,), "sum", 0)  # sum of exp(x - max) in the max's own pass
    with pytest.raises(KernelError, match="later pass"):
        _broken(k, nodes=tuple(nodes)).check()
    with pytest.raises(KernelError, match="only available from pass"):
        _broken(k, outputs=(KOutput(1, 5, float32, (4, 8), False, 1),)).check()


def test_check_rejects_bad_reads_and_types():
    k = softmax_kernel(4, 8)
    nodes = list(k.nodes)
    nodes[2] = KNode(Ops.SUB, float32, (0, 3))
    with pytest.raises(KernelError, match="not an earlier node"):
        _broken(k, nodes=tuple(nodes)).check()
    nodes = list(k.nodes)
    nodes[0] = KNode(LOAD, float32, (), 3)
    with pytest.raises(KernelError, match="does not exist"):
        _broken(k, nodes=tuple(nodes)).check()
    nodes = list(k.nodes)
    nodes[5] = KNode(Ops.DIV, int64, (3, 4))
    with pytest.raises(KernelError, match="dtype"):
        _broken(k, nodes=tuple(nodes)).check()
    with pytest.raises(KernelError, match="varies along the reduce axes"):
        _broken(k, outputs=(KOutput(1, 2, float32, (4, 1), True),)).check()
    with pytest.raises(KernelError, match="also an input slot"):
        _broken(k, outputs=(KOutput(0, 5, float32, (4, 8), False, 2),)).check()
