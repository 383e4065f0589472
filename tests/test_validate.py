"""`optsearch validate`: the metrics on hand-computed numbers, CSV checks, and the shipped validation sets."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from optsearch.errors import SpecError
from optsearch.plan import Plan, Stage
from optsearch.validate import Priced, Run, load_runs, metrics, price, spearman

ROOT = Path(__file__).resolve().parents[1]
PLAN = Plan(tp=1, dp=1, micro_batch_size=1, stages=(Stage(node_type="a", num_layers=1),))


def priced(run_id: str, group: str, measured: float | None, predicted: float, oom: bool = False, fits: bool = True):
    run = Run(run_id=run_id, group=group, source="", model="m", cluster="c", global_batch_size=1, plan=PLAN,
              measured_s=measured, oom=oom, precision=None)
    return Priced(run=run, predicted_s=predicted, fits=fits, peak_memory_share=0.5)


def _optsearch(*args: str, check: bool = False) -> subprocess.CompletedProcess:
    """`optsearch ARGS` through main() in this process (test_cli_errors.run_cli), which spares each command the CLI's
    start-up as a process (about 1 s of CPU); returned as a CompletedProcess; check: the exit code is 0."""
    from test_cli_errors import run_cli

    run = run_cli(*args)
    assert not check or run.code == 0, (args, run.code, run.stderr)
    return subprocess.CompletedProcess(["optsearch", *args], run.code, run.stdout, run.stderr)


def test_spearman_by_hand():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [40, 30, 20, 10]) == pytest.approx(-1.0)
    # ranks x = 1 2 3, y = 1 3 2: d^2 = 0 + 1 + 1 = 2; rho = 1 - 6 x 2 / (3 x 8) = 0.5
    assert spearman([1, 2, 3], [5, 9, 7]) == pytest.approx(0.5)
    assert spearman([1, 2], [1, 2]) is None


def test_metrics_by_hand():
    rows = [
        priced("a", "g", 1.0, 1.2),  # error +20%
        priced("b", "g", 2.0, 1.0),  # error -50%, the model's pick (fastest predicted), measured 2.0
        priced("c", "g", 1.5, 3.0),  # error +100%
        priced("d", "g", None, 0.5, oom=True, fits=False),  # OOM, flagged: not a candidate for the pick
        priced("e", "h", None, 0.5, oom=True, fits=True),  # OOM, missed, and the pick of group h
        priced("f", "h", 1.0, 0.9, fits=False),  # a good run flagged
    ]
    m = metrics(rows)
    assert m["timed"] == 4
    assert m["mean_abs_error"] == pytest.approx((0.2 + 0.5 + 1.0 + 0.1) / 4)
    assert m["median_ratio"] == pytest.approx((0.9 + 1.2) / 2)  # ratios 0.5, 0.9, 1.2, 2.0
    assert m["groups"]["g"]["top_pick"] == "b"
    assert m["groups"]["g"]["top_pick_regret"] == pytest.approx(2.0 / 1.0 - 1)  # best measured in g is 1.0
    assert m["groups"]["h"]["top_pick_regret"] == "OOM"
    assert m["memory"] == {"oom_flagged": 1, "oom_missed": 1, "good_flagged": 1, "good_passed": 3}


def test_load_runs_rejects_bad_rows(tmp_path):
    head = "run_id,group,source,model,cluster,global_batch_size,tp,dp,micro_batch_size,stages,measured_iteration_s,oom\n"
    bad = tmp_path / "bad.csv"
    bad.write_text(head + 'r1,g,s,gpt2-xl,fasop-a10,64,1,4,1,"a10:48",,0\n')
    with pytest.raises(SpecError, match="row 2 .*measured_iteration_s is empty but oom = 0"):
        load_runs(bad)
    bad.write_text(head + 'r1,g,s,gpt2-xl,fasop-a10,64,1,4,1,"a10:48",1.0,2\n')
    with pytest.raises(SpecError, match="oom = '2': must be 0 or 1"):
        load_runs(bad)
    bad.write_text("run_id,group\nr1,g\n")
    with pytest.raises(SpecError, match="missing columns"):
        load_runs(bad)
    bad.write_text(head + 'r1,g,s,gpt2-xl,fasop-a10,64,1,4,1,"a10:48",inf,0\n')
    with pytest.raises(SpecError, match="measured_iteration_s = inf: must be a positive finite number"):
        load_runs(bad)
    bad.write_text(head + 'r1,g,s,gpt2-xl,fasop-a10,64,1,4,1,"a10:48",1.4,1\n')
    with pytest.raises(SpecError, match="row 2 .*measured_iteration_s = 1.4 but oom = 1"):
        load_runs(bad)


def test_pricing_errors_name_the_file_and_row(tmp_path):
    head = "run_id,group,source,model,cluster,global_batch_size,tp,dp,micro_batch_size,stages,measured_iteration_s,oom\n"
    bad = tmp_path / "bad.csv"
    bad.write_text(head + 'r1,g,s,gpt2-xl,fasop-a10,64,1,4,1,"a10:48",1.0,0\n'
                   + 'r2,g,s,no-such-model,fasop-a10,64,1,4,1,"a10:48",1.0,0\n')
    with pytest.raises(SpecError, match=r"bad\.csv row 3 \(r2\): .*no-such-model"):
        price(load_runs(bad))
    bad.write_text(head + 'r1,g,s,gpt2-xl,fasop-a10,64,1,4,1,"a10:49",1.0,0\n')
    with pytest.raises(SpecError, match=r"bad\.csv row 2 \(r1\): .*49"):
        price(load_runs(bad))


def test_validate_cli_on_the_fasop_run():
    out = _optsearch("validate", str(ROOT / "bench/validation/fasop-a10.csv"), "--json", check=True).stdout
    data = json.loads(out)
    (row,) = data["runs"]
    assert row["measured_iteration_s"] == 1.40 and row["predicted_fits"]
    assert abs(row["ratio"] - 1) < 0.15  # docs/validation.md: +12.3%


def test_megatron_table1_set_prices_within_10_percent():
    from optsearch.validate import price

    rows = price(load_runs(ROOT / "bench/validation/megatron-sc21.csv"))
    ratios = [p.predicted_s / p.run.measured_s for p in rows]
    assert len(ratios) == 10 and all(p.fits for p in rows)
    assert all(0.9 <= r <= 1.1 for r in ratios), ratios


def test_calibrate_accepts_a_runs_csv(tmp_path):
    """calibrate --runs: one timed run, one shared compute factor; the calibrated estimate meets the measurement."""
    out = tmp_path / "cal.csv"
    done = _optsearch("calibrate", "--model", "gpt2-xl", "--cluster", "fasop-a10", "--global-batch-size", "64",
                      "--runs", str(ROOT / "bench/validation/fasop-a10.csv"), "--out", str(out), "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert out.is_file()
    (row,) = data["logs"]
    assert row["log"] == "fasop-a10.csv:fasop-gpt2xl-8xa10" and row["measured_s"] == 1.40
    assert abs(row["error_after"]) < 1e-6
    # one factor on the whole iteration (communication included) cannot be 1.40 / estimate exactly: it scales
    # only the compute part, so it lies below measured / estimate
    assert 0 < data["compute_factors"]["A10G"] < 1.40 / row["estimate_before_s"]


def test_calibrate_runs_must_match_the_problem(tmp_path):
    from optsearch.problem import build_problem
    from optsearch.profile.calibrate import observations_from_runs

    problem = build_problem("gpt2-xl", "fasop-a10", global_batch_size=32)
    with pytest.raises(SpecError, match="global_batch_size 64 but the job's is 32"):
        observations_from_runs(ROOT / "bench/validation/fasop-a10.csv", problem)
    other = build_problem("gpt2-medium", "fasop-a10", global_batch_size=64)
    with pytest.raises(SpecError, match="model gpt2-xl on fasop-a10, but calibrating gpt2-medium"):
        observations_from_runs(ROOT / "bench/validation/fasop-a10.csv", other)
    (obs,), _ = observations_from_runs(ROOT / "bench/validation/fasop-a10.csv",
                                       build_problem("gpt2-xl", "fasop-a10", global_batch_size=64))
    assert obs.measured_s == 1.40 and obs.plan.pp == 8


def test_calibrate_runs_take_the_job_settings_the_rows_record(tmp_path):
    """AMP's rows say fp16, fp32 gradient all-reduce and unfused attention; gpt2-medium's job says bf16. calibrate
    --runs refused them ("precision fp16 but the job's is bf16") where validate prices them with the rows' settings;
    now the fit uses those settings, and rows that disagree are refused by name."""
    from optsearch.problem import build_problem
    from optsearch.profile.calibrate import observations_from_runs

    csv_path = ROOT / "bench/validation/amp-g4dn.csv"
    problem = build_problem("gpt2-medium", "amp-g4dn", global_batch_size=32)
    assert problem.job.precision == "bf16"
    observations, fitted = observations_from_runs(csv_path, problem)
    assert len(observations) == 47
    assert fitted.job.precision == "fp16" and fitted.job.grad_reduce_in_fp32 is True
    assert fitted.profile.unfused_kernels
    lines = csv_path.read_text().splitlines()
    header = lines[[i for i, line in enumerate(lines) if not line.startswith("#")][0]].split(",")
    col = header.index("precision")
    rows = [line for line in lines if not line.startswith("#")]
    timed = [i for i, line in enumerate(rows[1:], 1) if line.split(",")[header.index("oom")] == "0"]
    mixed = rows[:]
    cells = mixed[timed[1]].split(",")
    cells[col] = "bf16"
    mixed[timed[1]] = ",".join(cells)
    (tmp_path / "mixed.csv").write_text("\n".join(mixed) + "\n")
    with pytest.raises(SpecError, match="the fit prices every run with one job"):
        observations_from_runs(tmp_path / "mixed.csv", problem)


def test_load_runs_refuses_files_it_cannot_read_as_a_csv(tmp_path):
    """One line each, no traceback (found by bench/fuzz_cli.py): a field over the csv module's limit, binary bytes,
    a folder, a FIFO-like device."""
    big = tmp_path / "big.csv"
    big.write_text("a" * 200_000 + "\n")
    with pytest.raises(SpecError, match=r"big.csv: not a readable CSV: field larger than field limit"):
        load_runs(big)
    binary = tmp_path / "runs.bin"
    binary.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(SpecError, match=r"runs.bin"):
        load_runs(binary)
    with pytest.raises(SpecError, match=r"is a folder"):
        load_runs(tmp_path)
    with pytest.raises(SpecError, match=r"/dev/zero"):
        load_runs(Path("/dev/zero"))


def test_validate_cli_takes_several_sets():
    """`optsearch validate bench/validation/*.csv`: every row of every set is priced, groups kept apart."""
    sets = sorted((Path(__file__).resolve().parent.parent / "bench" / "validation").glob("*.csv"))
    assert len(sets) >= 2
    done = _optsearch("validate", *map(str, sets), "--json", check=True)
    data = json.loads(done.stdout)
    assert len(data["runs"]) == sum(len(load_runs(p)) for p in sets)
    assert {"fasop-a10", "megatron-1t"} <= set(data["metrics"]["groups"])


def test_the_table_columns_line_up_with_long_run_ids():
    """AMP's run ids (up to 35 characters) overflowed a 28-character column and shifted every column after it."""
    done = _optsearch("validate", str(ROOT / "bench/validation/amp-g4dn.csv"))
    assert done.returncode == 0, done.stderr
    table = done.stdout.split("\n\n")[0].splitlines()
    assert len(table) == 52 and len({len(line) for line in table}) == 1, table[:3]
