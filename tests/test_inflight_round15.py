"""Round 15 (inflight2; docs/solver.md "Round 15: the in-flight step's per-candidate work (inflight2)"):

- inflight._least_rent's multiplier from each position's lower envelope (RENT_BY_ENVELOPE, _maximizing_kink): on
  random cap tables the kink is one `_multipliers` lists (the same bits), the rent equals the list bisection's to
  1e-12, reaches the Lagrangian dual's maximum (every kink evaluated) and stays below the least rent of every
  assignment (brute force); a search that also counts the lines that are never the cheapest misses the maximum;
- _plain_cost's cut points in Python (_split_points) are numpy's, and the walk's value is the same bit for bit;
- whole_levels_terms' and hiding_terms' pp-free parts kept on the degree's part (DEGREE_WHOLE_TERMS) give the
  same tables bit for bit, and with every switch of the round the in-flight bounds equal the old path's to 1e-12,
  on random roomy and memory-tight instances (v = 1 and 2, with and without --overlap-grad-reduce) and on GPT-3
  175B's front degree on mixed-pool-8k. The brute-force tests of the in-flight bound (test_inflight_bound,
  test_inflight_blocks, test_costrows_round14) run the new path by default."""

from __future__ import annotations

import math
from contextlib import ExitStack
from dataclasses import replace
from unittest import mock

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from draws import draws
from optsearch import inflight
from optsearch.bounds import CandidateBound, degree_terms
from optsearch.candidates import max_stages
from optsearch.formulation.model import Candidate
from optsearch.inflight import _least_rent, _maximizing_kink, _multipliers, _plain_cost, _rent, _split_points, sharpened
from optsearch.spec.budget import Budget

from test_costrows_bounds import _table
from test_inflight_blocks import _brute_least_rent, _phi_at_every_kink
from test_solver import instances, usable_degrees
from test_solver_memory import tight_instances

REL = 1e-12
SWITCHES = ("RENT_BY_ENVELOPE", "SPLIT_IN_PYTHON", "DEGREE_WHOLE_TERMS")


def _old(*names):
    """The round's switches named (default: all) off: the path of c52cd37."""
    stack = ExitStack()
    for name in names or SWITCHES:
        stack.enter_context(mock.patch.object(inflight, name, False))
    return stack


def _draw(rng):
    G, pp, L = int(rng.integers(1, 6)), int(rng.integers(1, 6)), int(rng.integers(1, 40))
    price = rng.uniform(0.5, 40.0, G).round(int(rng.integers(0, 3)))  # few decimals: ties between types
    caps = rng.integers(0, int(rng.integers(1, 14)), (int(rng.integers(1, 5)), G, pp)).astype(float)
    return price, caps, L


def _kinks(tab, caps):
    usable = (caps >= 1) | ~tab.middle[None, None, :]
    k = np.minimum(np.where(usable, np.maximum(caps, 0.0), 0.0), tab.L)
    return _maximizing_kink(tab.price, usable, k, tab.L)


def test_the_envelope_kink_is_a_listed_kink_and_the_rent_reaches_the_duals_maximum():
    rng = np.random.default_rng(1515)
    rows = shorter_k = 0
    for _ in range(400):
        price, caps, L = _draw(rng)
        tab = _table(price, L, caps.shape[2], w=int(rng.integers(1, 9)))
        got = _least_rent(tab, caps)
        with _old("RENT_BY_ENVELOPE"):
            want = _least_rent(tab, caps)
        assert np.array_equal(np.isinf(got), np.isinf(want)), (price, caps, L)
        lams = _kinks(tab, caps)
        listed = _multipliers(tab.price, L)
        for m in np.flatnonzero(np.isfinite(want)):
            rows += 1
            assert np.isin(lams[m], listed), (price, caps[m], L, lams[m])  # the same bits as the list's kink
            assert abs(got[m] - want[m]) <= REL * want[m], (price, caps[m], L, got[m], want[m])
            dual = tab.w * _phi_at_every_kink(price, caps[m], tab.middle, L)
            assert abs(got[m] - dual) <= 1e-9 * dual, (price, caps[m], L, got[m], dual)
            if caps.shape[2] <= 4:
                brute = tab.w * _brute_least_rent(price, caps[m], tab.middle, L)
                assert got[m] <= brute * (1 + 1e-9), (price, caps[m], L, got[m], brute)
                shorter_k += brute > dual * (1 + 1e-9)  # the relaxation is strictly below some optima
    assert rows >= 300 and shorter_k >= 10, (rows, shorter_k)


# _maximizing_kink with `a <= b` dropped (every usable line counted as on its envelope from a_g): a mutant, to show
# that the comparison above can fail
def _mutant_kink(price, usable, k, L):
    M, G, P = k.shape
    dk = k[:, :, None, :] - k[:, None, :, :]
    dp = (price[:, None] - price[None, :])[None, :, :, None]
    other = usable[:, None, :, :]
    ratio = dp / np.where(dk != 0, dk, 1.0)
    a = np.maximum(np.where(other & (dk > 0), ratio, -np.inf).max(axis=2), 0.0)
    on = usable & ~(other & (dk == 0) & (dp > 0)).any(axis=2)  # mutated: no `a <= b`
    smaller = (dk > 0) | ((dk == 0) & (np.arange(G)[:, None] > np.arange(G)[None, :])[None, :, :, None])
    below = np.where(on[:, None, :, :] & smaller, k[:, None, :, :], 0.0).max(axis=2)
    step = np.where(on, k - below, 0.0).ravel()
    at = np.where(on, a, np.inf).ravel()
    order = np.argsort(at.reshape(M, G * P), axis=1) + (np.arange(M) * (G * P))[:, None]
    reached = np.cumsum(step[order], axis=1) >= L
    lam = at[order[np.arange(M), np.argmax(reached, axis=1)]]
    return np.where(reached.any(axis=1) & np.isfinite(lam), lam, 0.0)


def test_the_mutant_kink_search_misses_the_maximum():
    """_maximizing_kink without `a <= b` (a copy, _mutant_kink): its rent falls below the dual's maximum on some
    draws, where _maximizing_kink's does not (so test_the_envelope_kink_... can fail)."""
    rng = np.random.default_rng(1515)
    missed = 0
    for _ in range(400):
        price, caps, L = _draw(rng)
        tab = _table(price, L, caps.shape[2])
        with mock.patch.object(inflight, "_maximizing_kink", _mutant_kink):
            bad = _least_rent(tab, caps)
        got = _least_rent(tab, caps)
        fin = np.isfinite(got)
        missed += int((np.abs(bad[fin] - got[fin]) > 1e-9 * got[fin]).sum())
    assert missed >= 5


def test_the_cut_points_in_python_are_numpys():
    for a in range(0, 120, 3):
        for b in range(a, a + 1500, 11):
            want = np.unique(np.linspace(a, b + 1, inflight.SPLIT + 1).round().astype(np.int64)).tolist()
            assert _split_points(a, b) == want, (a, b)


COMPARED: list[int] = []


@settings(max_examples=draws(3), derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.one_of(instances(), tight_instances()), st.integers(0, 3))
def test_the_round_gives_the_old_tables_and_bounds(case, seed):
    problem, options, *_ = case
    for overlap in (False, True):
        problem = replace(problem, overlap_grad_reduce=overlap)
        most = max_stages(problem, options) + 2
        for tp, mbs, dp, uses in usable_degrees(problem, options):
            d = degree_terms(problem, tp, dp, mbs, uses)
            for v in (1, 2):
                pps = np.random.default_rng(seed).permutation(range(2, most + 1)).tolist()
                COMPARED.append(_compare(problem, d, [
                    Candidate(tp=tp, dp=dp, micro_batch_size=mbs, pp=pp, uses=uses, v=v) for pp in pps]))


def _compare(problem, d, cands, caches: tuple | None = None) -> int:
    """Each candidate, asked in order with one call cache (the degree's part shared): the whole-reduce and hiding
    terms bit for bit, the rent at every mark and the bounds (cost with and without a cutoff, time) to 1e-12 of the
    old path (every switch off, its own cache); _plain_cost bit for bit with only the cut points switched."""
    cache, kept, old_cache, old_kept = caches or ({}, {}, {}, {})
    compared = 0
    for cand in cands:
        for budget, cutoff in ((Budget(objective="cost"), math.inf), (Budget(objective="time"), math.inf),
                               (Budget(objective="cost"), None)):
            start = CandidateBound(True, 0.0, 0.0, 0.0)
            if cutoff is None:  # the cutoff at the old bound itself: the walk decides at it
                with _old():
                    ref = sharpened(problem, {}, d, cand, budget, start, {})
                cutoff = ref.cost_per_iteration_usd * problem.iterations if ref.feasible else math.inf
            got = sharpened(problem, kept, d, cand, budget, start, cache, cutoff_usd=cutoff)
            with _old():
                want = sharpened(problem, old_kept, d, cand, budget, start, old_cache, cutoff_usd=cutoff)
            assert got.feasible == want.feasible, (cand.key, budget)
            for x, y in ((got.iteration_s, want.iteration_s), (got.cost_per_iteration_usd, want.cost_per_iteration_usd)):
                assert x == y or abs(x - y) <= REL * abs(y), (cand.key, budget, got, want)
        tab, old = kept.get(cand.key), old_kept.get(cand.key)
        assert (tab is None) == (old is None)
        if tab is None:
            continue
        for name in ("whole_per_layer", "whole_base", "marks", "iteration"):
            x, y = getattr(tab, name), getattr(old, name)
            assert (x is None and y is None) or np.array_equal(x, y), (cand.key, name)
        assert tab.whole_mean == old.whole_mean and (tab.hide is None) == (old.hide is None)
        if tab.hide is not None:
            assert np.array_equal(tab.hide[0], old.hide[0]) and tab.hide[1] == old.hide[1]
            assert np.array_equal(tab.hide[2], old.hide[2])
        fresh, old_fresh = replace(tab, rent=np.full(len(tab.marks), np.nan)), replace(tab, rent=np.full(len(tab.marks), np.nan))
        fresh.rent[:tab.holds_from] = old_fresh.rent[:tab.holds_from] = np.inf
        _rent(fresh, len(tab.marks))
        with _old():
            _rent(old_fresh, len(tab.marks))
        assert np.array_equal(np.isinf(fresh.rent), np.isinf(old_fresh.rent))
        fin = np.isfinite(old_fresh.rent)
        assert (np.abs(fresh.rent[fin] - old_fresh.rent[fin]) <= REL * old_fresh.rent[fin]).all(), cand.key
        a = replace(tab, rent=old_fresh.rent.copy())
        b = replace(tab, rent=old_fresh.rent.copy())
        got_walk = _plain_cost(a, problem.iterations)
        with _old("SPLIT_IN_PYTHON"):
            want_walk = _plain_cost(b, problem.iterations)
        assert got_walk == want_walk, cand.key
        compared += 1
    return compared


def test_the_random_instances_compared_many_tables():
    if not COMPARED:  # run alone or in another worker
        test_the_round_gives_the_old_tables_and_bounds()
    assert sum(COMPARED) >= 30 and sum(n > 0 for n in COMPARED) >= 10, COMPARED


def test_gpt3_175b_front_degrees_give_the_old_bounds():
    """GPT-3 175B's (tp 8, b 1) degrees at dp 4 and 8 on mixed-pool-8k in the megatron target's space, with
    --overlap-grad-reduce (the whole-reduce levels and the hiding floor at v = 1): four types, supply limits; some pp
    at v = 1 and 2, both degrees through one call cache (the pp-free terms kept per degree, not shared)."""
    from optsearch.candidates import node_uses
    from optsearch.cli.options import space_from_target
    from optsearch.edits import edited_problem
    from optsearch.targets import engine_problem

    problem = engine_problem("megatron", edited_problem("gpt3-175b", "mixed-pool-8k", []))
    options = space_from_target("megatron", problem)
    problem = replace(problem, overlap_grad_reduce=True)
    caches = ({}, {}, {}, {})
    compared = 0
    for dp in (4, 8):
        uses = tuple(node_uses(problem, 8, dp, 1, 1, options))
        d = degree_terms(problem, 8, dp, 1, uses, 1, 1)
        for v in (1, 2):
            compared += _compare(problem, d, [Candidate(tp=8, dp=dp, micro_batch_size=1, pp=pp, uses=uses, v=v)
                                              for pp in (16, 8)], caches)
    whole = [t for t in caches[1].values() if t is not None and t.v == 1 and t.hide is not None]
    assert compared >= 6 and len(whole) >= 3
