"""AMP's real-trial validation sets (bench/validation/amp-*.csv): the log-to-plan conversion on hand-worked
partitions, the shipped rows, and the grad_reduce_in_fp32 column they need (DeepSpeed's fp32_allreduce)."""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from pathlib import Path

import pytest

from optsearch.costmodel import estimate
from optsearch.errors import SpecError
from optsearch.validate import load_runs, price

ROOT = Path(__file__).resolve().parents[1]
VALIDATION = ROOT / "bench" / "validation"


def _converter():
    spec = importlib.util.spec_from_file_location("amp_to_csv", VALIDATION / "amp_to_csv.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_deepspeed_parts_to_layers_by_hand():
    amp = _converter()
    # specs: 0 embedding, 1 transpose, 2..25 the 24 layers, 26..29 transpose, norm, logits, cast.
    assert amp.layers_per_stage([0, 30]) == [24]
    assert amp.layers_per_stage([0, 8, 14, 20, 30]) == [6, 6, 6, 6]  # 2..7, 8..13, 14..19, 20..25
    assert amp.layers_per_stage([0, 9, 15, 21, 30]) == [7, 6, 6, 5]
    assert amp.layers_per_stage([0, 15, 30]) == [13, 11]
    # the first two stages hold the embedding and the transpose only: no transformer layer
    assert amp.layers_per_stage([0, 1, 2, 3, 4, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 30])[:3] == [0, 0, 1]
    with pytest.raises(ValueError):
        amp.layers_per_stage([0, 20, 10, 30])


def test_stage_nodes_pipeline_major():
    amp = _converter()
    nodes = ["p3"] * 12 + ["g4"] * 4  # het_cluster.py: the g4dn is the last node
    assert amp.stage_nodes(4, nodes) == ["p3", "p3", "p3", "g4"]
    assert amp.stage_nodes(8, nodes) == ["p3"] * 6 + ["g4"] * 2
    assert amp.stage_nodes(2, nodes) is None  # stage 1 = ranks 8..15: a p3 node and the g4dn
    assert amp.stage_nodes(1, nodes) is None


def test_failed_run_whose_larger_micro_batch_ran_is_not_taken_as_oom():
    amp = _converter()
    line = ("Simulating result: None, [0, 8, 14, 20, 30], {mbs}, {{'mp_deg': tensor([4.]), 'dp_deg': tensor([1.]), "
            "'pp_deg': tensor([4.])}}, with p_cost: tensor([3.1]), r_cost: {r} \n")
    text = line.format(mbs=1, r="inf") + line.format(mbs=2, r="3.92") + line.format(mbs=4, r="inf")
    rows, skipped = amp.convert(text, "t", "x.txt", "amp-g4dn", ["g4"] * 16)
    # mbs 1 failed although mbs 2 ran: not a memory failure, left out; mbs 4 failed above a run that fit: an OOM row
    assert skipped == ["t-00-tp4-dp1-pp4-mbs1"]
    assert [(r["micro_batch_size"], r["oom"], r["measured_iteration_s"]) for r in rows] == [(2, 0, "3.92"), (4, 1, "")]
    assert rows[0]["stages"] == "g4:6,g4:6,g4:6,g4:6"


def test_shipped_amp_sets():
    homo = load_runs(VALIDATION / "amp-g4dn.csv")
    het = load_runs(VALIDATION / "amp-p3-g4dn.csv")
    assert (len(homo), sum(r.oom for r in homo)) == (51, 4)
    assert (len(het), sum(r.oom for r in het)) == (28, 4)
    for run in homo + het:
        assert run.global_batch_size == 32 and run.precision == "fp16" and run.grad_reduce_in_fp32 is True
        assert run.plan.tp * run.plan.dp * len(run.plan.stages) == 16
        assert sum(s.num_layers for s in run.plan.stages) == 24
        assert run.source.startswith("DachengLi1/AMP@72eeea4 src/results/")
    first = {r.run_id: r for r in homo}["amp-g4dn-00-tp1-dp16-pp1-mbs1"]
    assert first.measured_s == 1.32 and first.plan.dp == 16
    assert [s.node_type for s in het[0].plan.stages] == ["p3.8xlarge"] * 3 + ["g4dn.12xlarge"]


def test_grad_reduce_in_fp32_column_doubles_the_gradient_bytes(tmp_path):
    head = ("run_id,group,source,model,cluster,global_batch_size,tp,dp,micro_batch_size,stages,"
            "measured_iteration_s,oom,precision,grad_reduce_in_fp32\n")
    row = "r{0},g,s,gpt2-medium,amp-g4dn,32,1,16,1,g4dn.12xlarge:24,1.3,0,fp16,{1}\n"
    path = tmp_path / "runs.csv"
    path.write_text(head + row.format(0, 0) + row.format(1, 1) + row.format(2, ""))
    runs = load_runs(path)
    assert [r.grad_reduce_in_fp32 for r in runs] == [False, True, None]
    fp16, fp32, default = price(runs)
    assert default.predicted_s == fp16.predicted_s  # fp16 job: gradients in fp16 unless told
    # the same plan priced directly: only the data-parallel all-reduce (and its bytes) differ
    from optsearch.problem import build_problem
    problem = build_problem("gpt2-medium", "amp-g4dn", global_batch_size=32)
    job16 = problem.job.model_copy(update={"precision": "fp16", "grad_reduce_in_fp32": False})
    job32 = problem.job.model_copy(update={"precision": "fp16", "grad_reduce_in_fp32": True})
    e16 = estimate(replace(problem, job=job16), runs[0].plan)
    e32 = estimate(replace(problem, job=job32), runs[0].plan)
    assert fp16.predicted_s == pytest.approx(e16.iteration_time_s)
    assert fp32.predicted_s == pytest.approx(e32.iteration_time_s)
    assert fp32.predicted_s > fp16.predicted_s
    path.write_text(head + row.format(0, "yes"))
    with pytest.raises(SpecError, match="grad_reduce_in_fp32 = 'yes': must be 1, 0 or empty"):
        load_runs(path)
