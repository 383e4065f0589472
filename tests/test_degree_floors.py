"""The budget rows' refining, round 14 (budgetrows): the floors of every pp of a degree at once
(bounds.degree_floors, degree_floors_meeting), the floor's least sum of stage times (bounds._least_sigma), the least
mark that holds the layers once per send value (bounds._least_marks_holding), and the aggregate bound's time under a cost
budget from one table per degree (bounds.under_cost_tables).

On small random instances (roomy and memory-tight, with and without --overlap-grad-reduce):
- every composition's floors lie at or below its own bound (iteration and cost; the rent is the same), which is
  what makes the floors' survivors hold every composition whose bound meets a budget (test_budget_floors checks the
  survivors against every plan of the space);
- the degree's floors give the same survivors as `_meeting_floors` one pp at a time, and M* equals the least of a
  sorted list of every mark (the definition) computed here independently;
- the under-cost tables give the aggregate bound's value bit for bit under cost budgets.
"""

from __future__ import annotations

import math
from dataclasses import replace
from unittest import mock

import numpy as np
from hypothesis import HealthCheck, given, settings
from draws import draws
from hypothesis import strategies as st

from optsearch import bounds
from optsearch.bounds import (
    _composition_bound, _compositions, _floor_values, _holds_parameters, _least_marks_holding, _meeting_floors,
    MAX_COMPOSITIONS, candidate_bound, degree_floors, degree_floors_meeting, degree_terms, refined_bound_at,
    refined_tables, slowest_floor, under_cost_tables,
)
from optsearch.candidates import max_stages
from optsearch.spec.budget import Budget

from test_solver import instances, usable_degrees
from test_solver_memory import tight_instances

CHECKED: list[int] = []
COMPARED: list[int] = []


def _least_mark_by_definition(d, pp: int, counts: tuple[int, ...], send_min: float, L: int) -> float:
    """The least of every mark e + n step_g (g present), sorted, at which the counts hold L layers."""
    e = send_min if pp > 1 else 0.0
    G = len(counts)
    marks = sorted({e + n * d.step_min_s[g] for g in range(G) if counts[g]
                    for n in range(1, d.max_layers_per_stage[g] + 1)})
    for M in marks:
        held = sum(counts[h] * max(0, min(d.max_layers_per_stage[h], math.floor((M - e) / d.step_min_s[h] + 1e-9)))
                   for h in range(G) if counts[h])
        if held >= L:
            return M
    return math.inf


def _budgets(problem, its: list[float], costs: list[float]) -> list[Budget]:
    n = problem.iterations
    its, costs = sorted(its), sorted(costs)
    out = []
    for k in (0, len(its) // 3, len(its) // 2):
        out.append(Budget(objective="time", max_cost_usd=costs[k] * n * 1.02))
        out.append(Budget(objective="cost", max_time_s=its[k] * n * 1.02))
    return out


def _check_degree(problem, d, most: int) -> int:
    L = problem.model.num_layers
    floors = degree_floors(problem, d, most)
    checked = 0
    its, costs = [], []
    for pp in range(1, most + 1):
        comps = _compositions(d, pp, MAX_COMPOSITIONS)
        assert (comps is not None) == bool(floors.listed[pp - 1])
        if comps is None or not _holds_parameters(problem, d, pp):
            continue
        all_params = d.all_params(pp)
        counts = np.array(comps, dtype=np.int64).reshape(len(comps), len(d.slots))
        it, rate, cost = _floor_values(problem, d, pp, counts, all_params)
        low = float(slowest_floor(d, L, np.array([pp]))[0])
        present = counts > 0
        send = bounds._present_terms(d, pp, present, all_params)[2]
        marks = _least_marks_holding(d, pp, counts, present, send, L)
        for i, c in enumerate(comps):
            assert marks[i] == _least_mark_by_definition(d, pp, c, float(send[i]), L), (pp, c)
            got = _composition_bound(problem, d, pp, c, all_params, low)
            if got is None:
                continue
            # the floors lie at or below the composition's bound (exact floats: <=, no tolerance)
            assert it[i] <= got[0] and rate[i] == got[1] and cost[i] <= got[2], (pp, c, it[i], got)
            its.append(got[0])
            costs.append(got[2])
            checked += 1
    if not its:
        return 0
    for budget in _budgets(problem, its, costs):
        for pp in range(1, most + 1):
            if not floors.listed[pp - 1] or not _holds_parameters(problem, d, pp):
                continue
            comps = _compositions(d, pp, MAX_COMPOSITIONS)
            assert degree_floors_meeting(problem, floors, pp, budget) == _meeting_floors(
                problem, d, pp, comps, d.all_params(pp), budget)
    return checked


@settings(max_examples=draws(8), derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.one_of(instances(), tight_instances()), st.booleans())
def test_the_floors_lie_below_each_composition_bound_and_every_pp_at_once_gives_the_same_survivors(case, overlap):
    problem, options, *_ = case
    problem = replace(problem, overlap_grad_reduce=overlap)
    most = max_stages(problem, options)
    for tp, mbs, dp, uses in usable_degrees(problem, options):
        CHECKED.append(_check_degree(problem, degree_terms(problem, tp, dp, mbs, uses), most))


def test_the_random_instances_checked_many_compositions():
    """The property test above checked something (its instances may have no feasible composition)."""
    if not CHECKED:  # run alone or in another worker: run it here
        test_the_floors_lie_below_each_composition_bound_and_every_pp_at_once_gives_the_same_survivors()
    assert sum(CHECKED) >= 60 and sum(n > 0 for n in CHECKED) >= 8


@settings(max_examples=draws(10), derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.one_of(instances(), tight_instances()))
def test_the_under_cost_tables_equal_the_scalar_walk_bit_for_bit(case):
    """Every pp aggregate (MAX_COMPOSITIONS 0), time under cost budgets that split the candidates (with and without
    a deadline): refined_bound_at with the degree's under-cost tables equals it without them and the scalar bound."""
    problem, options, *_ = case
    most = max_stages(problem, options) + 2
    with mock.patch.object(bounds, "MAX_COMPOSITIONS", 0):
        for tp, mbs, dp, uses in usable_degrees(problem, options):
            d = degree_terms(problem, tp, dp, mbs, uses)
            tab = refined_tables(problem, d, most)
            under = under_cost_tables(problem, d, tab)
            compared = 0
            free = [candidate_bound(problem, d, pp, None, refined=True) for pp in range(2, most + 1)]
            costs = sorted(b.cost_per_iteration_usd for b in free if b.feasible)
            its = sorted(b.iteration_s for b in free if b.feasible)
            if not costs:
                continue
            n = problem.iterations
            for budget in (Budget(objective="time", max_cost_usd=costs[0] * n * 1.1),
                           Budget(objective="time", max_cost_usd=costs[len(costs) // 2] * n),
                           Budget(objective="time", max_cost_usd=costs[-1] * n, max_time_s=its[len(its) // 2] * n)):
                for pp in range(2, most + 1):
                    if tab.listed[pp - 1]:  # no composition at all (a count of 0 is "listed")
                        continue
                    want = candidate_bound(problem, d, pp, budget, refined=True)
                    compared += want.feasible
                    assert refined_bound_at(problem, d, tab, pp, budget, under) == want, (pp, budget)
            COMPARED.append(compared)


def test_the_under_cost_tables_were_compared_on_feasible_bounds():
    if not COMPARED:
        test_the_under_cost_tables_equal_the_scalar_walk_bit_for_bit()
    assert sum(COMPARED) >= 50
