"""bench/validation/spearman_bootstrap.py: the bootstrap interval for a validation set's rank correlation, on
hand-made runs (exact answers) and on the output of `optsearch validate --json` for a committed set."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
VALIDATION = ROOT / "bench" / "validation"


def _module():
    spec = importlib.util.spec_from_file_location("spearman_bootstrap", VALIDATION / "spearman_bootstrap.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _write_runs(path: Path, measured, predicted, extra=()):
    runs = [{"run_id": f"r{i:02d}", "measured_iteration_s": m, "predicted_iteration_s": p, "oom": False}
            for i, (m, p) in enumerate(zip(measured, predicted))]
    runs += list(extra)
    path.write_text(json.dumps({"metrics": {}, "runs": runs}))


def test_ranks_average_ties_and_spearman_by_hand():
    sb = _module()
    assert sb.ranks(np.array([3.0, 1.0, 3.0, 2.0])).tolist() == [3.5, 1.0, 3.5, 2.0]
    x = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    assert sb.spearman(x, x ** 3) == pytest.approx(1.0)
    assert sb.spearman(x, -x) == pytest.approx(-1.0)
    # d = rank differences (0, 0, 1, -1, 0): rho = 1 - 6 * 2 / (5 * 24) = 0.9
    assert sb.spearman(x, np.array([1.0, 2.0, 4.0, 3.0, 5.0])) == pytest.approx(0.9)
    assert np.isnan(sb.spearman(x, np.ones(5)))


def test_fisher_interval_brackets_r_and_narrows_with_n():
    sb = _module()
    lo10, hi10 = sb.fisher_interval(0.5, 10)
    lo100, hi100 = sb.fisher_interval(0.5, 100)
    assert lo10 < lo100 < 0.5 < hi100 < hi10
    # z = atanh(0.5) = 0.5493, se = sqrt(1.125 / 97) = 0.10769: tanh(0.3382) = 0.3259, tanh(0.7604) = 0.6413
    assert (lo100, hi100) == pytest.approx((0.3259, 0.6413), abs=1e-3)


def test_monotone_predictor_has_a_point_interval(tmp_path, capsys):
    sb = _module()
    out = tmp_path / "v.json"
    measured = [1.0, 1.5, 2.0, 3.0, 4.5, 6.0, 7.0, 9.0]
    oom = {"run_id": "oom", "measured_iteration_s": None, "predicted_iteration_s": 0.1, "oom": True}
    _write_runs(out, measured, [m * 0.7 + 0.1 for m in measured], extra=[oom])
    assert sb.main([str(out), "--resamples", "300"]) == 0
    text = capsys.readouterr().out
    assert "8 timed runs" in text  # the out-of-memory run is not ranked
    assert "Spearman 1.000; bootstrap 95% [1.000, 1.000]" in text
    assert "share of resamples >= 0.6: 1.000" in text


def test_compare_column_and_paired_difference(tmp_path, capsys):
    sb = _module()
    out = tmp_path / "v.json"
    measured = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    _write_runs(out, measured, measured)
    other = tmp_path / "runs.csv"
    body = "".join(f"r{i:02d},{7 - m}\n" for i, m in enumerate(measured))
    other.write_text("# a comment line\nrun_id,theirs\n" + body)
    assert sb.main([str(out), "--compare", f"{other}:theirs", "--resamples", "300"]) == 0
    text = capsys.readouterr().out
    assert "theirs: Spearman -1.000" in text
    # optsearch is +1 and the other -1 on every resample with two or more distinct runs: difference 2
    assert "optsearch - theirs: bootstrap 95% [2.000, 2.000]; share > 0: 1.000" in text


def test_bad_inputs_exit_2(tmp_path, capsys):
    sb = _module()
    out = tmp_path / "v.json"
    _write_runs(out, [1.0, 2.0, 3.0], [1.0, 2.0, 3.0])
    assert sb.main([str(out)]) == 2
    assert "3 timed runs; at least 4 are needed" in capsys.readouterr().err
    _write_runs(out, [1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0])
    other = tmp_path / "runs.csv"
    other.write_text("run_id,theirs\nr00,1\nr01,2\nr02,3\n")
    assert sb.main([str(out), "--compare", f"{other}:theirs"]) == 2
    assert "column 'theirs' has no value for run r03" in capsys.readouterr().err


def test_reads_validate_json_of_the_mixed_amp_set(tmp_path, capsys):
    """The contract with `optsearch validate --json`: the script ranks exactly the set's timed runs."""
    command = [sys.executable, "-m", "optsearch", "validate", str(VALIDATION / "amp-p3-g4dn.csv"), "--json"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=True)
    report = json.loads(done.stdout)
    out = tmp_path / "het.json"
    out.write_text(done.stdout)
    sb = _module()
    assert sb.main([str(out), "--compare", f"{VALIDATION / 'amp-p3-g4dn.csv'}:amp_predicted_s",
                    "--resamples", "200"]) == 0
    text = capsys.readouterr().out
    timed = report["metrics"]["timed"]
    assert f"{timed} timed runs" in text
    # the point Spearman printed is validate's own
    assert f"optsearch: Spearman {report['metrics']['spearman']:.3f};" in text
    lo, hi = (float(v) for v in text.split("optsearch: ")[1].split("bootstrap 95% [")[1].split("]")[0].split(", "))
    assert lo <= report["metrics"]["spearman"] <= hi
