"""Upstream block recomputation as a plan-wide choice (issue 16): --recompute-granularity full --recompute-method
block --recompute-num-layers N fully recomputes the first min(N, layers) layers of every stage's transformer block
(megatron/core/recompute.py) and keeps all activations of the rest.

Hand-computed numbers use test_costmodel's toy (layer on 'fast' at tp 1, b 1: forward 0.01 s, backward 0.02 s, so a
layer takes 0.03 s without recomputation and 0.04 s fully recomputed; it keeps 74e6 B of activations, 2e6 B when
recomputed; embedding 0.003 s, head 0.012 s, logits 6e7 B).
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from draws import draws

from optsearch import costmodel as cm
from optsearch.baselines.exhaustive import count_plans
from priced import solve_exhaustive
from optsearch.candidates import SpaceOptions, in_search_space
from optsearch.errors import SpecError
from optsearch.megatron import plan_from_megatron_args, recompute_args
from optsearch.plan import Plan, Stage, plan_from_dict
from optsearch.spec import GpuSpec
from optsearch.spec.budget import Budget

from test_costmodel import _activation_part, approx, plan, toy_problem
from test_solver import MAX_PLANS, _budget, _check_bounds_below_every_plan, assert_backends_equal_brute_force
from test_solver_memory import tight_problem

BLOCK = SpaceOptions(uniform_recompute=True, block_recompute=True)  # what --target megatron searches


def _block(p: Plan, n: int) -> Plan:
    return replace(p, recompute_num_layers=n)


# ---- cost model, by hand ---------------------------------------------------------------------------------------


def test_block_time_recomputes_the_first_n_layers_of_every_stage():
    # 3 + 1 layers, N = 2: stage 0 recomputes min(2, 3) = 2: 2 x 0.04 + 1 x 0.03 + embedding 0.003 = 0.113 s;
    # stage 1 recomputes min(2, 1) = 1: 0.04 + head 0.012 = 0.052 s
    est = cm.estimate(toy_problem(), _block(plan(1, 1, 1, ("fast", 3, "full"), ("fast", 1, "full")), 2))
    assert [s.compute_s for s in est.stages] == [approx(0.113), approx(0.052)]
    assert [s.recomputed_layers for s in est.stages] == [2, 1]


def test_block_memory_keeps_inputs_of_recomputed_layers_and_all_of_the_others():
    # m = 8, stage 0 holds min(2, 8) = 2 micro-batches of (2 x 2e6 + 1 x 74e6) = 78e6 B, + one layer re-materialized
    # 74e6: 230e6 B. Stage 1: 1 x 2e6 + 74e6 = 76e6 B (+ logits 6e7). Parameters 46,006,000 and 22,003,000.
    est = cm.estimate(toy_problem(), _block(plan(1, 1, 1, ("fast", 3, "full"), ("fast", 1, "full")), 2))
    assert _activation_part(est.stages[0], 46_006_000, 1) == approx(230e6)
    assert _activation_part(est.stages[1], 22_003_000, 1, 6e7) == approx(76e6)


def test_block_terms_per_layer_kind():
    problem = toy_problem()
    kind = problem.model.kinds[0]
    # 5 layers, 2 recomputed: 2 x 0.04 + 3 x 0.03 = 0.17 s; 2 x 2e6 + 3 x 74e6 = 226e6 B
    assert cm.block_recompute_step_s(problem, "fast", kind, 1, 1, 5, 2) == approx(0.17)
    assert cm.block_recompute_activation_bytes(problem, "fast", kind, 1, 1, 5, 2) == approx(226e6)
    # each layer kind is its own transformer block (T5: encoder, decoder): min(N, count) of each
    stages = (Stage(node_type="fast", num_layers=5, recompute="full"),)
    p = Plan(tp=1, dp=1, micro_batch_size=1, stages=stages, recompute_num_layers=2)
    assert p.recomputed_layers(0, {"enc": 3, "dec": 1}) == {"enc": 2, "dec": 1}


def test_block_covering_every_stage_prices_as_full():
    problem = toy_problem()
    full = plan(1, 1, 1, ("fast", 3, "full"), ("fast", 1, "full"))
    a, b = cm.estimate(problem, full), cm.estimate(problem, _block(full, 3))
    assert [s.compute_s for s in a.stages] == [s.compute_s for s in b.stages]
    assert [s.memory_bytes for s in a.stages] == [approx(s.memory_bytes) for s in b.stages]


# ---- the plan and its files --------------------------------------------------------------------------------------


def test_plan_json_without_block_is_unchanged_and_with_it_round_trips():
    p = plan(1, 1, 1, ("fast", 3, "full"), ("fast", 1, "full"))
    assert "recompute_num_layers" not in json.dumps(p.to_dict())
    assert plan_from_dict(json.loads(json.dumps(p.to_dict()))) == p
    q = _block(p, 2)
    assert q.to_dict()["recompute_num_layers"] == 2
    assert plan_from_dict(json.loads(json.dumps(q.to_dict()))) == q


@pytest.mark.parametrize("bad, rule", [
    ({"recompute_num_layers": 0}, "must be a positive integer"),
    ({"recompute_num_layers": True}, "must be a positive integer"),
    ({"stages": [{"node_type": "fast", "num_layers": 3, "recompute": "none"},
                 {"node_type": "fast", "num_layers": 1, "recompute": "full"}]}, "must say 'full'"),
])
def test_plan_file_refuses_bad_block_recomputation(bad, rule):
    data = {**_block(plan(1, 1, 1, ("fast", 3, "full"), ("fast", 1, "full")), 2).to_dict(), **bad}
    with pytest.raises(SpecError, match=rule):
        plan_from_dict(data, "plan.json")


def test_launch_emits_block_and_reads_it_back():
    p = _block(plan(1, 1, 1, ("fast", 3, "full"), ("fast", 1, "full")), 2)
    args, notes = recompute_args(p)
    assert args == ["--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers", "2"]
    assert notes == []
    tokens = ["--pipeline-model-parallel-size", "2", "--micro-batch-size", "1", "--num-layers", "4",
              "--decoder-first-pipeline-num-layers", "3", *args]
    assert plan_from_megatron_args(tokens, node_order="fast", dp=1) == p


def test_block_is_in_the_space_only_where_the_target_runs_it():
    problem = toy_problem()
    p = _block(plan(1, 2, 1, ("fast", 3, "full"), ("fast", 1, "full")), 2)  # 2 x 2 GPUs: one whole node
    assert in_search_space(problem, p, BLOCK)
    assert not in_search_space(problem, p, SpaceOptions(uniform_recompute=True))
    assert not in_search_space(problem, p, SpaceOptions())


# ---- the search: both backends equal brute force ------------------------------------------------------------------


A10 = GpuSpec(name="A10", memory_gib=24, peak_fp16_tflop_per_s=70, hbm_gbyte_per_s=600)


def _block_pays() -> tuple:
    """20 layers, hidden 2048, sequence 1024 on one 24 GiB GPU at b = 2: neither no recomputation nor selective fits,
    full does, and so does recomputing only the first 14 layers, which is faster (found by scanning shapes with
    brute force)."""
    problem = tight_problem(layers=20, hidden=2048, heads=16, seq=1024, gbs=16, gpus=[A10], node_types=[dict(
        name="a10", gpu="A10", gpus_per_node=1, num_nodes_available=1, price_usd_per_node_hour=2.0,
        intra_node_link="pcie", intra_node_gbyte_per_s=32, inter_node_gbit_per_s=40)])
    return problem, replace(BLOCK, micro_batch_sizes=(2,), max_stages=1)


def test_block_is_chosen_where_it_pays_and_backends_agree():
    problem, options = _block_pays()
    truth = assert_backends_equal_brute_force(problem, Budget(objective="time"), options)
    assert truth.plan.recompute_num_layers == 14, truth.plan
    one_mode = solve_exhaustive(problem, Budget(objective="time"), options=replace(options, block_recompute=False))
    assert one_mode.plan.stages[0].recompute == "full"
    assert truth.objective_value < one_mode.objective_value * 0.95


def test_block_on_an_encoder_decoder_recomputes_the_first_n_of_each_block():
    """4 encoder + 12 decoder layers on one 24 GiB GPU at b = 2 (found by scanning with brute force): N = 10
    recomputes all 4 encoder layers and the first 10 decoder layers, faster than full recomputation."""
    from optsearch.spec import LayerKindSpec

    kinds = [LayerKindSpec(name="enc", num_layers=4), LayerKindSpec(name="dec", num_layers=12, cross_attention=True)]
    problem = tight_problem(layers=16, hidden=2048, heads=16, seq=1024, gbs=16, gpus=[A10], kinds=kinds, node_types=[
        dict(name="a10", gpu="A10", gpus_per_node=1, num_nodes_available=1, price_usd_per_node_hour=2.0,
             intra_node_link="pcie", intra_node_gbyte_per_s=32, inter_node_gbit_per_s=40)])
    options = replace(BLOCK, micro_batch_sizes=(2,), max_stages=1)
    truth = assert_backends_equal_brute_force(problem, Budget(objective="time"), options)
    assert truth.plan.recompute_num_layers == 10
    assert truth.estimate.stages[0].recomputed_layers == 4 + 10
    one_mode = solve_exhaustive(problem, Budget(objective="time"), options=replace(options, block_recompute=False))
    assert truth.objective_value < one_mode.objective_value * 0.97


@st.composite
def block_instances(draw, encoder_decoder: bool = False):
    """Memory-tight instances around _block_pays (where block recomputation is often the optimum): one or two node
    types of 20-26 GiB GPUs, 16-22 layers of hidden 2048 at sequence 1024, up to two stages, micro-batches 2-4; one
    layer kind, or an encoder and a decoder (two kinds)."""
    from optsearch.spec import LayerKindSpec

    n_types = draw(st.sampled_from([1, 1, 2]))
    layers = draw(st.integers(16, 22))
    gpus, nodes = [], []
    for i in range(n_types):
        gpus.append(GpuSpec(name=f"G{i}", memory_gib=draw(st.sampled_from([20.0, 22.0, 24.0, 26.0])),
                            peak_fp16_tflop_per_s=draw(st.sampled_from([65.0, 125.0])), hbm_gbyte_per_s=600.0))
        nodes.append(dict(name=f"t{i}", gpu=f"G{i}", gpus_per_node=1, num_nodes_available=draw(st.integers(1, 2)),
                          price_usd_per_node_hour=draw(st.floats(0.5, 30.0).map(lambda x: round(x, 4))),
                          intra_node_link="pcie", intra_node_gbyte_per_s=32.0,
                          inter_node_gbit_per_s=draw(st.sampled_from([40.0, 400.0]))))
    kinds = None
    if encoder_decoder:
        enc = draw(st.integers(1, layers - 1))
        kinds = [LayerKindSpec(name="enc", num_layers=enc),
                 LayerKindSpec(name="dec", num_layers=layers - enc, cross_attention=True)]
    problem = tight_problem(layers=layers, hidden=2048, heads=16, seq=1024, gbs=16, node_types=nodes, gpus=gpus,
                            kinds=kinds)
    options = replace(BLOCK, micro_batch_sizes=(2, 4), max_stages=draw(st.integers(1, 2)))
    return (problem, options, draw(st.sampled_from(["cost", "time"])),
            draw(st.sampled_from(["none", "none", "time", "cost", "rate"])), draw(st.floats(0.5, 1.5)))


@settings(max_examples=draws(10), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.booleans().flatmap(lambda ed: block_instances(encoder_decoder=ed)))
def test_block_optimum_equals_brute_force_and_backends_agree(case):
    problem, options, objective, kind, factor = case
    assume(count_plans(problem, Budget(), options, limit=MAX_PLANS) <= MAX_PLANS)
    budget = _budget(problem, options, objective, kind, factor)
    truth = assert_backends_equal_brute_force(problem, budget, options)
    event(f"brute force: {truth.status}")
    if truth.plan is not None:
        event(f"block in the optimum, {len(problem.model.kinds)} kind(s): {truth.plan.recompute_num_layers is not None}")


@settings(max_examples=draws(8), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(block_instances())
def test_bounds_lie_below_every_block_plan(case):
    problem, options, objective, kind, factor = case
    assume(count_plans(problem, Budget(), options, limit=MAX_PLANS) <= MAX_PLANS)
    _check_bounds_below_every_plan(problem, options, Budget(objective=objective))


def test_solve_writes_a_block_plan_that_estimate_and_launch_read(tmp_path):
    """The memory-tight catalog case of docs/knobs.md: gpt3-6.7b on two fasop-a10 nodes. solve's plan file keeps N,
    estimate prices it the same, launch emits block recomputation."""
    from test_cli_errors import run_cli

    case = ("--model", "gpt3-6.7b", "--cluster", "fasop-a10")
    plan_file = tmp_path / "plan.json"
    # without sequence parallelism and with the attention scores stored (--no-flash-attention, as docs/knobs.md
    # measured it): memory-tight enough for block N = 7 (with flash attention the optimum keeps N = 1)
    run = run_cli("solve", *case, "--quiet", "--set", "node_types.a10.count=2", "--set", "job.sequence_parallel=false",
                  "--no-flash-attention", "--json", "--out", str(plan_file))
    assert run.code in (0, None), run.stderr
    out = json.loads(run.stdout)
    assert out["plan"]["recompute_num_layers"] == 7
    run = run_cli("estimate", *case, "--plan", str(plan_file), "--json")
    assert run.code in (0, None), run.stderr
    again = json.loads(run.stdout)
    assert again["cost_usd"] == out["estimate"]["cost_usd"]
    assert [s["recomputed_layers"] for s in again["stages"]] == [7, 7, 7, 7]
    run = run_cli("launch", *case, str(plan_file), "--format", "megatron", "--out", str(tmp_path / "launch"))
    assert run.code in (0, None), run.stderr
    text = (tmp_path / "launch" / "megatron_args.sh").read_text()
    assert "--recompute-method block" in text and "--recompute-num-layers 7" in text
