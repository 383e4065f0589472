"""The errors optsearch raises on purpose. The CLI turns each into one line and an exit code.

    OptsearchError
      SpecError             bad input spec, plan or option          exit 2
      ProfileError          a profile table lacks or garbles data   exit 2
      UnsupportedPlanError  a plan Megatron-LM cannot run           exit 2
      InfeasibleError       no plan meets the budgets               exit 1
      ConsistencyError      a solver and the cost model disagree    exit 3 (a bug, never user error)
"""

from __future__ import annotations


class OptsearchError(Exception):
    """Base class. `exit_code` is what the CLI exits with."""

    exit_code = 2


class SpecError(OptsearchError):
    """A spec, plan or option is malformed or inconsistent. The message names file, field, value and rule."""

    exit_code = 2


class ProfileError(OptsearchError):
    """A profile table is malformed, or lacks an entry that was asked for (never silently guessed)."""

    exit_code = 2


class UnsupportedPlanError(OptsearchError):
    """A plan that the cost model can price but Megatron-LM cannot run (or a format cannot express)."""

    exit_code = 2


class InfeasibleError(OptsearchError):
    """No plan meets the budgets. The message names the budget that binds and the nearest feasible value."""

    exit_code = 1


class ConsistencyError(OptsearchError):
    """The decoded plan, re-priced by the cost model, disagrees with the solver, or a backend rejects a model it was
    given: a bug, never user error."""

    exit_code = 3
