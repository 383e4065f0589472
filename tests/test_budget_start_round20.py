"""Round 20 (budgetstart, issue 14 item 3): time under a cost budget, the share before the loop. The candidate lists'
v = 1 views kept per list (VIEWS_KEPT), the wide climb's rent guess and its order (WIDE_RENT_GUESS,
WIDE_GUESS_ORDER), _deeper_steps from every plain climb's end (DEEPER_STEPS_ENDS) and _deeper_interleaved from the
wide climb's start (DEEPER_FROM_WIDE_START). Incumbents only: every plan is priced by the cost model and meets B."""

from __future__ import annotations

from types import SimpleNamespace

from optsearch import solver as solver_module
from optsearch.candidates import in_search_space
from optsearch.costmodel import estimate
from optsearch.search import budget_violations, objective_value
from optsearch.solver import (Memo, _candidates, _guess_order, _least_over_v, _neighbour_search, _plain_then_wide,
                              _v1_by_key, _v1_dps, solve)

from test_budgetgap import _climbs_cut_then_resumed
from test_timeload import INTERLEAVED, _climb_start


def _honest(problem, budget, priced) -> None:
    value, plan, est = priced
    assert in_search_space(problem, plan, INTERLEAVED) and est == estimate(problem, plan)
    assert not budget_violations(plan, est, budget) and value == objective_value(est, "time")


def test_the_views_are_built_once_per_list_and_equal_a_fresh_build(monkeypatch):
    problem, budget, _ = _climb_start()
    memo = Memo(problem, INTERLEAVED)
    bounded, _ = _candidates(memo, budget)
    by_key = _v1_by_key(bounded)
    assert by_key == {item.cand.key: item for item in bounded if item.cand.v == 1}
    assert _v1_dps(bounded) == sorted({item.cand.dp for item in bounded if item.cand.v == 1})
    least = _least_over_v(bounded)
    assert _v1_by_key(bounded) is by_key and _least_over_v(bounded) is least  # the same list: kept
    copy = list(bounded)  # another list object (a solve's lists are never changed in place): its own views
    assert _v1_by_key(copy) is not by_key and _v1_by_key(copy) == by_key and _least_over_v(copy) == least
    monkeypatch.setattr(solver_module, "VIEWS_KEPT", False)
    assert _v1_by_key(bounded) is not by_key and _v1_by_key(bounded) == by_key and _least_over_v(bounded) == least


def test_the_guess_order_keeps_the_keys_below_the_plan_whose_guess_meets_b_least_guess_first(monkeypatch):
    """By hand: the plan rents 4 GPUs for 100 s at $400 ($1 per GPU-second); B = $1,000, WIDE_GUESS_NEAR 1 %."""
    plan = SimpleNamespace(tp=1, dp=2, cp=1, stages=(None, None))
    best = (100.0, plan, SimpleNamespace(cost_usd=400.0, training_time_s=100.0))
    budget = SimpleNamespace(max_cost_usd=1000.0)
    # key: (tp, dp, b, pp, ep, cp, v, o); GPUs tp x dp x cp x pp
    keys = {(1, 4, 1, 2, 1, 1, 1, 0): (50.0, 40.0),   # 8 GPUs x 40 s = $320
            (1, 8, 1, 2, 1, 1, 1, 0): (60.0, 60.0),   # 16 x 60 = $960
            (1, 8, 1, 4, 1, 1, 1, 0): (70.0, 70.0),   # 32 x 70 = $2,240: over B
            (1, 2, 1, 4, 1, 1, 1, 0): (80.0, 80.0),   # 8 x 80 = $640
            (1, 9, 1, 1, 1, 1, 1, 0): (90.0, 112.0),  # 9 x 112 = $1,008: within 1 % of B
            (1, 1, 1, 1, 1, 1, 1, 0): (100.0, 100.0)}  # at the plan's value: not below it
    by_key = {key: SimpleNamespace(lower_bound=bound) for key, (bound, _) in keys.items()}
    least_v = {key: least for key, (_, least) in keys.items()}
    order = sorted(keys, key=lambda k: by_key[k].lower_bound)
    assert _guess_order(order, by_key, least_v, best, budget) == [
        (1, 4, 1, 2, 1, 1, 1, 0), (1, 2, 1, 4, 1, 1, 1, 0), (1, 8, 1, 2, 1, 1, 1, 0), (1, 9, 1, 1, 1, 1, 1, 0)]
    monkeypatch.setattr(solver_module, "WIDE_GUESS_ORDER", False)  # the same keys, in bound order
    assert _guess_order(order, by_key, least_v, best, budget) == [
        (1, 4, 1, 2, 1, 1, 1, 0), (1, 8, 1, 2, 1, 1, 1, 0), (1, 2, 1, 4, 1, 1, 1, 0), (1, 9, 1, 1, 1, 1, 1, 0)]


def test_the_wide_climb_in_guess_order_reaches_the_end_at_its_first_evaluation(monkeypatch):
    """Time under B = 2.5 x the cheapest cost on one GPU type (16 single-GPU nodes, test_timeload), from the cost
    objective's plan: with every climb cut after one evaluation (NEIGHBOUR_EVALS), the wide climb in order of the rent
    guess reaches the end of a climb run alone, an honest plan; in bound order (the switch off) it does not."""
    monkeypatch.setattr(solver_module, "RESHAPE_UNDER_B", False)
    problem, budget, start = _climb_start()
    fresh = Memo(problem, INTERLEAVED)
    alone = _neighbour_search(fresh, budget, _candidates(fresh, budget)[0], start, None)
    cut, _, _, _, _, _ = _climbs_cut_then_resumed(problem, INTERLEAVED, budget, start, monkeypatch, 1)
    assert cut[0] == alone[0] < start[0]
    _honest(problem, budget, cut)
    monkeypatch.setattr(solver_module, "WIDE_RENT_GUESS", False)
    off, _, _, _, _, _ = _climbs_cut_then_resumed(problem, INTERLEAVED, budget, start, monkeypatch, 1)
    assert off[0] > alone[0]


def _stub_climbs(monkeypatch, ends: list, final):
    """_climb stubbed: the plain climbs return `ends` in turn, the wide climb `final`; _deeper_steps records its starts
    and returns them. Returns the list of those starts."""
    plain = iter(ends)
    monkeypatch.setattr(solver_module, "_climb", lambda memo, budget, bounded, start, deadline, wide, **kw:
                        final if wide else next(plain))
    starts: list = []
    monkeypatch.setattr(solver_module, "_deeper_steps", lambda memo, budget, bounded, start, deadline:
                        starts.append(start) or start)
    return starts


def _priced(memo, budget, bounded) -> list:
    """The quick plans of the list's v = 1 candidates that meet the budget, priced (value, plan, estimate), each plan
    once, the fastest first."""
    quick = [p for item in bounded if item.cand.v == 1 for p in memo.quick_plans(memo.skeleton(item.cand))
             if not budget_violations(*p, budget)]
    priced = sorted({p[0]: (objective_value(p[1], "time"), *p) for p in quick}.values(), key=lambda p: p[0])
    assert len(priced) >= 3
    return priced


def test_the_deeper_steps_start_from_every_plain_end_at_v_1_the_best_first(monkeypatch):
    """_plain_then_wide with the climbs stubbed (three plain ends, two of them the same plan): _deeper_steps runs from
    the best end, then from the other (DEEPER_STEPS_ENDS), each plan once; off, from the best alone."""
    problem, budget, start = _climb_start()
    memo = Memo(problem, INTERLEAVED)
    bounded, _ = _candidates(memo, budget)
    priced = _priced(memo, budget, bounded)
    slow, mid, fast = priced[-1], priced[len(priced) // 2], priced[0]
    starts = _stub_climbs(monkeypatch, [mid, slow, mid], fast)
    got = _plain_then_wide(memo, budget, bounded, [start, start, start], None, steps=True)
    assert got is fast and starts == [mid, slow]  # each plan once, the best end first
    monkeypatch.setattr(solver_module, "DEEPER_STEPS_ENDS", False)
    starts = _stub_climbs(monkeypatch, [mid, slow, mid], fast)
    _plain_then_wide(memo, budget, bounded, [start, start, start], None, steps=True)
    assert starts == [mid]


def test_the_deeper_interleaved_pipelines_of_the_wide_climbs_start_where_it_moved(monkeypatch):
    """solve, time under B: where the wide climb moved from the best plain end (stubbed: the climbs return the
    fastest quick plan under B, their plain end is a slower one), _deeper_interleaved runs from that end as well as
    from the incumbent (DEEPER_FROM_WIDE_START); off, from the incumbent alone. The answer is an honest plan."""
    problem, budget, _ = _climb_start()
    memo = Memo(problem, INTERLEAVED)
    bounded, _ = _candidates(memo, budget)
    priced = _priced(memo, budget, bounded)
    mid, fast = priced[len(priced) // 2], priced[0]

    def climbs(memo, budget, bounded, starts, left, ends=None, first_whole=False, both=False, steps=False,
               plain_ends=None):
        plain_ends.append((mid, False))
        return fast
    monkeypatch.setattr(solver_module, "_plain_then_wide", climbs)
    monkeypatch.setattr(solver_module, "SPLIT_REPAIR", False)  # (the climbs' end's own split descent)
    for on in (True, False):
        monkeypatch.setattr(solver_module, "DEEPER_FROM_WIDE_START", on)
        froms: list = []
        original = solver_module._deeper_interleaved
        monkeypatch.setattr(solver_module, "_deeper_interleaved", lambda memo, budget, bounded, start, deadline:
                            froms.append(start) or original(memo, budget, bounded, start, deadline))
        result = solve(problem, budget, options=INTERLEAVED, time_limit_s=30.0)
        monkeypatch.setattr(solver_module, "_deeper_interleaved", original)
        assert [begin[1] for begin in froms] == ([fast[1], mid[1]] if on else [fast[1]])
        assert result.objective_value <= fast[0]
        _honest(problem, budget, (result.objective_value, result.plan, result.estimate))
