"""--overlap-param-gather as the search sets it (issue 15, paramgather; docs/cost-model.md section 7f, docs/knobs.md
"--overlap-param-gather in the search"). Upstream main dispatches a bucket group's parameter all-gather from the
forward pre-hook the first time the forward reaches it: on a one-stage plan that only hides (the first forward waits
at most max(G / n, G - F (n - 1) / n) <= G), so the search turns it on there (costmodel.overlap_param_gather_on); with
pp > 1 a later stage's whole gather adds along the pipeline fill (param_gather_delay_main_s), so it is off by
default there (both settings are searched on request, Problem.param_gather_pipelined: tests/test_param_gather_pipeline.py).
Brute force tries both settings where the search fixes it on: the optima agree on both backends, the bounds lie
below every plan with it on, and launch emits the flag, which upstream's parse_args accepts."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, assume, given, settings
from draws import draws

from optsearch import megatron
from optsearch.baselines.exhaustive import count_plans
from priced import solve_exhaustive
from optsearch.candidates import SpaceOptions, in_search_space
from optsearch.costmodel import (
    estimate, overlap_param_gather_on, param_gather_delay_main_s, param_gather_delay_s,
)
from optsearch.formulation.model import Candidate
from optsearch.plan import Plan, Stage
from optsearch.solver import solve
from optsearch.spec import GpuSpec
from optsearch.spec.budget import Budget

from test_distopt_search import _one_node_problem, _plans_at
from test_megatron_parse import _check, _run_upstream, upstream  # noqa: F401  (the fixture)
from test_solver import MAX_DRAW_PLANS, _budget, assert_backends_equal_brute_force, instances, make_problem


def _gather(problem):
    """The problem with --overlap-grad-reduce on, the distributed optimizer open, --overlap-param-gather searched and
    --ddp-average-in-collective on, as engine_problem sets them for the megatron target."""
    problem = replace(problem, overlap_grad_reduce=True, overlap_param_gather=True, ddp_average_in_collective=True)
    return replace(problem, job=problem.job.model_copy(update={"distributed_optimizer": None}))


OPTIONS = SpaceOptions(micro_batch_sizes=(1, 2, 4), recompute_modes=("none",), max_stages=2)


def test_main_dispatch_by_hand():
    """Stage 0: G 0.3 s in 3 buckets over a 0.2 s forward: max(0.1, 0.3 - 0.2 x 2 / 3) = 0.16667 s; stages 1 and 2
    gather at their first micro-batch: + 0.5 + 0.2 = 0.86667 s (r0.8.0's dispatch at zero_grad: 0.3 s, 7d's test)."""
    assert param_gather_delay_main_s([0.3, 0.5, 0.2], [0.2, 0.1, 0.1], 3) == pytest.approx(0.3 - 0.4 / 3 + 0.7)
    assert param_gather_delay_s([0.3, 0.5, 0.2], [0.2, 0.1, 0.1], 3) == pytest.approx(0.3)
    # one stage: the two dispatches agree (G = 0.4, F = 1, n = 4: 0.1; G = 2: 2 - 0.75 = 1.25)
    for g, want in ((0.4, 0.1), (2.0, 1.25)):
        assert param_gather_delay_main_s([g], [1.0], 4) == pytest.approx(want) == param_gather_delay_s([g], [1.0], 4)
    assert param_gather_delay_main_s([], [], 1) == 0.0


def test_where_the_search_turns_it_on():
    problem = _gather(_one_node_problem())
    assert overlap_param_gather_on(problem, 8, 1, 1, 1, True)
    assert not overlap_param_gather_on(problem, 8, 1, 1, 2, True)  # pp > 1: main's fill delay, off
    assert not overlap_param_gather_on(problem, 8, 1, 1, 1, False)  # upstream asserts the distributed optimizer
    assert not overlap_param_gather_on(problem, 1, 1, 1, 1, True)  # no grad overlap at dp x cp = 1
    assert not overlap_param_gather_on(problem, 8, 1, 2, 1, True)  # interleaved: no grad overlap
    assert not overlap_param_gather_on(replace(problem, overlap_param_gather=False), 8, 1, 1, 1, True)
    assert not overlap_param_gather_on(replace(problem, overlap_grad_reduce=False), 8, 1, 1, 1, True)


def test_one_stage_estimate_by_hand():
    """The one-node instance's dp 8 plan: with the flag the exchange loses the gather G and the first forward waits
    max(G / n, G - F (n - 1) / n) instead, n = ceil(423,448,576 / 40e6) = 11 buckets; memory is unchanged."""
    problem = _gather(_one_node_problem())
    off = Plan(tp=1, dp=8, micro_batch_size=4, stages=(Stage(node_type="t0", num_layers=8),),
               distributed_optimizer=True, overlap_grad_reduce=True)
    on = replace(off, overlap_param_gather=True)
    e_off, e_on = estimate(problem, off), estimate(problem, on)
    # by hand from the estimate's own parts: exposed reduce-scatter + G before, exposed reduce-scatter + delay after
    from optsearch.costmodel import (
        WEIGHT_BYTES_PER_PARAM, gradient_bytes, gradient_sync_s, overlap_bucket_count, stage_forward_s,
    )
    params = e_off.stages[0].parameters
    g = gradient_bytes(problem.job)
    gather = gradient_sync_s(problem, "t0", params, 1, 8, False, 1, True) * WEIGHT_BYTES_PER_PARAM / (g + 2)
    forward = stage_forward_s(problem, "t0", {problem.model.kinds[0].name: 8}, 1, 4, True, True)
    n = overlap_bucket_count(params, 8, True)
    assert params == 423_448_576 and n == 11
    delay = max(gather / n, gather - forward * (n - 1) / n)
    assert e_on.dp_allreduce_s == pytest.approx(e_off.dp_allreduce_s - gather + delay, rel=1e-12)
    assert e_on.iteration_time_s < e_off.iteration_time_s
    assert e_on.stages[0].memory_bytes == e_off.stages[0].memory_bytes


@pytest.mark.parametrize("solver", ["cpsat", "cbc"])
def test_solve_turns_it_on_for_one_stage_and_equals_brute_force(solver):
    """On the one-node instance the distributed optimizer with the gather hidden beats the optimizer off (which won
    without the flag, tests/test_distopt_search.py): the search finds it, equal to brute force over both settings."""
    problem = _gather(_one_node_problem())
    budget = Budget(objective="time")
    got = solve(problem, budget, options=OPTIONS, solver=solver)
    truth = solve_exhaustive(problem, budget, options=OPTIONS)
    assert got.status == truth.status == "optimal"
    assert got.objective_value == pytest.approx(truth.objective_value, rel=1e-9)
    plan = got.plan
    assert plan.pp == 1 and plan.distributed_optimizer and plan.overlap_param_gather
    assert in_search_space(problem, plan, OPTIONS)
    assert in_search_space(problem, replace(plan, overlap_param_gather=False), OPTIONS)  # dominated, in the space
    two = replace(plan, dp=4, stages=(Stage(node_type="t0", num_layers=4),) * 2)  # pp 2: off unless asked for
    assert in_search_space(problem, replace(two, overlap_param_gather=False), OPTIONS)
    assert not in_search_space(problem, two, OPTIONS)
    asked = replace(problem, param_gather_pipelined=True)  # both searched (tests/test_param_gather_pipeline.py)
    assert in_search_space(asked, two, OPTIONS)
    assert not in_search_space(asked, replace(two, param_gather_dispatch="core_r0.8.0"), OPTIONS)
    assert estimate(problem, plan).training_time_s == pytest.approx(got.objective_value, rel=1e-9)
    without = solve(replace(problem, overlap_param_gather=False), budget, options=OPTIONS, solver=solver)
    assert not without.plan.distributed_optimizer  # the optimizer off won before (5 %)
    assert got.objective_value < without.objective_value
    args = megatron.megatron_args(problem, plan).args
    assert "--overlap-param-gather" in args and "--use-distributed-optimizer" in args
    assert plan.ddp_average_in_collective and "--ddp-average-in-collective" in args


@settings(max_examples=draws(5), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(instances())
def test_optimum_with_the_gather_equals_brute_force_and_backends_agree(case):
    problem, options, objective, kind, factor = case
    problem = _gather(problem)
    # Draws up to 1,200 plans (test_solver.MAX_DRAW_PLANS; round 18, trim4). Up to MAX_PLANS (2,500): both backends
    # against brute force on these instances() with the overlap in
    # test_overlap_solve.py::test_optimum_with_the_overlap_equals_brute_force_and_backends_agree, and with the gather
    # searched at every pp in
    # test_param_gather_pipeline.py::test_optimum_over_both_settings_equals_brute_force_and_backends_agree.
    assume(count_plans(problem, Budget(), options, limit=MAX_DRAW_PLANS) <= MAX_DRAW_PLANS)
    assert_backends_equal_brute_force(problem, _budget(problem, options, objective, kind, factor), options)


def _check_bounds(problem, options, budget, bounds_problem=None) -> int:
    """Every candidate's cheap, refined and in-flight bounds (solver.Memo's, at its own terms) and its positional
    bound lie below every plan of the candidate as the search prices it (the gather on where pp = 1)."""
    from optsearch.bounds import candidate_bound
    from optsearch.candidates import max_stages
    from optsearch.formulation.model import skeleton
    from optsearch.formulation.positional import positional_bound
    from optsearch.inflight import sharpened
    from optsearch.search import objective_value
    from optsearch.solver import Memo

    from test_solver import usable_degrees

    bp = bounds_problem or problem
    memo = Memo(bp, options)
    compared = 0
    for tp, mbs, dp, uses in usable_degrees(problem, options):
        terms = memo.degree_terms(tp, dp, mbs, uses, 1, 1, None)
        for pp in range(1, max_stages(problem, options) + 1):
            cand = Candidate(tp=tp, dp=dp, micro_batch_size=mbs, pp=pp, uses=uses)
            bounds = [candidate_bound(bp, terms, pp, budget, refined=r) for r in (False, True)]
            bounds.append(sharpened(bp, memo.inflight, terms, cand, budget, bounds[1], memo.calls))
            sk = skeleton(bp, cand, options)
            positional = positional_bound(sk, budget).bound if sk.patterns is not None else -math.inf
            for plan, est in _plans_at(problem, options, cand):
                compared += plan.overlap_param_gather
                for bound in bounds:
                    if not bound.feasible or bound.iteration_s > est.iteration_time_s * (1 + 1e-9) or \
                            bound.cost_per_iteration_usd > est.usd_per_hour * est.iteration_time_s / 3600 * (1 + 1e-9):
                        return -1
                if positional > objective_value(est, budget.objective) * (1 + 1e-9):
                    return -1
    return compared


def _many_buckets_problem():
    """The one-node instance on two nodes (pp up to 2 at dp 8, 11 buckets on stage 0 at tp 1): every one-stage plan
    with the distributed optimizer runs with the gather on."""
    gpus = [GpuSpec(name="G0", memory_gib=80.0, peak_fp16_tflop_per_s=65.0, hbm_gbyte_per_s=900.0)]
    nodes = [dict(name="t0", gpu="G0", gpus_per_node=8, num_nodes_available=2, price_usd_per_node_hour=3.0,
                  intra_node_link="pcie", intra_node_gbyte_per_s=16.0, inter_node_gbit_per_s=100.0)]
    return _gather(make_problem(layers=8, hidden=2048, heads=16, gbs=64, node_types=nodes, gpus=gpus, seq=2048))


def test_bounds_lie_below_the_plans_with_the_gather_on():
    """Every bound below every plan, for time and cost; computing the bounds as before (the gather's floor kept, a
    problem without the flag) puts some bound above a plan with the gather on."""
    problem = _many_buckets_problem()
    options = SpaceOptions(micro_batch_sizes=(2, 4), recompute_modes=("none",), max_stages=2)
    for objective in ("time", "cost"):
        assert _check_bounds(problem, options, Budget(objective=objective)) > 0
    assert _check_bounds(problem, options, Budget(objective="time"),
                         bounds_problem=replace(problem, overlap_param_gather=False)) == -1


def test_upstream_accepts_the_gather_plan(upstream, monkeypatch):  # noqa: F811
    """With OPTSEARCH_MEGATRON_LM set: upstream's parse_args / validate_args take the solved plan's arguments,
    --overlap-param-gather with --use-distributed-optimizer and --overlap-grad-reduce, and
    --ddp-average-in-collective."""
    problem = _gather(_one_node_problem())
    plan = solve(problem, Budget(objective="time"), options=OPTIONS).plan
    assert plan.overlap_param_gather
    _check(upstream, monkeypatch, problem, plan)
    _, args, _, _ = _run_upstream(upstream, monkeypatch, problem, plan)
    assert args.overlap_param_gather and args.overlap_grad_reduce and args.use_distributed_optimizer
    assert args.ddp_average_in_collective and not args.calculate_per_token_loss  # upstream's one rule against it
