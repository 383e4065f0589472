"""Post-merge audit (issue 14): the seams between distopt (the distributed optimizer searched off under
--overlap-grad-reduce, Candidate.dist), overlapfloor (the in-flight bound's whole-levels and hiding floors) and
budgetinc (solver._budget_descent).

On small random instances built to make those seams matter (the job leaving the optimizer open, the overlap on,
dp > 1, long sequences on small GPUs, several node types, slow networks), with the search's candidates taken from
the solver itself (solver._candidates):
  * every plan of the space brute force enumerates (both optimizer settings) belongs to a candidate the solver lists,
    or is an off plan whose on twin the search keeps and that is no slower and fits
    (distributed_optimizer_off_dominated, or on at v > 1 where the overlap is off);
  * every bound the solver takes of a candidate (its cheap bound, a pruning by it, the refined bound, the aggregate
    refined bound, the in-flight bound with the round-9 floors, the positional bound and its time form that feeds the
    model's T >= T_lo row, the interleaved sibling bound, the kinds bound) lies below the best plan of that candidate
    at the candidate's own optimizer setting, with no budget and under budgets at plans' own values (time, cost,
    rent, at the edge);
  * both backends answer what brute force answers, for cost, time, cost <= D and time <= B (D, B at plans' values);
  * the budget descent's plan is in the space, meets its budget, is priced as reported, and launches (the optimizer
    and overlap flags as the plan says).
The checks are functions (check_bounds, check_backends, check_descent) so that a seeded loop can run many instances
(docs/solver.md "Round 9 after the merge: the seams, audited"); the tests here run a few seeds of each."""

from __future__ import annotations

import math
import random
from dataclasses import replace
from unittest import mock

from optsearch import megatron
from optsearch.baselines.exhaustive import _stage_counts, count_plans, partitions, type_sequences
from optsearch.candidates import (
    SpaceOptions, context_parallel_candidates, dp_candidates, ep_candidates, in_search_space, micro_batch_candidates,
    node_uses, tp_candidates,
)
from optsearch.costmodel import distributed_optimizer_choices, distributed_optimizer_on, estimate
from optsearch.formulation.model import Candidate, candidate_plan
from optsearch.plan import Stage
from optsearch.problem import Problem
from optsearch.profile import AnalyticProfile
from optsearch.search import budget_violations, objective_value
from optsearch.spec import ClusterSpec, GpuSpec, JobSpec, LayerKindSpec, ModelSpec, NodeTypeSpec
from optsearch.spec.budget import Budget
from priced import least_recompute, solve_exhaustive

REL = 1e-9
MAX_PLANS = 3000


def random_instance(seed: int) -> tuple[Problem, SpaceOptions]:
    """A small instance where the optimizer setting and the overlap matter: the job leaves the distributed optimizer
    open, the overlap is on, small GPUs, long sequences, one to three node types on slow links; sometimes a mixture of
    experts, uniform recomputation with block recomputation, cp in {1, 2}, or interleaving."""
    rng = random.Random(seed)
    n_types = rng.choice([1, 2, 2, 3])
    gpus, nodes = [], []
    for i in range(n_types):
        gpus.append(GpuSpec(name=f"G{i}", memory_gib=rng.choice([2.5, 4.0, 6.0, 12.0, 16.0, 24.0, 40.0]),
                            peak_fp16_tflop_per_s=rng.choice([30.0, 65.0, 125.0, 312.0]),
                            hbm_gbyte_per_s=rng.choice([300.0, 900.0, 2000.0])))
        nodes.append(dict(name=f"t{i}", gpu=f"G{i}", gpus_per_node=rng.choice([1, 2, 4]),
                          num_nodes_available=rng.randint(1, 4),
                          price_usd_per_node_hour=round(rng.uniform(0.5, 40.0), 4),
                          intra_node_link=rng.choice(["nvlink", "pcie"]),
                          intra_node_gbyte_per_s=rng.choice([16.0, 32.0, 150.0, 300.0]),
                          inter_node_gbit_per_s=rng.choice([10.0, 40.0, 100.0, 400.0])))
    layers = rng.randint(2, 8)
    hidden = rng.choice([512, 1024, 2048])
    kinds = None
    if rng.random() < 0.15:
        kinds = [LayerKindSpec(name="layer", num_layers=layers, num_experts=4, moe_router_topk=2)]
    model = ModelSpec(
        name="audit", num_layers=layers, hidden_size=hidden, num_attention_heads=rng.choice([4, 8]),
        ffn_hidden_size=4 * hidden, seq_length=rng.choice([1024, 2048, 4096, 8192]), vocab_size=8000,
        layer_kinds=kinds,
        default_job=JobSpec(global_batch_size=rng.choice([4, 8, 16]), train_iterations=1000,
                            distributed_optimizer=None))
    cluster = ClusterSpec(name="audit", node_types=[NodeTypeSpec(**n) for n in nodes], gpus=gpus)
    by_name = {g.name: g for g in gpus}
    problem = Problem(model=model, cluster=cluster, job=model.default_job, gpus=by_name,
                      profile=AnalyticProfile(model=model, gpus=by_name), overlap_grad_reduce=True)
    space = rng.choice(["per-stage", "per-stage", "uniform+block", "cp", "interleaved", "megatron", "megatron"])
    options = SpaceOptions(micro_batch_sizes=(1, 2, 4), max_stages=rng.randint(1, 3 if n_types == 1 else 2))
    if space == "uniform+block":
        options = replace(options, uniform_recompute=True, block_recompute=True)
    elif space == "cp" and kinds is None:
        options = replace(options, context_parallel_sizes=(1, 2))
    elif space == "interleaved" and kinds is None:
        options = replace(options, virtual_stages=(1, 2), max_stages=rng.randint(2, 3), micro_batch_sizes=(1, 2))
    elif space == "megatron":  # what solve --target megatron searches (flash attention, cp where it runs)
        from optsearch.targets import target_space

        problem, options = target_space("megatron", problem, base=replace(
            options, context_parallel_sizes=(1, 2) if kinds is None else (1,), virtual_stages=(1, 2)))
    return problem, options


def off_heavy_instance(seed: int) -> tuple[Problem, SpaceOptions]:
    """random_instance's kind where the optimizer off tends to win (distopt's instance, widened): nodes of 4 or 8
    GPUs on PCIe, fast HBM, roomy GPUs, wide layers, so the plain all-reduce is large and hides whole behind the
    backward while the distributed optimizer's all-gather stays exposed."""
    problem, options = random_instance(seed)
    rng = random.Random(10_000 + seed)
    gpus = [g.model_copy(update={"memory_gib": rng.choice([24.0, 40.0, 80.0]), "hbm_gbyte_per_s": 2000.0})
            for g in problem.cluster.gpus]
    nodes = [n.model_copy(update={"gpus_per_node": rng.choice([4, 8]), "intra_node_link": "pcie",
                                  "intra_node_gbyte_per_s": 16.0, "num_nodes_available": rng.randint(1, 2)})
             for n in problem.cluster.node_types]
    model = problem.model.model_copy(update={"hidden_size": 2048, "ffn_hidden_size": 8192, "num_attention_heads": 16,
                                             "seq_length": rng.choice([1024, 2048])})
    cluster = problem.cluster.model_copy(update={"gpus": gpus, "node_types": nodes})
    by_name = {g.name: g for g in gpus}
    flash = problem.flash_attention
    out = Problem(model=model, cluster=cluster, job=problem.job, gpus=by_name,
                  profile=AnalyticProfile(model=model, gpus=by_name), overlap_grad_reduce=True)
    if flash:
        from optsearch.problem import with_flash_attention

        out = with_flash_attention(out, True)
    return out, options


def small(problem: Problem, options: SpaceOptions) -> bool:
    return count_plans(problem, Budget(), options, limit=MAX_PLANS) <= MAX_PLANS


def space_plans(problem: Problem, options: SpaceOptions):
    """(Candidate, plan, estimate) of every plan of the space (every optimizer setting distributed_optimizer_choices
    allows, as brute force enumerates), at its least recomputation (exhaustive._least_recompute, priced once per
    instance by priced.least_recompute, whose memo brute force reads too; plans that fit in no mode left out). The candidate is the one the plan belongs to: dist None where the plan's setting is the
    search's default (distributed_optimizer_on), else False."""
    L = problem.model.num_layers
    for tp in tp_candidates(problem):
        for mbs in micro_batch_candidates(problem, options):
            for cp in context_parallel_candidates(problem, options):
                for dp in dp_candidates(problem, tp, mbs, None, cp):
                    uses = tuple(node_uses(problem, tp, dp, mbs, cp, options))
                    if not uses:
                        continue
                    for ep in ep_candidates(problem, tp, dp, options):
                        for pp, v in _stage_counts(problem, options, dp, mbs):
                            for dist in distributed_optimizer_choices(problem.job, dp, cp):
                                own = None if dist == distributed_optimizer_on(problem.job, dp, cp) else dist
                                cand = Candidate(tp=tp, dp=dp, micro_batch_size=mbs, pp=pp, uses=uses, ep=ep, cp=cp,
                                                 v=v, dist=own)
                                for types in type_sequences(list(uses), pp, None, tp * cp * dp):
                                    for chunks in partitions(L // v, pp):
                                        stages = tuple(Stage(node_type=t, num_layers=v * n, recompute="none")
                                                       for t, n in zip(types, chunks))
                                        plan = candidate_plan(problem, cand, stages)
                                        if plan.distributed_optimizer != dist:
                                            continue  # dist None whose default is off (dp x cp = 1): the same plan
                                        found = least_recompute(problem, plan, options)
                                        if found is not None:
                                            yield cand, found[0], found[1]


def pattern_plans(problem: Problem, options: SpaceOptions, memo):
    """(candidate, plan, estimate, skeleton) for space_plans' plans whose candidate is v = 1 with a pattern-mode
    skeleton (memo.skeleton(cand).most set): the positional bound's domain, as the positional tests walk it."""
    for cand, plan, est in space_plans(problem, options):
        if cand.v != 1:
            continue
        sk = memo.skeleton(cand)
        if sk.most is None:
            continue
        yield cand, plan, est, sk


def edge_budgets(priced: list, rng: random.Random) -> list[Budget]:
    """No budget (each objective), a GPU limit at a random plan's GPUs, and budgets at the exact values of a few
    plans: the fastest, the cheapest and two at random (deadline, cost budget and rent, each with both objectives)."""
    out = [Budget(objective="cost"), Budget(objective="time")]
    if not priced:
        return out
    ests = [e for _, _, e in priced]
    gpus = rng.choice([p.num_gpus for _, p, _ in priced])
    out += [Budget(objective="time", max_gpus=gpus), Budget(objective="cost", max_gpus=gpus)]
    picks = [min(ests, key=lambda e: e.training_time_s), min(ests, key=lambda e: e.cost_usd)]
    picks += rng.sample(ests, min(2, len(ests)))
    for est in picks:
        for objective in ("cost", "time"):
            out.append(Budget(objective=objective, max_time_s=est.training_time_s))
            out.append(Budget(objective=objective, max_cost_usd=est.cost_usd))
        out.append(Budget(objective="time", max_usd_per_hour=est.usd_per_hour))
        out.append(Budget(objective="cost", max_time_s=est.training_time_s, max_cost_usd=est.cost_usd * 1.5))
    return unique_budgets(out)


def unique_budgets(budgets: list[Budget]) -> list[Budget]:
    """The budgets in order, each once: the picks often coincide (the fastest plan is the cheapest on many small
    instances, a random pick is one of them), and a budget checked twice checks nothing more (the suite's time)."""
    seen: set[str] = set()
    out = []
    for budget in budgets:
        key = budget.model_dump_json()
        if key not in seen:
            seen.add(key)
            out.append(budget)
    return out


def check_bounds(problem: Problem, options: SpaceOptions, seed: int = 0) -> dict:
    """The checks of the module docstring's first two points. Returns counts and the least plan value / bound seen
    (>= 1 - 1e-9 when every bound holds; asserted)."""
    from optsearch import bounds as bounds_module
    from optsearch.bounds import candidate_bound
    from optsearch.formulation.kinds import kinds_bound
    from optsearch.formulation.positional import positional_bound
    from optsearch.bounds import interleaving_factor
    from optsearch.solver import Memo, _bounded, _candidates, _inflight_bounded, interleaved_positional_bound

    memo = Memo(problem, options)
    priced = list(space_plans(problem, options))
    listed = {b.cand.key: b for b in _candidates(memo, Budget(objective="cost"))[0]}
    stats = {"plans": len(priced), "candidates": 0, "off_plans": 0, "twins": 0, "comparisons": 0,
             "off_comparisons": 0, "least": math.inf, "least_off": math.inf}
    # 1. every plan belongs to a listed candidate, or is an off plan with a kept on twin no slower that fits
    by_cand: dict[tuple, tuple[Candidate, list]] = {}
    for cand, plan, est in priced:
        stats["off_plans"] += not plan.distributed_optimizer
        if cand.key in listed:
            by_cand.setdefault(cand.key, (cand, []))[1].append((plan, est))
            continue
        assert cand.dist is False, ("a plan of an unlisted candidate", plan, est)
        twin = estimate(problem, replace(plan, distributed_optimizer=True))
        assert twin.fits and twin.iteration_time_s <= est.iteration_time_s * (1 + 1e-12), (plan, est, twin)
        assert replace(cand, dist=None).key in listed, plan
        stats["twins"] += 1
    # 2. every bound below the best plan of its candidate that meets the budget
    rng = random.Random(seed)
    for budget in edge_budgets(priced, rng):
        kept = {b.cand.key: b for b in _candidates(memo, budget)[0]}
        for key, (cand, plans) in by_cand.items():
            meeting = [(p, e) for p, e in plans if not budget_violations(p, e, budget)]
            if not meeting:
                continue
            stats["candidates"] += 1
            best = min(objective_value(e, budget.objective) for _, e in meeting)
            best_it = min(e.iteration_time_s for _, e in meeting)
            best_cpi = min(e.usd_per_hour * e.iteration_time_s / 3600 for _, e in meeting)
            fastest = min(e.training_time_s for _, e in meeting)
            where = (cand, budget, best)

            def below(value: float, truth: float = best, label: str = "") -> None:
                assert value <= truth * (1 + REL), (label, value, truth, where)
                if value > 0:
                    stats["least"] = min(stats["least"], truth / value)
                    if cand.dist is False:
                        stats["least_off"] = min(stats["least_off"], truth / value)
                stats["comparisons"] += 1
                stats["off_comparisons"] += cand.dist is False

            assert key in kept, ("pruned by its cheap bound", where)
            item = kept[key]
            below(item.lower_bound, label="cheap")
            refined = _bounded(problem, budget, item.terms, cand, True, memo.refined_bound(item.terms, cand, budget))
            assert refined is not None, ("refined: infeasible", where)
            below(refined.lower_bound, label="refined")
            if cand.v == 1:
                for compositions in (None, 0):
                    ctx = mock.patch.object(bounds_module, "MAX_COMPOSITIONS", 0) if compositions == 0 else None
                    if ctx is not None:
                        ctx.start()
                    try:
                        cb = candidate_bound(problem, item.terms, cand.pp, budget, refined=True)
                    finally:
                        if ctx is not None:
                            ctx.stop()
                    assert cb.feasible, ("candidate_bound: infeasible", where)
                    below(cb.iteration_s, best_it, "candidate_bound iteration")
                    below(cb.cost_per_iteration_usd, best_cpi, "candidate_bound cost per iteration")
            for cutoff in (math.inf, best):
                got = _inflight_bounded(memo, budget, replace(refined, lower_bound=0.0), 0.0, cutoff)
                assert got is not None, ("in-flight: infeasible", cutoff, where)
                below(min(got, cutoff), label=f"in-flight cutoff {cutoff}")
            sk = memo.skeleton(cand)
            if cand.v == 1 and sk.most is not None:
                for cutoff in (math.inf, best):
                    pos = positional_bound(sk, budget, cutoff=cutoff)
                    below(min(pos.bound, cutoff), label=f"positional cutoff {cutoff}")
                if budget.objective == "cost":  # the model's T >= T_lo row (solve, before build)
                    own = positional_bound(sk, budget.model_copy(update={"objective": "time"}))
                    below(own.bound, fastest, "positional time form")
            elif cand.v == 1:
                for cutoff in (math.inf, best):
                    got = kinds_bound(sk, budget, cutoff=cutoff)
                    below(min(got.bound, cutoff), label=f"kinds cutoff {cutoff}")
            else:
                sibling = memo.skeleton(replace(cand, v=1))
                if sibling.most is not None:
                    factor = interleaving_factor(item.terms.m, cand.pp, cand.v)
                    for cutoff in (math.inf, best):
                        got = interleaved_positional_bound(sibling, budget, factor, cutoff)
                        below(min(got, cutoff), label=f"interleaved sibling cutoff {cutoff}")
    return stats


def check_backends(problem: Problem, options: SpaceOptions, seed: int = 0) -> int:
    """Both backends against brute force over both settings: cost, time, cost <= D and time <= B with D and B at
    the exact values of a plan (the fastest's cost for B, the cheapest's time for D, and a random plan's). Every
    answer re-priced, in the space, within the budget, launchable. Returns the number of budgets checked."""
    from optsearch.solver import solve

    rng = random.Random(seed)
    ests = [e for _, _, e in space_plans(problem, options)]
    budgets = [Budget(objective="cost"), Budget(objective="time")]
    if ests:
        pick = rng.choice(ests)
        budgets += [Budget(objective="time", max_cost_usd=min(ests, key=lambda e: e.training_time_s).cost_usd),
                    Budget(objective="cost", max_time_s=min(ests, key=lambda e: e.cost_usd).training_time_s),
                    Budget(objective="time", max_cost_usd=pick.cost_usd),
                    Budget(objective="cost", max_time_s=pick.training_time_s)]
    for budget in budgets:
        truth = solve_exhaustive(problem, budget, options=options, max_plans=10 * MAX_PLANS)
        for name in ("cbc", "cpsat"):
            got = solve(problem, budget, solver=name, options=options)
            where = (name, budget, truth.plan, got.plan)
            if truth.status == "infeasible":
                assert got.status == "infeasible", where
                continue
            assert truth.status == "optimal" and got.status == "optimal", (got.status, got.message, where)
            check_plan_honest(problem, options, budget, got.plan, got.objective_value)
            assert math.isclose(got.objective_value, truth.objective_value, rel_tol=1e-6), (
                got.objective_value, truth.objective_value, where)
    return len(budgets)


def check_plan_honest(problem: Problem, options: SpaceOptions, budget: Budget, plan, value: float) -> None:
    """The plan is in the space, fits, meets the budget, is priced at value, and launches with the optimizer and
    overlap flags it says."""
    assert in_search_space(problem, plan, options), plan
    est = estimate(problem, plan)
    assert est.fits and not budget_violations(plan, est, budget), (plan, budget)
    assert math.isclose(objective_value(est, budget.objective), value, rel_tol=1e-6), (plan, value)
    if options.uniform_recompute and (plan.cp == 1 or options.context_parallel_node_types is not None
                                      or problem.flash_attention):  # a space launch runs (the megatron target's)
        args = megatron.megatron_args(problem, plan).args
        assert ("--use-distributed-optimizer" in args) == plan.distributed_optimizer, (plan, args)
        assert ("--overlap-grad-reduce" in args) == plan.overlap_grad_reduce, (plan, args)
        assert not (plan.overlap_grad_reduce and plan.virtual_stages > 1), plan


def check_descent(problem: Problem, options: SpaceOptions, seed: int = 0) -> int:
    """solver._budget_descent under time <= B and cost <= D at plans' exact values (and a little above): its plan,
    where it gives one, is honest (check_plan_honest). Returns how many plans it gave."""
    from optsearch.solver import Memo, _budget_descent

    rng = random.Random(seed)
    ests = [e for _, _, e in space_plans(problem, options)]
    if not ests:
        return 0
    memo = Memo(problem, options)
    gave = 0
    for est in [min(ests, key=lambda e: e.cost_usd), min(ests, key=lambda e: e.training_time_s), rng.choice(ests)]:
        for scale in (1.0, 1.02):
            for budget in (Budget(objective="time", max_cost_usd=est.cost_usd * scale),
                           Budget(objective="cost", max_time_s=est.training_time_s * scale)):
                found = _budget_descent(memo, budget, None)
                if found is not None:
                    gave += 1
                    value, plan, priced = found
                    assert priced == estimate(problem, plan)
                    check_plan_honest(problem, options, budget, plan, value)
    return gave


# A few seeds of each check (the audit's seeded loops ran hundreds: docs/solver.md "Round 9 after the merge: the
# seams, audited").
# 3: the megatron target's space (flash attention, cp and v in {1, 2}); 8: cp in {1, 2}, per-stage recomputation
# (an off candidate's bound within 0.03 % of its best plan); 24: the optimizer off is the fastest plan.
SEEDS = (3, 8)
BACKEND_SEEDS = (24,)
DESCENT_SEEDS = (0, 3, 24)


def test_every_plan_is_in_a_listed_candidate_and_every_bound_holds():
    compared = off = 0
    for seed in SEEDS:
        problem, options = random_instance(seed)
        assert small(problem, options)
        stats = check_bounds(problem, options, seed)
        compared += stats["comparisons"]
        off += stats["off_comparisons"]
        assert stats["least"] >= 1 - REL
    assert compared > 1000 and off > 1000


def test_the_bound_check_fails_on_bounds_taken_at_the_default_setting():
    """The check can fail: with every candidate's terms taken at the search's default setting (dist ignored, as
    before distopt's terms), an off candidate's bound lies above its best plan on seed 174 (and on 15 of the seeds
    0-199)."""
    import pytest

    from optsearch import solver

    problem, options = random_instance(174)
    default = solver.Memo.degree_terms

    def at_default(self, tp, dp, mbs, uses, ep=1, cp=1, dist=None):
        return default(self, tp, dp, mbs, uses, ep, cp, None)

    with mock.patch.object(solver.Memo, "degree_terms", at_default), pytest.raises(AssertionError):
        check_bounds(problem, options, 174)
    assert check_bounds(problem, options, 174)["off_comparisons"] > 0


def test_both_backends_equal_brute_force_with_both_settings_in_the_space():
    """A few seeds of check_backends: cost, time, cost <= D and time <= B at plans' exact values."""
    checked = 0
    for seed in BACKEND_SEEDS:
        problem, options = random_instance(seed)
        if small(problem, options):
            checked += check_backends(problem, options, seed)
    assert checked > 0


def test_the_budget_descent_gives_honest_plans():
    """A few seeds of check_descent: each plan in the space, within its budget, priced as reported, launchable."""
    gave = sum(check_descent(*random_instance(seed), seed) for seed in DESCENT_SEEDS)
    assert gave > 0
