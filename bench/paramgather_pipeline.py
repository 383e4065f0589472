"""--overlap-param-gather searched at pp > 1 (issue 15, ppgather): how many candidate copies with the flag on the
search builds, how often the optimum takes the flag at pp > 1 and what it saves, priced as `optsearch solve
--target megatron` prices them.

    python bench/paramgather_pipeline.py --time-limit 30 --out /tmp/after.json
    PYTHONPATH=/tmp/base python bench/paramgather_pipeline.py --time-limit 30 --out /tmp/before.json   # main

One row at a time, in this process: distopt_knob.run's record (CPU time and wall clock around solve(), status,
value, gap, the plan's degrees and flags), and, where this checkout has them, the candidates solve builds with no
budget (solver._candidates, ALL) and how many of them are --overlap-param-gather copies (Candidate.gather).
Results: docs/benchmarks.md "--overlap-param-gather at pp > 1"."""

from __future__ import annotations

import argparse
import json

from distopt_knob import run

ROWS = [  # (model, cluster, objective, max_time_s): rows whose optima are pipelined, and two small heterogeneous ones
    ("gpt2-xl", "fasop-a100-a10", "time", None),
    ("gpt3-13b", "fasop-a100-a10", "time", None),
    ("gpt3-13b", "mixed-pool-8k", "cost", None),
    ("llama2-70b", "mixed-pool-8k", "cost", None),
    ("llama2-70b", "mixed-pool-8k", "time", None),
    ("gpt3-175b", "mixed-pool-8k", "cost", None),
]


def copies(model: str, cluster: str) -> dict | None:
    """(candidates, gather copies) of the row's space with no budget, or None on a checkout without copies."""
    from optsearch.cli.options import problem_from_options, space_from_target
    from optsearch.formulation.model import Candidate
    from optsearch.solver import ALL, Memo, _candidates
    from optsearch.spec.budget import Budget

    if "gather" not in Candidate.__slots__:
        return None
    problem = problem_from_options(model, cluster, "analytic", None, None, None, target="megatron")
    bounded, total = _candidates(Memo(problem, space_from_target("megatron", problem)), Budget(), 0.0, ALL)
    return dict(candidates=len(bounded), total=total, gather_copies=sum(b.cand.gather for b in bounded))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-limit", type=float, default=30.0)
    parser.add_argument("--rows", default=None, help="comma-separated row indexes (default: all)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    picked = ROWS if args.rows is None else [ROWS[int(i)] for i in args.rows.split(",")]
    out = []
    for row in picked:
        rec = run(*row, args.time_limit)
        rec["copies"] = copies(row[0], row[1])
        print(json.dumps(rec), flush=True)
        out.append(rec)
    with open(args.out, "w") as fh:
        json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
