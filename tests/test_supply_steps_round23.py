"""Time under a cost budget: the plain end's fuller stages on more dp past its main type's node supply (issue 14,
item 3, round 23, flight1t; solver._supply_steps, SUPPLY_STEPS).

Megatron 1T (128 layers), mixed-pool-3k, B = $16,072,041.83: the climbs stop at the cheapest plan, tp 4, dp 2, cp 2,
64 H100 stages of 2 layers (all 128 p5 nodes) and the head on an A100 stage (4,522,950.70 s); at dp 3 (3 nodes a
stage) 42 H100 stages fit, and 47 stages (42 H100 ones of 2-3 layers, 5 A100 ones of 1) give 4,368,899.54 s,
$15,630,841, the best plan a 60 s run finds. Incumbents only: every plan is priced by the cost model (quick plans)
and checked against B. The instances are priced plans built by hand and a few candidates (no list, no solve)."""

from __future__ import annotations

import pytest

from optsearch import solver as solver_module
from optsearch.cli.options import space_from_target
from optsearch.edits import edited_problem
from optsearch.plan import Plan, Stage
from optsearch.search import budget_violations
from optsearch.solver import ALL, Bounded, Memo, _row_candidate, _supply_step_keys, _supply_steps, _uses_and_settings
from optsearch.spec.budget import Budget
from optsearch.targets import engine_problem

P5, P4D = "p5.48xlarge", "p4d.24xlarge"
B_1T_3K = 16072041.83  # /work/brief/budgets23.txt (round 22's catalog)


@pytest.fixture(scope="module")
def m1t_3k() -> Memo:
    problem = engine_problem("megatron", edited_problem("megatron-1t", "mixed-pool-3k", []))
    return Memo(problem, space_from_target("megatron", problem))


def _plan(memo: Memo, tp: int, dp: int, cp: int, stages: list[tuple[str, int]]) -> Plan:
    stages_t = tuple(Stage(node_type=name, num_layers=n) for name, n in stages)
    return solver_module._with_degrees(memo.problem, Plan(tp=tp, dp=dp, micro_batch_size=1, stages=stages_t),
                                       tp, dp, cp, stages_t)


def _bounded(memo: Memo, keys: list[tuple[int, ...]]) -> list[Bounded]:
    """The candidates of these keys with a lower bound of 0 (valid for any candidate: only the order and the skips
    read it)."""
    out = []
    for key in keys:
        uses = _uses_and_settings(memo, ALL, (key[0], key[1], key[2], key[5]))[0]
        out.append(Bounded(_row_candidate(key, uses), 0.0))
    return out


def test_supply_step_keys_by_hand(m1t_3k):
    """64 stages of at most 2 layers on p5 (128 nodes): the fuller step is ceil(128 / 3) = 43 stages, which p5 holds
    at dp 2 (2 nodes a stage: 86 nodes) but not at dp 3 (129) or dp 4 (172): 43 .. 43 + SUPPLY_SPAN at dp 3 and 4
    (dp 6 is more than SUPPLY_DP x 2, dp 1 and 2 not above the plan's). From dp 1 (1 node a stage) dp 2 holds 43
    stages of p5: no key."""
    plan = _plan(m1t_3k, 4, 2, 2, [(P5, 2)] * 64 + [(P4D, 0)])
    span = solver_module.SUPPLY_SPAN
    want = [(4, d, 1, q, 1, 2, 1, 0) for d in (3, 4) for q in range(43, 43 + span + 1)]
    assert _supply_step_keys(m1t_3k.problem, plan, [1, 2, 3, 4, 6]) == want
    narrow = _plan(m1t_3k, 4, 1, 2, [(P5, 2)] * 64 + [(P4D, 0)])
    assert _supply_step_keys(m1t_3k.problem, narrow, [1, 2, 3, 4, 6]) == []


def test_supply_steps_1t_3k_reaches_47_stages(m1t_3k):
    """From the climbs' end at 10 s (4,522,950.70 s) the dp 3 candidates at 43-49 stages: the best of their quick
    plans under B is 47 stages, 4,368,899.54 s (the first that improves, 46 stages, 4,388,136 s, is not kept: the
    best is). Without a cost budget, or with only the depths whose plans do not beat the start (43-45), the start
    comes back as it is."""
    start_plan = _plan(m1t_3k, 4, 2, 2, [(P5, 2)] * 64 + [(P4D, 0)])
    found = m1t_3k.runnable(start_plan)
    assert found is not None and found[0] == start_plan
    start = (found[1].training_time_s, found[0], found[1])
    assert start[0] == pytest.approx(4522950.70, rel=1e-8)
    budget = Budget(objective="time", max_cost_usd=B_1T_3K)
    assert not budget_violations(start[1], start[2], budget)
    keys = [(4, 3, 1, q, 1, 2, 1, 0) for q in range(43, 50)]
    bounded = _bounded(m1t_3k, keys)
    got = _supply_steps(m1t_3k, budget, bounded, start, None)
    assert got[0] == pytest.approx(4368899.54, rel=1e-8)
    assert (got[1].tp, got[1].dp, got[1].cp, len(got[1].stages)) == (4, 3, 2, 47)
    assert sum(s.node_type == P5 for s in got[1].stages) == 42  # 126 of the 128 p5 nodes
    assert not budget_violations(got[1], got[2], budget) and m1t_3k.runnable(got[1]) == (got[1], got[2])
    assert _supply_steps(m1t_3k, Budget(objective="time"), bounded, start, None) is start
    assert _supply_steps(m1t_3k, budget, bounded[:3], start, None) is start  # 43-45 stages: none beats the start
