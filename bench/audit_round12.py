"""Post-merge audit of round 12 (audit4): bench/audit_round11.py's seeded sweep (both backends against brute force on
edge budgets, honest incumbents), optionally with every aggregate refined bound taken from the tables at once
(costbound: bounds.MAX_COMPOSITIONS = 0 and solver.REFINED_TABLES_FROM = 1, so that small instances reach
bounds.refined_tables / refined_bound_at, which they otherwise never do). Not part of the test suite, e.g.

    nice -n 5 python bench/audit_round12.py --force-tables --kind tight --seeds 0-39 --checks solve,edge \
        --paths default,limit

Every other argument is audit_round11's (--kind, --seeds, --checks, --paths, --patch NAME=VALUE on solver)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

if __name__ == "__main__":
    force = "--force-tables" in sys.argv
    sys.argv = [a for a in sys.argv if a != "--force-tables"]
    if force:
        from optsearch import bounds
        from optsearch import solver as solver_module

        bounds.MAX_COMPOSITIONS = 0  # every pp > 1 aggregate (read at call time in composition_bounds, refined_tables)
        solver_module.REFINED_TABLES_FROM = 1  # the tables on a degree's first ask
        calls = [0]
        at = solver_module.refined_bound_at

        def counted(*args, **kwargs):
            calls[0] += 1
            return at(*args, **kwargs)

        solver_module.refined_bound_at = counted
    import audit_round11

    code = audit_round11.main()
    if force:
        print({"refined_bound_at_calls": calls[0]})  # the tables were reached
    sys.exit(code)
