"""The refined bound under a budget walks only the compositions whose floors meet it (round 13, budgetbound:
bounds._meeting_floors, solver.BUDGET_FLOORS). Checked on small random instances (roomy, memory-tight, interleaved)
against every plan of the space: with budgets at and near plans' own cost and time, every plan that meets the budget
keeps its composition (stage counts per node type) among its candidate's floors' survivors; and every candidate's
refined bound is the same, bit for bit, with the floors and without."""

from __future__ import annotations

from hypothesis import HealthCheck, assume, given, settings
from draws import draws

from optsearch import bounds as bounds_module
from optsearch import solver as solver_module
from optsearch.baselines.exhaustive import count_plans
from optsearch.bounds import _compositions, _meeting_floors, MAX_COMPOSITIONS
from optsearch.formulation.model import candidate_distributed_optimizer
from optsearch.solver import Memo, _candidates
from optsearch.spec.budget import Budget
from optsearch.whatif import enumerate_plans

from test_interleaved import interleaved_instances
from test_solver import MAX_PLANS, instances
from test_solver_memory import tight_instances


def _budgets(plans) -> list[Budget]:
    """Time under a cost budget and cost under a deadline, at two plans' own values (one in the middle of the costs,
    the fastest), a hair below them and 5 % above."""
    by_cost = sorted(plans, key=lambda p: p[1].cost_usd)
    by_time = sorted(plans, key=lambda p: p[1].training_time_s)
    out = []
    for picked in (by_cost[len(by_cost) // 2], by_time[0]):
        cost, time_s = picked[1].cost_usd, picked[1].training_time_s
        for f in (1.0, 1.0 - 1e-9, 1.05):
            out.append(Budget(objective="time", max_cost_usd=cost * f))
            out.append(Budget(objective="cost", max_time_s=time_s * f))
    return out


def _check_floors(problem, options, monkeypatch) -> None:
    assume(count_plans(problem, Budget(), options, limit=MAX_PLANS) <= MAX_PLANS)
    plans = list(enumerate_plans(problem, Budget(), options))
    assume(plans)
    memo = Memo(problem, options)
    cands, _ = _candidates(memo, Budget())
    by_key: dict = {}
    for b in cands:
        by_key.setdefault((b.cand.tp, b.cand.dp, b.cand.micro_batch_size, b.cand.pp, b.cand.ep, b.cand.cp), []).append(b)
    checked = 0
    for budget in _budgets(plans):
        # every plan that meets the budget keeps its composition (the floors never rule out a plan)
        for plan, est in plans:
            if plan.virtual_stages != 1 or solver_module.budget_violations(plan, est, budget):
                continue
            for b in by_key.get((plan.tp, plan.dp, plan.micro_batch_size, len(plan.stages), plan.ep, plan.cp), []):
                if b.cand.v != 1 or candidate_distributed_optimizer(problem, b.cand) != plan.distributed_optimizer:
                    continue
                names = [u.name for u in b.cand.uses]
                if any(s.node_type not in names for s in plan.stages):
                    continue
                counts = tuple(sum(s.node_type == n for s in plan.stages) for n in names)
                comps = _compositions(b.terms, b.cand.pp, MAX_COMPOSITIONS)
                if comps is None or counts not in comps:
                    continue
                kept = _meeting_floors(problem, b.terms, b.cand.pp, comps, b.terms.all_params(b.cand.pp), budget)
                assert counts in kept, (plan, budget)
                checked += 1
        # every candidate's refined bound: the same with the floors (applied to every listed candidate) and without
        monkeypatch.setattr(bounds_module, "VECTOR_FROM", 1)
        with_floors, without = Memo(problem, options), Memo(problem, options)
        for b in cands:
            monkeypatch.setattr(solver_module, "BUDGET_FLOORS", True)
            got = with_floors.refined_bound(b.terms, b.cand, budget)
            assert with_floors.refined_bound(b.terms, b.cand, budget) == got  # asked again: the same (kept)
            monkeypatch.setattr(solver_module, "BUDGET_FLOORS", False)
            assert got == without.refined_bound(b.terms, b.cand, budget), (b.cand, budget)
        monkeypatch.undo()
    assume(checked)


@settings(max_examples=draws(4), deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.function_scoped_fixture])
@given(instances())
def test_floors_keep_every_plan_that_meets_the_budget_roomy(monkeypatch, case):
    problem, options = case[0], case[1]
    _check_floors(problem, options, monkeypatch)


@settings(max_examples=draws(4), deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.function_scoped_fixture])
@given(tight_instances())
def test_floors_keep_every_plan_that_meets_the_budget_memory_tight(monkeypatch, case):
    problem, options = case[0], case[1]
    _check_floors(problem, options, monkeypatch)


@settings(max_examples=draws(2), deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.function_scoped_fixture])
@given(interleaved_instances())
def test_floors_keep_every_plan_that_meets_the_budget_interleaved(monkeypatch, case):
    problem, options = case[0], case[1]
    _check_floors(problem, options, monkeypatch)
