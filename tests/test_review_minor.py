"""New-user review, minor findings: torchrun.sh's header with one GPU per stage, calibrate's plan column shows cp
(and the distributed optimizer), and a plan file launched or priced at another --global-batch-size warns that it
is no longer the plan solve proved optimal."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_calibrate import run_cli  # noqa: E402
from test_validate_plan_knobs import HEADER, ROW, readme_plan  # noqa: E402

HAND = ["-m", "gpt2-xl", "-c", "fasop-a10", "--stages", "a10:0,a10:12,a10:12,a10:12,a10:12,a10:0", "--tp", "1",
        "--dp", "1", "--micro-batch-size", "1"]


def test_torchrun_header_with_one_gpu_per_stage(tmp_path, capsys, monkeypatch):
    out = tmp_path / "launch"
    code, _, err = run_cli(["launch", "-f", "torchrun", "--out", str(out), *HAND], capsys, monkeypatch)
    assert code == 0, err
    text = (out / "torchrun.sh").read_text()
    assert "# global rank i, and these node ranks" in text and "[1 i" not in text
    code, _, err = run_cli(["launch", "-f", "torchrun", "--out", str(tmp_path / "dp2"), *HAND[:-4], "--dp", "2",
                            "--micro-batch-size", "1"], capsys, monkeypatch)
    assert code == 0, err
    assert "# global ranks [2 i, 2 (i + 1)), and these" in (tmp_path / "dp2" / "torchrun.sh").read_text()


def test_calibrate_table_shows_cp(tmp_path, capsys, monkeypatch):
    runs = tmp_path / "runs.csv"
    runs.write_text(f"{HEADER},cp,distributed_optimizer\n{ROW},2,1\n")
    code, out, err = run_cli(["calibrate", "--model", "gpt2-xl", "--cluster", "fasop-a100-a10", "--runs", str(runs),
                              "--out", str(tmp_path / "cal.csv")], capsys, monkeypatch)
    assert code == 0, err
    assert "1/1/8/1 cp 2 dist-opt" in out


def test_plan_file_at_another_global_batch_warns(tmp_path, capsys, monkeypatch):
    from optsearch.planfile import problem_record
    from optsearch.problem import build_problem
    from optsearch.spec.budget import Budget

    problem = build_problem("gpt2-xl", "fasop-a100-a10")
    record = problem_record(problem, model_ref="gpt2-xl", cluster_ref="fasop-a100-a10", profile_ref="analytic",
                            edits=None, budget=Budget())
    plan = tmp_path / "plan.json"
    # the README plan without context parallelism: gpt2-xl's heads of 100 run no flash attention, and upstream's
    # unfused attention has no cp (issue 15), so launch refuses the cp 2 plan
    no_cp = replace(readme_plan(), cp=1, distributed_optimizer=False)
    plan.write_text(json.dumps({**no_cp.to_dict(), "problem": record}))
    code, out, err = run_cli(["launch", str(plan), "-f", "megatron", "--global-batch-size", "128"], capsys,
                             monkeypatch)
    assert code == 0, err
    assert "--global-batch-size 128" in out
    line = " ".join(err.split())
    assert "warning: --global-batch-size 128 differs from the 64" in line and "not the plan solve proved optimal" in line
    code, out, err = run_cli(["estimate", "--plan", str(plan), "--global-batch-size", "64"], capsys, monkeypatch)
    assert code == 0 and "warning" not in err, err  # the same batch: nothing to say


def test_whatif_sweep_names_the_fewest_gpus_as_solve_does(capsys, monkeypatch):
    args = ["-m", "gpt2-xl", "-c", "fasop-a10", "--max-gpus", "2", "--quiet"]
    code, out, err = run_cli(["whatif", *args, "--sweep", "max-time=20d,60d", "--json"], capsys, monkeypatch)
    assert code == 0, err
    reasons = {p["reason"] for p in json.loads(out)}
    code, _, err = run_cli(["solve", *args, "--max-time", "60d"], capsys, monkeypatch)
    assert code == 1
    assert reasons == {"no plan meets --max-gpus 2 and fits in GPU memory; the fewest GPUs a plan needs is 4"}
    assert err.strip().endswith(reasons.pop())
