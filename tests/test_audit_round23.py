"""Audit of round 23's merges (audit15; docs/solver.md "Round 23 after the merges: the audit (audit15, 2026-11-25)").

- flight1t's layer-work floor by pp (inflight.least_layer_work_pp_s, LAYER_WORK_BY_PP; a bound change reaching every
  objective's in-flight bound): on draws its own tests do not make (1-3 node types with tight node supply, 1-2 nodes
  of the fastest, up to 5 stages; roomy, and memory-tight with long sequences, 16-40 GiB GPUs, cp 1-2; experts on some;
  tied and untied embeddings; v 1-2): every plan's layers' work at or above the floor, and every candidate's in-flight
  bound (_inflight_bounded) at or below its least objective among its plans that meet the budget, minimizing cost,
  time, cost under deadlines and time under cost caps at 1.00-1.15 x plans' own values, with no cutoff and with the
  loop's cutoff just above that plan; the bound never None where a plan meets the budget.
- park145's direct interleaved bound (solver.interleaved_direct_bound, INTERLEAVED_DIRECT; a bound change for time
  under a cost budget): every v = 2 candidate's bound at or below its least time under caps at 1.00-1.15 x plans'
  costs, fresh, and again with one kept table asked in a shuffled order under the loop's cutoffs.
- flat76's refined bound by stage class (bounds.under_ends_grid, UNDER_COST_ENDS; a bound change for time under a
  cost budget): every candidate's refined bound, by one pp alone and by the degree's kept tables, at or below its
  least time under caps at 1.00-1.15 x plans' costs (and with a deadline); the two paths equal; a mutant caught.
- front1t's rings and slices (RENT_SLICED, SUM_RING, PAIR_COVER_RING; claimed exact): the same positional bounds
  and pair-cover floors bit for bit with each off, at thresholds 0 (every new path runs).
- v2refined's INTERLEAVED_UNDER_ENDS (the refined level's stage classes at v > 1 under B): the refined walk's v = 2
  candidates, raised against the switch off counted.
- end530's ENDS_CLASS_MARKS (the ends-class floor's base at the first marks): time rows' positional bounds under
  deadlines, cost caps, slower_than_s and cutoffs.
- Both backends with the round's switches (FLIPS: LAYER_WORK_BY_PP, INTERLEAVED_DIRECT, SUPPLY_STEPS, UNDER_COST_ENDS,
  DEADLINE_FILL, INTERLEAVED_UNDER_ENDS, SLICE_BY_WORK, SLICE_CAP_BY_RATE) on and off: brute force's answer
  (statuses and values), every plan re-priced.
bench/audit_round23.py sweeps more seeds with the same checks.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import replace

import pytest

import optsearch.bounds as bounds_module
import optsearch.formulation.positional as positional
import optsearch.inflight as inflight
import optsearch.solver as solver_module
from draws import draws
from optsearch.baselines.exhaustive import count_plans, solve_exhaustive
from optsearch.candidates import SpaceOptions
from optsearch.problem import Problem
from optsearch.profile import AnalyticProfile
from optsearch.search import budget_violations, objective_value
from optsearch.solver import Bounded, Memo, _inflight_bounded, interleaved_direct_bound, solve
from optsearch.spec import ClusterSpec, GpuSpec, JobSpec, ModelSpec, NodeTypeSpec
from optsearch.spec.model import LayerKindSpec
from optsearch.spec.budget import Budget

from test_audit_dist_bounds import MAX_PLANS, space_plans
from test_audit_round11 import assert_equals_truth

SCALES = (1.0, 1.01, 1.05, 1.10, 1.15)
REL = 1e-9


def supply_draw(seed: int, interleaved: bool = False):
    """1-3 node types, the fastest (and dearest) with 1-2 nodes of 1-2 GPUs, the others 1-4 nodes: pipelines of 4-6
    stages run past the fast type's slots (where LAYER_WORK_BY_PP bites). Seeds 1 mod 2 memory-tight (sequences of
    4,096-8,192, GPUs of 16-40 GiB, cp 1-2, block recomputation on some); 3 mod 4 experts (2-4 of them, a dense first
    layer on some); v in (1, 2) on even seeds and three in ten of the odd ones; tied embeddings drawn. None over
    MAX_PLANS."""
    rng = random.Random(23_000 + seed)
    tight, moe, inter = seed % 2 == 1, seed % 4 == 3, seed % 4 in (0, 2) or rng.random() < 0.3
    mem = (lambda: rng.choice([24.0, 32.0, 40.0] if interleaved else [16.0, 24.0, 32.0, 40.0])) if tight \
        else (lambda: 80.0)
    n_types = rng.choice([1, 2, 2, 3])
    gpus, nodes = [], []
    for i in range(n_types):
        fast = i == 0
        gpus.append(GpuSpec(name=f"G{i}", memory_gib=mem(),
                            peak_fp16_tflop_per_s=rng.choice([312.0, 989.0] if fast else [65.0, 125.0, 312.0]),
                            hbm_gbyte_per_s=rng.choice([2000.0, 3350.0] if fast else [900.0, 2000.0])))
        nodes.append(NodeTypeSpec(
            name=f"t{i}", gpu=f"G{i}", gpus_per_node=rng.choice([1, 1, 2] if fast else [1, 2]),
            num_nodes_available=rng.randint(1, 2) if fast else rng.randint(1, 4),
            price_usd_per_node_hour=round(rng.uniform(8.0, 40.0) if fast else rng.uniform(0.5, 8.0), 3),
            intra_node_link="nvlink", intra_node_gbyte_per_s=rng.choice([32.0, 300.0]),
            inter_node_gbit_per_s=3200.0 if fast else rng.choice([1.0, 10.0, 25.0, 100.0])))
    layers = rng.choice([6, 8]) if interleaved else rng.randint(4, 7)
    kinds = None
    if moe:
        kind = LayerKindSpec(name="layer", num_layers=layers, num_experts=rng.choice([2, 4]),
                             moe_router_topk=rng.randint(1, 2))
        kinds = [kind]
        if rng.random() < 0.4:
            kinds = [LayerKindSpec(name="dense", num_layers=1), kind.model_copy(update={"num_layers": layers - 1})]
    hidden = rng.choice([1024, 2048])
    model = ModelSpec(name="audit23", num_layers=layers, hidden_size=hidden, num_attention_heads=8,
                      ffn_hidden_size=4 * hidden,
                      seq_length=rng.choice([2048, 4096] if interleaved else [4096, 8192]) if tight else 1024,
                      vocab_size=rng.choice([8000, 32000]), tied_embeddings=rng.random() < 0.5,
                      layer_kinds=kinds,
                      default_job=JobSpec(global_batch_size=rng.choice([8, 16]), train_iterations=1000,
                                          distributed_optimizer=None if tight else False))
    cluster = ClusterSpec(name="audit23", node_types=nodes, gpus=gpus)
    by_name = {g.name: g for g in gpus}
    problem = Problem(model=model, cluster=cluster, job=model.default_job, gpus=by_name,
                      profile=AnalyticProfile(model=model, gpus=by_name))
    options = SpaceOptions(micro_batch_sizes=(1, 2), max_stages=rng.choice([2, 3, 4] if interleaved else [4, 5, 6]),
                           virtual_stages=(1, 2) if inter else (1,),
                           context_parallel_sizes=(1, 2) if interleaved else (1,))
    if tight:
        problem = replace(problem, overlap_grad_reduce=rng.random() < 0.5)
        options = replace(options, uniform_recompute=rng.random() < 0.5, context_parallel_sizes=(1, 2))
        options = replace(options, block_recompute=options.uniform_recompute and rng.random() < 0.5)
    if kinds is not None and len(kinds) > 1:  # two kinds: no Megatron-LM launch (check_plan_honest's with uniform)
        options = replace(options, uniform_recompute=False, block_recompute=False)
    if count_plans(problem, Budget(), options, limit=MAX_PLANS) > MAX_PLANS:
        return None
    return problem, options


def by_candidate(problem, options) -> dict:
    out: dict = {}
    for cand, plan, est in space_plans(problem, options):
        out.setdefault(cand.key, (cand, []))[1].append((plan, est))
    return out


def _terms(memo, cand):
    return memo.degree_terms(cand.tp, cand.dp, cand.micro_batch_size, cand.uses, cand.ep, cand.cp, cand.dist)


def least_meeting(plans, budget) -> float | None:
    values = [objective_value(e, budget.objective) for p, e in plans if not budget_violations(p, e, budget)]
    return min(values) if values else None


# ---- flight1t: the layer-work floor by pp and the in-flight bound on every objective ---------------------------------

def work_walk(problem, options, stats, floor=None):
    """Every plan's layers' work (sum n_i step_min[g_i]) against floor(d, L, pp) (default least_layer_work_pp_s):
    stats work_plans, work_raised (the floor above least_layer_work_s's), work_above (a plan below: a defect)."""
    floor = floor or inflight.least_layer_work_pp_s
    memo = Memo(problem, options)
    L = problem.model.num_layers
    for cand, plan, _ in space_plans(problem, options):
        d = _terms(memo, cand)
        names = [u.node.name for u in d.uses]
        work = sum(s.num_layers * d.step_min_s[names.index(s.node_type)] for s in plan.stages)
        new = floor(d, L, cand.pp)
        stats["work_plans"] += 1
        stats["work_raised"] += new > inflight.least_layer_work_s(d, L) * (1 + 1e-12)
        stats["work_above"] += new > work * (1 + REL)
    return stats


def objective_budgets(by_cand, rng, picks: int = 2) -> list[Budget]:
    """Cost, time, cost under deadlines at SCALES x drawn plans' times, time under caps at SCALES x their costs."""
    every = [e for _, plans in by_cand.values() for _, e in plans]
    drawn = rng.sample(every, min(picks, len(every)))
    out = [Budget(objective="cost"), Budget(objective="time")]
    for e in drawn:
        for s in SCALES:
            out.append(Budget(objective="cost", max_time_s=e.training_time_s * s))
            out.append(Budget(objective="time", max_cost_usd=e.cost_usd * s))
    return out


def _objective(budget: Budget) -> str:
    return {(True, False): "cost<=D", (False, True): "time<=B"}.get(
        (budget.max_time_s is not None, budget.max_cost_usd is not None), budget.objective)


def inflight_walk(problem, options, seed, stats, picks: int = 2, cut: bool = True, slower: bool = False,
                  fresh: bool = False):
    """Every candidate's in-flight bound with LAYER_WORK_BY_PP on (and off: raised counted) under objective_budgets,
    fresh memos each side; with a plan meeting the budget: not None (else a false "no plan") and at or below the
    least objective among them (no cutoff, and with the loop's cutoff 1.001 x it on the kept tables); with slower,
    minimizing time, also with slower_than_s at the median plan time against the plans slower than it; with fresh,
    each kept-memo value against a fresh memo's (inflight_cache_differ)."""
    rng = random.Random(seed)
    by_cand = by_candidate(problem, options)
    if not by_cand:
        return stats
    budgets = objective_budgets(by_cand, rng, picks)
    times = sorted(e.training_time_s for _, plans in by_cand.values() for _, e in plans)
    median = times[len(times) // 2] * 0.999
    memos = {on: Memo(problem, options) for on in (False, True)}
    for cand, plans in by_cand.values():
        for budget in budgets:
            best = least_meeting(plans, budget)
            got = {}
            for on in (False, True):
                with pytest.MonkeyPatch.context() as mp:
                    mp.setattr(inflight, "LAYER_WORK_BY_PP", on)
                    got[on] = _inflight_bounded(memos[on], budget, Bounded(cand, 0.0, _terms(memos[on], cand)))
            stats["inflight_asks"] += 1
            if fresh:  # the kept tables (memos[True], asked before under other budgets) against a fresh memo's
                new = Memo(problem, options)
                alone = _inflight_bounded(new, budget, Bounded(cand, 0.0, _terms(new, cand)))
                stats["inflight_cache_differ"] += alone != got[True]
            if got[False] is not None and (got[True] is None or got[True] > got[False] * (1 + REL)):
                stats["inflight_raised"] += 1
                stats[f"inflight_raised_{_objective(budget)}"] += 1
            if best is None:
                continue
            stats["inflight_compared"] += 1
            stats["inflight_compared_v2"] += cand.v > 1
            if got[True] is None:
                stats["inflight_none"] += 1
                raise AssertionError(("no plan said", seed, cand.key, budget.model_dump(exclude_none=True), best))
            if got[True] > best * (1 + REL):
                stats["inflight_above"] += 1
                raise AssertionError(("above a plan", seed, cand.key, budget.model_dump(exclude_none=True),
                                      got[True], best))
            if cut:
                with pytest.MonkeyPatch.context() as mp:
                    mp.setattr(inflight, "LAYER_WORK_BY_PP", True)
                    at = _inflight_bounded(memos[True], budget, Bounded(cand, 0.0, _terms(memos[True], cand)),
                                           cutoff=best * 1.001)
                stats["inflight_cut"] += 1
                if at is None or at > best * (1 + REL):
                    stats["inflight_above"] += 1
                    raise AssertionError(("above a plan under a cutoff", seed, cand.key,
                                          budget.model_dump(exclude_none=True), at, best))
            if slower and budget.objective == "time":  # the loop's floor on the time: plans slower than the median
                slow = least_meeting([(p, e) for p, e in plans if e.training_time_s > median], budget)
                with pytest.MonkeyPatch.context() as mp:
                    mp.setattr(inflight, "LAYER_WORK_BY_PP", True)
                    at = _inflight_bounded(memos[True], budget, Bounded(cand, 0.0, _terms(memos[True], cand)),
                                           slower_than_s=median)
                stats["inflight_slower"] += 1
                if slow is not None and (at is None or at > slow * (1 + REL)):
                    stats["inflight_above"] += 1
                    raise AssertionError(("above a plan slower than the median", seed, cand.key,
                                          budget.model_dump(exclude_none=True), at, slow))
    return stats


# ---- park145: the interleaved candidates' own positional bound under a cost budget --------------------------------

def direct_walk(problem, options, seed, stats, own: int = 2, shared: int = 2):
    """Every v = 2 candidate where the loop runs interleaved_direct_bound: time under caps at SCALES x the costs of
    `own` of its plans and `shared` of the instance's (and at each cost with a deadline at 1.05 x the candidate's
    fastest plan); fresh memo per ask, and then one memo (kept tables) asked in a
    shuffled order with the loop's cutoff (1.001 x the least time; inf where no plan meets the cap): at or below the
    candidate's least time among its plans that meet the cap; infinite only where none does (counted); the kept
    memo asked again without a cutoff gives the fresh memo's value (direct_cache_differ)."""
    rng = random.Random(seed)
    by_cand = by_candidate(problem, options)
    every = [e.cost_usd for _, plans in by_cand.values() for _, e in plans]
    common = rng.sample(every, min(shared, len(every)))
    kept = Memo(problem, options)
    for cand, plans in by_cand.values():
        if cand.v == 1:
            continue
        costs = [e.cost_usd for _, e in rng.sample(plans, min(own, len(plans)))] + common
        fastest = min(e.training_time_s for _, e in plans)
        asks = [Budget(objective="time", max_cost_usd=c * s) for c in costs for s in SCALES]
        asks += [Budget(objective="time", max_cost_usd=c, max_time_s=fastest * 1.05) for c in costs]  # a deadline too
        rng.shuffle(asks)
        for budget in asks:
            fresh = Memo(problem, options)
            if not solver_module._interleaved_direct_applies(fresh, cand, budget, 0.0):
                stats["direct_skipped"] += 1
                continue
            best = least_meeting(plans, budget)
            got = interleaved_direct_bound(fresh, cand, budget)
            at = interleaved_direct_bound(kept, cand, budget, cutoff=math.inf if best is None else best * 1.001)
            stats["direct_cache_differ"] += interleaved_direct_bound(kept, cand, budget) != got  # kept vs fresh
            stats["direct_asks"] += 1
            stats["direct_inf"] += math.isinf(got)
            if best is None:
                continue
            stats["direct_compared"] += 1
            stats["direct_compared_cp2"] += cand.cp > 1
            stats["direct_compared_untied"] += not problem.model.tied_embeddings
            stats["direct_tight"] += got >= best * (1 - 1e-6)
            if got > best * (1 + REL) or at > best * (1 + REL):
                stats["direct_above"] += 1
                raise AssertionError(("above a plan", seed, cand.key, budget.max_cost_usd, got, at, best))
    return stats


# ---- flat76: the refined level's time under a cost budget by stage class (bounds.UNDER_COST_ENDS) -----------------

def _refined_time(problem, got) -> float:
    return got.iteration_s * problem.iterations if got.feasible else math.inf


def refined_walk(problem, options, seed, stats, own: int = 2, shared: int = 2):
    """Every candidate's refined bound minimizing time under caps at SCALES x plans' costs (own and shared), and the
    same caps with a deadline at 1.05 x the candidate's fastest plan, every pp aggregate (bounds.MAX_COMPOSITIONS 0):
    by bounds.candidate_bound (one pp alone, fresh) and by Memo.refined_bound on one memo asked in a shuffled order
    (the degree's tables and under_cost_tables' kept grids; v > 1 through the sibling / f_v), with UNDER_COST_ENDS
    on; each at or below the candidate's least time among its plans that meet the budget, never "no plan" there;
    raised against the switch off counted (v > 1: v2refined's INTERLEAVED_UNDER_ENDS off, a fresh memo), and the
    two paths' values compared (refined_paths_differ)."""
    rng = random.Random(seed)
    by_cand = by_candidate(problem, options)
    every = [e.cost_usd for _, plans in by_cand.values() for _, e in plans]
    common = rng.sample(every, min(shared, len(every)))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(bounds_module, "MAX_COMPOSITIONS", 0)
        kept = Memo(problem, options)
        asks = []
        for cand, plans in by_cand.values():
            fastest = min(e.training_time_s for _, e in plans)
            costs = [e.cost_usd for _, e in rng.sample(plans, min(own, len(plans)))] + common
            for c in costs:
                for s in SCALES:
                    asks.append((cand, plans, Budget(objective="time", max_cost_usd=c * s)))
                asks.append((cand, plans, Budget(objective="time", max_cost_usd=c, max_time_s=fastest * 1.05)))
        rng.shuffle(asks)
        for cand, plans, budget in asks:
            terms = _terms(kept, cand)
            best = least_meeting(plans, budget)
            via_memo = _refined_time(problem, kept.refined_bound(terms, cand, budget))
            alone = math.inf
            if cand.v > 1:  # v2refined's INTERLEAVED_UNDER_ENDS off, on a fresh memo: raised counted
                mp.setattr(bounds_module, "INTERLEAVED_UNDER_ENDS", False)
                plain = _refined_time(problem, Memo(problem, options).refined_bound(terms, cand, budget))
                mp.setattr(bounds_module, "INTERLEAVED_UNDER_ENDS", True)
                stats["refined_compared_v2"] += least_meeting(plans, budget) is not None
                stats["refined_raised_v2"] += int(via_memo > plain * (1 + REL))
            if cand.v == 1:
                alone = _refined_time(problem, bounds_module.candidate_bound(problem, terms, cand.pp, budget,
                                                                             refined=True))
                mp.setattr(bounds_module, "UNDER_COST_ENDS", False)
                plain = _refined_time(problem, bounds_module.candidate_bound(problem, terms, cand.pp, budget,
                                                                             refined=True))
                mp.setattr(bounds_module, "UNDER_COST_ENDS", True)
                stats["refined_raised"] += int(alone > plain * (1 + REL))
                stats["refined_paths_differ"] += not (alone == via_memo or math.isclose(alone, via_memo, rel_tol=1e-9))
            stats["refined_asks"] += 1
            if best is None:
                continue
            stats["refined_compared"] += 1
            for got in (via_memo, alone if cand.v == 1 else -math.inf):
                if got > best * (1 + REL):
                    stats["refined_above"] += 1
                    raise AssertionError(("above a plan", seed, cand.key, budget.model_dump(exclude_none=True),
                                          via_memo, alone, best))
    return stats


# ---- front1t: the positional programmes' rings and slices, claimed exact (bit for bit) ----------------------------

RINGS = ("RENT_SLICED", "SUM_RING", "PAIR_COVER_RING")


def exact_walk(problem, options, seed, stats, picks: int = 1):
    """Every v = 1 candidate's positional bound (fresh tables each) under objective_budgets, with no cutoff and with
    the loop's cutoff (1.001 x its best plan under the budget), with front1t's three switches on at thresholds 0
    (RENT_SLICED_FROM, SUM_RING_FROM, and SUM_VECTOR_LIMIT 0 for _sum_group_ring) and each off alone and all off:
    the same bound, bit for bit (exact_differ counts those that are not); at the first budget the pair-cover floors
    (pair_cover_floor_s, pair_cover_both_floor_s; PAIR_COVER_ONLY_WIDER off) the same too."""
    rng = random.Random(seed)
    by_cand = by_candidate(problem, options)
    if not by_cand:
        return stats
    budgets = objective_budgets(by_cand, rng, picks)
    memo = Memo(problem, options)
    sides = [{n: True for n in RINGS}] + [{n: n != off for n in RINGS} for off in RINGS] + [{n: False for n in RINGS}]
    for cand, plans in by_cand.values():
        if cand.v != 1:
            continue
        sk = memo.skeleton(cand)
        if sk.most is None:
            continue
        for budget in budgets:
            best = least_meeting(plans, budget)
            for cutoff in (math.inf,) if best is None else (math.inf, best * 1.001):
                got = []
                for side in sides:
                    sk.positional = None
                    with pytest.MonkeyPatch.context() as mp:
                        mp.setattr(positional, "RENT_SLICED_FROM", 0)
                        mp.setattr(positional, "SUM_RING_FROM", 0)
                        mp.setattr(positional, "SUM_VECTOR_LIMIT", 0)  # _sum_group_ring runs past it only
                        for name, on in side.items():
                            mp.setattr(positional, name, on)
                        got.append(positional.positional_bound(sk, budget, cutoff=cutoff).bound)
                        if budget is budgets[0] and cutoff == math.inf and cand.pp > 1 and len(cand.uses) > 1:
                            mp.setattr(positional, "PAIR_COVER_ONLY_WIDER", False)
                            blocks = positional.tables(sk).blocks
                            got.append((positional.pair_cover_floor_s(sk, blocks),
                                        positional.pair_cover_both_floor_s(sk, blocks)))
                sk.positional = None
                stats["exact_asks"] += 1
                got = [x for x in got if not isinstance(x, tuple)] + [x for x in got if isinstance(x, tuple)]
                stats["exact_pair_cover"] += sum(isinstance(x, tuple) for x in got) > 0
                if len(set(x for x in got if not isinstance(x, tuple))) > 1 or len(
                        set(x for x in got if isinstance(x, tuple))) > 1:
                    stats["exact_differ"] += 1
                    raise AssertionError(("not bit for bit", seed, cand.key, budget.model_dump(exclude_none=True),
                                          cutoff, got))
                if best is not None and got[0] > best * (1 + REL):
                    stats["exact_above"] += 1
                    raise AssertionError(("above a plan", seed, cand.key, budget.model_dump(exclude_none=True),
                                          cutoff, got[0], best))
    return stats


# ---- end530: the ends-class floor's base at the walk's first marks (positional.ENDS_CLASS_MARKS) ------------------

def marks_walk(problem, options, seed, stats, cuts=(math.inf, 1.0001, 1.02, 1.5), marks=None, slower: bool = True):
    """Every candidate's positional bound minimizing time (v > 1 through its sibling / f_v) under no budget, a
    deadline and a cost cap at a drawn plan's values and 5 % above them, slower_than_s 0 and the median plan time,
    cutoffs at `cuts` x the candidate's best plan under each: with ENDS_CLASS_MARKS as it is (or `marks`) at or below
    that plan; against ENDS_CLASS_MARKS 0 (round 22's base) raised and lowered counted (not monotone: end530)."""
    from test_audit_round22 import _bound as bound22
    memo = Memo(problem, options)
    for cand, sibling, budget, floor, values, cutoff in time_asks(by_candidate(problem, options), memo,
                                                                   random.Random(seed), cuts, slower):
        got = {}
        for at in (0, positional.ENDS_CLASS_MARKS if marks is None else marks):
            sibling.positional = None
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(positional, "ENDS_CLASS_MARKS", at)
                got[at] = bound22(memo, cand, sibling, budget, floor, cutoff=cutoff)
        sibling.positional = None
        old, new = got[0], got[max(got)]
        stats["marks_asks"] += 1
        stats["marks_raised"] += new > old * (1 + REL)
        stats["marks_lowered"] += new < old * (1 - REL)
        if values:
            stats["marks_compared"] += 1
            if new > min(values) * (1 + REL):
                stats["marks_above"] += 1
                raise AssertionError(("above a plan", seed, cand.key, budget.model_dump(exclude_none=True),
                                      floor, cutoff, old, new, min(values)))
    return stats


def time_asks(by_cand, memo, rng, cuts, slower: bool):
    """The asks of the time walks (marks_walk; round 24's live_walk): for each candidate with a pattern-mode sibling
    (pp >= 2, two types or more), under no budget, a deadline and a cost cap at a drawn plan's values and 5 % above
    them, slower_than_s 0 and (v = 1, `slower`) the median plan time, each cutoff of `cuts` x the candidate's best
    plan meeting them: (cand, its v = 1 sibling's skeleton, budget, floor, the plans' times meeting both, cutoff)."""
    every = [e for _, plans in by_cand.values() for _, e in plans]
    if not every:
        return
    pick = rng.choice(every)
    budgets = [Budget(objective="time")]
    for s in (1.0, 1.05):
        budgets += [Budget(objective="time", max_time_s=pick.training_time_s * s),
                    Budget(objective="time", max_cost_usd=pick.cost_usd * s)]
    median = sorted(e.training_time_s for e in every)[len(every) // 2] * 0.999
    for cand, plans in by_cand.values():
        sibling = memo.skeleton(replace(cand, v=1))
        if sibling.most is None or cand.pp < 2 or len(cand.uses) < 2:
            continue
        for budget in budgets:
            for floor in ((0.0, median) if cand.v == 1 and slower else (0.0,)):
                values = [e.training_time_s for p, e in plans
                          if e.training_time_s > floor and not budget_violations(p, e, budget)]
                for cut in cuts:
                    if not values and cut != math.inf:
                        continue
                    yield cand, sibling, budget, floor, values, cut if cut == math.inf else min(values) * cut


# ---- both backends, the round's switches on and off -----------------------------------------------------------------

FLIPS = ((inflight, "LAYER_WORK_BY_PP"), (solver_module, "INTERLEAVED_DIRECT"), (solver_module, "SUPPLY_STEPS"),
         (bounds_module, "UNDER_COST_ENDS"), (solver_module, "DEADLINE_FILL"),  # flight1t, park145, flat76, loop175
         (bounds_module, "INTERLEAVED_UNDER_ENDS"), (solver_module, "SLICE_BY_WORK"),  # v2refined, park76
         (solver_module, "SLICE_CAP_BY_RATE"))


def solve_ab(problem, options, seed, stats, picks: int = 1, scales=(1.0, 1.05), backends=("cbc", "cpsat"),
             alone: bool = False):
    """Both backends, no limit, with the round's switches all on and all off (and each off alone where `alone`):
    cost, time, cost under a deadline and time under a cap at `scales` x drawn plans' values: brute force's answer
    each time, every plan re-priced (assert_equals_truth)."""
    rng = random.Random(seed)
    priced = list(space_plans(problem, options))
    if not priced:
        return stats
    drawn = rng.sample(priced, min(picks, len(priced)))
    budgets = [Budget(objective="cost"), Budget(objective="time")]
    for _, _, e in drawn:
        budgets += [Budget(objective="cost", max_time_s=e.training_time_s * s) for s in scales]
        budgets += [Budget(objective="time", max_cost_usd=e.cost_usd * s) for s in scales]
    for budget in budgets:
        truth = solve_exhaustive(problem, budget, options=options, max_plans=10 * MAX_PLANS)
        sides = [{f: True for f in FLIPS}, {f: False for f in FLIPS}]
        if alone:
            sides += [{f: f != g for f in FLIPS} for g in FLIPS]
        for name in backends:
            for side in sides:
                with pytest.MonkeyPatch.context() as mp:
                    for (module, flag), on in side.items():
                        mp.setattr(module, flag, on)
                    got = solve(problem, budget, solver=name, options=options)
                on = [flag for (_, flag), value in side.items() if not value]
                stats["solves"] += 1
                stats[f"solves_{_objective(budget)}"] += 1
                assert_equals_truth(problem, options, budget, got, truth,
                                    (seed, name, on, budget.model_dump(exclude_none=True), truth.status,
                                     truth.objective_value, got.status, got.objective_value))
    return stats


# ---- the tests -------------------------------------------------------------------------------------------------------

def _draw(seeds):
    for seed in seeds:
        made = supply_draw(seed)
        if made is not None:
            yield seed, made


def test_the_work_floor_by_pp_lies_below_every_plan_on_tight_supply_draws():
    """Seeds 0 and 22 (roomy, 2 and 3 types) and 5 and 29 (memory-tight): no plan's layers' work below the floor; the
    floor raised on some (1,290 of 4,254 plans when written)."""
    stats = Counter()
    for _, made in _draw((0, 5, 22, 29)):
        work_walk(*made, stats)
    assert stats["work_above"] == 0, stats
    assert stats["work_plans"] > 2000 and stats["work_raised"] > 100, stats


def test_an_over_tight_work_floor_is_caught_by_the_walk():
    """The mutant with no end stage left empty (pp - F_k layers elsewhere) puts a floor above a plan: the walk
    bites."""
    from test_inflight_layer_work_round23 import _no_empty_ends as no_empty_ends  # flight1t's mutant

    stats = Counter()
    for _, made in _draw((0, 29)):
        work_walk(*made, stats, floor=no_empty_ends)
    assert stats["work_above"] > 0, stats


@pytest.mark.parametrize("seed", [0, 5])
def test_the_inflight_bound_on_every_objective(seed):
    """Cost, time, cost<=D and time<=B at 1.00-1.15 x a plan's value, no cutoff and the loop's: at or below the
    candidate's best plan (seed 0 roomy, 5 memory-tight); raised against the switch off on both (24 each when
    written); on seed 0 each value of the memo kept across the budgets equals a fresh memo's."""
    stats = inflight_walk(*supply_draw(seed), seed, Counter(), picks=1, fresh=seed == 0)
    assert stats["inflight_above"] == 0 and stats["inflight_none"] == 0, stats
    assert stats["inflight_cache_differ"] == 0, stats  # the kept tables give the fresh memo's values
    assert stats["inflight_compared"] > 100 and stats["inflight_raised"] > 0, stats


def test_the_inflight_bound_on_more_draws():
    """OPTSEARCH_DRAWS more seeds (memory-tight and experts among them): 12, then 3, 18, 25, ..."""
    stats = Counter()
    for seed, made in list(_draw((12, 3, 18, 25, 13, 30, 37, 38, 15, 24, 6, 9)))[: draws(1)]:
        inflight_walk(*made, seed, stats, picks=1, cut=False)
    assert stats["inflight_above"] == 0 and stats["inflight_none"] == 0, stats


def test_the_direct_interleaved_bound_lies_below_every_plan():
    """Interleaved draws 0 and 12 (v = 2 at 2-3 stages; 0: bounds infinite where no plan meets the cap, and some
    within 1e-6 of a plan): fresh, and on one memo in a shuffled order under the loop's cutoffs."""
    stats = Counter()
    for seed in (0, 12):
        direct_walk(*supply_draw(seed, interleaved=True), seed, stats, own=1, shared=1)
    assert stats["direct_above"] == 0 and stats["direct_cache_differ"] == 0, stats
    assert stats["direct_compared"] > 50 and stats["direct_inf"] > 0, stats


@pytest.mark.parametrize("seed, interleaved", [(5, False), (14, True)])
def test_both_backends_with_the_round23_switches_on_and_off(seed, interleaved):
    """Memory-tight supply draw 5 and interleaved draw 14: every objective, a budget at a drawn plan's values."""
    stats = solve_ab(*supply_draw(seed, interleaved), seed, Counter(), scales=(1.0,))
    assert stats["solves"] == 16, stats  # 4 budgets x 2 backends x the switches on and off


def test_the_refined_stage_class_bound_lies_below_every_plan():
    """flat76's UNDER_COST_ENDS on supply draws 0 (roomy) and 5 (memory-tight): time under caps at 1.00-1.15 x
    plans' costs and with a deadline; the degree's tables path and one pp alone equal; raised on both (96 and 192
    asks when written)."""
    stats = Counter()
    for seed in (0, 5):
        refined_walk(*supply_draw(seed), seed, stats)
    assert stats["refined_above"] == 0 and stats["refined_paths_differ"] == 0, stats
    assert stats["refined_compared"] > 1000 and stats["refined_raised"] > 100, stats


def test_the_interleaved_refined_stage_class_bound_lies_below_every_plan():
    """v2refined's INTERLEAVED_UNDER_ENDS (v = 2 at the refined level under B) on interleaved draw 12: at or below
    every v = 2 candidate's plans under the caps and the deadline; raised against the switch off (96 asks when
    written)."""
    stats = refined_walk(*supply_draw(12, interleaved=True), 12, Counter())
    assert stats["refined_above"] == 0 and stats["refined_paths_differ"] == 0, stats
    assert stats["refined_compared_v2"] > 100 and stats["refined_raised_v2"] > 0, stats


def test_an_over_tight_stage_class_bound_is_caught_by_the_walk(monkeypatch):
    """under_ends_grid with every send floor 1.5 x e_g (over-tight in principle): a bound above a plan on supply
    draw 12 (105.04 against a plan of 103.66 s when written)."""
    real_grid, real_send = bounds_module.under_ends_grid, bounds_module.sender_send_min_s

    def dearer(*args, **kwargs):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(bounds_module, "sender_send_min_s", lambda d: real_send(d) * 1.5)
            return real_grid(*args, **kwargs)

    monkeypatch.setattr(bounds_module, "under_ends_grid", dearer)
    with pytest.raises(AssertionError, match="above a plan"):
        refined_walk(*supply_draw(12), 12, Counter())


def test_the_positional_rings_and_slices_are_bit_for_bit():
    """front1t's RENT_SLICED, SUM_RING, PAIR_COVER_RING at thresholds 0 on the memory-tight supply draw 39: each
    off alone and all off, every objective's budgets, no cutoff and the loop's: the same bounds and pair-cover
    floors."""
    stats = exact_walk(*supply_draw(39), 39, Counter())
    assert stats["exact_differ"] == 0 and stats["exact_above"] == 0, stats
    assert stats["exact_asks"] > 50 and stats["exact_pair_cover"] > 0, stats


def test_the_ends_class_floor_at_the_first_marks_under_budgets():
    """end530's ENDS_CLASS_MARKS on boundary_instance(100, tight) with deadlines and cost caps (its own tests ask
    time without a budget; the bench adds slower_than_s): at the loop's cutoff 1.02 x each candidate's best plan
    under the budget, at or below that plan; raised against the largest mark's base alone on some, never lowered."""
    from test_positional_type_boundary import boundary_instance
    stats = marks_walk(*boundary_instance(100, True), 100, Counter(), cuts=(1.02,), slower=False)
    assert stats["marks_above"] == 0 and stats["marks_lowered"] == 0, stats
    assert stats["marks_compared"] > 100 and stats["marks_raised"] > 0, stats
