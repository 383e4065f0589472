"""The DP-style search of AMP (Li et al., NeurIPS 2022) and FASOP (Hwang et al., ICPP 2023), on optsearch's specs,
cost model and budgets. docs/baselines.md says what it searches, what it cannot find, and the upstream bugs it does
not copy.

For every candidate

  * node counts: FASOP's grid, every count 0..available of each node type (not all zero; FASOP's a x b grid of
    A100 and A10 nodes), or AMP's fixed cluster (every available node);
  * node order along the pipeline: the nodes laid out type by type in cluster order, then (FASOP) every cyclic
    rotation of that list, or (AMP) that fixed order alone;
  * tp (a candidate tp dividing the GPUs per node), dp, micro-batch b, and pp = GPUs / w: the stages fill every
    chosen GPU, stage s on GPU slots [s w, (s + 1) w) of the node list, w = tp x dp (x cp);
  * (knobs="space", methods dp and dp-amp) the other decisions of the space the exact search covers (the target's,
    candidates.py): context-parallel size cp (w = tp x cp x dp), expert-parallel size ep, interleaving v (counts in
    multiples of v), the distributed optimizer where the search turns it on (costmodel.distributed_optimizer_on), and
    every recomputation setting of the space: each mode on every stage, block recomputation N = 1, 2, ... (v = 1,
    where the space has it, when no recomputation does not fit, up to the first N that fits: a larger N never
    shortens the pipeline), and in the per-stage space the no-recomputation split with each stage raised to the least
    mode that fits;
    (knobs="published", methods dp-published and dp-amp-published) only what the published tools search: no
    recomputation, cp = ep = v = 1 (published_lacks names what that leaves out of the target's space);

the layers are split into stages by an exact dynamic programme that minimizes the 1F1B pipeline time
(m - 1) x max_s t_s + sum_s t_s (interleaved: ((m v - 1) max_s t_s + sum_s t_s) / v), t_s = compute + sends from the
cost model's per-layer functions at the candidate's knobs. Each plan is priced with `costmodel.estimate`; plans that
do not fit in memory or break a budget are dropped, and the best objective is kept.

Every DP plan lies in the shared search space (candidates.py; checked with in_search_space), so the exact solver is
never worse. Candidates the space cannot express are skipped: a stage whose GPUs straddle two node types, or w neither
dividing nor a multiple of the GPUs per node (a stage on part of two nodes).
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
    SpaceOptions, block_recompute_enabled, context_parallel_candidates, ep_candidates, in_search_space,
    interleaving_allowed, max_stages, micro_batch_candidates, node_uses, tp_candidates,
)
from optsearch.costmodel import (
    Estimate, distributed_optimizer_on, estimate, num_micro_batches, overlap_grad_reduce_on, place, stage_send_s,
    overlap_param_gather_on, ddp_average_on,
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


Knobs = Literal["space", "published"]


def method_name(order: Order, knobs: Knobs = "space") -> str:
    base = "dp" if order == "rotations" else "dp-amp"
    return base if knobs == "space" else base + "-published"


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
                      recompute: Recompute, *, cp: int = 1, ep: int = 1, virtual_stages: int = 1,
                      recompute_num_layers: int | None = None) -> list[np.ndarray]:
    """T[s][a, b]: seconds per micro-batch of stage s holding layers a..b-1 (compute + its sends), from the cost
    model's per-layer functions at the candidate's knobs; inf where stage s cannot hold that range (middle stages need
    >= 1 layer, the first starts at 0, the last ends at L).

    Per layer of kind k on stage s: cp_layer_step_s (s / cp tokens and the exposed K/V ring) + the expert all-to-alls
    (moe_layer_alltoall_s at ep, with the stage's placement). Block recomputation N: min(N, n_k) layers of each kind at
    full, the rest at none (costmodel.block_recompute_step_s). Sends: interleaved_send_counts x stage_send_s (v per
    link, v - 1 across the wrap-around). With v > 1 the tables are indexed by chunks of v layers (T[s][a, b] holds
    layers a v .. b v - 1), so every partition they give has counts that are multiples of v."""
    from optsearch.costmodel import (
        cp_embedding_step_s, cp_head_step_s, cp_layer_step_s, interleaved_send_counts, moe_layer_alltoall_s,
    )

    model = problem.model
    L, pp, v = model.num_layers, len(types), virtual_stages
    w = tp * cp * dp
    dummy = Plan(tp=tp, dp=dp, micro_batch_size=mbs, stages=tuple(Stage(node_type=t, num_layers=1) for t in types),
                 cp=cp, ep=ep, virtual_stages=v)
    placement = place(problem, dummy)
    same = placement.send_same_node
    # layers of each kind among the first i layers
    kinds = model.kinds
    kind_index = [next(j for j, k in enumerate(kinds) if k.name == model.kind_of_layer(i).name) for i in range(L)]
    cum = np.zeros((len(kinds), L + 1))
    for i, j in enumerate(kind_index):
        cum[j, i + 1:] += 1
    a_idx, b_idx = np.meshgrid(np.arange(L + 1), np.arange(L + 1), indexing="ij")
    counts = [cum[j][None, :] - cum[j][:, None] for j in range(len(kinds))]  # n_k[a, b] (negative where b < a)

    def step(g: str, kind, mode: Recompute, spans: bool) -> float:
        return (cp_layer_step_s(problem, g, kind, tp, mbs, mode, cp)
                + moe_layer_alltoall_s(problem, g, kind, tp, ep, mbs, mode, spans))

    tables = []
    for s, g in enumerate(types):
        spans = placement.stage_spans_nodes[s]
        table = np.zeros((L + 1, L + 1))
        for j, kind in enumerate(kinds):
            n = counts[j]
            if recompute_num_layers is None:
                table = table + n * step(g, kind, recompute, spans)
            else:
                none, full = step(g, kind, "none", spans), step(g, kind, "full", spans)
                table = table + n * none + np.minimum(recompute_num_layers, n) * (full - none)
        fixed = 0.0
        if s == 0:
            fixed += cp_embedding_step_s(problem, g, tp, mbs, cp)
        if s == pp - 1:
            fixed += cp_head_step_s(problem, g, tp, mbs, cp)
        forward, backward, wrap = interleaved_send_counts(pp, s, v)
        if s + 1 < pp:
            fixed += forward * stage_send_s(problem, g, types[s + 1], same[s], w, mbs, tp, cp)
        if s > 0:
            fixed += backward * stage_send_s(problem, g, types[s - 1], same[s - 1], w, mbs, tp, cp)
        if wrap:
            other = types[-1 if s == 0 else 0]
            fixed += wrap * stage_send_s(problem, g, other, placement.ends_same_node, w, mbs, tp, cp)
        table = table + fixed
        least = 0 if s in (0, pp - 1) else v
        invalid = b_idx - a_idx < least
        if s == 0:
            invalid |= a_idx != 0
        if s == pp - 1:
            invalid |= b_idx != L
        tables.append(np.where(invalid, _INF, table)[::v, ::v])
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


def published_lacks(problem: Problem, options: SpaceOptions) -> list[str]:
    """The knobs of the space (the target's) that the published tools do not search (knobs="published" leaves
    them out): recomputation, block recomputation, cp > 1, v > 1, ep > 1 where the model and space have them."""
    out = []
    modes = [r for r in options.recompute_modes if r != "none"]
    if modes:
        out.append("recomputation " + "/".join(modes))
    if block_recompute_enabled(options):
        out.append("block recomputation")
    cps = [c for c in context_parallel_candidates(problem, options) if c > 1]
    if cps:
        out.append("cp " + "/".join(map(str, cps)))
    vs = [x for x in options.virtual_stages if x > 1]
    if vs and len(problem.model.kinds) == 1:
        out.append("v " + "/".join(map(str, vs)))
    if problem.model.is_moe:
        out.append("ep > 1")
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class _Knobs:
    tp: int
    dp: int
    mbs: int
    cp: int = 1
    ep: int = 1
    v: int = 1


def _degrees(problem: Problem, options: SpaceOptions, knobs: Knobs, gpus: int, smallest_gpn: int,
             counts: dict[str, int]) -> Iterator[tuple[_Knobs, int]]:
    """(knobs, pp) of every candidate that fills the chosen GPUs, in a fixed order."""
    L = problem.model.num_layers
    cps = context_parallel_candidates(problem, options) if knobs == "space" else [1]
    for tp in tp_candidates(problem):
        if tp > smallest_gpn:
            continue
        for mbs in micro_batch_candidates(problem, options):
            per = problem.job.global_batch_size // mbs
            for cp in cps:
                for dp in (d for d in range(1, per + 1) if per % d == 0 and gpus % (tp * cp * d) == 0):
                    pp = gpus // (tp * cp * dp)
                    if pp > max_stages(problem, options) or (pp > 2 and L < pp - 2):
                        continue
                    usable = {u.name for u in node_uses(problem, tp, dp, mbs, cp, options)}
                    if not set(counts) <= usable:
                        continue
                    eps = ep_candidates(problem, tp, dp, options) if knobs == "space" else [1]
                    vs = [x for x in options.virtual_stages if interleaving_allowed(problem, pp, dp, mbs, x)] \
                        if knobs == "space" else [1]
                    for ep, v in itertools.product(eps, vs):
                        yield _Knobs(tp=tp, dp=dp, mbs=mbs, cp=cp, ep=ep, v=v), pp


def solve_dp(
    problem: Problem,
    budget: Budget,
    *,
    order: Order = "rotations",
    options: SpaceOptions = SpaceOptions(),
    knobs: Knobs = "space",
    time_limit_s: float | None = None,
    max_grid_points: int = DEFAULT_MAX_GRID_POINTS,
) -> SearchResult:
    """FASOP-style (order="rotations": node-count grid, cyclic rotations) or AMP-style (order="fixed": the whole
    cluster in cluster order) DP search, over the space's knobs (knobs="space") or only the published tools' ones
    (knobs="published"). Status "feasible" when a plan is found (a heuristic: not proven optimal)."""
    start = time.perf_counter()
    method = method_name(order, knobs)
    points = grid_size(problem, order)
    if points > max_grid_points:
        return SearchResult(
            method=method, status="refused", objective=budget.objective, solve_time_s=time.perf_counter() - start,
            message=f"{method}: the node-count grid has {points:,} points (more than {max_grid_points:,}); "
                    f"use {method_name('fixed', knobs)} (the fixed cluster) or a solver",
        )
    best: tuple[tuple[float, int], Plan, Estimate] | None = None
    stats = {"node_count_points": 0.0, "candidates": 0.0, "partitions": 0.0, "plans_priced": 0.0}
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
        for k, pp in _degrees(problem, options, knobs, gpus, smallest_gpn, counts):
            m = num_micro_batches(problem.job, k.dp, k.mbs)
            seen: set[tuple[str, ...]] = set()
            for nodes in orders:
                types = stage_types(problem, nodes, k.tp * k.cp * k.dp, pp)
                if types is None or types in seen:
                    continue
                seen.add(types)
                if time_limit_s is not None and time.perf_counter() - start > time_limit_s:
                    timed_out = True
                    break
                stats["candidates"] += 1
                found = _evaluate(problem, budget, types, k, m, usd_per_hour, best, stats, options, knobs)
                if found is not None:
                    best = found
            if timed_out:
                break
        if timed_out:
            break
    return _finish(method, best, budget, start, stats, timed_out,
                   published_lacks(problem, options) if knobs == "published" else [])


def _settings(options: SpaceOptions, knobs: Knobs) -> list[Recompute]:
    """The one-mode recomputation settings tried: the space's modes in order (published: none only)."""
    modes = options.recompute_modes
    if knobs == "published":
        return ["none" if "none" in modes else modes[0]]
    return list(modes)


def _evaluate(problem, budget, types, k: _Knobs, m, usd_per_hour, best, stats, options, knobs):
    """Partition one candidate by the DP for each recomputation setting, price each; the new best (key, plan,
    estimate) or None."""
    # Skip a split whose pipeline alone cannot beat the incumbent (exact: iteration time >= pipeline time).
    give_up = _INF
    if best is not None:
        incumbent = best[0][0]
        per_s = problem.iterations * (usd_per_hour / SECONDS_PER_HOUR if budget.objective == "cost" else 1.0)
        give_up = incumbent / per_s * (1 + 1e-9)
    dist = distributed_optimizer_on(problem.job, k.dp, k.cp)
    modes = options.recompute_modes
    found = None
    fits_without = False

    def price(plan: Plan):
        nonlocal found
        try:
            est = estimate(problem, plan)
        except OptsearchError:
            return None
        stats["plans_priced"] += 1
        if not est.fits or budget_violations(plan, est, budget) or not in_search_space(problem, plan, options):
            return est  # also: a node order or GPUs-per-node mix the target cannot run
        key = (objective_value(est, budget.objective), plan.num_gpus)
        incumbent = found if found is not None else best
        if incumbent is None or key < incumbent[0]:
            found = (key, plan, est)
        return est

    def split(recompute: Recompute, block: int | None = None) -> Partition | None:
        tables = stage_time_tables(problem, types, k.tp, k.dp, k.mbs, recompute, cp=k.cp, ep=k.ep,
                                   virtual_stages=k.v, recompute_num_layers=block)
        stats["partitions"] += 1
        part = partition_layers(tables, m * k.v, give_up * k.v)
        if part is None:
            return None
        return Partition(layers=tuple(k.v * n for n in part.layers), pipeline_time_s=part.pipeline_time_s / k.v)

    def plan_of(layers, modes_by_stage, block=None) -> Plan:
        return Plan(tp=k.tp, dp=k.dp, micro_batch_size=k.mbs, cp=k.cp, ep=k.ep, virtual_stages=k.v,
                    distributed_optimizer=dist, recompute_num_layers=block,
                    overlap_grad_reduce=overlap_grad_reduce_on(problem, k.dp, k.cp, k.v),
                    overlap_param_gather=overlap_param_gather_on(problem, k.dp, k.cp, k.v, len(types), dist),
                    ddp_average_in_collective=ddp_average_on(problem, k.dp, k.cp),
                    stages=tuple(Stage(node_type=t, num_layers=n, recompute=r)
                                 for t, n, r in zip(types, layers, modes_by_stage)))

    for mode in _settings(options, knobs):
        part = split(mode)
        if part is None:
            continue
        stage_modes = [mode if n > 0 or not options.uniform_recompute else modes[0] for n in part.layers]
        est = price(plan_of(part.layers, stage_modes))
        if mode == modes[0] and est is not None and est.fits:
            fits_without = True
        if knobs == "space" and not options.uniform_recompute and mode == modes[0] and est is not None \
                and not est.fits:
            # per-stage space: the same split, each stage raised to the least mode that fits
            raised = list(stage_modes)
            while est is not None and not est.fits:
                over = [i for i, st in enumerate(est.stages) if not st.fits]
                if any(modes.index(raised[i]) + 1 >= len(modes) for i in over):
                    break
                for i in over:
                    raised[i] = modes[modes.index(raised[i]) + 1]
                est = price(plan_of(part.layers, raised))
    if knobs == "space" and block_recompute_enabled(options) and k.v == 1 and not fits_without:
        # block recomputation N = 1, 2, ...: a larger N never shortens the pipeline (every stage time grows with N),
        # so the scan stops at the first N whose plan fits, or once the pipeline cannot beat the incumbent
        for n in range(1, problem.model.num_layers):
            part = split("full", n)
            if part is None:
                break
            stage_modes = ["full" if c > 0 else "none" for c in part.layers]
            if n >= max(part.layers):  # N at or above every stage's count: plain full recomputation, priced above
                break
            est = price(plan_of(part.layers, stage_modes, n))
            if est is not None and est.fits:
                break
    return found


def _finish(method: str, best, budget: Budget, start: float, stats: dict[str, float], timed_out: bool,
            lacks: list[str]) -> SearchResult:
    elapsed = time.perf_counter() - start
    note = (f"{method} searches only what the published tool does (no recomputation, cp = ep = v = 1); "
            f"not searched here: {', '.join(lacks)} (the same-space variant: {method.removesuffix('-published')})"
            if lacks else "")
    if best is None:
        return SearchResult(
            method=method, status="timeout" if timed_out else "infeasible", objective=budget.objective,
            solve_time_s=elapsed, stats=stats,
            message="; ".join(filter(None, [
                f"{method}: stopped at the time limit with no plan" if timed_out
                else f"{method}: no DP plan fits in memory and meets the limits (not a proof that none exists)",
                note])),
        )
    _, plan, est = best
    return SearchResult(
        method=method, status="feasible", objective=budget.objective, solve_time_s=elapsed, plan=plan, estimate=est,
        objective_value=objective_value(est, budget.objective), stats=stats,
        message="; ".join(filter(None, ["stopped at the time limit (best so far)" if timed_out else "", note])),
    )
