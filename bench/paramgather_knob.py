"""--overlap-param-gather and --ddp-average-in-collective in the search (issue 15, paramgather): solve time and the
plans, priced as `optsearch solve --target megatron` prices them.

    python bench/paramgather_knob.py --time-limit 60 --out /tmp/after.json
    PYTHONPATH=/tmp/base python bench/paramgather_knob.py --time-limit 60 --out /tmp/before.json   # a checkout of main

One row at a time, in this process: CPU time (time.process_time) and wall clock around solve(), the status, value,
gap and the plan's degrees with its distributed-optimizer, param-gather and averaging settings. Results:
docs/benchmarks.md "--overlap-param-gather and --ddp-average-in-collective in the search"."""

from __future__ import annotations

from distopt_knob import main  # the same runner and record, on these rows

ROWS = [  # (model, cluster, objective, max_time_s): docs/benchmarks.md's rows and two one-stage rows
    ("gpt3-13b", "mixed-pool-8k", "time", None),
    ("gpt3-13b", "mixed-pool-8k", "cost", None),
    ("gpt2-medium", "aws-g4dn", "time", None),
    ("gpt2-xl", "fasop-a100-a10", "cost", 30 * 86400.0),
    ("llama2-70b", "mixed-pool-8k", "time", None),
    ("llama2-70b", "mixed-pool-8k", "cost", None),
]


if __name__ == "__main__":
    main(ROWS, __doc__)
