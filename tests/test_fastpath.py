"""The solver's own overheads, cut without changing any answer (fastpath, issue 14 item 3).

cpsat.ticks_per_s keeps the last model's value while the model is unchanged; solver._candidates keeps its lists on
the memo (Memo.candidate_lists) and hands out copies. Both must give exactly what a fresh computation gives, after
every way the solver changes a model (rows added, budget rows replaced, cuts, a variable's bound, the objective) and
for every budget, slower-than time and optimizer setting; and a solve must answer the same with the lists rebuilt."""

from __future__ import annotations

from dataclasses import replace

import pytest

from optsearch import solver as solver_module
from optsearch.cli.options import space_from_target
from optsearch.edits import edited_problem
from optsearch.formulation.cpsat import _ticks_per_s, ticks_per_s
from optsearch.formulation.linear import Lin
from optsearch.formulation.model import add_incumbent_cut, add_slower_than, build
from optsearch.solver import ALL, DEFAULT, OFF, Memo, _build_candidates, _candidates, solve
from optsearch.spec.budget import Budget

from test_distopt_search import OPTIONS, _one_node_problem


@pytest.fixture(scope="module")
def small():
    problem = edited_problem("gpt2-medium", "fasop-a100-a10", [])
    return problem, space_from_target("megatron", problem)


def _a_model(problem, options, budget):
    memo = Memo(problem, options)
    bounded, _ = _candidates(memo, budget)
    item = next(b for b in bounded if b.cand.v == 1 and b.cand.pp >= 2 and memo.skeleton(b.cand).most is not None)
    return build(problem, budget, item.cand, options, skel=memo.skeleton(item.cand))


def _same(lm) -> int:
    got = ticks_per_s(lm)
    assert got == _ticks_per_s(lm) == ticks_per_s(lm)
    return got


def test_ticks_per_s_follows_every_change_to_the_model(small):
    """The kept tick equals a fresh one after each of the solver's changes to a model, and a change that moves the
    tick (a row with a huge right-hand side, appended or put in place of a row; a time variable's bound; an objective
    term) is seen: a cache keyed on the number of rows alone fails here."""
    problem, options = small
    f = _a_model(problem, options, Budget(objective="time", max_cost_usd=1e7))
    lm = f.lm
    base = _same(lm)
    i = next(i for i, con in enumerate(lm.constraints) if con.name == "bud_cost")  # a row replaced in place
    lm.constraints[i] = replace(lm.constraints[i], rhs=lm.constraints[i].rhs * (1 + 1e-5))
    _same(lm)
    add_incumbent_cut(f, 1e6, 1e-6)
    _same(lm)
    add_slower_than(f, 10.0)
    _same(lm)
    lm.add("round_time_1", Lin.of((1.0, "T")), "<=", 1e3, "time")  # a rounding cut (_solve_model)
    _same(lm)
    _same(f.lm)  # asked again, unchanged
    # changes that move the tick
    i = next(i for i, con in enumerate(lm.constraints) if con.unit == "time" and con.sense == ">=")
    before = _same(lm)
    lm.constraints[i] = replace(lm.constraints[i], rhs=1e15)  # same number of rows
    assert _same(lm) < before
    lm.constraints[i] = replace(lm.constraints[i], rhs=0.0)
    assert _same(lm) == before
    lm.add("huge", Lin.of((1.0, "T")), ">=", 1e15, "time")
    assert _same(lm) < before
    lm.constraints.pop()
    assert _same(lm) == before
    t = lm.variables["T"]
    lm.variables["T"] = replace(t, ub=t.ub * 1e6)  # the largest time variable's bound
    assert _same(lm) != before
    lm.variables["T"] = t
    assert _same(lm) == before
    lm.objective = Lin(dict(lm.objective.terms))  # a new objective with the same terms
    assert _same(lm) == before
    lm.objective.add(1e15, "T")  # in place
    assert _same(lm) < before
    # another model in between, then this one again
    other = _a_model(problem, options, Budget(objective="cost"))
    _same(other.lm)
    _same(lm)
    assert base >= 1


BUDGETS = [Budget(objective="time"), Budget(objective="cost"), Budget(objective="time", max_cost_usd=2e4),
           Budget(objective="cost", max_time_s=3e6, max_gpus=16)]


def _rows(bounded):
    return [(b.cand, b.lower_bound, b.level, b.terms, b.own_best, b.tries, b.inflight) for b in bounded]


@pytest.mark.parametrize("settings", [ALL, DEFAULT, OFF])
def test_kept_candidate_lists_equal_fresh_builds(small, settings):
    """Every list _candidates hands out, first or kept, equals a fresh build on a fresh memo candidate by candidate;
    a caller's change to its copy does not reach the next caller."""
    problem, options = small
    memo = Memo(problem, options)
    for budget in BUDGETS:
        for slower in (0.0, 1e5):
            first = _candidates(memo, budget, slower, settings)
            again = _candidates(memo, budget.model_copy(), slower, settings)
            fresh = _build_candidates(Memo(problem, options), budget, slower, settings)
            assert first[1] == again[1] == fresh[1]
            assert _rows(first[0]) == _rows(again[0])
            assert [(b.cand, b.lower_bound, b.level) for b in again[0]] == \
                [(b.cand, b.lower_bound, b.level) for b in fresh[0]]
            again[0].clear()
            assert _rows(_candidates(memo, budget, slower, settings)[0]) == _rows(first[0])
    assert len(memo.candidate_lists) == solver_module.CANDIDATE_LISTS_KEPT


def test_a_budget_search_builds_each_list_once_and_answers_the_same(monkeypatch):
    """Minimizing time under a cost budget on the one-node instance (cp and v options: the early seeds, the seed
    search's part and whole space, the main search): no memo builds the same list twice, and the answer, bound and
    plan equal those with every list rebuilt (CANDIDATE_LISTS_KEPT = 0)."""
    problem, options = _one_node_problem(), replace(OPTIONS, virtual_stages=(1, 2))
    cheapest = solve(problem, Budget(objective="cost"), options=options)
    budget = Budget(objective="time", max_cost_usd=cheapest.objective_value * 1.5)
    built: list[tuple[int, tuple]] = []
    real = solver_module._build_candidates

    def counted(memo, b, slower, settings=ALL, *deadline):
        built.append((id(memo), (tuple(sorted(b.model_dump().items())), slower, settings)))
        return real(memo, b, slower, settings, *deadline)

    monkeypatch.setattr(solver_module, "_build_candidates", counted)
    kept = solve(problem, budget, options=options)
    assert built and len(built) == len(set(built))
    monkeypatch.setattr(solver_module, "CANDIDATE_LISTS_KEPT", 0)
    rebuilt = solve(problem, budget, options=options)
    assert (kept.status, kept.objective_value, kept.bound, kept.plan) == \
        (rebuilt.status, rebuilt.objective_value, rebuilt.bound, rebuilt.plan)
    assert kept.status == "optimal"
