"""The largest whole reduce's levels with every later stage's last backward (optsearch/inflight.py
whole_suffix_backward_s, _suffix_limit, switch WHOLE_SUFFIX; issue 14, item 3, round 20, timesmall; docs/solver.md
"Round 20: the in-flight time walk's whole reduce with the later stages' backwards").

Under --overlap-grad-reduce a plan's iteration is at least whole_base + max_s (whole_s + sum_{j >= max(s, 1)} W_j):
stage s's reduce hides behind the earlier stages' last backwards, and every later stage's last backward is still in
the sum of stage times. The walk kept only W_s of that sum; now its level test also counts the later layers at the
least last backward over the types. Checked against brute force: every plan of every candidate (pp 1-4, the
distributed optimizer on and off, tied and untied embeddings, two node types on a memory-tight random instance)
lies above its candidate's in-flight time bound with no budget (and on one instance under its own deadline), with
the incumbent cutoff at the plan's own time or half of it, and none; the suffix raises some bounds (counted against
the switch off); an invalid suffix (the layers before s forgotten: L - n_s later layers) puts a bound above a plan;
the caps by hand; time under a cost budget (_with_whole_levels) does not take it."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

import optsearch.inflight as inflight
from optsearch.candidates import SpaceOptions
from optsearch.search import objective_value
from optsearch.solver import Bounded, Memo, _inflight_bounded
from optsearch.spec.budget import Budget

from test_audit_dist_bounds import random_instance, space_plans
from test_overlap_solve import _pipeline_problem

_LIMIT = inflight._suffix_limit  # the function under test, before any monkeypatch


def _least_ratio(problem, options, cutoffs=(math.inf, 1.0), deadline: bool = True) -> tuple[float, int]:
    """(the least plan time / in-flight time bound over every plan of every candidate, its own deadline or none, and
    every cutoff (a multiple of the plan's own time), how many of those bounds the suffix raised above the walk with
    WHOLE_SUFFIX off); 0 where a bound says no plan meets a budget that the plan meets."""
    memo, plain = Memo(problem, options), Memo(problem, options)
    least, raised, kept = math.inf, 0, {}
    for cand, plan, est in space_plans(problem, options):
        terms = memo.degree_terms(cand.tp, cand.dp, cand.micro_batch_size, cand.uses, cand.ep, cand.cp, cand.dist)
        budgets = [Budget(objective="time")] + ([Budget(objective="time", max_time_s=est.training_time_s)]
                                                if deadline else [])
        for budget in budgets:
            for cutoff in cutoffs:
                key = (cand, budget.max_time_s, cutoff * est.training_time_s)
                if key not in kept:
                    got = _inflight_bounded(memo, budget, Bounded(cand, 0.0, terms), 0.0, key[2])
                    if got is None:
                        return 0.0, raised
                    was, inflight.WHOLE_SUFFIX = inflight.WHOLE_SUFFIX, False
                    try:
                        off = _inflight_bounded(plain, budget, Bounded(cand, 0.0, terms), 0.0, key[2])
                    finally:
                        inflight.WHOLE_SUFFIX = was
                    raised += off is not None and got > off * (1 + 1e-9)
                    kept[key] = got
                if kept[key] > 0:
                    least = min(least, objective_value(est, "time") / kept[key])
    return least, raised


def _pipeline(dist: bool, inter_gbit: float, stages: int, tied: bool = True):
    """One 2-GPU node type, 8 layers of hidden 2048, the overlap on (test_overlap_solve's), pp 1..stages."""
    problem = _pipeline_problem(dist, inter_gbit=inter_gbit)
    if not tied:
        problem = replace(problem, model=problem.model.model_copy(update={"tied_embeddings": False}))
    return problem, SpaceOptions(micro_batch_sizes=(1,), recompute_modes=("none",), max_stages=stages)


def test_the_suffix_lies_below_every_plan_and_raises_bounds():
    assert inflight.WHOLE_SUFFIX  # the switch ships on
    cases = [(_pipeline(True, 10.0, 3), {"cutoffs": (math.inf, 0.5)}),  # distributed optimizer, tied, pp <= 3
             (_pipeline(False, 1.0, 4, tied=False), {"cutoffs": (math.inf,), "deadline": False}),  # pp <= 4, untied
             (random_instance(5), {"cutoffs": (math.inf, 1.0), "deadline": False})]  # two types, memory-tight
    counts = []
    for (problem, options), how in cases:
        assert problem.overlap_grad_reduce
        least, raised = _least_ratio(problem, options, **how)
        assert least >= 1 - 1e-9, problem.model.name
        counts.append(raised)
    assert min(counts) > 0, counts  # the suffix raised bounds on each instance: the checks above are not vacuous


def _forgets_the_earlier_layers(tab, caps, level):
    """An invalid cap: the later layers counted as L - n_s, as if the positions before s held none."""
    return _LIMIT(tab, np.zeros_like(caps), level)


def test_an_invalid_suffix_fails(monkeypatch):
    monkeypatch.setattr(inflight, "_suffix_limit", _forgets_the_earlier_layers)
    problem, options = _pipeline(True, 10.0, 3)
    assert _least_ratio(problem, options, cutoffs=(math.inf,), deadline=False)[0] < 1 - 1e-9


def test_the_suffix_caps_by_hand():
    """Three positions, L = 6, one type with a = 1 (its reduce per layer) and bw = b = 0.5, so per = [1, 1.5, 1.5];
    the interval's caps 4 at every position (K = 0, 4, 8)."""
    tab = inflight.InFlightTables(marks=np.zeros(1), iteration=np.zeros(1), caps=None, price=np.ones(1),
                                  middle=np.array([False, True, False]), w=1, L=6)
    tab.whole_per_layer, tab.suffix_backward = np.array([[1.0, 1.5, 1.5]]), 0.5
    caps = np.full((1, 1, 3), 4.0)
    got = _LIMIT(tab, caps, np.array([4.0]))[0, 0]
    # s = 0: 1 n + 0.5 max(1, 6 - n) <= 4: n <= 3.5 and 0.5 n <= 1, n <= 2  -> 2
    # s = 1: 1.5 n + 0.5 max(0, 6 - n - 4) <= 4: n <= 2.67 and n <= 3        -> 2
    # s = 2: 1.5 n + 0.5 max(0, 6 - n - 8) <= 4: n <= 2.67 and 1.0 n <= 5    -> 2
    assert got.tolist() == [2.0, 2.0, 2.0]
    got = _LIMIT(tab, caps, np.array([0.4]))[0, 0]  # s = 0 needs 0.5 x 1 middle layer later: none fits, cap 0
    assert got.tolist() == [0.0, 0.0, 0.0]
    tab.suffix_backward = 0.0  # no backward: the old caps floor(c / per)
    assert _LIMIT(tab, caps, np.array([4.0]))[0, 0].tolist() == [4.0, 2.0, 2.0]


def test_no_suffix_where_the_gather_may_hide_behind_the_forward():
    """pp = 1 with --overlap-param-gather searched (DegreeTerms.gather_hidden_at): whole_levels_terms credits no
    forward there, and the suffix is not claimed; at pp = 2 it is."""
    problem, options = _pipeline(True, 10.0, 2)
    problem = replace(problem, overlap_param_gather=True)
    memo = Memo(problem, options)
    seen = {}
    for cand, plan, est in space_plans(problem, options):
        if cand.v != 1 or cand.pp in seen or cand.dp * cand.cp < 2:
            continue
        terms = memo.degree_terms(cand.tp, cand.dp, cand.micro_batch_size, cand.uses, cand.ep, cand.cp, cand.dist)
        _inflight_bounded(memo, Budget(objective="time"), Bounded(cand, 0.0, terms))
        tab = memo.inflight.get(cand.key)
        if tab is not None and tab.whole_per_layer is not None:
            seen[cand.pp] = tab.suffix_backward
    assert seen[1] == 0.0 and seen[2] > 0.0, seen


def test_not_taken_under_a_cost_budget(monkeypatch):
    """_with_whole_levels (time under a cost budget) walks without the suffix: its bound is the same with
    _suffix_limit replaced by the invalid one (which the time walk's bound does see, test_an_invalid_suffix_fails)."""
    problem, options = _pipeline(True, 10.0, 3)
    memo = Memo(problem, options)
    asks = []
    for cand, plan, est in space_plans(problem, options):
        if cand.pp == 3 and len(asks) < 6:
            terms = memo.degree_terms(cand.tp, cand.dp, cand.micro_batch_size, cand.uses, cand.ep, cand.cp, cand.dist)
            asks.append((Budget(objective="time", max_cost_usd=est.cost_usd), Bounded(cand, 0.0, terms)))
    assert asks
    plain = [_inflight_bounded(memo, budget, item) for budget, item in asks]
    monkeypatch.setattr(inflight, "_suffix_limit", _forgets_the_earlier_layers)
    assert [_inflight_bounded(Memo(problem, options), budget, item) for budget, item in asks] == plain

