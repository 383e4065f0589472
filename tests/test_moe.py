"""Mixture-of-experts models and expert parallelism (issue 16, item 3): the spec, the analytic profile, every new
cost-model term on hand-computed numbers, upstream's ep rules, the plan's JSON, and both solvers against brute force
over ep.

The hand numbers use test_costmodel's toy shape with an expert MLP: h = 1000, f_e = 4000 (not gated), s = 1000,
E = 8 experts, top-k = 2, no biases, RMSNorm, rotary, tied; 4 layers. b s h = 1e6 at b = 1.

    one expert 2 h f_e = 8e6; experts E x 8e6 = 64e6; router h E = 8000
    layer = attention 4 h^2 (4e6) + router 8000 + experts 64e6 + norms 2 h (2000) = 68,010,000
    forward FLOPs (b = 1) = attention 8e9 + core 4e9 + router 2 b s h E (16e6) + k x 2 b s h f_e x 2 (32e9) = 44.016e9
    activation extra (b = 1): s b [2 h (k - 1) + (k c f_e - 16 h) / t + 4 E], c = 4:
        t = 1: 1000 x (2000 + 16000 + 32) = 18.032e6 B;  t = 2: 1000 x (2000 + 8000 + 32) = 10.032e6 B
Node 'fast': 4 GPUs/node, intra 1e11 B/s (NVLink), NIC 5e10 B/s, HBM 1e12 B/s; the job has fp32 gradients (4 B).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from draws import draws

import optsearch.costmodel as cm
from optsearch.baselines.exhaustive import count_plans, partitions, type_sequences
from optsearch.candidates import SpaceOptions, dp_candidates, ep_candidates, in_search_space, micro_batch_candidates
from optsearch.candidates import node_uses, tp_candidates
from optsearch.catalog import load_model
from optsearch.errors import SpecError
from optsearch.plan import Plan, Stage, plan_from_dict
from optsearch.problem import Problem
from optsearch.profile.analytic import AnalyticProfile, layer_forward_flops, moe_activation_extra_bytes
from optsearch.search import budget_violations, objective_value
from optsearch.spec import ClusterSpec, GpuSpec, JobSpec, LayerKindSpec, ModelSpec, NodeTypeSpec
from optsearch.spec.budget import Budget

sys.path.insert(0, str(Path(__file__).parent))
from test_costmodel import CLUSTER, GPUS, JOB, approx, toy_model  # noqa: E402
from test_solver import (  # noqa: E402
    MAX_DRAW_PLANS, MAX_PLANS, _budget, assert_backends_equal_brute_force, usable_degrees,
)

MOE = LayerKindSpec(name="layer", num_layers=4, num_experts=8, moe_router_topk=2)


def moe_model(**overrides) -> ModelSpec:
    return toy_model(layer_kinds=[MOE], **overrides)


def moe_problem(job: JobSpec = JOB, **overrides) -> Problem:
    model = moe_model(**overrides)
    return Problem(model=model, cluster=CLUSTER, job=job, gpus=GPUS, profile=AnalyticProfile(model=model, gpus=GPUS))


# ---- the spec ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fields, message", [
    (dict(num_experts=8), "needs moe_router_topk"),
    (dict(moe_router_topk=2), "need num_experts"),
    (dict(moe_ffn_hidden_size=100), "need num_experts"),
    (dict(num_experts=4, moe_router_topk=5), "at most num_experts 4"),
    (dict(num_experts=1, moe_router_topk=1), "greater than or equal to 2"),
])
def test_bad_expert_fields_are_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        LayerKindSpec(name="layer", num_layers=4, **fields)


def test_toy_moe_parameter_counts():
    model = moe_model()
    assert model.expert_parameters(MOE) == 64_000_000  # E x 2 h f_e
    assert model.router_parameters(MOE) == 8000  # h E
    assert model.layer_parameters(MOE) == 68_010_000
    assert model.expert_parameters(toy_model().kinds[0]) == 0
    # one token passes through k = 2 of the 8 experts: 6 x 8e6 per layer are inactive
    assert model.parameter_count() - model.active_parameter_count() == 4 * 6 * 8_000_000
    gated = moe_model(gated_mlp=True, bias=True)  # 3 h f_e + 2 f_e + h per expert
    assert gated.expert_parameters(MOE) == 8 * (3 * 1000 * 4000 + 2 * 4000 + 1000)
    wide = LayerKindSpec(name="layer", num_layers=4, num_experts=8, moe_router_topk=2, moe_ffn_hidden_size=1000)
    assert toy_model(layer_kinds=[wide]).expert_parameters(wide) == 8 * 2 * 1000 * 1000


def test_mixtral_counts_match_the_release():
    m = load_model("mixtral-8x7b")
    # 32 x (attention 41,943,040 + router 32,768 + 8 experts x 3 x 4096 x 14336 + norms 8192) + 2 x 32000 x 4096 + 4096
    assert m.parameter_count() == 46_702_792_704  # 46.7B (Mistral AI: 46.7B total)
    assert round(m.active_parameter_count() / 1e9, 1) == 12.9  # 12.9B per token
    big = load_model("mixtral-8x22b")
    assert round(big.parameter_count() / 1e9) == 141 and round(big.active_parameter_count() / 1e9) == 39


# ---- the analytic profile ---------------------------------------------------------------------------------------

def test_moe_layer_flops_and_activation_extra():
    model = moe_model()
    assert layer_forward_flops(model, MOE, 1) == approx(44.016e9)
    assert moe_activation_extra_bytes(model, MOE, 1, 1) == approx(18.032e6)
    assert moe_activation_extra_bytes(model, MOE, 1, 2) == approx(10.032e6)
    assert moe_activation_extra_bytes(model, model.kinds[0], 1, 1) == approx(18.032e6)
    assert moe_activation_extra_bytes(toy_model(), toy_model().kinds[0], 1, 1) == 0.0


def test_moe_layer_activations_in_the_cost_model():
    """none: Korthikanti 74e6 + 18.032e6; selective: 34e6 + 18.032e6 (the MLP is kept); full: 2e6 (input only)."""
    p = moe_problem()
    assert cm.layer_activation_bytes(p, "fast", MOE, 1, 1, "none") == approx(92.032e6)
    assert cm.layer_activation_bytes(p, "fast", MOE, 1, 1, "selective") == approx(52.032e6)
    assert cm.layer_activation_bytes(p, "fast", MOE, 1, 1, "full") == approx(2e6)


def test_measured_and_imported_profiles_refuse_moe_models(tmp_path):
    from optsearch.profile.importers import import_profile
    from optsearch.profile.measure import check_tp_degrees

    with pytest.raises(SpecError, match="mixture-of-experts"):
        check_tp_degrees(load_model("mixtral-8x7b"), (1,))
    with pytest.raises(SpecError, match="mixture-of-experts"):
        import_profile("fasop", tmp_path, "mixtral-8x7b")


# ---- expert parallelism: upstream's rules -----------------------------------------------------------------------

@pytest.mark.parametrize("tp, dp, ep, sp, message", [
    (1, 8, 3, False, "does not divide num_experts 8"),
    (1, 2, 4, False, "does not divide dp = 2"),
    (2, 4, 2, False, "needs sequence parallelism"),
    (2, 4, 1, False, "needs sequence parallelism"),  # upstream's MoELayer: tp > 1 needs it at any ep
])
def test_expert_parallel_rules(tp, dp, ep, sp, message):
    job = JOB.model_copy(update={"sequence_parallel": sp})
    assert message in cm.expert_parallel_error(moe_model(), job, tp, dp, ep)


def test_expert_parallel_rules_accept_and_dense_models_refuse_ep():
    assert cm.expert_parallel_error(moe_model(), JOB, 1, 8, 8) is None
    assert cm.expert_parallel_error(moe_model(), JOB.model_copy(update={"sequence_parallel": True}), 2, 4, 4) is None
    assert "no mixture-of-experts layers" in cm.expert_parallel_error(toy_model(), JOB, 1, 4, 2)
    assert cm.expert_parallel_error(toy_model(), JOB, 2, 4, 1) is None


def test_ep_candidates():
    p = moe_problem()
    assert ep_candidates(p, 1, 8) == [1, 2, 4, 8]
    assert ep_candidates(p, 1, 6) == [1, 2]
    assert ep_candidates(p, 2, 4) == []  # tp > 1 without sequence parallelism: upstream refuses
    assert ep_candidates(moe_problem(JOB.model_copy(update={"sequence_parallel": True})), 2, 4) == [1, 2, 4]
    dense = Problem(model=toy_model(), cluster=CLUSTER, job=JOB, gpus=GPUS,
                    profile=AnalyticProfile(model=toy_model(), gpus=GPUS))
    assert ep_candidates(dense, 1, 8) == [1]


def test_check_plan_refuses_a_bad_ep():
    plan = Plan(tp=1, dp=2, micro_batch_size=1, stages=(Stage(node_type="fast", num_layers=4),), ep=4)
    with pytest.raises(SpecError, match="plan: ep = 4 does not divide dp = 2"):
        cm.estimate(moe_problem(), plan)


# ---- expert parallelism: the cost terms -------------------------------------------------------------------------

@pytest.mark.parametrize("tp, ep, spans, expected", [
    # message = b s k h x 2 / tp = 1 x 1000 x 2 x 1000 x 2 = 4e6 B (tp = 1)
    (1, 1, False, 0.0),  # no expert parallelism: no all-to-all
    (1, 4, False, 3 / 4 * 4e6 / 1e11),  # one node: r = 4, 3/4 of it over NVLink = 3e-5 s
    (1, 2, True, 1 / 2 * 4e6 / 1e11),  # stage spans nodes, but a group of 2 is node-aligned: 2e-5 s
    # 8 ranks over 2 nodes, r = 4: intra 3/8 x 4e6 / 1e11 = 1.5e-5; NIC 4/8 x 4e6 / (5e10 / 4) = 1.6e-4 -> max
    (1, 8, True, 4 / 8 * 4e6 / (5e10 / 4)),
    # tp = 2: message 2e6; group tp x ep = 8 GPUs over 2 nodes, r = 2 per node: intra 1/4 x 2e6 / 1e11 = 5e-6,
    # NIC 2/4 x 2e6 / 1.25e10 = 8e-5
    (2, 4, True, 2 / 4 * 2e6 / (5e10 / 4)),
])
def test_alltoall_time(tp, ep, spans, expected):
    assert cm.moe_alltoall_s(moe_problem(), "fast", MOE, tp, ep, 1, spans) == approx(expected)


def test_alltoalls_per_layer():
    p = moe_problem()
    one = 3 / 4 * 4e6 / 1e11
    assert cm.moe_layer_alltoall_s(p, "fast", MOE, 1, 4, 1, "none", False) == approx(4 * one)
    assert cm.moe_layer_alltoall_s(p, "fast", MOE, 1, 4, 1, "selective", False) == approx(4 * one)
    assert cm.moe_layer_alltoall_s(p, "fast", MOE, 1, 4, 1, "full", False) == approx(6 * one)
    dense = toy_model().kinds[0]
    assert cm.moe_layer_alltoall_s(p, "fast", dense, 1, 4, 1, "none", False) == 0.0


def test_expert_allreduce_and_optimizer():
    """64e6 expert parameters, tp = 1, dp = 8, ep = 2: each rank holds 32e6, all-reduced over dp / ep = 4 ranks.
    Across nodes the NIC is shared by tp x ep = 2 rings: 5e10 / 2 = 2.5e10 B/s < NVLink 1e11.
    ring: 2 x 3/4 x 32e6 x 4 B / 2.5e10 = 7.68e-3 s;  one node: 2 x 3/4 x 128e6 / 1e11 = 1.92e-3 s.
    Adam: 32e6 x 28 B / 1e12 = 8.96e-4 s; distributed (sharded over 4): 2.24e-4 s; both + the expert buffer's passes
    (docs/cost-model.md section 8b, dp 8: 16 B over the whole 32e6): 5.12e-4 s."""
    p = moe_problem()
    assert cm.gradient_bytes(p.job) == 4
    assert cm.expert_allreduce_s(p, "fast", 64e6, 1, 8, 2, True) == approx(7.68e-3)
    assert cm.expert_allreduce_s(p, "fast", 64e6, 1, 8, 2, False) == approx(1.92e-3)
    assert cm.expert_allreduce_s(p, "fast", 64e6, 1, 8, 8, True) == 0.0  # dp / ep = 1: nothing to reduce
    assert cm.expert_optimizer_step_s(p, "fast", 64e6, 1, 8, 2) == approx(8.96e-4 + 5.12e-4)
    # the distributed optimizer is the plan's (issue 16): passed, not read from the job
    assert cm.expert_optimizer_step_s(p, "fast", 64e6, 1, 8, 2, True) == approx(2.24e-4 + 5.12e-4)
    # states: bf16, fp32 gradients: 2 + 4 + 12 = 18 B; distributed over dp / ep = 4: 6 + 12 / 4 = 9 B
    assert cm.expert_state_bytes_per_param(p.job, 8, 2) == 18.0
    assert cm.expert_state_bytes_per_param(p.job, 8, 2, True) == 9.0
    # distributed: reduce-scatter of fp32 gradients + all-gather of bf16 parameters over 4 ranks, across nodes:
    # 3/4 x 32e6 x (4 + 2) B / 2.5e10 = 5.76e-3 s (against the all-reduce's 7.68e-3 s)
    assert cm.expert_allreduce_s(p, "fast", 64e6, 1, 8, 2, True, True) == approx(5.76e-3)
    assert cm.expert_allreduce_s(p, "fast", 64e6, 1, 8, 8, True, True) == 0.0


def test_estimate_adds_exactly_the_expert_terms():
    """One stage of 4 MoE layers on 'fast' at tp = 1, dp = 4, b = 1 (one node): ep = 4 against ep = 1.
    compute: + 4 layers x 4 all-to-alls x 3e-5 s;  memory: experts 4 x 64e6 x 18 B x (1/4 - 1);
    all-reduce: experts are reduced over dp / ep = 1 rank instead of 4 (2 x 3/4 x 256e6 x 4 B / 1e11 = 1.536e-2 s less)
    and the optimizer steps over a quarter of them (256e6 x 3/4 x 28 / 1e12 = 5.376e-3 s less; the buffer's passes,
    section 8b, 16 B each over 256e6 x 3/4 fewer local gradients: 3.072e-3 s less)."""
    p = moe_problem()
    stages = (Stage(node_type="fast", num_layers=4),)
    one = cm.estimate(p, Plan(tp=1, dp=4, micro_batch_size=1, stages=stages)).stages[0]
    four = cm.estimate(p, Plan(tp=1, dp=4, micro_batch_size=1, stages=stages, ep=4)).stages[0]
    assert four.compute_s - one.compute_s == approx(16 * 3e-5)
    assert four.memory_bytes - one.memory_bytes == approx(-4 * 64e6 * 18 * 3 / 4)
    assert one.dp_allreduce_s - four.dp_allreduce_s == approx(2 * 3 / 4 * 256e6 * 4 / 1e11)
    assert one.optimizer_s - four.optimizer_s == approx(256e6 * 3 / 4 * (28 + 16) / 1e12)
    assert four.parameters == one.parameters  # all ranks together: the same model


def test_block_recomputation_reruns_the_all_to_alls_of_the_recomputed_layers_only():
    """4 MoE layers, ep = 4, block N = 1: one layer recomputed runs 6 all-to-alls, three run 4: 18 x 3e-5 s; against
    the same plan without expert parallelism (no all-to-all), only those differ. Full recomputation: 4 x 6."""
    p = moe_problem()
    stages = (Stage(node_type="fast", num_layers=4, recompute="full"),)

    def compute(ep, n):
        return cm.estimate(p, Plan(tp=1, dp=4, micro_batch_size=1, stages=stages, ep=ep,
                                   recompute_num_layers=n)).stages[0].compute_s

    assert compute(4, 1) - compute(1, 1) == approx(18 * 3e-5)
    assert compute(4, None) - compute(1, None) == approx(24 * 3e-5)


# ---- the plan ---------------------------------------------------------------------------------------------------

def test_plan_json_writes_ep_only_when_set():
    stages = (Stage(node_type="fast", num_layers=4),)
    plain = Plan(tp=1, dp=4, micro_batch_size=1, stages=stages)
    assert "ep" not in plain.to_dict()
    assert plan_from_dict(plain.to_dict()) == plain
    with_ep = Plan(tp=1, dp=4, micro_batch_size=1, stages=stages, ep=4)
    assert with_ep.to_dict()["ep"] == 4 and plan_from_dict(with_ep.to_dict()) == with_ep
    with pytest.raises(SpecError, match="ep = 0: must be a positive integer"):
        plan_from_dict({**plain.to_dict(), "ep": 0})


# ---- the search: both backends against brute force over ep, and every bound below every plan -------------------

@st.composite
def moe_instances(draw):
    layers = draw(st.integers(2, 5))
    experts = draw(st.sampled_from([2, 4, 8]))
    gpus = [GpuSpec(name="G0", memory_gib=draw(st.sampled_from([2.5, 3.0, 4.0, 12.0])), peak_fp16_tflop_per_s=125.0,
                    hbm_gbyte_per_s=900.0),
            GpuSpec(name="G1", memory_gib=draw(st.sampled_from([3.0, 6.0])), peak_fp16_tflop_per_s=65.0,
                    hbm_gbyte_per_s=600.0)]
    nodes = [NodeTypeSpec(name="t0", gpu="G0", gpus_per_node=draw(st.sampled_from([2, 4])),
                          num_nodes_available=draw(st.integers(1, 2)),
                          price_usd_per_node_hour=draw(st.floats(4.0, 20.0).map(lambda x: round(x, 4))),
                          intra_node_link="nvlink", intra_node_gbyte_per_s=draw(st.sampled_from([16.0, 150.0])),
                          inter_node_gbit_per_s=draw(st.sampled_from([10.0, 100.0]))),
             NodeTypeSpec(name="t1", gpu="G1", gpus_per_node=2, num_nodes_available=draw(st.integers(0, 3)),
                          price_usd_per_node_hour=draw(st.floats(0.5, 6.0).map(lambda x: round(x, 4))),
                          intra_node_link="pcie", intra_node_gbyte_per_s=16.0, inter_node_gbit_per_s=10.0)]
    kind = LayerKindSpec(name="layer", num_layers=layers, num_experts=experts,
                         moe_router_topk=draw(st.integers(1, 2)))
    kinds = [kind]
    if layers >= 3 and draw(st.booleans()):  # a dense first layer, then expert layers: the several-kinds model rows
        kinds = [LayerKindSpec(name="dense", num_layers=1), kind.model_copy(update={"num_layers": layers - 1})]
    model = ModelSpec(
        name="tiny-moe", num_layers=layers, hidden_size=draw(st.sampled_from([256, 512])), num_attention_heads=4,
        ffn_hidden_size=1024, gated_mlp=draw(st.booleans()), seq_length=draw(st.sampled_from([512, 1024])),
        vocab_size=8000, layer_kinds=kinds,
        default_job=JobSpec(global_batch_size=draw(st.sampled_from([4, 8])), train_iterations=1000,
                            sequence_parallel=draw(st.booleans()),
                            distributed_optimizer=draw(st.sampled_from([None, True, False]))))
    cluster = ClusterSpec(name="moe", node_types=nodes, gpus=gpus)
    by_name = {g.name: g for g in gpus}
    problem = Problem(model=model, cluster=cluster, job=model.default_job, gpus=by_name,
                      profile=AnalyticProfile(model=model, gpus=by_name))
    uniform = draw(st.booleans())
    options = SpaceOptions(micro_batch_sizes=(1, 2), max_stages=draw(st.integers(1, 3)),
                           uniform_recompute=uniform, block_recompute=uniform and draw(st.booleans()))
    budget = (draw(st.sampled_from(["none", "time", "cost", "gpus", "rate"])), draw(st.floats(0.3, 1.5)))
    return problem, options, draw(st.sampled_from(["cost", "time"])), budget


@settings(max_examples=draws(10), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(moe_instances())
def test_moe_optimum_equals_brute_force_over_ep(case):
    problem, options, objective, (kind, factor) = case
    assume(count_plans(problem, Budget(), options, limit=MAX_PLANS) <= MAX_PLANS)
    truth = assert_backends_equal_brute_force(problem, _budget(problem, options, objective, kind, factor), options)
    event(f"optimum: {truth.status}, ep > 1: {truth.plan is not None and truth.plan.ep > 1}")


def test_brute_force_chooses_ep_when_it_pays():
    """Memory-tight (3 GiB GPUs): without recomputation the experts fit only when split; the optimum has ep > 1 and
    both backends find it."""
    gpus = [GpuSpec(name="G0", memory_gib=3.0, peak_fp16_tflop_per_s=125.0, hbm_gbyte_per_s=900.0)]
    nodes = [NodeTypeSpec(name="t0", gpu="G0", gpus_per_node=4, num_nodes_available=1, price_usd_per_node_hour=8.0,
                          intra_node_link="nvlink", intra_node_gbyte_per_s=150.0, inter_node_gbit_per_s=100.0)]
    kind = LayerKindSpec(name="layer", num_layers=4, num_experts=8, moe_router_topk=2)
    model = ModelSpec(name="tiny-moe", num_layers=4, hidden_size=512, num_attention_heads=4, ffn_hidden_size=2048,
                      gated_mlp=True, seq_length=512, vocab_size=8000, layer_kinds=[kind],
                      default_job=JobSpec(global_batch_size=8, train_iterations=1000,
                                          sequence_parallel=False))
    by_name = {g.name: g for g in gpus}
    problem = Problem(model=model, cluster=ClusterSpec(name="one", node_types=nodes, gpus=gpus), job=model.default_job,
                      gpus=by_name, profile=AnalyticProfile(model=model, gpus=by_name))
    options = SpaceOptions(micro_batch_sizes=(1,), max_stages=2)
    truth = assert_backends_equal_brute_force(problem, Budget(objective="cost"), options)
    assert truth.status == "optimal" and truth.plan.ep > 1
    only_ep1 = [p for p in _plans(problem, options) if p.ep == 1 and cm.estimate(problem, p).fits]
    assert not only_ep1  # without recomputation no plan without expert parallelism fits


def _plans(problem: Problem, options: SpaceOptions):
    """Every plan of the space (no recomputation), ep included."""
    for tp in tp_candidates(problem):
        for mbs in micro_batch_candidates(problem, options):
            for dp in dp_candidates(problem, tp, mbs):
                uses = node_uses(problem, tp, dp, mbs)
                for ep in ep_candidates(problem, tp, dp):
                    for pp in range(1, (options.max_stages or 1) + 1):
                        for types in type_sequences(list(uses), pp, None, tp * dp):
                            for parts in partitions(problem.model.num_layers, pp):
                                stages = tuple(Stage(node_type=t, num_layers=n) for t, n in zip(types, parts))
                                plan = Plan(tp=tp, dp=dp, micro_batch_size=mbs, stages=stages, ep=ep)
                                if in_search_space(problem, plan, options):
                                    yield plan


@settings(max_examples=draws(8), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(moe_instances())
def test_bounds_hold_for_every_ep(case):
    """The outer loop skips a candidate (tp, dp, b, pp, ep) on its bounds alone (issue 14: a bound must hold for every
    value): the cheap and refined candidate bounds and the positional bound lie below every plan of the candidate."""
    from unittest import mock

    from optsearch import bounds as bounds_module
    from optsearch.baselines.exhaustive import _least_recompute
    from optsearch.bounds import candidate_bound, degree_terms
    from optsearch.formulation.model import Candidate, skeleton
    from optsearch.formulation.positional import positional_bound

    problem, options, objective, (kind, factor) = case
    options = SpaceOptions(micro_batch_sizes=options.micro_batch_sizes, max_stages=options.max_stages)
    # Draws up to 1,200 plans (test_solver.MAX_DRAW_PLANS; round 18, trim4). Up to MAX_PLANS (2,500) on these
    # moe_instances(): test_moe_optimum_equals_brute_force_over_ep (both backends against brute force).
    assume(count_plans(problem, Budget(), options, limit=MAX_DRAW_PLANS) <= MAX_DRAW_PLANS)
    budget = _budget(problem, options, objective, kind, factor)
    for tp, mbs, dp, uses in usable_degrees(problem, options):
        for ep in ep_candidates(problem, tp, dp):
            terms = degree_terms(problem, tp, dp, mbs, uses, ep)
            for pp in range(1, options.max_stages + 1):
                bounds = [candidate_bound(problem, terms, pp, budget, refined=r) for r in (False, True)]
                with mock.patch.object(bounds_module, "MAX_COMPOSITIONS", 0):  # the aggregate refined bound
                    bounds.append(candidate_bound(problem, terms, pp, budget, refined=True))
                values = []
                for types in type_sequences(list(uses), pp, None, tp * dp):
                    for parts in partitions(problem.model.num_layers, pp):
                        stages = tuple(Stage(node_type=t, num_layers=n) for t, n in zip(types, parts))
                        found = _least_recompute(
                            problem, Plan(tp=tp, dp=dp, micro_batch_size=mbs, stages=stages, ep=ep), options)
                        if found is None or budget_violations(*found, budget):
                            continue
                        est = found[1]
                        values.append(objective_value(est, objective))
                        per_iteration = est.usd_per_hour * est.iteration_time_s / 3600
                        for bound in bounds:
                            assert bound.feasible, (found[0], bound)
                            assert bound.iteration_s <= est.iteration_time_s * (1 + 1e-9), (found[0], bound)
                            assert bound.cost_per_iteration_usd <= per_iteration * (1 + 1e-9), (found[0], bound)
                sk = skeleton(problem, Candidate(tp=tp, dp=dp, micro_batch_size=mbs, pp=pp, uses=uses, ep=ep),
                              options)
                if sk.patterns is not None and values:
                    assert positional_bound(sk, budget).bound <= min(values) * (1 + 1e-9)


# ---- launch -----------------------------------------------------------------------------------------------------

def test_megatron_args_carry_the_expert_flags_and_read_back():
    from optsearch.megatron import megatron_args, plan_from_megatron_args
    from optsearch.plan import parse_balance
    from optsearch.problem import build_problem

    problem = build_problem("mixtral-8x7b", "aws-p4d")
    plan = Plan(tp=2, dp=4, micro_batch_size=1, stages=parse_balance("8-8-8-8", "p4d.24xlarge"), ep=4)
    args = list(megatron_args(problem, plan).args)
    pairs = dict(zip(args, args[1:]))
    assert (pairs["--num-experts"], pairs["--moe-router-topk"]) == ("8", "2")
    assert pairs["--expert-model-parallel-size"] == "4"
    assert pairs["--moe-token-dispatcher-type"] == "alltoall"
    assert "--sequence-parallel" in args and "--moe-ffn-hidden-size" not in args  # experts as wide as ffn
    assert plan_from_megatron_args(args, node_order="p4d.24xlarge", dp=4) == plan
    dense = build_problem("llama2-7b", "aws-p4d")
    plain = Plan(tp=2, dp=4, micro_batch_size=1, stages=parse_balance("8-8-8-8", "p4d.24xlarge"))
    assert not any(a.startswith(("--num-experts", "--expert-model", "--moe-")) for a in megatron_args(dense, plain).args)


def test_the_fasop_fork_refuses_moe_models():
    from optsearch.errors import UnsupportedPlanError
    from optsearch.problem import build_problem
    from optsearch.targets import FASOP, check_model

    with pytest.raises(UnsupportedPlanError, match="Switch MLP"):
        check_model(FASOP, build_problem("mixtral-8x7b", "fasop-a100-a10"))


# ---- the CLI ----------------------------------------------------------------------------------------------------

def test_solve_chooses_ep_writes_it_and_launch_emits_it(tmp_path):
    """mixtral-8x7b on aws-p4d, fastest: the optimum uses expert parallelism; its plan file carries ep, estimate
    re-prices it exactly, and launch passes it to Megatron-LM. With --expert-parallel 1 the optimum is slower."""
    import json

    from optsearch.plan import load_plan
    from optsearch.problem import build_problem
    from optsearch.targets import engine_problem
    from test_cli_errors import run_cli

    common = ("--model", "mixtral-8x7b", "--cluster", "aws-p4d", "--minimize", "time", "--quiet", "--json")
    run = run_cli("solve", *common, "--out", str(tmp_path / "plan.json"))
    assert run.code in (0, None), run.stderr
    out = json.loads(run.stdout)
    assert out["status"] == "optimal" and out["plan"]["ep"] > 1
    saved = load_plan(tmp_path / "plan.json")
    assert saved.ep == out["plan"]["ep"]
    priced = engine_problem("megatron", build_problem("mixtral-8x7b", "aws-p4d"))  # solve's: flash attention on
    assert cm.estimate(priced, saved).training_time_s == out["estimate"]["training_time_s"]
    launch = run_cli("launch", str(tmp_path / "plan.json"), "--format", "megatron", "--out", str(tmp_path / "launch"))
    assert launch.code in (0, None), launch.stderr
    text = "\n".join(p.read_text() for p in (tmp_path / "launch").rglob("*") if p.is_file())
    assert f"--expert-model-parallel-size {saved.ep}" in text.replace("\\\n", " ").replace("  ", " ")
    single = json.loads(run_cli("solve", *common, "--expert-parallel", "1").stdout)
    assert "ep" not in single["plan"]
    assert single["estimate"]["training_time_s"] > out["estimate"]["training_time_s"]
    bad = run_cli("solve", *common, "--expert-parallel", "0,x")
    assert bad.code == 2 and "--expert-parallel = '0,x'" in bad.stderr


def test_estimate_and_launch_take_ep_without_a_plan_file(tmp_path):
    import json

    from test_cli_errors import run_cli

    plan = ("--model", "mixtral-8x7b", "--cluster", "aws-p4d", "--tp", "2", "--dp", "8", "--micro-batch-size", "1",
            "--balance", "4-4-4-4-4-4-4-4", "--recompute", "selective")
    one, four = (json.loads(run_cli("estimate", *plan, *extra, "--json").stdout) for extra in ((), ("--ep", "4")))
    assert "ep" not in one["plan"] and four["plan"]["ep"] == 4
    assert four["training_time_s"] < one["training_time_s"]
    bad = run_cli("estimate", *plan, "--ep", "3")
    assert bad.code == 2 and "ep = 3 does not divide num_experts 8" in bad.stderr
    launch = run_cli("launch", *plan, "--ep", "4", "-f", "megatron", "--out", str(tmp_path / "l"))
    assert launch.code in (0, None), launch.stderr
    text = " ".join(p.read_text() for p in (tmp_path / "l").rglob("*") if p.is_file()).replace("\\\n", " ")
    assert "--expert-model-parallel-size 4" in " ".join(text.split())


def test_pareto_frontier_over_ep_equals_brute_force():
    """`pareto` on an MoE model: the exact (time, cost) frontier, ep included, is brute force's."""
    from optsearch import whatif

    gpus = [GpuSpec(name="G0", memory_gib=4.0, peak_fp16_tflop_per_s=125.0, hbm_gbyte_per_s=900.0),
            GpuSpec(name="G1", memory_gib=4.0, peak_fp16_tflop_per_s=40.0, hbm_gbyte_per_s=600.0)]
    nodes = [NodeTypeSpec(name="t0", gpu="G0", gpus_per_node=4, num_nodes_available=2, price_usd_per_node_hour=8.0,
                          intra_node_link="nvlink", intra_node_gbyte_per_s=150.0, inter_node_gbit_per_s=100.0),
             NodeTypeSpec(name="t1", gpu="G1", gpus_per_node=2, num_nodes_available=2, price_usd_per_node_hour=1.0,
                          intra_node_link="pcie", intra_node_gbyte_per_s=16.0, inter_node_gbit_per_s=100.0)]
    kind = LayerKindSpec(name="layer", num_layers=4, num_experts=8, moe_router_topk=2)
    model = ModelSpec(name="tiny-moe", num_layers=4, hidden_size=512, num_attention_heads=4, ffn_hidden_size=2048,
                      gated_mlp=True, seq_length=512, vocab_size=8000, layer_kinds=[kind],
                      default_job=JobSpec(global_batch_size=8, train_iterations=1000))
    by_name = {g.name: g for g in gpus}
    problem = Problem(model=model, cluster=ClusterSpec(name="two", node_types=nodes, gpus=gpus), job=model.default_job,
                      gpus=by_name, profile=AnalyticProfile(model=model, gpus=by_name))
    options = SpaceOptions(micro_batch_sizes=(1, 2), max_stages=2)
    frontier = whatif.pareto(problem, options=options)
    got = [(p.estimate.training_time_s, p.estimate.cost_usd) for p in frontier]
    want = whatif.brute_force_frontier(problem, Budget(), options)
    assert len(got) == len(want) >= 2
    for (t, c), (t2, c2) in zip(got, want):
        assert math.isclose(t, t2, rel_tol=1e-6) and math.isclose(c, c2, rel_tol=1e-6)
    assert all(p.result.status == "optimal" for p in frontier) and any(p.plan.ep > 1 for p in frontier)
