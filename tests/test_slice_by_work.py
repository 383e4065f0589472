"""A model slice as CP-SAT's work (issue 14, item 3, round 23, park76; solver.SLICE_BY_WORK): while other candidates
are open, a CP-SAT model solve gets MODEL_SLICE_S x MODEL_SLICE_GROWTH ** tries x SLICE_WORK_PER_S of deterministic
time and the rest of the time limit as its wall limit (before: the slice as its wall limit, which load cut short).
Only when a slice ends may change, never an answer: solved to the end, with slices short enough that candidates are
parked and solved again, the solver must give brute force's status and value with the switch on and off."""

from __future__ import annotations

from unittest import mock

import pytest

import optsearch.solver as S
from optsearch.search import objective_value
from optsearch.spec.budget import Budget

from priced import solve_exhaustive
from test_audit_dist_bounds import random_instance

SLICE = 2e-4  # seconds: most models need more, so they are parked and solved again with 4x, 16x ... the slice


def _run(problem, options, budget, on: bool):
    """solve with SLICE_BY_WORK = on and a short slice: (status, value, the (deterministic, wall) limits of the
    CP-SAT model solves that carried a deterministic limit of a slice's size)."""
    calls = []
    real = S._solve_model

    def spy(problem, engine, f, time_limit_s, hint_values):
        work = getattr(engine, "params", {}).get("max_deterministic_time")
        if work is not None and work < 1e-2:  # a slice (a probe's is MODEL_PROBE_S)
            calls.append((work, time_limit_s))
        return real(problem, engine, f, time_limit_s, hint_values)

    with mock.patch.object(S, "SLICE_BY_WORK", on), mock.patch.object(S, "MODEL_SLICE_S", SLICE), \
            mock.patch.object(S, "_solve_model", spy), mock.patch.object(S, "quick_plans", lambda sk: []), \
            mock.patch.object(S, "plan_of", lambda sk, seq: None):
        res = S.solve(problem, budget, time_limit_s=120.0, options=options)
    value = None if res.plan is None else objective_value(res.estimate, budget.objective)
    return res.status, value, calls


@pytest.mark.parametrize("seed", [6, 9])
def test_slices_by_work_give_brute_force_answers(seed):
    """Time and cost without a budget and time under a cost budget (the cheapest plan's cost x 1.05) on two random
    instances: the same status and value as brute force, the switch on and off; on, the slices carry a
    deterministic limit of SLICE x growth^tries x SLICE_WORK_PER_S and a wall limit of the time left (not the
    slice); off, none does."""
    problem, options = random_instance(seed)
    cheapest = solve_exhaustive(problem, Budget(objective="cost"), options=options)
    budgets = [Budget(objective="time"), Budget(objective="cost")]
    if cheapest.plan is not None:
        budgets.append(Budget(objective="time", max_cost_usd=cheapest.estimate.cost_usd * 1.05))
    sliced = 0
    for budget in budgets:
        want = solve_exhaustive(problem, budget, options=options)
        want_value = None if want.plan is None else objective_value(want.estimate, budget.objective)
        for on in (True, False):
            status, value, calls = _run(problem, options, budget, on)
            assert (status == "optimal") == (want.plan is not None), (seed, budget, on, status)
            if want_value is not None:
                assert value == pytest.approx(want_value, rel=1e-6), (seed, budget, on)
            if not on:
                assert not calls
                continue
            sliced += len(calls)
            for work, wall in calls:
                tries = round(__import__("math").log(work / (SLICE * S.SLICE_WORK_PER_S), S.MODEL_SLICE_GROWTH))
                assert work == pytest.approx(SLICE * S.MODEL_SLICE_GROWTH ** tries * S.SLICE_WORK_PER_S)
                assert wall is not None and wall > 100 * SLICE  # the time left, not the slice
    assert sliced  # the slices were exercised
