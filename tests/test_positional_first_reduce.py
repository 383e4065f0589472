"""The positional bound's floor on stage 0's exposed gradient reduce under --overlap-grad-reduce
(formulation/positional.py first_stage_reduce_s, used in positional_bound's refine; issue 14, round 10, timeb;
docs/solver.md "Round 10: stage 0's reduce in the positional bound").

Stage 0's reduce hides only behind its own last backward, so max_s A_s >= A_0 >= h_0(g_0, n_0), and with max O >= C_O
the bound's A + O >= comm + max(0, h_0 - (comm - C_O)); the excess rides on stage 0's block in the sum and combined
programmes. Checked against brute force: every plan of every v = 1 candidate in pattern mode, on random instances
built for the overlap (the audit's: the optimizer open, so both settings are candidates; off-heavy ones) and on
memory-tight ones (every mode, uniform + block recomputation, cp in {1, 2}, the optimizer open), lies above the
candidate's positional bound under no budget and under its own deadline, cost budget and rent, for both objectives.
The floor raises some bounds there (counted), and a floor that ignores the hiding (rest + X_0, as if W_0 = 0) lies
above some plan (the test can fail). The same checks cover the floor on the tied embedding's all-reduce E
(embedding_floor_s, the least over the end types, which the bound left out before round 10): three times it lies
above some plan."""

from __future__ import annotations


import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from draws import draws

import optsearch.formulation.positional as positional
from optsearch.baselines.exhaustive import count_plans
from optsearch.search import budget_violations, objective_value
from optsearch.solver import Memo
from optsearch.spec.budget import Budget

from test_audit_dist_bounds import MAX_PLANS, off_heavy_instance, random_instance, pattern_plans
from test_inflight_bound import _budgets
from test_solver_memory import overlapped_tight_case, tight_instances

_FIRST = positional.first_stage_reduce_s  # the function under test, before any monkeypatch


def _least_ratio(problem, options) -> tuple[float, int]:
    """(the least plan value / positional bound over every plan of every v = 1 pattern-mode candidate and every budget
    of _budgets, how many (plan, budget) pairs the stage-0 floor raised above the bound without it). At least 1 (less
    1e-9) when the bound is valid."""
    memo = Memo(problem, options)
    least, raised = float("inf"), 0
    bounds: dict = {}
    for cand, plan, est, sk in pattern_plans(problem, options, memo):
        for budget in _budgets(est):
            assert not budget_violations(plan, est, budget)
            key = (cand.key, budget.objective, budget.max_time_s, budget.max_cost_usd, budget.max_usd_per_hour)
            if key not in bounds:
                bounds[key] = positional.positional_bound(sk, budget).bound
                if positional.tables(sk).first is not None and not raised:  # the test asks for one raise
                    first = positional.tables(sk).first
                    positional.tables(sk).first = None  # the same bound without the floor
                    try:
                        plain = positional.positional_bound(sk, budget).bound
                    finally:
                        positional.tables(sk).first = first
                    raised += bounds[key] > plain * (1 + 1e-9)
            got = bounds[key]
            value = objective_value(est, budget.objective)
            least = min(least, value / got if got > 0 else float("inf"))
    return least, raised


def _cases():
    for seed in (3, 10, 24, 37):  # small ones (9-86 plans), each with bounds the floor raises
        problem, options = random_instance(seed)
        if count_plans(problem, Budget(), options, limit=MAX_PLANS) <= MAX_PLANS:
            yield problem, options
    for seed in (2, 10, 19, 28):
        problem, options = off_heavy_instance(seed)
        if count_plans(problem, Budget(), options, limit=MAX_PLANS) <= MAX_PLANS:
            yield problem, options


def test_the_floor_lies_below_every_plan_on_overlap_instances():
    total = 0
    for problem, options in _cases():
        least, raised = _least_ratio(problem, options)
        assert least >= 1 - 1e-9, (problem.model, problem.cluster)
        total += raised
    assert total > 0  # the floor raised some bounds: the check above is not vacuous


@settings(max_examples=draws(5), derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(tight_instances())
def test_the_floor_lies_below_every_plan_on_memory_tight_instances(case):
    made = overlapped_tight_case(case, max_plans=MAX_PLANS)
    if made is None:
        return
    problem, options = made
    assert _least_ratio(problem, options)[0] >= 1 - 1e-9


def _no_hiding(f):
    """An invalid floor: stage 0's reduce as if nothing hid it (W_0 = 0)."""
    out = _FIRST(f)
    if out is None:
        return None
    c = f.c
    n = np.arange(out.shape[1], dtype=float)
    params = n * c.layer_params[0] + c.fixed_params[0]
    return np.array([c.allreduce_floor_s_per_param[g] * params + c.allreduce_s_per_param[g] * params
                     * c.grad_overlap_share for g in range(out.shape[0])])


_EMB = positional.embedding_floor_s


def _tripled_embedding(f):
    """An invalid floor on E: three times the least tied-embedding all-reduce over the end types."""
    return 3 * _EMB(f)


@pytest.mark.parametrize("name, mutant, instance, seed", [
    ("first_stage_reduce_s", _no_hiding, random_instance, 24),
    ("embedding_floor_s", _tripled_embedding, off_heavy_instance, 28)])
def test_an_invalid_floor_fails(monkeypatch, name, mutant, instance, seed):
    problem, options = instance(seed)  # one of _cases' instances, where the valid floor holds (above)
    monkeypatch.setattr(positional, name, mutant)
    assert _least_ratio(problem, options)[0] < 1 - 1e-9
