"""The aggregate refined bound of every pp of one degree at once (bounds.refined_tables, bounds.refined_bound_at;
issue 14, item 3, round 12, costbound) equals the scalar bound it replaces (bounds.candidate_bound, refined, with
more compositions than MAX_COMPOSITIONS) bit for bit, under every kind of budget, on roomy, memory-tight and
two-kind (T5-like) instances and on a catalog model on a four-type pool; and the solver that uses it still answers
what brute force answers, with both backends."""

from __future__ import annotations

from dataclasses import replace
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from draws import draws
from hypothesis import strategies as st

from optsearch import bounds
from optsearch.bounds import (
    _least_rate_per_gpu_of, _least_rates_at_once, candidate_bound, degree_terms, refined_bound_at, refined_tables,
)
from optsearch.candidates import max_stages, node_uses
from optsearch.solver import Memo, solve
from optsearch.spec.budget import Budget

from test_solver import _budget, assert_backends_equal_brute_force, instances, usable_degrees
from test_solver_memory import tight_instances


def _budgets(problem, d, most: int) -> list[Budget | None]:
    """No budget, and a deadline, a rent limit and a cost budget (time the objective) at levels that split the
    candidates: from the unbudgeted scalar bounds themselves."""
    free = [candidate_bound(problem, d, pp, None, refined=True) for pp in range(1, most + 1)]
    free = [b for b in free if b.feasible]
    if not free:
        return [None]
    its = sorted(b.iteration_s for b in free)
    rates = sorted(b.rate_usd_per_hour for b in free)
    costs = sorted(b.cost_per_iteration_usd for b in free)
    n = problem.iterations
    mid = len(free) // 2
    return [None, Budget(objective="cost"),
            Budget(objective="cost", max_time_s=its[mid] * n * 1.3),
            Budget(objective="cost", max_time_s=its[0] * n * 1.01, max_usd_per_hour=rates[mid]),
            Budget(objective="time", max_cost_usd=costs[mid] * n),
            Budget(objective="time", max_cost_usd=costs[0] * n * 1.2, max_time_s=its[-1] * n)]


def _compare(problem, d, most: int) -> int:
    """Every pp of d whose bound is aggregate, under every budget: the tables' bound equals the scalar one."""
    tab = refined_tables(problem, d, most)
    compared = 0
    for budget in _budgets(problem, d, most):
        for pp in range(1, most + 1):
            if tab.listed[pp - 1]:
                continue
            want = candidate_bound(problem, d, pp, budget, refined=True)
            got = refined_bound_at(problem, d, tab, pp, budget)
            assert got == want, (pp, budget, got, want)  # exact, not approximate
            compared += want.feasible
    return compared


COMPARED: list[int] = []


@settings(max_examples=draws(15), derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.one_of(instances(), tight_instances()), st.booleans())
def test_the_refined_tables_equal_the_scalar_aggregate_bound_bit_for_bit(case, overlap):
    problem, options, *_ = case
    problem = replace(problem, overlap_grad_reduce=overlap)
    most = max_stages(problem, options) + 3  # beyond the space's stages too: more slots than layers, supply limits
    with mock.patch.object(bounds, "MAX_COMPOSITIONS", 0):  # every pp aggregate (pp = 1 by the scalar function)
        for tp, mbs, dp, uses in usable_degrees(problem, options):
            COMPARED.append(_compare(problem, degree_terms(problem, tp, dp, mbs, uses), most))


def test_the_random_instances_compared_many_bounds():
    """The property test above compared something (its instances may have no feasible candidate)."""
    if not COMPARED:  # run alone or in another worker: run it here
        test_the_refined_tables_equal_the_scalar_aggregate_bound_bit_for_bit()
    assert sum(COMPARED) >= 150 and sum(n > 0 for n in COMPARED) >= 15


def test_the_refined_tables_equal_the_scalar_bound_on_a_four_type_pool():
    """GPT-3 175B's degrees on mixed-pool-8k in the megatron target's space, where the solver uses the tables (over
    300 compositions from pp 10 or so): every pp, with and without a deadline."""
    from optsearch.cli.options import space_from_target
    from optsearch.edits import edited_problem
    from optsearch.targets import engine_problem

    problem = engine_problem("megatron", edited_problem("gpt3-175b", "mixed-pool-8k", []))
    options = space_from_target("megatron", problem)
    most = max_stages(problem, options)
    aggregate = 0
    for tp, dp, mbs, cp in [(1, 8, 1, 4), (2, 4, 1, 2), (4, 16, 1, 1), (8, 2, 2, 1)]:
        uses = tuple(node_uses(problem, tp, dp, mbs, cp, options))
        d = degree_terms(problem, tp, dp, mbs, uses, 1, cp)
        tab = refined_tables(problem, d, most)
        aggregate += int((~tab.listed[1:]).sum())
        free = [candidate_bound(problem, d, pp, None, refined=True) for pp in (20, 40)]
        deadline = min(b.iteration_s for b in free if b.feasible) * problem.iterations * 1.5 if any(
            b.feasible for b in free) else None
        for budget in (Budget(objective="cost"), Budget(objective="cost", max_time_s=deadline)):
            for pp in range(2, most + 1, 3):
                if not tab.listed[pp - 1]:
                    assert refined_bound_at(problem, d, tab, pp, budget) == candidate_bound(
                        problem, d, pp, budget, refined=True), (tp, dp, mbs, cp, pp, budget)
    assert aggregate >= 100  # the tables were used, not only the compositions


def test_the_rates_at_once_equal_the_scalar_rates():
    """bounds._least_rates_at_once equals _least_rate_per_gpu_of for random caps (ties among them included)."""
    from test_composition_arrays import _every_terms, _options, _small

    problem = _small()
    rng = np.random.default_rng(12)
    for d in _every_terms(problem, _options()):
        hold = rng.integers(0, 5, (40, len(d.slots)))
        pps = np.arange(1, sum(d.slots) + 1)
        for L in (0, 1, 5, 12):
            got = _least_rates_at_once(d, pps, L, hold)
            for k in range(len(hold)):
                for j, pp in enumerate(pps.tolist()):
                    assert got[k, j] == _least_rate_per_gpu_of(d, pp, L, tuple(int(x) for x in hold[k]))


def test_the_joint_walk_from_the_tables_equals_the_scalar_walk(monkeypatch):
    """bounds._joint_from_tables equals _joint_cost_rate_s at every pp, with and without a deadline and a rent limit."""
    from test_composition_arrays import _every_terms, _options, _small

    problem = _small()
    monkeypatch.setattr(bounds, "MAX_COMPOSITIONS", 0)
    L = problem.model.num_layers
    compared = 0
    for d in _every_terms(problem, _options()):
        tab = refined_tables(problem, d, 4)
        for pp in (2, 3, 4):
            if not tab.ok[pp - 1]:
                continue
            stages, comm = float(tab.stages_s[pp - 1]), float(tab.comm_s[pp - 1])
            for max_it, max_rate in ((None, None), (stages * 3, None), (None, d.w * 3.0), (stages * 2, d.w * 5.0)):
                want = bounds._joint_cost_rate_s(d, pp, L, stages, comm, max_it, max_rate)
                assert bounds._joint_from_tables(tab, pp, max_it, max_rate) == want
                compared += want < float("inf")
    assert compared >= 10


def test_a_hair_of_difference_in_the_tables_fails_the_comparison(monkeypatch):
    """The comparison is exact: the joint walk's rents 1e-15 higher in the tables are caught."""
    from test_composition_arrays import _every_terms, _options, _small

    problem = _small()
    monkeypatch.setattr(bounds, "MAX_COMPOSITIONS", 0)
    L = problem.model.num_layers
    real = bounds._least_rates_at_once
    monkeypatch.setattr(bounds, "_least_rates_at_once", lambda *a: real(*a) * (1 + 1e-15))
    differ = 0
    for d in _every_terms(problem, _options()):
        tab = refined_tables(problem, d, 4)
        for pp in (2, 3, 4):
            if tab.ok[pp - 1]:
                stages, comm = float(tab.stages_s[pp - 1]), float(tab.comm_s[pp - 1])
                differ += bounds._joint_from_tables(tab, pp, None, None) != bounds._joint_cost_rate_s(
                    d, pp, L, stages, comm, None, None)
    assert differ > 0


def _t5_tight():
    """A memory-tight two-kind (T5-like) instance on two node types: 6 layers (3 encoder, 3 decoder with
    cross-attention), seq 4096, 16 and 24 GiB GPUs."""
    from optsearch.spec import GpuSpec, LayerKindSpec
    from test_solver_memory import tight_problem

    gpus = [GpuSpec(name="S", memory_gib=16, peak_fp16_tflop_per_s=65, hbm_gbyte_per_s=900),
            GpuSpec(name="A10", memory_gib=24, peak_fp16_tflop_per_s=70, hbm_gbyte_per_s=600)]
    nodes = [dict(name=n, gpu=g, gpus_per_node=1, num_nodes_available=3, price_usd_per_node_hour=price,
                  intra_node_link="pcie", intra_node_gbyte_per_s=32, inter_node_gbit_per_s=40)
             for n, g, price in (("s", "S", 1.2), ("a10", "A10", 2.0))]
    return tight_problem(layers=6, hidden=1024, heads=8, seq=4096, gbs=8, node_types=nodes, gpus=gpus,
                         kinds=[LayerKindSpec(name="enc", num_layers=3),
                                LayerKindSpec(name="dec", num_layers=3, cross_attention=True)])


def _cases():
    from optsearch.candidates import SpaceOptions
    from test_composition_arrays import _small
    from test_solver_memory import issue_example

    small = SpaceOptions(micro_batch_sizes=(1,), max_stages=3)
    return [("small", _small(), small, "time", "none"), ("small", _small(), small, "cost", "time"),
            ("tight", issue_example(nodes=3), SpaceOptions(micro_batch_sizes=(1, 2, 4), max_stages=3), "cost", "none"),
            ("t5", _t5_tight(), SpaceOptions(micro_batch_sizes=(1, 2), max_stages=2), "time", "cost")]


@pytest.mark.parametrize("case", range(4))
def test_answers_with_the_tables_equal_brute_force_with_both_backends(case):
    """Every pp through the aggregate bound (a composition limit of 0, tables from the first ask): the solver, which
    takes it from the tables, answers what brute force answers, with CBC and with CP-SAT, on a roomy two-type
    instance (time; cost under a deadline), the issue's memory-tight one and a memory-tight T5-like one (two kinds;
    time under a cost budget)."""
    from optsearch import solver as solver_module

    _, problem, options, objective, kind = _cases()[case]
    budget = _budget(problem, options, objective, kind, 0.8)
    with mock.patch.object(bounds, "MAX_COMPOSITIONS", 0), mock.patch.object(solver_module, "REFINED_TABLES_FROM", 1):
        assert_backends_equal_brute_force(problem, budget, options)


def test_the_solver_takes_the_tables_and_answers_as_the_scalar_path():
    """A solve with every pp aggregate fills Memo.refined_by_pp, and gives the same answer and the same search (the
    same counts of bounds and models) as with the tables off (solver.REFINED_ARRAYS). Minimizing time: this small
    instance's loop reaches the refined bounds there (minimizing cost, the seeds' plan already meets the cheap ones)."""
    from optsearch import solver as solver_module
    from optsearch.candidates import SpaceOptions
    from test_composition_arrays import _small

    problem, options = _small(), SpaceOptions(micro_batch_sizes=(1, 2), max_stages=6)
    budget = Budget(objective="time")
    with mock.patch.object(bounds, "MAX_COMPOSITIONS", 0), mock.patch.object(solver_module, "REFINED_TABLES_FROM", 1):
        memo = Memo(problem, options)
        on = solve(problem, budget, options=options, memo=memo)
        assert any(isinstance(t, bounds.RefinedTables) for t in memo.refined_by_pp.values())
        with mock.patch.object(solver_module, "REFINED_ARRAYS", False):
            off = solve(problem, budget, options=options)
    assert on.status == off.status == "optimal"
    assert on.objective_value == off.objective_value
    keep = ("candidates_explored", "models_solved", "inflight_bounded", "positional_bounded")
    assert {k: on.stats[k] for k in keep} == {k: off.stats[k] for k in keep}
    assert on.stats["inflight_bounded"] > 0  # the loop ran past the refined bounds
