"""Issue 14, item 1: exact answers when memory is tight (long sequences, 16-40 GiB GPUs, several layer kinds).

The bounds that prune candidates must hold over every recomputation mode, stage position and layer kind. Full
recomputation keeps only each layer's input but re-materializes one whole layer as working memory, so with long
sequences selective recomputation may hold more layers than full: a layer cap computed from full recomputation alone
pruned the optimum (8 layers, hidden 1536, seq 8192 on a 24 GiB A10: tp 1, dp 1, b 4, selective).
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from draws import draws

from optsearch.baselines.exhaustive import count_plans
from priced import solve_exhaustive
from optsearch.bounds import degree_terms, max_layers_per_stage
from optsearch.candidates import SpaceOptions
from optsearch.costmodel import estimate
from optsearch.plan import RECOMPUTE_MODES, Plan, Stage
from optsearch.problem import Problem
from optsearch.profile import AnalyticProfile
from optsearch.solver import solve
from optsearch.spec import ClusterSpec, GpuSpec, JobSpec, LayerKindSpec, ModelSpec, NodeTypeSpec
from optsearch.spec.budget import Budget

from test_solver import (
    MAX_PLANS, REL, _assert_honest, _budget, _check_bounds_below_every_plan, assert_backends_equal_brute_force,
    usable_degrees,
)

A10 = GpuSpec(name="A10", memory_gib=24, peak_fp16_tflop_per_s=70, hbm_gbyte_per_s=600)


def tight_problem(*, layers: int, hidden: int, heads: int, seq: int, gbs: int, node_types: list[dict],
                  gpus: list[GpuSpec], kinds: list[LayerKindSpec] | None = None,
                  distributed_optimizer: bool = False) -> Problem:
    model = ModelSpec(
        name="tight", num_layers=layers, hidden_size=hidden, num_attention_heads=heads, ffn_hidden_size=4 * hidden,
        seq_length=seq, vocab_size=8000, layer_kinds=kinds,
        default_job=JobSpec(global_batch_size=gbs, train_iterations=1000, distributed_optimizer=distributed_optimizer),
    )
    cluster = ClusterSpec(name="tight", node_types=[NodeTypeSpec(**n) for n in node_types], gpus=gpus)
    by_name = {g.name: g for g in gpus}
    return Problem(model=model, cluster=cluster, job=model.default_job, gpus=by_name,
                   profile=AnalyticProfile(model=model, gpus=by_name))


def issue_example(nodes: int = 2, layers: int = 8) -> Problem:
    """The issue's class: 8 layers, hidden 1536, 24 heads, seq 8192, one A10 per node, global batch 16."""
    return tight_problem(layers=layers, hidden=1536, heads=24, seq=8192, gbs=16, gpus=[A10], node_types=[dict(
        name="a10", gpu="A10", gpus_per_node=1, num_nodes_available=nodes, price_usd_per_node_hour=2.0,
        intra_node_link="pcie", intra_node_gbyte_per_s=32, inter_node_gbit_per_s=40)])


def draw_node_types(draw, n_types: int, memories: list[float]) -> tuple[list[GpuSpec], list[dict]]:
    """n_types small node types (one or two GPUs per node, one to three nodes) with GPUs of the given memories."""
    gpus, node_types = [], []
    for i in range(n_types):
        gpus.append(GpuSpec(
            name=f"G{i}", memory_gib=draw(st.sampled_from(memories)),
            peak_fp16_tflop_per_s=draw(st.sampled_from([65.0, 125.0, 312.0])),
            hbm_gbyte_per_s=draw(st.sampled_from([600.0, 900.0, 2000.0]))))
        node_types.append(dict(
            name=f"t{i}", gpu=f"G{i}", gpus_per_node=draw(st.sampled_from([1, 2])),
            num_nodes_available=draw(st.integers(1, 3)),
            price_usd_per_node_hour=draw(st.floats(0.5, 30.0).map(lambda x: round(x, 4))),
            intra_node_link="nvlink", intra_node_gbyte_per_s=draw(st.sampled_from([32.0, 300.0])),
            inter_node_gbit_per_s=draw(st.sampled_from([40.0, 400.0]))))
    return gpus, node_types


def overlapped_tight_case(case, max_plans: int = MAX_PLANS) -> tuple[Problem, SpaceOptions] | None:
    """A tight_instances case under --overlap-grad-reduce with the distributed optimizer left to the space, per-stage
    or uniform and block recomputation, and cp 1 or 2 (the floors of the positional and in-flight walks under the
    overlap); None where the space holds more than max_plans plans (what brute force enumerates)."""
    problem, options, _, _, _ = case
    job = problem.job.model_copy(update={"distributed_optimizer": None})
    problem = replace(problem, overlap_grad_reduce=True, job=job)
    options = replace(options, uniform_recompute=True, block_recompute=True, context_parallel_sizes=(1, 2))
    if count_plans(problem, Budget(), options, limit=max_plans) > max_plans:
        return None
    return problem, options


@st.composite
def tight_instances(draw):
    """Memory-tight instances: sequences of 4096-8192, GPUs of 16-40 GiB, hidden 1024-2048, micro-batches up to 4,
    and one, or two layer kinds (a T5-like encoder then decoder with cross-attention), on one or two node types."""
    n_types = draw(st.integers(1, 2))
    layers = draw(st.integers(2, 12))
    gpus, node_types = draw_node_types(draw, n_types, memories=[16.0, 24.0, 32.0, 40.0])
    kinds = None
    if layers >= 2 and draw(st.booleans()):
        enc = draw(st.integers(1, layers - 1))
        kinds = [LayerKindSpec(name="enc", num_layers=enc),
                 LayerKindSpec(name="dec", num_layers=layers - enc, cross_attention=True)]
    problem = tight_problem(
        layers=layers, hidden=draw(st.sampled_from([1024, 1536, 2048])), heads=draw(st.sampled_from([8, 16])),
        seq=draw(st.sampled_from([4096, 8192])), gbs=draw(st.sampled_from([4, 8, 16])), node_types=node_types,
        gpus=gpus, kinds=kinds, distributed_optimizer=draw(st.booleans()))
    max_stages = draw(st.integers(1, 3 if n_types == 1 else 2))
    options = SpaceOptions(micro_batch_sizes=(1, 2, 4), max_stages=max_stages)
    objective = draw(st.sampled_from(["cost", "time"]))
    kind = draw(st.sampled_from(["none", "none", "time", "cost", "rate"]))
    return problem, options, objective, kind, draw(st.floats(0.5, 1.5))


def _modes_used(plan: Plan | None) -> str:
    return "none" if plan is None else "+".join(sorted({s.recompute for s in plan.stages}))


@settings(max_examples=draws(40), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(tight_instances())
def test_tight_memory_optimum_equals_brute_force_and_backends_agree(case):
    problem, options, objective, kind, factor = case
    assume(count_plans(problem, Budget(), options, limit=MAX_PLANS) <= MAX_PLANS)
    budget = _budget(problem, options, objective, kind, factor)
    truth = assert_backends_equal_brute_force(problem, budget, options)
    event(f"brute force: {truth.status}")
    event(f"recomputation in the optimum: {_modes_used(truth.plan)}")
    event(f"layer kinds: {len(problem.model.kinds)}")


@settings(max_examples=draws(8), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(tight_instances())
def test_tight_memory_bounds_lie_below_every_plan(case):
    problem, options, objective, kind, factor = case
    assume(count_plans(problem, Budget(), options, limit=MAX_PLANS) <= MAX_PLANS)
    budget = _budget(problem, options, objective, kind, factor)
    event(f"plans compared: {'0' if not _check_bounds_below_every_plan(problem, options, budget) else '> 0'}")


@pytest.mark.parametrize("solver", ["cbc", "cpsat"])
def test_the_issue_example_finds_b4_with_selective_recomputation(solver):
    """Minimize cost: every b = 4 candidate was pruned by a cap computed from full recomputation alone."""
    problem, options = issue_example(), SpaceOptions(max_stages=3)
    truth = solve_exhaustive(problem, Budget(objective="cost"), options=options, max_plans=MAX_PLANS)
    plan = truth.plan
    assert (plan.tp, plan.dp, plan.micro_batch_size, plan.pp) == (1, 1, 4, 1), plan
    assert plan.stages[0].recompute == "selective"
    got = solve(problem, Budget(objective="cost"), solver=solver, options=options)
    assert got.status == "optimal"
    _assert_honest(problem, Budget(objective="cost"), options, got)
    assert math.isclose(got.objective_value, truth.objective_value, rel_tol=REL), (got.plan, plan)


def _most_that_fit(problem: Problem, tp: int, dp: int, mbs: int, node_type: str, mode: str) -> int:
    """The most layers a middle stage of a 3-stage pipeline holds in this mode, by pricing plans (the cost model
    alone decides; the first and last stages are left empty so they never limit it)."""
    most = 0
    for n in range(1, problem.model.num_layers + 1):
        stages = (Stage(node_type=node_type, num_layers=0), Stage(node_type=node_type, num_layers=n, recompute=mode),
                  Stage(node_type=node_type, num_layers=problem.model.num_layers - n))
        est = estimate(problem, Plan(tp=tp, dp=dp, micro_batch_size=mbs, stages=stages))
        if est.stages[1].fits:
            most = n
    return most


@pytest.mark.parametrize("name", ["long-seq-a10", "short-seq-small-gpu", "t5-long-seq"])
def test_the_layer_cap_holds_for_every_recomputation_mode(name):
    """NMAX (bounds.max_layers_per_stage) is at least what any mode lets a stage hold, priced by the cost model. The
    instances are chosen so that the mode that holds the most differs: selective on long sequences, full on short
    ones, so a cap computed from any single mode fails here (checked: from full alone the first fails)."""
    if name == "long-seq-a10":
        problem = issue_example(nodes=64, layers=24)
    elif name == "short-seq-small-gpu":
        gpu = GpuSpec(name="S", memory_gib=16, peak_fp16_tflop_per_s=65, hbm_gbyte_per_s=900)
        problem = tight_problem(layers=24, hidden=2048, heads=16, seq=2048, gbs=16, gpus=[gpu], node_types=[dict(
            name="s", gpu="S", gpus_per_node=2, num_nodes_available=64, price_usd_per_node_hour=3.0,
            intra_node_link="pcie", intra_node_gbyte_per_s=32, inter_node_gbit_per_s=40)])
    else:
        kinds = [LayerKindSpec(name="enc", num_layers=12), LayerKindSpec(name="dec", num_layers=12,
                                                                         cross_attention=True)]
        problem = tight_problem(layers=24, hidden=1536, heads=24, seq=8192, gbs=16, gpus=[A10], kinds=kinds,
                                node_types=[dict(name="a10", gpu="A10", gpus_per_node=1, num_nodes_available=64,
                                                 price_usd_per_node_hour=2.0, intra_node_link="pcie",
                                                 intra_node_gbyte_per_s=32, inter_node_gbit_per_s=40)])
    options = SpaceOptions()
    best_modes = set()
    for tp, mbs, dp, uses in usable_degrees(problem, options):
        terms = degree_terms(problem, tp, dp, mbs, uses)
        for g, use in enumerate(uses):
            held = {mode: _most_that_fit(problem, tp, dp, mbs, use.name, mode) for mode in RECOMPUTE_MODES}
            cap = max_layers_per_stage(problem, use.name, tp, dp, mbs)
            assert terms.max_layers_per_stage[g] == cap
            assert cap >= max(held.values()), (tp, dp, mbs, use.name, cap, held)
            top = max(held.values())
            if 0 < top < problem.model.num_layers:
                best_modes |= {mode for mode, n in held.items() if n == top}
                # only strictly best modes matter for the sensitivity claim below
                if sum(n == top for n in held.values()) == 1:
                    event_mode = next(mode for mode, n in held.items() if n == top)
                    best_modes.add(f"only {event_mode}")
    wanted = {"long-seq-a10": "only selective", "short-seq-small-gpu": "only full", "t5-long-seq": "only selective"}
    assert wanted[name] in best_modes, best_modes
