"""Block recomputation's N (`--recompute-num-layers`, a plan's `recompute_num_layers`) above the most layers of one
kind on any stage is refused by `estimate` and `launch` (exit 2, one line naming the flag or field, the value and the
range). Upstream Megatron-LM states the range (transformer_config.py: "recompute_num_layers must be between 1 and
num_layers_per_pipeline_rank") but does not enforce it (megatron/core/recompute.py checkpoints layer_idx < N, so a
larger N is full recomputation of every layer); the solver never writes such an N (it decodes it as full)."""

from __future__ import annotations

import json

from test_cli_errors import run_cli

GPT2 = ("-m", "gpt2-xl", "-c", "fasop-a10", "--tp", "1", "--dp", "4", "--micro-batch-size", "1")


def _one_line_exit_2(run) -> str:
    assert run.code == 2, (run.code, run.stdout, run.stderr)
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and run.stdout == "", run.stderr
    return lines[0]


def test_estimate_and_launch_refuse_n_above_every_stage(tmp_path):
    for command in (("estimate",), ("launch", "-f", "megatron", "--out", str(tmp_path / "out"))):
        line = _one_line_exit_2(run_cli(*command, *GPT2, "--balance", "10-14-12-12", "--recompute-num-layers", "15"))
        assert line.startswith("error: --recompute-num-layers 15 is more than the 14 layers on any stage"), line
        assert "give N <= 14" in line
    assert not (tmp_path / "out").exists()  # nothing written


def test_n_between_the_smallest_and_the_largest_stage_is_block_recomputation():
    """N = 13 exceeds stage 0's 10 layers (all of them recomputed there, as upstream does) but not stage 1's 14: a
    plan the solver itself can write; N = 14 (the largest stage) is upstream's upper end and accepted too."""
    for n in ("13", "14"):
        run = run_cli("estimate", *GPT2, "--balance", "10-14-12-12", "--recompute-num-layers", n, "--json")
        assert run.code in (0, None), run.stderr
        assert json.loads(run.stdout)["plan"]["recompute_num_layers"] == int(n)
    run = run_cli("launch", *GPT2, "--balance", "10-14-12-12", "--recompute-num-layers", "13", "-f", "megatron")
    assert run.code in (0, None), run.stderr
    assert "--recompute-num-layers 13" in run.stdout.replace("\n  ", " ")


def test_plan_file_with_n_above_every_stage_is_refused(tmp_path):
    run = run_cli("estimate", *GPT2, "--balance", "12-12-12-12", "--recompute-num-layers", "12", "--json")
    assert run.code in (0, None), run.stderr
    data = json.loads(run.stdout)
    data["plan"]["recompute_num_layers"] = 40
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"plan": data["plan"]}))
    for command in (("estimate", "--plan", str(path)), ("launch", str(path), "-f", "megatron")):
        line = _one_line_exit_2(run_cli(*command, "-m", "gpt2-xl", "-c", "fasop-a10"))
        assert f"{path}: recompute_num_layers = 40 is more than the 12 layers on any stage" in line, line


def test_two_kinds_count_per_kind():
    """T5 (24 encoder + 24 decoder layers on one stage): N counts layers of each block, so 24 is the top, not 48."""
    t5 = ("-m", "t5-fasop", "-c", "fasop-a100-a10", "--tp", "1", "--dp", "1", "--micro-batch-size", "1",
          "--balance", "48", "--node-order", "a100")
    assert run_cli("estimate", *t5, "--recompute-num-layers", "24").code in (0, None)
    line = _one_line_exit_2(run_cli("estimate", *t5, "--recompute-num-layers", "25"))
    assert "25 is more than the 24 layers of one kind (one transformer block) on any stage" in line, line
