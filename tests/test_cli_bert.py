"""Encoder-only models (BERT, ModelSpec.encoder_only) as a user plans and launches them: upstream Megatron-LM runs them
with examples/bert/pretrain_bert.py (not pretrain_gpt.py), which splits no sequence over context-parallel ranks and
builds learned positions and dense layers only; the FASOP fork runs them as MODEL=Bert. `solve`, `estimate` and
`launch` agree on what runs; upstream's own parser takes the arguments where a checkout is set
(OPTSEARCH_MEGATRON_LM, tests/test_megatron_parse.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from optsearch.megatron import BERT_ENTRY, megatron_args
from optsearch.plan import Plan, parse_balance
from optsearch.problem import build_problem

from test_cli_errors import run_cli
from test_megatron_parse import CHECKOUT, _check, _run_upstream, upstream  # noqa: F401 (upstream: the fixture)

BERT = ("-m", "bert-large", "-c", "fasop-a10")
HAND = ("--tp", "1", "--dp", "2", "--micro-batch-size", "4", "--balance", "5-7-6-6")


def _one_line_exit_2(run) -> str:
    assert run.code == 2, (run.code, run.stdout, run.stderr)
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert run.stdout == ""
    return lines[0]


def _entry(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("MEGATRON_ENTRY="))


def test_solved_bert_plan_launches_with_pretrain_bert(tmp_path):
    path = tmp_path / "plan.json"
    run = run_cli("solve", *BERT, "--quiet", "--out", str(path))
    assert run.code in (0, None), run.stderr
    assert json.loads(path.read_text())["plan"].get("cp", 1) == 1  # pretrain_bert.py has no context parallelism
    run = run_cli("launch", str(path), "-f", "megatron")
    assert run.code in (0, None), run.stderr
    assert _entry(run.stdout) == "MEGATRON_ENTRY=examples/bert/pretrain_bert.py"
    assert "# note: BERT: examples/bert/pretrain_bert.py adds token-type embeddings" in run.stdout
    # torchrun.sh runs $MEGATRON_DIR/$MEGATRON_ENTRY: the same script
    out = tmp_path / "launch"
    run = run_cli("launch", str(path), "-f", "torchrun", "--out", str(out))
    assert run.code in (0, None), run.stderr
    assert _entry((out / "megatron_args.sh").read_text()) == "MEGATRON_ENTRY=examples/bert/pretrain_bert.py"


def test_hand_plan_launch_uses_pretrain_bert_and_a_gpt_model_does_not():
    run = run_cli("launch", *BERT, *HAND, "-f", "megatron")
    assert run.code in (0, None), run.stderr
    assert _entry(run.stdout) == "MEGATRON_ENTRY=examples/bert/pretrain_bert.py"
    # a causal decoder of the same shape (encoder_only edited off) is still pretrain_gpt.py's
    gpt = build_problem("bert-large", "fasop-a10")
    gpt = replace(gpt, model=gpt.model.model_copy(update={"encoder_only": False}))
    plan = Plan(tp=1, dp=2, micro_batch_size=4, stages=parse_balance("5-7-6-6", "a10", "none"))
    assert megatron_args(gpt, plan).entry == "pretrain_gpt.py"


def test_bert_with_context_parallelism_is_refused_by_estimate_and_launch():
    for command in (("estimate",), ("launch", "-f", "megatron")):
        line = _one_line_exit_2(run_cli(*command, *BERT, *HAND, "--cp", "2"))
        assert "cp = 2" in line and "pretrain_bert.py" in line, line
    # without --cp both accept the plan
    assert run_cli("estimate", *BERT, *HAND).code in (0, None)


def _custom_bert(tmp_path: Path, **changes) -> Path:
    data = yaml.safe_load((Path(__file__).resolve().parents[1] / "models" / "bert-large.yaml").read_text())
    data.update(name="bert-custom", **changes)
    path = tmp_path / "bert-custom.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_bert_that_pretrain_bert_cannot_build_is_refused_by_solve_and_launch(tmp_path):
    """Rotary positions: pretrain_bert.py passes no position_embedding_type, so BertModel would build learned ones
    and silently train another model. solve (--target megatron) and launch refuse it; estimate, which prices the
    cost model's model for any engine, does not."""
    model = _custom_bert(tmp_path, position_embedding="rotary")
    line = _one_line_exit_2(run_cli("solve", "-m", str(model), "-c", "fasop-a10", "--quiet"))
    assert "model bert-custom" in line and "rotary" in line and "pretrain_bert.py" in line, line
    line = _one_line_exit_2(run_cli("launch", "-m", str(model), "-c", "fasop-a10", *HAND, "-f", "megatron"))
    assert "rotary" in line and "pretrain_bert.py" in line, line
    assert run_cli("estimate", "-m", str(model), "-c", "fasop-a10", *HAND).code in (0, None)


def test_encoder_only_with_cross_attention_is_a_spec_error(tmp_path):
    model = _custom_bert(tmp_path, num_layers=4, layer_kinds=[
        {"name": "encoder", "num_layers": 2}, {"name": "decoder", "num_layers": 2, "cross_attention": True}])
    line = _one_line_exit_2(run_cli("estimate", "-m", str(model), "-c", "fasop-a10", "--tp", "1", "--dp", "1",
                                    "--micro-batch-size", "1", "--balance", "2-2"))
    assert "encoder_only" in line and "cross-attention" in line, line


def test_fasop_target_runs_bert_as_model_bert_only_when_encoder_only():
    """MODEL=Bert runs the fork's BERT script: a causal decoder of BERT-Large's shape is not that model."""
    run = run_cli("solve", "-m", "bert-large", "-c", "fasop-a100-a10", "--target", "fasop", "--quiet", "--json")
    assert run.code in (0, None), run.stderr
    run = run_cli("solve", "-m", "bert-large", "-c", "fasop-a100-a10", "--target", "fasop", "--quiet",
                  "--set", "model.encoder_only=false")
    line = _one_line_exit_2(run)
    assert "encoder_only = false" in line and "MODEL=Bert" in line and "--target megatron" in line, line


# ---- upstream's parser (skipped without OPTSEARCH_MEGATRON_LM) ----------------------------------------------------

def _bert_plans() -> list[Plan]:
    plan = lambda balance, recompute="none", tp=1, dp=2, **kw: replace(Plan(  # noqa: E731
        tp=tp, dp=dp, micro_batch_size=4, stages=parse_balance(balance, "a10", recompute)), **kw)
    return [
        plan("24"),  # pp 1
        plan("5-7-6-6", "selective"),  # uneven: --pipeline-model-parallel-layout
        plan("6-6-6-6", "full", tp=2, distributed_optimizer=True),  # tp 2 (sequence parallelism), the optimizer
        plan("8-8-8", "full", recompute_num_layers=3),  # block recomputation
        plan("4-8-6-6", virtual_stages=2),  # interleaved: upstream tests BERT with a virtual pipeline
    ]


@pytest.mark.parametrize("index", range(len(_bert_plans())))
def test_bert_arguments_pass_upstream_validation(upstream, monkeypatch, index):  # noqa: F811
    problem = build_problem("bert-large", "fasop-a10")
    plan = _bert_plans()[index]
    assert (Path(CHECKOUT) / BERT_ENTRY).is_file()  # the script the launch names is where it says
    if plan.virtual_stages > 1:
        margs, args, _, _ = _run_upstream(upstream, monkeypatch, problem, plan)
        assert margs.entry == BERT_ENTRY
        assert args.virtual_pipeline_model_parallel_size == plan.virtual_stages
        assert args.pipeline_model_parallel_size == plan.pp and args.data_parallel_size == plan.dp
        return
    assert megatron_args(problem, plan).entry == BERT_ENTRY
    _check(upstream, monkeypatch, problem, plan)
