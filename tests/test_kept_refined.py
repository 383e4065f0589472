"""A v = 1 candidate's refined bound kept per budget for its interleaved siblings (issue 14, item 3, round 19, cheapq).

solver.KEEP_REFINED: Memo.refined_bound keeps the bound of a v = 1 candidate (slower_than_s = 0) under a key of the
candidate and the budget's objective and limits (solver._kept_key, Memo.kept_refined). A v > 1 candidate's refined
bound is its v = 1 sibling's under the budget scaled by 1 / f_v, relaxed (bounds.interleaved_bound), so the siblings
v = 2, 3, 4 of one pp (and the v = 1 candidate itself, on a budget without time or cost limits) asked the same bound
again: on GPT-3 175B 8k cost, 8,151 refined asks of the list's first 9,000 entries computed 5,350 bounds. No bound
changes value: the kept one is the one the memo computed for the same candidate, terms and budget fields. Here: the
kept bounds equal the ones computed afresh, bit for bit, on many candidates (every degree, pp, v 1-4, five budgets
asked on one memo as a sweep does) of roomy, memory-tight and T5-like instances; a key without the budget's limits
(a stale bound under another budget) is caught; the v > 1 asks compute each v = 1 bound once; and a sweep of solves
on one memo answers what brute force answers with both backends."""

from __future__ import annotations

from unittest import mock

import pytest

from optsearch import solver as solver_module
from optsearch.bounds import degree_terms
from optsearch.candidates import SpaceOptions, max_stages
from optsearch.formulation.model import Candidate
from optsearch.solver import Memo, solve
from optsearch.spec.budget import Budget

from test_refined_arrays import _cases, _t5_tight
from test_solver import assert_backends_equal_brute_force, usable_degrees
from test_solver_memory import issue_example


def _budgets(problem, options) -> list[Budget]:
    """No limit (both objectives), a deadline, a cost budget and a rent limit, from the instance's fastest and
    cheapest plans (each limit at 1.2 x their values: some candidates meet it, some do not)."""
    fast = solve(problem, Budget(objective="time"), options=options).estimate
    cheap = solve(problem, Budget(objective="cost"), options=options).estimate
    return [Budget(objective="cost"), Budget(objective="time"),
            Budget(objective="cost", max_time_s=fast.training_time_s * 1.2),
            Budget(objective="time", max_cost_usd=cheap.cost_usd * 1.2),
            Budget(objective="cost", max_usd_per_hour=cheap.usd_per_hour * 1.2)]


def _instances():
    from test_composition_arrays import _small

    return [(_small(), SpaceOptions(micro_batch_sizes=(1,), max_stages=3)),
            (issue_example(nodes=3), SpaceOptions(micro_batch_sizes=(1, 2, 4), max_stages=3)),
            (_t5_tight(), SpaceOptions(micro_batch_sizes=(1, 2), max_stages=2))]


def _compare_kept_and_computed(problem, options, budgets) -> tuple[int, int]:
    """Every candidate (every degree, pp 1..max, v 4, 3, 2 then 1) under every budget, asked in that order on ONE memo
    with KEEP_REFINED (the budgets one after another, as a what-if sweep asks them) and on a fresh memo per budget
    without it: the same CandidateBound, bit for bit. Returns (asks, bounds computed on the kept memo) under the
    budgets without a time or cost limit (there the siblings' scaled budget is the budget itself)."""
    kept = Memo(problem, options)
    computed = []
    real = Memo._refined_bound_v1

    def counted(self, *args):
        if self is kept:
            computed.append(args[1].key)
        return real(self, *args)

    asks = shared = 0
    with mock.patch.object(Memo, "_refined_bound_v1", counted):
        for budget in budgets:
            unscaled = budget.max_time_s is None and budget.max_cost_usd is None
            before = len(computed)
            with mock.patch.object(solver_module, "KEEP_REFINED", False):
                fresh = Memo(problem, options)
            for tp, mbs, dp, uses in usable_degrees(problem, options):
                d = degree_terms(problem, tp, dp, mbs, uses)
                for pp in range(1, max_stages(problem, options) + 1):
                    for v in (4, 3, 2, 1):
                        cand = Candidate(tp=tp, dp=dp, micro_batch_size=mbs, pp=pp, uses=uses, v=v)
                        got = kept.refined_bound(d, cand, budget)
                        with mock.patch.object(solver_module, "KEEP_REFINED", False):
                            want = fresh.refined_bound(d, cand, budget)
                        assert got == want, (cand.key, budget, got, want)
                        asks += unscaled
            shared += (len(computed) - before) * unscaled
    return asks, shared


@pytest.mark.parametrize("case", range(3))
def test_the_kept_refined_bounds_equal_the_computed_ones_bit_for_bit(case):
    problem, options = _instances()[case]
    asks, computed = _compare_kept_and_computed(problem, options, _budgets(problem, options))
    assert asks >= 100
    assert computed * 4 == asks  # v = 4, 3 and 2 computed their sibling's bound once, v = 1 took it


def test_a_key_without_the_budgets_limits_is_caught():
    """A key of the candidate alone (what a cache that forgot the budget would use) returns the bound of the first
    budget under the next ones: the comparison fails."""
    problem, options = _instances()[1]
    with mock.patch.object(solver_module, "_kept_key", lambda cand, budget: cand.key), \
            pytest.raises(AssertionError):
        _compare_kept_and_computed(problem, options, _budgets(problem, options))


def test_a_sweep_on_one_memo_answers_brute_force_with_both_backends():
    """The issue's memory-tight instance (cost), solved under a tight and a loose budget on one memo (its kept
    bounds carried from solve to solve), each answer checked against brute force with CBC and CP-SAT. (Every
    brute-force test of the suite runs with KEEP_REFINED on, the T5-like and interleaved ones included.)"""
    from test_solver import _budget

    _, problem, options, objective, kind = _cases()[2]
    memo = Memo(problem, options)
    for factor in (0.8, 2.0):
        budget = _budget(problem, options, objective, kind, factor)
        truth = assert_backends_equal_brute_force(problem, budget, options)
        got = solve(problem, budget, options=options, memo=memo)
        assert got.status == truth.status
        if truth.status == "optimal":
            assert got.objective_value == pytest.approx(truth.objective_value, rel=1e-9)
    assert memo.kept_refined
