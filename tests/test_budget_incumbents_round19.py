"""Time under a cost budget: the climbs' incumbents (issue 14, item 3, round 19, budgetinc3).

- RESHAPE_BOTH: _plain_then_wide climbs the first start a second time without the _reshaped variants, from the plan
  the first climb left by its first reshaped move (_climb's `forks`), for RESHAPE_BOTH_SHARE more; the better end
  goes on (Megatron 39B, mixed-pool-8k: the reshaped climb ends at 178,824 s, the other at 153,325 s; 310B 3k keeps
  the reshaped climb's 996,737 s).
- _deeper_steps (DEEPER_STEPS): from the plain end, the same tp, b, ep, cp at the depths two or more layer steps
  deeper, on dp no larger (Megatron 145B, mixed-pool-3k: 17 stages of at most 5 layers, 852,768 s -> 27 stages of 3,
  536,007 s, the optimum; 310B 8k through the split repair to 521,772 s, the optimum).
Incumbents only: every plan is priced by the cost model (Memo.runnable / quick plans) and checked against B. The
instances are priced plans built by hand and a few candidates (no list, no solve)."""

from __future__ import annotations

import pytest

from optsearch import solver as solver_module
from optsearch.cli.options import space_from_target
from optsearch.edits import edited_problem
from optsearch.plan import Plan, Stage
from optsearch.search import budget_violations
from optsearch.solver import ALL, Bounded, Memo, _deeper_step_depths, _deeper_steps, _row_candidate, _uses_and_settings
from optsearch.spec.budget import Budget
from optsearch.targets import engine_problem

P5 = "p5.48xlarge"
B_76B_3K = 888494.8578200008  # docs/objective_grid_megatron_round17_seven.json (tests/test_split_repair_round18.py)
B_145B_3K = 1589379.443030529  # docs/objective_grid_megatron_round18_end.json, time<=B rows
B_310B_8K = 3493543.3939780467


def _memo(model: str, cluster: str) -> Memo:
    problem = engine_problem("megatron", edited_problem(model, cluster, []))
    return Memo(problem, space_from_target("megatron", problem))


def _priced(memo: Memo, tp: int, dp: int, cp: int, counts: list[int]):
    stages = tuple(Stage(node_type=P5, num_layers=n) for n in counts)
    plan = solver_module._with_degrees(memo.problem, Plan(tp=tp, dp=dp, micro_batch_size=1, stages=stages),
                                       tp, dp, cp, stages)
    found = memo.runnable(plan)
    assert found is not None and found[0] == plan  # in the space, fitting, as built
    return found[1].training_time_s, found[0], found[1]


def _bounded(memo: Memo, keys: list[tuple[int, ...]]) -> list[Bounded]:
    """The candidates of these keys with a lower bound of 0 (valid for any candidate: only the order and the
    skips read it)."""
    out = []
    for key in keys:
        uses = _uses_and_settings(memo, ALL, (key[0], key[1], key[2], key[5]))[0]
        out.append(Bounded(_row_candidate(key, uses), 0.0))
    return out


def _under_b(usd: float) -> Budget:
    return Budget(objective="time", max_cost_usd=usd)


def test_deeper_step_depths_by_hand():
    """80 layers, at most 5 a stage on 17 stages: 3, 2 and 1 layers a stage need 27, 40 and 80 stages (and one more
    each, for the ends); 4 a stage is the one-layer step (LAYER_STEPS), not here. At most 2 a stage: none."""
    def plan(counts):
        return Plan(tp=1, dp=1, micro_batch_size=1, stages=tuple(Stage(node_type="x", num_layers=n) for n in counts))
    assert _deeper_step_depths(plan([4, 4] + [5] * 14 + [2])) == [27, 28, 40, 41, 80, 81]
    assert _deeper_step_depths(plan([3] * 26 + [2])) == [80, 81]
    assert _deeper_step_depths(plan([2] * 40)) == []


@pytest.fixture(scope="module")
def m145_3k() -> Memo:
    return _memo("megatron-145b", "mixed-pool-3k")


def test_deeper_steps_145b_3k_reaches_27_stages(m145_3k, monkeypatch):
    """Megatron 145B, mixed-pool-3k, B = $1,589,379: from the climbs' end at 10 s (tp 1, dp 8, cp 4, 17 stages of
    4, 4, 5 x 14, 2: 852,768 s) the same degrees in 27 stages (3 x 26, 2: 536,006.83 s, $1,581,006, the optimum the
    loop proved at 20 s of CPU); 20 stages of 4 would break B. Without a cost budget, or from an interleaved plan,
    the start comes back as it is."""
    monkeypatch.setattr(solver_module, "CLIMB_REFINED", False)  # no refined bounds for these hand-made entries
    start = _priced(m145_3k, 1, 8, 4, [4, 4] + [5] * 14 + [2])
    assert start[0] == pytest.approx(852768.0, rel=1e-5)
    budget = _under_b(B_145B_3K)
    bounded = _bounded(m145_3k, [(1, 8, 1, 27, 1, 4, 1, 0), (1, 8, 1, 28, 1, 4, 1, 0), (1, 8, 1, 20, 1, 4, 1, 0)])
    got = _deeper_steps(m145_3k, budget, bounded, start, None)
    assert got[0] == pytest.approx(536006.83, rel=1e-7)
    assert [s.num_layers for s in got[1].stages] == [3] * 26 + [2] and (got[1].tp, got[1].dp, got[1].cp) == (1, 8, 4)
    assert not budget_violations(got[1], got[2], budget) and m145_3k.runnable(got[1]) == (got[1], got[2])
    assert _deeper_steps(m145_3k, Budget(objective="time"), bounded, start, None) is start
    assert _deeper_steps(m145_3k, budget, bounded[2:], start, None) is start  # 20 stages (one layer step): not asked


def test_deeper_steps_310b_8k_repairs_a_hair_over_b(monkeypatch):
    """Megatron 310B, mixed-pool-8k, B = $3,493,543: from tp 2, dp 8, cp 4, 25 stages (4 x 24, 0: 636,486 s) the
    candidate tp 2, dp 5, 49 stages has quick plans only above B (522,354 s at $3,495,185, 0.05 % over); after every
    key's quick plans, its split repair gives 1, 2 x 47, 1 layers: 521,772.37 s, $3,491,295, the optimum. With
    SPLIT_REPAIR off nothing under B beats the start."""
    monkeypatch.setattr(solver_module, "CLIMB_REFINED", False)
    memo = _memo("megatron-310b", "mixed-pool-8k")
    start = _priced(memo, 2, 8, 4, [4] * 24 + [0])
    budget = _under_b(B_310B_8K)
    bounded = _bounded(memo, [(2, 5, 1, 49, 1, 4, 1, 0)])
    got = _deeper_steps(memo, budget, bounded, start, None)
    assert got[0] == pytest.approx(521772.37, rel=1e-7)
    assert [s.num_layers for s in got[1].stages] == [1] + [2] * 47 + [1]
    assert not budget_violations(got[1], got[2], budget) and memo.runnable(got[1]) == (got[1], got[2])
    monkeypatch.setattr(solver_module, "SPLIT_REPAIR", False)
    assert _deeper_steps(memo, budget, bounded, start, None) is start


def test_climb_records_the_fork_of_its_first_reshaped_move():
    """Megatron 76B, mixed-pool-3k (round 18's instance): with no neighbours the climb moves only through its plan's
    own variants; from 10 stages of 6 on dp 16 the reshaped plan (dp 8, 21 stages) is the move: `forks` gets the
    plan it left. With reshape=False the same climb makes no move and records nothing."""
    memo = _memo("megatron-76b", "mixed-pool-3k")
    start = _priced(memo, 1, 16, 4, [6] * 10)
    forks: list = []
    got = solver_module._climb(memo, _under_b(B_76B_3K), [], start, None, wide=False, forks=forks)
    assert got[0] == pytest.approx(384224.57, rel=1e-7) and forks == [start]
    forks.clear()
    got = solver_module._climb(memo, _under_b(B_76B_3K), [], start, None, wide=False, forks=forks, reshape=False)
    assert got is start and forks == []


def test_plain_then_wide_climbs_the_fork_without_reshaping(monkeypatch):
    """both (RESHAPE_BOTH): the first start's climb reports a fork; a second plain climb goes from the fork with
    reshape=False, first until its first move (for RESHAPE_BOTH_PATIENCE of its time), then on with ends of its own
    (not the shared dict), for RESHAPE_BOTH_SHARE x left beside its part of what is left of the plain share; the later
    start shares what is left; the wide climb starts from the best plain end, here the second climb's; every plain end
    is in plain_ends, marked where it is the second climb's. A fork that makes no first move stops there. Without
    both: round 18's calls. Fails on 523dd76 (no `both`)."""
    calls: list = []
    shared: dict = {}
    end_of = {(20.0, None): 9.0, (15.0, False): 6.0, (6.0, False): 5.0, (10.0, None): 8.0}
    clock = [100.0]

    def fake_climb(memo, budget, bounded, start, deadline, wide, until=None, ends=None, by_key=None, reshape=None,
                   forks=None):
        calls.append((start[0], wide, reshape, ends is shared, until is not None,
                      None if deadline is None else round(deadline - clock[0], 9)))
        if forks is not None:
            forks.append((15.0, "fork", "e"))
        clock[0] += 0.5
        return (end_of[(start[0], reshape)] if not wide else start[0] - 1.0, "p", "e")
    monkeypatch.setattr(solver_module, "_climb", fake_climb)
    monkeypatch.setattr(solver_module.time, "perf_counter", lambda: clock[0])
    plain = (solver_module.NEIGHBOUR_SHARE - solver_module.WIDE_SHARE) * 10.0
    extra = solver_module.RESHAPE_BOTH_SHARE * 10.0
    ends: list = []
    got = solver_module._plain_then_wide(None, None, [], [(20.0, "d", "e"), (10.0, "s", "e")], 10.0, shared,
                                         True, True, False, ends)
    assert [c[:5] for c in calls] == [(20.0, False, None, True, False), (15.0, False, False, False, True),
                                      (6.0, False, False, False, False), (10.0, False, None, True, False),
                                      (5.0, True, None, True, False)]
    assert calls[0][5] == pytest.approx(plain)  # first_whole
    second = extra + (plain - 0.5) / 2  # the second climb's time
    assert calls[1][5] == pytest.approx(solver_module.RESHAPE_BOTH_PATIENCE * second)
    assert calls[2][5] == pytest.approx(second - 0.5)
    assert calls[3][5] == pytest.approx(plain + extra - 1.5)  # what the climbs left
    assert got[0] == 4.0 and [(e[0], off) for e, off in ends] == [(9.0, False), (5.0, True), (8.0, False)]
    calls.clear()
    end_of[(15.0, False)] = 15.0  # no first move from the fork: the second climb stops there
    solver_module._plain_then_wide(None, None, [], [(20.0, "d", "e"), (10.0, "s", "e")], 10.0, shared, True, True)
    assert [c[:3] for c in calls] == [(20.0, False, None), (15.0, False, False), (10.0, False, None),
                                      (8.0, True, None)]
    calls.clear()
    solver_module._plain_then_wide(None, None, [], [(20.0, "d", "e"), (10.0, "s", "e")], 10.0, shared, True)
    assert [c[:3] for c in calls] == [(20.0, False, None), (10.0, False, None), (8.0, True, None)]
