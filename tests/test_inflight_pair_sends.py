"""Time under a cost budget: the in-flight bound's buckets priced with each boundary's own send (optsearch/inflight.py
_pair_send_rent, _pair_fitting, BUDGET_PAIR_SENDS; issue 14, item 3, round 22, rentflight; docs/solver.md "Round 22:
time under a cost budget, each boundary's own send in the in-flight bound (rentflight, 2026-11-25)").

The in-flight caps charge every send of a stage of g at e_g, its least over every receiver; a stage of g beside one of
another type h sends to it across nodes at send_inter_s[g][h]. A bucket (interval j, all-reduce level q) of
_time_under_cost is kept only where the least rent of the type sequences whose stages, charged those sends, hold L
layers within M_{j+1} fits the budget. Checked against brute force: every plan of every candidate (v = 1 and
interleaved, the optimizer settings the space allows, experts, cp, memory-tight draws under the overlap) lies at or
above its candidate's in-flight bound minimizing time under a cost budget at 1.00, 1.02, 1.05 and 1.15 x the plan's
own cost; the new rent closes or raises some bounds (counted: not vacuous); and an over-tight variant (the caps at
M_j itself, strictly below: the plans whose slowest stage is at a mark left out) lies above a plan."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import HealthCheck, given, settings
from draws import draws

import optsearch.inflight as inflight
from optsearch.solver import Bounded, Memo, _inflight_bounded
from optsearch.spec.budget import Budget

from test_audit_dist_bounds import random_instance, space_plans
from test_budget_time_lift import _coupled
from test_solver_memory import overlapped_tight_case, tight_instances

SCALES = (1.0, 1.02, 1.05, 1.15)  # budgets at each plan's own cost and above it: drawn tight


def _bound(memo, cand, budget) -> float | None:
    terms = memo.degree_terms(cand.tp, cand.dp, cand.micro_batch_size, cand.uses, cand.ep, cand.cp, cand.dist)
    return _inflight_bounded(memo, budget, Bounded(cand, 0.0, terms))


def _check(problem, options, monkeypatch=None) -> tuple[float, int]:
    """(the least plan time / in-flight bound over every plan of the space under budgets at SCALES x its own cost,
    how many (candidate, budget) bounds the pair rent closed or raised). At least 1 (less 1e-9) when the bound is
    valid; 0 where the bound proves a candidate empty under a budget one of its plans meets."""
    on, off = Memo(problem, options), Memo(problem, options)
    least, raised, got = float("inf"), 0, {}
    for cand, plan, est in space_plans(problem, options):
        for scale in SCALES:
            budget = Budget(objective="time", max_cost_usd=est.cost_usd * scale)
            key = (cand.key, budget.max_cost_usd)
            if key not in got:
                got[key] = _bound(on, cand, budget)
                if monkeypatch is not None:
                    monkeypatch.setattr(inflight, "BUDGET_PAIR_SENDS", False)
                    plain = _bound(off, cand, budget)
                    monkeypatch.setattr(inflight, "BUDGET_PAIR_SENDS", True)
                    raised += plain is not None and (got[key] is None or got[key] > plain * (1 + 1e-9))
            if got[key] is None:
                return 0.0, raised
            if got[key] > 0:
                least = min(least, est.training_time_s / got[key])
    return least, raised


def test_the_pair_send_rent_lies_below_every_plan_that_meets_the_budget(monkeypatch):
    """A fast, dear type beside a cheap one on a slow network (10 Gbit/s): three stages, so a middle stage sends both
    ways across the boundary."""
    for layers, stages in ((4, 2), (4, 3)):
        least, raised = _check(*_coupled(layers=layers, stages=stages), monkeypatch)
        assert least >= 1 - 1e-9
        assert raised > 0  # the pair rent closes or raises some bounds (33, 67 when written): not vacuous


def test_the_pair_send_rent_lies_below_every_interleaved_plan(monkeypatch):
    """The coupled instance with 8 layers and v in {1, 2}: the interleaved tables (v sends each way) too."""
    problem, options = _coupled(layers=8, stages=2)
    least, raised = _check(problem, replace(options, virtual_stages=(1, 2)), monkeypatch)
    assert least >= 1 - 1e-9
    assert raised > 0  # some bounds raised (27 of the v = 2 candidates' alone when written)


def test_the_pair_send_rent_lies_below_every_plan_on_random_instances(monkeypatch):
    for seed in (5, 9):  # 5: a mixture-of-experts stage; 9: several types on slow links (94 raised when written)
        least, raised = _check(*random_instance(seed), monkeypatch)
        assert least >= 1 - 1e-9
    assert raised > 0


@settings(max_examples=draws(3), derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(tight_instances())
def test_the_pair_send_rent_lies_below_every_plan_on_memory_tight_instances(case):
    made = overlapped_tight_case(case)
    if made is None:
        return
    assert _check(*made)[0] >= 1 - 1e-9


def test_an_over_tight_pair_rent_fails(monkeypatch):
    """The caps at M_j, strictly below it (a plan whose slowest stage sits at the mark M_j holds more), over-tighten:
    a bound lies above a plan that meets its budget, or proves its candidate empty."""
    real = inflight._pair_send_rent

    def tight(tab, js, qs, lim):
        marks = tab.marks
        tab.marks = np.concatenate([[marks[0]], marks[:-1]])  # M_j read where M_{j+1} was: every mark one down
        try:
            return real(tab, js, qs, lim)
        finally:
            tab.marks = marks

    monkeypatch.setattr(inflight, "_pair_send_rent", tight)
    assert _check(*_coupled())[0] < 1 - 1e-9
