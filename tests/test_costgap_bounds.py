"""Cost-side bounds with every send of a stage at its own type's least send (issue 14, item 3, costgap round;
docs/solver.md, "Sends at the sender's own type"): bounds.sender_send_min_s, the cheap price-weighted work
(bounds._weighted_with_sends, inside the cheap bounds), the aggregate joint rent x time bound
(bounds._joint_cost_rate_s)
and the in-flight stage times (inflight.py). On instances where node types' NICs differ by up to 320x and stages
cross nodes (so a cheap type may send slowly), with memory-tight GPUs, context parallelism and block recomputation:
every bound lies below every brute-forced plan, also under the tightest deadline (each plan's own time); the
optimum equals brute force on both backends; on a deep one-type pipeline with a slow NIC the new terms are tight
(a bound 2 % higher fails)."""

from __future__ import annotations

from dataclasses import replace
from unittest import mock

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from draws import draws

from optsearch import bounds as bounds_module
from optsearch.bounds import (
    CandidateBound, _weighted_with_sends, candidate_bound, cheap_bounds, degree_terms, sender_send_min_s,
)
from optsearch.costmodel import interleaved_send_counts
from optsearch.inflight import sharpened
from optsearch.search import budget_violations
from optsearch.solver import Memo
from optsearch.candidates import SpaceOptions, node_uses
from optsearch.spec import GpuSpec
from optsearch.spec.budget import Budget

from test_inflight_bound import _plans
from test_solver import MAX_PLANS, assert_backends_equal_brute_force, make_problem
from optsearch.baselines.exhaustive import count_plans

REL = 1e-9


@st.composite
def slow_nic_instances(draw):
    """2-3 node types of one or two GPUs per node (stages of w >= 2 GPUs cross nodes), NICs of 10-3,200 Gbit/s, GPUs
    of 3-40 GiB (memory-tight ones recompute), 2-6 layers, up to 4 stages; per-stage modes, or one mode with block
    recomputation and cp in {1, 2}."""
    n_types = draw(st.integers(2, 3))
    gpus, nodes = [], []
    for i in range(n_types):
        gpus.append(GpuSpec(name=f"G{i}", memory_gib=draw(st.sampled_from([3.0, 4.0, 6.0, 12.0, 40.0])),
                            peak_fp16_tflop_per_s=draw(st.sampled_from([30.0, 125.0, 312.0])),
                            hbm_gbyte_per_s=draw(st.sampled_from([300.0, 2000.0]))))
        nodes.append(dict(name=f"t{i}", gpu=f"G{i}", gpus_per_node=draw(st.sampled_from([1, 2])),
                          num_nodes_available=draw(st.integers(1, 4)),
                          price_usd_per_node_hour=draw(st.floats(0.5, 30.0).map(lambda x: round(x, 4))),
                          intra_node_link="nvlink", intra_node_gbyte_per_s=draw(st.sampled_from([16.0, 300.0])),
                          inter_node_gbit_per_s=draw(st.sampled_from([10.0, 100.0, 3200.0]))))
    layers = draw(st.integers(2, 6))
    problem = make_problem(layers=layers, hidden=draw(st.sampled_from([512, 1024])),
                           heads=draw(st.sampled_from([4, 8])),
                           gbs=draw(st.sampled_from([2, 4, 8])), node_types=nodes, gpus=gpus,
                           seq=draw(st.sampled_from([512, 2048])))
    options = SpaceOptions(micro_batch_sizes=(1, 2), max_stages=draw(st.integers(2, 4 if layers <= 4 else 3)))
    if draw(st.booleans()):
        options = replace(options, uniform_recompute=True, block_recompute=True, context_parallel_sizes=(1, 2))
    return problem, options


def _price_weighted_s(problem, est) -> float:
    """sum_s p_s t_s of a priced plan (USD per GPU-hour x s)."""
    return sum(problem.node(s.node_type).price_usd_per_node_hour / problem.node(s.node_type).gpus_per_node * s.time_s
               for s in est.stages)


def _cost_bounds(problem, memo, d, cand, budget):
    """The candidate's cheap, aggregate refined (composition limit 0) and in-flight bounds under the budget."""
    cheap = candidate_bound(problem, d, cand.pp, budget, refined=False)
    with mock.patch.object(bounds_module, "MAX_COMPOSITIONS", 0):
        aggregate = candidate_bound(problem, d, cand.pp, budget, refined=True)
    return cheap, aggregate, sharpened(problem, memo.inflight, d, cand, budget, CandidateBound(True, 0.0, 0.0, 0.0),
                                       memo.calls)


def _least_ratios(problem, options, only_pp: int | None = None) -> dict[str, float]:
    """The least (plan value / bound) over every plan of every v = 1 candidate, per bound, with no budget and with
    the deadline at the plan's own time (cost per iteration; the sends and the price-weighted work directly). At
    least 1 (less rounding) for a valid bound; only_pp: only candidates of that pp."""
    memo = Memo(problem, options)
    least = {"sends": np.inf, "weighted": np.inf, "cheap": np.inf, "cheap_array": np.inf, "aggregate": np.inf,
             "inflight": np.inf}
    L = problem.model.num_layers
    own: dict = {}
    for cand, (plan, est) in _plans(problem, options):
        if only_pp is not None and cand.pp != only_pp:
            continue
        d = memo.degree_terms(cand.tp, cand.dp, cand.micro_batch_size, cand.uses, 1, cand.cp, cand.dist)
        pp = cand.pp
        per_iteration = est.usd_per_hour * est.iteration_time_s / 3600
        if pp > 1:
            e = sender_send_min_s(d)
            names = [u.name for u in cand.uses]
            for i, s in enumerate(est.stages):
                sends = sum(interleaved_send_counts(pp, i, 1))
                least["sends"] = min(least["sends"], s.p2p_s / (sends * e[names.index(s.node_type)]))
        if cand not in own:  # what depends on the candidate alone (no budget): taken once per candidate
            own[cand] = (float(_weighted_with_sends(d, L, np.array([pp]))[0]),
                         float(cheap_bounds(problem, d, np.array([pp]))[3][0]),
                         _cost_bounds(problem, memo, d, cand, Budget(objective="cost")))
        weighted, arr, free = own[cand]
        if weighted > 0:
            least["weighted"] = min(least["weighted"], _price_weighted_s(problem, est) / weighted)
        least["cheap_array"] = min(least["cheap_array"], per_iteration / arr)
        for budget in (Budget(objective="cost"), Budget(objective="cost", max_time_s=est.training_time_s)):
            assert not budget_violations(plan, est, budget)
            cheap, aggregate, got = free if budget.max_time_s is None else _cost_bounds(problem, memo, d, cand, budget)
            for name, bound in (("cheap", cheap), ("aggregate", aggregate), ("inflight", got)):
                assert bound.feasible, (name, plan, budget)
                if bound.cost_per_iteration_usd > 0:
                    least[name] = min(least[name], per_iteration / bound.cost_per_iteration_usd)
    return least


@settings(max_examples=draws(6), derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(slow_nic_instances())
def test_the_cost_bounds_with_each_types_own_sends_lie_below_every_plan(case):
    problem, options = case
    assume(count_plans(problem, Budget(), options, limit=MAX_PLANS) <= MAX_PLANS)
    least = _least_ratios(problem, options)
    assert all(v >= 1 - REL for v in least.values()), least


@settings(max_examples=draws(5), derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(slow_nic_instances(), st.sampled_from(["cost", "cost under a deadline"]), st.floats(0.3, 1.0))
def test_the_cost_optimum_with_slow_nics_equals_brute_force_on_both_backends(case, row, where):
    """The deadline sits between the fastest and the slowest plan's time (where = 0: the fastest plan's own)."""
    problem, options = case
    assume(count_plans(problem, Budget(), options, limit=MAX_PLANS) <= MAX_PLANS)
    budget = Budget(objective="cost")
    if row != "cost":
        times = sorted(est.training_time_s for _, (_, est) in _plans(problem, options))
        assume(times)
        budget = Budget(objective="cost", max_time_s=times[int(where * (len(times) - 1))])
    assert_backends_equal_brute_force(problem, budget, options)


def _deep_slow_nic_problem():
    """One type, one GPU per node, a 10 Gbit/s NIC (a send per stage about as long as a layer), m = 1 (one
    micro-batch in flight everywhere) and 3 layers per stage at most: on 4 stages of 3 layers every send and every
    layer of the plan is one the new terms count."""
    gpus = [GpuSpec(name="G0", memory_gib=6.0, peak_fp16_tflop_per_s=125.0, hbm_gbyte_per_s=2000.0)]
    nodes = [dict(name="t0", gpu="G0", gpus_per_node=1, num_nodes_available=4, price_usd_per_node_hour=2.0,
                  intra_node_link="nvlink", intra_node_gbyte_per_s=300.0, inter_node_gbit_per_s=10.0)]
    problem = make_problem(layers=12, hidden=2048, heads=8, gbs=1, node_types=nodes, gpus=gpus, seq=2048)
    return problem, SpaceOptions(micro_batch_sizes=(1,), max_stages=4)


def test_the_new_terms_are_tight_on_a_deep_pipeline_with_a_slow_nic():
    """The sends (each stage's sends at e_g) and the price-weighted work come within 2 % of a plan: raised by 2 %,
    they lie above it (the test can fail)."""
    problem, options = _deep_slow_nic_problem()
    d = degree_terms(problem, 1, 1, 1, tuple(node_uses(problem, 1, 1, 1, 1)))
    assert d.max_layers_per_stage == (3,), d.max_layers_per_stage  # the instance is what the docstring says
    least = _least_ratios(problem, options)
    assert all(v >= 1 - REL for v in least.values()), least
    assert least["sends"] <= 1 + 1e-6 and least["weighted"] < 1.02, least  # raised by 2 %: above a plan


def test_the_inflight_bound_with_each_types_own_sends_is_tight_on_two_stages_with_a_slow_nic():
    """Two stages on 10 Gbit/s NICs, eight micro-batches: both stages are end stages with one send of their own type
    (a middle stage sends twice). Every bound lies below every plan; the in-flight cost bound comes within 10 % of a
    two-stage plan. Not closer: the tied-embedding all-reduce between the two ends (about 9 % of the iteration over
    these NICs) is in no bound (docs/solver.md, "Sends at the sender's own type": what is left), so this test does
    not catch an end stage charged 2 sends instead of 1 (checked by hand: it passes with that mutation)."""
    problem = make_problem(layers=12, hidden=2048, heads=8, gbs=8, node_types=[
        dict(name="t0", gpu="G0", gpus_per_node=1, num_nodes_available=2, price_usd_per_node_hour=2.0,
             intra_node_link="nvlink", intra_node_gbyte_per_s=300.0, inter_node_gbit_per_s=10.0)],
        gpus=[GpuSpec(name="G0", memory_gib=24.0, peak_fp16_tflop_per_s=125.0, hbm_gbyte_per_s=2000.0)], seq=2048)
    options = SpaceOptions(micro_batch_sizes=(1,), max_stages=2)
    assert all(v >= 1 - REL for v in _least_ratios(problem, options).values())
    least = _least_ratios(problem, options, only_pp=2)
    assert all(v >= 1 - REL for v in least.values()), least
    assert least["inflight"] <= 1.10, least
