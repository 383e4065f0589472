"""The fuzz harness (tests/fuzz_cli.py) in CI: twenty random command lines over every command, flag, file and
output path, each in a forked child under a timeout. None may print a traceback, hang, exit with a code other than
0/1/2, print more than one error line, or exit 0 on invalid input. OPTSEARCH_FUZZ_EXAMPLES=N runs N cases;
bench/fuzz_cli.py runs a thousand and more and records the result in docs/robustness.md."""

from __future__ import annotations

import os
import sys

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from fuzz_cli import Case, cli_cases, make_files, problems, run_case

pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or sys.platform == "darwin", reason="needs os.fork")

EXAMPLES = int(os.environ.get("OPTSEARCH_FUZZ_EXAMPLES", "20"))
# The suite draws the same command lines on every run, so that a change, not the draw, decides whether CI passes (a
# CBC crash drawn one run in several once failed it); OPTSEARCH_FUZZ_EXAMPLES=N draws N fresh ones, as bench/fuzz_cli.py.
CI_SEEDS = "OPTSEARCH_FUZZ_EXAMPLES" not in os.environ


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return make_files(tmp_path_factory.mktemp("fuzz"))


# no shrinking: each case is a process; shrinking a hang takes minutes, and the case is printed whole
@settings(max_examples=EXAMPLES, deadline=None, database=None, phases=[Phase.generate], derandomize=CI_SEEDS,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large])
@given(data=st.data())
def test_random_command_lines_end_cleanly(files, data):
    case: Case = data.draw(cli_cases(files))
    # a hang: 30 s of CPU (what a 30 s wall limit allowed on a quiet machine: the solvers run one thread) or 180 s of
    # wall time asleep; a loaded runner only stretches the wall time (10.5 s wall for 4 s CPU at load 8)
    outcome = run_case(case.argv, timeout_s=180, cpu_limit_s=30)
    assert not problems(case, outcome), (case, outcome.code, outcome.stderr[-2000:])


@pytest.mark.parametrize("name", ["binary", "binary-json", "utf16", "fifo", "dev-zero", "dev-urandom", "folder",
                                  "deep", "huge-gpus-per-node", "huge-layers", "tiny-bandwidth", "huge-batch"])
def test_every_bad_file_is_one_line_for_every_file_option(files, name):
    """-m, -c, --profile, --plan and launch's PLAN.json, each given each bad file: one line, exit 2, under 20 s of CPU
    (120 s of wall time for a child blocked on the FIFO)."""
    bad = files.bad[name]
    m, c = files.good["model"], files.good["cluster"]
    for argv in [("solve", "-m", bad, "-c", c, "-q"), ("solve", "-m", m, "-c", bad, "-q"),
                 ("solve", "-m", m, "-c", c, "-p", bad, "-q"), ("estimate", "--plan", bad), ("launch", bad),
                 ("calibrate", "--plan", bad, "--log", m, "--out", str(files.root / "x.csv"))]:
        if name.startswith("huge-") and argv[0] in ("estimate", "launch", "calibrate") or (
                name.startswith(("huge-", "tiny-")) and "-p" in argv):
            continue  # a valid YAML spec is not a plan file or profile table; covered by the other options
        outcome = run_case(argv, timeout_s=120, cpu_limit_s=20)
        case = Case(argv=argv, invalid=(name,))
        assert not problems(case, outcome), (argv, outcome.code, outcome.stderr[-2000:])
        assert outcome.code == 2, (argv, outcome.stderr)
