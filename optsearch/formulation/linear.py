"""A tiny backend-neutral linear-expression layer, so the constraint families are written once.

Variables are named with [A-Za-z0-9_] only (PuLP rewrites other characters, so names could collide). Three kinds:
binary, integer, and `time` (a non-negative quantity in seconds: continuous in the MILP, integer ticks in CP-SAT).
Each constraint says whether it is a time constraint (its non-time coefficients are seconds) so that CP-SAT can
scale it to integers in one place (units.py / cpsat.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal, Protocol

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")

VarKind = Literal["bool", "int", "time"]
INTEGRALITY_NOISE = 1e-8  # 10x CBC's integrality tolerance (milp.py sets 1e-9)
Sense = Literal["<=", ">=", "=="]
Unit = Literal["count", "time", "bytes", "rate"]


@dataclass(slots=True)
class Lin:
    """sum(coef[name] * var[name]) + const."""

    terms: dict[str, float] = field(default_factory=dict)
    const: float = 0.0

    @staticmethod
    def of(*pairs: tuple[float, str], const: float = 0.0) -> "Lin":
        lin = Lin(const=const)
        for coef, name in pairs:
            lin.add(coef, name)
        return lin

    def add(self, coef: float, name: str) -> "Lin":
        if coef:
            self.terms[name] = self.terms.get(name, 0.0) + coef
        return self

    def extend(self, other: "Lin", factor: float = 1.0) -> "Lin":
        for name, coef in other.terms.items():
            self.add(coef * factor, name)
        self.const += other.const * factor
        return self


@dataclass(frozen=True, slots=True)
class VarDef:
    name: str
    kind: VarKind
    lb: float
    ub: float


@dataclass(frozen=True, slots=True)
class Constraint:
    name: str
    lin: Lin
    sense: Sense
    rhs: float
    unit: Unit


@dataclass(slots=True)
class LinearModel:
    """A whole model in neutral form: variables, constraints, one objective to minimize."""

    variables: dict[str, VarDef] = field(default_factory=dict)
    constraints: list[Constraint] = field(default_factory=list)
    objective: Lin = field(default_factory=Lin)
    objective_unit: Unit = "time"
    infeasible_rows: list[str] = field(default_factory=list)  # rows with no variables that cannot hold

    def var(self, name: str, kind: VarKind, lb: float = 0.0, ub: float = 1.0) -> str:
        if not _NAME.match(name):
            raise ValueError(f"variable name {name!r} must match [A-Za-z][A-Za-z0-9_]*")
        if name in self.variables:
            raise ValueError(f"variable {name!r} defined twice")
        self.variables[name] = VarDef(name, kind, lb, ub)
        return name

    def violations(self, values: dict[str, float], rel: float = 1e-6, time_resolution_s: float = 1e-12,
                   allowance: dict[str, float] | None = None) -> list[str]:
        """Names of constraints (and integrality) the point breaks, beyond a relative tolerance (python-mip style).

        time_resolution_s: how finely the solver represents seconds (CP-SAT's tick); each term of a time row may be
        off by that much. allowance: by row name, how far above its right-hand side the backend was given a "<=" row
        (CpSat.solve's allowance on the budget rows): the point is checked against the rows the backend solved."""
        allowance = allowance or {}
        out = []
        values = dict(values)
        for v in self.variables.values():
            x = values.get(v.name, 0.0)
            if v.kind in ("bool", "int"):
                if abs(x - round(x)) > 1e-6:
                    out.append(f"{v.name} integral")
                values[v.name] = float(round(x))  # decoding rounds them too
        absolute = {"time": 1e-9, "bytes": 1.0, "count": 1e-9, "rate": 1e-6}
        for con in self.constraints:
            lhs = sum(coef * values.get(n, 0.0) for n, coef in con.lin.terms.items())
            scale = max(abs(con.rhs), *(abs(coef * values.get(n, 0.0)) for n, coef in con.lin.terms.items()))
            tol = rel * scale + absolute[con.unit]
            # A binary's term may be off by |coef| x the solver's integrality tolerance before the binary is rounded:
            # CBC returned v = -8.4e-9 s in v >= 7.45 b with b = 1.6e-16 (its bound on v is met within the same noise)
            tol += INTEGRALITY_NOISE * sum(abs(coef) for n, coef in con.lin.terms.items()
                                           if self.variables[n].kind != "time")
            if con.unit in ("time", "rate"):
                tol += time_resolution_s * (len(con.lin.terms) + 1) * max(1.0, *(abs(c) for c in con.lin.terms.values()))
            if con.sense == "<=":
                tol += allowance.get(con.name, 0.0)
            if (con.sense == "<=" and lhs > con.rhs + tol) or (con.sense == ">=" and lhs < con.rhs - tol) or (
                    con.sense == "==" and abs(lhs - con.rhs) > tol):
                out.append(f"{con.name} ({lhs:.6g} {con.sense} {con.rhs:.6g})")
        return out

    def add(self, name: str, lin: Lin, sense: Sense, rhs: float, unit: Unit) -> None:
        unknown = [v for v in lin.terms if v not in self.variables]
        if unknown:
            raise ValueError(f"constraint {name}: unknown variables {unknown}")
        if not lin.terms:  # 0 (sense) rhs: decide it now; backends would drop or reject an empty row
            value = rhs - lin.const
            holds = (0 <= value) if sense == "<=" else (0 >= value) if sense == ">=" else (value == 0)
            if not holds:
                self.infeasible_rows.append(name)
            return
        self.constraints.append(Constraint(name, lin, sense, rhs - lin.const, unit))


@dataclass(frozen=True, slots=True)
class Solution:
    status: Literal["optimal", "feasible", "infeasible", "unknown"]
    values: dict[str, float]
    objective: float | None  # in the model's objective units, as the solver reports it (unscaled)
    bound: float | None  # proven lower bound on the objective (unscaled)


class Backend(Protocol):
    name: str

    def solve(self, model: LinearModel, time_limit_s: float | None, hint: dict[str, float] | None = None
              ) -> Solution: ...
