"""First plans of budget searches before the work that used to come first (issue 14, item 3, round 14: firstplans).
- A budget search's descent that stops short of B in the space's cp = 1, v = 1 part goes on over the whole space's
  neighbours, built a degree at a time as the climb asks (solver._LazyNeighbours, LAZY_NEIGHBOURS), before the whole
  space's candidate list is built (GPT-3 175B, Megatron 1T and 310B, Llama-2 70B, time under B: that list took 0.5-1.5
  s of CPU before the plan under B, which has cp > 1). The lazy neighbours are the list's own candidates, bound for
  bound.
- A first-plan-only search (a budget search's seed search) re-checks a backend's "infeasible" claim with the other
  backend once nothing else is left (SEED_RECHECK_LAST): on Megatron 18B, fasop-a100-a10, time under B, CBC's
  re-check of one CP-SAT claim took the seed search's limit twice, where the next candidate's model gives the plan.
Order is counted (which list was built, which backend re-checked what, before the first plan), never timed."""

from __future__ import annotations

import pytest

from optsearch import solver as solver_module
from optsearch.candidates import SpaceOptions, in_search_space
from optsearch.cli.options import space_from_target
from optsearch.costmodel import estimate
from optsearch.edits import edited_problem
from optsearch.formulation.linear import Solution
from optsearch.search import budget_violations, objective_value
from optsearch.solver import (DEFAULT, Memo, _candidates, _LazyNeighbours, _narrow_memo, _part_then_whole_descent,
                              _seed_search, solve)
from optsearch.spec.budget import Budget
from optsearch.targets import engine_problem

from test_solver import _fasop_like

# GPT-2 large on FASOP's cluster, the megatron target's space (cp 1-8, v 1-4): the cheapest plan ($10,681.56, the cost
# row's optimum on this cost model) has cp = 2. At 1 % above it, neither the early seeds nor the cp = 1 part's climb
# reach a plan under B: the premise, checked below.
CHEAPEST_USD = 10681.559342891647


def _gpt2_large():
    problem = engine_problem("megatron", edited_problem("gpt2-large", "fasop-a100-a10", []))
    return problem, space_from_target("megatron", problem)


def _first_plan_and_lists(monkeypatch, problem, options, budget):
    """The early seeds, then _part_then_whole_descent, as solve runs them before its seed search, without a limit:
    (whether the early seeds hold a plan under budget, the descent's plan, the candidate lists built before that
    plan was known, as the cp sizes of their memos' options)."""
    events: list[tuple[float, tuple[int, ...]]] = []
    build = solver_module._build_candidates

    def logged(memo, *args, **kwargs):
        events.append((solver_module.time.perf_counter(), memo.options.context_parallel_sizes))
        return build(memo, *args, **kwargs)

    monkeypatch.setattr(solver_module, "_build_candidates", logged)
    memo = Memo(problem, options)
    part = _narrow_memo(problem, options, memo)
    seed_budget = budget.model_copy(update={"objective": "cost"})
    early = _seed_search(problem, seed_budget, "cpsat", None, options, memo, seeds_only=True, part=part)[0][0]
    early_meets = early.plan is not None and not budget_violations(early.plan, early.estimate, budget)
    got, at = _part_then_whole_descent(memo, part, budget, None)
    before = [cps for when, cps in events if at is None or when < at]
    return early_meets, got, before


def test_a_descent_short_of_b_in_the_part_meets_b_before_the_whole_list(monkeypatch):
    """Time under B = 1.01 x the cheapest cost: the descent's plan is known before any list of the whole space (cp
    1-8) is built, only the part's (cp = 1) before it. It is a plan of the space, under B, priced by the cost model at
    its value. With LAZY_NEIGHBOURS off (the base's path) the same instance reaches B only after the whole list: the
    premise. On the base the first assertion on `before` fails."""
    problem, options = _gpt2_large()
    budget = Budget(objective="time", max_cost_usd=1.01 * CHEAPEST_USD)
    early_meets, got, before = _first_plan_and_lists(monkeypatch, problem, options, budget)
    assert not early_meets  # premise: the early seeds give no plan under B
    assert got is not None
    assert before and all(cps == (1,) for cps in before), before  # the part's list only
    value, plan, est = got
    assert in_search_space(problem, plan, options) and plan.cp > 1
    assert not budget_violations(plan, est, budget)
    assert value == objective_value(estimate(problem, plan), "time")
    monkeypatch.setattr(solver_module, "LAZY_NEIGHBOURS", False)
    _, got_off, before_off = _first_plan_and_lists(monkeypatch, problem, options, budget)
    assert got_off is not None and any(cps != (1,) for cps in before_off)  # premise: the whole list came first


def test_the_lazy_neighbours_are_the_lists_candidates_bound_for_bound():
    """Every v = 1 candidate of the whole list (the default optimizer setting, the descent's budget) is there with
    the same candidate and the same cheap bound, built on a memo of its own (nothing shared with the list's); every
    other key asked for (the list's keys moved by one step in each coordinate, v = 2, the off setting) is not."""
    problem, options = _gpt2_large()
    budget = Budget(objective="cost", max_cost_usd=1.01 * CHEAPEST_USD)
    listed, _ = _candidates(Memo(problem, options), budget, 0.0, DEFAULT)
    lazy = _LazyNeighbours(Memo(problem, options), budget)
    by_key = {item.cand.key: item for item in listed if item.cand.v == 1}
    assert by_key and any(key[5] > 1 for key in by_key)
    for key, item in by_key.items():
        got = lazy[key]
        assert got.cand == item.cand and got.lower_bound == item.lower_bound and got.level == item.level
    asked = {key[:i] + (key[i] + step,) + key[i + 1:] for key in by_key for i in (0, 1, 2, 3, 5) for step in (-1, 1)}
    asked |= {key[:6] + (2, 0) for key in by_key} | {key[:7] + (1,) for key in by_key}
    for key in asked - set(by_key):
        assert key not in lazy
        with pytest.raises(KeyError):
            lazy[key]


def _models_only(monkeypatch, claim_first: int):
    """A first-plan-only search whose plans come only from models (no seeds, no quick plans, no positional
    sequences), and whose CP-SAT claims its first `claim_first` models "infeasible" (a wrong claim: those models
    hold plans). Returns the log of (backend, candidate key) of every model solve."""
    log: list[tuple[str, tuple[int, ...]]] = []
    solve_model = solver_module._solve_model

    def claimed(problem, engine, f, time_limit_s, hint_values):
        log.append((engine.name, f.cand.key))
        if engine.name == "cpsat" and sum(name == "cpsat" for name, _ in log) <= claim_first:
            return Solution("infeasible", {}, None, None), None, 1
        return solve_model(problem, engine, f, time_limit_s, hint_values)

    monkeypatch.setattr(solver_module, "_solve_model", claimed)
    monkeypatch.setattr(solver_module, "FIRST_PLAN_SEEDS", 0)
    # The off candidates join when nothing else is left, not after OFF_WAIT_S of wall clock (a loaded machine
    # reached it in one run of the recheck test and the log's order moved with it).
    monkeypatch.setattr(solver_module, "OFF_WAIT_S", float("inf"))
    monkeypatch.setattr(solver_module.Memo, "quick_plans", lambda self, sk: [])
    monkeypatch.setattr(solver_module.Memo, "plan_of", lambda self, sk, seq: None)
    return log


def test_a_first_plan_only_search_rechecks_a_claim_only_once_nothing_else_is_left(monkeypatch):
    """FASOP-like instance, cost, first plan only. CP-SAT claims the first model "infeasible": the search goes on to
    the next candidate, whose model gives the plan, and the claim is never re-checked (CBC solves nothing). The plan
    is in the space and priced at its value. On the base CBC re-checked the claim first (one re-check, and the plan
    came from it): the assertion on the log fails there."""
    problem, options = _fasop_like(), SpaceOptions(max_stages=2, micro_batch_sizes=(1, 2))
    log = _models_only(monkeypatch, claim_first=1)
    got = solve(problem, Budget(objective="cost"), options=options, first_plan_only=True)
    assert got.status == "feasible" and got.plan is not None
    assert [name for name, _ in log] == ["cpsat", "cpsat"] and log[0][1] != log[1][1]
    assert "infeasible_claims_rechecked" not in got.stats
    assert in_search_space(problem, got.plan, options)
    assert got.objective_value == objective_value(estimate(problem, got.plan), "cost")


def test_a_first_plan_only_search_rechecks_every_claim_before_it_ends_without_a_plan(monkeypatch):
    """Every CP-SAT model claimed "infeasible" (all wrongly): the search still ends with a plan, from CBC's re-check
    of the first claim once the queue is empty, never "infeasible" on the claims alone. A search that is not
    first-plan-only re-checks at once, as before."""
    problem, options = _fasop_like(), SpaceOptions(max_stages=1, micro_batch_sizes=(1, 2))
    log = _models_only(monkeypatch, claim_first=10 ** 6)
    got = solve(problem, Budget(objective="cost"), options=options, first_plan_only=True)
    assert got.status == "feasible" and got.plan is not None
    claims = [key for name, key in log if name == "cpsat"]
    checks = [key for name, key in log if name == "cbc"]
    assert len(claims) > 1 and log[:len(claims)] == [("cpsat", key) for key in claims]  # every model claimed first,
    assert checks == claims[:len(checks)]  # then the claims re-checked in order, up to the first refuted
    assert got.stats["infeasible_claims_rechecked"] == len(checks) and got.stats["infeasible_claims_refuted"] == 1
    assert got.objective_value == objective_value(estimate(problem, got.plan), "cost")
    log.clear()
    full = solve(problem, Budget(objective="cost"), options=options)
    assert full.plan is not None and log[:2] == [("cpsat", log[0][1]), ("cbc", log[0][1])]


def test_the_lazy_neighbours_hold_nothing_without_v1():
    """A space without v = 1 has no v = 1 candidates: none is built."""
    problem = _fasop_like()
    options = SpaceOptions(max_stages=4, virtual_stages=(2,))
    lazy = _LazyNeighbours(Memo(problem, options), Budget(objective="cost"))
    assert (1, 1, 1, 2, 1, 1, 1, 0) not in lazy and lazy.degrees == 0
