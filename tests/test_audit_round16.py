"""Post-merge audit of round 16 (audit8; bench/audit_round16.py runs the same checks over many seeds and kinds):
- lists2: bounds.cheap_bounds_many is cheap_bounds, every array's bytes, on T5-like, mixture-of-experts and
  interleaved memory-tight terms with --overlap-grad-reduce (the kinds tests/test_lists_round16 does not draw), and
  the floors it keeps (bounds._FLOORS) are the one-at-a-time path's; the lists do not move when BATCHED_CHEAP,
  BATCH_DEGREES, FAST_FLOOR and ONE_SUPPLY_VECTORS are flipped between the builds of one memo (the caches' keys hold
  none of them), and their bounds stay below every plan;
- inflight3: the in-flight bound with RAW_BY_MODE, WHOLE_WINDOW and LEAST_BY_ROWS flipped at random between the
  calls of one memo (the degree tables kept under a key without them) is the all-off bound, exactly;
- smalltime: every quick plan of a v > 1 candidate is a plan brute force prices for that candidate at or above its
  best, and the split by parameters keeps the least slowest stage; the solve that offers them at its in-flight step
  answers brute force on both backends, also with a clock that jumps past the limit.
Every test names functions or switches that do not exist on f6816aa (they fail there on import or on the switch):
they pin the round's new behaviour; the mutation tests show that the checks can fail."""

from __future__ import annotations

import functools
import math
from dataclasses import replace

import numpy as np
import pytest

from optsearch import bounds
from optsearch import solver as solver_module
from optsearch.bounds import DegreeTerms, cheap_bounds, cheap_bounds_many
from optsearch.candidates import in_search_space, max_stages
from optsearch.costmodel import estimate
from optsearch.formulation import heuristic
from optsearch.formulation.heuristic import _sends, _type_sequences
from optsearch.formulation.model import pattern_compute_s
from optsearch.search import objective_value
from optsearch.solver import ALL, DEFAULT, OFF, Memo, _build_candidates, _narrow_memo, solve
from optsearch.spec.budget import Budget

from test_audit_round15 import _JumpClock, _budgets, _gpt_tight, _least, _moe, _plans, _t5_tight

REL = 1e-9


def _overlap(problem):
    """--overlap-grad-reduce on and the optimizer left open: both settings, alpha_full in the terms."""
    job = problem.job.model_copy(update={"distributed_optimizer": None})
    return replace(problem, overlap_grad_reduce=True, job=job)


def _gpt_tight_interleaved():
    """_gpt_tight at v = 1, 2, 3 and up to 4 stages: 1,632 plans, 68 quick plans of v > 1 candidates, 4 type
    sequences where the split by parameters differs from the first split."""
    problem, options = _gpt_tight()
    return problem, replace(options, virtual_stages=(1, 2, 3), max_stages=4)


@functools.cache
def _interleaved_plans() -> dict:
    """_plans of _gpt_tight_interleaved, once for the tests that read them (brute force: about 1.4 s)."""
    return _plans(*_gpt_tight_interleaved())


INSTANCES = {"t5": _t5_tight, "moe": _moe, "gpt-tight": _gpt_tight,
             "gpt-tight-overlap": lambda: (_overlap(_gpt_tight()[0]), _gpt_tight()[1])}


def _bytes(arrays) -> tuple:
    return tuple((a.dtype.str, a.shape, a.tobytes()) for a in arrays)


def _lists(problem, options, budgets, memo=None) -> list:
    """Every list of each budget (settings OFF, DEFAULT, ALL; the part's DEFAULT one), as comparable rows."""
    memo = Memo(problem, options) if memo is None else memo
    part = _narrow_memo(problem, options, memo)
    out = []
    for budget in budgets:
        for settings in (OFF, DEFAULT, ALL):
            for of in (part, memo) if part is not None and settings == DEFAULT else (memo,):
                listed, total = _build_candidates(of, budget, 0.0, settings)
                out.append((total, [(b.cand, b.cand.uses, b.lower_bound.hex(), b.level, b.terms) for b in listed]))
    return out


@pytest.mark.parametrize("name", sorted(INSTANCES))
def test_the_cheap_bounds_of_many_terms_are_each_ones_on_t5_moe_and_overlap(name):
    """Every terms the lists ask for (both optimizer settings, the gather copies where any) at once and in batches of
    3, the kept floors emptied first each time: the same bytes as cheap_bounds one at a time, and the same kept
    floors."""
    problem, options = INSTANCES[name]()
    budgets = [Budget(objective="cost"), Budget(objective="time")]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(solver_module, "BATCHED_CHEAP", False)
        mp.setattr(bounds, "_FLOORS", {})
        memo = Memo(problem, options)
        _lists(problem, options, budgets, memo)
        terms = [t[0] if isinstance(t, tuple) else t for t in memo.terms.values() if t is not None]
        terms = [t for t in terms if isinstance(t, DegreeTerms)]
        pps = np.arange(1, max_stages(problem, options) + 1)
        mp.setattr(bounds, "_FLOORS", {})
        was = [_bytes(cheap_bounds(problem, d, pps)) for d in terms]
        kept = {k: v.tobytes() for k, v in bounds._FLOORS.items()}
        mp.setattr(bounds, "_FLOORS", {})
        now = [_bytes(got) for got in cheap_bounds_many(problem, terms[::-1], pps)][::-1]
        assert {k: v.tobytes() for k, v in bounds._FLOORS.items()} == kept
        mp.setattr(bounds, "_FLOORS", {})
        batched = [_bytes(got) for i in range(0, len(terms), 3) for got in cheap_bounds_many(problem, terms[i:i + 3],
                                                                                           pps)]
    assert len(terms) > 3 and now == was and batched == was
    assert len({len(d.slots) for d in terms}) >= 1


@pytest.mark.parametrize("name", ["moe", "gpt-tight-overlap"])
def test_the_lists_stay_when_the_switches_flip_between_builds_of_one_memo(name, monkeypatch):
    """BATCHED_CHEAP, BATCH_DEGREES, FAST_FLOOR and ONE_SUPPLY_VECTORS are in no cache key (Memo.cheap_by_pp,
    bounds._FLOORS): flipped between the builds of one memo (and a new memo on the floors kept by the other path),
    every list equals the one built with the switch off on a fresh memo, row for row, bound bit for bit; and every
    listed candidate's bound lies at or below each of its plans that meets the budget."""
    problem, options = INSTANCES[name]()
    by_cand = _plans(problem, options)
    budgets = _budgets(by_cand)[:4]
    monkeypatch.setattr(bounds, "_FLOORS", {})
    monkeypatch.setattr(solver_module, "BATCHED_CHEAP", False)
    base = _lists(problem, options, budgets)
    monkeypatch.setattr(bounds, "_FLOORS", {})
    memo = Memo(problem, options)
    for step, (on, size, fast) in enumerate([(True, 3, True), (False, 3, False), (True, 2, False), (True, 128, True)]):
        monkeypatch.setattr(solver_module, "BATCHED_CHEAP", on)
        monkeypatch.setattr(solver_module, "BATCH_DEGREES", size)
        monkeypatch.setattr(bounds, "FAST_FLOOR", fast)
        monkeypatch.setattr(bounds, "ONE_SUPPLY_VECTORS", fast)
        if step == 2:
            memo = Memo(problem, options)
        got = _lists(problem, options, budgets, memo)
        assert [(t, [(r[0].key, r[1], r[2], r[3], r[4]) for r in rows]) for t, rows in got] == \
            [(t, [(r[0].key, r[1], r[2], r[3], r[4]) for r in rows]) for t, rows in base], step
    checked = 0
    for budget, (_, rows) in zip(budgets, [entry for i, entry in enumerate(base) if i % 4 == 3]):  # the ALL lists
        for cand, _, lower, _, _ in rows:
            best = _least(by_cand[cand.key][1], budget) if cand.key in by_cand else None
            if best is not None:
                assert float.fromhex(lower) <= best * (1 + REL), (cand.key, lower, best)
                checked += 1
    assert checked > 0


def _slowest(sk, seq, parts) -> float:
    """The slowest stage of a split as split_layers prices it (compute of the stage's pattern plus its sends)."""
    e, pp = _sends(sk, seq), sk.cand.pp
    return max(pattern_compute_s(sk, s, seq[s], n) + (e[s - 1] if s > 0 else 0.0) + (e[s] if s < pp - 1 else 0.0)
               for s, n in enumerate(parts))


def _check_quick(problem, options, by_cand=None) -> tuple[int, int]:
    """Every quick plan of every v > 1 candidate of the DEFAULT lists (cost, time): its candidate's, in the space,
    fits, the cost model's estimate, at or above brute force's best plan of that candidate (by_cand: None, no plan
    is compared); the split by parameters as slow as the first split at its slowest stage. Returns (plans, splits
    that differ)."""
    plans = differ = 0
    for objective in ("cost", "time"):
        memo = Memo(problem, options)
        listed, _ = solver_module._candidates(memo, Budget(objective=objective), 0.0, DEFAULT)
        for item in listed:
            cand = item.cand
            if cand.v == 1:
                continue
            sk = memo.skeleton(cand)
            for plan, est in memo.quick_plans(sk):
                assert (plan.tp, plan.dp, plan.micro_batch_size, plan.pp, plan.cp, plan.virtual_stages) == (
                    cand.tp, cand.dp, cand.micro_batch_size, cand.pp, cand.cp, cand.v)
                assert in_search_space(problem, plan, options) and est.fits and est == estimate(problem, plan)
                plans += 1
                if by_cand is None:
                    continue
                best = min(objective_value(e, objective) for _, e in by_cand[cand.key][1])
                assert objective_value(est, objective) >= best * (1 - REL), (cand.key, plan)
            for seq in _type_sequences(sk) if sk.patterns is not None else ():
                first, other = heuristic.split_layers(sk, seq), heuristic.split_layers(sk, seq, by_params=True)
                assert (first is None) == (other is None)
                if first is not None and other != first:
                    assert sum(other) == sum(first)
                    assert _slowest(sk, seq, other) == _slowest(sk, seq, first), ("slower", cand.key, first, other)
                    differ += 1
    return plans, differ


def test_an_interleaved_candidates_quick_plans_are_brute_force_plans_of_it():
    problem, options = _gpt_tight_interleaved()
    plans, differ = _check_quick(problem, options, _interleaved_plans())
    assert plans > 0 and differ > 0


def test_the_quick_check_fails_on_a_split_that_ignores_the_slowest_stage(monkeypatch):
    """A mutation: the split by parameters's second programme over every count (not only those within the least
    slowest stage), valued to load the first stage, is caught (a slower slowest stage), so the check can fail."""
    split, least = heuristic.split_layers, heuristic._least_max_split
    state = {"by": False, "n": 0, "first": None}

    def wrapped_split(f, seq, by_params=False):
        state.update(by=by_params, n=0)
        try:
            return split(f, seq, by_params)
        finally:
            state["by"] = False

    def wrapped_least(stages, L):
        if state["by"]:
            state["n"] += 1
            if state["n"] == 1:
                state["first"] = stages
            else:  # every count of the first programme; the most layers on stage 0
                stages = [(c, -c.astype(float) if s == 0 else np.full(len(c), -1e18))
                          for s, (c, _) in enumerate(state["first"])]
        return least(stages, L)

    monkeypatch.setattr(heuristic, "split_layers", wrapped_split)
    monkeypatch.setattr(heuristic, "_least_max_split", wrapped_least)
    with pytest.raises(AssertionError, match="slower"):
        _check_quick(*_gpt_tight_interleaved())


def test_the_solve_with_interleaved_quick_plans_answers_brute_force_with_a_jumping_clock(monkeypatch):
    """The in-flight step offers a v > 1 candidate's own quick plans (counted: some are priced during the solves):
    under no budget and a deadline and a cost cap at plans' exact values, both backends answer brute force's value,
    every plan re-priced to it; with a clock that jumps a day at its 5th or 40th reading (a 5 s limit; CP-SAT under
    each budget, CBC under the cost cap) no answer is an unproven optimum or infeasible, no bound lies above the
    optimum, and every plan is re-priced to its value."""
    from priced import solve_exhaustive

    problem, options = _gpt_tight()
    priced = []
    original = Memo.quick_plans

    def counted(self, sk):
        out = original(self, sk)
        if sk.cand.v > 1:
            priced.append(len(out))
        return out

    monkeypatch.setattr(Memo, "quick_plans", counted)
    ests = [e for _, plans in _plans(problem, options).values() for _, e in plans]
    fastest = min(ests, key=lambda e: e.training_time_s)
    cheapest = min(ests, key=lambda e: e.cost_usd)
    for budget in (Budget(objective="time"), Budget(objective="cost", max_time_s=fastest.training_time_s),
                   Budget(objective="time", max_cost_usd=cheapest.cost_usd)):
        truth = solve_exhaustive(problem, budget, options=options)
        for backend, ats in (("cpsat", (5, 40)), ("cbc", (40,) if budget.max_cost_usd else ())):
            got = solve(problem, budget, solver=backend, options=options)
            where = (backend, budget.model_dump(exclude_none=True), got.status, got.objective_value,
                     truth.status, truth.objective_value)
            assert got.status == truth.status, where
            if truth.status == "optimal":
                assert math.isclose(got.objective_value, truth.objective_value, rel_tol=1e-6), where
                assert in_search_space(problem, got.plan, options)
                assert math.isclose(objective_value(estimate(problem, got.plan), budget.objective),
                                    got.objective_value, rel_tol=1e-9), where
            for at in ats:
                with pytest.MonkeyPatch.context() as mp:
                    mp.setattr(solver_module, "time", _JumpClock(at, 86_400.0))
                    cut = solve(problem, budget, solver=backend, options=options, time_limit_s=5.0)
                if cut.status == "optimal":
                    assert math.isclose(cut.objective_value, truth.objective_value, rel_tol=1e-6), where
                assert cut.status != "infeasible" or truth.status == "infeasible", where
                if cut.bound is not None and truth.status == "optimal":
                    assert cut.bound <= truth.objective_value * (1 + 1e-6), (cut.bound,) + where
                if cut.plan is not None:
                    assert math.isclose(objective_value(estimate(problem, cut.plan), budget.objective),
                                        cut.objective_value, rel_tol=1e-9), where
    assert any(priced)


def test_the_inflight_bound_stays_when_inflight3s_switches_flip_between_calls_of_one_memo():
    """inflight3 (merged at 24c4307): RAW_BY_MODE, WHOLE_WINDOW and LEAST_BY_ROWS give the same floats, and the
    degree's tables kept in Memo.calls have no switch in their key: the in-flight bound with the three flipped at
    random before every call of one memo (candidates in a shuffled order, so a degree's window grows and is
    shared across pp) equals the bound with all three off on a fresh memo, exactly, and lies at or below every plan
    of its candidate that meets the budget. The degree tables answer some of the calls (counted)."""
    import random

    from optsearch import inflight as inflight_module
    from optsearch.solver import REFINED, Bounded, _inflight_bounded

    problem, options = _gpt_tight_interleaved()
    by_cand = _interleaved_plans()
    rng = random.Random(3)
    keys = list(by_cand)
    asked = []
    original = inflight_module._DegreePart.least_times

    def counted(self, count, v, L):
        asked.append(v)
        return original(self, count, v, L)

    names = ("RAW_BY_MODE", "WHOLE_WINDOW", "LEAST_BY_ROWS")
    checked = 0
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(inflight_module._DegreePart, "least_times", counted)
        for budget in _budgets(by_cand)[:5]:
            rng.shuffle(keys)
            got = {}
            for mixed in (False, True):
                memo = Memo(problem, options)
                for key in keys:
                    for name in names:
                        mp.setattr(inflight_module, name, mixed and rng.random() < 0.5)
                    cand = by_cand[key][0]
                    got[(key, mixed)] = _inflight_bounded(memo, budget, Bounded(
                        cand, 0.0, memo.degree_terms(cand.tp, cand.dp, cand.micro_batch_size, cand.uses, cand.ep,
                                                     cand.cp, cand.dist), REFINED))
            for key in keys:
                assert got[(key, True)] == got[(key, False)], (key, budget, got[(key, True)], got[(key, False)])
                best = _least(by_cand[key][1], budget)
                if best is not None:
                    assert got[(key, True)] is not None and got[(key, True)] <= best * (1 + REL)
                    checked += 1
    assert checked > 0 and 1 in asked and 2 in asked, sorted(set(asked))


def test_a_memos_quick_plans_of_interleaved_candidates_follow_the_split_switch(monkeypatch):
    """Memo.quick_plans keeps a v > 1 candidate's plans by key with heuristic.PARAM_SPLIT (audit8's note: keyed by
    the candidate alone, a memo gave the plans of the switch it first saw)."""
    problem, options = _gpt_tight_interleaved()
    memo = Memo(problem, options)
    listed, _ = solver_module._candidates(memo, Budget(objective="time"), 0.0, DEFAULT)
    differ = 0
    for item in (x for x in listed if x.cand.v > 1):
        on = memo.quick_plans(memo.skeleton(item.cand))
        monkeypatch.setattr(heuristic, "PARAM_SPLIT", False)
        again = [plan for plan, _ in memo.quick_plans(memo.skeleton(item.cand))]
        fresh_memo = Memo(problem, options)
        fresh = [plan for plan, _ in fresh_memo.quick_plans(fresh_memo.skeleton(item.cand))]
        monkeypatch.setattr(heuristic, "PARAM_SPLIT", True)
        assert again == fresh, item.cand.key
        differ += len(on) != len(fresh)
    assert differ > 0  # the instance has candidates whose plans the switch changes
