"""`solve`: the exact optimizer. An outer loop over the choices the cost model multiplies together (tp, dp,
micro-batch, pp), pruned by valid lower bounds and an incumbent cut; an exact MILP / CP-SAT model per candidate for
the rest (stage node types, layer counts, rented nodes, recomputation).

Why it is exact: every candidate is either solved to optimality with a cut `objective <= incumbent`, or skipped
because its lower bound (below) is no better than the incumbent, or proven infeasible by a bound (memory, budgets,
node supply). Candidates are visited in order of their bounds, so the loop stops at the first bound that reaches the
incumbent, however large the cluster is.

Lower bounds of a candidate: see bounds.py. Every candidate first gets a cheap aggregate bound; one that reaches the
front of the queue gets the sharper one (whole-layer 1F1B bound, per composition of node types, memory, deadline) and goes
back in; at the front again, its model is solved.
"""

from __future__ import annotations

import functools
import gc
import heapq
import math
import os
import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field, fields, replace
from operator import itemgetter

import numpy as np

from optsearch.bounds import (
    CandidateBound, Composition, DegreeTerms, bound_over_compositions, candidate_bound, cheap_bounds,
    RefinedTables, bounds_of_compositions, composition_bounds, degree_floors, degree_floors_meeting, degree_terms,
    interleaved_bound, interleaving_factor, refined_bound_at, refined_tables, under_cost_tables,
)
from optsearch.bounds import aggregate_bound_at, composition_count  # aggregate first (round 15, aggfirst)
from optsearch.bounds import cheap_bounds_many  # the cheap bounds of many degrees at once (round 16, lists2)
from optsearch.bounds import budget_work_lift  # time<=B rows' cheap bounds (round 19, budgetlow)
from optsearch.bounds import gather_terms  # --overlap-param-gather's copies at pp > 1 (issue 15, ppgather)
from optsearch.bounds import interleaved_ends_grid, interleaved_ends_s  # round 23, v2refined
from optsearch.middle import joint_floors_many  # the middle level: joint floors of many degrees (round 20, costmid)
from optsearch import middle as middle_module  # its module limits (Memo.middle's key)
from optsearch import bounds as _bounds  # the refined bound's module limits (Memo.kept_refined's key)
from optsearch.candidates import (
    NodeUse, SpaceOptions, context_parallel_candidates, in_search_space, dp_candidates, ep_candidates,
    interleaving_allowed, max_stages, micro_batch_candidates, node_uses, one_mode_variants, tp_candidates,
)
from optsearch.costmodel import (
    MEMORY_RESERVE_BYTES, Estimate, distributed_optimizer_off_dominated, distributed_optimizer_on, distributed_optimizer_settings, estimate, overlap_grad_reduce_on, overlap_param_gather_on, ddp_average_on, memory_capacity_bytes, stage_parameters,
    overlap_param_gather_settings, param_gather_chain_gain_s,
    state_bytes,
)
from optsearch.costmodel import expert_state_bytes_per_param, pipe_engine_of
from optsearch.costmodel import place  # a quick plan's rent without its estimate (_usd_per_hour; round 20, inflightb)
from optsearch.errors import ConsistencyError, OptsearchError, ProfileError, SpecError
from optsearch.formulation.cpsat import CpSat, ticks_per_s
from optsearch.formulation.heuristic import hint, plan_of, quick_plans
from optsearch.formulation import heuristic as _heuristic  # its PARAM_SPLIT switch (Memo.quick_plans' key)
from optsearch.formulation.linear import Backend, Lin, Solution
from optsearch.formulation.milp import PulpCbc
from optsearch.formulation.model import (
    PRICE_SCALE, Candidate, Skeleton, build, cost_rate_expr, decode, objective_to_user, skeleton, solver_memory_bytes,
)
from optsearch.formulation.model import candidate_plan  # a type sequence's rent (_quick_plans_by_rate; round 20)
from optsearch.formulation.model import candidate_distributed_optimizer  # _inflight_bounded's terms check (fixinf)
from optsearch.formulation.kinds import kinds_bound
from optsearch.formulation.positional import OutOfTime, positional_bound
from optsearch.formulation.positional import interleaved_skeleton  # v > 1 directly (round 23, park145)
from optsearch import inflight as inflight_module
from optsearch.inflight import sharpened, sharpened_many
from optsearch.plan import Plan, Stage
from optsearch.problem import Problem
from optsearch.search import BOUND_SLACK, BUDGET_REL, SearchResult, budget_violations, objective_value
from optsearch.spec.budget import Budget
from optsearch.units import SECONDS_PER_HOUR

SOLVERS = ("cbc", "cpsat")
# CP-SAT is the default: on FASOP's cluster it proves the optimum in seconds where CBC needs minutes (docs/solver.md).
DEFAULT_SOLVER = "cpsat"
INCUMBENT_REL = 1e-9  # a later candidate must beat the incumbent by this much (ties keep the earlier plan)
CHECK_REL = 1e-6


@dataclass(frozen=True, slots=True, kw_only=True)
class Progress:
    """Reported after each candidate's positional bound and after each model solve. `bound` is the bound of the
    candidate just examined: candidates are examined in bound order, so it is a lower bound on the optimum."""

    explored: int  # models solved
    total: int  # candidates left after the cheap bounds
    pruned: int  # candidates the cheap bounds removed
    incumbent: float | None
    bound: float | None
    candidate: Candidate | None
    bounded: int = 0  # candidates whose positional bound was computed


ProgressFn = Callable[[Progress], None]


def backend(name: str) -> Backend:
    if name == "cbc":
        return PulpCbc()
    if name == "cpsat":
        return CpSat()
    raise SpecError(f"--solver = {name!r}: must be one of {', '.join(SOLVERS)}")


# How far a queued candidate's bound has been sharpened (see solve).
CHEAP, REFINED, POSITIONAL = 0, 1, 2
Priced = tuple[float, Plan, Estimate]  # a plan with its objective value and estimate


@dataclass(frozen=True, slots=True)
class Bounded:
    cand: Candidate
    lower_bound: float  # objective units (USD or training seconds)
    terms: DegreeTerms | None = None
    level: int = REFINED
    own_best: Priced | None = None  # the best plan of this candidate found without a solver
    tries: int = 0  # model solves of this candidate stopped by their time slice (see solve)
    inflight: bool = False  # its in-flight-aware bound (inflight.py) is already in lower_bound
    aggregate: bool = False  # a cheap entry whose aggregate refined bound is already in lower_bound (AGGREGATE_FIRST)
    middle: bool = False  # a cheap entry whose middle floor is already in lower_bound (MIDDLE_JOINT; round 20)


BUDGET_FLOORS = True  # Memo.refined_bound under a budget walks only the compositions whose floors meet it (budgetbound)
UNDER_COST_TABLES = True  # the aggregate bound's time under a cost budget from one table per degree (budgetrows)
DEGREE_FLOORS = True  # and takes the floors of every pp of the candidate's degree at once (budgetrows)
DEGREE_FLOORS_FROM = 2  # the ask of a degree's refined bound under a budget that builds its floors (before it: one pp)
REFINED_ARRAYS = True  # Memo.refined_bound: the aggregate refined bounds of every pp of a degree at once (costbound)
REFINED_TABLES_FROM = 2  # the ask of a degree's aggregate refined bound that builds its tables (before it: scalar)
KEEP_REFINED = True  # Memo.refined_bound keeps a v = 1 candidate's bound per budget for its v > 1 siblings (round 19)
# The loop's cheap -> refined step takes a candidate's aggregate refined bound from its degree's tables before its
# per-composition bound, where that one is not yet computed; a candidate the aggregate lifts past the queue's front
# goes back in without its per-composition work (round 15, aggfirst; Memo.aggregate_first). Budgets without a cost
# limit only (under one the floors decide: BUDGET_FLOORS).
AGGREGATE_FIRST = True
AGGREGATE_FIRST_FROM = 8  # listed compositions from which it is tried (fewer: the composition bound costs little)
# An interleaved candidate (v > 1) has quick plans of its own: the heuristic's fill and split over its skeleton, whose
# patterns hold multiples of v only. The loop prices them at its in-flight step where it may still beat the incumbent
# (round 16, smalltime: GPT-3 1.3B, mixed-pool-8k, time: the optimum, tp 2, dp 32, cp 4, 8 stages of p5 at v = 4,
# 0-4-4-4-4-4-4-0, came only from that candidate's model probe at 6.3 s of CPU; its own quick plans give it in 5 ms).
# Incumbents only, never a bound.
INTERLEAVED_QUICK = True


def _kept_key(cand: Candidate, budget: Budget) -> tuple:
    """Memo.kept_refined's key: the candidate, every field of the budget that the refined bound reads (the
    objective and the four limits) and the module limits and switches its value depends on (bounds' slack and
    composition limit, the ways it is computed: audit11 found a bound kept across a patched BOUND_SLACK); the bound
    is a function of these, the memo's problem and the terms, which are the candidate's degree's (Memo.degree_terms,
    one per degree and setting)."""
    return (cand.key, budget.objective, budget.max_time_s, budget.max_cost_usd, budget.max_usd_per_hour,
            budget.max_gpus, _bounds.BOUND_SLACK, _bounds.MAX_COMPOSITIONS, _bounds.OVER_ARRAYS, REFINED_ARRAYS,
            DEGREE_FLOORS, BUDGET_FLOORS, UNDER_COST_TABLES, AGGREGATE_FIRST)


def _degree_key(cand: Candidate) -> tuple[int, ...]:
    """The candidate's degree (tp, dp, b, ep, cp, o): its key without pp and v, the key of its DegreeTerms."""
    return cand.key[:3] + cand.key[4:6] + cand.key[7:]


@dataclass(slots=True)
class Memo:
    """Work that depends on the problem and the search options but not on the budget, kept between solves of one
    problem (a what-if sweep solves the same problem under many budgets): the terms of each (tp, dp, b), each
    candidate's cheap bound, its skeleton (which keeps its positional tables), its quick plans and the plans of the
    node-type sequences its positional bounds gave, with their estimates."""

    problem: Problem
    options: SpaceOptions
    terms: dict[tuple[int, ...], DegreeTerms] = field(default_factory=dict)
    cheap: dict[tuple[int, ...], CandidateBound] = field(default_factory=dict)
    compositions: dict[tuple[int, ...], tuple[Composition, ...] | None] = field(default_factory=dict)
    skeletons: dict[tuple[int, ...], Skeleton] = field(default_factory=dict)
    quick: dict[tuple[int, ...], list[tuple[Plan, Estimate]]] = field(default_factory=dict)
    sequences: dict[tuple[tuple[int, ...], tuple[int, ...]], tuple[Plan, Estimate] | None] = field(
        default_factory=dict)
    cheap_by_pp: dict[tuple[int, ...], tuple] = field(default_factory=dict)  # (tp, dp, b, ep, cp) -> cheap_bounds
    calls: dict[tuple, float] = field(default_factory=dict)  # memoized per-layer cost-model calls (bounds._calls)
    inflight: dict[tuple[int, ...], object] = field(default_factory=dict)  # inflight.InFlightTables per candidate
    # key -> (budget, (cutoff_usd, cutoff_s), CandidateBound): in-flight bounds computed ahead (_inflight_ahead)
    inflight_ahead: dict[tuple[int, ...], tuple] = field(default_factory=dict)
    # _candidates' lists by (budget, slower_than_s, settings), the last CANDIDATE_LISTS_KEPT of them (fastpath)
    candidate_lists: dict[tuple, tuple[list["Bounded"], int]] = field(default_factory=dict)
    # (tp, dp, b, cp) -> (node_uses, whether both optimizer settings are tried): budget-free, for _build_candidates
    floored: dict = field(default_factory=dict)  # key -> (the limits, its refined bound under them by floors)
    # (with DEGREE_FLOORS: (key, limits) -> the refined bound under them); (tp, dp, b, ep, cp, o) -> degree_floors
    floors_by_degree: dict = field(default_factory=dict)
    under_by_pp: dict = field(default_factory=dict)  # (tp, dp, b, ep, cp, o) -> bounds.under_cost_tables
    uses_by_degree: dict[tuple[int, ...], tuple[tuple[NodeUse, ...], bool]] = field(default_factory=dict)
    # (tp, dp, b, ep, cp, o) -> bounds.refined_tables: the aggregate refined bounds of every pp at once (costbound),
    # or how many times the degree was asked before its tables are built (REFINED_TABLES_FROM)
    refined_by_pp: dict[tuple[int, ...], RefinedTables | int] = field(default_factory=dict)
    # Candidate.key -> the Candidate of the lists' rows (SHARED_CANDIDATES): a key's candidate is built once per memo
    # (a budget search lists the same candidates under both objectives; the part's are the whole list's)
    candidates: dict[tuple[int, ...], Candidate] = field(default_factory=dict)
    # (Candidate.key at v = 1, the budget's objective and limits) -> its refined bound (KEEP_REFINED; round 19, cheapq)
    kept_refined: dict[tuple, CandidateBound] = field(default_factory=dict)
    # (tp, dp, b, ep, cp, o, the deadline, limits) -> {v: [pp] middle.joint_floors_many} (MIDDLE_JOINT; round 20)
    middle: dict[tuple, dict] = field(default_factory=dict)
    # Candidate.key (v > 1) -> positional.interleaved_skeleton of its skeleton, keeping its positional tables (park145)
    interleaved: dict[tuple[int, ...], Skeleton] = field(default_factory=dict)
    # (degree key, v) -> [pp - 1] bounds.interleaved_ends_grid's row or None (round 23, v2refined)
    interleaved_ends: dict[tuple, list] = field(default_factory=dict)

    def degree_terms(self, tp: int, dp: int, mbs: int, uses: tuple[NodeUse, ...], ep: int = 1,
                     cp: int = 1, dist: bool | None = None) -> DegreeTerms:
        key = (tp, dp, mbs, ep, cp) if dist is None else (tp, dp, mbs, ep, cp, int(dist))
        if key not in self.terms:
            self.terms[key] = degree_terms(self.problem, tp, dp, mbs, uses, ep, cp, self.calls, dist)
        return self.terms[key]

    def cheap_bound(self, terms: DegreeTerms, cand: Candidate) -> CandidateBound:
        """The unrefined bound, which does not depend on the budget (bounds.candidate_bound); with v > 1, the v = 1
        bound relaxed by bounds.interleaved_bound."""
        if cand.key not in self.cheap:
            bound = candidate_bound(self.problem, terms, cand.pp, None, refined=False)
            self.cheap[cand.key] = interleaved_bound(bound, terms.m, cand.pp, cand.v)
        return self.cheap[cand.key]

    def cheap_bounds(self, terms: DegreeTerms, key: tuple[int, ...], pps: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """bounds.cheap_bounds of (tp, dp, b, ep, cp) = key at every pp in pps (budget-free), kept."""
        if key not in self.cheap_by_pp:
            self.cheap_by_pp[key] = cheap_bounds(self.problem, terms, pps)
        return self.cheap_by_pp[key]

    def refined_bound(self, terms: DegreeTerms, cand: Candidate, budget: Budget,
                      slower_than_s: float = 0.0) -> CandidateBound:
        """The refined bound under the budget (bounds.candidate_bound). With few node types its budget-free part, one
        bound per composition, is kept; then slower_than_s bounds each composition's time and cost by itself.
        With KEEP_REFINED, a v = 1 candidate's bound (slower_than_s = 0) is kept per budget (kept_refined): its
        interleaved siblings (v > 1, the same pp) ask for it again under the same scaled limits."""
        if cand.v > 1:  # the v = 1 bound under the budget / f_v, relaxed (interleaved_positional_bound's argument)
            factor = interleaving_factor(terms.m, cand.pp, cand.v)
            base = self.refined_bound(terms, replace(cand, v=1), _interleaved_budget(budget, factor))
            bound = interleaved_bound(base, terms.m, cand.pp, cand.v)
            if (_bounds.INTERLEAVED_UNDER_ENDS and bound.feasible and budget.max_cost_usd is not None
                    and budget.objective == "time"):
                ends = interleaved_ends_s(self.problem, self._interleaved_ends_row(terms, cand), budget)
                if ends == math.inf:
                    return CandidateBound(False)
                if ends > bound.iteration_s:
                    bound = replace(bound, iteration_s=ends)
            return bound
        if KEEP_REFINED and slower_than_s == 0.0:
            kept = _kept_key(cand, budget)
            got = self.kept_refined.get(kept)
            if got is None:
                got = self.kept_refined[kept] = self._refined_bound_v1(terms, cand, budget, 0.0)
            return got
        return self._refined_bound_v1(terms, cand, budget, slower_than_s)

    def _interleaved_ends_row(self, terms: DegreeTerms, cand: Candidate) -> tuple | None:
        """bounds.interleaved_ends_grid's row of the candidate (v > 1, pp > 1), its degree's every pp at once, kept;
        None where it does not apply (several layer kinds, v not dividing L, the aggregate level infeasible)."""
        key = (_degree_key(cand), cand.v)
        rows = self.interleaved_ends.get(key)
        if rows is None:
            most = max_stages(self.problem, self.options)
            rows = [None] * most
            # (only the pp that m is a multiple of: check_interleaving; the others have no candidate at v > 1)
            pps = np.array([p for p in range(2, most + 1) if terms.m % p == 0], dtype=np.int64)
            if len(pps):
                # the aggregate bound's all-reduce + optimizer floor at pp > 1 (_aggregate_arrays' comm, the same
                # operations; its feasibility tests are not needed: the grid is valid at every pp)
                all_params = terms.layer_params + terms.ends_params[1]
                comm = (terms.alpha_min_at(2) + terms.beta_min) * all_params / pps
                grids = interleaved_ends_grid(self.problem, terms, pps, comm, cand.v)
                if grids is not None:
                    for j, p in enumerate(pps.tolist()):
                        rows[p - 1] = grids[j]
            self.interleaved_ends[key] = rows
        return rows[cand.pp - 1] if cand.pp <= len(rows) else None

    def _refined_bound_v1(self, terms: DegreeTerms, cand: Candidate, budget: Budget,
                          slower_than_s: float) -> CandidateBound:
        """refined_bound at v = 1, computed (not kept_refined's)."""
        limits = (budget.max_time_s, budget.max_cost_usd, budget.max_usd_per_hour, slower_than_s)
        if cand.key not in self.compositions and BUDGET_FLOORS and budget.max_cost_usd is not None and DEGREE_FLOORS:
            # Under a cost budget (a deadline alone: the whole list, as before; with the degree's floors GPT-3 175B
            # and Megatron 76B cost<=D 8k went 17.6 -> 23.1 % and 11.8 -> 12.8 %, one A/B run each at load 5): the
            # floors of every composition of every pp of the candidate's degree, once (bounds.degree_floors,
            # budget-free, kept); only the compositions whose floors meet the budget are walked
            # (the same bound, bit for bit: bounds._meeting_floors), and the bound is kept for these limits.
            if (cand.key, limits) in self.floored:
                return self.floored[(cand.key, limits)]
            dkey = _degree_key(cand)
            floors = self.floors_by_degree.get(dkey)
            if floors is None or isinstance(floors, int):  # the first DEGREE_FLOORS_FROM - 1 asks: one pp alone
                asked = (floors or 0) + 1
                if asked < DEGREE_FLOORS_FROM:
                    # (a climb asks for scattered candidates, often one of a degree: its floors cost 3-5 times one
                    # pp's, and the climbs before the loop lose that time)
                    self.floors_by_degree[dkey] = asked
                    comps = composition_bounds(self.problem, terms, cand.pp, budget, slower_than_s)
                    if comps is not None:
                        bound = self.floored[(cand.key, limits)] = bound_over_compositions(
                            self.problem, comps, budget, slower_than_s)
                        return bound
                    floors = None
                else:
                    floors = self.floors_by_degree[dkey] = degree_floors(self.problem, terms,
                                                                         max_stages(self.problem, self.options))
            if floors is not None and cand.pp <= len(floors.listed) and floors.listed[cand.pp - 1]:
                comps = bounds_of_compositions(self.problem, terms, cand.pp, degree_floors_meeting(
                    self.problem, floors, cand.pp, budget, slower_than_s))
                bound = self.floored[(cand.key, limits)] = bound_over_compositions(self.problem, comps, budget,
                                                                                   slower_than_s)
                return bound
        elif (cand.key not in self.compositions and BUDGET_FLOORS and budget.max_cost_usd is not None
                and self.floored.get(cand.key, (limits,))[0] == limits):
            # Under a cost budget (where the floors rule out most compositions of the time<=B rows' front; under a
            # deadline alone they ruled out 36 of GPT-3 13B cost<=D 8k's 2,500 and only added their cost): only the
            # compositions whose floors meet it are walked (bounds._meeting_floors; the same bound, bit for bit),
            # and the bound is kept for these limits (the list is theirs). An ask of the same
            # candidate under other limits (another budget of a sweep) builds and keeps the whole list (below).
            if cand.key in self.floored:
                return self.floored[cand.key][1]
            comps = composition_bounds(self.problem, terms, cand.pp, budget, slower_than_s)
            if comps is not None:
                bound = bound_over_compositions(self.problem, comps, budget, slower_than_s)
                self.floored[cand.key] = (limits, bound)
                return bound
            self.compositions[cand.key] = None  # too many to list: budget-free
        if cand.key not in self.compositions:
            self.compositions[cand.key] = composition_bounds(self.problem, terms, cand.pp)
        comps = self.compositions[cand.key]
        if comps is None and REFINED_ARRAYS:  # too many compositions: the aggregate bound, every pp at once
            key = _degree_key(cand)
            tables = self.refined_tables(terms, cand)
            if tables is None:  # the first REFINED_TABLES_FROM - 1 asks: one pp alone
                return candidate_bound(self.problem, terms, cand.pp, budget, refined=True)
            under = None
            if UNDER_COST_TABLES and budget.max_cost_usd is not None and budget.objective == "time":
                under = self.under_by_pp.get(key)
                if under is None:
                    under = self.under_by_pp[key] = under_cost_tables(self.problem, terms, tables)
            bound = refined_bound_at(self.problem, terms, tables, cand.pp, budget, under)
        elif comps is None:
            bound = candidate_bound(self.problem, terms, cand.pp, budget, refined=True)
        else:
            bound = bound_over_compositions(self.problem, comps, budget, slower_than_s)
        return bound

    def refined_tables(self, terms: DegreeTerms, cand: Candidate) -> RefinedTables | None:
        """The refined tables of the candidate's degree (bounds.refined_tables; at every pp with AGGREGATE_FIRST),
        kept; None on the first REFINED_TABLES_FROM - 1 asks of the degree (then the caller bounds one pp alone)."""
        key = _degree_key(cand)
        tables = self.refined_by_pp.get(key)
        if isinstance(tables, RefinedTables):
            return tables
        asked = (tables or 0) + 1
        if asked < REFINED_TABLES_FROM:
            self.refined_by_pp[key] = asked
            return None
        tables = self.refined_by_pp[key] = refined_tables(self.problem, terms, max_stages(self.problem, self.options),
                                                          every_pp=AGGREGATE_FIRST)
        return tables

    def aggregate_first(self, terms: DegreeTerms, cand: Candidate, budget: Budget) -> CandidateBound | None:
        """The candidate's aggregate refined bound under the budget (bounds.aggregate_bound_at) where its refined
        bound is per composition (AGGREGATE_FIRST_FROM compositions or more) and not yet computed, the budget has no
        cost limit, and its degree's tables exist (the degree's second ask on); None elsewhere (the refined bound
        itself is then the next step). A valid lower bound, as the refined bound is; neither is above the other
        everywhere. With v > 1, the v = 1 bound under the budget / f_v, relaxed (as Memo.refined_bound)."""
        if cand.v > 1:
            factor = interleaving_factor(terms.m, cand.pp, cand.v)
            base = self.aggregate_first(terms, replace(cand, v=1), _interleaved_budget(budget, factor))
            return None if base is None else interleaved_bound(base, terms.m, cand.pp, cand.v)
        if (cand.pp == 1 or budget.max_cost_usd is not None or cand.key in self.compositions
                or composition_count(terms, cand.pp) < AGGREGATE_FIRST_FROM):
            return None
        tables = self.refined_tables(terms, cand)
        if tables is None or not tables.every_pp or not tables.listed[cand.pp - 1]:
            return None
        return aggregate_bound_at(self.problem, terms, tables, cand.pp, budget)

    def skeleton(self, cand: Candidate) -> Skeleton:
        if cand.key not in self.skeletons:
            self.skeletons[cand.key] = skeleton(self.problem, cand, self.options)
        return self.skeletons[cand.key]

    def priced(self, plan: Plan) -> Estimate | None:
        """The plan's estimate when it is in the search space, within node supply and fits in memory."""
        if not in_search_space(self.problem, plan, self.options):
            return None
        try:
            est = estimate(self.problem, plan)
        except OptsearchError:  # e.g. more nodes of a type than the cluster has
            return None
        return est if est.fits else None

    def runnable(self, plan: Plan | None) -> tuple[Plan, Estimate] | None:
        """A heuristic plan, priced; where the target runs one recomputation mode for all stages and the plan mixes
        them, the first one-mode variant that fits (candidates.one_mode_variants)."""
        for variant in one_mode_variants(plan, self.options) if plan is not None else []:
            est = self.priced(variant)
            if est is not None:
                return variant, est
        return None

    def plan_of(self, sk: Skeleton, seq: tuple[int, ...]) -> tuple[Plan, Estimate] | None:
        """The plan the heuristic makes of a node-type sequence (positional bound), priced; None when it has none."""
        if sk.cand.v > 1:  # at v = 1 only: the positional bound prices its sequences' plans there (a v > 1 skeleton's
            return None  # patterns hold multiples of v, so its splits would be Megatron's too; not tried: round 16)
        key = (sk.cand.key, seq)
        if key not in self.sequences:
            found = self.runnable(plan_of(sk, seq))
            self.sequences[key] = found
        return self.sequences[key]

    def quick_plans(self, sk: Skeleton) -> list[tuple[Plan, Estimate]]:
        """The candidate's quick plans that are in the search space and fit in memory, priced. An interleaved
        candidate's (v > 1) only with INTERLEAVED_QUICK: its skeleton's patterns hold multiples of v only
        (model.stage_patterns), so the heuristic's split honours Megatron's rule."""
        if sk.cand.v > 1 and not INTERLEAVED_QUICK:
            return []
        # at v > 1 the plans depend on heuristic.PARAM_SPLIT too (a switch only tests flip; audit8 round 16)
        key = sk.cand.key if sk.cand.v == 1 else (sk.cand.key, _heuristic.PARAM_SPLIT)
        if key not in self.quick:
            self.quick[key] = [found for plan in quick_plans(sk) if (found := self.runnable(plan))]
        return self.quick[key]


def _best_meeting(budget: Budget, plans: list[tuple[Plan, Estimate]]) -> Priced | None:
    """The best of these priced plans that meets the budget (the first on ties)."""
    best = None
    for plan, est in plans:
        if not budget_violations(plan, est, budget):
            value = objective_value(est, budget.objective)
            if best is None or value < best[0]:
                best = (value, plan, est)
    return best


def _bounded(problem: Problem, budget: Budget, terms: DegreeTerms, cand: Candidate, refined: bool,
             bound: CandidateBound | None = None, slower_than_s: float = 0.0) -> Bounded | None:
    """The candidate with its lower bound, or None when a bound proves it infeasible under the budget.
    slower_than_s: only plans slower than this are searched (see solve), so time and rent x time are bounded by it."""
    if bound is None:
        bound = candidate_bound(problem, terms, cand.pp, budget, refined=refined)
    if not bound.feasible:
        return None
    time_lb = max(problem.iterations * bound.iteration_s, slower_than_s)
    cost_lb = max(problem.iterations * bound.cost_per_iteration_usd,
                  bound.rate_usd_per_hour * slower_than_s / SECONDS_PER_HOUR)
    slack = BOUND_SLACK
    if budget.max_time_s is not None and time_lb > budget.max_time_s * slack:
        return None
    if budget.max_cost_usd is not None and cost_lb > budget.max_cost_usd * slack:
        return None
    if budget.max_usd_per_hour is not None and bound.rate_usd_per_hour > budget.max_usd_per_hour * slack:
        return None
    return Bounded(cand, cost_lb if budget.objective == "cost" else time_lb, terms, REFINED if refined else CHEAP)


def _inflight_bounded(memo: Memo, budget: Budget, item: Bounded, slower_than_s: float = 0.0,
                      cutoff: float = math.inf) -> float | None:
    """The candidate's in-flight-aware bound (inflight.py) in objective units, never below its queued bound, or None
    when it proves that no plan of the candidate meets the budget. With v > 1 it is the interleaved schedule's own
    (its in-flight chunks, sends and pipeline formula), not the v = 1 sibling's relaxed by f_v, which sat up to 25 %
    below the interleaved candidates' plans at the front of the queue (GPT-3 175B, mixed-pool-8k). cutoff: the
    incumbent's value (minimizing cost, the rent by end types is refined only as far as it decides against it;
    minimizing time, round 12, the largest whole reduce's levels likewise: inflight.whole_levels_iteration).
    item.terms must be at the candidate's distributed-optimizer setting (Memo.degree_terms(..., cand.dist)): the
    default setting's terms (on where dp x cp > 1) under --overlap-grad-reduce floor the exposed reduce at the
    all-gather, alpha_full x 2 / (g + 2) per parameter (bounds.grad_overlap_floor), which a dist = False plan does
    not pay (round 18, fixinf: 0.24 % above a plan); a mismatch raises ConsistencyError instead of a bound."""
    cand, terms = item.cand, item.terms
    if terms.distributed_optimizer is not None \
            and terms.distributed_optimizer != candidate_distributed_optimizer(memo.problem, cand):
        raise ConsistencyError(f"in-flight bound: terms at distributed optimizer {terms.distributed_optimizer} for "
                               f"candidate {cand.key} (its setting: {candidate_distributed_optimizer(memo.problem, cand)})")
    cutoffs = _inflight_cutoffs(budget, slower_than_s, cutoff)
    ahead = memo.inflight_ahead.pop(cand.key, None)
    if ahead is not None and ahead[0] is budget and ahead[1] == cutoffs:  # the value sharpened gives, bit for bit
        got = ahead[2]
    else:
        got = sharpened(memo.problem, memo.inflight, terms, cand, budget, CandidateBound(True, 0.0, 0.0, 0.0),
                        memo.calls, *cutoffs)
    if not got.feasible:
        return None
    out = _bounded(memo.problem, budget, terms, cand, True, got, slower_than_s)
    return None if out is None else max(item.lower_bound, out.lower_bound)


def _inflight_cutoffs(budget: Budget, slower_than_s: float, cutoff: float) -> tuple[float, float]:
    """sharpened's (cutoff_usd, cutoff_s) for _inflight_bounded's cutoff."""
    return (cutoff if budget.objective == "cost" else math.inf,
            cutoff if budget.objective == "time" and slower_than_s == 0.0 else math.inf)


AHEAD_KEPT = 1_024  # entries of Memo.inflight_ahead before it is emptied (one never asked again is dropped then)
AHEAD_SCAN = 2  # _inflight_ahead looks at up to this many heap entries per candidate of its batch


def _inflight_ahead(memo: Memo, budget: Budget, item: Bounded, heap: list, slower_than_s: float,
                    cutoff: float) -> None:
    """Minimizing cost, the in-flight bounds of `item` and of the next candidates of `heap` that reach the in-flight
    step (among its next AHEAD_SCAN x RENT_BATCH entries), up to inflight.RENT_BATCH in all, computed at once
    (inflight.sharpened_many: their rent walks side by side, each rent programme over all of them; round 17,
    rentbatch) and kept in Memo.inflight_ahead with the cutoffs they were computed under. The heap is left as it was
    (the entries popped are pushed back: the loop pops them in the same order), and _inflight_bounded takes a kept
    value only under the same budget and cutoffs, where it is sharpened's own value bit for bit; otherwise (a new
    incumbent meanwhile) it computes it again."""
    size = inflight_module.RENT_BATCH
    if size <= 1 or budget.objective != "cost":  # only the cost walks ask rents
        return
    cutoffs = _inflight_cutoffs(budget, slower_than_s, cutoff)
    popped, batch, keys = [], [item], {item.cand.key}
    while heap and len(batch) < size and len(popped) < AHEAD_SCAN * size:
        popped.append(heapq.heappop(heap))
        other = popped[-1][3]
        if other.level == REFINED and not other.inflight and other.cand.key not in memo.inflight_ahead \
                and other.cand.key not in keys:  # each walk on its own tables
            batch.append(other)
            keys.add(other.cand.key)
    for entry in popped:
        heapq.heappush(heap, entry)
    if len(batch) == 1:
        return
    if len(memo.inflight_ahead) >= AHEAD_KEPT:
        memo.inflight_ahead.clear()
    got = sharpened_many(memo.problem, memo.inflight, [
        (b.terms, b.cand, budget, CandidateBound(True, 0.0, 0.0, 0.0), *cutoffs) for b in batch], memo.calls)
    for b, bound in zip(batch, got):
        memo.inflight_ahead[b.cand.key] = (budget, cutoffs, bound)


QUICK_RATE_SKIP = True  # time under B: interleaved quick plans whose rent x bound breaks B are not priced (round 20)
QUICK_RATE_MARGIN = 1e-9  # such a plan's least cost must break B x (1 + BUDGET_REL) by this much more (float rounding)


def _usd_per_hour(problem: Problem, plan: Plan) -> float | None:
    """The plan's rent, USD per hour, as costmodel.estimate computes it (its placement's nodes at their prices: the
    same for every recomputation mode and every v of the same stages), or None where placing it raises."""
    try:
        nodes = place(problem, plan).nodes
        return sum(count * problem.node(name).price_usd_per_node_hour for name, count in nodes.items())
    except OptsearchError:
        return None


def _quick_within(memo: Memo, budget: Budget, sk: Skeleton, floor_s: float) -> list[tuple[Plan, Estimate]]:
    """Memo.quick_plans(sk) less plans that cannot meet the cost budget, for the loop's interleaved branch minimizing
    time under B (round 20, inflightb; QUICK_RATE_SKIP). floor_s: a lower bound on the training time of every plan
    that meets the budget of each candidate the plans and their variants belong to (the quick plans' own candidate,
    and where the caller interleaves them (_with_interleaved), each v's too: _sibling_floor).

    A plan P of those candidates that meets B (budget_violations: cost <= B x (1 + BUDGET_REL)) takes at least floor_s
    and rents r = its placement's nodes at their prices, so it costs at least r x floor_s / 3600; where that is above
    B x (1 + BUDGET_REL) (by QUICK_RATE_MARGIN more, for the roundings), P does not meet B, nor does any variant of P
    with the same stages (Memo.runnable's one-mode variants, _interleaved's), whose rent is the same. So the plans left
    out are never _best_meeting's choice, and never their variants: the incumbent the branch takes is the same, and
    only Memo.estimate calls are saved (on Megatron 39B, mixed-pool-8k, time<=B, about three of four plans the branch
    priced; none of the 996 met B). The list is not kept in Memo.quick (it is not the whole list); one already kept
    there is returned as it is."""
    key = sk.cand.key if sk.cand.v == 1 else (sk.cand.key, _heuristic.PARAM_SPLIT)
    if not QUICK_RATE_SKIP or budget.max_cost_usd is None or budget.objective != "time" or key in memo.quick or (
            sk.cand.v > 1 and not INTERLEAVED_QUICK):
        return memo.quick_plans(sk)
    limit = budget.max_cost_usd * (1 + BUDGET_REL) * (1 + QUICK_RATE_MARGIN)
    return [found for plan in _quick_plans_by_rate(memo.problem, sk, lambda rate: rate * floor_s / SECONDS_PER_HOUR
                                                   > limit) if (found := memo.runnable(plan)) is not None]


def _quick_plans_by_rate(problem: Problem, sk: Skeleton, breaks) -> list[Plan]:
    """heuristic.quick_plans(sk) less the plans of the type sequences whose rent (USD per hour; _usd_per_hour of the
    sequence's stages: the rent of every plan of those types per stage, whatever its layers, modes and v) `breaks`
    says True of, before their layers are split (heuristic.split_layers: most of the heuristic's work). The same
    loop as heuristic.quick_plans over _type_sequences, plan_of and PARAM_SPLIT (tests/test_budget_loop_round20.py
    pins that with nothing left out it gives quick_plans' list)."""
    if sk.patterns is None:
        return []
    out = []
    for seq in _heuristic._type_sequences(sk):
        stages = tuple(Stage(node_type=sk.cand.uses[g].name, num_layers=1, recompute="none") for g in seq)
        try:
            rate = _usd_per_hour(problem, candidate_plan(problem, sk.cand, stages))
        except OptsearchError:  # not expected: then no sequence is left out
            rate = None
        if rate is not None and breaks(rate):
            continue  # no plan of these types per stage meets B
        plan = plan_of(sk, seq)
        if plan is None:
            continue
        out.append(plan)
        if _heuristic.PARAM_SPLIT and sk.cand.v > 1 and (other := plan_of(sk, seq, by_params=True)) is not None \
                and other != plan:
            out.append(other)
    return out


def _sibling_floor(memo: Memo, budget: Budget, item: Bounded, sharper: float) -> float:
    """The least of the lower bounds on the training time of the plans that meet the budget of the v = 1 sibling of
    item's candidate and of each v > 1 of the space (the candidates of the sibling's quick plans and of their
    interleaved variants, _with_interleaved): item's own v at `sharper` (its in-flight bound), the others at their
    refined bounds under the budget (_bounded; inf where it proves that no plan meets the budget)."""
    least = sharper
    for v in {1, *memo.options.virtual_stages}:
        if v == item.cand.v:
            continue
        cand = replace(item.cand, v=v)
        got = _bounded(memo.problem, budget, item.terms, cand, True, memo.refined_bound(item.terms, cand, budget), 0.0)
        if got is not None:
            least = min(least, got.lower_bound)
    return least


INTERLEAVED_BUDGET_MARGIN = 1e-9  # the scaled budget is this much looser (float rounding of the product f_v x value)


def interleaved_positional_bound(sibling: Skeleton, budget: Budget, factor: float, cutoff: float = math.inf,
                                 deadline: float | None = None) -> float:
    """A lower bound on the objective of a candidate with v > 1 chunks per rank, from the positional bound of its
    v = 1 sibling (same tp, dp, b, pp) under the budget's time and cost limits divided by f_v = factor.

    Valid (bounds.interleaved_bound): every plan X of the v candidate is a plan of the sibling, the rent is the same,
    and time_v(X) >= f_v x time_1(X), so cost_v(X) >= f_v x cost_1(X). If X meets the budget at v, then
    time_1(X) <= max_time / f_v and cost_1(X) <= max_cost / f_v (the rent limit is the same), so X is a plan the
    sibling's bound under those limits counts, and objective_v(X) >= f_v x objective_1(X) >= f_v x that bound. Where
    no sibling plan meets the scaled limits the result is infinite (no plan of the v candidate meets the budget).
    Minimizing time under a cost budget, the budget-free bound let through the fast interleaved candidates whose
    plans all break the budget, and their models were solved one after another (issue 14: GPT-3 13B on
    mixed-pool-8k, --target megatron, 115 models in 60 s, all v > 1, none with a plan that meets the budget)."""
    return factor * _sibling_positional(sibling, budget, factor, cutoff, deadline).bound


def _sibling_positional(sibling: Skeleton, budget: Budget, factor: float, cutoff: float = math.inf,
                        deadline: float | None = None):
    """The v = 1 sibling's positional bound (with its sequences) under the budget / f_v, cut off at cutoff / f_v: a
    bound that reaches that prunes the v candidate, and one cut off there is still a bound (positional_bound)."""
    return positional_bound(sibling, _interleaved_budget(budget, factor), cutoff=cutoff / factor, deadline=deadline)


INTERLEAVED_DIRECT = True  # v > 1, time under a cost budget: the candidate's own positional bound (round 23, park145)


def interleaved_direct_bound(memo: Memo, cand: Candidate, budget: Budget, cutoff: float = math.inf,
                             deadline: float | None = None) -> float:
    """A lower bound on the objective of every plan of an interleaved candidate (v > 1) that meets the budget: the
    positional bound of positional.interleaved_skeleton (its own memory, m v micro-batches, compute / v, its sends
    and the wrap-around's), which bounds every plan at v directly (that function's docstring); inf: no plan meets the
    budget. Beside interleaved_positional_bound (the v = 1 sibling under the budget / f_v): that one lets every
    sibling layout through a budget 1 / f_v looser, f_v being the least time ratio at v over all layouts (every stage
    at the slowest one's time), while the cheap layouts that meet a cost budget gain far less at v, and a plan at v
    pays v times the sends and its all-reduce in full (Megatron 145B, mixed-pool-8k, time<=B: (tp 2, dp 16, pp 18,
    cp 4, v 2) 271,036 s through the sibling against 413,339 s here, the incumbent 369,707 s)."""
    if cand.key not in memo.interleaved:
        memo.interleaved[cand.key] = interleaved_skeleton(memo.skeleton(cand))
    return positional_bound(memo.interleaved[cand.key], budget, cutoff=cutoff, keep=0, deadline=deadline).bound


def _interleaved_direct_applies(memo: Memo, cand: Candidate, budget: Budget, slower_than_s: float) -> bool:
    """Where interleaved_direct_bound runs in the loop: v > 1, pattern mode, time under a cost budget, no floor on
    the time (slower_than_s), and no overlap or block recomputation in the skeleton (interleaved_skeleton's terms)."""
    if not (INTERLEAVED_DIRECT and cand.v > 1 and slower_than_s == 0.0 and budget.objective == "time"
            and budget.max_cost_usd is not None):
        return False
    sk = memo.skeleton(cand)
    return sk.most is not None and sk.block is None and sk.c.grad_overlap_share <= 0


def _interleaved_budget(budget: Budget, factor: float) -> Budget:
    """The budget a v = 1 sibling's plan meets whenever the same layout at v meets `budget` (time and cost limits
    divided by f_v = factor, loosened by INTERLEAVED_BUDGET_MARGIN; the rent and GPU limits unchanged); the
    objective is kept. See interleaved_positional_bound."""
    loose = 1.0 + INTERLEAVED_BUDGET_MARGIN
    return budget.model_copy(update={  # not validated: a scaled limit may exceed the CLI's range
        "max_time_s": None if budget.max_time_s is None else budget.max_time_s / factor * loose,
        "max_cost_usd": None if budget.max_cost_usd is None else budget.max_cost_usd / factor * loose})


CLIMB_SHARE = 0.1  # of the time left, for _neighbour_search from the seeds' plan without a budget (solve)
NEIGHBOUR_SHARE = 0.5  # of the time left after the seed search, for the first _neighbour_search (plain, then wide)
WIDE_SHARE = 0.15  # of that time left, at most, for its wide climb (_climb, wide=True), within NEIGHBOUR_SHARE
NEIGHBOUR_EVALS = 1000  # candidates whose quick plans _neighbour_search prices at most (without a time limit)


def _neighbour_search(memo: Memo, budget: Budget, bounded: list[Bounded], start: Priced,
                      time_limit_s: float | None, wide_s: float | None = None,
                      ends: dict[tuple[bool, Plan], Priced] | None = None) -> Priced:
    """A better incumbent for a budget search, by hill-climbing over candidates from the seed's plan: the quick plans
    of the neighbouring candidates (tp, b, cp and ep halved or doubled, dp halved or multiplied by 2 or 4, pp moved by
    up to 2; v = 1, where quick plans exist) are priced in order of their bounds (those bounded at the current plan's
    value or above are skipped), and the search moves to the first plan that meets the budget and beats the current
    one, until none does (or the time share, or NEIGHBOUR_EVALS candidates, are spent).

    Why: the seed (the other objective, first plan only) meets the budget but is slow (minimizing time under a cost
    budget) or dear (cost under a deadline). The plans that meet a cost budget fastest are the cheap plans spread
    over more GPUs (cost stays about the same as dp grows, time falls), which the time order reaches only after
    thousands of faster candidates that break the budget (issue 14: GPT-3 13B on mixed-pool-8k, --target megatron,
    time under a cost budget: the seed's 8.0e6 s stayed the incumbent for 60 s; from it, this search finds 52,131 s
    in about 3 s of CPU). Every plan it returns is priced by the cost model and meets the budget: an incumbent only,
    never a proof; the answer of an exhaustive search is the same. Before the neighbours, the current plan itself is
    tried on more or fewer replicas (_rescaled): that needs no quick plans, so it works for several layer kinds too.
    Under a time or cost budget a wide climb (_climb) follows from where the plain one stopped, for wide_s more
    (None: what is left of time_limit_s). ends: the climbs' ends by the plans on their paths (_climb), shared by
    the searches of one solve under one budget."""
    deadline = None if time_limit_s is None else time.perf_counter() + time_limit_s
    best = _climb(memo, budget, bounded, start, deadline, wide=False, ends=ends)
    if budget.max_cost_usd is None and budget.max_time_s is None:
        return best
    if wide_s is not None:
        deadline = time.perf_counter() + wide_s if deadline is None else min(deadline, time.perf_counter() + wide_s)
    return _climb(memo, budget, bounded, best, deadline, wide=True, ends=ends)  # from where the plain climb stopped


def _plain_then_wide(memo: Memo, budget: Budget, bounded: list[Bounded], starts: list[Priced], left: float | None,
                     ends: dict[tuple[bool, Plan], Priced | ClimbCut] | None = None,
                     first_whole: bool = False, both: bool = False, steps: bool = False,
                     plain_ends: list[Priced] | None = None) -> Priced:
    """A time-under-B search's climbs (PLAIN_CLIMBS_FIRST): the plain climb (_climb, wide=False) from every start in
    turn, then one wide climb from the best end. The plain climbs share (NEIGHBOUR_SHARE - WIDE_SHARE) x left: each gets
    what is left of it divided by the starts not yet climbed from (a climb that ends early leaves its time to the
    later ones); the wide climb gets WIDE_SHARE x left. In all NEIGHBOUR_SHARE x left, what the first start alone
    had before (each later start had a quarter of it more).

    Why (round 17, budgetb): before, the first start (the seed search's plan) climbed plainly and then wide, and each
    later start (the descent's plan) plainly and wide in a quarter of that share. On the large time<=B rows the first
    start's wide climb ran its whole share (0.7-1.1 s of CPU at a 10 s limit) for nothing on Llama-2 70B 8k, Megatron
    18B, 76B and 310B, while the later start's plain climb, which reaches the better plan (Llama-2 70B 8k: tp 2, dp 4,
    cp 8, 21 stages, and on towards the optimum's 27; 18B 3k: the optimum), was cut by its quarter share. Incumbents
    only: every plan is priced by the cost model and checked against the budget, as in _climb. left: the time left
    (None: no limit). first_whole (round 18, DESCENT_CLIMB_FIRST): the first start's climb may take the whole plain
    share; the later ones share what it leaves. both (round 19, RESHAPE_BOTH): where the first start's climb moved to
    a _reshaped variant, a second climb without the variants (its own ends) goes on from the plan it left by the
    first such move: the climb from the first start that never takes one (the moves before it are the same), right
    after the first climb, for RESHAPE_BOTH_SHARE x left (added to the plain share) and its part of what is left of
    the plain share as a later start's (the later starts share what it leaves). steps (round 19,
    DEEPER_STEPS): before the wide climb, the best plain end's _deeper_steps, for DEEPER_STEPS_SHARE x left at most;
    the wide climb starts from the better plan. plain_ends: where given, every plain climb's end is appended, with
    whether it is RESHAPE_BOTH's second climb's (or _deeper_steps' plan, where that is better: both mark a plan the
    climbs did not reach, from which _deeper_interleaved may find less than from the others, DEEPER_OTHER_END).
    That climb stops where it has made no move in RESHAPE_BOTH_PATIENCE of its time (Megatron 310B, mixed-pool-3k:
    from its fork no neighbour improves, 1.1 s of CPU to find it out)."""
    best = None
    ends_here: list[Priced] = []  # every plain climb's end (DEEPER_STEPS_ENDS)
    plain_until = None if left is None else time.perf_counter() + (NEIGHBOUR_SHARE - WIDE_SHARE) * left
    for n, begin in enumerate(starts):
        deadline = None if plain_until is None else time.perf_counter() + max(
            0.0, plain_until - time.perf_counter()) / (1 if first_whole and n == 0 else len(starts) - n)
        forks: list[Priced] = []
        got = _climb(memo, budget, bounded, begin, deadline, wide=False, ends=ends,
                     **({"forks": forks} if both and n == 0 else {}))
        if best is None or got[0] < best[0]:
            best = got
        ends_here.append(got)
        if plain_ends is not None:
            plain_ends.append((got, False))
        if forks:  # the same start's climb without the reshaped variants, from before the first one taken
            if plain_until is not None:  # its own share, beside its part of what is left of the plain share
                plain_until += RESHAPE_BOTH_SHARE * left
            deadline = None if plain_until is None else time.perf_counter() + RESHAPE_BOTH_SHARE * left + max(
                0.0, plain_until - RESHAPE_BOTH_SHARE * left - time.perf_counter()) / (len(starts) - n)
            patience = None if deadline is None else time.perf_counter() + RESHAPE_BOTH_PATIENCE * (
                deadline - time.perf_counter())  # its first move by then, or it stops there
            got = _climb(memo, budget, bounded, forks[0], patience, wide=False, reshape=False,
                         until=lambda priced: priced[0] < forks[0][0] * (1 - INCUMBENT_REL))
            if got[0] < forks[0][0] * (1 - INCUMBENT_REL):
                got = _climb(memo, budget, bounded, got, deadline, wide=False, ends=None if ends is None else {},
                             reshape=False)
            ends_here.append(got)
            if plain_ends is not None:
                plain_ends.append((got, True))
            if got[0] < best[0]:
                best = got
    if best is None:
        raise ValueError("_plain_then_wide needs a start")
    if steps:
        until = None if left is None else time.perf_counter() + DEEPER_STEPS_SHARE * left
        stepped = _deeper_steps(memo, budget, bounded, best, until)
        if SUPPLY_STEPS:  # round 23: the plain end's fuller stages on more dp, past its main type's supply
            got = _supply_steps(memo, budget, bounded, best, until)
            if got[0] < stepped[0] * (1 - INCUMBENT_REL):
                stepped = got
        for other in _other_ends(best, ends_here) if DEEPER_STEPS_ENDS else ():
            # round 20: the other plain ends' deeper pipelines too, within the same share (Megatron 145B 8k: with
            # the climbs' CPU cut, the seed's climb ends best, at dp 18, 9 stages, 373,551 s; the first climb's end,
            # dp 8, 17 stages, gives dp 6, 27 stages, 369,707 s)
            got = _deeper_steps(memo, budget, bounded, other, until)
            if got[0] < stepped[0] * (1 - INCUMBENT_REL):
                stepped = got
        if stepped is not best and plain_ends is not None:  # (marked as the second climb's: DEEPER_OTHER_END)
            plain_ends.append((stepped, True))
        best = stepped
    return _climb(memo, budget, bounded, best, None if left is None else time.perf_counter() + WIDE_SHARE * left,
                  wide=True, ends=ends)


CLIMB_TRACE: list | None = None  # diagnosis only: a list: _climb appends (CPU s, wide, kind, plan) at each move


def _climb(memo: Memo, budget: Budget, bounded: list[Bounded], start: Priced, deadline: float | None,
           wide: bool, until: Callable[[Priced], bool] | None = None,
           ends: dict[tuple[bool, Plan], Priced | ClimbCut] | None = None,
           by_key: "_LazyNeighbours | None" = None, reshape: bool | None = None,
           forks: list[Priced] | None = None) -> Priced:
    """One hill-climb of _neighbour_search, until deadline (time.perf_counter()). wide: the pipeline depth also
    halved, doubled and x 4 (_climb_depths) and each neighbour's quick plans with their interleaved variants
    (_climb_plans); a budget search runs it from where the plain climb stops (budgetrows: the wide steps cost about
    3x as much, and run from the start they left Llama-2 70B, time under B, at 1.19e6 s when its share ran out
    where the plain climb reaches 1.05e6 s). until: stop at the first plan (the start included) for which it holds
    (_budget_descent).
    ends (CLIMB_ENDS; without until, the same memo, budget and bounded at every call): a climb that ends where no
    neighbour improves records its end under (wide, plan) for every plan on its path, and a later climb that steps
    on such a plan returns that end at once. The same end it would reach: from a plan P the climb's next move is the
    first improving neighbour in bound order, where `seen` only skips keys that cannot beat P (each was priced, or
    bounded, against an earlier plan of its path, all worse than P; P's own key is skipped too), and _rescaled
    depends on P alone (round 12, timeload: on Megatron 76B and Llama-2 70B, time under B, the second climb from the
    seed search's other plan reached the first one's end and ran its wide climb again, 0.4-1.9 s of CPU that found
    nothing). A climb cut short by the deadline or NEIGHBOUR_EVALS records where it stood (ClimbCut, CLIMB_RESUME)
    for every plan on its path, and a later climb that steps on one goes on from there with the cut climb's `seen`
    and evaluations: the moves it would make alone (round 13, budgetgap: on Megatron 18B and Llama-2 70B, time
    under B, the first wide climb stopped at its share and the later starts' wide climbs began it again).
    by_key: the v = 1 candidates by key, where not bounded's (_LazyNeighbours: the whole space's, built as asked).
    reshape: minimizing time under a cost budget, whether the current plan's _reshaped variants are tried (None:
    RESHAPE_UNDER_B). forks: where given, each plan from which the climb moved to a _reshaped variant is appended
    (the plan before the move: RESHAPE_BOTH climbs on from the first without the variants)."""
    if not CLIMB_ENDS or until is not None:
        ends = None
    if _past(deadline):  # nothing priced, and not the keys below either: 0.1-0.2 s on the large pools' lists, for each
        known = None if ends is None else ends.get((wide, start[1]))  # climb past the limit (round 14, overrun)
        return known if known is not None and not isinstance(known, ClimbCut) else start
    path: list[Plan] = []  # the plans this climb stood on, recorded in ends when it ends without a better move

    def finished(end: Priced) -> Priced:
        for plan_on in path:
            ends[(wide, plan_on)] = end
        return end

    budget_search = budget.max_cost_usd is not None or budget.max_time_s is not None  # _climb_plans interleaves
    under_b = _capped_quantity(budget) == "cost"  # minimizing time under a cost budget (round 18 switches below)
    if by_key is None:  # (the views kept under B only: the other rows build it as before, round 20)
        by_key = _v1_by_key(bounded) if under_b else {item.cand.key: item for item in bounded if item.cand.v == 1}
    # minimizing time under a cost budget: every dp of the space between dp / 2 and 4 dp (_fill_dps)
    fill_dps = _v1_dps(bounded) if CLIMB_FILL_DP and _capped_quantity(budget) == "cost" else None
    # minimizing time under B, the wide climb: the neighbours' least bound over v, for the rent guess (WIDE_RENT_GUESS)
    least_v = _least_over_v(bounded) if WIDE_RENT_GUESS and wide and under_b else None
    best = start
    if until is not None and until(best):
        return best
    plan = start[1]
    at = (plan.tp, plan.dp, plan.micro_batch_size, len(plan.stages), plan.ep, plan.cp, 1, 0)
    # the keys this climb priced or whose refined bound ruled them out, each against a plan of its path: none can beat
    # a later plan of the path. Not the start's key or a _rescaled plan's (never priced): they are only skipped while
    # they are the current plan's own key (audit4: with them in `seen` a climb's moves depended on where it started,
    # and the shared ends below were not the ends a climb reaches alone)
    seen: set[tuple[int, ...]] = set()
    evals = 0

    def cut() -> Priced:
        """Stopped by the deadline or NEIGHBOUR_EVALS: where it stands, for a later climb to resume (CLIMB_RESUME)."""
        if ends is not None and CLIMB_RESUME:
            here = ClimbCut(best, at, frozenset(seen), evals, tuple(path))
            for plan_on in path:
                ends[(wide, plan_on)] = here
        return best

    while True:
        if ends is not None:
            known = ends.get((wide, best[1]))
            if isinstance(known, ClimbCut):  # an earlier climb stood here and was cut: on from where it stopped
                path.append(best[1])
                best, at, seen, evals = known.best, known.at, set(known.seen), known.evals
                path += [plan_on for plan_on in known.path if plan_on not in path]  # its record is ours from here
                if best[1] not in path:
                    path.append(best[1])
            elif known is not None:  # an earlier climb stood here: its end (see above)
                return finished(known)
            else:
                path.append(best[1])
        tp, dp, b, pp, ep, cp, _, _ = at
        moved = None
        variants = _rescaled(memo.problem, best[1])  # the current plan itself on more (or fewer) replicas
        rescaled = len(variants)
        if CLIMB_RESHAPE and (budget.objective == "cost" or (
                (RESHAPE_UNDER_B if reshape is None else reshape) and under_b)):  # and deeper on fewer
            variants += _reshaped(memo.problem, best[1])  # GPUs a stage, or shallower on more
        for n, variant in enumerate(variants):
            if deadline is not None and time.perf_counter() > deadline:
                return cut()
            own = _best_meeting(budget, [found] if (found := memo.runnable(variant)) else [])
            if own is not None and own[0] < best[0] * (1 - INCUMBENT_REL):
                moved = (own, (variant.tp, variant.dp, variant.micro_batch_size, len(variant.stages), variant.ep,
                               variant.cp, 1, 0))
                if forks is not None and n >= rescaled:
                    forks.append(best)
                break
        if moved is not None:
            best, at = moved
            if CLIMB_TRACE is not None:
                CLIMB_TRACE.append((time.process_time(), wide, "reshaped" if n >= rescaled else "rescaled", best))
            if until is not None and until(best):
                return best
            continue
        depths = _climb_depths(pp) if wide else range(pp - 2, pp + 3)
        if wide and LAYER_STEPS and under_b:  # minimizing time under a cost budget
            depths = sorted(set(depths) | set(_layer_step_depths(best[1], LAYER_STEPS_HEAD)))
        near = sorted({(t, d, bb, q, e, c, 1, 0) for t in (tp // 2, tp, 2 * tp)
                       for d in (_fill_dps(dp, fill_dps) if fill_dps else (dp // 2, dp, 2 * dp, 4 * dp))
                       for bb in (b // 2, b, 2 * b) for q in depths for e in (ep // 2, ep, 2 * ep)
                       for c in (cp // 2, cp, 2 * cp)} - seen - {at})
        order = sorted((k for k in near if k in by_key), key=lambda k: (by_key[k].lower_bound, k))
        if least_v is not None:  # WIDE_RENT_GUESS: the neighbours below the plan's value whose guess meets B,
            order = _guess_order(order, by_key, least_v, best, budget)  # in order of that guess (WIDE_GUESS_ORDER)
        for key in order:
            if (deadline is not None and time.perf_counter() > deadline) or evals >= NEIGHBOUR_EVALS:
                return cut()
            if by_key[key].lower_bound >= best[0] * (1 - INCUMBENT_REL):
                break  # this and every later neighbour are bounded at the current plan's value or above
            seen.add(key)
            if CLIMB_REFINED and _refined_at_least(memo, budget, by_key[key], best[0] * (1 - INCUMBENT_REL),
                                                   wide and budget_search):
                continue  # its refined bound (kept for the loop) says no plan it would price beats the current one
            evals += 1
            plans = (_climb_plans(memo, budget, by_key[key].cand) if wide
                     else memo.quick_plans(memo.skeleton(by_key[key].cand)))
            own = _best_meeting(budget, plans)
            if SPLIT_REPAIR and under_b and (own is None or own[0] >= best[0] * (1 - INCUMBENT_REL)):
                own = _split_repaired(memo, budget, plans, best[0] * (1 - INCUMBENT_REL), deadline) or own
            if own is not None and own[0] < best[0] * (1 - INCUMBENT_REL):
                moved = (own, key)
                break  # the first improvement, in order of the neighbours' bounds
        if moved is None:
            return best if ends is None else finished(best)
        best, at = moved
        if CLIMB_TRACE is not None:
            CLIMB_TRACE.append((time.process_time(), wide, "neighbour", best))
        if until is not None and until(best):
            return best


# Round 20 (budgetstart): time under a cost budget, the pre-loop share.
VIEWS_KEPT = True  # _v1_by_key, _v1_dps and _least_over_v kept for the last lists they were built from
_VIEWS_KEPT_MOST = 4  # lists whose views are kept (a solve's own list, its list with the off candidates, the seeds')
_views: list[tuple[list, dict]] = []  # (the list itself, its views by name): identity-keyed, most recent last


def _views_of(bounded: list[Bounded]) -> dict:
    """The derived views kept for this very list object (VIEWS_KEPT): a dict to fill, by view name. The solver never
    changes a candidate list in place (each list is built once, _candidates hands out copies and _with_off merges
    into a new one), so a view of a list object stays its view; the list is held here, so its id is not reused."""
    for held, views in _views:
        if held is bounded:
            return views
    views: dict = {}
    _views.append((bounded, views))
    del _views[:-_VIEWS_KEPT_MOST]
    return views


def _v1_by_key(bounded: list[Bounded]) -> dict[tuple[int, ...], Bounded]:
    """The list's v = 1 candidates by key (_climb's, _deeper_steps' and _deeper_interleaved's neighbours), built
    once per list (VIEWS_KEPT: 0.05 s of CPU per build on Megatron 39B's 42,525 candidates, at every climb)."""
    views = _views_of(bounded) if VIEWS_KEPT else {}
    if "by_key" not in views:
        views["by_key"] = {item.cand.key: item for item in bounded if item.cand.v == 1}
    return views["by_key"]


def _v1_dps(bounded: list[Bounded]) -> list[int]:
    """The list's v = 1 candidates' dp values, sorted (_fill_dps' choices), built once per list (VIEWS_KEPT)."""
    views = _views_of(bounded) if VIEWS_KEPT else {}
    if "dps" not in views:
        views["dps"] = sorted({item.cand.dp for item in bounded if item.cand.v == 1})
    return views["dps"]


WIDE_RENT_GUESS = True  # time under B: the wide climb skips neighbours whose guessed least cost is above B
WIDE_GUESS_NEAR = 0.01  # "above": by more than this fraction (SPLIT_NEAR's: plans this near B are repaired)


def _rent_per_gpu_s(priced: Priced) -> float:
    """A plan's rent per GPU-second: its cost over its GPUs and its training time."""
    plan, est = priced[1], priced[2]
    return est.cost_usd / (plan.tp * plan.dp * plan.cp * len(plan.stages) * est.training_time_s)


WIDE_GUESS_ORDER = True  # and prices them in order of that guess, the least first (else in bound order)


DEEPER_RENT_GUESS = True  # time under B: _deeper_interleaved skips the keys whose guessed least cost is above B


DEEPER_STEPS_ENDS = True  # time under B: _deeper_steps from every plain climb's end (v = 1), the best first
DEEPER_FROM_WIDE_START = True  # time under B: _deeper_interleaved from the wide climb's start too, where it moved


def _other_ends(best: Priced, ends: list[Priced]) -> list[Priced]:
    """The climbs' ends other than `best`'s plan, at v = 1, each plan once, the fastest first."""
    out: dict[Plan, Priced] = {}
    for end in sorted(ends, key=itemgetter(0)):
        if end[1] != best[1] and end[1].virtual_stages == 1 and end[1] not in out:
            out[end[1]] = end
    return list(out.values())


def _guessed_over(key: tuple[int, ...], least_v: dict[tuple[int, ...], float], best: Priced, budget: Budget) -> bool:
    """Whether a v = 1 key's guessed least cost (_guess_order's guess, from the plan `best`) is above B x (1 +
    WIDE_GUESS_NEAR): never a bound, it only chooses which keys _deeper_interleaved prices (DEEPER_RENT_GUESS)."""
    guess = _rent_per_gpu_s(best) * key[0] * key[1] * key[5] * key[3] * least_v.get(key, 0.0)
    return guess > budget.max_cost_usd * (1 + WIDE_GUESS_NEAR)


def _guess_order(order: list[tuple[int, ...]], by_key: dict, least_v: dict[tuple[int, ...], float], best: Priced,
                 budget: Budget) -> list[tuple[int, ...]]:
    """The wide climb's neighbours under B (WIDE_RENT_GUESS), from `order` (bound order): those whose cheap bound is
    below the current plan's value and whose guessed least cost is at most B x (1 + WIDE_GUESS_NEAR), in order of
    that guess (WIDE_GUESS_ORDER; ties by bound order), else in bound order. The guess: the key's least cheap time
    bound over the v the wide climb prices (_least_over_v) x its GPUs x the current plan's rent per GPU-second, about
    the least cost of its plans on the current plan's types; never a bound (plans on cheaper types are left out, as
    in _deeper_steps): it only chooses which neighbours the climb prices, and in which order."""
    rent = _rent_per_gpu_s(best)
    cap = budget.max_cost_usd * (1 + WIDE_GUESS_NEAR)
    below = best[0] * (1 - INCUMBENT_REL)
    kept = []
    for n, key in enumerate(order):
        if by_key[key].lower_bound >= below:
            break
        guess = rent * key[0] * key[1] * key[5] * key[3] * least_v.get(key, 0.0)
        if guess <= cap:
            kept.append((guess if WIDE_GUESS_ORDER else 0.0, n, key))
    return [key for _, _, key in sorted(kept)]


SEQUENCE_MOVES = True  # minimizing cost, an open candidate's best positional sequence with one stage moved (costbig)
SEQUENCE_MOVES_MAX = 64  # of those moved sequences, at most this many priced per candidate
SEQUENCE_MOVES_WORK = 40_000  # and at most this many over pp squared, at least one (round 21; 0: no such cap)


def _moved_sequences(seq: tuple[int, ...], most: int = SEQUENCE_MOVES_MAX) -> list[tuple[int, ...]]:
    """The node-type sequences one move away from seq: one stage taken out at position i and put back at position j
    (where its type differs from the stage at j), without repeats and without seq itself, nearest moves first
    (|i - j|, then i, then j), at most `most` of them."""
    pp = len(seq)
    out: dict[tuple[int, ...], None] = {}
    for i, j in sorted(((i, j) for i in range(pp) for j in range(pp) if seq[i] != seq[j]),
                       key=lambda ij: (abs(ij[0] - ij[1]), ij[0], ij[1])):
        moved = list(seq)
        moved.insert(j, moved.pop(i))
        key = tuple(moved)
        if key != seq and key not in out:
            out[key] = None
            if len(out) >= most:
                break
    return list(out)


def _moved_plans(memo: Memo, sk: Skeleton, seq: tuple[int, ...], deadline: float | None = None
                 ) -> list[tuple[Plan, Estimate]]:
    """The heuristic's plans (Memo.plan_of) of the sequences one move away from a positional bound's best sequence
    (_moved_sequences), priced: incumbents only, never a bound. The positional programme places the types per
    position under its own relaxation, and the plan of its best sequence can sit a few per cent above the
    candidate's optimum where the optimum holds the same stages in another order (issue 14, item 3, costbig:
    Mixtral 8x22B on mixed-pool-8k, cost, tp 2, dp 4, ep 4, pp 9: the sequence with the A100 node second gives
    $1,722,858; moved first, $1,673,243, the optimum, which the loop's model solves found only after 20 s of CPU;
    8 moves, 10 ms).
    deadline (time.perf_counter()): past it no further move is priced, and those priced so far are returned
    (round 14, overrun: on Megatron 1T, mixed-pool-8k, cost, pp 64-128, one move's plan costs 30-60 ms and the 64
    moves 2-4 s, which ran past --time-limit 10 by up to 2.5 s).
    At most SEQUENCE_MOVES_WORK // pp**2 of them (round 21): a move's plan costs about pp x 0.1-0.2 ms, and on the
    deep cost rows the 64 moves were the loop's largest part (costflight: Megatron 1T, mixed-pool-3k, cost, CPU clock
    8.8 s: 3.0 of its 6.6 s, five calls; GPT-3 175B 8k cost: 0.6 s). costflight capped them at 128 // pp; at that cap
    Megatron 310B 8k cost<=D (D = 1,011,061 s) lost the pp-25 move that gives its 3,312,008 plan (5 moves left) and
    ended at 1.56 % (70b62e1: 0.25 %, the plan coming 2 s later from a model), and at 1600 // pp (64 at pp 25) 1T 3k
    cost's plans came 0.9 s later (7.8 s of CPU) and missed the catalog's 10 s. Over pp squared (the lead, after the
    merges): pp 9 and 25 keep all 64, pp 34 34, pp 65 9, pp 129 2. On the CPU clock at 8.8 s (one run each, against
    1600 // pp): 1T 3k cost 4.01 % (its plan at 6.9 s), 175B 8k / 3k cost 0.49 %, 310B 8k cost<=D optimal, Mixtral
    8x22B 8k cost 0.01 %, 1T 8k cost optimal: the same values."""
    out = []
    most = SEQUENCE_MOVES_MAX if SEQUENCE_MOVES_WORK <= 0 else min(SEQUENCE_MOVES_MAX,
                                                                   max(1, SEQUENCE_MOVES_WORK // len(seq) ** 2))
    for moved in _moved_sequences(seq, most):
        if _past(deadline):
            break
        if (priced := memo.plan_of(sk, moved)) is not None:
            out.append(priced)
    return out


# Round 22 (plan530): minimizing time under --overlap-grad-reduce, the split of a type sequence that minimizes the
# slowest stage (heuristic.split_layers) loads the slower type's early stages with as many layers as the others, and
# their gradient all-reduce, launched after their last backward with little backward before them left to hide it, is
# the iteration's exposed reduce A. Megatron 530B, mixed-pool-3k, time, tp 4, dp 9, cp 2, pp 28: the optimum of that
# candidate (1,358,545.26 s, its model alone at 24.8 s of CPU) has one-layer A100 stages at positions 2-5 (A 0.490 s);
# the slowest-stage split of its own sequence gives 2-layer ones there (A 1.060 s, 1,372,980 s) and the quick plans'
# best was 1,367,593. REDUCE_SPLITS: the splits of a sequence under a cap X on every stage's time and a cap C on every
# stage's exposed reduce (costmodel.exposed_grad_reduce_s: stage 0 by its buckets, stage s > 0 less the backward of
# the stages before it), by a programme over the layers placed that keeps the most backward before each stage (more
# only hides more), for the least X at or above the slowest-stage split's slowest stage and the next distinct stage
# time, and C spread up to that split's A; with REDUCE_SEQUENCES the same programme also picks the type of every
# stage (its two types in their numbers), which moves the slower type's runs to where their reduce hides. Run only on
# the first REDUCE_SPLITS_MOST open candidates' best quick plans (minimizing time, v = 1), the splits ranked by a
# guess of their iteration and the best REDUCE_PRICED priced by the cost model; not under a cost budget (the time<=B
# rows, not measured). Incumbents only, never a bound.
REDUCE_SPLITS = True
REDUCE_SPLITS_X = 2  # stage-time caps tried: the slowest-stage split's and the next distinct stage times above it
REDUCE_SPLITS_C = 8  # exposed-reduce caps tried: C_k = A_split x k / REDUCE_SPLITS_C, k = 1..REDUCE_SPLITS_C


def _reduce_rows(sk: Skeleton, s: int, g: int, counts: list[int]) -> tuple[np.ndarray, ...]:
    """Per layer count of stage s on type g (arrays): its compute, the part of its all-reduce that never overlaps
    (rest), the overlapped part (whole; on stage 0 already the exposed part at its buckets over its own backward,
    costmodel.overlapped_grad_reduce_s) and its backward of one micro-batch (the model's _overlap_parts)."""
    c, pp = sk.c, sk.cand.pp
    comp = np.array([_heuristic.pattern_compute_s(sk, s, g, n) for n in counts])
    fwd = np.array([n * c.forward_layer_s[g] + (c.forward_embedding_s[g] if s == 0 else 0.0)
                    + (c.forward_head_s[g] if s == pp - 1 else 0.0) for n in counts])
    params = np.array([n * c.layer_params[0] + c.fixed_params[s] for n in counts])
    rest = c.allreduce_floor_s_per_param[g] * params + np.array(counts) * c.layer_allreduce_s(g, 0)
    whole = c.allreduce_s_per_param[g] * params * c.grad_overlap_share
    back = np.maximum(0.0, comp - fwd)
    if s == 0:
        nb = np.array([c.grad_buckets0(float(p)) for p in params], dtype=float)
        whole = np.maximum(whole / nb, whole - back * (nb - 1) / nb)
    return comp, rest, whole, back


def _split_guess(sk: Skeleton, seq: tuple[int, ...], split: tuple[int, ...]) -> float:
    """A quick guess of the iteration of seq split so, to rank the splits before pricing: 1F1B's pipeline over the
    stage times with their sends, the largest exposed reduce, the pair's tied-embedding all-reduce and the largest
    optimizer step (the cost model prices the plans)."""
    c, pp = sk.c, len(seq)
    e = _heuristic._sends(sk, seq)
    times, hidden, most_a, most_o = [], 0.0, 0.0, 0.0
    for s, (g, n) in enumerate(zip(seq, split)):
        comp, rest, whole, back = (float(v[0]) for v in _reduce_rows(sk, s, g, [n]))
        times.append(comp + (e[s - 1] if s > 0 else 0.0) + (e[s] if s < pp - 1 else 0.0))
        most_a = max(most_a, rest + (whole if s == 0 else max(0.0, whole - hidden)))
        params = n * c.layer_params[0] + c.fixed_params[s]
        most_o = max(most_o, c.optimizer_s_per_param[g] * params + n * c.layer_optimizer_s(g, 0))
        hidden += back
    emb = c.emb_inter_s[seq[0]][seq[-1]] if c.emb_inter_s else 0.0
    return (c.m - 1) * max(times) + sum(times) + most_a + emb + most_o


def _reduce_splits(sk: Skeleton, seq: tuple[int, ...], levels: list | None = None) -> list[tuple[int, ...]]:
    """Layer counts for the type sequence seq (see REDUCE_SPLITS), the distinct ones, without the slowest-stage
    split itself; [] where the candidate has no reduce overlap, several layer kinds or v > 1, or no split fits."""
    c, pp, L = sk.c, sk.cand.pp, sk.c.kind_layers[0]
    if sk.patterns is None or c.grad_overlap_share <= 0 or sk.cand.v > 1 or not c.forward_layer_s or pp < 2:
        return []
    e = _heuristic._sends(sk, seq)
    stages, expo = [], []  # per stage: (counts, time); (rest + whole (stage 0: its exposure at its buckets), backward)
    for s in range(pp):
        g = seq[s]
        sends = (e[s - 1] if s > 0 else 0.0) + (e[s] if s < pp - 1 else 0.0)
        counts = [n for n in range(L + 1) if (s, g, n) in sk.patterns]
        if not counts:
            return []
        comp, rest, whole, back = _reduce_rows(sk, s, g, counts)
        stages.append((np.array(counts, dtype=np.int64), comp + sends))
        expo.append((rest, whole, back))
    base = _heuristic._least_max_split(stages, L)
    if base is None:
        return []
    slow = max(float(t[list(n).index(k)]) for (n, t), k in zip(stages, base))
    hidden, top = 0.0, 0.0
    for s, ((n, _), (rest, whole, back), k) in enumerate(zip(stages, expo, base)):
        i = list(n).index(k)
        top = max(top, float(rest[i] + (whole[i] if s == 0 else max(0.0, whole[i] - hidden))))
        hidden += float(back[i])
    xs = sorted({float(x) for _, t in stages for x in t if x >= slow - 1e-12})[:REDUCE_SPLITS_X]
    if levels is not None:  # the caps, for _reduce_sequences
        levels[:] = [xs, [top * k / REDUCE_SPLITS_C for k in range(1, REDUCE_SPLITS_C + 1)]]
    out: dict[tuple[int, ...], None] = {}
    for x in xs:
        for k in range(1, REDUCE_SPLITS_C + 1):
            cap = top * k / REDUCE_SPLITS_C
            best = np.full(L + 1, -np.inf)  # the most backward before the next stage, by layers placed
            best[0] = 0.0
            choice = []
            for s, ((n, t), (rest, whole, back)) in enumerate(zip(stages, expo)):
                new, pick = np.full(L + 1, -np.inf), np.full(L + 1, -1, dtype=np.int64)
                for i in range(len(n)):
                    if t[i] > x or rest[i] > cap or (s == 0 and rest[i] + whole[i] > cap):
                        continue
                    w = best[:L + 1 - n[i]]
                    ok = np.isfinite(w) & (s == 0 or (rest[i] + whole[i] - w <= cap))
                    val = np.where(ok, w + back[i], -np.inf)
                    tgt = new[n[i]:]
                    better = val > tgt
                    tgt[better] = val[better]
                    pick[n[i]:][better] = n[i]
                best = new
                choice.append(pick)
            if not np.isfinite(best[L]):
                continue
            parts, left = [], L
            for s in reversed(range(pp)):
                parts.append(int(choice[s][left]))
                left -= parts[-1]
            split = tuple(reversed(parts))
            if split != base:
                out[split] = None
    return list(out)


REDUCE_SPLITS_MOST = 2  # open candidates (v = 1, time) whose sequences are split so in one solve, at most
REDUCE_PRICED = 4  # of a sequence's splits and its programme's sequences' splits, the best guessed this many priced
REDUCE_SEQUENCES = True  # and the type sequences such a programme picks (_reduce_sequences), split the same way


def _reduce_sequences(sk: Skeleton, seq: tuple[int, ...], xs: list[float], caps: list[float]
                      ) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """(type sequence, layer counts): sequences other than seq with seq's two types in seq's numbers (one-stage blocks
    only), each with its counts the programme's pick for a stage-time cap x in xs and an exposed-reduce cap in caps:
    over (stages of the first type so far, the last type, layers placed), the path with the most backward before the
    next stage, or (a second pass) the least sum of stage times, one per last type; a stage's time counts its send
    from the one before and
    the dearer of its two possible sends after. [] where seq has not two types or a block has several stages."""
    c, pp, L = sk.c, sk.cand.pp, sk.c.kind_layers[0]
    types = sorted(set(seq))
    if len(types) != 2 or any(sk.cand.uses[g].stages_per_block != 1 for g in types):
        return []
    na = seq.count(types[0])
    rows = {}  # (s, g) -> (counts, compute, rest, whole, backward)
    for s in range(pp):
        for g in types:
            counts = [n for n in range(L + 1) if (s, g, n) in sk.patterns] if (s, g) in sk.block_starts else []
            if not counts:
                continue
            comp, rest, whole, back = _reduce_rows(sk, s, g, counts)
            after = max(c.send_inter_s[g][h] for h in types) if s < pp - 1 else 0.0
            rows[(s, g)] = (counts, comp + after, rest, whole, back)
    out: dict[tuple[int, ...], None] = {}
    for x, cap, least_sum in ((x, cap, least_sum) for x in xs for cap in caps for least_sum in (False, True)):
        # per state the backward before the next stage (w) of the path kept: the one with the most w, or (least_sum)
        # the one with the least sum of stage times (key = -sum); -inf where none
        w_best = np.full((na + 1, 2, L + 1), -np.inf)  # [first-type stages so far, last type, layers placed]
        key_best = np.full_like(w_best, -np.inf)
        choice = []
        for s in range(pp):
            w_new, key_new = np.full_like(w_best, -np.inf), np.full_like(w_best, -np.inf)
            pick = np.full(w_best.shape + (2,), -1, dtype=np.int64)  # (count, the type before)
            for gi, g in enumerate(types):
                if (s, g) not in rows:
                    continue
                counts, t, rest, whole, back = rows[(s, g)]
                for pi in range(2) if s > 0 else (0,):
                    before = c.send_inter_s[types[pi]][g] if s > 0 else 0.0
                    if s > 0:
                        w_all, key_all = w_best[:, pi, :], key_best[:, pi, :]
                    else:
                        w_all = key_all = np.where(np.arange(L + 1) == 0, 0.0, -np.inf)[None, :]
                    for i, n in enumerate(counts):
                        if t[i] + before > x or rest[i] > cap or (s == 0 and rest[i] + whole[i] > cap):
                            continue
                        up = int(gi == 0)  # j -> j + up; the second type's stages s - j + 1 - up <= pp - na
                        lo = max(0, s + 1 - up - (pp - na))
                        hi = min(w_all.shape[0], na + 1 - up)
                        if lo >= hi:
                            continue
                        w, k = w_all[lo:hi, :L + 1 - n], key_all[lo:hi, :L + 1 - n]
                        ok = np.isfinite(w) & (s == 0 or (rest[i] + whole[i] - w <= cap))
                        val = np.where(ok, k - (t[i] + before) if least_sum else w + back[i], -np.inf)
                        tgt = key_new[lo + up:hi + up, gi, n:]
                        better = val > tgt
                        tgt[better] = val[better]
                        w_new[lo + up:hi + up, gi, n:][better] = (w + back[i])[better]
                        pick[lo + up:hi + up, gi, n:][better] = (n, pi)
            w_best, key_best = w_new, key_new
            choice.append(pick)
        for gi in range(2):  # a sequence for each last type
            if not np.isfinite(key_best[na, gi, L]):
                continue
            j, left, got, split = na, L, [], []
            for s in reversed(range(pp)):
                n, pi = (int(v) for v in choice[s][j, gi, left])
                got.append(types[gi])
                split.append(n)
                j, left = j - (gi == 0), left - n
                gi = pi
            out[(tuple(reversed(got)), tuple(reversed(split)))] = None
    return [qs for qs in out if qs[0] != seq]


def _reduce_split_plans(memo: Memo, sk: Skeleton, seqs, deadline: float | None = None) -> list[tuple[Plan, Estimate]]:
    """For each type sequence in seqs: its _reduce_splits and (REDUCE_SEQUENCES) _reduce_sequences at its caps,
    ranked by _split_guess (on Megatron 530B 3k pp 28 the cost model's iteration, to the last digit, on the 16 I
    compared), the best REDUCE_PRICED of them priced (Memo.runnable); none past the deadline. Incumbents only.
    Cost (530B 3k pp 28, one sequence, CPU): 0.28 s, most of it the programmes (2 x 8 caps; 2 x 2 x 8 passes)."""
    out, seqs = [], list(dict.fromkeys(seqs))
    for seq in seqs:
        levels: list = []
        work = [(seq, split) for split in ([] if _past(deadline) else _reduce_splits(sk, seq, levels))]
        if REDUCE_SEQUENCES and levels and not _past(deadline):
            work += [qs for qs in _reduce_sequences(sk, seq, *levels) if qs[0] not in seqs]
        work.sort(key=lambda qs: _split_guess(sk, *qs))
        for q, split in work[:REDUCE_PRICED]:
            if _past(deadline):
                break
            stages = tuple(Stage(node_type=sk.cand.uses[g].name, num_layers=n,
                                 recompute=sk.c.modes[sk.patterns[(s, g, n)]])
                           for s, (g, n) in enumerate(zip(q, split)))
            if (priced := memo.runnable(candidate_plan(memo.problem, sk.cand, stages))) is not None:
                out.append(priced)
    return out


HALF_DP_PLANS = True  # minimizing cost, a new loop incumbent's candidate at half its dp: quick plans (round 22)
HALF_DP_DEPTHS = 2  # of the half-dp candidates at pp - this .. pp + this


def _half_dp_plans(memo: Memo, budget: Budget, bounded: list[Bounded], cand: Candidate) -> Priced | None:
    """The best quick plan, meeting the budget, of the listed v = 1 candidates with the same tp, b, ep, cp and
    optimizer setting as cand, half its dp and pp within HALF_DP_DEPTHS of its own; None where none (odd dp, none
    listed). Incumbents only (round 22, quick1t): half the GPUs a stage may let one node type hold every stage, a
    plan the type mixes of cand's own positional sequences never are. Megatron 1T, mixed-pool-3k, cost: the loop's
    plans at 6.8-7.6 s of CPU are tp 4, dp 2, cp 2, 65-69 stages of two node types ($15.71M-15.74M); the best plan
    known, $15,486,753, is tp 4, dp 1, cp 2, 67 stages all on p5.48xlarge, a quick plan (8 ms) of a candidate whose
    cheap and refined bounds put it behind the deep two-node front (reached at 33-36 s)."""
    if cand.dp % 2:
        return None
    key = cand.key
    depths = range(key[3] - HALF_DP_DEPTHS, key[3] + HALF_DP_DEPTHS + 1)
    return _best_listed(memo, budget, bounded, [(key[0], key[1] // 2, key[2], pp) + key[4:] for pp in depths])


def _best_listed(memo: Memo, budget: Budget, bounded: list[Bounded], keys: list[tuple[int, ...]]) -> Priced | None:
    """The best quick plan, meeting the budget, of the listed v = 1 candidates with these keys (those not listed are
    skipped); None where none meets it."""
    by_key = _v1_by_key(bounded)
    best = None
    for key in keys:
        item = by_key.get(key)
        if item is None:
            continue
        own = _best_meeting(budget, memo.quick_plans(memo.skeleton(item.cand)))
        if own is not None and (best is None or own[0] < best[0]):
            best = own
    return best


DEPTH_PLANS = True  # cost under a deadline, a new loop incumbent's candidate at the depths beside it: quick plans
DEPTH_PLANS_NEAR = 2  # of the same degrees at pp - this .. pp + this (round 24)


def _depth_plans(memo: Memo, budget: Budget, bounded: list[Bounded], cand: Candidate) -> Priced | None:
    """The best quick plan, meeting the budget, of the listed v = 1 candidates with cand's tp, dp, b, ep, cp and
    optimizer setting at pp within DEPTH_PLANS_NEAR of its own (not its own); None where none is listed or meets it.

    Why (round 24, loopB): minimizing cost under a deadline, the loop's order is its bounds', and a candidate's quick
    plans come when it reaches the front; the depths beside a new incumbent's are often as good and their plans a few
    ms away. Megatron 1T, mixed-pool-8k, D = 2,882,801 s: the loop's incumbent at 3.3 s of CPU is the quick plan of
    tp 4, dp 6, cp 2, 45 stages ($16,344,986); the 46-stage candidate's quick plan, $16,107,791 (40 p5 stages of 3
    layers, 4 p4d stages of 1: the row's optimum), came only at 7.2 s, and with it the parked 45-stage candidate's
    model had the cutoff that closes it. Incumbents only: every plan is a listed candidate's quick plan, priced by the
    cost model and checked against the budget."""
    key = cand.key
    depths = [pp for pp in range(key[3] - DEPTH_PLANS_NEAR, key[3] + DEPTH_PLANS_NEAR + 1) if pp != key[3]]
    return _best_listed(memo, budget, bounded, [key[:3] + (pp,) + key[4:] for pp in depths])


def _past(deadline: float | None) -> bool:
    """Whether the deadline (time.perf_counter()) has passed; never without one."""
    return deadline is not None and time.perf_counter() > deadline

CLIMB_ENDS = True  # _climb returns an earlier climb's end where it steps on that climb's path (timeload)
CLIMB_RESUME = True  # and resumes an earlier climb cut by its deadline where it steps on that one's path (budgetgap)


@dataclass(frozen=True, slots=True)
class ClimbCut:
    """Where a climb stopped at its deadline or NEIGHBOUR_EVALS (CLIMB_RESUME): its current plan, that plan's
    candidate key (`at`), the keys it had priced or bounded out (`seen`: none can beat the plan) and its evaluations
    so far. A later climb
    (same memo, budget, bounded and width) that steps on a plan of its path goes on from here: the moves it would
    make alone, without pricing again what the cut climb priced. `path`: the plans it is recorded under; the climb
    that resumes it records its own end (or cut) under them too (round 14: they kept the old record, and a third
    climb stepping on one of them resumed it and priced again what the second had priced, to the same end).
    """

    best: tuple
    at: tuple[int, ...]
    seen: frozenset
    evals: int
    path: tuple = ()


CLIMB_FILL_DP = True  # _climb under a cost budget (time the objective) moves dp to any of the space's values (timebig)


def _fill_dps(dp: int, dps: list[int]) -> list[int]:
    """The data-parallel sizes _climb tries from dp minimizing time under a cost budget: dp / 2, 2 dp and 4 dp, and
    every dp of the space's candidates (dps, sorted) between dp / 2 and 4 dp. A plan that meets a cost budget fastest
    spends the budget: its GPUs are as many as the budget pays for, and the global batch allows dp only at its
    divisors, so the powers of 2 from the start's dp step over it (issue 14, round 11: Megatron 76B on
    mixed-pool-3k, B = $896,752, global batch 1,792 = 2^8 x 7: the climb stopped at dp 16, 10 stages, 640 GPUs,
    404,950 s; the optimum is dp 14, 16 stages, 896 GPUs, 291,985 s). Incumbents only."""
    return sorted({dp // 2, dp, 2 * dp, 4 * dp} | {d for d in dps if dp // 2 <= d <= 4 * dp})


DEEPER_INTERLEAVED = True  # after the climbs under a cost budget, the interleavable deeper pipelines (timeload)
DEEPER_SHARE = 0.2  # of the time left, at most, for them (solve)
DEEPER_RESHAPED = True  # and then the climbs' plan's GPUs in deeper interleavable pipelines of any shape (budgetgap)


def _interleavable_depths(pp: int, m: int) -> list[int]:
    """The pipeline depths q in [pp, 2 pp], q > 1, that divide m micro-batches: where Megatron-LM can interleave q
    stages (candidates.interleaving_allowed needs m a multiple of pp)."""
    return [q for q in range(max(pp, 2), 2 * pp + 1) if m % q == 0]


def _least_over_v(bounded: list[Bounded]) -> dict[tuple[int, ...], float]:
    """By v = 1 key: the least cheap bound of the candidates whose plans _climb_plans prices for that key, a lower
    bound on each of them (_deeper_interleaved's order and stop): the key's own and its v > 1 siblings'. An off or
    gather key's (o = 1, 2) interleaved variants are plans of the default key at v > 1 (_interleaved drops the gather
    and the grad overlap; without that overlap the optimizer off is never faster nor smaller than on,
    costmodel.distributed_optimizer_settings, which is why off candidates exist at v = 1 only): the default v > 1
    candidates' bounds bound them too (audit5: an off key's v = 2 plan at 20.835 s lay below its v = 1 bound, 21.649 s,
    which the step had read as that key's least)."""
    views = _views_of(bounded) if VIEWS_KEPT else {}  # built once per list (round 20: 0.1 s on Megatron 39B's)
    if "least_over_v" in views:
        return views["least_over_v"]
    least: dict[tuple[int, ...], float] = {}
    for item in bounded:
        key = item.cand.key
        for k in [key[:6] + (1,) + key[7:]] + ([key[:6] + (1, o) for o in (1, 2)] if key[6] > 1 and key[7] == 0
                                               else []):
            least[k] = min(least.get(k, math.inf), item.lower_bound)
    views["least_over_v"] = least
    return least


def _deeper_interleaved(memo: Memo, budget: Budget, bounded: list[Bounded], start: Priced,
                        deadline: float | None) -> Priced:
    """From the climbs' plan minimizing time under a cost budget: the same tp, cp, ep and micro-batch on each dp of
    _fill_dps and each pipeline as deep or deeper that can interleave there (_interleavable_depths of m = global batch /
    (dp b)), each such candidate's quick plans with their interleaved variants (_climb_plans) priced, the best that
    meets the budget kept. A candidate whose refined bounds at every v (_refined_at_least, interleaved) reach the
    current plan's value is skipped, as in _climb.

    Why (issue 14, item 3, round 12): the plan that meets a cost budget fastest spends it on as many GPUs as it
    pays for, and a deeper pipeline pays for more GPUs only where interleaving halves its bubble, which Megatron-LM
    allows only where pp divides m. No single step of the climbs reaches such a plan (Megatron 76B, mixed-pool-3k,
    B = $896,480: the climbs stop at tp 1, dp 16, cp 4, 10 stages, v = 1, 404,950 s; the optimum is dp 14, 16
    stages, v = 2, 291,985 s, whose v = 1 layout breaks B). Widening every climb step with these depths found it
    but took the loop's time (timebig); here they are priced once, from the climbs' end, a few dozen candidates at
    most. Incumbents only: every plan is priced by the cost model and checked against the budget.

    Then (DEEPER_RESHAPED) the climbs' plan's GPUs, tp x dp x cp x pp of them, in every deeper pipeline of the space
    that can interleave, of any tp, dp, b, ep and cp: the same rent in a pipeline whose bubble interleaving shrinks,
    so about the same cost in less time (round 13, budgetgap: Mixtral 8x7B, mixed-pool-8k, B = $798,439: the climbs
    stop at tp 4, dp 64, b 4, one stage, ep 8, 882,845 s; the optimum is the same 256 GPUs as tp 2, dp 16, b 1,
    8 stages, ep 4, v = 4, 794,319 s, which the loop found only at 10-11 s of CPU, so that a 10 s row got either).
    In order of their least cheap bound over the v of the space (that of each (tp, dp, b, pp) at each v, a lower
    bound on every plan the step prices), up to the first that reaches the current plan's value, within the same
    deadline, each skipped where its refined bounds rule it out."""
    plan = start[1]
    if not DEEPER_INTERLEAVED or _capped_quantity(budget) != "cost" or plan.virtual_stages != 1 or not any(
            v > 1 for v in memo.options.virtual_stages) or _past(deadline):  # (past it: nothing, round 14)
        return start
    by_key = _v1_by_key(bounded)
    tp, b, pp, ep, cp = plan.tp, plan.micro_batch_size, len(plan.stages), plan.ep, plan.cp
    batch = memo.problem.job.global_batch_size
    keys = [(tp, d, b, q, ep, cp, 1, 0) for d in _fill_dps(plan.dp, _v1_dps(bounded))
            if d >= 1 and batch % (d * b) == 0 for q in _interleavable_depths(pp, batch // (d * b))]
    best = start
    keys = sorted({k for k in keys if k in by_key}, key=lambda k: (by_key[k].lower_bound, k))
    least: dict[tuple[int, ...], float] = {}  # a reshaped key's least cheap bound over its v (0: price it)
    if DEEPER_RESHAPED:  # then the same GPUs in any deeper pipeline that can interleave (any tp, dp, b, ep, cp)
        gpus, first = tp * plan.dp * cp * pp, set(keys)
        for k, bound in _least_over_v(bounded).items():
            if (k in by_key and k[0] * k[1] * k[5] * k[3] == gpus and k[3] > pp and k not in first
                    and batch % (k[1] * k[2]) == 0 and (batch // (k[1] * k[2])) % k[3] == 0):
                least[k] = bound
        keys += sorted(least, key=lambda k: (least[k], k))
    for key in keys:
        if deadline is not None and time.perf_counter() > deadline:
            break
        if least.get(key, 0.0) >= best[0] * (1 - INCUMBENT_REL):
            break  # the reshaped keys come last, in order of these bounds: none of the rest beats the plan
        if DEEPER_RENT_GUESS and _guessed_over(key, _least_over_v(bounded), best, budget):
            continue  # (round 20: a guess, WIDE_RENT_GUESS's)
        if _refined_at_least(memo, budget, by_key[key], best[0] * (1 - INCUMBENT_REL), True):
            continue
        own = _best_meeting(budget, _climb_plans(memo, budget, by_key[key].cand))
        if own is not None and own[0] < best[0] * (1 - INCUMBENT_REL):
            best = own
    return best


CLIMB_INFLIGHT = True  # and, for the wide climb's v > 1 candidates, their in-flight bound (costside)
CLIMB_REFINED = True  # _climb skips a neighbour whose refined bound reaches the current plan's value (costside)


def _refined_at_least(memo: Memo, budget: Budget, item: Bounded, value: float, interleaved: bool = False) -> bool:
    """Whether the candidate's refined bound under the budget (Memo.refined_bound, _bounded: the loop's own level
    above the cheap one) is at least `value`, or proves that no plan of it meets the budget: then no plan of the
    candidate beats a plan of that value, and _climb need not price its quick plans (3-10 ms each, against about
    1 ms for the bound, whose compositions the loop reuses). interleaved: the plans priced include the quick plans'
    interleaved variants (_climb_plans in a budget search's wide climb), plans of the same (tp, dp, b, pp) at each
    v > 1 of the space: each v candidate must be ruled out too, by its refined bound (the v = 1 bound under the
    budget / f_v, times f_v) or else its own in-flight bound (CLIMB_INFLIGHT; the tables are kept for the loop).
    Every bound read is one the loop takes (audited in tests/test_audit_dist_bounds.py). Used for incumbents only:
    skipping a neighbour never changes a bound or an answer, only which plans the climb prices."""
    if item.terms is None:
        return False
    vs = [1] + ([v for v in memo.options.virtual_stages if v > 1] if interleaved else [])
    for v in vs:
        cand = item.cand if v == 1 else replace(item.cand, v=v)
        sharper = _bounded(memo.problem, budget, item.terms, cand, True,
                           memo.refined_bound(item.terms, cand, budget), 0.0)
        if sharper is not None and sharper.lower_bound < value and v > 1 and CLIMB_INFLIGHT:
            # the v candidate's own in-flight bound (its tables kept in Memo.inflight for the loop), cut at the
            # plan's value as the loop cuts at the incumbent's: `value` is a plan's x (1 - INCUMBENT_REL) at every
            # caller, and a value at or above inflight's cut (BUDGET_CUTOFF) lies just below the cut (audit12)
            got = _inflight_bounded(memo, budget, sharper, 0.0, value / (1 - INCUMBENT_REL))
            sharper = None if got is None else replace(sharper, lower_bound=got)
        if sharper is not None and sharper.lower_bound < value:
            return False
    return True


def _climb_depths(pp: int) -> list[int]:
    """The pipeline depths _neighbour_search tries from pp: pp - 2 to pp + 2, and pp halved, doubled and x 4 (with
    dp x 2, / 2 or / 4, the same GPUs in a deeper or shallower pipeline). Without the jumps the climb under a cost
    budget stopped at one stage (GPT-2 XL, mixed-pool-8k, time under B = $51,908: tp 1, dp 32, cp 4, one stage,
    86,429 s; the optimum has 4 stages at dp 8, cp 8: 57,205 s)."""
    return sorted(set(range(pp - 2, pp + 3)) | {pp // 2, 2 * pp, 4 * pp})


LAYER_STEPS = True  # time under B: the wide climb also tries the depths where the largest stage gains or loses a layer


def _layer_step_depths(plan: Plan, head: bool = False) -> list[int]:
    """The pipeline depths at which a plan's largest stage count (k layers) changes by one: ceil(L / (k - 1)), the
    least depth whose stages can all hold at most k - 1 of the plan's L layers, and ceil(L / (k + 1)), the least that
    needs k + 1 (the wide climb's extra depths under a budget, LAYER_STEPS).

    Why (round 17, budgetb): a plan's iteration follows its slowest stage, which changes in steps of one layer. Between
    the steps a deeper pipeline rents more GPUs for the same slowest stage: dearer and no faster. On Llama-2 70B
    (80 layers), mixed-pool-8k, time under B = $5.65M, the climbs stop at tp 2, dp 4, cp 8, 21 stages of at most 4
    layers (1,220,882 s): 22-26 stages still hold 4 layers somewhere and break B; the optimum is 27 stages of at most
    3 (943,650 s, the same candidate's quick plan), which neither pp +- 2 nor the wide climb's x 2 / 2 reach; the loop
    found it 4 s of CPU after it started. Incumbents only: the depths only choose which candidates' quick plans the
    climb prices."""
    total = sum(stage.num_layers for stage in plan.stages)
    most = max(stage.num_layers for stage in plan.stages)
    out = [-(-total // (most + 1))]
    if most > 1:
        out.append(-(-total // (most - 1)))
    if head:  # LAYER_STEPS_HEAD: each of those depths with one stage more, for the ends' extra work (round 18)
        out += [depth + 1 for depth in out]
    return out


DEEPER_STEPS = True  # time under B: before the wide climb, the plain end's deeper pipelines, two or more layer steps
DEEPER_STEPS_DP = 2  # on dp up to this many times the plan's (the cost guess below drops the dear ones)
DEEPER_STEPS_SHARE = 0.1  # of the time left before the climbs, at most, for them (_plain_then_wide)


def _deeper_step_depths(plan: Plan) -> list[int]:
    """The pipeline depths deeper than the plan's at which its largest stage count (k layers) falls by two or more:
    ceil(L / j) for j = 1 .. k - 2, each also with one stage more (a stage for the ends' work); the one-layer step
    is LAYER_STEPS's."""
    total = sum(stage.num_layers for stage in plan.stages)
    most = max(stage.num_layers for stage in plan.stages)
    depths = {q for j in range(1, most - 1) for q in (-(-total // j), -(-total // j) + 1)}
    return sorted(q for q in depths if q > len(plan.stages))


def _deeper_steps(memo: Memo, budget: Budget, bounded: list[Bounded], start: Priced,
                  deadline: float | None) -> Priced:
    """Minimizing time under a cost budget, from a plain climb's end at v = 1: the same tp, b, ep and cp on each dp of
    _fill_dps up to DEEPER_STEPS_DP times the plan's, at each depth of _deeper_step_depths, each such candidate's
    quick plans priced, each skipped where its cheap or refined bound (_refined_at_least) reaches the current plan's
    value; then (SPLIT_REPAIR) the candidates whose plans hold one at most SPLIT_NEAR above B, the fastest such plan
    first, each through _split_repaired (as in _climb; after all keys, since one repair costs as much as many
    candidates' quick plans: 0.4 s of CPU on a 27-stage plan of Megatron 145B); the best that meets the budget is
    kept. Only the keys whose cheap bound on time x GPUs x the plan's rent per GPU-second is within SPLIT_NEAR of B
    are tried, in order of their cheap bounds (a guess at their least cost on the plan's types, not a bound: plans on
    cheaper types are left out; in bound order alone the deepest pipelines on the most GPUs came first, 0.1-0.3 s of
    CPU each on Megatron 145B, and broke B; on rows where no key gives a plan, the step took 0.3-0.7 s of the loop's).

    Why (round 19, budgetinc3): a plan's iteration follows its slowest stage, and where the stages are many and light
    a deeper pipeline can be faster and cheaper at once; the plans between (one layer fewer a stage) may break B, so
    no climb step reaches it. Megatron 145B (80 layers), mixed-pool-3k, B = $1,589,379: the climbs stop at tp 1,
    dp 8, cp 4, 17 stages of at most 5 layers (852,529 s, $1,583,279); 20 or 21 stages of 4 break B ($1,631,957,
    $1,594,561); the optimum is the same degrees in 27 stages of 3 (3 x 26, 2: 536,007 s, $1,581,006), which the
    loop found at 20 s of CPU. On mixed-pool-8k the same from tp 2, dp 8, 17 stages to dp 6, 27 stages (369,707 s).
    Incumbents only: every plan is priced by the cost model and checked against the budget."""
    plan = start[1]
    if _capped_quantity(budget) != "cost" or plan.virtual_stages != 1 or _past(deadline):
        return start
    by_key = _v1_by_key(bounded)
    tp, b, ep, cp = plan.tp, plan.micro_batch_size, plan.ep, plan.cp
    dps = [d for d in _fill_dps(plan.dp, _v1_dps(bounded)) if 1 <= d <= DEEPER_STEPS_DP * plan.dp]
    # the plan's rent per GPU-second: a key's cheap bound on time x its GPUs x that rent is about the least cost of
    # its plans on the plan's types (an order only, never a bound)
    rent = start[2].cost_usd / (tp * plan.dp * cp * len(plan.stages) * start[2].training_time_s)
    keys = sorted((k for k in {(tp, d, b, q, ep, cp, 1, 0) for d in dps for q in _deeper_step_depths(plan)}
                   if k in by_key and rent * k[0] * k[1] * k[5] * k[3] * by_key[k].lower_bound
                   <= budget.max_cost_usd * (1 + SPLIT_NEAR)), key=lambda k: (by_key[k].lower_bound, k))
    best = start
    repair: list[tuple[float, tuple[int, ...], list[tuple[Plan, Estimate]]]] = []  # (fastest near plan, key, plans)
    for key in keys:
        if _past(deadline):
            break
        if by_key[key].lower_bound >= best[0] * (1 - INCUMBENT_REL):
            continue
        if CLIMB_REFINED and _refined_at_least(memo, budget, by_key[key], best[0] * (1 - INCUMBENT_REL)):
            continue
        plans = memo.quick_plans(memo.skeleton(by_key[key].cand))
        own = _best_meeting(budget, plans)
        if own is not None and own[0] < best[0] * (1 - INCUMBENT_REL):
            best = own
        near = [est.training_time_s for _, est in plans if est.cost_usd <= budget.max_cost_usd * (1 + SPLIT_NEAR)]
        if SPLIT_REPAIR and near:
            repair.append((min(near), key, plans))
    for fastest, _, plans in sorted(repair, key=lambda r: r[:2]):  # then the repairs, the fastest near plan first
        if _past(deadline) or fastest >= best[0] * (1 - INCUMBENT_REL):
            break
        own = _split_repaired(memo, budget, plans, best[0] * (1 - INCUMBENT_REL), deadline)
        if own is not None and own[0] < best[0] * (1 - INCUMBENT_REL):
            best = own
    return best


# Round 23 (flight1t): time under a cost budget, fuller stages where the plan's type runs out of nodes.
SUPPLY_STEPS = True  # time under B, with DEEPER_STEPS: the plain end's shallower pipelines on more dp (past supply)
SUPPLY_SPAN = 6  # depths tried: the one-layer-fuller step's depth ceil(L / (k + 1)) and up to this many stages more
SUPPLY_DP = 2  # on every dp of the space above the plan's, up to this many times it


def _supply_step_keys(problem: Problem, plan: Plan, dps: list[int]) -> list[tuple[int, ...]]:
    """The candidates _supply_steps prices from a v = 1 plan: the same tp, b, ep and cp on each dp of dps above the
    plan's and at most SUPPLY_DP times it, at the depths ceil(L / (k + 1)) .. that + SUPPLY_SPAN (k: the plan's largest
    stage count; no deeper than the plan), only where the plan's main type (the one holding the most layers) cannot
    hold ceil(L / (k + 1)) stages at that dp within its node supply (else the wide climb's LAYER_STEPS depth is one
    such plan already). An order of guesses only: every plan is priced and checked."""
    total = sum(stage.num_layers for stage in plan.stages)
    most = max(stage.num_layers for stage in plan.stages)
    held: dict[str, int] = {}
    for stage in plan.stages:
        held[stage.node_type] = held.get(stage.node_type, 0) + stage.num_layers
    main = problem.node(max(held, key=lambda name: (held[name], name)))
    fuller = -(-total // (most + 1))
    keys = []
    for d in dps:
        if not plan.dp < d <= SUPPLY_DP * plan.dp:
            continue
        nodes = -(-plan.tp * d * plan.cp // main.gpus_per_node)  # a stage's nodes at dp d
        if fuller * nodes <= main.num_nodes_available:
            continue
        keys += [(plan.tp, d, plan.micro_batch_size, q, plan.ep, plan.cp, 1, 0)
                 for q in range(fuller, min(fuller + SUPPLY_SPAN, len(plan.stages) - 1) + 1)]
    return keys


def _supply_steps(memo: Memo, budget: Budget, bounded: list[Bounded], start: Priced,
                  deadline: float | None) -> Priced:
    """Minimizing time under a cost budget, from a plain climb's end at v = 1: the candidates of _supply_step_keys,
    in order of their cheap bounds, each skipped where that bound reaches the best plan's value so far, each one's
    quick plans priced; the best that meets the budget is kept (not the first: the depths past the supply step differ
    by how many stages the slower types take, and the best is rarely the first that improves).

    Why (round 23, flight1t): a plan that spends a fast type's whole supply gains speed on more dp only with fuller
    stages (k + 1 layers, on fewer of them), and then the fast type holds fewer stages than ceil(L / (k + 1)): the rest
    go on a slower type, one layer or two each, at a few stages more. LAYER_STEPS tries ceil(L / (k + 1)) alone, where
    no plan of the fast type fits its supply. Megatron 1T (128 layers), mixed-pool-3k, B = $16,072,042: the climbs
    stop at the cheapest plan, tp 4, dp 2, cp 2, 64 H100 stages of 2 (128 p5 nodes, all of them) and the head on an
    A100 stage, 4,522,951 s ($15,893,781); at dp 3 (3 nodes a stage) 42 H100 stages fit: 43 and 44 stages give no plan,
    45 4,555,740 s, 46 4,388,136 s, 47 4,368,900 s ($15,630,841: 42 H100 stages of 2-3 layers, 5 A100 stages of 1),
    which the loop found at 31 s of CPU. Incumbents only: every plan is priced by the cost model and checked."""
    plan = start[1]
    if _capped_quantity(budget) != "cost" or plan.virtual_stages != 1 or _past(deadline):
        return start
    by_key = _v1_by_key(bounded)
    keys = sorted((k for k in _supply_step_keys(memo.problem, plan, _v1_dps(bounded)) if k in by_key),
                  key=lambda k: (by_key[k].lower_bound, k))
    best = start
    for key in keys:
        if _past(deadline):
            break
        if by_key[key].lower_bound >= best[0] * (1 - INCUMBENT_REL):
            continue
        own = _best_meeting(budget, memo.quick_plans(memo.skeleton(by_key[key].cand)))
        if own is not None and own[0] < best[0] * (1 - INCUMBENT_REL):
            best = own
    return best


# Round 18 (budgetb2): time under a cost budget, the climbs' plans at the ends of the pipeline.
LAYER_STEPS_HEAD = False  # off: more wide-climb neighbours, no row moved by it (Llama-2 70B 8k wide climb at its deadline); _layer_step_depths also gives each layer-step depth plus one (a stage for the ends' work)
RESHAPE_UNDER_B = True  # _climb tries _reshaped (twice / half as deep on the same GPUs) minimizing time under B too
SPLIT_REPAIR = True  # _climb: a neighbour's faster plan a hair over B, its layers moved at the ends (_split_repaired)
SPLIT_NEAR = 0.01  # "a hair": its cost at most this fraction above B (0.02 cost Megatron 18B 3k 0.4 s for nothing)
SPLIT_MOVES_MOST = 8  # layer moves made by one _split_descent at most
DESCENT_CLIMB_FIRST = True  # time under B: _plain_then_wide climbs from the descent's plan first (solve)
RESHAPE_BOTH = False  # off (a trade, docs/solver.md round 19): time under B, the first start climbed unreshaped too
RESHAPE_BOTH_SHARE = 0.15  # of the time left before the climbs, added to the plain share for that second climb
RESHAPE_BOTH_PATIENCE = 0.3  # of its time, at most, for that climb's first move (else it stops)
DEEPER_OTHER_END = True  # time under B: where that climb gave the best plain end, the others' _deeper_interleaved too
SPLIT_END_SHARE = 0.03  # of the time left before the climbs, at most, for the climbs' end's own _split_descent


def _split_descent(memo: Memo, plan: Plan, est: Estimate, deadline: float | None = None) -> tuple[Plan, Estimate]:
    """The plan with layers moved one at a time between its stages, each move taken where it makes the plan
    faster, until none does (or SPLIT_MOVES_MOST moves, or the deadline).
    The node types, degrees and modes of the stages stay; a move puts one layer from stage i on stage j where one
    of the two is an end stage (the first or the last) and the other is among the first two and last two stages
    and the first and last stages holding the most and the fewest layers. On a fixed node sequence the plan's rent
    rate is fixed, so a faster plan is a cheaper one too. Memo.runnable prices each (in the space, fitting).

    Why (round 18, budgetb2): the quick plans split the layers for the least slowest stage and break its ties by
    the least layers on the last stages (heuristic.split_layers), which leaves the head alone on the last stage and
    the embedding beside a full stage on the first. On Megatron 76B's time<=B optimum (tp 2, dp 7, cp 4, 21 p5
    stages, mixed-pool-8k) that split is 3 x 20 + 0 layers, 233,253 s at $936,447, 0.29 % above B = $933,763;
    moving one layer from stage 0 and one from stage 1 to the last stage (2, 2, 3 x 18, 2) gives 232,357 s at
    $932,851, the optimum, which the loop found only from that candidate's model at 28 s of CPU. Incumbents only."""
    best, best_est = plan, est
    if plan.virtual_stages != 1 or len(plan.stages) < 2:
        return best, best_est
    for _ in range(SPLIT_MOVES_MOST):
        stages = best.stages
        pp, counts = len(stages), [stage.num_layers for stage in stages]
        most, fewest = max(counts), min(counts)
        near = [0, 1, pp - 2, pp - 1, counts.index(most), pp - 1 - counts[::-1].index(most),
                counts.index(fewest), pp - 1 - counts[::-1].index(fewest)]
        places = list(dict.fromkeys(s for s in near if 0 <= s < pp))
        moves = [(i, j) for i in places for j in places if i != j and counts[i] > 0 and (i in (0, pp - 1) or
                                                                                          j in (0, pp - 1))]
        moved = None
        for i, j in moves:
            if _past(deadline):
                return best, best_est
            new = list(stages)
            new[i] = replace(stages[i], num_layers=counts[i] - 1)
            new[j] = replace(stages[j], num_layers=counts[j] + 1)
            found = memo.runnable(replace(best, stages=tuple(new)))
            if found is not None and found[1].training_time_s < best_est.training_time_s * (1 - INCUMBENT_REL):
                moved = found
                break
        if moved is None:
            break
        best, best_est = moved
    return best, best_est


def _split_improved(memo: Memo, budget: Budget, priced: Priced, deadline: float | None = None) -> Priced:
    """A priced plan that meets the budget, or the plan its _split_descent reaches where that one meets the budget
    too and is better (at v = 1; an interleaved plan is returned as it is)."""
    if priced[1].virtual_stages != 1:
        return priced
    moved = _best_meeting(budget, [_split_descent(memo, priced[1], priced[2], deadline)])
    return moved if moved is not None and moved[0] < priced[0] * (1 - INCUMBENT_REL) else priced


def _split_repaired(memo: Memo, budget: Budget, plans: list[tuple[Plan, Estimate]], beat: float,
                    deadline: float | None = None) -> Priced | None:
    """Minimizing time under a cost budget (SPLIT_REPAIR): the fastest of a neighbour's plans that would beat `beat`
    but costs at most SPLIT_NEAR above the budget, its layers moved at the ends (_split_descent) until it meets
    the budget and then on while that makes it faster; None where there is no such plan, or it still breaks the
    budget or no longer beats `beat`. Incumbents only: the plan returned is priced and meets every limit."""
    if budget.max_cost_usd is None:
        return None
    near = [(plan, est) for plan, est in plans if est.training_time_s < beat and plan.virtual_stages == 1
            and est.cost_usd <= budget.max_cost_usd * (1 + SPLIT_NEAR)
            and budget_violations(plan, est, budget) == ["max_cost"]]
    if not near:
        return None
    plan, est = min(near, key=lambda pe: pe[1].training_time_s)
    tried = [_split_descent(memo, plan, est, deadline)]
    if END_RETYPE and budget_violations(*tried[0], budget):  # still above B: the last stage on a cheaper type
        for variant in _end_retyped(memo.problem, plan) + _end_retyped(memo.problem, tried[0][0]):
            if _past(deadline):
                break
            if (found := memo.runnable(variant)) is not None:
                tried.append(_split_descent(memo, found[0], found[1], deadline))
    got = _best_meeting(budget, tried)
    return got if got is not None and got[0] < beat else None


END_RETYPE = True  # _split_repaired: a plan still above B after its layer moves, its last stage on a cheaper type


def _end_retyped(problem: Problem, plan: Plan) -> list[Plan]:
    """The plan with its last stage on each node type of the cluster whose GPU-hour is cheaper than the stage's own
    (the same layers, mode and degrees); Memo.runnable drops one that leaves the space, breaks node supply or does
    not fit. The split descent that follows (_split_repaired) moves layers off the slower stage.

    Why (round 18, budgetb2): on Megatron 310B, mixed-pool-3k, time under B = $3,315,193, the candidate tp 2, dp 5,
    cp 4, 25 stages all on p5 (its quick plan, layers moved at the ends) costs $3,334,583, 0.58 % above B; the best
    known plan (996,737 s, $3,312,008, from the loop's model at 63 s of CPU) is 24 p5 stages and a last stage of
    one layer on p4d."""
    types = {node.name: node for node in problem.cluster.node_types}
    own = types.get(plan.stages[-1].node_type)
    if own is None or plan.virtual_stages != 1:
        return []
    rate = own.price_usd_per_node_hour / own.gpus_per_node
    return [replace(plan, stages=plan.stages[:-1] + (replace(plan.stages[-1], node_type=name),))
            for name, node in types.items()
            if name != own.name and node.price_usd_per_node_hour / node.gpus_per_node < rate]


def _climb_plans(memo: Memo, budget: Budget, cand: Candidate) -> list[tuple[Plan, Estimate]]:
    """The plans _neighbour_search prices for a neighbouring (v = 1) candidate: its quick plans and, in a budget
    search, their interleaved variants (_interleaved, where the space has v > 1). Interleaving shortens the pipeline
    bubble, so the same stages at v > 1 are faster and, renting the same GPUs, cheaper: under a cost budget or a
    deadline they often beat every v = 1 plan (GPT-2 XL, mixed-pool-8k, megatron target, time under B = $51,908: the
    optimum, 57,205 s, is tp 1, dp 8, cp 8, b 2, 4 stages of 12 layers on p5 at v = 4, which a model found after
    11 s of CPU; the climb over v = 1 plans stopped at 86,429 s). Incumbents only: Memo.runnable drops variants
    outside the space or that do not fit."""
    plans = memo.quick_plans(memo.skeleton(cand))
    if budget.max_cost_usd is None and budget.max_time_s is None:
        return plans
    out = _with_interleaved(memo, plans)
    for plan, _ in plans:
        out += [priced for variant in _interleaved_rebalanced(plan, memo.options) if (priced := memo.runnable(variant))]
    return out


def _interleaved_rebalanced(plan: Plan, options: SpaceOptions) -> list[Plan]:
    """A v = 1 plan's stages (types and modes kept) with the layers moved so that every stage's count is a multiple
    of v, for each v > 1 of the space that _interleaved cannot take as it is: each stage's count rounded to a
    multiple of v by largest remainder (the shape kept), and the even split. The quick plans minimize the slowest
    stage, so 48 layers on 4 stages come as 13-12-12-11 and no v divides them; 12-12-12-12 at v = 4 is GPT-2 XL's
    optimum under B = $51,908 (budgetrows). Incumbents only; Memo.runnable drops those outside the space or that do
    not fit."""
    out = []
    counts = [s.num_layers for s in plan.stages]
    total, pp = sum(counts), len(counts)
    for v in options.virtual_stages:
        if v <= 1 or plan.virtual_stages != 1 or total % v or all(n % v == 0 for n in counts):
            continue
        chunks = total // v
        floors = [n // v for n in counts]
        order = sorted(range(pp), key=lambda i: (-(counts[i] / v - floors[i]), i))
        rounded = list(floors)
        for i in order[:chunks - sum(floors)]:
            rounded[i] += 1
        q, r = divmod(chunks, pp)
        even = [q + (1 if i < r else 0) for i in range(pp)]
        for split in {tuple(rounded), tuple(even)}:
            if min(split) >= 1:
                out.append(replace(plan, virtual_stages=v, overlap_grad_reduce=False, overlap_param_gather=False,
                                   stages=tuple(
                    replace(stage, num_layers=v * n) for stage, n in zip(plan.stages, split))))
    return out


def _interleaved(plan: Plan, options: SpaceOptions) -> list[Plan]:
    """A v = 1 plan interleaved: the same stages with each v > 1 of the space that divides every stage's layers
    (Megatron splits a rank's layers into v equal chunks). Incumbents only; Memo.runnable drops those that leave the
    search space or do not fit. --overlap-grad-reduce is off at v > 1 (costmodel.overlap_grad_reduce_on)."""
    return [replace(plan, virtual_stages=v, overlap_grad_reduce=False, overlap_param_gather=False)
            for v in options.virtual_stages
            if v > 1 and plan.virtual_stages == 1 and all(s.num_layers % v == 0 for s in plan.stages)]


def _with_interleaved(memo: Memo, plans: list[tuple[Plan, Estimate]]) -> list[tuple[Plan, Estimate]]:
    """These priced plans and their interleaved variants (_interleaved) that are runnable, priced."""
    out = list(plans)
    for plan, _ in plans:
        out += [priced for variant in _interleaved(plan, memo.options) if (priced := memo.runnable(variant))]
    return out


def _rescaled(problem: Problem, plan: Plan) -> list[Plan]:
    """The plan with dp x 2, x 4 or / 2, and each of those (and dp itself) with the micro-batch halved: the same
    stages on more or fewer replicas. Where one leaves the search space or does not fit, Memo.runnable drops it.
    Any layer kinds (T5 included), where candidates' quick plans need one."""
    out = []
    for dp, b in ((2 * plan.dp, plan.micro_batch_size), (4 * plan.dp, plan.micro_batch_size),
                  (2 * plan.dp, plan.micro_batch_size // 2), (plan.dp, plan.micro_batch_size // 2),
                  (plan.dp // 2, plan.micro_batch_size)):
        if dp >= 1 and b >= 1 and (dp, b) != (plan.dp, plan.micro_batch_size) and dp % plan.ep == 0:
            dist = distributed_optimizer_on(problem.job, dp, plan.cp)
            out.append(replace(plan, dp=dp, micro_batch_size=b, distributed_optimizer=dist,
                               overlap_grad_reduce=overlap_grad_reduce_on(problem, dp, plan.cp, plan.virtual_stages),
                               overlap_param_gather=overlap_param_gather_on(problem, dp, plan.cp, plan.virtual_stages,
                                                                            plan.pp, dist),
                               ddp_average_in_collective=ddp_average_on(problem, dp, plan.cp)))
    return out


CLIMB_RESHAPE = True  # minimizing cost, _climb also tries the current plan reshaped (_reshaped; round 17, costbig)


def _reshaped(problem: Problem, plan: Plan) -> list[Plan]:
    """The same node types and GPUs in a pipeline twice as deep or half as deep: every stage of n >= 2 layers split
    into two consecutive stages of the same type and mode (n - n // 2 and n // 2 layers; a stage of one layer or
    none stays whole) on half the GPUs a stage (cp, dp or tp halved, in that order), also with an empty last stage
    added (the head alone); and, where consecutive pairs of stages share their type and mode, each pair merged into
    one stage on twice the GPUs (cp, dp or tp doubled; an empty last stage of an odd count kept as it is).
    Where one leaves the search space, breaks node supply or does not fit, Memo.runnable drops it.

    Why (round 17, costbig): minimizing cost, the climb from the seeds' plan moves pp by at most 2, and a seed of
    half the best plan's depth on twice its GPUs is a local optimum there: Megatron 1T on mixed-pool-8k, its seeds'
    best plan (tp 2, cp 8, 65 stages of two layers on p5, $16.32M) stayed the incumbent, and the best known plan
    (tp 2, cp 4, 129 stages of one layer, $14.92M, within 0.04 % of the bound) came only where the seeds' time
    share stopped before that seed, from a worse start (the row's 0.04 % or 8.6 % at 10 s). The split plan (cp 4,
    128 stages, one layer each) is dearer ($16.96M: its last stage, a layer and the head, is the slowest); the same
    with the head alone on an empty last stage is that best plan: one plan priced, 0.08 s of CPU from that seed,
    where the plain climb made no move. Incumbents only: each variant is priced by the cost model; no bound or
    proof reads it."""
    if plan.virtual_stages != 1:
        return []
    out = []
    halved = [(plan.tp, plan.dp, plan.cp // 2)] if plan.cp % 2 == 0 else []
    halved += [(plan.tp, plan.dp // 2, plan.cp)] if plan.dp % 2 == 0 and (plan.dp // 2) % plan.ep == 0 else []
    halved += [(plan.tp // 2, plan.dp, plan.cp)] if plan.tp % 2 == 0 else []
    if halved and any(s.num_layers >= 2 for s in plan.stages):
        split = tuple(part for s in plan.stages for part in (
            (replace(s, num_layers=s.num_layers - s.num_layers // 2), replace(s, num_layers=s.num_layers // 2))
            if s.num_layers >= 2 else (s,)))
        shapes = [split]
        if split[-1].num_layers > 0:  # and with the head alone on an empty last stage (the last layer's stage was
            shapes.append(split + (replace(split[-1], num_layers=0),))  # the slowest: layer and head)
        out += [_with_degrees(problem, plan, tp, dp, cp, stages) for tp, dp, cp in halved for stages in shapes]
    body, tail = (plan.stages[:-1], plan.stages[-1:]) if (
        len(plan.stages) % 2 == 1 and plan.stages[-1].num_layers == 0) else (plan.stages, ())
    pairs = list(zip(body[0::2], body[1::2]))
    if len(body) >= 2 and len(body) % 2 == 0 and all(
            a.node_type == b.node_type and a.recompute == b.recompute for a, b in pairs):
        merged = tuple(replace(a, num_layers=a.num_layers + b.num_layers) for a, b in pairs) + tail
        out += [_with_degrees(problem, plan, tp, dp, cp, merged) for tp, dp, cp in (
            (plan.tp, plan.dp, 2 * plan.cp), (plan.tp, 2 * plan.dp, plan.cp), (2 * plan.tp, plan.dp, plan.cp))]
    return out


def _with_degrees(problem: Problem, plan: Plan, tp: int, dp: int, cp: int, stages: tuple) -> Plan:
    """The plan with these degrees and stages, and the settings the search derives from them (as _rescaled)."""
    dist = distributed_optimizer_on(problem.job, dp, cp)
    return replace(plan, tp=tp, dp=dp, cp=cp, stages=stages, distributed_optimizer=dist,
                   overlap_grad_reduce=overlap_grad_reduce_on(problem, dp, cp, plan.virtual_stages),
                   overlap_param_gather=overlap_param_gather_on(problem, dp, cp, plan.virtual_stages, len(stages),
                                                                dist),
                   ddp_average_in_collective=ddp_average_on(problem, dp, cp))


DEEPEST_PLANS = True  # minimizing cost, after the climb: the quick plans of the deepest pipelines (round 17, costbig)
DEEPEST_MOST = 8  # of those candidates, at most this many priced (in order of their bounds)


def _deepest_plans(memo: Memo, budget: Budget, bounded: list[Bounded], deadline: float | None = None) -> Priced | None:
    """The best quick plan, meeting the budget, of the deepest pipelines: for the first v = 1 degree (tp, dp, b, ep,
    cp, optimizer setting) of each (cp, tp) in the list's order, its candidates at pp = L + 1 and L + 2 (a layer a
    stage and one or both ends empty), at most DEEPEST_MOST of them in order of their bounds; None where none.

    Why (round 17, costbig): minimizing cost, the cheap bound grows with pp, so the seeds (QUICK_SEEDS of each
    (cp, tp) in bound order) are the shallow pipelines of each degree, and the climb moves pp by at most 2. On
    Megatron 310B (96 layers), mixed-pool-8k, the best known plan is tp 1, cp 4, 98 stages (both ends empty,
    $3,093,782), the 4th of these candidates (0.13 s of CPU); the climb ends at tp 2, dp 2, cp 4, 20 stages
    ($3,188,655) and the loop reached 98 stages at 18.5 s of CPU (round 11). Taken beside the climb's end, never as
    its start: as climb neighbours the deep plans led GPT-3 175B's climb to a worse end ($1,838,802 against
    $1,795,082, both within the climb's share). Not after a cost-under-deadline search's climbs: there the eight
    deep candidates' quick plans took 0.7-1.0 s of CPU between the climbs and the loop on GPT-3 175B and Megatron 310B
    8k cost<=D and gave nothing. Incumbents only: each plan is a quick plan of a listed candidate, priced by the
    cost model and checked against the budget."""
    by_key = {item.cand.key: item for item in bounded if item.cand.v == 1}
    depth = memo.problem.model.num_layers
    firsts: dict[tuple[int, int], tuple[int, ...]] = {}
    for item in bounded:
        if item.cand.v == 1 and (item.cand.cp, item.cand.tp) not in firsts:
            firsts[(item.cand.cp, item.cand.tp)] = item.cand.key
    keys = sorted((deep for key in firsts.values() for pp in (depth + 1, depth + 2)
                   if (deep := key[:3] + (pp,) + key[4:]) in by_key), key=lambda k: (by_key[k].lower_bound, k))
    best = None
    for key in keys[:DEEPEST_MOST]:
        if _past(deadline):
            break
        own = _best_meeting(budget, memo.quick_plans(memo.skeleton(by_key[key].cand)))
        if own is not None and (best is None or own[0] < best[0]):
            best = own
    return best


DEADLINE_FILL = True  # minimizing cost under a deadline, after the climbs: the GPU counts that fill it (round 23)
DEADLINE_FILL_WINDOW = (0.9, 1.02)  # of G x T / D: the listed v = 1 candidates' GPU counts tried (below)
DEADLINE_FILL_MOST = 16  # of those candidates, at most this many priced (in order of their bounds)
DEADLINE_FILL_SPLIT = True  # round 24: the best of them with its layers moved at the ends (_split_improved)


def _deadline_fill_plans(memo: Memo, budget: Budget, bounded: list[Bounded], start: Priced,
                         deadline: float | None = None) -> Priced | None:
    """The best quick plan, meeting the budget, of the listed v = 1 candidates whose GPU count (GPUs a stage x pp)
    lies within DEADLINE_FILL_WINDOW of G x T / D, where start's plan runs G GPUs for T seconds under the deadline D
    with time to spare: the GPUs that would just meet D at start's GPU-seconds. At most DEADLINE_FILL_MOST of them,
    those below start's value, in order of their bounds; None where none (no deadline, no slack, none listed).

    Why (round 23, loop175): minimizing cost under a deadline, the climbs end where no neighbour is cheaper, and the
    deadline's slack is not a neighbourhood they search. GPT-3 175B, mixed-pool-8k, D = 1,066,401 s: the climbs'
    plan is tp 2, dp 16, cp 2, 12 stages at v = 4, all p5.48xlarge, $1,930,643 in 736,362 s on 768 GPUs; the
    optimum is tp 1, dp 4, cp 4, 33 stages, all p5.48xlarge, $1,906,385 in 1,057,614 s on 528 GPUs (768 x 736,362 /
    1,066,401 = 530). That candidate's quick plan ($1,909,290, 5 ms) came from the loop at about 10.8 s of CPU, its
    model's plan at 13 s; its window of 11 candidates takes 0.05 s. Incumbents only: each plan is a quick plan of a
    listed candidate, priced by the cost model and checked against the budget."""
    if budget.objective != "cost" or budget.max_time_s is None:
        return None
    value, plan, est = start
    if not est.training_time_s < budget.max_time_s:
        return None
    gpus = plan.tp * plan.dp * plan.cp * plan.pp  # (ep divides dp: the same GPUs)
    target = gpus * est.training_time_s / budget.max_time_s
    low, high = DEADLINE_FILL_WINDOW[0] * target, DEADLINE_FILL_WINDOW[1] * target
    window = sorted((item for item in bounded if item.cand.v == 1 and item.lower_bound < value
                     and low <= item.cand.gpus_per_stage * item.cand.pp <= high),
                    key=lambda item: (item.lower_bound, item.cand.key))
    best = None
    for item in window[:DEADLINE_FILL_MOST]:
        if _past(deadline):
            break
        own = _best_meeting(budget, memo.quick_plans(memo.skeleton(item.cand)))
        if own is not None and (best is None or own[0] < best[0]):
            best = own
    if DEADLINE_FILL_SPLIT and best is not None and not _past(deadline):
        # round 24 (loopB): the quick plans leave the head alone on the last stage (heuristic.split_layers); on a
        # fixed node sequence a faster plan is a cheaper one (175B 8k: 3 x 32 + 0 layers, $1,909,290 -> 2, 2, 3 x 30,
        # 2, $1,906,385, the row's optimum, in 0.02 s of CPU)
        best = _split_improved(memo, budget, best, deadline)
    return best


def _narrow_memo(problem: Problem, options: SpaceOptions, memo: Memo) -> Memo | None:
    """The memo of the seed search's cp = 1, v = 1 part (_seed_search), or None where the space has no such smaller
    part. It shares memo's budget-free terms, cheap bounds and per-layer calls (they do not depend on the cp and v
    options), and its skeletons and quick plans: a cp = 1, v = 1 candidate's skeleton reads only the recomputation
    options (formulation.model.skeleton), and in_search_space answers the same for its cp = 1, v = 1 plans under
    both options, so its quick plans are the same (so _budget_descent and the whole space's seeds reuse those of the
    early seeds). And its lists' Candidate objects (Memo.candidates): a cp = 1 candidate's node uses do not read the
    cp and v options (candidates.node_uses), so a key's candidate is the same in both."""
    if not ((options.context_parallel_sizes != (1,) or options.virtual_stages != (1,)) and (
            1 in options.context_parallel_sizes and 1 in options.virtual_stages)):
        return None
    narrow = replace(options, context_parallel_sizes=(1,), virtual_stages=(1,))
    return Memo(problem, narrow, terms=memo.terms, cheap_by_pp=memo.cheap_by_pp, calls=memo.calls,
                skeletons=memo.skeletons, quick=memo.quick, candidates=memo.candidates)


SEEDS_REFINED = True  # time under B, a plan known: the own seeds whose refined bound reaches it are skipped (budgetb)
SEED_AFTER_DESCENT_SHARE = 0.1  # time under B, the descent's plan known: the seed search's share of the time left (round 20: 0.2 before)
PLAIN_CLIMBS_FIRST = True  # time under B: plain climbs from every start, then wide from the best end (budgetb)
SEED_PART_AFTER_DESCENT = False  # the seed search's cp = 1, v = 1 part where the descent already gave a plan (budgetplans)
EARLY_SEED_SHARE = 0.05  # of the time limit, at most, for the seed search's early seeds (solve, before the descent)
EARLY_SEEDS_AFTER_LIST = True  # no cost or time cap: that share counted from when their list is built (firstplan)


def _seed_search(problem: Problem, budget: Budget, solver: str, time_limit_s: float | None, options: SpaceOptions,
                 memo: Memo, seeds_only: bool = False, part: Memo | None = None,
                 whole_only: bool = False) -> list[tuple[SearchResult, float]]:
    """First plans of `budget` (first_plan_only) for a budget search's seed, each with the time.perf_counter() at
    which it was known. Where the space has context parallelism or interleaving, the cp = 1, v = 1 part of it is
    searched first, for up to half the time: its candidates' cheap bounds need a quarter of the per-(tp, dp, b, cp)
    terms (GPT-3 175B, mixed-pool-8k, megatron target: 1.2 s of CPU for all of them), and its plans are plans of the
    whole space. The terms, cheap bounds and per-layer calls it computes do not depend on those options and are
    shared with memo. The whole space is searched after it, as before: its first plan is often a better start for
    the neighbour search (the caller climbs from the better of the two). Incumbents only: the caller checks each plan
    against its own budget. seeds_only: only the usual seeds of the cp = 1, v = 1 part (of the whole space where it
    has none), no loop (solve's seeds_only; the early seeds, round 10). part: that part's memo (_narrow_memo), kept
    by the caller between the two calls. whole_only: the whole space alone (SEED_PART_AFTER_DESCENT)."""
    start = time.perf_counter()
    out = []
    if whole_only:
        part = None
    elif part is None:
        part = _narrow_memo(problem, options, memo)
    if seeds_only:
        first = solve(problem, budget, solver=solver, time_limit_s=time_limit_s,
                      options=options if part is None else part.options, memo=memo if part is None else part,
                      first_plan_only=True, seeds_only=True)
        return [(first, time.perf_counter())]
    if part is not None:  # else not a part of the space
        first = solve(problem, budget, solver=solver, time_limit_s=None if time_limit_s is None else 0.5 * time_limit_s,
                      options=part.options, memo=part, first_plan_only=True)
        out.append((first, time.perf_counter()))
    left = None if time_limit_s is None else max(0.0, time_limit_s - (time.perf_counter() - start))
    whole = solve(problem, budget, solver=solver, time_limit_s=left, options=options, memo=memo, first_plan_only=True)
    return out + [(whole, time.perf_counter())]


PART_FIRST = True  # a first plan from the cp = 1, v = 1 part before the whole space's list (_part_seeds, descent)
PART_DESCENT_SHARE = 0.25  # of the descent's share, at most, for the part's descent (before the whole one's)
DESCENT_CARRY = True  # the whole descent climbs on from the part's climb's end where that stopped short of B
LAZY_NEIGHBOURS = True  # the part's descent goes on over the whole space's neighbours, built as asked (firstplans)
LAZY_DESCENT_SHARE = 0.5  # of the descent's share, at most, for that climb (before the whole list)
PART_CLIMB_LAZY = True  # the part's descent climbs over the whole space's neighbours from its seeds on (timeb)


def _part_seeds(problem: Problem, budget: Budget, solver: str, time_limit_s: float | None, options: SpaceOptions,
                memo: Memo) -> tuple[float, Plan, Estimate, float] | None:
    """A first plan for a search that is not a budget search (cost or time, with or without other budgets), from the
    usual seeds of the space's cp = 1, v = 1 part (_narrow_memo; solve's seeds_only, the early seeds of a budget
    search), before the whole space's candidate list is built: (value, plan, estimate, time.perf_counter() when it
    was known), or None. Round 11 (issue 14, item 3): on Megatron 145B, mixed-pool-3k, megatron target, minimizing
    cost, the whole list took 1.2 s of CPU (load 7) and its first seed gave a plan at once; the part's list, whose
    terms and cheap bounds the whole list then reuses (Memo), holds a quarter of the per-(tp, dp, b, cp) terms.
    Only on a memo with no cheap bounds yet (the first search of a problem; a sweep's later solves have their
    tables), and only where the space has such a smaller part. The plan is one of the whole list's own seeds (the
    QUICK_SEEDS v = 1 candidates of each cp = 1 group, in the same bound order), whose quick plans solve prices
    anyway once the off candidates join: the seeds' best, and so the search after them, are as before (ties
    aside). An incumbent only, checked against the budget and the space here: never a bound or a proof."""
    if not PART_FIRST or memo.cheap_by_pp:
        return None
    part = _narrow_memo(problem, options, memo)
    if part is None:
        return None
    early = _seed_search(problem, budget, solver, None if time_limit_s is None else EARLY_SEED_SHARE * time_limit_s,
                         options, memo, seeds_only=True, part=part)[0]
    got, known = early
    if (got.plan is None or got.estimate is None or not in_search_space(problem, got.plan, options)
            or budget_violations(got.plan, got.estimate, budget)):
        return None
    return objective_value(got.estimate, budget.objective), got.plan, got.estimate, known


def _part_then_whole_descent(memo: Memo, part: Memo | None, budget: Budget, time_limit_s: float | None,
                             ends: list[Priced] | None = None, finish: "_Finish | None" = None,
                             deep: list | None = None) -> tuple[Priced | None, float | None]:
    """_budget_descent on the cp = 1, v = 1 part (part, _narrow_memo) first, for PART_DESCENT_SHARE of time_limit_s,
    then on the whole space as before, for time_limit_s: (the better plan, the whole space's on ties;
    time.perf_counter() when the first was known).
    Round 11 (issue 14, item 3): the whole space's list under the cost objective and B took 1.1 s of CPU (Megatron
    145B on mixed-pool-3k and 310B on mixed-pool-8k, megatron target, time under B; load 7) before its seeds' quick
    plans; the part's list is the early seeds' own, kept on the part's memo (_candidates), and the part's seeds are
    the whole list's cp = 1 seeds in the same order, with the same quick plans (shared). The whole descent still runs
    after it, from its own seeds, with its own share: its list is the one the seed search's whole space builds next
    (the same budget and setting), so its plan, and the search after it, are as before, known later. The part's
    share is small because its climb, over cp = 1 neighbours only, may not reach B: on Megatron 1T, mixed-pool-3k,
    B = $16.28M, it climbed for the whole share (1.6 s of CPU) without a plan, and the whole descent, left 0.4 s,
    then found none either. Incumbents only.
    Round 13 (firstplan): where the part's climb was cut short of B by its share, the whole descent climbs on from
    its end (when that is cheaper than the whole seeds' best), so the part's moves are not lost; ends: the whole
    descent's end where its share cut it short too (_budget_descent's ends), for solve to go on from. The part's
    share stays 0.25: at 0.6, Megatron 310B, mixed-pool-8k, time under B met B in the part's climb (first plan 5.7 ->
    2.8 s), but Megatron 1T on mixed-pool-8k, whose whole seeds meet B at once, waited 1.4 s longer where the part's
    climb ran out (3.9 -> 5.3 s), and the whole descent, still run after the part's plan, took the loop's time.
    Round 14 (firstplans): where the part's climb stops short of B (at its best in the part, or cut), it goes on from
    there over the whole space's neighbours, built a degree at a time as it asks (_LazyNeighbours), for
    LAZY_DESCENT_SHARE of time_limit_s, before the whole list: on GPT-3 175B, Megatron 1T and 310B and Llama-2 70B,
    time under B, every plan under B has cp > 1 and the whole list took 0.5-1.8 s of CPU before it. The whole descent
    then runs as before, from the lazy climb's end where its share cut it.
    finish: each descent's end candidate's model where its climb stopped a hair short of the cap (_finish_descent;
    round 15, budgetplans).
    Round 16 (timeb, PART_CLIMB_LAZY): the part's seeds are climbed over the whole space's neighbours (built as asked)
    from the start, for PART_DESCENT_SHARE + LAZY_DESCENT_SHARE of time_limit_s, instead of over the part's
    neighbours first: on Megatron 1T and 310B (both large pools) and Llama-2 70B 3k, time under B, the part's climb
    spent its whole share (about 0.55 s of CPU at a 10 s limit) without a plan, where the lazy climb then met B
    within 0.1-0.25 s; the first plan comes 0.1-0.6 s of CPU sooner there. The seeds, the neighbours and their cheap
    bounds are the same (the lazy neighbours are the list's own); only the neighbourhood of the first climb grew.
    Round 21 (seed530, DEEPEST_EARLY): deep, where given, gets (the whole list's deepest pipelines' best plan under
    B, the time.perf_counter() when it was known) appended where the part's descent gave no plan and _deepest_first
    gives one, before the whole descent (whose list it builds first)."""
    first = first_at = None
    cut: list[Priced] = []  # the part's climb's end where its share cut it short of B: the whole descent climbs on
    if PART_FIRST and part is not None and PART_CLIMB_LAZY and LAZY_NEIGHBOURS:
        # the part's seeds, climbed over the whole space's neighbours at once (round 16, timeb)
        first = _budget_descent(part, budget, None if time_limit_s is None else (
            PART_DESCENT_SHARE + LAZY_DESCENT_SHARE) * time_limit_s, ends=cut if DESCENT_CARRY else None,
            whole=memo, finish=finish)
        first_at = None if first is None else time.perf_counter()
    elif PART_FIRST and part is not None:
        stopped: list[Priced] = []  # where the part's climb stopped short of B, cut or at its best in the part
        first = _budget_descent(part, budget, None if time_limit_s is None else PART_DESCENT_SHARE * time_limit_s,
                                ends=cut if DESCENT_CARRY else None, stopped=stopped, finish=finish)
        if first is None and stopped and LAZY_NEIGHBOURS:
            # on from there over the whole space's neighbours, built as asked (_LazyNeighbours), before its list
            cut = []
            first = _budget_descent(part, budget, None if time_limit_s is None else LAZY_DESCENT_SHARE * time_limit_s,
                                    start=stopped[-1], ends=cut if DESCENT_CARRY else None, whole=memo,
                                    finish=finish)
        first_at = None if first is None else time.perf_counter()
    if first is None and deep is not None and (got := _deepest_first(memo, budget)) is not None:
        deep.append((got, time.perf_counter()))
    whole = _budget_descent(memo, budget, time_limit_s, start=cut[-1] if cut else None,
                            ends=ends if DESCENT_CARRY else None, finish=finish)
    if whole is None:
        return first, first_at
    if first is not None and first[0] < whole[0]:
        return first, first_at
    return whole, first_at if first_at is not None else time.perf_counter()


DEEPEST_EARLY = True  # time under B, no plan from the early seeds: the deepest pipelines' quick plans (seed530)
DEEPEST_EARLY_DPS = 2  # _deepest_lazy: the least dp values of each (tp, b, cp) it tries
DEEPEST_SKIPS_MORE = True  # with their plan known, no DESCENT_MORE: the seed search gets its time


def _deepest_lazy(memo: Memo, part: Memo, budget: Budget) -> Priced | None:
    """Time under a cost budget B, before the descent: the best quick plan under B of the deepest pipelines (pp = L + 1
    and L + 2, _deepest_plans' depths) of every (tp, b, cp) of the space at its DEEPEST_EARLY_DPS least dp values (and
    the ep values of the cp = 1, v = 1 part's first candidates), the DEEPEST_MOST of them with the least cheap cost
    bounds, their degrees built as asked (_LazyNeighbours: the whole list's own candidates and bounds, without the
    whole list); None where none meets B.
    Why (round 21, seed530, issue 14 item 3): minimizing cost, the cheapest quick plans of a large pool are those of
    the deepest pipelines on the fewest GPUs, which the descent's climb, moving pp by at most 2 from the seeds, does
    not reach. On Megatron 530B, mixed-pool-3k, B = $5,629,275 (8.8 % above the least cost), the descent's climbs
    stopped at $5,647,037, over B, after 2.4-3.5 s of CPU, and no plan was known before the seed search's at 5 s
    (none at all in the round-20 grid), while tp 2, dp 1, b 1, cp 2, 106 stages has a quick plan at $5,143,219 (the
    cost row's optimum). The whole list's _deepest_plans finds it too (_deepest_first) but needs the whole list first
    (0.3-0.5 s of CPU), which would delay the part's descent where it meets B (Megatron 1T); the lazy degrees here
    take about 0.1 s (128-160 degrees on 530B and 1T), the quick plans 0.05 s. Incumbents only: each plan is priced
    by the cost model and checked against B."""
    if _capped_quantity(budget) != "cost" or not DEEPEST_PLANS:
        return None
    seed_budget = budget.model_copy(update={"objective": "cost"})
    try:  # the early seeds' list (kept on the part's memo)
        bounded, _ = _candidates(part, seed_budget, 0.0, DEFAULT if LAZY_OFF else ALL, _SOLVE_DEADLINE.get())
    except OutOfTime:
        return None
    eps = sorted({item.cand.ep for item in bounded if item.cand.v == 1}) or [1]
    lazy = _LazyNeighbours(memo, seed_budget)
    depth = memo.problem.model.num_layers
    keys = []
    for tp in sorted(lazy.tps):
        for cp in sorted(lazy.cps):
            for mbs in sorted(lazy.mbs):
                for dp in dp_candidates(memo.problem, tp, mbs, budget.max_gpus, cp)[:DEEPEST_EARLY_DPS]:
                    if _past(_SOLVE_DEADLINE.get()):
                        return None
                    keys += [key for ep in eps for pp in (depth + 1, depth + 2)
                             if (key := (tp, dp, mbs, pp, ep, cp, 1, 0)) in lazy]
    best = None
    for key in sorted(keys, key=lambda k: (lazy[k].lower_bound, k))[:DEEPEST_MOST]:
        if _past(_SOLVE_DEADLINE.get()):
            break
        own = _best_meeting(budget, memo.quick_plans(memo.skeleton(lazy[key].cand)))
        if own is not None and (best is None or own[0] < best[0]):
            best = own
    return best


def _deepest_first(memo: Memo, budget: Budget) -> Priced | None:
    """Time under a cost budget B: the best quick plan under B of the whole space's deepest pipelines
    (_deepest_plans of the list the whole descent builds next, the cost objective under B), or None.
    Round 21 (seed530, issue 14 item 3): the cheapest quick plans of a large pool are those of the deepest
    pipelines (a layer a stage), which the descent's climb, moving pp by at most 2, does not reach; where B lies a few
    per cent above the least cost its climb stopped short of B (Megatron 530B, mixed-pool-3k, B = $5,629,275: the
    part's climb over the whole space's neighbours ended at $5,647,037 after 1.9 s of CPU, and no plan came before
    the seed search's at 5 s), while the deepest candidates' quick plans hold one at $5,143,219. The list is the
    one the whole descent and the seed search's whole space read next (kept on the memo), built here earlier; the
    eight quick plans take a few hundredths of a second. Incumbents only: each plan is priced and checked against B."""
    if _capped_quantity(budget) != "cost" or not DEEPEST_PLANS:
        return None
    try:
        bounded, _ = _candidates(memo, budget.model_copy(update={"objective": "cost"}), 0.0,
                                 DEFAULT if LAZY_OFF else ALL, _SOLVE_DEADLINE.get())
    except OutOfTime:
        return None
    return _deepest_plans(memo, budget, bounded, _SOLVE_DEADLINE.get())


DESCENT_SEEDS = 2  # v = 1 candidates of each (cp, tp) whose quick plans start _budget_descent (in bound order)
DESCENT_SHARE = 0.25  # of the time left, at most, for _budget_descent (before the seed search)
DESCENT_MORE_SHARE = 0.5  # of the time left then, at most, for its climb to go on where DESCENT_SHARE cut it short


def _capped_quantity(budget: Budget) -> str | None:
    """The quantity a budget search caps beside its objective: "cost" minimizing time under a cost budget, "time"
    minimizing cost under a deadline; None for any other budget."""
    if budget.objective == "time" and budget.max_cost_usd is not None:
        return "cost"
    if budget.objective == "cost" and budget.max_time_s is not None:
        return "time"
    return None


class _LazyNeighbours:
    """The whole space's v = 1 candidates at the default optimizer setting (Candidate.key -> Bounded), as
    _candidates(memo, budget, 0.0, DEFAULT) lists them, with the same cheap bounds and the same budget tests
    (_degree_rows, which _build_candidates runs on every degree), each (tp, dp, b, cp) built when a key of it is
    first asked for: _climb's by_key without the whole list (LAZY_NEIGHBOURS). A key of the space that the list
    holds is here with the same bound; a key the list does not hold is not here either. The terms and cheap bounds
    it computes stay on memo, and the whole list reuses them."""

    def __init__(self, memo: Memo, budget: Budget):
        problem, options = memo.problem, memo.options
        self.memo, self.budget = memo, budget
        self.tps = set(tp_candidates(problem))
        self.mbs = set(micro_batch_candidates(problem, options))
        self.cps = set(context_parallel_candidates(problem, options))
        self.dps: dict[tuple[int, int, int], set[int]] = {}  # (tp, b, cp) -> dp_candidates
        self.built: dict[tuple[int, int, int, int], dict[tuple[int, ...], tuple | Bounded]] = {}
        self.shapes: dict = {}
        self.degrees = 0  # (tp, dp, b, cp) of the space built here

    def _of(self, key: tuple[int, ...]) -> Bounded | None:
        tp, dp, mbs, _, _, cp, v, o = key
        if v != 1 or o != 0 or 1 not in self.memo.options.virtual_stages:
            return None
        degree = (tp, dp, mbs, cp)
        items = self.built.get(degree)
        if items is None:
            items = {}
            if tp in self.tps and mbs in self.mbs and cp in self.cps:
                dps = self.dps.get((tp, mbs, cp))
                if dps is None:
                    dps = self.dps[(tp, mbs, cp)] = set(dp_candidates(self.memo.problem, tp, mbs,
                                                                       self.budget.max_gpus, cp))
                if dp in dps:
                    rows: list[tuple] = []
                    _degree_rows(self.memo, self.budget, 0.0, DEFAULT, degree, rows, self.shapes, (1,))
                    items = {row[1]: row for row in rows}
                    self.degrees += 1
            self.built[degree] = items
        row = items.get(key)
        if isinstance(row, tuple):
            row = items[key] = _bounded_row(row, self.memo.candidates if SHARED_CANDIDATES else None)
        return row

    def __contains__(self, key: tuple[int, ...]) -> bool:
        return self._of(key) is not None

    def __getitem__(self, key: tuple[int, ...]) -> Bounded:
        item = self._of(key)
        if item is None:
            raise KeyError(key)
        return item



DESCENT_FINISH = True  # a descent stopped a hair short of its cap: its end candidate's model under the cap (budgetplans)
DESCENT_FINISH_NEAR = 0.02  # "a hair": the end's capped quantity at most this fraction above the cap
DESCENT_FINISH_SHARE = 0.1  # of the search's time limit, at most, for that model (beyond the descent's own share)


@dataclass(slots=True)
class _Finish:
    """What _budget_descent needs to solve its end candidate's model (DESCENT_FINISH): the backend, the whole space's
    options (every plan it returns is checked in them), the seconds each such model may take (None: no limit), and
    the candidate keys already tried in this solve (each at most once: the part's, the lazy and the whole descent
    often stop at the same candidate)."""

    solver: str
    space: SpaceOptions
    limit_s: float | None = None
    tried: set = field(default_factory=set)


def _finish_descent(memo: Memo, budget: Budget, end: Priced, by_key, finish: _Finish) -> Priced | None:
    """The model of the candidate a descent's climb stopped at, short of the cap: its least capped quantity under
    the cap (the seed search's model of it: cost under B minimizing time under B, time under D minimizing cost
    under D), solved by the search's backend for finish.limit_s (within the outermost solve's deadline, and not
    the descent's share, which a model of a few tenths of a second would outlast under load), hinted with the
    climb's end plan. A plan that meets
    `budget`, priced, in the space, or None (never a claim: an "infeasible" or a timeout only means no plan here).

    Why (round 15, budgetplans): where the cap is the other objective's optimum (the grid's B and D when the cost
    and time rows give the same plan: Megatron 18B on fasop-a100-a10), only that optimum meets it, and the climb
    on the capped quantity stops at the optimum's own candidate with the quick plan's layer split ($507,362 against
    B = $506,806: tp 2, pp 16); the seed search's loop reached that candidate's model only after its round-robin
    seeds and another candidate's model, 1.3-1.8 s of CPU later. Only where the end is within DESCENT_FINISH_NEAR of
    the cap, and the candidate's refined bound under the cap does not rule out every plan of it (the loop's own
    bound), so a descent that stops far from the cap, or on a candidate with no plan under it, costs one bound."""
    quantity = _capped_quantity(budget)
    cap = budget.max_cost_usd if quantity == "cost" else budget.max_time_s
    value = end[2].cost_usd if quantity == "cost" else end[2].training_time_s
    plan = end[1]
    key = (plan.tp, plan.dp, plan.micro_batch_size, len(plan.stages), plan.ep, plan.cp, 1, 0)
    deadline = None if finish.limit_s is None else time.perf_counter() + finish.limit_s
    outer = _SOLVE_DEADLINE.get()
    if outer is not None:
        deadline = outer if deadline is None else min(deadline, outer)
    if (not DESCENT_FINISH or cap is None or value > cap * (1 + DESCENT_FINISH_NEAR) or plan.virtual_stages != 1
            or key in finish.tried or key not in by_key or _past(deadline)):
        return None
    finish.tried.add(key)
    item = by_key[key]
    seed_budget = budget.model_copy(update={"objective": quantity})
    if item.terms is None or _bounded(memo.problem, seed_budget, item.terms, item.cand, True,
                                      memo.refined_bound(item.terms, item.cand, seed_budget), 0.0) is None:
        return None  # no plan of this candidate meets the cap
    sk = memo.skeleton(item.cand)
    least_s = 0.0
    if sk.most is not None and quantity == "cost":  # as the loop builds it: T >= the candidate's least time, whose
        try:  # rows T >= T_lo and v >= T_lo b lift the LP relaxation (0.7 -> 0.2 s of CPU on the 18B row above)
            fastest = positional_bound(sk, seed_budget.model_copy(update={"objective": "time"}), deadline=deadline)
        except OutOfTime:
            return None
        if not math.isfinite(fastest.bound):
            return None  # no plan of this candidate meets the cap
        least_s = fastest.bound
    f = build(memo.problem, seed_budget, item.cand, memo.options, None, INCUMBENT_REL, skel=sk, slower_than_s=least_s)
    engine = backend(finish.solver)
    hint_values = hint(f, plan) if f.patterns is not None else None
    left = None if deadline is None else max(0.0, deadline - time.perf_counter())
    sol, found, _ = _solve_model(memo.problem, engine, f, left, hint_values)
    if found is None or (engine.name == "cbc" and _cuts_stuck(found, f.budget)):
        return None
    got, est = found
    _check(memo.problem, f, sol, got, est, engine.name)
    if budget_violations(got, est, budget) or not in_search_space(memo.problem, got, finish.space):
        return None
    return objective_value(est, budget.objective), got, est


def _budget_descent(memo: Memo, budget: Budget, time_limit_s: float | None, start: Priced | None = None,
                    ends: list[Priced] | None = None, whole: Memo | None = None,
                    stopped: list[Priced] | None = None, finish: _Finish | None = None) -> Priced | None:
    """A first plan that meets a budget search's cap, from the cheap side: a plan of the space that meets `budget`,
    priced by the cost model, or None (never a proof that none exists; incumbents only).

    Minimizing time under a cost budget B (cost under a deadline D: the same with time and cost swapped), the capped
    quantity is minimized without its cap: from the cheapest quick plan of the first DESCENT_SEEDS (v = 1)
    candidates of each (cp, tp) that have one, in order of their bounds under the cost objective and B (at most
    QUICK_SEEDS tried of each), by the plain hill-climb of _neighbour_search (_climb) over the budget without B,
    stopping at the first plan that meets B (or a seed's quick plan that does).
    Where B lies a few per cent above the cheapest plan, the plans that meet it are a thin slice of the space: the
    time walk reaches them last (they are slow), and a cost search under B reaches them only where its bound order
    does, which on the large pools is far from the plans' own order (issue 14, round 9: Megatron 1T on
    mixed-pool-3k, B = $16.27M, 2.4 % above the cheapest plan the grid knew: the first quick plan under B is the
    356th v = 1 candidate in cost-bound order, 3.3 s of CPU of quick plans, and the first-plan-only cost search under
    B took 13 s of CPU; the climb on cost from the seeds' $17.3M plan passes under B at its second move, 0.5 s).
    start: a plan of the space, priced under the relaxed budget (an earlier descent's end, _part_then_whole_descent),
    climbed from where it is cheaper than the seeds' best. ends: where given, the climb's end is appended to it when
    the deadline cut the climb short of B (not at a local optimum): a start for a later descent (firstplan).
    whole: the seeds are memo's (the cp = 1, v = 1 part's), the climb is over whole's space (memo's space within
    it), its neighbours built as the climb asks for them (_LazyNeighbours), not from whole's list (firstplans).
    stopped: where given, the climb's end is appended to it whenever it stopped short of B, cut or not.
    finish: where given, a climb that stopped (not cut) a hair short of B tries its end candidate's model under B
    (_finish_descent, DESCENT_FINISH) within the same deadline."""
    quantity = _capped_quantity(budget)
    if quantity is None:
        return None
    deadline = None if time_limit_s is None else time.perf_counter() + time_limit_s
    cap = "max_cost_usd" if quantity == "cost" else "max_time_s"
    relaxed = budget.model_copy(update={"objective": quantity, cap: None})
    # at the default optimizer setting only where solve adds the off candidates later (LAZY_OFF): _climb moves
    # between them alone, and the seeds' quick plans are incumbents only
    try:  # its list stops at the outermost solve's deadline (_SOLVE_DEADLINE; not at this share: the seed search
        bounded, _ = _candidates(memo, budget.model_copy(update={"objective": quantity}), 0.0,  # reads it next)
                                 DEFAULT if LAZY_OFF else ALL, _SOLVE_DEADLINE.get())
    except OutOfTime:
        return None
    gave: dict[tuple[int, int], int] = {}  # of each (cp, tp): seeds that gave a plan, and seeds tried
    tried: dict[tuple[int, int], int] = {}
    best = None
    for item in bounded:
        group = (item.cand.cp, item.cand.tp)
        if item.cand.v != 1 or gave.get(group, 0) >= DESCENT_SEEDS or tried.get(group, 0) >= QUICK_SEEDS:
            continue
        if deadline is not None and time.perf_counter() > deadline:
            break
        tried[group] = tried.get(group, 0) + 1
        plans = memo.quick_plans(memo.skeleton(item.cand))
        if (hit := _best_meeting(budget, plans)) is not None:
            return hit
        own = _best_meeting(relaxed, plans)
        if own is not None:
            gave[group] = gave.get(group, 0) + 1
            best = own if best is None or own[0] < best[0] else best
    if start is not None and (best is None or start[0] < best[0]):
        best = start
    if best is None:
        return None
    neighbours = None
    if whole is not None:  # the climb over the whole space (its memo prices its plans), neighbours as asked
        memo, neighbours = whole, _LazyNeighbours(whole, budget.model_copy(update={"objective": quantity}))
    got = _climb(memo, relaxed, bounded, best, deadline, wide=False,
                 until=lambda priced: not budget_violations(priced[1], priced[2], budget), by_key=neighbours)
    if budget_violations(got[1], got[2], budget):
        was_cut = deadline is not None and time.perf_counter() > deadline
        if finish is not None and not was_cut:  # stopped a hair short of B: its end candidate's model under B
            by_key = neighbours if neighbours is not None else {item.cand.key: item for item in bounded
                                                                if item.cand.v == 1}
            if (done := _finish_descent(memo, budget, got, by_key, finish)) is not None:
                return done
        if ends is not None and was_cut:  # cut short, still moving
            ends.append(got)
        if stopped is not None:
            stopped.append(got)
        return None
    return objective_value(got[2], budget.objective), got[1], got[2]


MIDDLE_JOINT = True  # minimizing cost: a cheap entry's joint rent x time floor before its refined bound (round 20)
MIDDLE_AS_REFINED = True  # and, at a pp with too many compositions to list, that floor as its refined level's bound
MIDDLE_BATCH = 64  # degrees whose floors one call computes at most (the popped one and the queue's next ones)
MIDDLE_SCAN = 2048  # heap entries looked at for them at most (in bound order)


def _middle_bound(memo: Memo, budget: Budget, item: Bounded, heap: list, slower_than_s: float, worth: float
                  ) -> float | None:
    """Minimizing cost, a cheap entry's middle bound (USD, objective units): its degree's joint rent x time floor
    at its pp and v (middle.joint_floors_many, under the budget's deadline; inf: no plan of the candidate meets it).
    None where it does not apply: another objective or a window (slower_than_s), pp = 1, or the degree's refined
    tables already built (its aggregate and refined bounds then cost about 16 us). The floors of a degree not yet
    seen are computed with those of up to MIDDLE_BATCH - 1 other degrees of the heap's next cheap entries below
    worth (a best-first walk of the heap array from its root, children 2i + 1 and 2i + 2, so in bound order, at most
    MIDDLE_SCAN entries; the heap is not changed) and kept in Memo.middle by degree, deadline and the module limits
    the floors read. Above a cost budget: inf, as `_bounded` rules. A valid lower bound on the cost of every plan of
    the candidate that meets the deadline (middle.py's docstring); the rent and GPU limits are not used (a bound
    over more plans)."""
    cand = item.cand
    if budget.objective != "cost" or slower_than_s != 0.0 or cand.pp == 1:
        return None
    dkey = _degree_key(cand)
    if isinstance(memo.refined_by_pp.get(dkey), RefinedTables):
        return None
    limits = (budget.max_time_s, BOUND_SLACK, middle_module.MIDDLE_MARKS, middle_module.MIDDLE_SLACK)
    key = dkey + limits
    floors = memo.middle.get(key)
    if floors is None:
        batch = {dkey: item.terms}
        todo, seen = [(heap[0][0], 0)] if heap else [], 0  # the heap's entries in bound order (a best-first walk)
        while todo and len(batch) < MIDDLE_BATCH and seen < MIDDLE_SCAN:
            lb, j = heapq.heappop(todo)
            seen += 1
            if lb >= worth:
                break
            for c in (2 * j + 1, 2 * j + 2):
                if c < len(heap):
                    heapq.heappush(todo, (heap[c][0], c))
            other = heap[j][3]
            if other.level != CHEAP or other.middle or other.aggregate or other.cand.pp == 1:
                continue
            okey = _degree_key(other.cand)
            if okey not in batch and okey + limits not in memo.middle and not isinstance(
                    memo.refined_by_pp.get(okey), RefinedTables):
                batch[okey] = other.terms
        iterations = memo.problem.iterations
        max_iteration_s = None if budget.max_time_s is None else budget.max_time_s * BOUND_SLACK / iterations
        got = joint_floors_many(memo.problem, list(batch.values()), max_stages(memo.problem, memo.options),
                                tuple(memo.options.virtual_stages), max_iteration_s)
        for k, value in zip(batch, got):
            memo.middle[k + limits] = value
        floors = memo.middle[key]
    by_pp = floors.get(cand.v)
    if by_pp is None or cand.pp > len(by_pp):
        return None
    usd = memo.problem.iterations * float(by_pp[cand.pp - 1]) / SECONDS_PER_HOUR
    if budget.max_cost_usd is not None and usd > budget.max_cost_usd * BOUND_SLACK:
        return math.inf  # as _bounded: no plan of the candidate meets the cost budget
    return usd


ALL, DEFAULT, OFF = "all", "default", "off"  # _candidates' settings: every candidate, or one optimizer setting's
CANDIDATE_LISTS_KEPT = 4  # _candidates' lists kept per memo (Memo.candidate_lists)


def _candidates(memo: Memo, budget: Budget, slower_than_s: float = 0.0, settings: str = ALL,
                deadline: float | None = None) -> tuple[list[Bounded], int]:
    """All candidates with their cheap lower bounds (bounds.py), minus those a bound proves infeasible. settings:
    ALL; DEFAULT, only those at the search's default optimizer setting (Candidate.dist None); OFF, only the
    distributed-optimizer-off copies (dist False) where the search tries both (lazy: solve adds them later,
    _with_off). DEFAULT and OFF together are ALL, with the same bounds, and the same total. The bounds of
    every pp of one (tp, dp, b, ep, cp) come from one vectorized call (bounds.cheap_bounds, equal bit for bit to
    Memo.cheap_bound and _bounded, which tests/test_cheap_bounds.py checks).
    Python's cyclic garbage collector is paused while the list is built (issue 14, item 3: first plans): the list's
    objects hold no cycles, and the full collections that 63,030 new candidates triggered (GPT-3 175B, mixed-pool-8k,
    megatron target) each walked every live object, about 0.2 s of its 1.2 s of CPU. The values are the same.
    A list is kept on the memo (Memo.candidate_lists, the last CANDIDATE_LISTS_KEPT) and a call with the same budget,
    slower_than_s and settings gets a copy of it: a budget search builds the seed budget's list up to twice on each
    memo (the early seeds and the seed search's cp = 1, v = 1 part; the descent and the seed search's whole space).
    The list depends only on those, the memo's problem and options, and the memo's budget-free tables (terms and cheap
    bounds, themselves kept), so the copy equals a fresh build candidate by candidate (tests/test_fastpath.py).
    deadline (time.perf_counter()): past it the build stops at its next (tp, b, cp, dp) and raises OutOfTime; nothing
    is kept of a list cut short (round 14, overrun: the off list of Megatron 1T on mixed-pool-8k takes 2.1 s)."""
    key = (tuple(sorted(budget.model_dump().items())), slower_than_s, settings)
    kept = memo.candidate_lists.get(key)
    if kept is not None:  # the same inputs: the same list (_build_candidates reads only these and memo's tables)
        return list(kept[0]), kept[1]
    paused = gc.isenabled()
    gc.disable()
    try:
        built = _build_candidates(memo, budget, slower_than_s, settings, deadline)
    finally:
        if paused:
            gc.enable()
    memo.candidate_lists[key] = built
    while len(memo.candidate_lists) > CANDIDATE_LISTS_KEPT:  # a what-if sweep's memo sees many budgets: oldest out
        del memo.candidate_lists[next(iter(memo.candidate_lists))]
    return list(built[0]), built[1]


def _build_candidates(memo: Memo, budget: Budget, slower_than_s: float, settings: str = ALL,
                      deadline: float | None = None) -> tuple[list[Bounded], int]:
    """_candidates' work: the rows of every degree (_degree_rows), sorted, then built."""
    problem, options = memo.problem, memo.options
    rows: list[tuple] = []  # (bound, key, uses, terms)
    total = 0
    shapes: dict = {}
    degrees = [(tp, dp, mbs, cp) for tp in tp_candidates(problem)
               for mbs, cp in [(b, c) for b in micro_batch_candidates(problem, options)
                               for c in context_parallel_candidates(problem, options)]  # cp = 1 alone: before issue 16
               for dp in dp_candidates(problem, tp, mbs, budget.max_gpus, cp)]
    for n, degree in enumerate(degrees):
        if _past(deadline):
            raise OutOfTime
        if BATCHED_CHEAP and n % BATCH_DEGREES == 0:  # the cheap bounds of the next degrees, together
            _cheap_ahead(memo, settings, degrees[n:n + BATCH_DEGREES], deadline)
        total += _degree_rows(memo, budget, slower_than_s, settings, degree, rows, shapes)
    # Sorted by (bound, Candidate.key) as plain tuples (the keys differ, so the order is total and the same as
    # sorting the Bounded by (lower_bound, cand.key)), then built: the key property per comparison cost 0.15 s.
    if _past(deadline):  # the sort and the records below: 0.3-0.4 s for Megatron 1T's 60,000 rows (round 14)
        raise OutOfTime
    rows.sort(key=itemgetter(0, 1))
    kept: list[Bounded] = []
    made = memo.candidates if SHARED_CANDIDATES else None
    for n, row in enumerate(rows):
        if n % 8192 == 0 and _past(deadline):
            raise OutOfTime
        kept.append(_bounded_row(row, made))
    return kept, total


def _bounded_row(row: tuple, made: dict | None = None) -> Bounded:
    """The candidate of one of _degree_rows' rows, at its cheap bound. made: Candidate.key -> Candidate, the
    candidates built before (Memo.candidates; SHARED_CANDIDATES), used and filled."""
    lb, key, uses, terms = row
    if made is None:
        return Bounded(_row_candidate(key, uses), lb, terms, CHEAP)
    cand = made.get(key)
    if cand is None:
        cand = made[key] = _row_candidate(key, uses)
    return Bounded(cand, lb, terms, CHEAP)


SHARED_CANDIDATES = True  # one Candidate per key and memo, shared by its lists and its part's (round 15, lists)
FAST_CANDIDATES = True  # a row's Candidate set field by field, without the dataclass __init__ (round 15, lists)
_CANDIDATE_FIELDS = ("tp", "dp", "micro_batch_size", "pp", "uses", "ep", "cp", "v", "dist", "gather")
# Candidate's slots' setters, in _CANDIDATE_FIELDS' order; None (the __init__ then) unless those are exactly its
# fields and it has nothing that runs at construction (a __post_init__, a field without init)
_CANDIDATE_SETTERS = (tuple(Candidate.__dict__[name].__set__ for name in _CANDIDATE_FIELDS)
                      if tuple(f.name for f in fields(Candidate)) == _CANDIDATE_FIELDS
                      and all(f.init for f in fields(Candidate)) and not hasattr(Candidate, "__post_init__")
                      else None)


def _row_candidate(key: tuple[int, ...], uses: tuple[NodeUse, ...]) -> Candidate:
    """The Candidate of a row's key (tp, dp, b, pp, ep, cp, v, o) and node uses. With FAST_CANDIDATES, the object
    the dataclass __init__ makes (the same fields, so equal, with the same hash) without its call: a frozen,
    kw-only dataclass of ten fields took about 4 us to build, 0.3-0.4 s of a list of 80,000 rows (Megatron 76B,
    mixed-pool-8k), against about 1.5 us here (tests/test_lists_round15.py checks the fields against the
    __init__'s)."""
    tp, dp, mbs, pp, ep, cp, v, off = key
    if not FAST_CANDIDATES or _CANDIDATE_SETTERS is None:
        return Candidate(tp=tp, dp=dp, micro_batch_size=mbs, pp=pp, uses=uses, ep=ep, cp=cp, v=v,
                         dist=False if off == 1 else None, gather=off == 2)
    cand = object.__new__(Candidate)
    for put, value in zip(_CANDIDATE_SETTERS, (tp, dp, mbs, pp, uses, ep, cp, v, False if off == 1 else None,
                                               off == 2)):
        put(cand, value)
    return cand


def _uses_and_settings(memo: Memo, settings: str, degree: tuple[int, int, int, int]
                       ) -> tuple[tuple[NodeUse, ...], tuple[bool | None, ...]]:
    """The node uses of the degree (tp, dp, b, cp) and the optimizer settings (Candidate.dist: None the default,
    False off) its candidates take at `settings` (_degree_rows)."""
    problem = memo.problem
    tp, dp, mbs, cp = degree
    # the node uses and the optimizer settings do not depend on the budget: once per memo (fastpath; they were a fifth
    # of a later list's build, GPT-3 13B on mixed-pool-8k)
    known = memo.uses_by_degree.get((tp, dp, mbs, cp))
    if known is None:
        uses = tuple(node_uses(problem, tp, dp, mbs, cp, memo.options))
        both = bool(uses) and len(distributed_optimizer_settings(problem, dp, cp)) == 2 and not \
            distributed_optimizer_off_dominated(problem, [u.name for u in uses], tp, dp, cp)
        known = memo.uses_by_degree[(tp, dp, mbs, cp)] = (uses, both)
    uses, both = known
    dists = (None, False) if both else (None,)
    if settings != ALL:  # one setting's candidates only (lazy off candidates, solve)
        dists = (None,) if settings == DEFAULT else (False,) if both else ()
    return uses, dists


BATCHED_CHEAP = True  # _build_candidates computes the cheap bounds of BATCH_DEGREES degrees at once (round 16, lists2)
BATCH_DEGREES = 128  # degrees (tp, dp, b, cp) per batch: [D, P] and [D, K, G] arrays of a few hundred kB


def _cheap_ahead(memo: Memo, settings: str, degrees: list[tuple[int, int, int, int]],
                 deadline: float | None = None) -> None:
    """The cheap bounds that _degree_rows (and _gather_rows) will ask of these degrees at `settings`, computed
    together and kept on the memo (Memo.cheap_by_pp), so that those calls find them: bounds.cheap_bounds_many, the
    same arrays bit for bit as bounds.cheap_bounds one (terms, pp) table at a time (round 16, lists2: the one-at-a-
    time calls were about 45 % of the lists' CPU, numpy's per-call overhead on arrays of 60-130 elements). The terms
    are the memo's (Memo.degree_terms, asked in _degree_rows' order; the gather copies' by _gather_terms, as
    _gather_rows makes them), so nothing else changes. deadline: checked between degrees (OutOfTime, as the build)."""
    problem, options = memo.problem, memo.options
    pps = np.arange(1, max_stages(problem, options) + 1)
    wanted: dict[tuple[int, ...], DegreeTerms] = {}
    for degree in degrees:
        if _past(deadline):
            raise OutOfTime
        tp, dp, mbs, cp = degree
        uses, dists = _uses_and_settings(memo, settings, degree)
        if not uses:
            continue
        eps = ep_candidates(problem, tp, dp, options)
        for ep, dist in [(e, o) for e in eps for o in dists]:
            key = (tp, dp, mbs, ep, cp) if dist is None else (tp, dp, mbs, ep, cp, 0)
            terms = memo.degree_terms(tp, dp, mbs, uses, ep, cp, dist)
            if key not in memo.cheap_by_pp:
                wanted[key] = terms
        for ep in eps if settings != DEFAULT else ():
            terms = memo.degree_terms(tp, dp, mbs, uses, ep, cp, None)
            gather = _gather_terms(memo, (tp, dp, mbs, ep, cp), uses, terms, pps)
            if gather is None:
                continue
            for key, of in (((tp, dp, mbs, ep, cp, 2), gather[0]), ((tp, dp, mbs, ep, cp), terms)):
                if key not in memo.cheap_by_pp:
                    wanted[key] = of
    if wanted:
        for key, got in zip(wanted, cheap_bounds_many(problem, list(wanted.values()), pps)):
            memo.cheap_by_pp[key] = got


def _degree_rows(memo: Memo, budget: Budget, slower_than_s: float, settings: str, degree: tuple[int, int, int, int],
                 rows: list[tuple], shapes: dict, virtual_stages: tuple[int, ...] | None = None) -> int:
    """Appends to rows the candidates (bound, key, uses, terms) of one (tp, dp, b, cp) of the space, every ep, pp
    and v (virtual_stages: only those of them; None, the options'), at the settings' optimizer settings, with their
    cheap bounds, less those a bound proves break the budget; returns how many there were before the cheap bounds.
    shapes: the caller's cache of the pp allowed per (m, dp, b, v). The degree must be one of the space's (tp, b and
    cp among their candidates, dp among dp_candidates under budget.max_gpus): _build_candidates, _LazyNeighbours."""
    problem, options = memo.problem, memo.options
    tp, dp, mbs, cp = degree
    most = max_stages(problem, options)
    pps = np.arange(1, most + 1)
    iterations = problem.iterations
    slack = BOUND_SLACK
    total = 0
    uses, dists = _uses_and_settings(memo, settings, degree)
    if not uses:
        return 0
    for ep, dist in [(e, o) for e in ep_candidates(problem, tp, dp, options) for o in dists]:
        # dist: None, the search's default; False, off too where both are tried (under the overlap)
        terms = memo.degree_terms(tp, dp, mbs, uses, ep, cp, dist)
        ok, iteration, rate, cost = memo.cheap_bounds(
            terms, (tp, dp, mbs, ep, cp) if dist is None else (tp, dp, mbs, ep, cp, 0), pps)
        for v in options.virtual_stages if dist is None else (1,):  # off: at v = 1 only
            if v not in options.virtual_stages or (virtual_stages is not None and v not in virtual_stages):
                continue
            shape = shapes.get((terms.m, dp, mbs, v))
            if shape is None:  # the pp allowed and their f_v: once per (m, dp, b, v)
                if v == 1:
                    allowed = [p for p in range(1, most + 1)]
                else:  # m % pp == 0 is necessary (interleaving_allowed), and skips most pp cheaply
                    allowed = [p for p in range(2, most + 1)
                               if terms.m % p == 0 and interleaving_allowed(problem, p, dp, mbs, v)]
                factors = np.ones(most)
                for p in allowed if v > 1 else ():
                    factors[p - 1] = interleaving_factor(terms.m, p, v)
                shape = shapes[(terms.m, dp, mbs, v)] = (np.array(allowed, dtype=np.int64) - 1, factors)
            ix, factors = shape
            total += len(ix)
            if budget.max_gpus is not None:
                ix = ix[(ix + 1) * tp * cp * dp <= budget.max_gpus]
            ix = ix[ok[ix]]
            if len(ix) == 0:
                continue
            it, rt, co = iteration[ix], rate[ix], cost[ix]
            lifted = BUDGET_WORK_LIFT and budget.objective == "time" and budget.max_cost_usd is not None
            if lifted:
                it = _work_lifted(problem, terms, budget, ix, it, rt, factors[ix] if v > 1 else None)
            if v > 1:  # bounds.interleaved_bound, the same operations
                factor = factors[ix]
                it, co = it * factor, co * factor
            time_lb = np.maximum(iterations * it, slower_than_s)  # _bounded, for every pp at once
            cost_lb = np.maximum(iterations * co, rt * slower_than_s / SECONDS_PER_HOUR)
            keep = np.ones(len(ix), dtype=bool)
            if lifted:  # budget_work_lift: inf where no plan meets the cost budget
                keep &= np.isfinite(time_lb)
            if budget.max_time_s is not None:
                keep &= ~(time_lb > budget.max_time_s * slack)
            if budget.max_cost_usd is not None:
                keep &= ~(cost_lb > budget.max_cost_usd * slack)
            if budget.max_usd_per_hour is not None:
                keep &= ~(rt > budget.max_usd_per_hour * slack)
            value = cost_lb if budget.objective == "cost" else time_lb
            for p, lb in zip(ix[keep].tolist(), value[keep].tolist()):
                rows.append((lb, (tp, dp, mbs, p + 1, ep, cp, v, int(dist is not None)), uses, terms))
    for ep in ep_candidates(problem, tp, dp, options) if settings != DEFAULT else ():
        # --overlap-param-gather's copies at pp > 1, with the off ones (lazy: settings OFF or ALL)
        total += _gather_rows(memo, budget, slower_than_s, (tp, dp, mbs, ep, cp), uses,
                              memo.degree_terms(tp, dp, mbs, uses, ep, cp, None), pps, rows)
    return total


BUDGET_WORK_LIFT = False  # time<=B: the cheap rows' time lifted by bounds.budget_work_lift (round 19, budgetlow)


def _work_lifted(problem: Problem, terms: DegreeTerms, budget: Budget, ix: np.ndarray, it: np.ndarray,
                 rate: np.ndarray, factor: np.ndarray | None) -> np.ndarray:
    """The v = 1 cheap iterations it (at pp = ix + 1) lifted by bounds.budget_work_lift under the cost budget; with
    v > 1 (factor: f_v per row) under the budget / f_v, the caller then multiplying by f_v: every plan of the
    interleaved candidate is a plan of its v = 1 sibling with the same rent, at least f_v times its time and cost,
    so one that meets B is a sibling plan that meets B / f_v (interleaved_positional_bound's argument). inf: no plan
    meets the budget."""
    b = budget.max_cost_usd * BOUND_SLACK * SECONDS_PER_HOUR / problem.iterations
    limit = np.full(len(ix), b) if factor is None else b / factor
    return budget_work_lift(problem, terms, ix + 1, it, rate, limit)


def _gather_rows(memo: Memo, budget: Budget, slower_than_s: float, degree: tuple[int, ...],
                 uses: tuple[NodeUse, ...], terms: DegreeTerms, pps: np.ndarray, rows: list[tuple]) -> int:
    """Appends to rows (_build_candidates' form) the --overlap-param-gather copies (Candidate.gather; issue 15,
    ppgather) of the degree (tp, dp, b, ep, cp) at v = 1 and every pp > 1 where the search tries the flag
    (costmodel.overlap_param_gather_settings) and it can win (costmodel.param_gather_chain_gain_s > 0, stage 0 at
    most NMAX layers), with their cheap bounds and the same budget tests as _build_candidates'. A copy's cheap bound
    is the larger of its own (bounds.gather_terms: the gather's floor 0) and its default twin's less what the flag
    can take off: a copy's plan is the twin's plan with the flag on, the same stages, nodes and memory, and its
    iteration at most `gain` shorter (param_gather_chain_gain_s), its cost per iteration at most rent x gain lower
    (rent at most pp w x the dearest GPU of its types). Returns how many copies there were before the cheap bounds.
    The copies join with the distributed-optimizer-off ones (settings OFF, lazy): the first list is as before."""
    problem = memo.problem
    tp, dp, mbs, ep, cp = degree
    gather = _gather_terms(memo, degree, uses, terms, pps)
    if gather is None:
        return 0
    gterms, gain = gather
    key = (tp, dp, mbs, ep, cp, 2)
    ok, iteration, rate, cost = memo.cheap_bounds(gterms, key, pps)
    twin_ok, twin_iteration, _, twin_cost = memo.cheap_bounds(terms, degree, pps)
    rent = pps * (tp * cp * dp) * max(terms.price_per_gpu_hour)  # USD per hour, at most, of a plan of pp stages
    ok = ok & twin_ok
    iteration = np.maximum(iteration, twin_iteration - gain)
    cost = np.maximum(cost, twin_cost - rent * gain / SECONDS_PER_HOUR)
    ix = np.arange(1, len(pps))  # pp = 2 .. most
    total = len(ix)
    if budget.max_gpus is not None:
        ix = ix[(ix + 1) * tp * cp * dp <= budget.max_gpus]
    ix = ix[ok[ix]]
    time_lb = np.maximum(problem.iterations * iteration[ix], slower_than_s)
    cost_lb = np.maximum(problem.iterations * cost[ix], rate[ix] * slower_than_s / SECONDS_PER_HOUR)
    keep = np.ones(len(ix), dtype=bool)
    if budget.max_time_s is not None:
        keep &= ~(time_lb > budget.max_time_s * BOUND_SLACK)
    if budget.max_cost_usd is not None:
        keep &= ~(cost_lb > budget.max_cost_usd * BOUND_SLACK)
    if budget.max_usd_per_hour is not None:
        keep &= ~(rate[ix] > budget.max_usd_per_hour * BOUND_SLACK)
    value = cost_lb if budget.objective == "cost" else time_lb
    for p, lb in zip(ix[keep].tolist(), value[keep].tolist()):
        rows.append((lb, (tp, dp, mbs, p + 1, ep, cp, 1, 2), uses, gterms))
    return total


def _gather_terms(memo: Memo, degree: tuple[int, ...], uses: tuple[NodeUse, ...], terms: DegreeTerms,
                  pps: np.ndarray) -> tuple[DegreeTerms, float] | None:
    """The --overlap-param-gather copies' terms of the degree (tp, dp, b, ep, cp) and the flag's gain (_gather_rows),
    kept on the memo (Memo.terms, key (tp, dp, b, ep, cp, 2)); None where the degree has no such copies."""
    problem = memo.problem
    tp, dp, mbs, ep, cp = degree
    if 1 not in memo.options.virtual_stages or len(pps) < 2 or True not in overlap_param_gather_settings(
            problem, dp, cp, 1, 2, terms.distributed_optimizer):
        return None
    key = (tp, dp, mbs, ep, cp, 2)
    if key not in memo.terms:
        gain = param_gather_chain_gain_s(problem, [u.name for u in uses], tp, dp, cp, 2,
                                         list(terms.max_layers_per_stage))
        memo.terms[key] = (gather_terms(terms), gain) if gain > 0 else None
    return memo.terms[key]


LAZY_OFF = True  # solve adds the distributed-optimizer-off candidates after its first plan (_with_off)
OFF_WAIT_SHARE = 0.1  # or once its loop has run this share of the time limit without a plan
OFF_WAIT_S = 1.0  # (without a time limit: this long)
SEED_OFF_WAIT_SHARE = 0.5  # a first-plan-only search's loop (a budget search's seed search) waits this share (timeload)
OFF_NOT_PAST_LIMIT = True  # past the time limit the off candidates do not join: no bound reported (firstplan)


def _with_off(memo: Memo, budget: Budget, slower_than_s: float, bounded: list[Bounded],
              deadline: float | None = None) -> tuple[list[Bounded], list[Bounded], int]:
    """The distributed-optimizer-off candidates that solve left out of its first list (_candidates(..., OFF)), and
    the list with them: (bounded and the off ones merged in bound order, the off ones, their count before the cheap
    bounds). The merged list is the one _candidates(..., ALL) builds (both are sorted by (bound, Candidate.key), a
    total order), so every search after it sees the same candidates in the same order as without the delay.
    deadline: past it OutOfTime (_candidates), and the off candidates have not joined."""
    off, total = _candidates(memo, budget, slower_than_s, OFF, deadline)
    if not off:
        return bounded, off, total
    return list(heapq.merge(bounded, off, key=lambda b: (b.lower_bound, b.cand.key))), off, total


def _check(problem: Problem, f, sol, plan, est, solver_name: str, window_s: float = 0.0) -> None:
    """The decoded plan re-priced by the cost model must equal the solver's values (time, cost, memory).
    window_s: the caller's slower_than_s only. The model's row may also hold the candidate's own least time, which is
    a bound: a plan faster than that would expose a wrong bound, so it is not excused here."""
    solver_value = objective_to_user(f, sol.objective)
    mine = objective_value(est, f.budget.objective)
    if est.training_time_s < window_s:  # the caller's slower-than row holds T above the plan's own time
        mine = est.usd_per_hour * window_s / SECONDS_PER_HOUR if f.budget.objective == "cost" else window_s
    tol = CHECK_REL * abs(mine)
    if f.budget.objective == "cost":
        # v >= T - U (1 - b): where the solver returns b a hair below 1 (within its integrality tolerance), v may sit
        # U x (1 - b) below T. Account for exactly the deviation returned.
        slack = sum(abs(sol.values[b] - round(sol.values[b])) for b in f.block_starts.values())
        price_max = max(u.node.price_usd_per_node_hour * u.nodes_per_block for u in f.cand.uses)
        tol += slack * f.time_upper_s * price_max * f.c.iterations / SECONDS_PER_HOUR
    # The tick is that of the model CP-SAT solved: its budget rows' allowance is in its translation only, never in
    # f.lm (_budget_allowance); the plan's budget is checked on the exact limits below (budget_violations).
    if solver_name == "cpsat":  # each rounded time coefficient is off by <= half a tick per unit
        tick_error_s = 0.5 / ticks_per_s(f.lm) * (problem.model.num_layers + 8) * (f.c.m + f.cand.pp + 2)
        scale = f.c.iterations if f.budget.objective == "time" else est.usd_per_hour * f.c.iterations / SECONDS_PER_HOUR
        tol += tick_error_s * scale
    # An optimal solution has every time variable at its lower bound, so the two must agree. A solution stopped by the
    # time limit may leave slack in t, M or T: its objective is then only an upper bound on the plan's true value.
    off = abs(solver_value - mine) if sol.status == "optimal" else mine - solver_value
    if off > tol:
        raise ConsistencyError(
            f"{solver_name}: solver objective {solver_value!r} but the cost model prices the decoded plan at {mine!r} "
            f"(candidate tp={f.cand.tp} dp={f.cand.dp} b={f.cand.micro_batch_size} pp={f.cand.pp})"
        )
    for i, (a, s) in enumerate(zip(solver_memory_bytes(f, sol), est.stages)):
        if abs(a - s.memory_bytes) > CHECK_REL * s.memory_bytes + 1.0:
            raise ConsistencyError(f"{solver_name}: stage {i} memory {a!r} B in the model, {s.memory_bytes!r} B priced")
    if budget_violations(plan, est, f.budget):
        raise ConsistencyError(f"{solver_name}: decoded plan breaks {budget_violations(plan, est, f.budget)}")


MAX_ROUNDING_CUTS = 20
MODEL_PROBE_S = 1.0  # an interleaved candidate's model, tried for this long before its sibling's positional bound
# (CP-SAT's deterministic time; the wall clock caps it at 4 x that, or the deadline)
# Round 22 (probe22): CP-SAT's parameters for a probe, on top of the engine's own. A probe is a small model (39B 8k:
# ~136 variables, ~290 rows) that ends "infeasible" under the incumbent's cut in a few milliseconds of deterministic
# time; the native solve was ~19 ms of CPU, its presolve's second round and the LP's cut rounds most of what is
# avoidable. Without cuts (cut_level 0) and with one presolve round the same 198 probes of 39B 8k and 76B 3k's proofs
# end with the same statuses in ~30 % less CPU (docs/solver.md "Round 22: ... (probe22)"). Parameters only steer
# CP-SAT: "optimal" and "infeasible" are proofs whatever they are, and a probe that runs out of its deterministic
# time says "unknown" and leaves the candidate to its positional bound, as before.
PROBE_PARAMS = {"cut_level": 0, "max_presolve_iterations": 1}


def _model_probe(problem: Problem, engine: Backend, budget: Budget, options: SpaceOptions, memo: Memo,
                 item: Bounded, incumbent_value: float, limit_s: float):
    """An interleaved (v > 1) candidate's own model with the incumbent's cut, for at most limit_s, before the v = 1
    sibling's positional bound: (solution, (plan, estimate) or None, solves, formulation). "optimal" or "infeasible"
    closes the candidate as the loop's own model solve would (the same model, the same cut); anything else leaves it
    to the positional bound, as before.

    Issue 14, round 8: at the front of the time rows' queues sit interleaved candidates whose sibling positional
    bound costs 1-4 s of CPU each on the large pools (GPT-3 175B / Llama-2 70B on mixed-pool-8k / 3k, 8-16 stages
    of 64-128 replicas) and whose models, with an incumbent's cut, CP-SAT closes in 0.04-0.12 s (Llama-2 70B, time
    under B on mixed-pool-3k: 3 candidates in 9 s, each model infeasible under the cut after its 2 s bound)."""
    sk = memo.skeleton(item.cand)
    f = build(problem, budget, item.cand, options, incumbent_value, INCUMBENT_REL, skel=sk)
    sol, found, solves = _solve_model(problem, _probe_engine(engine), f, limit_s, None)
    return sol, found, solves, f


def _probe_engine(engine: Backend) -> Backend:
    """The backend a model probe runs on: CP-SAT with PROBE_PARAMS and MODEL_PROBE_S of deterministic time (the same
    probe whatever the machine's load); another backend as it is."""
    if isinstance(engine, CpSat):
        return CpSat(engine.seed, {**engine.params, **PROBE_PARAMS, "max_deterministic_time": MODEL_PROBE_S})
    return engine


LOOP_TIMES: dict | None = None  # a dict: solve (and its inner solves) add each loop step kind's CPU s and count
QUEUE_DUMP: list | None = None  # a list: each solve appends (queue, parked, incumbent) at its loop's end (last: outer)
MODEL_SLICE_S = 1.0  # a model solve's first time slice while other candidates are open (see solve)
MODEL_SLICE_GROWTH = 4.0  # each later solve of the same candidate gets this many times more
# Round 23 (park76): a slice is CP-SAT's work (deterministic time), not the wall clock's seconds, with the deadline
# (the rest of the limit, on the solver's clock) as its wall cap. On a loaded machine (2 cores, load 9) a 1 s wall
# slice gave CP-SAT 0.1-0.2 s of CPU: Megatron 76B 8k time<=B's parked (tp 2, dp 7, pp 21, cp 4) candidate, whose
# model under the incumbent's cut is "infeasible" after 0.15 deterministic s (0.4 s of CPU), ended "unknown" and
# held the row's bound at its positional 231,935 s (10.59 %), and 145B 8k's (tp 2, dp 9, pp 21, cp 4) the same
# (docs/solver.md "Round 23: ... (park76)"). SLICE_WORK_PER_S: deterministic time per slice second, CP-SAT's
# deterministic time per CPU second measured on these models (0.37-0.51), so that a slice is about as much work as
# the wall slice was on an idle machine. Only when a slice ends changes: "optimal" and "infeasible" are proofs.
SLICE_BY_WORK = True
SLICE_WORK_PER_S = 0.5
# A CP-SAT model solve's wall cap where it is the rest of the limit (a slice by work, or the last solve), converted
# to wall seconds at the rate the solver's clock ran against the wall since the solve began (_wall_per_clock): 1
# where that clock is the wall (time.perf_counter), so the cap is the rest of the limit as before; more where a bench
# runs the clock on CPU time (bench/proof_rows.py --cpu-clock) on a loaded machine, where the rest of a CPU-second
# limit given as wall seconds left CP-SAT a fraction of that CPU. On the CPU clock the average rate can overshoot the
# limit where the load falls during the last solve (Megatron 145B 8k time: 11.05 and 10.15 s of CPU at a 10 s limit).
# Measured with it off (SLICE_BY_WORK alone; round 23, park76): 145B 8k time<=B 0.42 / 0.47 %, 76B 3k time<=B optimal,
# but 76B 8k time<=B 10.33 / 10.33 % (its candidate's first slice comes late, the rest of the limit as wall cut it).
SLICE_CAP_BY_RATE = True


def _wall_per_clock(start: float, wall0: float) -> float:
    """Wall seconds per second of the solver's clock (time.perf_counter) since start (wall0: time.monotonic then),
    at least 1."""
    clock = time.perf_counter() - start
    return max(1.0, (time.monotonic() - wall0) / clock) if clock > 0 else 1.0


QUICK_SEEDS = 8  # candidates whose quick plans are tried before the loop, for a first plan (of each (cp, tp))
SEED_SHARE = 0.1  # seeding stops after this share of the time limit (from its start)
FIRST_PLAN_SEED_SHARE = 0.5  # a first-plan-only search (a seed search) seeds for up to this share of its limit
FIRST_PLAN_SEEDS = 400  # and at most this many candidates (without a limit too; Llama-2 70B's plan: the 115th)
SEED_RECHECK_LAST = True  # a first-plan-only search re-checks a backend's "infeasible" once nothing else is left


def _seed_ruled_out(memo: Memo, budget: Budget, item: Bounded, incumbent: tuple | None) -> bool:
    """Whether a time-under-B search's own seed (solve's QUICK_SEEDS of each (cp, tp), v = 1) need not be priced
    (SEEDS_REFINED): a plan is known (incumbent; None: no skip) and the seed's refined bound under the budget
    (_refined_at_least, the loop's own level, kept in the memo for it) reaches that plan's value or says no plan of
    the seed meets the budget, so none of its quick plans beats the plan.

    Why (round 17, budgetb): with a plan known the seeds are climb starts only, and minimizing time under a tight
    cost budget the fastest candidates' quick plans break it: on the large time<=B rows (Megatron 310B, 1T, 18B,
    76B, Llama-2 70B) the seeds met B nowhere and took SEED_SHARE of the limit (0.4-0.9 s of CPU at 10 s). Where B
    is loose their plans are the good starts (Llama-2 7B 8k: 157,419 s against the descent's 9.75M s; GPT-3 6.7B 3k:
    44,933 s against 1.39M s): those seeds' bounds lie below the plan, and they are priced as before. Incumbents
    only: no bound, pruning rule or answer depends on it."""
    if not SEEDS_REFINED or incumbent is None or _capped_quantity(budget) != "cost":
        return False  # minimizing time under a cost budget only (cost under a deadline as before)
    return _refined_at_least(memo, budget, item, incumbent[0] * (1 - INCUMBENT_REL))


def _first_plan_seeds(bounded: list[Bounded]) -> list[Bounded]:
    """The seeds of a first-plan-only search (a budget search's seed search): the usual seeds first (the QUICK_SEEDS
    least bounded v = 1 candidates of each (cp, tp), in bound order), then every other v = 1 candidate, the next of
    each (cp, tp) group in bound order, then the one after, and so on (round robin over the groups, each round in
    bound order). Quick plans cost 1-6 ms a candidate; the loop's refined and in-flight bounds, which come before a
    candidate's quick plans there, cost about as much and give no plan (Llama-2 70B, mixed-pool-8k, megatron target,
    cost under B = $7.34M, the cp = 1, v = 1 part: its 8 seeds of each (cp, tp), deep tp 1 pipelines that do not fit,
    gave no plan, and its loop found none in 2.3 s of CPU; in this order the 115th quick plan, at 0.4 s, meets B).
    The usual seeds come first because their plans, the least bounded ones, are the better starts for the climbs
    (a round robin from the first rank gave GPT-2 XL, time under B, a seed at $25k instead of $13.5k, and its climb
    ended at 456,185 s instead of 86,429 s). Plans only, never a proof: the search goes on to its loop where these
    give none."""
    groups: dict[tuple[int, int], int] = {}
    ranked = []
    for item in bounded:  # bounded is in bound order
        if item.cand.v == 1:
            group = (item.cand.cp, item.cand.tp)
            rank = groups.get(group, 0)
            groups[group] = rank + 1
            ranked.append((max(rank, QUICK_SEEDS - 1), len(ranked), item))
    ranked.sort(key=lambda r: (r[0], r[1]))
    return [item for _, _, item in ranked]


CPSAT_BUDGET_MARGIN = 2.0  # the budget rows' allowance, in units of _check's bound on CP-SAT's tick error


def cpsat_tick_error_s(problem: Problem, f, ticks: int) -> float:
    """A bound on how far CP-SAT's rounding can move T (seconds per iteration) from the plan's own value: half a tick
    per rounded coefficient along a pipeline's rows, (layers + 8) x (m + pp + 2) of them (the bound _check allows)."""
    return 0.5 / ticks * (problem.model.num_layers + 8) * (f.c.m + f.cand.pp + 2)


def _budget_allowance(problem: Problem, f) -> dict[str, float]:
    """CP-SAT's allowance on the model's time and cost budget rows, by row name ("bud_time", "bud_cost"): how far
    above its right-hand side (in the row's own units) CP-SAT's translation puts each row (CpSat.solve's
    `allowance`), so that every plan that meets the budget is a point of CP-SAT's integer model. It is
    CPSAT_BUDGET_MARGIN x the bound on CP-SAT's rounding of the row at a plan (cpsat_tick_error_s at the model's own
    tick; the cost row: that times the most any plan of the candidate can rent per iteration-second, pp blocks at
    the dearest block price).

    Without it a plan that sits exactly at the budget (CHECK_REL and BUDGET_REL are 10^-6; a tick error of one part
    in 10^4 is common, e.g. 1-microsecond ticks on a 100 s iteration) was not a point of the integer model: CP-SAT
    called the model infeasible, and before a plan was known the other backend re-checked it (issue 14, round 8:
    GPT-3 13B on FASOP's cluster, time under B at the only plan's own cost: CBC's re-check ran to its limit, 4-12 s,
    and the first plan came at 6.5 s). With an incumbent such a plan was cut off silently. Plans the allowance lets
    in that break the budget are cut off by _solve_model's rounding cuts, and the cost model decides every answer.

    The allowance lives in CP-SAT's translation only: the shared model keeps the rows as add_budgets built them, so
    CBC, a re-check, the point's row check and _check all see the exact rows (issue 14, round 11). Until round 10 the
    rows were raised on the shared model itself, and CBC's re-check of a CP-SAT "infeasible" solved the raised rows
    (tests/test_recheck_rows.py). The tick is the exact model's (ticks_per_s), the one the translation uses: the
    allowance does not feed back into it."""
    err_s = CPSAT_BUDGET_MARGIN * cpsat_tick_error_s(problem, f, ticks_per_s(f.lm))
    out: dict[str, float] = {}
    for con in f.lm.constraints:
        if con.name == "bud_time" and con.sense == "<=":
            out[con.name] = err_s
        elif con.name == "bud_cost" and con.sense == "<=":
            out[con.name] = err_s * f.cand.pp * max(f.c.price_scaled)
    return out


def _allowance_rel(f, allowance: dict[str, float]) -> dict[str, float]:
    """The allowance relative to limit x (1 + BUDGET_REL), the exact row's right-hand side: "time" and "cost"."""
    out: dict[str, float] = {}
    for con in f.lm.constraints:
        if con.name in allowance and con.rhs > 0:
            out["time" if con.name == "bud_time" else "cost"] = allowance[con.name] / con.rhs
    return out


def _solve_model(problem: Problem, engine: Backend, f, time_limit_s: float | None, hint_values: dict | None):
    """Solve one candidate's model: (solution, (plan, estimate) or None, how many solves); see _solve_with_cuts.

    A model handed back without a plan is as it came: this backend's rounding cuts come from its own rounding (at
    most CP-SAT's tick below the budget), so the other backend's re-check of an "infeasible" solves the rows as
    built, not them. With a plan they stay: _check reads the tick of the model the backend solved."""
    built = len(f.lm.constraints)
    sol, found, solves = _solve_with_cuts(problem, engine, f, time_limit_s, hint_values)
    if found is None:
        del f.lm.constraints[built:]
    return sol, found, solves


def _cuts_stuck(found: tuple[Plan, Estimate], budget: Budget) -> bool:
    """Whether a model solve's plan still breaks the time or cost budget after _solve_with_cuts' rounding cuts (by no
    more than CHECK_REL: anything larger is never handed back). CBC meets a cut within its integrality tolerance: a
    block start at 1 - 1e-7 lowers the cost row by U x 1e-7, below every cut, and the point never moves (audit3,
    round 11: time under a cost budget one part in 10^6 below the fastest plan's cost; the plan came back 10^-12 over
    limit x (1 + BUDGET_REL) after MAX_ROUNDING_CUTS identical cuts, and _check raised ConsistencyError)."""
    plan, est = found
    return any(v in ("max_time", "max_cost") for v in budget_violations(plan, est, budget))


def _solve_with_cuts(problem: Problem, engine: Backend, f, time_limit_s: float | None, hint_values: dict | None):
    """Solve one candidate's model: (solution, (plan, estimate) or None, how many solves).

    The model's budget rows hold the solver's own numbers, which CP-SAT rounds to ticks and CBC meets within its
    tolerance; the cost model decides. A plan that breaks a time or cost budget only by that rounding (the model
    says it meets the row; priced, it overshoots limit x (1 + BUDGET_REL) by at most CHECK_REL) is cut off just
    below its value (10^-8 relative, at least 10^-8 in the row's units) and the model is solved again. The cut may
    also drop a plan within that much below it, a sliver at the budget's edge. pareto's next time limit lies one part
    in 10^6 below the last frontier plan, and on FASOP's cluster with GPT-3 2.7B that plan came back this way.
    Anything larger, or still there after MAX_ROUNDING_CUTS cuts, is left for _check to report."""
    deadline = None if time_limit_s is None else time.perf_counter() + time_limit_s
    budget, cand = f.budget, f.cand
    solves = 0
    while True:
        left = None if deadline is None else deadline - time.perf_counter()
        if solves and left is not None and left <= 0:  # out of time after a cut: this candidate stays open
            return Solution("unknown", {}, None, None), None, solves
        if isinstance(engine, CpSat):  # the budget rows' allowance, in CP-SAT's translation only (_budget_allowance)
            allowance = _budget_allowance(problem, f)  # at the tick of the model as it is now (a cut may move it)
            sol = engine.solve(f.lm, None if left is None else max(0.0, left), hint=hint_values, allowance=allowance)
        else:
            allowance = {}
            sol = engine.solve(f.lm, None if left is None else max(0.0, left), hint=hint_values)
        relaxed = _allowance_rel(f, allowance)
        solves += 1
        if sol.status not in ("optimal", "feasible"):
            return sol, None, solves
        resolution = 1.0 / ticks_per_s(f.lm) if isinstance(engine, CpSat) else 1e-12
        # the rows the backend solved: the model's, and for CP-SAT its allowance on the budget rows
        broken = f.lm.violations(sol.values, time_resolution_s=resolution, allowance=allowance)
        if broken:
            raise ConsistencyError(f"{engine.name}: returned a point that breaks {broken[:3]} "
                                   f"(candidate tp={cand.tp} dp={cand.dp} pp={cand.pp})")
        plan = decode(f, sol)
        est = estimate(problem, plan)
        per_iteration = {"time": est.iteration_time_s,  # the plan's own values in the model's units
                         "cost": est.cost_usd * SECONDS_PER_HOUR * PRICE_SCALE / f.c.iterations}
        over = [(name, lin) for name, limit, value, lin in (
            ("time", budget.max_time_s, est.training_time_s, Lin.of((1.0, "T"))),
            ("cost", budget.max_cost_usd, est.cost_usd, cost_rate_expr(f) if budget.max_cost_usd else None))
            if limit is not None and limit * (1 + BUDGET_REL) < value
            <= limit * (1 + BUDGET_REL) * (1 + relaxed.get(name, 0.0)) * (1 + CHECK_REL)]
        if over and solves > MAX_ROUNDING_CUTS and any(
                value > limit * (1 + BUDGET_REL) * (1 + CHECK_REL) for limit, value in (
                    (budget.max_time_s, est.training_time_s), (budget.max_cost_usd, est.cost_usd)) if limit is not None):
            # Still over the budget by more than the model's own rounding after every cut: only CP-SAT's allowance
            # (_budget_allowance) let it in. No plan, no proof: the candidate stays open (never a plan that breaks B).
            return Solution("unknown", {}, None, None), None, solves
        if not over or solves > MAX_ROUNDING_CUTS:
            return sol, (plan, est), solves
        for name, lin in over:
            # Below both the solver's value (CBC reports 8 digits, CP-SAT rounds) and the priced one, by more than
            # CBC's tolerance and CP-SAT's tick and far less than BUDGET_REL.
            at = min(sum(coef * sol.values[n] for n, coef in lin.terms.items()), per_iteration[name])
            # Named by the model's row count: unique within the model (PuLP refuses a repeated name).
            f.lm.add(f"round_{name}_{len(f.lm.constraints)}", lin, "<=", at - max(1e-8 * abs(at), 1e-8),
                     "time" if name == "time" else "rate")


# The deadline of the outermost solve with a time limit (time.perf_counter()), read by the steps of its inner searches
# (the seed search's first-plan-only solves, the budget descent) whose candidate lists would otherwise run past it:
# their own deadlines are shares of it (round 14, overrun). None outside a solve with a limit.
_SOLVE_DEADLINE: ContextVar[float | None] = ContextVar("optsearch_solve_deadline", default=None)


def _holding_deadline(fn):
    """solve under _SOLVE_DEADLINE: the outermost call with a time limit sets it for the calls inside it. Not a
    first-plan-only search called alone (the early seeds' list may outlast their share: EARLY_SEEDS_AFTER_LIST)."""

    @functools.wraps(fn)
    def wrapped(problem, budget, *args, time_limit_s: float | None = None, **kwargs):
        if time_limit_s is None or kwargs.get("first_plan_only") or _SOLVE_DEADLINE.get() is not None:
            return fn(problem, budget, *args, time_limit_s=time_limit_s, **kwargs)
        token = _SOLVE_DEADLINE.set(time.perf_counter() + time_limit_s)
        try:
            return fn(problem, budget, *args, time_limit_s=time_limit_s, **kwargs)
        finally:
            _SOLVE_DEADLINE.reset(token)

    return wrapped


@_holding_deadline
def solve(
    problem: Problem,
    budget: Budget,
    *,
    solver: str = DEFAULT_SOLVER,
    time_limit_s: float | None = None,
    options: SpaceOptions = SpaceOptions(),
    progress: ProgressFn | None = None,
    warm_start: Plan | None = None,
    memo: Memo | None = None,
    gap: float = 0.0,
    slower_than_s: float = 0.0,
    first_plan_only: bool = False,
    seeds_only: bool = False,
) -> SearchResult:
    """The optimal plan under the cost model, or the best found and its proven gap when the time limit stops it.

    gap: stop as soon as every candidate left has a bound within this fraction of the incumbent (0.01: proven within
    1 %). The answer is then "feasible" with its proven gap (at most `gap`), unless the bounds prove it optimal.

    warm_start: a plan known from elsewhere (e.g. the previous point of a sweep). When it is in the search space and
    meets this budget it becomes the first incumbent, so that the bound prunes more candidates; the answer is the same.
    memo: budget-free work from earlier solves of the same problem and options (see Memo); the answer is the same.
    slower_than_s: search only plans whose training time exceeds this. The caller must know that no plan this fast
    beats warm_start: warm_start is the proven optimum under a deadline of slower_than_s (a cost sweep's previous,
    tighter point), or no plan is this fast (below the least time). Every bound then uses T >= slower_than_s and
    rent x T >= rent x slower_than_s, and every model the rows of model.add_slower_than.
    first_plan_only: stop at the first plan that meets the budget (status "feasible"); the seed of a budget search.
    seeds_only (with first_plan_only): only the usual seeds' quick plans (QUICK_SEEDS v = 1 candidates of each
    (cp, tp) in bound order), no loop: "feasible" with a plan, else "timeout" (never a proof; the early seeds).

    A first plan, early: a candidate that reaches the front of the queue while no plan is known gets its quick plans
    before its positional bound (which on a deep pipeline of a large pool can take many seconds). Minimizing time
    under a cost budget, or cost under a deadline, starts with a seed search (`first_plan_only`) for the other
    objective under the same budget, for up to half the time left: its candidates come in order of that budget's own
    quantity, so the first plan it meets does meet it, where the objective's own order may visit thousands of
    candidates whose quick plans break it. Time limit: the positional programmes stop at the deadline (OutOfTime),
    leaving the candidate with its cheaper bound. Model solves of pattern-mode candidates get time slices
    (MODEL_SLICE_S, growing by MODEL_SLICE_GROWTH) while other candidates are open; one cut short is parked with the
    bound it proved and solved again once the queue cannot beat the incumbent by the gap (docs/solver.md, "Speed,
    round 3"); parked candidates count in every stopping test and in the reported bound.
    """
    start = time.perf_counter()
    wall0 = time.monotonic()  # the wall clock at the start (_wall_per_clock: a slice's wall cap)
    deadline = None if time_limit_s is None else start + time_limit_s
    engine = backend(solver)
    if not 0.0 <= gap < 1.0:
        raise SpecError(f"--gap = {gap!r}: must be at least 0 and below 1 (a fraction: 0.01 is 1 %)")
    if (pipe := pipe_engine_of(problem)) is not None:  # the formulation and its bounds price Megatron-LM's 1F1B
        raise ProfileError(f"profile: its eager_engine runs the {pipe} pipeline schedule, priced for validate only; "
                           "solve plans Megatron-LM's 1F1B schedule (use a profile without eager_engine)")
    if seeds_only and not first_plan_only:
        raise ValueError("solve: seeds_only is a first-plan-only search's option")
    if memo is None:
        memo = Memo(problem, options)
    elif memo.problem is not problem or memo.options != options:
        raise ValueError("solve: the memo belongs to another problem or other search options")
    incumbent = None  # (value, plan, estimate, solver objective)
    if warm_start is not None and in_search_space(problem, warm_start, options):
        try:
            warm_est = estimate(problem, warm_start)
        except OptsearchError:
            warm_est = None
        if warm_est is not None and not budget_violations(warm_start, warm_est, budget):
            incumbent = (objective_value(warm_est, budget.objective), warm_start, warm_est, None)
    seed_s = None
    seed_plans: list = []  # the seed search's plans that meet the budget, each climbed from (below)
    descent = None  # _budget_descent's plan, one of seed_plans
    other = "time" if budget.objective == "cost" else "cost"
    # A budget search whose first plan comes from the seed or the loop: that plan is climbed from once (below).
    climb = (incumbent is None and not first_plan_only and slower_than_s == 0.0
             and (budget.max_time_s if other == "time" else budget.max_cost_usd) is not None)
    if climb:
        # The seed search first, before this objective's own candidates and seeds (issue 14, item 3: GPT-3 175B,
        # mixed-pool-8k, megatron target, time under a cost budget: the own candidates' cheap bounds took 1.6 s and
        # the own seeds, fast plans that break a cost budget, another 0.9 s of CPU before the seed search began,
        # and the first plan came at 3.4 s). The seed search computes the per-(tp, dp, b, cp) terms that both
        # searches share (Memo). Its plan is an incumbent only, never a proof.
        seed_first_s = None  # when the seed search's first plan that meets the budget was known
        seed_budget = budget.model_copy(update={"objective": other})
        part = _narrow_memo(problem, options, memo)
        # The seed search's early seeds first (round 10): the usual seeds of its cp = 1, v = 1 part, no loop. Where
        # they hold a plan the descent is skipped (Llama-2 70B, cost under D on mixed-pool-3k, megatron target: a
        # plan at 0.12 s of CPU from them, where the descent, run first, took 0.46 s). Their quick plans and terms
        # are shared with the descent and the seed search below (_narrow_memo).
        early = _seed_search(problem, seed_budget, solver, None if time_limit_s is None else
                             EARLY_SEED_SHARE * time_limit_s, options, memo, seeds_only=True, part=part)[0][0]
        early_plan = deepest = None
        if (early.plan is not None and early.estimate is not None and in_search_space(problem, early.plan, options)
                and not budget_violations(early.plan, early.estimate, budget)):
            early_plan = incumbent = (objective_value(early.estimate, budget.objective), early.plan, early.estimate,
                                      None)
            seed_first_s = time.perf_counter() - start
        elif DEEPEST_EARLY and part is not None and (got := _deepest_lazy(memo, part, budget)) is not None:
            # time under B: the deepest pipelines' quick plans, the cheapest (round 21, seed530): a first plan, and a
            # climb start only where nothing beats it (the descent still runs, and its plan near B stays the start:
            # from the deepest plan the climbs ended worse on Megatron 39B 8k and 76B 3k)
            deepest = incumbent = (got[0], got[1], got[2], None)
            seed_first_s = time.perf_counter() - start
        cut: list[Priced] = []  # the descent's end where its share cut its climb short of the budget
        finish = _Finish(solver, options, None if time_limit_s is None else DESCENT_FINISH_SHARE * time_limit_s)
        # else the whole list's deepest pipelines, before the whole descent (_deepest_first)
        deep: list | None = [] if DEEPEST_EARLY and deepest is None and _capped_quantity(budget) == "cost" else None
        found, found_at = (None, None) if early_plan is not None else _part_then_whole_descent(
            memo, part, budget, None if time_limit_s is None else DESCENT_SHARE * time_limit_s, cut, finish, deep)
        if deep:
            deepest = (deep[0][0][0], deep[0][0][1], deep[0][0][2], None)
            incumbent = deepest if incumbent is None else incumbent
            seed_first_s = deep[0][1] - start
        if found is None and cut and time_limit_s is not None and (deepest is None or not DEEPEST_SKIPS_MORE):
            # No plan yet, and the descent was still moving towards the budget when its share ended: it goes on, for
            # DESCENT_MORE_SHARE of the time left, before the seed search (firstplan: Megatron 1T, mixed-pool-3k,
            # time under B = $16.51M: the climb needs about 2 s of CPU of quick plans; cut at 1.1 s, the seed search
            # and the loop found no plan in the 6 s after it).
            more = _budget_descent(memo, budget, DESCENT_MORE_SHARE * max(0.0, time_limit_s - (
                time.perf_counter() - start)), start=cut[-1], finish=finish)
            found, found_at = (more, time.perf_counter()) if more is not None else (None, None)
        if found is not None:  # a first plan from the cheap side (_budget_descent), before the seed search
            descent = incumbent = (found[0], found[1], found[2], None)  # the start, as before (the deepest plan
            seed_first_s = found_at - start if seed_first_s is None else min(seed_first_s, found_at - start)  # below)
        share = None if time_limit_s is None else (
            SEED_AFTER_DESCENT_SHARE if descent is not None and _capped_quantity(budget) == "cost" else 0.5
        ) * max(0.0, time_limit_s - (time.perf_counter() - start))
        # With the descent's plan known, the seed search gives climb starts only, and its cp = 1, v = 1 part is
        # skipped (SEED_PART_AFTER_DESCENT; round 15, budgetplans: Megatron 1T, mixed-pool-8k, time under B, the
        # part's search took 1.4-1.5 s of CPU for no plan, and the loop that finds the 2.36M s plan came too late)
        for seed, known in _seed_search(problem, seed_budget, solver, share, options, memo, part=part,
                                        whole_only=descent is not None and not SEED_PART_AFTER_DESCENT):
            if (seed.plan is not None and seed.estimate is not None and in_search_space(problem, seed.plan, options)
                    and not budget_violations(seed.plan, seed.estimate, budget)):
                value = objective_value(seed.estimate, budget.objective)
                seed_plans.insert(0, (value, seed.plan, seed.estimate, None))  # the whole space's first
                if incumbent is None or value < incumbent[0]:
                    incumbent = seed_plans[0]
                seed_first_s = known - start if seed_first_s is None else seed_first_s
        if early_plan is not None and incumbent is early_plan and seed_plans and min(
                p[0] for p in seed_plans) <= early_plan[0]:  # the seed search found it again (or better): its plan
            incumbent = min(seed_plans, key=itemgetter(0))  # is the start, as before the early seeds
        if descent is not None:  # climbed from after the seed search's plans (a quarter share)
            seed_plans.append(descent)
        seed_s = time.perf_counter() - start
    else:
        seed_first_s = None
    # The distributed-optimizer-off candidates (under --overlap-grad-reduce, Candidate.dist) come later (LAZY_OFF):
    # their terms and cheap bounds doubled the candidates' building (GPT-3 175B, mixed-pool-8k, megatron target:
    # 1.44 -> 2.77 s of a profiled start), all before the first plan. They join once a plan is known, before any
    # climb from it and before the loop's first stopping test; or, without a plan, when the loop has run
    # OFF_WAIT_SHARE of the limit or has nothing else left (off_pending below). No bound stands in for them: no
    # answer, bound or gap is reported while one of them is missing (docs/solver.md, "Round 10: first plans").
    if incumbent is None and not climb and not first_plan_only and slower_than_s == 0.0:
        early = _part_seeds(problem, budget, solver, time_limit_s, options, memo)
        if early is not None:  # one of the whole list's own seeds (below), known before that list is built
            incumbent, seed_first_s = (early[0], early[1], early[2], None), early[3] - start
    # Past the deadline of the outermost solve (_SOLVE_DEADLINE; a seed search's own deadline is only its share) the
    # list stops (round 14, overrun: Megatron 1T's took 1.5-2 s quiet and up to 7.7 s at load 4, past a limit that
    # the start-up had shortened to 5 s): no candidate is then bounded, and a plan known (the early seeds', the seed
    # search's) is reported without a bound.
    unlisted = False
    try:
        bounded, total = _candidates(memo, budget, slower_than_s, DEFAULT if LAZY_OFF else ALL,
                                     _SOLVE_DEADLINE.get())
    except OutOfTime:
        bounded, total, unlisted = [], 0, True
    off_pending = LAZY_OFF and not unlisted
    # A first plan before the loop: the quick plans of the QUICK_SEEDS candidates with the least cheap bounds that
    # have quick plans (pattern mode, v = 1; a few milliseconds each). Interleaved candidates (v > 1) have none and
    # their relaxed bounds put them first: seeding from them would leave a large space without a plan.
    # In the megatron target's space the cp > 1 candidates' cheap bounds come first too, and the first QUICK_SEEDS
    # held no cp = 1 candidate with a quick plan (GPT-3 175B on mixed-pool-8k, cost: $2.73M, against $2.08M from
    # QUICK_SEEDS of each (cp, tp) in bound order, 0.2 s of CPU). Seeding stops after SEED_SHARE of the time limit
    # (minimizing time, 128 seeds took 2 s of CPU, and the seed search of a budget search then found no plan), and at
    # the first plan when that is all the caller wants.
    seeds: list[Bounded] = []
    per_group: dict[tuple[int, int], int] = {}
    # A budget search seeds too after its seed search found a plan: the objective's own seeds are often the better
    # start for the neighbour search (Llama-2 70B, mixed-pool-8k, megatron target, time under a cost budget: 1.05e6 s
    # with them, 6.2e6 s without).
    own_seeds = incumbent is None or seed_first_s is not None
    for item in bounded if own_seeds and (not first_plan_only or seeds_only) else ():
        group = (item.cand.cp, item.cand.tp)
        if item.cand.v == 1 and per_group.get(group, 0) < QUICK_SEEDS:
            per_group[group] = per_group.get(group, 0) + 1
            seeds.append(item)
    seeds_until = None if time_limit_s is None else time.perf_counter() + SEED_SHARE * time_limit_s
    if seeds_only:  # the usual seeds alone, for up to the whole limit (the early seeds), counted from here
        seeds_until = None
        if (EARLY_SEEDS_AFTER_LIST and time_limit_s is not None and budget.max_cost_usd is None
                and budget.max_time_s is None):  # no cap: a seed's quick plan is a plan (the list: Memo's, shared)
            deadline = time.perf_counter() + time_limit_s
    elif first_plan_only and own_seeds:  # a seed search: quick plans round robin (_first_plan_seeds), longer
        seeds = _first_plan_seeds(bounded)[:FIRST_PLAN_SEEDS]  # the usual seeds: at most 8 x 4 cp x 4 tp
        seeds_until = None if time_limit_s is None else time.perf_counter() + FIRST_PLAN_SEED_SHARE * time_limit_s
    seeded_s = None  # when the first seed plan was found
    for item in seeds if own_seeds else ():
        if deadline is not None and time.perf_counter() > deadline:
            break
        if seeds_until is not None and time.perf_counter() > seeds_until:
            break  # with or without a plan: a budget search's seed search needs its share (issue 14)
        if (first_plan_only or off_pending) and incumbent is not None:
            break  # (off_pending: the seeds go on below, over the whole list, once the off candidates joined)
        if _seed_ruled_out(memo, budget, item, incumbent if climb else None):
            continue
        own = _best_meeting(budget, memo.quick_plans(memo.skeleton(item.cand)))
        if own is not None and (incumbent is None or own[0] < incumbent[0]):
            seeded_s = time.perf_counter() - start if incumbent is None else seeded_s
            incumbent = (own[0], own[1], own[2], None)
    first_plan_s = None if incumbent is None else time.perf_counter() - start  # when a plan was first known
    if seeded_s is not None:  # the seeds go on after their first plan (up to SEED_SHARE of the limit)
        first_plan_s = seeded_s
    if seed_first_s is not None:
        first_plan_s = seed_first_s
    joined = None
    if off_pending and incumbent is not None and not first_plan_only and not (
            OFF_NOT_PAST_LIMIT and deadline is not None and time.perf_counter() > deadline):
        # a plan is known: the off candidates join (not past the limit: the plan is then reported without a bound,
        # also where the limit ends while their list is built: 2.1 s on Megatron 1T, mixed-pool-8k; round 14)
        try:
            joined = _with_off(memo, budget, slower_than_s, bounded, deadline if OFF_NOT_PAST_LIMIT else None)
        except OutOfTime:
            pass
    if joined is not None:
        bounded, off, more = joined
        total, off_pending = total + more, False
        # The seeds above stopped at their first plan; those of the whole list (QUICK_SEEDS v = 1 candidates of each
        # (cp, tp) in bound order) are priced now, in order, for SEED_SHARE of the limit from here: the seeds as
        # before the delay (the ones priced above are kept in memo.quick). Without them in that order the off
        # candidates' seeds came last and were cut by the share (GPT-3 175B, mixed-pool-8k, time: 4.9 -> 7.7-9.1 %).
        per_group = {}
        seeds_until = None if time_limit_s is None else time.perf_counter() + SEED_SHARE * time_limit_s
        for item in bounded if own_seeds else ():
            group = (item.cand.cp, item.cand.tp)
            if item.cand.v != 1 or per_group.get(group, 0) >= QUICK_SEEDS:
                continue
            per_group[group] = per_group.get(group, 0) + 1
            if (deadline is not None and time.perf_counter() > deadline) or (
                    seeds_until is not None and time.perf_counter() > seeds_until):
                break
            if _seed_ruled_out(memo, budget, item, incumbent if climb else None):
                continue
            own = _best_meeting(budget, memo.quick_plans(memo.skeleton(item.cand)))
            if own is not None and own[0] < incumbent[0]:
                incumbent = (own[0], own[1], own[2], None)

    def climbed(incumbent, part: float = 1.0):
        """The incumbent after _neighbour_search from it, for up to part x NEIGHBOUR_SHARE of the time left."""
        left = None if time_limit_s is None else max(0.0, time_limit_s - (time.perf_counter() - start))
        share = None if left is None else part * NEIGHBOUR_SHARE * left
        wide = None if left is None else part * WIDE_SHARE * left  # the wide climb's, after the plain climb
        better = _neighbour_search(memo, budget, bounded, incumbent[:3], share, wide, climb_ends)
        return (better[0], better[1], better[2], None) if better[0] < incumbent[0] else incumbent

    climb_ends: dict[tuple[bool, Plan], Priced | ClimbCut] = {}  # the climbs' ends (or cuts) by their paths' plans

    if climb and incumbent is not None:  # the seed's plan meets the budget but is far from the objective's optimum
        first_plan_s = seed_first_s if seed_first_s is not None else time.perf_counter() - start
        # From each seed plan (the whole space's first, then the cp = 1, v = 1 part's), and from the incumbent where
        # the own seeds improved on them: the climb is greedy, and the better start does not always climb further
        # (Llama-2 70B, mixed-pool-8k, megatron target, time under B: from the seed at 3.8e7 s to 1.05e6 s, from the
        # one at 1.6e7 s to 6.2e6 s).
        # The first start (the whole space's seed, as before the cp = 1, v = 1 part was searched first) gets the
        # whole share, the others a quarter each: every climb's time is taken from the loop's.
        starts = seed_plans + ([incumbent] if all(incumbent is not p for p in seed_plans) else [])
        if seed_plans and starts[-1] is incumbent and incumbent is not descent and incumbent[0] < seed_plans[0][0]:
            # The own seeds beat every seed plan: no climb, as before the seed search came first (be56267). Climbing
            # from the seed plans cost GPT-2 XL, mixed-pool-8k, cost under 7 days 3.3 s of CPU for plans dearer than
            # the own seeds' (the optimum), and Llama-2 70B, time under B = $7.34M, 1.19e6 s against 1.05e6 s.
            # The incumbent itself is still climbed from (one neighbourhood where it is a local optimum, 0.07 s on
            # that GPT-2 XL row): with no climb at all GPT-2 XL, time under B = $51,908, kept the own seeds' 456,185 s
            # where a climb from it reaches 86,429 s (budgetrows).
            starts = [incumbent]
        plain_first = PLAIN_CLIMBS_FIRST and _capped_quantity(budget) == "cost"  # time under B (cost<=D as before)
        plain_ends: list[tuple[Priced, bool]] = []  # the plain climbs' ends (_plain_then_wide; DEEPER_OTHER_END)
        if plain_first:
            left = None if time_limit_s is None else max(0.0, time_limit_s - (time.perf_counter() - start))
            first_whole = DESCENT_CLIMB_FIRST and descent is not None and any(begin is descent for begin in starts)
            if first_whole:  # the descent's plan climbed first, for up to the whole plain share (round 18): on
                # every large time<=B row traced its plain climb reached the better end, and cut at half the share
                # it stopped a move short (Megatron 310B, mixed-pool-3k: 1,208,119 s, not 996,737 s)
                starts = [descent] + [begin for begin in starts if begin is not descent]
            got = _plain_then_wide(memo, budget, bounded, [begin[:3] for begin in starts], left, climb_ends,
                                   first_whole, RESHAPE_BOTH and RESHAPE_UNDER_B and CLIMB_RESHAPE, DEEPER_STEPS,
                                   plain_ends)
            if SPLIT_REPAIR:  # the climbs' end, its own layers moved at the ends (_split_descent; round 18)
                got = _split_improved(memo, budget, got, None if left is None else
                                      time.perf_counter() + SPLIT_END_SHARE * left)
            if got[0] < incumbent[0]:
                incumbent = (got[0], got[1], got[2], None)
        for n, begin in enumerate(starts if not plain_first else ()):
            got = climbed(begin, 1.0 if n == 0 else 0.25)
            if got[0] < incumbent[0]:
                incumbent = got
        left = None if time_limit_s is None else max(0.0, time_limit_s - (time.perf_counter() - start))
        froms = [incumbent[:3]]
        if DEEPER_FROM_WIDE_START and plain_ends and (wide_start := min(
                (end for end, _ in plain_ends), key=itemgetter(0)))[1] != incumbent[1]:
            # round 20: the wide climb moved from the best plain end (to a v > 1 plan, from which the step finds
            # nothing): that end's deeper pipelines too (Megatron 76B 8k: the wide climb's tp 2, dp 64, cp 2, 4 stages,
            # v = 3, 261,622 s; from its start, dp 16, 16 stages, 267,040 s, the step's v = 2 plan, 259,420 s)
            froms.append(wide_start[:3])
        others = [end for end, off in plain_ends if not off]
        if DEEPER_OTHER_END and others and min(end[0] for end, _ in plain_ends) < min(end[0] for end in others):
            # RESHAPE_BOTH's climb or _deeper_steps gave the best plain end: the deeper pipelines of the best of the
            # others as well (the plan the step started from before; Megatron 175B 3k: dp 6, 20 stages, 615,444 s,
            # cannot interleave; dp 8, 14 stages, 647,934 s, gives dp 8, 16 stages, v = 3, 574,121 s)
            if (other := min(others, key=lambda e: e[0])[:3])[1] not in [begin[1] for begin in froms]:
                froms.append(other)
        for n, begin in enumerate(froms):
            if n:
                left = None if time_limit_s is None else max(0.0, time_limit_s - (time.perf_counter() - start))
            deeper = _deeper_interleaved(memo, budget, bounded, begin,
                                         None if left is None else time.perf_counter() + DEEPER_SHARE * left)
            if deeper[0] < incumbent[0]:
                incumbent = (deeper[0], deeper[1], deeper[2], None)
        if deepest is not None and deepest[0] < incumbent[0]:
            incumbent = deepest
        fill = _deadline_fill_plans(memo, budget, bounded, incumbent[:3], deadline) if DEADLINE_FILL else None
        if fill is not None and fill[0] < incumbent[0] * (1 - INCUMBENT_REL):
            incumbent = (fill[0], fill[1], fill[2], None)  # the deadline's slack (_deadline_fill_plans; round 23)
        climb = False
    if first_plan_s is None and incumbent is not None:
        first_plan_s = time.perf_counter() - start  # when a plan was first known
    if (incumbent is not None and not climb and seed_s is None and not first_plan_only and slower_than_s == 0.0
            and warm_start is None and time_limit_s is not None and CLIMB_SHARE > 0.0):
        # A climb from the seeds' best plan without a budget too (round 5): the in-flight bound prunes whole
        # stretches of the queue, and a better incumbent prunes more of them (GPT-3 175B on mixed-pool-8k, cost: the
        # seeds give $2.08M, the sibling positional plans that the in-flight bound now skips gave $1.95M).
        share = None if time_limit_s is None else CLIMB_SHARE * max(0.0, time_limit_s - (time.perf_counter() - start))
        better = _neighbour_search(memo, budget, bounded, incumbent[:3], share)
        if better[0] < incumbent[0]:
            incumbent = (better[0], better[1], better[2], None)
        if DEEPEST_PLANS and budget.objective == "cost" and (deep := _deepest_plans(memo, budget, bounded, deadline)
                                                               ) is not None and deep[0] < incumbent[0]:
            incumbent = (deep[0], deep[1], deep[2], None)  # beside the climb's end (_deepest_plans)
    open_bound: float | None = None  # lowest bound left unproven by a timed-out sub-solve
    explored = 0
    stopped_early = unlisted
    at_first = False  # a first-plan-only search stopped at its plan
    within_gap = False
    milps = 0
    rechecked = refuted = 0  # infeasibility claims re-checked by the other backend, and those it refuted
    # A queue ordered by lower bound. A candidate first carries its cheap bound; each time it reaches the front its
    # bound is sharpened one level (cheap -> refined -> positional, with plans found on the way) and it goes back
    # in; when it reaches the front with its positional bound, its model is solved.
    bounded_here = 0  # candidates whose positional bound was computed
    reduce_left = REDUCE_SPLITS_MOST  # open candidates whose sequences _reduce_split_plans may still split
    inflight_here = 0  # candidates whose in-flight bound was computed (inflight.py)
    harvested: set[tuple[int, ...]] = set()  # v = 1 siblings whose quick plans were offered (below)
    direct_done: set[tuple[int, ...]] = set()  # v > 1 candidates whose interleaved_direct_bound was taken (park145)
    probed = 0  # interleaved candidates whose model was tried before their positional bound (_model_probe)

    def report(item: Bounded) -> None:
        if progress is not None:
            progress(Progress(explored=explored, total=len(bounded), pruned=total - len(bounded),
                              bounded=bounded_here, incumbent=incumbent[0] if incumbent else None,
                              bound=item.lower_bound, candidate=item.cand))

    queue = [(b.lower_bound, b.cand.key, i, b) for i, b in enumerate(bounded)]
    heapq.heapify(queue)
    if seeds_only:  # no loop: whatever the seeds gave, never a proof (status "timeout" without a plan)
        queue, off_pending, stopped_early = [], False, True
    # Candidates whose model solve ran out of its time slice, ordered by bound. They stay open (their bounds count in
    # every stopping test) and are solved again, with a slice MODEL_SLICE_GROWTH times longer and the incumbent found
    # meanwhile as the cut, once nothing in the queue can still beat the incumbent by the gap.
    parked: list = []
    loop_start = time.perf_counter()
    # A seed search (first plan only, loop included) waits longer for them (SEED_OFF_WAIT_SHARE): its plan is a
    # start for the budget search's climbs, and joining at OFF_WAIT_SHARE built the seed objective's off lists
    # (1.6 s of CPU of a 4.4 s limit, GPT-3 175B on mixed-pool-8k, time under B: round 12, timeload) past its
    # share. They still join when nothing else is left, so a search run to the end finds a plan where one exists.
    off_wait_s = OFF_WAIT_S if time_limit_s is None else (
        SEED_OFF_WAIT_SHARE if first_plan_only and not seeds_only else OFF_WAIT_SHARE) * time_limit_s
    prev_step = None
    if LOOP_TIMES is not None:
        LOOP_TIMES["loop start"] = time.process_time()
    claims: list[tuple] = []  # a first-plan-only search's "infeasible" claims not yet re-checked (SEED_RECHECK_LAST):
    # (model, claim, the candidate's lower bound): until re-checked the candidate is open, and its bound counts

    def recheck(f, claim: Solution) -> tuple[Solution, tuple[Plan, Estimate] | None, int, str]:
        """The other backend on the model whose backend claimed it "infeasible" before any plan was known: (its
        solution, its plan or None, its solves, the backend whose answer stands)."""
        nonlocal rechecked, refuted
        rechecked += 1
        left = None if time_limit_s is None else max(0.0, time_limit_s - (time.perf_counter() - start))
        other_engine = CpSat() if engine.name == "cbc" else PulpCbc()
        built = len(f.lm.constraints)
        sol, found, solves = _solve_model(problem, other_engine, f, left, None)
        checker = other_engine.name
        if found is not None and checker == "cbc" and _cuts_stuck(found, f.budget):
            # CBC's only point breaks the budget (its cuts could not move it, _cuts_stuck): it refutes nothing,
            # and CP-SAT's exact "infeasible" stands (audit3's edge sweep, seeds 15 and 28)
            del f.lm.constraints[built:]
            sol, found, checker = claim, None, engine.name
        refuted += found is not None
        return sol, found, solves, checker

    while queue or parked or off_pending or claims:
        front = queue[0][0] if queue else math.inf
        lower = min(front, parked[0][0]) if parked else front
        if first_plan_s is None and incumbent is not None:
            first_plan_s = time.perf_counter() - start
        if first_plan_only and incumbent is not None:
            stopped_early = at_first = True  # not the limit: the message says which (audit6)
            break
        if off_pending and OFF_NOT_PAST_LIMIT and deadline is not None and time.perf_counter() > deadline:
            # The limit ended before the off candidates joined: their list is not built past it (1.0-1.2 s of CPU
            # on Megatron 1T, time under B). A plan known is reported, without a bound: theirs were never computed.
            stopped_early = True
            break
        if off_pending and (incumbent is not None or not (queue or parked)
                            or time.perf_counter() - loop_start > off_wait_s):
            # The off candidates join (see above), before any stopping test reads the queue and before a climb.
            try:
                bounded, off, more = _with_off(memo, budget, slower_than_s, bounded,
                                               deadline if OFF_NOT_PAST_LIMIT else None)
            except OutOfTime:  # the limit ended while their list was built: as above, a plan without a bound
                stopped_early = True
                break
            total, off_pending = total + more, False
            for j, b in enumerate(off):  # indices past every earlier one (the keys differ: never compared)
                heapq.heappush(queue, (b.lower_bound, b.cand.key, len(bounded) + j, b))
            continue
        if climb and incumbent is not None:  # the seed found none in its share: climb from the loop's first plan
            incumbent, climb = climbed(incumbent), False
        if incumbent is not None and lower >= incumbent[0] * (1 - INCUMBENT_REL):
            break  # every remaining candidate has a bound at least as large
        if incumbent is not None and lower >= incumbent[0] * (1 - gap):
            within_gap = True  # every remaining candidate is within the requested gap; the front bounds them all
            open_bound = lower if open_bound is None else min(open_bound, lower)
            break
        remaining = None if time_limit_s is None else time_limit_s - (time.perf_counter() - start)
        if remaining is not None and remaining <= 0:
            stopped_early = True
            break
        if claims and not (queue or parked or off_pending):  # nothing else left: the claims re-checked, in order
            f, claim, _ = claims.pop(0)
            sol, found, solves, checker = recheck(f, claim)
            milps += solves
            if found is not None:
                plan, est = found
                _check(problem, f, sol, plan, est, checker, slower_than_s)
                incumbent = (objective_value(est, budget.objective), plan, est, objective_to_user(f, sol.objective))
            elif sol.status != "infeasible":  # the re-check stopped at the limit: no answer on that candidate
                stopped_early = True
                break
            continue
        worth = incumbent[0] * (1 - gap) if incumbent is not None else math.inf
        src = queue if front < worth or not parked else parked
        lower, key, i, item = heapq.heappop(src)
        if LOOP_TIMES is not None:  # diagnosis only: CPU time of each step of the loop, by the level it started at
            t_step = time.process_time()
            what = ("cheap" if item.level == CHEAP else "inflight" if item.level == REFINED and not item.inflight
                    else "refined" if item.level == REFINED else "model")
            if what == "refined" and item.cand.v > 1:
                what = "refined v>1"
            if prev_step is not None:
                LOOP_TIMES[prev_step[0]] = LOOP_TIMES.get(prev_step[0], 0.0) + t_step - prev_step[1]
                LOOP_TIMES["n " + prev_step[0]] = LOOP_TIMES.get("n " + prev_step[0], 0) + 1
            prev_step = (what, t_step)
        if item.level == CHEAP:
            if MIDDLE_JOINT and not first_plan_only and not item.middle and not item.aggregate and (
                    middle := _middle_bound(memo, budget, item, queue, slower_than_s, worth)) is not None:
                # The joint rent x time floor of the candidate's degree, computed with a batch of the queue's next
                # degrees (_middle_bound; round 20): one that proves it infeasible drops it, one that lifts it past
                # the queue's front sends it back in, at about a fifth of its degree's refined tables' CPU.
                if middle == math.inf:
                    continue
                lower = max(lower, middle)
                if MIDDLE_AS_REFINED and composition_count(item.terms, item.cand.pp) > _bounds.MAX_COMPOSITIONS:
                    # Too many compositions to list: its refined bound would be the aggregate one, the larger of
                    # this floor and the cheap terms with the fastest pipelines, from its degree's tables; the floor
                    # stands for it, and the in-flight bound is its next step.
                    heapq.heappush(queue, (lower, key, i, replace(item, lower_bound=lower, middle=True, level=REFINED)))
                    continue
                # Listed compositions: the per-composition bound next (the aggregate one is about this floor)
                item = replace(item, lower_bound=lower, middle=True, aggregate=True)
                if queue and lower > queue[0][0]:
                    heapq.heappush(queue, (lower, key, i, item))
                    continue
            if AGGREGATE_FIRST and not item.aggregate and (
                    first := memo.aggregate_first(item.terms, item.cand, budget)) is not None:
                # The aggregate refined bound before the per-composition one (Memo.aggregate_first): about 16 us
                # from its degree's tables (1.5-2.5 ms a degree) against about 0.5 ms a composition list (Megatron
                # 76B, mixed-pool-8k). One it proves infeasible is dropped; one it lifts past the queue's front goes
                # back in, and gets its composition bound only if it comes to the front again.
                ahead = _bounded(problem, budget, item.terms, item.cand, True, first, slower_than_s)
                if ahead is None:
                    continue
                lower = max(lower, ahead.lower_bound)
                if queue and lower > queue[0][0]:
                    heapq.heappush(queue, (lower, key, i, replace(item, lower_bound=lower, aggregate=True)))
                    continue
            sharper = _bounded(problem, budget, item.terms, item.cand, True,
                               memo.refined_bound(item.terms, item.cand, budget, slower_than_s), slower_than_s)
            if sharper is not None:
                heapq.heappush(queue, (max(lower, sharper.lower_bound), key, i, sharper))
            continue
        if item.level == REFINED and not item.inflight:
            # The in-flight-aware bound (inflight.py, round 5): about 5 ms against 10-90 ms for the positional bound
            # in the CLI's space; a candidate it lifts past the incumbent skips the positional bound, one it lifts
            # past the queue's front goes back in. Minimizing cost, with the next ones of its heap (_inflight_ahead).
            if item.cand.key not in memo.inflight_ahead and not _past(deadline):
                _inflight_ahead(memo, budget, item, src, slower_than_s, incumbent[0] if incumbent else math.inf)
            sharper = _inflight_bounded(memo, budget, item, slower_than_s, incumbent[0] if incumbent else math.inf)
            inflight_here += 1
            if sharper is None or (incumbent is not None and sharper >= incumbent[0] * (1 - INCUMBENT_REL)):
                continue  # no plan of this candidate meets the budget, or beats the incumbent
            if item.cand.v > 1 and slower_than_s == 0.0 and (1 in options.virtual_stages or INTERLEAVED_QUICK):
                # The v = 1 sibling's quick plans (plans of the space; incumbents only, never a bound): the sibling
                # branch below took them when this candidate came to the front with its refined bound, and the
                # in-flight bound now sends most interleaved candidates back before it. Without them the seeds' plan
                # stayed the incumbent, and the positional bounds' cutoff with it (GPT-2 XL on mixed-pool-8k,
                # time: 71,745 s, 560 ms per positional bound, no model solved in 10 s; with them 37,765 s at once).
                # With them, their interleaved variants (_interleaved): the sibling's 37,951 s plan at v = 3 is
                # 29,041 s, the plan that be56267 found only by solving an interleaved candidate's model.
                # And the candidate's own quick plans (INTERLEAVED_QUICK; round 16, smalltime).
                theirs = None
                sibling = memo.skeleton(replace(item.cand, v=1)) if 1 in options.virtual_stages else None
                if sibling is not None and sibling.most is not None and sibling.cand.key not in harvested:
                    harvested.add(sibling.cand.key)
                    theirs = _best_meeting(budget, _with_interleaved(memo, _quick_within(
                        memo, budget, sibling, _sibling_floor(memo, budget, item, sharper))))  # round 20: _quick_within
                if INTERLEAVED_QUICK and not _past(deadline):  # its own quick plans (v > 1), from its skeleton
                    own_v = _best_meeting(budget, _quick_within(memo, budget, memo.skeleton(item.cand), sharper))
                    if own_v is not None and (theirs is None or own_v[0] < theirs[0]):
                        theirs = own_v
                if theirs is not None and (incumbent is None or theirs[0] < incumbent[0] * (1 - INCUMBENT_REL)):
                    incumbent = (theirs[0], theirs[1], theirs[2], None)
                    if sharper >= incumbent[0] * (1 - INCUMBENT_REL):
                        continue
            if queue and sharper > queue[0][0]:
                heapq.heappush(queue, (sharper, key, i, replace(item, lower_bound=sharper, inflight=True)))
                continue
            lower = max(lower, sharper)
        if item.level == REFINED and incumbent is not None and item.cand.key not in direct_done and (
                _interleaved_direct_applies(memo, item.cand, budget, slower_than_s)):
            # Round 23 (park145): the interleaved candidate's own positional bound (interleaved_direct_bound), before
            # its model's probe and its sibling's bound: where it reaches the incumbent (or no plan meets B) neither
            # runs; else its value is the candidate's bound, and one past the queue's front goes back in. Only with a
            # plan known (as the probe): before it the bound has no cutoff, and the first plan is the seeds' or the
            # sibling's.
            try:
                direct = interleaved_direct_bound(memo, item.cand, budget, incumbent[0], deadline)
            except OutOfTime:
                heapq.heappush(queue, (lower, key, i, item))
                stopped_early = True
                break
            direct_done.add(item.cand.key)
            if direct >= incumbent[0] * (1 - INCUMBENT_REL):  # or inf: no plan of it meets the budget
                bounded_here += 1
                report(item)
                continue
            lower = max(lower, direct)
            item = replace(item, lower_bound=lower)
            if queue and lower > queue[0][0]:
                heapq.heappush(queue, (lower, key, i, item))
                continue
        if (item.level == REFINED and item.cand.v > 1 and incumbent is not None and slower_than_s == 0.0
                and not first_plan_only and MODEL_PROBE_S > 0.0 and memo.skeleton(item.cand).most is not None):
            # An interleaved candidate's model, briefly, before its sibling's positional bound (_model_probe).
            probe_s = 4 * MODEL_PROBE_S if deadline is None else min(4 * MODEL_PROBE_S, deadline - time.perf_counter())
            if probe_s > 0.0:
                sol, found, solves, f = _model_probe(problem, engine, budget, options, memo, item, incumbent[0],
                                                     probe_s)
                milps += solves
                probed += 1
                if found is not None and engine.name == "cbc" and _cuts_stuck(found, f.budget):  # to the loop: CP-SAT
                    sol, found = Solution("unknown", {}, None, None), None
                if found is not None:
                    plan, est = found
                    _check(problem, f, sol, plan, est, engine.name, slower_than_s)
                    incumbent = (objective_value(est, budget.objective), plan, est, objective_to_user(f, sol.objective))
                if sol.status in ("optimal", "infeasible"):  # closed: its best plan is known, or none beats the cut
                    explored += 1
                    report(item)
                    continue
        if item.level == REFINED:
            # The positional bound (formulation/positional.py), and plans found without a solver: the quick plans
            # and those of the positional programme. The best that meets the budget may become the incumbent.
            sk = memo.skeleton(item.cand)
            found: list[tuple[Plan, Estimate]] = []
            sharper = lower
            # The cheap quick plans first while no plan is known: a first plan, and a cutoff for the positional
            # bound (which on a deep pipeline of a large pool can take seconds). With a plan known they come after the
            # bound, only where the candidate may still beat it: before every bound they took 35 % of a 10 s
            # GPT-3 175B solve on mixed-pool-8k (255 calls, 14 ms each).
            quick_first = incumbent is None
            if quick_first:
                found += memo.quick_plans(sk)
                own = _best_meeting(budget, found)
                if own is not None and (incumbent is None or own[0] < incumbent[0] * (1 - INCUMBENT_REL)):
                    incumbent = (own[0], own[1], own[2], None)
                    if first_plan_only:
                        heapq.heappush(queue, (lower, key, i, item))
                        continue
            if item.cand.v == 1 and (sk.most is not None or incumbent is not None):
                # Pattern mode (one layer kind): the positional bound, whose sequences are plans too. Several layer
                # kinds (T5): formulation/kinds.py, only once a plan is known: their plans come only from models, and
                # bounding candidates before any model is solved delayed the first plan (T5 on fasop-a100-a10, time:
                # 2.0 -> 9.5 s); with a plan known the bound has a cutoff and often ends after one programme.
                bound_of = positional_bound if sk.most is not None else kinds_bound
                try:
                    pos = bound_of(sk, budget, cutoff=incumbent[0] if incumbent else math.inf,
                                   slower_than_s=slower_than_s, deadline=deadline)
                except OutOfTime:  # the candidate keeps its refined bound and stays open
                    heapq.heappush(queue, (lower, key, i, item))
                    stopped_early = True
                    break
                sharper = max(lower, pos.bound)
                if sk.most is not None:  # the plans below are incumbents only: past the deadline none is priced
                    found += [priced for seq in pos.sequences
                              if not _past(deadline) and (priced := memo.plan_of(sk, seq)) is not None]
                    if SEQUENCE_MOVES and budget.objective == "cost" and incumbent is not None and pos.sequences and (
                            pos.bound < incumbent[0] * (1 - INCUMBENT_REL)):  # open: its best sequence's moves too
                        found += _moved_plans(memo, sk, pos.sequences[0], deadline)
                    if REDUCE_SPLITS and budget.objective == "time" and budget.max_cost_usd is None and (
                            reduce_left > 0 and incumbent is not None
                            and pos.bound < incumbent[0] * (1 - INCUMBENT_REL)):
                        quick = _best_meeting(budget, memo.quick_plans(sk))  # open: its best quick plan's sequence
                        if quick is not None:
                            reduce_left -= 1
                            names = [u.name for u in sk.cand.uses]
                            found += _reduce_split_plans(memo, sk, [tuple(names.index(st.node_type)
                                                                          for st in quick[1].stages)], deadline)
            elif item.cand.v > 1 and slower_than_s == 0.0:
                # Interleaved: the v = 1 sibling's positional bound under the budget scaled by 1 / f_v, times f_v
                # (interleaved_positional_bound: every plan of this candidate is one of the sibling's, at least f_v
                # times its time and cost).
                sibling = memo.skeleton(replace(item.cand, v=1))
                if sibling.most is not None:
                    factor = interleaving_factor(item.terms.m, item.cand.pp, item.cand.v)
                    try:
                        pos = _sibling_positional(sibling, budget, factor, incumbent[0] if incumbent else math.inf,
                                                  deadline)
                    except OutOfTime:
                        heapq.heappush(queue, (lower, key, i, item))
                        stopped_early = True
                        break
                    sharper = max(lower, factor * pos.bound)
                    # The sibling's plans are plans of the space (v = 1): incumbents for the cutoffs, never this
                    # candidate's own (not hints for its model). Interleaved candidates fill the front of the queue
                    # in the megatron target's space, and without these its first plan stayed the only one (GPT-3 175B
                    # on mixed-pool-8k: 37 % above the best plan that cp = 1, v = 1 alone finds in 10 s). Its
                    # positional sequences meet the budget / f_v; _best_meeting checks them against the budget itself.
                    if sibling.cand.v in options.virtual_stages:
                        plans = [priced for seq in pos.sequences
                                 if not _past(deadline) and (priced := memo.plan_of(sibling, seq))]
                        if pos.bound < (incumbent[0] * (1 - INCUMBENT_REL) if incumbent else math.inf) and not _past(
                                deadline):
                            plans += memo.quick_plans(sibling)
                        theirs = _best_meeting(budget, plans)
                        if theirs is not None and (incumbent is None
                                                   or theirs[0] < incumbent[0] * (1 - INCUMBENT_REL)):
                            incumbent = (theirs[0], theirs[1], theirs[2], None)
            if not quick_first and sharper < (incumbent[0] * (1 - INCUMBENT_REL) if incumbent else math.inf) and (
                    not _past(deadline)):
                found += memo.quick_plans(sk)  # only where this candidate may still beat the incumbent
            own = _best_meeting(budget, found)
            if own is not None and (incumbent is None or own[0] < incumbent[0] * (1 - INCUMBENT_REL)):
                incumbent = (own[0], own[1], own[2], None)
                if HALF_DP_PLANS and budget.objective == "cost" and item.cand.v == 1 and not _past(deadline) and (
                        (half := _half_dp_plans(memo, budget, bounded, item.cand)) is not None
                        and half[0] < incumbent[0] * (1 - INCUMBENT_REL)):
                    incumbent = (half[0], half[1], half[2], None)
                if DEPTH_PLANS and budget.objective == "cost" and budget.max_time_s is not None and (
                        item.cand.v == 1 and not _past(deadline)) and (
                        (near := _depth_plans(memo, budget, bounded, item.cand)) is not None
                        and near[0] < incumbent[0] * (1 - INCUMBENT_REL)):
                    incumbent = (near[0], near[1], near[2], None)  # the depths beside it (_depth_plans; round 24)
            bounded_here += 1
            report(item)
            if sharper == math.inf or (incumbent is not None and sharper >= incumbent[0] * (1 - INCUMBENT_REL)):
                continue  # no plan of this candidate beats the incumbent (or meets the budget)
            heapq.heappush(queue, (sharper, key, i, Bounded(item.cand, sharper, item.terms, POSITIONAL, own)))
            continue
        sk = memo.skeleton(item.cand)
        least_s = slower_than_s
        if sk.most is not None and budget.objective == "cost" and item.cand.v == 1:
            # The candidate's own least time (its positional bound with time as the objective): the model's rows
            # T >= T_lo and v >= T_lo b give its LP relaxation cost >= rent x T_lo.
            try:
                fastest = positional_bound(sk, budget.model_copy(update={"objective": "time"}),
                                           slower_than_s=slower_than_s, deadline=deadline)
                if math.isfinite(fastest.bound):
                    least_s = max(least_s, fastest.bound)
            except OutOfTime:  # past the deadline: no model is built (0.3-0.4 s for 64 stages of Megatron 1T) nor
                heapq.heappush(queue, (lower, key, i, item))  # solved; the candidate stays open with its bound
                stopped_early = True
                break
        f = build(problem, budget, item.cand, options, incumbent[0] if incumbent else None, INCUMBENT_REL,
                  skel=sk, slower_than_s=least_s)
        if deadline is not None:  # the bound and the build above took some of it
            remaining = deadline - time.perf_counter()
        start_from = item.own_best
        # While other candidates are open, one model solve gets a slice of the time: a model whose cut (the
        # incumbent) is still far from the optimum can take seconds to prove it has no better plan, where the next
        # candidates may hold the plan that makes that proof quick (issue 14: GPT-3 13B on mixed-pool-8k, time under
        # a cost budget, spent 30 s on such models before a later candidate's quick plan gave the optimum).
        limit, sliced = remaining, False
        if (queue or parked) and sk.most is not None:  # without pattern mode (several layer kinds) plans and bounds
            # come only from models: a slice would only restart them (T5 on FASOP's cluster, time: 16 -> 27 % at 10 s)
            slice_s = MODEL_SLICE_S * MODEL_SLICE_GROWTH ** item.tries
            if limit is None or slice_s < limit:
                limit, sliced = slice_s, True
        # A hint needs pattern mode (a candidate of several layer kinds is never parked, but stay safe).
        hint_values = hint(f, start_from[1]) if start_from and f.patterns is not None else None
        built = len(f.lm.constraints)
        slice_engine = engine
        if sliced and SLICE_BY_WORK and isinstance(engine, CpSat):  # the slice as CP-SAT's work, the deadline as wall
            slice_engine = CpSat(engine.seed, {**engine.params, "max_deterministic_time": limit * SLICE_WORK_PER_S})
            limit, sliced_wall = remaining, False
        else:
            sliced_wall = sliced
        if not sliced_wall and remaining is not None and SLICE_CAP_BY_RATE and isinstance(engine, CpSat):
            limit = remaining * _wall_per_clock(start, wall0)  # the rest of the limit, as wall seconds
        sol, found, solves = _solve_model(problem, slice_engine, f, limit, hint_values)
        checker = engine.name
        if found is not None and checker == "cbc" and _cuts_stuck(found, f.budget):
            # CBC's rounding cuts left its point on a plan over the budget (a block start a hair below 1, within its
            # integrality tolerance, meets every cut: audit3, round 11): CP-SAT, whose integers are exact, solves the
            # candidate's model without CBC's cuts, and its answer is checked as CP-SAT's.
            del f.lm.constraints[built:]
            left = None if time_limit_s is None else max(0.0, time_limit_s - (time.perf_counter() - start))
            sol, found, more = _solve_model(problem, CpSat(), f, left, None)
            solves += more
            checker = "cpsat"
        if (sol.status == "infeasible" and incumbent is None and first_plan_only and SEED_RECHECK_LAST
                and (queue or parked or off_pending)):
            # A first-plan-only search re-checks the claim once nothing else is left (claims, below): the next
            # candidates may give its plan sooner (Megatron 18B, fasop-a100-a10, time under B: CBC's re-check of
            # one CP-SAT claim ran to the seed search's limit, twice, and the first plan came at 6.45 s, where the
            # next candidate's model gives it in 0.3 s; firstplans).
            claims.append((f, sol, lower))
            milps += solves
            explored += 1
            report(item)
            continue
        if sol.status == "infeasible" and incumbent is None:
            # A backend's "infeasible" is not taken as proof on its own (docs/solver.md, "What a proof rests on"):
            # before any plan is known it decides a "no plan meets the budget" answer, so the other backend re-checks
            # the same model (CBC's cuts, and CP-SAT's rounding of a budget row at a plan's exact value, have each
            # excluded a plan that meets the budget).
            sol, found, more, checker = recheck(f, sol)
            solves += more
        milps += solves
        explored += 1
        if found is not None:
            plan, est = found
            _check(problem, f, sol, plan, est, checker, slower_than_s)
            incumbent = (objective_value(est, budget.objective), plan, est, objective_to_user(f, sol.objective))
            start_from = incumbent[:3]
        if sol.status in ("feasible", "unknown"):  # stopped by the time limit or its slice inside this candidate
            cand_bound = objective_to_user(f, sol.bound) if sol.bound is not None else item.lower_bound
            cand_bound = max(cand_bound, item.lower_bound)
            if sliced:  # open, to be solved again later with a longer slice (the bound it proved kept)
                heapq.heappush(parked, (cand_bound, key, i, Bounded(item.cand, cand_bound, item.terms, POSITIONAL,
                                                                    start_from, item.tries + 1)))
            else:
                stopped_early = True
                open_bound = cand_bound if open_bound is None else min(open_bound, cand_bound)
        report(item)
    if LOOP_TIMES is not None and prev_step is not None:
        LOOP_TIMES[prev_step[0]] = LOOP_TIMES.get(prev_step[0], 0.0) + time.process_time() - prev_step[1]
        LOOP_TIMES["n " + prev_step[0]] = LOOP_TIMES.get("n " + prev_step[0], 0) + 1
    elapsed = time.perf_counter() - start
    if QUEUE_DUMP is not None:  # diagnosis only (bench/budget_front.py): the loop's queue and parked as it ends
        QUEUE_DUMP.append((list(queue), list(parked), incumbent[0] if incumbent else None))
    if stopped_early and (queue or parked or claims):
        # Unvisited candidates are bounded by their lower bounds; the fronts of the queue and the parked are the least.
        # A claim not re-checked leaves its candidate open at its bound (audit6: a first-plan-only search that stopped
        # at its plan reported that plan's value as its bound, above the optimum of the claimed candidate).
        least = min(queue[0][0] if queue else math.inf, parked[0][0] if parked else math.inf,
                    min((c[2] for c in claims), default=math.inf))
        open_bound = least if open_bound is None else min(open_bound, least)
    stats = {"candidates_total": float(total), "candidates_after_bounds": float(len(bounded)),
             "candidates_explored": float(explored), "models_solved": float(milps)}
    if seed_s is not None:
        stats["seed_s"] = seed_s
    stats.update(inflight_bounded=float(inflight_here), positional_bounded=float(bounded_here))
    if probed:
        stats["models_probed"] = float(probed)
    if incumbent is not None:
        stats["first_plan_s"] = elapsed if first_plan_s is None else first_plan_s
    if rechecked:
        stats.update(infeasible_claims_rechecked=float(rechecked), infeasible_claims_refuted=float(refuted))
    if incumbent is None:
        return SearchResult(method=solver, status="timeout" if stopped_early else "infeasible",
                            objective=budget.objective, solve_time_s=elapsed, stats=stats,
                            message=("stopped at the time limit before any plan that meets the budget was found "
                                     "(not a proof that none exists)") if stopped_early else "")
    value, plan, est, solver_value = incumbent
    if stopped_early or within_gap:
        # no bound while the off candidates are missing (LAZY_OFF): the queue's front does not bound them
        bound = min(value, open_bound) if open_bound is not None and not off_pending else None
        return SearchResult(method=solver, status="feasible", objective=budget.objective, solve_time_s=elapsed,
                            plan=plan, estimate=est, objective_value=value, solver_objective_value=solver_value,
                            bound=bound, stats=stats,
                            message=(("stopped at its first plan" if at_first else "stopped at the time limit") + (
                                " before the distributed-optimizer-off candidates joined (no bound)" if off_pending
                                else " before the candidates were listed (no bound)" if unlisted
                                else "")) if stopped_early else f"stopped within the gap {gap:g}")
    return SearchResult(method=solver, status="optimal", objective=budget.objective, solve_time_s=elapsed, plan=plan,
                        estimate=est, objective_value=value, solver_objective_value=solver_value, bound=value,
                        stats=stats)


def process_age_s() -> float:
    """Seconds since this process started (Linux: /proc; elsewhere 0). The CLI takes them off --time-limit, so that
    the limit holds for the wall time of the whole command, interpreter start and imports included."""
    try:
        with open("/proc/self/stat") as stat:
            started_ticks = float(stat.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as uptime:
            up_s = float(uptime.read().split()[0])
        return max(0.0, up_s - started_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


def explain_infeasible(problem: Problem, budget: Budget, *, solver: str = DEFAULT_SOLVER, options: SpaceOptions = SpaceOptions(),
                       time_limit_s: float | None = None) -> str:
    """Name the budget that binds and the nearest feasible value (re-solving with that budget dropped)."""
    from optsearch.units import format_budget_duration, format_duration, format_usd

    base = budget.model_copy(update={"max_time_s": None, "max_cost_usd": None})
    fastest = solve(problem, base.model_copy(update={"objective": "time"}), solver=solver, options=options,
                    time_limit_s=time_limit_s)
    if fastest.plan is None:
        rate = budget.max_usd_per_hour
        limits = [f"{n} {v}" for n, v in (("--max-gpus", budget.max_gpus),
                                           ("--max-usd-per-hour", rate and format_usd(rate))) if v]
        if limits:
            return f"no plan meets {' and '.join(limits)} and fits in GPU memory"
        return _memory_message(problem, options)
    est = fastest.estimate
    assert est is not None
    parts = []
    if budget.max_time_s is not None and est.training_time_s > budget.max_time_s:
        best = "the fastest" if fastest.status == "optimal" else "the fastest found"  # as infeasible.py's hints
        return (f"no plan finishes within {format_budget_duration(budget.max_time_s)}: {best} feasible plan takes "
                f"{format_duration(est.training_time_s)} and costs {format_usd(est.cost_usd)}")
    if budget.max_cost_usd is not None:
        cheapest = solve(problem, base.model_copy(update={"objective": "cost"}), solver=solver, options=options,
                         time_limit_s=time_limit_s)
        if cheapest.estimate is not None and cheapest.estimate.cost_usd > budget.max_cost_usd:
            c = cheapest.estimate
            best = "the cheapest" if cheapest.status == "optimal" else "the cheapest found"
            return (f"no plan costs at most {format_usd(budget.max_cost_usd)}: {best} feasible plan costs "
                    f"{format_usd(c.cost_usd)} and takes {format_duration(c.training_time_s)}")
        parts.append("--max-cost")
    if budget.max_time_s is not None:
        parts.append("--max-time")
    best = "the fastest" if fastest.status == "optimal" else "the fastest found"
    return (f"no plan meets {' and '.join(parts) or 'the limits'} together: each alone can be met "
            f"({best} plan takes {format_duration(est.training_time_s)} for {format_usd(est.cost_usd)})")


def _memory_message(problem: Problem, options: SpaceOptions) -> str:
    """No plan fits: report the smallest per-GPU need of the biggest-memory GPU's best candidate (a lower bound)."""
    from optsearch.units import bytes_to_gib

    model = problem.model
    layer_params = sum(model.layer_parameters(k) * k.num_layers for k in model.kinds)
    best = None
    for tp in tp_candidates(problem):
        for mbs in micro_batch_candidates(problem, options):
            for dp in dp_candidates(problem, tp, mbs):
                for u in node_uses(problem, tp, dp, mbs):
                    slots = sum(x.node.num_nodes_available // x.nodes_per_block * x.stages_per_block
                                for x in node_uses(problem, tp, dp, mbs))
                    pp = max(1, min(slots, max_stages(problem, options)))
                    all_params = layer_params + stage_parameters(model, {}, True, True, pp)
                    dist = distributed_optimizer_on(problem.job, dp)
                    state = state_bytes(problem.job, dp, 1, dist)
                    if model.is_moe:  # experts held / ep: the least per-parameter bytes of any ep bound the need
                        state = min([state] + [expert_state_bytes_per_param(problem.job, dp, ep, dist) / ep
                                               for ep in ep_candidates(problem, tp, dp, options)])
                    need = all_params / pp / tp * state + MEMORY_RESERVE_BYTES
                    cap = memory_capacity_bytes(problem, u.node.gpu)
                    if best is None or need - cap < best[0] - best[1]:
                        best = (need, cap, problem.gpu_of(u.name).name)
    if best is None:
        return "no plan fits: no node type is usable (check tp, GPUs per node, the profile's coverage and availability)"
    need, cap, gpu = best
    if need > cap:
        return (f"no plan fits in memory: spread over every available GPU, the weights, gradients and optimizer states "
                f"alone need at least {bytes_to_gib(need):.1f} GiB per GPU on {gpu} ({bytes_to_gib(cap):.1f} GiB); "
                f"add nodes with more memory, or change the job with --set")
    return (f"no plan fits in memory: the weights and optimizer states fit ({bytes_to_gib(need):.1f} GiB per GPU on "
            f"{gpu}, {bytes_to_gib(cap):.1f} GiB), but with activations no stage layout fits in any recomputation "
            f"mode; add nodes, or lower the micro-batch or sequence length with --set")
