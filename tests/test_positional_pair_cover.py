"""The positional bound's floor on every plan's slowest stage with each boundary's own send and the node supply of
two or more types counted (formulation/positional.py pair_cover_floor_s, PAIR_COVER; issue 14, item 3, round 19,
supply1t; docs/solver.md "Round 19: the slowest stage with each boundary's own send and two types' supply
(supply1t, 2026-11-24)").

The bound's rows charge a block's last stage its send out at the least over every type that may follow; its supply
index counts one type of three on Megatron 1T's pools. pair_cover_floor_s runs a cover programme whose state holds the
type that follows (so the send is the pair's) and the block counts of every binding type within PAIR_COVER_STATES:
the least M at which it holds L layers is at most every plan's slowest stage, so the marks below it are dropped.
Checked against brute force on small instances of two or three types with NICs of 10 to 3,200 Gbit/s and one to
three nodes of each (the supply binds), roomy and memory-tight, with the bound's own supply index narrowed to the
scarcest binding type (as on Megatron 1T: pair_cover_floor_s runs only where its index counts more) and, with the
gate off, at the bound's own index: every plan's slowest stage is at least M_pair, every plan lies above its
candidate's positional bound with no budget and under its own deadline, cost budget and rent, for both objectives;
the floor raises some bounds; and two deliberately invalid floors (the send charged at the slower orientation of
the pair plus the least send in again; M_pair from the next value up) lie above some plan."""

from __future__ import annotations

import math

import pytest

import optsearch.formulation.positional as positional
from optsearch.search import objective_value
from optsearch.solver import Memo

from test_audit_dist_bounds import pattern_plans
from test_inflight_bound import _budgets
from test_positional_type_boundary import bound_with_off, boundary_instance

_SUPPLY = positional._supply  # the functions under test, before any monkeypatch
_FLOOR = positional.pair_cover_floor_s


def _narrow(f, limit: int = 256):
    """The bound's own supply index (the default limit) counting the scarcest binding type only, as on Megatron 1T's
    pools (three types of 128 nodes: 33 states of 256); pair_cover_floor_s's (PAIR_COVER_STATES) every one."""
    if limit != 256:
        return _SUPPLY(f, limit)
    pp, uses = f.cand.pp, f.cand.uses
    most = sorted(u.node.num_nodes_available // u.nodes_per_block for u in uses
                  if (u.node.num_nodes_available // u.nodes_per_block) * u.stages_per_block < pp)
    return _SUPPLY(f, most[0] + 1 if most else 1)


def _walk(problem, options, compare: bool = True) -> tuple[float, float, int, int]:
    """(the least slowest stage / M_pair over every plan of every v = 1 candidate where M_pair is finite, the least
    plan value / positional bound over those plans and the budgets of _budgets, how many (candidate, budget) bounds
    M_pair raised over the bound with PAIR_COVER off (compare), how many candidates had a finite M_pair). The first
    two are at least 1 (less 1e-9) when the floor is valid."""
    memo = Memo(problem, options)
    slowest, least, raised = math.inf, math.inf, 0
    floors: dict = {}
    bounds: dict = {}
    plain: dict = {}  # candidate key -> its tables with PAIR_COVER off
    for cand, plan, est, sk in pattern_plans(problem, options, memo):
        if cand.key not in floors:
            floors[cand.key] = positional.pair_cover_floor_s(sk, positional.tables(sk).blocks)
        floor = floors[cand.key]
        if not math.isfinite(floor):
            continue  # -inf: not run; inf would claim no plan, and this candidate has one: the ratio below catches it
        slowest = min(slowest, max(s.time_s for s in est.stages) / floor if floor > 0 else math.inf)
        for budget in _budgets(est):
            key = (cand.key, budget.objective, budget.max_time_s, budget.max_cost_usd, budget.max_usd_per_hour)
            if key not in bounds:
                bounds[key] = positional.positional_bound(sk, budget).bound
                if compare:
                    raised += bounds[key] > bound_with_off(sk, budget, "PAIR_COVER", plain) * (1 + 1e-9)
            got = bounds[key]
            least = min(least, objective_value(est, budget.objective) / got if got > 0 else math.inf)
    finite = sum(math.isfinite(x) for x in floors.values())
    return slowest, least, raised, finite


# Seeds measured when written (the bound's index narrowed): roomy 9 (the floor finite on 2 candidates, 164 of their
# (candidate, budget) bounds raised, the least slowest stage / M_pair 1.0000: tight), memory-tight 109 (4, 12 raised,
# 1.0007) and 111 (1, 1.0000).
ROOMY, TIGHT = (9,), (109, 111)


def _cases(seeds, tight=False):
    for seed in seeds:
        made = boundary_instance(seed, tight)
        if made is not None:
            yield made


def test_every_plan_lies_above_the_bound_with_two_types_supply(monkeypatch):
    monkeypatch.setattr(positional, "_supply", _narrow)
    raised = finite = 0
    for problem, options in _cases(ROOMY):
        slowest, least, up, seen = _walk(problem, options)
        assert slowest >= 1 - 1e-9 and least >= 1 - 1e-9, problem.cluster
        raised, finite = raised + up, finite + seen
    assert finite and raised  # the floor ran and raised some bounds: the checks above are not vacuous


def test_every_plan_lies_above_the_bound_when_memory_is_tight(monkeypatch):
    monkeypatch.setattr(positional, "_supply", _narrow)
    finite = 0
    for problem, options in _cases(TIGHT, tight=True):
        slowest, least, _, seen = _walk(problem, options, compare=False)
        assert slowest >= 1 - 1e-9 and least >= 1 - 1e-9, problem.cluster
        finite += seen
    assert finite


def test_each_boundarys_own_send_alone_at_the_bounds_own_supply(monkeypatch):
    """With the gate off (PAIR_COVER_ONLY_WIDER) the floor runs where its index counts what the bound's does: the
    pair's send alone still bounds every plan's slowest stage."""
    monkeypatch.setattr(positional, "PAIR_COVER_ONLY_WIDER", False)
    problem, options = next(_cases(ROOMY))
    slowest, least, _, finite = _walk(problem, options, compare=False)
    assert finite and slowest >= 1 - 1e-9 and least >= 1 - 1e-9


def _next_value_up(f, blocks, start=-math.inf):
    """An invalid floor: the least t_lb above M_pair (the search's answer one value too high)."""
    floor = _FLOOR(f, blocks, start)
    if not math.isfinite(floor):
        return floor
    above = blocks.rows[blocks.rows > floor * (1 + 1e-9)]  # NaN > x is False
    return float(above.min()) if len(above) else floor * 1.3


@pytest.mark.parametrize("invalid", ["next value", "scaled"])
def test_an_invalid_floor_fails(monkeypatch, invalid):
    monkeypatch.setattr(positional, "_supply", _narrow)
    if invalid == "next value":
        monkeypatch.setattr(positional, "pair_cover_floor_s", _next_value_up)
    else:
        monkeypatch.setattr(positional, "pair_cover_floor_s", lambda f, blocks, start=-math.inf: _FLOOR(f, blocks, start) * 1.3)
    slowest, least, _, _ = _walk(*next(_cases(ROOMY)), compare=False)
    assert least < 1 - 1e-9 or slowest < 1 - 1e-9
