"""A quick plan for one candidate's model, found without a solver: a first incumbent for the exact search, and a
hint for the solver.

It is never reported as optimal on its own. The solver uses it in two ways, both exact: as an incumbent (any plan
that meets the budgets is a valid upper bound, so the incumbent cut stays sound), and as a solution hint (a hint only
steers the search). Why it pays: CP-SAT needs about a second to find a first plan for a 16-stage model of FASOP's
cluster (the layer cover is an equality over many binaries), but proves a model with a good cut infeasible in a
tenth of that (docs/solver.md).

How: fill the pipeline with whole-node blocks, one node type after another in a few orders (fastest first, cheapest
first, cheapest per unit of work first, and each reversed); for each type sequence, split the layers by a dynamic
programme that minimizes the slowest stage, using the model's own patterns (a pattern exists only where the stage
fits in memory) and sends. Only for one-kind models (pattern mode).
"""

from __future__ import annotations

import math

import numpy as np

from optsearch.formulation.model import Formulation, Skeleton, b_, candidate_plan, pattern_compute_s, x_, z_
from optsearch.plan import Plan, Stage


def _type_sequences(f: Formulation | Skeleton) -> list[tuple[int, ...]]:
    """Node type index of every stage: whole-node blocks of one type after another, in a few orders."""
    c, uses, pp = f.c, f.cand.uses, f.cand.pp
    speed = [min(c.step_s[g][0]) for g in range(len(uses))]
    price = [u.node.price_usd_per_node_hour / u.node.gpus_per_node for u in uses]
    orders = [sorted(range(len(uses)), key=key) for key in (
        lambda g: (speed[g], g), lambda g: (price[g], g), lambda g: (price[g] * speed[g], g))]
    out: list[tuple[int, ...]] = []
    for order in orders:
        seq: list[int] = []
        for g in order:
            u = uses[g]
            blocks = min(u.node.num_nodes_available // u.nodes_per_block, (pp - len(seq)) // u.stages_per_block)
            seq += [g] * (blocks * u.stages_per_block)
        if len(seq) == pp:
            for cand in (tuple(seq), tuple(reversed(seq))):
                if cand not in out and _blocks_fit(f, cand):
                    out.append(cand)
    if END_MATCHED:
        out += [m for seq in list(out) if (m := end_matched(f, seq)) is not None and m not in out]
    return out


# Round 17 (timerows): a fill puts one type at the start and another at the end, and the tied embedding's all-reduce
# between the two ends runs at the slower NIC of the pair (costmodel.embedding_allreduce_s). Megatron 76B on
# mixed-pool-8k, time, tp 2, dp 16, cp 4, pp 30: the fastest-first fill (15 H100 then 15 A100 stages, the last an
# A100 with the head only) prices at 138,850 s with E = 0.168 s; one H100 stage moved to the end, 127,230 s (E =
# 0.021 s), the plan the loop found only from that candidate's model at 14 s of CPU.
END_MATCHED = True


def end_matched(f: Formulation | Skeleton, seq: tuple[int, ...]) -> tuple[int, ...] | None:
    """Where the two ends of seq run on types whose tied-embedding all-reduce is slower than both ends on one of the
    two types: the sequence with one block of that type (the one with the faster E) moved to the other end, the rest
    in order; None where there is none (no E, the same type at both ends, no block to move, or it does not fit)."""
    c, uses, pp = f.c, f.cand.uses, len(seq)
    first, last = seq[0], seq[-1]
    if pp < 2 or first == last or not c.emb_inter_s:
        return None
    pair = c.emb_inter_s[first][last]
    g = min((first, last), key=lambda h: (c.emb_inter_s[h][h], h))
    if c.emb_inter_s[g][g] >= pair:
        return None
    q = uses[g].stages_per_block
    starts = sorted(_block_starts(f, seq))
    runs = [s for s in starts if seq[s] == g and 0 < s and s + q < pp] if g == first else \
        [s for s in starts if seq[s] == g and 0 < s < pp - q]
    if not runs:
        return None
    s = runs[-1] if g == first else runs[0]  # the block nearest the end it moves to
    rest = seq[:s] + seq[s + q:]
    moved = rest + seq[s:s + q] if g == first else seq[s:s + q] + rest
    return moved if _blocks_fit(f, moved) else None


def _blocks_fit(f: Formulation | Skeleton, seq: tuple[int, ...]) -> bool:
    """Each block (q_g stages of one type g from a block start) holds one type and may start where it starts."""
    return all((s, seq[s]) in f.block_starts and len(set(seq[s:s + f.cand.uses[seq[s]].stages_per_block])) == 1
               for s in _block_starts(f, seq))


def _block_starts(f: Formulation | Skeleton, seq: tuple[int, ...]) -> set[int]:
    starts, s = set(), 0
    while s < len(seq):
        starts.add(s)
        s += f.cand.uses[seq[s]].stages_per_block
    return starts


def _sends(f: Formulation | Skeleton, seq: tuple[int, ...]) -> list[float]:
    """e[j] for every boundary: inter-node where stage j+1 starts a block, intra-node otherwise."""
    starts = _block_starts(f, seq)
    return [f.c.send_inter_s[seq[j]][seq[j + 1]] if j + 1 in starts else f.c.send_intra_s[seq[j]]
            for j in range(len(seq) - 1)]


# quick_plans of an interleaved candidate (v > 1; solver.INTERLEAVED_QUICK) also give, per type sequence, the split
# that has the least largest stage all-reduce plus optimizer step among those with the least slowest stage
# (split_layers(..., by_params=True)). The slowest-stage split breaks its ties by the least count on the last stages,
# which loads layers onto the first stage beside the embedding: GPT-2 large, mixed-pool-8k, time, tp 1, dp 32, cp 8,
# 8 p5 stages at v = 3: 6-6-6-6-6-3-3-0 prices at 5,767 s, 0-6-6-6-6-6-6-0 (the optimum) at 5,425 s, the same pipeline
# time and a third less all-reduce (round 16, smalltime). Not at v = 1: there it doubled the quick plans' CPU (300
# candidates of that row: 3.6 -> 7.6 s, the same best plan), where v > 1 candidates' quick plans are priced only at
# the in-flight step of one that may still beat the incumbent.
PARAM_SPLIT = True


def split_layers(f: Formulation | Skeleton, seq: tuple[int, ...], by_params: bool = False) -> tuple[int, ...] | None:
    """Layer counts that minimize the slowest stage for this type sequence (None if no split fits in memory).
    by_params: among the splits with that least slowest stage, one with the least largest stage all-reduce plus
    optimizer step (alpha[g] + beta[g] per parameter, times the stage's parameters): a second programme over the
    counts whose stage time is within the first one's value."""
    pp, L, c = f.cand.pp, f.c.kind_layers[0], f.c
    e = _sends(f, seq)
    stages = []  # per stage: its counts and their times
    for s in range(pp):
        g = seq[s]
        sends = (e[s - 1] if s > 0 else 0.0) + (e[s] if s < pp - 1 else 0.0)
        counts = np.array([n for n in range(L + 1) if (s, g, n) in f.patterns], dtype=np.int64)
        if len(counts) == 0:
            return None
        stages.append((counts, np.array([pattern_compute_s(f, s, g, int(n)) + sends for n in counts])))
    parts = _least_max_split(stages, L)
    if parts is None or not by_params:
        return parts
    slowest = max(float(times[list(counts).index(n)]) for (counts, times), n in zip(stages, parts))
    weighted = []
    for s, (counts, times) in enumerate(stages):
        g, keep = seq[s], times <= slowest
        rate = c.allreduce_s_per_param[g] + c.optimizer_s_per_param[g]
        weighted.append((counts[keep], rate * (counts[keep] * c.layer_params[0] + c.fixed_params[s])))
    return _least_max_split(weighted, L)


def _least_max_split(stages: list[tuple[np.ndarray, np.ndarray]], L: int) -> tuple[int, ...] | None:
    """The counts (one per stage, from its own) that sum to L with the least largest value (per stage, one value per
    count), by a dynamic programme over the layers placed so far; None where no choice sums to L."""
    # best[l]: least max value of stages 0..s holding l layers in all; choice[s][l]: stage s's count (the least
    # count on ties)
    best = np.full(L + 1, np.inf)
    best[0] = 0.0
    totals = np.arange(L + 1)
    choice: list[list[int]] = []
    for counts, time in stages:
        if len(counts) == 0:
            return None
        before = totals[:, None] - counts[None, :]  # [total, count]: layers on the stages before s
        value = np.maximum(np.where(before >= 0, best[np.maximum(before, 0)], np.inf), time[None, :])
        k = value.argmin(axis=1)
        best = value[totals, k]
        choice.append(np.where(np.isfinite(best), counts[k], -1).tolist())
    if best[L] == math.inf:
        return None
    parts, left = [], L
    for s in reversed(range(len(stages))):
        parts.append(choice[s][left])
        left -= choice[s][left]
    return tuple(reversed(parts))


def plan_of(f: Formulation | Skeleton, seq: tuple[int, ...], by_params: bool = False) -> Plan | None:
    """The plan with these node types per stage and the layer split of `split_layers` (None if none fits)."""
    parts = split_layers(f, seq, by_params)
    if parts is None:
        return None
    stages = tuple(Stage(node_type=f.cand.uses[g].name, num_layers=n, recompute=f.c.modes[f.patterns[(s, g, n)]])
                   for s, (g, n) in enumerate(zip(seq, parts)))
    return candidate_plan(f.problem, f.cand, stages)


def quick_plans(f: Formulation | Skeleton) -> list[Plan]:
    """Plans of this candidate found by the fill-and-split heuristic (possibly none); the caller prices them."""
    if f.patterns is None:
        return []
    out = []
    for seq in _type_sequences(f):
        plan = plan_of(f, seq)
        if plan is None:
            continue
        out.append(plan)
        if PARAM_SPLIT and f.cand.v > 1 and (other := plan_of(f, seq, by_params=True)) is not None and other != plan:
            out.append(other)
    return out


def hint(f: Formulation | Skeleton, plan: Plan) -> dict[str, float]:
    """The model's binaries (b, z, x) for a plan of this candidate: a partial solution hint."""
    names = [u.name for u in f.cand.uses]
    seq = tuple(names.index(s.node_type) for s in plan.stages)
    starts = _block_starts(f, seq)
    values: dict[str, float] = {}
    for (s, g) in f.block_starts:
        values[b_(s, g)] = float(s in starts and seq[s] == g)
    for s, stage in enumerate(plan.stages):
        for g in range(len(names)):
            values[z_(s, g)] = float(seq[s] == g)
    for (s, g, n) in f.patterns:
        values[x_(s, g, n)] = float(seq[s] == g and plan.stages[s].num_layers == n)
    return values
