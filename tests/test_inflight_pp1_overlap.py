"""The in-flight time bound of a one-stage candidate under --overlap-grad-reduce with the distributed optimizer off
(round 18, fixinf; docs/solver.md "Round 18: the in-flight bound above a plan at pp = 1").

The lead's seeded run (OPTSEARCH_DRAWS=2) found a bound 0.24 % above a plan: one node type (2 GPUs a node, 3 nodes,
40 GiB), 11 layers, seq 4096, hidden 2048, global batch 4, tp 2, dp 1, b 4, pp 1, cp 2, the optimizer not
distributed. The harness had paired that candidate with the terms of the default setting (distributed optimizer on
at dp x cp = 2), whose exposed-reduce floor is the all-gather's alpha_full x 2 / (g + 2) per parameter
(bounds.grad_overlap_floor), above what a dist = False plan exposes. With the candidate's own terms the bound lies
below every plan of the candidate; solver._inflight_bounded now refuses mismatched terms (ConsistencyError) instead
of returning a bound that is not one."""

from __future__ import annotations

import math

import pytest

from optsearch.candidates import SpaceOptions
from optsearch.errors import ConsistencyError
from optsearch.solver import Bounded, Memo, _inflight_bounded
from optsearch.spec import GpuSpec
from optsearch.spec.budget import Budget

from test_audit_dist_bounds import space_plans
from test_solver_memory import tight_problem


def _case4():
    """The seeded draw's case 4, built in code (the pickle's Problem and SpaceOptions)."""
    from dataclasses import replace
    gpu = GpuSpec(name="G0", memory_gib=40.0, peak_fp16_tflop_per_s=65.0, hbm_gbyte_per_s=900.0)
    node = dict(name="t0", gpu="G0", gpus_per_node=2, num_nodes_available=3, price_usd_per_node_hour=7.0109,
                intra_node_link="nvlink", intra_node_gbyte_per_s=300.0, inter_node_gbit_per_s=400.0)
    problem = tight_problem(layers=11, hidden=2048, heads=16, seq=4096, gbs=4, node_types=[node], gpus=[gpu],
                            distributed_optimizer=True)
    problem = replace(problem, overlap_grad_reduce=True,
                      job=problem.job.model_copy(update={"distributed_optimizer": None}))
    options = SpaceOptions(micro_batch_sizes=(4,), max_stages=1, uniform_recompute=True, block_recompute=True,
                           context_parallel_sizes=(2,))
    return problem, options


def _the_candidate(problem, options):
    """(candidate, plan, estimate) of tp 2, dp 1, b 4, pp 1, cp 2 with the optimizer off and 11 layers, no recompute."""
    for cand, plan, est in space_plans(problem, options):
        if (cand.tp, cand.dp, cand.pp, cand.cp, cand.dist) == (2, 1, 1, 2, False) \
                and plan.stages[0].recompute == "none" and plan.recompute_num_layers is None:
            return cand, plan, est
    raise AssertionError("the case's candidate is not in the space")


def test_the_dist_off_candidate_bound_lies_below_its_plan():
    problem, options = _case4()
    cand, plan, est = _the_candidate(problem, options)
    assert not plan.distributed_optimizer and plan.overlap_grad_reduce
    memo = Memo(problem, options)
    terms = memo.degree_terms(cand.tp, cand.dp, cand.micro_batch_size, cand.uses, cand.ep, cand.cp, cand.dist)
    value = est.training_time_s
    for budget in (Budget(objective="time"), Budget(objective="time", max_time_s=value)):
        for cutoff in (math.inf, value, 0.5 * value):
            got = _inflight_bounded(memo, budget, Bounded(cand, 0.0, terms), 0.0, cutoff)
            assert got is not None and 0.0 < got <= value * (1 + 1e-9), (budget, cutoff, got, value)


def test_the_default_settings_terms_are_refused_for_a_dist_off_candidate():
    """The pairing that gave 0.537182 s against the plan's 0.535896 s an iteration: refused, not bounded."""
    problem, options = _case4()
    cand, _, est = _the_candidate(problem, options)
    memo = Memo(problem, options)
    default = memo.degree_terms(cand.tp, cand.dp, cand.micro_batch_size, cand.uses, cand.ep, cand.cp)
    assert default.distributed_optimizer  # on at dp x cp = 2: the all-gather floor a dist = False plan does not pay
    with pytest.raises(ConsistencyError):
        _inflight_bounded(memo, Budget(objective="time"), Bounded(cand, 0.0, default), 0.0, math.inf)
