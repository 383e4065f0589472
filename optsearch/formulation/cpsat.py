"""OR-Tools CP-SAT backend: the neutral model with integer coefficients.

CP-SAT takes integers only. Time variables become integer ticks (`ticks_per_s` per second, chosen per model so the
largest time spans about 10^10 ticks and no row can overflow int64); every time row is multiplied by that and its
coefficients rounded once, here. Memory rows are rounded conservatively
(coefficients up, room down). Counts and scaled prices are integers already. The decoded plan is re-priced in
floating point by the cost model, so rounding never reaches a reported number; the solver's own objective is checked
against it within the rounding bound.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping

from optsearch.errors import ConsistencyError
from optsearch.formulation.linear import LinearModel, Solution

TIME_TICKS_MAX = 10**10  # the largest time variable's range in ticks
INT_ROOM = 2**62  # CP-SAT rejects a row whose sum of |coef| x |bound| may leave int64: keep a factor 2 spare




class _LazyCpModel:
    """OR-Tools' cp_model, imported at its first use (issue 14, item 3: first plans). It imports pandas, which with it
    was about half of optsearch's start-up (0.4-0.5 s of CPU of 0.8-0.9 s for `import optsearch.solver`, load 6);
    a search's first plan often comes from quick plans (formulation.heuristic), which need no CP-SAT. The first
    attribute read imports the module and puts it in this module's globals, so every later read is the module's own."""

    def __getattr__(self, name: str):
        from ortools.sat.python import cp_model as module

        globals()["cp_model"] = module
        return getattr(module, name)


cp_model = _LazyCpModel()


class _ZeroOneParams(Mapping):
    """{"search_branching": cp_model.FIXED_SEARCH}, the enum read when a solve asks for it (not at import)."""

    def __getitem__(self, key: str):
        if key != "search_branching":
            raise KeyError(key)
        return cp_model.FIXED_SEARCH

    def __iter__(self) -> Iterator[str]:
        return iter(("search_branching",))

    def __len__(self) -> int:
        return 1


_TICKS_LAST: list = []  # [model, its variables, rows and objective terms then, ticks_per_s]: the last model's value


def ticks_per_s(model: LinearModel) -> int:
    """A power of ten such that the largest time variable's upper bound spans about TIME_TICKS_MAX ticks, lowered
    until every time and rate row, and the objective, stays within INT_ROOM at its extremes. Each of those grows in
    proportion to the tick; a cost row over many blocks (256 nodes of each of four types) went past 2^63 at 10^10.

    The last model's value is kept (fastpath): one candidate's model is asked up to five times in a row (the budget
    rows' allowance, the solve, the point's check, solver._check), each a pass over every row. It is reused only while
    the model holds the same variables, the same rows and the same objective terms (lists compared element by element,
    by identity first, then by value), so a row added (a cut, an incumbent's row) or replaced computes it again
    (the budget rows' allowance is not in the model: CpSat.solve adds it in its own translation). Rows are taken as
    fixed once added (Constraint is frozen; LinearModel.add folds the expression's constant into the right-hand side
    then): a row whose Lin is changed in place afterwards would not be seen, and nothing does that after the model
    is built (formulation.model._amend edits rows while building)."""
    variables, rows, objective = list(model.variables.values()), list(model.constraints), dict(model.objective.terms)
    last = _TICKS_LAST
    if last and last[0] is model and last[1] == variables and last[2] == rows and last[3] == objective:
        return last[4]
    value = _ticks_per_s(model)
    last[:] = [model, variables, rows, objective, value]
    return value


def _ticks_per_s(model: LinearModel) -> int:
    """ticks_per_s's computation, uncached."""
    upper = max((v.ub for v in model.variables.values() if v.kind == "time"), default=1.0)
    exponent = max(3, min(13, math.floor(math.log10(TIME_TICKS_MAX / max(upper, 1e-12)))))
    spans = [_span_s(model, con.lin.terms, con.rhs) for con in model.constraints
             if con.unit in ("time", "rate") and not redundant(model, con)]
    widest = max(spans + [_span_s(model, model.objective.terms, 0.0), 1e-12])
    while exponent > 0 and 10**exponent * widest >= INT_ROOM:
        exponent -= 1
    return 10**exponent


def _span_s(model: LinearModel, terms: dict[str, float], rhs: float) -> float:
    """The largest magnitude a time row (or the objective) can reach, per tick: sum |coef| x |bound| + |rhs|."""
    variables = model.variables
    return sum(abs(c) * max(abs(variables[n].lb), abs(variables[n].ub)) for n, c in terms.items()) + abs(rhs)


def redundant(model: LinearModel, con) -> bool:
    """A one-sided row that every point within the variables' bounds meets: sum c x <= rhs with rhs at or above the
    largest value sum c x can take (>= likewise with the least). Such a row (a cost budget of $10^9 on a small job)
    is left out of the CP-SAT model, so its right-hand side does not coarsen the tick (it made the tick 10^-4 s, and
    a plan 10^-5 over a pareto time limit came back through the rounding)."""
    if con.sense not in ("<=", ">="):
        return False
    variables = model.variables
    sign = 1.0 if con.sense == "<=" else -1.0
    reach = 0.0
    for n, coef in con.lin.terms.items():
        v, c = variables[n], sign * coef
        # a time variable's CP-SAT domain ends at ceil(ub x ticks) + 1 ticks, at most 2 s past ub (ticks >= 1)
        ub = v.ub + 2.0 if v.kind == "time" else v.ub
        reach += c * (ub if c > 0 else v.lb)
    return sign * con.rhs >= reach + 1e-9 * (abs(reach) + 1.0)


def _int(x: float) -> int:
    return int(round(x))


def _weighted(terms: list[tuple[int, cp_model.IntVar]]) -> cp_model.LinearExpr:
    """sum c x in one call (building it term by term with + made every model about 20 ms slower)"""
    return cp_model.LinearExpr.weighted_sum([x for _, x in terms], [c for c, _ in terms])


# One worker with the LP relaxation at every node (linearization level 2). On FASOP's cluster this proved the same
# optima 2-3x faster than two workers at the default level, on 2 cores (docs/solver.md), and one worker is
# deterministic: the same inputs give the same plan, byte for byte. Presolve's inclusion detection is off
# (presolve_inclusion_work_limit 0): in OR-Tools 9.15 it certifies wrong optima (google/or-tools#5293). It was the root
# of both wrong OPTIMALs seen here, with probing (tests/test_cpsat_inclusion.py: 0.4388 s per iteration where 0.3693 s
# is feasible) and without (tests/test_cpsat_probing.py: 11.7 % above a feasible point); with it off both come back
# right at every probing level. Probing at level 1: with inclusion off, level 2 (CP-SAT's default) took T5's time
# solve on FASOP's cluster from 6.1 to 52 s of CPU, level 1 5.6 s and level 0 8.9 s (docs/solver.md).
DEFAULT_PARAMS = {"num_workers": 1, "linearization_level": 2, "presolve_inclusion_work_limit": 0,
                  "cp_model_probing_level": 1}
# Models whose only integer variables are 0-1 (pattern mode: one layer kind) search in the fixed order, booleans at 0
# first, with no hint. On the 63 models of FASOP's what-if bench the CP-SAT time fell from 6.1 s to 3.1 s, and on
# the pattern-mode models of six other model/cluster pairs it was lower or within 0.01 s (docs/solver.md). Models
# with integer layer counts (T5) stay on the automatic search: the fixed order timed out on them where it took
# seconds. The hint is dropped there because it always breaks the model's incumbent cut (it is the candidate's own
# best plan, which is the incumbent or worse), and the fixed search proved the cut infeasible about 10 % faster
# without it.
ZERO_ONE_PARAMS = _ZeroOneParams()  # {"search_branching": cp_model.FIXED_SEARCH}


class CpSat:
    name = "cpsat"

    def __init__(self, seed: int = 0, params: dict | None = None):
        self.seed = seed
        self.params = {**DEFAULT_PARAMS, **(params or {})}

    def solve(self, model: LinearModel, time_limit_s: float | None, hint: dict[str, float] | None = None,
              allowance: dict[str, float] | None = None) -> Solution:
        """Minimize. hint: values for some integer variables, where the search starts (it only steers the search).
        allowance: by row name, how far (in the row's own units) to raise a "<=" row's right-hand side in this
        translation only (solver._budget_allowance: the budget rows, for CP-SAT's rounding of them at a plan). The
        model is not changed: its rows stay as built for every other reader, and the tick is the model's own."""
        allowance = allowance or {}
        if model.infeasible_rows:
            return Solution("infeasible", {}, None, None)
        ticks = ticks_per_s(model)
        m = cp_model.CpModel()
        xs = {}
        is_time = {}
        for v in model.variables.values():
            if v.kind == "bool":
                xs[v.name] = m.new_bool_var(v.name)
            elif v.kind == "int":
                xs[v.name] = m.new_int_var(int(v.lb), int(v.ub), v.name)
            else:
                xs[v.name] = m.new_int_var(0, int(math.ceil(v.ub * ticks)) + 1, v.name)
            is_time[v.name] = v.kind == "time"
        for con in model.constraints:
            if redundant(model, con):
                continue
            terms = []
            rhs = con.rhs + allowance.get(con.name, 0.0) if con.sense == "<=" else con.rhs
            if con.unit in ("time", "rate"):
                # time vars are already in ticks; other coefficients (seconds per unit) scale by ticks
                for n, coef in con.lin.terms.items():
                    c = coef if is_time[n] else coef * ticks
                    terms.append((_int(c), xs[n]))
                rhs = rhs * ticks
                rhs_i = math.floor(rhs + 1e-6) if con.sense == "<=" else math.ceil(rhs - 1e-6) if con.sense == ">=" else _int(rhs)
            elif con.unit == "bytes":
                for n, coef in con.lin.terms.items():
                    terms.append((math.ceil(coef) if coef > 0 else math.ceil(coef), xs[n]))
                rhs_i = math.floor(rhs)
            else:  # counts: integer coefficients already; a fractional limit rounds inwards
                for n, coef in con.lin.terms.items():
                    terms.append((_int(coef), xs[n]))
                rhs_i = math.floor(rhs + 1e-9) if con.sense == "<=" else math.ceil(rhs - 1e-9) if con.sense == ">=" else _int(rhs)
            terms = [(c, x) for c, x in terms if c]
            if not terms:
                continue
            lo, hi = {"<=": (cp_model.INT_MIN, rhs_i), ">=": (rhs_i, cp_model.INT_MAX)}.get(con.sense, (rhs_i, rhs_i))
            m.add_linear_constraint(_weighted(terms), lo, hi)
        obj_terms = []
        for n, coef in model.objective.terms.items():
            obj_terms.append((_int(coef if is_time[n] else coef * ticks), xs[n]))
        m.minimize(_weighted(obj_terms))
        zero_one = all(v.kind != "int" for v in model.variables.values())
        for name, value in ({} if zero_one else hint or {}).items():
            if not is_time[name]:
                m.add_hint(xs[name], int(round(value)))
        solver = cp_model.CpSolver()
        solver.parameters.random_seed = self.seed
        for key, value in {**(ZERO_ONE_PARAMS if zero_one else {}), **self.params}.items():
            setattr(solver.parameters, key, value)
        if time_limit_s is not None:
            solver.parameters.max_time_in_seconds = max(0.01, time_limit_s)
        code = solver.solve(m)
        if code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            values = {n: float(solver.value(x)) / (ticks if is_time[n] else 1) for n, x in xs.items()}
            objective = solver.objective_value / ticks
            bound = solver.best_objective_bound / ticks
            return Solution("optimal" if code == cp_model.OPTIMAL else "feasible", values, objective, bound)
        if code == cp_model.INFEASIBLE:
            return Solution("infeasible", {}, None, None)
        if code == cp_model.MODEL_INVALID:  # never a time limit: say so rather than return "unknown"
            raise ConsistencyError(f"cpsat: the model is invalid: {m.validate()[:300]}")
        return Solution("unknown", {}, None, None)
