"""The exact solvers against brute force, and the DP baselines against both, on small hand-built instances.

On every instance here exhaustive enumeration finishes (a few thousand plans), so it is the ground truth: cbc, cpsat
and exhaustive must agree to 1e-6, and the DP baselines (whose plans lie in the same search space) can never be
better. The partition DP is checked against every partition of the layers for fixed node types.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

import pytest
import yaml

from optsearch.baselines.dp import (
    node_count_points, node_orders, partition_layers, solve_dp, stage_time_tables, stage_types,
)
from optsearch.baselines.exhaustive import partitions, solve_exhaustive
from optsearch.costmodel import estimate
from optsearch.plan import Plan, Stage
from optsearch.problem import Problem
from optsearch.profile.analytic import AnalyticProfile
from optsearch.solver import solve
from optsearch.spec import ClusterSpec, GpuSpec, JobSpec, LayerKindSpec, ModelSpec, NodeTypeSpec
from optsearch.spec.budget import Budget

REL = 1e-6

BIG = GpuSpec(name="Big", memory_gib=24, peak_fp16_tflop_per_s=120, hbm_gbyte_per_s=1500)
SMALL = GpuSpec(name="Small", memory_gib=12, peak_fp16_tflop_per_s=40, hbm_gbyte_per_s=600)
MID = GpuSpec(name="Mid", memory_gib=16, peak_fp16_tflop_per_s=70, hbm_gbyte_per_s=900)
GPUS = {g.name: g for g in (BIG, SMALL, MID)}


def node(name: str, gpu: str, gpn: int, available: int, price: float, nic_gbit: float, intra: float) -> NodeTypeSpec:
    return NodeTypeSpec(name=name, gpu=gpu, gpus_per_node=gpn, num_nodes_available=available,
                        price_usd_per_node_hour=price, intra_node_link="nvlink" if intra > 50 else "pcie",
                        intra_node_gbyte_per_s=intra, inter_node_gbit_per_s=nic_gbit)


def model(num_layers: int, kinds: list[LayerKindSpec] | None = None, batch: int = 8) -> ModelSpec:
    return ModelSpec(
        name="tiny", num_layers=num_layers, hidden_size=2048, num_attention_heads=16, ffn_hidden_size=8192,
        seq_length=2048, vocab_size=32000, layer_kinds=kinds,
        default_job=JobSpec(global_batch_size=batch, train_iterations=1000),
    )


def problem(m: ModelSpec, *nodes: NodeTypeSpec) -> Problem:
    cluster = ClusterSpec(name="tiny-cluster", node_types=list(nodes), gpus=list(GPUS.values()))
    return Problem(model=m, cluster=cluster, job=m.default_job, gpus=GPUS, profile=AnalyticProfile(model=m, gpus=GPUS))


A = node("a", "Big", 2, 1, 9.0, 100, 300)
B = node("b", "Small", 2, 2, 2.0, 25, 16)
C = node("c", "Mid", 1, 2, 3.0, 50, 32)

INSTANCES = {
    "one-type": problem(model(3), node("b", "Small", 2, 2, 2.0, 25, 16)),
    "two-types": problem(model(3), A, B),
    "three-types": problem(model(2), A, node("b", "Small", 2, 1, 2.0, 25, 16), node("c", "Mid", 1, 1, 3.0, 50, 32)),
    "two-kinds": problem(model(3, [LayerKindSpec(name="enc", num_layers=1),
                                   LayerKindSpec(name="dec", num_layers=2, cross_attention=True)]), A, B),
}
BUDGETS = {
    "cost": Budget(objective="cost"),
    "time": Budget(objective="time"),
    "time-max-gpus": Budget(objective="time", max_gpus=4),
}


@pytest.mark.parametrize("budget_name", sorted(BUDGETS))
@pytest.mark.parametrize("name", sorted(INSTANCES))
def test_solvers_agree_with_brute_force_and_dp_is_never_better(name, budget_name):
    p, budget = INSTANCES[name], BUDGETS[budget_name]
    ground = solve_exhaustive(p, budget)
    assert ground.status == "optimal", ground.message
    for solver in ("cbc", "cpsat"):
        r = solve(p, budget, solver=solver)
        assert r.status == "optimal", f"{solver}: {r.message}"
        assert r.objective_value == pytest.approx(ground.objective_value, rel=REL), (solver, r.plan, ground.plan)
    for order in ("rotations", "fixed"):
        d = solve_dp(p, budget, order=order)
        if d.plan is None:
            assert d.status == "infeasible", d.message
            continue
        assert d.status == "feasible"
        assert d.objective_value >= ground.objective_value * (1 - 1e-9), (order, d.plan, ground.plan)
        assert d.objective_value == pytest.approx(estimate(p, d.plan).cost_usd if budget.objective == "cost"
                                                  else estimate(p, d.plan).training_time_s, rel=1e-12)


def test_dp_finds_the_optimum_on_one_node_type_when_recomputation_is_not_needed():
    p = INSTANCES["one-type"]
    ground = solve_exhaustive(p, Budget(objective="time"))
    assert all(s.recompute == "none" for s in ground.plan.stages)
    d = solve_dp(p, Budget(objective="time"))
    assert d.objective_value == pytest.approx(ground.objective_value, rel=REL)


@pytest.mark.parametrize("types", [("a",), ("a", "b"), ("b", "a", "b"), ("a", "b", "b", "a"), ("b", "b", "a", "b", "b")])
@pytest.mark.parametrize("m", [1, 2, 8])
def test_partition_dp_is_exact_for_fixed_stage_types(types, m):
    """Against every partition of the layers: the DP's pipeline time equals the cost model's best."""
    p = problem(model(4, batch=8), node("a", "Big", 2, 4, 9.0, 100, 300), node("b", "Small", 2, 4, 2.0, 25, 16))
    mbs = 8 // m  # dp = 1
    tables = stage_time_tables(p, types, 1, 1, mbs, "none")
    part = partition_layers(tables, m)
    best = min(
        estimate(p, Plan(tp=1, dp=1, micro_batch_size=mbs,
                         stages=tuple(Stage(node_type=t, num_layers=n) for t, n in zip(types, layers)))).pipeline_time_s
        for layers in partitions(4, len(types))
    )
    mine = estimate(p, Plan(tp=1, dp=1, micro_batch_size=mbs,
                            stages=tuple(Stage(node_type=t, num_layers=n) for t, n in zip(types, part.layers))))
    assert sum(part.layers) == 4
    assert mine.pipeline_time_s == pytest.approx(best, rel=1e-12)
    assert part.pipeline_time_s == pytest.approx(best, rel=1e-9)


def test_fasop_grid_rotations_and_straddling_stages():
    p = problem(model(4), node("a", "Big", 2, 1, 9.0, 100, 300), node("b", "Small", 2, 2, 2.0, 25, 16))
    points = list(node_count_points(p, "rotations"))
    assert len(points) == 2 * 3 - 1 and {"a": 1, "b": 2} in points and {"b": 1} in points
    assert list(node_count_points(p, "fixed")) == [{"a": 1, "b": 2}]
    assert node_orders(p, {"a": 1, "b": 2}, "rotations") == [("a", "b", "b"), ("b", "b", "a"), ("b", "a", "b")]
    assert node_orders(p, {"a": 1, "b": 2}, "fixed") == [("a", "b", "b")]
    assert stage_types(p, ("a", "b", "b"), 2, 3) == ("a", "b", "b")
    assert stage_types(p, ("a", "b", "b"), 1, 6) == ("a", "a", "b", "b", "b", "b")
    assert stage_types(p, ("b", "a", "b"), 4, 1) is None  # one stage of 4 GPUs would span a and b


def test_dp_refuses_a_grid_too_large_and_says_how_large():
    r = solve_dp(INSTANCES["two-types"], Budget(), max_grid_points=3)
    assert r.status == "refused" and r.plan is None
    assert "5 points" in r.message and "dp-amp" in r.message


def test_amp_order_uses_the_whole_cluster_so_a_small_gpu_limit_leaves_it_without_a_plan():
    r = solve_dp(INSTANCES["two-types"], Budget(max_gpus=2), order="fixed")
    assert r.status == "infeasible" and "not a proof" in r.message


# ---- the CLI -----------------------------------------------------------------------------------------------


def _run_cli(args: list[str]) -> tuple[int, str, str]:
    from optsearch.cli import main

    out, err = io.StringIO(), io.StringIO()
    old = sys.argv
    sys.argv = ["optsearch", *args]
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main()
    except SystemExit as ex:
        code = ex.code or 0
    finally:
        sys.argv = old
    return code, out.getvalue(), err.getvalue()


def _write_specs(tmp_path: Path) -> tuple[Path, Path]:
    p = INSTANCES["two-types"]
    model_path, cluster_path = tmp_path / "model.yaml", tmp_path / "cluster.yaml"
    model_path.write_text(yaml.safe_dump(p.model.model_dump(mode="json", exclude_none=True)))
    cluster_path.write_text(yaml.safe_dump(p.cluster.model_dump(mode="json", exclude_none=True)))
    return model_path, cluster_path


def test_compare_json_lists_every_method_with_plan_and_gap(tmp_path):
    model_path, cluster_path = _write_specs(tmp_path)
    code, out, err = _run_cli(["compare", "--model", str(model_path), "--cluster", str(cluster_path),
                               "--minimize", "time", "--methods", "cbc,cpsat,dp,dp-amp,exhaustive", "--json"])
    assert code == 0, err
    rows = json.loads(out)
    assert [r["method"] for r in rows] == ["cbc", "cpsat", "dp", "dp-amp", "exhaustive"]
    by = {r["method"]: r for r in rows}
    assert by["cbc"]["status"] == by["cpsat"]["status"] == by["exhaustive"]["status"] == "optimal"
    best = by["exhaustive"]["objective_value"]
    for r in rows:
        assert {"method", "status", "objective_value", "search_time_s", "gap_to_best", "plan"} <= set(r)
        assert r["search_time_s"] >= 0
        if r["method"] in ("cbc", "cpsat"):
            assert r["objective_value"] == pytest.approx(best, rel=REL)
            assert r["gap_to_best"] == pytest.approx(0.0, abs=REL)
        plan = r["plan"]
        if plan is not None:
            assert r["gap_to_best"] >= -REL
            assert plan["tp"] * plan.get("cp", 1) * plan["dp"] * plan["pp"] == sum(
                n * {"a": 2, "b": 2}[t] for t, n in plan["nodes"].items())
            assert {"tp", "dp", "pp", "micro_batch_size", "num_micro_batches", "nodes", "stages"} <= set(plan)
            assert all({"node_type", "gpu", "num_layers", "recompute"} <= set(s) for s in plan["stages"])
            assert sum(s["num_layers"] for s in plan["stages"]) == 3


def test_compare_says_when_exhaustive_refuses_for_size(tmp_path):
    model_path, cluster_path = _write_specs(tmp_path)
    code, out, err = _run_cli(["compare", "--model", str(model_path), "--cluster", str(cluster_path),
                               "--methods", "dp,exhaustive", "--max-plans", "10"])
    assert code == 0, err
    assert "exhaustive: refused: exhaustive: more than 10 plans" in out


def test_compare_rejects_an_unknown_method(tmp_path):
    model_path, cluster_path = _write_specs(tmp_path)
    code, out, err = _run_cli(["compare", "--model", str(model_path), "--cluster", str(cluster_path),
                               "--methods", "cbc,greedy"])
    assert code == 2
    assert "--methods item 'greedy': unknown method; known: cbc, cpsat, dp, dp-amp, dp-published, dp-amp-published, exhaustive" in err
