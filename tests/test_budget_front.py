"""The loop's diagnosis hooks (round 13, budgetbound: bench/budget_front.py reads them): solver.QUEUE_DUMP holds the
queue and the parked as the loop ends, solver.LOOP_TIMES the CPU time and count of each kind of loop step."""

from __future__ import annotations

from optsearch import solver as solver_module
from optsearch.solver import INCUMBENT_REL, solve
from optsearch.spec.budget import Budget

from test_timeload import INTERLEAVED, _one_type_problem


def test_the_dumped_queue_ends_at_or_above_the_optimum_and_the_step_counts_match_the_stats(monkeypatch):
    problem = _one_type_problem()
    cheapest = solve(problem, Budget(objective="cost"), options=INTERLEAVED)
    budget = Budget(objective="time", max_cost_usd=cheapest.objective_value * 2.5)
    dump, times = [], {}
    monkeypatch.setattr(solver_module, "QUEUE_DUMP", dump)
    monkeypatch.setattr(solver_module, "LOOP_TIMES", times)
    got = solve(problem, budget, options=INTERLEAVED)
    assert got.status == "optimal"
    assert len(dump) >= 1  # the seed searches' inner solves append theirs first; the last is this solve's
    queue, parked, incumbent = dump[-1]
    dumped = len(dump)
    assert incumbent == got.objective_value
    # an optimal answer: the loop ended because every candidate left is bounded at or above the incumbent
    assert queue or parked
    assert all(entry[0] >= incumbent * (1 - INCUMBENT_REL) for entry in queue + parked)
    # summed over this solve and its inner ones
    assert times.get("n inflight", 0) >= got.stats["inflight_bounded"] > 0
    assert all(v >= 0.0 for k, v in times.items())
    # without the hooks nothing is recorded, and the answer is the same
    monkeypatch.setattr(solver_module, "QUEUE_DUMP", None)
    monkeypatch.setattr(solver_module, "LOOP_TIMES", None)
    again = solve(problem, budget, options=INTERLEAVED)
    assert again.objective_value == got.objective_value and len(dump) == dumped
