"""A --profile table that covers only some of the cluster's node types: `compare`, `whatif` and `pareto` put the
coverage note in their JSON as `solve --json` does (each object's `message`, and `left_out_node_types`), not on
stderr only (optsearch/coverage.py: scoped_message)."""

from __future__ import annotations

import json

from test_cli_errors import run_cli
from test_profile_coverage import ALL, table

MODEL = ("--model", "gpt2-small", "--quiet")
LEFT_OUT = {"a10": "no rows for its GPU A10G"}


def _objects(*args: str) -> list[dict]:
    run = run_cli(*args, "--json")
    assert run.code in (0, None), run.stderr
    assert "a10 (no rows for its GPU A10G)" in run.stderr  # the warning stays
    objects = json.loads(run.stdout)
    assert isinstance(objects, list) and objects
    return objects


def _says_so(obj: dict, path) -> None:
    assert obj["left_out_node_types"] == LEFT_OUT, obj
    assert f"not covered by profile {path}: a10 (no rows for its GPU A10G)" in obj["message"], obj["message"]
    if obj["status"] == "optimal":
        assert obj["message"].startswith("optimal over the node types the profile covers; "), obj["message"]


def test_compare_whatif_and_pareto_json_carry_the_coverage_note(tmp_path):
    path = table(tmp_path / "a100.csv", {"A100-SXM-40GB": ALL})
    profile = ("--profile", str(path))
    runs = {
        "compare": _objects("compare", "--model", "gpt2-small", "--cluster", "fasop-a100-a10", *profile,
                            "--methods", "cpsat,dp"),
        "whatif": _objects("whatif", *MODEL, "--cluster", "fasop-a100-a10", *profile, "--sweep",
                           "max-time=40d..60d:2"),
        "pareto": _objects("pareto", *MODEL, "--cluster", "fasop-a100-a10", *profile),
    }
    for name, objects in runs.items():
        for obj in objects:
            _says_so(obj, path)
    # --compare-clusters: each cluster's own coverage (aws-p4d is all A100: nothing left out)
    by_cluster = {o["cluster"]: o for o in _objects("whatif", *MODEL, "--compare-clusters", "fasop-a100-a10,aws-p4d",
                                                   *profile)}
    _says_so(by_cluster["fasop-a100-a10"], path)
    assert by_cluster["aws-p4d"]["left_out_node_types"] == {}
    assert "not covered" not in by_cluster["aws-p4d"]["message"]
    assert any(o["status"] == "optimal" for o in runs["compare"])
    # the same message solve gives for the same optimum
    solve = run_cli("solve", *MODEL, "--cluster", "fasop-a100-a10", *profile, "--json")
    cpsat = next(o for o in runs["compare"] if o["method"] == "cpsat")
    assert cpsat["message"] == json.loads(solve.stdout)["message"]


def test_a_fully_covering_table_leaves_the_json_as_it_was(tmp_path):
    path = table(tmp_path / "both.csv", {"A100-SXM-40GB": ALL, "A10G": ALL})
    for obj in _objects_quiet("compare", "--model", "gpt2-small", "--cluster", "fasop-a100-a10", "--profile",
                              str(path), "--methods", "cpsat"):
        assert obj["left_out_node_types"] == {}
        assert "not covered" not in obj["message"]


def _objects_quiet(*args: str) -> list[dict]:
    run = run_cli(*args, "--json")
    assert run.code in (0, None), run.stderr
    return json.loads(run.stdout)
