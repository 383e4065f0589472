"""The reduce-aware splits of a type sequence, minimizing time under --overlap-grad-reduce (solver._reduce_splits,
_reduce_sequences, _reduce_split_plans, REDUCE_SPLITS; issue 14 item 3, round 22, plan530; docs/solver.md "Round 22:
the time rows' quick plans, split by the exposed reduce (plan530, 2026-11-25)"). Incumbents only: every plan they
give is a plan of the space, priced by the cost model (re-estimated here), whose split holds the layers; where the
step is switched off the loop's proven value is the same."""

from __future__ import annotations

import math

import optsearch.solver as solver
from optsearch.costmodel import estimate
from optsearch.search import objective_value
from optsearch.solver import Memo, _candidates, solve
from optsearch.spec.budget import Budget

from test_audit_dist_bounds import off_heavy_instance

SEEDS = (9, 5)  # measured when written: 42 and 8 plans, a reduce split beat its own sequence's split on 23 and 7


def _checked(problem, options) -> tuple[int, int]:
    """(plans checked, sequences where a reduce split beat the sequence's own slowest-stage split)."""
    memo, budget = Memo(problem, options), Budget(objective="time")
    bounded, _ = _candidates(memo, budget)
    checked = better = 0
    for item in bounded[:40]:
        if item.cand.v != 1:
            continue
        sk = memo.skeleton(item.cand)
        names = [u.name for u in sk.cand.uses]
        for plan, est in memo.quick_plans(sk):
            seq = tuple(names.index(st.node_type) for st in plan.stages)
            got = solver._reduce_split_plans(memo, sk, [seq])
            for other, oest in got:
                assert sum(st.num_layers for st in other.stages) == problem.model.num_layers
                again = estimate(problem, other)
                assert again.fits and math.isclose(again.training_time_s, oest.training_time_s, rel_tol=1e-12)
                checked += 1
            own = [o for o, e in got if tuple(names.index(st.node_type) for st in o.stages) == seq]
            least = min((objective_value(e, "time") for o, e in got if o in own), default=math.inf)
            better += least < objective_value(est, "time") * (1 - 1e-9)
    return checked, better


def test_reduce_splits_are_valid_plans():
    checked = better = 0
    for seed in SEEDS:
        c, b = _checked(*off_heavy_instance(seed))
        checked, better = checked + c, better + b
    assert checked > 0 and better > 0


def test_switched_off_the_proven_value_is_the_same(monkeypatch):
    problem, options = off_heavy_instance(9)
    calls, real = [], solver._reduce_split_plans
    monkeypatch.setattr(solver, "_reduce_split_plans", lambda *a, **k: calls.append(1) or real(*a, **k))
    on = solve(problem, Budget(objective="time"), options=options)
    ran = len(calls)
    monkeypatch.setattr(solver, "REDUCE_SPLITS", False)
    off = solve(problem, Budget(objective="time"), options=options)
    assert ran > 0 and len(calls) == ran  # the step ran with the switch on, and not at all with it off
    assert on.status == off.status == "optimal"
    assert math.isclose(on.objective_value, off.objective_value, rel_tol=1e-9)
