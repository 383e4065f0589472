"""Post-merge audit of round 12 (audit4): the seams between costbound (bounds.refined_tables / refined_bound_at,
Memo.refined_bound's tables), timerows (the in-flight time walk's cutoff_s) and timeload (_one_kind, the climbs'
shared ends). bench/audit_round12.py sweeps the solver against brute force with the tables forced.

  * the tables equal candidate_bound(refined=True) bit for bit on the degrees the round's own test does not draw:
    cp = 2, the distributed optimizer off (dist False), the gather copies' terms (gather_terms), and under budgets
    that combine a deadline, a rent limit and a cost budget, some set exactly at a table's own values (the ties of
    the walk's `>` stops);
  * Memo.refined_bound asked for one degree under two budgets (objectives) in turn answers as the scalar path;
  * minimizing time, the in-flight bound with a cutoff (cutoff_s) under a deadline or a rent limit (the solver
    passes it there too) lies below every plan of the candidate that meets the budget, and is at or above the cutoff
    wherever the bound without it is;
  * ModelSpec.kinds after model_copy of num_layers (the per-depth cache)."""

from __future__ import annotations

import math

from dataclasses import replace
from unittest import mock

from optsearch import bounds
from optsearch.bounds import CandidateBound, candidate_bound, degree_terms, gather_terms, refined_bound_at, \
    refined_tables
from optsearch.candidates import context_parallel_candidates, dp_candidates, max_stages, micro_batch_candidates, \
    node_uses, tp_candidates
from optsearch.formulation.model import Candidate
from optsearch.inflight import sharpened
from optsearch.solver import Memo
from optsearch.search import budget_violations, objective_value
from optsearch.spec.budget import Budget

from test_audit_dist_bounds import off_heavy_instance, random_instance
from test_audit_round10 import tight_instance


def _degrees(problem, options):
    """(tp, dp, b, cp, uses) of every degree of the space, every cp of it."""
    for tp in tp_candidates(problem):
        for mbs in micro_batch_candidates(problem, options):
            for cp in context_parallel_candidates(problem, options):
                for dp in dp_candidates(problem, tp, mbs, None, cp):
                    uses = tuple(node_uses(problem, tp, dp, mbs, cp, options))
                    if uses:
                        yield tp, dp, mbs, cp, uses


def _edge_budgets(problem, d, tab, most):
    """Budgets from the tables' own values: each deadline, rent limit and cost budget exactly at a pp's scalar bound
    (divided by the slack, so that the walk's stops meet them as ties) and all three together."""
    free = [candidate_bound(problem, d, pp, None, refined=True) for pp in range(1, most + 1)]
    free = [b for b in free if b.feasible]
    if not free:
        return [None]
    n, slack = problem.iterations, bounds.BOUND_SLACK
    mid = free[len(free) // 2]
    deadline = mid.iteration_s * n / slack
    rent = mid.rate_usd_per_hour / slack
    cost = mid.cost_per_iteration_usd * n / slack
    out = [None]
    for objective in ("cost", "time"):
        out += [Budget(objective=objective, max_time_s=deadline), Budget(objective=objective, max_usd_per_hour=rent),
                Budget(objective=objective, max_cost_usd=cost),
                Budget(objective=objective, max_time_s=deadline, max_usd_per_hour=rent, max_cost_usd=cost),
                Budget(objective=objective, max_time_s=deadline * 2, max_usd_per_hour=rent * 2, max_cost_usd=cost)]
    # at a breakpoint of the joint walk itself: its iteration (the walk's `iteration > max` stop) and its rent
    for i in range(most):
        if tab.joint_iteration_s[i]:
            k = len(tab.joint_iteration_s[i]) // 2
            it, rate = tab.joint_iteration_s[i][k], tab.joint_rate[i][k]
            if math.isfinite(rate):
                out += [Budget(objective="cost", max_time_s=it * n / slack, max_usd_per_hour=rate / slack),
                        Budget(objective="time", max_time_s=it * n / slack, max_cost_usd=cost)]
            break
    return out


def _compare_tables(problem, d, most) -> int:
    tab = refined_tables(problem, d, most)
    compared = 0
    for budget in _edge_budgets(problem, d, tab, most):
        for pp in range(1, most + 1):
            if tab.listed[pp - 1]:
                continue
            want = candidate_bound(problem, d, pp, budget, refined=True)
            got = refined_bound_at(problem, d, tab, pp, budget)
            assert got == want, (pp, budget, got, want)
            compared += want.feasible
    return compared


def test_the_tables_equal_the_scalar_bound_at_cp_2_off_and_gather_terms_under_edge_budgets():
    compared = kinds = 0
    seen = set()
    with mock.patch.object(bounds, "MAX_COMPOSITIONS", 0):
        for make, seed in [(random_instance, 3), (random_instance, 10), (off_heavy_instance, 2),
                           (tight_instance, 5), (random_instance, 29), (random_instance, 37), (tight_instance, 37)]:
            problem, options = make(seed)
            problem = replace(problem, overlap_param_gather=True)
            most = max_stages(problem, options) + 3  # beyond the space's stages, as the round's own test
            for tp, dp, mbs, cp, uses in sorted(_degrees(problem, options), key=lambda g: (-g[3], g[:3]))[:6]:
                for dist in (None, False):
                    d = degree_terms(problem, tp, dp, mbs, uses, 1, cp, None, dist)
                    for terms, name in ((d, f"cp{cp}-{dist}"), (gather_terms(d), "gather")):
                        got = _compare_tables(problem, terms, most)
                        compared += got
                        if got:
                            seen.add(name.split("-")[0] if name != "gather" else name)
                            kinds += 1
    assert compared >= 100 and {"cp1", "cp2", "gather"} <= seen, (compared, seen)


def test_one_degree_asked_under_two_budgets_answers_as_the_scalar_path():
    """Memo.refined_bound keeps one degree's tables (budget-free) across budgets and objectives: each answer equals
    candidate_bound's under its own budget, asked in turn (the tables built under the first)."""
    problem, options = random_instance(29)  # three stages at most, eight layers
    with mock.patch.object(bounds, "MAX_COMPOSITIONS", 0):
        memo = Memo(problem, options)
        checked = 0
        for tp, dp, mbs, cp, uses in _degrees(problem, options):
            if checked > 60:
                break
            d = memo.degree_terms(tp, dp, mbs, uses, 1, cp, None)
            free = [candidate_bound(problem, d, pp, None, refined=True) for pp in range(2, options.max_stages + 1)]
            free = [b for b in free if b.feasible]
            if not free:
                continue
            n = problem.iterations
            budgets = [Budget(objective="cost", max_time_s=free[0].iteration_s * n * 1.5),
                       Budget(objective="time", max_cost_usd=free[-1].cost_per_iteration_usd * n),
                       Budget(objective="time"),
                       Budget(objective="cost", max_usd_per_hour=free[0].rate_usd_per_hour)]
            for budget in budgets:
                for pp in range(2, options.max_stages + 1):
                    cand = Candidate(tp=tp, dp=dp, micro_batch_size=mbs, pp=pp, uses=uses, cp=cp)
                    assert memo.refined_bound(d, cand, budget) == candidate_bound(problem, d, pp, budget,
                                                                                  refined=True), (cand, budget)
                    checked += 1
        assert checked > 20 and any(not isinstance(t, int) for t in memo.refined_by_pp.values())


def _time_bound(problem, memo, cand, budget, cutoff_s=math.inf):
    d = memo.degree_terms(cand.tp, cand.dp, cand.micro_batch_size, cand.uses, 1, cand.cp)
    got = sharpened(problem, memo.inflight, d, cand, budget, CandidateBound(True, 0.0, 0.0, 0.0), memo.calls,
                    cutoff_s=cutoff_s)
    return got.iteration_s * problem.iterations if got.feasible else None


def test_the_cutoff_under_a_deadline_or_a_rent_limit_stays_below_every_plan_meeting_it():
    """The solver passes the cutoff minimizing time under a deadline or a rent limit too (_inflight_bounded: only
    slower_than_s decides). Each candidate's bound under the tightest deadline / rent limit each plan meets, with
    cutoffs at the plan's time x (0.5, 1, 2), lies below that plan's time; at or above the cutoff wherever the bound
    without it is (or where that one finds no plan)."""
    from optsearch.costmodel import overlap_grad_reduce_on
    from test_inflight_bound import _plans

    checked = decided = 0
    for problem, options in (off_heavy_instance(19),):  # one of the first-reduce test's (test_positional_first_reduce)
        memo = Memo(problem, options)
        for cand, (plan, est) in _plans(problem, options, as_searched=True):
            if not overlap_grad_reduce_on(problem, cand.dp, cand.cp):
                continue
            for budget in (Budget(objective="time", max_time_s=est.training_time_s),
                           Budget(objective="time", max_usd_per_hour=est.usd_per_hour),
                           Budget(objective="time", max_time_s=est.training_time_s * 1.3,
                                  max_usd_per_hour=est.usd_per_hour)):
                free = _time_bound(problem, memo, cand, budget)
                tab = memo.inflight.get(cand.key)
                if tab is None or tab.whole_per_layer is None:
                    continue
                assert free is not None and free <= est.training_time_s * (1 + 1e-9), (cand, budget, free)
                for f in (0.5, 1.0, 2.0, 0.999 * free / est.training_time_s, free / est.training_time_s):
                    cutoff = f * est.training_time_s
                    cut = _time_bound(problem, memo, cand, budget, cutoff)
                    assert cut is not None and cut <= est.training_time_s * (1 + 1e-9), (cand, budget, f, cut)
                    margin = cutoff * (1 - 1e-9)
                    if free >= margin * (1 + 1e-8):
                        assert cut >= margin, (cand, budget, f, cut, free)
                    decided += cut >= margin
                    checked += 1
    assert checked > 30 and 0 < decided < checked, (checked, decided)


def test_kinds_follow_num_layers_through_model_copy():
    """ModelSpec.kinds is kept per depth (_one_kind): a copy with another num_layers has its own one kind, the
    original keeps its own, and a model with layer_kinds is not touched by the cache."""
    problem, _ = random_instance(3)
    model = problem.model
    assert model.layer_kinds is None
    deeper = model.model_copy(update={"num_layers": model.num_layers + 5})
    assert [k.num_layers for k in deeper.kinds] == [model.num_layers + 5]
    assert [k.num_layers for k in model.kinds] == [model.num_layers]
    assert deeper.kinds is not model.kinds and model.kinds is model.kinds
    assert sum(k.num_layers for k in deeper.kinds) == deeper.num_layers


def _climb_pair():
    """random_instance(17) (one to three types, ep 2, the optimizer off among the settings), time under a cost budget
    at the middle plan's cost: two starts found by bench/audit_round12_ends.py."""
    from optsearch.costmodel import estimate
    from optsearch.formulation.model import Plan, Stage

    problem, options = random_instance(17)
    budget = Budget(objective="time", max_cost_usd=32.615514627601875)

    def plan(dp, mbs, ep, dist, overlap):
        return Plan(tp=1, dp=dp, micro_batch_size=mbs, stages=(Stage(node_type="t0", num_layers=0),
                                                                 Stage(node_type="t0", num_layers=7)),
                    ep=ep, cp=1, distributed_optimizer=dist, virtual_stages=1, overlap_grad_reduce=overlap,
                    ddp_average_in_collective=overlap)

    starts = []
    for p in (plan(1, 1, 1, False, False), plan(2, 2, 2, False, True)):
        est = estimate(problem, p)
        assert est.fits and not budget_violations(p, est, budget)
        starts.append((objective_value(est, "time"), p, est))
    return problem, options, budget, starts


def test_a_climb_sharing_ends_reaches_the_end_it_reaches_alone():
    """timeload's claim (solver._climb's docstring): from a plan on an earlier climb's path the climb's next moves
    are those the earlier climb made, so returning its end changes nothing. Here the second start's climb, after the
    first one's, returns 489.68 s with the shared record and 496.48 s without it (the same memo, or a fresh one):
    the earlier climb passed through the second start (or a plan of its path) with a different `seen` and went on
    elsewhere. Incumbents only (no bound or proof depends on it), but a solve's time-limited answer does."""
    from optsearch.solver import _candidates, _neighbour_search

    problem, options, budget, (a, b) = _climb_pair()
    memo = Memo(problem, options)
    bounded, _ = _candidates(memo, budget)
    ends: dict = {}
    _neighbour_search(memo, budget, bounded, a, None, None, ends)
    shared = _neighbour_search(memo, budget, bounded, b, None, None, ends)
    alone = Memo(problem, options)
    assert shared[0] == _neighbour_search(alone, budget, _candidates(alone, budget)[0], b, None)[0]
