"""`optsearch launch`: Megatron-LM arguments, partition strings, torchrun/Slurm scripts, and what is refused.

Golden files: tests/golden/launch/MODEL_CLUSTER/plan.json is launched in every format; FORMAT/FILE holds the
expected text, FORMAT.refused the expected refusal. Regenerate with OPTSEARCH_UPDATE_GOLDEN=1 and review the diff.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from draws import draws

from optsearch.costmodel import place
from optsearch.errors import SpecError, UnsupportedPlanError
from optsearch.megatron import (
    ARGS_FILE,
    LAUNCH_FORMATS,
    format_layout,
    launch_files,
    launch_nodes,
    megatron_args,
    padded_vocab_size,
    parse_layout,
    partition_args,
    plan_for_launch,
    plan_from_megatron_args,
    recompute_args,
    slurm_components,
)
from optsearch.plan import Plan, Stage, parse_balance, plan_from_dict
from optsearch.problem import build_problem
from optsearch.targets import engine_problem

GOLDEN = Path(__file__).resolve().parent / "golden" / "launch"
UPDATE = os.environ.get("OPTSEARCH_UPDATE_GOLDEN") == "1"
CASES = sorted(p.name for p in GOLDEN.iterdir() if (p / "plan.json").is_file())


def _case(name: str, target: str = "megatron"):
    """The golden case's problem as `launch` builds it for the target's format (targets.engine_problem: upstream
    prices flash attention where Transformer Engine runs it, the FASOP fork none) and its plan."""
    model, cluster = name.split("_", 1)
    problem = engine_problem(target, build_problem(model, cluster))
    plan = plan_from_dict(json.loads((GOLDEN / name / "plan.json").read_text()), name)
    return problem, plan


def _megatron_tokens(args_file_text: str) -> list[str]:
    body = args_file_text.split("MEGATRON_ARGS=(", 1)[1].split("\n)", 1)[0]
    return shlex.split(body)


# ---- golden files --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", LAUNCH_FORMATS)
@pytest.mark.parametrize("case", CASES)
def test_golden(case, fmt):
    problem, plan = _case(case, "fasop" if fmt == "fasop" else "megatron")
    folder = GOLDEN / case
    refused = folder / f"{fmt}.refused"
    try:
        files, _ = launch_files(problem, plan, fmt)
    except UnsupportedPlanError as err:
        if UPDATE:
            refused.write_text(str(err) + "\n")
        assert refused.is_file(), f"{case}/{fmt} refused but no {refused.name} golden: {err}"
        assert str(err) + "\n" == refused.read_text()
        return
    assert not refused.is_file(), f"{case}/{fmt}: expected the refusal in {refused.name}, got files"
    expected_dir = folder / fmt
    if UPDATE:
        expected_dir.mkdir(exist_ok=True)
        for name, text in files.items():
            (expected_dir / name).write_text(text)
    assert sorted(files) == sorted(p.name for p in expected_dir.iterdir())
    for name, text in files.items():
        assert text == (expected_dir / name).read_text(), f"{case}/{fmt}/{name} differs from the golden file"


def test_golden_cases_cover_the_issue():
    assert {"gpt2-xl_fasop-a10", "gpt2-xl_fasop-a100-a10", "llama2-70b_aws-p4d", "t5-fasop_fasop-a10"} <= set(CASES)
    # T5 with pp > 1 is refused upstream but expressible in the FASOP fork
    assert (GOLDEN / "t5-fasop_fasop-a100-a10" / "megatron.refused").is_file()
    assert (GOLDEN / "t5-fasop_fasop-a100-a10" / "fasop" / "fasop_conf.sh").is_file()


# ---- Megatron-LM arguments -----------------------------------------------------------------------------------


def test_fasop_homogeneous_run_uses_the_upstream_layout():
    problem, plan = _case("gpt2-xl_fasop-a10")
    args = megatron_args(problem, plan).args
    i = args.index("--pipeline-model-parallel-layout")
    assert args[i + 1] == "E|t*11|(t*8|)*4t*5|L"
    assert "--decoder-first-pipeline-num-layers" not in args  # a 0-layer end stage needs the layout
    assert args[args.index("--fp16") - 1] == "128"  # --make-vocab-size-divisible-by 128 just before the precision


def test_llama_gqa_rope_rmsnorm_swiglu_and_end_stages():
    problem, plan = _case("llama2-70b_aws-p4d")
    args = megatron_args(problem, plan).args
    joined = " ".join(args)
    for flag in ("--group-query-attention --num-query-groups 8", "--swiglu", "--normalization RMSNorm",
                 "--disable-bias-linear", "--position-embedding-type rope", "--untie-embeddings-and-output-weights",
                 "--bf16", "--decoder-first-pipeline-num-layers 7", "--decoder-last-pipeline-num-layers 7",
                 "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"):
        assert flag in joined, flag
    assert "--kv-channels" not in joined  # 8192 / 64 = 128 is Megatron's default


def test_t5_kv_channels_and_encoder_decoder_layers():
    problem, plan = _case("t5-fasop_fasop-a10")
    margs = megatron_args(problem, plan)
    joined = " ".join(margs.args)
    assert margs.entry == "examples/t5/pretrain_t5.py"  # moved out of the repository root upstream
    assert "--encoder-num-layers 24 --decoder-num-layers 24" in joined
    assert "--kv-channels 128" in joined
    assert "--num-layers " not in joined  # upstream refuses --num-layers together with --encoder-num-layers


def test_t5_pipeline_refused_upstream():
    problem, plan = _case("t5-fasop_fasop-a100-a10")
    with pytest.raises(UnsupportedPlanError, match="Pipeline parallelism is not supported for T5"):
        megatron_args(problem, plan)


def test_t5_fasop_fork_takes_any_balance_with_the_split_rank():
    """The fork reads --balance for T5 too (its own example: 11-13-11-13, split rank 2); only a stage holding both
    encoder and decoder layers is refused."""
    problem, _ = _case("t5-fasop_fasop-a100-a10", "fasop")
    uneven = Plan(tp=1, dp=4, micro_batch_size=1, stages=parse_balance("16-8-12-12", "a100,a10*3"))
    files, _ = launch_files(problem, uneven, "fasop")
    text = files["fasop_conf.sh"]
    assert 'PARTITION="16-8-12-12"' in text and "PIPELINE_MODEL_PARALLEL_SPLIT_RANK=2" in text
    assert "--balance 16-8-12-12" in text and "--pipeline-model-parallel-split-rank 2" in text
    assert "MODEL=T5" in text and "NPROC_PER_NODE=4" in text
    straddle = Plan(tp=1, dp=4, micro_batch_size=1, stages=parse_balance("12-16-8-12", "a100,a10*3"))
    with pytest.raises(UnsupportedPlanError, match="no stage boundary falls between the 24 encoder"):
        launch_files(problem, straddle, "fasop")


def test_fasop_fork_writes_the_node_order_and_refuses_one_it_cannot_express():
    problem, plan = _case("gpt2-xl_fasop-a100-a10")
    text = launch_files(problem, plan, "fasop")[0]["fasop_conf.sh"]
    assert "#   node rank 0: 1 x a100 (_02_hetero_master_job.sh, --nodes=1), stage 0" in text
    assert "#   node ranks 1-7: 7 x a10 (_02_hetero_slave_job.sh, --nodes=7), stages 1-7" in text
    assert "MODEL=gpt2\nNPROC_PER_NODE=4\nNNODES=8\nWORLD_SIZE=32" in text
    a10_first = Plan(tp=1, dp=4, micro_batch_size=1, stages=parse_balance("6-6-6-6-6-6-12-0", "a10*6,a100,a10"))
    with pytest.raises(UnsupportedPlanError, match="fix the node order"):
        launch_files(problem, a10_first, "fasop")
    launch_files(problem, a10_first, "torchrun")  # upstream with torchrun.sh: any order


def test_llama_runs_without_dropout_and_tp_sets_cuda_device_max_connections():
    problem, plan = _case("llama2-70b_aws-p4d")
    files, _ = launch_files(problem, plan, "megatron")
    text = files["megatron_args.sh"]
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1" in text  # tp 8
    assert "--attention-dropout 0.0" in text and "--hidden-dropout 0.0" in text
    gpt_problem, gpt_plan = _case("gpt2-xl_fasop-a10")
    gpt_text = launch_files(gpt_problem, gpt_plan, "megatron")[0]["megatron_args.sh"]
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in gpt_text  # tp 1
    assert "dropout" not in gpt_text  # GPT-2 keeps Megatron's default dropout


def test_launch_refuses_a_plan_that_does_not_fit_unless_told():
    problem, _ = _case("gpt2-xl_fasop-a10")
    crammed = Plan(tp=1, dp=4, micro_batch_size=16, stages=parse_balance("48", "a10"))
    with pytest.raises(UnsupportedPlanError, match=r"stage 0 \(a10\) needs .* GiB per GPU, its GPU has 20.2 GiB usable after the 10% headroom"):
        launch_files(problem, crammed, "megatron")
    files, notes = launch_files(problem, crammed, "fasop", allow_no_fit=True)
    assert notes[0].startswith("WARNING: does not fit: plan: stage 0 (a10)")
    assert "# WARNING: does not fit" in files["fasop_conf.sh"].splitlines()[1]



@pytest.mark.parametrize(
    ("counts", "expected"),
    [
        ([12, 12, 12, 12], []),
        ([4, 7, 7, 7, 7, 7, 7, 2], ["--decoder-first-pipeline-num-layers", "4", "--decoder-last-pipeline-num-layers", "2"]),
        ([10, 12, 12, 14], ["--decoder-first-pipeline-num-layers", "10", "--decoder-last-pipeline-num-layers", "14"]),
        ([8, 10, 10, 10], ["--decoder-first-pipeline-num-layers", "8"]),
        ([20, 28], ["--decoder-first-pipeline-num-layers", "20"]),
        ([0, 24, 24], ["--pipeline-model-parallel-layout", "E|t*24|t*24L"]),
        ([12, 12, 13, 11], ["--pipeline-model-parallel-layout", "Et*12|t*12|t*13|t*11L"]),
    ],
)
def test_partition_uses_the_plainest_upstream_spelling(counts, expected):
    plan = Plan(tp=1, dp=1, micro_batch_size=1, stages=tuple(Stage(node_type="a10", num_layers=n) for n in counts))
    assert partition_args(plan) == expected


def test_vocab_padding():
    assert padded_vocab_size(50257, 1) == 50304
    assert padded_vocab_size(50257, 8) == 51200
    assert padded_vocab_size(32000, 8) == 32768
    assert padded_vocab_size(30522, 4) == 30720


# ---- refusals ------------------------------------------------------------------------------------------------


def test_tp_must_divide_kv_heads():
    problem, _ = _case("llama2-70b_aws-p4d")
    plan = Plan(tp=16, dp=1, micro_batch_size=1, stages=parse_balance("80", "p4d.24xlarge"))
    with pytest.raises(UnsupportedPlanError, match="tp = 16 does not divide num_attention_heads 64|tp = 16 does not"):
        megatron_args(problem, plan)
    gqa = build_problem("llama2-70b", "aws-p4d").model.model_copy(update={"num_kv_heads": 4})
    problem = build_problem(gqa, "aws-p4d")
    plan = Plan(tp=8, dp=2, micro_batch_size=1, stages=parse_balance("40-40", "p4d.24xlarge"))
    with pytest.raises(UnsupportedPlanError, match=r"tp = 8 does not divide the 4 key/value heads \(--num-query-groups\)"):
        megatron_args(problem, plan)


def test_mixed_recompute_refused_or_superset():
    problem, plan = _case("llama2-70b_mixed-pool-8k")
    stages = tuple(Stage(node_type=s.node_type, num_layers=s.num_layers, recompute="none" if i < 4 else "full")
                   for i, s in enumerate(plan.stages))
    mixed = Plan(tp=plan.tp, dp=plan.dp, micro_batch_size=plan.micro_batch_size, stages=stages)
    with pytest.raises(UnsupportedPlanError, match=r"stages mix recomputation modes \(full on stages 4-7; none on "
                                                    r"stages 0-3\).*--recompute-superset"):
        megatron_args(problem, mixed)
    args, notes = recompute_args(mixed, allow_superset=True)
    assert args == ["--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers", "7"]
    assert "slower than estimated" in notes[0]
    sel = Plan(tp=1, dp=1, micro_batch_size=1, stages=(Stage(node_type="a", num_layers=3, recompute="selective"),
                                                      Stage(node_type="a", num_layers=3, recompute="full")))
    assert recompute_args(sel, allow_superset=True)[0][:2] == ["--recompute-granularity", "full"]
    # a 0-layer stage's mode does not matter
    fasop = Plan(tp=1, dp=1, micro_batch_size=1, stages=(Stage(node_type="a", num_layers=0),
                                                        Stage(node_type="a", num_layers=3, recompute="selective")))
    assert recompute_args(fasop) == (["--recompute-granularity", "selective"], [])


def test_per_stage_tp_dp_refused():
    data = json.loads((GOLDEN / "gpt2-xl_fasop-a100-a10" / "plan.json").read_text())
    data["stages"][0]["tp"] = 2
    with pytest.raises(UnsupportedPlanError, match=r"p.json: stages\[0\]\.tp = 2: per-stage tp \(plan-wide 1\)"):
        plan_for_launch(data, "p.json")
    same = json.loads((GOLDEN / "gpt2-xl_fasop-a100-a10" / "plan.json").read_text())
    for s in same["stages"]:
        s["dp"] = 4
    assert plan_for_launch(same, "p.json").dp == 4  # consistent with the plan-wide dp: fine


def test_tp_group_must_not_straddle_nodes():
    from optsearch.spec import ClusterSpec

    cluster = build_problem("gpt2-xl", "fasop-a10").cluster
    six = cluster.model_copy(update={"node_types": [cluster.node_types[0].model_copy(update={"gpus_per_node": 6})]})
    problem = build_problem("gpt2-xl", ClusterSpec.model_validate(six.model_dump()))
    plan = Plan(tp=4, dp=1, micro_batch_size=1, stages=parse_balance("24-24", "a10"))
    with pytest.raises(UnsupportedPlanError, match="tp = 4 does not divide the 6 GPUs per node"):
        launch_files(problem, plan, "torchrun")


# ---- nodes and rank order ------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES)
def test_every_rank_runs_on_the_planned_node_type(case):
    """Megatron's rank order (tp fastest, then dp, then pp): global rank r is in stage r // (tp dp); the node
    holding r (torchrun numbers ranks node by node) must be of the stage's planned type."""
    problem, plan = _case(case)
    nodes = launch_nodes(problem, plan)
    rank = 0
    for node in nodes:
        assert node.first_rank == rank
        for local in range(node.nproc):
            stage = (rank + local) // plan.gpus_per_stage
            assert plan.stages[stage].node_type == node.node_type
            assert node.nproc <= problem.node(node.node_type).gpus_per_node
        rank += node.nproc
    assert rank == plan.num_gpus
    counted: dict[str, int] = {}
    for node in nodes:
        counted[node.node_type] = counted.get(node.node_type, 0) + 1
    assert counted == place(problem, plan).nodes
    comps = slurm_components(problem, plan)
    assert [n for c in comps for n in c.nodes] == list(nodes)


def test_partial_nodes_get_fewer_processes():
    problem = build_problem("gpt2-xl", "fasop-a100-a10")
    plan = Plan(tp=1, dp=2, micro_batch_size=1, stages=parse_balance("16-16-16", "a100,a10*2"))
    nodes = launch_nodes(problem, plan)
    assert [(n.node_type, n.nproc, n.first_rank, n.stages) for n in nodes] == [
        ("a100", 2, 0, (0,)), ("a10", 4, 2, (1, 2))]


def test_slurm_components_follow_runs():
    problem, plan = _case("gpt2-xl_fasop-a100-a10")
    text = launch_files(problem, plan, "slurm")[0]["job.sbatch"]
    assert text.count("#SBATCH hetjob") == 1
    assert re.findall(r"#SBATCH --nodes=(\d+)", text) == ["1", "7"]
    assert re.findall(r"#SBATCH --constraint=(\S+)", text) == ["a100", "a10"]
    assert ("srun --het-group=1 --nodes=7 --ntasks-per-node=1 bash -c 'bash \"$0\" $((1 + SLURM_NODEID)) \"$@\"' "
            '"$LAUNCH_DIR/torchrun.sh" "$@" &') in text


@pytest.mark.parametrize("case", CASES)
def test_generated_shell_parses(case, tmp_path):
    problem, plan = _case(case)
    for fmt in ("torchrun", "slurm", "fasop"):
        try:
            files, _ = launch_files(problem, plan, fmt)
        except UnsupportedPlanError:
            continue
        for name, text in files.items():
            if name != "hostfile":
                (tmp_path / name).write_text(text)
                subprocess.run(["bash", "-n", str(tmp_path / name)], check=True)


def test_torchrun_script_runs_the_right_command(tmp_path):
    """Execute torchrun.sh with a fake torchrun: node rank 0 of the heterogeneous plan."""
    problem, plan = _case("gpt2-xl_fasop-a100-a10")
    files, _ = launch_files(problem, plan, "torchrun")
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "torchrun").write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    (fake / "torchrun").chmod(0o755)
    megatron = tmp_path / "m"  # torchrun.sh checks the entry script is there
    megatron.mkdir()
    (megatron / "pretrain_gpt.py").write_text("")
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "MEGATRON_DIR": str(megatron)}
    out = subprocess.run(["bash", str(tmp_path / "torchrun.sh"), "1", "--data-path", "d"], env=env, check=True,
                         capture_output=True, text=True).stdout.split("\n")
    assert out[:10] == ["--nnodes", "8", "--node-rank", "1", "--nproc-per-node", "4", "--master-addr", "a100-0",
                        "--master-port", "6000"]
    assert out[10] == f"{megatron}/pretrain_gpt.py"
    assert out[-3:-1] == ["--data-path", "d"]
    assert "Et*12|(t*6|)*6L" in out
    bad = subprocess.run(["bash", str(tmp_path / "torchrun.sh"), "9"], env=env, capture_output=True, text=True)
    assert bad.returncode == 2 and "node ranks 0..7" in bad.stderr


def test_slurm_job_fails_when_one_component_fails(tmp_path):
    """job.sbatch with a fake srun whose second component exits 7: the job exits 7 (a bare `wait` returned 0, and Slurm
    marked such a job COMPLETED); with every component at 0 it exits 0."""
    problem, plan = _case("gpt2-xl_fasop-a100-a10")
    files, _ = launch_files(problem, plan, "slurm")
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    fake = tmp_path / "bin"
    fake.mkdir()
    for name, body in {"srun": 'case "$1" in --het-group=1) exit "${FAIL:-0}" ;; esac\nexit 0\n',
                       "scontrol": "echo node-0\n"}.items():
        (fake / name).write_text("#!/bin/sh\n" + body)
        (fake / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "SLURM_JOB_NODELIST": "node-0"}
    failed = subprocess.run(["bash", str(tmp_path / "job.sbatch")], env={**env, "FAIL": "7"}, cwd=tmp_path,
                            capture_output=True, text=True)
    assert failed.returncode == 7, failed.stderr
    ok = subprocess.run(["bash", str(tmp_path / "job.sbatch")], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr


# ---- round trips ---------------------------------------------------------------------------------------------


counts_strategy = st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=12).flatmap(
    lambda mid: st.tuples(st.integers(0, 40), st.just(mid), st.integers(0, 40))
).map(lambda t: [t[0], *t[1], t[2]] if len(t[1]) > 1 else t[1])


@settings(max_examples=draws(200), deadline=None)
@given(counts_strategy)
def test_layout_round_trip(counts):
    if len(counts) == 1 and counts[0] == 0:
        return
    assert parse_layout(format_layout(counts)) == tuple(counts)


@settings(max_examples=draws(100), deadline=None)
@given(counts_strategy, st.sampled_from(["none", "selective", "full"]), st.integers(1, 8), st.integers(1, 4))
def test_partition_formats_round_trip(counts, recompute, tp, dp):
    """Balance string, layout string and Megatron arguments all parse back to the plan."""
    if sum(counts) == 0:
        return
    order = ",".join(("a100" if i % 3 == 0 else "a10") for i in range(len(counts)))
    stages = parse_balance("-".join(map(str, counts)), order, recompute)
    plan = Plan(tp=tp, dp=dp, micro_batch_size=2, stages=stages)
    assert parse_balance(plan.balance, order, recompute) == plan.stages
    from optsearch.megatron import layout_stages

    assert layout_stages(format_layout(counts), order, recompute) == plan.stages
    recompute_flags, _ = recompute_args(plan)
    tokens = ["--tensor-model-parallel-size", str(tp), "--pipeline-model-parallel-size", str(plan.pp),
              *partition_args(plan), "--micro-batch-size", "2", "--num-layers", str(sum(counts)), *recompute_flags]
    back = plan_from_megatron_args(tokens, node_order=order, dp=dp)
    # 0-layer stages: Megatron has no recompute mode per stage; compare modes where layers are
    assert back.tp == plan.tp and back.micro_batch_size == 2 and back.balance == plan.balance
    assert [s.node_type for s in back.stages] == [s.node_type for s in plan.stages]
    assert [s.recompute for s in back.stages if s.num_layers] == [s.recompute for s in plan.stages if s.num_layers]


@pytest.mark.parametrize("case", CASES)
def test_golden_megatron_args_round_trip(case):
    problem, plan = _case(case)
    try:
        files, _ = launch_files(problem, plan, "megatron")
    except UnsupportedPlanError:
        pytest.skip("refused upstream")
    tokens = _megatron_tokens(files[ARGS_FILE])
    order = ",".join(s.node_type for s in plan.stages)
    assert plan_from_megatron_args(tokens, node_order=order, dp=plan.dp) == plan


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("t*4|L", "E \\(the embedding\\) must come exactly once, first"),
        ("Et*4|t*4", "L \\(the loss / LM head\\) must come exactly once, last"),
        ("Et*4|mL", "MTP layer"),
        ("Et*4|x|L", "unexpected characters 'x'"),
        ("t|Et*4|L", "E \\(the embedding\\) must come exactly once, first"),
    ],
)
def test_bad_layouts(text, message):
    with pytest.raises(SpecError, match=message):
        parse_layout(text)


def test_upstream_layout_examples():
    # from upstream's docstrings / help text
    assert parse_layout("Ettt|(tt|)*29L") == (3, *([2] * 29), 0)
    with pytest.raises(SpecError, match="MTP"):
        parse_layout("Ettt|(tt|)*29,m|L")  # upstream's docstring example carries an MTP layer
    assert parse_layout("Et*2|(tt|)*22t|(tt|)*7L") == (2, *([2] * 22), 1, *([2] * 7), 0)  # 61 layers


# ---- CLI -----------------------------------------------------------------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess:
    """`optsearch ARGS` through main() in this process (test_cli_errors.run_cli), which spares each command the CLI's
    start-up as a process (about 1 s of CPU); returned as a CompletedProcess (returncode, stdout, stderr)."""
    from test_cli_errors import run_cli

    run = run_cli(*args)
    return subprocess.CompletedProcess(["optsearch", *args], run.code, run.stdout, run.stderr)


def test_cli_writes_files_and_refuses_with_exit_2(tmp_path):
    plan = GOLDEN / "gpt2-xl_fasop-a100-a10" / "plan.json"
    out = tmp_path / "launch"
    run = _cli("launch", str(plan), "-m", "gpt2-xl", "-c", "fasop-a100-a10", "--format", "slurm", "--out", str(out))
    assert run.returncode == 0, run.stderr
    assert sorted(p.name for p in out.iterdir()) == ["job.sbatch", "megatron_args.sh", "torchrun.sh"]
    # the same as the golden file but for the folder it records (job.sbatch finds torchrun.sh there under Slurm)
    golden = (GOLDEN / "gpt2-xl_fasop-a100-a10" / "slurm" / "job.sbatch").read_text()
    written = (out / "job.sbatch").read_text()
    assert written.replace(f"folders=({out} .)", "folders=(.)").replace(
        "# else in the folder optsearch wrote them to (absolute, then relative to the submit folder), else in the "
        "folder sbatch ran in.", "# else in the folder sbatch ran in.") == golden
    assert "padded by Megatron-LM to 50304" in run.stderr
    t5 = GOLDEN / "t5-fasop_fasop-a100-a10" / "plan.json"
    run = _cli("launch", str(t5), "-m", "t5-fasop", "-c", "fasop-a100-a10", "--format", "torchrun")
    assert run.returncode == 2
    assert run.stderr.startswith("error: plan: pp = 4 for encoder-decoder model t5-fasop")
    assert run.stdout == ""


def test_cli_balance_and_layout_options_and_estimate_layout():
    run = _cli("launch", "-m", "gpt2-xl", "-c", "fasop-a10", "--tp", "1", "--dp", "4", "--micro-batch-size", "1",
               "--layout", "E|t*11|(t*8|)*4t*5|L", "--node-order", "a10", "--format", "fasop")
    assert run.returncode == 0, run.stderr
    assert 'PARTITION="0-11-8-8-8-8-5-0"' in run.stdout
    est = _cli("estimate", "-m", "gpt2-xl", "-c", "fasop-a10", "--tp", "1", "--dp", "4", "--micro-batch-size", "1",
               "--layout", "E|t*11|(t*8|)*4t*5|L", "--node-order", "a10", "--json")
    assert est.returncode == 0, est.stderr
    assert [s["num_layers"] for s in json.loads(est.stdout)["plan"]["stages"]] == [0, 11, 8, 8, 8, 8, 5, 0]
    bad = _cli("launch", "-m", "gpt2-xl", "-c", "fasop-a10", "--tp", "1", "--dp", "4", "--micro-batch-size", "1",
               "--layout", "E|t*11|(t*8|)*4t*5|L", "--node-order", "a10,a10", "--format", "megatron")
    assert bad.returncode == 2
    assert "--layout has 8 stages" in bad.stderr
