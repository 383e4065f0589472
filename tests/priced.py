"""Brute force with its priced plans shared between the calls on one instance (the test suite's time, round 17).

A property test draws an instance, asks brute force for a plan to set a budget from (test_solver._budget: the
cheapest plan's time or the fastest plan's cost), then asks it again for the truth under that budget: two walks over
the same plans, each pricing every plan at its least recomputation (exhaustive._least_recompute, most of brute
force's time). Hypothesis also draws the same instance again with another objective, budget kind or factor (it
mutates the examples it drew). `solve_exhaustive` here is exhaustive.solve_exhaustive itself, every line of it run,
with _least_recompute answered from a memo of the instance: an equal problem and equal options give the same
(plan, estimate) for a plan, since the cost model is a pure function of them (Problem, its specs and its profile
are frozen dataclasses and pydantic models, compared field by field). The memo keeps the last few instances (the
problem objects themselves, so an id is never reused) and the state of the modules that price a plan (`_state`:
every name of costmodel, profile.analytic and exhaustive, compared by identity, so a test that patches a cost-model constant
or term between two calls on an equal problem gets fresh prices: round 17's audit); a call on any other instance,
or under another state, prices as before.
`least_recompute` is _least_recompute on the same memo, for the bound tests' walks over every plan
(test_solver.plans_as_searched, test_inflight_bound._plans, test_solver_budget_time._interleaved_plans), which
price the plans a draw's budget has priced already.
"""

from __future__ import annotations

from unittest import mock

from optsearch import costmodel
from optsearch.baselines import exhaustive
from optsearch.profile import analytic

KEPT = 4  # instances whose priced plans are kept (a draw's are a few thousand (plan, estimate) pairs at most)
_kept: list[list] = []  # [problem, options, state, {plan: _least_recompute's answer}], newest last
_PRICE = exhaustive._least_recompute


def _state() -> tuple:
    """Every name the pricing modules hold, the objects themselves (a patched constant or function is another object;
    held here, a freed patch's address cannot be reused by the next one: round 17's audit)."""
    names = [v for k, v in vars(exhaustive).items() if k != "_least_recompute"]  # (solve_exhaustive patches it)
    return tuple(names + list(vars(costmodel).values()) + list(vars(analytic).values()))


def _same(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


def _memo(problem, options) -> dict:
    """The plans priced so far on an equal problem and equal options under the same pricing modules (an empty memo,
    kept, when none)."""
    state = _state()
    for match in (lambda p, o: p is problem and o is options, lambda p, o: p == problem and o == options):
        for i, entry in enumerate(_kept):
            if match(entry[0], entry[1]) and _same(entry[2], state):
                _kept.append(_kept.pop(i))
                entry[0], entry[1] = problem, options  # the next look-up finds these objects by identity
                return entry[3]
    _kept.append([problem, options, state, {}])
    del _kept[:-KEPT]
    return _kept[-1][3]


def least_recompute(problem, plan, options):
    """exhaustive._least_recompute(problem, plan, options), priced once per plan of an instance."""
    found = _memo(problem, options)
    try:
        return found[plan]
    except KeyError:
        answer = found[plan] = _PRICE(problem, plan, options)
        return answer


def solve_exhaustive(problem, budget, **kwargs):
    """exhaustive.solve_exhaustive(problem, budget, **kwargs), pricing each plan of an instance once across calls."""
    options = kwargs.get("options", exhaustive.SpaceOptions())
    found = _memo(problem, options)

    def shared(p, plan, o):
        if p is not problem or o is not options:
            return _PRICE(p, plan, o)
        try:
            return found[plan]
        except KeyError:
            answer = found[plan] = _PRICE(p, plan, o)
            return answer

    with mock.patch.object(exhaustive, "_least_recompute", shared):
        return exhaustive.solve_exhaustive(problem, budget, **kwargs)
