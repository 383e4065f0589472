"""compare's default methods run on real instances (new-user review): exhaustive, which refuses almost every real
instance for size, runs only when named."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_baselines import _run_cli, _write_specs  # noqa: E402

from optsearch.compare import DEFAULT_METHODS, METHODS  # noqa: E402


def test_default_methods_are_the_solvers_and_dp_baselines(tmp_path):
    model_path, cluster_path = _write_specs(tmp_path)
    code, out, err = _run_cli(["compare", "--model", str(model_path), "--cluster", str(cluster_path), "--json"])
    assert code == 0, err
    rows = json.loads(out)
    assert [r["method"] for r in rows] == ["cbc", "cpsat", "dp", "dp-amp"] == list(DEFAULT_METHODS)
    assert all(r["status"] != "refused" for r in rows)


def test_exhaustive_still_runs_by_name(tmp_path):
    assert "exhaustive" in METHODS and "exhaustive" not in DEFAULT_METHODS
    model_path, cluster_path = _write_specs(tmp_path)
    code, out, err = _run_cli(["compare", "--model", str(model_path), "--cluster", str(cluster_path), "--json",
                               "--methods", "cpsat,exhaustive"])
    assert code == 0, err
    rows = {r["method"]: r for r in json.loads(out)}
    assert rows["exhaustive"]["status"] == "optimal"
    assert rows["exhaustive"]["objective_value"] == rows["cpsat"]["objective_value"]
