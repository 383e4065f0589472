"""NCCL's fixed latency per collective and per pipeline send (docs/cost-model.md, section 3b), on hand-computed numbers.

NCCL's ring/Simple model (NVIDIA/nccl src/graph/tuning.cc): base 8.4 us per collective, one hop per ring step at
3.4 us (NVLink), 5.7 us (PCIe) or 9.6 us (network); an all-reduce over d ranks has 2 (d - 1) steps, 2 (n - 1) of
them across the n nodes it spans, and a multi-node ring all-reduce's latency is x 1.9.

The toy specs are those of tests/test_costmodel.py with NCCL's latencies switched on:
'fast' is NVLink 100 GB/s, NIC 400 Gbit/s (5e10 B/s), 4 GPUs per node; 'slow' is PCIe 10 GB/s (all-reduce 0.5 x),
NIC 80 Gbit/s (1e10 B/s), 2 GPUs per node; a TP / p2p message is 2e6 B.
"""

from __future__ import annotations

import pytest

from optsearch import costmodel as cm
from optsearch.spec import ClusterSpec, NodeTypeSpec
from test_costmodel import CLUSTER, FAST, GPU_X, GPU_Y, SLOW, plan, toy_problem

US = 1e-6
FAST_N = FAST.model_copy(update={"collective_latency": "nccl"})
SLOW_N = SLOW.model_copy(update={"collective_latency": "nccl"})
NCCL_CLUSTER = ClusterSpec(name="toy-nccl", node_types=[FAST_N, SLOW_N], gpus=[GPU_X, GPU_Y])


def approx(x: float):
    return pytest.approx(x, rel=1e-12, abs=1e-15)


def test_default_is_nccl_and_none_switches_it_off():
    assert SLOW.model_copy(update={"collective_latency": "nccl"}) == SLOW_N
    assert FAST.collective_latency == "none"
    plain = NodeTypeSpec(name="n", gpu="X", gpus_per_node=2, num_nodes_available=1, price_usd_per_node_hour=1,
                         intra_node_link="nvlink", intra_node_gbyte_per_s=1, inter_node_gbit_per_s=1)
    assert plain.collective_latency == "nccl"
    assert cm.nccl_allreduce_latency_s(FAST, 8) == 0.0 and cm.nccl_p2p_latency_s(FAST, False) == 0.0


def test_allreduce_latency_inside_a_node():
    # one rank: nothing to do
    assert cm.nccl_allreduce_latency_s(FAST_N, 1) == 0.0
    # NVLink, d = 2: 8.4 + 2 x 3.4 = 15.2 us; d = 8: 8.4 + 14 x 3.4 = 56.0 us
    assert cm.nccl_allreduce_latency_s(FAST_N, 2) == approx(15.2 * US)
    assert cm.nccl_allreduce_latency_s(FAST_N, 8) == approx(56.0 * US)
    # PCIe, d = 4: 8.4 + 6 x 5.7 = 42.6 us
    assert cm.nccl_allreduce_latency_s(SLOW_N, 4) == approx(42.6 * US)


def test_allreduce_latency_across_nodes():
    # d = 2 on 2 nodes: both steps cross the network: (8.4 + 2 x 9.6) x 1.9 = 27.6 x 1.9 = 52.44 us
    assert cm.nccl_allreduce_latency_s(FAST_N, 2, 2) == approx(52.44 * US)
    # d = 8 on 2 nodes (NVLink inside): 14 steps, 2 across: (8.4 + 12 x 3.4 + 2 x 9.6) x 1.9 = 68.4 x 1.9 = 129.96 us
    assert cm.nccl_allreduce_latency_s(FAST_N, 8, 2) == approx(129.96 * US)


def test_p2p_latency():
    # one ring step: same node 8.4 + 3.4 = 11.8 us (NVLink), 8.4 + 5.7 = 14.1 us (PCIe); across nodes 8.4 + 9.6 = 18
    assert cm.nccl_p2p_latency_s(FAST_N, True) == approx(11.8 * US)
    assert cm.nccl_p2p_latency_s(SLOW_N, True) == approx(14.1 * US)
    assert cm.nccl_p2p_latency_s(FAST_N, False) == approx(18.0 * US)


def test_tp_allreduce_adds_the_latency():
    problem = toy_problem(cluster=NCCL_CLUSTER)
    # bandwidth part 2e-5 s (tests/test_costmodel.py) + 15.2 us = 35.2 us
    assert cm.tp_allreduce_s(problem, "fast", 2, 1) == approx(2e-5 + 15.2 * US)
    # slow (PCIe): 4e-4 s + 8.4 + 2 x 5.7 = 19.8 us
    assert cm.tp_allreduce_s(problem, "slow", 2, 1) == approx(4e-4 + 19.8 * US)
    # and the layer step counts it per all-reduce: full recomputation, tp 2: 6 all-reduces
    base = cm.layer_step_s(toy_problem(), "fast", toy_problem().model.kinds[0], 2, 1, "full")
    with_latency = cm.layer_step_s(problem, "fast", problem.model.kinds[0], 2, 1, "full")
    assert with_latency - base == pytest.approx(6 * 15.2 * US, rel=1e-9)


def test_p2p_send_adds_the_latency():
    problem = toy_problem(cluster=NCCL_CLUSTER)
    # same node: 2e6 / 1e11 = 2e-5 s + 11.8 us; across nodes, one sender: 2e6 / 5e10 = 4e-5 s + 18 us
    assert cm.p2p_send_s(problem, "fast", "fast", True, 2, 1) == approx(2e-5 + 11.8 * US)
    assert cm.p2p_send_s(problem, "fast", "fast", False, 1, 1) == approx(4e-5 + 18.0 * US)
    # fast -> slow crosses the network: 2e6 / 1e10 = 2e-4 s + 18 us
    assert cm.p2p_send_s(problem, "fast", "slow", False, 1, 1) == approx(2e-4 + 18.0 * US)


def test_embedding_allreduce_adds_the_latency():
    problem = toy_problem(cluster=NCCL_CLUSTER)
    # across nodes, w = 4: 3.2e-3 s (tests/test_costmodel.py) + 52.44 us; inside one node: 4e-4 s + 15.2 us
    assert cm.embedding_allreduce_s(problem, "fast", "fast", False, 4, 1) == approx(3.2e-3 + 52.44 * US)
    assert cm.embedding_allreduce_s(problem, "fast", "fast", True, 1, 1) == approx(4e-4 + 15.2 * US)


def test_estimate_adds_the_latencies_and_leaves_the_dp_allreduce_alone():
    # two stages of 2 layers on 'fast', tp 1, dp 2, mbs 1: both stages in one node (4 GPUs), sends stay inside
    p = plan(1, 2, 1, ("fast", 2), ("fast", 2))
    off = cm.estimate(toy_problem(), p)
    on = cm.estimate(toy_problem(cluster=NCCL_CLUSTER), p)
    m = on.num_micro_batches
    # each stage sends once per micro-batch (11.8 us); 1F1B: (m - 1) x 11.8 + 2 x 11.8 us
    assert on.pipeline_time_s - off.pipeline_time_s == pytest.approx((m + 1) * 11.8 * US, rel=1e-9)
    # the ends share the node: + 15.2 us; the DP all-reduce is bandwidth only (its latency is left out)
    assert on.embedding_allreduce_s - off.embedding_allreduce_s == pytest.approx(15.2 * US, rel=1e-9)
    assert on.dp_allreduce_s == off.dp_allreduce_s
    assert CLUSTER.node_types[0].collective_latency == "none"


def test_a100_nvlink_nodes_use_nccls_bus_bandwidth():
    """docs/cost-model.md section 3: every A100 NVLink node type all-reduces at NCCL's 235 GB/s, not the 300 GB/s link."""
    from optsearch.catalog import cluster_names, load_cluster
    from optsearch.problem import build_problem

    seen = 0
    for name in cluster_names():
        for node in load_cluster(name).node_types:
            if node.gpu.startswith("A100-SXM") and node.intra_node_link == "nvlink":
                assert node.intra_node_allreduce_gbyte_per_s == 235, (name, node.name)
                seen += 1
    assert seen >= 4
    # GPT-2 XL on a p4d, tp 8, b 1: message 1 x 1024 x 1600 x 2 = 3,276,800 B;
    # ring 2 x 7/8 x 3,276,800 / 235e9 = 24.4017 us, + NCCL latency 8.4 + 14 x 3.4 = 56 us -> 80.4017 us
    problem = build_problem("gpt2-xl", "aws-p4d", global_batch_size=64)
    expected = 2 * 7 / 8 * 3_276_800 / 235e9 + 56e-6
    assert cm.tp_allreduce_s(problem, "p4d.24xlarge", 8, 1) == approx(expected)
    assert expected == pytest.approx(80.4017e-6, rel=1e-5)
