"""Round 16 (inflight3; docs/solver.md "Round 16: the in-flight tables' least times with less work (inflight3)"):

- inflight._raw_times' least over the recomputation modes taken one mode at a time on [g, i, n] (RAW_BY_MODE) is
  the [g, i, n, r] minimum of the old path bit for bit, on random memory terms (ties between modes' steps, modes
  that never fit, flights of interleaved counts);
- a degree's first table at v covers the counts later pp ask (WHOLE_WINDOW: every count at v = 1, from pp = 2's
  least count up at v > 1), and a grown window's least-after is computed for its new rows only (LEAST_BY_ROWS):
  the tables and in-flight bounds equal the old path's (the three switches off) and the per-pp path's
  (INFLIGHT_BY_DEGREE off) bit for bit on random roomy and memory-tight instances (v = 1 and 2, pp asked in
  shuffled, rising and falling order, with and without --overlap-grad-reduce);
- the behaviour: at v = 1 a degree's rows are computed once for every pp after the first table (the old window
  grew on every larger pp), and at v = 2 asked from the largest pp down the table is never rebuilt at a larger N;
- both backends answer what brute force answers with the degree's tables from its first ask, on random roomy and
  memory-tight instances.
On f6816aa four fail (the switches do not exist there; the rows test by its assertion: the old window grows and
is rebuilt); the mutant test, the brute-force test and its count pass there (they guard the new path)."""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import replace
from unittest import mock

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from draws import draws
from optsearch import inflight
from optsearch.baselines.exhaustive import count_plans
from optsearch.bounds import CandidateBound, degree_terms
from optsearch.candidates import max_stages
from optsearch.formulation.model import Candidate
from optsearch.inflight import _raw_times, _time_terms, sharpened
from optsearch.spec.budget import Budget

from test_inflight_degree import _assert_tables_equal
from test_solver import MAX_PLANS, _budget, assert_backends_equal_brute_force, instances, usable_degrees
from test_solver_memory import tight_instances

SWITCHES = ("RAW_BY_MODE", "WHOLE_WINDOW", "LEAST_BY_ROWS")
MODES = ["none", "selective", "full"]


def _old(*names):
    """The round's switches named (default: all) off: the path of f6816aa."""
    stack = ExitStack()
    for name in names or SWITCHES:
        stack.enter_context(mock.patch.object(inflight, name, False))
    return stack


def _terms(rng):
    """Random per-type terms of _time_terms: some modes with equal steps, some types too small for any mode."""
    G, C = int(rng.integers(1, 5)), int(rng.integers(1, 40))
    steps = rng.uniform(0.01, 0.05, (G, 3)).round(int(rng.integers(2, 5)))  # few decimals: ties between modes
    steps[:, 2] = steps[:, 0] * rng.choice([1.0, 1.3])
    acts = rng.uniform(1e8, 2e9, (G, 3))
    acts[:, 2] = acts[:, 0] * rng.uniform(0.05, 1.0)
    working = rng.uniform(1e8, 3e9, G)
    room = rng.uniform(1e9, 8e10, G)
    flight = np.arange(1, C + 1, dtype=float) / int(rng.integers(1, 5))
    state = float(rng.uniform(1e6, 2e9))
    return steps, _time_terms(steps, acts, working, room, state, flight, MODES)


def test_the_raw_times_by_mode_equal_the_four_axis_minimum_bit_for_bit():
    rng = np.random.default_rng(16)
    finite = none_fit = 0
    for _ in range(draws(400)):
        steps, terms = _terms(rng)
        N = int(rng.integers(1, 90))
        got = _raw_times(steps, MODES, terms, N)
        with _old("RAW_BY_MODE"):
            want = _raw_times(steps, MODES, terms, N)
        assert got.shape == want.shape and got.dtype == want.dtype and np.array_equal(got, want)
        finite += int(np.isfinite(want).any())
        none_fit += int(np.isinf(want).any())
    assert finite > 100 and none_fit > 50, (finite, none_fit)


def test_a_mode_taken_past_its_cap_fails_the_comparison():
    """The comparison can fail: the same loop with each mode allowed one layer past its memory cap differs."""
    rng = np.random.default_rng(3)
    differs = 0
    for _ in range(100):
        steps, terms = _terms(rng)
        N = int(rng.integers(1, 60))
        want = _raw_times(steps, MODES, terms, N)
        loose = (terms[0] + 1,) + terms[1:]
        differs += not np.array_equal(_raw_times(steps, MODES, loose, N), want)
    assert differs > 10


COMPARED: list[int] = []


def _compare(problem, d, cands) -> int:
    """Each candidate in order through one call cache (the degree's part shared): the tables and bounds (cost and
    time) with the round's switches equal those with the switches off (their own cache) and those of the per-pp
    path (INFLIGHT_BY_DEGREE off, no cache), bit for bit."""
    cache, kept, old_cache, old_kept = {}, {}, {}, {}
    compared = 0
    for cand in cands:
        for budget in (Budget(objective="cost"), Budget(objective="time")):
            start = CandidateBound(True, 0.0, 0.0, 0.0)
            got = sharpened(problem, kept, d, cand, budget, start, cache)
            with _old():
                want = sharpened(problem, old_kept, d, cand, budget, start, old_cache)
            with mock.patch.object(inflight, "INFLIGHT_BY_DEGREE", False):
                alone_kept: dict = {}
                alone = sharpened(problem, alone_kept, d, cand, budget, start, None)
            assert got == want == alone, (cand.key, budget, got, want, alone)
        if kept.get(cand.key) is not None:
            _assert_tables_equal(kept[cand.key], old_kept[cand.key], cand.key)
            _assert_tables_equal(kept[cand.key], alone_kept[cand.key], cand.key)
            compared += 1
    return compared


@settings(max_examples=draws(3), derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.one_of(instances(), tight_instances()), st.integers(0, 3), st.sampled_from(["shuffled", "up", "down"]))
def test_the_round_gives_the_old_tables_and_bounds_bit_for_bit(case, seed, order):
    problem, options, *_ = case
    for overlap in (False, True):
        problem = replace(problem, overlap_grad_reduce=overlap)
        most = max_stages(problem, options) + 2
        pps = list(range(2, most + 1))
        if order == "shuffled":
            pps = np.random.default_rng(seed).permutation(pps).tolist()
        elif order == "down":
            pps.reverse()
        with mock.patch.object(inflight, "DEGREE_TABLES_FROM", 1):  # the degree's tables from its first ask
            for tp, mbs, dp, uses in usable_degrees(problem, options):
                d = degree_terms(problem, tp, dp, mbs, uses)
                for v in (1, 2):
                    COMPARED.append(_compare(problem, d, [
                        Candidate(tp=tp, dp=dp, micro_batch_size=mbs, pp=pp, uses=uses, v=v) for pp in pps]))


def test_the_random_instances_compared_many_tables():
    if not COMPARED:  # run alone or in another worker
        test_the_round_gives_the_old_tables_and_bounds_bit_for_bit()
    assert sum(COMPARED) >= 30 and sum(n > 0 for n in COMPARED) >= 10, COMPARED


def _gpt3_degree(v_pps):
    """GPT-3 175B's (tp 8, dp 8, b 1) degree on mixed-pool-8k (four types), the _rows calls and N of each ask of
    its part, for the (v, pp) asked in order; with the round's switches as they are."""
    from optsearch.candidates import node_uses
    from optsearch.cli.options import space_from_target
    from optsearch.edits import edited_problem
    from optsearch.targets import engine_problem

    problem = engine_problem("megatron", edited_problem("gpt3-175b", "mixed-pool-8k", []))
    options = space_from_target("megatron", problem)
    uses = tuple(node_uses(problem, 8, 8, 1, 1, options))
    d = degree_terms(problem, 8, 8, 1, uses, 1, 1)
    cache: dict = {}
    rows = []
    real = inflight._DegreePart._rows

    def counted(self, c0, c1, v, L, N=None):
        rows.append((v, c0, c1))
        return real(self, c0, c1, v, L, N)

    with mock.patch.object(inflight, "DEGREE_TABLES_FROM", 1), \
            mock.patch.object(inflight._DegreePart, "_rows", counted):
        for v, pp in v_pps:
            sharpened(problem, {}, d, Candidate(tp=8, dp=8, micro_batch_size=1, pp=pp, uses=uses, v=v),
                      Budget(objective="cost"), CandidateBound(True, 0.0, 0.0, 0.0), cache)
    parts = [p for k, p in cache.items() if isinstance(k, tuple) and k and k[0] == "inflight_degree"]
    return rows, parts


def test_a_degree_computes_its_v1_rows_once_and_its_v2_rows_without_rebuilds():
    """The behaviour: at v = 1 the first table covers every pp's counts (one _rows call for pp 4, 8, 16, 32, 48,
    where the old window grew on each), and at v = 2 asked from pp 48 down to 4 the table is never rebuilt at a
    larger N (its first build starts at pp = 2's least count). The old path computes rows on every ask."""
    asks = [(1, pp) for pp in (4, 8, 16, 32, 48)] + [(2, pp) for pp in (48, 32, 16, 8, 4)]
    rows, parts = _gpt3_degree(asks)
    assert [r for r in rows if r[0] == 1] == [(1, 1, rows[0][2])] and rows[0][2] > 48, rows
    assert [r for r in rows if r[0] == 2] == [(2, 3, rows[-1][2])], rows
    assert len(parts) == 1 and set(parts[0].by_v) == {1, 2}
    with _old("WHOLE_WINDOW"):
        old_rows, _ = _gpt3_degree(asks)
    assert len([r for r in old_rows if r[0] == 1]) == 5, old_rows  # the window grew on every pp
    assert len([r for r in old_rows if r[0] == 2 and r[1] < 49 and r[2] == 144]) >= 3, old_rows  # rebuilt at a larger N


COUNTED: list[int] = []


@settings(max_examples=draws(8), derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.one_of(instances(), tight_instances()))
def test_random_answers_with_the_degree_tables_equal_brute_force(case):
    """Random roomy and memory-tight instances (pp > 1 allowed), the degree's in-flight tables from its first ask:
    both backends answer what brute force answers."""
    problem, options, objective, kind, factor = case
    options = replace(options, max_stages=max(2, options.max_stages))
    assume(count_plans(problem, Budget(), options, limit=MAX_PLANS) <= MAX_PLANS)
    budget = _budget(problem, options, objective, kind, factor)
    asked = [0]
    real = inflight._DegreePart.least_times

    def counted(self, *args):
        asked[0] += 1
        return real(self, *args)

    with mock.patch.object(inflight, "DEGREE_TABLES_FROM", 1), \
            mock.patch.object(inflight._DegreePart, "least_times", counted):
        assert_backends_equal_brute_force(problem, budget, options)
    COUNTED.append(asked[0])


def test_the_brute_force_comparison_used_the_degree_tables():
    if not COUNTED:  # run alone or in another worker
        test_random_answers_with_the_degree_tables_equal_brute_force()
    assert sum(n > 0 for n in COUNTED) >= 2, COUNTED
