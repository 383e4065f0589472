"""The cheap bounds of many degrees at once, round 16 (lists2): the same values, so the same lists.

- bounds.cheap_bounds_many: `cheap_bounds` of every terms given, computed together on [D, P] arrays, bit for bit
  (every array's bytes) on the terms of random roomy and memory-tight instances (one to three node types, so
  groups of several type counts; with --overlap-grad-reduce, so alpha_full; the gather copies' terms of GPT-2
  medium in the megatron target's space);
- bounds._least_slowest_many / slowest_floors_many: `least_slowest_stage_s` with one supply at every pp, bit for bit,
  on the same terms and on hand-made edge cases (a type that holds no layer, none that does, no slots, more stages
  than layers, sends of 0), and the kept floors (bounds._FLOORS) the arrays the one-at-a-time path keeps;
- solver.BATCHED_CHEAP (_cheap_ahead, in batches of BATCH_DEGREES degrees): every list the solver builds (the part's,
  the default setting's, the off one's, all of them; cost, time, cost<=D and time<=B) equals the list built with the
  switch off on a fresh memo, candidate by candidate, every field, bound bit for bit, terms and total.
The tests name functions and a switch that do not exist on f6816aa (they fail there on import)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from optsearch import bounds
from optsearch import solver as solver_module
from optsearch.bounds import cheap_bounds, cheap_bounds_many, least_slowest_stage_s, slowest_floors_many
from optsearch.candidates import max_stages
from optsearch.cli.options import space_from_target
from optsearch.edits import edited_problem
from optsearch.solver import ALL, DEFAULT, OFF, Memo, OutOfTime, _build_candidates, _narrow_memo
from optsearch.spec.budget import Budget
from optsearch.targets import engine_problem

from draws import draws
from test_distopt_search import OPTIONS, _one_node_problem, _open
from test_solver import instances
from test_solver_memory import tight_instances


def _gpt2_medium():
    """GPT-2 medium on fasop-a100-a10 in the megatron target's space with --overlap-param-gather tried at pp > 1
    (Problem.param_gather_pipelined): both optimizer settings, cp, v, and the gather copies (Candidate.gather)."""
    problem = engine_problem("megatron", edited_problem("gpt2-medium", "fasop-a100-a10", []),
                             param_gather_pipelined=True)
    return problem, space_from_target("megatron", problem)


def _bytes(arrays) -> tuple:
    return tuple((a.dtype.str, a.shape, a.tobytes()) for a in arrays)


def _all_terms(problem, options) -> list:
    """Every terms a cost list of the whole space asks for (the gather copies' included), built one at a time."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(solver_module, "BATCHED_CHEAP", False)
        memo = Memo(problem, options)
        _build_candidates(memo, Budget(objective="cost"), 0.0, ALL)
    return [t[0] if isinstance(t, tuple) else t for t in memo.terms.values() if t is not None]


def _same_cheap_bounds(problem, options) -> int:
    """cheap_bounds_many of all the terms at once, and in two uneven halves, against cheap_bounds one at a time,
    each with the kept floors emptied first; the kept floors too."""
    terms = _all_terms(problem, options)
    pps = np.arange(1, max_stages(problem, options) + 1)
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(bounds, "_FLOORS", {})
        was = [_bytes(cheap_bounds(problem, d, pps)) for d in terms]
        kept = {key: value.tobytes() for key, value in bounds._FLOORS.items()}
        monkeypatch.setattr(bounds, "_FLOORS", {})
        now = [_bytes(got) for got in cheap_bounds_many(problem, terms, pps)]
        assert {key: value.tobytes() for key, value in bounds._FLOORS.items()} == kept
        monkeypatch.setattr(bounds, "_FLOORS", {})
        cut = len(terms) // 3
        halves = cheap_bounds_many(problem, terms[:cut], pps) + cheap_bounds_many(problem, terms[cut:], pps)
    assert now == was and [_bytes(got) for got in halves] == was
    return len(terms)


@settings(max_examples=draws(10), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances() | tight_instances(), st.booleans())
def test_the_cheap_bounds_of_many_terms_are_each_ones(case, overlap):
    problem, options = case[0], case[1]
    _same_cheap_bounds(_open(problem) if overlap else problem, options)


def test_the_cheap_bounds_of_gpt2_mediums_terms_are_each_ones():
    """The megatron target's space: cp, ep 1, both optimizer settings and the gather copies' terms (alpha_multi
    empty), several node-type counts."""
    problem, options = _gpt2_medium()
    assert any(t.param_gather for t in _all_terms(problem, options))
    assert _same_cheap_bounds(problem, options) > 100


def _floors_one_at_a_time(ds, L, P) -> list[bytes]:
    return [least_slowest_stage_s(d, L, np.arange(1, P + 1)).tobytes() for d in ds]


@settings(max_examples=draws(10), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances() | tight_instances(), st.sampled_from([1, 2, 3, 7, 64]))
def test_the_floors_of_many_terms_are_each_ones(case, P):
    """At pp = 1..P (fewer stages than two, and up to 64, beyond the layers: no plan, inf), grouped by node-type
    count as slowest_floors_many groups them."""
    problem, options = case[0], case[1]
    L = problem.model.num_layers
    terms = _all_terms(problem, options)
    for G in {len(d.slots) for d in terms}:
        group = [d for d in terms if len(d.slots) == G]
        assert [row.tobytes() for row in bounds._least_slowest_many(group, L, P)] == \
            _floors_one_at_a_time(group, L, P)


def test_the_floors_of_hand_made_terms_are_each_ones(monkeypatch):
    """Edge cases of the marks and counts: a type that holds no layer, no type that does (no mark: inf), a type
    without slots, sends of 0 (middle and end marks equal, so repeated), one layer per stage at most, a slow type
    with many slots beside a fast one with few (the middle stages on the slow one), and rows of very different mark
    counts in one batch (the padding)."""
    problem, options = _gpt2_medium()
    base = next(d for d in _all_terms(problem, options) if len(d.slots) == 2)
    L = 24
    cases = [
        dict(max_layers_per_stage=(0, 5)), dict(max_layers_per_stage=(0, 0)), dict(slots=(0, 6)),
        dict(send_min_s=0.0), dict(max_layers_per_stage=(1, 1), slots=(30, 30)),
        dict(step_min_s=(1e-3, 4e-3), slots=(2, 40), max_layers_per_stage=(24, 3)),
        dict(step_min_s=(2e-3, 2e-3), max_layers_per_stage=(24, 24), slots=(3, 3)),
        dict(max_layers_per_stage=(24, 1), slots=(1, 1)), dict(),
    ]
    group = [replace(base, **changes) for changes in cases]
    want = _floors_one_at_a_time(group, L, 64)
    assert [row.tobytes() for row in bounds._least_slowest_many(group, L, 64)] == want
    assert any(math.isinf(x) for x in np.frombuffer(want[1])) and any(np.isfinite(np.frombuffer(w)).any()
                                                                      for w in want)
    monkeypatch.setattr(bounds, "_FLOORS", {})
    got = slowest_floors_many(group, L, np.arange(1, 11))
    assert [row.tobytes() for row in got] == [np.frombuffer(w)[:10].tobytes() for w in want]


def _lists(problem, options, budgets, on: bool, monkeypatch, batch: int) -> list:
    """Every list of each budget on a fresh memo (and its part's, where the space has one), with BATCHED_CHEAP on or
    off, the kept floors emptied first."""
    monkeypatch.setattr(solver_module, "BATCHED_CHEAP", on)
    monkeypatch.setattr(solver_module, "BATCH_DEGREES", batch)
    monkeypatch.setattr(bounds, "_FLOORS", {})
    memo = Memo(problem, options)
    part = _narrow_memo(problem, options, memo)
    out = []
    for budget in budgets:
        for settings_ in (OFF, DEFAULT, ALL):  # the off list first too: its gather twins not yet bounded
            if part is not None and settings_ == DEFAULT:
                out.append(_build_candidates(part, budget, 0.0, settings_))
            out.append(_build_candidates(memo, budget, 0.0, settings_))
    return out


def _same_lists(problem, options, budgets, monkeypatch, batch: int = 5) -> int:
    base = _lists(problem, options, budgets, False, monkeypatch, batch)
    new = _lists(problem, options, budgets, True, monkeypatch, batch)
    compared = 0
    for (was, was_total), (now, now_total) in zip(base, new, strict=True):
        assert was_total == now_total
        assert len(was) == len(now)
        for a, b in zip(was, now):
            assert a.cand == b.cand and a.cand.key == b.cand.key
            assert a.lower_bound.hex() == b.lower_bound.hex()  # bit for bit
            assert a.terms == b.terms and a.level == b.level
            compared += 1
    return compared


def _budgets() -> list[Budget]:
    return [Budget(objective="cost"), Budget(objective="time"), Budget(objective="cost", max_time_s=1e6),
            Budget(objective="time", max_cost_usd=1e3)]


@settings(max_examples=draws(8), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances() | tight_instances(), st.booleans(), st.sampled_from([1, 4, 128]))
def test_the_lists_with_the_cheap_bounds_at_once_are_the_lists(case, overlap, batch):
    problem, options = case[0], case[1]
    with pytest.MonkeyPatch.context() as monkeypatch:
        _same_lists(_open(problem) if overlap else problem, options, _budgets(), monkeypatch, batch)


def test_the_lists_of_the_one_node_instance_and_gpt2_medium(monkeypatch):
    """The one-node instance (off candidates, the optimum off) and GPT-2 medium in the megatron target's space
    (a part, cp, v, the gather copies)."""
    problem = _one_node_problem()
    assert _same_lists(problem, OPTIONS, _budgets() + [Budget(objective="time", max_cost_usd=0.5)],
                       monkeypatch) > 0
    problem, options = _gpt2_medium()
    assert _same_lists(problem, options, [Budget(objective="cost"), Budget(objective="time", max_cost_usd=2e4)],
                       monkeypatch, batch=16) > 1000


def test_a_build_past_its_deadline_stops_in_the_batch(monkeypatch):
    """The batch's own degree loop reads the deadline (OutOfTime, as the build); the memo keeps what it computed,
    and a later build gives the list of a fresh memo."""
    problem, options = _gpt2_medium()
    memo = Memo(problem, options)
    calls = {"n": 0}
    past = solver_module._past

    def late(deadline):  # the deadline passes inside the first batch
        calls["n"] += 1
        return deadline is not None and calls["n"] > 3

    monkeypatch.setattr(solver_module, "_past", late)
    with pytest.raises(OutOfTime):
        _build_candidates(memo, Budget(objective="cost"), 0.0, DEFAULT, deadline=1.0)
    assert calls["n"] == 4 and not memo.cheap_by_pp  # stopped in _cheap_ahead, before its bounds
    monkeypatch.setattr(solver_module, "_past", past)
    again = _build_candidates(memo, Budget(objective="cost"), 0.0, DEFAULT)
    fresh = _build_candidates(Memo(problem, options), Budget(objective="cost"), 0.0, DEFAULT)
    assert [(b.cand.key, b.lower_bound) for b in again[0]] == [(b.cand.key, b.lower_bound) for b in fresh[0]]
