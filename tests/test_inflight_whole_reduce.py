"""The in-flight bound's whole-reduce floor under --overlap-grad-reduce (optsearch/inflight.py, whole_reduce_floor_s;
issue 14, round 9): it(M_j) >= (m - 1) max(M_j, stages_s / pp) + the whole all-reduce, optimizer and embedding
floors, taken beside the old expression, and the budget walk adds a bucket's all-reduce to the old expression only.
The bound lies below every plan priced with the overlap (the distributed optimizer and the overlap as the search sets
them), under every budget of test_inflight_bound._budgets, on random instances and on a pipelined instance whose
reduce dominates; there it lies within 2 % of the plans with the overlap on (1.058 without the floor), so a floor 5 %
stronger fails (checked by hand: whole_s x 1.05 in inflight_tables fails the second test below). Not caught here:
adding a bucket's all-reduce to the whole-reduce floor too (the double count the walk avoids) passes both tests on
these instances (checked by hand; their buckets' extra is 0 or absorbed by the plans' imbalance)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, assume, given, settings
from draws import draws

from optsearch.baselines.exhaustive import count_plans
from optsearch.bounds import CandidateBound
from optsearch.candidates import SpaceOptions
from optsearch.formulation.model import Candidate
from optsearch.inflight import sharpened
from optsearch.search import budget_violations
from optsearch.solver import Memo
from optsearch.spec.budget import Budget

from test_inflight_bound import _budgets
from test_overlap_solve import _pipeline_problem
from test_solver import MAX_PLANS, instances, plans_as_searched, usable_degrees


def _overlapped_plans(problem, options):
    """(candidate, plan, estimate) for every plan of every v = 1 candidate at its least recomputation, priced as the
    search prices it: the distributed optimizer and the overlap where they are on."""
    for tp, mbs, dp, uses in usable_degrees(problem, options):
        for pp in range(1, options.max_stages + 1):
            cand = Candidate(tp=tp, dp=dp, micro_batch_size=mbs, pp=pp, uses=uses)
            for plan, est in plans_as_searched(problem, options, tp, mbs, dp, uses, pp):
                yield cand, plan, est


def _least_ratios(problem, options) -> tuple[float, float, int]:
    """(the least plan value / bound over every plan and budget, the same over the plans with the overlap on, in how
    many (plan, budget) pairs the whole-reduce floor raised some interval's it(M_j)). The ratios are at least 1 (less
    1e-9) when the bound is valid."""
    memo = Memo(problem, options)
    least, overlapped, raised = float("inf"), float("inf"), 0
    for cand, plan, est in _overlapped_plans(problem, options):
        terms = memo.degree_terms(cand.tp, cand.dp, cand.micro_batch_size, cand.uses, 1, 1)
        for budget in _budgets(est):
            assert not budget_violations(plan, est, budget)
            got = sharpened(problem, memo.inflight, terms, cand, budget, CandidateBound(True, 0.0, 0.0, 0.0),
                            memo.calls)
            assert got.feasible, (plan, budget)
            if got.iteration_s == 0.0:  # several layer kinds: not applicable
                continue
            tab = memo.inflight[cand.key]
            raised += tab.base_iteration is not None and bool((tab.iteration > tab.base_iteration).any())
            ratio = est.iteration_time_s / got.iteration_s
            if budget.objective == "cost":
                ratio = min(ratio, est.usd_per_hour * est.iteration_time_s / 3600 / got.cost_per_iteration_usd)
            least = min(least, ratio)
            if plan.overlap_grad_reduce:
                overlapped = min(overlapped, ratio)
    return least, overlapped, raised


@settings(max_examples=draws(4), derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(instances())
def test_the_inflight_bound_lies_below_every_overlapped_plan(case):
    problem, options, _, _, _ = case
    problem = replace(problem, overlap_grad_reduce=True)
    options = SpaceOptions(micro_batch_sizes=options.micro_batch_sizes, max_stages=options.max_stages,
                           recompute_modes=options.recompute_modes)
    assume(count_plans(problem, Budget(), options, limit=MAX_PLANS) <= MAX_PLANS)
    assert _least_ratios(problem, options)[0] >= 1 - 1e-9


def test_the_whole_reduce_floor_binds_and_is_tight_where_the_reduce_dominates():
    """pp up to 3, dp 1-4 on a 1 Gbit/s network, no distributed optimizer: the exposed floor is 0 and the reduce
    dominates the iteration. The bound lies below every plan, and within 2 % of some plan with the overlap on (checked
    by hand: 1.0006 with the whole-reduce floor, 1.058 without it; x 1.05 declares a dp 4 plan infeasible under its own
    deadline), and the floor raised it(M_j) somewhere."""
    problem = _pipeline_problem(False, inter_gbit=1.0)
    options = SpaceOptions(micro_batch_sizes=(1,), recompute_modes=("none",), max_stages=3)
    least, overlapped, raised = _least_ratios(problem, options)
    assert least >= 1 - 1e-9
    assert 1 - 1e-9 <= overlapped <= 1.02, overlapped
    assert raised > 0
