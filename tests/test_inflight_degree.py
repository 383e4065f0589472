"""The in-flight tables' per-degree part (inflight._DegreePart, round 13; issue 14, item 3): the per-type terms and, at
v = 1, the least times of every flight computed once per degree and shared by every pp, with the least embedding
all-reduce, the rent by end types' all-reduces and the ends' forwards kept in the call cache, give the tables and the
bounds of the path without any of it (INFLIGHT_BY_DEGREE off, no cache) bit for bit, on roomy, memory-tight and
two-kind (T5-like) instances, with and without --overlap-grad-reduce, and on a catalog model's degrees."""

from __future__ import annotations

import math
from dataclasses import replace
from unittest import mock

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from draws import draws
from optsearch import inflight
from optsearch.bounds import CandidateBound, degree_terms
from optsearch.candidates import max_stages, node_uses
from optsearch.formulation.model import Candidate
from optsearch.inflight import _rent, sharpened
from optsearch.spec.budget import Budget

from test_solver import instances, usable_degrees
from test_solver_memory import tight_instances

FIELDS = ("marks", "iteration", "price", "middle", "slots", "allreduce_per_layer", "base_iteration",
          "whole_per_layer", "whole_base", "ends_extra")
SCALARS = ("w", "L", "allreduce_floor", "v", "whole_mean", "holds_from")


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and bool(np.array_equal(a, b, equal_nan=True))


def _assert_tables_equal(got, want, where) -> None:
    """Every field of two InFlightTables bit for bit (their rents at every mark and caps at every mark included)."""
    if want is None:
        assert got is None, where
        return
    for name in FIELDS:
        assert _same(getattr(got, name), getattr(want, name)), (where, name)
    for name in SCALARS:
        x, y = getattr(got, name), getattr(want, name)
        assert x == y or (isinstance(x, float) and math.isnan(x) and math.isnan(y)), (where, name, x, y)
    assert _same(got.caps[0:len(got.marks)], want.caps[0:len(want.marks)]), where
    assert (got.hide is None) == (want.hide is None), where
    if want.hide is not None:
        assert _same(got.hide[0], want.hide[0]) and got.hide[1] == want.hide[1] and _same(got.hide[2], want.hide[2])
    _rent(got, len(got.marks))
    _rent(want, len(want.marks))
    assert _same(got.rent, want.rent), where


def _budgets(problem) -> list[Budget]:
    return [Budget(objective="cost"), Budget(objective="time")]


def _compare(problem, d, cand_of, pps, budgets, order_seed: int = 0) -> int:
    """Every pp of d (in a shuffled order, so the degree's flights grow and shrink between asks): the tables and the
    bound of each candidate equal the old path's; returns how many tables were compared."""
    cache, kept = {}, {}
    compared = 0
    for pp in np.random.default_rng(order_seed).permutation(pps).tolist():
        cand = cand_of(pp)
        for budget in budgets:
            got = sharpened(problem, kept, d, cand, budget, CandidateBound(True, 0.0, 0.0, 0.0), cache)
            with mock.patch.object(inflight, "INFLIGHT_BY_DEGREE", False):
                ref_kept = {}
                want = sharpened(problem, ref_kept, d, cand, budget, CandidateBound(True, 0.0, 0.0, 0.0), None)
            assert got == want, (pp, budget, got, want)  # exact
        if cand.key in kept:
            _assert_tables_equal(kept[cand.key], ref_kept[cand.key], (cand.key,))
            compared += kept[cand.key] is not None
    return compared


COMPARED: list[int] = []


@settings(max_examples=draws(3), derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.one_of(instances(), tight_instances()), st.booleans(), st.integers(0, 3))
def test_the_degree_part_gives_the_tables_of_each_pp_alone_bit_for_bit(case, overlap, seed):
    problem, options, *_ = case
    problem = replace(problem, overlap_grad_reduce=overlap)
    most = max_stages(problem, options) + 2  # beyond the space's stages too
    with mock.patch.object(inflight, "DEGREE_TABLES_FROM", 1 + seed % 2):  # from the first ask, or the second
        _compare_degrees(problem, options, most, seed)


def _compare_degrees(problem, options, most: int, seed: int) -> None:
    for tp, mbs, dp, uses in usable_degrees(problem, options):
        d = degree_terms(problem, tp, dp, mbs, uses)
        for v in (1, 2):
            def cand_of(pp, v=v):
                return Candidate(tp=tp, dp=dp, micro_batch_size=mbs, pp=pp, uses=uses, v=v if pp > 1 else 1)
            COMPARED.append(_compare(problem, d, cand_of, range(1, most + 1), _budgets(problem)[:3 - v], seed))


def test_the_random_instances_compared_many_tables():
    """The property test above compared something (its instances may have no candidate with tables)."""
    if not COMPARED:  # run alone or in another worker: run it here
        test_the_degree_part_gives_the_tables_of_each_pp_alone_bit_for_bit()
    assert sum(COMPARED) >= 100 and sum(n > 0 for n in COMPARED) >= 20


def test_a_two_kind_instance_has_no_tables_either_way():
    """A T5-like (two-kind) memory-tight instance: no in-flight tables on both paths (the bound does not apply)."""
    from optsearch.candidates import SpaceOptions
    from test_refined_arrays import _t5_tight

    problem, options = _t5_tight(), SpaceOptions(micro_batch_sizes=(1, 2), max_stages=2)
    seen = 0
    for tp, mbs, dp, uses in usable_degrees(problem, options):
        d = degree_terms(problem, tp, dp, mbs, uses)
        assert _compare(problem, d, lambda pp: Candidate(tp=tp, dp=dp, micro_batch_size=mbs, pp=pp, uses=uses),
                        range(1, 3), _budgets(problem)) == 0
        seen += 1
    assert seen > 0


def test_the_degree_part_on_a_large_model_is_bit_for_bit():
    """GPT-3 175B's degrees on mixed-pool-8k in the megatron target's space (the cost rows' front degrees): deep
    pipelines, four types, supply limits; some pp at v = 1, 2 and 3, from the degree's tables from the second ask."""
    from optsearch.cli.options import space_from_target
    from optsearch.edits import edited_problem
    from optsearch.targets import engine_problem

    problem = engine_problem("megatron", edited_problem("gpt3-175b", "mixed-pool-8k", []))
    options = space_from_target("megatron", problem)
    most = max_stages(problem, options)
    compared = 0
    for tp, dp, mbs, cp in [(8, 4, 1, 1)]:
        uses = tuple(node_uses(problem, tp, dp, mbs, cp, options))
        d = degree_terms(problem, tp, dp, mbs, uses, 1, cp)
        for v, pps in ((1, (8, 30, 52, most)), (2, (16, 40)), (3, (24,))):
            compared += _compare(problem, d, lambda pp, v=v: Candidate(tp=tp, dp=dp, micro_batch_size=mbs, pp=pp,
                                                                       uses=uses, cp=cp, v=v),
                                 pps, [Budget(objective="cost")], 5)
    assert compared >= 5


def test_a_hair_of_difference_in_the_degree_part_fails_the_comparison():
    """The comparison is exact: the degree's least times 1e-15 higher are caught."""
    from test_composition_arrays import _small
    from optsearch.candidates import SpaceOptions

    problem, options = _small(), SpaceOptions(micro_batch_sizes=(1, 2), max_stages=4)
    real = inflight._DegreePart.least_times
    differ = 0
    with mock.patch.object(inflight._DegreePart, "least_times", lambda self, *a: real(self, *a) * (1 + 1e-15)), \
            mock.patch.object(inflight, "DEGREE_TABLES_FROM", 1):
        for tp, mbs, dp, uses in usable_degrees(problem, options):
            d = degree_terms(problem, tp, dp, mbs, uses)
            try:
                _compare(problem, d, lambda pp: Candidate(tp=tp, dp=dp, micro_batch_size=mbs, pp=pp, uses=uses),
                         range(1, 5), [Budget(objective="cost")])
            except AssertionError:
                differ += 1
    assert differ > 0
