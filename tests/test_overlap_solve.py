"""--overlap-grad-reduce in `solve` (issue 15; docs/targets.md "Communication overlaps", docs/cost-model.md section
7c "In solve"): the formulation prices the exposed gradient reduce exactly as the cost model does (a candidate's
optimum equals brute force over its plans, and the decoded plan re-priced equals the solver's objective, on both
backends, with several buckets on stage 0 and the later stages hidden behind the earlier ones' backward), the whole
search agrees with brute force on random instances with the overlap on, and the bounds stay below every plan."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, assume, given, settings
from draws import draws

from optsearch.baselines.exhaustive import count_plans
from optsearch.candidates import SpaceOptions, node_uses
from optsearch.costmodel import estimate, overlap_grad_reduce_on
from optsearch.formulation.model import Candidate, build, candidate_plan, decode, objective_to_user
from optsearch.plan import Stage
from optsearch.problem import build_problem
from optsearch.solver import backend
from optsearch.spec import GpuSpec
from optsearch.spec.budget import Budget
from optsearch.targets import engine_problem

from test_solver import MAX_PLANS, _budget, assert_backends_equal_brute_force
from test_solver import instances, make_problem


def _pipeline_problem(dist: bool, inter_gbit: float = 10.0):
    """One 2-GPU node type, hidden 2048 (a layer holds 50.3M parameters: 2-5 buckets of 40M on stage 0)."""
    gpus = [GpuSpec(name="G0", memory_gib=40.0, peak_fp16_tflop_per_s=65.0, hbm_gbyte_per_s=900.0)]
    nodes = [dict(name="t0", gpu="G0", gpus_per_node=2, num_nodes_available=4, price_usd_per_node_hour=3.0,
                  intra_node_link="pcie", intra_node_gbyte_per_s=16.0, inter_node_gbit_per_s=inter_gbit)]
    problem = make_problem(layers=8, hidden=2048, heads=4, gbs=16, node_types=nodes, gpus=gpus,
                           distributed_optimizer=dist, seq=512)
    return replace(problem, overlap_grad_reduce=True)


@pytest.mark.parametrize("dist", [False, True])
@pytest.mark.parametrize("objective", ["time", "cost"])
def test_a_pipelined_candidate_equals_brute_force_over_its_plans(dist, objective):
    """pp = 3, dp = 2: every split of 8 layers (recompute none) priced by the cost model with the overlap; the
    candidate's model, on both backends, finds the least and its decoded plan re-prices to the solver's value."""
    problem = _pipeline_problem(dist)
    options = SpaceOptions(micro_batch_sizes=(1,), recompute_modes=("none",))
    cand = Candidate(tp=1, dp=2, micro_batch_size=1, pp=3, uses=tuple(node_uses(problem, 1, 2, 1)))
    assert overlap_grad_reduce_on(problem, 2)
    budget = Budget(objective=objective)
    priced = []
    for split in itertools.product(range(9), repeat=3):
        if sum(split) != 8 or split[1] == 0:
            continue
        plan = candidate_plan(problem, cand, tuple(Stage(node_type="t0", num_layers=n) for n in split))
        est = estimate(problem, plan)
        if est.fits:
            priced.append((est.training_time_s if objective == "time" else est.cost_usd, plan, est))
    best, best_plan, best_est = min(priced, key=lambda x: x[0])
    assert best_plan.overlap_grad_reduce
    # the instance exercises the rows: more than one bucket on stage 0, and an exposed reduce below the full one
    assert best_est.dp_allreduce_s < estimate(problem, replace(best_plan, overlap_grad_reduce=False)).dp_allreduce_s
    for name in ("cbc", "cpsat"):
        f = build(problem, budget, cand, options)
        sol = backend(name).solve(f.lm, None)
        assert sol.status == "optimal"
        plan = decode(f, sol)
        assert plan.overlap_grad_reduce
        est = estimate(problem, plan)
        value = est.training_time_s if objective == "time" else est.cost_usd
        assert math.isclose(value, best, rel_tol=1e-6), (name, plan.balance, best_plan.balance)
        assert math.isclose(objective_to_user(f, sol.objective), value, rel_tol=1e-5), name


def test_the_instance_has_several_buckets_on_stage_zero():
    from optsearch.costmodel import overlap_bucket_count, stage_parameters

    problem = _pipeline_problem(False)
    params = stage_parameters(problem.model, {problem.model.kinds[0].name: 4}, True, False, 3)
    assert overlap_bucket_count(params, 2, True) == 6  # (4 x 50.3M + 16.4M embedding) / 40M


@settings(max_examples=draws(6), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(instances())
def test_optimum_with_the_overlap_equals_brute_force_and_backends_agree(case):
    problem, options, objective, kind, factor = case
    problem = replace(problem, overlap_grad_reduce=True)
    assume(count_plans(problem, Budget(), options, limit=MAX_PLANS) <= MAX_PLANS)
    assert_backends_equal_brute_force(problem, _budget(problem, options, objective, kind, factor), options)


def _check_bounds_below_overlapped_plans(problem, options, budget) -> int:
    """Every candidate's cheap, refined and aggregate bounds, and its positional bound, lie below every plan of the
    candidate as the search prices it: the distributed optimizer and the overlap as the search sets them."""
    from unittest import mock

    from optsearch import bounds as bounds_module
    from optsearch.bounds import candidate_bound, degree_terms
    from optsearch.candidates import max_stages
    from optsearch.formulation.model import skeleton
    from optsearch.formulation.positional import positional_bound
    from optsearch.search import objective_value

    from test_solver import plans_as_searched, usable_degrees

    compared = 0
    for tp, mbs, dp, uses in usable_degrees(problem, options):
        terms = degree_terms(problem, tp, dp, mbs, uses)
        for pp in range(1, max_stages(problem, options) + 1):
            bounds = [candidate_bound(problem, terms, pp, budget, refined=r) for r in (False, True)]
            with mock.patch.object(bounds_module, "MAX_COMPOSITIONS", 0):
                bounds.append(candidate_bound(problem, terms, pp, budget, refined=True))
            sk = skeleton(problem, Candidate(tp=tp, dp=dp, micro_batch_size=mbs, pp=pp, uses=uses), options)
            positional = positional_bound(sk, budget).bound if sk.patterns is not None else -math.inf
            for found in plans_as_searched(problem, options, tp, mbs, dp, uses, pp):
                est = found[1]
                compared += 1
                for bound in bounds:
                    assert bound.iteration_s <= est.iteration_time_s * (1 + 1e-9), (found[0], bound)
                    assert bound.cost_per_iteration_usd <= est.usd_per_hour * est.iteration_time_s / 3600 * (
                        1 + 1e-9), (found[0], bound)
                assert positional <= objective_value(est, budget.objective) * (1 + 1e-9), (found[0], positional)
    return compared


@settings(max_examples=draws(3), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(instances())
def test_bounds_lie_below_every_plan_with_the_overlap(case):
    problem, options, objective, kind, factor = case
    problem = replace(problem, overlap_grad_reduce=True)
    assume(count_plans(problem, Budget(), options, limit=MAX_PLANS) <= MAX_PLANS)
    _check_bounds_below_overlapped_plans(problem, options, Budget(objective=objective))


def test_bounds_lie_below_the_pipelined_instances_plans():
    """The instance of the candidate test (several buckets, pp up to 3, dp 1-4): every bound below every plan."""
    problem = _pipeline_problem(True)
    options = SpaceOptions(micro_batch_sizes=(1,), recompute_modes=("none",), max_stages=3)
    for objective in ("time", "cost"):
        assert _check_bounds_below_overlapped_plans(problem, options, Budget(objective=objective)) > 100


def test_where_the_search_turns_it_on():
    gpt = build_problem("gpt2-xl", "fasop-a100-a10")
    assert not overlap_grad_reduce_on(gpt, 4)  # the library's default: off
    on = engine_problem("megatron", gpt)
    assert on.overlap_grad_reduce and overlap_grad_reduce_on(on, 4) and overlap_grad_reduce_on(on, 1, cp=2)
    assert not overlap_grad_reduce_on(on, 1)  # nothing to reduce
    assert not overlap_grad_reduce_on(on, 4, virtual_stages=2)  # interleaved: not priced (section 7c)
    assert not engine_problem("megatron", gpt, overlap_grad_reduce=False).overlap_grad_reduce
    assert not engine_problem("fasop", gpt).overlap_grad_reduce
    t5 = engine_problem("megatron", build_problem("t5-fasop", "fasop-a10"))
    assert not overlap_grad_reduce_on(t5, 4)  # two layer kinds: not in the formulation
