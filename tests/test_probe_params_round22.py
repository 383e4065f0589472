"""A model probe's CP-SAT parameters (issue 14, item 3, round 22, probe22; solver.PROBE_PARAMS, solver._probe_engine):
with them a probe must answer what it answers without them. A probe is an interleaved candidate's own model under
the incumbent's cut (solver._model_probe): "infeasible" (no plan of the candidate beats the cut) and "optimal" (its
best plan) close the candidate, anything else leaves it to its positional bound. Parameters only steer CP-SAT, so
on drawn instances (OPTSEARCH_DRAWS) each probe, with the cut just above and just below the candidate's own optimum,
must give the same status and, where "optimal", the same value; and a setting that does change answers (presolve
only: "unknown" where the search was needed) must be seen by the same comparison."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import optsearch.solver as S
from optsearch.formulation.cpsat import CpSat
from optsearch.formulation.model import build
from optsearch.search import objective_value
from optsearch.spec.budget import Budget

from draws import draws
from test_audit_dist_bounds import random_instance

PROBES = 4  # interleaved candidates probed per instance


def _interleaved(seed: int):
    """test_audit_dist_bounds' random instance with interleaving searched (v in {1, 2}), one layer kind or MoE."""
    problem, options = random_instance(seed)
    rng = random.Random(seed)
    options = replace(options, virtual_stages=(1, 2), max_stages=rng.randint(2, 3), micro_batch_sizes=(1, 2))
    return problem, options


def _own_optimum(problem, budget, options, cand) -> float | None:
    """The candidate's own best value under the budget (its model, no cut, the engine's own parameters)."""
    f = build(problem, budget, cand, options)
    sol, found, _ = S._solve_model(problem, CpSat(), f, 20.0, None)
    if sol.status != "optimal" or found is None:
        return None
    return objective_value(found[1], budget.objective)


def probe_answers(problem, options, budget, params: dict) -> list[tuple]:
    """(candidate, cut, status, value) of the probes of up to PROBES interleaved pattern-mode candidates, with the
    cut 1 % above and 1 % below each one's own optimum, S.PROBE_PARAMS set to params for the probes."""
    memo = S.Memo(problem, options)
    items, _ = S._candidates(memo, budget)
    items = [it for it in items if it.cand.v > 1 and memo.skeleton(it.cand).most is not None][:PROBES]
    out = []
    saved = S.PROBE_PARAMS
    try:
        for item in items:
            S.PROBE_PARAMS = saved
            best = _own_optimum(problem, budget, options, item.cand)
            if best is None:
                continue
            for cut in (best * 1.01, best * 0.99):
                S.PROBE_PARAMS = params
                sol, found, _, _ = S._model_probe(problem, CpSat(), budget, options, memo, item, cut, 20.0)
                value = None if found is None else objective_value(found[1], budget.objective)
                out.append((item.cand.key, cut, sol.status, value))
    finally:
        S.PROBE_PARAMS = saved
    return out


def _same(a: list[tuple], b: list[tuple]) -> bool:
    return len(a) == len(b) and all(x[:3] == y[:3] and (x[3] is None) == (y[3] is None)
                                    and (x[3] is None or math.isclose(x[3], y[3], rel_tol=1e-9)) for x, y in zip(a, b))


def _budget(problem, options, seed: int) -> Budget:
    """time, cost, or time under a cost budget at 1-1.5 x the cost row's optimum (solve's own, CP-SAT)."""
    kind = random.Random(seed).choice(["time", "cost", "time<=B"])
    if kind != "time<=B":
        return Budget(objective=kind)
    cheapest = S.solve(problem, Budget(objective="cost"), solver="cpsat", options=options)
    if cheapest.objective_value is None:
        return Budget(objective="time")
    return Budget(objective="time", max_cost_usd=cheapest.objective_value * random.Random(seed).uniform(1.0, 1.5))


@settings(max_examples=draws(6), deadline=None, derandomize=True)
@given(seed=st.integers(0, 10**6))
def test_probe_parameters_give_the_same_answers(seed):
    problem, options = _interleaved(seed)
    budget = _budget(problem, options, seed)
    assert S.PROBE_PARAMS, "the probe's parameters are set"
    new = probe_answers(problem, options, budget, S.PROBE_PARAMS)
    old = probe_answers(problem, options, budget, {})
    assert _same(new, old), (seed, budget, new, old)


def test_probes_answer_both_ways_and_the_engine_carries_the_parameters():
    """Not vacuous: the draws above include probes closed as "optimal" and as "infeasible" (checked on fixed seeds),
    and _probe_engine hands CP-SAT the parameters with the probe's deterministic time."""
    statuses = set()
    for seed in (0, 6, 7):
        problem, options = _interleaved(seed)
        statuses |= {a[2] for a in probe_answers(problem, options, Budget(objective="time"), S.PROBE_PARAMS)}
    assert {"optimal", "infeasible"} <= statuses, statuses
    engine = S._probe_engine(CpSat(5))
    assert engine.seed == 5 and engine.params["max_deterministic_time"] == S.MODEL_PROBE_S
    assert all(engine.params[k] == v for k, v in S.PROBE_PARAMS.items())


@pytest.mark.parametrize("wrong", [{"stop_after_presolve": True}])
def test_a_setting_that_changes_answers_is_caught(wrong):
    """Presolve alone (a cheaper probe that is not the same probe) leaves "unknown" where the search was needed:
    the comparison above sees it on the fixed seeds."""
    caught = False
    for seed in (0, 6, 7):
        problem, options = _interleaved(seed)
        budget = Budget(objective="time")
        if not _same(probe_answers(problem, options, budget, {**S.PROBE_PARAMS, **wrong}),
                     probe_answers(problem, options, budget, S.PROBE_PARAMS)):
            caught = True
            break
    assert caught
