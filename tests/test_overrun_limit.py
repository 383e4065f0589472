"""--time-limit and the steps that ran past it (issue 14, item 3, round 14: overrun).

Megatron 1T on mixed-pool-8k, cost and cost under D, --time-limit 10, ran 11.3-11.7 s of wall time now and then: after
a candidate's positional bound the loop priced its best sequence's 64 moved sequences (_moved_plans; 30-60 ms each
at 64-128 stages, 2-4 s in all) without looking at the clock. A clock that jumps (the solver's time.perf_counter
plus an offset the test moves, as in test_first_plans_limit.py) forces, on small instances, the limit ending inside
each step that now looks at it:
- the moved sequences: no move is priced past the limit;
- the distributed-optimizer-off candidates' list (_with_off; 2.1 s on Megatron 1T): it stops at its next
  (tp, b, cp, dp), nothing of it is kept, and the plan known is reported without a bound, as where the limit ends
  before that list is started (OFF_NOT_PAST_LIMIT);
- a candidate's least time before its model (the positional bound with time as the objective): past the limit no
  model is built nor solved, and the candidate stays open with its bound.
Each answer is checked honest: "feasible" (never "optimal"), its plan re-priced equal to its value, its bound (where
one is given) below that value."""

from __future__ import annotations

import time as real_time

import pytest

from optsearch import solver as solver_module
from optsearch.costmodel import estimate
from optsearch.search import budget_violations, objective_value
from optsearch.solver import Memo, solve
from optsearch.spec.budget import Budget

from test_distopt_search import OPTIONS, _one_node_problem
from test_first_plans_limit import _JumpingClock
from tests.test_audit_dist_bounds import random_instance


def _jumping(monkeypatch) -> _JumpingClock:
    """One jumping clock for the solver and the bounds that read the deadline (positional.py, kinds.py)."""
    from optsearch.formulation import kinds, positional

    clock = _JumpingClock()
    for module in (solver_module, positional, kinds):
        monkeypatch.setattr(module, "time", clock)
    return clock


def _honest(problem, budget: Budget, got) -> None:
    assert got.status == "feasible" and got.plan is not None
    assert not budget_violations(got.plan, got.estimate, budget)
    assert got.objective_value == objective_value(estimate(problem, got.plan), budget.objective)
    assert got.bound is None or got.bound <= got.objective_value


def test_no_moved_sequence_is_priced_past_the_limit(monkeypatch):
    """Seed 22 of the random instances (test_sequence_moves): the first candidate whose best positional sequence has
    two or more moved sequences. The clock jumps past the deadline as the first move's plan is built: that plan is
    returned and no other move is priced. On the base _moved_plans took no deadline and priced every move."""
    from optsearch.formulation.positional import positional_bound

    problem, options = random_instance(22)
    memo = Memo(problem, options)
    budget = Budget(objective="cost")
    for item in solver_module._candidates(memo, budget)[0]:
        sk = memo.skeleton(item.cand)
        if item.cand.v == 1 and sk.most is not None:
            seqs = positional_bound(sk, budget).sequences
            if seqs and len(solver_module._moved_sequences(seqs[0])) >= 2:
                break
    else:
        pytest.fail("no sequence with two moves: pick another instance")
    clock = _jumping(monkeypatch)
    plan_of = Memo.plan_of
    built = []

    def jumping(self, sk, seq):
        built.append(seq)
        clock.offset = 1e6  # past the deadline once this plan is built
        return plan_of(self, sk, seq)

    monkeypatch.setattr(Memo, "plan_of", jumping)
    got = solver_module._moved_plans(memo, sk, seqs[0], real_time.perf_counter() + 100.0)
    assert built == solver_module._moved_sequences(seqs[0])[:1] and len(got) <= 1
    built.clear()
    clock.offset = 0.0
    solver_module._moved_plans(memo, Memo(problem, options).skeleton(sk.cand), seqs[0])
    assert built == solver_module._moved_sequences(seqs[0])  # without a deadline: every move


def test_the_off_list_stops_at_the_limit_and_the_plan_has_no_bound(monkeypatch):
    """The one-node instance (the optimizer off 5 % faster: the off candidates matter), minimizing time: the clock
    jumps past the limit at the off list's first (tp, b, cp, dp). The list stops there (no further degree's terms),
    is not kept on the memo, and the plan comes back "feasible" without a bound, as when the limit ends before the
    list is started. On the base the whole list was built past the limit, and a bound reported."""
    problem = _one_node_problem()
    clock = _jumping(monkeypatch)
    build = solver_module._build_candidates
    degrees = {"off": 0}

    in_off = [False]
    terms = Memo.degree_terms

    def counted(self, *args, **kwargs):
        degrees["off"] += in_off[0]
        return terms(self, *args, **kwargs)

    def jumping(memo, budget, slower_than_s, settings=solver_module.ALL, *rest):
        if settings == solver_module.OFF:
            clock.offset = 1e6  # the limit ends as the off list starts (the check before it passed)
            in_off[0] = True
            try:
                return build(memo, budget, slower_than_s, settings, *rest)
            finally:
                in_off[0] = False
        return build(memo, budget, slower_than_s, settings, *rest)

    monkeypatch.setattr(Memo, "degree_terms", counted)
    monkeypatch.setattr(solver_module, "_build_candidates", jumping)
    memo = Memo(problem, OPTIONS)
    budget = Budget(objective="time")
    got = solve(problem, budget, options=OPTIONS, time_limit_s=100.0, memo=memo)
    assert degrees["off"] == 0  # not one degree's terms past the limit
    assert all(key[2] != solver_module.OFF for key in memo.candidate_lists)  # nothing kept of the cut list
    _honest(problem, budget, got)
    assert got.bound is None and got.gap is None and "no bound" in got.message


def test_no_model_is_built_past_the_limit(monkeypatch):
    """Seed 0 of the random instances, minimizing cost: the clock jumps past the limit as the first candidate's least time is
    bounded before its model (the positional bound with time as the objective raises OutOfTime at once). No model
    is built or solved after it; the candidate stays open and bounds the answer. On the base the model was built
    and handed to the backend with no time left."""
    problem, options = random_instance(0)
    clock = _jumping(monkeypatch)
    positional = solver_module.positional_bound
    models = []

    def jumping(sk, budget, **kwargs):
        if budget.objective == "time" and not clock.offset:  # the least time before a cost model
            clock.offset = 1e6
        return positional(sk, budget, **kwargs)

    def counted(*args, **kwargs):
        models.append(clock.offset > 0)
        return build(*args, **kwargs)

    build = solver_module.build
    monkeypatch.setattr(solver_module, "positional_bound", jumping)
    monkeypatch.setattr(solver_module, "build", counted)
    budget = Budget(objective="cost")
    got = solve(problem, budget, options=options, time_limit_s=100.0)
    assert clock.offset, "no model was reached: the instance needs another start"
    assert True not in models
    if got.plan is not None:
        _honest(problem, budget, got)
        assert got.bound is not None
    else:
        assert got.status == "timeout"


@pytest.mark.parametrize("at", [1, 3, 6, 10, 16, 25])
def test_past_the_limit_at_any_plan_at_most_one_more_is_built(at, monkeypatch):
    """A guard (it passes on the base too: on these small instances no step priced two plans between clock reads;
    on Megatron 1T the moves priced 64). The audit of every step that prices plans (seeds, descent, climbs, the refined step's sequences, moves and
    quick plans, the in-flight step's sibling plans): on seed 39 (cost) and the one-node instance (time), the clock
    jumps past the limit as the at-th new plan list is built (a candidate's quick plans or one sequence's plan);
    after it at most one more is built before solve returns, and the answer is honest."""
    checked = 0
    for problem, options, objective in ((*random_instance(39), "cost"), (_one_node_problem(), OPTIONS, "time")):
        clock = _JumpingClock()
        monkeypatch.setattr(solver_module, "time", clock)
        count = {"n": 0, "after": 0}
        plan_of, quick = Memo.plan_of, Memo.quick_plans

        def note(new: bool) -> None:
            if not new:
                return
            if clock.offset:
                count["after"] += 1
            count["n"] += 1
            if count["n"] == at:
                clock.offset = 1e6

        def counted_plan_of(self, sk, seq):
            new = (sk.cand.key, seq) not in self.sequences
            got = plan_of(self, sk, seq)
            note(new)
            return got

        def counted_quick(self, sk):
            new = sk.cand.key not in self.quick
            got = quick(self, sk)
            note(new)
            return got

        monkeypatch.setattr(Memo, "plan_of", counted_plan_of)
        monkeypatch.setattr(Memo, "quick_plans", counted_quick)
        budget = Budget(objective=objective)
        got = solve(problem, budget, options=options, time_limit_s=100.0)
        monkeypatch.setattr(Memo, "plan_of", plan_of)
        monkeypatch.setattr(Memo, "quick_plans", quick)
        if count["n"] < at:  # the search ended before: nothing to check at this point
            continue
        assert count["after"] <= 1, (objective, count)
        checked += 1
        if got.plan is not None:
            if got.status == "optimal":  # proven before the jump took effect: the bound reached the incumbent
                assert got.objective_value == objective_value(estimate(problem, got.plan), objective)
            else:
                _honest(problem, budget, got)
        else:
            assert got.status == "timeout"
    assert checked > 0


def test_a_resumed_climb_records_its_end_under_the_cut_climbs_whole_path(monkeypatch):
    """Time under B = 2.5 x the cheapest cost on one GPU type (test_budgetgap's instance): a plain climb from the
    cost objective's plan, cut by NEIGHBOUR_EVALS after it moved at least once, records a ClimbCut under every plan
    of its path. A second climb from the plan where it stood resumes that record and runs to its end: that end is
    now the record of the start too, and a third climb from the start returns it at once, the end a climb alone
    reaches. On the base the start kept the stale cut, and the third climb priced again what the second had."""
    from test_timeload import INTERLEAVED, _climb_start

    from optsearch.solver import ClimbCut, _candidates, _climb

    problem, budget, start = _climb_start()
    fresh = Memo(problem, INTERLEAVED)
    alone = _climb(fresh, budget, _candidates(fresh, budget)[0], start, None, False)
    for cut_at in range(1, 12):
        memo = Memo(problem, INTERLEAVED)
        bounded, _ = _candidates(memo, budget)
        ends: dict = {}
        monkeypatch.setattr(solver_module, "NEIGHBOUR_EVALS", cut_at)
        cut = _climb(memo, budget, bounded, start, None, False, ends=ends)
        monkeypatch.setattr(solver_module, "NEIGHBOUR_EVALS", 1000)
        if isinstance(ends.get((False, start[1])), ClimbCut) and cut[1] != start[1]:
            break  # cut after a move: the start and the plan it stood on share the record
    else:
        pytest.fail("no climb was cut after a move: pick another instance")
    second = _climb(memo, budget, bounded, cut, None, False, ends=ends)
    assert second == alone
    assert ends[(False, start[1])] == alone  # the start's record is the end, no longer the cut
    asked = []
    quick = Memo.quick_plans
    monkeypatch.setattr(Memo, "quick_plans", lambda self, sk: asked.append(sk.cand.key) or quick(self, sk))
    assert _climb(memo, budget, bounded, start, None, False, ends=ends) == alone and asked == []


@pytest.mark.parametrize("objective", ["cost", "time"])
def test_the_candidate_list_stops_at_the_limit_and_no_bound_is_reported(objective, monkeypatch):
    """FASOP's cluster with a cp = 1, v = 1 part (test_first_plans_limit's space): the clock jumps past the limit
    as solve's own list (its memo, the default optimizer setting) starts. The list stops at its first (tp, b, cp,
    dp): no degree's terms past the limit, nothing kept on the memo, and the early seeds' plan comes back
    "feasible" without a bound, re-priced equal to its value (without one, "timeout"). On the base the whole list was
    built past the limit (1.5-7.7 s on Megatron 1T, mixed-pool-8k)."""
    from test_solver import _fasop_like

    problem, options = _fasop_like(), solver_module.SpaceOptions(max_stages=4, virtual_stages=(1, 2))
    memo = Memo(problem, options)
    clock = _jumping(monkeypatch)
    build = solver_module._build_candidates
    degrees = {"past": 0}
    terms = Memo.degree_terms

    def counted(self, *args, **kwargs):
        degrees["past"] += self is memo and clock.offset > 0
        return terms(self, *args, **kwargs)

    def jumping(on, budget, slower_than_s, settings=solver_module.ALL, *rest):
        if on is memo and settings == solver_module.DEFAULT and budget.objective == objective:
            clock.offset = 1e6  # the limit ends as solve's own list starts
        return build(on, budget, slower_than_s, settings, *rest)

    monkeypatch.setattr(Memo, "degree_terms", counted)
    monkeypatch.setattr(solver_module, "_build_candidates", jumping)
    budget = Budget(objective=objective)
    got = solve(problem, budget, options=options, time_limit_s=100.0, memo=memo)
    assert clock.offset, "solve's own list was not built: the instance needs another start"
    assert degrees["past"] == 0
    assert not any(key[2] == solver_module.DEFAULT and key[0] == tuple(sorted(budget.model_dump().items()))
                   for key in memo.candidate_lists)
    if got.plan is not None:
        _honest(problem, budget, got)
        assert got.bound is None and got.gap is None and "no bound" in got.message
    else:
        assert got.status == "timeout"


def test_a_climb_started_past_its_deadline_does_no_work(monkeypatch):
    """test_budgetgap's instance, time under B: a plain and a wide climb, and the deeper step, each called with its
    deadline passed, return their start at once: no neighbour key set (a dict over the whole list: 0.1-0.2 s per
    climb on the large pools, where a budget search's several climbs each built it past the limit), no _rescaled
    variant. With a finished climb's end recorded for the start, that end (a dictionary read). On the base each
    built its keys and tried the start's _rescaled variants first."""
    from test_timeload import INTERLEAVED, _climb_start

    from optsearch.solver import _candidates, _climb, _deeper_interleaved

    problem, budget, start = _climb_start()
    memo = Memo(problem, INTERLEAVED)
    bounded, _ = _candidates(memo, budget)
    work = []
    rescaled, least = solver_module._rescaled, solver_module._least_over_v
    monkeypatch.setattr(solver_module, "_rescaled", lambda *a: work.append("rescaled") or rescaled(*a))
    monkeypatch.setattr(solver_module, "_least_over_v", lambda *a: work.append("least") or least(*a))
    past = real_time.perf_counter() - 1.0
    for wide in (False, True):
        assert _climb(memo, budget, bounded, start, past, wide, ends={}) == start
    assert _deeper_interleaved(memo, budget, bounded, start, past) == start
    assert work == []
    ends: dict = {}
    end = _climb(memo, budget, bounded, start, None, False, ends=ends)  # a climb to its end, recorded
    assert _climb(memo, budget, bounded, start, past, False, ends=ends) == end
