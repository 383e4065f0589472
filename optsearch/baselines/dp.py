"""The DP-style search of AMP (Li et al., NeurIPS 2022) and FASOP (Hwang et al., ICPP 2023), on optsearch's specs,
cost model and budgets. docs/baselines.md says what it searches, what it cannot find, and the upstream bugs it does
not copy.

For every candidate

  * node counts: FASOP's grid, every count 0..available of each node type (not all zero; FASOP's a x b grid of
    A100 and A10 nodes), or AMP's fixed cluster (every available node);
  * node order along the pipeline: the nodes laid out type by type in cluster order, then (FASOP) every cyclic
    rotation of that list, or (AMP) that fixed order alone;
  * tp (a candidate tp dividing the GPUs per node), dp, micro-batch b, and pp = GPUs / (tp x dp): the stages fill
    every chosen GPU, stage s on GPU slots [s w, (s + 1) w) of the node list, w = tp x dp;

the layers are split into stages by an exact dynamic programme that minimizes the 1F1B pipeline time
(m - 1) x max_s t_s + sum_s t_s, t_s = compute + p2p from the cost model's per-layer functions. The plan
(recomputation "none": neither tool chooses it) is priced with `costmodel.estimate`; plans that do not fit in memory
or break a budget are dropped, and the best objective is kept.

Every DP plan lies in the shared search space (candidates.py), so the exact solver is never worse. Candidates the
space cannot express are skipped: a stage whose GPUs straddle two node types, or w neither dividing nor a multiple of
the GPUs per node (a stage on part of two nodes).
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import numpy as np

from optsearch.candidates import (
    SpaceOptions, in_search_space, max_stages, micro_batch_candidates, node_uses, tp_candidates,
)
from optsearch.costmodel import (
    Estimate, distributed_optimizer_on, embedding_step_s, estimate, head_step_s, layer_step_s, num_micro_batches,
    place, stage_send_s,
)
from optsearch.errors import OptsearchError
from optsearch.plan import Plan, Recompute, Stage
from optsearch.problem import Problem
from optsearch.search import SearchResult, budget_violations, objective_value
from optsearch.spec.budget import Budget
from optsearch.units import SECONDS_PER_HOUR

Order = Literal["rotations", "fixed"]
DEFAULT_MAX_GRID_POINTS = 100_000
_INF = math.inf


def method_name(order: Order) -> str:
    return "dp" if order == "rotations" else "dp-amp"


# ---- the candidates ------------------------------------------------------------------------------------------


def grid_size(problem: Problem, order: Order) -> int:
    """How many node-count points the search visits."""
    if order == "fixed":
        return 1
    return math.prod(n.num_nodes_available + 1 for n in problem.cluster.node_types) - 1


def node_count_points(problem: Problem, order: Order) -> Iterator[dict[str, int]]:
    """FASOP: every vector of node counts (0..available per type, not all zero). AMP: the whole cluster."""
    types = problem.cluster.node_types
    if order == "fixed":
        yield {n.name: n.num_nodes_available for n in types if n.num_nodes_available > 0}
        return
    for counts in itertools.product(*(range(n.num_nodes_available + 1) for n in types)):
        if any(counts):
            yield {n.name: c for n, c in zip(types, counts) if c > 0}


def node_orders(problem: Problem, counts: dict[str, int], order: Order) -> list[tuple[str, ...]]:
    """Node type of each node along the pipeline: type by type in cluster order, then its cyclic rotations."""
    base = tuple(name for n in problem.cluster.node_types for name in [n.name] * counts.get(n.name, 0))
    if order == "fixed":
        return [base]
    return list(dict.fromkeys(base[i:] + base[:i] for i in range(len(base))))


def stage_types(problem: Problem, nodes: tuple[str, ...], w: int, pp: int) -> tuple[str, ...] | None:
    """The node type of each stage when stage s takes GPU slots [s w, (s + 1) w) of the node list; None when a
    stage straddles two node types (optsearch's stages run on one node type)."""
    slots: list[str] = []
    for name in nodes:
        slots.extend([name] * problem.node(name).gpus_per_node)
    out = []
    for s in range(pp):
        chunk = set(slots[s * w:(s + 1) * w])
        if len(chunk) != 1:
            return None
        out.append(chunk.pop())
    return tuple(out)


# ---- the partition DP ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Partition:
    layers: tuple[int, ...]
    pipeline_time_s: float


def stage_time_tables(problem: Problem, types: tuple[str, ...], tp: int, dp: int, mbs: int,
                      recompute: Recompute) -> list[np.ndarray]:
    """T[s][a, b]: seconds per micro-batch of stage s holding layers a..b-1 (compute + its p2p sends), from the
    cost model's per-layer functions; inf where stage s cannot hold that range (middle stages need >= 1 layer, the
    first starts at 0, the last ends at L)."""
    model = problem.model
    L, pp = model.num_layers, len(types)
    w = tp * dp
    dummy = Plan(tp=tp, dp=dp, micro_batch_size=mbs, stages=tuple(Stage(node_type=t, num_layers=1) for t in types))
    same = place(problem, dummy).send_same_node
    prefix: dict[str, np.ndarray] = {}
    for g in set(types):
        steps = [layer_step_s(problem, g, model.kind_of_layer(i), tp, mbs, recompute) for i in range(L)]
        prefix[g] = np.concatenate(([0.0], np.cumsum(steps)))
    a_idx, b_idx = np.meshgrid(np.arange(L + 1), np.arange(L + 1), indexing="ij")
    tables = []
    for s, g in enumerate(types):
        fixed = 0.0
        if s == 0:
            fixed += embedding_step_s(problem, g, tp, mbs)
        if s == pp - 1:
            fixed += head_step_s(problem, g, tp, mbs)
        if s + 1 < pp:
            fixed += stage_send_s(problem, g, types[s + 1], same[s], w, mbs, tp)
        if s > 0:
            fixed += stage_send_s(problem, g, types[s - 1], same[s - 1], w, mbs, tp)
        table = prefix[g][None, :] - prefix[g][:, None] + fixed
        least = 0 if s in (0, pp - 1) else 1
        invalid = b_idx - a_idx < least
        if s == 0:
            invalid |= a_idx != 0
        if s == pp - 1:
            invalid |= b_idx != L
        tables.append(np.where(invalid, _INF, table))
    return tables


def _min_sum(tables: list[np.ndarray], cap: float) -> tuple[float, list[np.ndarray]]:
    """min sum_s t_s subject to every t_s <= cap, and the argmins to trace the partition back."""
    f = np.where(tables[0][0] <= cap, tables[0][0], _INF)
    back = []
    for table in tables[1:]:
        total = f[:, None] + np.where(table <= cap, table, _INF)
        arg = np.argmin(total, axis=0)
        back.append(arg)
        f = total[arg, np.arange(total.shape[1])]
    return float(f[-1]), back


def _min_max(tables: list[np.ndarray]) -> float:
    """min over partitions of max_s t_s (the bottleneck DP)."""
    f = tables[0][0]
    for table in tables[1:]:
        f = np.min(np.maximum(f[:, None], table), axis=0)
    return float(f[-1])


def _trace(back: list[np.ndarray], L: int) -> tuple[int, ...]:
    bounds = [L]
    for arg in reversed(back):
        bounds.append(int(arg[bounds[-1]]))
    bounds.append(0)
    bounds.reverse()  # 0 = start of stage 0 (always 0), ..., L
    ends = bounds[1:]
    return tuple(ends[i] - (ends[i - 1] if i else 0) for i in range(len(ends)))


def partition_layers(tables: list[np.ndarray], m: int, give_up_above_s: float = _INF) -> Partition | None:
    """Exact: the layer counts minimizing (m - 1) x max_s t_s + sum_s t_s.

    The optimum's bottleneck is some table value B >= B_min (the least achievable max); for each B, in increasing
    order, the min-sum DP under max <= B gives a plan worth (m - 1) B + F(B) or better. F(B) >= F(inf), so the scan
    stops once (m - 1) B + F(inf) reaches the best found. None when no partition exists or when the pipeline time
    cannot go below give_up_above_s.
    """
    L = tables[0].shape[0] - 1
    if len(tables) == 1:
        t = float(tables[0][0, L])
        return Partition(layers=(L,), pipeline_time_s=m * t)
    b_min = _min_max(tables)
    if not math.isfinite(b_min):
        return None
    free_sum, free_back = _min_sum(tables, _INF)
    if (m - 1) * b_min + free_sum >= give_up_above_s:
        return None
    if m == 1:  # the pipeline time is just the sum
        return Partition(layers=_trace(free_back, L), pipeline_time_s=free_sum)
    finite = np.concatenate([t[np.isfinite(t)] for t in tables])
    values = np.unique(finite[finite >= b_min])
    best: tuple[float, list[np.ndarray]] | None = None
    for cap in values:
        cap = float(cap)
        if best is not None and (m - 1) * cap + free_sum >= best[0]:
            break
        total, back = _min_sum(tables, cap)
        if math.isfinite(total):
            # the max of this partition is <= cap; (m - 1) x cap + sum bounds its true pipeline time from above
            if best is None or (m - 1) * cap + total < best[0]:
                best = ((m - 1) * cap + total, back)
    if best is None:
        return None
    layers = _trace(best[1], L)
    return Partition(layers=layers, pipeline_time_s=best[0])


# ---- the search ----------------------------------------------------------------------------------------------


def solve_dp(
    problem: Problem,
    budget: Budget,
    *,
    order: Order = "rotations",
    options: SpaceOptions = SpaceOptions(),
    time_limit_s: float | None = None,
    max_grid_points: int = DEFAULT_MAX_GRID_POINTS,
) -> SearchResult:
    """FASOP-style (order="rotations": node-count grid, cyclic rotations) or AMP-style (order="fixed": the whole
    cluster in cluster order) DP search. Status "feasible" when a plan is found (a heuristic: not proven optimal)."""
    start = time.perf_counter()
    method = method_name(order)
    points = grid_size(problem, order)
    if points > max_grid_points:
        return SearchResult(
            method=method, status="refused", objective=budget.objective, solve_time_s=time.perf_counter() - start,
            message=f"{method}: the node-count grid has {points:,} points (more than {max_grid_points:,}); "
                    f"use dp-amp (the fixed cluster) or a solver",
        )
    recompute: Recompute = "none" if "none" in options.recompute_modes else options.recompute_modes[0]
    L = problem.model.num_layers
    best: tuple[tuple[float, int], Plan, Estimate] | None = None
    stats = {"node_count_points": 0.0, "candidates": 0.0, "partitions": 0.0, "plans_priced": 0.0}
    tables_cache: dict[tuple, list[np.ndarray]] = {}
    timed_out = False
    for counts in node_count_points(problem, order):
        if time_limit_s is not None and time.perf_counter() - start > time_limit_s:
            timed_out = True
            break
        stats["node_count_points"] += 1
        gpus = sum(problem.node(n).gpus_per_node * c for n, c in counts.items())
        if budget.max_gpus is not None and gpus > budget.max_gpus:
            continue
        usd_per_hour = sum(problem.node(n).price_usd_per_node_hour * c for n, c in counts.items())
        if budget.max_usd_per_hour is not None and usd_per_hour > budget.max_usd_per_hour:
            continue
        orders = node_orders(problem, counts, order)
        smallest_gpn = min(problem.node(n).gpus_per_node for n in counts)
        tables_cache.clear()
        for tp in tp_candidates(problem):
            if tp > smallest_gpn:
                continue
            for mbs in micro_batch_candidates(problem, options):
                per = problem.job.global_batch_size // mbs
                for dp in (d for d in range(1, per + 1) if per % d == 0 and gpus % (tp * d) == 0):
                    w = tp * dp
                    pp = gpus // w
                    if pp > max_stages(problem, options) or (pp > 2 and L < pp - 2):
                        continue
                    usable = {u.name for u in node_uses(problem, tp, dp, mbs)}
                    if not set(counts) <= usable:
                        continue
                    m = num_micro_batches(problem.job, dp, mbs)
                    seen: set[tuple[str, ...]] = set()
                    for nodes in orders:
                        types = stage_types(problem, nodes, w, pp)
                        if types is None or types in seen:
                            continue
                        seen.add(types)
                        if time_limit_s is not None and time.perf_counter() - start > time_limit_s:
                            timed_out = True
                            break
                        stats["candidates"] += 1
                        found = _evaluate(problem, budget, types, tp, dp, mbs, m, recompute, usd_per_hour, best,
                                          stats, options)
                        if found is not None:
                            best = found
                    if timed_out:
                        break
                if timed_out:
                    break
            if timed_out:
                break
        if timed_out:
            break
    return _finish(method, best, budget, start, stats, timed_out)


def _evaluate(problem, budget, types, tp, dp, mbs, m, recompute, usd_per_hour, best, stats, options):
    """Partition one candidate by the DP, price it; the new best (key, plan, estimate) or None."""
    tables = stage_time_tables(problem, types, tp, dp, mbs, recompute)
    # Skip a candidate whose pipeline alone cannot beat the incumbent (exact: iteration time >= pipeline time).
    give_up = _INF
    if best is not None:
        incumbent = best[0][0]
        per_s = problem.iterations * (usd_per_hour / SECONDS_PER_HOUR if budget.objective == "cost" else 1.0)
        give_up = incumbent / per_s * (1 + 1e-9)
    stats["partitions"] += 1
    part = partition_layers(tables, m, give_up)
    if part is None:
        return None
    plan = Plan(tp=tp, dp=dp, micro_batch_size=mbs,
                stages=tuple(Stage(node_type=t, num_layers=n, recompute=recompute) for t, n in zip(types, part.layers)),
                distributed_optimizer=distributed_optimizer_on(problem.job, dp))
    try:
        est = estimate(problem, plan)
    except OptsearchError:
        return None
    stats["plans_priced"] += 1
    if budget_violations(plan, est, budget):
        return None
    if not in_search_space(problem, plan, options):  # a node order or GPUs-per-node mix the target cannot run
        return None
    key = (objective_value(est, budget.objective), plan.num_gpus)
    if best is None or key < best[0]:
        return (key, plan, est)
    return None


def _finish(method: str, best, budget: Budget, start: float, stats: dict[str, float], timed_out: bool) -> SearchResult:
    elapsed = time.perf_counter() - start
    if best is None:
        return SearchResult(
            method=method, status="timeout" if timed_out else "infeasible", objective=budget.objective,
            solve_time_s=elapsed, stats=stats,
            message=f"{method}: stopped at the time limit with no plan" if timed_out
            else f"{method}: no DP plan fits in memory and meets the limits (not a proof that none exists)",
        )
    _, plan, est = best
    return SearchResult(
        method=method, status="feasible", objective=budget.objective, solve_time_s=elapsed, plan=plan, estimate=est,
        objective_value=objective_value(est, budget.objective), stats=stats,
        message="stopped at the time limit (best so far)" if timed_out else "",
    )
