"""Every cost-model term (docs/cost-model.md) checked on numbers computed by hand.

The specs are built here with round numbers so that each expected value can be worked out on paper; the
arithmetic is written beside each assertion. Shared shape ("toy"): h = 1000, a = 8 heads of 125, f = 4000,
s = 1000, V = 10000, RMSNorm, no biases, rotary positions, tied embeddings, 4 layers.

    b s h = 1e6 (b = 1)            p2p / TP message = b s h x 2 B = 2e6 B
    layer parameters = 4 h^2 + 2 h f + 2 h = 4e6 + 8e6 + 2e3 = 12,002,000
    embedding = V h = 1e7          head = final norm h = 1000 (+ V h = 1e7 when untied)
    forward FLOPs (b = 1) = 24 b s h^2 + 4 b s^2 h = 24e9 + 4e9 = 28e9; attention core 4e9 (1/7 of it)
    Korthikanti activations (b = 1): t = 1: 1e6 x (10 + 24 + 5 x 8 x 1000 / 1000) = 74e6 B
                                     t = 2: 1e6 x (10 + 12 + 20) = 42e6 B

Node types: 'fast' (GPU X: 16 GiB, 100 TFLOP/s, 1000 GB/s HBM) 4 GPUs/node, intra 100 GB/s = 1e11 B/s,
NIC 400 Gbit/s = 5e10 B/s, $10/node-hour, 4 nodes; 'slow' (GPU Y: 8 GiB, 50 TFLOP/s, 500 GB/s HBM)
2 GPUs/node, intra 10 GB/s = 1e10 B/s, NIC 80 Gbit/s = 1e10 B/s, $2/node-hour, 8 nodes.
"""

from __future__ import annotations

import math

import pytest

from optsearch import costmodel as cm
from optsearch.errors import SpecError
from optsearch.plan import Plan, Stage
from optsearch.problem import Problem
from optsearch.profile.analytic import (
    AnalyticProfile,
    attention_core_fraction,
    efficiency,
    embedding_forward_s,
    head_forward_s,
    korthikanti_activation_bytes,
    layer_forward_flops,
    layer_forward_s,
)
from optsearch.profile.table import ProfileEntry, ProfileTable
from optsearch.spec import ClusterSpec, GpuSpec, JobSpec, LayerKindSpec, ModelSpec, NodeTypeSpec

REL = 1e-12
GIB = 2**30


def approx(x: float):
    return pytest.approx(x, rel=REL, abs=1e-15)


# ---- hand-made specs ---------------------------------------------------------------------------------------

GPU_X = GpuSpec(name="X", memory_gib=16, peak_fp16_tflop_per_s=100, hbm_gbyte_per_s=1000)
GPU_Y = GpuSpec(name="Y", memory_gib=8, peak_fp16_tflop_per_s=50, hbm_gbyte_per_s=500)
GPUS = {"X": GPU_X, "Y": GPU_Y}

FAST = NodeTypeSpec(
    name="fast", gpu="X", gpus_per_node=4, num_nodes_available=4, price_usd_per_node_hour=10,
    intra_node_link="nvlink", intra_node_gbyte_per_s=100, inter_node_gbit_per_s=400,
    collective_latency="none",  # bandwidth terms only; NCCL's latencies: tests/test_nccl_latency.py
)
SLOW = NodeTypeSpec(
    name="slow", gpu="Y", gpus_per_node=2, num_nodes_available=8, price_usd_per_node_hour=2,
    intra_node_link="pcie", intra_node_gbyte_per_s=10, inter_node_gbit_per_s=80,
    collective_latency="none",
)
CLUSTER = ClusterSpec(name="toy-cluster", node_types=[FAST, SLOW], gpus=[GPU_X, GPU_Y])

# Sequence parallelism off: the hand-computed numbers below are tensor parallelism without it (the default, unset,
# turns it on wherever tp > 1; tests/test_sequence_parallel.py prices it).
JOB = JobSpec(global_batch_size=8, train_iterations=1000, sequence_parallel=False)


def toy_model(**overrides) -> ModelSpec:
    shape = dict(
        name="toy", num_layers=4, hidden_size=1000, num_attention_heads=8, ffn_hidden_size=4000, seq_length=1000,
        vocab_size=10000, position_embedding="rotary", bias=False, norm="rmsnorm", tied_embeddings=True,
        default_job=JOB,
    )
    shape.update(overrides)
    return ModelSpec(**shape)


def toy_profile() -> ProfileTable:
    e = ProfileEntry
    table = ProfileTable(name="toy-profile")
    table.entries.update({
        ("X", "layer", 1, 1): e(forward_s=0.01, backward_s=0.02),
        ("X", "layer", 2, 1): e(forward_s=0.006, backward_s=0.012),
        ("X", "layer", 1, 2): e(forward_s=0.02, backward_s=0.04, activation_bytes=5e7),  # measured bytes
        ("X", "layer", 4, 1): e(forward_s=0.004, backward_s=0.008, tp_comm_included=True),
        ("X", "embedding", 1, 1): e(forward_s=0.001, backward_s=0.002),
        ("X", "embedding", 2, 1): e(forward_s=0.001, backward_s=0.002),
        ("X", "embedding", 4, 1): e(forward_s=0.001, backward_s=0.002, tp_comm_included=True),
        ("X", "head", 1, 1): e(forward_s=0.004, backward_s=0.008),
        ("X", "head", 2, 1): e(forward_s=0.004, backward_s=0.008),
        ("X", "head", 4, 1): e(forward_s=0.004, backward_s=0.008, tp_comm_included=True),
        ("Y", "layer", 1, 1): e(forward_s=0.02, backward_s=0.04),
        ("Y", "embedding", 1, 1): e(forward_s=0.002, backward_s=0.004),
        ("Y", "head", 1, 1): e(forward_s=0.005, backward_s=0.01),
    })
    return table


def toy_problem(model: ModelSpec | None = None, job: JobSpec = JOB, cluster: ClusterSpec = CLUSTER,
                profile=None) -> Problem:
    model = model or toy_model()
    return Problem(model=model, cluster=cluster, job=job, gpus=GPUS, profile=profile or toy_profile())


def plan(tp: int, dp: int, mbs: int, *stages: tuple) -> Plan:
    return Plan(tp=tp, dp=dp, micro_batch_size=mbs,
                stages=tuple(Stage(node_type=s[0], num_layers=s[1], recompute=s[2] if len(s) > 2 else "none")
                             for s in stages))


LAYER = LayerKindSpec(name="layer", num_layers=4)


# ---- the shape behind the hand numbers -------------------------------------------------------------------------


def test_toy_shape_parameter_counts():
    model = toy_model()
    assert model.layer_parameters(LAYER) == 12_002_000  # 4 h^2 + 2 h f + 2 h
    assert model.embedding_parameters() == 10_000_000  # V h (rotary: no position table)
    assert model.head_parameters() == 1000  # final RMSNorm; output matrix tied


# ---- small helpers -----------------------------------------------------------------------------------------


def test_ring_allreduce_example_from_the_docs():
    # 100 MB over 4 ranks at 10 GB/s: 2 x 3/4 x 1e8 / 1e10 = 0.015 s
    assert cm.ring_allreduce_s(1e8, 4, 1e10) == approx(0.015)


def test_ring_allreduce_one_rank_or_empty_message_is_free():
    assert cm.ring_allreduce_s(1e8, 1, 1e10) == 0.0
    assert cm.ring_allreduce_s(0.0, 8, 1e10) == 0.0


def test_nic_shared_by_the_sending_gpus_of_a_node():
    # fast: 400 Gbit/s = 5e10 B/s; 2 senders -> 2.5e10; 8 senders but only 4 GPUs per node -> 5e10 / 4 = 1.25e10
    assert cm.inter_node_bytes_per_s_per_gpu(FAST, 1) == approx(5e10)
    assert cm.inter_node_bytes_per_s_per_gpu(FAST, 2) == approx(2.5e10)
    assert cm.inter_node_bytes_per_s_per_gpu(FAST, 8) == approx(1.25e10)
    assert cm.intra_node_bytes_per_s(SLOW) == approx(1e10)


# ---- micro-batches -------------------------------------------------------------------------------------------


def test_num_micro_batches():
    # m = 8 / (2 x 2) = 2; 8 / (1 x 1) = 8; 8 / (8 x 1) = 1
    assert cm.num_micro_batches(JOB, 2, 2) == 2
    assert cm.num_micro_batches(JOB, 1, 1) == 8
    assert cm.num_micro_batches(JOB, 8, 1) == 1


def test_num_micro_batches_must_be_whole():
    with pytest.raises(SpecError, match=r"dp x micro_batch_size = 3 x 1 = 3 does not divide global_batch_size 8"):
        cm.num_micro_batches(JOB, 3, 1)
    with pytest.raises(SpecError, match=r"= 16 does not divide global_batch_size 8"):
        cm.num_micro_batches(JOB, 4, 4)


# ---- per-layer step ------------------------------------------------------------------------------------------


def test_attention_core_fraction_is_one_seventh():
    # core 4 b s^2 q = 4e9 of 28e9 forward FLOPs
    assert attention_core_fraction(toy_model(), LAYER) == approx(1 / 7)


@pytest.mark.parametrize(
    "recompute, expected",
    [
        ("none", 0.03),  # fwd 0.01 + bwd 0.02
        ("selective", 0.03 + 0.01 / 7),  # + attention-core share of the forward (1/7 x 0.01)
        ("full", 0.04),  # + the whole forward again
    ],
)
def test_layer_step_tp1(recompute, expected):
    assert cm.layer_step_s(toy_problem(), "fast", LAYER, 1, 1, recompute) == approx(expected)


def test_tp_allreduce_on_the_intra_node_link():
    # message b s h x 2 = 2e6 B; ring over 2 ranks: 2 x 1/2 x 2e6 / 1e11 = 2e-5 s
    assert cm.tp_allreduce_s(toy_problem(), "fast", 2, 1) == approx(2e-5)
    # slow node: PCIe, no measured all-reduce rate: NCCL bus bandwidth 0.5 x 1e10 = 5e9 B/s -> 4e-4 s
    assert cm.tp_allreduce_s(toy_problem(), "slow", 2, 1) == approx(4e-4)


def test_tp_allreduce_uses_the_measured_all_reduce_bandwidth():
    # slow node with a measured NCCL all-reduce bus bandwidth of 8 GB/s: 2 x 1/2 x 2e6 / 8e9 = 2.5e-4 s
    measured = SLOW.model_copy(update={"intra_node_allreduce_gbyte_per_s": 8})
    cluster = ClusterSpec(name="toy-cluster", node_types=[FAST, measured], gpus=[GPU_X, GPU_Y])
    assert cm.tp_allreduce_s(toy_problem(cluster=cluster), "slow", 2, 1) == approx(2.5e-4)
    # NVLink without a measurement: the link rate itself
    assert cm.intra_node_allreduce_bytes_per_s(FAST) == approx(1e11)
    assert cm.intra_node_allreduce_bytes_per_s(SLOW) == approx(5e9)


@pytest.mark.parametrize(
    "recompute, expected",
    [
        # fwd 0.006 + bwd 0.012, + 2 blocks x (forward, backward) = 4 all-reduces of 2e-5 s
        ("none", 0.018 + 4 * 2e-5),  # 0.01808
        ("selective", 0.018 + 0.006 / 7 + 4 * 2e-5),  # recomputes the core only, no extra all-reduce
        ("full", 0.024 + 6 * 2e-5),  # + forward 0.006 and its 2 all-reduces: 0.02412
    ],
)
def test_layer_step_tp2_adds_tp_allreduces(recompute, expected):
    assert cm.layer_step_s(toy_problem(), "fast", LAYER, 2, 1, recompute) == approx(expected)


def test_layer_step_tp_comm_included_adds_nothing():
    # the tp = 4 entry was timed with its all-reduces: 0.004 + 0.008 (+ 0.004 under full recompute)
    assert cm.layer_step_s(toy_problem(), "fast", LAYER, 4, 1, "none") == approx(0.012)
    assert cm.layer_step_s(toy_problem(), "fast", LAYER, 4, 1, "full") == approx(0.016)


def test_layer_step_cross_attention_has_three_blocks():
    # T5 decoder: attention FLOPs twice: core 2 x 4e9 of 2 x 12e9 + 16e9 = 40e9 -> fraction 0.2
    kinds = [LayerKindSpec(name="enc", num_layers=2), LayerKindSpec(name="dec", num_layers=2, cross_attention=True)]
    model = toy_model(layer_kinds=kinds)
    table = ProfileTable(name="t5-toy", entries={("X", "dec", 2, 1): ProfileEntry(forward_s=0.01, backward_s=0.02)})
    problem = toy_problem(model=model, profile=table)
    assert attention_core_fraction(model, kinds[1]) == approx(0.2)
    # 3 blocks x (fwd, bwd) = 6 all-reduces of 2e-5: 0.03 + 1.2e-4
    assert cm.layer_step_s(problem, "fast", kinds[1], 2, 1, "none") == approx(0.03012)
    # selective: + 0.2 x 0.01 = 0.002 -> 0.03212
    assert cm.layer_step_s(problem, "fast", kinds[1], 2, 1, "selective") == approx(0.03212)
    # full: + 0.01 and 3 more all-reduces: 0.04 + 9 x 2e-5 = 0.04018
    assert cm.layer_step_s(problem, "fast", kinds[1], 2, 1, "full") == approx(0.04018)


# ---- embedding and head --------------------------------------------------------------------------------------


def test_embedding_and_head_steps():
    problem = toy_problem()
    assert cm.embedding_step_s(problem, "fast", 1, 1) == approx(0.003)  # 0.001 + 0.002
    assert cm.head_step_s(problem, "fast", 1, 1) == approx(0.012)  # 0.004 + 0.008
    # tp = 2: one all-reduce of 2e-5 s each
    assert cm.embedding_step_s(problem, "fast", 2, 1) == approx(0.00302)
    assert cm.head_step_s(problem, "fast", 2, 1) == approx(0.01202)
    # timed with the all-reduce included: nothing added
    assert cm.embedding_step_s(problem, "fast", 4, 1) == approx(0.003)
    assert cm.head_step_s(problem, "fast", 4, 1) == approx(0.012)


# ---- pipeline p2p --------------------------------------------------------------------------------------------


def test_p2p_message_bytes():
    assert cm.p2p_message_bytes(toy_model(), 1) == 2e6  # 1 x 1000 x 1000 x 2
    assert cm.p2p_message_bytes(toy_model(), 4) == 8e6


def test_p2p_same_node_uses_the_intra_node_link():
    # 2e6 B / 1e11 B/s = 2e-5 s
    assert cm.p2p_send_s(toy_problem(), "fast", "fast", True, 2, 1) == approx(2e-5)
    # slow: 2e6 / 1e10 = 2e-4 s
    assert cm.p2p_send_s(toy_problem(), "slow", "slow", True, 2, 1) == approx(2e-4)


def test_p2p_inter_node_nic_shared_by_the_senders():
    problem = toy_problem()
    # one sender: 2e6 / 5e10 = 4e-5
    assert cm.p2p_send_s(problem, "fast", "fast", False, 1, 1) == approx(4e-5)
    # two senders share the NIC: 2e6 / 2.5e10 = 8e-5
    assert cm.p2p_send_s(problem, "fast", "fast", False, 2, 1) == approx(8e-5)
    # eight GPUs per stage but four per node: 2e6 / (5e10 / 4) = 1.6e-4
    assert cm.p2p_send_s(problem, "fast", "fast", False, 8, 1) == approx(1.6e-4)


def test_p2p_inter_node_takes_the_slower_nic():
    problem = toy_problem()
    # w = 1: fast 5e10, slow 1e10 -> 2e6 / 1e10 = 2e-4 s, either direction
    assert cm.p2p_send_s(problem, "fast", "slow", False, 1, 1) == approx(2e-4)
    assert cm.p2p_send_s(problem, "slow", "fast", False, 1, 1) == approx(2e-4)
    # w = 2: fast 5e10 / 2 = 2.5e10, slow 1e10 / 2 = 5e9 -> 2e6 / 5e9 = 4e-4 s
    assert cm.p2p_send_s(problem, "fast", "slow", False, 2, 1) == approx(4e-4)


# ---- 1F1B pipeline -------------------------------------------------------------------------------------------


def test_pipeline_time_1f1b():
    # (m - 1) x max + sum = 3 x 3 + 6 = 15
    assert cm.pipeline_time_s([1.0, 2.0, 3.0], 4) == approx(15.0)
    # one micro-batch: just the sum
    assert cm.pipeline_time_s([1.0, 2.0, 3.0], 1) == approx(6.0)
    # one stage: m x t
    assert cm.pipeline_time_s([0.5], 8) == approx(4.0)


# ---- DP all-reduce -------------------------------------------------------------------------------------------


def test_dp_allreduce_inside_a_node():
    # bf16 job: fp32 gradients. 1e8 parameters, tp 2 -> 5e7 per GPU x 4 B = 2e8 B; dp 4: 2 x 3/4 x 2e8 / 1e11 = 3e-3
    assert cm.dp_allreduce_s(toy_problem(), "fast", 1e8, 2, 4, False) == approx(3e-3)
    # fp16 job: 16-bit gradients, 1e8 B -> 1.5e-3 s
    fp16 = JobSpec(global_batch_size=8, train_iterations=1000, precision="fp16")
    assert cm.dp_allreduce_s(toy_problem(job=fp16), "fast", 1e8, 2, 4, False) == approx(1.5e-3)
    # bf16 with fp32 reduction turned off (Megatron's --grad-reduce-in-bf16): 2 B again
    bf16_16 = JobSpec(global_batch_size=8, train_iterations=1000, grad_reduce_in_fp32=False)
    assert cm.dp_allreduce_s(toy_problem(job=bf16_16), "fast", 1e8, 2, 4, False) == approx(1.5e-3)


def test_gradient_bytes_follow_the_job():
    assert cm.gradient_bytes(JOB) == 4  # bf16: Megatron reduces in fp32
    assert cm.gradient_bytes(JobSpec(global_batch_size=8, train_iterations=1, precision="fp16")) == 2
    assert cm.gradient_bytes(JobSpec(global_batch_size=8, train_iterations=1, precision="fp16",
                                     grad_reduce_in_fp32=True)) == 4


def test_dp_allreduce_across_nodes_uses_the_nic_per_ring():
    # spans nodes: the tp = 2 rings of a node share its NIC: min(1e11, 5e10 / 2) = 2.5e10;
    # 5e7 x 4 B = 2e8 B, 2 x 3/4 x 2e8 = 3e8 B / 2.5e10 = 0.012 s
    assert cm.dp_allreduce_s(toy_problem(), "fast", 1e8, 2, 4, True) == approx(0.012)
    # tp 1: one ring, the whole NIC: min(1e11, 5e10) -> 2 x 3/4 x 4e8 / 5e10 = 0.012 s (the old per-GPU share
    # 5e10 / 4 would have given 0.048 s)
    assert cm.dp_allreduce_s(toy_problem(), "fast", 1e8, 1, 4, True) == approx(0.012)
    # slow, tp 1 dp 2 spanning: min(PCIe all-reduce 5e9, NIC 1e10) = 5e9; 1e8 x 4 B = 4e8; 2 x 1/2 x 4e8 / 5e9
    assert cm.dp_allreduce_s(toy_problem(), "slow", 1e8, 1, 2, True) == approx(0.08)


def test_dp_allreduce_single_replica_is_free():
    assert cm.dp_allreduce_s(toy_problem(), "fast", 1e8, 2, 1, False) == 0.0


# ---- optimizer step ------------------------------------------------------------------------------------------


def test_optimizer_step_memory_bound():
    # 1e8 / tp 2 = 5e7 per GPU x 28 B / 1e12 B/s = 1.4e-3 s
    assert cm.optimizer_step_s(toy_problem(), "fast", 1e8, 2, 4) == approx(1.4e-3)
    # slow GPU (500 GB/s): 5e7 x 28 / 5e11 = 2.8e-3 s
    assert cm.optimizer_step_s(toy_problem(), "slow", 1e8, 2, 4) == approx(2.8e-3)


def test_optimizer_step_distributed_is_sharded_over_dp():
    job = JobSpec(global_batch_size=8, train_iterations=1000, distributed_optimizer=True)
    # 1e8 / 2 / 4 = 1.25e7 x 28 / 1e12 = 3.5e-4 s
    assert cm.optimizer_step_s(toy_problem(job=job), "fast", 1e8, 2, 4) == approx(3.5e-4)


# ---- memory: states, parameters ------------------------------------------------------------------------------


def test_state_bytes_per_param():
    # Megatron's distributed-optimizer table: bf16 (fp32 main grads) 6 + 12/d, fp16 4 + 16/d
    assert cm.state_bytes_per_param(JOB, 4) == 18  # bf16 weight 2 + fp32 grad 4 + master, m, v 12
    dist = JobSpec(global_batch_size=8, train_iterations=1000, distributed_optimizer=True)
    assert cm.state_bytes_per_param(dist, 4) == approx(9.0)  # 6 + 12 / 4
    assert cm.state_bytes_per_param(dist, 1) == approx(18.0)
    fp16 = JobSpec(global_batch_size=8, train_iterations=1000, precision="fp16")
    assert cm.state_bytes_per_param(fp16, 4) == 20  # fp16 weight 2 + grad 2 + fp32 main grad 4 + 12
    fp16_dist = JobSpec(global_batch_size=8, train_iterations=1000, precision="fp16", distributed_optimizer=True)
    assert cm.state_bytes_per_param(fp16_dist, 4) == approx(8.0)  # 4 + 16 / 4
    fp16_fp32 = JobSpec(global_batch_size=8, train_iterations=1000, precision="fp16", grad_reduce_in_fp32=True)
    assert cm.state_bytes_per_param(fp16_fp32, 4) == 18  # the fp32 grad buffer is the main grad


def test_stage_parameters_tied():
    m = toy_model()
    # first stage, 2 layers: 2 x 12,002,000 + 1e7 = 34,004,000
    assert cm.stage_parameters(m, {"layer": 2}, True, False, 2) == 34_004_000
    # middle stage: layers only
    assert cm.stage_parameters(m, {"layer": 1}, False, False, 3) == 12_002_000
    # last stage, pp > 1, tied: 2 layers + norm 1000 + copy of the embedding 1e7 = 34,005,000
    assert cm.stage_parameters(m, {"layer": 2}, False, True, 2) == 34_005_000
    # pp = 1: one copy of the tied matrix: 4 x 12,002,000 + 1e7 + 1000 = 58,009,000
    assert cm.stage_parameters(m, {"layer": 4}, True, True, 1) == 58_009_000


def test_stage_parameters_untied_and_learned_positions():
    m = toy_model(tied_embeddings=False)
    # last stage: 2 layers + norm + own output matrix: 24,004,000 + 1000 + 1e7 = 34,005,000
    assert cm.stage_parameters(m, {"layer": 2}, False, True, 2) == 34_005_000
    # pp = 1: both matrices: 48,008,000 + 1e7 + 1000 + 1e7 = 68,009,000
    assert cm.stage_parameters(m, {"layer": 4}, True, True, 1) == 68_009_000
    # learned positions add s h = 1e6 on the first stage: 0 layers + 1e7 + 1e6
    learned = toy_model(position_embedding="learned")
    assert cm.stage_parameters(learned, {}, True, False, 2) == 11_000_000


# ---- memory: activations -------------------------------------------------------------------------------------


def test_korthikanti_activation_bytes():
    # s b h (10 + 24/t + 5 a s / (h t)): t 1: 1e6 x 74; t 2: 1e6 x 42; b 2, t 1: 2e6 x 74
    assert korthikanti_activation_bytes(toy_model(), 1, 1) == approx(74e6)
    assert korthikanti_activation_bytes(toy_model(), 1, 2) == approx(42e6)
    assert korthikanti_activation_bytes(toy_model(), 2, 1) == approx(148e6)


@pytest.mark.parametrize(
    "tp, recompute, expected",
    [
        (1, "none", 74e6),
        (2, "none", 42e6),
        (1, "selective", 34e6),  # 1e6 x (10 + 24)
        (2, "selective", 22e6),  # 1e6 x (10 + 12)
        (1, "full", 2e6),  # 2 s b h: the layer input only
        (2, "full", 2e6),
    ],
)
def test_layer_activation_bytes(tp, recompute, expected):
    assert cm.layer_activation_bytes(toy_problem(), "fast", LAYER, tp, 1, recompute) == approx(expected)


def test_layer_activation_bytes_prefers_measured_bytes():
    # the (X, layer, tp 1, b 2) entry carries 5e7 measured bytes; Korthikanti would say 148e6
    assert cm.layer_activation_bytes(toy_problem(), "fast", LAYER, 1, 2, "none") == approx(5e7)


def test_layer_activation_bytes_cross_attention_counts_twice():
    kinds = [LayerKindSpec(name="enc", num_layers=2), LayerKindSpec(name="dec", num_layers=2, cross_attention=True)]
    table = ProfileTable(name="t5-toy", entries={("X", "dec", 1, 1): ProfileEntry(forward_s=0.01, backward_s=0.02)})
    problem = toy_problem(model=toy_model(layer_kinds=kinds), profile=table)
    assert cm.layer_activation_bytes(problem, "fast", kinds[1], 1, 1, "none") == approx(148e6)  # 2 x 74e6
    assert cm.layer_activation_bytes(problem, "fast", kinds[1], 1, 1, "selective") == approx(68e6)  # 2 x 34e6
    assert cm.layer_activation_bytes(problem, "fast", kinds[1], 1, 1, "full") == approx(2e6)


def test_logits_bytes():
    # 6 s b V / t = 6 x 1000 x 1 x 10000 / 2 = 3e7 (16-bit logits 2 + fp32 copy 4)
    assert cm.logits_bytes(toy_model(), 2, 1) == approx(3e7)
    assert cm.logits_bytes(toy_model(), 1, 1) == approx(6e7)


def test_memory_capacity_is_usable_memory_less_headroom():
    # X: 16 GiB, no usable_memory_gib: 16 GiB x (1 - 0.10) = 14.4 GiB
    assert cm.memory_capacity_bytes(toy_problem(), "X") == approx(14.4 * GIB)
    # a card that exposes 15 GiB of its 16, headroom 0.2: 15 x 0.8 = 12 GiB
    card = GpuSpec(name="X", memory_gib=16, usable_memory_gib=15, peak_fp16_tflop_per_s=100, hbm_gbyte_per_s=1000)
    problem = Problem(model=toy_model(), cluster=CLUSTER, job=JOB, gpus={"X": card, "Y": GPU_Y},
                      profile=toy_profile(), memory_headroom=0.2)
    assert cm.memory_capacity_bytes(problem, "X") == approx(12 * GIB)


def test_memory_reserve_is_two_gib():
    assert cm.MEMORY_RESERVE_BYTES == 2 * GIB == 2_147_483_648


def _activation_part(est_stage, params: float, tp: int, logits: float = 0.0) -> float:
    """memory_bytes minus states and reserve (and logits): what the in-flight micro-batches hold."""
    return est_stage.memory_bytes - params / tp * 18 - cm.MEMORY_RESERVE_BYTES - logits


def test_in_flight_micro_batches_min_pp_minus_i_m():
    # 4 stages of one layer on fast, tp 1, dp 1, mbs 1. One layer holds 74e6 B per micro-batch.
    stages = [("fast", 1)] * 4
    # gbs 8 -> m = 8: stage i holds min(4 - i, 8) = 4, 3, 2, 1 micro-batches
    est = cm.estimate(toy_problem(), plan(1, 1, 1, *stages))
    # 12,002,000 per layer; + embedding 1e7 on the first; + norm 1000 + tied copy 1e7 on the last
    params = [22_002_000, 12_002_000, 12_002_000, 22_003_000]
    held = [_activation_part(s, p, 1, 6e7 if i == 3 else 0.0) for i, (s, p) in enumerate(zip(est.stages, params))]
    assert held == [approx(4 * 74e6), approx(3 * 74e6), approx(2 * 74e6), approx(1 * 74e6)]
    # gbs 2 -> m = 2: min(4 - i, 2) = 2, 2, 2, 1
    job = JobSpec(global_batch_size=2, train_iterations=1000)
    est = cm.estimate(toy_problem(job=job), plan(1, 1, 1, *stages))
    held = [_activation_part(s, p, 1, 6e7 if i == 3 else 0.0) for i, (s, p) in enumerate(zip(est.stages, params))]
    assert held == [approx(2 * 74e6), approx(2 * 74e6), approx(2 * 74e6), approx(1 * 74e6)]


def test_last_stage_params_include_the_tied_copy():
    est = cm.estimate(toy_problem(), plan(1, 1, 1, ("fast", 3), ("fast", 1)))
    # first: 3 x 12,002,000 + 1e7 = 46,006,000; last: 12,002,000 + 1000 + 1e7 = 22,003,000
    assert [s.parameters for s in est.stages] == [46_006_000, 22_003_000]


def test_full_recompute_memory_inputs_plus_one_layer():
    # 2 stages x 2 layers, full recompute, m = 8. Stage 0 holds min(2, 8) = 2 micro-batches x 2 layers x 2e6 B
    # (inputs) + one layer's full activations 74e6 = 82e6 B; stage 1: 1 x 2 x 2e6 + 74e6 = 78e6 B (+ logits 6e7)
    est = cm.estimate(toy_problem(), plan(1, 1, 1, ("fast", 2, "full"), ("fast", 2, "full")))
    assert _activation_part(est.stages[0], 34_004_000, 1) == approx(82e6)
    assert _activation_part(est.stages[1], 34_005_000, 1, 6e7) == approx(78e6)



def test_full_recompute_working_set_is_the_largest_kind():
    # T5 toy: encoder 74e6 B per layer, decoder (cross-attention) 2 x 74e6 = 148e6 B: the working set is 148e6
    # whatever kinds the stage holds
    kinds = [LayerKindSpec(name="enc", num_layers=2), LayerKindSpec(name="dec", num_layers=2, cross_attention=True)]
    e = ProfileEntry(forward_s=0.01, backward_s=0.02)
    table = ProfileTable(name="t5-toy", entries={("X", "enc", 1, 1): e, ("X", "dec", 1, 1): e})
    problem = toy_problem(model=toy_model(layer_kinds=kinds), profile=table)
    assert cm.full_recompute_working_bytes(problem, "fast", 1, 1) == approx(148e6)

# ---- placement ----------------------------------------------------------------------------------------------


def test_place_packs_a_run_two_stages_per_node():
    # w = 2 on 4-GPU nodes: slots 0-1 | 2-3 on node 0, 4-5 | 6-7 on node 1
    p = cm.place(toy_problem(), plan(1, 2, 1, ("fast", 1), ("fast", 1), ("fast", 1), ("fast", 1)))
    assert p.send_same_node == (True, False, True)
    assert p.stage_spans_nodes == (False, False, False, False)
    assert p.nodes == {"fast": 2}


def test_place_partially_filled_node():
    # w = 1, 3 stages: slots 0, 1, 2 on one node (one GPU idle); ceil(3 / 4) = 1 node
    p = cm.place(toy_problem(), plan(1, 1, 1, ("fast", 2), ("fast", 1), ("fast", 1)))
    assert p.send_same_node == (True, True)
    assert p.nodes == {"fast": 1}


def test_place_stage_spanning_nodes():
    # tp 2 x dp 4 = 8 GPUs per stage on 4-GPU nodes: every stage spans 2 nodes; slot x -> x + 8 is another node
    p = cm.place(toy_problem(), plan(2, 4, 1, ("fast", 2), ("fast", 2)))
    assert p.stage_spans_nodes == (True, True)
    assert p.send_same_node == (False,)
    assert p.nodes == {"fast": 4}


def test_place_stage_straddling_a_node_boundary():
    # w = 3: stage 0 on slots 0-2 (node 0), stage 1 on slots 3-5 (nodes 0 and 1); slot 1 -> 4 crosses
    p = cm.place(toy_problem(), plan(1, 3, 1, ("fast", 2), ("fast", 2)))
    assert p.stage_spans_nodes == (False, True)
    assert p.send_same_node == (False,)
    assert p.nodes == {"fast": 2}  # ceil(6 / 4)


def test_place_runs_of_two_types():
    # fast, fast | slow, slow with w = 2: the fast run shares one node; slow nodes hold 2 GPUs = one stage each
    p = cm.place(toy_problem(), plan(1, 2, 1, ("fast", 1), ("fast", 1), ("slow", 1), ("slow", 1)))
    assert p.send_same_node == (True, False, False)
    assert p.stage_spans_nodes == (False,) * 4
    assert p.nodes == {"fast": 1, "slow": 2}


def test_place_split_run_rents_fresh_nodes():
    # fast, slow, fast with w = 1: each run of one type starts on a fresh node, so fast needs 2 nodes although
    # ceil(2 GPUs / 4 per node) = 1 (docs/cost-model.md, "Placement and nodes rented")
    p = cm.place(toy_problem(), plan(1, 1, 1, ("fast", 1), ("slow", 2), ("fast", 1)))
    assert p.send_same_node == (False, False)
    assert p.nodes == {"fast": 2, "slow": 1}


# ---- estimate end to end -------------------------------------------------------------------------------------


def test_estimate_two_stages_by_hand():
    """tp 1, dp 2, mbs 1, stages fast:2, slow:2; gbs 8 -> m = 8 / 2 = 4; 1000 iterations.

    placement: w = 2; fast slots 0-1 (1 node), slow slots 0-1 (1 node); the send crosses node types.
    stage 0 compute: 2 x (0.01 + 0.02) + embedding 0.003 = 0.063
    stage 0 p2p: 2e6 B over min(5e10 / 2, 1e10 / 2) = 5e9 B/s = 4e-4           -> t0 = 0.0634
    stage 1 compute: 2 x (0.02 + 0.04) + head 0.015 = 0.135; p2p 4e-4             -> t1 = 0.1354
    pipeline: 3 x 0.1354 + (0.0634 + 0.1354) = 0.4062 + 0.1988 = 0.605
    parameters: stage 0 = 2 x 12,002,000 + 1e7 = 34,004,000; stage 1 = 24,004,000 + 1000 + 1e7 = 34,005,000
    DP all-reduce (dp 2, 2 x 1/2 = 1; bf16 job: fp32 gradients, 4 B): stage 0 136,016,000 B / 1e11 = 1.36016e-3;
        stage 1 136,020,000 B / (PCIe all-reduce 0.5 x 1e10) = 0.027204
    optimizer: stage 0 34,004,000 x 28 / 1e12 = 9.52112e-4; stage 1 34,005,000 x 28 / 5e11 = 1.90428e-3;
        + the gradient buffer's passes (section 8b, dp 2: zero, norm, scale = 4 passes x 4 B): stage 0
        34,004,000 x 16 / 1e12 = 5.44064e-4 -> 1.496176e-3; stage 1 34,005,000 x 16 / 5e11 = 1.08816e-3 -> 2.99244e-3
    tied-embedding all-reduce (pp = 2, first on fast, last on slow, different nodes): V h / t = 1e7 elements x 4 B
        = 4e7 B over min(5e10 / 2, 1e10 / 2) = 5e9 B/s, 2 ranks: 2 x 1/2 x 4e7 / 5e9 = 8e-3
    iteration: 0.605 + 0.027204 + 8e-3 + 2.99244e-3 = 0.64319644; training 643.19644 s
    USD/hour: 1 x 10 + 1 x 2 = 12; cost 12 x 643.19644 / 3600
    memory stage 0: 34,004,000 x 18 + min(2, 4) x 2 x 74e6 + 2 GiB = 612,072,000 + 296e6 + 2,147,483,648
    memory stage 1: 34,005,000 x 18 + min(1, 4) x 2 x 74e6 + 6e7 + 2 GiB = 612,090,000 + 148e6 + 6e7 + 2,147,483,648
    capacity: 0.9 x 16 GiB and 0.9 x 8 GiB (default headroom 0.10)
    """
    est = cm.estimate(toy_problem(), plan(1, 2, 1, ("fast", 2), ("slow", 2)))
    assert est.num_micro_batches == 4
    s0, s1 = est.stages
    assert (s0.compute_s, s0.p2p_s, s0.time_s) == (approx(0.063), approx(4e-4), approx(0.0634))
    assert (s1.compute_s, s1.p2p_s, s1.time_s) == (approx(0.135), approx(4e-4), approx(0.1354))
    assert est.pipeline_time_s == approx(0.605)
    assert (s0.parameters, s1.parameters) == (34_004_000, 34_005_000)
    assert (s0.dp_allreduce_s, s1.dp_allreduce_s) == (approx(1.36016e-3), approx(0.027204))
    assert est.dp_allreduce_s == approx(0.027204)
    assert (s0.optimizer_s, s1.optimizer_s) == (approx(1.496176e-3), approx(2.99244e-3))
    assert est.optimizer_s == approx(2.99244e-3)
    assert est.embedding_allreduce_s == approx(8e-3)
    assert est.iteration_time_s == approx(0.64319644)
    assert est.iterations == 1000
    assert est.training_time_s == approx(643.19644)
    assert est.nodes == {"fast": 1, "slow": 1}
    assert est.usd_per_hour == approx(12.0)
    assert est.cost_usd == approx(12 * 643.19644 / 3600)
    assert s0.memory_bytes == approx(3_055_555_648)
    assert s1.memory_bytes == approx(2_967_573_648)
    assert (s0.memory_capacity_bytes, s1.memory_capacity_bytes) == (approx(0.9 * 16 * GIB), approx(0.9 * 8 * GIB))
    assert est.fits


def test_estimate_training_length_from_tokens():
    # ceil(8,000,001 tokens / (8 x 1000 tokens per iteration)) = 1001 iterations
    job = JobSpec(global_batch_size=8, train_tokens=8_000_001)
    est = cm.estimate(toy_problem(job=job), plan(1, 2, 1, ("fast", 2), ("slow", 2)))
    assert est.iterations == 1001
    assert est.training_time_s == approx(1001 * 0.64319644)


def test_embedding_allreduce_between_first_and_last_stage():
    problem = toy_problem()
    # across nodes, w = 4 on fast: V h / t x 4 B = 4e7 B over 5e10 / 4 = 1.25e10 -> 3.2e-3 s
    assert cm.embedding_allreduce_s(problem, "fast", "fast", False, 4, 1) == approx(3.2e-3)
    # tp 2 halves the message: 2e7 B -> 1.6e-3 s
    assert cm.embedding_allreduce_s(problem, "fast", "fast", False, 4, 2) == approx(1.6e-3)
    # inside one node: NVLink all-reduce 1e11 B/s -> 4e-4 s
    assert cm.embedding_allreduce_s(problem, "fast", "fast", True, 1, 1) == approx(4e-4)
    # untied embeddings: no exchange
    assert cm.embedding_allreduce_s(toy_problem(model=toy_model(tied_embeddings=False)), "fast", "slow", False, 1,
                                    1) == 0.0


def test_ends_share_a_node_only_when_the_pipeline_fits_one_node():
    # fast has 4 GPUs per node: 2 stages x w 2 = 4 fit one node; 3 stages x 2 do not; pp = 1 has no pair
    assert cm.place(toy_problem(), plan(1, 2, 1, ("fast", 2), ("fast", 2))).ends_same_node
    assert not cm.place(toy_problem(), plan(1, 2, 1, ("fast", 2), ("fast", 1), ("fast", 1))).ends_same_node
    assert not cm.place(toy_problem(), plan(1, 1, 1, ("fast", 2), ("slow", 2))).ends_same_node
    assert not cm.place(toy_problem(), plan(1, 1, 1, ("fast", 4))).ends_same_node
    # and estimate() then uses the intra-node rate: 4e7 B / 1e11 = 4e-4 s
    est = cm.estimate(toy_problem(), plan(1, 2, 1, ("fast", 2), ("fast", 2)))
    assert est.embedding_allreduce_s == approx(4e-4)
    assert cm.estimate(toy_problem(), plan(1, 1, 1, ("fast", 4))).embedding_allreduce_s == 0.0


def test_estimate_flags_a_stage_that_does_not_fit():
    # the same plan on a Y with 2.5 GiB: stage 1 needs 2,967,573,648 B > 0.9 x 2.5 GiB = 2,415,919,104 B
    small = GpuSpec(name="Y", memory_gib=2.5, peak_fp16_tflop_per_s=50, hbm_gbyte_per_s=500)
    problem = Problem(model=toy_model(), cluster=CLUSTER, job=JOB, gpus={"X": GPU_X, "Y": small},
                      profile=toy_profile())
    est = cm.estimate(problem, plan(1, 2, 1, ("fast", 2), ("slow", 2)))
    assert est.stages[0].fits and not est.stages[1].fits
    assert not est.fits


# ---- check_plan ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad_plan, message",
    [
        (plan(3, 1, 1, ("fast", 4)), r"tp = 3 does not divide num_attention_heads 8"),
        (plan(1, 1, 1, ("fast", 2), ("fast", 1)), r"stage layers sum to 3 but toy has 4 layers"),
        (plan(1, 3, 1, ("fast", 4)), r"dp x micro_batch_size = 3 x 1 = 3 does not divide global_batch_size 8"),
        (plan(1, 8, 1, *[("fast", 1)] * 4), r"needs 8 nodes of fast but the cluster has 4"),
        (plan(1, 1, 1, ("fast", 2), ("fast", 0), ("fast", 2)), r"stages\[1\]\.num_layers = 0"),
        (plan(4, 1, 1, ("slow", 4)), r"tp = 4: larger than the 2 GPUs per node of slow"),
        (plan(1, 1, 1, ("medium", 4)), r"unknown node type 'medium'; known: fast, slow"),
    ],
)
def test_check_plan_errors(bad_plan, message):
    with pytest.raises(SpecError, match=message):
        cm.check_plan(toy_problem(), bad_plan)
    with pytest.raises(SpecError, match=message):
        cm.estimate(toy_problem(), bad_plan)


def test_check_plan_tp_must_divide_kv_heads():
    gqa = toy_model(num_kv_heads=2)
    with pytest.raises(SpecError, match=r"tp = 4 does not divide the key/value heads 2"):
        cm.check_plan(toy_problem(model=gqa), plan(4, 1, 1, ("fast", 4)))


def test_check_plan_allows_empty_first_and_last_stage():
    cm.check_plan(toy_problem(), plan(1, 1, 1, ("fast", 0), ("fast", 4), ("fast", 0)))


# ---- analytic roofline ---------------------------------------------------------------------------------------


def test_layer_forward_flops_gpt_is_24bsh2_plus_4bs2h():
    model = toy_model()
    for b in (1, 3):
        s, h = 1000, 1000
        assert layer_forward_flops(model, LAYER, b) == approx(24 * b * s * h**2 + 4 * b * s**2 * h)
    assert layer_forward_flops(model, LAYER, 1) == approx(28e9)


def test_layer_forward_flops_gated_mlp():
    # MLP 2 b s h f x 3 = 24e9; attention 8e9 + 4e9 -> 36e9
    assert layer_forward_flops(toy_model(gated_mlp=True), LAYER, 1) == approx(36e9)


def test_layer_forward_flops_gqa():
    # kv heads 2 of 8: k = 2 x 125 = 250. projections 2 b s h (q + 2k) + 2 b s q h
    # = 2 x 1000 x 1000 x (1000 + 500) + 2 x 1000 x 1000 x 1000 = 3e9 + 2e9 = 5e9; core 4e9; MLP 16e9 -> 25e9
    assert layer_forward_flops(toy_model(num_kv_heads=2), LAYER, 1) == approx(25e9)


def test_layer_forward_flops_cross_attention():
    # attention (8e9 + 4e9) twice + MLP 16e9 = 40e9
    dec = LayerKindSpec(name="dec", num_layers=4, cross_attention=True)
    assert layer_forward_flops(toy_model(), dec, 1) == approx(40e9)


def test_efficiency_saturates():
    # X: no sustained rate in the spec -> 0.75 x 1e14 = 7.5e13; half point 7.5e13 x 41e-6 = 3.075e9 FLOPs
    assert efficiency(3.075e9, GPU_X) == approx(0.375)
    assert efficiency(9 * 3.075e9, GPU_X) == approx(0.675)  # 0.75 x 9 / 10
    # a cited sustained rate of 40 TFLOP/s on a 100 TFLOP/s card: 0.4 x W / (W + 4e13 x 41e-6 = 1.64e9)
    slow = GpuSpec(name="S", memory_gib=16, peak_fp16_tflop_per_s=100, sustained_fp16_tflop_per_s=40,
                   hbm_gbyte_per_s=1000)
    assert efficiency(1.64e9, slow) == approx(0.2)
    assert efficiency(1e15, slow) == pytest.approx(0.4, rel=1e-5)


def test_compute_time_is_work_over_sustained_plus_fixed_time():
    # W / (peak x efficiency) = W / sustained + 41 us: 28e9 / 4e13 + 4.1e-5 = 7.41e-4
    slow = GpuSpec(name="S", memory_gib=16, peak_fp16_tflop_per_s=100, sustained_fp16_tflop_per_s=40,
                   hbm_gbyte_per_s=1000)
    assert 28e9 / (1e14 * efficiency(28e9, slow)) == approx(7.41e-4)


LAYER_FWD_X = 28e9 / 7.5e13 + 41e-6 + 1.48e-4 + 1e-4  # compute + fixed GEMM time + traffic + launches


def test_analytic_layer_forward_time():
    # X: 1e14 FLOP/s peak (sustained 0.75 x = 7.5e13), 1e12 B/s HBM. tp 1, b 1: W = 28e9
    # compute 28e9 / 7.5e13 + 41e-6 = 4.14333e-4; traffic 2 x 74e6 / 1e12 = 1.48e-4; 20 kernels x 5e-6 = 1e-4
    assert layer_forward_s(toy_model(), LAYER, GPU_X, 1, 1) == approx(LAYER_FWD_X)
    # tp 2: W = 14e9: 14e9 / 7.5e13 + 41e-6; traffic 2 x 42e6 / 1e12 = 8.4e-5; launches 1e-4
    assert layer_forward_s(toy_model(), LAYER, GPU_X, 2, 1) == approx(14e9 / 7.5e13 + 41e-6 + 8.4e-5 + 1e-4)


def test_analytic_embedding_and_head():
    # embedding: gather, 2 x s b h x 2 B = 4e6 B / 1e12 = 4e-6, + 3 launches 1.5e-5
    assert embedding_forward_s(toy_model(), GPU_X, 1, 1) == approx(1.9e-5)
    # head: 2 b s h V = 2e10 FLOPs -> 2e10 / 7.5e13 + 41e-6; logits traffic 3 x 4 b s V = 1.2e8 B / 1e12 = 1.2e-4;
    # 6 launches 3e-5
    assert head_forward_s(toy_model(), GPU_X, 1, 1) == approx(2e10 / 7.5e13 + 41e-6 + 1.2e-4 + 3e-5)


def test_analytic_profile_backward_is_twice_forward_and_excludes_tp_comm():
    model = toy_model()
    prof = AnalyticProfile(model=model, gpus=GPUS)
    entry = prof.get("X", "layer", 1, 1)
    assert entry.forward_s == approx(LAYER_FWD_X)
    assert entry.backward_s == approx(2 * LAYER_FWD_X)
    assert not entry.tp_comm_included
    assert prof.get("X", "embedding", 1, 1).backward_s == approx(3.8e-5)
    # the cost model adds the TP all-reduces on the node's intra link: tp 2 step = 3 x fwd + 4 x 2e-5
    problem = toy_problem(profile=prof)
    fwd2 = layer_forward_s(model, LAYER, GPU_X, 2, 1)
    assert cm.layer_step_s(problem, "fast", LAYER, 2, 1, "none") == approx(3 * fwd2 + 8e-5)
    assert math.isclose(cm.layer_step_s(problem, "fast", LAYER, 1, 1, "none"), 3 * LAYER_FWD_X, rel_tol=REL)
