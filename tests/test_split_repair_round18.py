"""Time under a cost budget: the climbs' plans at the ends of the pipeline (issue 14, item 3, round 18, budgetb2).

- _split_descent: a plan's layers moved one at a time between an end stage and a few others while that makes it
  faster (on a fixed node sequence: cheaper too). Megatron 76B, mixed-pool-8k: the quick plan of tp 2, dp 7, cp 4,
  21 p5 stages (3 x 20 + 0 layers) is 0.29 % above B; two moves give the optimum the loop proved at 28 s of CPU.
- _split_repaired (SPLIT_REPAIR): a climb neighbour's faster plan a hair above B, repaired by those moves, and where
  still above B with its last stage on a cheaper type (_end_retyped, END_RETYPE; Megatron 310B, mixed-pool-3k).
- _split_improved: the climbs' end, its own layers moved (solve's budget block).
- RESHAPE_UNDER_B: _climb tries _reshaped minimizing time under B too (Megatron 76B, mixed-pool-3k: 10 stages of 6
  layers on dp 16 -> 21 stages on dp 8, the candidate of the optimum).
- LAYER_STEPS_HEAD: the layer-step depths plus one (a stage for the ends' work).
Incumbents only: every plan is priced by the cost model (Memo.runnable: in the space, fitting); no bound or proof reads
them. The instances are priced plans built by hand (no candidate list, no solve)."""

from __future__ import annotations

import pytest

from optsearch import solver as solver_module
from optsearch.cli.options import space_from_target
from optsearch.edits import edited_problem
from optsearch.plan import Plan, Stage
from optsearch.search import budget_violations
from optsearch.solver import Memo, _end_retyped, _layer_step_depths, _split_descent, _split_improved, _split_repaired
from optsearch.spec.budget import Budget
from optsearch.targets import engine_problem

P5, P4D = "p5.48xlarge", "p4d.24xlarge"
B_76B_8K = 933762.8994758868  # docs/objective_grid_megatron_round17_seven.json, time<=B rows
B_76B_3K = 888494.8578200008
B_310B_3K = 3315193.215896108


def _memo(model: str, cluster: str) -> Memo:
    problem = engine_problem("megatron", edited_problem(model, cluster, []))
    return Memo(problem, space_from_target("megatron", problem))


@pytest.fixture(scope="module")
def m76_8k() -> Memo:
    return _memo("megatron-76b", "mixed-pool-8k")


def _priced(memo: Memo, tp: int, dp: int, cp: int, counts: list[int], types: list[str]):
    stages = tuple(Stage(node_type=g, num_layers=n) for n, g in zip(counts, types))
    plan = solver_module._with_degrees(memo.problem, Plan(tp=tp, dp=dp, micro_batch_size=1, stages=stages),
                                       tp, dp, cp, stages)
    found = memo.runnable(plan)
    assert found is not None and found[0] == plan  # in the space, fitting, as built
    return found


def _time_under_b(usd: float) -> Budget:
    return Budget(objective="time", max_cost_usd=usd)


def test_layer_step_depths_plus_one_by_hand():
    """60 layers, at most 4 a stage: 12 stages need 5 (ceil(60 / 5)), 20 hold at most 3 (ceil(60 / 3)); with the
    head's stage, 13 and 21 too (Megatron 76B's time<=B optima on both 8k and 3k pools: 21 stages, 2-2-3x18-2)."""
    plan = Plan(tp=1, dp=1, micro_batch_size=1, stages=tuple(Stage(node_type="x", num_layers=4) for _ in range(15)))
    assert sorted(_layer_step_depths(plan)) == [12, 20]
    assert sorted(_layer_step_depths(plan, head=True)) == [12, 13, 20, 21]


def test_split_descent_reaches_the_loops_optimum(m76_8k, monkeypatch):
    """The quick plan's split (3 x 20 + 0: the head alone on the last stage) -> 2, 2, 3 x 18, 2: 232,356.93 s at
    $932,851.12, the optimum the 90 s run proved (bench/proof_rows.py, ecb0759). Each move keeps the stages' types
    and the layer total, and makes the plan faster and, on the same nodes, cheaper."""
    start = _priced(m76_8k, 2, 7, 4, [3] * 20 + [0], [P5] * 21)
    assert start[1].training_time_s == pytest.approx(233252.685, rel=1e-8)
    assert start[1].cost_usd > B_76B_8K  # 0.29 % above B: the climbs never took this candidate
    plan, est = _split_descent(m76_8k, *start)
    assert [s.num_layers for s in plan.stages] == [2, 2] + [3] * 18 + [2]
    assert [s.node_type for s in plan.stages] == [P5] * 21 and (plan.tp, plan.dp, plan.cp) == (2, 7, 4)
    assert est.training_time_s == pytest.approx(232356.932, rel=1e-8)
    assert est.cost_usd == pytest.approx(932851.120, rel=1e-8) and est.cost_usd < B_76B_8K
    assert m76_8k.runnable(plan) == (plan, est)
    monkeypatch.setattr(solver_module, "SPLIT_MOVES_MOST", 1)  # one move: the first one only
    plan1, est1 = _split_descent(m76_8k, *start)
    assert [s.num_layers for s in plan1.stages] == [2] + [3] * 19 + [1]
    assert est.training_time_s < est1.training_time_s < start[1].training_time_s


def test_split_repaired_meets_b_or_gives_nothing(m76_8k):
    """A neighbour's faster plan up to SPLIT_NEAR above B is repaired into a plan that meets B; one further above B,
    one that would not beat the current plan, or no cost budget at all: nothing. Never a plan above B."""
    start = _priced(m76_8k, 2, 7, 4, [3] * 20 + [0], [P5] * 21)
    got = _split_repaired(m76_8k, _time_under_b(B_76B_8K), [start], 259420.4)  # the climbs' plan at 10 s
    assert got is not None and got[0] == pytest.approx(232356.932, rel=1e-8)
    assert not budget_violations(got[1], got[2], _time_under_b(B_76B_8K))
    far = start[1].cost_usd / (1 + solver_module.SPLIT_NEAR) * 0.999  # the start more than SPLIT_NEAR above it
    assert _split_repaired(m76_8k, _time_under_b(far), [start], 259420.4) is None
    assert _split_repaired(m76_8k, _time_under_b(B_76B_8K), [start], 232000.0) is None  # cannot beat it
    assert _split_repaired(m76_8k, Budget(objective="time"), [start], 259420.4) is None
    tight = 932000.0  # within SPLIT_NEAR of the start, below every split of these nodes that the moves reach
    assert _split_repaired(m76_8k, _time_under_b(tight), [start], 259420.4) is None


def test_split_improved_the_climbs_end(m76_8k):
    """The climbs' end is replaced by its own split's plan where that meets the budget and is faster; an interleaved
    plan, or one the moves cannot better, is returned as it is."""
    start = _priced(m76_8k, 2, 7, 4, [3] * 20 + [0], [P5] * 21)
    value = start[1].training_time_s
    loose = _time_under_b(1e7)
    got = _split_improved(m76_8k, loose, (value, start[0], start[1]))
    assert got[0] == pytest.approx(232356.932, rel=1e-8)
    assert _split_improved(m76_8k, loose, got) is got  # a local optimum of the moves
    interleaved = (value, Plan(tp=2, dp=7, cp=4, micro_batch_size=1, virtual_stages=2,
                               stages=start[0].stages), start[1])
    assert _split_improved(m76_8k, loose, interleaved) is interleaved


def test_end_retyped_and_the_310b_repair():
    """_end_retyped: the last stage on every cheaper node type (per GPU-hour) of the cluster, nothing else changed.
    Megatron 310B, mixed-pool-3k: tp 2, dp 5, cp 4, 25 p5 stages (4 x 24 + 0) is above B even with its layers moved
    ($3,334,583); with its last stage on p4d and the moves, 996,736.93 s at $3,312,008.13: the best known plan (the
    loop's model at 63 s of CPU on ecb0759), below B."""
    memo = _memo("megatron-310b", "mixed-pool-3k")
    start = _priced(memo, 2, 5, 4, [4] * 24 + [0], [P5] * 25)
    per_gpu = {n.name: n.price_usd_per_node_hour / n.gpus_per_node for n in memo.problem.cluster.node_types}
    variants = _end_retyped(memo.problem, start[0])
    assert sorted(v.stages[-1].node_type for v in variants) == sorted(g for g in per_gpu if per_gpu[g] < per_gpu[P5])
    assert all(v.stages[:-1] == start[0].stages[:-1] and v.stages[-1].num_layers == 0 for v in variants)
    assert P4D in {v.stages[-1].node_type for v in variants}
    budget = _time_under_b(B_310B_3K)
    assert budget_violations(*_split_descent(memo, *start), budget) == ["max_cost"]
    got = _split_repaired(memo, budget, [start], 1208183.1)  # the climbs' plan at 10 s on ecb0759
    assert got is not None and got[0] == pytest.approx(996736.929, rel=1e-8)
    assert [(s.node_type, s.num_layers) for s in got[1].stages[-2:]] == [(P5, 3), (P4D, 1)]
    assert not budget_violations(got[1], got[2], budget) and memo.runnable(got[1]) == (got[1], got[2])


@pytest.mark.parametrize("switch", [True, False])
def test_climb_reshapes_under_b(switch, monkeypatch):
    """Megatron 76B, mixed-pool-3k, time under B: from the climbs' 10 s plan (tp 1, dp 16, cp 4, 10 stages of 6,
    404,950.58 s) the reshaped plan (dp 8, 20 stages of 3 and the head alone) is 384,224.57 s under B, a move with
    RESHAPE_UNDER_B and none without (no neighbours given: only the plan's own variants are priced)."""
    memo = _memo("megatron-76b", "mixed-pool-3k")
    start = _priced(memo, 1, 16, 4, [6] * 10, [P5] * 10)
    monkeypatch.setattr(solver_module, "RESHAPE_UNDER_B", switch)
    got = solver_module._climb(memo, _time_under_b(B_76B_3K), [], (start[1].training_time_s, *start), None,
                               wide=False)
    if switch:
        assert got[0] == pytest.approx(384224.57, rel=1e-7) and (got[1].dp, len(got[1].stages)) == (8, 21)
        assert not budget_violations(got[1], got[2], _time_under_b(B_76B_3K))
    else:
        assert got[0] == pytest.approx(404950.58, rel=1e-7)


def test_plain_then_wide_first_start_whole_share(monkeypatch):
    """first_whole (DESCENT_CLIMB_FIRST): the first start's plain climb may take the whole plain share, the next
    what it leaves; without it the first gets half of two starts' share (round 17's order). The wide climb is as
    before, from the best plain end. Fails on ecb0759 (no first_whole)."""
    calls: list = []
    end_of = {10.0: 5.0, 20.0: 3.0, 3.0: 2.5}  # each start's climb end (the values only)
    clock = [100.0]

    def fake_climb(memo, budget, bounded, start, deadline, wide, until=None, ends=None, by_key=None):
        calls.append((start[0], wide, None if deadline is None else round(deadline - clock[0], 9)))
        clock[0] += 0.5  # each climb takes half a second of the fake clock
        return (end_of[start[0]], "plan", "est")
    monkeypatch.setattr(solver_module, "_climb", fake_climb)
    monkeypatch.setattr(solver_module.time, "perf_counter", lambda: clock[0])
    plain = (solver_module.NEIGHBOUR_SHARE - solver_module.WIDE_SHARE) * 10.0
    for whole, first in ((True, plain), (False, plain / 2)):
        calls.clear()
        got = solver_module._plain_then_wide(None, None, [], [(20.0, "d", "e"), (10.0, "s", "e")], 10.0, None, whole)
        assert [(c[0], c[1]) for c in calls] == [(20.0, False), (10.0, False), (3.0, True)] and got[0] == 2.5
        assert calls[0][2] == pytest.approx(first) and calls[1][2] == pytest.approx(plain - 0.5)
