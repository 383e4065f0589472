"""The other backend's re-check of a CP-SAT "infeasible" solves the model as built (issue 14, round 10).

CP-SAT's budget rows are raised by an allowance for its tick rounding (solver._budget_allowance; since round 11 in
CP-SAT's translation only, tests/test_exact_budget_rows.py). Before round 10 CBC re-checked the model with those raised rows: under a cost budget 10^-5 below the cheapest plan's cost it returned
that plan, over the budget by more than its rounding cuts accepted (a ConsistencyError), and on another instance its
cuts never removed the plan and the search ended "timeout" with no answer. Its cuts also took names the CP-SAT solve
had used ("overlapping constraint names: round_cost_1"). Both instances come from hypothesis
(test_budget_rows' wide-climb test, interleaved_instances)."""

from __future__ import annotations

import pytest

from optsearch.candidates import SpaceOptions
from optsearch.solver import solve
from optsearch.spec import GpuSpec
from optsearch.spec.budget import Budget

from test_solver import assert_backends_equal_brute_force, make_problem


def _node(i: int, gpus_per_node: int, price: float, inter_gbit: float) -> dict:
    return dict(name=f"t{i}", gpu=f"G{i}", gpus_per_node=gpus_per_node, num_nodes_available=1,
                price_usd_per_node_hour=price, intra_node_link="nvlink", intra_node_gbyte_per_s=16.0,
                inter_node_gbit_per_s=inter_gbit)


CASES = {
    # four slow GPUs at $12 an hour beside two slow ones at $1; only interleaved plans at v = 1, 2, 3
    "cbc-over-the-allowance": (
        [GpuSpec(name="G0", memory_gib=4.0, peak_fp16_tflop_per_s=30.0, hbm_gbyte_per_s=300.0),
         GpuSpec(name="G1", memory_gib=4.0, peak_fp16_tflop_per_s=30.0, hbm_gbyte_per_s=300.0)],
        [_node(0, 4, 12.0, 10.0), _node(1, 2, 1.0, 400.0)], (1, 2, 3)),
    # one slow GPU at $5 beside two fast ones at $1; v = 2 only
    "cuts-that-never-bite": (
        [GpuSpec(name="G0", memory_gib=4.0, peak_fp16_tflop_per_s=30.0, hbm_gbyte_per_s=300.0),
         GpuSpec(name="G1", memory_gib=6.0, peak_fp16_tflop_per_s=312.0, hbm_gbyte_per_s=2000.0)],
        [_node(0, 1, 5.0, 10.0), _node(1, 2, 1.0, 10.0)], (2,)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_cost_budget_just_below_the_cheapest_plan_is_infeasible_on_both_backends(name):
    gpus, nodes, virtual = CASES[name]
    problem = make_problem(layers=8, hidden=512, heads=2, gbs=6, node_types=nodes, gpus=gpus)
    options = SpaceOptions(micro_batch_sizes=(1,), max_stages=2, virtual_stages=virtual)
    cheapest = solve(problem, Budget(objective="cost"), options=options)
    assert cheapest.status == "optimal"
    budget = Budget(objective="time", max_cost_usd=cheapest.estimate.cost_usd * 0.99999)
    truth = assert_backends_equal_brute_force(problem, budget, options)
    assert truth.status == "infeasible"  # the budget is below the cheapest plan's cost: nothing meets it
