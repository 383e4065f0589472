"""Review finding 4: under --time-limit, a --max-time and --max-cost that each can be met but not together still name
the nearest plan on each side (the cheapest within the time, the fastest within the cost) when the probes finish in
the limit, and say which probe was not run to a plan, and why, when they do not. The solves here are instant; a clock
that each solve advances by its whole time limit stands for solves that use all of it, as on a large pool."""

from __future__ import annotations

import pytest

import optsearch.infeasible as infeasible
import optsearch.solver as solver_mod
from optsearch.problem import build_problem
from optsearch.spec.budget import Budget
from test_whatif import CLUSTER, MODEL, OPTIONS, SOLVER


class _Clock:
    now = 0.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def case():
    problem = build_problem(MODEL, CLUSTER, profile="analytic")
    fastest = solver_mod.solve(problem, Budget(objective="time"), solver=SOLVER, options=OPTIONS).estimate
    cheapest = solver_mod.solve(problem, Budget(objective="cost"), solver=SOLVER, options=OPTIONS).estimate
    assert cheapest.cost_usd < fastest.cost_usd and fastest.training_time_s < cheapest.training_time_s
    # just above the fastest time and just above the least cost: each alone can be met, not both
    budget = Budget(objective="cost", max_time_s=fastest.training_time_s * 1.0001,
                    max_cost_usd=cheapest.cost_usd * 1.0001)
    return problem, budget


def _reason(monkeypatch, problem, budget, limit_s, *, spent_fraction=1.0, starve_after=None):
    clock, real, calls, depth = _Clock(), solver_mod.solve, [], [0]

    def solve(*args, time_limit_s=None, **kw):
        if depth[0]:  # a solve's own inner solves: part of the outer one's time
            return real(*args, time_limit_s=time_limit_s, **kw)
        calls.append(time_limit_s)
        if starve_after is not None and len(calls) > starve_after:
            time_limit_s = 0.0  # a probe that finds nothing in its time
        depth[0] += 1
        try:
            result = real(*args, time_limit_s=time_limit_s, **kw)
        finally:
            depth[0] -= 1
        clock.now += spent_fraction * (time_limit_s or 0.0)
        return result

    monkeypatch.setattr(solver_mod, "solve", solve)
    monkeypatch.setattr(infeasible, "time", clock)
    reason = infeasible.no_plan_reason(problem, budget, solver=SOLVER, options=OPTIONS, time_limit_s=limit_s)
    return reason, clock.now, calls


def test_both_probes_are_named_when_the_solves_before_them_use_their_whole_limit(case, monkeypatch):
    problem, budget = case
    reason, spent, calls = _reason(monkeypatch, problem, budget, 8.0)
    assert reason.startswith("no plan meets --max-cost and --max-time together: each alone can be met (within ")
    assert " the cheapest plan costs " in reason and " the fastest plan takes " in reason, reason
    assert spent <= 8.0 + 1e-9 and len(calls) == 4, calls


def test_a_probe_left_without_a_plan_says_so(case, monkeypatch):
    problem, budget = case
    reason, _, _ = _reason(monkeypatch, problem, budget, 8.0, starve_after=3)  # the fastest-within-cost probe
    assert " the cheapest plan costs " in reason
    assert "the fastest plan within $" in reason and "was not found in the 2.0 s of --time-limit left for it" in reason
