"""The in-flight bound for mixture-of-experts models (optsearch/inflight.py, moe_layer_terms; issue 14, item 3,
round 8) lies below every plan of its candidate, over every ep, every recomputation mode of every stage (none,
selective, full, and block recomputation at every N), every layer split and type sequence, with the budget at each
plan's own time, cost and rent; and it is tight enough that a few percent more fails (test_..._is_tight)."""

from __future__ import annotations

import itertools
import sys
from dataclasses import replace
from pathlib import Path

from hypothesis import HealthCheck, assume, given, settings
from draws import draws

import optsearch.costmodel as cm
from optsearch.baselines.exhaustive import count_plans, partitions, type_sequences
from optsearch.bounds import CandidateBound
from optsearch.candidates import SpaceOptions, ep_candidates
from optsearch.formulation.model import Candidate
from optsearch.inflight import inflight_tables, sharpened
from optsearch.plan import RECOMPUTE_MODES, Plan, Stage
from optsearch.problem import Problem
from optsearch.profile.analytic import AnalyticProfile
from optsearch.search import budget_violations
from optsearch.solver import Memo
from optsearch.spec import ClusterSpec, GpuSpec, JobSpec, LayerKindSpec, ModelSpec, NodeTypeSpec
from optsearch.spec.budget import Budget

sys.path.insert(0, str(Path(__file__).parent))
from test_inflight_bound import _budgets  # noqa: E402
from test_moe import moe_instances  # noqa: E402
from test_solver import usable_degrees  # noqa: E402


def _every_mode(problem: Problem, plan: Plan):
    """(plan, estimate) for every recomputation of the plan that fits: each stage in each mode, and block
    recomputation at every N = 1 .. most layers on a stage (its stages 'full')."""
    for modes in itertools.product(RECOMPUTE_MODES, repeat=plan.pp):
        variant = replace(plan, stages=tuple(replace(s, recompute=r) for s, r in zip(plan.stages, modes)))
        est = cm.estimate(problem, variant)
        if est.fits:
            yield variant, est
    stages = tuple(replace(s, recompute="full" if s.num_layers > 0 else "none") for s in plan.stages)
    for n in range(1, max(s.num_layers for s in plan.stages) + 1):
        block = replace(plan, stages=stages, recompute_num_layers=n)
        est = cm.estimate(problem, block)
        if est.fits:
            yield block, est


def _moe_plans(problem: Problem, options: SpaceOptions):
    """(candidate, plan, estimate) for every plan of every v = 1 candidate of a one-kind MoE model, ep included; with
    --overlap-grad-reduce (Problem.overlap_grad_reduce) each plan as the search prices it: the distributed optimizer
    and the overlap where they are on."""
    for tp, mbs, dp, uses in usable_degrees(problem, options):
        for ep in ep_candidates(problem, tp, dp):
            for pp in range(1, options.max_stages + 1):
                cand = Candidate(tp=tp, dp=dp, micro_batch_size=mbs, pp=pp, uses=uses, ep=ep)
                for types in type_sequences(list(uses), pp, None, tp * dp):
                    for parts in partitions(problem.model.num_layers, pp):
                        plan = Plan(tp=tp, dp=dp, micro_batch_size=mbs, ep=ep, stages=tuple(
                            Stage(node_type=t, num_layers=n) for t, n in zip(types, parts)))
                        if problem.overlap_grad_reduce:
                            plan = replace(plan, distributed_optimizer=cm.distributed_optimizer_on(problem.job, dp),
                                           overlap_grad_reduce=cm.overlap_grad_reduce_on(problem, dp))
                        for variant, est in _every_mode(problem, plan):
                            yield cand, variant, est


def _least_ratio(problem: Problem, options: SpaceOptions) -> dict[bool, float]:
    """{ep > 1: the least plan value / bound} over every plan and every budget of _budgets, split by
    whether the plan's ep is above 1. Each ratio is at least 1 (less 1e-9) when the bound is valid."""
    memo = Memo(problem, options)
    least = {False: float("inf"), True: float("inf")}
    kept: dict = {}  # a candidate's bound under one budget: taken once (no limit, or a rent limit plans share)
    for cand, plan, est in _moe_plans(problem, options):
        terms = memo.degree_terms(cand.tp, cand.dp, cand.micro_batch_size, cand.uses, cand.ep, 1)
        split = cand.ep > 1
        for budget in _budgets(est):
            assert not budget_violations(plan, est, budget)
            key = (cand, budget.objective, budget.max_time_s, budget.max_cost_usd, budget.max_usd_per_hour,
                   budget.max_gpus)
            if key not in kept:
                kept[key] = sharpened(problem, memo.inflight, terms, cand, budget, CandidateBound(True, 0.0, 0.0, 0.0),
                                      memo.calls)
            got = kept[key]
            assert got.feasible, (plan, budget)
            least[split] = min(least[split], est.iteration_time_s / got.iteration_s)
            if budget.objective == "cost":
                least[split] = min(least[split], est.usd_per_hour * est.iteration_time_s / 3600
                                   / got.cost_per_iteration_usd)
    return least


@settings(max_examples=draws(4), derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(moe_instances())
def test_the_moe_inflight_bound_lies_below_every_plan_over_every_ep_and_mode(case):
    problem, options, _, _ = case
    assume(len(problem.model.kinds) == 1)
    options = SpaceOptions(micro_batch_sizes=options.micro_batch_sizes, max_stages=options.max_stages)
    assume(count_plans(problem, Budget(), options, limit=64) <= 64)  # x every mode: up to ~1,000 plans
    assert min(_least_ratio(problem, options).values()) >= 1 - 1e-9


def _tight_problem(memory_gib: float = 5.0, hidden: int = 512, ffn: int = 2048, experts: int = 4) -> Problem:
    """Eight expert layers on 4-GPU nodes of one type, GPUs small enough that early stages of a deep pipeline
    recompute, with a slow NIC: the all-to-alls of ep > 1 across nodes and the expert state per ep both matter."""
    gpus = [GpuSpec(name="G0", memory_gib=memory_gib, peak_fp16_tflop_per_s=125.0, hbm_gbyte_per_s=900.0)]
    nodes = [NodeTypeSpec(name="t0", gpu="G0", gpus_per_node=4, num_nodes_available=2, price_usd_per_node_hour=8.0,
                          intra_node_link="nvlink", intra_node_gbyte_per_s=150.0, inter_node_gbit_per_s=25.0)]
    kind = LayerKindSpec(name="layer", num_layers=8, num_experts=experts, moe_router_topk=2)
    model = ModelSpec(name="tiny-moe", num_layers=8, hidden_size=hidden, num_attention_heads=4, ffn_hidden_size=ffn,
                      gated_mlp=True, seq_length=1024, vocab_size=8000, layer_kinds=[kind],
                      default_job=JobSpec(global_batch_size=8, train_iterations=1000))
    by_name = {g.name: g for g in gpus}
    return Problem(model=model, cluster=ClusterSpec(name="one", node_types=nodes, gpus=gpus), job=model.default_job,
                   gpus=by_name, profile=AnalyticProfile(model=model, gpus=by_name))


def test_the_moe_inflight_bound_is_tight_and_applies():
    """On _tight_problem the bound lies below every plan, and within 2 % of some plan with ep > 1 and of some plan
    with ep = 1 (the bound applies to both, the expert terms are in it): raised by 2 % it lies above those plans
    (the test can fail)."""
    problem = _tight_problem()
    options = SpaceOptions(micro_batch_sizes=(1,), max_stages=2)
    least = _least_ratio(problem, options)
    assert all(1 - 1e-9 <= r < 1.02 for r in least.values()), least  # raised by 2 %: above a plan of each


def test_the_moe_inflight_bound_holds_under_overlap_grad_reduce():
    """With --overlap-grad-reduce (upstream's default in solve) the backward may hide the dense gradient reduce
    (costmodel section 7c; the experts' exchange stays exposed): the bound counts only the dense part's exposed
    floor (bounds.grad_overlap_floor), so it still lies below every plan priced with the overlap. Counting the whole
    dense reduce (the bound before the merge with the overlap) declares a tp 1, dp 4 plan of this instance (half its
    layer parameters dense) infeasible at its own time (checked by hand)."""
    problem = replace(_tight_problem(memory_gib=16.0, hidden=1024, ffn=1024, experts=2), overlap_grad_reduce=True)
    options = SpaceOptions(micro_batch_sizes=(1,), max_stages=2)
    assert any(cm.overlap_grad_reduce_on(problem, dp) for _, _, dp, _ in usable_degrees(problem, options))
    assert min(_least_ratio(problem, options).values()) >= 1 - 1e-9


def test_the_moe_tables_count_the_expert_terms():
    """At ep = 2 across nodes (tp 1, dp 8 on 4-GPU nodes: the stage spans two nodes), each layer's step in the tables
    is the dense step plus moe_layer_alltoall_s, and its all-reduce is gradient_sync_s of the dense part plus
    expert_allreduce_s of the experts: the cost model's own terms for one layer."""
    from optsearch.bounds import degree_terms
    from optsearch.inflight import moe_layer_terms

    problem = _tight_problem()
    options = SpaceOptions(micro_batch_sizes=(1,), max_stages=2)
    tp, mbs, dp, uses = next((t, b, d, u) for t, b, d, u in usable_degrees(problem, options) if (t, d) == (1, 8))
    d = degree_terms(problem, tp, dp, mbs, uses, 2)
    kind = problem.model.kinds[0]
    state, a2a, allreduce = moe_layer_terms(problem, d, kind, dp, mbs, 2, list(RECOMPUTE_MODES))
    P, X = problem.model.layer_parameters(kind), problem.model.expert_parameters(kind)
    for r, mode in enumerate(RECOMPUTE_MODES):
        assert a2a[0, r] == cm.moe_layer_alltoall_s(problem, "t0", kind, 1, 2, 1, mode, True) > 0
    dist = cm.distributed_optimizer_on(problem.job, dp, 1)
    assert allreduce[0] == (cm.gradient_sync_s(problem, "t0", P - X, 1, dp, True, 1, dist)
                            + cm.expert_allreduce_s(problem, "t0", X, 1, dp, 2, True, dist))
    assert state == (P - X) * cm.state_bytes(problem.job, dp, 1, dist) \
        + X / 2 * cm.expert_state_bytes_per_param(problem.job, dp, 2, dist)
    tab = inflight_tables(problem, d, 2, dp, mbs, 1, 0.0, 0.0, ep=2)
    assert tab is not None and tab.allreduce_per_layer[0] == allreduce[0]
