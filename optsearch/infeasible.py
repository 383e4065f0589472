"""What to tell the user when no plan meets the budgets: one line, the same for every command that solves.

`no_plan_reason` is the line `solve` and `compare` print (exit 1): solver.explain_infeasible names the budget that
binds and the nearest feasible value (re-solving with that budget dropped). Where --max-gpus binds, `fewest_gpus`
finds the fewest GPUs a plan needs by re-solving for feasibility alone (a first plan, --gap 0.99) with the cap raised,
by bisection between the cap (infeasible) and the GPUs of a plan found without it; it stops after
FEWEST_GPUS_BUDGET_S (or the caller's time limit) and then says how far it got.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from optsearch.candidates import SpaceOptions
from optsearch.problem import Problem
from optsearch.spec.budget import Budget

FEWEST_GPUS_BUDGET_S = 20.0  # at most this much re-solving for the --max-gpus hint (a few solves on the catalog)
FEASIBILITY_GAP = 0.99  # any plan will do: stop at the first one


@dataclass(frozen=True, slots=True, kw_only=True)
class FewestGpus:
    """No plan has `infeasible_at` GPUs or fewer; a plan with `found` GPUs exists (None: none even without the GPU
    cap). Exact (found is the fewest) when found == infeasible_at + 1 or every count in between was ruled out."""

    infeasible_at: int
    found: int | None
    exact: bool


def fewest_gpus(problem: Problem, budget: Budget, *, solver: str, options: SpaceOptions = SpaceOptions(),
                time_limit_s: float | None = None) -> FewestGpus | None:
    """The fewest GPUs a plan needs under the budget's other caps (--max-usd-per-hour; training time and cost are
    left out: they are explained apart), given that none has budget.max_gpus or fewer. None when budget.max_gpus is
    unset. Bisection over the GPU cap with feasibility solves; each plan found lowers the upper end to its own GPU
    count."""
    from optsearch.solver import solve

    if budget.max_gpus is None:
        return None
    deadline = time.monotonic() + min(FEWEST_GPUS_BUDGET_S, time_limit_s if time_limit_s is not None else 1e9)
    base = budget.model_copy(update={"objective": "cost", "max_time_s": None, "max_cost_usd": None})

    def first_plan(cap: int | None):
        left = deadline - time.monotonic()
        if left <= 0:
            return "timeout", None
        result = solve(problem, base.model_copy(update={"max_gpus": cap}), solver=solver, options=options,
                       time_limit_s=left, gap=FEASIBILITY_GAP)
        return result.status, result.plan

    low = budget.max_gpus
    status, plan = first_plan(None)
    if plan is None:
        return FewestGpus(infeasible_at=low, found=None, exact=status == "infeasible")
    high = plan.num_gpus
    while high - low > 1:
        mid = (low + high) // 2
        status, plan = first_plan(mid)
        if plan is not None:
            high = plan.num_gpus
        elif status == "infeasible":
            low = mid
        else:  # stopped by the time: say how far it got
            return FewestGpus(infeasible_at=low, found=high, exact=False)
    return FewestGpus(infeasible_at=low, found=high, exact=True)


def gpu_cap_hint(problem: Problem, budget: Budget, *, solver: str, options: SpaceOptions = SpaceOptions(),
                 time_limit_s: float | None = None) -> str:
    """'; the fewest GPUs a plan needs is 4' (or why it is not named) for a budget whose --max-gpus no plan meets."""
    found = fewest_gpus(problem, budget, solver=solver, options=options, time_limit_s=time_limit_s)
    if found is None:
        return ""
    rate = " under --max-usd-per-hour" if budget.max_usd_per_hour is not None else ""
    if found.found is None:
        if found.exact:
            return f"; no plan fits{rate} at any GPU count of this cluster"
        return "; finding the fewest GPUs a plan needs ran past its time"
    if found.exact:
        return f"; the fewest GPUs a plan needs{rate} is {found.found}"
    return (f"; a plan needs more than {found.infeasible_at} GPUs{rate} and one with {found.found} exists (not narrowed "
            f"further within {FEWEST_GPUS_BUDGET_S:g} s)")


def no_plan_reason(problem: Problem, budget: Budget, *, solver: str, options: SpaceOptions = SpaceOptions(),
                   time_limit_s: float | None = None) -> str:
    """The line for a budget no plan meets (solve and compare print it): the binding budget and its nearest feasible
    value (solver.explain_infeasible), with the fewest GPUs a plan needs where --max-gpus binds."""
    from optsearch.solver import explain_infeasible

    start = time.monotonic()
    reason = explain_infeasible(problem, budget, solver=solver, options=options, time_limit_s=time_limit_s)
    if budget.max_gpus is not None and reason.startswith("no plan meets --max-gpus"):
        left = None if time_limit_s is None else max(0.0, time_limit_s - (time.monotonic() - start))
        reason += gpu_cap_hint(problem, budget, solver=solver, options=options, time_limit_s=left)
    return reason
