"""The in-flight time walk's tied-embedding excess by the end pairs each interval admits (optsearch/inflight.py
_pair_excess, _time_by_ends, whole_levels_iteration(ends=True), switch INFLIGHT_ENDS_TIME; issue 14, item 3, round 18,
timerows2; docs/solver.md "Round 18: the in-flight time walk by end pairs").

E, the tied embedding's all-reduce between the first and the last stage, runs at the slower NIC of the pair of end
types. The in-flight time walk counted it at its least over every pair; now each interval also takes the least excess
over the pairs (a, b) whose ends can hold what the middle positions leave of L under that interval's caps (and that
node supply allows). Checked against brute force: every plan of every candidate (v = 1 and interleaved, every
optimizer setting the space holds) of the audit's two-type instances whose NICs differ (one of them a one-kind MoE),
and of memory-tight draws under --overlap-grad-reduce (the whole-reduce levels and the hiding floor; every mode,
block recomputation, cp in {1, 2}), lies above its candidate's in-flight time bound with no budget and under its own
deadline, each with the incumbent cutoff at the plan's own time, half and twice it, and none; the excess raises some
bounds (counted against the walk with the switch off); an invalid excess (the largest over the admitted pairs, not
the least) lies above some plan."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
from hypothesis import HealthCheck, given, settings
from draws import draws

import optsearch.inflight as inflight
from optsearch.baselines.exhaustive import count_plans
from optsearch.search import budget_violations, objective_value
from optsearch.solver import Bounded, Memo, _inflight_bounded
from optsearch.spec.budget import Budget

from test_audit_dist_bounds import MAX_PLANS, random_instance, space_plans
from test_solver_memory import overlapped_tight_case, tight_instances

_EXCESS = inflight._pair_excess  # the function under test, before any monkeypatch
CUTOFFS = (math.inf, 1.0, 0.5)  # the incumbent cutoff as a multiple of the plan's own time (inf: none)


def _budgets(est, deadline: bool = True):
    """Minimizing time with no budget and (deadline) under the plan's own deadline (the walks this round changes)."""
    yield Budget(objective="time")
    if deadline:
        yield Budget(objective="time", max_time_s=est.training_time_s)


def _least_ratio(problem, options, monkeypatch=None, deadline: bool = True, cutoffs=None) -> tuple[float, int]:
    """(the least plan time / in-flight bound over every plan of every candidate, every budget of _budgets and every
    cutoff (CUTOFFS), how many (candidate, budget, cutoff) bounds the end pairs raised above the walk without them);
    0 where a bound says no plan meets a budget that a plan meets."""
    memo, plain = Memo(problem, options), Memo(problem, options)
    least, raised = math.inf, 0
    kept: dict = {}
    for cand, plan, est in space_plans(problem, options):
        terms = memo.degree_terms(cand.tp, cand.dp, cand.micro_batch_size, cand.uses, cand.ep, cand.cp, cand.dist)
        value = est.training_time_s
        for budget in _budgets(est, deadline):
            assert not budget_violations(plan, est, budget)
            for cutoff in cutoffs or CUTOFFS:
                cutoff *= value
                key = (cand, budget.max_time_s, cutoff)
                if key not in kept:
                    kept[key] = _inflight_bounded(memo, budget, Bounded(cand, 0.0, terms), 0.0, cutoff)
                    if kept[key] is None:  # "no plan meets the budget": this plan does
                        return 0.0, raised
                    if monkeypatch is None and not raised:  # the tests ask for one raise per call
                        with _switch(False):
                            off = _inflight_bounded(plain, budget, Bounded(cand, 0.0, terms), 0.0, cutoff)
                        raised += kept[key] > off * (1 + 1e-9)
                got = kept[key]
                if got > 0:
                    least = min(least, objective_value(est, "time") / got)
    return least, raised


class _switch:
    """INFLIGHT_ENDS_TIME set for a block."""

    def __init__(self, on: bool):
        self.on = on

    def __enter__(self):
        self.was, inflight.INFLIGHT_ENDS_TIME = inflight.INFLIGHT_ENDS_TIME, self.on

    def __exit__(self, *exc):
        inflight.INFLIGHT_ENDS_TIME = self.was


def _cases(which=((random_instance, 5),)):
    """The audit's instances of two node types whose NICs differ, tied embeddings, pipelines of up to two stages
    (test_positional_last_end's; seed 35 is a one-kind mixture of experts)."""
    for instance, seed in which:
        problem, options = instance(seed)
        if count_plans(problem, Budget(), options, limit=MAX_PLANS) <= MAX_PLANS:
            yield problem, options


def test_the_end_pairs_lie_below_every_plan_on_two_type_instances():
    """Seed 5 with and without --overlap-grad-reduce (the whole-reduce levels' walk, and _time_by_ends), every budget
    and cutoff; the MoE seed 35 with no budget (its deadline budgets take 6 s of CPU)."""
    assert inflight.INFLIGHT_ENDS_TIME  # the switch ships on
    problem, options = next(_cases())
    assert problem.overlap_grad_reduce
    counts = []
    for case in ((problem, options), (replace(problem, overlap_grad_reduce=False), options)):
        least, raised = _least_ratio(*case)
        assert least >= 1 - 1e-9, case[0].overlap_grad_reduce
        counts.append(raised)
    problem, options = next(_cases(((random_instance, 35),)))
    assert problem.model.is_moe
    least, raised = _least_ratio(problem, options, deadline=False, cutoffs=(math.inf, 1.0))
    assert least >= 1 - 1e-9
    counts.append(raised)
    assert min(counts) > 0, counts  # the excess raised bounds on each: the checks above are not vacuous


@settings(max_examples=draws(3), derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(tight_instances())
def test_the_end_pairs_lie_below_every_plan_on_memory_tight_overlap_instances(case):
    made = overlapped_tight_case(case, max_plans=MAX_PLANS // 2)
    if made is None:
        return
    problem, options = made
    assert _least_ratio(problem, options)[0] >= 1 - 1e-9


def test_the_pair_excess_admits_by_caps_and_supply():
    """By hand: L = 5 on three positions, the middle holding 2 at best; the pairs whose ends hold 3 are admitted, and
    a pair on one type needs two of its slots."""
    caps = np.array([[[2.0, 1.0, 0.0],    # type 0: first 2, middle 1, last 0
                      [0.0, 2.0, 3.0]]])  # type 1: first 0, middle 2, last 3
    extra = np.array([[0.0, 0.5], [0.7, 0.9]])
    tab = inflight.InFlightTables(marks=np.zeros(1), iteration=np.zeros(1), caps=None, price=np.ones(2),
                                  middle=np.array([False, True, False]), w=1, L=5, ends_extra=extra,
                                  slots=np.array([3, 3]))
    # admitted: (0, 1) 2 + 3 + 2 = 7, (1, 1) 0 + 3 + 2 = 5; not (0, 0) 2 + 0 + 2 = 4 nor (1, 0) 2
    assert _EXCESS(tab, caps)[0] == 0.5
    tab.L = 6  # (0, 1) alone
    assert _EXCESS(tab, caps)[0] == 0.5
    tab.L, tab.ends_extra = 5, np.array([[0.0, 0.8], [0.7, 0.6]])
    assert _EXCESS(tab, caps)[0] == 0.6  # (1, 1) cheaper
    tab.slots = np.array([3, 1])  # two stages of type 1 need two of its slots: (0, 1) alone
    assert _EXCESS(tab, caps)[0] == 0.8
    tab.L = 8  # none admitted: no plan in the interval
    assert _EXCESS(tab, caps)[0] == np.inf


def _the_largest_admitted(tab, caps):
    """An invalid excess: the largest ends_extra over every pair wherever some pair is admitted (a plan may run on a
    cheaper pair)."""
    least = _EXCESS(tab, caps)
    return np.where(np.isfinite(least), float(tab.ends_extra.max()), least)


def test_an_invalid_pair_excess_fails(monkeypatch):
    monkeypatch.setattr(inflight, "_pair_excess", _the_largest_admitted)
    problem, options = next(_cases(((random_instance, 5),)))
    assert _least_ratio(problem, options, monkeypatch)[0] < 1 - 1e-9
