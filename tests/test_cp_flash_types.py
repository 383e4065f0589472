"""Issue 15: context parallelism per node type, one rule for the library and the CLI, and `estimate` refusing a cp > 1
plan upstream cannot run.

Upstream Megatron-LM has context parallelism only with Transformer Engine's flash / cuDNN fused attention (its unfused
attention and Megatron-Core's local attention have none), and cp is one plan-wide value. So on a cluster that mixes
GPUs with and without flash attention (V100 / T4 with A100 / A10), a cp > 1 plan may hold stages on the flash types
only (SpaceOptions.context_parallel_node_types, set by targets.space_options); before, any type without flash attention
switched cp > 1 off for the whole cluster. docs/cost-model.md section 14, "Context parallelism per node type".
"""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
from optsearch.baselines.exhaustive import count_plans
from priced import solve_exhaustive
from optsearch.candidates import SpaceOptions, in_search_space
from optsearch.plan import Plan, Stage
from optsearch.problem import build_problem, with_flash_attention
from optsearch.spec import GpuSpec
from optsearch.spec.budget import Budget
from optsearch.targets import (
    MEGATRON, context_parallel_node_types, context_parallel_space, engine_problem, space_options, target_space,
)

from test_cli_errors import run_cli
from test_solver import MAX_PLANS, assert_backends_equal_brute_force
from test_solver_memory import tight_problem

A10 = GpuSpec(name="A10", memory_gib=24, peak_fp16_tflop_per_s=70, hbm_gbyte_per_s=600, compute_capability=8.6)
T4 = GpuSpec(name="T4", memory_gib=16, peak_fp16_tflop_per_s=65, hbm_gbyte_per_s=320, compute_capability=7.5)


def mixed_problem(flash: bool = True):
    """6 layers, hidden 1536, 24 heads of 64, seq 8192, global batch 2, on one two-GPU A10 (8.6) node and two one-GPU
    T4 (7.5) nodes: flash attention (and so context parallelism) on the A10s only."""
    node = dict(intra_node_link="pcie", inter_node_gbit_per_s=40)
    problem = tight_problem(layers=6, hidden=1536, heads=24, seq=8192, gbs=2, gpus=[A10, T4], node_types=[
        dict(name="a10", gpu="A10", gpus_per_node=2, num_nodes_available=1, price_usd_per_node_hour=4.0,
             intra_node_gbyte_per_s=32, **node),
        dict(name="t4", gpu="T4", gpus_per_node=1, num_nodes_available=2, price_usd_per_node_hour=0.5,
             intra_node_gbyte_per_s=16, **node)])
    return with_flash_attention(problem, flash)


def test_the_target_space_allows_cp_on_the_flash_types_only():
    problem = mixed_problem()
    assert context_parallel_node_types(problem) == ("a10",)
    options = space_options(MEGATRON, problem)
    assert options.context_parallel_sizes == (1, 2, 4, 8) and options.context_parallel_node_types == ("a10",)
    base = dict(tp=1, dp=1, micro_batch_size=1, distributed_optimizer=False)  # the job turns it off
    on_a10 = Plan(cp=2, stages=(Stage(node_type="a10", num_layers=6, recompute="full"),), **base)
    on_t4 = Plan(cp=2, stages=(Stage(node_type="t4", num_layers=6, recompute="full"),), **base)
    mixed = Plan(cp=2, stages=(Stage(node_type="a10", num_layers=3, recompute="full"),
                               Stage(node_type="t4", num_layers=3, recompute="full")), **base)
    assert in_search_space(problem, on_a10, options)
    assert not in_search_space(problem, on_t4, options) and not in_search_space(problem, mixed, options)
    cp1 = replace(mixed, cp=1, stages=(Stage(node_type="a10", num_layers=2, recompute="full"),
                                       Stage(node_type="a10", num_layers=2, recompute="full"),
                                       Stage(node_type="t4", num_layers=2, recompute="full")))
    assert in_search_space(problem, cp1, options)  # cp 1: every type
    # priced without flash attention (--no-flash-attention): no type has cp, so cp 1 alone, as before
    assert space_options(MEGATRON, mixed_problem(flash=False)).context_parallel_sizes == (1,)
    # every type runs flash attention: no restriction at all
    a10_only = replace(problem, cluster=problem.cluster.model_copy(
        update={"node_types": [problem.cluster.node_types[0]]}))
    assert space_options(MEGATRON, a10_only).context_parallel_node_types is None
    # the generic library space (no target) has no attention rule: cp where the caller names it, on every type
    assert SpaceOptions().context_parallel_sizes == (1,)
    generic = SpaceOptions(context_parallel_sizes=(1, 2))
    assert in_search_space(problem, on_t4, generic)


@pytest.mark.parametrize("objective", ["time", "cost"])
def test_cp_on_flash_types_equals_enumeration_on_both_backends(objective):
    """Both backends equal brute force over the restricted space, and that optimum equals an enumeration that does not
    use the restriction at all: the best of (cp 1 on the whole cluster) and (cp 2 on a cluster of the A10 nodes only).
    Minimizing time, the optimum is a cp 2 plan on the A10 node (by 0.35 %), which the all-or-nothing rule ruled out."""
    problem = mixed_problem()
    base = SpaceOptions(max_stages=3, context_parallel_sizes=(1, 2))
    options = context_parallel_space(problem, base)
    assert options.context_parallel_node_types == ("a10",)
    budget = Budget(objective=objective)
    assert count_plans(problem, budget, options, limit=MAX_PLANS) <= MAX_PLANS
    truth = assert_backends_equal_brute_force(problem, budget, options)  # re-priced, in the space, both backends

    a10_cluster = problem.cluster.model_copy(update={"node_types": [problem.cluster.node_types[0]]})
    a10_only = replace(problem, cluster=a10_cluster)
    cp1 = solve_exhaustive(problem, budget, options=replace(base, context_parallel_sizes=(1,)), max_plans=MAX_PLANS)
    cp2 = solve_exhaustive(a10_only, budget, options=replace(base, context_parallel_sizes=(2,)), max_plans=MAX_PLANS)
    enumerated = min(r.objective_value for r in (cp1, cp2) if r.plan is not None)
    assert math.isclose(truth.objective_value, enumerated, rel_tol=1e-9)
    if truth.plan.cp > 1:
        assert {s.node_type for s in truth.plan.stages} == {"a10"}
    if objective == "time":  # the gain: cp 2 on the A10s beats every cp 1 plan
        assert truth.plan.cp == 2 and truth.objective_value < cp1.objective_value * (1 - 1e-6)


def test_library_target_space_is_the_cli_space():
    """targets.target_space (the library entry) gives what `solve --target megatron` searches: the problem priced with
    flash attention and the space with the per-type cp rule; build_problem alone prices none."""
    plain = build_problem("gpt3-1.3b", "amp-p3-g4dn")
    assert not plain.flash_attention
    problem, options = target_space("megatron", plain)
    assert problem.flash_attention and options == space_options(MEGATRON, engine_problem("megatron", plain))
    assert options.context_parallel_sizes == (1,)  # V100 + T4: no flash attention anywhere
    off, off_options = target_space("megatron", plain, flash_attention=False)
    assert not off.flash_attention and off_options.context_parallel_sizes == (1,)
    fork, fork_options = target_space("fasop", build_problem("gpt2-xl", "fasop-a100-a10"))
    assert not fork.flash_attention and fork_options.context_parallel_sizes == (1,)


# ---- estimate refuses a cp > 1 plan launch refuses -----------------------------------------------------------------

HAND = ["estimate", "--model", "gpt2-xl", "--cluster", "fasop-a10", "--tp", "1", "--dp", "2", "--cp", "2",
        "--micro-batch-size", "1", "--balance", "24-24"]


@pytest.mark.parametrize("extra", [(), ("--json",)])
def test_estimate_refuses_cp_where_upstream_has_no_attention_for_it(extra):
    """gpt2-xl's heads of 100 run no flash attention: estimate exits 2 with launch's one line, and prints nothing."""
    run = run_cli(*HAND, *extra)
    assert run.code == 2 and run.stdout == ""
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0] == ("error: --cp 2: cp = 2: node type a10 runs no flash attention (model gpt2-xl: head dimension "
                        "100 (flash attention needs a multiple of 8, at most 256)), and Transformer Engine's unfused "
                        "attention has no context parallelism; drop --cp 2")
    launch = run_cli("launch", *HAND[1:], "--format", "megatron")
    assert launch.code == 2 and "drop --cp 2" in launch.stderr
    assert launch.stderr.split("cp = 2: ", 1)[1] == run.stderr.split("cp = 2: ", 1)[1]  # the same reason


def test_estimate_refuses_cp_on_a_pre_ampere_stage_and_prices_the_flash_one(tmp_path):
    """gpt2-large (heads of 64) on a V100 + A100 cluster: cp 2 with the V100 stage refused (and with
    --no-flash-attention on the A100 too), cp 2 on the A100 alone priced; a plan file gets the same refusal."""
    cluster = tmp_path / "p3-p4d.json"
    p3, p4d = build_problem("gpt2-large", "aws-p3").cluster, build_problem("gpt2-large", "aws-p4d").cluster
    cluster.write_text(json.dumps({"name": "p3-p4d", "node_types": [
        p3.node_types[0].model_dump(mode="json"), p4d.node_types[0].model_dump(mode="json")]}))
    v100, a100 = p3.node_types[0].name, p4d.node_types[0].name
    hand = ["estimate", "--model", "gpt2-large", "--cluster", str(cluster), "--tp", "1", "--dp", "4", "--cp", "2",
            "--micro-batch-size", "1"]
    refused = run_cli(*hand, "--stages", f"{a100}:18,{v100}:18", "--json")
    assert refused.code == 2 and refused.stdout == ""
    assert f"node type {v100} runs no flash attention (V100-16GB: compute capability 7" in refused.stderr
    priced = run_cli(*hand, "--stages", f"{a100}:18,{a100}:18", "--json")
    assert priced.code in (0, None), priced.stderr
    assert json.loads(priced.stdout)["plan"]["cp"] == 2
    unfused = run_cli(*hand, "--stages", f"{a100}:18,{a100}:18", "--no-flash-attention")
    assert unfused.code == 2 and unfused.stdout == "" and "priced unfused" in unfused.stderr
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps({"tp": 1, "dp": 4, "cp": 2, "micro_batch_size": 1, "stages": [
        {"node_type": a100, "num_layers": 18}, {"node_type": v100, "num_layers": 18}]}))
    from_file = run_cli("estimate", "--plan", str(plan_file), "--model", "gpt2-large", "--cluster", str(cluster))
    assert from_file.code == 2 and from_file.stdout == "" and f"node type {v100} runs no flash" in from_file.stderr
