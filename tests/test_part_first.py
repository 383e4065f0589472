"""First plans before the whole space's candidate list (issue 14, item 3, round 11): OR-Tools' cp_model is imported
at its first use (formulation/cpsat.py), a search that is not a budget search takes its first plan from the usual
seeds of the space's cp = 1, v = 1 part (solver._part_seeds), and a budget search's descent runs on that part first
(solver._part_then_whole_descent). Incumbents only: the answers stay those of the search without them (here) and
brute force's (test_budget_time_bound.py, test_context_parallel.py and test_audit_dist_bounds.py draw spaces with
such a part and solve them through this path)."""

from __future__ import annotations

import functools
import subprocess
import sys

import pytest

from optsearch import solver as solver_module
from optsearch.candidates import SpaceOptions, in_search_space
from optsearch.search import budget_violations, objective_value
from optsearch.solver import (
    DEFAULT, QUICK_SEEDS, Memo, _budget_descent, _candidates, _narrow_memo, _part_seeds, _part_then_whole_descent,
    solve,
)
from optsearch.spec.budget import Budget

from test_solver import _fasop_like


@functools.cache
def _space():
    """FASOP-like, interleaving allowed (so the space has a smaller cp = 1, v = 1 part), and its cheapest cost."""
    problem, options = _fasop_like(), SpaceOptions(max_stages=4, virtual_stages=(1, 2))
    cheapest = solve(problem, Budget(objective="cost"), options=options)
    return problem, options, cheapest


def test_cp_model_is_not_imported_with_the_solver_or_the_cli():
    """ortools' cp_model (and pandas, which it imports) come at the first CP-SAT use, not at start-up; the lazy
    zero-one parameters are the enum itself."""
    code = ("import sys, optsearch.solver, optsearch.cli.solve_cmd, optsearch.edits, optsearch.targets; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('ortools', 'pandas')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    from ortools.sat.python import cp_model

    from optsearch.formulation import cpsat

    assert dict(cpsat.ZERO_ONE_PARAMS) == {"search_branching": cp_model.FIXED_SEARCH}
    assert cpsat.cp_model is cp_model  # after its first use the name is the module itself


def test_the_first_plan_comes_from_the_parts_seeds_and_the_answer_is_unchanged(monkeypatch):
    problem, options, cheapest = _space()
    budget = Budget(objective="cost")
    got = []
    real = solver_module._part_seeds

    def recorded(*args):
        got.append(real(*args))
        return got[-1]

    monkeypatch.setattr(solver_module, "_part_seeds", recorded)
    result = solve(problem, budget, options=options)
    assert len(got) == 1 and got[0] is not None
    value, plan, est, _ = got[0]
    assert plan.cp == 1 and plan.virtual_stages == 1 and in_search_space(problem, plan, options)
    assert not budget_violations(plan, est, budget) and value == objective_value(est, "cost")
    # it is one of the whole list's own seeds (QUICK_SEEDS v = 1 candidates of each (cp, tp), in bound order)
    bounded, _ = _candidates(Memo(problem, options), budget, 0.0, DEFAULT)
    per_group: dict = {}
    seeds = set()
    for item in bounded:
        group = (item.cand.cp, item.cand.tp)
        if item.cand.v == 1 and per_group.get(group, 0) < QUICK_SEEDS:
            per_group[group] = per_group.get(group, 0) + 1
            seeds.add(item.cand.key)
    assert (plan.tp, plan.dp, plan.micro_batch_size, len(plan.stages), plan.ep, plan.cp, 1, 0) in seeds
    monkeypatch.setattr(solver_module, "PART_FIRST", False)
    plain = solve(problem, budget, options=options)
    assert result.status == plain.status == "optimal"
    assert result.objective_value == pytest.approx(plain.objective_value, rel=1e-9) == cheapest.objective_value


def test_the_parts_seeds_only_on_a_fresh_memo_and_where_there_is_a_part():
    problem, options, _ = _space()
    memo = Memo(problem, options)
    solve(problem, Budget(objective="time"), options=options, memo=memo, gap=0.5)
    assert _part_seeds(problem, Budget(objective="cost"), "cpsat", None, options, memo) is None  # tables known
    whole_only = SpaceOptions(max_stages=4)  # cp = 1, v = 1 only: no smaller part
    assert _part_seeds(problem, Budget(objective="cost"), "cpsat", None, whole_only, Memo(problem, whole_only)) is None


@pytest.mark.parametrize("solver", ["cbc", "cpsat"])
def test_the_part_descent_keeps_the_whole_descents_plan_and_the_answer(solver, monkeypatch):
    """Time under a cost budget 30 % above the cheapest plan: the part's descent gives a plan that meets B, the
    whole space's descent still runs and its plan is kept unless the part's is better; solve's answer is the same
    with and without the part first."""
    problem, options, cheapest = _space()
    budget = Budget(objective="time", max_cost_usd=cheapest.objective_value * 1.3)
    memo = Memo(problem, options)
    part = _narrow_memo(problem, options, memo)
    found, at = _part_then_whole_descent(memo, part, budget, None)
    whole = _budget_descent(Memo(problem, options), budget, None)
    alone = _budget_descent(_narrow_memo(problem, options, Memo(problem, options)), budget, None)
    assert found is not None and at is not None and alone is not None
    assert not budget_violations(found[1], found[2], budget)
    assert found == (alone if whole is None or alone[0] < whole[0] else whole)  # the whole one's on ties
    got = solve(problem, budget, solver=solver, options=options)
    monkeypatch.setattr(solver_module, "PART_FIRST", False)
    plain = solve(problem, budget, solver=solver, options=options)
    assert got.status == plain.status == "optimal"
    assert got.objective_value == pytest.approx(plain.objective_value, rel=1e-9)
