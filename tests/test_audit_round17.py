"""Post-merge audit of round 17 (audit9; bench/audit_round17.py runs the same checks over many seeds and kinds):
- trim3: tests/priced.py's memo answers as brute force does (status, value, plan) on a repeated call and on an equal
  copy of the problem; keyed on (problem, options) only on 6024928, a cost-model constant or function patched
  between two calls on an equal problem got the unpatched prices back (fixed in 63b2ee7: the key holds the pricing
  modules' state); that state was id()s on 63b2ee7, so a second patch whose function landed on the first's freed address got
  the first patch's prices (audit9's strict xfail; fixed: the key holds the objects, compared by identity);
- compbatch: Memo.refined_bound with bounds.LIVE_GROUPS on is the bound with it off, bit for bit (every bounds cache
  emptied between the two), with the composition path and with the aggregate tables only (MAX_COMPOSITIONS = 0),
  under edge budgets, and lies below every plan of its candidate that meets the budget.
On 3e0ad5b tests/priced.py and bounds.LIVE_GROUPS do not exist: these tests fail there on import or on the switch."""

from __future__ import annotations

import random
from dataclasses import replace
from unittest import mock

import numpy as np
import pytest

import priced
from optsearch import bounds as bounds_module
from optsearch import costmodel
from optsearch.baselines import exhaustive
from optsearch.search import budget_violations, objective_value
from optsearch.solver import Memo, _bounded
from optsearch.spec.budget import Budget

from test_audit_dist_bounds import space_plans
from test_audit_round11 import KINDS
from test_audit_round15 import _gpt_tight

REL = 1e-9
CACHES = ("_FLOORS", "_COUNTS", "_LISTED", "_RATES", "_DEGREE_ROWS")


def _answer(got):
    return got.status, got.objective_value, got.plan


# ---- trim3: tests/priced.py ---------------------------------------------------------------------------------------

@pytest.fixture(autouse=True)
def _own_memo(monkeypatch):
    """priced's memo is this module's own in each test: a patched model's prices never reach another test."""
    monkeypatch.setattr(priced, "_kept", [])


def _priced_instance():
    problem, options = KINDS["tight"](1)
    return problem, options, Budget(objective="cost")


def test_priced_answers_as_brute_force_again_and_on_an_equal_copy():
    problem, options, budget = _priced_instance()
    want = _answer(exhaustive.solve_exhaustive(problem, budget, options=options))
    assert want[0] == "optimal"
    first = priced.solve_exhaustive(problem, budget, options=options)
    again = priced.solve_exhaustive(problem, budget, options=options)  # every plan from the memo
    copy = priced.solve_exhaustive(replace(problem), budget, options=replace(options))  # found by equality
    assert _answer(first) == _answer(again) == _answer(copy) == want
    cheap = Budget(objective="time", max_cost_usd=want[1])  # another budget on the same memo
    assert _answer(priced.solve_exhaustive(problem, cheap, options=options)) == _answer(
        exhaustive.solve_exhaustive(problem, cheap, options=options))


def test_priced_prices_again_when_the_cost_model_is_patched():
    """Failed on 6024928 (the memo keyed on (problem, options) only; audit9's strict xfail then); passes since
    63b2ee7 (the memo keyed on the pricing modules' state too)."""
    problem, options, budget = _priced_instance()
    priced.solve_exhaustive(problem, budget, options=options)  # the memo holds this instance's prices
    with mock.patch.object(costmodel, "ACTIVATION_DTYPE_BYTES", 4):  # fp32 activations: other memory and times
        fresh = exhaustive.solve_exhaustive(problem, budget, options=options)
        memoed = priced.solve_exhaustive(replace(problem), budget, options=options)
    assert _answer(memoed) == _answer(fresh)


def test_priced_prices_again_when_a_term_is_patched_twice_with_other_functions():
    """Failed on 63b2ee7 (audit9's strict xfail then): _state held id()s, and a patched term freed after its patch
    left its address to the next patch's function, whose id() matched: the memo returned the first patch's prices.
    Since the memo holds the objects themselves, the first function is never freed while its entry lives and no
    function lands on its address: the second patch is priced afresh."""
    problem, options, budget = _priced_instance()
    real = costmodel.optimizer_s

    def patched(scale):
        return lambda *args, **kwargs: real(*args, **kwargs) * scale

    first = patched(1.0)
    with mock.patch.object(costmodel, "optimizer_s", first):
        priced.solve_exhaustive(problem, budget, options=options)  # the memo keeps these prices under id(first)
    address = id(first)
    del first  # as a test's monkeypatch of a lambda ends: the function is freed, its address free again
    held = []  # the next functions made until one lands on that address (CPython reuses it at once, in practice)
    while len(held) < 1000 and (not held or id(held[-1]) != address):
        held.append(patched(1000.0))
    # (with the memo holding the first function, no function lands on its address: held[-1] is another one)
    with mock.patch.object(costmodel, "optimizer_s", held[-1]):  # a dearer optimizer step: another optimum
        fresh = exhaustive.solve_exhaustive(problem, budget, options=options)
        memoed = priced.solve_exhaustive(problem, budget, options=options)
    assert _answer(fresh) != _answer(exhaustive.solve_exhaustive(problem, budget, options=options))
    assert _answer(memoed) == _answer(fresh)


def test_the_patched_constant_changes_brute_force_s_answer():
    """The tests above test the memo's staleness, not a patch that changes nothing: brute force's own answer moves."""
    problem, options, budget = _priced_instance()
    before = exhaustive.solve_exhaustive(problem, budget, options=options)
    with mock.patch.object(costmodel, "ACTIVATION_DTYPE_BYTES", 4):
        after = exhaustive.solve_exhaustive(problem, budget, options=options)
    assert _answer(after) != _answer(before)


# ---- compbatch: bounds.LIVE_GROUPS -------------------------------------------------------------------------------

def _edge_budgets(ests, rng):
    out = [Budget(objective="cost"), Budget(objective="time")]
    for est in (min(ests, key=lambda e: e.cost_usd), min(ests, key=lambda e: e.training_time_s), rng.choice(ests)):
        for objective in ("time", "cost"):
            out.append(Budget(objective=objective, max_cost_usd=est.cost_usd))
            out.append(Budget(objective=objective, max_time_s=est.training_time_s))
    return out


def _refined(problem, options, by_cand, budgets, live, most):
    for name in CACHES:
        getattr(bounds_module, name).clear()
    out = {}
    with mock.patch.multiple(bounds_module, LIVE_GROUPS=live, MAX_COMPOSITIONS=most):
        for budget in budgets:
            memo = Memo(problem, options)
            for key, (cand, _) in by_cand.items():
                terms = memo.degree_terms(cand.tp, cand.dp, cand.micro_batch_size, cand.uses, cand.ep, cand.cp,
                                          cand.dist)
                out[(key, budget)] = (memo.refined_bound(terms, cand, budget, 0.0), terms)
    for name in CACHES:
        getattr(bounds_module, name).clear()
    return out


@pytest.mark.parametrize("most", [bounds_module.MAX_COMPOSITIONS, 0])
def test_live_groups_give_the_same_refined_bounds_below_every_plan(most):
    problem, options = _gpt_tight()
    by_cand: dict = {}
    for cand, plan, est in space_plans(problem, options):
        by_cand.setdefault(cand.key, (cand, []))[1].append((plan, est))
    budgets = _edge_budgets([e for _, plans in by_cand.values() for _, e in plans], random.Random(0))
    on = _refined(problem, options, by_cand, budgets, True, most)
    off = _refined(problem, options, by_cand, budgets, False, most)
    below = 0
    for (key, budget), (bound, terms) in on.items():
        assert bound == off[(key, budget)][0], (key, budget)
        cand, plans = by_cand[key]
        values = [objective_value(e, budget.objective) for p, e in plans if not budget_violations(p, e, budget)]
        if values:
            item = _bounded(problem, budget, terms, cand, True, bound, 0.0)
            assert item is not None and item.lower_bound <= min(values) * (1 + REL), (key, budget)
            below += 1
    assert below >= 50


# ---- the later merges: timerows, rentbatch, costbig, budgetb (bench/audit_round17.py's checks on one instance) ----

def _bench():
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "audit_round17", Path(__file__).resolve().parent.parent / "bench" / "audit_round17.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Counts(dict):
    def __missing__(self, key):
        return 0


def _hypinter(n: int):
    from hypothesis import HealthCheck, given, settings

    from test_interleaved import interleaved_instances

    out = []

    @settings(max_examples=n, derandomize=True, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(interleaved_instances())
    def draw(case):
        out.append(case[:2])

    draw()
    return out


BENCH = _bench()


def LASTEND_CASE():
    """tight_instance(18): two types whose NICs differ, v = 1 and 2, 646 positional bounds under edge budgets of which
    the floor raises 181, 114 of them interleaved (bench/audit_round17.py --kind tight --seeds 18)."""
    return KINDS["tight"](18)


SOLVE_CASE = LASTEND_CASE  # end_matched gives sequences there, and the cost climb's reshaped plans run


def test_the_last_end_floor_holds_on_interleaved_candidates_and_slower_plans():
    """timerows' floor (embedding_last_rows) through the solver's paths the branch's tests do not take: the
    interleaved candidates' bound from their sibling (interleaved_positional_bound) and only-slower plans
    (slower_than_s at the median plan's time), under edge budgets: below every plan, never below the bound without
    the floor, above it somewhere; the sequences' plans and quick plans honest."""
    stats = _Counts()
    problem, options = LASTEND_CASE()
    BENCH.check_lastend(problem, options, 0, stats, budgets_kept=6)
    assert stats["lastend_raised"] > 0 and stats["lastend_interleaved"] > 0 and stats["lastend_below_plans"] > 50
    assert stats["lastend_sequence_plans"] > 0 and stats["lastend_quick_plans"] > 0


def test_the_last_end_check_fails_on_a_floor_one_part_in_a_thousand_too_high(monkeypatch):
    from optsearch.formulation import positional

    real = positional.embedding_last_rows

    def high(f):
        rows = real(f)
        return None if rows is None else rows + 1e-3 * positional.embedding_floor_s(f) + 1e-3 * rows

    monkeypatch.setattr(positional, "embedding_last_rows", high)
    with pytest.raises(AssertionError, match="above a plan"):
        BENCH.check_lastend(*LASTEND_CASE(), 0, _Counts(), budgets_kept=2)


def test_the_rent_walks_of_many_candidates_equal_one_at_a_time_under_edge_budgets():
    """rentbatch: sharpened_many in random batches of every candidate equals sharpened, bit for bit, under cost caps,
    deadlines and rent limits at plans' exact values, cutoffs none, at and below the least plan; below every plan."""
    stats = _Counts()
    BENCH.check_rent(*KINDS["tight"](0), 0, stats, budgets_kept=4)
    assert stats["rent_compared"] > 100 and stats["rent_below_plans"] > 20


def test_the_rent_check_fails_when_a_batched_rent_moves_by_an_ulp(monkeypatch):
    from optsearch import inflight

    real = inflight._least_rent_many
    monkeypatch.setattr(inflight, "_least_rent_many",
                        lambda asks: [np.nextafter(r, np.inf) if len(asks) > 1 else r for r in real(asks)])
    with pytest.raises(AssertionError, match="sharpened_many differs"):
        BENCH.check_rent(*KINDS["tight"](0), 0, _Counts(), budgets_kept=2)


def test_solves_with_the_new_incumbents_offer_only_honest_plans_and_answer_brute_force():
    """costbig (the cost climb's reshaped plans, the deepest pipelines' quick plans), budgetb (time under B: plain
    climbs first, the layer-step depths, seeds ruled out by their refined bound) and timerows (end-matched
    sequences) give incumbents only: every plan offered to solver._best_meeting during the solves is in the space,
    fits and is priced as the cost model prices it, and each answer (no budget, time under B at the cheapest plan's
    cost, cost under a deadline 5 % above the fastest plan's time; both backends) is brute force's."""
    from optsearch.solver import solve

    problem, options = SOLVE_CASE()
    stats = _Counts()
    ests = [e for _, _, e in space_plans(problem, options)]
    cheapest, fastest = min(ests, key=lambda e: e.cost_usd), min(ests, key=lambda e: e.training_time_s)
    budgets = [Budget(objective="cost"), Budget(objective="time"), Budget(objective="time", max_cost_usd=cheapest.cost_usd),
               Budget(objective="cost", max_time_s=fastest.training_time_s * 1.05)]
    patches = [BENCH._honest_offers(problem, options, stats), *BENCH._counting(stats)]
    for patch in patches:
        patch.start()
    try:
        for budget in budgets:
            truth = priced.solve_exhaustive(problem, budget, options=options)
            for name in ("cbc", "cpsat"):
                got = solve(problem, budget, solver=name, options=options)
                assert got.status == truth.status, (name, budget)
                assert got.objective_value == pytest.approx(truth.objective_value, rel=1e-6), (name, budget)
    finally:
        for patch in reversed(patches):
            patch.stop()
    assert stats["offered_plans"] > 100 and stats["gave__reshaped"] > 0 and stats["calls__plain_then_wide"] > 0
    assert stats["gave_end_matched"] > 0
