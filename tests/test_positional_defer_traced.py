"""Two exact savings in the positional bound's step (formulation/positional.py; issue 14, item 3, round 22,
quick1t; docs/solver.md "Round 22: Megatron 1T 3k cost, the half-dp quick plans, the traced sequence and the
deferred pair cover (quick1t, 2026-11-25)").

SEQUENCE_TRACED: _Tables.sequence walks the plain sum programme's tables back along one path (_traced_sequence)
instead of recording every state's choice (_least_sum's choices path): the same type sequence at every mark and
weight asked. PAIR_COVER_DEFER: minimizing cost with a cutoff, the walk runs first without M_pair, which is applied
(and the walk run again) only where M_pair lies above the least mark of the answer's kept entries or the candidate
is closed: the same bound and the same sequences as applying it first. Checked on round 18's type-boundary
instances (roomy seeds 4 and 7, memory-tight 109) with the bound's own index narrowed to the scarcest binding type
(as on Megatron 1T's pools), so that M_pair runs and lifts; mutants (tables off by a hair; the test of M_pair
skipped) are caught."""

from __future__ import annotations

import math

import numpy as np

import optsearch.formulation.positional as positional
from optsearch.solver import Memo
from optsearch.spec.budget import Budget

from test_audit_dist_bounds import space_plans
from test_positional_pair_cover import _narrow
from test_positional_pair_cover_within import _cases  # round 18's roomy seeds 4, 7 and memory-tight 109

_LEAST_SUM = positional._least_sum


def _candidates(problem, options):
    """(candidate, the least cost of its plans) for every v = 1 candidate with a pattern-mode skeleton."""
    memo = Memo(problem, options)
    least: dict = {}
    for cand, plan, est in space_plans(problem, options):
        if cand.v == 1 and memo.skeleton(cand).most is not None:
            least[cand.key] = min(least.get(cand.key, (math.inf, cand))[0], est.cost_usd), cand
    return list(least.values())


def _sequences_compared() -> tuple[int, int, int]:
    """(asks, asks where the traced sequence equals the choices path's, asks with a sequence)."""
    asked = same = some = 0
    for problem, options in _cases():
        memo = Memo(problem, options)
        for _, cand in _candidates(problem, options):
            tab = positional.tables(memo.skeleton(cand))
            for i in range(len(tab.marks)):
                caps = tab.caps(np.array([i]))
                for weight in (None, 1e-3, 1.0):
                    w = None if weight is None else np.array([weight])
                    traced = positional._traced_sequence(tab.groups, tab.sup, caps, tab.pp, tab.L, w, tab.last)
                    _, pick = _LEAST_SUM(tab.groups, tab.sup, caps, tab.pp, tab.L, w, choices=True,
                                         last_extra=tab.last)
                    chosen = positional._sequence(pick, tab.sup, tab.pp, tab.L)
                    asked, same, some = asked + 1, same + (traced == chosen), some + (chosen is not None)
    return asked, same, some


def test_the_traced_sequence_is_the_choices_paths():
    asked, same, some = _sequences_compared()
    assert same == asked and some >= asked // 4  # every ask the same, and most have a sequence: not vacuous


def test_tables_a_hair_off_are_caught(monkeypatch):
    """A mutant: the traced walk reads tables whose every value is a hair above the programme's (as if summed in
    another order): it finds no equal sum and gives no sequence, which the comparison sees."""

    def off(*args, kept=None, **kw):
        got = _LEAST_SUM(*args, kept=kept, **kw)
        if kept is not None:
            kept[:] = [F * (1 + 1e-12) for F in kept]
        return got

    monkeypatch.setattr(positional, "_least_sum", off)
    asked, same, _ = _sequences_compared()
    assert same < asked


def _bounds_compared(monkeypatch) -> tuple[int, int, int]:
    """(asks, asks with the same bound and sequences deferred and not, asks where M_pair moved the bound)."""
    monkeypatch.setattr(positional, "_supply", _narrow)  # the bound's own index: the scarcest binding type (1T's)
    monkeypatch.setattr(positional, "PAIR_COVER_ONLY_WIDER", False)  # M_pair runs also where the counts are the same
    budget = Budget(objective="cost")
    asked = same = lifted = 0
    for problem, options in _cases():
        memos = {on: Memo(problem, options) for on in (True, False)}
        plain = Memo(problem, options)
        for cost, cand in _candidates(problem, options):
            for cutoff in (cost * 0.99, cost * 1.001, cost * 1.2):
                got = {}
                for on in (True, False):
                    monkeypatch.setattr(positional, "PAIR_COVER_DEFER", on)
                    got[on] = positional.positional_bound(memos[on].skeleton(cand), budget, cutoff=cutoff)
                monkeypatch.setattr(positional, "PAIR_COVER", False)
                without = positional.positional_bound(plain.skeleton(cand), budget, cutoff=cutoff)
                monkeypatch.setattr(positional, "PAIR_COVER", True)
                asked += 1
                same += got[True] == got[False]
                lifted += got[False].bound != without.bound
    return asked, same, lifted


def test_the_deferred_pair_cover_gives_the_same_bounds(monkeypatch):
    asked, same, lifted = _bounds_compared(monkeypatch)
    assert same == asked and lifted  # M_pair moves some bounds: the deferral is tested where it matters


def test_the_pair_cover_test_skipped_is_caught(monkeypatch):
    """A mutant: M_pair taken to lie below the answer's marks without the test (never applied while open)."""
    monkeypatch.setattr(positional._Tables, "pair_cover_within", lambda self, f, at: True)
    asked, same, _ = _bounds_compared(monkeypatch)
    assert same < asked


def _programmes_compared(monkeypatch, short: bool = False) -> tuple[int, int]:
    """(programmes, those whose values equal the full index's bit for bit), SUPPLY_REACH on (or, short: a mutant
    whose reach is one state short) against off, over every candidate's marks (R, C's cover, S with a rent weight)."""
    monkeypatch.setattr(positional, "_supply", _narrow)  # fewer states than blocks: the reach cuts something
    asked = same = 0
    for problem, options in _cases():
        memo = Memo(problem, options)
        for _, cand in _candidates(problem, options):
            tab = positional.tables(memo.skeleton(cand))
            if tab.sup.reach is None:
                continue
            reach = np.maximum(tab.sup.reach - 1, 1) if short else tab.sup.reach
            on = positional._Supply(size=tab.sup.size, src=tab.sup.src, reach=reach)
            off = positional._Supply(size=tab.sup.size, src=tab.sup.src)
            caps = tab.caps(np.arange(len(tab.marks)))
            weight = np.full(len(tab.marks), 1e-3)
            for fn in (lambda sup: positional._least_rent(tab.groups, sup, caps, tab.pp, tab.L),
                       lambda sup: positional._most_cover(tab.groups, sup, caps, tab.pp),
                       lambda sup: _LEAST_SUM(tab.groups, sup, caps, tab.pp, tab.L, weight)[0]):
                asked, same = asked + 1, same + np.array_equal(fn(on), fn(off))
    return asked, same


def test_the_reach_gives_the_same_programmes(monkeypatch):
    asked, same = _programmes_compared(monkeypatch)
    assert asked and same == asked


def test_a_reach_one_short_is_caught(monkeypatch):
    asked, same = _programmes_compared(monkeypatch, short=True)
    assert same < asked
