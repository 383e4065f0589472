"""Time under a cost budget: the climbs and seeds before the loop (issue 14, item 3, round 17, budgetb).

- _plain_then_wide (PLAIN_CLIMBS_FIRST): the plain climb from every start, then one wide climb from the best end.
- _layer_step_depths (LAYER_STEPS): the wide climb also tries the depths where the largest stage gains or loses a
  layer (Llama-2 70B, mixed-pool-8k: 21 -> 27 stages, the optimum).
- _seed_ruled_out (SEEDS_REFINED): with a plan known, a budget search's own seeds whose refined bound reaches it are
  not priced.
- SEED_AFTER_DESCENT_SHARE: minimizing time under B with the descent's plan known, the seed search gets 0.2 of the
  time left (was 0.5).
Incumbents only: none of these changes a bound, a pruning rule or a proof. The tests count what is asked and priced;
nothing is timed."""

from __future__ import annotations

import math

import pytest

from optsearch import solver as solver_module
from optsearch.cli.options import space_from_target
from optsearch.edits import edited_problem
from optsearch.plan import Plan, Stage
from optsearch.solver import ALL, Memo, _candidates, _climb_depths, _layer_step_depths
from optsearch.spec.budget import Budget
from optsearch.targets import engine_problem

# GPT-2 large on FASOP's cluster, the megatron target's space: the cheapest plan has cp = 2
# (tests/test_part_climb_lazy.py), so at 1 % above its cost the descent, not the early seeds, gives the first plan.
CHEAPEST_USD = 10681.559342891647


def _plan(counts: list[int]) -> Plan:
    return Plan(tp=1, dp=1, micro_batch_size=1, stages=tuple(Stage(node_type="x", num_layers=n) for n in counts))


def test_layer_step_depths_by_hand():
    """80 layers, at most 4 a stage (20 stages of 4, or 21 with one of 4 and others fewer): 27 stages hold at most 3
    (ceil(80 / 3)), 16 need 5 (ceil(80 / 5)). One layer a stage: only the shallower step (ceil(L / 2))."""
    assert sorted(_layer_step_depths(_plan([4] * 20))) == [16, 27]
    assert sorted(_layer_step_depths(_plan([4] * 17 + [3] * 4))) == [16, 27]
    assert _layer_step_depths(_plan([1] * 6)) == [3]
    assert sorted(_layer_step_depths(_plan([9, 9, 9, 9]))) == [4, 5]


def test_plain_climbs_from_every_start_then_one_wide(monkeypatch):
    """The plain climb from each start in order, then the wide climb from the best plain end (not from the first
    start's end); each plain climb's deadline is what is left of the plain share divided by the starts left, the wide
    climb's WIDE_SHARE x left. Fails on 3e0ad5b (no _plain_then_wide: the first start climbed plainly and wide
    before the second start's climb)."""
    calls: list = []
    ends = {10.0: 5.0, 20.0: 3.0, 3.0: 2.5, 5.0: 4.0}
    clock = [100.0]

    def fake_climb(memo, budget, bounded, start, deadline, wide, until=None, ends_=None, by_key=None, **kw):
        calls.append((start[0], wide, None if deadline is None else round(deadline - clock[0], 9)))
        clock[0] += 0.5  # each climb takes half a second of the fake clock
        return (ends[start[0]], "plan", "est")

    monkeypatch.setattr(solver_module, "_climb", fake_climb)
    monkeypatch.setattr(solver_module.time, "perf_counter", lambda: clock[0])
    got = solver_module._plain_then_wide(None, None, [], [(10.0, "a", "e"), (20.0, "b", "e")], 10.0)
    plain = (solver_module.NEIGHBOUR_SHARE - solver_module.WIDE_SHARE) * 10.0
    assert [(c[0], c[1]) for c in calls] == [(10.0, False), (20.0, False), (3.0, True)]
    assert calls[0][2] == pytest.approx(plain / 2)  # the first of two starts: half the plain share
    assert calls[1][2] == pytest.approx(plain - 0.5)  # the second: what the first left
    assert calls[2][2] == pytest.approx(solver_module.WIDE_SHARE * 10.0)
    assert got[0] == 2.5
    calls.clear()
    got = solver_module._plain_then_wide(None, None, [], [(10.0, "a", "e")], None)  # no limit: no deadlines
    assert [c[2] for c in calls] == [None, None] and got[0] == 4.0


@pytest.fixture(scope="module")
def gpt2_large():
    problem = engine_problem("megatron", edited_problem("gpt2-large", "fasop-a100-a10", []))
    return problem, space_from_target("megatron", problem)


def test_wide_climb_asks_the_layer_step_depths(gpt2_large, monkeypatch):
    """Under a cost budget the wide climb's neighbours include the same (tp, dp, b, ep, cp) at the plan's layer-step
    depths, beyond pp +- 2, pp / 2, 2 pp and 4 pp; without LAYER_STEPS they are not asked. Every neighbour is
    recorded by making the refined check rule it out (nothing priced, the climb stays), from a start valued above
    every bound. Fails on 3e0ad5b (no _layer_step_depths)."""
    problem, options = gpt2_large
    budget = Budget(objective="time", max_cost_usd=1e12)
    memo = Memo(problem, options)
    bounded, _ = _candidates(memo, budget, 0.0, ALL)
    by_key = {item.cand.key: item for item in bounded if item.cand.v == 1}
    start = extra = None
    for item in bounded:  # a listed v = 1 candidate whose quick plan has a layer-step depth the climb did not try
        if item.cand.v != 1 or item.cand.pp < 3:
            continue
        plans = memo.quick_plans(memo.skeleton(item.cand))
        if not plans:
            continue
        plan = plans[0][0]
        new = set(_layer_step_depths(plan)) - set(_climb_depths(len(plan.stages)))
        key = item.cand.key
        listed = {key[:3] + (q,) + key[4:] for q in new} & set(by_key)
        if listed:
            start, extra = (1e30, plan, plans[0][1]), listed
            break
    assert start is not None  # the instance has such a candidate (precondition)
    asked: list = []

    def ruled_out(memo_, budget_, item, value, interleaved=False):
        asked.append(item.cand.key)
        return True

    monkeypatch.setattr(solver_module, "_refined_at_least", ruled_out)
    monkeypatch.setattr(solver_module, "_rescaled", lambda problem_, plan_: [])
    monkeypatch.setattr(solver_module, "_reshaped", lambda problem_, plan_: [])  # round 18: tried under B too
    for on in (True, False):
        monkeypatch.setattr(solver_module, "LAYER_STEPS", on)
        asked.clear()
        got = solver_module._climb(memo, budget, bounded, start, None, wide=True)
        assert got is start  # nothing priced, nothing moved
        assert (extra <= set(asked)) is on and (extra & set(asked) == set()) is (not on)


def test_own_seeds_ruled_out_by_their_refined_bound(gpt2_large, monkeypatch):
    """_seed_ruled_out: with a plan of value V known, a seed is skipped exactly where its refined bound under the
    budget reaches V (or proves no plan meets B), and then none of its quick plans that meet B beats V; no skip
    without a plan, without a cap, or with SEEDS_REFINED off. V is a real plan's value (the best quick plan under B
    of the seeds), so some seeds are skipped and some are not. Fails on 3e0ad5b (no _seed_ruled_out)."""
    problem, options = gpt2_large
    budget = Budget(objective="time", max_cost_usd=1.5 * CHEAPEST_USD)
    memo = Memo(problem, options)
    bounded, _ = _candidates(memo, budget, 0.0, ALL)
    seeds = [item for item in bounded if item.cand.v == 1][:24]
    priced = {item.cand.key: solver_module._best_meeting(budget, memo.quick_plans(memo.skeleton(item.cand)))
              for item in seeds}
    values = sorted(p[0] for p in priced.values() if p is not None)
    assert len(values) >= 2
    value = values[len(values) // 2]  # a median plan: some seeds beat it, some cannot
    skipped = kept = 0
    for item in seeds:
        out = solver_module._seed_ruled_out(memo, budget, item, (value, None, None, None))
        assert out == solver_module._refined_at_least(memo, budget, item, value * (1 - solver_module.INCUMBENT_REL))
        if out:
            skipped += 1
            own = priced[item.cand.key]
            assert own is None or own[0] >= value * (1 - solver_module.INCUMBENT_REL)
        else:
            kept += 1
        assert not solver_module._seed_ruled_out(memo, budget, item, None)
        assert not solver_module._seed_ruled_out(memo, Budget(objective="time"), item, (0.0, None, None, None))
        assert not solver_module._seed_ruled_out(  # cost under a deadline: as before
            memo, Budget(objective="cost", max_time_s=1e9), item, (0.0, None, None, None))
    assert skipped > 0 and kept > 0
    monkeypatch.setattr(solver_module, "SEEDS_REFINED", False)
    assert not any(solver_module._seed_ruled_out(memo, budget, item, (value, None, None, None)) for item in seeds)


class _Stop(Exception):
    pass


def test_seed_search_share_after_the_descents_plan(gpt2_large, monkeypatch):
    """Minimizing time under B = 1.01 x the cheapest cost the early seeds (cp = 1) meet no B and the descent gives
    the first plan; the seed search after it is then asked for at most SEED_AFTER_DESCENT_SHARE (0.1) of the time
    left, where it had half. Stopped at that call (no loop run). Fails on 3e0ad5b (0.5 x the time left)."""
    problem, options = gpt2_large
    budget = Budget(objective="time", max_cost_usd=1.01 * CHEAPEST_USD)
    asked: list = []
    seed_search = solver_module._seed_search
    clock = [0.0]  # a clock that moves only as the test says: the shares are exact

    def recorded(problem_, budget_, solver, time_limit_s, *args, **kwargs):
        if kwargs.get("seeds_only"):
            return seed_search(problem_, budget_, solver, time_limit_s, *args, **kwargs)
        asked.append(time_limit_s)
        raise _Stop

    descent = solver_module._part_then_whole_descent

    def timed_descent(*args, **kwargs):
        got = descent(*args, **kwargs)
        clock[0] += 2.0  # the descent "took" 2 s
        return got

    monkeypatch.setattr(solver_module, "_seed_search", recorded)
    monkeypatch.setattr(solver_module, "_part_then_whole_descent", timed_descent)
    monkeypatch.setattr(solver_module.time, "perf_counter", lambda: clock[0])
    with pytest.raises(_Stop):
        solver_module.solve(problem, budget, time_limit_s=10.0, options=options)
    assert solver_module.SEED_AFTER_DESCENT_SHARE == 0.1  # round 20 (budgetstart): 0.2 before
    assert len(asked) == 1 and math.isclose(asked[0], 0.1 * 8.0)  # 3e0ad5b: 0.5 x 8 s; ec0e396: 0.2 x 8 s
