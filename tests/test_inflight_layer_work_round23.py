"""The in-flight bound's least sum of stage times with each middle stage's layer counted (optsearch/inflight.py
least_layer_work_pp_s, LAYER_WORK_BY_PP; issue 14, item 3, round 23, flight1t; docs/solver.md "Round 23: ... the
middle stages' layers on the slower types (flight1t, 2026-11-25)").

least_layer_work_s put the layers on the fastest types up to slots[g] x NMAX[g]; a plan of pp stages with only F
slots on its fastest types runs at least pp - F stages elsewhere, all but two of them (the ends) holding a layer.
Checked against brute force: every plan of every candidate of the space has its layers' work (sum n_i
step_min[g_i]) at or above the new floor, and its time at or above its candidate's in-flight bound minimizing time
with no budget and under cost budgets at 1.00, 1.02, 1.05 and 1.15 x the plan's own cost; the floor and the bound
are raised on some (counted: not vacuous); an over-tight variant (no end stage empty: pp - F layers elsewhere) lies
above a plan."""

from __future__ import annotations

import optsearch.inflight as inflight
from optsearch.solver import Bounded, Memo, _inflight_bounded
from optsearch.spec.budget import Budget

from test_audit_dist_bounds import random_instance, space_plans
from test_budget_time_lift import _coupled

SCALES = (1.0, 1.02, 1.05, 1.15)


def _terms(memo, cand):
    return memo.degree_terms(cand.tp, cand.dp, cand.micro_batch_size, cand.uses, cand.ep, cand.cp, cand.dist)


def _work_ratio(problem, options, floor) -> tuple[float, int]:
    """(the least layers' work / floor(d, L, pp) over every plan of the space, how many plans' floors lie above
    least_layer_work_s's)."""
    memo = Memo(problem, options)
    L = problem.model.num_layers
    least, raised = float("inf"), 0
    for cand, plan, _ in space_plans(problem, options):
        d = _terms(memo, cand)
        names = [u.node.name for u in d.uses]
        work = sum(s.num_layers * d.step_min_s[names.index(s.node_type)] for s in plan.stages)
        new = floor(d, L, cand.pp)
        raised += new > inflight.least_layer_work_s(d, L) * (1 + 1e-12)
        if new > 0:
            least = min(least, work / new)
    return least, raised


def _no_empty_ends(d, L: int, pp: int) -> float:
    """An over-tight variant: every stage off the first types holds a layer (the ends too), pp - F_k of them."""
    left, work, held = L, 0.0, 0
    for g in sorted(range(len(d.slots)), key=lambda g: d.step_min_s[g]):
        held += d.slots[g]
        take = max(0, min(left - max(0, pp - held), d.slots[g] * d.max_layers_per_stage[g]))
        work += take * d.step_min_s[g]
        left -= take
    return work if left <= 0 else float("inf")


def test_the_work_floor_lies_below_every_plan():
    """The coupled instance (a fast, dear type of one node beside a cheap one; 6 layers, up to 4 stages): the floor
    is raised on 350 of 709 plans when written; random instances (5: a mixture-of-experts stage) too."""
    least, raised = _work_ratio(*_coupled(layers=6, stages=4, fast=1), inflight.least_layer_work_pp_s)
    assert least >= 1 - 1e-9
    assert raised > 0  # not vacuous
    for seed in (0, 5):
        assert _work_ratio(*random_instance(seed), inflight.least_layer_work_pp_s)[0] >= 1 - 1e-9


def test_an_over_tight_work_floor_is_caught():
    """With no end stage allowed empty, a plan of the coupled instance lies below the floor (0.72 when written)."""
    assert _work_ratio(*_coupled(layers=6, stages=4, fast=1), _no_empty_ends)[0] < 1 - 1e-3


def test_the_work_floor_equals_the_old_one_where_no_stage_must_leave_the_fastest_type():
    problem, options = _coupled(layers=6, stages=4, fast=4)
    memo = Memo(problem, options)
    L = problem.model.num_layers
    seen = 0
    for cand, _, _ in space_plans(problem, options):
        d = _terms(memo, cand)
        fastest = min(range(len(d.slots)), key=lambda g: d.step_min_s[g])
        if cand.pp <= 2 + d.slots[fastest]:
            seen += 1
            assert inflight.least_layer_work_pp_s(d, L, cand.pp) == inflight.least_layer_work_s(d, L)
    assert seen > 0


def _bound(memo, cand, budget) -> float | None:
    return _inflight_bounded(memo, budget, Bounded(cand, 0.0, _terms(memo, cand)))


def test_the_inflight_bound_lies_below_every_plan(monkeypatch):
    """Minimizing time with no budget and under cost budgets at SCALES x each plan's own cost: no plan below its
    candidate's in-flight bound, none of them None; some bounds raised against the switch off (the coupled instance
    with 6 layers, up to 4 stages, one fast node)."""
    problem, options = _coupled(layers=6, stages=4, fast=1)
    on, off = Memo(problem, options), Memo(problem, options)
    least, raised, got = float("inf"), 0, {}
    for cand, plan, est in space_plans(problem, options):
        for budget in [Budget(objective="time")] + [Budget(objective="time", max_cost_usd=est.cost_usd * s)
                                                    for s in SCALES]:
            key = (cand.key, budget.max_cost_usd)
            if key not in got:
                got[key] = _bound(on, cand, budget)
                monkeypatch.setattr(inflight, "LAYER_WORK_BY_PP", False)
                plain = _bound(off, cand, budget)
                monkeypatch.setattr(inflight, "LAYER_WORK_BY_PP", True)
                raised += plain is not None and (got[key] is None or got[key] > plain * (1 + 1e-9))
            assert got[key] is not None  # the candidate holds this plan, which meets the budget
            if got[key] > 0:
                least = min(least, est.training_time_s / got[key])
    assert least >= 1 - 1e-9
    assert raised > 0
