"""DeepSpeed 0.3.13's pipeline engine (AMP's fork), priced when the profile's eager engine names it: the
TrainSchedule's lock-step exchanges, the messages it sends (the half attention mask, the tp-partitioned activation),
the receiver's all-gather, hand-computed. docs/cost-model.md section 6c."""

from __future__ import annotations

from dataclasses import replace

import pytest

from optsearch.costmodel import (
    deepspeed_activation_message,
    deepspeed_allgather_s,
    deepspeed_gradient_message,
    deepspeed_send_s,
    deepspeed_stage_forward_s,
    deepspeed_step,
    deepspeed_train_schedule_s,
    estimate,
    interleaved_pipeline_time_s,
    pipe_engine_of,
    place,
    stage_layer_kinds,
)
from optsearch.plan import Plan, Stage
from optsearch.problem import build_problem
from optsearch.profile.analytic import EAGER_ENGINES

MIB = 2**20


def stages(node: str, *layers: int) -> tuple[Stage, ...]:
    return tuple(Stage(node_type=node, num_layers=k) for k in layers)


def amp_problem(cluster: str = "amp-g4dn", engine: str | None = "amp-megatron-v1.1.5"):
    problem = build_problem("gpt2-medium", cluster, profile="analytic", global_batch_size=32)
    return replace(problem, profile=replace(problem.profile, eager_engine=engine, unfused_kernels=True))


def test_step_to_micro_batch_follows_deepspeed():
    # TrainSchedule._step_to_micro_batch, 4 stages: stage 0 runs forward 0 at step 0; stage 1 forward 0 at step 1;
    # the last stage (3) forward 0 at step 3 and its backward 0 at step 4; stage 2 backward 0 at step 5;
    # stage 0 backward 0 at step 7 (= 2 x (pp - 1) + 1)
    assert deepspeed_step(0, 0, 4) == (0, True)
    assert deepspeed_step(1, 1, 4) == (0, True)
    assert deepspeed_step(3, 3, 4) == (0, True)
    assert deepspeed_step(4, 3, 4) == (0, False)
    assert deepspeed_step(5, 2, 4) == (0, False)
    assert deepspeed_step(7, 0, 4) == (0, False)
    assert deepspeed_step(2, 0, 4) == (1, True)
    assert deepspeed_step(0, 1, 4)[0] < 0  # an odd stage's first step: a backward of no micro-batch


def test_schedule_of_equal_stages_without_communication_is_m_plus_pp_minus_1_slots():
    assert deepspeed_train_schedule_s([1.0], [2.0], [], [], 4) == pytest.approx(12.0)  # pp 1: m (F + B)
    assert deepspeed_train_schedule_s([1.0] * 4, [2.0] * 4, [0.0] * 3, [0.0] * 3, 8) == pytest.approx(11 * 3.0)
    assert deepspeed_train_schedule_s([1.0] * 3, [2.0] * 3, [0.0] * 2, [0.0] * 2, 8) == pytest.approx(10 * 3.0)


def test_schedule_two_unequal_stages_by_hand():
    # pp 2, m 2, F = (1, 2), B = (2, 4), activation exchange 0.5, gradient exchange 0.25.
    # stage 0: F | act | F | act, grad | B | grad | B;  stage 1: act | F | B | act, grad | F | B | grad
    # t: s0 F -> 1; act at max(1, 0) -> 1.5 both; s0 F -> 2.5; s1 F -> 3.5, B -> 7.5; act at max(2.5, 7.5) -> 8.0,
    # grad -> 8.25 both; s0 B -> 10.25; s1 F -> 10.25, B -> 14.25; grad at max(10.25, 14.25) -> 14.5; s0 B -> 16.5
    assert deepspeed_train_schedule_s([1.0, 2.0], [2.0, 4.0], [0.5], [0.25], 2) == pytest.approx(16.5)
    # Megatron's 1F1B form with the same sends: t = (3.5, 6.25): (m - 1) x 6.25 + 9.75 = 16.0
    assert interleaved_pipeline_time_s([3.5, 6.25], 2, 1) == pytest.approx(16.0)


def test_messages_carry_the_half_mask_and_the_partitioned_activation():
    problem = amp_problem()
    model = problem.model  # s 1024, h 1024
    # tp 1: hidden b s h x 2 = 2 MiB + mask s x s x 2 = 2 MiB, two broadcasts
    assert deepspeed_activation_message(model, 1, 1) == (4 * MIB, 2)
    # tp 2: half the hidden (1 MiB) + the whole mask (2 MiB), + the meta tensor's broadcast: three
    assert deepspeed_activation_message(model, 1, 2) == (3 * MIB, 3)
    assert deepspeed_activation_message(model, 4, 4) == (2 * MIB + 2 * MIB, 3)
    # gradients go back whole, one broadcast
    assert deepspeed_gradient_message(model, 4) == (8 * MIB, 1)


def test_send_over_the_slower_shared_nic_with_a_latency_per_call():
    problem = amp_problem("amp-p3-g4dn")
    p3, g4 = "p3.8xlarge", "g4dn.12xlarge"
    # p3 -> g4dn across nodes, 2 GPUs per stage: min(10, 50) Gbit/s / 2 = 6.25e8 B/s; 3 MiB; 3 x (8.4 + 9.6) us
    seconds = deepspeed_send_s(problem, p3, g4, False, 2, (3 * MIB, 3))
    assert seconds == pytest.approx(3 * MIB / 6.25e8 + 3 * 18e-6)  # 5.087 ms
    # inside a p3 node: NVLink 100 GB/s, 8.4 + 3.4 us per call
    assert deepspeed_send_s(problem, p3, p3, True, 2, (4 * MIB, 2)) == pytest.approx(4 * MIB / 100e9 + 2 * 11.8e-6)


def test_receiver_all_gather_over_the_tp_group():
    problem = amp_problem()
    # g4dn, PCIe 15.75 GB/s x 0.5: tp 2, micro-batch 1: 1/2 x 2 MiB / 7.875e9 + 8.4 + 1 x 5.7 us
    assert deepspeed_allgather_s(problem, "g4dn.12xlarge", 2, 1) == pytest.approx(MIB / 7.875e9 + 14.1e-6)
    assert deepspeed_allgather_s(problem, "g4dn.12xlarge", 4, 2) == pytest.approx(
        0.75 * 4 * MIB / 7.875e9 + 8.4e-6 + 3 * 5.7e-6)
    assert deepspeed_allgather_s(problem, "g4dn.12xlarge", 1, 2) == 0.0


def test_engine_named_by_the_eager_engine_only():
    assert EAGER_ENGINES["amp-megatron-v1.1.5"].pipe_engine == "deepspeed-0.3.13"
    assert pipe_engine_of(amp_problem()) == "deepspeed-0.3.13"
    assert pipe_engine_of(amp_problem(engine=None)) is None
    default = build_problem("gpt2-medium", "amp-g4dn", profile="analytic", global_batch_size=32)
    assert pipe_engine_of(default) is None  # the default profile, and solve, keep Megatron-LM's 1F1B


def test_estimate_prices_the_engine_schedule_by_hand():
    problem = amp_problem()
    node = "g4dn.12xlarge"
    plan = Plan(tp=2, dp=2, micro_batch_size=2,
                stages=stages(node, 8, 6, 6, 4))
    est = estimate(problem, plan)
    m = 32 // (2 * 2)
    placement = place(problem, plan)
    kinds = stage_layer_kinds(problem.model, plan)
    assert est.num_micro_batches == m
    act = deepspeed_activation_message(problem.model, 2, 2)
    grad = deepspeed_gradient_message(problem.model, 2)
    act_s = [deepspeed_send_s(problem, node, node, placement.send_same_node[i], 4, act) for i in range(3)]
    grad_s = [deepspeed_send_s(problem, node, node, placement.send_same_node[i], 4, grad) for i in range(3)]
    # 4 GPUs per stage on 4-GPU nodes: every boundary crosses a NIC (50 Gbit/s / 4 senders)
    assert placement.send_same_node == (False, False, False)
    assert act_s[0] == pytest.approx((MIB * 2 + 2 * MIB) / (50e9 / 8 / 4) + 3 * 18e-6)
    gather = deepspeed_allgather_s(problem, node, 2, 2)
    forward = [deepspeed_stage_forward_s(problem, plan, i, kinds[i]) + (gather if i else 0.0) for i in range(4)]
    # forward + backward of every stage = its compute, the all-gather added to the receivers
    backward = [est.stages[i].compute_s - forward[i] for i in range(4)]
    assert est.stages[1].compute_s == pytest.approx(forward[1] + backward[1])
    expected = deepspeed_train_schedule_s(forward, backward, act_s, grad_s, m)
    assert est.pipeline_time_s == pytest.approx(expected)
    assert est.iteration_time_s == pytest.approx(
        expected + est.dp_allreduce_s + est.embedding_allreduce_s + est.optimizer_s)
    # a stage's p2p: the activation it sends on and the gradient it sends back
    assert est.stages[1].p2p_s == pytest.approx(act_s[1] + grad_s[0])


def test_stage_forward_counts_the_repeated_pass_and_its_all_reduces():
    from optsearch.costmodel import tp_allreduce_s

    problem = amp_problem()
    node = "g4dn.12xlarge"
    plan = Plan(tp=2, dp=2, micro_batch_size=1,
                stages=stages(node, 8, 6, 6, 4))
    kinds = stage_layer_kinds(problem.model, plan)
    layer = problem.profile.get("T4", "layer", 2, 1)
    ar = tp_allreduce_s(problem, node, 2, 1)
    # a middle stage: 6 layers x (the twice-run forward + 2 blocks x 2 passes of forward all-reduces)
    assert deepspeed_stage_forward_s(problem, plan, 1, kinds[1]) == pytest.approx(6 * (layer.forward_s + 4 * ar))
    # the first adds the embedding's forward and its all-reduce; the last the head's forward
    emb = problem.profile.get("T4", "embedding", 2, 1).forward_s
    head = problem.profile.get("T4", "head", 2, 1).forward_s
    assert deepspeed_stage_forward_s(problem, plan, 0, kinds[0]) == pytest.approx(8 * (layer.forward_s + 4 * ar)
                                                                                  + emb + ar)
    assert deepspeed_stage_forward_s(problem, plan, 3, kinds[3]) == pytest.approx(4 * (layer.forward_s + 4 * ar)
                                                                                  + head)


def test_without_the_engine_the_estimate_keeps_megatron_1f1b():
    problem = amp_problem(engine=None)
    node = "g4dn.12xlarge"
    plan = Plan(tp=2, dp=2, micro_batch_size=2,
                stages=(Stage(node_type=node, num_layers=8), Stage(node_type=node, num_layers=6),
                        Stage(node_type=node, num_layers=6), Stage(node_type=node, num_layers=4)))
    est = estimate(problem, plan)
    assert est.pipeline_time_s == pytest.approx(interleaved_pipeline_time_s([s.time_s for s in est.stages], 8, 1))


def test_param_tensors_of_gpt2_model_pipe_stages():
    from optsearch.costmodel import deepspeed_param_tensors

    assert deepspeed_param_tensors(24, True, True, 1) == 12 * 24 + 2 + 2  # pp 1: one embedding, tied in place
    assert deepspeed_param_tensors(7, True, False, 4) == 12 * 7 + 2  # word + position embeddings
    assert deepspeed_param_tensors(6, False, False, 4) == 72
    assert deepspeed_param_tensors(5, False, True, 4) == 60 + 2 + 1  # final layer norm + the tied embedding's copy


def test_unfused_fp16_optimizer_step_by_hand():
    from optsearch.costmodel import deepspeed_bucket_s, deepspeed_optimizer_step_s
    from optsearch.profile.analytic import HOST_S_PER_TORCH_OP

    problem = amp_problem()
    node = "g4dn.12xlarge"  # T4: 320 GB/s
    h = HOST_S_PER_TORCH_OP  # 30.77 us
    # 100 M parameters in 50 tensors on one GPU: synced loops 50 x 6 x h + 20 x 1e8 / 320e9 = 9.23 + 6.25 ms;
    # asynchronous loops max(50 x 3 x h = 4.62 ms, 20 x 1e8 / 320e9 = 6.25 ms); Adam 28 x 1e8 / 320e9 = 8.75 ms
    expected = 50 * 6 * h + 6.25e-3 + 6.25e-3 + 8.75e-3
    assert deepspeed_optimizer_step_s(problem, node, 1e8, 50, 1) == pytest.approx(expected)
    # tp 2 halves the bytes, not the tensors: 9.23 + 3.125 + max(4.62, 3.125) + 4.375 ms
    assert deepspeed_optimizer_step_s(problem, node, 1e8, 50, 2) == pytest.approx(
        50 * 6 * h + 3.125e-3 + 50 * 3 * h + 4.375e-3)
    # the gradient bucket's memory passes: 28 B per parameter, only with data parallelism
    assert deepspeed_bucket_s(problem, node, 1e8, 1, 2) == pytest.approx(8.75e-3)
    assert deepspeed_bucket_s(problem, node, 1e8, 1, 1) == 0.0


def test_estimate_takes_the_engine_step_and_bucket():
    from optsearch.costmodel import deepspeed_bucket_s, deepspeed_optimizer_step_s

    problem, plain = amp_problem(), amp_problem(engine=None)
    node = "g4dn.12xlarge"
    plan = Plan(tp=1, dp=16, micro_batch_size=1, stages=(Stage(node_type=node, num_layers=24),))
    est, base = estimate(problem, plan), estimate(plain, plan)
    params = est.stages[0].parameters
    assert est.optimizer_s == pytest.approx(deepspeed_optimizer_step_s(problem, node, params, 24 * 12 + 4, 1))
    assert est.dp_allreduce_s == pytest.approx(base.dp_allreduce_s + deepspeed_bucket_s(problem, node, params, 1, 16))
    # Megatron's fused step without it, with its gradient buffer's passes (section 8b: bf16, dp 16: 4 x 4 B)
    assert base.optimizer_s == pytest.approx(params * (28 + 16) / 320e9)


def test_calibration_scaled_profile_keeps_the_engine():
    from optsearch.profile.calibrate import ScaledProfile

    problem = amp_problem()
    scaled = replace(problem, profile=ScaledProfile(base=problem.profile, compute_factors={"T4": 1.5}))
    assert pipe_engine_of(scaled) == "deepspeed-0.3.13"
