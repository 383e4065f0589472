"""The in-flight cost walk by blocks of intervals and the exact Lagrangian multiplier (issue 14, item 3, bigproof;
docs/solver.md "Round 9: the large models' proofs (bigproof)"):

- inflight._least_rent with the multiplier taken from the kinks of phi equals the Lagrangian dual's maximum (every
  kink evaluated by brute force), is never below the 16-step bisection it replaces, and never above the least rent of
  any assignment of types to positions (brute force): it is still a lower bound on every plan's rent;
- inflight._plain_cost (R only at the intervals that decide, a block of intervals bounded by R at its last and it at
  its first) never lies above the plain walk over every interval and decides against any target as that walk does,
  on the tables of random memory-tight instances and of a catalog model on a four-type pool, under deadlines and
  rent limits; a block bounded by the wrong ends (it at its last interval) fails it;
- R computed for a few intervals first, then for every one, gives the values computed for every one at once;
- the in-flight cost bound under cutoffs (the plan's own cost, and half of it) lies below every plan of random
  memory-tight instances (every recomputation mode, block recomputation, cp), brute-forced."""

from __future__ import annotations

import functools
import inspect
import itertools
import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from draws import draws

from optsearch import inflight
from optsearch.baselines.exhaustive import count_plans
from optsearch.bounds import CandidateBound
from optsearch.candidates import (
    context_parallel_candidates, dp_candidates, micro_batch_candidates, node_uses, tp_candidates,
)
from optsearch.formulation.model import Candidate
from optsearch.inflight import _least_rent, _plain_cost, _rent, _rent_at, sharpened
from optsearch.search import BOUND_SLACK, budget_violations
from optsearch.solver import Memo
from optsearch.spec.budget import Budget

from test_costrows_bounds import _table
from test_inflight_bound import _plans
from test_solver import MAX_PLANS
from test_solver_memory import tight_instances

REL = 1e-9


def _phi_at_every_kink(price, caps, middle, L) -> float:
    """max over lambda of L lambda + sum_i min_g (p_g - lambda k_gi), by evaluating every kink (every tie of two
    usable types at a position) and 0: the Lagrangian dual's maximum, the LP's least rent (a cap above L taken as L,
    as _least_rent does: the same assignments hold L layers)."""
    usable = (caps >= 1) | ~middle[None, :]
    k = np.where(usable, np.minimum(np.maximum(caps, 0.0), L), 0.0)
    lams = {0.0}
    for i in range(caps.shape[1]):
        for g, h in itertools.combinations(range(len(price)), 2):
            if usable[g, i] and usable[h, i] and k[g, i] != k[h, i]:
                lam = (price[h] - price[g]) / (k[h, i] - k[g, i])
                if lam > 0:
                    lams.add(lam)
    return max(lam * L + np.where(usable, price[:, None] - lam * k, np.inf).min(axis=0).sum() for lam in lams)


def _brute_least_rent(price, caps, middle, L) -> float:
    """The least sum of prices over every assignment of types to positions that holds L layers, every middle
    position on a type holding >= 1."""
    G, pp = caps.shape
    best = math.inf
    for types in itertools.product(range(G), repeat=pp):
        if any(caps[g, i] < 1 for i, g in enumerate(types) if middle[i]):
            continue
        if sum(max(caps[g, i], 0.0) for i, g in enumerate(types)) >= L:
            best = min(best, sum(price[g] for g in types))
    return best


def test_the_exact_multiplier_reaches_the_duals_maximum_and_stays_below_every_assignment(monkeypatch):
    """250 random cap tables (2-4 types, 2-6 positions, caps 0-8, 3-24 layers): the rent equals the Lagrangian dual's
    maximum (to 1e-9), is at least the bisection's, and at most the least rent of every assignment (brute force);
    equal to it on some (the LP is integral there, so a rent raised by any amount fails)."""
    rng = np.random.default_rng(14)
    reached = 0
    for _ in range(250):
        G, pp, L = int(rng.integers(2, 5)), int(rng.integers(2, 7)), int(rng.integers(3, 25))
        price = rng.uniform(0.5, 40.0, G).round(4)
        caps = rng.integers(0, 9, (G, pp)).astype(float)
        tab = _table(price, L, pp)
        got = _least_rent(tab, caps[None])[0]
        brute = _brute_least_rent(price, caps, tab.middle, L)
        if math.isinf(brute):
            assert math.isinf(got)
            continue
        dual = _phi_at_every_kink(price, caps, tab.middle, L)
        assert abs(got - dual) <= REL * dual, (price, caps, L, got, dual)
        assert got <= brute * (1 + REL), (price, caps, L, got, brute)
        monkeypatch.setattr(inflight, "EXACT_MULTIPLIER", False)
        assert got >= _least_rent(tab, caps[None])[0] * (1 - REL)
        monkeypatch.setattr(inflight, "EXACT_MULTIPLIER", True)
        reached += got >= brute * (1 - REL)
    assert reached >= 10


def _full_walk(tab, rent, iterations, max_time_s=None, max_rate=None) -> float:
    """The plain walk over every interval: the least R(M_j) it(M_j) (USD/h x s) over the intervals that meet the
    limits, with R (`rent`) computed at every one; inf when none does."""
    ok = inflight._meets(rent, tab.iteration, iterations, max_time_s, None, max_rate)
    return float((rent[ok] * tab.iteration[ok]).min()) if ok.any() else math.inf


def _fresh(tab):
    """The same tables with no R computed yet."""
    rent = np.where(np.isposinf(tab.rent), np.inf, np.nan)  # inflight_tables' own infinite start is kept
    return replace(tab, rent=rent)


def _check_tables(tables, iterations):
    """_plain_cost against the full walk on each table: never above it, and at least min(it, target)."""
    checked = 0
    for tab in tables:
        every = _fresh(tab)
        _rent(every, len(every.marks))
        full = _full_walk(tab, every.rent, iterations)
        if not math.isfinite(full):
            continue
        lo_it = float(tab.iteration.min())
        for deadline in (None, 1.5 * lo_it * iterations, 3.0 * lo_it * iterations):
            for rate in (None, 1.2 * full / lo_it):
                want = _full_walk(tab, every.rent, iterations, deadline, rate)
                for f in (0.5, 0.9, 0.99, 1.0, 1.01, 1.1, 2.0, math.inf):
                    target = f * want if math.isfinite(want) else f * full
                    got = _plain_cost(_fresh(tab), iterations, deadline, None, rate, target)
                    if not math.isfinite(want):
                        assert got is None, (deadline, rate, got)
                        continue
                    assert got is not None
                    value = got[1] * 3600.0 / (1 - 1e-9)
                    assert value <= want * (1 + REL), (f, value, want)  # never above the full walk: as valid
                    assert value >= min(want, target) * (1 - REL), (f, value, want, target)  # decides as it does
                    checked += 1
    return checked


def _tables(problem, options):
    """The in-flight tables of every v = 1 candidate (every cp of the space)."""
    memo = Memo(problem, options)
    for tp in tp_candidates(problem):
        for mbs in micro_batch_candidates(problem, options):
            for cp in context_parallel_candidates(problem, options):
                for dp in dp_candidates(problem, tp, mbs, None, cp):
                    uses = tuple(node_uses(problem, tp, dp, mbs, cp))
                    for pp in range(2, options.max_stages + 1) if uses else ():
                        cand = Candidate(tp=tp, dp=dp, micro_batch_size=mbs, pp=pp, uses=uses, cp=cp)
                        d = memo.degree_terms(tp, dp, mbs, uses, 1, cp)
                        sharpened(problem, memo.inflight, d, cand, Budget(objective="cost"),
                                  CandidateBound(True, 0.0, 0.0, 0.0), memo.calls)
    return [t for t in memo.inflight.values() if t is not None]


@settings(max_examples=draws(10), derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(tight_instances(), st.sampled_from(["per-stage", "uniform+block+cp"]))
def test_the_walk_by_blocks_decides_as_the_walk_over_every_interval(case, space):
    problem, options, _, _, _ = case
    options = replace(options, max_stages=8)  # deeper than brute force goes: tables of more intervals
    if space != "per-stage":
        options = replace(options, uniform_recompute=True, block_recompute=True, context_parallel_sizes=(1, 2))
    _check_tables(_tables(problem, options), problem.iterations)


@functools.lru_cache(maxsize=1)
def _catalog_tables():
    """The tables of a few deep candidates of GPT-2 XL on a four-type pool (40-80 marks each)."""
    from optsearch.cli.options import space_from_target
    from optsearch.edits import edited_problem
    from optsearch.targets import engine_problem

    problem = engine_problem("megatron", edited_problem("gpt2-xl", "mixed-pool-8k", []))
    options = space_from_target("megatron", problem)
    memo = Memo(problem, options)
    for tp, dp, mbs, pp, cp in [(1, 8, 1, 12, 1), (2, 4, 2, 24, 1), (1, 16, 1, 8, 2), (4, 2, 4, 16, 1),
                                (2, 2, 1, 48, 1)]:
        uses = tuple(node_uses(problem, tp, dp, mbs, cp, options))
        cand = Candidate(tp=tp, dp=dp, micro_batch_size=mbs, pp=pp, uses=uses, cp=cp)
        d = memo.degree_terms(tp, dp, mbs, uses, 1, cp)
        sharpened(problem, memo.inflight, d, cand, Budget(objective="cost"), CandidateBound(True, 0.0, 0.0, 0.0),
                  memo.calls)
    return problem, [t for t in memo.inflight.values() if t is not None]


def test_the_walk_by_blocks_decides_as_the_walk_over_every_interval_on_a_catalog_model():
    problem, tables = _catalog_tables()
    assert sum(len(t.marks) >= 20 for t in tables) >= 3  # blocks of many intervals are split here
    assert _check_tables(tables, problem.iterations) >= 100


def test_a_block_bounded_by_its_last_iteration_fails_the_comparison(monkeypatch):
    """The block's value takes it at its FIRST interval (it grows with j); at its last it overstates the block, and
    the comparison with the full walk catches it (the function's source, mutated in one place)."""
    problem, tables = _catalog_tables()
    source = inspect.getsource(inflight._plain_cost_walk)  # the walk (round 17: a generator _plain_cost drives)
    assert source.count("tab.iteration[[a for a, _ in parts]]") == 1
    namespace = dict(vars(inflight))
    exec(compile(source.replace("tab.iteration[[a for a, _ in parts]]", "tab.iteration[[b for _, b in parts]]"),
                 "mutant", "exec"), namespace)
    mutant = namespace["_plain_cost_walk"]
    monkeypatch.setitem(globals(), "_plain_cost", lambda *a, **k: inflight._drive(mutant(*a, **k)))
    with pytest.raises(AssertionError):
        _check_tables(tables, problem.iterations)


def test_rent_computed_in_parts_equals_rent_computed_at_once():
    problem, tables = _catalog_tables()
    rng = np.random.default_rng(3)
    for tab in tables:
        once = _fresh(tab)
        _rent(once, len(once.marks))
        parts = _fresh(tab)
        _rent_at(parts, np.sort(rng.choice(len(tab.marks), size=max(1, len(tab.marks) // 3), replace=False)))
        _rent(parts, len(parts.marks))
        assert np.array_equal(once.rent, parts.rent)


@settings(max_examples=draws(6), derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(tight_instances(), st.sampled_from(["per-stage", "uniform+block", "uniform+block+cp"]))
def test_the_inflight_cost_bound_under_cutoffs_lies_below_every_plan(case, space):
    """Every plan of every v = 1 candidate (its least recomputation; block recomputation where the space has it),
    with no budget and under the plan's own time as the deadline, with the cutoff at the plan's own cost, half of
    it, and none: the bound is at most the plan's cost per iteration."""
    problem, options, _, _, _ = case
    if space != "per-stage":
        options = replace(options, uniform_recompute=True, block_recompute=True,
                          context_parallel_sizes=(1, 2) if space.endswith("cp") else (1,))
    assume(count_plans(problem, Budget(), options, limit=MAX_PLANS) <= MAX_PLANS)
    memo = Memo(problem, options)
    for cand, (plan, est) in _plans(problem, options):
        d = memo.degree_terms(cand.tp, cand.dp, cand.micro_batch_size, cand.uses, 1, cand.cp, cand.dist)
        per_iteration = est.usd_per_hour * est.iteration_time_s / 3600
        for budget in (Budget(objective="cost"), Budget(objective="cost", max_time_s=est.training_time_s)):
            assert not budget_violations(plan, est, budget)
            for cutoff in (math.inf, est.cost_usd, 0.5 * est.cost_usd):
                got = sharpened(problem, memo.inflight, d, cand, budget, CandidateBound(True, 0.0, 0.0, 0.0),
                                memo.calls, cutoff)
                assert got.feasible, (plan, budget)
                assert got.cost_per_iteration_usd <= per_iteration * (1 + REL), (plan, budget, cutoff)
    assert BOUND_SLACK >= 1.0
