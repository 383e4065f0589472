"""A new user's review (round 8): messages that state more than is known, or round away what the user gave."""

from __future__ import annotations

import pytest

import optsearch.solver as solver_module
from optsearch.errors import SpecError
from optsearch.spec.budget import Budget
from optsearch.units import format_budget_duration, parse_duration_s, parse_money_usd

from test_solver import _fasop_like


def _stopped_early(real):
    """solve, but every plan reported as stopped at a time limit (feasible, not proven)."""

    def solve(*args, **kwargs):
        result = real(*args, **kwargs)
        if result.status == "optimal":
            result.status = "feasible"
        return result

    return solve


@pytest.mark.parametrize("proven", [True, False])
def test_no_plan_meets_the_budget_names_an_unproven_best_plan_as_found(proven, monkeypatch):
    """explain_infeasible under --time-limit: a fastest/cheapest plan not proven so is 'the fastest found', as the
    hints in infeasible.py say, never 'the fastest'."""
    problem = _fasop_like()
    if not proven:
        monkeypatch.setattr(solver_module, "solve", _stopped_early(solver_module.solve))
    word = "" if proven else " found"
    line = solver_module.explain_infeasible(problem, Budget(objective="cost", max_time_s=1.0))
    assert line.startswith("no plan finishes within 1 s: the fastest" + word + " feasible plan takes "), line
    line = solver_module.explain_infeasible(problem, Budget(objective="time", max_cost_usd=0.001))
    assert line.startswith("no plan costs at most $0.00: the cheapest" + word + " feasible plan costs "), line


@pytest.mark.parametrize("text, echoed", [("1d12h30m", "1d 12h 30m"), ("2d", "2d"), ("60", "1m 0s"),
                                          ("36h", "1d 12h"), ("90m", "1h 30m"), ("1d0h0m7s", "1d 7s"),
                                          ("5h 12m 30s", "5h 12m 30s")])
def test_a_budget_is_echoed_without_rounding(text, echoed):
    seconds = parse_duration_s(text)
    assert format_budget_duration(seconds) == echoed
    assert parse_duration_s(echoed) == seconds
    assert Budget(objective="cost", max_time_s=seconds).describe() == f"minimize cost, --max-time {echoed}"


def test_an_infinite_budget_is_refused_as_not_finite():
    with pytest.raises(SpecError, match=r"--max-time = 'inf': must be a finite, positive duration"):
        parse_duration_s("inf", option="--max-time")
    with pytest.raises(SpecError, match=r"--max-cost = 'inf': must be a finite, positive amount of USD"):
        parse_money_usd("inf", option="--max-cost")
