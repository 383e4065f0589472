"""The distributed optimizer as a searched knob under --overlap-grad-reduce (issue 15; docs/cost-model.md 7e,
docs/knobs.md "The distributed optimizer under the overlap"). Without the overlap on never loses, so the search fixes
it; under the overlap off can be faster (the plain all-reduce hides whole behind the backward, the distributed
optimizer's parameter all-gather does not) and on can be the only one that fits (unsharded states), so the search
tries both (costmodel.distributed_optimizer_settings). Brute force enumerates both settings everywhere the job
leaves it open: the search's optimum, on both backends, equals it, and every bound of a candidate at either setting
lies below every plan of that candidate at that setting."""

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
from optsearch.costmodel import distributed_optimizer_settings, estimate
from optsearch.formulation.model import Candidate, candidate_plan
from optsearch.plan import Plan, Stage
from optsearch.solver import solve
from optsearch.spec import GpuSpec
from optsearch.spec.budget import Budget

from test_megatron_parse import _check, _run_upstream, upstream  # noqa: F401  (the fixture)
from test_solver import MAX_PLANS, _budget, assert_backends_equal_brute_force, instances, make_problem


def _open(problem):
    """The problem with the overlap on and the job leaving the distributed optimizer open (unset)."""
    problem = replace(problem, overlap_grad_reduce=True)
    return replace(problem, job=problem.job.model_copy(update={"distributed_optimizer": None}))


def _one_node_problem(memory_gib: float = 80.0):
    """tests/test_overlap_seams.py's instance: one node of 8 GPUs on PCIe; dp 8 with the optimizer off is 5 % faster."""
    gpus = [GpuSpec(name="G0", memory_gib=memory_gib, peak_fp16_tflop_per_s=65.0, hbm_gbyte_per_s=900.0)]
    nodes = [dict(name="t0", gpu="G0", gpus_per_node=8, num_nodes_available=1, price_usd_per_node_hour=3.0,
                  intra_node_link="pcie", intra_node_gbyte_per_s=16.0, inter_node_gbit_per_s=100.0)]
    return _open(make_problem(layers=8, hidden=2048, heads=16, gbs=64, node_types=nodes, gpus=gpus, seq=2048))


OPTIONS = SpaceOptions(micro_batch_sizes=(1, 2, 4), recompute_modes=("none",), max_stages=2)


def test_the_settings_the_search_tries():
    problem = _one_node_problem()
    assert distributed_optimizer_settings(problem, 8) == (True, False)
    assert distributed_optimizer_settings(problem, 1) == (False,)  # nothing to shard
    assert distributed_optimizer_settings(problem, 8, virtual_stages=2) == (True,)  # no overlap at v > 1
    assert distributed_optimizer_settings(replace(problem, overlap_grad_reduce=False), 8) == (True,)
    fixed = replace(problem, job=problem.job.model_copy(update={"distributed_optimizer": True}))
    assert distributed_optimizer_settings(fixed, 8) == (True,)
    off = replace(problem, job=problem.job.model_copy(update={"distributed_optimizer": False}))
    assert distributed_optimizer_settings(off, 8) == (False,)


@pytest.mark.parametrize("solver", ["cpsat", "cbc"])
def test_off_is_found_where_it_is_faster_and_launch_omits_the_flag(solver):
    """Before: solve fixed it on and answered the on plan 'optimal' although the off plan is 5 % faster."""
    problem = _one_node_problem()
    on = Plan(tp=1, dp=8, micro_batch_size=4, stages=(Stage(node_type="t0", num_layers=8),),
              distributed_optimizer=True, overlap_grad_reduce=True)
    off = replace(on, distributed_optimizer=False)
    assert estimate(problem, off).iteration_time_s < 0.96 * estimate(problem, on).iteration_time_s
    assert in_search_space(problem, on, OPTIONS) and in_search_space(problem, off, OPTIONS)
    budget = Budget(objective="time")
    got = solve(problem, budget, options=OPTIONS, solver=solver)
    truth = solve_exhaustive(problem, budget, options=OPTIONS)
    assert got.status == "optimal"
    assert got.objective_value == pytest.approx(truth.objective_value, rel=1e-9)
    assert got.plan.distributed_optimizer is False and got.plan.overlap_grad_reduce
    assert got.objective_value <= estimate(problem, off).training_time_s * (1 + 1e-9)
    args = megatron.megatron_args(problem, got.plan).args
    assert "--use-distributed-optimizer" not in args and "--overlap-grad-reduce" in args


def test_upstream_accepts_the_off_plan(upstream, monkeypatch):  # noqa: F811
    """With OPTSEARCH_MEGATRON_LM set: upstream's parse_args / validate_args take the solved off plan's arguments,
    --overlap-grad-reduce without --use-distributed-optimizer."""
    problem = _one_node_problem()
    plan = solve(problem, Budget(objective="time"), options=OPTIONS).plan
    assert not plan.distributed_optimizer and plan.overlap_grad_reduce
    _check(upstream, monkeypatch, problem, plan)
    _, args, _, _ = _run_upstream(upstream, monkeypatch, problem, plan)
    assert args.overlap_grad_reduce and not args.use_distributed_optimizer


@pytest.mark.parametrize("solver", ["cpsat", "cbc"])
def test_on_is_kept_where_off_does_not_fit(solver):
    """The same instance on 10 GiB cards: unsharded optimizer states (18 B per parameter, bf16) do not fit one stage,
    so off loses memory where it would gain time; the optimum equals brute force over both settings."""
    problem = _one_node_problem(memory_gib=10.0)
    budget = Budget(objective="time")
    truth = solve_exhaustive(problem, budget, options=OPTIONS)
    got = solve(problem, budget, options=OPTIONS, solver=solver)
    assert truth.status == got.status == "optimal"
    assert got.objective_value == pytest.approx(truth.objective_value, rel=1e-9)
    plan = got.plan
    assert plan.distributed_optimizer
    assert not estimate(problem, replace(plan, distributed_optimizer=False)).fits


@settings(max_examples=draws(5), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(instances())
def test_optimum_with_both_settings_equals_brute_force_and_backends_agree(case):
    problem, options, objective, kind, factor = case
    problem = _open(problem)
    assume(count_plans(problem, Budget(), options, limit=MAX_PLANS) <= MAX_PLANS)
    assert_backends_equal_brute_force(problem, _budget(problem, options, objective, kind, factor), options)


def _plans_at(problem, options, cand: Candidate):
    """(plan, estimate) of every type sequence and split of the candidate at its own optimizer setting, each at its
    least recomputation (exhaustive._least_recompute)."""
    from optsearch.baselines.exhaustive import _least_recompute, partitions, type_sequences

    for types in type_sequences(list(cand.uses), cand.pp, None, cand.gpus_per_stage):
        for parts in partitions(problem.model.num_layers, cand.pp):
            plan = candidate_plan(problem, cand, tuple(Stage(node_type=t, num_layers=n) for t, n in zip(types, parts)))
            found = _least_recompute(problem, plan, options)
            if found is not None:
                yield found


def _check_bounds(problem, options, budget) -> int:
    """Every off candidate's cheap, refined and in-flight bounds (as solver.Memo computes them, at the candidate's
    own terms) and its positional bound lie below every plan of the candidate with the optimizer off."""
    from optsearch.bounds import candidate_bound
    from optsearch.candidates import max_stages
    from optsearch.formulation.model import skeleton
    from optsearch.formulation.positional import positional_bound
    from optsearch.inflight import sharpened
    from optsearch.search import objective_value
    from optsearch.solver import Memo

    from test_solver import usable_degrees

    memo = Memo(problem, options)
    compared = 0
    for tp, mbs, dp, uses in usable_degrees(problem, options):
        if distributed_optimizer_settings(problem, dp) != (True, False):
            continue
        terms = memo.degree_terms(tp, dp, mbs, uses, 1, 1, False)
        assert terms.distributed_optimizer is False
        for pp in range(1, max_stages(problem, options) + 1):
            cand = Candidate(tp=tp, dp=dp, micro_batch_size=mbs, pp=pp, uses=uses, dist=False)
            bounds = [candidate_bound(problem, terms, pp, budget, refined=r) for r in (False, True)]
            bounds.append(sharpened(problem, memo.inflight, terms, cand, budget, bounds[1], memo.calls))
            sk = skeleton(problem, cand, options)
            positional = positional_bound(sk, budget).bound if sk.patterns is not None else -math.inf
            for plan, est in _plans_at(problem, options, cand):
                assert plan.distributed_optimizer is False
                compared += 1
                for bound in bounds:
                    assert bound.feasible, (plan, bound)
                    assert bound.iteration_s <= est.iteration_time_s * (1 + 1e-9), (plan, bound)
                    assert bound.cost_per_iteration_usd <= est.usd_per_hour * est.iteration_time_s / 3600 * (
                        1 + 1e-9), (plan, bound)
                assert positional <= objective_value(est, budget.objective) * (1 + 1e-9), (plan, positional)
    return compared


@settings(max_examples=draws(3), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(instances())
def test_bounds_of_off_candidates_lie_below_their_plans(case):
    problem, options, objective, _, _ = case
    problem = _open(problem)
    assume(count_plans(problem, Budget(), options, limit=MAX_PLANS) <= MAX_PLANS)
    _check_bounds(problem, options, Budget(objective=objective))


def test_bounds_of_off_candidates_on_a_pipelined_instance():
    """2-GPU nodes, pp up to 3, dp 2-4 (several buckets on stage 0): every bound below every off plan."""
    gpus = [GpuSpec(name="G0", memory_gib=40.0, peak_fp16_tflop_per_s=65.0, hbm_gbyte_per_s=900.0)]
    nodes = [dict(name="t0", gpu="G0", gpus_per_node=2, num_nodes_available=4, price_usd_per_node_hour=3.0,
                  intra_node_link="pcie", intra_node_gbyte_per_s=16.0, inter_node_gbit_per_s=10.0)]
    problem = _open(make_problem(layers=8, hidden=2048, heads=4, gbs=16, node_types=nodes, gpus=gpus, seq=512))
    options = SpaceOptions(micro_batch_sizes=(1,), recompute_modes=("none",), max_stages=3)
    for objective in ("time", "cost"):
        assert _check_bounds(problem, options, Budget(objective=objective)) > 50


def test_bounds_of_off_candidates_where_off_is_faster():
    """The one-node instance, where off plans are faster than on ones: a bound taken at the on setting would lie
    above them (a bound computed with the search's default, not the candidate's own setting, fails here)."""
    for objective in ("time", "cost"):
        assert _check_bounds(_one_node_problem(), OPTIONS, Budget(objective=objective)) > 50


def _check_dominance(problem, options) -> tuple[int, int]:
    """Where costmodel.distributed_optimizer_off_dominated says so, every off plan is at least as slow as the same
    plan with the optimizer on, and on fits wherever off does: (plans compared, degrees claimed)."""
    from optsearch.costmodel import distributed_optimizer_off_dominated
    from optsearch.candidates import max_stages

    from test_solver import usable_degrees

    compared = claimed = 0
    for tp, mbs, dp, uses in usable_degrees(problem, options):
        if distributed_optimizer_settings(problem, dp) != (True, False):
            continue
        if not distributed_optimizer_off_dominated(problem, [u.name for u in uses], tp, dp):
            continue
        claimed += 1
        for pp in range(1, max_stages(problem, options) + 1):
            cand = Candidate(tp=tp, dp=dp, micro_batch_size=mbs, pp=pp, uses=uses, dist=False)
            for off, est in _plans_at(problem, options, cand):
                on = estimate(problem, replace(off, distributed_optimizer=True))
                assert on.fits and on.iteration_time_s <= est.iteration_time_s * (1 + 1e-12), (off, on, est)
                compared += 1
    return compared, claimed


def test_off_is_skipped_only_where_on_is_never_slower():
    """One GPU per node on a fast network, slow HBM: the all-gather costs less than off's larger optimizer step, so
    off is dominated at every degree there; on the one-node PCIe instance (off 5 % faster) nothing is claimed."""
    gpus = [GpuSpec(name="G0", memory_gib=40.0, peak_fp16_tflop_per_s=65.0, hbm_gbyte_per_s=300.0)]
    nodes = [dict(name="t0", gpu="G0", gpus_per_node=1, num_nodes_available=4, price_usd_per_node_hour=3.0,
                  intra_node_link="nvlink", intra_node_gbyte_per_s=150.0, inter_node_gbit_per_s=400.0)]
    problem = _open(make_problem(layers=6, hidden=1024, heads=8, gbs=16, node_types=nodes, gpus=gpus, seq=512))
    options = SpaceOptions(micro_batch_sizes=(1, 2), recompute_modes=("none", "full"), max_stages=2)
    compared, claimed = _check_dominance(problem, options)
    assert claimed >= 2 and compared > 10
    assert _check_dominance(_one_node_problem(), OPTIONS)[1] == 0


@settings(max_examples=draws(3), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(instances())
def test_dominance_holds_on_random_instances(case):
    problem, options, _, _, _ = case
    problem = _open(problem)
    assume(count_plans(problem, Budget(), options, limit=MAX_PLANS) <= MAX_PLANS)
    _check_dominance(problem, options)
