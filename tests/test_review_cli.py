"""A new user's review (round 8): CLI messages and output on the toy specs (in-process, each well under a second)."""

from __future__ import annotations

import json

from optsearch.cli.solve_cmd import bound_text
from optsearch.search import SearchResult

from test_cli_errors import run_cli  # the toy fixture is conftest's


def test_the_time_bound_is_printed_as_a_duration():
    time_result = SearchResult(method="cbc", status="feasible", objective="time", solve_time_s=1.0, bound=1880292.5208664334)
    cost_result = SearchResult(method="cbc", status="feasible", objective="cost", solve_time_s=1.0, bound=52046.3)
    assert bound_text(time_result) == "21d 18h"
    assert bound_text(cost_result) == "$52,046"


def test_solve_json_with_no_plan_prints_the_status_and_reason(toy, tmp_path):
    model, cluster = toy
    out = tmp_path / "plan.json"
    run = run_cli("solve", "-m", str(model), "-c", str(cluster), "--max-time", "1s", "--json", "-q", "--out", str(out))
    assert run.code == 1
    got = json.loads(run.stdout)
    assert got["status"] == "infeasible" and got["plan"] is None
    assert got["reason"].startswith("no plan finishes within 1 s"), got
    assert run.error_line == f"error: {got['reason']}"
    assert not out.exists()


def test_expert_parallel_on_a_dense_model_is_warned_about(toy):
    model, cluster = toy
    run = run_cli("solve", "-m", str(model), "-c", str(cluster), "--expert-parallel", "3", "-q")
    assert run.code == 0
    assert "warning: --expert-parallel 3: toy has no experts" in run.stderr, run.stderr


def test_launch_refusing_a_hand_plans_cp_says_drop_cp(toy):
    """A hand plan's cp is the user's --cp: drop it, not 're-plan with --max-cp 1' / '--target fasop (cp = 1)'."""
    model, cluster = toy
    hand = ["--tp", "1", "--dp", "1", "--micro-batch-size", "1", "--stages", "fast:2,fast:2", "--cp", "2"]
    line = run_cli("launch", "-m", str(model), "-c", str(cluster), *hand).error_line
    assert line.endswith("; drop --cp 2"), line
    line = run_cli("launch", "-m", "gpt2-xl", "-c", "fasop-a100-a10", "--tp", "1", "--dp", "1", "--micro-batch-size",
                   "1", "--stages", "a100:24,a100:24", "--cp", "2", "--format", "fasop").error_line
    assert "no context parallelism; drop --cp 2, or launch it for upstream" in line, line


HEAD = "run_id,group,source,model,cluster,global_batch_size,tp,dp,micro_batch_size,stages,measured_iteration_s,oom\n"


def test_validate_names_a_row_with_the_wrong_field_count(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text(HEAD + "r1,g,s,gpt2-xl,fasop-a10,64,1,4,1,a10:24,a10:24,1.0,0\n")  # the stages comma unquoted
    line = run_cli("validate", str(bad)).error_line
    assert line == (f"error: {bad} row 2 (r1): 13 fields where the header has 12 (a comma inside a field must be "
                    f"quoted, e.g. \"a100:12,a100:12\")"), line
    bad.write_text(HEAD + "r1,g,s,gpt2-xl,fasop-a10,64,1,4,1\n")
    assert run_cli("validate", str(bad)).error_line == f"error: {bad} row 2 (r1): 9 fields where the header has 12"


def test_validate_with_no_run_predicted_to_fit_says_so(tmp_path):
    runs = tmp_path / "runs.csv"
    runs.write_text(HEAD + 'r1,g,s,gpt2-xl,fasop-a10,64,1,1,1,"a10:48",,1\n')  # 1.5 B parameters on one 24 GB A10
    run = run_cli("validate", str(runs))
    assert run.code == 0, run.stderr
    assert "group g: 0 timed of 1;" in run.stdout and "no top pick (no run is predicted to fit)" in run.stdout
    assert "None" not in run.stdout, run.stdout


def test_the_check_command_in_docs_specs_runs_on_the_docs_own_examples(tmp_path):
    """docs/specs.md suggests an estimate command on its two example files: it must price a plan that fits."""
    import re
    import shlex
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs/specs.md").read_text()
    for block in re.findall(r"```yaml\n(.*?)```", text, re.S):
        name = re.search(r"^name: (\S+)", block, re.M)
        if name and name.group(1) in ("my-1b", "my-cluster"):
            (tmp_path / f"{name.group(1)}.yaml").write_text(block)
    (command,) = re.findall(r"`(optsearch estimate -m my-1b\.yaml [^`]*)`", text)
    args = shlex.split(command.replace("\n", " "))[1:]
    args = [str(tmp_path / a) if a.endswith(".yaml") else a for a in args]
    run = run_cli(*args, "--json")
    assert run.code == 0, run.stderr
    assert json.loads(run.stdout)["fits"] is True


def test_help_names_choices_and_no_type_beside_flags():
    solve = run_cli("solve", "--help").stdout
    assert "[cost|time]" in solve and "[cpsat|cbc]" in solve and "<bool>" not in solve
    assert "-o" in solve.split("--out", 1)[1].split("\n", 1)[0]  # as launch --out
    assert "[megatron|fasop|torchrun|slurm]" in run_cli("launch", "--help").stdout
    assert "one object per frontier plan" in " ".join(run_cli("pareto", "--help").stdout.split())
    assert "{RUNS.csv...}" not in run_cli("validate", "--help").stdout
