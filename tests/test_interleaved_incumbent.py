"""The regress branch: an interleaved candidate that the in-flight bound sends back offers its v = 1 sibling's quick
plans and their interleaved variants (solver._interleaved) as incumbents. Incumbents only: each variant must be a
plan of the space, priced by the cost model, and the answer must stay brute force's on both backends."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, assume, given, settings
from draws import draws

from optsearch.baselines.exhaustive import count_plans
from optsearch.candidates import SpaceOptions, in_search_space
from optsearch.costmodel import estimate
from optsearch.plan import Plan, Stage
from optsearch.solver import Memo, _interleaved, _with_interleaved, solve
from optsearch.spec.budget import Budget

from test_interleaved import interleaved_instances
from test_solver import MAX_PLANS, assert_backends_equal_brute_force


def _plan(layers: tuple[int, ...], v: int = 1) -> Plan:
    return Plan(tp=1, dp=1, micro_batch_size=1, stages=tuple(Stage(node_type="t0", num_layers=n) for n in layers),
                virtual_stages=v)


def test_interleaved_variants_are_the_spaces_v_that_divide_every_stage():
    options = SpaceOptions(virtual_stages=(1, 2, 3, 4))
    assert [p.virtual_stages for p in _interleaved(_plan((6, 6)), options)] == [2, 3]
    assert [p.virtual_stages for p in _interleaved(_plan((4, 8)), options)] == [2, 4]
    assert _interleaved(_plan((3, 4)), options) == []  # no v > 1 divides both
    assert _interleaved(_plan((6, 6), v=2), options) == []  # only from v = 1 plans
    assert _interleaved(_plan((6, 6)), SpaceOptions(virtual_stages=(1,))) == []
    assert [p.stages for p in _interleaved(_plan((6, 6)), options)] == [_plan((6, 6)).stages] * 2  # same stages


@settings(max_examples=draws(8), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(interleaved_instances())
def test_interleaved_incumbents_are_priced_plans_of_the_space_and_the_optimum_stays(case):
    """Every variant _with_interleaved returns is in the space and carries the cost model's own estimate; the solve
    (which offers them as incumbents) equals brute force on both backends."""
    problem, options, objective, _ = case
    assume(count_plans(problem, Budget(), options, limit=MAX_PLANS) <= MAX_PLANS)
    memo = Memo(problem, options)
    v1 = replace(options, virtual_stages=(1,))
    found = solve(problem, Budget(objective=objective), options=v1)
    if found.plan is not None and 1 in options.virtual_stages:
        for plan, est in _with_interleaved(memo, [(found.plan, found.estimate)]):
            assert in_search_space(problem, plan, options)
            assert est.fits and est == estimate(problem, plan)
    assert_backends_equal_brute_force(problem, Budget(objective=objective), options)
