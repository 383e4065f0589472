"""What-if analysis over the exact solver: budget sweeps, the exact Pareto frontier of (training time, USD), cluster
comparisons and the marginal value of one node more or less.

Sweeps re-use work between points with three exact rules (none of them changes an answer), and every solve of a
sweep shares the budget-free work (solver.Memo: candidate terms, cheap bounds, quick plans):
  1. The least value the swept quantity can take (the fastest plan for a time sweep, the cheapest for a cost sweep)
     is solved once: every point whose limit is below it is infeasible without a solve, and that plan is a feasible
     warm start for every other point.
  2. Points are solved from the loosest limit to the tightest. An optimum found under limit L that also meets a
     tighter limit L' is optimal there too (the feasible set shrank, the optimum stayed in it): no solve.
  3. Otherwise the point is solved with the best known plan that meets its budget as the first incumbent
     (solve(..., warm_start=...)), so the solver's bound prunes every candidate that cannot beat it.
  4. Cost under deadlines: after the loosest point (rule 2's widest reach), the others are solved from the tightest
     up. Once deadline D is proven optimal at cost V, every plan within D costs at least V, and V's plan meets every
     looser deadline; so the next point searches only plans slower than D (solve(..., slower_than_s=D)), whose cost
     is at least rent x D. Before the first such point, D is the least time T* less the solver's incumbent tolerance:
     the least-time solve being optimal means that no plan is faster than T* (1 - INCUMBENT_REL), the margin by
     which any plan must beat an incumbent.
With a time limit per solve, a point left unproven finally takes the best plan found anywhere in the sweep that meets
its budget, so a looser budget is never answered with a worse plan.

The Pareto frontier (`pareto`) is exact by the epsilon-constraint method, alternating two solves:
      c_k = min cost  s.t. time <= T_k                         (T_0 = no limit)
      t_k = min time  s.t. cost <= c_k (1 + COST_REL), time <= T_k
      (t_k, c_k) is a frontier point;  T_{k+1} = t_k - epsilon;  stop when T_{k+1} < the fastest time,
      epsilon = max(TIME_REL t_k, ROW_TOL_S x iterations)   (1e-6 relative, and 1e-6 s per iteration).
Why it is exact: no plan costs less than c_k within T_k, and no plan as cheap as c_k is faster than t_k, so
(t_k, c_k) is non-dominated; a non-dominated point with time in (T_{k+1}, T_k] other than it would cost at least c_k
and take longer than t_k, i.e. be dominated. So every non-dominated point is found, except one whose time lies
within epsilon below another's: such points are closer than the solver can tell apart (CBC's feasibility
tolerance is 1e-7 on the time-budget row, in seconds per iteration; the incumbent cut asks for 1e-9), and
costs within COST_REL of each other are treated as equal for the same reason. The brute-force enumeration
(`enumerate_plans`, `brute_force_frontier`) checks this on small instances in tests/test_whatif.py.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from optsearch.candidates import SpaceOptions, ep_candidates
from optsearch.costmodel import Estimate
from optsearch.errors import SpecError
from optsearch.plan import Plan, Stage
from optsearch.problem import Problem
from optsearch.search import BUDGET_REL, SearchResult, budget_violations, objective_value
from optsearch.spec.budget import Budget
from optsearch.units import format_duration, format_usd, parse_duration_s, parse_money_usd

Limit = Literal["max_time_s", "max_cost_usd"]
How = Literal["solved", "reused", "implied"]

TIME_REL = 1e-6  # the next frontier point must be at least this much (relative) faster ...
ROW_TOL_S = 1e-6  # ... and at least this much per iteration: 10x CBC's primal tolerance on the time-budget row,
                  # which is written in seconds per iteration (a tighter step lets CBC return the previous plan)
COST_REL = 1e-6  # costs within this (relative) count as equal in the second solve of each frontier step

TickFn = Callable[[int, int | None, str], None]  # (points done, points in all or None, what was just done)


@dataclass(frozen=True, slots=True, kw_only=True)
class Sweep:
    """A swept limit (max_time_s or max_cost_usd) and its values, in the order given."""

    limit: Limit
    values: tuple[float, ...]

    @property
    def objective(self) -> str:
        """What a sweep minimizes by default: cost under a time sweep, time under a cost sweep."""
        return "cost" if self.limit == "max_time_s" else "time"


@dataclass(slots=True, kw_only=True)
class Point:
    """One what-if answer: the budget, the result (re-used results have solve_time_s 0), and why there is no plan."""

    budget: Budget
    result: SearchResult
    problem: Problem
    how: How = "solved"
    reason: str = ""  # for a point without a plan: the binding limit and the nearest feasible value
    label: str = ""  # cluster name (compare), edit (marginal) or "" (sweep, pareto)
    extra: dict[str, float] = field(default_factory=dict)  # marginal: delta_time_s, delta_cost_usd

    @property
    def plan(self) -> Plan | None:
        return self.result.plan

    @property
    def estimate(self) -> Estimate | None:
        return self.result.estimate


# ---- parsing ------------------------------------------------------------------------------------------------

_SWEEP_NAMES: dict[str, Limit] = {"max-time": "max_time_s", "max_time": "max_time_s", "max-cost": "max_cost_usd",
                                  "max_cost": "max_cost_usd"}


MAX_SWEEP_POINTS = 1000


def parse_sweep(text: str) -> Sweep:
    """'max-time=2d..30d:12' (12 evenly spaced values, both ends included), 'max-cost=50000..500000:10', or a list
    'max-time=2d,7d,30d'."""
    where = f"--sweep {text}"
    name, sep, spec = text.partition("=")
    limit = _SWEEP_NAMES.get(name.strip())
    if not sep or limit is None:
        raise SpecError(f"{where}: expected max-time=FROM..TO:POINTS or max-cost=FROM..TO:POINTS, e.g. "
                        f"max-time=2d..30d:12")
    parse = (lambda s: parse_duration_s(s, option=where)) if limit == "max_time_s" else (
        lambda s: parse_money_usd(s, option=where))
    m = re.fullmatch(r"\s*([^.:,]+(?:\.\d+)?)\s*\.\.\s*([^:]+?)\s*:\s*(\d+)\s*", spec)
    if m:
        lo, hi, n = parse(m.group(1)), parse(m.group(2)), int(m.group(3))
        if n < 2:
            raise SpecError(f"{where}: POINTS = {n}: must be at least 2 (or give one value)")
        if n > MAX_SWEEP_POINTS:
            raise SpecError(f"{where}: POINTS = {n}: must be at most {MAX_SWEEP_POINTS} (each point is a solve)")
        if hi <= lo:
            raise SpecError(f"{where}: {m.group(2)} must be above {m.group(1)}")
        values = tuple(lo + (hi - lo) * i / (n - 1) for i in range(n))
    elif ".." in spec:
        raise SpecError(f"{where}: a range needs a point count, e.g. {name.strip()}={spec.strip()}:10")
    else:
        values = tuple(parse(v) for v in spec.split(","))
        if len(values) > MAX_SWEEP_POINTS:
            raise SpecError(f"{where}: {len(values)} values: at most {MAX_SWEEP_POINTS} (each point is a solve)")
    return Sweep(limit=limit, values=values)


# ---- helpers ------------------------------------------------------------------------------------------------

def _quantity(est: Estimate, limit: Limit) -> float:
    return est.training_time_s if limit == "max_time_s" else est.cost_usd


def _limit_objective(limit: Limit) -> str:
    return "time" if limit == "max_time_s" else "cost"


def _copy(result: SearchResult) -> SearchResult:
    """A result re-used for another budget: nothing was solved for it."""
    return replace(result, solve_time_s=0.0, stats={"reused": 1.0}, message="")


def _no_plan(budget: Budget, method: str) -> SearchResult:
    return SearchResult(method=method, status="infeasible", objective=budget.objective, solve_time_s=0.0,
                        stats={"reused": 1.0})


def _beyond_message(limit: Limit, value: float, least: Estimate) -> str:
    """The binding limit and the least value any plan reaches (the words of solver.explain_infeasible)."""
    if limit == "max_time_s":
        return (f"no plan finishes within {format_duration(value)}: the fastest feasible plan takes "
                f"{format_duration(least.training_time_s)} and costs {format_usd(least.cost_usd)}")
    return (f"no plan costs at most {format_usd(value)}: the cheapest feasible plan costs "
            f"{format_usd(least.cost_usd)} and takes {format_duration(least.training_time_s)}")


class _Solver:
    """solve() with the sweep's settings, remembering every feasible plan found (for warm starts)."""

    def __init__(self, problem: Problem, solver: str, time_limit_s: float | None, options: SpaceOptions):
        self.problem, self.solver, self.time_limit_s, self.options = problem, solver, time_limit_s, options
        self.known: dict[Plan, Estimate] = {}
        self.solves = 0
        from optsearch.solver import Memo

        self.memo = Memo(problem, options)  # budget-free work shared by every solve of the sweep

    def warm(self, budget: Budget) -> Plan | None:
        """The best known plan that meets the budget."""
        ok = [(objective_value(e, budget.objective), p.num_gpus, i, p)
              for i, (p, e) in enumerate(self.known.items()) if not budget_violations(p, e, budget)]
        return min(ok)[3] if ok else None

    def __call__(self, budget: Budget, warm_start: Plan | None = None, slower_than_s: float = 0.0) -> SearchResult:
        from optsearch.solver import solve

        result = solve(self.problem, budget, solver=self.solver, time_limit_s=self.time_limit_s,
                       options=self.options, warm_start=warm_start if warm_start is not None else self.warm(budget),
                       memo=self.memo, slower_than_s=slower_than_s)
        self.solves += 1
        if result.plan is not None and result.estimate is not None:
            self.known[result.plan] = result.estimate
        return result

    def explain(self, budget: Budget) -> str:
        from optsearch.solver import explain_infeasible

        return explain_infeasible(self.problem, budget, solver=self.solver, options=self.options,
                                  time_limit_s=self.time_limit_s)


# ---- sweep --------------------------------------------------------------------------------------------------

def sweep(
    problem: Problem,
    base: Budget,
    spec: Sweep,
    *,
    solver: str = "cpsat",
    time_limit_s: float | None = None,
    options: SpaceOptions = SpaceOptions(),
    tick: TickFn | None = None,
) -> list[Point]:
    """The optimum under `base` with the swept limit set to each value (in the order given). `base.objective` is
    what is minimized. Work is re-used between points by the rules in the module docstring."""
    run = _Solver(problem, solver, time_limit_s, options)
    n = len(spec.values)
    out: list[Point | None] = [None] * n
    done = 0

    def settle(i: int, point: Point, what: str) -> None:
        nonlocal done
        out[i] = point
        done += 1
        if tick is not None:
            tick(done, n, what)

    budgets = [base.model_copy(update={spec.limit: v}) for v in spec.values]
    # Rule 1: the least value of the swept quantity under the other limits.
    least_budget = base.model_copy(update={spec.limit: None, "objective": _limit_objective(spec.limit)})
    least = run(least_budget)
    if tick is not None:
        tick(0, n, f"least {_limit_objective(spec.limit)}: {least.status}")
    if least.status == "infeasible":
        # the other limits (--max-gpus, --max-usd-per-hour) or memory rule out every point: solve's line, with the
        # fewest GPUs or the lowest hourly rate a plan needs (optsearch.infeasible.no_plan_reason)
        from optsearch.infeasible import no_plan_reason

        reason = no_plan_reason(problem, base.model_copy(update={spec.limit: None}), solver=solver, options=options,
                                time_limit_s=time_limit_s)
        for i, b in enumerate(budgets):
            settle(i, Point(budget=b, result=_no_plan(b, solver), problem=problem, how="implied", reason=reason),
                   "infeasible")
        return out  # type: ignore[return-value]
    least_q = _quantity(least.estimate, spec.limit) if least.status == "optimal" and least.estimate else None
    optima: list[tuple[float, SearchResult]] = []  # (limit, optimal result)
    if least.status == "optimal" and base.objective == _limit_objective(spec.limit):
        optima.append((float("inf"), least))  # minimizing the swept quantity itself: one answer for all
    order = sorted(range(n), key=lambda i: -spec.values[i])  # loosest first
    windows = base.objective == "cost" and spec.limit == "max_time_s"
    if windows:  # Rule 4: the loosest point first (rule 2's widest reach), then the rest from the tightest up
        order = order[:1] + order[:0:-1]
    # Rule 4: every plan within `proven` training seconds is no cheaper than the best plan known for the next point
    # (nothing is faster than the fastest plan; then each tighter point's proven optimum).
    from optsearch.solver import INCUMBENT_REL

    proven = least.estimate.training_time_s * (1 - INCUMBENT_REL) if least_q is not None else 0.0
    for k, i in enumerate(order):
        value, budget = spec.values[i], budgets[i]
        if least_q is not None and value * (1 + BUDGET_REL) < least_q:  # a plan meets a limit within BUDGET_REL
            settle(i, Point(budget=budget, result=_no_plan(budget, solver), problem=problem, how="implied",
                            reason=_beyond_message(spec.limit, value, least.estimate)), "infeasible")
            continue
        # Rule 2: a looser optimum that meets this limit.
        hit = next((r for lim, r in optima if lim >= value and _quantity(r.estimate, spec.limit) <= value), None)
        if hit is not None:
            settle(i, Point(budget=budget, result=_copy(hit), problem=problem, how="reused"), "re-used")
            continue
        # Rule 3: warm start from the best known plan meeting the budget (and rule 4's window after the first point)
        result = run(budget, slower_than_s=proven if windows and k > 0 and proven < value else 0.0)
        reason = ""
        if result.status == "infeasible":
            reason = run.explain(budget)
        elif result.status == "timeout":
            reason = result.message
        if result.status == "optimal":
            optima.append((value, result))
        if windows and k > 0 and result.status in ("optimal", "infeasible"):
            proven = max(proven, value)
        settle(i, Point(budget=budget, result=result, problem=problem, reason=reason), result.status)
    # A solve stopped by the time limit may have missed a plan that a later (tighter) point found: give every
    # unproven point the best known plan that meets its budget, so that a looser budget is never answered worse.
    for point in out:
        if point.result.status in ("feasible", "timeout"):
            better = run.warm(point.budget)
            if better is not None and (point.result.objective_value is None or objective_value(
                    run.known[better], point.budget.objective) < point.result.objective_value):
                est = run.known[better]
                value = objective_value(est, point.budget.objective)
                bound = point.result.bound
                point.result = replace(point.result, status="feasible", plan=better, estimate=est,
                                       objective_value=value, solver_objective_value=None,
                                       bound=None if bound is None else min(bound, value),
                                       message="the best plan known from another point")
                point.reason = ""
    return out  # type: ignore[return-value]


# ---- Pareto frontier ----------------------------------------------------------------------------------------

def pareto(
    problem: Problem,
    base: Budget = Budget(),
    *,
    solver: str = "cpsat",
    time_limit_s: float | None = None,
    options: SpaceOptions = SpaceOptions(),
    tick: TickFn | None = None,
    max_points: int | None = None,
) -> list[Point]:
    """Every non-dominated (training time, cost) plan under the other limits of `base` (max_gpus, max_usd_per_hour,
    and max_time_s / max_cost_usd if given), fastest first. Exact when every point's status is "optimal"; see the
    module docstring for the epsilon. A point's status is the weaker of its two solves."""
    run = _Solver(problem, solver, time_limit_s, options)
    base = base.model_copy(update={"objective": "time"})
    fastest = run(base)
    if tick is not None:
        tick(0, None, f"fastest plan: {fastest.status}")
    if fastest.plan is None:
        return []
    t_min = fastest.estimate.training_time_s if fastest.status == "optimal" else None
    points: list[Point] = []
    limit = base.max_time_s
    while max_points is None or len(points) < max_points:
        if t_min is not None and limit is not None and limit < t_min:
            break  # nothing is faster than the fastest plan
        cheap_budget = base.model_copy(update={"objective": "cost", "max_time_s": limit})
        cheap = run(cheap_budget)
        if cheap.plan is None:
            break
        cost = cheap.estimate.cost_usd
        cap = cost * (1 + COST_REL)
        if base.max_cost_usd is not None:
            cap = min(cap, base.max_cost_usd)
        quick_budget = base.model_copy(update={"objective": "time", "max_time_s": limit, "max_cost_usd": cap})
        quick = run(quick_budget, warm_start=cheap.plan)
        best = quick if quick.plan is not None else cheap
        statuses = {cheap.status, quick.status}
        status = "optimal" if statuses == {"optimal"} else "feasible"
        # The point's gap is on time, from the second solve; when the first (cost) solve is unproven the point may
        # not be on the frontier at all, so it has no time gap to report (its message gives the cost gap).
        bound = (best.estimate.training_time_s if status == "optimal"
                 else quick.bound if cheap.status == "optimal" else None)
        message = "" if cheap.status == "optimal" else (
            f"the cost solve stopped unproven (gap {cheap.gap:.1%} on cost)" if cheap.gap is not None
            else "the cost solve stopped unproven")
        result = replace(best, status=status, solve_time_s=cheap.solve_time_s + quick.solve_time_s,
                         objective="time", objective_value=best.estimate.training_time_s, bound=bound,
                         message=message or best.message)
        point = Point(budget=quick_budget, result=result, problem=problem)
        points.append(point)
        if tick is not None:
            tick(len(points), None, f"{format_duration(best.estimate.training_time_s)} for "
                                    f"{format_usd(best.estimate.cost_usd)}")
        t = best.estimate.training_time_s
        if t_min is not None and t <= t_min * (1 + TIME_REL):
            break
        limit = next_time_limit(t, problem.iterations)
    points.sort(key=lambda p: (p.estimate.training_time_s, p.estimate.cost_usd))
    return points


def next_time_limit(time_s: float, iterations: int) -> float:
    """T_{k+1}: the time budget of the next frontier step, just below the point found (see the module docstring)."""
    return time_s - max(TIME_REL * time_s, ROW_TOL_S * iterations)


# ---- compare clusters and marginal value -------------------------------------------------------------------

def solve_point(problem: Problem, budget: Budget, *, solver: str = "cpsat", time_limit_s: float | None = None,
                options: SpaceOptions = SpaceOptions(), label: str = "", warm_start: Plan | None = None) -> Point:
    """One solve as a Point (with the reason when there is no plan)."""
    run = _Solver(problem, solver, time_limit_s, options)
    result = run(budget, warm_start=warm_start)
    reason = run.explain(budget) if result.status == "infeasible" else (
        result.message if result.plan is None else "")
    return Point(budget=budget, result=result, problem=problem, reason=reason, label=label)


def compare_clusters(problems: Sequence[Problem], base: Budget, spec: Sweep | None = None, **kw) -> list[Point]:
    """The same job and budget (or sweep) on several clusters; each point labelled with its cluster's name."""
    out: list[Point] = []
    for problem in problems:
        points = sweep(problem, base, spec, **kw) if spec is not None else [solve_point(
            problem, base, **{k: v for k, v in kw.items() if k != "tick"})]
        for p in points:
            p.label = problem.cluster.name
        out.extend(points)
    return out


def _with_count(problem: Problem, node_type: str, count: int) -> Problem:
    from optsearch.edits import Edit, apply_edits

    edit = Edit(text=f"node_types.{node_type}.count={count}", section="cluster", node_type=node_type,
                field="num_nodes_available", value=count)
    _, cluster, _ = apply_edits(problem.model, problem.cluster, problem.job, [edit])
    return replace(problem, cluster=cluster)


def marginal(
    problem: Problem,
    budget: Budget,
    *,
    solver: str = "cpsat",
    time_limit_s: float | None = None,
    options: SpaceOptions = SpaceOptions(),
    tick: TickFn | None = None,
) -> tuple[Point, list[Point]]:
    """The optimum, and the optimum with one node more and one node fewer of each type. Each changed point carries
    extra delta_time_s and delta_cost_usd against the base (when both have plans).

    Exact re-use: with one node fewer of a type the base plan does not use up, the base optimum stays optimal (the
    feasible set shrank around it), so no solve. One node more keeps the base plan feasible: it is the warm start."""
    kw = dict(solver=solver, time_limit_s=time_limit_s, options=options)
    base = solve_point(problem, budget, label="as given", **kw)
    total = 2 * len(problem.cluster.node_types)
    done = 0
    if tick is not None:
        tick(done, total, f"base: {base.result.status}")
    changes: list[Point] = []
    for node in problem.cluster.node_types:
        used = base.estimate.nodes.get(node.name, 0) if base.estimate is not None else 0
        for delta in (+1, -1):
            count = node.num_nodes_available + delta
            done += 1
            word = "one more" if delta > 0 else "one fewer"
            label = f"{word} {node.name} node ({count} available)"
            if count < 0:
                continue
            edited = _with_count(problem, node.name, count)
            if delta < 0 and base.result.status == "optimal" and used <= count:
                point = Point(budget=budget, result=_copy(base.result), problem=edited, how="reused", label=label)
            else:
                warm = base.plan if delta > 0 else None
                point = solve_point(edited, budget, label=label, warm_start=warm, **kw)
            if base.estimate is not None and point.estimate is not None:
                point.extra["delta_time_s"] = point.estimate.training_time_s - base.estimate.training_time_s
                point.extra["delta_cost_usd"] = point.estimate.cost_usd - base.estimate.cost_usd
            changes.append(point)
            if tick is not None:
                tick(done, total, label)
    return base, changes


def _unproven(point: Point, side: str) -> str | None:
    """'the change: feasible, gap 6.20%' for a side whose plan is not proven optimal (None when it is)."""
    result = point.result
    if result.plan is None or result.status == "optimal":
        return None
    gap = "gap unknown" if result.gap is None else f"gap {result.gap:.2%}"
    return f"{side}: {result.status}, {gap}"


def describe_change(point: Point, base: Point | None = None) -> str:
    """'one more a100 node (2 available): -9h 0m, +$1,200' (or why there is no plan). Given the base, a difference
    between plans not both proven optimal says so, with each unproven side's status and gap, as solve's headline
    does: '... -5d 17h, -$3,419 (not proven: the change: feasible, gap 6.20%; as given: feasible, gap 8.10%)'."""
    name = point.label
    if point.plan is None:
        return f"{name}: {point.result.status}" + (f" ({point.reason})" if point.reason else "")
    dt, dc = point.extra.get("delta_time_s"), point.extra.get("delta_cost_usd")
    sides = [_unproven(point, "the change")] + ([_unproven(base, "as given")] if base is not None else [])
    sides = [s for s in sides if s is not None]
    unproven = f" (not proven: {'; '.join(sides)})" if sides else ""
    if dt is None or dc is None:
        return (f"{name}: {format_duration(point.estimate.training_time_s)}, {format_usd(point.estimate.cost_usd)}"
                f"{unproven}")
    if abs(dt) < 0.5 and abs(dc) < 0.005:
        return f"{name}: no change{unproven}"
    time_part = ("-" if dt < 0 else "+") + format_duration(abs(dt)) if abs(dt) >= 0.5 else "same time"
    cost_part = ("-" if dc < 0 else "+") + format_usd(abs(dc)) if abs(dc) >= 0.005 else "same cost"
    return f"{name}: {time_part}, {cost_part}{unproven}"


# ---- brute force (for tests and small instances) ------------------------------------------------------------

def enumerate_plans(problem: Problem, budget: Budget = Budget(),
                    options: SpaceOptions = SpaceOptions()) -> Iterator[tuple[Plan, Estimate]]:
    """Every plan of the search space that meets the budget, priced, as exhaustive.py enumerates them (the least
    recomputation that fits each stage, which is never slower nor dearer than more)."""
    from optsearch.baselines.exhaustive import (
        _allowed, _degree_candidates, _least_recompute, _stage_counts, partitions, type_sequences,
    )
    from optsearch.candidates import kinds_split_allowed
    from optsearch.costmodel import (
        ddp_average_on, distributed_optimizer_settings, overlap_grad_reduce_on, overlap_param_gather_settings,
    )

    num_layers = problem.model.num_layers
    for tp, dp, mbs, uses, cp in _degree_candidates(problem, budget, options):
        # dist: the search's settings (costmodel.distributed_optimizer_settings: both under the overlap, else on)
        for ep, pp, v, dist, gather in ((e, p, v, o, a) for e in ep_candidates(problem, tp, dp, options)
                                        for p, v in _stage_counts(problem, options, dp, mbs)  # v: where allowed
                                        for o in distributed_optimizer_settings(problem, dp, cp, v)
                                        # --overlap-param-gather: both at pp > 1 (the search's copies, 7f)
                                        for a in overlap_param_gather_settings(problem, dp, cp, v, p, o)):
            for types in type_sequences(uses, pp, budget.max_gpus, tp * cp * dp, _allowed(problem, options)):
                for chunks in partitions(num_layers // v, pp):
                    parts = tuple(v * k for k in chunks)
                    if options.kinds_split_at_stages and not kinds_split_allowed(problem, list(parts)):
                        continue  # a stage with encoder and decoder layers (as exhaustive.py)
                    stages = tuple(Stage(node_type=t, num_layers=k, recompute=options.recompute_modes[0])
                                   for t, k in zip(types, parts))
                    plan = Plan(tp=tp, dp=dp, micro_batch_size=mbs, stages=stages, ep=ep, cp=cp,
                                distributed_optimizer=dist, virtual_stages=v,
                                overlap_grad_reduce=overlap_grad_reduce_on(problem, dp, cp, v),  # as the search
                                overlap_param_gather=gather,
                                ddp_average_in_collective=ddp_average_on(problem, dp, cp))
                    found = _least_recompute(problem, plan, options)
                    if found is not None and not budget_violations(found[0], found[1], budget):
                        yield found


def non_dominated(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The non-dominated (time, cost) pairs, fastest first (equal pairs once)."""
    out: list[tuple[float, float]] = []
    for t, c in sorted(set(points)):
        if not out or c < out[-1][1]:
            out.append((t, c))
    return out


def brute_force_frontier(problem: Problem, budget: Budget = Budget(),
                         options: SpaceOptions = SpaceOptions()) -> list[tuple[float, float]]:
    """The exact (time, cost) frontier by enumerating every plan: the reference for `pareto` on small instances."""
    return non_dominated([(e.training_time_s, e.cost_usd) for _, e in enumerate_plans(problem, budget, options)])
