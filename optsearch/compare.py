"""Run several search methods on one problem and budget, and put their answers side by side.

Methods: the exact solver with either backend (cbc, cpsat), the FASOP-style DP (dp), the AMP-style DP (dp-amp), both
over the same knobs as the exact search (the target's space), the same two over only the knobs the published tools
search (dp-published, dp-amp-published: no recomputation, cp = ep = v = 1; their message names what they leave out),
and brute force (exhaustive). Every method is reported, including one that timed out or refused the instance for size.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from optsearch.candidates import SpaceOptions
from optsearch.errors import SpecError
from optsearch.problem import Problem
from optsearch.search import SearchResult
from optsearch.spec.budget import Budget

METHODS: tuple[str, ...] = ("cbc", "cpsat", "dp", "dp-amp", "dp-published", "dp-amp-published", "exhaustive")
# compare's default: the exact solvers beside the DP baselines over the same space. exhaustive (the ground truth on
# small instances) refuses almost every real one (gpt2-medium on fasop-a100-a10: 486,110 plans > 200,000), so it
# runs only when named.
DEFAULT_METHODS: tuple[str, ...] = ("cbc", "cpsat", "dp", "dp-amp")


def parse_methods(text: str) -> list[str]:
    """'cbc,cpsat,dp' -> ['cbc', 'cpsat', 'dp'] (in the order given, without repeats)."""
    out: list[str] = []
    for name in (p.strip() for p in text.split(",")):
        if name not in METHODS:
            raise SpecError(f"--methods item {name!r}: unknown method; known: {', '.join(METHODS)}")
        if name not in out:
            out.append(name)
    return out


def run_method(problem: Problem, budget: Budget, method: str, *, time_limit_s: float | None = None,
               options: SpaceOptions = SpaceOptions(), max_plans: int | None = None) -> SearchResult:
    """One method's answer; its solve_time_s is the wall time of the whole call."""
    start = time.perf_counter()
    if method in ("cbc", "cpsat"):
        from optsearch.solver import solve

        result = solve(problem, budget, solver=method, time_limit_s=time_limit_s, options=options)
    elif method in ("dp", "dp-amp", "dp-published", "dp-amp-published"):
        from optsearch.baselines.dp import solve_dp

        result = solve_dp(problem, budget, order="fixed" if method.startswith("dp-amp") else "rotations",
                          knobs="published" if method.endswith("-published") else "space", options=options,
                          time_limit_s=time_limit_s)
    elif method == "exhaustive":
        from optsearch.baselines.exhaustive import DEFAULT_MAX_PLANS, solve_exhaustive

        result = solve_exhaustive(problem, budget, options=options, time_limit_s=time_limit_s,
                                  max_plans=DEFAULT_MAX_PLANS if max_plans is None else max_plans)
    else:
        raise SpecError(f"method {method!r}: unknown; known: {', '.join(METHODS)}")
    result.solve_time_s = time.perf_counter() - start
    return result


@dataclass(frozen=True, slots=True, kw_only=True)
class Comparison:
    result: SearchResult
    gap_to_best: float | None  # (value - best) / best over the plans every method found; None without a plan


def compare(problem: Problem, budget: Budget, methods: list[str], *, time_limit_s: float | None = None,
            options: SpaceOptions = SpaceOptions(), max_plans: int | None = None, on_done=None) -> list[Comparison]:
    results = []
    for method in methods:
        result = run_method(problem, budget, method, time_limit_s=time_limit_s, options=options, max_plans=max_plans)
        if on_done is not None:
            on_done(result)
        results.append(result)
    return with_gaps(results)


def with_gaps(results: list[SearchResult]) -> list[Comparison]:
    values = [r.objective_value for r in results if r.objective_value is not None]
    best = min(values) if values else None
    out = []
    for r in results:
        gap = None
        if r.objective_value is not None and best is not None:
            gap = (r.objective_value - best) / best if best > 0 else 0.0
        out.append(Comparison(result=r, gap_to_best=gap))
    return out


def comparison_json(rows: list[Comparison]) -> list[dict[str, Any]]:
    from optsearch.report import plan_json

    out = []
    for row in rows:
        r = row.result
        out.append({
            "method": r.method,
            "status": r.status,
            "objective": r.objective,
            "objective_value": r.objective_value,
            "search_time_s": r.solve_time_s,
            "gap_to_best": row.gap_to_best,
            "bound": r.bound,
            "message": r.message,
            "plan": plan_json(r.plan, r.estimate) if r.plan is not None and r.estimate is not None else None,
        })
    return out
