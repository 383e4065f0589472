"""The pair-cover floors' supply index over the counts a pipeline can use (formulation/positional.py _pair_supply,
PAIR_COVER_WITHIN_PP; issue 14, item 3, round 22, deep1t22; docs/solver.md "Round 22: the pair cover's supply index
within pp (deep1t22, 2026-11-25)").

The pair-cover programmes (pair_cover_floor_s, pair_cover_both_floor_s) count the blocks of each binding type a
suffix of the pipeline uses. Every block holds at least one stage, so a suffix from stage s uses at most pp - s
counted blocks: the index keeps only the count vectors whose sum is at most pp, ordered by that sum, and each stage
computes only the states its suffix can reach. Over the same counted types the floors are the full mixed-radix
index's bit for bit; within the same PAIR_COVER_STATES it counts more types where the full product is over the limit
(Megatron 1T on mixed-pool-3k: 2,209 states for two types of 64 blocks at 65 stages, against 4,225). Checked on the
brute-force instances of round 18's type-boundary generator (two or three types, one to three nodes each), roomy
and memory-tight: the floors with and without the index equal where both count every binding type; at a limit
where only this index counts them all, every plan's slowest stage is at least its floor, and the floor is finite on
some candidates; an index that drops one reachable count per stage (an off-by-one in the reach) is caught."""

from __future__ import annotations

import math

import numpy as np
import pytest

import optsearch.formulation.positional as positional
from optsearch.solver import Memo

from test_audit_dist_bounds import pattern_plans
from test_positional_pair_cover import _narrow
from test_positional_type_boundary import boundary_instance

_PAIR_SUPPLY = positional._pair_supply  # the function under test, before any monkeypatch
_FLOORS = (positional.pair_cover_floor_s, positional.pair_cover_both_floor_s)

# Seeds measured when written: roomy 4 and 7, memory-tight 109 (34 candidates; the two floors finite 40 times, the
# least slowest stage / floor 1.0000: tight; at the least limit that counts every binding type within pp the full
# index counts fewer on 2 of them). The mutant below: 22 of 34 equal, and floors above plans (or inf).
ROOMY, TIGHT = (4, 7), (109,)


def _cases():
    for seeds, tight in ((ROOMY, False), (TIGHT, True)):
        for seed in seeds:
            made = boundary_instance(seed, tight)
            if made is not None:
                yield made


def _floors(sk, blocks, within: bool, states: int) -> tuple[float, float]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(positional, "PAIR_COVER_WITHIN_PP", within)
        mp.setattr(positional, "PAIR_COVER_STATES", states)
        return tuple(fn(sk, blocks) for fn in _FLOORS)


def _candidates(problem, options):
    """(skeleton, its plans' slowest stages) for every v = 1 candidate with a pattern-mode skeleton."""
    memo = Memo(problem, options)
    slowest: dict = {}
    skeletons: dict = {}
    for cand, plan, est, sk in pattern_plans(problem, options, memo):
        skeletons[cand.key] = sk
        slowest.setdefault(cand.key, []).append(max(s.time_s for s in est.stages))
    return [(skeletons[k], slowest[k]) for k in skeletons]


def _all_counted(sk) -> int:
    """The least limit at which the index within pp counts every binding type."""
    return _PAIR_SUPPLY(sk, 10**9)[0].size


def _walk(monkeypatch, supply=_PAIR_SUPPLY) -> tuple[int, int, int, float]:
    """(candidates whose floors equal the full index's, candidates where the full index at the limit counts fewer
    types, candidates with a finite floor there, the least plan's slowest stage / floor over those)."""
    monkeypatch.setattr(positional, "_supply", _narrow)  # the bound's own index: the scarcest binding type (1T's)
    monkeypatch.setattr(positional, "PAIR_COVER_ONLY_WIDER", False)  # run also where the counts are the bound's
    monkeypatch.setattr(positional, "_pair_supply", supply)
    equal = fewer = finite = 0
    least = math.inf
    for problem, options in _cases():
        for sk, slowest in _candidates(problem, options):
            blocks = positional.tables(sk).blocks
            limit = _all_counted(sk)
            within = _floors(sk, blocks, True, limit)
            full = _floors(sk, blocks, False, 10**9)  # every binding type counted, no reach
            equal += within == full
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(positional, "PAIR_COVER_WITHIN_PP", False)
                counted = positional._counted(positional._pair_supply(sk, limit)[0])
            if counted < positional._counted(_PAIR_SUPPLY(sk, limit)[0]):
                fewer += 1
            for floor in within:
                if math.isfinite(floor) and floor > 0:
                    finite += 1
                    least = min(least, min(slowest) / floor)
                elif floor == math.inf:  # claims no plan: every candidate here has one
                    least = 0.0
    return equal, fewer, finite, least


def _total(monkeypatch) -> int:
    return sum(len(_candidates(p, o)) for p, o in _cases())


def test_the_floors_equal_the_full_index_and_lie_below_every_plan(monkeypatch):
    equal, fewer, finite, least = _walk(monkeypatch)
    assert equal == _total(monkeypatch)  # bit for bit where both count every binding type
    assert fewer and finite  # the index counts more within the limit somewhere, and the floors ran: not vacuous
    assert least >= 1 - 1e-9


def test_a_reach_one_short_is_caught(monkeypatch):
    """A mutant: each stage computes the states of sum <= pp - s - 1 (one reachable count dropped per stage); it
    over-tightens (a plan's own counts are cut), and the checks above catch it."""

    def short(f, limit):
        sup, upto = _PAIR_SUPPLY(f, limit)
        return sup, None if upto is None else np.concatenate([upto[:1], upto[:-1]])

    equal, _, _, least = _walk(monkeypatch, short)
    assert equal < _total(monkeypatch) or least < 1 - 1e-9


def test_the_index_within_pp():
    """The index's own shape on Megatron 1T 3k's 65/66-stage (tp 4, dp 2, cp 2) candidates: three types of 64
    two-node blocks, two counted in 2,209 / 2,272 states (sum <= pp) where the full index (65^2 = 4,225) counts one
    within PAIR_COVER_STATES; index 0 is no block, src steps down one block of its type, and upto counts the states
    by sum."""

    class _Node:
        def __init__(self, n):
            self.num_nodes_available = n

    class _Use:
        def __init__(self):
            self.node, self.nodes_per_block, self.stages_per_block = _Node(128), 2, 1

    class _Cand:
        def __init__(self, pp):
            self.pp, self.uses = pp, (_Use(), _Use(), _Use())

    class _F:
        def __init__(self, pp):
            self.cand = _Cand(pp)

    for pp, size in ((65, 2209), (66, 2272)):
        sup, upto = _PAIR_SUPPLY(_F(pp), 4096)
        assert sup.size == size and positional._counted(sup) == 2 and upto[-1] == size and upto[0] == 1
        full = positional._supply(_F(pp), 4096)
        assert positional._counted(full) == 1
        counts = np.zeros((sup.size, 3), dtype=np.int64)  # each state's counts, rebuilt through src from state 0
        for u in range(1, sup.size):
            for g in range(3):
                prev = sup.src[g][u]
                if prev < sup.size and prev != u:
                    counts[u] = counts[prev]
                    counts[u, g] += 1
                    break
        assert (counts.sum(axis=1) <= pp).all() and (np.diff(counts.sum(axis=1)) >= 0).all()
        assert len({tuple(c) for c in counts}) == sup.size  # every state a distinct count vector
        assert (np.searchsorted(counts.sum(axis=1), np.arange(pp + 1), side="right") == upto).all()
