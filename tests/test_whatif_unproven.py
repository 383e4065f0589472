"""whatif --marginal's summary lines say when a difference is not proven (review finding 3): a side stopped at a time
limit ('feasible', with its gap) makes the difference an upper estimate, not a fact, and the line says so."""

from __future__ import annotations

from dataclasses import replace

import pytest

from optsearch import whatif
from optsearch.problem import build_problem
from optsearch.spec.budget import Budget
from test_whatif import CLUSTER, MODEL, OPTIONS, SOLVER


@pytest.fixture(scope="module")
def marginal():
    problem = build_problem(MODEL, CLUSTER, profile="analytic")
    return whatif.marginal(problem, Budget(objective="time"), solver=SOLVER, options=OPTIONS)


def _stopped(point: whatif.Point, gap: float) -> whatif.Point:
    """The point as a solve stopped at its time limit leaves it: the same plan, 'feasible', a bound gap below."""
    result = replace(point.result, status="feasible", bound=point.result.objective_value * (1 - gap))
    return replace(point, result=result)


def test_proven_sides_read_as_before(marginal):
    base, changes = marginal
    fewer_a100 = changes[1]
    line = whatif.describe_change(fewer_a100, base)
    assert line.startswith("one fewer a100 node (1 available): +") and "not proven" not in line
    assert line == whatif.describe_change(fewer_a100)


def test_an_unproven_side_is_named_with_its_status_and_gap(marginal):
    base, changes = marginal
    fewer_a100, fewer_t4 = changes[1], changes[-1]
    line = whatif.describe_change(_stopped(fewer_a100, 0.062), base)
    assert line.endswith("(not proven: the change: feasible, gap 6.20%)")
    line = whatif.describe_change(fewer_a100, _stopped(base, 0.081))
    assert line.endswith("(not proven: as given: feasible, gap 8.10%)")
    line = whatif.describe_change(_stopped(fewer_t4, 0.1), _stopped(base, 0.12))
    assert line == ("one fewer t4 node (1 available): no change "
                    "(not proven: the change: feasible, gap 10.00%; as given: feasible, gap 12.00%)")
