"""A fuzz harness for the whole command line: every command, its flags, its files and its output paths.

`cli_cases()` is a hypothesis strategy of command lines. Each flag's value is drawn from a pool of good values and a
pool of bad ones (binary and UTF-16 files, /dev/zero, /dev/urandom, a FIFO, a folder, a missing path, huge and
non-finite numbers, empty strings, specs with huge fields, output paths that cannot be written). A case knows
whether it holds a bad value that the command must refuse (`invalid`).

`run_case(argv)` runs `optsearch ARGV` in a forked child of this (warm) interpreter with stdout and stderr in files,
and kills it after `timeout_s` of wall time or, given `cpu_limit_s`, once the child and its processes (CBC) have used
that much CPU time: a hang is caught without hanging the caller, and a case that a loaded machine merely slows (a
2-core CI runner shared with other jobs: 10 s wall for 4 s of CPU at load 8) is not taken for one.
`problems(case, outcome)` lists what is wrong with an outcome: a traceback, an internal error, a hang, an exit code
other than 0/1/2, more than one error line, or exit 0 on invalid input.

tests/test_fuzz_cli.py runs a few dozen cases in CI; bench/fuzz_cli.py runs a thousand and more.
"""

from __future__ import annotations

import copy
import os
import signal
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from hypothesis import strategies as st

from test_cli_errors import TOY_CLUSTER, TOY_MODEL


def warm_up() -> None:
    """Import what the commands import lazily (OR-Tools, PuLP, matplotlib), once, in this process: every forked case
    then starts warm (about 0.05 s instead of 0.5 s)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot  # noqa: F401

    import optsearch.cli  # noqa: F401
    import optsearch.compare  # noqa: F401
    import optsearch.megatron  # noqa: F401
    import optsearch.planfile  # noqa: F401
    import optsearch.solver  # noqa: F401
    import optsearch.whatif  # noqa: F401


@dataclass(frozen=True)
class Case:
    argv: tuple[str, ...]
    invalid: tuple[str, ...] = ()  # the bad values the command must refuse (exit != 0)


@dataclass(frozen=True)
class Outcome:
    code: int | None  # None: killed after the timeout
    stdout: str
    stderr: str
    seconds: float
    cpu_seconds: float | None = None  # the child's process group, when run_case had a CPU limit (Linux /proc)


CPU_POLL_S = 0.25  # how often run_case reads the child's CPU time (a /proc scan)


def group_cpu_s(pgid: int) -> float | None:
    """CPU seconds (user + system, and those of reaped children) of the live processes in a process group, from
    /proc/PID/stat (fields 14-17, proc(5)); None without /proc."""
    proc = Path("/proc")
    if not (proc / "self" / "stat").exists():
        return None
    ticks = 0
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone since the listing
        if int(fields[2]) == pgid:  # fields[0] is field 3 (state): pgrp is field 5, utime..cstime 14..17
            ticks += sum(int(f) for f in fields[11:15])
    return ticks / os.sysconf("SC_CLK_TCK")


def run_case(argv: tuple[str, ...] | list[str], timeout_s: float = 30.0, cwd: Path | None = None,
             cpu_limit_s: float | None = None, entry=None) -> Outcome:
    """`optsearch ARGV` (or entry(), a callable, for the harness's own tests) in a forked child with its own process
    group; killed (group and all) after timeout_s of wall time, or once the group has used cpu_limit_s of CPU time
    (where /proc tells it; the wall limit is then the backstop for a child that hangs asleep)."""
    from optsearch.cli import main

    main = entry or main

    with tempfile.TemporaryDirectory(prefix="optsearch-fuzz-") as tmp:
        out_path, err_path = Path(tmp) / "stdout", Path(tmp) / "stderr"
        start = time.monotonic()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            code = 70
            try:
                os.setpgid(0, 0)
                if cwd is not None:
                    os.chdir(cwd)
                for fd, path in ((1, out_path), (2, err_path)):
                    target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                    os.dup2(target, fd)
                    os.close(target)
                import sys

                # pytest's capture (and any caller's redirection) replaced sys.stdout/sys.stderr: write to fds 1 and 2
                sys.stdout = open(1, "w", closefd=False)
                sys.stderr = open(2, "w", closefd=False)
                sys.argv = ["optsearch", *argv]
                try:
                    main()
                    code = 0
                except SystemExit as ex:
                    code = ex.code if isinstance(ex.code, int) else (0 if ex.code is None else 1)
                except BaseException:  # noqa: BLE001 - reported as a traceback by the parent
                    import traceback

                    traceback.print_exc()
                    code = 99
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)
        code: int | None = None
        cpu_s: float | None = None
        next_poll = start
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                code = os.waitstatus_to_exitcode(status)
                break
            over_cpu = False
            if cpu_limit_s is not None and time.monotonic() >= next_poll:
                next_poll = time.monotonic() + CPU_POLL_S
                cpu_s = group_cpu_s(pid)
                over_cpu = cpu_s is not None and cpu_s > cpu_limit_s
            if over_cpu or time.monotonic() - start > timeout_s:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                os.waitpid(pid, 0)
                break
            time.sleep(0.005)
        seconds = time.monotonic() - start
        read = lambda p: p.read_text(errors="replace") if p.exists() else ""  # noqa: E731
        return Outcome(code=code, stdout=read(out_path), stderr=read(err_path), seconds=seconds, cpu_seconds=cpu_s)


def problems(case: Case, outcome: Outcome) -> list[str]:
    """What is wrong with the outcome of a case (empty: nothing)."""
    found = []
    if outcome.code is None:
        cpu = f" ({outcome.cpu_seconds:.1f} s CPU)" if outcome.cpu_seconds is not None else ""
        found.append(f"hang: killed after {outcome.seconds:.1f} s{cpu}")
    if "Traceback" in outcome.stderr or outcome.code == 99:
        found.append("traceback")
    if "internal error" in outcome.stderr:
        found.append("internal error")
    if outcome.code not in (None, 0, 1, 2):
        found.append(f"exit code {outcome.code}")
    if outcome.code in (1, 2):
        errors = [line for line in outcome.stderr.splitlines() if line.startswith("error: ")]
        if len(errors) != 1:
            found.append(f"{len(errors)} error lines")
    if outcome.code == 0 and case.invalid:
        found.append(f"exit 0 on invalid input {case.invalid}")
    return found


# ---- the files and paths the cases use ------------------------------------------------------------------------


@dataclass
class Files:
    """Every file a case may name, made once in `root`."""

    root: Path
    good: dict[str, str] = field(default_factory=dict)  # role -> path
    bad: dict[str, str] = field(default_factory=dict)  # name -> path of a file no command may accept as input
    outputs_good: list[str] = field(default_factory=list)
    outputs_bad: dict[str, str] = field(default_factory=dict)


def _huge(data: dict, path: tuple, value) -> dict:
    data = copy.deepcopy(data)
    cur = data
    for key in path[:-1]:
        cur = cur[key]
    cur[path[-1]] = value
    return data


def make_files(root: Path) -> Files:
    """Write the good toy specs, a plan solved for them, and every bad file, into `root`."""
    warm_up()
    root.mkdir(parents=True, exist_ok=True)
    f = Files(root=root)

    def dump(name: str, data: object) -> str:
        (root / name).write_text(yaml.safe_dump(data, sort_keys=False))
        return str(root / name)

    f.good["model"] = dump("model.yaml", TOY_MODEL)
    f.good["cluster"] = dump("cluster.yaml", TOY_CLUSTER)
    plan = root / "plan.json"
    outcome = run_case(("solve", "-m", f.good["model"], "-c", f.good["cluster"], "-q", "--out", str(plan)))
    assert outcome.code == 0 and plan.exists(), outcome.stderr
    f.good["plan"] = str(plan)
    (root / "binary.yaml").write_bytes(bytes(range(256)) * 8)
    (root / "binary.json").write_bytes(b"{" + bytes(range(128, 256)) * 4)
    (root / "utf16.yaml").write_bytes("name: toy\n".encode("utf-16"))
    (root / "utf16.json").write_bytes('{"tp": 1}'.encode("utf-16"))
    (root / "empty.yaml").write_text("")
    (root / "list.json").write_text("[1, 2, 3]")
    (root / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    fifo = root / "fifo.yaml"
    os.mkfifo(fifo)
    (root / "folder.yaml").mkdir()
    f.bad.update({
        "binary": str(root / "binary.yaml"), "binary-json": str(root / "binary.json"),
        "utf16": str(root / "utf16.yaml"), "utf16-json": str(root / "utf16.json"), "empty": str(root / "empty.yaml"),
        "list": str(root / "list.json"), "deep": str(root / "deep.json"), "fifo": str(fifo),
        "folder": str(root / "folder.yaml"), "missing": str(root / "missing.yaml"), "dev-zero": "/dev/zero",
        "dev-urandom": "/dev/urandom", "proc-folder": "/proc/self",
    })
    for name, which, path, value in [
        ("huge-gpus-per-node", "cluster", ("node_types", 0, "gpus_per_node"), 10**12),
        ("huge-nodes", "cluster", ("node_types", 1, "num_nodes_available"), 10**15),
        ("tiny-bandwidth", "cluster", ("node_types", 0, "inter_node_gbit_per_s"), 1e-300),
        ("huge-bandwidth", "cluster", ("node_types", 0, "intra_node_gbyte_per_s"), 1e300),
        ("huge-price", "cluster", ("node_types", 0, "price_usd_per_node_hour"), 1e300),
        ("huge-memory", "cluster", ("gpus", 0, "memory_gib"), 1e300),
        ("huge-layers", "model", ("num_layers",), 10**12),
        ("huge-hidden", "model", ("hidden_size",), 10**15),
        ("huge-seq", "model", ("seq_length",), 10**13),
        ("huge-batch", "model", ("default_job", "global_batch_size"), 99999999999999999999),
        ("huge-iterations", "model", ("default_job", "train_iterations"), 10**30),
    ]:
        data = _huge(TOY_CLUSTER if which == "cluster" else TOY_MODEL, path, value)
        f.bad[name] = dump(f"{name}.yaml", data)
    plan_data = __import__("json").loads(plan.read_text())
    for name, edit in [
        ("plan-nodes", lambda d: d["plan"]["nodes"].update({"fast": 99})),
        ("plan-gpu", lambda d: d["plan"]["stages"][0].update({"gpu": "A100-SXM-80GB"})),
        ("plan-balance", lambda d: d["plan"].update({"balance": "1-1-1-1-1-1"})),
        ("plan-nan", lambda d: d["plan"].update({"num_micro_batches": float("nan")})),
        ("plan-no-stages", lambda d: d["plan"].pop("stages")),
        ("plan-bad-problem", lambda d: d["problem"]["model"]["spec"].update({"num_layers": 10**12})),
    ]:
        data = copy.deepcopy(plan_data)
        edit(data)
        (root / f"{name}.json").write_text(__import__("json").dumps(data))
        f.bad[name] = str(root / f"{name}.json")
    (root / "file.txt").write_text("a file, not a folder")
    f.outputs_good = [str(root / "out" / "result.json")]
    (root / "out").mkdir()
    f.outputs_bad = {"folder": str(root / "out"), "proc": "/proc/optsearch-fuzz.json",
                     "under-a-file": str(root / "file.txt" / "x.json"), "missing-folder": str(root / "no" / "x.json"),
                     "dev-null": "/dev/null", "sys": "/sys/optsearch-fuzz.json"}
    return f


# ---- the strategy ---------------------------------------------------------------------------------------------

BAD_NUMBERS = ["-1", "0", "1e308", "99999999999999999999999", "nan", "inf", "", "abc", "1e-300", "-0"]
BAD_DURATIONS = ["", "1e308", "99999999999999999999999d", "-5d", "0", "nan", "inf", "7 days", "1e-300x", "d"]
BAD_MONEY = ["", "1e308", "-5", "0", "nan", "$", "1,0,0,x", "99999999999999999999999"]
GOOD_DURATIONS = ["30d", "90d", "1d12h", "400d"]


def _value(good: list[str], bad: list[str]):
    """(value, is_bad): a bad value one time in five (when there are good ones), so that about half the cases are
    valid command lines that run to the end."""
    g = st.sampled_from(good).map(lambda v: (v, False)) if good else None
    b = st.sampled_from(bad).map(lambda v: (v, True)) if bad else None
    if g is None or b is None:
        return b if g is None else g
    return st.integers(0, 4).flatmap(lambda r: b if r == 0 else g)


@st.composite
def cli_cases(draw, files: Files) -> Case:
    """One command line over every command; `invalid` lists the bad values it holds."""
    f = files
    spec_bad = [v for k, v in f.bad.items() if not k.startswith("plan-")]
    plan_bad = [v for k, v in f.bad.items() if k.startswith("plan-") or k in (
        "binary-json", "utf16-json", "list", "deep", "fifo", "folder", "missing", "dev-zero", "dev-urandom", "empty")]
    out_bad = list(f.outputs_bad.values())
    command = draw(st.sampled_from(["solve", "estimate", "launch", "compare", "whatif", "pareto", "calibrate",
                                    "import-profile", "catalog", "profile", "validate"]))
    argv: list[str] = [command]
    invalid: list[str] = []

    def add(flag: str | None, good: list[str], bad: list[str], *, always: bool = False) -> None:
        if not always and not draw(st.booleans()):
            return
        value, is_bad = draw(_value(good, bad))
        argv.extend([flag, value] if flag else [value])
        if is_bad:
            invalid.append(f"{flag or 'argument'} {value!r}")

    def model_cluster(required: bool = True) -> None:
        add("--model", [f.good["model"], "gpt2-small"], spec_bad + ["no-such-model"], always=required)
        add("--cluster", [f.good["cluster"]], spec_bad + ["no-such-cluster"], always=required)

    def job() -> None:
        add("--global-batch-size", ["8", "16"], BAD_NUMBERS)
        add("--iterations" if draw(st.booleans()) else "--tokens", ["100", "1000000"], BAD_NUMBERS)
        add("--profile", ["analytic"], spec_bad)

    def target_headroom() -> None:
        add("--target", ["megatron", "fasop"], ["deepspeed", ""])
        add("--memory-headroom", ["0", "0.1", "0.5"], ["-0.1", "0.95", "nan", "1e308", "x", ""])

    def budget(minimize: bool = True) -> None:
        if minimize:
            add("--minimize", ["cost", "time"], ["money", ""])
        add("--max-time", GOOD_DURATIONS, BAD_DURATIONS)
        add("--max-cost", ["1e9", "250,000"], BAD_MONEY)
        add("--max-gpus", ["8", "64"], BAD_NUMBERS)
        add("--max-usd-per-hour", ["100"], BAD_MONEY)

    if command == "solve":
        model_cluster()
        budget()
        job()
        add("--solver", ["cpsat", "cbc"], ["gurobi", ""])
        target_headroom()
        add("--time-limit", ["5", "0.5"], BAD_NUMBERS)
        add("--gap", ["0.01"], ["-1", "2", "nan"])
        add("--set", ["node_types.fast.count=1", "job.global_batch_size=16"],
            ["node_types.fast.count=1e15", "model.num_layers=99999999999999", "job.global_batch_size=nan",
             "node_types.fast.inter_node_gbit_per_s=1e-300", "nope=1", "="])
        add("--out", f.outputs_good, out_bad)
    elif command == "estimate":
        if draw(st.booleans()):
            add("--plan", [f.good["plan"]], plan_bad, always=True)
            if draw(st.booleans()):
                model_cluster(required=False)
        else:
            model_cluster()
            add("--tp", ["1"], BAD_NUMBERS, always=True)
            add("--dp", ["1"], BAD_NUMBERS, always=True)
            add("--micro-batch-size", ["1"], BAD_NUMBERS, always=True)
            shape = draw(st.sampled_from(["stages", "balance", "layout"]))
            if shape == "stages":
                add("--stages", ["fast:2,fast:2", "slow:4"], ["fast:99999999999999999999", "fast:-1", "fast", ""],
                    always=True)
            elif shape == "layout":
                add("--layout", ["E|t*2|t*2|L", "Et*2|t*2L"],
                    ["E|t*99999999999999|L", "((t*1000)*1000)*1000", "x", "", "E|(t*2|)*99999999999999L"], always=True)
                add("--node-order", ["fast", "slow,fast"], ["fast*99999999999999999999", "nope"], always=True)
            else:
                add("--balance", ["2-2", "4"], ["2-x", "-", "99999999999999999999"], always=True)
                add("--node-order", ["fast", "slow,fast"], ["fast*99999999999999999999", "nope"], always=True)
        job()
    elif command == "launch":
        add(None, [f.good["plan"]], plan_bad, always=True)
        add("--format", ["megatron", "fasop", "torchrun", "slurm"], ["deepspeed", ""])
        # launch --out is a folder, created if missing
        add("--out", [str(f.root / "launch"), f.outputs_bad["missing-folder"]],
            [v for k, v in f.outputs_bad.items() if k not in ("folder", "missing-folder")] + [str(f.root / "file.txt")])
        add("--master-port", ["29500"], BAD_NUMBERS + ["70000"])
        if draw(st.booleans()):
            model_cluster(required=False)
    elif command == "compare":
        model_cluster()
        budget()
        # brute force ("exhaustive", the default's last method) takes half a minute on gpt2-small: toy model only
        exhaustive = ["cbc,exhaustive"] if argv[argv.index("--model") + 1] == f.good["model"] else []
        add("--methods", ["cpsat,dp", "cbc,cpsat,dp-amp", *exhaustive], ["nope", ""], always=True)
        target_headroom()
        add("--time-limit", ["5"], BAD_NUMBERS)
        add("--max-plans", ["1000"], BAD_NUMBERS)
    elif command in ("whatif", "pareto"):
        model_cluster()
        if command == "whatif":
            add("--sweep", ["max-time=20d..60d:3", "max-cost=1e5..1e6:2"],
                ["max-time=1e308..1e309:3", "max-time=1d..2d:99999999999999", "max-time=", "x=1", ""], always=True)
        budget(minimize=False)
        target_headroom()
        add("--time-limit", ["5"], BAD_NUMBERS)
        add("--csv", [str(f.root / "points.csv")], out_bad)
        add("--plot", [str(f.root / "points.png")], out_bad + [str(f.root / "sweep.txt")])
        add("--json", [""], [])
        if argv[-1] == "":
            argv.pop()
    elif command == "validate":
        add(None, [], [*spec_bad, f.good["model"]], always=True)
        add("--memory-headroom", ["0.1"], ["-1", "nan", ""])
    elif command == "calibrate" and draw(st.booleans()):
        add("--runs", [], [*spec_bad, f.good["model"]], always=True)
        model_cluster()
        add("--out", [str(f.root / "calibrated.csv")], out_bad, always=True)
    elif command == "calibrate":
        add("--plan", [f.good["plan"]], plan_bad, always=True)
        add("--log", [], [f.bad["binary"], "/dev/zero", f.bad["fifo"], f.bad["missing"], f.bad["folder"],
                          f.good["model"]], always=True)
        add("--out", [str(f.root / "calibrated.csv")], out_bad, always=True)
    elif command == "import-profile":
        add(None, ["fasop", "metis", "aceso"], ["nope", ""], always=True)
        add("--source", [], [f.bad["folder"], f.bad["missing"], "/dev/zero", f.bad["fifo"]], always=True)
        add("--model", ["gpt2-xl"], ["no-such-model"], always=True)
        add("--out", [], out_bad)
    elif command == "catalog":
        add(None, ["gpus", "models", "clusters"], ["nope", ""])
    elif command == "profile":  # a valid profile would measure for minutes: every case holds a bad value
        add("--model", ["gpt2-small"], spec_bad, always=True)
        add("--out", [], out_bad, always=True)
        add("--tp", ["1"], ["0", "99999999999999999999", "x"])
        add("--micro-batch-sizes", ["1"], ["0", "99999999999999999999", ""])
    return Case(argv=tuple(argv), invalid=tuple(invalid))
