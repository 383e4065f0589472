"""Round 14 (costrows; docs/solver.md "Round 14: the cost rows' bound work (costrows)"):

- inflight._least_rent with the multipliers listed only up to the table's most_layers (its caps at M = inf), not up
  to L: on random cap tables it still reaches the Lagrangian dual's maximum (every kink evaluated), stays below the
  least rent of every assignment (brute force), and equals the list up to L to 1e-12; on the in-flight tables of
  random roomy and memory-tight instances most_layers is the largest cap of every mark and the rent at every mark
  equals the full list's to 1e-12 (the values may differ by an ulp: a maximum over other evaluated multipliers);
  a list one kink difference too short fails the dual comparison;
- the least mark where the positions hold L (inflight._first_holding, order statistics of the least times) is the
  bisection's (`first_passing` over `_holds`), on the same random tables, v = 1 and 2;
- bounds.bound_over_compositions by arrays equals its loop bit for bit on the composition lists of random
  instances, under no budget, deadlines, rent limits, cost budgets and windows (slower_than_s)."""

from __future__ import annotations

import math
from dataclasses import replace
from unittest import mock

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from draws import draws

from optsearch import bounds, inflight
from optsearch.bounds import CandidateBound, bound_over_compositions, composition_bounds, degree_terms
from optsearch.candidates import max_stages
from optsearch.formulation.model import Candidate
from optsearch.inflight import _least_rent, sharpened
from optsearch.spec.budget import Budget

from test_costrows_bounds import _table
from test_inflight_blocks import _brute_least_rent, _phi_at_every_kink
from test_solver import instances, usable_degrees
from test_solver_memory import tight_instances

REL = 1e-9


def _short(tab, caps):
    """tab with most_layers at the caps' largest (at most L), as inflight_tables sets it from its caps at M = inf."""
    usable = (caps >= 1) | ~tab.middle[None, :]
    return replace(tab, most_layers=int(min(tab.L, np.where(usable, caps, 0).max(initial=0))))


@mock.patch.object(inflight, "RENT_BY_ENVELOPE", False)  # the list's bisection (round 15 finds the kink directly)
def test_the_short_multiplier_list_reaches_the_duals_maximum_and_stays_below_every_assignment():
    rng = np.random.default_rng(1414)
    shorter = 0
    for _ in range(150):
        G, pp, L = int(rng.integers(2, 5)), int(rng.integers(2, 6)), int(rng.integers(3, 40))
        price = rng.uniform(0.5, 40.0, G).round(4)
        caps = rng.integers(0, 9, (G, pp)).astype(float)
        full = _table(price, L, pp)
        tab = _short(full, caps)
        shorter += 0 < tab.most_layers < L
        got = _least_rent(tab, caps[None])[0]
        want = _least_rent(full, caps[None])[0]
        brute = _brute_least_rent(price, caps, tab.middle, L)
        if math.isinf(brute):
            assert math.isinf(got) and math.isinf(want)
            continue
        dual = _phi_at_every_kink(price, caps, tab.middle, L)
        assert abs(got - dual) <= REL * dual, (price, caps, L, got, dual)
        assert got <= brute * (1 + REL), (price, caps, L, got, brute)
        assert abs(got - want) <= 1e-12 * want, (price, caps, L, got, want)
    assert shorter >= 100  # the list was shorter than L's in most draws


@mock.patch.object(inflight, "RENT_BY_ENVELOPE", False)
def test_a_list_one_difference_too_short_misses_the_duals_maximum():
    """The comparison above can fail: kinks only up to most_layers - 1 miss the maximum on some draws."""
    rng = np.random.default_rng(1414)
    missed = 0
    for _ in range(300):
        G, pp, L = int(rng.integers(2, 5)), int(rng.integers(2, 7)), int(rng.integers(3, 40))
        price = rng.uniform(0.5, 40.0, G).round(4)
        caps = rng.integers(0, 9, (G, pp)).astype(float)
        tab = _short(_table(price, L, pp), caps)
        if tab.most_layers < 2 or math.isinf(_least_rent(tab, caps[None])[0]):
            continue
        real = inflight._multipliers
        with mock.patch.object(inflight, "_multipliers", lambda p, most: real(p, most - 1)):
            got = _least_rent(tab, caps[None])[0]
        dual = _phi_at_every_kink(price, caps, tab.middle, L)
        missed += abs(got - dual) > REL * dual
    assert missed >= 2


COMPARED: list[int] = []
HOLDS: list[bool] = []


@settings(max_examples=draws(4), derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.one_of(instances(), tight_instances()), st.booleans())
def test_the_tables_most_layers_bound_every_cap_and_the_rent_matches_the_full_list(case, overlap):
    """... and the least mark that holds L from order statistics (FIRST_BY_ORDER) is the bisection's."""
    problem, options, *_ = case
    problem = replace(problem, overlap_grad_reduce=overlap)
    for tp, mbs, dp, uses in usable_degrees(problem, options):
        d = degree_terms(problem, tp, dp, mbs, uses)
        for v in (1, 2):
            for pp in range(2, max_stages(problem, options) + 3):
                cand = Candidate(tp=tp, dp=dp, micro_batch_size=mbs, pp=pp, uses=uses, v=v)
                kept = {}
                sharpened(problem, kept, d, cand, Budget(objective="cost"), CandidateBound(True, 0.0, 0.0, 0.0))
                tab = kept.get(cand.key)
                if tab is None:
                    continue
                with mock.patch.object(inflight, "FIRST_BY_ORDER", False):  # the bisection's least mark
                    ref = {}
                    sharpened(problem, ref, d, cand, Budget(objective="cost"), CandidateBound(True, 0.0, 0.0, 0.0))
                assert tab.holds_from == ref[cand.key].holds_from
                assert np.array_equal(np.isposinf(tab.rent), np.isposinf(ref[cand.key].rent))
                HOLDS.append(tab.holds_from < len(tab.marks))
                caps = tab.caps[:]  # every mark
                usable = (caps >= 1) | ~tab.middle[None, None, :]
                assert tab.most_layers == int(min(tab.L, np.where(usable, caps, 0).max(initial=0)))
                with mock.patch.object(inflight, "RENT_BY_ENVELOPE", False):  # the lists' bisection (round 14)
                    short = _least_rent(tab, caps)
                    full = _least_rent(replace(tab, most_layers=0), caps)
                envelope = _least_rent(tab, caps)  # round 15's kink found directly (inflight2)
                assert np.array_equal(np.isinf(short), np.isinf(full))
                assert np.array_equal(np.isinf(envelope), np.isinf(full))
                fin = np.isfinite(full)
                assert (np.abs(short[fin] - full[fin]) <= 1e-12 * full[fin]).all()
                assert (np.abs(envelope[fin] - full[fin]) <= 1e-12 * full[fin]).all()
                COMPARED.append(int(fin.sum()))


def test_the_random_tables_compared_many_marks():
    if not COMPARED:  # run alone or in another worker
        test_the_tables_most_layers_bound_every_cap_and_the_rent_matches_the_full_list()
    assert sum(COMPARED) >= 200 and sum(n > 0 for n in COMPARED) >= 20
    assert sum(HOLDS) >= 20 and not all(HOLDS)  # tables that hold L from some mark on, and some that never do


def _budgets_around(problem, comps):
    """No budget, no limits, and deadlines, rent limits and cost budgets at the compositions' median values."""
    n = problem.iterations
    its = sorted(c[0] for c in comps)
    rates = sorted(c[1] for c in comps)
    costs = sorted(c[2] for c in comps)
    mid = len(comps) // 2
    return [None, Budget(objective="cost"), Budget(objective="time", max_time_s=its[mid] * n),
            Budget(objective="cost", max_usd_per_hour=rates[mid]), Budget(objective="time", max_cost_usd=costs[mid] * n),
            Budget(objective="cost", max_time_s=its[-1] * n, max_cost_usd=costs[0] * n),
            Budget(objective="cost", max_time_s=its[0] * n * 0.5)]


OVER: list[int] = []


@settings(max_examples=draws(6), derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.one_of(instances(), tight_instances()), st.booleans())
def test_the_composition_bound_by_arrays_equals_the_loop_bit_for_bit(case, overlap):
    problem, options, *_ = case
    problem = replace(problem, overlap_grad_reduce=overlap)
    for tp, mbs, dp, uses in usable_degrees(problem, options):
        d = degree_terms(problem, tp, dp, mbs, uses)
        for pp in range(1, max_stages(problem, options) + 3):
            comps = composition_bounds(problem, d, pp)
            if not comps:
                continue
            for budget in _budgets_around(problem, comps):
                for window in (0.0, sorted(c[0] for c in comps)[len(comps) // 2] * problem.iterations):
                    with mock.patch.object(bounds, "OVER_ARRAYS_FROM", 1):
                        got = bound_over_compositions(problem, comps, budget, window)
                    with mock.patch.object(bounds, "OVER_ARRAYS", False):
                        want = bound_over_compositions(problem, comps, budget, window)
                    assert got == want, (pp, budget, window, got, want)  # exact
                    OVER.append(len(comps))


def test_the_random_composition_lists_were_compared():
    if not OVER:
        test_the_composition_bound_by_arrays_equals_the_loop_bit_for_bit()
    assert len(OVER) >= 200 and sum(n >= 3 for n in OVER) >= 20


def test_a_catalog_models_long_lists_by_arrays_equal_the_loop():
    """Megatron 76B on mixed-pool-8k (four types, up to 300 compositions a list): the lists the solver walks."""
    from optsearch.candidates import node_uses
    from optsearch.edits import edited_problem
    problem = edited_problem("megatron-76b", "mixed-pool-8k", [])
    long = 0
    for tp, dp, mbs in ((1, 2, 1), (2, 4, 1), (8, 16, 1)):
        d = degree_terms(problem, tp, dp, mbs, tuple(node_uses(problem, tp, dp, mbs)))
        for pp in (2, 3, 5, 8, 9, 10, 16, 24):
            comps = composition_bounds(problem, d, pp)
            if not comps:
                continue
            long += len(comps) >= bounds.OVER_ARRAYS_FROM
            for budget in _budgets_around(problem, comps):
                got = bound_over_compositions(problem, comps, budget)
                with mock.patch.object(bounds, "OVER_ARRAYS", False):
                    assert got == bound_over_compositions(problem, comps, budget), (tp, dp, pp, budget)
    assert long >= 5


def test_a_hand_made_list_by_arrays_equals_the_loop():
    """Ties, a window above some iterations, and a cost budget that keeps one composition (the loop's own values)."""
    problem = mock.Mock(iterations=1000)
    comps = tuple((1.0 + 0.1 * k, 10.0 - k % 3, 5.0 + (k % 4) * 0.5) for k in range(12))
    for budget in (None, Budget(objective="cost", max_cost_usd=5000.0), Budget(objective="cost", max_time_s=1150.0)):
        for window in (0.0, 1500.0):
            with mock.patch.object(bounds, "OVER_ARRAYS", False):
                want = bound_over_compositions(problem, comps, budget, window)
            assert bound_over_compositions(problem, comps, budget, window) == want
