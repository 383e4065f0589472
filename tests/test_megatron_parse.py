"""The emitted upstream arguments, run through Megatron-LM's own parse_args and validate_args (issue 16).

Needs a Megatron-LM checkout: set OPTSEARCH_MEGATRON_LM to its root (e.g. `git clone https://github.com/NVIDIA/Megatron-LM`
at the commit docs/launch.md names). Skipped otherwise, and skipped, naming the module, when the checkout cannot be
imported here. PyPI's megatron-core wheel ships only megatron/core, not megatron/training/arguments.py, so it cannot
stand in. On a CPU-only machine upstream's import chain also needs `triton` (any build; it is only imported), and
upstream main uses typing.override (Python 3.12): on 3.11 the test takes it from typing_extensions.

For every golden plan that the megatron format emits, and a few hand-made splits, the test parses the arguments,
validates them with WORLD_SIZE = the plan's GPUs and the environment megatron_args.sh exports (so a missing
CUDA_DEVICE_MAX_CONNECTIONS=1 with tp > 1 fails upstream's own assertion; the GPU is taken to be a Hopper, before
Blackwell, where that assertion holds), and compares Megatron's dp and per-pipeline-rank layer count with the plan.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import typing
from dataclasses import replace
from pathlib import Path

import pytest

from optsearch.costmodel import sequence_parallel_on
from optsearch.megatron import args_file_text, megatron_args
from optsearch.plan import Plan, parse_balance, plan_from_dict
from optsearch.problem import build_problem
from optsearch.targets import engine_problem

CHECKOUT = os.environ.get("OPTSEARCH_MEGATRON_LM")
GOLDEN = Path(__file__).resolve().parent / "golden" / "launch"


@pytest.fixture(scope="module")
def upstream():
    if not CHECKOUT or not (Path(CHECKOUT) / "megatron" / "training" / "arguments.py").is_file():
        pytest.skip("set OPTSEARCH_MEGATRON_LM to a Megatron-LM checkout to run upstream's parse_args")
    if not hasattr(typing, "override"):  # upstream main targets Python >= 3.12
        import typing_extensions

        typing.override = typing_extensions.override
    sys.path.insert(0, CHECKOUT)
    try:
        arguments = importlib.import_module("megatron.training.arguments")
        argument_utils = importlib.import_module("megatron.training.argument_utils")
        block = importlib.import_module("megatron.core.transformer.transformer_block")
    except ImportError as err:
        pytest.skip(f"Megatron-LM at {CHECKOUT} does not import here: {err}")
    return arguments, argument_utils, block


def _golden_cases() -> list[str]:
    return sorted(p.name for p in GOLDEN.iterdir()
                  if (p / "plan.json").is_file() and not (p / "megatron.refused").is_file())


def _hand_made() -> list[tuple[str, str, Plan]]:
    plan = lambda balance, order, recompute="none", tp=1, dp=4: Plan(  # noqa: E731
        tp=tp, dp=dp, micro_batch_size=1, stages=parse_balance(balance, order, recompute))
    return [
        ("gpt2-xl", "fasop-a10", plan("12-12-12-12", "a10", "selective")),  # even: no partition flag
        ("gpt2-xl", "fasop-a10", plan("10-13-13-12", "a10", "full")),  # first and last differ
        ("gpt2-xl", "fasop-a10", plan("20-28", "a10")),  # pp 2: first only
        ("gpt2-xl", "fasop-a100-a10", plan("0-16-16-16", "a100,a10*3", tp=2, dp=2)),  # layout, tp 2
        ("gpt2-xl+sp", "fasop-a10", plan("12-12-12-12", "a10", "selective", tp=2, dp=2)),  # --sequence-parallel
        # block recomputation: the first 5 layers of every stage (--recompute-method block --recompute-num-layers 5)
        ("gpt2-xl", "fasop-a10", replace(plan("10-13-13-12", "a10", "full"), recompute_num_layers=5)),
        # what `solve --target megatron --minimize cost` returns for gpt3-6.7b on two fasop-a10 nodes (docs/knobs.md)
        ("gpt3-6.7b", "fasop-a10", replace(plan("8-8-8-8", "a10", "full", tp=2, dp=1), recompute_num_layers=7)),
        # mixture of experts: 8 experts over ep = 4 of dp = 4, tp = 2 (expert tp = 2), uneven split (issue 16, item 3)
        ("mixtral-8x7b", "aws-p4d", replace(plan("7-9-9-7", "p4d.24xlarge", "selective", tp=2, dp=4), ep=4)),
        # --context-parallel-size 2 and --use-distributed-optimizer: 32 GPUs = tp 2 x cp 2 x dp 2 x pp 4
        # (gpt2-large: heads of 64 run flash attention, which context parallelism needs; gpt2-xl's heads of 100 do not)
        ("gpt2-large+sp", "fasop-a10", replace(plan("9-9-9-9", "a10", tp=2, dp=2), cp=2, distributed_optimizer=True)),
    ]


def _run_upstream(upstream, monkeypatch, problem, plan: Plan):
    arguments, argument_utils, block = upstream
    margs = megatron_args(problem, plan)
    exported = "export CUDA_DEVICE_MAX_CONNECTIONS=1" in args_file_text(problem, plan, margs)
    user = ["--lr", "1e-4", "--tokenizer-type", "NullTokenizer", "--vocab-size", str(problem.model.vocab_size),
            "--mock-data"]  # the user's part: data, tokenizer, learning rate
    monkeypatch.setattr(sys, "argv", ["pretrain", *margs.args, *user])
    monkeypatch.setenv("WORLD_SIZE", str(plan.num_gpus))
    monkeypatch.setenv("RANK", "0")
    if exported:
        monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    else:
        monkeypatch.delenv("CUDA_DEVICE_MAX_CONNECTIONS", raising=False)
    monkeypatch.setattr(arguments, "get_device_arch_version", lambda: 9)  # a Hopper GPU, none on this machine
    args = arguments.parse_args()
    arguments.validate_args(args)
    return margs, args, argument_utils, block


def _layers_per_rank(args, argument_utils, block, pp: int) -> list[int]:
    try:
        importlib.import_module("transformer_engine")
    except ImportError:
        args.apply_rope_fusion = False  # a kernel choice; without Transformer Engine the config refuses it
    config = argument_utils.core_transformer_config_from_args(args)
    layout = config.pipeline_model_parallel_layout
    if layout is not None:
        return [layout.get_num_layers_to_build(pp_rank=r) for r in range(pp)]
    return [block.get_num_layers_to_build(config, pp_rank=r) for r in range(pp)]


@pytest.mark.parametrize("case", _golden_cases())
def test_golden_arguments_pass_upstream_validation(upstream, monkeypatch, case):
    model, cluster = case.split("_", 1)
    problem = engine_problem("megatron", build_problem(model, cluster))  # as solve and launch build it
    plan = plan_from_dict(json.loads((GOLDEN / case / "plan.json").read_text()), case)
    _check(upstream, monkeypatch, problem, plan)


@pytest.mark.parametrize("index", range(len(_hand_made())))
def test_hand_made_splits_pass_upstream_validation(upstream, monkeypatch, index):
    model, cluster, plan = _hand_made()[index]
    problem = engine_problem("megatron", build_problem(model.removesuffix("+sp"), cluster))
    if model.endswith("+sp"):
        problem = replace(problem, job=problem.job.model_copy(update={"sequence_parallel": True}))
    _check(upstream, monkeypatch, problem, plan)


def _check(upstream, monkeypatch, problem, plan: Plan) -> None:
    margs, args, argument_utils, block = _run_upstream(upstream, monkeypatch, problem, plan)
    assert args.data_parallel_size == plan.dp
    assert args.context_parallel_size == plan.cp
    assert args.use_distributed_optimizer == plan.distributed_optimizer
    assert args.tensor_model_parallel_size == plan.tp and args.pipeline_model_parallel_size == plan.pp
    counts = [s.num_layers for s in plan.stages]
    if args.encoder_num_layers is not None and problem.model.num_layers != args.num_layers:  # T5, pp = 1
        assert plan.pp == 1 and args.encoder_num_layers + args.num_layers == counts[0]
    else:
        assert _layers_per_rank(args, argument_utils, block, plan.pp) == counts
    modes = {s.recompute for s in plan.stages if s.num_layers > 0}
    expected = {"none": None, "selective": "selective", "full": "full"}[modes.pop() if modes else "none"]
    assert args.recompute_granularity == expected
    if expected == "full":  # block: N as the plan says; else every layer (uniform, 1 layer per unit)
        block_n = plan.recompute_num_layers
        assert (args.recompute_method, args.recompute_num_layers) == (("block", block_n) if block_n else ("uniform", 1))
    assert args.sequence_parallel == sequence_parallel_on(problem.job, plan.tp)
    assert args.expert_model_parallel_size == plan.ep
    if problem.model.is_moe:
        kind = problem.model.kinds[0]
        assert (args.num_experts, args.moe_router_topk) == (kind.num_experts, kind.moe_router_topk)
        assert args.expert_tensor_parallel_size == plan.tp  # upstream's default: what the cost model priced
        assert args.moe_token_dispatcher_type == "alltoall"


def _interleaved() -> list[tuple[str, str, Plan]]:
    """Interleaved plans (issue 16): v chunks per rank, equal on a rank, unequal across ranks, empty end ranks."""
    plan = lambda balance, order, v, tp=1, dp=4, recompute="none": Plan(  # noqa: E731
        tp=tp, dp=dp, micro_batch_size=1, stages=parse_balance(balance, order, recompute), virtual_stages=v)
    return [
        ("gpt2-xl", "fasop-a10", plan("12-12-12-12", "a10", 2, recompute="selective")),
        ("gpt2-xl", "fasop-a10", plan("10-14-12-12", "a10", 2)),  # heterogeneous ranks: chunks 5, 7, 6, 6
        ("gpt2-xl", "fasop-a100-a10", plan("0-18-15-15", "a100,a10*3", 3, tp=2, dp=2)),  # empty first rank, v 3
        ("gpt2-xl", "fasop-a10", plan("20-28", "a10", 4)),  # pp 2: upstream overlaps the p2p by default
        # the plan-wide knobs together: v 2 with cp 2 and the distributed optimizer (32 GPUs = tp 2 x cp 2 x dp 2 x pp 4)
        # (gpt2-large: cp needs flash attention, which gpt2-xl's heads of 100 rule out)
        ("gpt2-large", "fasop-a10", replace(plan("10-8-10-8", "a10", 2, tp=2, dp=2), cp=2, distributed_optimizer=True)),
        # experts with interleaving: Mixtral, tp 2, dp 4, ep 4, v 2 (4 layers per chunk)
        ("mixtral-8x7b", "aws-p4d", replace(plan("8-8-8-8", "p4d.24xlarge", 2, tp=2, dp=4), ep=4)),
    ]


@pytest.mark.parametrize("index", range(len(_interleaved())))
def test_interleaved_plans_pass_upstream_validation(upstream, monkeypatch, index):
    """Megatron's virtual pipeline size is the plan's v, and its parsed layout gives every (rank, chunk) the plan's
    layers: rank r's num_layers / v in each of its v chunks (upstream's 2-D layout, [pp_rank][vpp_rank])."""
    model, cluster, plan = _interleaved()[index]
    problem = engine_problem("megatron", build_problem(model, cluster))  # as solve and launch build it
    margs, args, argument_utils, block = _run_upstream(upstream, monkeypatch, problem, plan)
    assert args.virtual_pipeline_model_parallel_size == plan.virtual_stages
    assert args.pipeline_model_parallel_size == plan.pp and args.data_parallel_size == plan.dp
    assert args.context_parallel_size == plan.cp and args.expert_model_parallel_size == plan.ep
    assert args.use_distributed_optimizer == plan.distributed_optimizer
    try:
        importlib.import_module("transformer_engine")
    except ImportError:
        args.apply_rope_fusion = False
    config = argument_utils.core_transformer_config_from_args(args)
    layout = config.pipeline_model_parallel_layout
    decoder = importlib.import_module("megatron.core.transformer.enums").LayerType.decoder
    got = [[layout.layout[r][k].count(decoder) for k in range(plan.virtual_stages)] for r in range(plan.pp)]
    assert got == [[s.num_layers // plan.virtual_stages] * plan.virtual_stages for s in plan.stages]
    assert sum(map(sum, got)) == problem.model.num_layers
