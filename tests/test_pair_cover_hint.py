"""The pair-cover floor's search with a hint (formulation/positional.py _least_covering's hint, PAIR_COVER_HINT;
issue 14, item 3, round 24, mpair1t; docs/solver.md "Round 24: the pair cover's search from its siblings' value").

pair_cover_floor_s's search finds the least of the sorted values at which the most-held programme (monotone in X)
reaches L. With a hint (the value a sibling candidate, the same key but pp, found last) it first runs the programme at
the value below the hint and at the hint: the hint is the answer where only the second reaches L, and otherwise the
two narrow the search. The answer is the same least index either way: checked with every value of the search as the
hint on synthetic step functions and on the real programmes of small instances (roomy and memory-tight, drawn
seeds), and the positional bounds minimizing cost with the switch off and on, bit for bit; a variant that trusts a
hint the programme reaches without the test below it differs (the test catches it)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from draws import draws

import optsearch.formulation.positional as positional
from optsearch.solver import Memo, _candidates
from optsearch.spec.budget import Budget

from test_positional_pair_cover import _narrow
from test_positional_type_boundary import boundary_instance

_SEARCH = positional._least_covering  # the function under test, before any monkeypatch


def _trusting(values, most_held, L, hint=None):
    """An invalid variant: the hint taken wherever the programme reaches L there (the value below not tested)."""
    j = int(np.searchsorted(values, hint)) if hint is not None else 0
    if 1 <= j < len(values) and values[j] == hint and most_held(values[j:j + 1])[0] >= L:
        return float(values[j]) * (1 - 1e-12)
    return _SEARCH(values, most_held, L)


def _disagreements(search, values, most_held, L) -> int:
    """How many hints (None, every value, one between two values, one past them) give another answer than none."""
    plain = _SEARCH(values, most_held, L)
    hints = [None, *values.tolist(), float(values[0] - 1.0), float((values[0] + values[-1]) / 2), float(values[-1] + 1)]
    return sum(search(values, most_held, L, h) != plain for h in hints)


def test_every_hint_gives_the_search_without_one():
    """Step functions over 1-40 sorted values reaching L at every index (and nowhere): every hint, the same answer;
    the trusting variant differs on some."""
    rng = np.random.default_rng(24)
    caught = 0
    for n in (1, 2, 3, 5, 9, 17, 40):
        values = np.unique(rng.uniform(0.01, 0.1, n))
        for a in range(len(values) + 1):  # the least index that reaches L (len: none)
            def most_held(Xs, a=a, values=values):
                return np.where(np.searchsorted(values, Xs) >= a, 10.0, 3.0)
            assert _disagreements(_SEARCH, values, most_held, 10) == 0
            caught += _disagreements(_trusting, values, most_held, 10)
    assert caught  # the check above would see an invalid search


def _recorded(monkeypatch) -> list:
    """pair_cover_floor_s's searches as they run without a hint: (values, most_held, L) each."""
    got = []

    def record(values, most_held, L, hint=None):
        got.append((values.copy(), most_held, L))
        return _SEARCH(values, most_held, L, hint)

    monkeypatch.setattr(positional, "_least_covering", record)
    return got


def _check(monkeypatch, problem, options) -> tuple[int, int]:
    """On every pattern-mode candidate of the instance minimizing cost: every value of its pair-cover search as the
    hint gives the same floor; the positional bounds with PAIR_COVER_HINT off and on (siblings in turn, no cutoff and
    at the bound itself), bit for bit. (searches checked, those with a finite answer above the least value: there the
    answer as the hint settles the search in one programme)."""
    memo = Memo(problem, options)
    budget = Budget(objective="cost")
    bounded, _ = _candidates(memo, budget)
    searches = settled = 0
    for item in bounded:
        sk = memo.skeleton(item.cand)
        if sk.most is None:
            continue
        tab = positional.tables(sk)
        least = tab.marks[tab.possible][:1]
        if not len(least) or len(tab.blocks) == 0:
            continue
        monkeypatch.setattr(positional, "PAIR_COVER_HINT", False)
        got = _recorded(monkeypatch)
        positional.pair_cover_floor_s(sk, tab.blocks, float(least[0]))
        monkeypatch.setattr(positional, "_least_covering", _SEARCH)
        for values, most_held, L in got:
            assert _disagreements(_SEARCH, values, most_held, L) == 0
            searches += 1
            found = _SEARCH(values, most_held, L)
            settled += bool(math.isfinite(found) and found > values[0])  # its own value as a hint: the hit path
    free: dict = {}  # key -> the bound with no cutoff, the switch off
    for cutoff_scale in (None, 1.0):
        bounds = {}
        for on in (False, True):
            monkeypatch.setattr(positional, "PAIR_COVER_HINT", on)
            positional._PAIR_HINTS.clear()
            for item in sorted(bounded, key=lambda b: b.cand.key[3]):  # pp in turn: siblings' hints
                sk = memo.skeleton(item.cand)
                if sk.most is None:
                    continue
                cutoff = math.inf
                if cutoff_scale is not None:
                    cutoff = free[item.cand.key] * cutoff_scale
                sk.positional = None
                bounds[(on, item.cand.key)] = positional.positional_bound(sk, budget, cutoff).bound
                if cutoff_scale is None and not on:
                    free[item.cand.key] = bounds[(on, item.cand.key)]
        for key, value in bounds.items():
            if key[0]:
                assert np.float64(value).tobytes() == np.float64(bounds[(False, key[1])]).tobytes(), key
    return searches, settled


@pytest.mark.parametrize("seed, tight", [(7, False), (9, False), (109, True)])
def test_the_hinted_search_is_the_search_on_instances(monkeypatch, seed, tight):
    monkeypatch.setattr(positional, "_supply", _narrow)  # the bound's index narrowed: the floor runs (as on 1T)
    made = boundary_instance(seed, tight)
    assert made is not None
    searches, settled = _check(monkeypatch, *made)
    assert searches and settled  # the floor's search ran, and the hint's hit path with the real programme


@settings(max_examples=draws(3), derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.integers(0, 400), st.booleans())
def test_the_hinted_search_is_the_search_on_drawn_instances(monkeypatch, seed, tight):
    made = boundary_instance(seed, tight)
    if made is None:
        return
    with monkeypatch.context() as m:
        m.setattr(positional, "_supply", _narrow)
        _check(m, *made)
