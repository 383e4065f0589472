"""Audit of round 21's merges (audit13; docs/solver.md "Round 21 after the merges: the audit (audit13, 2026-11-25)").

- loop39's costmodel.ESTIMATE_MEMO and profile.analytic.GET_CACHE on kinds its own tests do not draw: a T5-like
  encoder-decoder and a mixture of experts on memory-tight GPUs, with each stage's recomputation and the overlap flags
  drawn, priced with the switches in every setting and again on one warm profile in a shuffled order: the same
  Estimates (dataclass equality). A memo keyed without the stage's ends (a plausible slip: the first and last stages'
  embedding and head) gives other Estimates, which the check sees.
- The profile's cache after its inputs change: a GpuSpec replaced in the profile's dict (changed, an equal copy, the
  original put back) and a whole plan's Estimate priced after the change: what the uncached call returns.
- Both backends with the switches off and on, against brute force on a small memory-tight instance.
"""

from __future__ import annotations

import math
import random
from dataclasses import fields, replace
from itertools import islice

import pytest

import optsearch.costmodel as costmodel
import optsearch.profile.analytic as analytic
from draws import draws
from optsearch.baselines.exhaustive import solve_exhaustive
from optsearch.errors import OptsearchError
from optsearch.plan import Plan
from optsearch.solver import solve
from optsearch.spec.budget import Budget

from test_audit_dist_bounds import random_instance, space_plans
from test_audit_round10 import tight_instance
from test_audit_round15 import _gpt_tight, _moe, _t5_tight

MODES = ("none", "selective", "full")


def _fresh(problem):
    return replace(problem, profile=replace(problem.profile))


def _price(problem, plans, memo: bool, cache: bool) -> list:
    was = costmodel.ESTIMATE_MEMO, analytic.GET_CACHE
    costmodel.ESTIMATE_MEMO, analytic.GET_CACHE = memo, cache
    try:
        out = []
        for plan in plans:
            try:
                out.append(costmodel.estimate(problem, plan))
            except OptsearchError as e:
                out.append(type(e).__name__)
        return out
    finally:
        costmodel.ESTIMATE_MEMO, analytic.GET_CACHE = was


def _plans(problem, options, seed: int, most: int = 40) -> list:
    """Up to `most` plans of the space, each again with its stages' recomputation and the overlap flags drawn."""
    rng = random.Random(seed)
    names = {f.name for f in fields(Plan)}
    out = []
    for _, plan, _ in islice(space_plans(problem, options), most):
        out.append(plan)
        if plan.recompute_num_layers is None:
            drawn = replace(plan, stages=tuple(replace(s, recompute=rng.choice(MODES)) for s in plan.stages))
            flags = {k: rng.random() < 0.5 for k in ("overlap_grad_reduce", "overlap_param_gather") if k in names}
            out += [drawn, replace(drawn, **flags)] if flags else [drawn]
    return out


INSTANCES = {"t5": _t5_tight, "moe": _moe, "tight": lambda: tight_instance(0), "gpt-tight": _gpt_tight}


@pytest.mark.parametrize("name", sorted(INSTANCES))
def test_estimates_are_the_same_with_the_memo_and_cache_in_every_setting(name):
    problem, options = INSTANCES[name]()
    for seed in range(draws(1)):
        plans = _plans(problem, options, seed)
        assert plans
        want = _price(_fresh(problem), plans, False, False)
        assert any(not isinstance(w, str) for w in want)
        for memo, cache in ((True, False), (False, True), (True, True)):
            assert _price(_fresh(problem), plans, memo, cache) == want, (memo, cache)
        warm, order = _fresh(problem), list(range(len(plans)))
        random.Random(seed).shuffle(order)
        assert _price(warm, [plans[i] for i in order], True, True) == [want[i] for i in order]


def test_a_memo_keyed_without_the_stage_ends_is_seen(monkeypatch):
    """The mutant: _overlap_grad_reduce's forward read back by node type and kinds only (not the ends): the first
    and last stages' embedding and head leak to other stages of the same kinds, which the check must see (random
    seed 29: 10 of 178 plans with pp > 2, dp > 1 and the overlap differ; dp = 1 has no reduce to expose)."""
    problem, options = random_instance(29)
    plans = [p for p in _plans(problem, options, 0, most=150) if p.pp > 2 and p.overlap_grad_reduce and p.dp > 1]
    assert plans
    want = _price(_fresh(problem), plans, False, False)
    real = costmodel._Once.keyed

    def keyed(self, key, fn, *args):
        if fn is costmodel._stage_forward_of_plan:
            key = key[:3]
        return real(self, key, fn, *args)

    monkeypatch.setattr(costmodel._Once, "keyed", keyed)
    assert _price(_fresh(problem), plans, True, True) != want


def test_the_cache_after_a_gpu_spec_changes_prices_as_uncached():
    """A kept entry whose GpuSpec is replaced in the profile's dict (changed, then an equal copy, then the original):
    every Estimate the same as the uncached one at that moment, and the change moves some (the check bites)."""
    problem, options = _t5_tight()
    plans = _plans(problem, options, 1, most=30)
    warm = _fresh(problem)
    first = _price(warm, plans, True, True)
    gpus = warm.profile.gpus
    original = gpus["G1"]
    changed = original.model_copy(update={"peak_fp16_tflop_per_s": original.peak_fp16_tflop_per_s * 1.5})
    for spec in (changed, original.model_copy(), original):
        gpus["G1"] = spec
        assert _price(warm, plans, True, True) == _price(warm, plans, False, False)
        if spec is changed:
            assert _price(warm, plans, True, True) != first
    assert _price(warm, plans, True, True) == first


@pytest.mark.parametrize("backend", ["cbc", "cpsat"])
def test_both_backends_equal_brute_force_with_the_switches_off_and_on(backend):
    problem, options = tight_instance(1)
    priced = [e for _, _, e in space_plans(problem, options)]
    pick = min(priced, key=lambda e: e.cost_usd)
    budgets = [Budget(objective="time"), Budget(objective="time", max_cost_usd=pick.cost_usd * 1.05),
               Budget(objective="cost", max_time_s=pick.training_time_s)]
    for budget in budgets:
        truth = solve_exhaustive(problem, budget, options=options)
        values = []
        for memo in (False, True):
            was = costmodel.ESTIMATE_MEMO, analytic.GET_CACHE
            costmodel.ESTIMATE_MEMO = analytic.GET_CACHE = memo
            try:
                got = solve(_fresh(problem), budget, solver=backend, options=options)
            finally:
                costmodel.ESTIMATE_MEMO, analytic.GET_CACHE = was
            assert got.status == truth.status
            if truth.status == "optimal":
                assert math.isclose(got.objective_value, truth.objective_value, rel_tol=1e-6)
                again = costmodel.estimate(problem, got.plan)
                value = again.training_time_s if budget.objective == "time" else again.cost_usd
                assert math.isclose(value, got.objective_value, rel_tol=1e-9)
                values.append(got.objective_value)
        assert len(set(values)) <= 1


# ---- timepark: positional.PREFIX_HIDE_ROUNDS (_Caps.prefix_hide, prefix_supply_sum, backward_rows) -------------------

def _positional(sk, budget, rounds: int, fresh: bool = True):
    import optsearch.formulation.positional as positional
    if fresh:
        sk.positional = None
    was = positional.PREFIX_HIDE_ROUNDS
    positional.PREFIX_HIDE_ROUNDS = rounds
    try:
        return positional.positional_bound(sk, budget).bound
    finally:
        positional.PREFIX_HIDE_ROUNDS = was


def _prefix_asks(seed: int):
    """off_heavy_instance(seed)'s v = 1 candidates with a positional skeleton, each with its plans."""
    from optsearch.solver import Memo
    from test_audit_dist_bounds import off_heavy_instance
    problem, options = off_heavy_instance(seed)
    memo = Memo(problem, options)
    by: dict = {}
    for cand, plan, est in space_plans(problem, options):
        by.setdefault(cand.key, (cand, []))[1].append(est)
    for key, (cand, ests) in sorted(by.items()):
        sk = memo.skeleton(cand) if cand.v == 1 else None
        if sk is not None and sk.most is not None:
            yield key, sk, ests


def _least(ests, budget) -> float:
    from optsearch.search import objective_value
    return min(objective_value(e, budget.objective) for e in ests)


def _prefix_holds(seed: int) -> tuple[int, int]:
    """(bounds compared, bounds raised): every v = 1 candidate's positional bound with PREFIX_HIDE_ROUNDS = 2 at or
    below its least plan, time and cost, no budget."""
    compared = raised = 0
    for key, sk, ests in _prefix_asks(seed):
        for budget in (Budget(objective="time"), Budget(objective="cost")):
            on, off = _positional(sk, budget, 2), _positional(sk, budget, 0)
            assert on <= _least(ests, budget) * (1 + 1e-9), (key, budget.objective, on, _least(ests, budget))
            compared += 1
            raised += on > off * (1 + 1e-9)
    return compared, raised


def test_the_prefix_hide_bound_stays_below_every_plan():
    """off_heavy seed 6 (audit13's sweep: no bound above a plan on off_heavy seeds 0-39): every v = 1 candidate's
    bound at or below its plans, and raised on some (4 of 32: the check is not vacuous)."""
    compared, raised = _prefix_holds(6)
    assert compared and raised


def test_a_prefix_hide_that_credits_half_the_earlier_stages_is_caught(monkeypatch):
    """The invalid variant: H_s halved (prefix_hide's answer x 0.5, less hiding credited than the earlier stages can
    do): a bound of off_heavy seed 6 above a plan (candidate (1, 2, 1, 2, 1, 1, 1, 0), time: 260.69 against 259.20)."""
    import optsearch.formulation.positional as positional
    real = positional._Caps.prefix_hide
    monkeypatch.setattr(positional._Caps, "prefix_hide", lambda self, fit, Ms: real(self, fit, Ms) * 0.5)
    with pytest.raises(AssertionError, match="'time', 260.688"):
        _prefix_holds(6)


def test_the_kept_tables_answer_as_one_prefix_hide_setting():
    """One skeleton asked (cost) under PREFIX_HIDE_ROUNDS = 0, then (time) under 2: the answer is that of one
    setting, either the tables' (a fresh table's under 0, as the pair-cover switches are kept) or the switch's now (a
    fresh table's under 2), not a mix of marks kept from the first ask and marks computed under 2. off_heavy seed 0,
    candidate (2, 2, 1, 2, 1, 1, 1, 0), time: 88.727 against 88.411 (0) and 90.267 (2). Every value is a valid
    (lower) bound and the solver never flips the switch mid-solve. Fixed by the lead after the audit: _Caps keeps the
    switch as its tables are built (prefix_rounds, _PAIR_SWITCHES' way); was a strict xfail."""
    first, then = Budget(objective="cost"), Budget(objective="time")
    for key, sk, ests in _prefix_asks(0):
        if key != (2, 2, 1, 2, 1, 1, 1, 0):
            continue
        as_built, as_now = _positional(sk, then, 0), _positional(sk, then, 2)
        _positional(sk, first, 0)
        assert _positional(sk, then, 2, fresh=False) in (as_built, as_now)
        return
    raise AssertionError("candidate not listed")


# ---- seed530: solver.DEEPEST_EARLY (_deepest_lazy, _deepest_first) ---------------------------------------------------

def deep_kind(seed: int):
    """tests/test_budget_deepest_round21._deep_cheapest drawn by seed: 3-6 layers, stages up to L + 2 (the deepest
    pipelines, an end stage empty, are in the space), 2.5-8 GiB GPUs on one or two node types with random prices and
    supply, cp in {1, 2} or {1} (with and without a cp = 1, v = 1 part), b in {1, 2}."""
    from optsearch.candidates import SpaceOptions
    from test_solver import GpuSpec, make_problem
    rng = random.Random(seed)
    n_types = rng.choice([1, 2, 2])
    gpus, nodes = [], []
    for i in range(n_types):
        gpus.append(GpuSpec(name=f"G{i}", memory_gib=rng.choice([2.5, 2.75, 3.0, 4.0, 8.0]),
                            peak_fp16_tflop_per_s=rng.choice([70.0, 125.0, 312.0]),
                            hbm_gbyte_per_s=rng.choice([600.0, 1555.0])))
        nodes.append(dict(name=f"t{i}", gpu=f"G{i}", gpus_per_node=rng.choice([1, 2, 4]),
                          num_nodes_available=rng.randint(1, 7), price_usd_per_node_hour=round(rng.uniform(2, 40), 3),
                          intra_node_link=rng.choice(["nvlink", "pcie"]), intra_node_gbyte_per_s=rng.choice([32, 300]),
                          inter_node_gbit_per_s=rng.choice([40, 100])))
    layers = rng.choice([3, 4, 6])
    problem = make_problem(layers=layers, hidden=1024, heads=16, gbs=rng.choice([16, 64]), node_types=nodes,
                           gpus=gpus, seq=rng.choice([512, 2048]))
    return problem, SpaceOptions(max_stages=layers + 2, context_parallel_sizes=rng.choice([(1, 2), (1,)]),
                                 micro_batch_sizes=(1, 2))


def _loops_cut(problem, options, budget, monkeypatch, deepest: bool):
    """tests/test_budget_deepest_round21's harness (test_budget_descent.solve_with_loops_cut): every search loop
    stopped at its first in-flight bound, the seed search's round-robin seeds off: a plan only from the work before
    the loops."""
    import optsearch.solver as solver_module
    from test_budget_descent import solve_with_loops_cut
    monkeypatch.setattr(solver_module, "DEEPEST_EARLY", deepest)
    return solve_with_loops_cut(problem, options, budget, monkeypatch)[0]


@pytest.mark.parametrize("seed", [7, 12])
def test_the_deepest_plans_are_honest_and_a_cut_search_returns_one(seed, monkeypatch):
    """deep_kind seeds 7 (one plan) and 12 (197 plans; cp in {1, 2}), time under B = the least cost x 1.05: the
    deepest pipelines' plans (_deepest_lazy and _deepest_first) are in the space, priced, under B, never below brute
    force's optimum; with every loop cut at its first in-flight bound the search returns a plan under B."""
    import optsearch.solver as solver_module
    from optsearch.solver import Memo
    from test_audit_dist_bounds import check_plan_honest
    problem, options = deep_kind(seed)
    cheapest = min(e.cost_usd for _, _, e in space_plans(problem, options))
    budget = Budget(objective="time", max_cost_usd=cheapest * 1.05)
    truth = solve_exhaustive(problem, budget, options=options)
    memo = Memo(problem, options)
    part = solver_module._narrow_memo(problem, options, memo)
    got = [solver_module._deepest_first(memo, budget), solver_module._deepest_lazy(memo, part, budget)]
    assert all(one is not None for one in got)
    for value, plan, _ in got:
        check_plan_honest(problem, options, budget, plan, value)
        assert value >= truth.objective_value * (1 - 1e-9)
    cut = _loops_cut(problem, options, budget, monkeypatch, True)
    assert cut.plan is not None and cut.objective_value >= truth.objective_value * (1 - 1e-9)
    check_plan_honest(problem, options, budget, cut.plan, cut.objective_value)
