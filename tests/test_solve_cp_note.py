"""Issue 15 seam: `solve` says, in one line on stderr, when cp > 1 is searched on some of the cluster's node types only
(the ones that run flash attention; targets.context_parallel_space), and nothing where every type has it or cp > 1 is
not searched at all (docs/targets.md "Context parallelism per node type")."""

from __future__ import annotations

import json

from optsearch.candidates import SpaceOptions
from optsearch.cli.options import context_parallel_types_note
from optsearch.problem import build_problem
from optsearch.targets import MEGATRON, engine_problem, space_options

from test_cli_errors import run_cli


def _p3_p4d(tmp_path):
    """One V100 node type (no flash attention) and one A100 type, as tests/test_cp_flash_types.py builds it."""
    cluster = tmp_path / "p3-p4d.json"
    p3, p4d = build_problem("gpt2-small", "aws-p3").cluster, build_problem("gpt2-small", "aws-p4d").cluster
    cluster.write_text(json.dumps({"name": "p3-p4d", "node_types": [  # one node of each: a small space
        {**n.node_types[0].model_dump(mode="json"), "num_nodes_available": 1} for n in (p3, p4d)]}))
    return cluster, p3.node_types[0].name, p4d.node_types[0].name


def test_the_note_names_the_types_and_why(tmp_path):
    cluster, v100, a100 = _p3_p4d(tmp_path)
    problem = engine_problem("megatron", build_problem("gpt2-small", str(cluster)))  # as solve --target megatron
    note = context_parallel_types_note(problem, space_options(MEGATRON, problem))
    assert note is not None and note.startswith(f"cp > 1 is searched on {a100} only (node type {v100} runs no flash "
                                                f"attention (V100-16GB: compute capability 7")
    assert note.endswith(f"plans on {v100} use cp 1")
    assert context_parallel_types_note(problem, SpaceOptions()) is None  # no cp > 1 searched
    one = engine_problem("megatron", build_problem("gpt2-small", "aws-p4d"))
    assert context_parallel_types_note(one, space_options(MEGATRON, one)) is None  # every type runs it


def test_solve_prints_the_note_once_and_not_when_quiet_or_capped(tmp_path):
    cluster, v100, a100 = _p3_p4d(tmp_path)
    args = ["solve", "--model", "gpt2-small", "--cluster", str(cluster), "--minimize", "cost", "--time-limit", "3"]
    run = run_cli(*args)  # the note comes before the search: said whether or not a plan is found in the limit
    assert run.code in (0, None, 1) and "Traceback" not in run.stderr, run.stderr
    notes = [line for line in run.stderr.splitlines() if line.startswith("note: cp > 1 is searched on")]
    assert len(notes) == 1 and notes[0].endswith(f"plans on {v100} use cp 1"), run.stderr
    assert "note: cp > 1" not in run_cli(*args, "--quiet").stderr
    assert "note: cp > 1" not in run_cli(*args, "--max-cp", "1").stderr  # cp 1 alone: nothing is limited
