"""The candidate list's faster build (issue 14, item 3: first plans) gives the same numbers: NMAX
(bounds.max_layers_per_stage, now kept per (type, tp, b, ep, cp, state bytes) and computed from per-(type, tp, b, cp)
tables) equals the formula as written before, bit for bit, through one shared cache over every (tp, dp, b, cp), on
memory-tight and roomy random instances (T5-like kinds included). The list itself (order and bounds) is pinned by
tests/test_cheap_bounds.py against a scalar reference."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from draws import draws

from optsearch.bounds import MEMORY_RESERVE_BYTES, max_layers_per_stage
from optsearch.candidates import context_parallel_candidates, dp_candidates, ep_candidates, micro_batch_candidates, \
    node_uses, tp_candidates
from optsearch.costmodel import (
    cp_full_recompute_working_bytes, cp_layer_activation_bytes, distributed_optimizer_on, expert_state_bytes_per_param,
    memory_capacity_bytes, state_bytes,
)
from optsearch.plan import RECOMPUTE_MODES

from test_solver import instances
from test_solver_memory import tight_instances


def _reference_nmax(problem, node_type, tp, dp, mbs, ep=1, cp=1) -> int:
    """bounds.max_layers_per_stage as written before the first-plan branch (no cache)."""
    model = problem.model
    dist = distributed_optimizer_on(problem.job, dp, cp)
    state = state_bytes(problem.job, dp, cp, dist)
    expert_state = expert_state_bytes_per_param(problem.job, dp, ep, dist) if model.is_moe else state
    capacity = memory_capacity_bytes(problem, problem.node(node_type).gpu) - MEMORY_RESERVE_BYTES
    most = 0
    for mode in RECOMPUTE_MODES:
        per_layer = min((state / tp * model.layer_parameters(k) if not k.is_moe else
                         state / tp * (model.layer_parameters(k) - model.expert_parameters(k))
                         + expert_state / (tp * ep) * model.expert_parameters(k))
                        + cp_layer_activation_bytes(problem, node_type, k, tp, mbs, mode, cp) for k in model.kinds)
        room = capacity - (cp_full_recompute_working_bytes(problem, node_type, tp, mbs, cp) if mode == "full" else 0.0)
        if room > 0:
            most = max(most, math.floor(room / per_layer * (1 + 1e-9)))
    per_layer = min((state / tp * model.layer_parameters(k) if not k.is_moe else
                     state / tp * (model.layer_parameters(k) - model.expert_parameters(k))
                     + expert_state / (tp * ep) * model.expert_parameters(k))
                    + min(cp_layer_activation_bytes(problem, node_type, k, tp, mbs, mode, cp) for mode in ("none", "full"))
                    for k in model.kinds)
    room = capacity - cp_full_recompute_working_bytes(problem, node_type, tp, mbs, cp)
    if room > 0:
        most = max(most, math.floor(room / per_layer * (1 + 1e-9)))
    return min(most, model.num_layers)


def _check_every_degree(problem, options) -> int:
    cache: dict = {}  # one cache over every degree, as solver.Memo keeps it
    checked = 0
    for tp in tp_candidates(problem):
        for mbs in micro_batch_candidates(problem, options):
            for cp in context_parallel_candidates(problem, options):
                for dp in dp_candidates(problem, tp, mbs, None, cp):
                    for use in node_uses(problem, tp, dp, mbs, cp):
                        for ep in ep_candidates(problem, tp, dp, options):
                            want = _reference_nmax(problem, use.name, tp, dp, mbs, ep, cp)
                            assert max_layers_per_stage(problem, use.name, tp, dp, mbs, ep, cp, cache) == want
                            assert max_layers_per_stage(problem, use.name, tp, dp, mbs, ep, cp) == want
                            checked += 1
    return checked


@settings(max_examples=draws(25), derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(tight_instances())
def test_the_kept_layer_cap_equals_the_formula_on_memory_tight_instances(case):
    problem, options, _, _, _ = case
    _check_every_degree(problem, options)


@settings(max_examples=draws(25), derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(instances())
def test_the_kept_layer_cap_equals_the_formula_on_random_instances(case):
    problem, options, _, _, _ = case
    _check_every_degree(problem, options)


def test_the_kept_layer_cap_on_the_catalog():
    from optsearch.cli.options import space_from_target
    from optsearch.edits import edited_problem

    for model in ("gpt2-xl", "mixtral-8x7b"):  # dense and mixture of experts (ep > 1)
        problem = edited_problem(model, "fasop-a100-a10", [])
        assert _check_every_degree(problem, space_from_target("megatron", problem)) > 0
