"""Round 21 (seed530, issue 14 item 3): a budget search returns a plan when one meets the budget. Time under a cost
budget B just above the least cost: the cheapest plans are the deepest pipelines (a layer a stage, an end stage
empty), which the descent's climb from its seeds (moving pp by at most 2) can miss, and the seed search's and the
solve's loops may not reach them within the limit (Megatron 530B, mixed-pool-3k, B = $5,629,275: no plan in 10 s
in the round-20 grid). The deepest pipelines' quick plans are priced before the descent (_deepest_lazy, DEEPEST_EARLY).
Incumbents only: the plan is priced by the cost model and re-checked under B here."""

from __future__ import annotations

import pytest

from optsearch import solver as solver_module
from optsearch.candidates import SpaceOptions, in_search_space
from optsearch.costmodel import estimate
from optsearch.search import budget_violations, objective_value
from optsearch.solver import Memo, _budget_descent, solve
from optsearch.spec.budget import Budget

from test_budget_descent import _WorkClock, _own_seeds_meet, solve_with_loops_cut
from test_solver import GpuSpec, make_problem


def _deep_cheapest(cps=(1, 2)):
    """FASOP-like node types with 2.75 GiB GPUs (memory-tight): 6 layers, up to 8 stages, b in {1, 2}, cp in cps;
    the least cost is a plan of 8 stages (the deepest, both ends empty), tp 1, dp 1. With cp in {1, 2} the space has
    a cp = 1, v = 1 part (_deepest_lazy, before the descent); with cp = 1 alone it has none (_deepest_first, before
    the whole descent)."""
    gpus = [GpuSpec(name="A100", memory_gib=2.75, peak_fp16_tflop_per_s=312, hbm_gbyte_per_s=1555),
            GpuSpec(name="A10", memory_gib=2.75, peak_fp16_tflop_per_s=70, hbm_gbyte_per_s=600)]
    nodes = [dict(name="a100", gpu="A100", gpus_per_node=4, num_nodes_available=1, price_usd_per_node_hour=32.7726,
                  intra_node_link="nvlink", intra_node_gbyte_per_s=300, inter_node_gbit_per_s=40),
             dict(name="a10", gpu="A10", gpus_per_node=4, num_nodes_available=7, price_usd_per_node_hour=8.144,
                  intra_node_link="pcie", intra_node_gbyte_per_s=32, inter_node_gbit_per_s=40)]
    problem = make_problem(layers=6, hidden=1024, heads=16, gbs=64, node_types=nodes, gpus=gpus)
    return problem, SpaceOptions(max_stages=8, context_parallel_sizes=cps, micro_batch_sizes=(1, 2))


def _solve_with_loops_cut(problem, options, budget, monkeypatch):
    """solve with every search loop cut at its first in-flight bound (test_budget_descent.solve_with_loops_cut)."""
    return solve_with_loops_cut(problem, options, budget, monkeypatch)[0]


@pytest.mark.parametrize("cps", [(1, 2), (1,)])
def test_time_under_b_just_above_the_least_cost_where_the_descent_misses_returns_a_plan(cps, monkeypatch):
    """B = 1.01 x the least cost (a plan of the deepest pipeline). The premise, checked: the descent's climb from its
    seeds ends without a plan under B, and the time order's own seeds break B. With every loop cut at its first
    in-flight bound the search returns a plan: in the space, priced by the cost model, under B, known before any
    loop's work. On 70b62e1 it ended "timeout" without a plan (no plan under B before the loops)."""
    problem, options = _deep_cheapest(cps)
    cheapest = solve(problem, Budget(objective="cost"), options=options)
    assert cheapest.status == "optimal" and len(cheapest.plan.stages) == problem.model.num_layers + 2
    budget = Budget(objective="time", max_cost_usd=cheapest.objective_value * 1.01)
    assert _budget_descent(Memo(problem, options), budget, None) is None  # the descent's starts miss B
    assert not _own_seeds_meet(problem, options, budget)  # and so do the time order's own seeds
    got = _solve_with_loops_cut(problem, options, budget, monkeypatch)
    assert got.status in ("feasible", "optimal") and got.plan is not None, got.message
    est = estimate(problem, got.plan)
    assert in_search_space(problem, got.plan, options) and not budget_violations(got.plan, est, budget)
    assert est.cost_usd <= budget.max_cost_usd and got.objective_value == objective_value(est, "time")
    assert got.stats["first_plan_s"] < _WorkClock.MISSED_S  # before any loop's first in-flight bound


def test_without_the_deepest_pipelines_that_search_has_no_plan(monkeypatch):
    """The same search with DEEPEST_EARLY off (the round-20 path): no plan, so the test above pins the switch."""
    problem, options = _deep_cheapest()
    cheapest = solve(problem, Budget(objective="cost"), options=options)
    budget = Budget(objective="time", max_cost_usd=cheapest.objective_value * 1.01)
    monkeypatch.setattr(solver_module, "DEEPEST_EARLY", False)
    got = _solve_with_loops_cut(problem, options, budget, monkeypatch)
    assert got.plan is None and got.status == "timeout"
