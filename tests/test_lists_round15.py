"""The candidate lists built with less work, round 15 (lists): the same lists, candidate by candidate.

- solver._row_candidate (FAST_CANDIDATES): a row's Candidate set field by field is the object the dataclass __init__
  makes (every field, equality, hash);
- solver.Memo.candidates (SHARED_CANDIDATES): one Candidate per key and memo, shared with the cp = 1, v = 1 part's
  memo, so a later list reuses the earlier lists' objects;
- bounds._least_slowest_one_supply (ONE_SUPPLY_VECTORS): least_slowest_stage_s with one supply on [G] vectors, the
  same floats as the [P, G] path;
- bounds.degree_terms' sends kept per (types, w, b, tp, cp) (SHARED_SENDS), the same as computed for every ep and
  optimizer setting.
Every list the solver builds (the part's, the default setting's, the off one's, all of them; cost, time and both
budget rows) equals the list built with the four switches off on a fresh memo (the build of c52cd37): the same
candidates in the same order, every field, the same cheap bound bit for bit, the same terms, the same total. On
random roomy and memory-tight instances (with and without --overlap-grad-reduce, so with off candidates), on the
one-node instance whose optimum is off, and on GPT-2 medium in the megatron target's space (cp, v, the gather
copies)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from optsearch import bounds
from optsearch import solver as solver_module
from optsearch.bounds import degree_terms, least_slowest_stage_s
from optsearch.cli.options import space_from_target
from optsearch.edits import edited_problem
from optsearch.formulation.model import Candidate
from optsearch.solver import ALL, DEFAULT, OFF, Memo, _build_candidates, _narrow_memo, _row_candidate
from optsearch.spec.budget import Budget

from draws import draws
from test_distopt_search import OPTIONS, _one_node_problem, _open
from test_solver import instances
from test_solver_memory import tight_instances

SWITCHES = ((solver_module, "FAST_CANDIDATES"), (solver_module, "SHARED_CANDIDATES"),
            (bounds, "ONE_SUPPLY_VECTORS"), (bounds, "SHARED_SENDS"))


def _lists(problem, options, budgets, on: bool, monkeypatch) -> list:
    """Every list of each budget on a fresh memo (and its part's, where the space has one), with the round-15
    switches on or off, the bounds module's kept floors emptied first (they are keyed by values, not by path)."""
    for module, name in SWITCHES:
        monkeypatch.setattr(module, name, on)
    monkeypatch.setattr(bounds, "_FLOORS", {})
    memo = Memo(problem, options)
    part = _narrow_memo(problem, options, memo)
    out = []
    for budget in budgets:
        for settings_ in (DEFAULT, OFF, ALL):
            if part is not None and settings_ == DEFAULT:
                out.append(_build_candidates(part, budget, 0.0, settings_))
            out.append(_build_candidates(memo, budget, 0.0, settings_))
    return out


def _fields(cand: Candidate) -> tuple:
    return tuple(getattr(cand, name) for name in solver_module._CANDIDATE_FIELDS)


def _same_lists(problem, options, budgets, monkeypatch) -> int:
    base = _lists(problem, options, budgets, False, monkeypatch)
    new = _lists(problem, options, budgets, True, monkeypatch)
    compared = 0
    for (was, was_total), (now, now_total) in zip(base, new, strict=True):
        assert was_total == now_total
        assert len(was) == len(now)
        for a, b in zip(was, now):
            assert type(b.cand) is Candidate and a.cand == b.cand and hash(a.cand) == hash(b.cand)
            assert _fields(a.cand) == _fields(b.cand)
            assert a.lower_bound == b.lower_bound  # bit for bit
            assert a.terms == b.terms and a.level == b.level
            compared += 1
    return compared


def _budgets(problem) -> list[Budget]:
    return [Budget(objective="cost"), Budget(objective="time"), Budget(objective="cost", max_time_s=1e6),
            Budget(objective="time", max_cost_usd=1e3)]


def test_a_rows_candidate_is_the_one_the_dataclass_makes():
    """Every field, equality and hash, for the three optimizer copies (o = 0, 1 off, 2 the gather copy); the fast
    path is the one taken (Candidate's fields are the ones it sets, and nothing runs at construction)."""
    problem = _one_node_problem()
    from optsearch.candidates import node_uses

    uses = tuple(node_uses(problem, 1, 8, 1))
    assert solver_module._CANDIDATE_SETTERS is not None and solver_module.FAST_CANDIDATES
    for key in [(1, 8, 1, 1, 1, 1, 1, 0), (2, 4, 2, 2, 1, 1, 1, 1), (1, 2, 4, 3, 2, 2, 2, 0), (4, 1, 1, 2, 1, 4, 1, 2)]:
        tp, dp, mbs, pp, ep, cp, v, off = key
        made = Candidate(tp=tp, dp=dp, micro_batch_size=mbs, pp=pp, uses=uses, ep=ep, cp=cp, v=v,
                         dist=False if off == 1 else None, gather=off == 2)
        got = _row_candidate(key, uses)
        assert type(got) is Candidate
        assert _fields(got) == _fields(made) and got == made and hash(got) == hash(made) and got.key == key
        assert replace(got, pp=pp + 1) == replace(made, pp=pp + 1)
        with pytest.raises(AttributeError):  # still frozen
            got.pp = 5  # type: ignore[misc]


def test_the_part_and_the_whole_list_share_their_candidates():
    """The whole list's cp = 1, v = 1 candidates are the part's own objects (Memo.candidates, shared by
    _narrow_memo), and a second objective's list is made of the first's."""
    problem = edited_problem("gpt2-medium", "fasop-a100-a10", [])
    options = space_from_target("megatron", problem)
    memo = Memo(problem, options)
    part = _narrow_memo(problem, options, memo)
    assert part is not None and part.candidates is memo.candidates
    first, _ = _build_candidates(part, Budget(objective="cost"), 0.0, DEFAULT)
    whole, _ = _build_candidates(memo, Budget(objective="cost"), 0.0, DEFAULT)
    by_key = {b.cand.key: b.cand for b in whole}
    assert first and all(by_key[b.cand.key] is b.cand for b in first)
    other, _ = _build_candidates(memo, Budget(objective="time"), 0.0, DEFAULT)
    assert {b.cand.key for b in other} == set(by_key) and all(by_key[b.cand.key] is b.cand for b in other)


def test_the_lists_of_the_one_node_instance_and_gpt2_medium_are_the_base_lists(monkeypatch):
    """The one-node instance (off candidates, the optimum off) and GPT-2 medium on fasop-a100-a10 in the megatron
    target's space (cp and v, so a part; the gather copies under its overlap)."""
    problem = _one_node_problem()
    assert _same_lists(problem, OPTIONS, _budgets(problem) + [
        Budget(objective="cost", max_time_s=50.0), Budget(objective="time", max_cost_usd=0.5)], monkeypatch) > 0
    problem = edited_problem("gpt2-medium", "fasop-a100-a10", [])
    options = space_from_target("megatron", problem)
    assert _same_lists(problem, options, [Budget(objective="cost"), Budget(objective="time", max_cost_usd=2e4)],
                       monkeypatch) > 1000


def _with_overlap(problem, on: bool):
    """With --overlap-grad-reduce and the optimizer left open: the off candidates (test_distopt_search._open)."""
    return _open(problem) if on else problem


@settings(max_examples=draws(12), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances(), st.booleans())
def test_the_lists_of_roomy_instances_are_the_base_lists(case, overlap):
    problem, options = case[0], case[1]
    problem = _with_overlap(problem, overlap)
    with pytest.MonkeyPatch.context() as monkeypatch:
        _same_lists(problem, options, _budgets(problem), monkeypatch)


@settings(max_examples=draws(12), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tight_instances(), st.booleans())
def test_the_lists_of_memory_tight_instances_are_the_base_lists(case, overlap):
    problem, options = case[0], case[1]
    problem = _with_overlap(problem, overlap)
    with pytest.MonkeyPatch.context() as monkeypatch:
        _same_lists(problem, options, _budgets(problem), monkeypatch)


def _all_terms(problem, options) -> list:
    memo = Memo(problem, options)
    for budget in (Budget(objective="cost"),):
        _build_candidates(memo, budget, 0.0, ALL)
    return [t for t in memo.terms.values() if t is not None and not isinstance(t, tuple)]


@settings(max_examples=draws(15), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances() | tight_instances(), st.sampled_from([1, 2, 3]))
def test_the_one_supply_floor_is_the_pg_paths(case, v):
    """least_slowest_stage_s with one supply: the [G]-vector path equals the [P, G] path exactly, at every pp up to
    64 and beyond the layers (no plan: inf), for v = 1, 2, 3."""
    problem, options = case[0], case[1]
    L = problem.model.num_layers
    for d in _all_terms(problem, options):
        for pps in (np.arange(1, 65), np.arange(1, L + 5), np.array([1]), np.array([3, 2, 7])):
            with pytest.MonkeyPatch.context() as monkeypatch:
                monkeypatch.setattr(bounds, "ONE_SUPPLY_VECTORS", False)
                was = least_slowest_stage_s(d, L, pps, v=v)
                monkeypatch.setattr(bounds, "ONE_SUPPLY_VECTORS", True)
                now = least_slowest_stage_s(d, L, pps, v=v)
            assert np.array_equal(was, now)


def test_the_one_supply_floor_on_gpt2_mediums_terms(monkeypatch):
    problem = edited_problem("gpt2-medium", "fasop-a100-a10", [])
    L = problem.model.num_layers
    terms = _all_terms(problem, space_from_target("megatron", problem))
    assert len(terms) > 50
    for d in terms:
        for v in (1, 2):
            monkeypatch.setattr(bounds, "ONE_SUPPLY_VECTORS", False)
            was = least_slowest_stage_s(d, L, np.arange(1, 65), v=v)
            monkeypatch.setattr(bounds, "ONE_SUPPLY_VECTORS", True)
            assert np.array_equal(was, least_slowest_stage_s(d, L, np.arange(1, 65), v=v))


def test_the_kept_sends_are_each_degrees_own(monkeypatch):
    """degree_terms with the sends kept in a shared cache (every ep and optimizer setting of a degree, in any
    order) equals degree_terms without a cache."""
    problem = _one_node_problem()  # the overlap on, the optimizer open: both settings
    from optsearch.candidates import dp_candidates, node_uses, tp_candidates

    cache: dict = {}
    compared = 0
    for tp in tp_candidates(problem):
        for mbs in (1, 2, 4):
            for dp in dp_candidates(problem, tp, mbs):
                uses = tuple(node_uses(problem, tp, dp, mbs))
                if not uses:
                    continue
                for dist in (False, None, True):
                    assert degree_terms(problem, tp, dp, mbs, uses, 1, 1, cache, dist) == \
                        degree_terms(problem, tp, dp, mbs, uses, 1, 1, None, dist)
                    compared += 1
    assert compared > 10 and any(key[0] == "degree_sends" for key in cache)
