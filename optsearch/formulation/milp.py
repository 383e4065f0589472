"""PuLP backend: the neutral model as a MILP solved by PuLP's bundled CBC.

CBC through PuLP reports status "Optimal" even when it stopped at its time limit with an incumbent, so the status
comes from `prob.sol_status` (1 = proven optimal, 2 = integer feasible, not proven) and CBC's log ("Problem proven
infeasible" overrides a sol_status of 1, see below), and the proven bound from the log ("Lower bound" / "Objective
value" lines).
"""

from __future__ import annotations

import os
import re
import tempfile

import pulp

from optsearch.formulation.linear import LinearModel, Solution

# Rows are scaled so that CBC's absolute feasibility tolerance (1e-7) stays small: times in milliseconds (a budget row
# can then be overshot by 1e-10 s at most), bytes in GiB (coefficients within a few orders of the time rows).
UNIT_SCALE = {"count": 1.0, "time": 1e3, "bytes": 1.0 / 2**30, "rate": 1.0}


class PulpCbc:
    name = "cbc"

    def __init__(self, threads: int = 1, rel_gap: float = 1e-9, cuts: bool = False):
        self.threads = threads
        self.rel_gap = rel_gap
        self.cuts = cuts

    def solve(self, model: LinearModel, time_limit_s: float | None, hint: dict[str, float] | None = None) -> Solution:
        """hint is not passed to CBC (PuLP's warm start writes files); the search is the same without it."""
        if model.infeasible_rows:
            return Solution("infeasible", {}, None, None)
        prob = pulp.LpProblem("optsearch", pulp.LpMinimize)
        xs = {}
        for v in model.variables.values():
            if v.kind == "bool":
                xs[v.name] = pulp.LpVariable(v.name, cat=pulp.LpBinary)
            elif v.kind == "int":
                xs[v.name] = pulp.LpVariable(v.name, lowBound=v.lb, upBound=v.ub, cat=pulp.LpInteger)
            else:
                xs[v.name] = pulp.LpVariable(v.name, lowBound=v.lb, upBound=v.ub)
        obj_scale = UNIT_SCALE[model.objective_unit]
        prob += pulp.lpSum(coef * obj_scale * xs[n] for n, coef in model.objective.terms.items())
        for con in model.constraints:
            k = UNIT_SCALE[con.unit]
            expr = pulp.lpSum(coef * k * xs[n] for n, coef in con.lin.terms.items())
            rhs = con.rhs * k
            if con.sense == "<=":
                prob += (expr <= rhs, con.name)
            elif con.sense == ">=":
                prob += (expr >= rhs, con.name)
            else:
                prob += (expr == rhs, con.name)
        # CBC's preprocessing can post-process a model into an infeasible point and still report "Optimal"
        # ("Postprocessed model is infeasible - possible tolerance issue"), seen on 3-stage instances here, so it is
        # off. No cutting planes: CBC's root cuts have cut off the optimum (an "optimal" 2.5e-6 above it) and every
        # feasible point (an "infeasible" with both budgets at a feasible plan's values); with cuts off both solved
        # right (issue 14). The proof then rests on LP bounds and branching alone.
        options = ["preprocess off", "primalTolerance 1e-9", "integerTolerance 1e-9"] + ([] if self.cuts else ["cuts off"])
        try:
            prob, log = _run_cbc(prob, self, time_limit_s, options)
        except pulp.PulpSolverError:
            # CBC 2.10.3 (PuLP 3.3's) dies with a segmentation fault when its bound tightening proves a model
            # infeasible with preprocessing off and a solution file requested, which PuLP always requests (a 4-layer
            # toy, minimize cost). With preprocessing on the same model ends normally; a point it returns is
            # re-priced and row-checked by the solver, and an "infeasible" before any plan is re-checked by CP-SAT.
            prob, log = _run_cbc(prob, self, time_limit_s, ["preprocess on"] + options[1:])
        sol_status = prob.sol_status
        if "Problem proven infeasible" in log:
            # PuLP 3.3 has reported sol_status 1 ("Optimal") with the LP relaxation's fractional point after CBC's
            # log said "Result - Problem proven infeasible" (a tight incumbent cut on a one-stage model; the row
            # check in the solver caught it). The log decides.
            status = "infeasible"
        elif sol_status == pulp.LpSolutionOptimal and "Stopped on time" not in log:
            status = "optimal"
        elif sol_status in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible):
            status = "feasible"
        elif prob.status == pulp.LpStatusInfeasible or "infeasible" in log.lower():
            status = "infeasible"
        else:
            status = "unknown"
        if status in ("optimal", "feasible"):
            values = {n: (x.value() or 0.0) for n, x in xs.items()}
            if status == "feasible" and any(abs(values[v.name] - round(values[v.name])) > 1e-6
                                            for v in model.variables.values() if v.kind in ("bool", "int")):
                # Stopped on time with no incumbent ("Objective value: 1e50" in the log), yet PuLP says integer
                # feasible and hands back a fractional point (seen under the slower-than rows with a 0.05 s limit).
                return Solution("unknown", {}, None, _lower_bound(log, obj_scale))
            objective = pulp.value(prob.objective) / obj_scale
            bound = objective if status == "optimal" else _lower_bound(log, obj_scale)
            return Solution(status, values, objective, bound)
        return Solution(status, {}, None, _lower_bound(log, obj_scale) if status == "unknown" else None)


def _run_cbc(prob: pulp.LpProblem, backend: PulpCbc, time_limit_s: float | None,
             options: list[str]) -> tuple[pulp.LpProblem, str]:
    """Solve prob with PuLP's CBC under options; the problem (with its values) and CBC's log."""
    fd, log_path = tempfile.mkstemp(prefix="optsearch-cbc-", suffix=".log")
    os.close(fd)
    try:
        solver = pulp.PULP_CBC_CMD(msg=False, timeLimit=time_limit_s, threads=backend.threads,
                                   gapRel=backend.rel_gap, logPath=log_path, options=options)
        prob.solve(solver)
        with open(log_path) as f:
            return prob, f.read()
    finally:
        os.unlink(log_path)


def _lower_bound(log: str, obj_scale: float) -> float | None:
    found = re.findall(r"Lower bound:\s*([-+0-9.eE]+)", log)
    if not found:
        return None
    return float(found[-1]) / obj_scale
