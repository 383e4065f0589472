"""Turn AMP's published real-trial logs into optsearch validation CSVs (bench/validation/README.md).

AMP (Li et al., NeurIPS 2022) ran every strategy its search enumerated for GPT-2 medium (24 layers, hidden 1024,
seq 1024, global batch 32) on real AWS clusters with its DeepSpeed 3D-parallel fork, and committed the logs:
DachengLi1/AMP, src/results/homogeneous_results.txt (4 x g4dn.12xlarge) and src/results/het_cluster_results.txt
(3 x p3.8xlarge + 1 x g4dn.12xlarge). Each "Simulating result" line holds one run: DeepSpeed's layer partition,
the micro-batch size, mp/dp/pp degrees, AMP's own prediction (p_cost) and the measured time (r_cost: mean seconds
per iteration over iterations 20-39, rounded to 0.01 s, by Megatron-LM-v1.1.5-3D_parallelism/megatron/training.py;
"inf" when the run wrote no time, amp_utils.simulate: "cannot run").

    python bench/validation/amp_to_csv.py HOMOGENEOUS_RESULTS.txt HET_CLUSTER_RESULTS.txt OUT_DIR

The logs themselves are not copied here; this script re-derives the committed CSVs from them (get them with
`git show HEAD:src/results/...` in a clone of DachengLi1/AMP, commit 72eeea4).
"""

from __future__ import annotations

import csv
import re
import sys
from pathlib import Path

AMP_COMMIT = "72eeea45518d88997dd33c0db4a885a7eeec1d15"
LINE = re.compile(
    r"Simulating result: None, \[(?P<parts>[0-9, ]+)\], (?P<mbs>\d+), "
    r"\{'mp_deg': tensor\(\[(?P<mp>\d+)\.\]\), 'dp_deg': tensor\(\[(?P<dp>\d+)\.\]\), "
    r"'pp_deg': tensor\(\[(?P<pp>\d+)\.\]\)\}, with p_cost: tensor\(\[(?P<p>[0-9.]+)\]\), r_cost: (?P<r>[0-9.]+|inf)")
# GPT2ModelPipe's layer specs (megatron/model/gpt2_model.py of the fork): 0 embedding, 1 transpose,
# 2..25 the 24 transformer layers, 26 transpose, 27 final layernorm, 28 tied embedding (logits), 29 fp16->fp32.
FIRST_LAYER, NUM_LAYERS, NUM_SPECS = 2, 24, 30
GPUS_PER_NODE, NODES = 4, 4


def layers_per_stage(parts: list[int]) -> list[int]:
    """DeepSpeed's `parts` boundaries over the layer specs -> transformer layers on each stage."""
    if parts[0] != 0 or parts[-1] != NUM_SPECS or parts != sorted(parts):
        raise ValueError(f"unexpected partition {parts}")
    layers = range(FIRST_LAYER, FIRST_LAYER + NUM_LAYERS)
    return [sum(1 for i in layers if lo <= i < hi) for lo, hi in zip(parts, parts[1:])]


def stage_nodes(pp: int, node_of_rank: list[str]) -> list[str] | None:
    """Node type of each stage; DeepSpeed ranks are pipeline-major (rank = mp + mp*dp_index + mp*dp*stage), ranks
    fill the hostfile's nodes in order. None when a stage spans two node types (not a plan optsearch can price)."""
    per_stage = len(node_of_rank) // pp
    out = []
    for s in range(pp):
        kinds = set(node_of_rank[s * per_stage:(s + 1) * per_stage])
        if len(kinds) != 1:
            return None
        out.append(kinds.pop())
    return out


def ran_larger(matches: list, m) -> bool:
    """Whether the same plan (degrees and DeepSpeed partition) ran with a larger micro-batch. Activation memory grows
    with the micro-batch (every in-flight micro-batch holds b x s x h activations), so a failed run whose larger
    micro-batch ran did not fail for memory."""
    return any(o["parts"] == m["parts"] and (o["mp"], o["dp"], o["pp"]) == (m["mp"], m["dp"], m["pp"])
               and int(o["mbs"]) > int(m["mbs"]) and o["r"] != "inf" for o in matches)


def convert(text: str, name: str, source_path: str, cluster: str, node_of_rank: list[str]) -> tuple[list[dict], list[str]]:
    rows, skipped = [], []
    matches = list(LINE.finditer(text))
    for n, m in enumerate(matches):
        parts = [int(x) for x in m["parts"].split(",")]
        mbs, tp, dp, pp = int(m["mbs"]), int(m["mp"]), int(m["dp"]), int(m["pp"])
        assert tp * dp * pp == GPUS_PER_NODE * NODES and len(parts) == pp + 1
        layers = layers_per_stage(parts)
        nodes = stage_nodes(pp, node_of_rank)
        run_id = f"{name}-{n:02d}-tp{tp}-dp{dp}-pp{pp}-mbs{mbs}"
        oom = m["r"] == "inf"
        if nodes is None or 0 in layers[1:-1] or (oom and ran_larger(matches, m)):
            skipped.append(run_id)
            continue
        rows.append({
            "run_id": run_id,
            "group": name,
            "source": f"DachengLi1/AMP@{AMP_COMMIT[:7]} {source_path} real trial {n}",
            "model": "gpt2-medium",
            "cluster": cluster,
            "global_batch_size": 32,
            "tp": tp, "dp": dp, "micro_batch_size": mbs,
            "stages": ",".join(f"{node}:{k}" for node, k in zip(nodes, layers)),
            "measured_iteration_s": "" if oom else m["r"],
            "oom": int(oom),
            "precision": "fp16",
            "grad_reduce_in_fp32": 1,
            # the fork's Megatron-LM v1.1.5 launched without --scaled-*-masked-softmax-fusion: unfused softmax
            "unfused_kernels": 1,
            # the fork's host time per layer and its pipeline wrapper's repeated forward (docs/cost-model.md
            # section 14, "Host time of eager engines")
            "eager_engine": "amp-megatron-v1.1.5",
            "amp_predicted_s": m["p"],
            "deepspeed_parts": "-".join(map(str, parts)),
            "notes": ("no time recorded (AMP's log: r_cost inf, 'cannot run'); taken as out of memory" if oom
                      else "mean s/iteration over iterations 20-39"),
        })
    return rows, skipped


def main(argv: list[str]) -> int:
    homo, het, out = Path(argv[0]), Path(argv[1]), Path(argv[2])
    g4, p3 = "g4dn.12xlarge", "p3.8xlarge"
    sets = [
        ("amp-g4dn", homo, "src/results/homogeneous_results.txt", "amp-g4dn", [g4] * 16),
        # het_cluster.py: nodes 0-2 are the p3.8xlarge (10 Gbit/s), node 3 (the last in the hostfile) the g4dn.
        ("amp-p3-g4dn", het, "src/results/het_cluster_results.txt", "amp-p3-g4dn", [p3] * 12 + [g4] * 4),
    ]
    fields = ["run_id", "group", "source", "model", "cluster", "global_batch_size", "tp", "dp", "micro_batch_size",
              "stages", "measured_iteration_s", "oom", "precision", "grad_reduce_in_fp32", "unfused_kernels",
              "eager_engine", "amp_predicted_s",
              "deepspeed_parts", "notes"]
    for name, path, source_path, cluster, node_of_rank in sets:
        rows, skipped = convert(path.read_text(), name, source_path, cluster, node_of_rank)
        with open(out / f"{name}.csv", "w", newline="") as f:
            f.write(f"# AMP (Li et al., NeurIPS 2022) real trials, GPT-2 medium, global batch 32: DachengLi1/AMP commit "
                    f"{AMP_COMMIT}, {source_path}; made by bench/validation/amp_to_csv.py\n")
            if skipped:
                f.write(f"# left out (a pipeline stage spans a p3 and a g4dn node, an inner stage holds no transformer "
                        f"layer, or a failed run whose larger micro-batch ran): {' '.join(skipped)}\n")
            w = csv.DictWriter(f, fieldnames=fields, lineterminator="\n")
            w.writeheader()
            w.writerows(rows)
        print(f"{name}: {len(rows)} rows ({sum(r['oom'] for r in rows)} without a time), {len(skipped)} skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
