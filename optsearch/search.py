"""What every search method returns, and the budget/objective checks they share."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from optsearch.costmodel import Estimate
from optsearch.plan import Plan
from optsearch.spec.budget import Budget, Objective

Status = Literal["optimal", "feasible", "infeasible", "timeout", "refused"]

# A plan meets a time or money budget when it overshoots it by at most one part in 10^6: the solvers work in
# floating point (CBC) or rounded integers (CP-SAT), so an exact tie with a budget needs a tolerance, and every method
# (solvers, brute force, DP) uses this same one.
BUDGET_REL = 1e-6
# A lower bound is compared with a budget this loosely: it is summed in another order than the cost model sums the
# plan, so where a plan sits exactly at limit x (1 + BUDGET_REL) its bound may lie one rounding step above the limit.
BOUND_SLACK = (1 + BUDGET_REL) * (1 + 1e-12)


def objective_value(est: Estimate, objective: Objective) -> float:
    """USD for the whole run, or training seconds."""
    return est.cost_usd if objective == "cost" else est.training_time_s


def budget_violations(plan: Plan, est: Estimate, budget: Budget) -> list[str]:
    """The limits a priced plan breaks (empty when it meets them all, memory included)."""
    out = []
    if not est.fits:
        out.append("memory")
    if budget.max_time_s is not None and est.training_time_s > budget.max_time_s * (1 + BUDGET_REL):
        out.append("max_time")
    if budget.max_cost_usd is not None and est.cost_usd > budget.max_cost_usd * (1 + BUDGET_REL):
        out.append("max_cost")
    if budget.max_gpus is not None and plan.num_gpus > budget.max_gpus:
        out.append("max_gpus")
    if budget.max_usd_per_hour is not None and est.usd_per_hour > budget.max_usd_per_hour * (1 + BUDGET_REL):
        out.append("max_usd_per_hour")
    return out


@dataclass(slots=True, kw_only=True)
class SearchResult:
    method: str
    status: Status
    objective: Objective
    solve_time_s: float
    plan: Plan | None = None
    estimate: Estimate | None = None
    objective_value: float | None = None  # re-priced by the cost model
    solver_objective_value: float | None = None  # what the solver itself reported (None for non-solvers)
    bound: float | None = None  # proven lower bound on the optimum
    message: str = ""
    stats: dict[str, float] = field(default_factory=dict)

    @property
    def gap(self) -> float | None:
        """Relative gap between the plan and the proven bound (0 when optimal, None when unknown)."""
        if self.status == "optimal":
            return 0.0
        if self.objective_value is None or self.bound is None or self.objective_value <= 0:
            return None
        return max(0.0, (self.objective_value - self.bound) / self.objective_value)
