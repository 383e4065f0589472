"""PuLP backend: the neutral model as a MILP solved by PuLP's bundled CBC.

CBC through PuLP reports status "Optimal" even when it stopped at its time limit with an incumbent, so the status
comes from `prob.sol_status` (1 = proven optimal, 2 = integer feasible, not proven) and CBC's log ("Problem proven
infeasible" overrides a sol_status of 1, see below), and the proven bound from the log ("Lower bound" / "Objective
value" lines).
"""

from __future__ import annotations

import os
import re
import signal
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
    """Solve prob with PuLP's CBC under options; the problem (with its values) and CBC's log.

    Every file of the solve (PuLP's .mps, .sol and .mst, CBC's log) lies in a directory of its own, removed however
    the solve ends. PuLP deletes its files only when CBC returns normally: its PulpSolverError (CBC's crash, see
    PulpCbc.solve) and a solve interrupted by an exception (the CLI's OutOfTime alarm, KeyboardInterrupt) left them in
    the temp directory (87 pairs of *-pulp.mps / *-pulp.sol in /tmp after round 10). An exception while CBC runs also
    ends CBC's process (_end_cbc): PuLP waits on it and would leave it running."""
    with tempfile.TemporaryDirectory(prefix="optsearch-cbc-") as tmp:
        log_path = os.path.join(tmp, "cbc.log")
        solver = pulp.PULP_CBC_CMD(msg=False, timeLimit=time_limit_s, threads=backend.threads,
                                   gapRel=backend.rel_gap, logPath=log_path, options=options)
        solver.tmpDir = tmp  # create_tmp_files puts the model and solution files here
        try:
            prob.solve(solver)
        except BaseException:
            _end_cbc(tmp)
            raise
        with open(log_path) as f:
            return prob, f.read()


def _end_cbc(tmp: str) -> None:
    """Kill (SIGKILL) and reap this process's children whose command line names the directory tmp: the CBC that
    _run_cbc started there, if it still runs. Where /proc is not readable (not Linux) nothing is done."""
    me = os.getpid()
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return
    for entry in entries:
        try:
            with open(f"/proc/{entry}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])  # the fields after "(comm)": state, ppid, ...
            if parent != me:
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if tmp.encode() not in f.read():
                    continue
            os.kill(int(entry), signal.SIGKILL)
            os.waitpid(int(entry), 0)
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile, or not ours to reap


def _lower_bound(log: str, obj_scale: float) -> float | None:
    found = re.findall(r"Lower bound:\s*([-+0-9.eE]+)", log)
    if not found:
        return None
    return float(found[-1]) / obj_scale
