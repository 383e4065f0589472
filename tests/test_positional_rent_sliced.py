"""The positional bound's rent programme by slices (formulation/positional.py `_least_rent_sliced`, RENT_SLICED;
issue 14, item 3, round 23, front1t; docs/solver.md "Round 23: the positional rent programme by slices (front1t)").

R(M) is the same programme as `_least_rent`'s gather (F[s][M, u, l] = min over blocks of rent + F[s + q][M, src[u],
max(l - cap, 0)]), computed by each block's runs of marks with one cap as shifted slices, in a ring of tables, with the
layers past what the suffix can hold left infinite: the same sums and min, so the same floats. Checked bit for bit
against the gather on drawn programmes (1-4 types, blocks of 1-3 stages, one or two counted types: the gathered
rows; caps from -1 to past L, not sorted by mark) and on the v = 1 pattern-mode candidates of roomy, memory-tight and
type-boundary instances (the bound's own index and the scarcest type alone, as on Megatron 1T's pools); mutants (a
cap one short in a run, the layer range cut one short) are caught."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import optsearch.formulation.positional as positional
from draws import draws
from optsearch.solver import Memo, _candidates
from optsearch.spec.budget import Budget

from test_audit_dist_bounds import MAX_PLANS, random_instance
from test_positional_pair_cover import _narrow
from test_positional_type_boundary import boundary_instance
from test_solver_memory import overlapped_tight_case, tight_instances

_RUNS = positional._runs


def _gather(*args):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(positional, "RENT_SLICED", False)
        mp.setattr(positional, "RENT_SLICED_FROM", 0)
        return positional._least_rent(*args)


def _sliced(*args):
    return positional._least_rent_sliced(*args)


def _drawn(seed: int):
    """A random programme: (groups, supply, caps [block, M], pp, L)."""
    rng = np.random.default_rng(seed)
    G, pp, nM = int(rng.integers(1, 5)), int(rng.integers(1, 13)), int(rng.integers(1, 9))
    L = int(rng.integers(1, 4 * pp + 3))
    uses = [SimpleNamespace(node=SimpleNamespace(num_nodes_available=int(rng.integers(1, pp + 2))),
                            nodes_per_block=1, stages_per_block=int(rng.integers(1, 4))) for _ in range(G)]
    sup = positional._supply(SimpleNamespace(cand=SimpleNamespace(pp=pp, uses=uses)), int(rng.choice([1, 4, 64])))
    starts, spans, types = [], [], []
    for s in range(pp):
        for q in range(1, min(3, pp - s) + 1):
            for g in range(G):
                if q == 1 or rng.random() < 0.4:
                    starts.append(s), spans.append(q), types.append(g)
    start, stages, g = np.array(starts), np.array(spans), np.array(types)
    rents = np.where(rng.random(G) < 0.3, 2.5, rng.choice([0.1, 1.3, 2.5, 7.77, 33.3], size=G))[g] * stages
    blocks = SimpleNamespace(start=start, stages=stages, g=g, rent_usd_per_hour=rents + rng.random(len(g)) * 1e-3,
                             fixed_s=np.zeros(len(g)), step_s=np.ones(len(g)), low=np.ones(len(g), dtype=np.int64))
    caps = rng.integers(-1, max(2, 3 * L // pp + 2), size=(len(g), nM))
    if rng.random() < 0.5:
        caps = np.sort(caps, axis=1)  # as the bound asks: caps grow with the mark
    return positional._groups(blocks, pp), sup, caps.astype(np.int64), pp, L


def _instances():
    yield random_instance(5)
    yield random_instance(39)
    for seed, tight in ((4, False), (7, False), (109, True)):
        made = boundary_instance(seed, tight)
        if made is not None:
            yield made


def _asks(problem, options, narrow: bool):
    """(groups, supply, caps at every possible mark, pp, L) of every v = 1 pattern-mode candidate."""
    memo = Memo(problem, options)
    for bounded in _candidates(memo, Budget(objective="cost"))[0]:
        if bounded.cand.v != 1:
            continue
        sk = memo.skeleton(bounded.cand)
        if sk.most is None:
            continue
        with pytest.MonkeyPatch.context() as mp:
            if narrow:
                mp.setattr(positional, "_supply", _narrow)
            tab = positional._Tables(sk)
        ix = np.nonzero(tab.possible)[0]
        if len(ix) and len(tab.blocks):
            yield tab.groups, tab.sup, tab.caps(ix), tab.pp, tab.L


def _compare(asks, fn=_sliced) -> tuple[int, int, int]:
    """(asks, asks equal to the gather's bytes, finite values)."""
    n = same = finite = 0
    for ask in asks:
        want, got = _gather(*ask), fn(*ask)
        n, same, finite = n + 1, same + (want.tobytes() == got.tobytes()), finite + int(np.isfinite(want).sum())
    return n, same, finite


def test_drawn_programmes_give_the_gathers_values():
    n, same, finite = _compare(_drawn(seed) for seed in range(draws(150)))
    assert same == n and finite >= n  # every ask bit for bit, and values to compare (not all inf)


@settings(max_examples=draws(4), derandomize=True, database=None, deadline=None,
          suppress_health_check=list(HealthCheck))
@given(tight_instances())
def test_memory_tight_instances(case):
    made = overlapped_tight_case(case, max_plans=MAX_PLANS)  # the overlap on, within brute force's reach
    if made is None:
        return
    n, same, _ = _compare(a for narrow in (False, True) for a in _asks(*made, narrow))
    assert same == n


def test_instances_and_the_scarcest_type_alone():
    asks = [a for inst in _instances() for narrow in (False, True) for a in _asks(*inst, narrow)]
    n, same, finite = _compare(asks)
    assert same == n and n >= 40 and finite >= 100
    assert any(a[1].size > 1 for a in asks)  # counted types: the gathered rows are exercised


def _sums(ask, ring: bool) -> bytes:
    """_least_sum's plain path at the ask's marks, three ways (S; a rent weight, stage 0's extra and the last
    block's; first_extra alone), with SUM_RING on (every table size) or off: the values' bytes."""
    groups, sup, caps, pp, L = ask
    nM, G = caps.shape[1], int(max(grp.g.max() for gs in groups for grp in gs)) + 1
    rng = np.random.default_rng(nM * 1009 + pp * 31 + L)
    weight, first = rng.random(nM) * 1e-2, rng.random((G, L + 1, nM)) * 1e-3
    last = rng.random(G) * 1e-3
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(positional, "SUM_RING", ring)
        mp.setattr(positional, "SUM_RING_FROM", 0)
        mp.setattr(positional, "SUM_VECTOR_LIMIT", 0 if ring else positional.SUM_VECTOR_LIMIT)
        got = [positional._least_sum(groups, sup, caps, pp, L)[0],
               positional._least_sum(groups, sup, caps, pp, L, weight, first_extra=first, last_extra=last)[0],
               positional._least_sum(groups, sup, caps, pp, L, first_extra=first)[0]]
    return b"".join(v.tobytes() for v in got)


def test_the_sum_ring_gives_the_same_sums():
    """SUM_RING (_least_sum's plain path in a ring of tables, _sum_group_ring) against the fresh tables (with the
    vector path where it ran), on the drawn programmes (step and fixed times drawn) and the instances' asks."""
    asks = []
    for seed in range(draws(30)):
        groups, sup, caps, pp, L = _drawn(seed)
        rng = np.random.default_rng(seed)
        for grp in (g for gs in groups for g in gs):
            grp.step_s[:] = rng.choice([0.5, 1.0, 1.7], size=len(grp.step_s))
            grp.fixed_s[:] = rng.random(len(grp.fixed_s))
            grp.low[:] = rng.integers(0, 2, size=len(grp.low))
        asks.append((groups, sup, caps, pp, L))
    asks += [a for inst in list(_instances())[2:] for a in _asks(*inst, True)]
    same = sum(_sums(a, True) == _sums(a, False) for a in asks)
    assert same == len(asks) and len(asks) >= 30


def test_the_pair_cover_ring_gives_the_same_floor(monkeypatch):
    """PAIR_COVER_RING (_most_held_ring) against most_held's list of tables: M_pair and the programme's values at
    the floor's candidate rows, on the type-boundary instances with the bound's index narrowed (as on 1T's pools)."""
    monkeypatch.setattr(positional, "_supply", _narrow)
    monkeypatch.setattr(positional, "PAIR_COVER_ONLY_WIDER", False)
    floors = finite = 0
    for problem, options in list(_instances())[2:]:
        memo = Memo(problem, options)
        for bounded in _candidates(memo, Budget(objective="cost"))[0]:
            sk = memo.skeleton(bounded.cand)
            if bounded.cand.v != 1 or sk.most is None:
                continue
            blocks = positional._Tables(sk).blocks
            got = []
            for ring in (True, False):
                monkeypatch.setattr(positional, "PAIR_COVER_RING", ring)
                got.append([positional.pair_cover_floor_s(sk, blocks, at=at) for at in (None, 0.0, 1e9)])
            assert got[0] == got[1]
            floors, finite = floors + 1, finite + np.isfinite(got[0][0])
    assert floors >= 20 and finite >= 5


def test_mutants_are_caught(monkeypatch):
    """A run's cap one short (a block holding a layer less at some marks), and the layers computed cut one short (the
    range past what the suffix holds taken one too small): both differ from the gather on the drawn programmes."""
    asks = [_drawn(seed) for seed in range(60)]
    monkeypatch.setattr(positional, "_runs", lambda v: [(lo, hi, c - (c > 0)) for lo, hi, c in _RUNS(v)])
    n, same, _ = _compare(asks)
    assert same < n
    monkeypatch.setattr(positional, "_runs", _RUNS)
    top = positional._rent_top
    monkeypatch.setattr(positional, "_rent_top", lambda *a: max(top(*a) - 1, 0))
    n, same, _ = _compare(asks)
    assert same < n
