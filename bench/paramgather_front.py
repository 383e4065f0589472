"""How many candidates solve must still bound once it holds a row's best known plan, with and without
--overlap-param-gather's copies at pp > 1 (issue 15, ppgather): solver._candidates with the row's objective and no
budget, counted at or below the reference value (the plan's value from docs/benchmarks.md), and the copies among them.

    python bench/paramgather_front.py             # solve --pipelined-param-gather (the copies)
    python bench/paramgather_front.py --default   # solve's default (no copies)

Results: docs/benchmarks.md "--overlap-param-gather at pp > 1"."""
import sys, time, json
from optsearch.cli.options import problem_from_options, space_from_target
from optsearch.solver import ALL, Memo, _candidates
from optsearch.spec.budget import Budget
rows = [("llama2-70b", "mixed-pool-8k", "time", 742665.1401087089), ("llama2-70b", "mixed-pool-8k", "cost", 4603220.057611534),
        ("gpt3-175b", "mixed-pool-8k", "cost", 1795081.62), ("gpt3-13b", "mixed-pool-8k", "cost", 131216.40843067082)]
for model, cluster, obj, ref in rows:
    problem = problem_from_options(model, cluster, "analytic", None, None, None, target="megatron",
                                   param_gather_pipelined="--default" not in sys.argv)
    t = time.process_time()
    bounded, total = _candidates(Memo(problem, space_from_target("megatron", problem)), Budget(objective=obj), 0.0, ALL)
    cpu = time.process_time() - t
    below = [b for b in bounded if b.lower_bound <= ref]
    print(json.dumps(dict(row=f"{model} {cluster} {obj}", ref=ref, candidates=len(bounded), copies=sum(getattr(b.cand, "gather", False) for b in bounded),
          below_ref=len(below), copies_below_ref=sum(getattr(b.cand, "gather", False) for b in below), build_cpu_s=round(cpu, 2))), flush=True)
