"""Post-merge audit of round 14 (audit6; bench/audit_round14.py runs the sweeps over many seeds):
- SEED_RECHECK_LAST (firstplans): a first-plan-only search that stops at a plan while a backend's "infeasible"
  claim is still waiting for its re-check reports a bound from the queue's front alone, which the unchecked
  candidate's plans may lie below (the defect this audit found; fixed at 5deaeb4: open claims' bounds count);
- _SOLVE_DEADLINE (overrun): the outermost solve with a limit sets it for the solves inside it (the seed searches),
  and it is unset after the solve, after a solve that raised, between the solves of a what-if sweep, and in a thread
  started inside a solve."""

from __future__ import annotations

import threading

import pytest

from optsearch import solver as solver_module
from optsearch.candidates import SpaceOptions
from optsearch.solver import solve
from optsearch.spec.budget import Budget

from test_first_plans_before_lists import _models_only as _claims_first
from test_solver import _fasop_like


def test_a_first_plan_only_bound_counts_the_claims_not_yet_rechecked(monkeypatch):
    """FASOP-like instance, cost, no limit, the off candidates in the loop at once (OFF_WAIT_S 0, as
    test_audit_round10's path 'in the loop at once'): the optimum ($1.48) is the first candidate's, whose model CP-SAT
    claims "infeasible"; the next model gives a $1.56 plan and the first-plan-only search stops there. Its bound
    must stay at or below the optimum: the claimed candidate is open (its claim unchecked), its lower bound still
    counts. Before 5deaeb4 the bound was the plan's own value, $1.56, above the optimum (reported "feasible" with a
    zero gap). On the base (415b713) the claim was re-checked at once: the plan was the optimum and the bound valid."""
    problem, options = _fasop_like(), SpaceOptions(max_stages=2, micro_batch_sizes=(1, 2))
    best = solve(problem, Budget(objective="cost"), options=options)
    assert best.status == "optimal"
    monkeypatch.setattr(solver_module, "OFF_WAIT_S", 0.0)
    log = _claims_first(monkeypatch, claim_first=1)
    got = solve(problem, Budget(objective="cost"), options=options, first_plan_only=True)
    assert got.status == "feasible" and got.plan is not None
    assert got.message.startswith("stopped at its first plan"), got.message  # no limit was set
    # (before 5deaeb4: log == [cpsat, cpsat], the claim left unchecked, and the plan $1.56; on the base: [cpsat,
    # cbc], the re-check's plan the optimum)
    assert log and log[0][0] == "cpsat"
    assert got.bound is None or got.bound <= best.objective_value * (1 + 1e-9), (got.bound, best.objective_value)


def _deadlines_read(monkeypatch) -> list:
    """Every _candidates call's deadline argument (what _SOLVE_DEADLINE gave it), as (memo options' cp sizes,
    the deadline)."""
    seen: list = []
    candidates = solver_module._candidates

    def logged(memo, budget, slower_than_s=0.0, settings=solver_module.ALL, deadline=None):
        seen.append(deadline)
        return candidates(memo, budget, slower_than_s, settings, deadline)

    monkeypatch.setattr(solver_module, "_candidates", logged)
    return seen


def test_the_outermost_limit_reaches_the_inner_searches_and_is_unset_after(monkeypatch):
    """Time under a cost budget with a limit (a seed search's first-plan-only solves and the descent inside):
    every list of theirs reads the outer solve's one deadline; after the solve the variable is unset, and a solve
    without a limit then reads none."""
    problem, options = _fasop_like(), SpaceOptions(max_stages=2, micro_batch_sizes=(1, 2))
    cheapest = solve(problem, Budget(objective="cost"), options=options)
    seen = _deadlines_read(monkeypatch)
    budget = Budget(objective="time", max_cost_usd=cheapest.objective_value * 1.5)
    before = solver_module.time.perf_counter()
    got = solve(problem, budget, options=options, time_limit_s=30.0)
    after = solver_module.time.perf_counter()
    assert got.plan is not None
    # the seed search's lists and solve's own read the one outer deadline (the off list, solve's own deadline,
    # taken microseconds later)
    assert len(seen) >= 2 and None not in seen and max(seen) - min(seen) < 0.01, seen
    assert seen.count(seen[0]) >= 2
    assert before + 30.0 <= seen[0] <= after + 30.0
    assert solver_module._SOLVE_DEADLINE.get() is None
    seen.clear()
    solve(problem, budget, options=options)
    assert seen and all(deadline is None for deadline in seen)


def test_a_solve_that_raises_leaves_no_deadline(monkeypatch):
    problem, options = _fasop_like(), SpaceOptions(max_stages=1, micro_batch_sizes=(1,))

    def broken(*args, **kwargs):
        assert solver_module._SOLVE_DEADLINE.get() is not None
        raise RuntimeError("broken list")

    monkeypatch.setattr(solver_module, "_build_candidates", broken)
    with pytest.raises(RuntimeError, match="broken list"):
        solve(problem, Budget(objective="cost"), options=options, time_limit_s=30.0)
    assert solver_module._SOLVE_DEADLINE.get() is None


def test_a_thread_started_inside_a_solve_sees_no_deadline(monkeypatch):
    """A thread's context starts empty: a solve run in a thread that a solve with a limit started is not cut by
    the outer limit (its own lists read no deadline)."""
    problem, options = _fasop_like(), SpaceOptions(max_stages=1, micro_batch_sizes=(1,))
    inside: list = []
    candidates = solver_module._candidates

    def spying(memo, budget, slower_than_s=0.0, settings=solver_module.ALL, deadline=None):
        if not inside:
            def read():
                inside.append(solver_module._SOLVE_DEADLINE.get())
            thread = threading.Thread(target=read)
            thread.start()
            thread.join()
            inside.append(deadline)
        return candidates(memo, budget, slower_than_s, settings, deadline)

    monkeypatch.setattr(solver_module, "_candidates", spying)
    solve(problem, Budget(objective="cost"), options=options, time_limit_s=30.0)
    assert inside[0] is None and inside[1] is not None


def test_a_sweeps_solves_each_read_their_own_deadline(monkeypatch):
    """A what-if sweep with a limit: each point's solve sets its own deadline (later points later), none left
    set between them or after."""
    from optsearch.whatif import Sweep, sweep

    problem, options = _fasop_like(), SpaceOptions(max_stages=1, micro_batch_sizes=(1, 2))
    points: list = []
    original = solver_module._SOLVE_DEADLINE

    class Recording:
        def get(self):
            return original.get()

        def set(self, value):
            assert original.get() is None, "set while another solve's deadline stands"
            points.append(value)
            return original.set(value)

        def reset(self, token):
            original.reset(token)

    monkeypatch.setattr(solver_module, "_SOLVE_DEADLINE", Recording())
    cheapest = solve(problem, Budget(objective="cost"), options=options)
    values = [cheapest.estimate.training_time_s * f for f in (1.0, 1.5, 3.0)]
    got = sweep(problem, Budget(objective="cost"), Sweep(limit="max_time_s", values=values), options=options,
                time_limit_s=30.0)
    assert len(got) == 3 and len(points) >= 2 and points == sorted(points)
    assert original.get() is None


def test_the_degree_floors_follow_the_composition_limit(monkeypatch):
    """FASOP-like instance, time under a cost budget, one degree's pp 2-4 asked twice. With MAX_COMPOSITIONS 0 (as
    the tests of the aggregate bound set it) every pp is aggregate: the memo's refined bound equals
    candidate_bound's. Before 1b4e138 (the cache key without the limit), after degree_floors filled
    bounds._DEGREE_ROWS at the default limit (any earlier test in the process), the degree's second ask took the
    listed compositions instead (a valid bound, but not the path those tests mean to check: 2 of the 6 asks
    differed). On the base (no degree floors) it holds."""
    from dataclasses import replace

    from optsearch import bounds
    from optsearch.bounds import candidate_bound
    from optsearch.candidates import max_stages
    from optsearch.solver import Memo, _candidates

    problem, options = _fasop_like(), SpaceOptions(max_stages=4, micro_batch_sizes=(1, 2))
    listed, _ = _candidates(Memo(problem, options), Budget(objective="cost"))
    item = next(b for b in listed if b.cand.pp >= 2 and len(b.cand.uses) == 2
                and candidate_bound(problem, b.terms, b.cand.pp, None, refined=True).feasible)
    if hasattr(bounds, "degree_floors"):  # (not on the base)
        bounds.degree_floors(problem, item.terms, max_stages(problem, options))  # filled at the default limit
    monkeypatch.setattr(bounds, "MAX_COMPOSITIONS", 0)
    budget = Budget(objective="time", max_cost_usd=1e9)
    memo = Memo(problem, options)
    for pp in (2, 3, 4, 2, 3, 4):
        got = memo.refined_bound(item.terms, replace(item.cand, pp=pp), budget)
        assert got == candidate_bound(problem, item.terms, pp, budget, refined=True), pp
