"""Engine targets (optsearch/targets.py): the search covers only what the target runs, exactly (issue 16)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from draws import draws

from optsearch.baselines.exhaustive import count_plans
from priced import solve_exhaustive
from optsearch.candidates import SpaceOptions, in_search_space
from optsearch.errors import UnsupportedPlanError
from optsearch.plan import Plan, Stage
from optsearch.problem import build_problem
from optsearch.solver import solve
from optsearch.spec.budget import Budget
from optsearch.targets import FASOP, MEGATRON, fasop_model, space_options
from test_baselines import INSTANCES
from test_solver import (
    MAX_PLANS, REL, _assert_honest, _budget, assert_backends_equal_brute_force, instances, make_problem,
)
from optsearch.spec import GpuSpec


def _restricted(problem, options: SpaceOptions, which: str) -> SpaceOptions:
    if which == "uniform":
        return replace(options, uniform_recompute=True)
    names = tuple(n.name for n in problem.cluster.node_types)
    return replace(options, uniform_recompute=True, node_type_order=tuple(reversed(names)), same_gpus_per_node=True)


@settings(max_examples=draws(10), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(instances(), st.sampled_from(["uniform", "fasop-like"]))
def test_restricted_optimum_equals_brute_force_and_backends_agree(case, which):
    """One recomputation mode for every stage (and, fasop-like, a fixed node order and one GPU count per node): the
    solvers' optimum equals brute force over the same restricted space, and is in it."""
    problem, options, objective, kind, factor = case
    options = _restricted(problem, options, which)
    assume(count_plans(problem, Budget(), options, limit=MAX_PLANS) <= MAX_PLANS)
    budget = _budget(problem, options, objective, kind, factor)
    truth = assert_backends_equal_brute_force(problem, budget, options)
    event(f"brute force: {truth.status}")
    if truth.plan is not None:
        modes = {s.recompute for s in truth.plan.stages if s.num_layers > 0}
        assert len(modes) == 1
        event(f"mode: {modes.pop()}")


def _mixed_case():
    """One node type, 3 single-GPU nodes of 2.7 GiB: the per-stage optimum (minimize time) is 2-1-1 with selective
    recomputation on stage 0 only, which no engine runs (found by brute force over card sizes under the cost model of
    issue 15: usable memory less a 10 % headroom, Megatron's bytes per parameter)."""
    gpus = [GpuSpec(name="G0", memory_gib=2.7, peak_fp16_tflop_per_s=125, hbm_gbyte_per_s=900)]
    nodes = [dict(name="t0", gpu="G0", gpus_per_node=1, num_nodes_available=3, price_usd_per_node_hour=2.0,
                  intra_node_link="nvlink", intra_node_gbyte_per_s=150, inter_node_gbit_per_s=100)]
    problem = make_problem(layers=4, hidden=512, heads=4, gbs=8, node_types=nodes, gpus=gpus, seq=2048)
    return problem, SpaceOptions(micro_batch_sizes=(1, 2), max_stages=4)


def test_one_mode_for_all_stages_costs_what_brute_force_says_and_both_backends_find_it():
    problem, free_options = _mixed_case()
    options = replace(free_options, uniform_recompute=True)
    budget = Budget(objective="time")
    free = solve_exhaustive(problem, budget, options=free_options)
    assert len({s.recompute for s in free.plan.stages if s.num_layers > 0}) > 1  # the case is what it claims
    truth = solve_exhaustive(problem, budget, options=options)
    assert truth.objective_value > free.objective_value * (1 + 1e-6)  # the restriction costs something here
    assert not in_search_space(problem, free.plan, options)
    for name in ("cbc", "cpsat"):
        got = solve(problem, budget, solver=name, options=options)
        assert got.status == "optimal"
        _assert_honest(problem, budget, options, got)
        assert len({s.recompute for s in got.plan.stages if s.num_layers > 0}) == 1
        assert got.objective_value == pytest.approx(truth.objective_value, rel=REL)


@pytest.mark.parametrize("which", ["uniform", "fasop-like"])
@pytest.mark.parametrize("name", sorted(INSTANCES))
def test_restricted_space_on_the_baseline_instances(name, which):
    """Including an encoder-decoder model (integer layer counts per kind, not patterns)."""
    problem = INSTANCES[name]
    options = _restricted(problem, SpaceOptions(), which)
    for objective in ("cost", "time"):
        budget = Budget(objective=objective)
        truth = solve_exhaustive(problem, budget, options=options)
        for solver in ("cbc", "cpsat"):
            got = solve(problem, budget, solver=solver, options=options)
            if truth.status == "infeasible":
                assert got.status == "infeasible"
                continue
            assert got.status == "optimal", got.message
            _assert_honest(problem, budget, options, got)
            assert got.objective_value == pytest.approx(truth.objective_value, rel=REL), (solver, got.plan, truth.plan)


def test_targets_declare_their_space():
    gpt = build_problem("gpt2-xl", "fasop-a100-a10")
    up = space_options(MEGATRON, gpt)
    assert up.uniform_recompute and up.node_type_order is None and not up.same_gpus_per_node
    fork = space_options(FASOP, gpt)
    assert fork.uniform_recompute and fork.node_type_order == ("a100", "a10") and fork.same_gpus_per_node
    t5 = build_problem("t5-fasop", "fasop-a100-a10")
    assert space_options(MEGATRON, t5).max_stages == 1  # upstream pretrain_t5.py: no pipeline parallelism
    assert space_options(FASOP, t5).max_stages is None  # the fork splits T5 with --balance and a split rank
    assert fasop_model(t5.model).name == "T5" and fasop_model(gpt.model).name == "gpt2"
    assert fasop_model(build_problem("bert-large", "fasop-a100-a10").model).name == "Bert"
    with pytest.raises(UnsupportedPlanError, match="llama2-7b: the FASOP fork's run script"):
        space_options(FASOP, build_problem("llama2-7b", "aws-p4d"))
    with pytest.raises(UnsupportedPlanError, match="gpt3-1.3b"):
        space_options(FASOP, build_problem("gpt3-1.3b", "fasop-a100-a10"))


def test_fasop_target_keeps_the_a100_node_first():
    """The fork's scripts make the A100 node node rank 0: a plan that starts on an A10 is outside its space."""
    problem = build_problem("gpt2-xl", "fasop-a100-a10")
    options = space_options(FASOP, problem)
    first = Plan(tp=1, dp=4, micro_batch_size=1, stages=(
        Stage(node_type="a100", num_layers=12), *(Stage(node_type="a10", num_layers=6) for _ in range(6))))
    last = replace(first, stages=tuple(reversed(first.stages)))
    assert in_search_space(problem, first, options) and not in_search_space(problem, last, options)
    assert in_search_space(problem, last, space_options(MEGATRON, problem))


def test_cli_solve_target_then_launch_for_the_same_target(tmp_path):
    from test_cli_errors import run_cli

    from optsearch.plan import load_plan

    out = tmp_path / "plan.json"
    run = run_cli("solve", "-m", "gpt2-xl", "-c", "fasop-a100-a10", "--quiet", "--target", "fasop", "--out", str(out))
    assert run.code in (0, None), run.stderr
    plan = load_plan(out)
    problem = build_problem("gpt2-xl", "fasop-a100-a10")
    assert in_search_space(problem, plan, space_options(FASOP, problem))
    run = run_cli("launch", str(out), "-m", "gpt2-xl", "-c", "fasop-a100-a10", "-f", "fasop")
    assert run.code in (0, None), run.stderr
    assert "MODEL=gpt2" in run.stdout and "NPROC_PER_NODE=4" in run.stdout
    bad = run_cli("solve", "-m", "llama2-7b", "-c", "aws-p4d", "--quiet", "--target", "fasop")
    assert bad.code == 2 and "llama2-7b: the FASOP fork's run script" in bad.stderr
    unknown = run_cli("solve", "-m", "gpt2-xl", "-c", "fasop-a100-a10", "--target", "deepspeed")
    assert unknown.code == 2 and "--target = 'deepspeed': must be one of megatron, fasop" in unknown.stderr


def test_one_mode_variants_of_a_mixed_quick_plan():
    from optsearch.candidates import one_mode_variants

    mixed = Plan(tp=1, dp=1, micro_batch_size=1, stages=(
        Stage(node_type="a", num_layers=0), Stage(node_type="a", num_layers=2, recompute="selective"),
        Stage(node_type="a", num_layers=2)))
    variants = one_mode_variants(mixed, SpaceOptions(uniform_recompute=True))
    assert [[s.recompute for s in v.stages] for v in variants] == [
        ["none", "selective", "selective"], ["none", "full", "full"]]
    assert one_mode_variants(mixed, SpaceOptions()) == [mixed]
