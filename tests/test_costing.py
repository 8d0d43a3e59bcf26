"""The CostModel contract and the placeholder roofline model."""

from __future__ import annotations

import svod
from svod.costing import CostModel, Machine, Price, RooflineModel, input_bytes, plan_seconds
from svod.kernel_examples import elementwise_chain_kernel, matmul_bias_gelu_kernel, softmax_kernel
from svod.key import compact
from svod.lower import lower
from svod.plan_greedy import plan_greedy


def test_roofline_is_a_cost_model():
    assert isinstance(RooflineModel(), CostModel)
    p = RooflineModel().price(softmax_kernel(64, 64), Machine())
    assert isinstance(p, Price) and p.seconds > 0 and p.threads >= 1


def test_price_grows_with_size_and_broadcast_reads_are_counted_once():
    m, model = Machine(), RooflineModel()
    assert model.price(softmax_kernel(4096, 4096), m).seconds > model.price(softmax_kernel(64, 64), m).seconds
    k = elementwise_chain_kernel(100, 200)
    # a (100,200) + a (200,100) transposed + a (200,) row vector
    assert input_bytes(k) == 4 * (100 * 200 + 200 * 100 + 200)


def test_compute_bound_kernels_use_both_cores_memory_bound_do_not():
    m, model = Machine(cores=2), RooflineModel()
    assert model.price(matmul_bias_gelu_kernel(512, 512, 512), m).threads == 2
    assert model.price(elementwise_chain_kernel(16, 16), m).threads == 1


def test_fused_plan_prices_below_unfused():
    x = svod.random.randn(1024, 1024)
    key, _ = compact([svod.nn.softmax(x).uop])
    fused = plan_greedy(key)
    every_node = set(range(len(key.nodes)))
    unfused = lower(key, every_node, merge_siblings=False)
    assert len(unfused.kernels) > len(fused.kernels)
    assert plan_seconds(fused.kernels) < plan_seconds(unfused.kernels)
