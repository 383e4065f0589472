"""Brute force: price every plan of the search space with the cost model and keep the best.

Every (tp, dp, micro-batch, pp), every sequence of node types along the pipeline that fills whole nodes within
availability, and every partition of the layers into contiguous stages is priced with `costmodel.estimate`.
Recomputation is not enumerated blindly: for fixed other choices, stage i's memory depends only on its own mode and
less recomputation is never slower, so the least mode that fits each stage dominates every other choice (exact, not a
heuristic). Where the target runs one mode on every stage (SpaceOptions.uniform_recompute), the modes are tried in
order, the same on every stage with layers, and the first that fits every stage is kept: a later mode recomputes more,
so it is never faster on any stage, nor cheaper on the same GPUs (exact again, with no assumption on memory). Node-type
sequences the target cannot run (order, GPUs per node) are skipped. Where the target also runs block recomputation
(SpaceOptions.block_recompute) and no recomputation at all does not fit, every N from 1 to the most layers on a stage
minus 1 is priced beside the first fitting mode and the fastest that fits is kept (no recomputation, when it fits, is
never slower than any N; not with v > 1, where Megatron applies N per model chunk). With interleaving (SpaceOptions.virtual_stages),
every allowed v is tried where candidates.interleaving_allowed, with every partition whose counts are multiples of v
(v x a partition of L / v). Instances whose plan count exceeds `max_plans` are
refused, saying how many plans there are.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from dataclasses import replace

from optsearch.candidates import (
    NodeUse, SpaceOptions, block_recompute_enabled, context_parallel_candidates, dp_candidates, ep_candidates,
    interleaving_allowed, kinds_split_allowed, max_stages, micro_batch_candidates, node_uses, tp_candidates,
    type_sequence_allowed,
)
from optsearch.costmodel import (
    Estimate, ddp_average_on, distributed_optimizer_choices, estimate, overlap_grad_reduce_on, overlap_param_gather_on,
    overlap_param_gather_settings,
)
from optsearch.errors import OptsearchError
from optsearch.plan import Plan, Stage
from optsearch.problem import Problem
from optsearch.search import SearchResult, budget_violations, objective_value
from optsearch.spec.budget import Budget

DEFAULT_MAX_PLANS = 200_000


class TooManyPlans(OptsearchError):
    exit_code = 2


def type_sequences(uses: list[NodeUse], pp: int, max_gpus: int | None, w: int,
                   allowed=None) -> Iterator[tuple[str, ...]]:
    """Node type of every stage, as a sequence of whole-node blocks within node availability (and, when given,
    accepted by allowed(types): the target's rules)."""
    if max_gpus is not None and pp * w > max_gpus:
        return
    if allowed is not None:
        yield from (t for t in type_sequences(uses, pp, max_gpus, w) if allowed(t))
        return
    left = {u.name: u.node.num_nodes_available for u in uses}

    def extend(prefix: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
        if len(prefix) == pp:
            yield prefix
            return
        for u in uses:
            if len(prefix) + u.stages_per_block <= pp and left[u.name] >= u.nodes_per_block:
                left[u.name] -= u.nodes_per_block
                yield from extend(prefix + (u.name,) * u.stages_per_block)
                left[u.name] += u.nodes_per_block

    yield from extend(())


def partitions(num_layers: int, pp: int) -> Iterator[tuple[int, ...]]:
    """Layer counts per stage summing to num_layers; middle stages >= 1, the first and last may be 0."""
    if pp == 1:
        yield (num_layers,)
        return
    for first in range(num_layers + 1):
        for last in range(num_layers - first + 1):
            middle_total = num_layers - first - last
            middle = pp - 2
            if middle == 0:
                if middle_total == 0:
                    yield (first, last)
                continue
            if middle_total < middle:
                continue
            for cuts in itertools.combinations(range(1, middle_total), middle - 1):
                bounds = (0, *cuts, middle_total)
                yield (first, *(bounds[i + 1] - bounds[i] for i in range(middle)), last)


def _degree_candidates(problem: Problem, budget: Budget, options: SpaceOptions):
    for tp in tp_candidates(problem):
        for mbs in micro_batch_candidates(problem, options):
            for cp in context_parallel_candidates(problem, options):
                for dp in dp_candidates(problem, tp, mbs, budget.max_gpus, cp):
                    uses = node_uses(problem, tp, dp, mbs, cp, options)
                    if uses:
                        yield tp, dp, mbs, uses, cp


def _optimizer_settings(problem: Problem, dp: int, cp: int) -> tuple[bool, ...]:
    """Brute force tries every distributed-optimizer setting of the space (both wherever dp x cp > 1 and the job
    leaves it open), although the search tries only on where it never loses (costmodel.distributed_optimizer_on) and
    both only under --overlap-grad-reduce (costmodel.distributed_optimizer_settings): equal optima check that the
    search loses nothing."""
    return distributed_optimizer_choices(problem.job, dp, cp)


def _param_gather_variants(plan: Plan, problem: Problem | None = None) -> tuple[Plan, ...]:
    """The plan, and where the search turns --overlap-param-gather on (costmodel.overlap_param_gather_on: one stage,
    where it never loses) the same plan with it off too: equal optima check that the search loses nothing by fixing
    it on. With the problem, a plan of pp > 1 stages where the search tries both settings
    (costmodel.overlap_param_gather_settings, issue 15 ppgather) comes with it on too."""
    if plan.overlap_param_gather:
        return (plan, replace(plan, overlap_param_gather=False))
    if problem is not None and True in overlap_param_gather_settings(
            problem, plan.dp, plan.cp, plan.virtual_stages, plan.pp, plan.distributed_optimizer):
        return (plan, replace(plan, overlap_param_gather=True))
    return (plan,)


def count_plans(problem: Problem, budget: Budget, options: SpaceOptions = SpaceOptions(), limit: int | None = None) -> int:
    """How many (degrees, type sequence, partition) plans the space holds (stops counting past `limit`)."""
    from math import comb

    total = 0
    L = problem.model.num_layers
    for tp, dp, mbs, uses, cp in _degree_candidates(problem, budget, options):
        for pp, v in ((pp, v) for _ in ep_candidates(problem, tp, dp, options)
                      for pp, v in _stage_counts(problem, options, dp, mbs)):
            # with v > 1 every count is v x a partition of L / v (middle stages >= v)
            Lv = L // v
            n_parts = sum(1 for _ in partitions(Lv, pp)) if pp <= 3 else sum(
                comb(Lv - f - l - 1, pp - 3) for f in range(Lv + 1) for l in range(Lv - f + 1) if Lv - f - l >= pp - 2
            )
            if n_parts == 0:
                continue
            for _ in type_sequences(uses, pp, budget.max_gpus, tp * cp * dp, _allowed(problem, options)):
                total += n_parts * len(_optimizer_settings(problem, dp, cp))
                if limit is not None and total > limit:
                    return total
    return total


def _stage_counts(problem: Problem, options: SpaceOptions, dp: int, mbs: int) -> Iterator[tuple[int, int]]:
    """(pp, v): every stage count, with every interleaving v the options allow there (candidates.interleaving_allowed)."""
    for pp in range(1, max_stages(problem, options) + 1):
        for v in options.virtual_stages:
            if interleaving_allowed(problem, pp, dp, mbs, v):
                yield pp, v


def _allowed(problem: Problem, options: SpaceOptions):
    """The target's rule on node-type sequences, or None when any sequence runs."""
    if options.node_type_order is None and not options.same_gpus_per_node:
        return None
    return lambda types: type_sequence_allowed(problem, types, options)


def _least_recompute(problem: Problem, plan: Plan, options: SpaceOptions) -> tuple[Plan, Estimate] | None:
    """Raise each stage's recomputation until it fits (see module doc); None when some stage never fits."""
    modes = options.recompute_modes
    if options.uniform_recompute:
        for mode in modes:
            stages = tuple(replace(s, recompute=mode if s.num_layers > 0 else modes[0]) for s in plan.stages)
            uniform = replace(plan, stages=stages)
            est = estimate(problem, uniform)
            if est.fits:
                if block_recompute_enabled(options) and plan.virtual_stages == 1 and mode != modes[0]:
                    return _fastest_with_block(problem, plan, (uniform, est))
                return uniform, est
        return (_fastest_with_block(problem, plan, None)
                if block_recompute_enabled(options) and plan.virtual_stages == 1 else None)
    level = [0] * plan.pp
    while True:
        est = estimate(problem, plan)
        if est.fits:
            return plan, est
        stages = list(plan.stages)
        for i, s in enumerate(est.stages):
            if not s.fits:
                if level[i] + 1 >= len(modes):
                    return None
                level[i] += 1
                stages[i] = replace(stages[i], recompute=modes[level[i]])
        plan = replace(plan, stages=tuple(stages))


def _fastest_with_block(problem: Problem, plan: Plan, found: tuple[Plan, Estimate] | None
                        ) -> tuple[Plan, Estimate] | None:
    """found (the least one-mode recomputation that fits, or None) against every block recomputation N = 1 ..
    most layers on a stage - 1 (N at or above it is full recomputation): the fastest that fits. The stage shapes
    and so the rent are the same, so the fastest is also the cheapest and meets every budget the others meet."""
    most = max(s.num_layers for s in plan.stages)
    stages = tuple(replace(s, recompute="full" if s.num_layers > 0 else "none") for s in plan.stages)
    for n in range(1, most):
        block = replace(plan, stages=stages, recompute_num_layers=n)
        est = estimate(problem, block)
        if est.fits and (found is None or est.iteration_time_s < found[1].iteration_time_s):
            found = (block, est)
    return found


def solve_exhaustive(
    problem: Problem,
    budget: Budget,
    *,
    options: SpaceOptions = SpaceOptions(),
    max_plans: int = DEFAULT_MAX_PLANS,
    time_limit_s: float | None = None,
) -> SearchResult:
    start = time.perf_counter()
    count = count_plans(problem, budget, options, limit=max_plans)
    if count > max_plans:
        return SearchResult(
            method="exhaustive", status="refused", objective=budget.objective, solve_time_s=time.perf_counter() - start,
            message=f"exhaustive: more than {max_plans:,} plans in the space (counted {count:,} before stopping); "
                    f"raise --max-plans or use a solver",
        )
    best: tuple[tuple, Plan, Estimate] | None = None
    priced = 0
    L = problem.model.num_layers
    for tp, dp, mbs, uses, cp in _degree_candidates(problem, budget, options):
        for ep, pp, v in ((ep, pp, v) for ep in ep_candidates(problem, tp, dp, options)
                          for pp, v in _stage_counts(problem, options, dp, mbs)):
            sequences = type_sequences(uses, pp, budget.max_gpus, tp * cp * dp, _allowed(problem, options))
            for types, dist in itertools.product(sequences, _optimizer_settings(problem, dp, cp)):
                for chunks in partitions(L // v, pp):
                    parts = tuple(v * n for n in chunks)  # v = 1: the partition itself
                    if time_limit_s is not None and time.perf_counter() - start > time_limit_s:
                        return _finish(best, budget, start, priced, timed_out=True)
                    if options.kinds_split_at_stages and not kinds_split_allowed(problem, list(parts)):
                        continue  # a stage with encoder and decoder layers: the target cannot run it
                    stages = tuple(Stage(node_type=t, num_layers=n, recompute=options.recompute_modes[0])
                                   for t, n in zip(types, parts))
                    plan = Plan(tp=tp, dp=dp, micro_batch_size=mbs, stages=stages, ep=ep, cp=cp,
                                distributed_optimizer=dist, virtual_stages=v,
                                overlap_grad_reduce=overlap_grad_reduce_on(problem, dp, cp, v),
                                overlap_param_gather=overlap_param_gather_on(problem, dp, cp, v, pp, dist),
                                ddp_average_in_collective=ddp_average_on(problem, dp, cp))
                    for variant in _param_gather_variants(plan, problem):
                        priced += 1
                        found = _least_recompute(problem, variant, options)
                        if found is None:
                            continue
                        found_plan, est = found
                        if budget_violations(found_plan, est, budget):
                            continue
                        key = (objective_value(est, budget.objective), found_plan.num_gpus)
                        if best is None or key < best[0]:
                            best = (key, found_plan, est)
    return _finish(best, budget, start, priced, timed_out=False)


def _finish(best, budget: Budget, start: float, priced: int, *, timed_out: bool) -> SearchResult:
    elapsed = time.perf_counter() - start
    stats = {"plans_priced": float(priced)}
    if best is None:
        return SearchResult(
            method="exhaustive", status="timeout" if timed_out else "infeasible", objective=budget.objective,
            solve_time_s=elapsed, stats=stats,
            message="exhaustive: stopped at the time limit with no plan" if timed_out else "no plan meets the limits",
        )
    _, plan, est = best
    value = objective_value(est, budget.objective)
    return SearchResult(
        method="exhaustive", status="feasible" if timed_out else "optimal", objective=budget.objective,
        solve_time_s=elapsed, plan=plan, estimate=est, objective_value=value, bound=None if timed_out else value,
        stats=stats, message="stopped at the time limit" if timed_out else "",
    )
