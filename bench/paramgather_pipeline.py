"""--overlap-param-gather searched at pp > 1 (issue 15, ppgather): how many candidate copies with the flag on the
search builds, how often the optimum takes the flag at pp > 1 and what it saves, priced as `optsearch solve
--target megatron` prices them.

    python bench/paramgather_pipeline.py --time-limit 30 --out /tmp/after.json   # solve --pipelined-param-gather
    python bench/paramgather_pipeline.py --default --time-limit 30 --out /tmp/before.json   # solve's default

One row at a time, in this process: distopt_knob.run's record (CPU time and wall clock around solve(), status,
value, gap, the plan's degrees and flags), and, where this checkout has them, the candidates solve builds with no
budget (solver._candidates, ALL) and how many of them are --overlap-param-gather copies (Candidate.gather).
With --synthetic instead: a grid of 64 small two-type instances (8 layers of hidden 2048, one 8-GPU PCIe node of
each type, the faster type first), time and cost, each optimum by brute force (baselines.exhaustive) with the flag in
the space and without it: how often the optimum is pipelined, how often it takes the flag, and what it saves.
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


def copies(model: str, cluster: str, pipelined: bool = True) -> dict | None:
    """(candidates, gather copies) of the row's space with no budget, or None on a checkout without copies."""
    from optsearch.cli.options import problem_from_options, space_from_target
    from optsearch.formulation.model import Candidate
    from optsearch.solver import ALL, Memo, _candidates
    from optsearch.spec.budget import Budget

    if "gather" not in Candidate.__slots__:
        return None
    problem = problem_from_options(model, cluster, "analytic", None, None, None, target="megatron",
                                   param_gather_pipelined=pipelined)
    bounded, total = _candidates(Memo(problem, space_from_target("megatron", problem)), Budget(), 0.0, ALL)
    return dict(candidates=len(bounded), total=total, gather_copies=sum(b.cand.gather for b in bounded))


def synthetic() -> list[dict]:
    """The --synthetic grid (see the module's docstring), one record per instance and objective."""
    import itertools
    from dataclasses import replace

    from optsearch.baselines.exhaustive import solve_exhaustive
    from optsearch.candidates import SpaceOptions
    from optsearch.problem import Problem
    from optsearch.profile.analytic import AnalyticProfile
    from optsearch.spec import ClusterSpec, GpuSpec, ModelSpec, NodeTypeSpec
    from optsearch.spec.budget import Budget
    from optsearch.spec.job import JobSpec

    from optsearch.baselines import exhaustive

    settings = exhaustive.overlap_param_gather_settings

    def one_stage_only(problem, dp, cp, v, pp, dist):  # the flag at pp = 1 only (main before ppgather)
        return settings(problem, dp, cp, v, pp, dist)[:1]

    out = []
    options = SpaceOptions(micro_batch_sizes=(1, 2, 4), recompute_modes=("none",), max_stages=2,
                           node_type_order=("t0", "t1"))
    for m1, (peak0, peak1), gbs, bw in itertools.product(
            (8.0, 80.0), ((65.0, 15.0), (65.0, 30.0), (125.0, 15.0), (125.0, 30.0), (125.0, 65.0), (312.0, 15.0),
                          (312.0, 30.0), (312.0, 65.0)), (64, 256), (16.0, 64.0)):
        model = ModelSpec(name="tiny", num_layers=8, hidden_size=2048, num_attention_heads=16, ffn_hidden_size=8192,
                          seq_length=2048, vocab_size=8000,
                          default_job=JobSpec(global_batch_size=gbs, train_iterations=1000))
        gpus = [GpuSpec(name="G0", memory_gib=80.0, peak_fp16_tflop_per_s=peak0, hbm_gbyte_per_s=900.0),
                GpuSpec(name="G1", memory_gib=m1, peak_fp16_tflop_per_s=peak1, hbm_gbyte_per_s=900.0)]
        types = [NodeTypeSpec(name=f"t{i}", gpu=f"G{i}", gpus_per_node=8, num_nodes_available=1,
                              price_usd_per_node_hour=price, intra_node_link="pcie", intra_node_gbyte_per_s=bw,
                              inter_node_gbit_per_s=100.0) for i, price in ((0, 3.0), (1, 1.0))]
        by_name = {g.name: g for g in gpus}
        problem = Problem(model=model, cluster=ClusterSpec(name="synthetic", node_types=types, gpus=gpus),
                          job=model.default_job.model_copy(update={"distributed_optimizer": None}), gpus=by_name,
                          profile=AnalyticProfile(model=model, gpus=by_name), overlap_grad_reduce=True,
                          overlap_param_gather=True, ddp_average_in_collective=True, param_gather_pipelined=True)
        for objective in ("time", "cost"):
            budget = Budget(objective=objective)
            got = solve_exhaustive(problem, budget, options=options)
            without = solve_exhaustive(replace(problem, overlap_param_gather=False), budget, options=options)
            exhaustive.overlap_param_gather_settings = one_stage_only  # brute force as before ppgather
            try:
                before = solve_exhaustive(problem, budget, options=options)
            finally:
                exhaustive.overlap_param_gather_settings = settings
            plan = got.plan
            out.append(dict(m1=m1, peak0=peak0, peak1=peak1, gbs=gbs, bw=bw, objective=objective,
                            value=got.objective_value, pp1_only=before.objective_value, without=without.objective_value,
                            pp=plan.pp, gather=plan.overlap_param_gather, balance=plan.balance, dp=plan.dp))
            print(json.dumps(out[-1]), flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-limit", type=float, default=30.0)
    parser.add_argument("--rows", default=None, help="comma-separated row indexes (default: all)")
    parser.add_argument("--synthetic", action="store_true", help="the synthetic grid instead of the rows")
    parser.add_argument("--default", action="store_true",
                        help="solve's default space (the flag at pp = 1 only) instead of --pipelined-param-gather's")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    if args.synthetic:
        with open(args.out, "w") as fh:
            json.dump(synthetic(), fh, indent=1)
        return
    picked = ROWS if args.rows is None else [ROWS[int(i)] for i in args.rows.split(",")]
    out = []
    for row in picked:
        rec = run(*row, args.time_limit, param_gather_pipelined=not args.default)
        rec["copies"] = copies(row[0], row[1], not args.default)
        print(json.dumps(rec), flush=True)
        out.append(rec)
    with open(args.out, "w") as fh:
        json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
