"""Context parallelism, the distributed optimizer as a plan decision, and the sequence-parallel stage message (issue 16):
the cost-model terms on hand-computed numbers, the property that makes the distributed optimizer a fixed choice, both
backends against brute force with the knobs in the space, the plan's JSON, and the emitted flags.

Toy shape (tests/test_costmodel.py): s = h = 1000, a = 8 heads of 125 (kv width 1000), b = 1, so b s h x 2 B = 2e6 B;
attention core = 1/7 of a layer's forward FLOPs. 'fast': 4 GPUs per node, NVLink 1e11 B/s, NIC 5e10 B/s;
'slow': 2 GPUs per node, PCIe 1e10 B/s, NIC 80 Gbit/s = 1e10 B/s. bf16 job: fp32 gradients (g = 4 B).
"""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from draws import draws
from pytest import approx

import optsearch.costmodel as cm
from optsearch.baselines.exhaustive import count_plans
from optsearch.candidates import SpaceOptions, in_search_space
from optsearch.errors import SpecError, UnsupportedPlanError
from optsearch.megatron import args_file_text, fasop_settings, megatron_args
from optsearch.plan import Plan, Stage, parse_balance, plan_from_dict
from optsearch.problem import build_problem
from optsearch.profile.analytic import attention_core_fraction
from optsearch.profile.table import ProfileEntry
from optsearch.spec import JobSpec
from optsearch.spec.budget import Budget
from optsearch.targets import FASOP, MEGATRON, engine_problem, space_options
from test_costmodel import JOB, LAYER, toy_problem, toy_profile
from test_solver import MAX_PLANS, _budget, assert_backends_equal_brute_force, instances


def _job(problem, **update):
    return replace(problem, job=problem.job.model_copy(update=update))


# ---- hand-computed terms -----------------------------------------------------------------------------------------


def test_toy_attention_core_is_a_seventh():
    assert attention_core_fraction(toy_problem().model, LAYER) == approx(1 / 7)


def _slow_ring_problem():
    """Y layer at tp 1, b 1: forward 0.7 ms, backward 1.4 ms (short enough for the ring to show)."""
    table = toy_profile()
    table.entries[("Y", "layer", 1, 1)] = ProfileEntry(forward_s=0.0007, backward_s=0.0014)
    return toy_problem(profile=table)


@pytest.mark.parametrize("recompute, ring", [
    # cp 4 on 'slow' (2 GPUs per node): tp x cp = 4 > 2, so the ring crosses nodes at the NIC, 1e10 B/s (tp = 1 sender).
    # kv = 2 x b x (s / cp) x kv_width / t x 2 B = 2 x 250 x 1000 x 2 = 1e6 B: 1e-4 s forward, 2e-4 s backward (K, V, dK, dV)
    # hidden per step: core x time / cp / cp = 0.0007 / 7 / 16 = 6.25e-6 s forward, 1.25e-5 s backward
    # forward 3 x (1e-4 - 6.25e-6) = 2.8125e-4; backward 3 x (2e-4 - 1.25e-5) = 5.625e-4
    ("none", 2.8125e-4 + 5.625e-4),
    ("selective", 2 * 2.8125e-4 + 5.625e-4),  # the attention core is re-run with its ring
    ("full", 2 * 2.8125e-4 + 5.625e-4),
])
def test_cp_ring_exposed_time(recompute, ring):
    problem = _slow_ring_problem()
    assert cm.cp_ring_exposed_s(problem, "slow", LAYER, 1, 1, recompute, 4) == approx(ring)
    # the layer on one rank: (0.7 + 1.4 ms [+ recomputation]) / 4 + the ring
    assert cm.cp_layer_step_s(problem, "slow", LAYER, 1, 1, recompute, 4) == approx(
        cm.layer_step_s(problem, "slow", LAYER, 1, 1, recompute) / 4 + ring)


def test_cp_ring_hidden_behind_attention_on_nvlink():
    # 'fast', cp 2, tp 1: one node (2 divides 4), 1e11 B/s. kv = 2 x 500 x 1000 x 2 = 2e6 B: 2e-5 s forward;
    # hidden per step 0.01 / 7 / 4 = 3.57e-4 s > 2e-5 s: nothing exposed, the layer is exactly half of cp = 1.
    problem = toy_problem()
    assert cm.cp_ring_bytes_per_s(problem, "fast", 1, 2) == approx(1e11)
    assert cm.cp_ring_exposed_s(problem, "fast", LAYER, 1, 1, "none", 2) == 0.0
    assert cm.cp_layer_step_s(problem, "fast", LAYER, 1, 1, "none", 2) == approx(0.03 / 2)
    assert cm.cp_layer_step_s(problem, "fast", LAYER, 1, 1, "none", 1) == cm.layer_step_s(problem, "fast", LAYER, 1, 1,
                                                                                         "none")


def test_cp_ring_across_nodes_shares_the_nic_among_tp_senders():
    # 'fast' tp 2 x cp 4 = 8 > 4 GPUs per node: the NIC (5e10 B/s) shared by the tp = 2 boundary GPUs: 2.5e10
    assert cm.cp_ring_bytes_per_s(toy_problem(), "fast", 2, 4) == approx(2.5e10)


def test_cp_divides_tokens_memory_and_end_layers():
    problem = toy_problem()
    for r in ("none", "selective", "full"):
        assert cm.cp_layer_activation_bytes(problem, "fast", LAYER, 1, 1, r, 2) == approx(
            cm.layer_activation_bytes(problem, "fast", LAYER, 1, 1, r) / 2)
    assert cm.cp_layer_activation_bytes(problem, "fast", LAYER, 1, 1, "none", 2) == approx(74e6 / 2)  # s b h (74) / 2
    assert cm.cp_logits_bytes(problem.model, 1, 1, 4) == approx(6 * 1000 * 10000 / 4)  # 6 s b V / t / cp
    assert cm.cp_embedding_step_s(problem, "fast", 1, 1, 2) == approx(0.003 / 2)
    assert cm.cp_head_step_s(problem, "fast", 1, 1, 2) == approx(0.012 / 2)


@pytest.mark.parametrize("sp, tp, cp, expected", [
    (False, 1, 1, 2e-5),  # b s h x 2 = 2e6 B over NVLink 1e11 B/s
    (False, 2, 1, 2e-5),  # without sequence parallelism each tp rank sends the whole tensor
    (True, 2, 1, 1e-5),  # --sequence-parallel: the sequence-sharded tensor, / t
    (True, 1, 1, 2e-5),  # t = 1: Megatron turns sequence parallelism off
    (False, 2, 2, 1e-5),  # cp 2: s / cp tokens
    (True, 2, 2, 5e-6),  # both: / (t x cp)
])
def test_stage_message(sp, tp, cp, expected):
    problem = _job(toy_problem(), sequence_parallel=sp)
    assert cm.stage_send_s(problem, "fast", "fast", True, tp * cp, 1, tp, cp) == approx(expected)


def test_gradient_sync_with_and_without_the_distributed_optimizer():
    problem = toy_problem()
    # 1e8 parameters, t = 1, dp 2 x cp 2 = 4 ranks, one NVLink node (1e11 B/s), fp32 gradients (bf16 job)
    # all-reduce: 2 x 3/4 x 1e8 x 4 / 1e11 = 6e-3 s
    assert cm.gradient_sync_s(problem, "fast", 1e8, 1, 2, False, 2, False) == approx(6e-3)
    # reduce-scatter (4 B) + all-gather (2 B): 3/4 x 1e8 x 6 / 1e11 = 4.5e-3 s
    assert cm.gradient_sync_s(problem, "fast", 1e8, 1, 2, False, 2, True) == approx(4.5e-3)
    # 16-bit gradients: 2 x 3/4 x 1e8 x 2 / 1e11 = 3/4 x 1e8 x (2 + 2) / 1e11 = 3e-3 s either way
    fp16 = _job(problem, precision="fp16")
    assert cm.gradient_sync_s(fp16, "fast", 1e8, 1, 2, False, 2, True) == approx(3e-3)
    assert cm.gradient_sync_s(fp16, "fast", 1e8, 1, 2, False, 2, False) == approx(3e-3)
    # dp = cp = 1: nothing to exchange
    assert cm.gradient_sync_s(problem, "fast", 1e8, 1, 1, False, 1, True) == 0.0


def test_state_bytes_and_optimizer_step_shard_over_dp_times_cp():
    assert cm.state_bytes(JOB, 2, 2, True) == approx(2 + 4 + 12 / 4)  # bf16: 6 + 12 / (dp cp) = 9
    assert cm.state_bytes(JOB, 2, 2, False) == approx(18)
    assert cm.state_bytes(JobSpec(global_batch_size=8, train_iterations=1, precision="fp16"), 2, 2, True) == approx(8)
    problem = toy_problem()
    # 1e8 parameters x 28 B / 1e12 B/s (X: 1000 GB/s) = 2.8e-3 s; sharded over 4 ranks: 7e-4 s; both + the whole
    # buffer's passes (section 8b, dp x cp = 4: 16 B): 1e8 x 16 / 1e12 = 1.6e-3 s
    assert cm.optimizer_s(problem, "fast", 1e8, 1, 2, 2, False) == approx(2.8e-3 + 1.6e-3)
    assert cm.optimizer_s(problem, "fast", 1e8, 1, 2, 2, True) == approx(7e-4 + 1.6e-3)


def test_distributed_optimizer_choice_follows_the_job():
    unset, on, off = JOB, JOB.model_copy(update={"distributed_optimizer": True}), JOB.model_copy(
        update={"distributed_optimizer": False})
    assert cm.distributed_optimizer_on(unset, 2) and cm.distributed_optimizer_on(on, 1, 2)
    assert not cm.distributed_optimizer_on(unset, 1) and not cm.distributed_optimizer_on(off, 8, 2)
    assert cm.distributed_optimizer_choices(unset, 2) == (False, True)
    assert cm.distributed_optimizer_choices(on, 2) == (True,)
    assert cm.distributed_optimizer_choices(off, 2) == (False,)
    assert cm.distributed_optimizer_choices(unset, 1, 1) == (False,)


def test_estimate_of_a_cp_plan_adds_up():
    problem = toy_problem()
    plan = Plan(tp=1, dp=1, micro_batch_size=1, cp=2, distributed_optimizer=True,
                stages=(Stage(node_type="fast", num_layers=2), Stage(node_type="fast", num_layers=2)))
    est = cm.estimate(problem, plan)
    assert plan.gpus_per_stage == 2 and plan.num_gpus == 4 and est.nodes == {"fast": 1}
    first = 2 * cm.cp_layer_step_s(problem, "fast", LAYER, 1, 1, "none", 2) + 0.003 / 2
    assert est.stages[0].compute_s == approx(first)
    assert est.stages[0].p2p_s == approx(2e6 / 2 / 1e11)  # one send of s / cp tokens inside the node
    params = est.stages[0].parameters
    assert est.stages[0].dp_allreduce_s == approx(1 / 2 * params * 6 / 1e11)  # dp 1 x cp 2 ranks, RS + AG


def test_check_plan_refuses_what_megatron_refuses():
    problem = toy_problem()  # s = 1000
    bad = Plan(tp=1, dp=1, micro_batch_size=1, cp=8, stages=(Stage(node_type="fast", num_layers=4),))
    with pytest.raises(SpecError, match="multiple of 2 x cp = 16"):
        cm.estimate(problem, bad)


# ---- the distributed optimizer is never worse: the search may fix it on ------------------------------------------


@settings(max_examples=draws(16), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(instances(), st.data())
def test_distributed_optimizer_never_costs_time_or_memory(case, data):
    problem, _, _, _, _ = case
    problem = _job(problem, sequence_parallel=data.draw(st.booleans()),
                   grad_reduce_in_fp32=data.draw(st.sampled_from([None, True, False])))
    model = problem.model
    node = data.draw(st.sampled_from(problem.cluster.node_types))
    tp = data.draw(st.sampled_from([t for t in (1, 2, 4) if t <= node.gpus_per_node and model.num_attention_heads % t == 0]))
    cp = data.draw(st.sampled_from([1, 2]))
    dp = data.draw(st.sampled_from([d for d in (1, 2, 4) if problem.job.global_batch_size % d == 0]))
    assume(dp * cp > 1)
    pp = data.draw(st.integers(1, min(3, model.num_layers)))
    cuts = sorted(data.draw(st.lists(st.integers(1, model.num_layers - 1), min_size=pp - 1, max_size=pp - 1,
                                     unique=True))) if pp > 1 else []
    bounds = [0, *cuts, model.num_layers]
    stages = tuple(Stage(node_type=node.name, num_layers=bounds[i + 1] - bounds[i],
                         recompute=data.draw(st.sampled_from(["none", "selective", "full"]))) for i in range(pp))
    off = Plan(tp=tp, dp=dp, micro_batch_size=1, cp=cp, stages=stages)
    try:
        est_off = cm.estimate(problem, off)
    except SpecError:
        assume(False)
    est_on = cm.estimate(problem, replace(off, distributed_optimizer=True))
    assert est_on.iteration_time_s <= est_off.iteration_time_s * (1 + 1e-12)
    assert est_on.cost_usd <= est_off.cost_usd * (1 + 1e-12)
    for a, b in zip(est_on.stages, est_off.stages):
        assert a.memory_bytes <= b.memory_bytes * (1 + 1e-12)
        assert a.dp_allreduce_s <= b.dp_allreduce_s * (1 + 1e-12)


# ---- both backends against brute force with cp and the distributed optimizer in the space -------------------------


@settings(max_examples=draws(10), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(instances(), st.sampled_from([None, True, False]), st.booleans(), st.booleans())
def test_optimum_with_cp_and_distributed_optimizer_equals_brute_force(case, dist, sp, block):
    problem, options, objective, kind, factor = case
    problem = _job(problem, distributed_optimizer=dist, sequence_parallel=sp)
    # block recomputation (a one-mode target's alternative) priced at cp too
    options = replace(options, context_parallel_sizes=(1, 2), block_recompute=block and options.uniform_recompute)
    assume(count_plans(problem, Budget(), options, limit=MAX_PLANS) <= MAX_PLANS)
    budget = _budget(problem, options, objective, kind, factor)
    truth = assert_backends_equal_brute_force(problem, budget, options)
    if truth.plan is not None:  # brute force's plan is in the space too (both optimizer settings are)
        assert in_search_space(problem, truth.plan, options)
        event(f"cp in the optimum: {truth.plan.cp}")
        event(f"distributed optimizer in brute force's optimum: {truth.plan.distributed_optimizer}")


# ---- the plan, the targets, the launch -------------------------------------------------------------------------


def test_plan_json_without_the_knobs_is_unchanged_and_round_trips_with_them():
    stages = (Stage(node_type="a10", num_layers=48),)
    plain = Plan(tp=1, dp=4, micro_batch_size=1, stages=stages)
    assert json.dumps(plain.to_dict()) == json.dumps({
        "tp": 1, "dp": 4, "pp": 1, "micro_batch_size": 1,
        "stages": [{"node_type": "a10", "num_layers": 48, "recompute": "none"}]})
    knobs = replace(plain, cp=2, distributed_optimizer=True)
    assert knobs.to_dict()["cp"] == 2 and knobs.to_dict()["distributed_optimizer"] is True
    assert plan_from_dict(json.loads(json.dumps(knobs.to_dict()))) == knobs
    with pytest.raises(SpecError, match="cp = 0"):
        plan_from_dict({**plain.to_dict(), "cp": 0})
    with pytest.raises(SpecError, match="distributed_optimizer = 'yes'"):
        plan_from_dict({**plain.to_dict(), "distributed_optimizer": "yes"})


def test_targets_search_cp_only_where_the_engine_has_it():
    # seq 1024: cp 2, 4, 8 divide it twice; upstream runs cp with flash attention only (issue 15): gpt2-large's heads
    # of 64 have it on an A10 once priced as the megatron target runs attention (engine_problem)
    problem = engine_problem("megatron", build_problem("gpt2-large", "fasop-a10"))
    assert space_options(MEGATRON, problem).context_parallel_sizes == (1, 2, 4, 8)
    cp2 = Plan(tp=1, dp=2, micro_batch_size=1, cp=2, distributed_optimizer=True, overlap_grad_reduce=True,
               stages=parse_balance("18-18", "a10"))  # the target overlaps the gradient reduce (dp x cp > 1)
    assert in_search_space(problem, cp2, space_options(MEGATRON, problem))
    assert not in_search_space(problem, cp2, SpaceOptions())  # the default space: cp = 1
    fork = build_problem("gpt2-xl", "fasop-a10")  # the fork runs its own models only, and no cp
    assert space_options(FASOP, fork).context_parallel_sizes == (1,)
    assert not in_search_space(fork, replace(cp2, stages=parse_balance("24-24", "a10"), overlap_grad_reduce=False),
                               space_options(FASOP, fork))


def test_launch_emits_cp_and_the_distributed_optimizer_from_the_plan():
    # upstream runs cp > 1 with flash attention only (issue 15): gpt2-large's heads of 64 have it on an A10, gpt2-xl's
    # heads of 100 do not, and launch refuses its cp plan
    fork_problem = build_problem("gpt2-xl", "fasop-a10")
    fork_plan = Plan(tp=1, dp=2, micro_batch_size=1, cp=2, distributed_optimizer=True,
                     stages=parse_balance("24-24", "a10"))
    with pytest.raises(UnsupportedPlanError, match="unfused attention has no context parallelism"):
        megatron_args(engine_problem("megatron", fork_problem), fork_plan)
    problem = engine_problem("megatron", build_problem("gpt2-large", "fasop-a10"))
    plan = Plan(tp=1, dp=2, micro_batch_size=1, cp=2, distributed_optimizer=True, stages=parse_balance("18-18", "a10"))
    margs = megatron_args(problem, plan)
    args = list(margs.args)
    assert args[args.index("--context-parallel-size") + 1] == "2" and "--use-distributed-optimizer" in args
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1" in args_file_text(problem, plan, margs)  # cp > 1 needs it too
    assert any("tp x cp x pp" in n for n in margs.notes)
    plain = megatron_args(problem, replace(plan, cp=1, distributed_optimizer=False)).args
    assert "--context-parallel-size" not in plain and "--use-distributed-optimizer" not in plain
    # the job no longer decides it: a job that says true does not add it to a plan without it
    on = _job(problem, distributed_optimizer=True)
    assert "--use-distributed-optimizer" not in megatron_args(on, replace(plan, cp=1, distributed_optimizer=False)).args
    with pytest.raises(UnsupportedPlanError, match="no context parallelism"):
        fasop_settings(fork_problem, fork_plan)
    text, _ = fasop_settings(fork_problem, replace(fork_plan, cp=1))
    assert "ZERO=true" in text and "--use-distributed-optimizer" in text


def test_solve_decides_the_distributed_optimizer():
    from optsearch.solver import solve

    problem = build_problem("gpt2-xl", "fasop-a10")
    result = solve(problem, Budget(objective="cost"), options=space_options(FASOP, problem))
    assert result.plan is not None and result.plan.dp > 1 and result.plan.distributed_optimizer
    forced_off = _job(problem, distributed_optimizer=False)
    result = solve(forced_off, Budget(objective="cost"), options=space_options(FASOP, forced_off))
    assert result.plan is not None and not result.plan.distributed_optimizer
    assert math.isfinite(result.objective_value)


def test_cli_estimate_cp_and_solve_max_cp(tmp_path):
    from test_cli_errors import run_cli

    run = run_cli("estimate", "-m", "gpt2-large", "-c", "fasop-a10", "--tp", "1", "--dp", "2", "--cp", "2",
                  "--micro-batch-size", "1", "--balance", "18-18", "--json")
    assert run.code in (0, None), run.stderr
    out = json.loads(run.stdout)
    assert out["plan"]["cp"] == 2 and out["plan"]["distributed_optimizer"] is True  # the search's choice, dp x cp > 1
    assert out["nodes"] == {"a10": 2}  # 2 stages x tp 1 x cp 2 x dp 2 = 8 GPUs
    run = run_cli("estimate", "-m", "gpt2-xl", "-c", "fasop-a10", "--tp", "1", "--dp", "2", "--cp", "3",
                  "--micro-batch-size", "1", "--balance", "24-24")
    assert run.code == 2 and "multiple of 2 x cp = 6" in run.stderr
    plan_file = tmp_path / "plan.json"
    run = run_cli("solve", "-m", "gpt2-xl", "-c", "fasop-a10", "--quiet", "--max-cp", "1", "--out", str(plan_file))
    assert run.code in (0, None), run.stderr
    assert "cp" not in json.loads(plan_file.read_text())["plan"]


def test_a_measured_profile_table_searches_cp_1_only():
    """A table measured at the full sequence cannot price s / cp tokens (cost-model.md 16a): the megatron target
    searches cp 1, 2, 4, 8 on the analytic profile and cp 1 alone on a table (an imported AMP table made solve pick
    cp 2 from per-layer times that hold host time)."""
    from optsearch.profile.table import ProfileTable

    problem = engine_problem("megatron", build_problem("gpt2-medium", "fasop-a10"))  # A10s run flash attention
    assert space_options(MEGATRON, problem).context_parallel_sizes == MEGATRON.context_parallel_sizes != (1,)
    table = replace(problem, profile=ProfileTable(name="measured"))
    assert space_options(MEGATRON, table).context_parallel_sizes == (1,)
