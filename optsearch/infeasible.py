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


def _first_plan_under(problem: Problem, budget: Budget, cap_field: str, *, solver: str, options: SpaceOptions,
                      time_limit_s: float | None):
    """A feasibility probe for the bisections below: cap -> (status, SearchResult or None), a first plan (--gap 0.99)
    under the budget's other caps with `cap_field` set to cap (None: dropped), training time and cost left out. All
    probes share one clock of FEWEST_GPUS_BUDGET_S (or the caller's time limit); past it, ("timeout", None)."""
    from optsearch.solver import solve

    deadline = time.monotonic() + min(FEWEST_GPUS_BUDGET_S, time_limit_s if time_limit_s is not None else 1e9)
    base = budget.model_copy(update={"objective": "cost", "max_time_s": None, "max_cost_usd": None})

    def first(cap):
        left = deadline - time.monotonic()
        if left <= 0:
            return "timeout", None
        result = solve(problem, base.model_copy(update={cap_field: cap}), solver=solver, options=options,
                       time_limit_s=left, gap=FEASIBILITY_GAP)
        return result.status, result if result.plan is not None else None

    return first


def fewest_gpus(problem: Problem, budget: Budget, *, solver: str, options: SpaceOptions = SpaceOptions(),
                time_limit_s: float | None = None) -> FewestGpus | None:
    """The fewest GPUs a plan needs under the budget's other caps (--max-usd-per-hour; training time and cost are
    left out: they are explained apart), given that none has budget.max_gpus or fewer. None when budget.max_gpus is
    unset. Bisection over the GPU cap with feasibility solves; each plan found lowers the upper end to its own GPU
    count."""
    if budget.max_gpus is None:
        return None
    first = _first_plan_under(problem, budget, "max_gpus", solver=solver, options=options, time_limit_s=time_limit_s)

    def first_plan(cap: int | None):
        status, result = first(cap)
        return status, None if result is None else result.plan

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


def lowest_rate(problem: Problem, budget: Budget, *, solver: str, options: SpaceOptions = SpaceOptions(),
                time_limit_s: float | None = None) -> tuple[float | None, bool]:
    """(the lowest USD/hour a plan that fits needs, exact), given that none meets budget.max_usd_per_hour (under the
    budget's --max-gpus; training time and cost left out). Bisection over the hourly cap with feasibility solves, as
    fewest_gpus; each plan found lowers the upper end to its own rate, and the search ends when a cap a cent below the
    best rate found is infeasible (exact) or the time runs out (not exact: a plan at that rate exists). (None, exact):
    no plan fits at any rate."""
    first = _first_plan_under(problem, budget, "max_usd_per_hour", solver=solver, options=options,
                              time_limit_s=time_limit_s)

    def first_plan(cap: float | None):
        status, result = first(cap)
        return status, None if result is None else result.estimate

    low = budget.max_usd_per_hour or 0.0
    status, est = first_plan(None)
    if est is None:
        return None, status == "infeasible"
    high = est.usd_per_hour
    while True:
        mid = (low + high) / 2 if high - low > 0.02 else high - 0.01
        if mid <= low:
            return high, True
        status, est = first_plan(mid)
        if est is not None:
            high = est.usd_per_hour
        elif status == "infeasible":
            if mid == high - 0.01:
                return high, True
            low = mid
        else:
            return high, False


def rate_cap_hint(problem: Problem, budget: Budget, *, solver: str, options: SpaceOptions = SpaceOptions(),
                  time_limit_s: float | None = None) -> str:
    """'; the lowest hourly rate of a plan that fits is $8.14' for a --max-usd-per-hour no plan meets."""
    from optsearch.units import format_usd

    rate, exact = lowest_rate(problem, budget, solver=solver, options=options, time_limit_s=time_limit_s)
    if rate is None:
        return "; no plan fits at any hourly rate of this cluster" if exact else ""
    shown = format_usd(rate)
    if shown == format_usd(budget.max_usd_per_hour or 0.0):  # $8.144 against a cap of $8.14: show the tenths of cents
        shown = f"${rate:,.4f}".rstrip("0")
    if exact:
        return f"; the lowest hourly rate of a plan that fits is {shown}"
    return (f"; a plan at {shown}/hour exists (the lowest rate not narrowed further within "
            f"{FEWEST_GPUS_BUDGET_S:g} s)")


def _caps(budget: Budget) -> list[str]:
    from optsearch.units import format_usd

    return [f"{flag} {value}" for flag, value in (
        ("--max-usd-per-hour", budget.max_usd_per_hour is not None and format_usd(budget.max_usd_per_hour)),
        ("--max-gpus", budget.max_gpus)) if value]


def _both_limits_hint(problem: Problem, budget: Budget, *, solver: str, options: SpaceOptions,
                      time_limit_s: float | None) -> str:
    """For --max-time and --max-cost that each can be met but not together: the nearest plan on each side (the
    cheapest within the time, the fastest within the cost), instead of the fastest plan overall."""
    from optsearch.solver import solve
    from optsearch.units import format_budget_duration, format_duration, format_usd

    # under a time limit the two probes share it: half each
    each_s = None if time_limit_s is None else time_limit_s / 2
    cheapest = solve(problem, budget.model_copy(update={"objective": "cost", "max_cost_usd": None}), solver=solver,
                     options=options, time_limit_s=each_s)
    fastest = solve(problem, budget.model_copy(update={"objective": "time", "max_time_s": None}), solver=solver,
                    options=options, time_limit_s=each_s)
    parts = []
    if cheapest.estimate is not None:
        c = cheapest.estimate
        best = "the cheapest" if cheapest.status == "optimal" else "the cheapest found"
        parts.append(f"within {format_budget_duration(budget.max_time_s)} {best} plan costs {format_usd(c.cost_usd)} "
                     f"({format_duration(c.training_time_s)})")
    elif each_s is not None and cheapest.status == "timeout":
        parts.append(f"the cheapest plan within {format_budget_duration(budget.max_time_s)} was not found in the "
                     f"{each_s:.1f} s of --time-limit left for it")
    if fastest.estimate is not None:
        f = fastest.estimate
        best = "the fastest" if fastest.status == "optimal" else "the fastest found"
        parts.append(f"within {format_usd(budget.max_cost_usd)} {best} plan takes "
                     f"{format_duration(f.training_time_s)} ({format_usd(f.cost_usd)})")
    elif each_s is not None and fastest.status == "timeout":
        parts.append(f"the fastest plan within {format_usd(budget.max_cost_usd)} was not found in the "
                     f"{each_s:.1f} s of --time-limit left for it")
    return "; ".join(parts)


def _cap_binds_hint(problem: Problem, budget: Budget, *, solver: str, options: SpaceOptions,
                    time_limit_s: float | None) -> str:
    """For a deadline or cost no plan meets under --max-usd-per-hour / --max-gpus: whether those caps are what
    binds (the best plan without them meets the deadline or cost)."""
    from optsearch.solver import solve
    from optsearch.units import format_duration, format_usd

    free = budget.model_copy(update={"max_usd_per_hour": None, "max_gpus": None})
    result = solve(problem, free, solver=solver, options=options, time_limit_s=time_limit_s)
    caps = " and ".join(_caps(budget))
    if result.estimate is None or result.plan is None:
        return f"; not {caps} alone: no plan meets the rest without {'them' if ' and ' in caps else 'it'} either" \
            if result.status == "infeasible" else ""
    e = result.estimate
    best = ("the cheapest" if free.objective == "cost" else "the fastest") + (
        "" if result.status == "optimal" else " found")
    return (f"; {caps} {'bind' if ' and ' in caps else 'binds'}: without {'them' if ' and ' in caps else 'it'} "
            f"{best} plan takes {format_duration(e.training_time_s)} for {format_usd(e.cost_usd)} at "
            f"{format_usd(e.usd_per_hour)}/hour on {result.plan.num_gpus} GPUs")


def no_plan_reason(problem: Problem, budget: Budget, *, solver: str, options: SpaceOptions = SpaceOptions(),
                   time_limit_s: float | None = None) -> str:
    """The line for a budget no plan meets (solve and compare print it): the binding budget and its nearest feasible
    value (solver.explain_infeasible), with the fewest GPUs a plan needs where --max-gpus binds, the lowest hourly
    rate where --max-usd-per-hour binds, the nearest plan on each side where --max-time and --max-cost each can be met
    but not together, and whether --max-usd-per-hour / --max-gpus are what makes a deadline or cost unmet."""
    from optsearch.solver import explain_infeasible

    start = time.monotonic()

    def left() -> float | None:
        return None if time_limit_s is None else max(0.0, time_limit_s - (time.monotonic() - start))

    # explain_infeasible runs up to two solves, each given its whole limit; under --time-limit it gets a quarter of
    # the limit per solve, so that the hints' probes after it (the nearest plan on each side) keep half of it
    explain_s = None if time_limit_s is None else time_limit_s / 4
    reason = explain_infeasible(problem, budget, solver=solver, options=options, time_limit_s=explain_s)
    kw = dict(solver=solver, options=options)
    if budget.max_gpus is not None and reason.startswith("no plan meets --max-gpus"):
        reason += gpu_cap_hint(problem, budget, time_limit_s=left(), **kw)
    elif budget.max_usd_per_hour is not None and reason.startswith("no plan meets --max-usd-per-hour"):
        reason += rate_cap_hint(problem, budget, time_limit_s=left(), **kw)
    elif reason.startswith("no plan meets --max-cost and --max-time together"):
        hint = _both_limits_hint(problem, budget, time_limit_s=left(), **kw)
        if hint:
            reason = f"no plan meets --max-cost and --max-time together: each alone can be met ({hint})"
    if _caps(budget) and reason.startswith(("no plan finishes within", "no plan costs at most",
                                            "no plan meets --max-cost and --max-time together")):
        reason += _cap_binds_hint(problem, budget, time_limit_s=left(), **kw)
    return reason
