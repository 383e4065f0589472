"""The aggregate refined bound ahead of the per-composition one (issue 14, item 3, round 15, aggfirst).

bounds.refined_tables(every_pp=True) keeps the aggregate refined bound's terms also at the pp whose compositions are
listed, and bounds.aggregate_bound_at finishes it under a budget: the value candidate_bound(refined=True) has there
when no composition is listed (MAX_COMPOSITIONS = 0), bit for bit, so a valid lower bound over every plan of the
candidate, checked here against brute force on roomy and memory-tight instances. The loop's cheap -> refined step
takes it first (solver.AGGREGATE_FIRST, Memo.aggregate_first) and skips the per-composition work of a candidate it
lifts past the queue's front; the answers stay brute force's with both backends."""

from __future__ import annotations

from dataclasses import replace
from unittest import mock

import pytest
from hypothesis import HealthCheck, assume, given, settings
from draws import draws
from hypothesis import strategies as st

from optsearch import bounds
from optsearch import solver as solver_module
from optsearch.baselines.exhaustive import count_plans
from optsearch.bounds import (
    aggregate_bound_at, candidate_bound, composition_count, degree_terms, interleaved_bound, interleaving_factor,
    refined_bound_at, refined_tables,
)
from optsearch.candidates import SpaceOptions, max_stages
from optsearch.formulation.model import Candidate
from optsearch.search import budget_violations
from optsearch.solver import Memo, _interleaved_budget, solve
from optsearch.spec.budget import Budget

from test_refined_arrays import _budgets, _cases
from test_solver import MAX_PLANS, _budget, assert_backends_equal_brute_force, instances, plans_as_searched, \
    usable_degrees
from test_solver_memory import tight_instances


def _compare_every_pp(problem, d, most: int) -> int:
    """At every pp > 1 of d, under every budget of test_refined_arrays._budgets: aggregate_bound_at from the tables
    built with every_pp equals the scalar aggregate bound (no composition listed), and at the pp not listed it
    equals refined_bound_at from the tables built without (their rows do not change). Returns how many listed pp
    had a feasible bound compared."""
    tab = refined_tables(problem, d, most, every_pp=True)
    plain = refined_tables(problem, d, most)
    compared = 0
    for budget in _budgets(problem, d, most):
        for pp in range(2, most + 1):
            with mock.patch.object(bounds, "MAX_COMPOSITIONS", 0):
                want = candidate_bound(problem, d, pp, budget, refined=True)
            got = aggregate_bound_at(problem, d, tab, pp, budget)
            assert got == want, (pp, budget, got, want)  # exact, not approximate
            if not tab.listed[pp - 1]:
                assert refined_bound_at(problem, d, tab, pp, budget) == refined_bound_at(problem, d, plain, pp, budget)
            compared += bool(tab.listed[pp - 1] and want.feasible)
    return compared


COMPARED: list[int] = []


@settings(max_examples=draws(12), derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.one_of(instances(), tight_instances()), st.booleans())
def test_the_tables_at_every_pp_equal_the_scalar_aggregate_bound_bit_for_bit(case, overlap):
    problem, options, *_ = case
    problem = replace(problem, overlap_grad_reduce=overlap)
    most = max_stages(problem, options) + 3  # beyond the space's stages too: more slots than layers, supply limits
    for tp, mbs, dp, uses in usable_degrees(problem, options):
        COMPARED.append(_compare_every_pp(problem, degree_terms(problem, tp, dp, mbs, uses), most))


def test_the_random_instances_compared_listed_pp():
    """The property test above compared feasible bounds at listed pp (its instances list every composition)."""
    if not COMPARED:  # run alone or in another worker: run it here
        test_the_tables_at_every_pp_equal_the_scalar_aggregate_bound_bit_for_bit()
    assert sum(COMPARED) >= 60 and sum(n > 0 for n in COMPARED) >= 8


BELOW: list[int] = []


def _check_below_every_plan(problem, options, budget) -> int:
    """aggregate_bound_at at every listed pp > 1 lies below every plan of the candidate that meets the budget (time,
    rent, rent x time per iteration), and where it says infeasible no plan meets it. Returns the plans compared."""
    compared = 0
    most = max_stages(problem, options)
    for tp, mbs, dp, uses in usable_degrees(problem, options):
        d = degree_terms(problem, tp, dp, mbs, uses)
        tab = refined_tables(problem, d, most, every_pp=True)
        for pp in range(2, most + 1):
            if not tab.listed[pp - 1]:
                continue
            bound = aggregate_bound_at(problem, d, tab, pp, budget)
            for plan, est in plans_as_searched(problem, options, tp, mbs, dp, uses, pp):
                if budget_violations(plan, est, budget):
                    continue
                compared += 1
                assert bound.feasible, (plan, bound)
                assert bound.iteration_s <= est.iteration_time_s * (1 + 1e-9), (plan, bound)
                assert bound.rate_usd_per_hour <= est.usd_per_hour * (1 + 1e-9), (plan, bound)
                assert bound.cost_per_iteration_usd <= est.usd_per_hour * est.iteration_time_s / 3600 * (1 + 1e-9), (
                    plan, bound)
    return compared


@settings(max_examples=draws(12), derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.one_of(instances(), tight_instances()))
def test_the_aggregate_bound_at_listed_pp_lies_below_every_plan(case):
    """Brute force over every plan of every candidate (type sequence, layer split, least recomputation) on roomy
    and memory-tight instances (long sequences, small GPUs, T5-like two kinds), under their budgets."""
    problem, options, objective, kind, factor = case
    options = replace(options, max_stages=max(2, options.max_stages))  # pp > 1: where the aggregate is taken first
    assume(count_plans(problem, Budget(), options, limit=MAX_PLANS) <= MAX_PLANS)
    budget = _budget(problem, options, objective, kind, factor)
    BELOW.append(_check_below_every_plan(problem, options, budget))


def test_the_brute_force_comparison_saw_plans():
    if not BELOW:
        test_the_aggregate_bound_at_listed_pp_lies_below_every_plan()
    assert sum(BELOW) >= 300 and sum(n > 0 for n in BELOW) >= 5


def test_a_bound_one_part_in_a_million_too_high_is_caught_by_brute_force():
    """The brute-force check can fail: the tables' rents (exact on this instance: the cheapest plan's) raised by
    1e-6 put some bound above a plan."""
    from test_composition_arrays import _small

    problem, options = _small(), SpaceOptions(micro_batch_sizes=(1,), max_stages=4)
    real = bounds._aggregate_arrays

    def higher(*args):
        ok, iteration, rate, *rest = real(*args)
        return (ok, iteration, rate * (1 + 1e-6), *rest)

    caught = 0
    with mock.patch.object(bounds, "_aggregate_arrays", higher):
        for budget in (Budget(objective="cost"), Budget(objective="time")):
            try:
                _check_below_every_plan(problem, options, budget)
            except AssertionError:
                caught += 1
    assert caught > 0


def _small_candidate(problem, options, pp: int, v: int = 1):
    """A candidate of the small two-type instance at pp with its degree's terms (tp 1, b 1, dp 1)."""
    from optsearch.candidates import node_uses

    uses = tuple(node_uses(problem, 1, 1, 1))
    d = degree_terms(problem, 1, 1, 1, uses)
    return d, Candidate(tp=1, dp=1, micro_batch_size=1, pp=pp, uses=uses, v=v)


def test_memo_takes_the_aggregate_first_only_where_the_refined_bound_is_per_composition(monkeypatch):
    """Memo.aggregate_first: None on a degree's first ask (no tables yet), then the tables' value; None under a
    cost budget, at pp = 1, below AGGREGATE_FIRST_FROM compositions and once the composition list is kept; with
    v > 1 the v = 1 value under the budget / f_v relaxed by f_v (as Memo.refined_bound)."""
    from test_composition_arrays import _small

    monkeypatch.setattr(solver_module, "AGGREGATE_FIRST_FROM", 2)
    problem, options = _small(), SpaceOptions(micro_batch_sizes=(1,), max_stages=4)
    d, cand = _small_candidate(problem, options, 3)
    assert composition_count(d, 3) >= 2
    memo = Memo(problem, options)
    free = Budget(objective="cost")
    assert memo.aggregate_first(d, cand, free) is None  # the degree's first ask: no tables
    got = memo.aggregate_first(d, cand, free)
    with mock.patch.object(bounds, "MAX_COMPOSITIONS", 0):
        want = candidate_bound(problem, d, 3, free, refined=True)
    assert got == want and got.feasible
    deadline = Budget(objective="cost", max_time_s=want.iteration_s * problem.iterations * 1.5)
    with mock.patch.object(bounds, "MAX_COMPOSITIONS", 0):
        assert memo.aggregate_first(d, cand, deadline) == candidate_bound(problem, d, 3, deadline, refined=True)
    assert memo.aggregate_first(d, cand, Budget(objective="time", max_cost_usd=1e12)) is None
    assert memo.aggregate_first(d, replace(cand, pp=1), free) is None
    monkeypatch.setattr(solver_module, "AGGREGATE_FIRST_FROM", composition_count(d, 3) + 1)
    assert memo.aggregate_first(d, cand, free) is None
    monkeypatch.setattr(solver_module, "AGGREGATE_FIRST_FROM", 2)
    v2 = replace(cand, v=2)
    factor = interleaving_factor(d.m, 3, 2)
    with mock.patch.object(bounds, "MAX_COMPOSITIONS", 0):
        inner = candidate_bound(problem, d, 3, _interleaved_budget(deadline, factor), refined=True)
    assert memo.aggregate_first(d, v2, deadline) == interleaved_bound(inner, d.m, 3, 2)
    memo.refined_bound(d, cand, free)  # the composition list is kept: the refined bound itself is next
    assert memo.aggregate_first(d, cand, free) is None


def _counting(monkeypatch) -> list[int]:
    """Counts the composition lists computed (bounds.composition_bounds through the solver's name)."""
    calls = [0]
    real = solver_module.composition_bounds

    def counted(*args, **kwargs):
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(solver_module, "composition_bounds", counted)
    return calls


def _many_compositions():
    """Four node types of two single-GPU nodes each (8 to 19 compositions at pp 2-6) and 12 layers."""
    from optsearch.spec import GpuSpec
    from test_solver import make_problem

    gpus = [GpuSpec(name=f"G{i}", memory_gib=40.0, peak_fp16_tflop_per_s=p, hbm_gbyte_per_s=h)
            for i, (p, h) in enumerate([(65.0, 600.0), (125.0, 900.0), (312.0, 1555.0), (312.0, 2000.0)])]
    node_types = [dict(name=f"t{i}", gpu=f"G{i}", gpus_per_node=1, num_nodes_available=2,
                       price_usd_per_node_hour=price, intra_node_link="nvlink", intra_node_gbyte_per_s=150.0,
                       inter_node_gbit_per_s=100.0) for i, price in enumerate([0.8, 1.5, 3.0, 4.2])]
    return make_problem(layers=12, hidden=512, heads=4, gbs=8, node_types=node_types, gpus=gpus, seq=512)


def test_the_loop_skips_composition_lists_and_answers_the_same(monkeypatch):
    """With AGGREGATE_FIRST (from one composition, tables from a degree's first ask) the loop computes fewer
    composition lists (12 -> 8 here) and proves the same optimum as without it, minimizing time on a four-type
    instance (minimizing cost, the seeds' plan meets this instance's cheap bounds: no loop to speak of)."""
    problem, options = _many_compositions(), SpaceOptions(micro_batch_sizes=(1, 2), max_stages=8)
    monkeypatch.setattr(solver_module, "AGGREGATE_FIRST_FROM", 1)
    monkeypatch.setattr(solver_module, "REFINED_TABLES_FROM", 1)
    calls = _counting(monkeypatch)
    got = {}
    for on in (False, True):
        monkeypatch.setattr(solver_module, "AGGREGATE_FIRST", on)
        calls[0] = 0
        result = solve(problem, Budget(objective="time"), options=options)
        got[on] = (result.status, result.objective_value, calls[0])
    assert got[True][0] == got[False][0] == "optimal"
    assert got[True][1] == pytest.approx(got[False][1], rel=1e-9)
    assert got[True][2] < got[False][2], got


@pytest.mark.parametrize("case", range(4))
def test_answers_with_the_aggregate_first_equal_brute_force_with_both_backends(case, monkeypatch):
    """The aggregate first at every listed pp (from 1 composition, tables from the first ask): the solver answers
    what brute force answers with CBC and with CP-SAT, on a roomy two-type instance (time; cost under a deadline),
    the issue's memory-tight one (cost) and a memory-tight T5-like one (time under a cost budget: the aggregate is
    not taken first there, the answer is still checked)."""
    _, problem, options, objective, kind = _cases()[case]
    budget = _budget(problem, options, objective, kind, 0.8)
    taken = _first_taken(monkeypatch)
    assert_backends_equal_brute_force(problem, budget, options)
    assert (taken[0] > 0) == (budget.max_cost_usd is None), taken  # the aggregate was taken first (both backends)


def _first_taken(monkeypatch) -> list[int]:
    """The aggregate first from one composition and tables from a degree's first ask; counts the aggregate bounds
    Memo.aggregate_first gives."""
    monkeypatch.setattr(solver_module, "AGGREGATE_FIRST_FROM", 1)
    monkeypatch.setattr(solver_module, "REFINED_TABLES_FROM", 1)
    # the middle level (round 20) takes the place of the aggregate first minimizing cost: off, so that this path runs
    monkeypatch.setattr(solver_module, "MIDDLE_JOINT", False)
    taken = [0]
    real = Memo.aggregate_first

    def counted(self, *args):
        got = real(self, *args)
        taken[0] += got is not None
        return got

    monkeypatch.setattr(Memo, "aggregate_first", counted)
    return taken


@settings(max_examples=draws(6), derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.function_scoped_fixture])
@given(st.one_of(instances(), tight_instances()))
def test_random_answers_with_the_aggregate_first_equal_brute_force(monkeypatch, case):
    """Random roomy and memory-tight instances (pp > 1 allowed), the aggregate first wherever it can be taken."""
    problem, options, objective, kind, factor = case
    options = replace(options, max_stages=max(2, options.max_stages))
    assume(count_plans(problem, Budget(), options, limit=MAX_PLANS) <= MAX_PLANS)
    budget = _budget(problem, options, objective, kind, factor)
    with monkeypatch.context() as patch:
        _first_taken(patch)
        assert_backends_equal_brute_force(problem, budget, options)
