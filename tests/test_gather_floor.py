"""The gather's floor by pp (issue 15, gatherfloor; docs/cost-model.md 7f, docs/solver.md "The gather floor by pp").
With --overlap-param-gather searched the search turns the flag on only for one-stage plans
(costmodel.overlap_param_gather_on), so only pp = 1 candidates lose the all-gather's floor on A
(bounds.grad_overlap_floor(..., pp)): DegreeTerms.alpha is the floor of every pp (0), alpha_multi the floor of
pp > 1 candidates (alpha x 2 / (g + 2), the gather exposed after the step, as before the flag), and every bound of one
candidate takes alpha_at(pp). Checked: every bound lies below every plan of every pp, on a fixed instance and on
random ones; the old floor at pp = 1 puts a bound above a plan with the gather on; the pp > 1 bounds are higher than
with the zeroed floor; cheap_bounds stays equal to candidate_bound bit for bit."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from draws import draws

from optsearch import bounds, inflight
from optsearch.baselines.exhaustive import count_plans
from optsearch.bounds import candidate_bound, cheap_bounds, grad_overlap_floor
from optsearch.costmodel import WEIGHT_BYTES_PER_PARAM, gradient_bytes
from optsearch.candidates import SpaceOptions
from optsearch.solver import Memo
from optsearch.spec.budget import Budget

from test_param_gather_search import _check_bounds, _gather, _many_buckets_problem
from test_solver import MAX_PLANS, instances, usable_degrees

OPTIONS = SpaceOptions(micro_batch_sizes=(2, 4), recompute_modes=("none",), max_stages=2)


def _terms(problem, options):
    """(pp, DegreeTerms) of every usable degree with the distributed optimizer on, each pp of the space."""
    memo = Memo(problem, options)
    for tp, mbs, dp, uses in usable_degrees(problem, options):
        d = memo.degree_terms(tp, dp, mbs, uses, 1, 1, None)
        if d.distributed_optimizer:
            yield d


def test_floor_by_pp_by_hand():
    """alpha_at(1) = 0 (the gather may hide behind the first forward), alpha_at(2) = alpha_full x 2 / (g + 2) (the
    all-gather stays after the step); grad_overlap_floor with pp None (any pp) is the least of the two: 0."""
    problem = _many_buckets_problem()
    g = gradient_bytes(problem.job)
    seen = 0
    for d in _terms(problem, OPTIONS):
        assert d.alpha_at(1) == d.alpha and all(a == 0.0 for a in d.alpha) and d.alpha_min_at(1) == 0.0
        want = [a * WEIGHT_BYTES_PER_PARAM / (g + WEIGHT_BYTES_PER_PARAM) for a in d.alpha_full]
        assert d.alpha_at(2) == pytest.approx(want, rel=1e-15) and d.alpha_min_at(3) == pytest.approx(min(want))
        assert min(want) > 0
        seen += 1
    assert seen > 0
    assert grad_overlap_floor(problem, True, (1.0,)) == (0.0,)
    assert grad_overlap_floor(problem, True, (1.0,), pp=2) == pytest.approx((2 / (g + 2),))
    no_gather = replace(problem, overlap_param_gather=False)  # the flag not searched: one floor for every pp
    assert grad_overlap_floor(no_gather, True, (1.0,)) == grad_overlap_floor(no_gather, True, (1.0,), pp=1)


def test_bounds_of_every_pp_lie_below_every_plan():
    """Cheap, refined, in-flight and positional bounds below every plan of pp 1 and 2 (the gather on at pp = 1),
    time and cost."""
    problem = _many_buckets_problem()
    for objective in ("time", "cost"):
        assert _check_bounds(problem, OPTIONS, Budget(objective=objective)) > 0


def test_the_old_floor_at_pp_1_fails(monkeypatch):
    """Mutant: the pp > 1 floor applied at pp = 1 too (grad_overlap_floor ignoring pp) puts a bound above a one-stage
    plan with the gather on."""
    real = grad_overlap_floor

    def ignoring_pp(problem, distributed, alpha, pp=None):
        return real(problem, distributed, alpha, 2)

    monkeypatch.setattr(bounds, "grad_overlap_floor", ignoring_pp)
    monkeypatch.setattr(inflight, "grad_overlap_floor", ignoring_pp)
    assert _check_bounds(_many_buckets_problem(), OPTIONS, Budget(objective="time")) == -1


def test_a_floor_above_the_gather_at_pp_2_fails(monkeypatch):
    """Mutant: 1.5 x the pp > 1 floor puts a bound above a plan of pp 2 (the plans of pp > 1 are compared closely
    enough to see a floor above the gather)."""
    real = grad_overlap_floor

    def too_high(problem, distributed, alpha, pp=None):
        out = real(problem, distributed, alpha, pp)
        return tuple(1.5 * a for a in out) if pp is not None and pp > 1 else out

    monkeypatch.setattr(bounds, "grad_overlap_floor", too_high)
    monkeypatch.setattr(inflight, "grad_overlap_floor", too_high)
    assert _check_bounds(_many_buckets_problem(), OPTIONS, Budget(objective="time")) == -1


def test_pp_above_1_bounds_gain_and_cheap_bounds_agree_bit_for_bit():
    """At pp 2 the cheap bound is above the one with the zeroed floor (the change has an effect); at pp 1 it is the
    same; cheap_bounds equals candidate_bound(refined=False) bit for bit at both."""
    problem = _many_buckets_problem()
    gained = 0
    for d in _terms(problem, OPTIONS):
        zeroed = replace(d, alpha_multi=(), alpha_multi_min=0.0)
        ok, it, _, cost = cheap_bounds(problem, d, np.array([1, 2]))
        for i, pp in enumerate((1, 2)):
            b = candidate_bound(problem, d, pp, None, refined=False)
            if not b.feasible:
                continue
            assert ok[i] and it[i] == b.iteration_s and cost[i] == b.cost_per_iteration_usd
            z = candidate_bound(problem, zeroed, pp, None, refined=False)
            assert b.iteration_s >= z.iteration_s
            gained += pp == 2 and b.iteration_s > z.iteration_s
            if pp == 1:
                assert b.iteration_s == z.iteration_s
    assert gained > 0


@settings(max_examples=draws(6), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(instances())
def test_random_instances_every_bound_below_every_plan(case):
    problem, options, objective, _, _ = case
    problem = _gather(problem)
    assume(count_plans(problem, Budget(), options, limit=MAX_PLANS) <= MAX_PLANS)
    assert _check_bounds(problem, options, Budget(objective=objective)) >= 0
