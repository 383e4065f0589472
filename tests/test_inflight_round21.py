"""The in-flight step's slowest-stage floors of a batch computed together (issue 14, item 3, round 21, costflight;
docs/solver.md "Round 21: the cost rows' loop ... (costflight, 2026-11-25)").

inflight.sharpened_many computes the slowest-stage floors its walks will ask for (bounds.slowest_floor at each
candidate's v) for the whole batch at once (inflight._slowest_floors_ahead: bounds.slowest_floors_many, now at any
v). No bound changes: the floors must be `least_slowest_stage_s`' floats bit for bit at every v, and the walks'
bounds sharpened's one at a time.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from optsearch import bounds, inflight
from optsearch.bounds import CandidateBound, least_slowest_stage_s, slowest_floors_many
from optsearch.inflight import sharpened, sharpened_many
from optsearch.spec.budget import Budget

from test_lists_round16 import _all_terms, _gpt2_medium
from test_rent_batch import _catalog

START = CandidateBound(True, 0.0, 0.0, 0.0)


def _one_at_a_time(ds, L, P, v) -> list[bytes]:
    return [least_slowest_stage_s(d, L, np.arange(1, P + 1), v=v).tobytes() for d in ds]


@pytest.mark.parametrize("v", [2, 3, 4])
def test_the_floors_of_many_terms_at_v_are_each_ones(v, monkeypatch):
    """GPT-2 medium's terms (the megatron target's space, two and three node types) and hand-made edge cases (no
    type holds v layers, sends of 0, one layer per stage, a slow type with many slots), at v = 2, 3, 4: the batched
    floors equal the one-at-a-time ones, and slowest_floors_many keeps what slowest_floor would."""
    problem, options = _gpt2_medium()
    terms = _all_terms(problem, options)
    L = problem.model.num_layers
    base = next(d for d in terms if len(d.slots) == 2)
    hand = [replace(base, **c) for c in (dict(max_layers_per_stage=(1, 1)), dict(send_min_s=0.0),
                                          dict(step_min_s=(1e-3, 4e-3), slots=(2, 40), max_layers_per_stage=(24, 3)),
                                          dict(max_layers_per_stage=(v - 1, 24), slots=(30, 1)), dict())]
    compared = 0
    for G in sorted({len(d.slots) for d in terms}):
        group = [d for d in terms if len(d.slots) == G][:40] + (hand if G == 2 else [])
        want = _one_at_a_time(group, L, 64, v)
        assert [row.tobytes() for row in bounds._least_slowest_many(group, L, 64, v)] == want
        monkeypatch.setattr(bounds, "_FLOORS", {})
        got = slowest_floors_many(group, L, np.arange(1, 11), v)
        assert [row.tobytes() for row in got] == [np.frombuffer(w)[:10].tobytes() for w in want]
        for d, w in zip(group, want):  # what slowest_floor then reads: the same array
            assert bounds.slowest_floor(d, L, np.arange(1, 65), v=v).tobytes() == w
        compared += len(group)
        # and the v = 1 floors are not what v asks (the key holds v): a floor at v = 1 differs somewhere
        assert any(a != b for a, b in zip(want, _one_at_a_time(group, L, 64, 1)))
    assert compared >= 40


def test_the_walks_with_the_floors_ahead_give_the_one_at_a_time_bounds(monkeypatch):
    """sharpened_many with SLOWEST_AT_ONCE on (the floors of the batch computed first, from an empty store) gives
    sharpened's bounds one at a time (floors computed each alone, from an empty store), for v = 1, 2 and 3
    candidates of GPT-2 XL on mixed-pool-8k (three node types), with no cutoff and a cutoff at each bound."""
    problem, _, base = _catalog()
    cands = [(d, replace(c, pp=pp, v=v)) for c, d in base for v, pp in ((1, c.pp), (2, c.pp), (3, 6), (2, 8))]
    cands = list({c.key: (d, c) for d, c in cands}.values())
    budget = Budget(objective="cost")
    monkeypatch.setattr(bounds, "_FLOORS", {})
    free = [sharpened(problem, {}, d, c, budget, START, {}) for d, c in cands]
    assert sum(b.feasible for b in free) >= 8
    for cut in (False, True):
        cutoffs = [b.cost_per_iteration_usd * problem.iterations if cut and b.feasible else math.inf for b in free]
        monkeypatch.setattr(bounds, "_FLOORS", {})
        want = [sharpened(problem, {}, d, c, budget, START, {}, x) for (d, c), x in zip(cands, cutoffs)]
        monkeypatch.setattr(bounds, "_FLOORS", {})
        calls = []
        with monkeypatch.context() as m:
            m.setattr(inflight, "slowest_floors_many", lambda *a: calls.append(a) or slowest_floors_many(*a))
            got = sharpened_many(problem, {}, [(d, c, budget, START, x, math.inf)
                                               for (d, c), x in zip(cands, cutoffs)], {})
        assert got == want
        assert {a[3] for a in calls} >= {2, 3}  # the interleaved floors came from the batch
