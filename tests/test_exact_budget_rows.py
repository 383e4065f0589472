"""CP-SAT's allowance on the budget rows lives in its translation only (issue 14, item 2, round 11).

CP-SAT rounds every time coefficient to its tick, so its budget rows get an allowance (solver._budget_allowance) that
keeps a plan exactly at the budget a point of its integer model. Until round 10 the allowance was written into the
shared model (the rows became bud_time_cpsat / bud_cost_cpsat, raised), and CBC's re-check of a CP-SAT "infeasible"
solved the raised rows (tests/test_recheck_rows.py). Now CpSat.solve adds it to its own copy of the rows: the shared
model keeps the rows add_budgets built, whatever CP-SAT did with it, and a re-check solves them without the first
backend's rounding cuts."""

from __future__ import annotations

import pytest

from optsearch.candidates import SpaceOptions
from optsearch.formulation.cpsat import CpSat
from optsearch.formulation.linear import Lin, LinearModel
from optsearch.formulation.milp import PulpCbc
from optsearch.formulation.model import PRICE_SCALE, build
from optsearch.search import BUDGET_REL
from optsearch.solver import Memo, _budget_allowance, _candidates, _solve_model, solve
from optsearch.spec.budget import Budget
from optsearch.units import SECONDS_PER_HOUR

from test_recheck_rows import CASES
from test_solver import make_problem


def _toy() -> LinearModel:
    """T >= 1.0005 s and a budget row T <= 1 s: no point, unless the budget row is raised by more than 5e-4 s."""
    lm = LinearModel()
    lm.var("x", "int", 0, 3)
    lm.var("T", "time", 0, 10.0)
    lm.add("floor", Lin.of((1.0, "T"), (-0.25, "x")), ">=", 1.0005, "time")
    lm.add("bud_time", Lin.of((1.0, "T")), "<=", 1.0, "time")
    lm.objective = Lin.of((1.0, "T"))
    return lm


def _rows(lm: LinearModel) -> list[tuple[str, str, float]]:
    return [(con.name, con.sense, con.rhs) for con in lm.constraints]


def test_the_allowance_is_in_cpsats_translation_and_not_in_the_model():
    lm = _toy()
    before = _rows(lm)
    assert CpSat().solve(lm, 10).status == "infeasible"
    got = CpSat().solve(lm, 10, allowance={"bud_time": 1e-3})
    assert got.status == "optimal" and got.values["x"] == 0
    assert abs(got.values["T"] - 1.0005) < 1e-6
    assert _rows(lm) == before  # the model is as built
    # the point meets the rows CP-SAT solved, and breaks the exact row
    assert lm.violations(got.values, allowance={"bud_time": 1e-3}) == []
    assert [v.split(" ")[0] for v in lm.violations(got.values)] == ["bud_time"]
    # an allowance raises "<=" rows only, and only the named ones
    assert CpSat().solve(lm, 10, allowance={"floor": 1.0, "other": 1.0}).status == "infeasible"


def _small():
    gpus, nodes, virtual = CASES["cbc-over-the-allowance"]
    problem = make_problem(layers=8, hidden=512, heads=2, gbs=6, node_types=nodes, gpus=gpus)
    return problem, SpaceOptions(micro_batch_sizes=(1,), max_stages=2, virtual_stages=virtual)


def _exact_rhs(f) -> dict[str, float]:
    """The budget rows' right-hand sides as add_budgets builds them."""
    b, it = f.budget, f.c.iterations
    out = {}
    if b.max_time_s is not None:
        out["bud_time"] = b.max_time_s * (1 + BUDGET_REL) / it
    if b.max_cost_usd is not None:
        out["bud_cost"] = b.max_cost_usd * (1 + BUDGET_REL) * SECONDS_PER_HOUR * PRICE_SCALE / it
    return out


@pytest.mark.parametrize("scale", [1.0, 0.99999])
def test_the_shared_models_budget_rows_are_unchanged_by_a_cpsat_solve(scale):
    """Each candidate's model, solved by CP-SAT under a cost budget and a deadline at the cheapest plan's values
    (scale 1: plans sit exactly at the budget; 0.99999: none meets it, the case the re-check met): afterwards the
    model's budget rows are the ones add_budgets built, by name and right-hand side, and a model handed back with no
    plan holds no rounding cut. On main before round 11 the rows came back renamed bud_*_cpsat and raised."""
    problem, options = _small()
    cheapest = solve(problem, Budget(objective="cost"), options=options)
    assert cheapest.status == "optimal"
    est = cheapest.estimate
    budget = Budget(objective="time", max_cost_usd=est.cost_usd * scale, max_time_s=est.training_time_s * 1.5)
    memo = Memo(problem, options)
    bounded, _ = _candidates(memo, budget)
    assert bounded
    allowed = 0
    for item in bounded[:6]:
        f = build(problem, budget, item.cand, options, skel=memo.skeleton(item.cand))
        before = _rows(f.lm)
        exact = _exact_rhs(f)
        assert {name: rhs for name, _, rhs in before if name.startswith("bud_")} == pytest.approx(exact, rel=1e-12)
        allowance = _budget_allowance(problem, f)
        assert set(allowance) == {"bud_time", "bud_cost"} and min(allowance.values()) > 0
        allowed += 1
        sol, found, _ = _solve_model(problem, CpSat(), f, 20, None)
        after = _rows(f.lm)
        assert after[:len(before)] == before, "the model's rows changed"
        assert not any(name.endswith("_cpsat") for name, _, _ in after)
        if found is None:
            assert after == before, f"{sol.status}: rounding cuts left in the model"
        else:
            assert all(name.startswith("round_") for name, _, _ in after[len(before):])
    assert allowed


def test_the_recheck_solves_the_rows_as_built(monkeypatch):
    """CP-SAT's "infeasible" before any plan (the cost budget just below the cheapest plan's cost) is re-checked by
    CBC on the model as add_budgets built it: exact budget rows, no CP-SAT cut."""
    problem, options = _small()
    cheapest = solve(problem, Budget(objective="cost"), options=options)
    budget = Budget(objective="time", max_cost_usd=cheapest.estimate.cost_usd * 0.99999)
    seen: list[list[tuple[str, str, float]]] = []
    cbc_solve = PulpCbc.solve

    def recorded(self, model, limit, hint=None):
        seen.append(_rows(model))
        return cbc_solve(self, model, limit, hint)

    monkeypatch.setattr(PulpCbc, "solve", recorded)
    got = solve(problem, budget, solver="cpsat", options=options)
    assert got.status == "infeasible"
    assert got.stats.get("infeasible_claims_rechecked", 0) >= 1 and seen
    want = cheapest.estimate.cost_usd * 0.99999 * (1 + BUDGET_REL) * SECONDS_PER_HOUR * PRICE_SCALE
    for rows in seen:
        assert not any(name.startswith("round_") or name.endswith("_cpsat") for name, _, _ in rows)
        cost_rows = [rhs for name, _, rhs in rows if name == "bud_cost"]
        assert len(cost_rows) == 1
        assert cost_rows[0] * problem.iterations == pytest.approx(want, rel=1e-12)
