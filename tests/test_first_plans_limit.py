"""First plans and the time limit (issue 14, item 3, round 13: firstplan). A clock that jumps (the solver's
time.perf_counter plus an offset that the test moves) forces, on small instances, what happens on the large models
at 10 s on a slow machine:
- the early seeds' list taking longer than their share (GPT-3 175B, mixed-pool-8k, cost: 0.49 s of CPU for a share
  of 0.45 s): their seeds are priced all the same, their share counted from when the list is built
  (EARLY_SEEDS_AFTER_LIST);
- the limit ending before the distributed-optimizer-off candidates join (LAZY_OFF; Megatron 1T, time under B: their
  list took 1.0-1.2 s of CPU past the limit): their list is not built past it, and the plan known is reported,
  "feasible", without a bound (none was proven for the off candidates) (OFF_NOT_PAST_LIMIT)."""

from __future__ import annotations

import time as real_time

import pytest

from optsearch import solver as solver_module
from optsearch.candidates import SpaceOptions
from optsearch.costmodel import estimate
from optsearch.search import budget_violations, objective_value
from optsearch.solver import Memo, _part_seeds, solve
from optsearch.spec.budget import Budget

from test_distopt_search import OPTIONS, _one_node_problem
from test_solver import _fasop_like


class _JumpingClock:
    """The solver module's `time`, with perf_counter ahead of the real one by `offset` seconds (moved by the test)."""

    def __init__(self):
        self.offset = 0.0

    def perf_counter(self) -> float:
        return real_time.perf_counter() + self.offset

    def __getattr__(self, name):
        return getattr(real_time, name)


def test_the_early_seeds_are_priced_when_their_list_outlasts_their_share(monkeypatch):
    """Each candidate list takes 1,000 s on the solver's clock; the early seeds' share is 5 % of 10 s. Their list's
    seeds are still priced and give the first plan, one of the space's own, priced and within the budget. With the
    share counted from their start (the base), the list ate it and no seed was priced (None)."""
    problem, options = _fasop_like(), SpaceOptions(max_stages=4, virtual_stages=(1, 2))  # with a cp = 1, v = 1 part
    clock = _JumpingClock()
    monkeypatch.setattr(solver_module, "time", clock)
    build = solver_module._build_candidates

    def slow(*args, **kwargs):
        clock.offset += 1000.0
        return build(*args, **kwargs)

    monkeypatch.setattr(solver_module, "_build_candidates", slow)
    budget = Budget(objective="cost")
    got = _part_seeds(problem, budget, "cpsat", 10.0, options, Memo(problem, options))
    assert got is not None
    value, plan, est, _ = got
    assert plan.cp == 1 and plan.virtual_stages == 1 and not budget_violations(plan, est, budget)
    assert value == objective_value(estimate(problem, plan), "cost")
    monkeypatch.setattr(solver_module, "EARLY_SEEDS_AFTER_LIST", False)  # the base's share: nothing priced
    assert _part_seeds(problem, budget, "cpsat", 10.0, options, Memo(problem, options)) is None


@pytest.mark.parametrize("objective", ["time", "cost"])
def test_a_plan_known_when_the_limit_ends_before_the_off_candidates_is_reported_without_a_bound(objective,
                                                                                                monkeypatch):
    """The one-node instance (the optimizer off 5 % faster, so the off candidates matter): the clock jumps past the
    limit at the first seed's quick plans. The off candidates' list is not built (_with_off never called), and the
    seed's plan comes back "feasible", re-priced equal to its value, with no bound and no gap (the off candidates,
    never bounded, may hold a better plan: here, minimizing time, they do). Before (the base), the off list was built
    past the limit and a bound reported."""
    problem = _one_node_problem()
    clock = _JumpingClock()
    monkeypatch.setattr(solver_module, "time", clock)
    quick = Memo.quick_plans

    def late(self, sk):
        plans = quick(self, sk)
        if plans:
            clock.offset += 1e6  # past any limit, once a seed has plans
        return plans

    joined = []
    with_off = solver_module._with_off

    def recorded(*args):
        joined.append(True)
        return with_off(*args)

    monkeypatch.setattr(Memo, "quick_plans", late)
    monkeypatch.setattr(solver_module, "_with_off", recorded)
    budget = Budget(objective=objective)
    got = solve(problem, budget, options=OPTIONS, time_limit_s=100.0)
    assert joined == []
    assert got.status == "feasible" and got.plan is not None
    assert got.bound is None and got.gap is None and "no bound" in got.message
    assert got.objective_value == objective_value(estimate(problem, got.plan), objective)
    assert got.plan.distributed_optimizer is not False  # an on plan: the off ones never joined
    monkeypatch.setattr(solver_module, "OFF_NOT_PAST_LIMIT", False)  # the base: the off list built past the limit
    joined.clear()
    got = solve(problem, budget, options=OPTIONS, time_limit_s=100.0)
    assert joined == [True] and got.bound is not None
