"""A budget search's first descent climbs over the whole space's neighbours from the part's seeds on (issue 14, item 3,
round 16, timeb: solver.PART_CLIMB_LAZY).

Before, the descent's first climb moved over the cp = 1, v = 1 part's neighbours for PART_DESCENT_SHARE of its share
and only then, from where it stopped, over the whole space's (_LazyNeighbours). On Megatron 1T and 310B and Llama-2
70B (time under B, the large pools) every plan under B has cp > 1: the part's climb spent its whole share (about 0.55
s of CPU at a 10 s limit) without a plan, and the lazy climb met B 0.1-0.25 s after it. Now the part's seeds are
climbed over the whole space's neighbours at once, for the two shares together. Incumbents only: the seeds, the
neighbours and their cheap bounds are the same as before (the lazy neighbours are the list's own candidates, bound
for bound: tests/test_first_plans_before_lists.py); only which neighbours the first climb may step to changed.
Order is counted (which memo each climb runs on, which lists were built before the plan), never timed."""

from __future__ import annotations

from optsearch import solver as solver_module
from optsearch.candidates import in_search_space
from optsearch.cli.options import space_from_target
from optsearch.costmodel import estimate
from optsearch.edits import edited_problem
from optsearch.search import budget_violations, objective_value
from optsearch.solver import Memo, _LazyNeighbours, _narrow_memo, _part_then_whole_descent
from optsearch.spec.budget import Budget
from optsearch.targets import engine_problem

# GPT-2 large on FASOP's cluster, the megatron target's space (cp 1-8, v 1-4): the cheapest plan has cp = 2
# (tests/test_first_plans_before_lists.py), so at 1 % above its cost no plan of the cp = 1 part meets B.
CHEAPEST_USD = 10681.559342891647


def _climbs_and_lists(monkeypatch):
    """_part_then_whole_descent without a limit, every _climb recorded as (its memo is the part's, its neighbours
    are lazy, its start, its end) and every list built as its memo's cp sizes with the climbs before it."""
    problem = engine_problem("megatron", edited_problem("gpt2-large", "fasop-a100-a10", []))
    options = space_from_target("megatron", problem)
    budget = Budget(objective="time", max_cost_usd=1.01 * CHEAPEST_USD)
    memo = Memo(problem, options)
    part = _narrow_memo(problem, options, memo)
    events: list = []
    climb, build = solver_module._climb, solver_module._build_candidates

    def recorded(memo_, relaxed, bounded, start, deadline, wide, until=None, ends=None, by_key=None):
        got = climb(memo_, relaxed, bounded, start, deadline, wide, until, ends, by_key)
        events.append(("climb", memo_ is part, isinstance(by_key, _LazyNeighbours), start, got))
        return got

    def logged(memo_, *args, **kwargs):
        events.append(("list", memo_.options.context_parallel_sizes))
        return build(memo_, *args, **kwargs)

    monkeypatch.setattr(solver_module, "_climb", recorded)
    monkeypatch.setattr(solver_module, "_build_candidates", logged)
    got, _ = _part_then_whole_descent(memo, part, budget, None)
    return problem, options, budget, got, events


def test_the_parts_seeds_climb_over_the_whole_space_at_once(monkeypatch):
    """With PART_CLIMB_LAZY on (the default) the first climb runs over the whole space's lazy neighbours from the part's
    seeds, no climb runs over the part's own neighbours, and the plan under B is met by that first climb, before any
    list of the whole space (cp 1-8) is built. The plan is in the space, has cp > 1, meets B and is priced by the cost
    model at its value. (With the switch off the part's own climb comes first and the lazy one from its end:
    tests/test_audit_round13.py.) Fails on f6816aa (no PART_CLIMB_LAZY there; its first climb is the part's own)."""
    monkeypatch.setattr(solver_module, "PART_CLIMB_LAZY", True)
    problem, options, budget, got, events = _climbs_and_lists(monkeypatch)
    climbs = [e for e in events if e[0] == "climb"]
    assert climbs and not any(on_part for _, on_part, _, _, _ in climbs)  # no climb over the part's neighbours
    _, _, lazy, _, first_end = climbs[0]
    assert lazy  # the first climb's neighbours: the whole space's, built as asked
    first_list_of_whole = next(i for i, e in enumerate(events) if e[0] == "list" and e[1] != (1,))
    first_climb = events.index(climbs[0])
    assert first_climb < first_list_of_whole  # the first climb came before the whole space's list
    assert not budget_violations(first_end[1], first_end[2], budget)  # and it met B
    assert got is not None
    value, plan, est = got
    assert in_search_space(problem, plan, options) and plan.cp > 1
    assert not budget_violations(plan, est, budget)
    assert value == objective_value(estimate(problem, plan), "time")

