"""The distributed-optimizer-off candidates built late (issue 14, round 10: first plans; solver.LAZY_OFF, _with_off).

Under --overlap-grad-reduce, with the job leaving the optimizer open, the search tries each candidate with the
distributed optimizer off as well (Candidate.dist = False; tests/test_distopt_search.py). solve now builds those
candidates' terms and cheap bounds only once it has a plan (or its loop has waited OFF_WAIT_SHARE of the limit, or has
nothing else left), so that the first plan does not wait for them. No bound stands in for a candidate not yet built:
the tests here check that every off candidate is still searched before an answer is claimed, where the optimum is off
(the plans that only off makes possible, and the off plan faster than every on plan), on both backends against brute
force, and that the checks fail when the off candidates are skipped."""

from __future__ import annotations

from dataclasses import replace

import pytest

from optsearch import solver as solver_module
from priced import solve_exhaustive
from optsearch.solver import ALL, DEFAULT, OFF, Memo, _candidates, _with_off, solve
from optsearch.spec.budget import Budget

from test_distopt_search import OPTIONS, _one_node_problem


def _budgets():
    """On the one-node instance (the optimizer off 5 % faster): time; and cost under a deadline D halfway between
    the fastest off plan and the fastest on plan, which only off plans meet."""
    problem = _one_node_problem()
    fastest = solve_exhaustive(problem, Budget(objective="time"), options=OPTIONS)
    forced_on = replace(problem, job=problem.job.model_copy(update={"distributed_optimizer": True}))
    fastest_on = solve_exhaustive(forced_on, Budget(objective="time"), options=OPTIONS)
    assert fastest.plan.distributed_optimizer is False and fastest_on.plan.distributed_optimizer is True
    deadline = 0.5 * (fastest.objective_value + fastest_on.objective_value)
    # the premise: no plan with the optimizer on meets the deadline
    assert solve_exhaustive(forced_on, Budget(objective="cost", max_time_s=deadline), options=OPTIONS).status \
        == "infeasible"
    return problem, [Budget(objective="time"), Budget(objective="cost", max_time_s=deadline)]


def _answers(problem, budget, solver):
    """solve's answer and brute force's."""
    return solve(problem, budget, solver=solver, options=OPTIONS), solve_exhaustive(problem, budget, options=OPTIONS)


@pytest.mark.parametrize("solver,wait_s,seeds", [("cpsat", 1e9, True), ("cbc", 1e9, True), ("cpsat", 0.0, False),
                                                  ("cbc", 0.0, False), ("cpsat", 1e9, False)])
def test_an_optimum_that_only_off_candidates_hold_is_found(solver, wait_s, seeds, monkeypatch):
    """Time (the off plan 5 % faster than every on plan) and cost under a deadline only off plans meet: optimal at
    brute force's value with the optimizer off, on both backends, on every path by which the off candidates join:
    after the seeds' first plan (the time row); in the loop, at once without a plan (no seeds, wait 0) or at the
    loop's first plan (no seeds, wait 1e9 s); and when the seed search has nothing else left (the deadline row: no
    on candidate meets the deadline)."""
    monkeypatch.setattr(solver_module, "OFF_WAIT_S", wait_s)
    if not seeds:
        monkeypatch.setattr(solver_module, "QUICK_SEEDS", 0)
    problem, budgets = _budgets()
    for budget in budgets:
        got, truth = _answers(problem, budget, solver)
        assert truth.status == "optimal" and truth.plan.distributed_optimizer is False
        assert got.status == "optimal", (budget, got.message)
        assert got.objective_value == pytest.approx(truth.objective_value, rel=1e-9), budget
        assert got.plan.distributed_optimizer is False and got.plan.overlap_grad_reduce


def test_the_check_fails_when_the_lazy_path_skips_the_off_candidates(monkeypatch):
    """The same rows with _with_off adding nothing (the off candidates skipped, as a lazy path that never builds
    them would): the time row claims the on plan 'optimal' above brute force's optimum, the deadline row claims no
    plan exists. So the test above fails on such a path."""
    problem, (time_row, deadline_row) = _budgets()
    monkeypatch.setattr(solver_module, "_with_off", lambda memo, budget, slower, bounded, *deadline: (bounded, [], 0))
    got, truth = _answers(problem, time_row, "cpsat")
    assert got.status == "optimal" and got.objective_value > truth.objective_value * 1.04
    got, truth = _answers(problem, deadline_row, "cpsat")
    assert truth.status == "optimal" and got.status == "infeasible"


def test_the_late_list_is_the_whole_list():
    """_candidates at the default setting, then _with_off, gives _candidates(ALL): the same candidates, bounds and
    order (so the loop after the join is the loop before the change), and the same total; the off list holds only
    off candidates and DEFAULT none."""
    problem, budgets = _budgets()
    for budget in budgets + [Budget(objective="cost"), Budget(objective="time", max_cost_usd=1e9)]:
        whole, total = _candidates(Memo(problem, OPTIONS), budget, 0.0, ALL)
        memo = Memo(problem, OPTIONS)
        first, first_total = _candidates(memo, budget, 0.0, DEFAULT)
        merged, off, off_total = _with_off(memo, budget, 0.0, first)
        assert off and all(b.cand.dist is False for b in off) and all(b.cand.dist is None for b in first)
        assert [(b.cand, b.lower_bound) for b in merged] == [(b.cand, b.lower_bound) for b in whole]
        assert first_total + off_total == total
        assert [b.cand for b in _candidates(Memo(problem, OPTIONS), budget, 0.0, OFF)[0]] == [b.cand for b in off]


def test_the_first_plan_comes_before_the_off_candidates_are_built(monkeypatch):
    """The time row: solve builds the default list, finds its first plan (the seeds' quick plans, before any off
    candidate exists), then builds the off candidates once; its answer is the off optimum."""
    problem, (time_row, _) = _budgets()
    calls = []
    real = solver_module._candidates
    quick = solver_module.Memo.quick_plans

    def recorded(memo, budget, slower_than_s=0.0, settings=ALL, *deadline):
        calls.append(settings)
        return real(memo, budget, slower_than_s, settings, *deadline)

    def quick_recorded(self, sk):
        calls.append("quick")
        return quick(self, sk)

    monkeypatch.setattr(solver_module, "_candidates", recorded)
    monkeypatch.setattr(solver_module.Memo, "quick_plans", quick_recorded)
    got = solve(problem, time_row, options=OPTIONS)
    assert got.status == "optimal" and got.plan.distributed_optimizer is False
    assert calls[0] == DEFAULT and calls.count(OFF) == 1 and ALL not in calls
    assert "quick" in calls[:calls.index(OFF)]  # plans were priced before the off candidates were built
