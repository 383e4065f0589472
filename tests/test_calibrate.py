"""`optsearch calibrate` on synthetic Megatron-LM logs in the real log format.

The logs are made from the cost model itself with a known slowdown (compute x 1.3, the network x 0.5), so the
fit must recover exactly those factors and leave no error.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from optsearch.cli import main
from optsearch.costmodel import estimate
from optsearch.errors import SpecError
from optsearch.plan import Plan, Stage
from optsearch.problem import build_problem
from optsearch.profile import load_table
from optsearch.profile.calibrate import (
    candidate_sets, check_log_matches, corrected, default_warmup, fit, observe, parse_megatron_log,
)

MODEL, CLUSTER = "gpt2-xl", "fasop-a10"  # 48 layers, global batch 64; 8 nodes of 4 A10G, 40 Gbit/s
PIPELINE = Plan(tp=1, dp=1, micro_batch_size=1, stages=tuple(Stage(node_type="a10", num_layers=6) for _ in range(8)))
WIDE = Plan(tp=4, dp=1, micro_batch_size=2, stages=tuple(Stage(node_type="a10", num_layers=6) for _ in range(8)))


def megatron_log(plan: Plan, iteration_s: float, *, lines: int = 20, warmup_lines: int = 2, global_batch: int = 64,
                 arguments: dict[str, object] | None = None, iterations: bool = True) -> str:
    """A Megatron-LM training log: the arguments block, then one line per log interval (10 iterations)."""
    args = {
        "data_parallel_size": plan.dp, "ffn_hidden_size": 6400, "global_batch_size": global_batch,
        "hidden_size": 1600, "micro_batch_size": plan.micro_batch_size, "num_attention_heads": 16,
        "num_layers": 48, "num_layers_per_virtual_pipeline_stage": None,
        "pipeline_model_parallel_size": plan.pp, "seq_length": 1024, "tensor_model_parallel_size": plan.tp,
        "use_distributed_optimizer": False, "world_size": plan.num_gpus,
    }
    args.update(arguments or {})
    out = ["using world size: {}, data-parallel size: {}, tensor-model-parallel size: {}, pipeline-model-parallel "
           "size: {} ".format(plan.num_gpus, plan.dp, plan.tp, plan.pp),
           "------------------------ arguments ------------------------"]
    out += [f"  {k} {'.' * (48 - len(k))} {v}" for k, v in sorted(args.items())]
    out += ["-------------------- end of arguments ---------------------",
            "> building GPT2BPETokenizer tokenizer ...",
            "time to initialize megatron (seconds): 41.337",
            "[after dataloaders are built] datetime: 2024-05-02 10:12:43 ",
            "training ..."]
    total = 10 * lines
    for n in range(lines if iterations else 0):
        it = 10 * (n + 1)
        ms = iteration_s * 1e3 * (3.0 if n < warmup_lines else 1.0)
        out.append(
            f" [2024-05-02 10:{13 + n // 6:02d}:{(n * 10) % 60:02d}] iteration {it:>8d}/{total:>8d} | "
            "consumed samples: "
            f"{it * global_batch:>12d} | elapsed time per iteration (ms): {ms:.1f} | throughput per GPU (TFLOP/s/GPU): "
            f"41.3 | learning rate: {1.5e-4 * min(1, it / 100):.6E} | global batch size: {global_batch:>5d} | lm loss: "
            f"{7.5 - 0.01 * n:.6E} | loss scale: 65536.0 | grad norm: 1.234 | number of skipped iterations:   0 | "
            "number of nan iterations:   0 |"
        )
        if n == 0:
            out.append("[Rank 0] (after 10 iterations) memory (MB) | allocated: 9021.5 | max allocated: 14102.9 | "
                       "reserved: 15680.0 | max reserved: 15680.0")
    return "\n".join(out) + "\n"


def slowed(plan: Plan, compute: float, bandwidth: float = 1.0) -> float:
    """The iteration time the cost model gives with every GPU's compute x `compute` and the network x `bandwidth`."""
    problem = build_problem(MODEL, CLUSTER)
    return estimate(corrected(problem, {"A10G": compute}, bandwidth), plan).iteration_time_s


def run_cli(args: list[str], capsys, monkeypatch) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["optsearch", *args])
    code = 0
    try:
        main()
    except SystemExit as ex:
        code = ex.code or 0
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def plan_file(tmp_path: Path, plan: Plan, name: str = "plan.json") -> Path:
    return write(tmp_path / name, json.dumps(plan.to_dict()))


# ---- reading logs ------------------------------------------------------------------------------------------------


def test_parse_reads_arguments_and_iteration_lines():
    log = parse_megatron_log(megatron_log(PIPELINE, 1.4238), "train.log")
    assert log.arguments["tensor_model_parallel_size"] == "1"
    assert log.arguments["pipeline_model_parallel_size"] == "8"
    assert log.arguments["num_layers_per_virtual_pipeline_stage"] == "None"
    assert "tokenizer" not in log.arguments  # '> building GPT2BPETokenizer tokenizer ...' is not an argument
    assert len(log.iteration_times_s) == 20
    assert log.iterations[:2] == (10, 20)
    assert log.iteration_times_s[2] == pytest.approx(1.4238)
    assert log.iteration_times_s[0] == pytest.approx(3 * 1.4238, rel=1e-4)
    assert set(log.global_batch_sizes) == {64}


def test_warmup_is_the_first_tenth_and_reported_apart():
    assert [default_warmup(n) for n in (1, 2, 10, 11, 20, 100)] == [0, 1, 1, 2, 2, 10]
    log = parse_megatron_log(megatron_log(PIPELINE, 1.0, lines=20, warmup_lines=2), "train.log")
    obs = observe(log, PIPELINE, None)
    assert obs.warmup_times_s == pytest.approx((3.0, 3.0))
    assert obs.steady_lines == 18 and obs.measured_s == pytest.approx(1.0)
    assert observe(log, PIPELINE, 5).steady_lines == 15
    with pytest.raises(SpecError, match=r"train.log: --warmup 20 leaves no iteration line \(the log has 20\)"):
        observe(log, PIPELINE, 20)


def test_a_log_of_another_configuration_is_refused():
    problem = build_problem(MODEL, CLUSTER)
    log = parse_megatron_log(megatron_log(PIPELINE, 1.0, arguments={"tensor_model_parallel_size": 2}), "a.log")
    with pytest.raises(SpecError, match=r"a.log: tensor_model_parallel_size = 2 but plan.json has tp = 1; this log is "
                                        r"from a different configuration"):
        check_log_matches(log, problem, PIPELINE, "plan.json")
    log = parse_megatron_log(megatron_log(PIPELINE, 1.0, arguments={"hidden_size": 2048}), "b.log")
    with pytest.raises(SpecError, match=r"b.log: hidden_size = 2048 but model gpt2-xl has hidden size 1600"):
        check_log_matches(log, problem, PIPELINE, "plan.json")
    log = parse_megatron_log(megatron_log(PIPELINE, 1.0, global_batch=128, arguments={"global_batch_size": None}),
                             "c.log")
    with pytest.raises(SpecError, match=r"c.log: iteration lines report global batch size 128 but the job has 64"):
        check_log_matches(log, problem, PIPELINE, "plan.json")


# ---- fitting -----------------------------------------------------------------------------------------------------


def test_recovers_a_known_compute_slowdown():
    problem = build_problem(MODEL, CLUSTER)
    measured = slowed(PIPELINE, 1.3)
    log = parse_megatron_log(megatron_log(PIPELINE, measured), "train.log")
    result = fit(problem, [observe(log, PIPELINE, None)])
    assert result.compute_factors == {"A10G": pytest.approx(1.3, rel=1e-3)}
    assert result.bandwidth_factor is None
    assert result.errors_before[0] < -0.2  # the estimate was 1.3x too fast on the compute part
    assert abs(result.errors_after[0]) < 1e-3


def test_a_plain_gap_is_absorbed_by_compute():
    """The log is exactly 1.3 x the whole estimate: compute must slow down by more than 1.3 (the network and
    optimizer parts do not scale), and the calibrated estimate meets the log."""
    problem = build_problem(MODEL, CLUSTER)
    measured = 1.3 * estimate(problem, PIPELINE).iteration_time_s
    result = fit(problem, [observe(parse_megatron_log(megatron_log(PIPELINE, measured), "t.log"), PIPELINE, None)])
    assert result.compute_factors["A10G"] > 1.3
    assert result.errors_before[0] == pytest.approx(1 / 1.3 - 1, abs=1e-4)
    assert abs(result.errors_after[0]) < 1e-3


def test_several_logs_fit_the_network_too():
    problem = build_problem(MODEL, CLUSTER)
    observations = [
        observe(parse_megatron_log(megatron_log(plan, slowed(plan, 1.2, bandwidth=0.5)), f"{name}.log"), plan, None)
        for name, plan in (("pipeline", PIPELINE), ("wide", WIDE))
    ]
    result = fit(problem, observations)
    assert result.compute_factors["A10G"] == pytest.approx(1.2, rel=2e-3)
    assert result.bandwidth_factor == pytest.approx(0.5, rel=2e-3)
    assert max(abs(e) for e in result.errors_after) < 1e-3
    assert result.rms_before > 0.1


def test_fewest_factors_first():
    """Two logs of a compute-only slowdown need no network factor."""
    problem = build_problem(MODEL, CLUSTER)
    observations = [observe(parse_megatron_log(megatron_log(p, slowed(p, 1.1)), "x.log"), p, None)
                    for p in (PIPELINE, WIDE)]
    result = fit(problem, observations)
    assert result.bandwidth_factor is None
    assert result.factors.size == 1
    assert result.compute_factors["A10G"] == pytest.approx(1.1, rel=2e-3)


def test_one_log_of_a_mixed_plan_fits_one_shared_factor():
    problem = build_problem(MODEL, "fasop-a100-a10")
    plan = Plan(tp=1, dp=1, micro_batch_size=1, stages=(
        *(Stage(node_type="a100", num_layers=8) for _ in range(4)),
        *(Stage(node_type="a10", num_layers=4) for _ in range(4)),
    ))
    measured = 1.25 * estimate(problem, plan).iteration_time_s
    result = fit(problem, [observe(parse_megatron_log(megatron_log(plan, measured), "mixed.log"), plan, None)])
    gpus = sorted(result.compute_factors)
    assert len(gpus) == 2 and result.compute_factors[gpus[0]] == result.compute_factors[gpus[1]]
    assert abs(result.errors_after[0]) < 1e-3
    assert [s.describe() for s in candidate_sets(tuple(gpus), 1)] == [
        "one compute factor shared by all GPU types", "one compute factor per GPU type"]


# ---- the command ---------------------------------------------------------------------------------------------------


def test_calibrate_writes_a_profile_that_reproduces_the_log(tmp_path, capsys, monkeypatch):
    measured = slowed(PIPELINE, 1.3)
    log = write(tmp_path / "megatron-train.log", megatron_log(PIPELINE, measured))
    plan = plan_file(tmp_path, PIPELINE)
    out = tmp_path / "a10-calibrated.csv"
    code, stdout, err = run_cli(["calibrate", "--plan", str(plan), "--log", str(log), "--model", MODEL,
                                 "--cluster", CLUSTER, "--out", str(out), "--json"], capsys, monkeypatch)
    assert code == 0, err
    report = json.loads(stdout)
    assert report["compute_factors"] == {"A10G": pytest.approx(1.3, rel=1e-3)}
    assert report["inter_node_bandwidth_factor"] is None
    assert report["rms_relative_error_after"] < 1e-3 < report["rms_relative_error_before"]
    assert report["logs"][0]["warmup_lines"] == 2
    assert report["logs"][0]["warmup_median_s"] == pytest.approx(3 * measured, rel=1e-3)
    table = load_table(out)
    assert table.metadata["source"] == "optsearch calibrate"
    assert float(table.metadata["compute_factor.A10G"]) == pytest.approx(1.3, rel=1e-3)
    assert {k[2:] for k in table.entries} == {(1, 1)} and {k[0] for k in table.entries} == {"A10G"}

    code, stdout, err = run_cli(["estimate", "--model", MODEL, "--cluster", CLUSTER, "--profile", str(out),
                                 "--plan", str(plan), "--json"], capsys, monkeypatch)
    assert code == 0, err
    assert json.loads(stdout)["iteration_time_s"] == pytest.approx(measured, rel=1e-3)


def test_calibrate_table_output_and_cluster_override(tmp_path, capsys, monkeypatch):
    logs, plans = [], []
    for name, plan in (("pipeline", PIPELINE), ("wide", WIDE)):
        logs.append(write(tmp_path / f"{name}.log", megatron_log(plan, slowed(plan, 1.2, bandwidth=0.5))))
        plans.append(plan_file(tmp_path, plan, f"{name}.json"))
    out, cluster_out = tmp_path / "cal.csv", tmp_path / "fasop-a10-calibrated.yaml"
    code, stdout, err = run_cli(["calibrate", "--plan", str(plans[0]), "--plan", str(plans[1]), "--log", str(logs[0]),
                                 "--log", str(logs[1]), "--model", MODEL, "--cluster", CLUSTER, "--out", str(out),
                                 "--cluster-out", str(cluster_out)], capsys, monkeypatch)
    assert code == 0, err
    assert "Calibration (one compute factor + inter-node bandwidth)" in stdout
    assert "inter-node bandwidth x 0.500" in stdout
    assert "inter_node_bandwidth_factor" in load_table(out).metadata
    code, stdout, err = run_cli(["estimate", "--model", MODEL, "--cluster", str(cluster_out), "--profile", str(out),
                                 "--plan", str(plans[1]), "--json"], capsys, monkeypatch)
    assert code == 0, err
    assert json.loads(stdout)["iteration_time_s"] == pytest.approx(slowed(WIDE, 1.2, bandwidth=0.5), rel=1e-3)


def test_mismatched_log_exits_2(tmp_path, capsys, monkeypatch):
    log = write(tmp_path / "megatron-train.log",
                megatron_log(PIPELINE, 1.0, arguments={"pipeline_model_parallel_size": 4}))
    code, stdout, err = run_cli(["calibrate", "--plan", str(plan_file(tmp_path, PIPELINE)), "--log", str(log),
                                 "--model", MODEL, "--cluster", CLUSTER, "--out", str(tmp_path / "c.csv")],
                                capsys, monkeypatch)
    assert code == 2 and stdout == ""
    assert err.strip().splitlines() == [
        f"error: {log}: pipeline_model_parallel_size = 4 but {tmp_path / 'plan.json'} has pp = 8; this log is from a "
        "different configuration"
    ]
    assert not (tmp_path / "c.csv").exists()


def test_log_without_iterations_exits_2(tmp_path, capsys, monkeypatch):
    log = write(tmp_path / "crashed.log", megatron_log(PIPELINE, 1.0, iterations=False))
    code, _, err = run_cli(["calibrate", "--plan", str(plan_file(tmp_path, PIPELINE)), "--log", str(log),
                            "--model", MODEL, "--cluster", CLUSTER, "--out", str(tmp_path / "c.csv")],
                           capsys, monkeypatch)
    assert code == 2
    assert f"error: {log}: no 'elapsed time per iteration (ms)' lines" in err


def test_plans_and_logs_must_pair_up(tmp_path, capsys, monkeypatch):
    plan = plan_file(tmp_path, PIPELINE)
    log = write(tmp_path / "a.log", megatron_log(PIPELINE, 1.0))
    code, _, err = run_cli(["calibrate", "--plan", str(plan), "--plan", str(plan), "--log", str(log),
                            "--log", str(log), "--log", str(log), "--model", MODEL, "--cluster", CLUSTER,
                            "--out", str(tmp_path / "c.csv")],
                           capsys, monkeypatch)
    assert code == 2 and "--plan given 2 times for 3 --log files" in err


def test_scaled_profile_leaves_other_gpus_alone():
    problem = build_problem(MODEL, "fasop-a100-a10")
    fixed = corrected(problem, {"A10G": 2.0})
    a10 = problem.profile.get("A10G", "layer", 1, 1)
    assert fixed.profile.get("A10G", "layer", 1, 1) == replace(a10, forward_s=2 * a10.forward_s,
                                                               backward_s=2 * a10.backward_s)
    a100 = problem.node("a100").gpu
    assert fixed.profile.get(a100, "layer", 1, 1) == problem.profile.get(a100, "layer", 1, 1)
