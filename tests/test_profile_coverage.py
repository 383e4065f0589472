"""A --profile table that covers only some (or none) of the cluster's node types: said, never silently searched
around (optsearch/coverage.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from optsearch.coverage import check_profile_coverage, uncovered_node_types
from optsearch.errors import ProfileError
from optsearch.problem import build_problem
from test_cli_errors import run_cli

HEADER = "gpu,layer_kind,tp,micro_batch_size,forward_s,backward_s,activation_bytes,tp_comm_included\n"
TIMES = {"embedding": (2e-4, 4e-4), "head": (5e-4, 1e-3), "layer": (1e-3, 2e-3)}


def table(path: Path, gpus_kinds: dict[str, tuple[str, ...]], tp: int = 1, mbs: int = 1) -> Path:
    """A hand-made profile: for each gpu, rows for the given layer kinds at (tp, mbs)."""
    rows = [f"{gpu},{kind},{tp},{mbs},{TIMES[kind][0]!r},{TIMES[kind][1]!r},,false\n"
            for gpu, kinds in gpus_kinds.items() for kind in kinds]
    path.write_text(HEADER + "".join(rows))
    return path


ALL = ("embedding", "head", "layer")
CLUSTER = ("--model", "gpt2-small", "--cluster", "fasop-a100-a10", "--quiet")


def test_a_table_for_none_of_the_clusters_gpus_exits_2_in_one_line_before_solving(tmp_path):
    path = table(tmp_path / "h100.csv", {"H100-SXM-80GB": ALL})
    run = run_cli("solve", *CLUSTER, "--profile", str(path), "--json")
    assert run.code == 2, run.stderr
    assert run.stdout == ""
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    line = lines[0]
    assert line.startswith("error: profile ") and str(path) in line
    assert "'H100-SXM-80GB'" in line and "['A100-SXM-40GB', 'A10G']" in line and "fasop-a100-a10" in line


def test_compare_and_whatif_refuse_it_the_same_way(tmp_path):
    path = table(tmp_path / "h100.csv", {"H100-SXM-80GB": ALL})
    for args in (("compare", "--model", "gpt2-small", "--cluster", "fasop-a100-a10", "--methods", "cpsat"),
                 ("whatif", *CLUSTER, "--marginal")):
        run = run_cli(*args, "--profile", str(path))
        assert run.code == 2, (args, run.stderr)
        assert "covers none of cluster fasop-a100-a10's node types" in run.stderr


def test_partly_covered_solves_over_the_covered_types_and_says_so(tmp_path):
    path = table(tmp_path / "a100.csv", {"A100-SXM-40GB": ALL})
    run = run_cli("solve", *CLUSTER, "--profile", str(path), "--json")
    assert run.code in (0, None), run.stderr
    out = json.loads(run.stdout)
    # the warning on stderr names the node type left out and why
    assert "warning: left out of the search, not covered by profile " in run.stderr
    assert "a100.csv: a10 (no rows for its GPU A10G); the answer holds over the other node types only" in run.stderr
    assert out["status"] == "optimal"
    assert out["message"].startswith("optimal over the node types the profile covers; ")
    assert out["message"].endswith(f"not covered by profile {path}: a10 (no rows for its GPU A10G)")
    assert out["left_out_node_types"] == {"a10": "no rows for its GPU A10G"}
    assert {s["node_type"] for s in out["plan"]["stages"]} == {"a100"}
    # the human summary does not claim more than the JSON
    text = run_cli("solve", *CLUSTER, "--profile", str(path))
    assert text.code in (0, None), text.stderr
    assert "optimal over the node types the profile covers" in text.stdout
    assert "a10 (no rows for its GPU A10G)" in text.stderr


def test_a_fully_covering_table_adds_no_note(tmp_path):
    path = table(tmp_path / "both.csv", {"A100-SXM-40GB": ALL, "A10G": ALL})
    problem = build_problem("gpt2-small", "fasop-a100-a10", profile=str(path))
    assert check_profile_coverage(problem) == {}
    assert check_profile_coverage(build_problem("gpt2-small", "fasop-a100-a10")) == {}  # analytic covers all


def test_a_gpu_with_a_layer_kind_missing_is_left_out_with_that_reason(tmp_path):
    path = table(tmp_path / "part.csv", {"A100-SXM-40GB": ALL, "A10G": ("layer", "head")})
    left = uncovered_node_types(build_problem("gpt2-small", "fasop-a100-a10", profile=str(path)))
    assert list(left) == ["a10"]
    assert "every layer kind (embedding, head, layer) on its GPU A10G" in left["a10"]


def test_a_tp_wider_than_the_node_does_not_cover_it(tmp_path):
    # rows only at tp 8: the cluster's nodes have 4 GPUs, so no node type is covered
    path = table(tmp_path / "tp8.csv", {"A100-SXM-40GB": ALL, "A10G": ALL}, tp=8)
    with pytest.raises(ProfileError, match="covers none of cluster fasop-a100-a10's node types"):
        check_profile_coverage(build_problem("gpt2-small", "fasop-a100-a10", profile=str(path)))
