"""The middle level of the cost rows: the joint rent x time floor of many degrees at once (issue 14, item 3, round 20,
costmid; optsearch/middle.py, solver.MIDDLE_JOINT, solver.MIDDLE_AS_REFINED).

middle.joint_floors_many must be a valid lower bound on rent x iteration time of every plan of its candidate (every
recomputation mode of every stage, block recomputation at every N, every layer split and type sequence, every ep of
an MoE model, v = 1 and interleaved v = 2) that meets the deadline it is given, and infinite only where no plan meets
it: checked against every plan of roomy, memory-tight, T5-like and MoE instances, with no deadline and with the
deadline at a feasible plan's exact time, with every breakpoint and with a coarse grid of two. A floor that takes a
coarse segment's layers at its lower end (too few layers per stage, so too dear a rent) is caught. With every
breakpoint the floor equals bounds._joint_cost_rate_s (the refined bound's joint term). And solves with the middle
level on answer what brute force answers, with both backends, with the level taken."""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import replace
from unittest import mock

import numpy as np
import pytest

import optsearch.costmodel as cm
from optsearch import middle, solver as solver_module
from optsearch.baselines.exhaustive import partitions, type_sequences
from optsearch.bounds import _aggregate_arrays, _joint_cost_rate_s, degree_terms
from optsearch.candidates import SpaceOptions, ep_candidates, interleaving_allowed
from optsearch.plan import RECOMPUTE_MODES, Plan, Stage
from optsearch.search import BOUND_SLACK
from optsearch.spec.budget import Budget

from test_refined_arrays import _t5_tight
from test_solver import assert_backends_equal_brute_force, usable_degrees
from test_solver_memory import issue_example
from test_moe_inflight_bound import _tight_problem


def _every_mode(problem, plan):
    """(plan, estimate) of every recomputation of the plan that fits: each stage in each mode, and (v = 1) block
    recomputation at every N."""
    for modes in itertools.product(RECOMPUTE_MODES, repeat=plan.pp):
        variant = replace(plan, stages=tuple(replace(s, recompute=r) for s, r in zip(plan.stages, modes)))
        est = cm.estimate(problem, variant)
        if est.fits:
            yield est
    if plan.virtual_stages == 1:
        stages = tuple(replace(s, recompute="full" if s.num_layers > 0 else "none") for s in plan.stages)
        for n in range(1, max(s.num_layers for s in plan.stages) + 1):
            est = cm.estimate(problem, replace(plan, stages=stages, recompute_num_layers=n))
            if est.fits:
                yield est


def _plans(problem, options, tp, mbs, dp, uses, ep, pp, v, every_mode=True):
    """Every plan's estimate of the candidate (tp, b, dp, uses, ep, pp, v), as the search prices its settings: each
    layout in every recomputation mode, or (every_mode False: a roomy instance, where no recomputation is faster or
    cheaper than none) without recomputation."""
    if not interleaving_allowed(problem, pp, dp, mbs, v):
        return
    for types in type_sequences(list(uses), pp, None, tp * dp):
        for parts in partitions(problem.model.num_layers, pp):
            if any(n % v for n in parts):
                continue
            plan = Plan(tp=tp, dp=dp, micro_batch_size=mbs, ep=ep, virtual_stages=v,
                        stages=tuple(Stage(node_type=t, num_layers=n) for t, n in zip(types, parts)),
                        distributed_optimizer=cm.distributed_optimizer_on(problem.job, dp),
                        overlap_grad_reduce=cm.overlap_grad_reduce_on(problem, dp))
            if every_mode:
                yield from _every_mode(problem, plan)
            elif (est := cm.estimate(problem, plan)).fits:
                yield est


def _roomy():
    """Two types (a cheap slow GPU, a dear fast one), 4 layers: rent and time pull apart."""
    from test_solver import make_problem
    from optsearch.spec import GpuSpec

    gpus = [GpuSpec(name=f"G{i}", memory_gib=40.0, peak_fp16_tflop_per_s=p, hbm_gbyte_per_s=900.0)
            for i, p in enumerate([125.0, 312.0])]
    node_types = [dict(name=f"t{i}", gpu=f"G{i}", gpus_per_node=1, num_nodes_available=3,
                       price_usd_per_node_hour=price, intra_node_link="nvlink", intra_node_gbyte_per_s=150.0,
                       inter_node_gbit_per_s=100.0) for i, price in enumerate([1.0, 3.0])]
    return make_problem(layers=4, hidden=512, heads=4, gbs=8, node_types=node_types, gpus=gpus, seq=512)


def _instances():
    """(name, problem, options): roomy two types, the issue's memory-tight one, a memory-tight T5-like one, and a
    memory-tight MoE one (ep 1 and more)."""
    return [("roomy", _roomy(), SpaceOptions(micro_batch_sizes=(1,), max_stages=3, virtual_stages=(1, 2))),
            ("tight", issue_example(nodes=3, layers=4), SpaceOptions(micro_batch_sizes=(1, 2), max_stages=3,
                                                                     virtual_stages=(1, 2))),
            ("t5", _t5_tight(), SpaceOptions(micro_batch_sizes=(1, 2), max_stages=2)),
            ("moe", _tight_problem(), SpaceOptions(micro_batch_sizes=(1,), max_stages=2))]


@functools.lru_cache(maxsize=None)
def _table(case: int) -> tuple:
    """The instance's candidates with their plans, enumerated once per test run: (problem, options, [(terms, pp, v,
    [(rent x iteration, training time)] of every plan)])."""
    name, problem, options = _instances()[case]
    rows = []
    for tp, mbs, dp, uses in usable_degrees(problem, options):
        for ep in ep_candidates(problem, tp, dp):
            d = degree_terms(problem, tp, dp, mbs, uses, ep)
            for pp, v in itertools.product(range(2, options.max_stages + 1), options.virtual_stages):
                ests = [(e.usd_per_hour * e.iteration_time_s, e.training_time_s)
                        for e in _plans(problem, options, tp, mbs, dp, uses, ep, pp, v, name != "roomy")]
                if ests:
                    rows.append((d, pp, v, ests))
    return problem, options, rows


def _least_ratios(case: int, grids=(None, 2)) -> tuple[dict, int]:
    """Over every candidate and plan of the instance: ({grid: the least plan rent x iteration / floor}, plans
    compared) for each grid (marks_most: None, every breakpoint here; 2, a coarse one): with no deadline, and with
    the deadline at each candidate's median plan's exact time (the floors under it against the plans that meet it;
    an infinite floor where a plan meets it gives a ratio of 0)."""
    problem, options, rows = _table(case)
    least, compared = dict.fromkeys(grids, math.inf), 0
    most, vs = options.max_stages, tuple(options.virtual_stages)
    for d, pp, v, ests in rows:
        deadline = sorted(t for _, t in ests)[len(ests) // 2]
        meet = [x for x, t in ests if t <= deadline]
        compared += len(ests)
        for g in grids:
            free = middle.joint_floors_many(problem, [d], most, vs, marks_most=g)[0][v][pp - 1]
            under = middle.joint_floors_many(problem, [d], most, vs, deadline * BOUND_SLACK / problem.iterations,
                                             marks_most=g)[0][v][pp - 1]
            for floor, xs in ((free, [x for x, _ in ests]), (under, meet)):
                least[g] = min(least[g], min(xs) / floor if floor > 0 else math.inf)
    return least, compared


@pytest.mark.parametrize("case", range(4))
def test_the_middle_floor_lies_below_every_plan_over_every_mode_kind_and_deadline(case):
    least, compared = _least_ratios(case)
    assert compared > 0, case
    assert min(least.values()) >= 1 - 1e-9, (case, least)


def _invalid_marks(d, e, most):
    """A deliberately invalid grid: each coarse segment's layers taken at its own lower end (too few layers per
    stage for the plans later in the segment, so too dear a rent)."""
    lower, _ = _real_marks(d, e, 10**6)
    ix = np.unique(np.linspace(0, len(lower) - 1, 2).round().astype(np.int64))
    return lower[ix], np.concatenate([lower[ix][:-1], [math.inf]])


_real_marks = middle._marks


def test_a_floor_with_each_segments_layers_at_its_lower_end_is_caught():
    with mock.patch.object(middle, "_marks", _invalid_marks):
        least, _ = _least_ratios(0, (2,))
    assert least[2] < 1 - 1e-6, least


def test_with_every_breakpoint_the_floor_is_the_refined_bounds_joint_term():
    for name, problem, options in _instances()[:3]:
        L, most = problem.model.num_layers, options.max_stages
        pps = np.arange(1, most + 1)
        for tp, mbs, dp, uses in usable_degrees(problem, options):
            d = degree_terms(problem, tp, dp, mbs, uses)
            got = middle.joint_floors_many(problem, [d], most, (1,), marks_most=10**6)[0][1]
            ok, _, _, _, total, comm = _aggregate_arrays(problem, d, pps, False)
            for pp in range(2, most + 1):
                if ok[pp - 1]:
                    joint = _joint_cost_rate_s(d, pp, L, float(total[pp - 1]), float(comm[pp - 1]), None, None)
                    assert math.isclose(got[pp - 1], joint, rel_tol=1e-8), (name, tp, mbs, dp, pp, got, joint)


@pytest.mark.parametrize("case", range(2))
def test_solves_with_the_middle_level_answer_brute_force_with_both_backends(case):
    """Cost; cost under a deadline at the fastest plan's time x 1.2 and at the optimum's exact time; and under a cost
    budget at the optimum's exact cost and just below it (infeasible): both backends answer what brute force answers
    with the middle level on (in batches of three degrees), and the level is taken."""
    name, problem, options = _instances()[case]
    taken = []
    real = solver_module._middle_bound

    def counted(*args):
        got = real(*args)
        taken.append(got is not None)
        return got

    with mock.patch.object(solver_module, "_middle_bound", counted), \
            mock.patch.object(solver_module, "MIDDLE_BATCH", 3):
        truth = assert_backends_equal_brute_force(problem, Budget(objective="cost"), options)
        fast = solver_module.solve(problem, Budget(objective="time"), options=options).estimate
        for deadline in (fast.training_time_s * 1.2, truth.estimate.training_time_s):
            assert_backends_equal_brute_force(problem, Budget(objective="cost", max_time_s=deadline), options)
        for cap in (truth.estimate.cost_usd, truth.estimate.cost_usd * 0.999):  # at the optimum, and below it
            assert_backends_equal_brute_force(problem, Budget(objective="cost", max_cost_usd=cap), options)
    assert any(taken), name
