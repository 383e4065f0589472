"""The budget rows' first plans and incumbents (issue 14, item 3, round 15: budgetplans).
- A plan exactly on a deadline is a point of CP-SAT's model: the big-M U under a deadline leaves room for the budget
  rows' allowance (formulation.model.DEADLINE_UPPER_MARGIN). Megatron 18B on fasop-a100-a10, cost under D = the
  fastest plan's own time: CP-SAT called the one candidate holding plans "infeasible", and the first plan waited for
  CBC's re-check.
- A budget descent whose climb stops a hair short of its cap solves its end candidate's model under the cap
  (solver._finish_descent, DESCENT_FINISH): the same 18B instance, time under B = that candidate's least cost.
- Once the descent gave a plan, the seed search searches the whole space only (SEED_PART_AFTER_DESCENT).
Which step gives the plan is checked, never how long it takes."""

from __future__ import annotations

import pytest

from optsearch import solver as solver_module
from optsearch.candidates import in_search_space
from optsearch.cli.options import space_from_target
from optsearch.costmodel import estimate
from optsearch.edits import edited_problem
from optsearch.formulation.cpsat import CpSat, ticks_per_s
from optsearch.formulation.model import build
from optsearch.search import budget_violations, objective_value
from optsearch.solver import (DEFAULT, INCUMBENT_REL, Memo, _budget_allowance, _candidates, _narrow_memo,
                              _part_then_whole_descent, _solve_model, solve)
from optsearch.spec.budget import Budget
from optsearch.targets import engine_problem

# Megatron 18B on FASOP's cluster: the cost and the time rows' optimum is one plan, tp 2, dp 1, b 1, 16 stages, of
# this candidate; the descent's climb on cost stops here with the quick plan's layer split, a hair above it. D and B
# are the grid's (/work/grid/round15_start.json, as in every record since round 13): that plan's own time and cost.
KEY_18B = (2, 1, 1, 16, 1, 1, 1, 0)
D_18B = 20321794.004538167
B_18B = 506806.3496677331


def _megatron_18b():
    problem = engine_problem("megatron", edited_problem("megatron-18b", "fasop-a100-a10", []))
    return problem, space_from_target("megatron", problem)


def test_cpsat_finds_a_plan_exactly_on_the_deadline():
    """Cost under D = the fastest plan's own time: CP-SAT's model of the candidate that holds it finds it (a point of
    the integer model with the bud_time row's allowance, and U above that). On the base U was the deadline itself,
    CP-SAT's rounded T of the plan lay above it, and the model came back "infeasible" (CBC's re-check found it)."""
    problem, options = _megatron_18b()
    memo = Memo(problem, options)
    budget = Budget(objective="cost", max_time_s=D_18B)
    bounded, _ = _candidates(memo, budget, 0.0, DEFAULT)
    item = next(x for x in bounded if x.cand.key == KEY_18B)
    f = build(problem, budget, item.cand, options, None, INCUMBENT_REL, skel=memo.skeleton(item.cand))
    rhs = next(con.rhs for con in f.lm.constraints if con.name == "bud_time")
    allowance = _budget_allowance(problem, f)["bud_time"]
    assert allowance * ticks_per_s(f.lm) > 1.0  # premise: the allowance is more than a tick at this instance
    assert f.time_upper_s >= rhs + allowance  # U leaves the allowance room
    sol, found, _ = _solve_model(problem, CpSat(), f, None, None)
    assert sol.status == "optimal" and found is not None
    plan, est = found
    assert not budget_violations(plan, est, budget) and in_search_space(problem, plan, options)
    assert est.cost_usd == estimate(problem, plan).cost_usd


def test_a_descent_a_hair_short_of_b_solves_its_end_candidates_model(monkeypatch):
    """Time under B = the optimum's own cost: the descent's climbs on cost stop at the optimum's candidate, its quick
    plan a hair above B (the premise: with DESCENT_FINISH off, no plan and no model); with it on, the descent's plan
    is that candidate's model's, in the space, under B, priced at its value, and the model was solved once for the
    three descents (part, lazy, whole) that stop there. On the base _part_then_whole_descent takes no `finish`."""
    problem, options = _megatron_18b()
    budget = Budget(objective="time", max_cost_usd=B_18B)
    solved: list[tuple[int, ...]] = []
    inner = solver_module._solve_model

    def logged(problem, engine, f, time_limit_s, hint_values):
        solved.append(f.cand.key)
        return inner(problem, engine, f, time_limit_s, hint_values)

    monkeypatch.setattr(solver_module, "_solve_model", logged)
    memo = Memo(problem, options)  # shared by both runs: budget-free terms, lists and quick plans only
    part = _narrow_memo(problem, options, memo)
    monkeypatch.setattr(solver_module, "DESCENT_FINISH", False)
    got, _ = _part_then_whole_descent(memo, part, budget, None, finish=solver_module._Finish("cpsat", options))
    assert got is None and solved == []  # the premise: the climbs stop short of B
    monkeypatch.setattr(solver_module, "DESCENT_FINISH", True)
    got, at = _part_then_whole_descent(memo, part, budget, None, finish=solver_module._Finish("cpsat", options))
    assert got is not None and at is not None and solved == [KEY_18B]
    value, plan, est = got
    assert not budget_violations(plan, est, budget) and in_search_space(problem, plan, options)
    assert value == objective_value(estimate(problem, plan), "time")


class _Stop(Exception):
    pass


def test_the_seed_search_skips_its_part_once_the_descent_gave_a_plan(monkeypatch):
    """GPT-2 large on FASOP's cluster, time under 1.01 x the cheapest cost (test_first_plans_before_lists: the
    descent's plan comes from the lazy climb): the seed search that follows is asked for the whole space only. With
    SEED_PART_AFTER_DESCENT on (the base's behaviour) it searches the part first. On the base _seed_search has no
    `whole_only`."""
    from test_first_plans_before_lists import CHEAPEST_USD

    problem = engine_problem("megatron", edited_problem("gpt2-large", "fasop-a100-a10", []))
    options = space_from_target("megatron", problem)
    budget = Budget(objective="time", max_cost_usd=1.01 * CHEAPEST_USD)
    asked: list[dict] = []
    inner = solver_module._seed_search

    def seed_search(*args, **kwargs):
        if kwargs.get("seeds_only"):  # the early seeds, before the descent
            return inner(*args, **kwargs)
        asked.append(kwargs)
        raise _Stop

    monkeypatch.setattr(solver_module, "_seed_search", seed_search)
    found: list = []
    descent = solver_module._part_then_whole_descent

    def logged(*args, **kwargs):
        found.append(descent(*args, **kwargs)[0])
        return found[-1], solver_module.time.perf_counter()

    monkeypatch.setattr(solver_module, "_part_then_whole_descent", logged)
    for part_too in (False, True):
        monkeypatch.setattr(solver_module, "SEED_PART_AFTER_DESCENT", part_too)
        with pytest.raises(_Stop):
            solve(problem, budget, options=options)
        assert found[-1] is not None  # the premise: the descent gave a plan
        assert asked[-1]["whole_only"] is not part_too
