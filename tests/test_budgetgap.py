"""The budgetgap branch (issue 14, item 3, round 13), time under a cost budget before the loop. A climb cut short (its
deadline or NEIGHBOUR_EVALS) leaves where it stood (solver.ClimbCut, in the record of ends that a solve's climbs
share), and a later climb that steps on its path goes on from there: the ends it reaches are those of a climb run
alone to its end, and it does not price again what the cut climb priced. And the climbs' plan's GPUs in deeper
interleavable pipelines of any shape (solver._deeper_interleaved, DEEPER_RESHAPED). Incumbents only: every plan is
priced by the cost model and meets the budget, and no bound changes."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from draws import draws

from optsearch import solver as solver_module
from optsearch.candidates import in_search_space
from optsearch.costmodel import estimate
from optsearch.search import budget_violations, objective_value
from optsearch.solver import ClimbCut, Memo, _candidates, _deeper_interleaved, _neighbour_search, solve
from optsearch.spec.budget import Budget
from dataclasses import replace

from test_interleaved import interleaved_instances
from test_seed_search import budget_at_free_plan
from test_timeload import INTERLEAVED, _climb_start, _one_type_problem


def _climbs_cut_then_resumed(problem, options, budget, start, monkeypatch, cut_at: int):
    """A climb cut after cut_at evaluations, then one from the same start sharing its ends: their answers, the
    shared ends, the (wide, plan) keys the first left a ClimbCut under, and the candidates whose quick plans each
    asked for (Memo.quick_plans)."""
    memo = Memo(problem, options)
    bounded, _ = _candidates(memo, budget)
    asked: list = []
    original = Memo.quick_plans
    monkeypatch.setattr(Memo, "quick_plans", lambda self, sk: asked.append(sk.cand.key) or original(self, sk))
    ends: dict = {}
    monkeypatch.setattr(solver_module, "NEIGHBOUR_EVALS", cut_at)
    cut = _neighbour_search(memo, budget, bounded, start, None, None, ends)
    cuts = {key for key, record in ends.items() if isinstance(record, ClimbCut)}  # where the first climb stood
    first_asked, asked[:] = list(asked), []
    monkeypatch.setattr(solver_module, "NEIGHBOUR_EVALS", 1000)
    resumed = _neighbour_search(memo, budget, bounded, start, None, None, ends)
    monkeypatch.setattr(Memo, "quick_plans", original)
    return cut, resumed, ends, cuts, first_asked, list(asked)


def test_a_climb_cut_short_is_resumed_where_it_stopped_and_reaches_the_end_of_a_climb_alone(monkeypatch):
    """Time under B = 2.5 x the cheapest cost on one GPU type, from the cost objective's first plan: a climb cut after
    one evaluation records a ClimbCut on its path; a second climb from the same start resumes it, prices none of the
    neighbours the first priced again, and returns the end a climb without the record reaches. Round 18's
    RESHAPE_UNDER_B off: with the reshaped variants the climbs take another path on this instance (the end is still
    the one a climb alone reaches), and the second search's wide climb, from its own plain end, asks the key the cut
    plain climb priced (a wide climb of another start: not a resume; checked on the branch). Round 20's
    WIDE_RENT_GUESS off: with it the cut search's wide climb prices the optimum's key first and ends there too."""
    monkeypatch.setattr(solver_module, "RESHAPE_UNDER_B", False)
    monkeypatch.setattr(solver_module, "WIDE_RENT_GUESS", False)
    problem, budget, start = _climb_start()
    cut, resumed, ends, cuts, first_asked, second_asked = _climbs_cut_then_resumed(problem, INTERLEAVED, budget,
                                                                                   start, monkeypatch, 1)
    assert (False, start[1]) in cuts  # the first climb was cut, and said where
    fresh = Memo(problem, INTERLEAVED)
    alone = _neighbour_search(fresh, budget, _candidates(fresh, budget)[0], start, None)
    assert resumed == alone and alone[0] < cut[0] <= start[0]
    assert first_asked and not set(second_asked) & set(first_asked[:1])  # the cut climb's one evaluation, not again
    assert not isinstance(ends[(False, start[1])], ClimbCut)  # the path's record is now the end
    value, plan, est = resumed
    assert in_search_space(problem, plan, INTERLEAVED) and est == estimate(problem, plan)
    assert not budget_violations(plan, est, budget) and value == objective_value(est, "time")


def test_without_the_switch_a_cut_climb_records_nothing(monkeypatch):
    problem, budget, start = _climb_start()
    monkeypatch.setattr(solver_module, "CLIMB_RESUME", False)
    _, _, ends, cuts, _, _ = _climbs_cut_then_resumed(problem, INTERLEAVED, budget, start, monkeypatch, 1)
    assert not cuts and not any(isinstance(v, ClimbCut) for v in ends.values())


@settings(max_examples=draws(3), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(interleaved_instances())
def test_climbs_cut_and_resumed_reach_the_ends_of_climbs_alone(case):
    """On random interleaved and cp spaces, time under a cost budget, from both objectives' first plans: a climb cut
    after 1 or 2 evaluations, then resumed by a second climb sharing its ends, returns what a climb alone returns."""
    from _pytest.monkeypatch import MonkeyPatch

    problem, options, _, factor = case
    budget = budget_at_free_plan(problem, options, "time", factor)
    for objective in ("cost", "time"):
        got = solve(problem, budget.model_copy(update={"objective": objective}), options=options, first_plan_only=True)
        if got.plan is None:
            continue
        start = (objective_value(got.estimate, "time"), got.plan, got.estimate)
        fresh = Memo(problem, options)
        alone = _neighbour_search(fresh, budget, _candidates(fresh, budget)[0], start, None)
        for cut_at in (1, 2):
            with MonkeyPatch.context() as mp:
                _, resumed, _, _, _, _ = _climbs_cut_then_resumed(problem, options, budget, start, mp, cut_at)
            assert resumed == alone


def test_the_climbs_plans_gpus_in_a_deeper_interleaved_pipeline_of_another_shape_reach_the_optimum(monkeypatch):
    """Time under B = 2.5 x the cheapest cost on one GPU type (16 single-GPU nodes, 8 layers, global batch 12): from
    the plan of one stage on dp 12 (33.0 s, meets B), the optimum (brute force's and solve's, test_timeload) is the
    same 12 GPUs as dp 3, 4 stages, v = 2 (29.4 s). The deeper step of round 12 (same b, dp from dp / 2, depths up to
    2 pp = 2) does not reach it; the same GPUs in every deeper interleavable shape do. The plan is of the space,
    priced by the cost model and meets B."""
    problem = _one_type_problem()
    cheapest = solve(problem, Budget(objective="cost"), options=INTERLEAVED)
    budget = Budget(objective="time", max_cost_usd=cheapest.objective_value * 2.5)
    best = solve(problem, budget, options=INTERLEAVED)
    assert (best.plan.dp, best.plan.pp, best.plan.virtual_stages) == (3, 4, 2)
    memo = Memo(problem, INTERLEAVED)
    one_stage = memo.runnable(replace(best.plan, dp=12, virtual_stages=1,
                                      stages=(replace(best.plan.stages[0], num_layers=8),)))
    assert one_stage is not None and not budget_violations(*one_stage, budget)
    start = (objective_value(one_stage[1], "time"), *one_stage)
    assert start[0] > best.objective_value
    bounded, _ = _candidates(memo, budget)
    value, plan, est = _deeper_interleaved(memo, budget, bounded, start, None)
    assert value == best.objective_value and (plan.dp, plan.pp, plan.virtual_stages) == (3, 4, 2)
    assert in_search_space(problem, plan, INTERLEAVED) and est == estimate(problem, plan)
    assert not budget_violations(plan, est, budget) and value == objective_value(est, "time")
    monkeypatch.setattr(solver_module, "DEEPER_RESHAPED", False)  # round 12's step alone: short of the optimum
    assert _deeper_interleaved(memo, budget, bounded, start, None)[0] > best.objective_value
