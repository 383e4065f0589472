"""The in-flight bound's floors of the exposed reduce per interval under --overlap-grad-reduce (optsearch/inflight.py;
issue 14, round 9, overlapfloor; docs/solver.md "Round 9"), minimizing time: the largest whole reduce by levels
(whole_levels_terms / whole_levels_iteration: iteration >= (m - 1) max t + max_s (whole_s + [s > 0] W_s) + the least
forward of every layer and end + sends + E + O) and the per-mark hiding floor (hiding_terms / _hiding_floor:
A_s >= whole_s - max(1, s) rho M_{j+1}), each found per interval from the caps (and node supply) by bisection.

Checked against brute force: every plan of every candidate of random instances (memory-tight ones too: every
recomputation mode, block recomputation, cp in {1, 2}), priced as the search prices it (the distributed optimizer and
the overlap as it sets them), lies above the bound, under no budget and under its own deadline, cost and rent; the
same for the interleaved candidates (the overlap off there, their own floor); on a pipelined instance whose reduce
dominates, a candidate's bound comes within 2 % of its fastest plan (6 % below it without the levels, checked here) and
the floor x 1.05 puts it above that plan (checked here: the test can fail)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from draws import draws

import optsearch.inflight as inflight
from optsearch.baselines.exhaustive import count_plans
from optsearch.bounds import CandidateBound, degree_terms
from optsearch.candidates import SpaceOptions
from optsearch.costmodel import distributed_optimizer_on, estimate
from optsearch.inflight import sharpened
from optsearch.search import budget_violations, objective_value
from optsearch.solver import Bounded, Memo, _inflight_bounded
from optsearch.spec.budget import Budget

from test_inflight_bound import _budgets, _plans
from test_interleaved import interleaved_instances
from test_overlap_solve import _pipeline_problem
from test_solver import MAX_PLANS, instances
from test_solver_budget_time import _interleaved_plans
from test_solver_memory import tight_instances


_LEVELS = inflight.whole_levels_iteration  # the function under test, before any monkeypatch


def _least_time_ratio(problem, options, strength: float = 1.0) -> tuple[float, float, int]:
    """(the least plan iteration / time bound over every plan and budget of _budgets minimizing time, the same over
    the plans with the overlap on, in how many (plan, budget) pairs the levels raised the bound). At least 1 (less
    1e-9) when the bound is valid; strength multiplies the levels' floor (a check that the test can fail)."""
    memo = Memo(problem, options)
    least, overlapped, raised = float("inf"), float("inf"), 0
    kept: dict = {}  # a candidate's bounds under one budget: taken once (no limit, or a rent limit plans share)
    for cand, (plan, est) in _plans(problem, options, as_searched=True):
        terms = memo.degree_terms(cand.tp, cand.dp, cand.micro_batch_size, cand.uses, 1, cand.cp, cand.dist)
        for budget in _budgets(est):
            if budget.objective != "time":
                continue
            assert not budget_violations(plan, est, budget)
            key = (cand, budget.objective, budget.max_time_s, budget.max_cost_usd, budget.max_usd_per_hour,
                   budget.max_gpus)
            if key in kept:
                got, walked = kept[key]
            else:
                got = sharpened(problem, memo.inflight, terms, cand, budget, CandidateBound(True, 0.0, 0.0, 0.0),
                                memo.calls)
                walked = False  # not taken
                tab = memo.inflight[cand.key] if got.feasible and got.iteration_s != 0.0 else None
                if tab is not None and tab.whole_per_layer is not None and budget.max_cost_usd is None:
                    walked = inflight.inflight_bound(replace(tab, whole_per_layer=None), problem.iterations, "time",
                                                     budget.max_time_s, None, budget.max_usd_per_hour)
                kept[key] = got, walked
            assert got.feasible, (plan, budget)
            if got.iteration_s == 0.0:  # several layer kinds: not applicable
                continue
            if walked is not False:
                raised += walked is None or got.iteration_s > walked[0] * (1 + 1e-12)
            ratio = est.iteration_time_s / got.iteration_s
            least = min(least, ratio)
            if plan.overlap_grad_reduce:
                overlapped = min(overlapped, ratio)
    return least, overlapped, raised


def _strengthened(monkeypatch, strength: float) -> None:
    """whole_levels_iteration with its floor (the levels' value) multiplied by strength."""
    def stronger(tab, j0, iterations, max_time_s=None):
        got = _LEVELS(tab, j0, iterations, None)
        return None if got is None else got * strength

    monkeypatch.setattr(inflight, "whole_levels_iteration", stronger)


@settings(max_examples=draws(6), derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(tight_instances(), st.sampled_from(["per-stage", "uniform+block", "uniform+block+cp"]))
def test_the_levels_lie_below_every_overlapped_plan_on_memory_tight_instances(case, space):
    problem, options, _, _, _ = case
    problem = replace(problem, overlap_grad_reduce=True)
    if space != "per-stage":
        options = replace(options, uniform_recompute=True, block_recompute=True,
                          context_parallel_sizes=(1, 2) if space.endswith("cp") else (1,))
    if count_plans(problem, Budget(), options, limit=MAX_PLANS) > MAX_PLANS:
        return
    assert _least_time_ratio(problem, options)[0] >= 1 - 1e-9


@settings(max_examples=draws(4), derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(instances())
def test_the_levels_lie_below_every_overlapped_plan(case):
    problem, options, _, _, _ = case
    problem = replace(problem, overlap_grad_reduce=True)
    options = SpaceOptions(micro_batch_sizes=options.micro_batch_sizes, max_stages=options.max_stages,
                           recompute_modes=options.recompute_modes)
    if count_plans(problem, Budget(), options, limit=MAX_PLANS) > MAX_PLANS:
        return
    assert _least_time_ratio(problem, options)[0] >= 1 - 1e-9


@settings(max_examples=draws(4), derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(interleaved_instances())
def test_the_interleaved_levels_lie_below_every_plan(case):
    """v > 1 (the overlap off there, A_s whole): solver._inflight_bounded below every plan, minimizing time."""
    problem, options, _, _ = case
    problem = replace(problem, overlap_grad_reduce=True)
    if count_plans(problem, Budget(), options, limit=MAX_PLANS) > MAX_PLANS:
        return
    memo = Memo(problem, options)
    for cand, (plan, est) in _interleaved_plans(problem, options):
        plan = replace(plan, distributed_optimizer=distributed_optimizer_on(problem.job, plan.dp))
        est = estimate(problem, plan)
        if not est.fits:
            continue
        terms = degree_terms(problem, cand.tp, cand.dp, cand.micro_batch_size, cand.uses)
        for budget in _budgets(est):
            if budget.objective != "time":
                continue
            got = _inflight_bounded(memo, budget, Bounded(cand, 0.0, terms))
            assert got is not None and got <= objective_value(est, budget.objective) * (1 + 1e-9), (plan, budget)


def _per_candidate(problem, options) -> dict:
    """(tp, dp, pp) -> the candidate's fastest plan's iteration / its time bound under no budget."""
    memo = Memo(problem, options)
    best, bound = {}, {}
    for cand, (plan, est) in _plans(problem, options, as_searched=True):
        key = (cand.tp, cand.dp, cand.pp)
        best[key] = min(best.get(key, float("inf")), est.iteration_time_s)
        if key not in bound:
            terms = memo.degree_terms(cand.tp, cand.dp, cand.micro_batch_size, cand.uses, 1, cand.cp, cand.dist)
            bound[key] = sharpened(problem, memo.inflight, terms, cand, Budget(objective="time"),
                                   CandidateBound(True, 0.0, 0.0, 0.0), memo.calls).iteration_s
    return {key: best[key] / bound[key] for key in best}


def test_the_levels_bind_and_are_tight_where_the_reduce_dominates(monkeypatch):
    """pp up to 3, dp 1-8 on a 1 Gbit/s network, no distributed optimizer: the exposed floor is 0 and the reduce
    dominates the iteration. Every candidate's bound lies below its fastest plan; on tp 1, dp 2, pp 2 (overlap on)
    within 2 % of it, where without the levels it sat 6 % below (1.0072 and 1.0604 when written); the floor x 1.05
    puts that bound above its fastest plan."""
    problem = _pipeline_problem(False, inter_gbit=1.0)
    options = SpaceOptions(micro_batch_sizes=(1,), recompute_modes=("none",), max_stages=3)
    ratios = _per_candidate(problem, options)
    assert min(ratios.values()) >= 1 - 1e-9
    assert 1 - 1e-9 <= ratios[(1, 2, 2)] <= 1.02, ratios[(1, 2, 2)]
    least, overlapped, raised = _least_time_ratio(problem, options)
    assert least >= 1 - 1e-9 and overlapped >= 1 - 1e-9
    assert raised > 0
    monkeypatch.setattr(inflight, "whole_levels_iteration", lambda tab, j0, iterations, max_time_s=None: 0.0)
    assert _per_candidate(problem, options)[(1, 2, 2)] > 1.05
    _strengthened(monkeypatch, 1.05)
    assert _per_candidate(problem, options)[(1, 2, 2)] < 1 - 1e-9
