"""Issue 17: nothing hangs, nothing crashes, a plan file stands on its own. One test (or more) per item."""

from __future__ import annotations

import copy
import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from test_cli_errors import GOOD_PLAN, TOY_CLUSTER, TOY_MODEL, run_cli, write_yaml

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def toy(tmp_path):
    return write_yaml(tmp_path / "toy-model.yaml", TOY_MODEL), write_yaml(tmp_path / "toy-cluster.yaml", TOY_CLUSTER)


def solve_toy(toy, out: Path, *extra: str):
    run = run_cli("solve", "-m", str(toy[0]), "-c", str(toy[1]), "-q", "--out", str(out), *extra)
    assert run.code in (0, None), run.stderr
    return run


# ---- Ctrl-C ---------------------------------------------------------------------------------------------------


def _python(script: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                          timeout=120, cwd=REPO)


def test_ctrl_c_during_a_solve_is_one_line_and_exit_130():
    proc = _python("""
        import os, signal, sys, time
        signal.signal(signal.SIGINT, signal.default_int_handler)
        import optsearch.solver
        def interrupted_solve(*args, **kwargs):
            os.kill(os.getpid(), signal.SIGINT)  # the user's Ctrl-C, in the middle of the solve
            time.sleep(30)
        optsearch.solver.solve = interrupted_solve
        sys.argv = ["optsearch", "solve", "-m", "gpt2-xl", "-c", "fasop-a100-a10", "-q"]
        from optsearch.__main__ import main
        main()
    """)
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr == "interrupted\n" and proc.stdout == ""


def test_ctrl_c_during_the_imports_is_one_line_and_exit_130():
    proc = _python("""
        import signal, sys
        signal.signal(signal.SIGINT, signal.default_int_handler)
        class CtrlC:  # a Ctrl-C while the CLI imports rich's tables
            def find_spec(self, name, path=None, target=None):
                if name == "rich.table":
                    raise KeyboardInterrupt
        sys.meta_path.insert(0, CtrlC())
        sys.argv = ["optsearch", "catalog"]
        from optsearch.__main__ import main
        main()
    """)
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr == "interrupted\n"


def test_the_script_entry_point_is_the_one_that_catches_import_interrupts():
    text = (REPO / "pyproject.toml").read_text()
    assert 'optsearch = "optsearch.__main__:main"' in text


# ---- huge and unrepresentable values --------------------------------------------------------------------------


@pytest.mark.parametrize("which, path, value, message", [
    ("cluster", ("node_types", 0, "gpus_per_node"), 10**12,
     "node_types[0].gpus_per_node = 1000000000000: Input should be less than or equal to 1024"),
    ("cluster", ("node_types", 1, "inter_node_gbit_per_s"), 1e-300,
     "node_types[1].inter_node_gbit_per_s = 1e-300: Input should be greater than or equal to 0.001"),
    ("cluster", ("node_types", 0, "num_nodes_available"), 10**15,
     "node_types[0].num_nodes_available = 1000000000000000: Input should be less than or equal to 100000"),
    ("model", ("num_layers",), 10**12, "num_layers = 1000000000000: Input should be less than or equal to 10000"),
    ("model", ("default_job", "global_batch_size"), 99999999999999999999,
     "default_job.global_batch_size = 99999999999999999999: Input should be less than or equal to 1000000"),
])
def test_huge_spec_values_are_refused_with_the_limit(tmp_path, toy, which, path, value, message):
    data = copy.deepcopy(TOY_CLUSTER if which == "cluster" else TOY_MODEL)
    cur = data
    for key in path[:-1]:
        cur = cur[key]
    cur[path[-1]] = value
    bad = write_yaml(tmp_path / f"bad-{which}.yaml", data)
    model, cluster = (toy[0], bad) if which == "cluster" else (bad, toy[1])
    run = run_cli("solve", "-m", str(model), "-c", str(cluster), "-q")
    assert run.code == 2
    assert run.error_line == f"error: {bad}: {message}"


@pytest.mark.parametrize("args, message", [
    (("--max-time", "1e308"), "error: --max-time = '1e308': must be at most 100 years (3,155,760,000 s)"),
    (("--max-time", "99999999999999999999999d"),
     "error: --max-time = '99999999999999999999999d': must be at most 100 years (3,155,760,000 s)"),
    (("--max-cost", "1e300"), "error: --max-cost = '1e300': must be at most $1,000,000,000,000"),
    (("--max-time", ""), "error: --max-time = '': not a duration; use seconds or a sum of d/h/m/s parts such as "
                         "90m, 36h, 7d, 1d12h"),
    (("--max-cost", ""), "error: --max-cost = '': not an amount of USD; use a plain number such as 250000"),
    (("--global-batch-size", "99999999999999999999"),
     "error: Invalid value for '--global-batch-size': Input should be less than or equal to 1000000"),
    (("--set", "node_types.fast.count=1e15"),
     "error: --set node_types.fast.count=1e15: node_types[0].num_nodes_available = 1000000000000000: Input should "
     "be less than or equal to 100000"),
])
def test_huge_or_empty_options_are_refused_before_solving(toy, args, message):
    run = run_cli("solve", "-m", str(toy[0]), "-c", str(toy[1]), "-q", *args)
    assert run.code == 2
    assert run.error_line == message


def test_time_limit_covers_set_up(monkeypatch, toy):
    """A set-up that runs past --time-limit is stopped (exit 1, one line) instead of running on."""
    import time

    import optsearch.problem

    real = optsearch.problem.build_problem

    def slow_build(*args, **kwargs):
        time.sleep(0.3)  # a set-up longer than the whole limit
        return real(*args, **kwargs)

    monkeypatch.setattr("optsearch.cli.options.build_problem", slow_build)
    run = run_cli("solve", "-m", str(toy[0]), "-c", str(toy[1]), "-q", "--time-limit", "0.1")
    assert run.code == 1
    assert run.error_line.startswith("error: no plan within --time-limit 0.1 s: reading and setting up the problem "
                                     "took ")


def test_time_limit_alarm_stops_a_set_up_loop(toy, monkeypatch):
    import time

    def endless(*args, **kwargs):
        while True:
            time.sleep(0.01)

    monkeypatch.setattr("optsearch.solver.solve", endless)
    start = time.monotonic()
    # 0.5 s: reading the toy specs must end before the limit, so that the loop (not the set-up check) meets it; at
    # 0.05 s a loaded machine took 0.06 s to read them and the set-up message came instead
    run = run_cli("solve", "-m", str(toy[0]), "-c", str(toy[1]), "-q", "--time-limit", "0.5")
    assert run.code == 1 and time.monotonic() - start < 10
    assert "no plan within --time-limit 0.5 s: stopped after" in run.error_line


# ---- files that are not spec files ----------------------------------------------------------------------------


def test_special_and_binary_files_are_refused_by_name(tmp_path, toy):
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    (tmp_path / "utf16.yaml").write_bytes("name: x\n".encode("utf-16"))
    (tmp_path / "binary.json").write_bytes(b"{\"tp\": \xff\xfe}")
    cases = {
        "/dev/zero": "error: /dev/zero: not a regular file (a device, FIFO or socket); give a file",
        "/dev/urandom": "error: /dev/urandom: not a regular file (a device, FIFO or socket); give a file",
        str(fifo): f"error: {fifo}: not a regular file (a device, FIFO or socket); give a file",
        str(tmp_path / "utf16.yaml"): f"error: {tmp_path / 'utf16.yaml'}: UTF-16 text; save it as UTF-8",
        str(tmp_path): f"error: {tmp_path}: is a folder, not a file",
    }
    for path, line in cases.items():
        for flag in ("-m", "-c"):
            args = {"-m": str(toy[0]), "-c": str(toy[1]), flag: path}
            run = run_cli("solve", "-m", args["-m"], "-c", args["-c"], "-q")
            assert run.code == 2 and run.error_line == line, (flag, path, run.stderr)
    run = run_cli("estimate", "--plan", str(tmp_path / "binary.json"))
    assert run.error_line == f"error: {tmp_path / 'binary.json'}: not UTF-8 text (byte 0xff at offset 7)"
    run = run_cli("solve", "-m", str(toy[0]), "-c", str(toy[1]), "-p", str(tmp_path / "utf16.yaml"), "-q")
    assert run.code == 2 and run.error_line == f"error: {tmp_path / 'utf16.yaml'}: UTF-16 text; save it as UTF-8"
    run = run_cli("calibrate", "--plan", str(tmp_path / "binary.json"), "--log", "/dev/zero", "--out",
                  str(tmp_path / "c.csv"))
    assert run.error_line == "error: --log /dev/zero: not a regular file (a folder, device, FIFO or socket)"


def test_an_oversized_spec_file_is_refused_without_reading_it(tmp_path, toy):
    big = tmp_path / "big.yaml"
    with open(big, "wb") as fh:
        fh.truncate(9 * 2**20)  # sparse: 9 MiB of NUL bytes
    run = run_cli("solve", "-m", str(big), "-c", str(toy[1]), "-q")
    assert run.error_line == f"error: {big}: 9,437,184 bytes: larger than the 8 MiB limit for this file"


# ---- cross-field errors ---------------------------------------------------------------------------------------


def test_cross_field_errors_name_the_file_and_fields(tmp_path, toy):
    bad = write_yaml(tmp_path / "m.yaml", {**TOY_MODEL, "default_job": {"global_batch_size": 8, "train_tokens": 5,
                                                                         "train_iterations": 5}})
    run = run_cli("solve", "-m", str(bad), "-c", str(toy[1]), "-q")
    assert run.error_line == (f"error: {bad}: default_job: give exactly one of train_iterations and train_tokens "
                              "(train_iterations = 5, train_tokens = 5)")
    data = copy.deepcopy(TOY_CLUSTER)
    data["node_types"][1]["name"] = "fast"
    bad = write_yaml(tmp_path / "c.yaml", data)
    run = run_cli("solve", "-m", str(toy[0]), "-c", str(bad), "-q")
    assert run.error_line == f"error: {bad}: node_types[].name must be unique; repeated: fast"
    bad = write_yaml(tmp_path / "h.yaml", {**TOY_MODEL, "num_attention_heads": 7})
    run = run_cli("solve", "-m", str(bad), "-c", str(toy[1]), "-q")
    assert run.error_line == f"error: {bad}: hidden_size 1000 is not divisible by num_attention_heads 7; give head_dim"
    assert "<root>" not in run.error_line and "'dict'" not in run.error_line


# ---- output paths, checked before the work --------------------------------------------------------------------


@pytest.fixture
def no_solving(monkeypatch):
    """Any solve fails the test: the output checks must come first."""
    def refuse(*args, **kwargs):
        raise AssertionError("solved before checking the output path")

    monkeypatch.setattr("optsearch.solver.solve", refuse)
    monkeypatch.setattr("optsearch.whatif.pareto", refuse)
    monkeypatch.setattr("optsearch.whatif.sweep", refuse)


def test_output_paths_are_checked_before_the_solve(tmp_path, toy, no_solving):
    (tmp_path / "file.txt").write_text("x")
    spec = ("-m", str(toy[0]), "-c", str(toy[1]), "-q")
    cases = [
        (("solve", *spec, "--out", str(tmp_path)), f"error: --out {tmp_path}: is a folder; give a file name"),
        (("solve", *spec, "--out", "/proc/plan.json"),
         "error: --out /proc/plan.json: cannot write in folder /proc: No such file or directory"),
        (("solve", *spec, "--out", str(tmp_path / "file.txt" / "p.json")),
         f"error: --out {tmp_path / 'file.txt' / 'p.json'}: folder {tmp_path / 'file.txt'} does not exist"),
        (("solve", *spec, "--out", "/dev/null"), "error: --out /dev/null: exists and is not a regular file"),
        (("pareto", *spec, "--csv", str(tmp_path)), f"error: --csv {tmp_path}: is a folder; give a file name"),
        (("whatif", *spec, "--sweep", "max-time=20d..60d:3", "--plot", "sweep.txt"),
         "error: --plot sweep.txt: unknown file type '.txt'; use one of .png, .pdf, .svg, .jpg, .jpeg"),
        (("whatif", *spec, "--sweep", "max-time=20d..60d:3", "--csv", "/proc/x.csv"),
         "error: --csv /proc/x.csv: cannot write in folder /proc: No such file or directory"),
    ]
    for argv, line in cases:
        run = run_cli(*argv)
        assert run.code == 2 and run.error_line == line, (argv, run.stderr)
        assert run.stdout == ""


def test_launch_out_is_checked_before_the_files_are_made(tmp_path, toy):
    (tmp_path / "file.txt").write_text("x")
    base = ("launch", "-m", str(toy[0]), "-c", str(toy[1]), *GOOD_PLAN)
    run = run_cli(*base, "--out", str(tmp_path / "file.txt"))
    assert run.error_line == f"error: --out {tmp_path / 'file.txt'}: exists and is not a folder"
    run = run_cli(*base, "--out", "/proc/launch")
    assert run.error_line == "error: --out /proc/launch: cannot write in folder /proc: No such file or directory"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_folder_is_refused(tmp_path, toy):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    run = run_cli("solve", "-m", str(toy[0]), "-c", str(toy[1]), "-q", "--out", str(folder / "p.json"))
    assert run.code == 2 and "cannot write in folder" in run.error_line


def test_output_files_honour_the_umask(tmp_path, toy):
    old = os.umask(0o027)
    try:
        solve_toy(toy, tmp_path / "plan.json")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "plan.json").stat().st_mode) == 0o640


# ---- plan files that stand on their own -----------------------------------------------------------------------


def test_a_plan_file_prices_and_launches_without_the_specs(tmp_path, toy):
    out = tmp_path / "plan.json"
    solve = json.loads(run_cli("solve", "-m", str(toy[0]), "-c", str(toy[1]), "-q", "--iterations", "777",
                               "--set", "node_types.slow.price_usd_per_node_hour=3.5", "--max-time", "30d",
                               "--json", "--out", str(out)).stdout)
    record = json.loads(out.read_text())["problem"]
    assert record["job"]["train_iterations"] == 777
    assert record["edits"] == ["node_types.slow.price_usd_per_node_hour=3.5"]
    assert record["budget"]["max_time_s"] == 30 * 86400
    assert len(record["model"]["sha256"]) == 64 and record["cluster"]["spec"]["node_types"][1][
        "price_usd_per_node_hour"] == 3.5
    toy[0].unlink()  # the plan file alone
    toy[1].unlink()
    run = run_cli("estimate", "--plan", str(out), "--json")
    assert run.code in (0, None), run.stderr
    again = json.loads(run.stdout)
    assert again["cost_usd"] == solve["estimate"]["cost_usd"] and again["iterations"] == 777
    run = run_cli("launch", str(out), "-f", "megatron")
    assert run.code in (0, None) and "--train-iters 777" in run.stdout, run.stderr


def test_calibrate_reads_the_problem_from_the_plan_file(tmp_path):
    from optsearch.plan import load_plan
    from test_calibrate import megatron_log

    out = tmp_path / "plan.json"
    run = run_cli("solve", "-m", "gpt2-xl", "-c", "fasop-a10", "-q", "--max-time", "60d", "--out", str(out))
    assert run.code in (0, None), run.stderr
    log = tmp_path / "train.log"
    log.write_text(megatron_log(load_plan(out), 1.5))
    run = run_cli("calibrate", "--plan", str(out), "--log", str(log), "--out", str(tmp_path / "cal.csv"), "--json")
    assert run.code in (0, None), run.stderr
    assert json.loads(run.stdout)["logs"][0]["measured_s"] == pytest.approx(1.5)


def test_a_different_model_beside_the_plan_is_said(tmp_path, toy):
    out = tmp_path / "plan.json"
    solve_toy(toy, out)
    other = write_yaml(tmp_path / "other.yaml", {**TOY_MODEL, "ffn_hidden_size": 3000})
    run = run_cli("estimate", "--plan", str(out), "-m", str(other), "--json")
    assert run.code in (0, None), run.stderr
    assert "warning: --model" in run.stderr and "differs from the model" in run.stderr and str(other) in run.stderr
    run = run_cli("estimate", "--plan", str(out), "-m", str(toy[0]), "--json")  # the same spec: nothing said
    assert run.code in (0, None) and run.stderr == ""


def test_an_old_plan_file_without_its_problem_needs_the_specs(tmp_path, toy):
    out = tmp_path / "plan.json"
    solve_toy(toy, out)
    data = json.loads(out.read_text())
    del data["problem"]
    out.write_text(json.dumps(data))
    run = run_cli("estimate", "--plan", str(out))
    assert run.code == 2 and "does not record the model and cluster it was solved for" in run.error_line
    assert run_cli("estimate", "--plan", str(out), "-m", str(toy[0]), "-c", str(toy[1])).code in (0, None)


@pytest.mark.parametrize("edit, message", [
    (lambda p: p["nodes"].update({k: 9 for k in p["nodes"]}), ": 9}: the stages rent {"),
    (lambda p: p["stages"][0].update(gpu="Z80"), "stages[0].gpu = 'Z80': node type"),
    (lambda p: p.update(balance="1-1-1-1"), "balance = '1-1-1-1': the stages hold"),
    (lambda p: p.update(num_micro_batches=float("nan")), "num_micro_batches = nan: must be global batch"),
    (lambda p: p.update(num_micro_batches=3), "num_micro_batches = 3: must be global batch"),
])
def test_edited_derived_plan_fields_are_refused(tmp_path, toy, edit, message):
    out = tmp_path / "plan.json"
    solve_toy(toy, out)
    data = json.loads(out.read_text())
    edit(data["plan"])
    out.write_text(json.dumps(data))
    for argv in (("estimate", "--plan", str(out)), ("launch", str(out))):
        run = run_cli(*argv)
        assert run.code == 2 and run.error_line.startswith(f"error: {out}: "), (argv, run.stderr)
        assert message in run.error_line


def test_the_plan_file_is_byte_identical_when_proven_and_the_help_says_when(tmp_path, toy):
    solve_toy(toy, tmp_path / "a.json")
    solve_toy(toy, tmp_path / "b.json")
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    help_text = " ".join(run_cli("solve", "--help").stdout.replace("│", " ").split())
    assert "byte-identical" in help_text and "--time-limit may stop at another plan" in help_text


# ---- estimate's stage options ---------------------------------------------------------------------------------


def test_node_order_is_not_ignored_beside_stages(toy):
    run = run_cli("estimate", "-m", str(toy[0]), "-c", str(toy[1]), "--tp", "1", "--dp", "1",
                  "--micro-batch-size", "1", "--stages", "fast:4", "--node-order", "slow")
    assert run.code == 2
    assert run.error_line.startswith("error: --node-order goes with --balance or --layout")


@pytest.mark.parametrize("args, message", [
    (("--balance", "2-2", "--node-order", "fast*99999999999999999999"),
     "error: --node-order gives 99999999999999999999 node types but --balance has 2 stages; give one type, one per "
     "stage, or TYPE*COUNT runs"),
    (("--layout", "E|t*99999999999999|L", "--node-order", "fast"),
     "error: --layout = 'E|t*99999999999999|L': repeat counts [99999999999999] could expand to more than 1,000,000 "
     "layers"),
])
def test_huge_repeat_counts_are_refused_before_expanding(toy, args, message):
    run = run_cli("estimate", "-m", str(toy[0]), "-c", str(toy[1]), "--tp", "1", "--dp", "1", "--micro-batch-size",
                  "1", *args)
    assert run.code == 2 and run.error_line == message


def test_balance_on_a_one_type_cluster_needs_no_node_order(tmp_path, toy):
    one = write_yaml(tmp_path / "one.yaml", {**TOY_CLUSTER, "node_types": TOY_CLUSTER["node_types"][:1]})
    run = run_cli("estimate", "-m", str(toy[0]), "-c", str(one), "--tp", "1", "--dp", "1", "--micro-batch-size", "1",
                  "--balance", "2-2", "--json")
    assert run.code in (0, None), run.stderr
    assert [s["node_type"] for s in json.loads(run.stdout)["plan"]["stages"]] == ["fast", "fast"]
    run = run_cli("estimate", "-m", str(toy[0]), "-c", str(toy[1]), "--tp", "1", "--dp", "1", "--micro-batch-size",
                  "1", "--balance", "2-2")
    assert run.error_line == "error: --balance needs --node-order (the node type of each stage)"


# ---- small things ---------------------------------------------------------------------------------------------


def test_launch_to_stdout_prints_each_note_once(toy):
    run = run_cli("launch", "-m", str(toy[0]), "-c", str(toy[1]), *GOOD_PLAN, "-f", "megatron")
    assert run.code in (0, None), run.stderr
    notes = [line for line in run.stdout.splitlines() if line.startswith("# note: ")]
    assert notes and len(notes) == len(set(notes))
    assert "note:" not in run.stderr


def test_pareto_help_says_it_prints_an_array():
    text = " ".join(run_cli("pareto", "--help").stdout.replace("│", " ").split())
    assert "JSON array" in text and "one JSON object" not in text


def test_durations_and_costs_show_the_precision_that_tells_them_apart():
    from optsearch.report import distinct_durations, distinct_usd

    day = 86400.0
    assert distinct_durations([22.5 * day, 23 * day + 9 * 3600 + 120, 23 * day + 9 * 3600 + 1500]) == [
        "22d 12h 0m", "23d 9h 2m", "23d 9h 25m"]
    assert distinct_durations([3 * day, 5 * day]) == ["3d", "5d"]  # already distinct: as before
    assert distinct_usd([45801.2, 45801.4]) == ["$45,801.20", "$45,801.40"]
    assert distinct_usd([100.0, 200.0]) == ["$100", "$200"]


def test_progress_speaks_in_plans_ruled_out_best_so_far_and_proven_gap():
    from optsearch.cli.solve_cmd import SolveProgress
    from optsearch.solver import Progress

    shown = SolveProgress("cost", quiet=True).status(
        Progress(explored=3, total=315, pruned=2935, incumbent=40000.0, bound=39000.0, candidate=None, bounded=12))
    assert shown == "2,935 ruled out by quick bounds, 3 solved exactly, best so far $40,000, proven gap 2.50%"
    shown = SolveProgress("time", quiet=True).status(
        Progress(explored=0, total=10, pruned=0, incumbent=None, bound=None, candidate=None))
    assert shown.endswith("no plan yet")


def test_a_job_override_beside_the_plan_reprices_instead_of_refusing(tmp_path, toy):
    out = tmp_path / "plan.json"
    solve_toy(toy, out)
    run = run_cli("estimate", "--plan", str(out), "--global-batch-size", "16", "--json")
    assert run.code in (0, None), run.stderr
    plan = json.loads(out.read_text())["plan"]
    assert json.loads(run.stdout)["num_micro_batches"] == 2 * plan["num_micro_batches"]


def test_launch_files_honour_the_umask(tmp_path, toy):
    old = os.umask(0o077)
    try:
        run = run_cli("launch", "-m", str(toy[0]), "-c", str(toy[1]), *GOOD_PLAN, "-f", "torchrun", "--out",
                      str(tmp_path / "launch"))
    finally:
        os.umask(old)
    assert run.code in (0, None), run.stderr
    assert stat.S_IMODE((tmp_path / "launch" / "torchrun.sh").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "launch" / "hostfile").stat().st_mode) == 0o600


@pytest.mark.parametrize("argv", [["catalog"], ["estimate", "-m", "gpt2-small", "-c", "fasop-a10", "--tp", "1",
                                                "--dp", "1", "--micro-batch-size", "1", "--stages", "a10:12"]])
def test_a_closed_output_pipe_exits_141_not_the_no_plan_code(argv):
    """`optsearch ... | head -1`: the reader has gone. Exit 1 means "no plan meets the budget", so a closed pipe must
    not end with it (rich's console and typer's layer both exited 1); 141 (128 + SIGPIPE), as a shell reports it."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first byte
    try:
        done = subprocess.run([sys.executable, "-m", "optsearch", *argv], stdout=write_end, stderr=subprocess.PIPE,
                              timeout=60)
    finally:
        os.close(write_end)
    assert done.returncode == 141, done.stderr.decode()[-2000:]
    assert b"Traceback" not in done.stderr


def test_version_prints_the_installed_version():
    from importlib.metadata import version

    out = run_cli("--version")
    assert out.code == 0 and out.stdout.strip() == f"optsearch {version('optsearch')}"


@pytest.mark.parametrize("command", ["launch", "estimate", "solve"])
def test_help_on_a_pipe_is_not_cut(command):
    """Piped help (`optsearch launch --help | less`) was laid out in 80 columns: option names and examples cut with
    '…' ('--micro-batch-s…', 'NODE_TYPE:LAYERS[:RE…')."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    done = subprocess.run([sys.executable, "-m", "optsearch", command, "--help"], capture_output=True, text=True,
                          env=env, timeout=60)
    assert done.returncode == 0 and "--help" in done.stdout
    assert "…" not in done.stdout
