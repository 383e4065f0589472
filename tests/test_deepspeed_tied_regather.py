"""DeepSpeed 0.3.13's engine (AMP's fork), two terms read from its source (docs/cost-model.md section 6c, "The
tied-embedding reduce" and "The sender's all-gather"): the tied word-embedding gradient all-reduced in the module's
fp16 whatever `fp32_allreduce` says, and the second PartitionedTensor all-gather in _exec_recv_grads. Hand-computed."""

from __future__ import annotations

from dataclasses import replace

import pytest

from optsearch.costmodel import (
    StageEstimate,
    deepspeed_allgather_s,
    deepspeed_pipeline,
    deepspeed_stage_forward_s,
    deepspeed_tied_allreduce_s,
    embedding_allreduce_s,
    estimate,
    place,
    stage_layer_kinds,
)
from optsearch.plan import Plan, Stage
from optsearch.problem import build_problem

MIB = 2**20
P3, G4 = "p3.8xlarge", "g4dn.12xlarge"
V, H = 50257, 1024  # gpt2-medium.yaml
# NCCL ring all-reduce latency of 2 ranks on 2 nodes: (8.4 + 2 x 9.6 us) x 1.9 (section 3b)
LAT_2_NODES = (8.4e-6 + 2 * 9.6e-6) * 1.9


def amp_problem(cluster: str = "amp-p3-g4dn", engine: str | None = "amp-megatron-v1.1.5"):
    problem = build_problem("gpt2-medium", cluster, profile="analytic", global_batch_size=32)
    problem = replace(problem, job=problem.job.model_copy(update={"grad_reduce_in_fp32": True}))  # AMP's config
    return replace(problem, profile=replace(problem.profile, eager_engine=engine, unfused_kernels=True))


def test_tied_allreduce_is_fp16_over_the_shared_nic():
    problem = amp_problem()
    # p3 (10 Gbit/s) to g4dn (50), 4 GPUs per stage sharing each NIC: 1.25e9 / 4 = 3.125e8 B/s;
    # a 2-rank ring moves the whole message once: V x H x 2 bytes (tp 1) / 3.125e8 = 0.3294 s
    expected = V * H * 2 / 3.125e8 + LAT_2_NODES
    assert deepspeed_tied_allreduce_s(problem, P3, G4, False, 4, 1) == pytest.approx(expected)
    assert expected == pytest.approx(0.32940, rel=1e-4)
    # tp 2, 2 GPUs per stage: half the elements, twice the share of the NIC: the same time
    assert deepspeed_tied_allreduce_s(problem, P3, G4, False, 2, 2) == pytest.approx(
        V * H / 2 * 2 / 6.25e8 + LAT_2_NODES)
    # the job's fp32 reduction (fp32_allreduce) doubles section 7b's bytes, not the engine's
    assert embedding_allreduce_s(problem, P3, G4, False, 4, 1) == pytest.approx(V * H * 4 / 3.125e8 + LAT_2_NODES)


def test_estimate_takes_the_engine_tied_allreduce_only_under_the_engine():
    plan = Plan(tp=1, dp=4, micro_batch_size=1,
                stages=(Stage(node_type=P3, num_layers=5), Stage(node_type=P3, num_layers=7),
                        Stage(node_type=P3, num_layers=6), Stage(node_type=G4, num_layers=6)))
    engine = estimate(amp_problem(), plan)
    assert engine.embedding_allreduce_s == pytest.approx(V * H * 2 / 3.125e8 + LAT_2_NODES)
    megatron = estimate(amp_problem(engine=None), plan)  # Megatron-LM's main-grad dtype: fp32 here
    assert megatron.embedding_allreduce_s == pytest.approx(V * H * 4 / 3.125e8 + LAT_2_NODES)
    assert engine.iteration_time_s == pytest.approx(engine.pipeline_time_s + engine.dp_allreduce_s
                                                    + engine.embedding_allreduce_s + engine.optimizer_s)


def _stage(node: str, layers: int, compute: float) -> StageEstimate:
    return StageEstimate(node_type=node, gpu="T4", num_layers=layers, recompute="none", compute_s=compute,
                         p2p_s=0.0, dp_allreduce_s=0.0, optimizer_s=0.0, parameters=1e6, memory_bytes=1.0,
                         memory_capacity_bytes=2.0)


def test_every_activation_sender_gathers_its_output_again_for_the_gradient():
    problem = amp_problem("amp-g4dn")
    plan = Plan(tp=2, dp=2, micro_batch_size=1, stages=tuple(Stage(node_type=G4, num_layers=6) for _ in range(4)))
    kinds = stage_layer_kinds(problem.model, plan)
    given = [_stage(G4, 6, 0.1) for _ in range(4)]
    priced, _ = deepspeed_pipeline(problem, plan, place(problem, plan), given, kinds, 16)
    # one all-gather on g4dn, tp 2, micro-batch 1: 1/2 x 2 MiB over PCIe 15.75 GB/s x 0.5 + 8.4 + 5.7 us
    gather = MIB / 7.875e9 + 14.1e-6
    assert deepspeed_allgather_s(problem, G4, 2, 1) == pytest.approx(gather)
    # first stage: sends only (the regather); middle: receives (forward gather) and sends; last: receives only
    assert [s.compute_s for s in priced] == pytest.approx([0.1 + gather, 0.1 + 2 * gather, 0.1 + 2 * gather,
                                                           0.1 + gather])
    # the regather sits in the backward step: the forward part is the stage's forward (+ the receiver's gather)
    assert deepspeed_stage_forward_s(problem, plan, 0, kinds[0]) < 0.1
    tp1 = replace(plan, tp=1, dp=4)
    priced1, _ = deepspeed_pipeline(problem, tp1, place(problem, tp1), given, stage_layer_kinds(problem.model, tp1), 8)
    assert [s.compute_s for s in priced1] == pytest.approx([0.1] * 4)  # t = 1: no PartitionedTensor, no gather
