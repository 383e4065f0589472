"""Round 17 (rentbatch; docs/solver.md "Round 17: the rent walks of many candidates at once (rentbatch, 2026-11-24)"):

- inflight._least_rent_many (the Lagrangian rents of many tables' caps in one programme, padded to the most types and
  positions) equals inflight._least_rent table by table, byte for byte, on random cap tables (1-5 types, ties
  between prices, 1-40 positions, rows that cannot hold L) in random batches; a copy that sums phi over the padded
  positions in one call differs on some batches (the comparison can fail);
- inflight.sharpened_many (the cost walks of many candidates side by side, _drive_many) gives sharpened's bounds and
  leaves the same rents in every table (the same rows asked, the same values), on random roomy and memory-tight
  instances (v = 1 and 2, with and without --overlap-grad-reduce, cost with and without a deadline, cutoffs none, at
  and below the value, the rent programmes' calls split small or not) and on GPT-2 XL's deep candidates on
  mixed-pool-8k;
- solver._inflight_ahead leaves the heap's pop order as it was, keeps sharpened's values, and a value kept under
  one cutoff is not taken under another; solves with inflight.RENT_BATCH 32 and 1 give the same answers and visit
  the same number of in-flight bounds on random instances, and batches of several candidates did run.
Every test fails on 3e0ad5b (the functions and the switch do not exist there)."""

from __future__ import annotations

import heapq
import inspect
import math
from dataclasses import replace
from unittest import mock

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from draws import draws
from optsearch import inflight, solver
from optsearch.bounds import CandidateBound, degree_terms
from optsearch.candidates import max_stages
from optsearch.formulation.model import Candidate
from optsearch.inflight import InFlightTables, _least_rent, _least_rent_many, sharpened, sharpened_many
from optsearch.spec.budget import Budget

from test_solver import instances, usable_degrees
from test_solver_memory import tight_instances

START = CandidateBound(True, 0.0, 0.0, 0.0)


def _random_ask(rng):
    """A random table (prices with ties, some middle positions) and caps [M, g, i] at a few marks."""
    G, P, M = int(rng.integers(1, 6)), int(rng.integers(1, 41)), int(rng.integers(1, 7))
    L = int(rng.integers(1, 3 * P + 2))
    price = rng.choice([1.1, 2.5, 2.5, 4.0, 7.25, 12.0], size=G)
    middle = np.zeros(P, dtype=bool)
    middle[1:P - 1] = True
    tab = InFlightTables(marks=np.zeros(M), iteration=np.zeros(M), caps=None, price=price, middle=middle,
                         w=int(rng.choice([1, 4, 8, 64])), L=L)
    caps = rng.integers(0, max(2, 2 * L // P + 3), size=(M, G, P)).astype(float)
    return tab, caps


def _batches(rng, n):
    for _ in range(n):
        yield [_random_ask(rng) for _ in range(int(rng.integers(1, 13)))]


def test_the_rents_of_many_tables_equal_the_one_table_rents_byte_for_byte():
    rng = np.random.default_rng(17)
    finite = infinite = mixed = 0
    for batch in _batches(rng, draws(120)):
        got = _least_rent_many(batch)
        assert len(got) == len(batch)
        for (tab, caps), rent in zip(batch, got):
            want = _least_rent(tab, caps)
            assert rent.dtype == want.dtype and rent.tobytes() == want.tobytes(), (rent, want)
            finite += int(np.isfinite(want).sum())
            infinite += int(np.isinf(want).sum())
        mixed += len({caps.shape[2] for _, caps in batch}) > 1 and max(c.shape[2] for _, c in batch) > 16
    assert finite > 120 and infinite > 40 and mixed > 40, (finite, infinite, mixed)


def test_a_sum_over_the_padded_positions_fails_the_comparison():
    """The comparison can fail: phi's sum taken over every padded position in one call (numpy's pairwise sum
    depends on the length) differs from the one-table rents on some batches."""
    source = inspect.getsource(inflight._least_rent_many)
    assert source.count("least[rows, :p].sum(axis=1)") == 1
    namespace = dict(vars(inflight))
    exec(compile(source.replace("least[rows, :p].sum(axis=1)",
                                "np.where(np.isfinite(least), least, 0.0)[rows].sum(axis=1)"), "mutant", "exec"),
         namespace)
    rng = np.random.default_rng(5)
    differs = 0
    for batch in _batches(rng, 60):
        got = namespace["_least_rent_many"](batch)
        differs += any(r.tobytes() != _least_rent(t, c).tobytes() for (t, c), r in zip(batch, got))
    assert differs > 0


def _compare(problem, cands, rng) -> int:
    """The candidates' in-flight bounds through sharpened one at a time and through sharpened_many in random
    batches (each with its own kept tables and call cache): equal bounds, and equal rents left in every table."""
    compared = 0
    kept, cache = {}, {}
    free = [sharpened(problem, kept, d, cand, Budget(objective="cost"), START, cache) for cand, d in cands]
    for deadline, cut in [(False, "none"), (False, "at"), (True, "below")]:
        alone_kept, alone_cache, many_kept, many_cache = {}, {}, {}, {}
        asks, want = [], []
        for (cand, d), bound in zip(cands, free):
            budget = Budget(objective="cost")
            if deadline and bound.feasible and 0 < bound.iteration_s < math.inf:  # one some intervals meet
                budget = Budget(objective="cost", max_time_s=bound.iteration_s * problem.iterations * 1.5)
            value = math.inf
            if cut != "none" and bound.feasible:
                value = bound.cost_per_iteration_usd * problem.iterations * (1.0 if cut == "at" else 0.5)
            want.append(sharpened(problem, alone_kept, d, cand, budget, START, alone_cache, value))
            asks.append((d, cand, budget, START, value, math.inf))
        order = rng.permutation(len(asks))
        got = [None] * len(asks)
        at = 0
        while at < len(asks):
            size = int(rng.integers(1, 9))
            part = order[at:at + size]
            for x, bound in zip(part, sharpened_many(problem, many_kept, [asks[x] for x in part], many_cache)):
                got[x] = bound
            at += size
        assert got == want, [(c.key, g, w) for (c, _), g, w in zip(cands, got, want) if g != w]
        for (cand, _) in cands:
            a, b = alone_kept.get(cand.key), many_kept.get(cand.key)
            assert (a is None) == (b is None)
            if a is not None:
                assert np.array_equal(a.rent, b.rent, equal_nan=True), cand.key
                assert a.floor_rent == b.floor_rent or (math.isnan(a.floor_rent) and math.isnan(b.floor_rent))
                compared += int(np.isfinite(a.rent).any())
    return compared


COMPARED: list[int] = []


@settings(max_examples=draws(5), derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.one_of(instances(), tight_instances()), st.integers(0, 3), st.booleans())
def test_the_walks_side_by_side_give_the_one_at_a_time_bounds(case, seed, overlap):
    problem, options, *_ = case
    assume(len(problem.model.kinds) == 1 and problem.model.num_layers >= 4)  # the in-flight tables' models
    rng = np.random.default_rng(seed)
    problem = replace(problem, overlap_grad_reduce=overlap)
    cands = []
    for tp, mbs, dp, uses in usable_degrees(problem, options):
        d = degree_terms(problem, tp, dp, mbs, uses)
        for v in (1, 2):
            cands += [(Candidate(tp=tp, dp=dp, micro_batch_size=mbs, pp=pp, uses=uses, v=v), d)
                      for pp in range(1, max_stages(problem, options) + 3)]
    pick = np.sort(rng.choice(len(cands), size=min(len(cands), 24), replace=False))  # a few dozen at most
    with mock.patch.object(inflight, "BATCH_ELEMENTS", 256 if seed % 2 else inflight.BATCH_ELEMENTS):  # small calls
        COMPARED.append(_compare(problem, [cands[x] for x in pick], rng))


def test_the_random_instances_compared_many_walks():
    if not COMPARED:  # run alone or in another worker
        test_the_walks_side_by_side_give_the_one_at_a_time_bounds()
    assert sum(COMPARED) >= 30 and sum(n > 0 for n in COMPARED) >= 3, COMPARED


def _catalog():
    from optsearch.candidates import node_uses
    from optsearch.cli.options import space_from_target
    from optsearch.edits import edited_problem
    from optsearch.targets import engine_problem

    problem = engine_problem("megatron", edited_problem("gpt2-xl", "mixed-pool-8k", []))
    options = space_from_target("megatron", problem)
    memo = solver.Memo(problem, options)
    cands = []
    for tp, dp, mbs, pp, cp in [(1, 8, 1, 12, 1), (2, 4, 2, 24, 1), (1, 16, 1, 8, 2), (1, 8, 1, 2, 1)]:
        uses = tuple(node_uses(problem, tp, dp, mbs, cp, options))
        cands.append((Candidate(tp=tp, dp=dp, micro_batch_size=mbs, pp=pp, uses=uses, cp=cp),
                      memo.degree_terms(tp, dp, mbs, uses, 1, cp)))
    return problem, options, cands


def test_the_walks_side_by_side_give_the_one_at_a_time_bounds_on_a_catalog_model():
    problem, _, cands = _catalog()
    assert _compare(problem, cands, np.random.default_rng(0)) >= 9


def _pops(heap) -> list[int]:
    heap = list(heap)
    return [heapq.heappop(heap)[2] for _ in range(len(heap))]


def test_the_bounds_computed_ahead_leave_the_heap_and_are_taken_only_under_their_cutoff():
    problem, options, cands = _catalog()
    memo = solver.Memo(problem, options)
    budget = Budget(objective="cost")
    items = [solver.Bounded(c, float(x), d, solver.REFINED) for x, (c, d) in enumerate(cands)]
    heap = [(b.lower_bound, b.cand.key, x, b) for x, b in enumerate(items[1:])]
    heapq.heapify(heap)
    before = _pops(heap)
    solver._inflight_ahead(memo, budget, items[0], heap, 0.0, math.inf)
    assert _pops(heap) == before
    assert set(memo.inflight_ahead) == {b.cand.key for b in items}
    fresh = solver.Memo(problem, options)
    for b in items:
        want = sharpened(problem, fresh.inflight, b.terms, b.cand, budget, START, fresh.calls)
        assert memo.inflight_ahead[b.cand.key][2] == want
    # taken under the same cutoff (and then gone), computed again under another
    assert solver._inflight_bounded(memo, budget, items[0], 0.0, math.inf) == \
        solver._inflight_bounded(fresh, budget, items[0], 0.0, math.inf)
    assert items[0].cand.key not in memo.inflight_ahead
    differ = 0
    for b in items[1:]:
        free = solver._inflight_bounded(fresh, budget, b, 0.0, math.inf)
        cut = free * 0.5 if free is not None else 1.0
        got = solver._inflight_bounded(memo, budget, b, 0.0, cut)
        assert got == solver._inflight_bounded(solver.Memo(problem, options), budget, b, 0.0, cut)
        differ += got != free
    assert differ >= 1  # a stale value would have been caught


BATCHES: list[int] = []


@settings(max_examples=draws(4), derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.one_of(instances(), tight_instances()))
def test_solves_with_and_without_the_batches_answer_alike(case):
    problem, options, *_ = case
    assume(problem.model.num_layers >= 8)  # enough candidates reach the in-flight step together
    options = replace(options, max_stages=max(3, options.max_stages))
    real = inflight.sharpened_many

    def counted(problem, kept, asks, cache=None):
        BATCHES.append(len(asks))
        return real(problem, kept, asks, cache)

    answers = []
    for size in (32, 1):
        with mock.patch.object(inflight, "RENT_BATCH", size), mock.patch.object(solver, "sharpened_many", counted):
            got = solver.solve(problem, Budget(objective="cost"), solver="cpsat", options=options)
        answers.append((got.status, got.objective_value, got.bound, got.plan, got.stats.get("inflight_bounded")))
    assert answers[0] == answers[1], answers


def test_the_solves_ran_batches_of_several_candidates():
    if not BATCHES:  # run alone or in another worker
        test_solves_with_and_without_the_batches_answer_alike()
    assert sum(n > 1 for n in BATCHES) >= 1, BATCHES
