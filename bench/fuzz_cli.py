"""The long fuzz run: N random command lines (tests/fuzz_cli.py) over every command, flag, file and output path, each
in a forked child under a timeout; every failure is collected (CI's test stops at the first one).

    python bench/fuzz_cli.py [--cases 1000] [--timeout 60] [--seed 0] [--json docs/fuzz_cli.json]

A failure is a traceback, an internal error, a hang (killed after --timeout), an exit code other than 0/1/2, more than
one error line, or exit 0 on invalid input. It prints the counts (cases, invalid cases, exit codes, failures,
slowest case, wall time) and the failing command lines, and writes them as JSON. Results: docs/robustness.md.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from fuzz_cli import cli_cases, make_files, problems, run_case  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=1000)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    records: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="optsearch-fuzz-") as tmp:
        files = make_files(Path(tmp))
        start = time.perf_counter()

        @seed(args.seed)
        @settings(max_examples=args.cases, deadline=None, database=None, phases=[Phase.generate],
                  suppress_health_check=list(HealthCheck))
        @given(data=st.data())
        def one(data):
            case = data.draw(cli_cases(files))
            outcome = run_case(case.argv, timeout_s=args.timeout)
            found = problems(case, outcome)
            records.append({"argv": list(case.argv), "invalid": list(case.invalid), "code": outcome.code,
                            "seconds": round(outcome.seconds, 3), "problems": found,
                            "stderr_tail": outcome.stderr[-600:] if found else ""})
            if len(records) % 100 == 0:
                print(f"{len(records)} cases, {sum(bool(r['problems']) for r in records)} failures, "
                      f"{time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)

        one()
        wall = time.perf_counter() - start
    failures = [r for r in records if r["problems"]]
    commands = collections.Counter(r["argv"][0] for r in records)
    codes = collections.Counter(str(r["code"]) for r in records)
    slowest = max(records, key=lambda r: r["seconds"])
    summary = {
        "cases": len(records), "invalid_cases": sum(bool(r["invalid"]) for r in records), "seed": args.seed,
        "timeout_s": args.timeout, "wall_s": round(wall, 1), "failures": len(failures),
        "commands": dict(sorted(commands.items())), "exit_codes": dict(sorted(codes.items())),
        "slowest_case": {"argv": slowest["argv"], "seconds": slowest["seconds"]},
        "failing_cases": failures,
    }
    print(json.dumps({k: v for k, v in summary.items() if k != "failing_cases"}, indent=2))
    for r in failures:
        print("FAIL", r["problems"], " ".join(r["argv"]), "\n   ", r["stderr_tail"].strip().splitlines()[-1:])
    if args.json is not None:
        args.json.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
