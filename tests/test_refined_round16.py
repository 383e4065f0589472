"""Round 16 (inflight3; docs/solver.md "Round 16: the in-flight tables' least times with less work (inflight3)",
its refined-tables part): bounds.refined_tables with TABLES_LEAN (the listed / composed masks kept per supply, the
joint walk's rows made lists where a walk reads them, `_least_rates_at_once`'s multipliers of every pair at once)
gives the tables of the old path (TABLES_LEAN off) bit for bit, every field and every row, with and without
every_pp, on random roomy and memory-tight instances with and without --overlap-grad-reduce, and the bounds read
from them (refined_bound_at, aggregate_bound_at, under every kind of budget) are the old ones; the multipliers at
once equal the pair loop's on random caps and prices (ties, equal caps); both backends answer what brute force
answers with the tables used at every pp from a degree's first ask. The tests name a switch that does not exist on
f6816aa (they fail there)."""

from __future__ import annotations

from dataclasses import fields, replace
from unittest import mock

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from draws import draws
from optsearch import bounds
from optsearch import solver as solver_module
from optsearch.baselines.exhaustive import count_plans
from optsearch.bounds import _least_rates_at_once, aggregate_bound_at, degree_terms, refined_bound_at, refined_tables
from optsearch.candidates import max_stages
from optsearch.spec.budget import Budget

from test_refined_arrays import _budgets
from test_solver import MAX_PLANS, _budget, assert_backends_equal_brute_force, instances, usable_degrees
from test_solver_memory import tight_instances


def _old():
    return mock.patch.object(bounds, "TABLES_LEAN", False)


def _assert_same_tables(got, want, where) -> None:
    for f in fields(want):
        x, y = getattr(got, f.name), getattr(want, f.name)
        if f.name in ("joint_iteration_s", "joint_rate"):
            assert len(x) == len(y), where
            for r in np.random.default_rng(len(y)).permutation(len(y)).tolist():  # rows read in any order
                assert x[r] == y[r] and all(type(a) is float for a in x[r]), (where, f.name, r)
        elif isinstance(y, np.ndarray):
            assert x.dtype == y.dtype and np.array_equal(x, y), (where, f.name)
        else:
            assert x == y, (where, f.name)


COMPARED: list[int] = []


@settings(max_examples=draws(4), derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.one_of(instances(), tight_instances()), st.booleans())
def test_the_lean_tables_are_the_old_tables_bit_for_bit(case, overlap):
    problem, options, *_ = case
    problem = replace(problem, overlap_grad_reduce=overlap)
    most = max_stages(problem, options) + 2
    compared = 0
    for every_pp in (False, True):
        with mock.patch.object(bounds, "MAX_COMPOSITIONS", 2 if every_pp else bounds.MAX_COMPOSITIONS):
            for tp, mbs, dp, uses in usable_degrees(problem, options):
                d = degree_terms(problem, tp, dp, mbs, uses)
                got = refined_tables(problem, d, most, every_pp)
                with _old():
                    want = refined_tables(problem, d, most, every_pp)
                _assert_same_tables(got, want, (tp, dp, mbs, every_pp))
                for budget in _budgets(problem, d, most)[1:]:
                    for pp in range(2, most + 1):
                        if every_pp:
                            a = aggregate_bound_at(problem, d, got, pp, budget)
                            with _old():
                                b = aggregate_bound_at(problem, d, want, pp, budget)
                        elif not want.listed[pp - 1]:
                            a = refined_bound_at(problem, d, got, pp, budget)
                            with _old():
                                b = refined_bound_at(problem, d, want, pp, budget)
                        else:
                            continue
                        assert a == b, (pp, budget, a, b)
                        compared += b.feasible
    COMPARED.append(compared)


def test_the_random_instances_compared_many_bounds():
    if not COMPARED:  # run alone or in another worker
        test_the_lean_tables_are_the_old_tables_bit_for_bit()
    assert sum(COMPARED) >= 50 and sum(n > 0 for n in COMPARED) >= 2, COMPARED


def test_the_multipliers_at_once_equal_the_pair_loop():
    rng = np.random.default_rng(16)
    for _ in range(draws(200)):
        G, K = int(rng.integers(1, 6)), int(rng.integers(0, 9))
        d = mock.Mock(price_per_gpu_hour=tuple(rng.choice([1.0, 2.5, 4.0, 4.0, 9.75], G).tolist()),
                      slots=tuple(int(x) for x in rng.integers(0, 6, G)))
        hold = rng.integers(0, 5, (K, G))  # equal caps: pairs with no multiplier
        pps = np.arange(1, 12, dtype=np.int64)
        L = int(rng.integers(0, 20))
        got = _least_rates_at_once(d, pps, L, hold)
        with _old():
            want = _least_rates_at_once(d, pps, L, hold)
        assert got.shape == want.shape and np.array_equal(got, want)


COUNTED: list[int] = []


@settings(max_examples=draws(4), derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.one_of(instances(), tight_instances()))
def test_random_answers_with_the_lean_tables_everywhere_equal_brute_force(case):
    """The tables at every pp from a degree's first ask (no composition listed, the aggregate first from one):
    both backends answer what brute force answers on random roomy and memory-tight instances."""
    problem, options, objective, kind, factor = case
    options = replace(options, max_stages=max(2, options.max_stages))
    assume(count_plans(problem, Budget(), options, limit=MAX_PLANS) <= MAX_PLANS)
    budget = _budget(problem, options, objective, kind, factor)
    built = [0]
    real = solver_module.refined_tables

    def counted(*args, **kw):
        built[0] += 1
        return real(*args, **kw)

    with mock.patch.object(solver_module, "REFINED_TABLES_FROM", 1), \
            mock.patch.object(bounds, "MAX_COMPOSITIONS", 0), \
            mock.patch.object(solver_module, "refined_tables", counted):
        assert_backends_equal_brute_force(problem, budget, options)
    COUNTED.append(built[0])


def test_the_brute_force_comparison_built_tables():
    if not COUNTED:  # run alone or in another worker
        test_random_answers_with_the_lean_tables_everywhere_equal_brute_force()
    assert sum(n > 0 for n in COUNTED) >= 2, COUNTED
