"""The positional bound's floor on every stage's exposed gradient reduce under --overlap-grad-reduce
(formulation/positional.py hidden_reduce_rows, used by _Tables.comm_at; issue 14, round 10b, timeb2; docs/solver.md
"Round 10b: every stage's reduce by levels in the positional bound").

A_s >= rest_s + max(0, X_s - max(1, s) rho T) with T the plan's slowest stage, and where m - 1 >= (pp - 1) rho the
bound may take T at the plan's mark: C_A(M) becomes the larger of its own value and the largest level at which the
layouts within M, with every such floor under it, do not hold the layers. Checked against brute force: every plan
of every v = 1 pattern-mode candidate (both optimizer settings; with --overlap-param-gather searched and
--ddp-average-in-collective on; memory-tight instances with every mode, block recomputation and cp in {1, 2}) lies
above its positional bound, with no budget and under its own deadline, cost budget and rent, for both objectives.
The floor raises some of those bounds (counted), and a floor without the hiding (rho = 0) lies above some plan."""

from __future__ import annotations


import numpy as np
from hypothesis import HealthCheck, given, settings
from draws import draws

import optsearch.formulation.positional as positional
from optsearch.baselines.exhaustive import count_plans
from optsearch.search import budget_violations, objective_value
from optsearch.solver import Memo
from optsearch.spec.budget import Budget

from test_audit_dist_bounds import MAX_PLANS, off_heavy_instance, random_instance, pattern_plans
from test_inflight_bound import _budgets
from test_param_gather_search import _gather
from test_solver_memory import overlapped_tight_case, tight_instances

_ROWS = positional.hidden_reduce_rows  # the function under test, before any monkeypatch


def _least_ratio(problem, options, monkeypatch=None) -> tuple[float, int]:
    """(the least plan value / positional bound over every plan of every v = 1 pattern-mode candidate and every budget
    of _budgets, how many (candidate, budget) bounds the floor raised above the bound without it)."""
    memo, plain_memo = Memo(problem, options), Memo(problem, options)
    least, raised = float("inf"), 0
    bounds: dict = {}
    for cand, plan, est, sk in pattern_plans(problem, options, memo):
        for budget in _budgets(est):
            assert not budget_violations(plan, est, budget)
            key = (cand.key, budget.objective, budget.max_time_s, budget.max_cost_usd, budget.max_usd_per_hour)
            if key not in bounds:
                bounds[key] = positional.positional_bound(sk, budget).bound
                if monkeypatch is None and not raised:  # the same bound without the floor (its own skeleton and
                    # tables), until one is raised (the test asks for one)
                    real = positional.hidden_reduce_rows
                    positional.hidden_reduce_rows = lambda f, blocks: None
                    try:
                        plain = positional.positional_bound(plain_memo.skeleton(cand), budget).bound
                    finally:
                        positional.hidden_reduce_rows = real
                    raised += bounds[key] > plain * (1 + 1e-9)
            got = bounds[key]
            least = min(least, objective_value(est, budget.objective) / got if got > 0 else float("inf"))
    return least, raised


def _cases():
    for seed in (3, 37):  # small instances where the floor raises bounds (and 10, 24: none)
        problem, options = random_instance(seed)
        if count_plans(problem, Budget(), options, limit=MAX_PLANS) <= MAX_PLANS:
            yield problem, options
    for seed in (2, 28):
        problem, options = off_heavy_instance(seed)
        if count_plans(problem, Budget(), options, limit=MAX_PLANS) <= MAX_PLANS:
            yield problem, options
    for seed in (10, 28):  # --overlap-param-gather searched (pp = 1), --ddp-average-in-collective on
        problem, options = off_heavy_instance(seed)
        problem = _gather(problem)
        if count_plans(problem, Budget(), options, limit=MAX_PLANS) <= MAX_PLANS:
            yield problem, options


def test_the_floor_lies_below_every_plan_on_overlap_instances():
    total = 0
    for problem, options in _cases():
        least, raised = _least_ratio(problem, options)
        assert least >= 1 - 1e-9, (problem.model, problem.cluster)
        total += raised
    assert total > 0  # the floor raised some bounds: the check above is not vacuous


@settings(max_examples=draws(4), derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(tight_instances())
def test_the_floor_lies_below_every_plan_on_memory_tight_instances(case):
    made = overlapped_tight_case(case, max_plans=MAX_PLANS)
    if made is None:
        return
    problem, options = made
    assert _least_ratio(problem, options)[0] >= 1 - 1e-9


def _no_hiding(f, blocks):
    """An invalid floor: every stage's whole reduce, as if nothing hid it (rho = 0)."""
    got = _ROWS(f, blocks)
    return None if got is None else (got[0], np.zeros_like(got[1]))


def test_an_invalid_floor_fails(monkeypatch):
    problem, options = off_heavy_instance(28)  # one of _cases' instances, where the valid floor holds (above)
    monkeypatch.setattr(positional, "hidden_reduce_rows", _no_hiding)
    assert _least_ratio(problem, options, monkeypatch)[0] < 1 - 1e-9
