"""Bad input through the CLI: exit code 2 and one line `error: <file>: <field> = <value>: <rule>`, no traceback.

The tests run `optsearch.cli.main` (which turns errors into that line and the exit code) in-process with
sys.argv patched, and a few through `python -m optsearch` in a subprocess to cover the real entry point.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from draws import draws

from optsearch.cli import main

TOY_CLUSTER = {
    "name": "toy-cluster",
    "node_types": [
        {"name": "fast", "gpu": "X", "gpus_per_node": 4, "num_nodes_available": 2, "price_usd_per_node_hour": 10.0,
         "intra_node_link": "nvlink", "intra_node_gbyte_per_s": 100.0, "inter_node_gbit_per_s": 400.0},
        {"name": "slow", "gpu": "Y", "gpus_per_node": 2, "num_nodes_available": 4, "price_usd_per_node_hour": 2.0,
         "intra_node_link": "pcie", "intra_node_gbyte_per_s": 10.0, "inter_node_gbit_per_s": 80.0},
    ],
    "gpus": [
        {"name": "X", "memory_gib": 16.0, "peak_fp16_tflop_per_s": 100.0, "hbm_gbyte_per_s": 1000.0},
        {"name": "Y", "memory_gib": 8.0, "peak_fp16_tflop_per_s": 50.0, "hbm_gbyte_per_s": 500.0},
    ],
}
TOY_MODEL = {
    "name": "toy",
    "num_layers": 4,
    "hidden_size": 1000,
    "num_attention_heads": 8,
    "ffn_hidden_size": 4000,
    "seq_length": 1000,
    "vocab_size": 10000,
    "position_embedding": "rotary",
    "bias": False,
    "norm": "rmsnorm",
    "default_job": {"global_batch_size": 8, "train_iterations": 100},
}
GOOD_PLAN = ["--tp", "1", "--dp", "1", "--micro-batch-size", "1", "--stages", "fast:2,fast:2"]


@dataclass(frozen=True)
class Run:
    code: int | None
    stdout: str
    stderr: str

    @property
    def error_line(self) -> str:
        """The one error line; fails the test when stderr is not exactly one `error: ...` line."""
        lines = self.stderr.strip().splitlines()
        assert "Traceback" not in self.stderr, self.stderr
        assert len(lines) == 1, f"expected one error line, got:\n{self.stderr}"
        assert lines[0].startswith("error: "), lines[0]
        return lines[0]


def run_cli(*args: str) -> Run:
    """Run `optsearch ARGS` through main(), in-process."""
    out, err = io.StringIO(), io.StringIO()
    saved = sys.argv
    sys.argv = ["optsearch", *args]
    code: int | None = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main()
    except SystemExit as ex:
        code = ex.code if isinstance(ex.code, int) or ex.code is None else 1
    finally:
        sys.argv = saved
    return Run(code=code, stdout=out.getvalue(), stderr=err.getvalue())


def write_yaml(path: Path, data: object) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def estimate(model: Path | str, cluster: Path | str, *plan: str) -> Run:
    return run_cli("estimate", "-m", str(model), "-c", str(cluster), *(plan or GOOD_PLAN))


# ---- the good case works (so the failures below fail for the reason they name) --------------------------------


def test_good_toy_specs_estimate(toy):
    run = estimate(*toy, *GOOD_PLAN, "--json")
    assert run.code in (0, None), run.stderr
    assert json.loads(run.stdout)["num_micro_batches"] == 8


# ---- malformed specs -----------------------------------------------------------------------------------------


def test_negative_price_names_file_field_value_rule(toy, tmp_path):
    data = copy.deepcopy(TOY_CLUSTER)
    data["node_types"][0]["price_usd_per_node_hour"] = -5
    bad = write_yaml(tmp_path / "bad-cluster.yaml", data)
    run = estimate(toy[0], bad)
    assert run.code == 2
    assert run.error_line == f"error: {bad}: node_types[0].price_usd_per_node_hour = -5: Input should be greater than or equal to 0.0001"


def test_missing_required_field(toy, tmp_path):
    data = copy.deepcopy(TOY_CLUSTER)
    del data["node_types"][1]["gpus_per_node"]
    bad = write_yaml(tmp_path / "bad-cluster.yaml", data)
    run = estimate(toy[0], bad)
    assert run.code == 2
    assert run.error_line == f"error: {bad}: node_types[1].gpus_per_node: missing (required)"


def test_unknown_key_in_model(toy, tmp_path):
    bad = write_yaml(tmp_path / "bad-model.yaml", {**TOY_MODEL, "hiden_size": 10})
    run = estimate(bad, toy[1])
    assert run.code == 2
    assert run.error_line == f"error: {bad}: hiden_size = 10: unknown key (did you mean hidden_size?)"


def test_model_shape_rule(toy, tmp_path):
    bad = write_yaml(tmp_path / "bad-model.yaml", {**TOY_MODEL, "num_attention_heads": 7})
    run = estimate(bad, toy[1])
    assert run.code == 2
    assert str(bad) in run.error_line
    assert "hidden_size 1000 is not divisible by num_attention_heads 7" in run.error_line


def test_unknown_gpu_in_cluster(toy, tmp_path):
    data = copy.deepcopy(TOY_CLUSTER)
    data["node_types"][1]["gpu"] = "Z80"
    bad = write_yaml(tmp_path / "bad-cluster.yaml", data)
    run = estimate(toy[0], bad)
    assert run.code == 2
    assert run.error_line.startswith(f"error: {bad}: node_types[1].gpu = 'Z80': unknown GPU; known: ")
    assert "X" in run.error_line and "A100-SXM-80GB" in run.error_line


def test_infinite_price_is_rejected(toy, tmp_path):
    data = copy.deepcopy(TOY_CLUSTER)
    data["node_types"][0]["price_usd_per_node_hour"] = float("inf")
    bad = write_yaml(tmp_path / "bad-cluster.yaml", data)
    run = estimate(toy[0], bad)
    assert run.code == 2
    assert run.error_line == f"error: {bad}: node_types[0].price_usd_per_node_hour = inf: Input should be a finite number"


def test_invalid_yaml_syntax(toy, tmp_path):
    bad = tmp_path / "broken.yaml"
    bad.write_text("name: toy\nnode_types: [\n  - {name: fast\n")
    run = estimate(toy[0], bad)
    assert run.code == 2
    assert run.error_line.startswith(f"error: {bad}: not valid YAML: ")


def test_top_level_not_a_mapping(toy, tmp_path):
    bad = write_yaml(tmp_path / "list.yaml", [1, 2, 3])
    run = estimate(toy[0], bad)
    assert run.code == 2
    assert run.error_line == f"error: {bad}: expected a mapping at the top level, got list"


def test_missing_file(toy, tmp_path):
    run = estimate(toy[0], tmp_path / "nowhere.yaml")
    assert run.code == 2
    assert run.error_line == f"error: {tmp_path / 'nowhere.yaml'}: cannot read: No such file or directory"


def test_unknown_model_name_lists_known_names(toy):
    run = estimate("no-such-model", toy[1])
    assert run.code == 2
    line = run.error_line
    assert line.startswith("error: unknown model 'no-such-model'; known: ")
    assert "gpt2-xl" in line and "llama2-70b" in line


def test_unknown_cluster_name_lists_known_names(toy):
    run = estimate(toy[0], "no-such-cluster")
    assert run.code == 2
    assert run.error_line.startswith("error: unknown cluster 'no-such-cluster'; known: ")


# ---- inconsistent plans --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "plan, message",
    [
        (["--tp", "3", "--dp", "1", "--micro-batch-size", "1", "--stages", "fast:4"],
         "error: plan: tp = 3 does not divide num_attention_heads 8"),
        (["--tp", "1", "--dp", "1", "--micro-batch-size", "1", "--stages", "fast:2,fast:1"],
         "error: plan: stage layers sum to 3 but toy has 4 layers"),
        (["--tp", "1", "--dp", "3", "--micro-batch-size", "1", "--stages", "fast:4"],
         "error: plan: dp x micro_batch_size = 3 x 1 = 3 does not divide global_batch_size 8"),
        (["--tp", "1", "--dp", "4", "--micro-batch-size", "1", "--stages", "fast:1,fast:1,fast:1,fast:1"],
         "error: plan: needs 4 nodes of fast but the cluster has 2"),
        (["--tp", "1", "--dp", "1", "--micro-batch-size", "1", "--stages", "fast:2,fast:0,fast:2"],
         "error: plan: stages[1].num_layers = 0: only the first or last stage may hold no layers"),
        (["--tp", "1", "--dp", "1", "--micro-batch-size", "1", "--stages", "medium:4"],
         "error: cluster toy-cluster: unknown node type 'medium'; known: fast, slow"),
        (["--tp", "1", "--dp", "1", "--micro-batch-size", "1", "--stages", "fast:four"],
         "error: --stages item 0 = 'fast:four': layers 'four' is not an integer"),
        (["--tp", "1", "--dp", "1", "--micro-batch-size", "1", "--balance", "2-x-2", "--node-order", "fast"],
         "error: --balance = '2-x-2': expected layer counts joined by '-', e.g. 0-11-8-8-8-8-5-0"),
        (["--tp", "1", "--dp", "1", "--micro-batch-size", "1", "--balance", "2-2", "--node-order", "fast*3"],
         "error: --node-order gives 3 node types but --balance has 2 stages; give one type, one per stage, "
         "or TYPE*COUNT runs"),
        (["--tp", "0", "--dp", "1", "--micro-batch-size", "1", "--stages", "fast:4"],
         "error: Invalid value for '--tp': Input should be greater than or equal to 1"),
    ],
)
def test_bad_plan(toy, plan, message):
    run = estimate(*toy, *plan)
    assert run.code == 2
    assert run.error_line == message


def test_bad_plan_file(toy, tmp_path):
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps({"tp": 1, "dp": 1, "micro_batch_size": 1,
                                     "stages": [{"node_type": "fast", "num_layers": -4}]}))
    run = estimate(*toy, "--plan", str(plan_file))
    assert run.code == 2
    assert run.error_line == f"error: {plan_file}: stages[0].num_layers = -4: must be an integer >= 0"
    plan_file.write_text("{not json")
    run = estimate(*toy, "--plan", str(plan_file))
    assert run.code == 2
    assert run.error_line.startswith(f"error: {plan_file}: not valid JSON: ")


# ---- the real entry point ------------------------------------------------------------------------------------


def _subprocess(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "optsearch", *args], capture_output=True, text=True, timeout=120)


def test_python_m_optsearch_bad_spec(toy, tmp_path):
    data = copy.deepcopy(TOY_CLUSTER)
    data["node_types"][0]["price_usd_per_node_hour"] = -5
    bad = write_yaml(tmp_path / "bad-cluster.yaml", data)
    proc = _subprocess("estimate", "-m", str(toy[0]), "-c", str(bad), *GOOD_PLAN)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"error: {bad}: node_types[0].price_usd_per_node_hour = -5: Input should be greater than or equal to 0.0001"
    ]
    assert proc.stdout == ""


def test_python_m_optsearch_bad_option_value(toy):
    proc = _subprocess("estimate", "-m", str(toy[0]), "-c", str(toy[1]), "--tp", "0", "--dp", "1",
                       "--micro-batch-size", "1", "--stages", "fast:4")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith("error: ")


# ---- property: randomly corrupted specs never crash ------------------------------------------------------------

# .map(copy.deepcopy): the lists and dicts are inserted into specs that later edits mutate; each draw gets its own copy,
# or the strategy's shared objects would change between examples (hypothesis then reports flaky generation).
BAD_VALUES = st.sampled_from([-1, -7, -2.5, 0, "abc", "", None, [], {"x": 1}, [1, "a"], float("inf"),
                              float("nan")]).map(copy.deepcopy)
ANY_VALUES = st.one_of(BAD_VALUES, st.integers(-10, 10), st.text(max_size=5), st.booleans())

# Required fields whose value, replaced by any of BAD_VALUES, is always invalid (all need a positive number or a
# list/mapping of a given shape): the last, guaranteed corruption.
REQUIRED = {
    "cluster": [("node_types",), ("node_types", 0, "gpus_per_node"), ("node_types", 1, "price_usd_per_node_hour"),
                ("node_types", 0, "intra_node_gbyte_per_s"), ("gpus", 1, "memory_gib"),
                ("gpus", 0, "peak_fp16_tflop_per_s")],
    "model": [("hidden_size",), ("num_layers",), ("seq_length",), ("vocab_size",), ("default_job",),
              ("default_job", "global_batch_size"), ("ffn_hidden_size",)],
}


def _paths(data, prefix=()):
    """Every (path to a container, key) in a nested dict/list."""
    if isinstance(data, dict):
        for key in list(data):
            yield prefix, key
            yield from _paths(data[key], (*prefix, key))
    elif isinstance(data, list):
        for i in range(len(data)):
            yield prefix, i
            yield from _paths(data[i], (*prefix, i))


def _container(data, path):
    for key in path:
        try:
            data = data[key]
        except (KeyError, IndexError, TypeError):
            return None
    return data


@st.composite
def corrupted(draw, which: str):
    data = copy.deepcopy(TOY_CLUSTER if which == "cluster" else TOY_MODEL)
    # 0-3 random edits anywhere: delete a key, replace a value, add an unknown key
    for _ in range(draw(st.integers(0, 3))):
        spots = list(_paths(data))
        prefix, key = draw(st.sampled_from(spots))
        parent = _container(data, prefix)
        action = draw(st.sampled_from(["delete", "replace", "extra"]))
        if action == "delete" and isinstance(parent, dict):
            del parent[key]
        elif action == "extra" and isinstance(parent, dict):
            parent[draw(st.sampled_from(["zz_extra", "bandwidth", "price"]))] = draw(ANY_VALUES)
        else:
            parent[key] = draw(ANY_VALUES)
    # then one edit that always breaks the spec: an unknown top-level key, a required key deleted, or a
    # required positive number / structure replaced by a bad value
    final = draw(st.sampled_from(["extra", "delete", "bad_value"]))
    path = draw(st.sampled_from(REQUIRED[which]))
    parent, key = _container(data, path[:-1]), path[-1]
    settable = (isinstance(parent, dict) and isinstance(key, str)) or (
        isinstance(parent, list) and isinstance(key, int) and key < len(parent)
    )
    if final == "extra" or not settable:  # the random edits removed the spot: break the spec at the top level
        data["zz_unknown_key"] = draw(ANY_VALUES)
    elif final == "delete" and isinstance(parent, dict):
        parent.pop(key, None)
    else:
        parent[key] = draw(BAD_VALUES)
    return data


@settings(max_examples=draws(25), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(which=st.sampled_from(["cluster", "model"]), data=st.data())
def test_corrupted_specs_exit_2_with_one_line(which, data):
    spec = data.draw(corrupted(which))
    with tempfile.TemporaryDirectory() as tmp:
        good_model = write_yaml(Path(tmp) / "model.yaml", TOY_MODEL)
        good_cluster = write_yaml(Path(tmp) / "cluster.yaml", TOY_CLUSTER)
        bad = write_yaml(Path(tmp) / f"bad-{which}.yaml", spec)
        run = estimate(bad, good_cluster) if which == "model" else estimate(good_model, bad)
    assert run.code == 2, (run.code, run.stderr, spec)
    line = run.error_line
    assert str(bad) in line, line


def test_an_error_after_the_solve_started_is_one_line_on_a_pipe(toy):
    """The progress display drew nothing on a non-terminal stderr but ended with an empty line, so errors raised
    once the solve had started (a bad --solver, an unmet deadline) came after a blank line; no display off a terminal.
    A real process with stderr on a pipe (in-process, rich sees its own stream)."""
    import subprocess

    model, cluster = toy
    for extra, code, start in [(["--solver", "gurobi"], 2, "error: --solver = 'gurobi'"),
                               (["--max-time", "1s"], 1, "error: no plan finishes within 1 s")]:
        done = subprocess.run([sys.executable, "-m", "optsearch", "solve", "-m", str(model), "-c", str(cluster),
                               *extra], capture_output=True, text=True, timeout=120)
        assert done.returncode == code, done.stderr
        assert done.stderr.startswith(start) and done.stderr.count("\n") == 1, repr(done.stderr)
