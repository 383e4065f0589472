"""An in-flight-aware bound (issue 14, item 3, round 5): the aggregate bound of bounds.py with each stage's layer cap
taken at its own position in the pipeline, for every candidate (tp, cp, dp, b, pp, v) of a dense one-kind model.

Why. bounds.py's refined bound gives every stage of a type the same cap NMAX_g: the most layers that fit with ONE
micro-batch in flight, in whichever recomputation mode holds the most, at the fastest mode's speed. Under 1F1B,
stage i holds f_i = min(pp - i, m) micro-batches of activations (costmodel.in_flight_per_layer; interleaved:
in-flight chunks / v), so early stages of a deep pipeline hold far fewer layers, or hold them only with
recomputation, which is slower. The positional bound (formulation/positional.py) sees this and sat 5-50 % (median
19 %) above the refined bound on GPT-3 175B's candidates (mixed-pool-8k, cost), at 10-90 ms a candidate; this bound
costs about 3.5 ms and needs no skeleton. Interleaved candidates were bounded by f_v x their v = 1 sibling's bound
(up to 25 % below); here they get their own schedule's bound.

Notation: w GPUs per stage, p_g USD per GPU-hour of type g, e_g the least send a stage of g makes
(bounds.sender_send_min_s: every send of a stage is sent by its own type; 0 when pp = 1),
L layers, P a layer's parameters, sigma the state bytes per parameter (costmodel.state_bytes at this dp, cp and
optimizer setting), a_r[g] a layer's activation bytes per micro-batch in mode r, s_r[g] its step time, W[g] full
recomputation's working memory, C[g] the usable memory less the reserve, f_i = in_flight_per_layer(pp, i, m, v).

1. Stage times. Stage i on g with n >= 1 layers in mode r in {none, selective, full} needs
       n (sigma P / tp + f_i a_r) + [r = full] W <= C,    compute = n s_r,
   (the cost model adds the embedding's and head's parameters and the logits on top: all >= 0), and under block
   recomputation (its stages are "full", so W is added) with c of the n layers recomputed
       n (sigma P / tp + f_i a_none) - c f_i (a_none - a_full) + W <= C,    compute = n s_none + c (s_full - s_none).
   tau[g, i, n] is the least compute over the modes, block taking the fewest c that fit (the quotient lowered by
   1e-6 before the ceiling, so c may only be too few; memory quotients are raised by 1e-9 before the floor), inf
   where nothing fits. A stage's time is at least compute + off[g, i]: a middle stage sends v times each way
   (2 v e_g), an end stage v times one way and v - 1 times across the wrap-around ((2 v - 1) e_g), and the first
   (last) runs the embedding (head) on its type (costmodel.estimate, interleaved_send_counts).
2. Caps. With tt[g, i, n] = min over n' >= n of tau[g, i, n'] + off[g, i] (non-decreasing in n), stage i on g
   holds at most k[g, i](M) = #{n >= 1 : tt[g, i, n] <= M} layers when its time is at most M (the largest n with
   tau + off <= M), rounded down to a multiple of v (interleaved stages hold multiples of v). A middle stage holds
   >= 1 layer; an end stage may be empty, on any type.
3. Rent. A plan whose slowest stage takes M* puts a type g_i on each position with sum_i k[g_i, i](M*) >= L and
   rents w sum_i p_{g_i}. For every lambda >= 0 (weak duality of the LP min sum p x, sum_g x_gi = 1,
   sum k x >= L; node supply and whole-node blocks dropped, which only lowers it):
       rent >= w (lambda L + sum_i min_g (p_g - lambda k[g, i](M*)))  =: w phi(lambda),
   the min over the types a position may take. The multiplier is searched by bisection on the sign of the
   supergradient L - sum_i k at a minimizer (any lambda evaluated gives a valid bound; the best seen is kept).
   R(M) = w max phi; infinite where the positions cannot hold L on their best types, or where node supply forbids
   it (round 6, _holds_within_supply: for each type g alone with its slots, the others relaxed, the most the
   positions can hold is sum_i b_i + the slots[g] largest (k[g, i] - b_i)^+, b_i the best other type's cap at i;
   below L, no plan lies in the interval).
4. Intervals. The caps change only at the marks M_j (0 and every finite tt): on [M_j, M_{j+1}) they equal
   k(M_j). A plan whose slowest stage takes M* in that interval has rent >= R(M_j), and (1F1B, interleaved
   ((m v - 1) max t + sum t) / v, costmodel.interleaved_pipeline_time_s) iteration
       >= it(M_j) = (m - 1/v) max(M_j, S / pp) + max(S, M_j) / v + A,
   with S the least sum of stage times at v = 1 (its layers' part at least least_layer_work_s: the fastest types
   first, up to slots[g] x NMAX[g] layers each) and A the all-reduce and optimizer floor of
   bounds.candidate_bound (the sum of stage times is at least S and at least the slowest stage; sends at v only
   add); M_j is also raised to bounds.least_slowest_stage_s (round 6). it grows with j. So
       time >= iterations x min_j it(M_j),     cost >= iterations / 3600 x min_j R(M_j) it(M_j),
   over the intervals a budget allows: an interval is dropped when it(M_j) breaks the deadline, R(M_j) the rent
   limit, or R(M_j) it(M_j) the cost budget (each a lower bound on that interval's plans); none left: no plan meets
   the budget.
5. Time under a cost budget (round 7, _time_under_cost): each interval is split further by the plan's largest stage
   all-reduce, which caps the layers a position of each type holds (alpha[g] x n x P_layer <= it) and raises the
   iteration above it(M_j); a bucket whose rent x iteration breaks the budget holds no plan that meets it. Every
   iteration floor also counts the tied embedding's all-reduce at its least (least_embedding_allreduce_s).

6. Minimizing time under --overlap-grad-reduce (round 9, overlapfloor; docs/solver.md "Round 9"): from the first
   interval that meets the limits, the walk also takes the largest whole reduce by levels (whole_levels_terms,
   whole_levels_iteration) and the per-mark hiding floor (hiding_terms, _hiding_floor), each the least over an
   interval's layouts within its caps and node supply, found by bisection; the time-under-cost walk the same
   (_with_whole_levels).

The tables (marks, it, R) do not depend on the budget and are kept per candidate (solver.Memo.inflight); R is
computed in chunks from the least mark where the positions can hold L (found by bisection), as far as the query
needs: minimizing time up to the first interval that meets the budget (it grows), minimizing cost until R(inf) x
it(M_j) reaches the best product. Minimizing time no cost bound is returned (0): the walk does not see every
interval. Proof and tests: docs/solver.md, "The in-flight bound, round 5"; tests/test_inflight_bound.py.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

import numpy as np

from optsearch.bounds import CandidateBound, DegreeTerms, _calls, grad_overlap_floor, sender_send_min_s, slowest_floor
from optsearch.bounds import slowest_floors_many
from optsearch.costmodel import (
    MEMORY_RESERVE_BYTES, cp_full_recompute_working_bytes, cp_layer_activation_bytes, cp_layer_step_s,
    distributed_optimizer_on, embedding_allreduce_s, memory_capacity_bytes, state_bytes,
)
from optsearch.plan import RECOMPUTE_MODES
from optsearch.problem import Problem
from optsearch.search import BOUND_SLACK

CHUNK = 48  # marks per vectorized pass of the rent programme
BISECTION = 16  # steps of the search for the best multiplier
REFINE_BATCH = 4  # intervals refined together by _cost_by_ends (one vectorized programme)
ROUND_UP = 1 + 1e-9  # quotients are rounded up before the floor: a cap may only be too large


@dataclass(slots=True)
class InFlightTables:
    """The budget-free tables of one candidate (tp, cp, dp, b, pp at v = 1)."""

    marks: np.ndarray  # [j] M_j, ascending, marks[0] = 0
    iteration: np.ndarray  # [j] it(M_j)
    caps: object  # caps[slice] -> [j, g, i] k[g, i](M_j), computed when asked (_LazyCaps)
    price: np.ndarray  # [g] USD per GPU-hour
    middle: np.ndarray  # [i] position i must hold >= 1 layer
    w: int
    L: int
    rent: np.ndarray = field(default=None)  # [j] R(M_j); NaN: not computed yet
    floor_rent: float = 0.0  # R(inf): no interval's rent is below it; NaN: not computed yet (_floor_rent)
    slots: np.ndarray | None = None  # [g] stage slots of each type (node supply); None: supply not counted
    allreduce_per_layer: np.ndarray | None = None  # [g] alpha[g] x a layer's parameters (round 7: the budget walk)
    allreduce_floor: float = 0.0  # the all-reduce part of it(M_j): alpha_min x P_total / pp
    v: int = 1  # model chunks per rank: every cap a multiple of v
    ends_extra: np.ndarray | None = None  # [a, b] the least embedding all-reduce with ends on (a, b), less the one
    # in it(M_j) (round 8, _ends_rent); None: the cost walk keeps the Lagrangian rent alone
    base_iteration: np.ndarray | None = None  # [j] it(M_j) without the whole-reduce floor (--overlap-grad-reduce):
    # the expression whose all-reduce part is allreduce_floor, to which the budget walk adds; None: iteration itself
    whole_per_layer: np.ndarray | None = None  # [g, i] a layer's whole gradient reduce on g (alpha_full x its parameters,
    # + its least backward at positions i > 0; --overlap-grad-reduce, round 9, overlapfloor); None: the overlap is off
    whole_base: np.ndarray | None = None  # [j] it(M_j)'s pipeline part with the hiding charged once, plus O and E:
    # the largest stage's whole reduce adds to it (whole_levels_iteration)
    whole_mean: float = 0.0  # alpha_full_min x P_total / pp: the largest whole reduce is at least the mean
    hide: tuple | None = None  # (alpha_full x P_layer [g], rho, [j] base) of the per-mark hiding floor (v = 1;
    # hiding_terms); None: not walked
    holds_from: int = 0  # the least interval where the positions hold L layers within node supply (both checks pass
    # from there on): R(M_j) is inf below it and finite from it (round 12, timerows: the time walk reads only that)
    most_layers: int = 0  # the most layers any position holds at any mark (its caps at M = inf, at most L): every
    # kink of phi has a cap difference of at most this (round 14, costrows: _least_rent's list); 0: L
    suffix_backward: float = 0.0  # the least last backward of a layer over the types, bw_min (round 20, timesmall:
    # whole_suffix_backward_s); 0: the largest whole reduce's levels without the later stages' backwards
    pair_sends: tuple | None = None  # (times [g, i, n], d.send_inter_s, e [g], {(j, q): rent, "delta": [g, h]}) for
    # _pair_send_rent (round 22, rentflight): a stage's least times with e_g per send, and its sends; None: off


def _time_terms(steps: np.ndarray, acts: np.ndarray, working: np.ndarray, room: np.ndarray, per_layer_state: float,
                flight: np.ndarray, modes: list[str]) -> tuple:
    """The memory terms of _least_times at the positions' flights [i]: (mem_cap [g, i, r], alpha [g, i], beta [g, i],
    block_room [g, 1], the block caps [g, i]; N is min(L, max(1, mem_cap's max, the block caps' max)))."""
    full, none = modes.index("full"), modes.index("none")
    per = per_layer_state + flight[None, :, None] * acts[:, None, :]  # [g, i, r]
    mem_room = room[:, None] - np.where(np.arange(len(modes)) == full, working[:, None], 0.0)  # [g, r]
    mem_cap = np.where(mem_room[:, None, :] > 0, np.floor(mem_room[:, None, :] / per * ROUND_UP), -1.0)  # [g, i, r]
    alpha = per[:, :, none]  # sigma P / tp + f a_none
    beta = flight[None, :] * (acts[:, None, none] - acts[:, None, full])
    block_room = (room - working)[:, None]  # [g, 1]
    block_caps = np.where((alpha - beta > 0) & (block_room > 0),
                          np.floor(block_room / np.where(alpha - beta > 0, alpha - beta, 1.0) * ROUND_UP), 0)
    return mem_cap, alpha, beta, block_room, block_caps


RAW_BY_MODE = True  # _raw_times' least over the modes one mode at a time on [g, i, n] (round 16, inflight3)


def _raw_times(steps: np.ndarray, modes: list[str], terms: tuple, N: int) -> np.ndarray:
    """[g, i, n] the least compute time of n layers (n = 1..N) at each position, before the least over n' >= n.

    RAW_BY_MODE (round 16): the least over the modes that fit of n s_r is n times the least such s_r, one mode at a
    time on [g, i, n] arrays instead of a [g, i, n, r] array and its minimum. The same floats: a rounded product
    is non-decreasing in each factor (n >= 1, s_r >= 0), so min_r fl(n s_r) = fl(n min_r s_r), and where no mode
    fits both are inf (n x inf)."""
    full, none = modes.index("full"), modes.index("none")
    mem_cap, alpha, beta, block_room, _ = terms
    n = np.arange(1, N + 1, dtype=float)[None, None, :]  # [1, 1, n]
    if RAW_BY_MODE:
        least_step = np.full((mem_cap.shape[0], mem_cap.shape[1], N), np.inf)
        for r in range(len(modes)):
            least_step = np.where(n <= mem_cap[:, :, r:r + 1], np.minimum(least_step, steps[:, r, None, None]),
                                  least_step)
        t = n * least_step
    else:
        t = np.where(n[..., None] <= mem_cap[:, :, None, :], n[..., None] * steps[:, None, None, :],
                     np.inf).min(axis=3)
    ds = steps[:, none] - steps[:, full]  # s_none - s_full (<= 0 normally)
    with np.errstate(divide="ignore", invalid="ignore"):
        # the fewest recomputed layers c with n alpha - c beta <= block_room (rounded down by a hair: may be too few)
        need = np.where(beta[..., None] > 0, np.ceil((n * alpha[..., None] - block_room[..., None])
                                                     / beta[..., None] - 1e-6),
                        np.where(n * alpha[..., None] <= block_room[..., None] * ROUND_UP, 0.0, np.inf))
    c = np.maximum(need, 0.0)
    c = np.where(ds[:, None, None] > 0, n, c)  # recomputing is faster (not expected): every layer recomputed
    ok = (c <= n) & (block_room[..., None] > 0) & np.isfinite(c)
    tb = np.where(ok, n * steps[:, none, None, None] - c * ds[:, None, None], np.inf)
    return np.minimum(t, tb)


def _least_after(raw: np.ndarray) -> np.ndarray:
    """tt[g, i, n] = min over n' >= n of raw[g, i, n']."""
    return np.minimum.accumulate(raw[:, :, ::-1], axis=2)[:, :, ::-1]


def _least_times(steps: np.ndarray, acts: np.ndarray, working: np.ndarray, room: np.ndarray, per_layer_state: float,
                 flight: np.ndarray, modes: list[str], L: int) -> np.ndarray:
    """[g, i, n] -> the least compute time of n layers (n = 1..N) on a stage of g at position i over every mode
    (none, selective, full, and block recomputation with the fewest recomputed layers that fit), inf where none
    fits; then the least over n' >= n, so that max{n : t(n) <= X} = #{n : tt(n) <= X} (see the module docstring)."""
    terms = _time_terms(steps, acts, working, room, per_layer_state, flight, modes)
    mem_cap, block_caps = terms[0], terms[4]
    N = int(min(L, max(1.0, mem_cap.max(initial=0), float(block_caps.max()))))
    return _least_after(_raw_times(steps, modes, terms, N))


INFLIGHT_BY_DEGREE = True  # round 13 (inflight): inflight_tables takes its per-type terms from _DegreePart
DEGREE_TABLES_FROM = 2  # the ask (pp) of a degree at v from which its least times come from the degree's tables
DEGREE_WHOLE_TERMS = True  # whole_levels_terms' and hiding_terms' pp-free parts kept on _DegreePart (round 15)
WHOLE_WINDOW = True  # a degree's first table at v covers the counts later pp ask (_whole_window; round 16, inflight3)
LEAST_BY_ROWS = True  # a grown window's least over n' >= n computed for its new rows only (round 16, inflight3)


class _DegreePart:
    """The part of inflight_tables that does not depend on pp, for one degree (d, dp, b, cp, ep): the layer's
    state, steps (with a mixture-of-experts layer's all-to-alls), activations, full recomputation's working memory
    and the room of each type, and _least_times of every flight at once (a position's least
    times depend on pp only through its flight f_i = min(pp - i, m); interleaved, through its in-flight chunks c_i,
    f_i = c_i / v: tables per v by c), kept in the solver's call cache (Memo.calls) and shared by every pp of the
    degree (issue 14, item 3, round 13). Every value is the one inflight_tables
    computes for that pp alone, bit for bit (the same elementwise operations on the same inputs; the least over
    n' >= n taken over the same n = 1..N_pp, N_pp from the flights of that pp; tests/test_inflight_degree.py)."""

    __slots__ = ("d", "names", "per_layer_state", "steps", "acts", "working", "room", "modes", "by_v", "asks",
                 "whole_terms", "hiding_rho")

    def __init__(self, problem: Problem, d: DegreeTerms, kind, dp: int, mbs: int, cp: int, ep: int, call):
        model, tp = problem.model, d.tp
        self.d = d  # kept: the cache is keyed by id(d)
        self.names = names = [u.name for u in d.uses]
        self.modes = modes = list(RECOMPUTE_MODES)
        dist = _terms_dist(problem, d, dp, cp)
        self.per_layer_state = state_bytes(problem.job, dp, cp, dist) / tp * model.layer_parameters(kind)
        self.steps = np.array([[call(cp_layer_step_s, problem, g, kind, tp, mbs, r, cp) for r in modes]
                               for g in names])
        if model.is_moe:  # the state and all-to-alls do not depend on pp (moe_layer_terms: only its all-reduce does)
            self.per_layer_state, a2a, _ = moe_layer_terms(problem, d, kind, dp, mbs, ep, modes, None)
            self.steps = self.steps + a2a
        self.acts = np.array([[call(cp_layer_activation_bytes, problem, g, kind, tp, mbs, r, cp) for r in modes]
                              for g in names])
        self.working = np.array([call(cp_full_recompute_working_bytes, problem, g, tp, mbs, cp) for g in names])
        self.room = np.array([memory_capacity_bytes(problem, problem.node(g).gpu) - MEMORY_RESERVE_BYTES
                              for g in names])
        self.by_v = {}  # v -> (c0, c1, N, raw [g, c, n], least [g, c, n], mem_max [c], block_max [c])
        self.asks = {}  # v -> how many pp asked before the tables at v were built (DEGREE_TABLES_FROM)
        self.whole_terms = None  # whole_levels_terms' pp-free terms at v = 1 (round 15, DEGREE_WHOLE_TERMS)
        self.hiding_rho = None  # hiding_terms' rho before the gather's (round 15, DEGREE_WHOLE_TERMS)

    def _rows(self, c0: int, c1: int, v: int, L: int, N: int | None = None) -> tuple:
        """(N, raw [g, c, n], mem_max [c], block_max [c]) of the counts c0..c1-1, at N (default: their own)."""
        every = np.arange(c0, c1, dtype=np.int64)
        flight = every.astype(float) if v == 1 else every / v  # inflight_tables' own expressions
        terms = _time_terms(self.steps, self.acts, self.working, self.room, self.per_layer_state, flight, self.modes)
        mem_max = terms[0].max(axis=(0, 2), initial=0)  # [c]
        block_max = terms[4].max(axis=0)  # [c]
        need = int(min(L, max(1.0, mem_max.max(initial=0), float(block_max.max()))))
        if N is not None and need > N:
            return need, None, mem_max, block_max
        N = need if N is None else N
        return N, _raw_times(self.steps, self.modes, terms, N), mem_max, block_max

    def _whole_window(self, lo: int, hi: int, v: int, L: int) -> tuple[int, int]:
        """The counts c0..c1-1 a degree's first table at v covers (WHOLE_WINDOW, round 16), lo..hi-1 among them.
        v = 1: every count a pp can ask: min(pp - i, m) is 1..min(pp, m), and a pp with a plan is at most L + 2
        (bounds' aggregate: pp - 2 <= L) and the degree's stage slots. Interleaved (v > 1): the counts
        min((pp - i - 1) 2 + (v - 1) pp + 1, m v) of a pp run from (v - 1) pp + 1 to (v + 1) pp - 1, and the loop
        asks a degree's pp mostly from the largest down (each smaller pp's window lies below, with larger caps, so
        the table was built anew at a larger N on most asks): from the least count of pp = 2, 2 (v - 1) + 1, up to
        hi. The rows and values are the same whatever the window (per count); only which asks find them differs."""
        if v == 1:
            return min(lo, 1), max(hi, min(L + 2, sum(self.d.slots), self.d.m) + 1)
        return min(lo, 2 * (v - 1) + 1), hi

    def least_times(self, count: np.ndarray, v: int, L: int) -> np.ndarray:
        """_least_times at the flights count / v (count [i]: whole numbers >= 1, in-flight micro-batches or chunks;
        v = 1: the flights themselves), from the degree's table at v of the counts c0..c1-1 (a window that grows to
        cover each pp's counts: new rows are computed at the table's N where it is enough, else the whole window
        anew at the larger N)."""
        lo, hi = int(count.min()), int(count.max()) + 1
        have = self.by_v.get(v)
        if have is not None and (lo < have[0] or hi > have[1]):
            c0, c1, N, raw, least, mem_max, block_max = have
            parts, ok = [], True
            for x0, x1 in ((min(lo, c0), c0), (c1, max(hi, c1))):
                if x0 < x1:
                    got = self._rows(x0, x1, v, L, N)
                    ok &= got[1] is not None
                    parts.append(got)
                else:
                    parts.append(None)
            if not ok:  # a new count needs more layers than the table has: the whole window anew
                have = None
                lo, hi = min(lo, c0), max(hi, c1)
            else:
                below, above = parts
                raws = [p[1] for p in (below,) if p] + [raw] + [p[1] for p in (above,) if p]
                mems = [p[2] for p in (below,) if p] + [mem_max] + [p[2] for p in (above,) if p]
                blocks = [p[3] for p in (below,) if p] + [block_max] + [p[3] for p in (above,) if p]
                new_raw = np.concatenate(raws, axis=1)
                if LEAST_BY_ROWS:  # the least over n' >= n is per row: only the new rows' (the same floats)
                    leasts = [_least_after(p[1]) for p in (below,) if p] + [least] + \
                        [_least_after(p[1]) for p in (above,) if p]
                    new_least = np.concatenate(leasts, axis=1)
                else:
                    new_least = _least_after(new_raw)
                have = self.by_v[v] = (min(lo, c0), max(hi, c1), N, new_raw, new_least,
                                       np.concatenate(mems), np.concatenate(blocks))
        if have is None:
            if WHOLE_WINDOW:
                lo, hi = self._whole_window(lo, hi, v, L)
            N, raw, mem_max, block_max = self._rows(lo, hi, v, L)
            have = self.by_v[v] = (lo, hi, N, raw, _least_after(raw), mem_max, block_max)
        c0, _, most, raw, least, mem_max, block_max = have
        at = count.astype(np.int64) - c0
        N = int(min(L, max(1.0, mem_max[at].max(initial=0), float(block_max[at].max()))))
        if N == most:
            return least[:, at, :]
        return _least_after(raw[:, at, :N])


def _degree_part(problem: Problem, d: DegreeTerms, kind, dp: int, mbs: int, cp: int, ep: int, call,
                 cache: dict | None) -> _DegreePart:
    """d's _DegreePart, kept in cache (the solver's Memo.calls) by id(d), d itself kept in it; built anew without."""
    if cache is None:
        return _DegreePart(problem, d, kind, dp, mbs, cp, ep, call)
    key = ("inflight_degree", id(d), dp, mbs, cp, ep)
    part = cache.get(key)
    if part is None or part.d is not d:
        part = cache[key] = _DegreePart(problem, d, kind, dp, mbs, cp, ep, call)
    return part


def inflight_tables(problem: Problem, d: DegreeTerms, pp: int, dp: int, mbs: int, cp: int,
                    stages_s: float, comm_s: float, cache: dict | None = None, v: int = 1,
                    slowest_s: float = 0.0, ep: int = 1, whole_s: float = 0.0) -> InFlightTables | None:
    """The tables of the module docstring for (tp = d.tp, dp, b = mbs, cp, pp, ep), or None where the bound does
    not apply (several layer kinds). Mixture of experts (round 8): the layer's state, steps and all-reduce at this
    ep from moe_layer_terms, the rest unchanged. stages_s: the least sum of stage times; comm_s: the
    all-reduce and optimizer floor (both from bounds.candidate_bound's aggregate branch); slowest_s: a lower bound on
    every plan's slowest stage (bounds.least_slowest_stage_s at this v, from node supply), taken in it(M_j) beside
    M_j: a plan's slowest stage is at least both. whole_s (--overlap-grad-reduce, 0 without): the whole-reduce floor,
    the whole all-reduce, optimizer and embedding all-reduce floors: it(M_j) is also at least
    (m - 1/v) max(M_j, stages_s / pp) + whole_s (see whole_reduce_floor_s)."""
    model = problem.model
    kinds = model.kinds
    if len(kinds) != 1 or (model.is_moe and cp != 1):  # experts: no cp (costmodel.context_parallel_error)
        return None
    kind = kinds[0]
    call = _calls(cache)
    tp, m, L = d.tp, d.m, model.num_layers
    modes = list(RECOMPUTE_MODES)
    part = None
    if INFLIGHT_BY_DEGREE:  # round 13: the per-type terms once per degree (the same values)
        part = _degree_part(problem, d, kind, dp, mbs, cp, ep, call, cache)
        names, per_layer_state, steps = part.names, part.per_layer_state, part.steps
        acts, working, room = part.acts, part.working, part.room
        allreduce_per_layer = np.array(d.alpha_at(pp), float) * model.layer_parameters(kind)
        if model.is_moe:
            allreduce_per_layer = moe_layer_terms(problem, d, kind, dp, mbs, ep, modes, pp)[2]
    else:
        names = [u.name for u in d.uses]
        dist = _terms_dist(problem, d, dp, cp)
        per_layer_state = state_bytes(problem.job, dp, cp, dist) / tp * model.layer_parameters(kind)
        steps = np.array([[call(cp_layer_step_s, problem, g, kind, tp, mbs, r, cp) for r in modes] for g in names])
        allreduce_per_layer = np.array(d.alpha_at(pp), float) * model.layer_parameters(kind)
        if model.is_moe:  # round 8: the expert terms at this ep, exact per layer (moe_layer_terms)
            per_layer_state, a2a, allreduce_per_layer = moe_layer_terms(problem, d, kind, dp, mbs, ep, modes, pp)
            steps = steps + a2a
        acts = np.array([[call(cp_layer_activation_bytes, problem, g, kind, tp, mbs, r, cp) for r in modes]
                         for g in names])
        working = np.array([call(cp_full_recompute_working_bytes, problem, g, tp, mbs, cp) for g in names])
        room = np.array([memory_capacity_bytes(problem, problem.node(g).gpu) - MEMORY_RESERVE_BYTES for g in names])
    G = len(names)
    ranks = np.arange(pp)
    if v == 1:
        count = np.minimum(pp - ranks, m)
        flight = count.astype(float)  # [i] costmodel.in_flight_per_layer
    else:  # interleaved: in-flight chunks / v (costmodel.interleaved_in_flight_chunks)
        count = np.minimum((pp - ranks - 1) * 2 + (v - 1) * pp + 1, m * v)
        flight = count / v
    e = sender_send_min_s(d) if pp > 1 else np.zeros(G)  # [g]
    # t_i >= compute + off[g, i]: a middle stage sends v times each way (2 v e_g), an end stage v times one way and
    # v - 1 times across the wrap-around ((2 v - 1) e_g; costmodel.interleaved_send_counts), every one of them sent
    # by its own type g (e_g: sender_send_min_s), and runs the embedding (first) or the head (last) on its type
    sends = np.where((ranks > 0) & (ranks < pp - 1), 2 * v, 2 * v - 1).astype(float)  # [i]
    off = e[:, None] * sends[None, :]
    off[:, 0] += np.array(d.emb_s)
    off[:, pp - 1] += np.array(d.head_s)
    if part is not None and part.asks.setdefault(v, 0) >= DEGREE_TABLES_FROM - 1:  # the degree's tables, by count
        times = part.least_times(count, v, L) + off[:, :, None]
    else:  # a degree's first asks at v: this pp alone (most degrees reach the in-flight bound at one or two pp)
        if part is not None:
            part.asks[v] += 1
        times = _least_times(steps, acts, working, room, per_layer_state, flight, modes, L) + off[:, :, None]
    marks = np.unique(np.concatenate([[0.0], times[np.isfinite(times)]]))
    # 1F1B, interleaved: ((m v - 1) max t + sum t) / v + comm (v = 1: (m - 1) max t + sum t + comm)
    slowest = np.maximum(marks, slowest_s)  # the slowest stage of a plan in interval j: >= M_j and >= slowest_s
    iteration = (m - 1 / v) * np.maximum(slowest, stages_s / pp) + np.maximum(stages_s, slowest) / v + comm_s
    base = None
    if whole_s > 0:  # both expressions bound every plan of the interval: so does their maximum
        base = iteration
        iteration = np.maximum(base, (m - 1 / v) * np.maximum(slowest, stages_s / pp) + whole_s)
    whole = None
    if whole_s > 0 and d.alpha_full:  # round 9 (overlapfloor): the largest stage's whole reduce, by levels
        whole = whole_levels_terms(problem, d, kind, tp, mbs, cp, v, pp, steps, m, slowest, stages_s, call,
                                   part if DEGREE_WHOLE_TERMS else None)
    middle = np.zeros(pp, dtype=bool)
    middle[1:pp - 1] = True

    def caps_at(Ms: np.ndarray) -> np.ndarray:
        """[M, g, i] k[g, i](M) = #{n : tt(n) + off <= M} (the caps are constant between marks)."""
        held = (times[None] <= Ms[:, None, None, None]).sum(axis=3)
        return (held // v * v).astype(float)  # interleaved: every stage's layers a multiple of v

    tab = InFlightTables(marks=marks, iteration=iteration, caps=None, price=np.array(d.price_per_gpu_hour, float),
                         middle=middle, w=d.w, L=L, rent=np.full(len(marks), np.nan),
                         slots=np.array(d.slots, dtype=np.int64),
                         allreduce_per_layer=allreduce_per_layer,
                         allreduce_floor=d.alpha_min_at(pp) * d.all_params(pp) / pp, v=v, base_iteration=base)
    if whole is not None:
        tab.whole_per_layer, tab.whole_base, tab.whole_mean = whole
        if v == 1:
            tab.hide = hiding_terms(problem, d, kind, tp, mbs, cp, pp, steps, m, slowest, stages_s, call,
                                    part if DEGREE_WHOLE_TERMS else None)
            tab.suffix_backward = whole_suffix_backward_s(problem, d, kind, tp, mbs, cp, pp, steps, call,
                                                          part if DEGREE_WHOLE_TERMS else None)
    if model.is_moe:  # the all-reduce part of it(M_j) may be moe_comm_floor_s's (sharpened): a larger floor is valid
        tab.allreduce_floor = max(tab.allreduce_floor, moe_comm_floor_s(problem, d, pp, dp, ep)[0])
    tab.caps = _LazyCaps(caps_at, marks)
    if BUDGET_PAIR_SENDS and pp > 1 and G > 1:  # round 22 (rentflight): each boundary's own send, under a budget
        tab.pair_sends = (times, d.send_inter_s, e, {})  # _pair_send_rent's inputs (its delta made when asked)
    tab.floor_rent = math.nan  # computed where a walk needs it (_floor_rent): _plain_cost does not
    # below the least mark where the positions can hold L layers no plan exists: found by bisection (the positions'
    # caps grow with M), those intervals get an infinite rent without the programme
    def first_passing(check, lo: int) -> int:  # the least mark index from lo on where check passes (it keeps passing)
        hi = len(marks)
        while lo < hi:
            mid = (lo + hi) // 2
            if check(tab, caps_at(marks[mid:mid + 1]))[0]:
                hi = mid
            else:
                lo = mid + 1
        return lo

    lo = _first_holding(times, marks, middle, L, v) if FIRST_BY_ORDER else first_passing(_holds, 0)
    # then node supply (round 6), which also only passes from some mark on; where it does not bind (most candidates
    # minimizing cost) one check at lo settles it, the bisection costs about 1 ms a candidate
    if lo < len(marks) and not _holds_within_supply(tab, caps_at(marks[lo:lo + 1]))[0]:
        lo = (_first_within_supply(tab, caps_at, marks, lo + 1) if SUPPLY_BY_CHUNKS
              else first_passing(_holds_within_supply, lo + 1))
    if JOINT_SUPPLY and lo < len(marks) and tab.slots is not None and (tab.slots < pp).sum() >= 2 and not (
            _holds_within_joint_supply(tab, caps_at(marks[lo:lo + 1]))[0]):  # round 19: the binding types together
        lo = _first_within_supply(tab, caps_at, marks, lo + 1, _holds_within_joint_supply)
    tab.rent[:lo] = np.inf
    tab.holds_from = lo
    # caps only grow with M: at M = inf each is the count of finite times, rounded down to a multiple of v
    tab.most_layers = int(min(L, np.isfinite(times).sum(axis=2).max(initial=0) // v * v))
    return tab


FIRST_BY_ORDER = True  # inflight_tables' least mark that holds L from order statistics, not bisection (round 14)
SUPPLY_BY_CHUNKS = True  # and the least mark within node supply by probes of many marks at once (round 19, timepark)
SUPPLY_PROBES = 16  # marks per probe of _first_within_supply


def _first_within_supply(tab: "InFlightTables", caps_at, marks: np.ndarray, lo: int, check=None) -> int:
    """The least index j >= lo with check(caps at marks[j]) (check: _holds_within_supply by default; len(marks)
    where none): the index inflight_tables' bisection (first_passing) finds, with fewer calls (round 19, timepark).

    _holds_within_supply passes from some index on (caps only grow with M, and U_g and the forced count are
    monotone in the caps), so the index is the first passing one of any probe set that contains it. For a check
    that is only valid (its failure proves no plan at that mark; _holds_within_joint_supply), the index returned is
    lo itself or one past a probe that failed, so every index below it lies at or below a failing probe or below the
    starting lo, where no plan lies either (the exact answer only passes more as M grows). Each round probes up to
    SUPPLY_PROBES indices spread evenly over the open range [lo, hi - 1] in one vectorized call (the last one always
    among them): the first passing probe p gives hi = p, the failing probe before it lo = that probe + 1; none
    passing, lo = hi. The range shrinks about SUPPLY_PROBES-fold a round: 2-3 calls where the bisection made 10-12
    (GPT-2 large, mixed-pool-3k, time: 4,395 calls on 702 tables, about 7 % of the solve's CPU under cProfile)."""
    hi = len(marks)
    while lo < hi:
        probes = np.unique(np.linspace(lo, hi - 1, min(SUPPLY_PROBES, hi - lo)).round().astype(np.int64))
        passing = (check or _holds_within_supply)(tab, caps_at(marks[probes]))
        if not passing.any():
            return hi
        first = int(np.argmax(passing))
        hi = int(probes[first])
        lo = lo if first == 0 else int(probes[first - 1]) + 1
    return lo


def _first_holding(times: np.ndarray, marks: np.ndarray, middle: np.ndarray, L: int, v: int) -> int:
    """The least index j with _holds(caps at marks[j]) (len(marks) where none), the index inflight_tables' bisection
    finds, without caps at single marks (round 14, costrows: about a fifth of the tables' CPU on GPT-3 175B).

    times [g, i, n] is non-decreasing in n (a least over n' >= n, plus a constant), so k[g, i](M) = #{n : times <= M}
    rounded down to a multiple of v, and max_g k[g, i](M) = c_i(M) // v * v with c_i(M) = #{n : mt[i, n] <= M},
    mt = min_g times (non-decreasing in n too). So _holds(M), every middle position holding >= 1 on some type and
    sum_i max_g k[g, i](M) >= L, is: mt[i, v] <= M at every middle position (n counted from 1) and at least
    ceil(L / v) of the values mt[i, j v] (j >= 1, every i) are <= M. The least such M is the larger of the middle
    positions' largest mt[i, v] and the ceil(L / v)-th smallest of those values; both are finite times, so marks
    holds it exactly (marks: every finite time), and the index is where it sits."""
    mt = times.min(axis=0)  # [i, n]
    need = -(-L // v)
    vals = mt[:, v - 1::v]
    flat = vals[np.isfinite(vals)]
    if flat.size < need or (middle.any() and mt.shape[1] < v):
        return len(marks)
    least = float(np.partition(flat, need - 1)[need - 1])
    if middle.any():
        first = mt[middle, v - 1]
        if not np.isfinite(first).all():
            return len(marks)
        least = max(least, float(first.max()))
    return int(np.searchsorted(marks, least, side="left"))


class _LazyCaps:
    """caps at M_j for a slice of intervals, computed when asked."""

    def __init__(self, fn, marks: np.ndarray):
        self.fn, self.marks = fn, marks

    def __getitem__(self, ix: slice) -> np.ndarray:
        return self.fn(self.marks[ix])

    def at(self, ix: np.ndarray) -> np.ndarray:
        """caps at the marks of the given interval indices."""
        return self.fn(self.marks[ix])


def _holds(tab: InFlightTables, caps: np.ndarray) -> np.ndarray:
    """[M] whether the positions can hold L layers (every middle one at least one) on their best types."""
    usable = (caps >= 1) | ~tab.middle[None, None, :]
    holds = np.where(usable, caps, -np.inf).max(axis=1)  # [M, i]
    return np.isfinite(holds).all(axis=1) & (np.where(np.isfinite(holds), holds, 0).sum(axis=1) >= tab.L)


def _holds_within_supply(tab: InFlightTables, caps: np.ndarray) -> np.ndarray:
    """[M] False where no assignment of types to positions within node supply (at most slots[g] positions of g)
    holds L layers with every middle position holding one. For each type g alone with its supply (the others'
    relaxed), the most such an assignment holds is at most U_g = sum_i b_i + the slots[g] largest (k[g, i] - b_i)^+,
    b_i = max_{h != g usable at i} k[h, i]: a position takes g or its best other type, and at most slots[g] take g
    (exact for that relaxation: the Lagrangian of g's supply row at its best multiplier). A position where only g is
    usable must take g; more such positions than slots[g]: none holds. U_g < L for some g: no plan is in the
    interval. (Issue 14, item 3, round 6: the front candidates of the time rows need more GPUs than the fastest
    type has.)"""
    if tab.slots is None or (tab.slots >= caps.shape[2]).all():  # no type's supply binds
        return np.ones(len(caps), dtype=bool)
    usable = (caps >= 1) | ~tab.middle[None, None, :]  # [M, g, i]
    k = np.where(usable, np.maximum(caps, 0.0), -np.inf)
    G, P = k.shape[1], k.shape[2]
    binds = np.nonzero(tab.slots < P)[0]  # a type that can take every position: its supply does not bind
    # Round 12 (timerows): every binding type at once (the same values as one type at a time). The best other type
    # at each position is the largest cap where g is not the (first) largest, else the second largest (ties: equal).
    if G > 1:
        first = k.max(axis=1)  # [M, i]
        second = np.partition(k, G - 2, axis=1)[:, G - 2, :]
        top_type = k.argmax(axis=1)
        others = np.where(top_type[:, None, :] == binds[None, :, None], second[:, None, :], first[:, None, :])
    else:
        others = np.full((len(caps), len(binds), P), -np.inf)
    own = k[:, binds, :]  # [M, b, i]
    forced = ~np.isfinite(others)  # only g is usable there
    ok = (forced.sum(axis=2) <= tab.slots[binds][None, :]).all(axis=1)
    with np.errstate(invalid="ignore"):  # -inf - -inf where forced: that branch is not taken
        gain = np.where(forced, own, np.maximum(own - others, 0.0))  # >= 0, or -inf where no type is usable
    gain = -np.sort(-gain, axis=2)  # descending; -inf last
    gain = np.where(np.isfinite(gain), gain, 0.0)  # whole layers: these sums are exact in any order
    room = np.arange(P)[None, None, :] < tab.slots[binds][None, :, None]  # the slots[g] largest gains
    base = np.where(forced, 0.0, others).sum(axis=2)
    bound = base + np.where(room, gain, 0.0).sum(axis=2)
    return ok & (bound >= tab.L).all(axis=1)


JOINT_SUPPLY = True  # inflight_tables' holds_from and the walks' supply test also take every binding type's
# supply at once (_holds_within_joint_supply; round 19, timepark)
JOINT_FROM_ZERO = False  # a second descent from lam = 0 (the brute-force sweep: no interval more decided)
JOINT_ROUNDS = 0  # rounds of multiplier updates over the binding types (any multipliers give a valid test)


def _holds_within_joint_supply(tab: InFlightTables, caps: np.ndarray) -> np.ndarray:
    """[M] _holds_within_supply's test and, where it passes and two or more types' supply binds,
    _joint_supply_holds's (both necessary for a plan in the interval)."""
    held = _holds_within_supply(tab, caps)
    binds = np.nonzero(tab.slots < caps.shape[2])[0]
    if len(binds) >= 2 and held.any():
        usable = (caps[held] >= 1) | ~tab.middle[None, None, :]
        held[held] = _joint_supply_holds(tab, np.where(usable, np.maximum(caps[held], 0.0), -np.inf), binds)
    return held


def _supply_test():
    """The walks' node-supply test: _holds_within_joint_supply with JOINT_SUPPLY, else _holds_within_supply."""
    return _holds_within_joint_supply if JOINT_SUPPLY else _holds_within_supply


def _joint_supply_holds(tab: InFlightTables, k: np.ndarray, binds: np.ndarray) -> np.ndarray:
    """[M] False where no assignment of types to positions within node supply holds L layers, tested with every
    binding type's supply row at once (round 19, timepark). k [M, g, i]: each type's cap at each position, -inf
    where the type may not take it (a middle position's cap below 1); binds: the types with slots[g] < positions.

    The most layers such an assignment a (a_i a usable type at i, #{i : a_i = g} <= slots[g]) holds is at most
        U(lam) = sum_g lam_g slots[g] + sum_i max_g (k[g, i] - lam_g)
    for any lam >= 0 with lam_g = 0 on the types whose supply does not bind: sum_i k[a_i, i] = sum_i (k[a_i, i] -
    lam_{a_i}) + sum_g lam_g #{i : a_i = g} <= sum_i max_g (k[g, i] - lam_g) + sum_g lam_g slots[g] (weak duality of
    the supply rows, each lam_g >= 0 and #{i : a_i = g} <= slots[g]). U(lam) < L for one lam: no assignment holds
    L, so no plan lies in the interval (the plan's types at its positions are such an assignment: the premise of
    _holds_within_supply). Any lam >= 0 is valid, so the multipliers are a heuristic: lam_g = g's own slots[g]-th
    largest cap over the positions (its slots filled at that price, the positions left to the others; 0 for the
    types that do not bind), then JOINT_ROUNDS rounds (default 0) over the binding types, each setting lam_g to its
    best value with the others fixed (U is convex and piecewise linear in lam_g with slope slots[g] - f -
    #{i : d_i > lam_g}, d_i = k[g, i] - max_{h != g} (k[h, i] - lam_h), f the positions only g may take: lam_g = the
    (slots[g] - f + 1)-th largest d_i, at least 0; f > slots[g]: none holds), and the least U seen is the test
    (JOINT_FROM_ZERO: a second descent from lam = 0). _holds_within_supply's test is lam with one binding type's
    multiplier and the others' at 0: on mixed-pool-3k (128 nodes of each of three types) a stage of 32 nodes lets
    4 stages of each type, and one type at a time lets the other types take every other position; Megatron 39B,
    tp 2, dp 32, cp 4, pp 10 (optimizer off): 4 x 8 H100 + 4 x 3 A100 + 0 on the two A10G ends = 44 < 48 layers,
    where one type at a time finds 50. Caps are whole numbers, so the sums are exact. The least U over lam would
    be exact (the assignment with supply rows is a transportation problem, whose LP is integral); the heuristic is
    not: on 4,000 brute-force tables it closes 1,751 of the 12,879 (table, L) pairs that one type at a time leaves
    open and the exact assignment closes (4,371 with JOINT_ROUNDS = 1, whose in-flight step cost about twice as
    much on Megatron 39B, mixed-pool-3k). The test's verdict need not be monotone in the caps (lam depends
    on them): a failing verdict at a mark still proves that no plan lies there, and the searches that use it
    (_first_within_supply, the walks' level bisections) rule out only marks and levels at or below one whose
    verdict failed, where the caps are no larger (the exact answer is monotone)."""
    M, G, P = k.shape
    slots = tab.slots.astype(float)
    best = np.full(M, np.inf)
    # the second start: each binding type's multiplier at its own slots[g]-th largest cap (its slots filled at that
    # price, the positions left to the others), where descent from 0 can stop at a kink short of the least U
    own_caps = -np.sort(-np.where(np.isfinite(k), k, -np.inf), axis=2)  # [M, g, i] descending
    start = np.zeros((M, G))
    for g in binds:
        at = own_caps[:, g, int(tab.slots[g]) - 1] if tab.slots[g] >= 1 else np.zeros(M)
        start[:, g] = np.maximum(np.where(np.isfinite(at), at, 0.0), 0.0)
    for lam in ((np.zeros((M, G)), start) if JOINT_FROM_ZERO else (start,)):
        with np.errstate(invalid="ignore"):
            value = (lam * slots[None, :]).sum(axis=1) + (k - lam[:, :, None]).max(axis=1).sum(axis=1)
            best = np.minimum(best, np.where(np.isnan(value), -np.inf, value))
            for _ in range(JOINT_ROUNDS):
                for g in binds:
                    adj = k - lam[:, :, None]
                    adj[:, g, :] = -np.inf
                    others = adj.max(axis=1)  # [M, i]
                    own = k[:, g, :]
                    forced = ~np.isfinite(others) & np.isfinite(own)  # only g may take it
                    d = np.where(np.isfinite(others) & np.isfinite(own), own - others, -np.inf)
                    free = int(slots[g]) - forced.sum(axis=1)  # [M]
                    dead = free < 0
                    order = -np.sort(-d, axis=1)  # descending, -inf last
                    at = np.clip(free, 0, P - 1)
                    pick = np.take_along_axis(order, at[:, None], axis=1)[:, 0]
                    pick = np.where(free >= P, 0.0, pick)  # every position may take g: lam_g = 0
                    lam[:, g] = np.where(dead, lam[:, g], np.maximum(np.where(np.isfinite(pick), pick, 0.0), 0.0))
                    value = (lam * slots[None, :]).sum(axis=1) + (k - lam[:, :, None]).max(axis=1).sum(axis=1)
                    value = np.where(dead, -np.inf, np.where(np.isnan(value), -np.inf, value))
                    best = np.minimum(best, value)
    return best >= tab.L


def _least_rent(tab: InFlightTables, caps: np.ndarray) -> np.ndarray:
    """[M] w max_lambda phi(lambda) for caps [M, g, i] (inf where the positions cannot hold L layers)."""
    price = tab.price[None, :, None]
    usable = (caps >= 1) | ~tab.middle[None, None, :]  # [M, g, i]: an end stage may be empty, on any type
    k = np.where(usable, np.maximum(caps, 0.0), 0.0)
    holds = np.where(usable, caps, -np.inf).max(axis=1)  # [M, i]
    feasible = np.isfinite(holds).all(axis=1) & (np.where(np.isfinite(holds), holds, 0).sum(axis=1) >= tab.L)
    best = np.full(len(caps), -np.inf)
    if EXACT_MULTIPLIER:  # a position that holds more than L holds L (the same assignments hold L): kinks listed
        k = np.minimum(k, tab.L)

    def phi(lam: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        val = np.where(usable, price - lam[:, None, None] * k, np.inf)  # [M, g, i]
        least = val.min(axis=1)  # [M, i]
        held = np.where(val == least[:, None, :], k, 0.0).max(axis=1)  # a minimizer's layers (the most on ties)
        return lam * tab.L + least.sum(axis=1), tab.L - held.sum(axis=1)

    if EXACT_MULTIPLIER and RENT_BY_ENVELOPE:  # round 15 (inflight2): the maximizing kink directly, one phi
        lam = _maximizing_kink(tab.price, usable, k, tab.L)
        best = phi(lam)[0]
        return np.where(feasible, tab.w * np.maximum(best, 0.0) * (1 - 1e-12), np.inf)
    if EXACT_MULTIPLIER:
        # bigproof: phi is concave and piecewise linear, its kinks where two types tie at a position,
        # lambda = (p_h - p_g) / (k_h - k_g) with integer caps, so its maximum lies at 0 or one of the multipliers
        # `_multipliers` lists: the first of them (ascending) where the slope L - sum k (the most layers on ties) is
        # <= 0, found by bisection on the list, about 12 evaluations for the 18 below. Every multiplier evaluated
        # gives a valid bound; its neighbour below is evaluated too (a tie lost to float rounding moves the search
        # one kink up).
        # Round 14 (costrows): the kinks of caps up to the table's most_layers (its caps at M = inf, which bound
        # every mark's caps), not up to L: on the large models' tables a list of about 60-120 kinks instead of
        # 6 x L (GPT-3 175B: 576), so about 6-7 steps instead of 10. The list is the table's own, so each row's
        # value does not depend on the other rows of the call (_rent_at).
        most = tab.most_layers if SHORT_MULTIPLIERS and 0 < tab.most_layers <= tab.L else tab.L
        if most < tab.L and k.max(initial=0) > most:  # not expected (most is the caps' largest): every kink
            most = tab.L
        lams = _multipliers(tab.price, most)
        lo = np.zeros(len(caps), dtype=np.int64)
        hi = np.full(len(caps), len(lams) - 1, dtype=np.int64)
        while (lo < hi).any():
            mid = (lo + hi) // 2
            v, grad = phi(lams[mid])
            best = np.maximum(best, v)
            up = grad > 0  # more layers needed: a larger multiplier
            lo, hi = np.where(up & (lo < hi), mid + 1, lo), np.where(~up & (lo < hi), mid, hi)
        for at in (lo, np.maximum(lo - 1, 0)):
            best = np.maximum(best, phi(lams[at])[0])
        return np.where(feasible, tab.w * np.maximum(best, 0.0) * (1 - 1e-12), np.inf)
    lo = np.zeros(len(caps))
    hi = np.full(len(caps), float(tab.price.max() - tab.price.min()) + 1e-6)
    for lam in (lo, hi):
        v, _ = phi(lam)
        best = np.maximum(best, v)
    for _ in range(BISECTION):
        mid = 0.5 * (lo + hi)
        v, grad = phi(mid)
        best = np.maximum(best, v)
        up = grad > 0  # more layers needed: a larger multiplier
        lo, hi = np.where(up, mid, lo), np.where(up, hi, mid)
    return np.where(feasible, tab.w * np.maximum(best, 0.0) * (1 - 1e-12), np.inf)


EXACT_MULTIPLIER = True  # _least_rent's multiplier from the kinks of phi (bigproof); False: the 16-step bisection
SHORT_MULTIPLIERS = True  # those kinks only up to the table's most_layers cap difference (round 14, costrows)
RENT_BY_ENVELOPE = True  # that kink from each position's lower envelope, not by bisection over a list (round 15)
_MULTIPLIERS: dict[tuple, np.ndarray] = {}
MULTIPLIERS_KEPT = 4_096  # entries of _MULTIPLIERS before it is emptied (long what-if sweeps see many price vectors)


def _multipliers(price: np.ndarray, most: int) -> np.ndarray:
    """0 and every (p_h - p_g) / d > 0 with d = 1..most, ascending: every kink of phi for caps of at most `most`
    layers (kept by the prices and most). The caps are whole layers (floats of integers), so every kink is one."""
    key = (tuple(price.tolist()), most)
    if key not in _MULTIPLIERS:
        if len(_MULTIPLIERS) >= MULTIPLIERS_KEPT:
            _MULTIPLIERS.clear()
        gaps = (price[None, :] - price[:, None]).ravel()
        gaps = gaps[gaps > 0]
        steps = np.arange(1, max(most, 1) + 1, dtype=float)
        _MULTIPLIERS[key] = np.unique(np.concatenate([[0.0], (gaps[:, None] / steps[None, :]).ravel()]))
    return _MULTIPLIERS[key]


def _maximizing_kink(price: np.ndarray, usable: np.ndarray, k: np.ndarray, L: int) -> np.ndarray:
    """[M] the least lambda >= 0 at which phi's right slope L - sum_i K_i(lambda) is <= 0 (0 where none: such a
    row is infeasible, _least_rent's `feasible`), with K_i(lambda) the most layers among position i's cheapest lines
    p_g - lambda k[g, i] (g usable at i). phi is concave, so its maximum over lambda >= 0 is there (round 15,
    inflight2: the kink the bisection over `_multipliers` finds, without ~7 evaluations of phi).

    Each line g of position i is a cheapest one exactly on an interval [a_g, b_g] of lambda >= 0:
        a_g = max(0, max over usable h with k_h < k_g of (p_g - p_h) / (k_g - k_h)),
        b_g = min over usable h with k_h > k_g of (p_h - p_g) / (k_h - k_g)   (inf where none),
    and never where a usable h with k_h = k_g is cheaper (p_h < p_g) or a_g > b_g. Every ratio is one float
    expression r[g, h] = (p_g - p_h) / (k_g - k_h), which equals r[h, g] bit for bit (a - b = -(b - a) and
    (-x) / (-y) = x / y in IEEE arithmetic), so a_g <= b_g <= r[g, h] <= a_h for two such lines with k_g < k_h:
    among the lines that are cheapest somewhere, a grows with k, and K_i(lambda) = max{k_g : g on, a_g <= lambda}
    is the sum of the increments k_g - (the next smaller k of a line on at i) over the lines on with a_g <= lambda
    (equal k counted once). So the first lambda where sum_i K_i reaches L is the a of the event, in ascending a,
    at which the running sum of the increments reaches L. That a is r[g, h] = (p_g - p_h) / d with d = k_g - k_h
    a whole number (or 0), the bits of the kink `_multipliers` lists for d (its gaps price[g] - price[h] / d)."""
    M, G, P = k.shape
    dk = k[:, :, None, :] - k[:, None, :, :]  # [M, g, h, i] k_g - k_h
    dp = (price[:, None] - price[None, :])[None, :, :, None]  # [1, g, h, 1] p_g - p_h
    other = usable[:, None, :, :]  # h usable
    ratio = dp / np.where(dk != 0, dk, 1.0)  # r[g, h] where k_g != k_h (whole layers: d exact)
    a = np.maximum(np.where(other & (dk > 0), ratio, -np.inf).max(axis=2), 0.0)  # [M, g, i]
    b = np.where(other & (dk < 0), ratio, np.inf).min(axis=2)
    on = usable & (a <= b) & ~(other & (dk == 0) & (dp > 0)).any(axis=2)  # a cheaper line of the same k: never
    # the next smaller k of a line on at i (a line of the same k and a lower index counts as smaller: counted once)
    smaller = (dk > 0) | ((dk == 0) & (np.arange(G)[:, None] > np.arange(G)[None, :])[None, :, :, None])
    below = np.where(on[:, None, :, :] & smaller, k[:, None, :, :], 0.0).max(axis=2)
    step = np.where(on, k - below, 0.0).ravel()
    at = np.where(on, a, np.inf).ravel()
    order = np.argsort(at.reshape(M, G * P), axis=1) + (np.arange(M) * (G * P))[:, None]  # ties: the same a
    reached = np.cumsum(step[order], axis=1) >= L  # whole layers: exact sums
    first = np.argmax(reached, axis=1)
    lam = at[order[np.arange(M), first]]
    return np.where(reached.any(axis=1) & np.isfinite(lam), lam, 0.0)


def _rent(tab: InFlightTables, upto: int) -> None:
    """R(M_j) for every interval j < upto not computed yet, in chunks (each row's value does not depend on the
    others of its chunk, so the same values whichever intervals were computed before: _rent_at)."""
    _rent_at(tab, np.flatnonzero(np.isnan(tab.rent[:upto])))


def _rent_at(tab: InFlightTables, ix: np.ndarray) -> None:
    """R(M_j) at the intervals ix not computed yet, in chunks."""
    ix = ix[np.isnan(tab.rent[ix])]
    for start in range(0, len(ix), CHUNK):
        part = ix[start:start + CHUNK]
        tab.rent[part] = _least_rent(tab, tab.caps.at(part))


def _floor_rent(tab: InFlightTables) -> float:
    """R(inf) (the caps at M = inf), computed once where a walk needs it (tab.floor_rent NaN: not yet)."""
    if math.isnan(tab.floor_rent):
        if FLOOR_RENT_KEPT:  # round 22 (flight22): kept by _least_rent's inputs, shared by the tables alike
            caps = tab.caps.fn(np.array([np.inf]))
            key = (caps.tobytes(), caps.shape, tab.price.tobytes(), tab.middle.tobytes(), tab.L, tab.w,
                   tab.most_layers, EXACT_MULTIPLIER, RENT_BY_ENVELOPE, SHORT_MULTIPLIERS, BISECTION)
            got = _FLOOR_RENTS.get(key)
            if got is None:
                if len(_FLOOR_RENTS) > MULTIPLIERS_KEPT:
                    _FLOOR_RENTS.clear()
                got = _FLOOR_RENTS[key] = float(_least_rent(tab, caps)[0])
            tab.floor_rent = got
        else:
            tab.floor_rent = float(_least_rent(tab, tab.caps.fn(np.array([np.inf])))[0])
    return tab.floor_rent


FLOOR_RENT_KEPT = True  # _floor_rent's values kept by the inputs of _least_rent (round 22, flight22)
# _least_rent(tab, caps) reads of the table only price, middle, L, w and most_layers (and the module's switches), so
# two tables with the same of these and the same caps at M = inf get the same float (a pure function of them). On
# Megatron 39B (mixed-pool-8k, time<=B, to the proof) 1,716 tables asked for 679 distinct floor rents.
_FLOOR_RENTS: dict = {}


# ---- The rent walks of many candidates at once (round 17, rentbatch) ----
# The cost walks (_plain_cost_walk, _cost_by_ends_walk) are generators: where a walk needs rents it has not got, it
# yields (tab, ix) (R(M_j) at the intervals ix) or (tab, None) (R(inf)), and goes on once they are in tab.rent /
# tab.floor_rent. _drive computes each ask at once, as _rent_at and _floor_rent always did (one candidate: the same
# calls on the same rows as before); _drive_many runs many candidates' walks side by side and computes the asks of a
# round together (_rents_many: _least_rent_many calls over many tables' rows). A row's rent does not depend on the
# other rows of its call (_rent_at), so every value, and so every walk, is the same bit for bit. On GPT-3 175B
# (mixed-pool-8k, cost) a walk asked about 1.5 rent calls of about 4 rows each, some 40 numpy calls apiece on arrays
# of a few hundred elements.
RENT_BATCH = 32  # candidates the solver's in-flight step bounds at once (solver._inflight_ahead); <= 1: one at a time
BATCH_ROWS = 256  # rows of one _least_rent_many call at most
BATCH_ELEMENTS = 1 << 16  # and at most this many elements of its [rows, g, g, i] arrays (_maximizing_kink_many)


def _asked(tab: InFlightTables, ix: np.ndarray):
    """A walk's ask for R(M_j) at the intervals ix (none where every one is computed already)."""
    if np.isnan(tab.rent[ix]).any():
        yield tab, ix


def _floor_asked(tab: InFlightTables):
    """A walk's ask for R(inf) (none where it is computed already); its value."""
    if math.isnan(tab.floor_rent):
        yield tab, None
    return tab.floor_rent


def _drive(walk):
    """The value of a walk, each of its asks computed when made (_rent_at, _floor_rent)."""
    try:
        ask = next(walk)
        while True:
            tab, ix = ask
            if ix is None:
                _floor_rent(tab)
            else:
                _rent_at(tab, ix)
            ask = walk.send(None)
    except StopIteration as done:
        return done.value


def _drive_many(walks: list) -> list:
    """The values of many walks (each on its own tables), run side by side: each round computes the asks of every
    walk still running in _least_rent_many calls, then resumes them. Each value is _drive's, bit for bit."""
    out = [None] * len(walks)
    asks = {}
    for x, walk in enumerate(walks):
        try:
            asks[x] = next(walk)
        except StopIteration as done:
            out[x] = done.value
    while asks:
        _rents_many(list(asks.values()))
        for x in list(asks):
            try:
                asks[x] = walks[x].send(None)
            except StopIteration as done:
                out[x] = done.value
                del asks[x]
    return out


def _rents_many(asks: list) -> None:
    """Every ask's rents (tab, ix: R(M_j) at ix not computed yet; tab, None: R(inf)), in _least_rent_many calls of
    asks with about as many positions (sorted by positions, then types: padding to the largest costs arithmetic),
    each call at most BATCH_ROWS rows and BATCH_ELEMENTS elements of its [rows, g, g, i] arrays (one ask alone may
    pass them)."""
    todo = []
    for tab, ix in asks:
        if ix is None:
            todo.append((tab, None, tab.caps.fn(np.array([np.inf]))))
        else:
            ix = ix[np.isnan(tab.rent[ix])]
            if len(ix):
                todo.append((tab, ix, tab.caps.at(ix)))
    todo.sort(key=lambda ask: ask[2].shape[:0:-1])  # (positions, types)
    at = 0
    while at < len(todo):
        rows, types, stop = 0, 0, at
        while stop < len(todo):
            caps = todo[stop][2]
            more, wider = rows + len(caps), max(types, caps.shape[1])
            if stop > at and (more > BATCH_ROWS or more * wider * wider * caps.shape[2] > BATCH_ELEMENTS):
                break
            rows, types, stop = more, wider, stop + 1
        part, at = todo[at:stop], stop
        for (tab, ix, _), rent in zip(part, _least_rent_many([(tab, caps) for tab, _, caps in part])):
            if ix is None:
                tab.floor_rent = float(rent[0])
            else:
                tab.rent[ix] = rent


def _least_rent_many(asks: list) -> list:
    """[_least_rent(tab, caps) for tab, caps in asks], in one programme over all their rows: each table's caps
    [M, g, i] padded to the most types and positions of the asks (a padded type or position is usable nowhere, so it
    adds no line and no position), the same operations in the same order on each row. The one sum over floats,
    phi's sum over the positions, is taken per group of rows with the same number of positions, on the same
    C-ordered [rows, positions] array a single call sums (numpy's pairwise sum depends on the length, not on the
    rows); every other reduction is a minimum, a maximum or a sum of whole layers (exact in any order), and the
    maximizing kink depends only on each row's (a, step) pairs (ties in a: the same lambda). Bit for bit
    _least_rent's values (tests/test_rent_batch.py); without the envelope multiplier, one table at a time."""
    if not (EXACT_MULTIPLIER and RENT_BY_ENVELOPE) or len(asks) == 1:
        return [_least_rent(tab, caps) for tab, caps in asks]
    sizes = [len(caps) for _, caps in asks]
    R = sum(sizes)
    G = max(caps.shape[1] for _, caps in asks)
    P = max(caps.shape[2] for _, caps in asks)
    caps = np.zeros((R, G, P))
    real = np.zeros((R, G, P), dtype=bool)  # the table's own types and positions
    middle = np.zeros((R, P), dtype=bool)
    price = np.zeros((R, G))
    L = np.empty(R, dtype=np.int64)
    w = np.empty(R)  # stage widths: whole numbers, exact as floats (the one-table path multiplies by them the same)
    npos = np.empty(R, dtype=np.int64)
    at = 0
    for (tab, c), size in zip(asks, sizes):
        g, p = c.shape[1], c.shape[2]
        rows = slice(at, at + size)
        caps[rows, :g, :p] = c
        real[rows, :g, :p] = True
        middle[rows, :p] = tab.middle
        price[rows, :g] = tab.price
        L[rows], w[rows], npos[rows] = tab.L, tab.w, p
        at += size
    usable = ((caps >= 1) | ~middle[:, None, :]) & real  # [R, g, i]
    k = np.where(usable, np.maximum(caps, 0.0), 0.0)
    holds = np.where(usable, caps, -np.inf).max(axis=1)  # [R, i]
    own = real.any(axis=1)  # [R, i] the table's positions
    feasible = (np.isfinite(holds) | ~own).all(axis=1) & (np.where(np.isfinite(holds), holds, 0).sum(axis=1) >= L)
    k = np.minimum(k, L[:, None, None])
    lam = _maximizing_kink_many(price, usable, k, L)
    val = np.where(usable, price[:, :, None] - lam[:, None, None] * k, np.inf)
    least = val.min(axis=1)  # [R, i]
    total = np.empty(R)
    for p in np.unique(npos).tolist():
        rows = np.flatnonzero(npos == p)
        total[rows] = least[rows, :p].sum(axis=1)
    best = lam * L + total
    rent = np.where(feasible, w * np.maximum(best, 0.0) * (1 - 1e-12), np.inf)
    return np.split(rent, np.cumsum(sizes)[:-1])


def _maximizing_kink_many(price: np.ndarray, usable: np.ndarray, k: np.ndarray, L: np.ndarray) -> np.ndarray:
    """_maximizing_kink on rows with their own prices [R, g] and layer counts L [R] (padded types and positions are
    usable nowhere: no line, no event); the same expressions, row by row."""
    M, G, P = k.shape
    dk = k[:, :, None, :] - k[:, None, :, :]  # [M, g, h, i] k_g - k_h
    dp = (price[:, :, None] - price[:, None, :])[:, :, :, None]  # [M, g, h, 1] p_g - p_h
    other = usable[:, None, :, :]  # h usable
    ratio = dp / np.where(dk != 0, dk, 1.0)
    a = np.maximum(np.where(other & (dk > 0), ratio, -np.inf).max(axis=2), 0.0)  # [M, g, i]
    b = np.where(other & (dk < 0), ratio, np.inf).min(axis=2)
    on = usable & (a <= b) & ~(other & (dk == 0) & (dp > 0)).any(axis=2)
    smaller = (dk > 0) | ((dk == 0) & (np.arange(G)[:, None] > np.arange(G)[None, :])[None, :, :, None])
    below = np.where(on[:, None, :, :] & smaller, k[:, None, :, :], 0.0).max(axis=2)
    step = np.where(on, k - below, 0.0).ravel()
    at = np.where(on, a, np.inf).ravel()
    order = np.argsort(at.reshape(M, G * P), axis=1) + (np.arange(M) * (G * P))[:, None]
    reached = np.cumsum(step[order], axis=1) >= L[:, None]
    first = np.argmax(reached, axis=1)
    lam = at[order[np.arange(M), first]]
    return np.where(reached.any(axis=1) & np.isfinite(lam), lam, 0.0)


SPLIT = 4  # blocks of intervals each round of _plain_cost splits an open block into
SPLIT_IN_PYTHON = True  # _plain_cost's cut points by _split_points, not numpy calls on five numbers (round 15)


def _split_points(a: int, b: int) -> list[int]:
    """np.unique(np.linspace(a, b + 1, SPLIT + 1).round()) as ints, in Python floats: linspace's points are
    i x ((b + 1 - a) / SPLIT) + a (one product and one sum, rounded as numpy rounds them) with the last b + 1
    itself, and Python's round and numpy's both round halves to even; the same list (round 15, inflight2: the numpy
    calls were about 8 % of the cost walk's CPU on GPT-3 175B)."""
    step = (b + 1 - a) / SPLIT
    return sorted({round(i * step + a) for i in range(SPLIT)} | {b + 1})


def _plain_cost(tab: InFlightTables, iterations: int, max_time_s: float | None = None,
                max_cost_usd: float | None = None, max_usd_per_hour: float | None = None,
                target: float = math.inf) -> tuple[float, float] | None:
    """_plain_cost_walk for one candidate, each rent it asks computed at once (_drive)."""
    return _drive(_plain_cost_walk(tab, iterations, max_time_s, max_cost_usd, max_usd_per_hour, target))


def _plain_cost_walk(tab: InFlightTables, iterations: int, max_time_s: float | None = None,
                     max_cost_usd: float | None = None, max_usd_per_hour: float | None = None,
                     target: float = math.inf):
    """inflight_bound minimizing cost (the plain walk: the Lagrangian rent, no end types), with R(M_j) computed only
    where it decides the bound below `target` (R x it units, USD/h x s: the incumbent's cost per iteration x 3600;
    inf: the least product itself). Issue 14, item 3 (bigproof): on GPT-3 175B's candidates (mixed-pool-8k, cost)
    the walk computed R at about 40 marks per candidate, 54 % of the in-flight bound's CPU, where the products sat
    1.3-2.8 x the incumbent at every mark.

    Blocks. For intervals a <= j <= b, k(M_j) <= k(M_b) position by position (the caps only grow with M), so the
    rent LP at M_j is at least the LP at M_b, which is at least R(M_b) (a Lagrangian value: any multiplier bounds
    the LP from below), and it(M_j) >= it(M_a). So every plan of the block rents at least R(M_b) and iterates at least
    it(M_a): its cost per iteration is at least R(M_b) it(M_a) / 3600, and where (R(M_b), it(M_a)) breaks a limit
    every interval of the block does (`_meets` only grows with both). The walk starts from one block (the intervals
    the deadline leaves), splits every open block whose value is below min(the best exact product, target) into
    SPLIT blocks (R at their last intervals, one vectorized call per round), and takes a block of one interval at
    its exact value R(M_j) it(M_j). It returns min(the best exact product, the least value of the blocks left) (a
    lower bound on every interval's product: each is at least its block's value) and the least it(M_a) of the
    blocks and intervals left; None when every interval breaks a limit. Below target the value is the least exact
    product, as the plain walk's; at or above it, a value >= target (the candidate is pruned either way)."""
    n = len(tab.marks)
    slack = BOUND_SLACK
    over = np.flatnonzero(tab.iteration * iterations > max_time_s * slack) if max_time_s is not None else []
    end = int(over[0]) if len(over) else n  # it grows with j: the deadline leaves the intervals before end
    lo = int(np.argmax(~np.isposinf(tab.rent[:end]))) if end and not np.isposinf(tab.rent[:end]).all() else end
    best, best_it, rest, rest_it = math.inf, math.inf, math.inf, math.inf
    blocks = [(lo, end - 1)] if lo < end else []
    while blocks:
        parts = []
        for a, b in blocks:  # SPLIT blocks of about equal size (fewer where the block is smaller)
            cut = _split_points(a, b) if SPLIT_IN_PYTHON else \
                np.unique(np.linspace(a, b + 1, SPLIT + 1).round().astype(np.int64)).tolist()
            parts += [(int(x), int(y) - 1) for x, y in zip(cut[:-1], cut[1:])]
        right = np.array([b for _, b in parts], dtype=np.int64)
        yield from _asked(tab, right)  # _rent_at(tab, right), by the driver (_drive, or _drive_many for a batch)
        rent, it = tab.rent[right], tab.iteration[[a for a, _ in parts]]
        ok = _meets(rent, it, iterations, max_time_s, max_cost_usd, max_usd_per_hour)
        value = rent * it
        single = np.array([a == b for a, b in parts])
        if (ok & single).any():
            best = min(best, float(value[ok & single].min()))
            best_it = min(best_it, float(it[ok & single].min()))
        limit = min(best, target)
        blocks = []
        for x in np.flatnonzero(ok & ~single):
            if value[x] < limit:
                blocks.append(parts[x])
            else:  # closed: its value already reaches the limit, which only falls
                rest, rest_it = min(rest, float(value[x])), min(rest_it, float(it[x]))
    low = min(best, rest)
    if not math.isfinite(min(best_it, rest_it)):
        return None
    return min(best_it, rest_it) * (1 - 1e-9), low / 3600.0 * (1 - 1e-9)


def inflight_bound(tab: InFlightTables, iterations: int, objective: str, max_time_s: float | None = None,
                   max_cost_usd: float | None = None, max_usd_per_hour: float | None = None,
                   cutoff_usd: float = math.inf, cutoff_s: float = math.inf) -> tuple[float, float] | None:
    """(iteration s, cost USD per iteration) lower bounds over every plan of the candidate that meets the limits
    (minimizing time the cost bound is 0: the walk does not visit every interval); None
    when no interval does (no plan meets the budget). Minimizing time, the walk stops at the first interval that
    meets the limits (it(M_j) grows with j); minimizing cost, once R(inf) x it(M_j) reaches the best product.
    cutoff_usd (minimizing cost, round 8): the incumbent's cost; the rent by end types (_cost_by_ends) is refined only
    as far as it decides whether the bound reaches it. cutoff_s (minimizing time without a cost budget, round 12):
    the incumbent's training time; the largest whole reduce's levels are searched only as far as they decide whether
    an interval reaches it (whole_levels_iteration). Any value gives a valid bound."""
    slack = BOUND_SLACK
    if objective == "time" and max_cost_usd is not None and tab.allreduce_per_layer is not None:
        cut = _budget_cut(cutoff_s, iterations)  # round 20 (inflightb): inf where BUDGET_CUTOFF is off
        best = _time_under_cost(tab, iterations, max_cost_usd, max_time_s, max_usd_per_hour, cut)
        if best is not None and best < cut and tab.whole_per_layer is not None:  # round 9: the largest whole reduce
            best = _with_whole_levels(tab, best, iterations, max_time_s, max_cost_usd, max_usd_per_hour,
                                      cut if BUDGET_WHOLE_CUTOFF else math.inf)
        return None if best is None else (best * (1 - 1e-9), 0.0)
    if objective == "cost":  # the cost walks (round 17: generators, _inflight_walk)
        return _drive(_inflight_walk(tab, iterations, objective, max_time_s, max_cost_usd, max_usd_per_hour,
                                     cutoff_usd, cutoff_s))
    n = len(tab.marks)
    best_it, best_cost = math.inf, math.inf
    j = 0
    while j < n:
        if objective == "time" and math.isfinite(best_it):
            break
        if max_time_s is not None and tab.iteration[j] * iterations > max_time_s * slack:
            break  # it grows with j
        stop = min(j + CHUNK, n)
        if objective == "time" and max_cost_usd is None and max_usd_per_hour is None:
            # Round 12 (timerows): without a cost budget or a rent limit the time walk reads R(M_j) only for being
            # finite, which it is exactly from holds_from on (R is inf where the positions cannot hold L layers on
            # their best types, _least_rent's `feasible`, which is _holds; below holds_from it is set to inf, and from
            # it both checks pass, since they only pass more as M grows): no rent programme.
            rent = np.where(np.arange(j, stop) < tab.holds_from, np.inf, 0.0)
        else:
            _rent(tab, stop)
            rent = tab.rent[j:stop]
        it = tab.iteration[j:stop]
        ok = _meets(rent, it, iterations, max_time_s, max_cost_usd, max_usd_per_hour)
        if ok.any():
            if not math.isfinite(best_it):
                first = j + int(np.argmax(ok))  # the first interval that meets the limits
            best_it = min(best_it, float(it[ok].min()))
            best_cost = min(best_cost, float((rent[ok] * it[ok]).min()))
        j = stop
    if not math.isfinite(best_it):
        return None
    ends = objective == "time" and _ends_time_walked(tab)  # round 18 (timerows2)
    if ends and tab.whole_per_layer is None:
        best_it = max(best_it, _time_by_ends(tab, first, iterations, max_time_s))
    if objective == "time" and tab.whole_per_layer is not None:  # round 9: the largest whole reduce per interval
        # the cutoff raised by 1e-12: an interval decided at it stays above the solver's own test after the roundings
        cut = {"cutoff": cutoff_s / iterations * (1 + 1e-12)} if math.isfinite(cutoff_s) else {}
        whole = whole_levels_iteration(tab, first, iterations, max_time_s, **cut, **({"ends": True} if ends else {}))
        if whole is None:
            return None
        best_it = max(best_it, whole)
    if objective != "cost":  # the walk stopped at the first interval that meets the limits: no bound on the cost
        best_cost = 0.0
    return best_it * (1 - 1e-9), best_cost / 3600.0 * (1 - 1e-9)


def _inflight_walk(tab: InFlightTables, iterations: int, objective: str, max_time_s: float | None = None,
                   max_cost_usd: float | None = None, max_usd_per_hour: float | None = None,
                   cutoff_usd: float = math.inf, cutoff_s: float = math.inf):
    """inflight_bound as a walk (_drive, _drive_many): minimizing cost the walks by end types or by blocks, which
    ask their rents; otherwise inflight_bound itself (no ask)."""
    if objective == "cost" and tab.ends_extra is not None and len(tab.middle) >= 2:
        return (yield from _cost_by_ends_walk(tab, iterations, max_time_s, max_cost_usd, max_usd_per_hour,
                                              cutoff_usd))
    if objective == "cost":  # bigproof: the walk by blocks (the same value below the cutoff)
        return (yield from _plain_cost_walk(tab, iterations, max_time_s, max_cost_usd, max_usd_per_hour,
                                            cutoff_usd / iterations * 3600.0))
    return inflight_bound(tab, iterations, objective, max_time_s, max_cost_usd, max_usd_per_hour, cutoff_usd,
                          cutoff_s)


def _ends_rent(tab: InFlightTables, caps: np.ndarray) -> np.ndarray:
    """[M, a, b] the least rent of the positions (pp >= 2) with position 0 on type a and position pp - 1 on type b,
    over every assignment of types to the middle positions that holds L layers with every middle position holding at
    least one (caps [M, g, i] = k[g, i](M_j); an end may be empty, on any type): w (p_a + p_b + C[L - k_a0 - k_b])
    with C[l] the least sum of prices of the middle positions holding >= l layers, by a dynamic programme over the
    positions (the multiple-choice knapsack of the Lagrangian rent solved exactly, round 8; inf where nothing holds).
    Node supply and whole-node blocks are still dropped: both only raise a plan's rent."""
    M, G, pp = caps.shape
    L = tab.L
    k = np.minimum(np.maximum(caps, 0.0), L).astype(np.int64)  # caps hold whole layers (floats of integers)
    price = tab.price
    ell = np.arange(L + 1)
    rows = np.arange(M)[:, None, None]
    C = np.full((M, L + 1), np.inf)
    C[:, 0] = 0.0
    for i in range(1, pp - 1):
        ki = k[:, :, i]  # [M, g]
        src = np.maximum(ell[None, None, :] - ki[:, :, None], 0)  # [M, g, l]: what the earlier positions must hold
        val = np.where((ki >= 1)[:, :, None], price[None, :, None] + C[rows, src], np.inf)
        C = val.min(axis=1)
    need = np.maximum(L - k[:, :, 0][:, :, None] - k[:, :, pp - 1][:, None, :], 0)  # [M, a, b]
    return tab.w * (price[None, :, None] + price[None, None, :] + C[rows, need]) * (1 - 1e-12)


def _cost_by_ends(tab: InFlightTables, iterations: int, max_time_s: float | None = None,
                  max_cost_usd: float | None = None, max_usd_per_hour: float | None = None,
                  cutoff_usd: float = math.inf) -> tuple[float, float] | None:
    """_cost_by_ends_walk for one candidate, each rent it asks computed at once (_drive)."""
    return _drive(_cost_by_ends_walk(tab, iterations, max_time_s, max_cost_usd, max_usd_per_hour, cutoff_usd))


def _cost_by_ends_walk(tab: InFlightTables, iterations: int, max_time_s: float | None = None,
                       max_cost_usd: float | None = None, max_usd_per_hour: float | None = None,
                       cutoff_usd: float = math.inf):
    """inflight_bound minimizing cost, with each interval's rent taken exactly per pair of end types (_ends_rent)
    and the tied embedding's all-reduce at that pair's least (round 8, docs/solver.md "Round 8: cost-side bounds and
    incumbents (costrows)").

    A plan of interval j with its first stage on a and its last on b costs per iteration at least
    R_ab(M_j) x (it(M_j) + ends_extra[a, b]) =: V_j(a, b): R_ab is the least rent of the positions with those ends
    that hold L layers under the caps k(M_j), and it(M_j) counts the embedding all-reduce at its least over every
    pair (least_embedding_allreduce_s), which ends_extra[a, b] >= 0 raises to the least with ends a and b. So the
    plans of interval j that meet the limits cost at least V_j = min over the pairs that meet them. R_ab >= R(M_j)
    (the Lagrangian rent relaxes the same programme), so V_j >= P_j := R(M_j) it(M_j), the plain walk's value, and
    P_j >= R(inf) it(M_j), which grows with j. The bound is min_j V_j, computed lazily: intervals in ascending P_j,
    each refined only while P_j is below both the best V_j found and the target (cutoff_usd, the incumbent: a
    candidate whose bound reaches it is pruned, and one whose bound is below it needs no sharper value); the value
    returned is min(best V_j, the least P_j not refined, R(inf) it(M_j) of the first interval not walked), a lower
    bound on every V_j. The iteration bound is the plain walk's (pairs only remove plans). The plain walk runs first,
    and where it already reaches the target nothing is refined."""
    target = cutoff_usd / iterations * 3600.0  # USD/h x s, the unit of R x it
    plain = yield from _plain_cost_walk(tab, iterations, max_time_s, max_cost_usd, max_usd_per_hour, target)
    if plain is None:
        return None
    if plain[1] * 3600.0 >= target:
        return plain
    slack = BOUND_SLACK
    n = len(tab.marks)
    extra = tab.ends_extra
    best = math.inf  # the least V_j refined
    skipped = math.inf  # the least P_j of the intervals that meet the limits and were not queued
    queue: list[tuple[float, int]] = []  # (P_j, j), refined in ascending P_j
    j = 0
    while True:
        limit = min(best, target)
        while j < n and (yield from _floor_asked(tab)) * tab.iteration[j] < limit:
            if max_time_s is not None and tab.iteration[j] * iterations > max_time_s * slack:
                j = n  # it grows with j: no later interval meets the deadline
                break
            stop = min(j + CHUNK, n)
            yield from _asked(tab, np.flatnonzero(np.isnan(tab.rent[:stop])))  # _rent(tab, stop)
            rent, it = tab.rent[j:stop], tab.iteration[j:stop]
            ok = _meets(rent, it, iterations, max_time_s, max_cost_usd, max_usd_per_hour)
            product = rent * it
            for x in np.nonzero(ok)[0]:
                if product[x] < limit:
                    heapq.heappush(queue, (float(product[x]), j + int(x)))
                else:
                    skipped = min(skipped, float(product[x]))
            j = stop
        if not queue or queue[0][0] >= min(best, target):
            break
        batch = []
        while queue and queue[0][0] < min(best, target) and len(batch) < REFINE_BATCH:
            batch.append(heapq.heappop(queue)[1])
        ix = np.array(batch)
        exact = _ends_rent(tab, tab.caps.at(ix))  # [J, a, b]
        times = tab.iteration[ix][:, None, None] + extra[None]  # [J, a, b]
        good = _meets(exact, times, iterations, max_time_s, max_cost_usd, max_usd_per_hour)
        if good.any():
            best = min(best, float((exact * times)[good].min()))
    tail = (yield from _floor_asked(tab)) * tab.iteration[j] if j < n else math.inf
    value = min(best, queue[0][0] if queue else math.inf, skipped, tail)
    if not math.isfinite(value):
        return None  # every interval that meets the limits was refined and none holds a plan that meets them
    return plain[0], max(plain[1], value / 3600.0 * (1 - 1e-9))


def ends_extra_s(problem: Problem, d: DegreeTerms, pp: int, cache: dict | None = None) -> np.ndarray | None:
    """[a, b] the least tied-embedding all-reduce of a plan of the candidate whose first stage is on type a and last
    on type b (costmodel.embedding_allreduce_s, across nodes; within one node too where a == b and a plan of one
    type can put all pp stages on one node of a: costmodel.place's ends_same_node), less
    least_embedding_allreduce_s (the part it(M_j) already counts): >= 0. Zeros when the embeddings are untied (no
    such all-reduce: the rent by ends, exact per interval, is still sharper than the Lagrangian rent; Llama-2 70B,
    mixed-pool-8k, cost: 36 -> 15 positional bounds to a 1 % gap). None when pp = 1 (no ends to pair).
    cache: solver.Memo.calls, which keeps each pair's all-reduce (bounds._calls; the same values)."""
    if pp <= 1:
        return None
    names = [u.name for u in d.uses]
    if not problem.model.tied_embeddings:
        return np.zeros((len(names), len(names)))
    within = tuple(pp * d.w <= u.node.gpus_per_node for u in d.uses)
    key = ("ends_extra_s", tuple(names), d.w, d.tp, within)  # all it depends on (round 13: kept, read-only)
    if cache is not None and key in cache:
        return cache[key]
    call = _calls(cache)
    pair = np.array([[call(embedding_allreduce_s, problem, a, b, False, d.w, d.tp) for b in names] for a in names])
    for x, u in enumerate(d.uses):
        if within[x]:
            pair[x, x] = min(pair[x, x], call(embedding_allreduce_s, problem, u.name, u.name, True, d.w, d.tp))
    out = np.maximum(pair - least_embedding_allreduce_s(problem, d, pp, cache), 0.0)
    if cache is not None:
        out.flags.writeable = False
        cache[key] = out
    return out


INFLIGHT_ENDS_TIME = True  # round 18 (timerows2): the time walk charges the tied embedding by the end pairs admitted


def _ends_time_walked(tab: InFlightTables) -> bool:
    """Whether inflight_bound's time walk (a cost budget takes _time_under_cost, unchanged) takes the end pairs'
    embedding excess (_pair_excess): INFLIGHT_ENDS_TIME, pp >= 2 and some pair's excess above 0 (tied embeddings
    whose all-reduce differs by the ends' types). Under a deadline or a rent limit too: the walk's intervals from its
    first that meets the limits hold every plan that meets them, and the least over them is a bound whatever the
    later intervals' limits."""
    return (INFLIGHT_ENDS_TIME and tab.ends_extra is not None and len(tab.middle) >= 2
            and float(tab.ends_extra.max()) > 0.0)


def _pair_excess(tab: InFlightTables, caps: np.ndarray) -> np.ndarray:
    """[J] for caps [J, g, i] = k[g, i](M_j): the least ends_extra[a, b] over the pairs of end types (a, b) that a
    plan of the interval can have (round 18, timerows2), inf where none can (no plan lies in the interval).

    A plan of interval j with its first stage on a and its last on b puts n_i <= k[g_i, i](M_j) layers on each
    position (its stage times are at most its slowest, below M_{j+1}, and the caps are constant on the interval),
    every middle position at least one on a type whose cap is >= 1, so
        L = sum_i n_i <= k[a, 0] + k[b, pp - 1] + sum over the middle positions of max_{g : k[g, i] >= 1} k[g, i];
    and it takes one stage slot of a and one of b (two of a where a == b): slots[a] >= 1, slots[b] >= 1, and
    slots[a] >= 2 where a == b. A pair that fails either is not the plan's. Its tied-embedding all-reduce is at least
    least_embedding_allreduce_s + ends_extra[a, b] (ends_extra_s)."""
    J, G, P = caps.shape
    mid = caps[:, :, 1:P - 1]
    best_mid = np.where(mid >= 1, mid, -np.inf).max(axis=1, initial=-np.inf) if P > 2 else np.zeros((J, 0))
    some = np.isfinite(best_mid).all(axis=1)  # [J] every middle position usable on some type
    held = np.where(np.isfinite(best_mid), best_mid, 0.0).sum(axis=1)  # whole layers: exact
    first, last = np.maximum(caps[:, :, 0], 0.0), np.maximum(caps[:, :, P - 1], 0.0)
    admitted = (first[:, :, None] + last[:, None, :] + held[:, None, None] >= tab.L) & some[:, None, None]
    if tab.slots is not None:
        slots = tab.slots
        pairs = (slots[:, None] >= 1) & (slots[None, :] >= 1) & ~(np.eye(G, dtype=bool) & (slots[:, None] < 2))
        admitted &= pairs[None]
    return np.where(admitted, tab.ends_extra[None], np.inf).min(axis=(1, 2))


def _time_by_ends(tab: InFlightTables, first: int, iterations: int, max_time_s: float | None = None) -> float:
    """The time walk's iteration bound with each interval's least end-pair excess (round 18, timerows2):
    min over j >= first of it(M_j) + _pair_excess(caps at M_j), over the intervals the plain walk keeps (from its
    first that meets the limits, before the deadline drops them). it(M_j) counts the embedding all-reduce at its
    least over every pair; a plan of interval j pays at least the excess of its own pair, which the interval admits
    (_pair_excess), so its iteration is at least that interval's value. The excess only falls as j grows (caps only
    grow) and it(M_j) only grows, so the walk stops once it(M_j) reaches the least value found: first one mark, then
    chunks. Where no interval admits a pair (not expected: the plain walk's intervals hold L on their best types, and
    the pair of those types is admitted unless supply forbids it), it(M_first): no infeasibility is claimed here."""
    n = len(tab.marks)
    best = math.inf
    j = first
    while j < n:
        if tab.iteration[j] >= best:
            break
        if max_time_s is not None and tab.iteration[j] * iterations > max_time_s * BOUND_SLACK:
            break  # it grows with j: no later interval meets the deadline
        stop = j + 1 if j == first else min(j + CHUNK, n)
        value = tab.iteration[j:stop] + _pair_excess(tab, tab.caps[j:stop])
        best = min(best, float(value.min()))
        j = stop
    return best if math.isfinite(best) else float(tab.iteration[first])


ALLREDUCE_LEVELS = 12  # thresholds of the all-reduce per interval in the budget walk (any grid is valid)


def _time_under_cost(tab: InFlightTables, iterations: int, max_cost_usd: float, max_time_s: float | None = None,
                     max_usd_per_hour: float | None = None, cutoff: float = math.inf) -> float | None:
    """The least iteration over the plans of the candidate that meet a cost budget (minimizing time), or None when
    none does: the walk of inflight_bound with the rent and the all-reduce coupled (round 7, docs/solver.md "Time
    under a cost budget: the network of the cheap layouts").

    A plan in interval j whose largest stage all-reduce A (costmodel: max_i dp_allreduce_i) lies in (c_{q-1}, c_q]
    (c_0 < ... < c_{Q-1} a grid, c_{-1} = -inf, c_Q = inf) puts n_i layers on type g_i at position i with
    alpha[g_i] n_i P_layer <= dp_allreduce_i <= A <= c_q (a stage also holds its embedding or head: more parameters,
    a larger all-reduce), so n_i <= floor(c_q / (alpha[g_i] P_layer)), a multiple of v: its rent is at least
    R(j, c_q), the Lagrangian rent of the module docstring with the caps k(M_j) so limited (and node supply checked
    on those caps). Its iteration is at least it(M_j) + max(0, c_{q-1} - alpha_min P_total / pp): it(M_j) counts
    alpha_min P_total / pp for the all-reduce, and the plan's is at least c_{q-1}. So its cost per iteration is at
    least R(j, c_q) x that, and a bucket (j, q) whose product breaks the budget holds no plan that meets it. The
    least iteration over the buckets left bounds every plan that meets the budget; it(M_j) grows with j, so the walk
    stops once it(M_j) reaches the best found. Where the cheapest layouts that meet the budget put layers on types
    with slow networks (A100's 400 Gbit/s against H100's 3,200 on mixed-pool-8k), their all-reduce alone breaks the
    budget at the fast intervals; the plain walk paired the cheap rent with the fastest type's all-reduce.

    cutoff (round 20, inflightb; seconds per iteration, _budget_cut's): the walk starts as if a bucket at the cutoff
    had been found, so it prices only the buckets below it and stops at the first interval whose it(M_j) reaches it;
    the value is min(cutoff, the value without it), and the cutoff where the value without it is None (_budget_cut:
    the solver drops the candidate either way). Round 22 (rentflight, BUDGET_PAIR_SENDS): the buckets that fit are
    also priced within each boundary's own send (_pair_fitting, _pair_send_rent), the least floor of one that fits
    that too taken."""
    slack = BOUND_SLACK
    n = len(tab.marks)
    budget = max_cost_usd * slack * 3600.0 / iterations  # USD-seconds per hour of one iteration: rent x iteration
    alpha = tab.allreduce_per_layer
    v = tab.v
    if BUDGET_FAST:  # round 22 (flight22): the levels' arrays kept by their inputs (the same floats)
        levels, extra, lim = _budget_levels(alpha, tab.L, tab.allreduce_floor, v)
    else:
        positive = alpha[alpha > 0]
        if positive.size == 0:
            levels = np.array([np.inf])
        else:
            lo, hi = float(positive.min()), float(alpha.max() * tab.L)
            levels = np.append(np.geomspace(lo, max(hi, lo), ALLREDUCE_LEVELS), np.inf)
        extra = np.maximum(0.0, np.concatenate([[-np.inf], levels[:-1]]) - tab.allreduce_floor)  # [q] Delta_q
        with np.errstate(divide="ignore", invalid="ignore"):
            limit = np.where(alpha[None, :] > 0, np.floor(levels[:, None] / alpha[None, :] * ROUND_UP), np.inf)
        lim = limit if v == 1 else np.floor(limit / v) * v  # [q, g]
    best = cutoff  # round 20: as if a bucket at the cutoff fitted (inf: none)
    j = 0
    if BUDGET_FLOOR_STOP:  # round 19 (budgetlow): the intervals whose floor rent x iteration fits, before any rent
        n = _fitting_intervals(tab, budget, n)
    while j < n:
        if tab.iteration[j] >= best:
            break  # it grows with j
        if max_time_s is not None and tab.iteration[j] * iterations > max_time_s * slack:
            break
        stop = min(j + CHUNK, n)
        if BUDGET_FAST:  # round 22 (flight22): only the chunk's rows below best (it grows with j; the rest not kept)
            stop = j + _rows_below(tab.iteration[j:stop], best)
        _rent(tab, stop)
        rent, it = tab.rent[j:stop], tab.iteration[j:stop]
        ok = np.isfinite(rent) & (rent * it <= budget) & (it < best)
        if max_usd_per_hour is not None:
            ok &= rent <= max_usd_per_hour * slack
        # the bucket's all-reduce adds to the expression that counts allreduce_floor for it (base_iteration); the
        # whole-reduce floor (in it, when larger) already holds every stage's whole reduce: taken beside, not added
        base = it if tab.base_iteration is None else tab.base_iteration[j:stop]
        times = np.maximum(base[:, None] + extra[None, :], it[:, None])  # [J, q]
        # R(j, c_q) >= R(j): a bucket whose time x its interval's own rent breaks the budget is out already
        keep = ok[:, None] & (times < best) & (rent[:, None] * times <= budget)
        if max_time_s is not None:
            keep &= times * iterations <= max_time_s * slack
        rows, qs = np.nonzero(keep)
        if rows.size:
            capped = np.minimum(tab.caps[j:stop][rows], lim[qs][:, :, None])  # [pairs, g, i]
            rents = _least_rent(tab, capped)
            if BUDGET_FAST:  # round 22 (flight22): the supply test only where the rent fits (fits is the same)
                fits = np.isfinite(rents) & (rents * times[rows, qs] <= budget)
                if max_usd_per_hour is not None:
                    fits &= rents <= max_usd_per_hour * slack
                if fits.any():
                    with np.errstate(invalid="ignore"):
                        fits[fits] = _holds_within_supply(tab, capped[fits])
            else:
                with np.errstate(invalid="ignore"):  # inf - inf where a position has no usable type (excluded after)
                    rents = np.where(_holds_within_supply(tab, capped), rents, np.inf)
                fits = np.isfinite(rents) & (rents * times[rows, qs] <= budget)
                if max_usd_per_hour is not None:
                    fits &= rents <= max_usd_per_hour * slack
            if fits.any():
                if BUDGET_PAIR_SENDS and tab.pair_sends is not None:  # round 22 (rentflight): within the sends
                    best = min(best, _pair_fitting(tab, (j + rows)[fits], qs[fits], times[rows, qs][fits], lim,
                                                   budget, max_usd_per_hour))
                else:
                    best = min(best, float(times[rows, qs][fits].min()))
        j = stop
    return None if not math.isfinite(best) else best


BUDGET_PAIR_SENDS = True  # _time_under_cost's buckets also priced with each boundary's own send (round 22, rentflight)
PAIR_SEND_BATCHES = (1, 4, 16, 64)  # buckets priced by one _pair_send_rent call, in order of time (the last repeats)


def _pair_fitting(tab: InFlightTables, js: np.ndarray, qs: np.ndarray, times: np.ndarray, lim: np.ndarray,
                  budget: float, max_usd_per_hour: float | None) -> float:
    """The least of times over the buckets (js, qs) (each one whose Lagrangian rent fits the budget) whose rent
    within each boundary's own send (_pair_send_rent) fits it too; inf where none does (round 22, rentflight).
    Buckets are priced in order of time, a few at a time, until one fits: the value is the least fitting one's."""
    if not (_pair_delta(tab) > 0).any():  # every send at e_g already: not priced again (a weaker bound, valid)
        return float(times.min())
    order = np.argsort(times, kind="stable")
    at, step = 0, 0
    while at < len(order):
        size = PAIR_SEND_BATCHES[min(step, len(PAIR_SEND_BATCHES) - 1)]
        ix = order[at:at + size]
        rents = _pair_send_rent(tab, js[ix], qs[ix], lim)
        ok = rents * times[ix] <= budget
        if max_usd_per_hour is not None:
            ok &= rents <= max_usd_per_hour * BOUND_SLACK
        if ok.any():
            return float(times[ix][ok].min())
        at, step = at + size, step + 1
    return math.inf


def _pair_delta(tab: InFlightTables) -> np.ndarray:
    """[g, h] what v sends of a stage of g to a neighbour of type h != g add to its least times (v e_g), made once per
    tables: v (send_inter_s[g][h] - e_g)^+, 0 on the diagonal (a neighbour of the same type may share the node)."""
    _, inter, e, kept = tab.pair_sends
    got = kept.get("delta")
    if got is None:
        got = np.maximum(np.array(inter, dtype=float) - e[:, None], 0.0) * tab.v  # v sends each way (costmodel's
        np.fill_diagonal(got, 0.0)  # interleaved_send_counts), each to the neighbour's type on another node
        kept["delta"] = got
    return got


def _pair_send_rent(tab: InFlightTables, js: np.ndarray, qs: np.ndarray, lim: np.ndarray) -> np.ndarray:
    """[b] a lower bound on the rent (USD/hour) of every plan in bucket (js[b], qs[b]) of _time_under_cost: its
    slowest stage in [M_j, M_{j+1}), every stage's all-reduce within level q (lim[q, g] layers on g), each stage's
    sends charged at the type of the neighbour it sends to (round 22, rentflight; docs/solver.md).

    Stage i of g with n layers between neighbours of types p (before) and h (after) takes at least times[g, i, n]
    (its sends at e_g) + v (delta[g, p] [i > 0] + delta[g, h] [i < pp - 1]): its v sends to each neighbour of
    another type cross nodes, sent by g (costmodel.estimate: stage_send_s(g, neighbour, ...), d.send_inter_s). So
    it holds at most K[p, g, h, i] = #{n : that < M_{j+1}} layers (a multiple of v, at most lim[q, g]), >= 1 in the
    middle. The least rent of a type sequence whose K sum to at least L (a programme over the positions with the
    types before and at each position in its state, the layers held so far up to L; node supply not counted), x w.
    inf where none holds L. Kept per (j, q) on the tables."""
    times, kept = tab.pair_sends[0], tab.pair_sends[3]
    delta = _pair_delta(tab)
    out = np.full(len(js), np.nan)
    for b, (j, q) in enumerate(zip(js.tolist(), qs.tolist())):
        got = kept.get((j, q))
        if got is not None:
            out[b] = got
    todo = np.flatnonzero(np.isnan(out))
    if todo.size == 0:
        return out
    G, pp, N = times.shape
    L, v, n = tab.L, tab.v, len(tab.marks)
    jt, qt = js[todo], qs[todo]
    upper = np.where(jt + 1 < n, tab.marks[np.minimum(jt + 1, n - 1)], np.inf)  # [B] M_{j+1}
    ranks = np.arange(pp)
    left = np.where(ranks[None, None, :] > 0, delta.T[:, :, None], 0.0)  # [p, g, i]
    right = np.where(ranks[None, None, :] < pp - 1, delta[:, :, None], 0.0)  # [g, h, i]
    x = upper[:, None, None, None, None] - left[None, :, :, None, :] - right[None, None, :, :, :]  # [B, p, g, h, i]
    gi = np.arange(G)[None, None, :, None, None]
    ii = ranks[None, None, None, None, :]
    lo, hi = np.zeros(x.shape, dtype=np.int64), np.full(x.shape, N, dtype=np.int64)
    while (lo < hi).any():  # #{n : times[g, i, n] < x}: times is non-decreasing in n
        mid = (lo + hi) // 2
        below = times[gi, ii, np.minimum(mid, N - 1)] < x
        lo, hi = np.where((lo < hi) & below, mid + 1, lo), np.where((lo < hi) & ~below, mid, hi)
    K = np.minimum(lo.astype(float), lim[qt][:, None, :, None, None])  # [B, p, g, h, i]
    K = np.minimum(np.floor(K / v) * v, L).astype(np.int64)
    price = tab.price
    cols = np.arange(L + 1)
    B = len(todo)
    F = np.full((B, G, G, L + 1), np.inf)  # [b, type before, type at i, at least l layers before i]
    F[:, :, :, 0] = price[None, None, :]
    for i in range(pp - 1):
        k = K[..., i]  # [B, p, g, h]
        src = np.maximum(cols[None, None, None, None, :] - k[..., None], 0)  # [B, p, g, h, l]
        vals = np.take_along_axis(np.broadcast_to(F[:, :, :, None, :], src.shape), src, axis=4)
        if i > 0:
            vals = np.where((k >= 1)[..., None], vals, np.inf)  # a middle stage holds a layer
        F = vals.min(axis=1) + price[None, None, :, None]  # [B, g, h, l]
    k = K[:, :, :, 0, pp - 1]  # [B, p, g]: the last stage (no neighbour after; an end may be empty)
    last = np.take_along_axis(F, np.maximum(L - k, 0)[..., None], axis=3)[..., 0]
    rents = tab.w * last.min(axis=(1, 2)) * (1 - 1e-12)
    out[todo] = rents
    for j, q, r in zip(jt.tolist(), qt.tolist(), rents.tolist()):
        kept[(j, q)] = r
    return out



BUDGET_FAST = True  # _time_under_cost's work cut, the same value bit for bit (round 22, flight22; _rows_below)


def _rows_below(it: np.ndarray, best: float) -> int:
    """The number of leading entries of `it` (a chunk of tab.iteration, non-decreasing) below best (round 22,
    flight22). _time_under_cost keeps a row of its chunk only where it < best (best as the chunk starts), so the rows
    from the first one at or above best on are never kept; it(M_j) grows with j, so the next chunk would start there
    and stop the walk at once (it(M_j) >= best). Their rents (tab.rent) are then left for a later walk to compute:
    a row's rent does not depend on the other rows of its call (_rent_at), so every value is the same bit for bit."""
    over = np.flatnonzero(it >= best)
    return int(over[0]) if len(over) else len(it)


_LEVELS: dict = {}  # (alpha bytes, L, allreduce_floor, v, the switches) -> _budget_levels' arrays (round 22)


def _budget_levels(alpha: np.ndarray, L: int, floor: float, v: int) -> tuple:
    """_time_under_cost's all-reduce levels c_q, their Delta_q and the caps' limits [q, g] (multiples of v), the
    expressions of its BUDGET_FAST = False branch on the same floats, kept by their inputs (a pure function of them:
    the same arrays; read only). Tables of one degree at pp > 1 share alpha, L and the floor."""
    key = (alpha.tobytes(), alpha.shape, L, floor, v, ALLREDUCE_LEVELS, ROUND_UP)
    got = _LEVELS.get(key)
    if got is None:
        positive = alpha[alpha > 0]
        if positive.size == 0:
            levels = np.array([np.inf])
        else:
            lo, hi = float(positive.min()), float(alpha.max() * L)
            levels = np.append(np.geomspace(lo, max(hi, lo), ALLREDUCE_LEVELS), np.inf)
        extra = np.maximum(0.0, np.concatenate([[-np.inf], levels[:-1]]) - floor)  # [q] Delta_q
        with np.errstate(divide="ignore", invalid="ignore"):
            limit = np.where(alpha[None, :] > 0, np.floor(levels[:, None] / alpha[None, :] * ROUND_UP), np.inf)
        lim = limit if v == 1 else np.floor(limit / v) * v
        for a in (levels, extra, lim):
            a.flags.writeable = False
        if len(_LEVELS) > 4_096:
            _LEVELS.clear()
        got = _LEVELS[key] = (levels, extra, lim)
    return got


BUDGET_CUTOFF = True  # _time_under_cost prices only the buckets below the incumbent (round 20, inflightb)
BUDGET_WHOLE_CUTOFF = False  # and _with_whole_levels searches its levels only as far as they decide against it


def _budget_cut(cutoff_s: float, iterations: int) -> float:
    """The iteration (seconds) at and above which inflight_bound's value under a cost budget rules a candidate out
    against an incumbent of cutoff_s seconds of training (round 20, inflightb; inf: no cutoff, or BUDGET_CUTOFF off).

    The solver drops a candidate whose in-flight bound, iterations x value x (1 - 1e-9), is at least the incumbent x
    (1 - solver.INCUMBENT_REL), INCUMBENT_REL = 1e-9; the cutoff is raised by 1e-12 (as whole_levels_iteration's
    cutoff under a time objective) so that a value at it stays at or above that test after the roundings. So a
    value of at least the cut and the value without the cut (or None: no plan meets the budget) take the same
    decision: the candidate is dropped. Below the cut the value is the same, bit for bit (_time_under_cost prices the
    same buckets' rows, and a row's rent does not depend on the other rows of its call: _rent_at), and the whole
    levels (_with_whole_levels) only raise it; at or above it they are skipped."""
    if not BUDGET_CUTOFF or not math.isfinite(cutoff_s):
        return math.inf
    return cutoff_s / iterations * (1 + 1e-12)


BUDGET_FLOOR_STOP = True  # _time_under_cost walks only the intervals where R(inf) x it(M_j) fits (round 19, budgetlow)


def _fitting_intervals(tab: InFlightTables, budget: float, n: int) -> int:
    """The number of leading intervals j (of n) where R(inf) x it(M_j) <= budget (USD-s per hour of one iteration):
    _time_under_cost's walk keeps a bucket (j, q) only where R(M_j) x its time <= budget, its time is at least
    it(M_j), R(M_j) >= R(inf) (InFlightTables.floor_rent: no interval's rent is below it, as the cost walks use it)
    and it(M_j) grows with j; so from the first interval where R(inf) x it(M_j) breaks the budget no bucket is kept,
    and the walk's value is the same with them left out (bit for bit: the same rows are priced the same way). Where
    none is left, no plan of the candidate meets the budget, and R(M_j) and the buckets' rent programmes are never
    asked (Megatron 39B on mixed-pool-8k, time<=B: most candidates the in-flight step rules out walk every interval
    before; one rent programme of one row instead)."""
    if n == 0:
        return 0
    floor = _floor_rent(tab)
    if not math.isfinite(floor):
        return 0  # no layout holds the layers at any mark: no interval's rent is finite
    over = np.flatnonzero(floor * tab.iteration[:n] > budget)
    return int(over[0]) if len(over) else n


def _meets(rent: np.ndarray, it: np.ndarray, iterations: int, max_time_s: float | None, max_cost_usd: float | None,
           max_usd_per_hour: float | None) -> np.ndarray:
    """[j] whether interval j's (rent, iteration) lower bounds meet every budget (each with BOUND_SLACK): a plan of
    the interval meets a budget only if they do."""
    slack = BOUND_SLACK
    ok = np.isfinite(rent)
    if max_usd_per_hour is not None:
        ok &= rent <= max_usd_per_hour * slack
    if max_cost_usd is not None:
        ok &= rent * it * iterations / 3600.0 <= max_cost_usd * slack
    if max_time_s is not None:
        ok &= it * iterations <= max_time_s * slack
    return ok

def moe_layer_terms(problem: Problem, d: DegreeTerms, kind, dp: int, mbs: int, ep: int, modes: list[str],
                    pp: int | None = None) -> tuple[float, np.ndarray, np.ndarray]:
    """A mixture-of-experts layer's terms in the in-flight bound at expert-parallel size ep (round 8; no context
    parallelism with experts): (state bytes per GPU, [g, r] its all-to-alls per micro-batch, [g] its share of the
    stage all-reduce), each the cost model's own value for one layer (costmodel.estimate), so the bound of the
    module docstring holds as it does for a dense layer:
      - state: (P - X) / tp x state_bytes(dp) + X / (tp ep) x expert_state_bytes_per_param(dp, ep), X the layer's
        expert parameters (estimate's memory: dense / tp x state + experts / (tp ep) x expert state);
      - all-to-alls: moe_layer_alltoall_s in mode r (4 per micro-batch, 6 under full recomputation; block
        recomputation: 6 on its recomputed layers, 4 on the others, which is steps[full] and steps[none] as
        _least_times combines them), on the placement's node span: a stage of w = tp dp > GPUs per node always
        spans nodes; with w <= GPUs per node, tp ep <= w, so ep_ranks_per_node gives r = ep either way and the
        span does not change the value;
      - all-reduce: gradient_sync_s of P - X dense parameters plus expert_allreduce_s of X, each linear in its
        parameter count (ring_allreduce_s, no latency term), at the span of w > GPUs per node, the lesser
        bandwidth (a stage that straddles two nodes with w <= GPUs per node pays more, never less).
    The dense path's allreduce_per_layer (min(alpha, alpha_e) x P, bounds.moe_rates) is replaced by the exact sum."""
    from optsearch.costmodel import (
        expert_allreduce_s, expert_state_bytes_per_param, gradient_sync_s, moe_layer_alltoall_s,
    )
    model, tp = problem.model, d.tp
    dist = _terms_dist(problem, d, dp, 1)
    P, X = float(model.layer_parameters(kind)), float(model.expert_parameters(kind))
    state = (P - X) / tp * state_bytes(problem.job, dp, 1, dist) \
        + X / (tp * ep) * expert_state_bytes_per_param(problem.job, dp, ep, dist)
    spans = [d.w > u.node.gpus_per_node for u in d.uses]
    a2a = np.array([[moe_layer_alltoall_s(problem, u.name, kind, tp, ep, mbs, r, s) for r in modes]
                    for u, s in zip(d.uses, spans)])
    dense = _exposed_dense(problem, dist, [gradient_sync_s(problem, u.name, P - X, tp, dp, s, 1, dist)
                                           for u, s in zip(d.uses, spans)], pp)
    allreduce = np.array([a + expert_allreduce_s(problem, u.name, X, tp, dp, ep, s, dist)
                          for a, u, s in zip(dense, d.uses, spans)])
    return state, a2a, allreduce


def _terms_dist(problem: Problem, d: DegreeTerms, dp: int, cp: int) -> bool:
    """The distributed-optimizer setting d's terms are at (bounds.degree_terms), else the search's default."""
    return distributed_optimizer_on(problem.job, dp, cp) if d.distributed_optimizer is None else d.distributed_optimizer


def _exposed_dense(problem: Problem, distributed: bool, dense: list[float], pp: int | None = None
                   ) -> tuple[float, ...]:
    """The dense part of MoE all-reduces as a floor: whole, or with --overlap-grad-reduce (Problem.overlap_grad_reduce,
    upstream's default in solve) only its exposed floor, bounds.grad_overlap_floor (costmodel._overlap_grad_reduce
    hides the dense reduce-scatter behind the backward; the experts' exchange stays exposed). Applied to every
    candidate of such a problem, also where the overlap is off for it (dp = 1): lower, still valid. pp: the
    candidates' (grad_overlap_floor's: None for any pp)."""
    return grad_overlap_floor(problem, distributed, tuple(dense), pp) if problem.overlap_grad_reduce else tuple(dense)


def moe_comm_floor_s(problem: Problem, d: DegreeTerms, pp: int, dp: int, ep: int) -> tuple[float, float]:
    """Lower bounds (all-reduce, optimizer) on the largest stage all-reduce and the largest optimizer step of every
    plan of a mixture-of-experts candidate (round 8; no context parallelism with experts). Stage i on g_i holds D_i dense and
    X_i expert parameters (sum_i D_i = D, the dense total with the embedding and head at pp, sum_i X_i = X):
        max_i (a_d[g_i] D_i + a_e[g_i] X_i) >= (1 / pp) sum_i (...) >= (min_g a_d[g] D + min_g a_e[g] X) / pp,
    the same for the optimizer (b_d, b_e), the maximum of a sum being at least the mean; a_d = gradient_sync_s,
    a_e = expert_allreduce_s, b_d = optimizer_s, b_e = expert_optimizer_step_s per parameter (all linear in the
    count), the all-reduce at the span w > GPUs per node (the least bandwidth a stage can have is taken by the
    cost model whenever the stage spans nodes; a stage that fits in a node may still straddle two, which only
    slows it). The dense path's floor, (min(a_d, a_e) + min(b_d, b_e)) (D + X) / pp (bounds.moe_rates), is never
    above this one. The all-reduce part is also the floor _time_under_cost subtracts from a bucket's all-reduce
    (InFlightTables.allreduce_floor): it(M_j) counts at most that much for it."""
    from optsearch.costmodel import expert_allreduce_s, expert_optimizer_step_s, gradient_sync_s, optimizer_s
    model, tp = problem.model, d.tp
    dist = _terms_dist(problem, d, dp, 1)
    X = float(sum(model.expert_parameters(k) * k.num_layers for k in model.kinds))
    D = d.all_params(pp) - X
    spans = [d.w > u.node.gpus_per_node for u in d.uses]
    a_d = min(_exposed_dense(problem, dist, [gradient_sync_s(problem, u.name, 1.0, tp, dp, s, 1, dist)
                                             for u, s in zip(d.uses, spans)], pp))
    a_e = min(expert_allreduce_s(problem, u.name, 1.0, tp, dp, ep, s, dist) for u, s in zip(d.uses, spans))
    b_d = min(optimizer_s(problem, u.name, 1.0, tp, dp, 1, dist) for u in d.uses)
    b_e = min(expert_optimizer_step_s(problem, u.name, 1.0, tp, dp, ep, dist) for u in d.uses)
    return (a_d * D + a_e * X) / pp, (b_d * D + b_e * X) / pp


def least_embedding_allreduce_s(problem: Problem, d: DegreeTerms, pp: int, cache: dict | None = None) -> float:
    """A lower bound on the tied-embedding all-reduce of every plan of a candidate (costmodel.embedding_allreduce_s:
    the first and the last stage exchange the word embedding's gradient when pp > 1): its least value over every
    pair of usable types at the ends, across nodes, and within one node where a plan of one type can put all pp
    stages on one node (costmodel.place: ends_same_node needs pp x w <= GPUs per node). 0 when pp = 1 or the
    embeddings are untied. (Round 7: every bound took it as >= 0; on GPT-3 13B, tp 1, the cheap layouts' A100 ends
    spend 0.16 s of a 0.53 s iteration in it.) cache: as in ends_extra_s."""
    if pp <= 1 or not problem.model.tied_embeddings:
        return 0.0
    names = [u.name for u in d.uses]
    within = tuple(pp * d.w <= u.node.gpus_per_node for u in d.uses)
    key = ("least_embedding_allreduce_s", tuple(names), d.w, d.tp, within)  # all it depends on (round 13: kept)
    if cache is not None and key in cache:
        return cache[key]
    call = _calls(cache)
    values = [call(embedding_allreduce_s, problem, g, h, False, d.w, d.tp) for g in names for h in names]
    values += [call(embedding_allreduce_s, problem, u.name, u.name, True, d.w, d.tp) for u, on in zip(d.uses, within)
               if on]
    if cache is not None:
        cache[key] = min(values)
    return min(values)


def whole_reduce_floor_s(problem: Problem, d: DegreeTerms, pp: int, cache: dict | None = None) -> float:
    """With --overlap-grad-reduce (d.alpha_full set; 0 without): W = (alpha_full_min + beta_min) P_total / pp + the
    least embedding all-reduce, with it(M_j) >= (m - 1/v) max(M_j, stages_s / pp) + W (issue 14, round 8, floor). The cost
    model's iteration is pipeline + max_s A_s + E + max_s O_s. At v = 1, pipeline = (m - 1) max t + sum t, and
    stage s's exposed reduce is at least its whole one less the backwards that hide it (costmodel.exposed_grad_reduce_s:
    R_s - sum_{j<s} W_j, stage 0 R_0 - W_0 (n - 1) / n), each backward at most its stage time t_j, so
    sum t + max A >= every stage's whole reduce (R_s + rest_s, the all-reduce priced without the overlap), whose
    largest is at least alpha_full_min P_total / pp (the mean over the stages, each at least its type's rate x its
    parameters; bounds.cheap_bounds' form). At v > 1 the overlap is off (overlap_grad_reduce_on): max A is whole,
    and pipeline >= (m - 1/v) max t. max O >= beta_min P_total / pp, E >= least_embedding_allreduce_s, and
    max t >= M_j, >= stages_s / pp. The sum t this spends is the one the old expression counts beside alpha_min P / pp:
    the budget walk adds a bucket's all-reduce to the old expression only (InFlightTables.base_iteration)."""
    if not d.alpha_full:
        return 0.0
    return (d.alpha_full_min + d.beta_min) * d.all_params(pp) / pp + least_embedding_allreduce_s(problem, d, pp, cache)


def least_layer_work_s(d: DegreeTerms, L: int) -> float:
    """A lower bound on the layers' share of the sum of stage times over every plan of a one-kind candidate, from node
    supply: at most slots[g] stages run on g, each with at most NMAX[g] layers, so at most slots[g] NMAX[g] layers
    run on g, each for at least step_min[g]; the least work puts the layers on the fastest types first up to those
    capacities (the fractional knapsack's greedy, exact for that relaxation). inf when the capacities cannot hold L.
    (Issue 14, item 3, round 6: Llama-2 70B's candidates at the front of the time order use every node of the pool,
    two stages per type, and the sum that put every layer on H100 sat far below their plans.) least_layer_work_pp_s
    at pp 0 (no stage left to the slower types: the same greedy, the same operations)."""
    return least_layer_work_pp_s(d, L, 0)


LAYER_WORK_BY_PP = True  # _sharpened_walk's S: least_layer_work_pp_s, the middle stages' one layer each (round 23)


def least_layer_work_pp_s(d: DegreeTerms, L: int, pp: int) -> float:
    """least_layer_work_s at a pipeline depth pp: the same knapsack with each middle stage's layer counted (round 23,
    flight1t; docs/solver.md "Round 23: ... the middle stages' layers on the slower types").

    A plan has pp stages, at most slots[g] of them on g, and every middle stage (all but the first and the last)
    holds >= 1 layer. Number the types by step_min, the fastest first (ties by index), and let F_k = the slots of the
    first k types. At most F_k stages run on the first k types, so at least pp - F_k run on the others, at most two of
    them end stages: the others hold >= r_k = max(0, pp - 2 - F_k) layers. With x_g the layers on g: sum x = L,
    0 <= x_g <= slots[g] NMAX[g], and sum_{i > k} x_(i) >= r_k for every k; the layers' work is >= sum x_g step_min[g].
    The least of that linear programme is the greedy: each type in turn takes the most it can, leaving r_k to the
    later ones (costs rise along the order and r_k does not: moving a layer from a later type to an earlier one
    where the greedy has room keeps every constraint and costs no more). inf where no x meets them (no plan).
    With pp <= 2 + F_1 (every r_k 0) it equals least_layer_work_s."""
    left, work, held = L, 0.0, 0
    for g in sorted(range(len(d.slots)), key=lambda g: d.step_min_s[g]):
        held += d.slots[g]
        later = max(0, pp - 2 - held)
        take = max(0, min(left - later, d.slots[g] * d.max_layers_per_stage[g]))
        work += take * d.step_min_s[g]
        left -= take
    return work if left <= 0 else math.inf


def sharpened(problem: Problem, kept: dict, d: DegreeTerms, cand, budget, bound: CandidateBound,
              cache: dict | None = None, cutoff_usd: float = math.inf, cutoff_s: float = math.inf) -> CandidateBound:
    """_sharpened_walk for one candidate (_drive)."""
    return _drive(_sharpened_walk(problem, kept, d, cand, budget, bound, cache, cutoff_usd, cutoff_s))


def sharpened_many(problem: Problem, kept: dict, asks: list, cache: dict | None = None) -> list[CandidateBound]:
    """[sharpened(problem, kept, d, cand, budget, bound, cache, cutoff_usd, cutoff_s) for each ask (d, cand, budget,
    bound, cutoff_usd, cutoff_s)], the cost walks' rents computed for all of them at once (_drive_many; round 17,
    rentbatch): the same values bit for bit. The candidates' keys must differ (each walk its own tables)."""
    if SLOWEST_AT_ONCE:
        _slowest_floors_ahead(problem, kept, asks)
    return _drive_many([_sharpened_walk(problem, kept, d, cand, budget, bound, cache, cutoff_usd, cutoff_s)
                        for d, cand, budget, bound, cutoff_usd, cutoff_s in asks])


SLOWEST_AT_ONCE = True  # sharpened_many: the batch's slowest-stage floors computed together, per v (round 21)


def _slowest_floors_ahead(problem: Problem, kept: dict, asks: list) -> None:
    """The slowest-stage floors (bounds.slowest_floor) the walks of `asks` will ask for, computed together for each v
    (bounds.slowest_floors_many: the missing ones on [D, K, G] arrays, kept in bounds._FLOORS), so that each walk's
    slowest_floor finds its array kept (round 21, costflight). The same floats (slowest_floors_many keeps the
    arrays slowest_floor computes: tests/test_inflight_round21.py): only the work is shared. On GPT-3 175B
    (mixed-pool-8k, cost, CPU clock 8.8 s) the loop's in-flight step computed about 1,000 of them one at a time,
    all at v = 2-4 (the v = 1 ones come from the cheap bounds' lists), about 0.27 ms each."""
    by_v: dict[int, dict[int, DegreeTerms]] = {}
    most: dict[int, int] = {}
    for d, cand, _, bound, *_ in asks:
        if bound.feasible and cand.key not in kept:
            by_v.setdefault(cand.v, {})[id(d)] = d
            most[cand.v] = max(most.get(cand.v, 1), cand.pp)
    for v, ds in by_v.items():
        if len(ds) > 1:
            slowest_floors_many(list(ds.values()), problem.model.num_layers, np.array([most[v]]), v)


def _sharpened_walk(problem: Problem, kept: dict, d: DegreeTerms, cand, budget, bound: CandidateBound,
                    cache: dict | None = None, cutoff_usd: float = math.inf, cutoff_s: float = math.inf):
    """bound (a refined bound of the v = 1 candidate `cand` under `budget`) with this module's bound taken beside it:
    the larger iteration and cost lower bounds, or infeasible when no interval meets the budget. Both are lower
    bounds over the plans that meet the budget, so their maximum is one. The tables are kept in `kept` by the
    candidate's key (solver.Memo). cutoff_usd, cutoff_s: see inflight_bound (the incumbent's cost, or its time when
    minimizing time; any value is valid)."""
    if not bound.feasible:
        return bound
    if cand.key not in kept:
        pp = cand.pp
        layer_work = (least_layer_work_pp_s(d, problem.model.num_layers, pp) if LAYER_WORK_BY_PP  # round 23
                      else least_layer_work_s(d, problem.model.num_layers))
        stages_s = max(d.layer_work_min_s, layer_work) + d.end_work_min_s \
            + 2 * (pp - 1) * d.send_min_s
        comm_s = (d.alpha_min_at(pp) + d.beta_min) * d.all_params(pp) / pp \
            + least_embedding_allreduce_s(problem, d, pp, cache)
        if problem.model.is_moe and cand.cp == 1:  # round 8: dense and expert parameters at their own rates
            comm_s = max(comm_s, sum(moe_comm_floor_s(problem, d, pp, cand.dp, cand.ep))
                         + least_embedding_allreduce_s(problem, d, pp, cache))
        slowest_s = float(slowest_floor(d, problem.model.num_layers, np.array([pp]), v=cand.v)[0])
        # node supply: no plan of this candidate exists (not kept: asked again, the same answer). stages_s is inf
        # where the slots cannot hold the layers at NMAX (least_layer_work_s): it made it(M_j) NaN at m = 1, where
        # (m - 1) x max(M_j, inf) is 0 x inf (bigproof)
        if not math.isfinite(slowest_s) or not math.isfinite(stages_s):
            return CandidateBound(False)
        kept[cand.key] = inflight_tables(problem, d, pp, cand.dp, cand.micro_batch_size, cand.cp, stages_s, comm_s,
                                         cache, cand.v, slowest_s, cand.ep, whole_reduce_floor_s(problem, d, pp, cache))
        if kept[cand.key] is not None:  # round 8: the cost walk's rent by end types, with their embedding all-reduce
            kept[cand.key].ends_extra = ends_extra_s(problem, d, pp, cache)
    tab = kept[cand.key]
    if tab is None:
        return bound
    got = yield from _inflight_walk(tab, problem.iterations, budget.objective if budget is not None else "cost",
                                    *((budget.max_time_s, budget.max_cost_usd, budget.max_usd_per_hour)
                                      if budget is not None else (None, None, None)), cutoff_usd=cutoff_usd,
                                    cutoff_s=cutoff_s)
    if got is None:
        return CandidateBound(False)
    iteration, cost = got
    return CandidateBound(True, max(bound.iteration_s, iteration), bound.rate_usd_per_hour,
                          max(bound.cost_per_iteration_usd, cost))


# ---- The largest stage's whole reduce under --overlap-grad-reduce, per interval (issue 14, round 9, overlapfloor) ----
WHOLE_BISECTION = 14  # geometric bisection steps for the least largest whole reduce of an interval (any is valid)


def whole_levels_terms(problem: Problem, d: DegreeTerms, kind, tp: int, mbs: int, cp: int, v: int, pp: int,
                       steps: np.ndarray, m: int, slowest: np.ndarray, stages_s: float, call, part=None
                       ) -> tuple[np.ndarray, np.ndarray, float] | None:
    """(whole_per_layer [g, i], whole_base [j], whole_mean) of InFlightTables, or None where there is no reduce
    (dp x cp = 1). With the overlap (cost-model 7c) a plan's iteration is (m - 1) max t + sum t + max_s A_s + E + max O
    and A_s >= whole_s - H_s, whole_s the stage's reduce priced without the overlap (R_s + rest_s), H_s what hides it:
    stage 0 W_0 (n - 1) / n <= W_0, stage s > 0 sum_{j<s} W_j, W_j = max(0, compute_j - F_j) its last backward
    (costmodel._overlap_grad_reduce). Every stage has t_j = p2p_j + compute_j = F'_j + W_j with
    F'_j = p2p_j + min(compute_j, F_j) >= p2p_j + the sum over its layers and ends of min(step, forward)
    (min(a + b, c + e) >= min(a, c) + min(b, e)). So
        s > 0:  sum t + A_s >= whole_s + sum_{j<s} F'_j + sum_{j>=s} (F'_j + W_j) >= whole_s + W_s + sum_j F'_j,
        s = 0:  sum t + A_0 >= whole_0 - W_0 + sum_j (F'_j + W_j) >= whole_0 + sum_j F'_j,
    and at v = 1
        iteration >= (m - 1) max t + max_s (whole_s + [s > 0] W_s) + L f + ends_f + 2 (pp - 1) e_min + E_min + O_min,
    f = min_g min(least step over the modes, forward) of a layer (forward: costmodel.layer_forward_s / cp, the forward
    the overlap's window leaves out), ends_f the same for the embedding and the head; whole_s >= alpha_full[g_s] x its
    layers' parameters, W_s >= n_s bw[g_s] + the ends' (step - forward) where negative, bw[g] = max(0, the least
    step over the modes - forward). whole_per_layer[g, i] = alpha_full[g] P_layer + [i > 0] bw[g]; whole_base[j] is
    the rest, with max t >= max(M_j, slowest_s, stages_s / pp) (slowest: it(M_j)'s). At v > 1 the overlap is off
    (overlap_grad_reduce_on): A_s = whole_s, the interleaved pipeline is at least (m - 1/v) max t + sum t / v (it(M_j)'s
    form), and whole_per_layer[g, i] = alpha_full[g] P_layer. whole_levels_iteration finds the least
    max_s whole_per_layer[g_s, s] n_s of each interval from its caps."""
    model = problem.model
    per = np.array(d.alpha_full, float) * model.layer_parameters(kind)
    if not (per > 0).any():
        return None
    params = d.all_params(pp)
    fixed = d.beta_min * params / pp + least_embedding_allreduce_s(problem, d, pp, getattr(call, "cache", None))
    if v == 1:
        kept = None if part is None else part.whole_terms  # round 15: pp-free, kept on the degree's part
        if kept is None:
            from optsearch.costmodel import layer_forward_s
            names = [u.name for u in d.uses]
            fwd = np.array([call(layer_forward_s, problem, g, kind, tp, mbs) / cp for g in names])
            f = float(np.minimum(steps.min(axis=1), fwd).min())
            emb_f = [_ends_forward(problem, g, tp, mbs, True, cp, call) for g in names]
            head_f = [_ends_forward(problem, g, tp, mbs, False, cp, call) for g in names]
            emb = min(min(e, x) for e, x in zip(d.emb_s, emb_f))
            head = min(min(h, x) for h, x in zip(d.head_s, head_f))
            bw = np.maximum(steps.min(axis=1) - fwd, 0.0)
            ends = min(0.0, min(e - x for e, x in zip(d.emb_s, emb_f))) \
                + min(0.0, min(h - x for h, x in zip(d.head_s, head_f)))
            kept = (f, emb, head, bw, ends)
            if part is not None:
                part.whole_terms = kept
        f, emb, head, bw, ends = kept
        forward = model.num_layers * f + emb + head + 2 * (pp - 1) * d.send_min_s
        if d.gather_hidden_at(problem, pp):  # the gather hides behind that forward (costmodel 7f): no credit
            forward = 0.0
        # a stage s > 0 also keeps its own last backward W_s beside its whole reduce (the docstring), W_s >= n_s bw[g_s]
        # + the ends' step - forward where negative; stage 0 hides behind its own (no bw at position 0)
        per = per[:, None] + np.where(np.arange(pp) > 0, 1.0, 0.0)[None, :] * bw[:, None]  # [g, i]
        base = (m - 1) * np.maximum(slowest, stages_s / pp) + forward + ends + fixed
    else:
        base = (m - 1 / v) * np.maximum(slowest, stages_s / pp) + np.maximum(stages_s, slowest) / v + fixed
        per = np.repeat(per[:, None], pp, axis=1)  # [g, i]
    return per, base, d.alpha_full_min * params / pp


def whole_levels_iteration(tab: InFlightTables, j0: int, iterations: int, max_time_s: float | None = None,
                           cutoff: float = math.inf, ends: bool = False, suffix: bool = True) -> float | None:
    """A lower bound on the iteration of every plan of the candidate whose slowest stage lies in an interval j >= j0
    (j0: the first interval that meets the limits), or None when none of them meets the deadline. A plan in interval
    j puts n_s <= k[g_s, s](M_j) layers on each position s (within node supply), and its largest whole reduce X is at
    least max_s whole_per_layer[g_s, s] n_s, so at every level c below X the caps limited to
    floor(c / whole_per_layer[g, i]) (a multiple of v) still hold its layout: where they do not hold L layers (_holds, _holds_within_supply), X > c.
    The least such c per interval is found by geometric bisection (the lower end kept: any c that fails is a floor),
    from whole_mean (X is at least the mean over the stages). The plan's iteration is at least
    max(it(M_j), whole_base[j] + X) (whole_levels_terms); the walk takes the least over the intervals, in chunks,
    until it(M_j) reaches the least found (it grows with j).

    cutoff (round 12, timerows; seconds per iteration, the incumbent's): each interval first tries the level
    c = cutoff - whole_base[j], at which its value reaches the cutoff. Where the caps so limited do not hold L
    layers, X > c and the interval's value is at least the cutoff: it is decided, and its search stops there; else the
    search goes on below c. An interval is searched only while it is undecided, and the walk stops at the first
    interval whose it(M_j) reaches the cutoff, taking it(M_j) as the bound of it and every later one. Every level
    kept as the lower end is one at which the layouts do not hold L layers (or the mean), as without the cutoff, so
    the value stays a valid bound. Every interval the search without the cutoff finds at or above it is found so
    with it (its lower end then fails at or above c, and the layouts hold more as the level grows, so c fails too);
    the cutoff's search may find more (it tries c itself, where the plain bisection's last failing level may lie
    below c). Values below the cutoff may differ in the last steps of the bisection.

    ends (round 18, timerows2; _ends_time_walked): each interval's value also takes the least tied-embedding
    excess over the end pairs its caps admit (_pair_excess), an additive term of every part of the value (each counts
    E at its least; docs/solver.md "Round 18: the in-flight time walk by end pairs"); the cutoff's tries take it off
    the level first (the value reaches the cutoff one excess sooner).

    suffix (round 20, timesmall; with WHOLE_SUFFIX; False from _with_whole_levels, time under a cost budget): the
    level test also counts every later stage's last backward (_suffix_limit, whole_suffix_backward_s)."""
    per, n, v = tab.whole_per_layer, len(tab.marks), tab.v
    slack = BOUND_SLACK
    top = float(per.max()) * tab.L
    best = math.inf
    j = j0
    while j < n:
        if tab.iteration[j] >= best:
            break
        if tab.iteration[j] >= cutoff:  # this interval and every later one: at least it(M_j) >= the cutoff
            best = min(best, float(tab.iteration[j]))
            break
        if max_time_s is not None and tab.iteration[j] * iterations > max_time_s * slack:
            break  # it grows with j: no later interval meets the deadline
        stop = min(j + CHUNK, n)
        if WHOLE_FAST:  # round 22 (flight22): the first interval alone, then only the rows below the least value
            stop = j + 1 if not math.isfinite(best) else j + _rows_below(tab.iteration[j:stop], best)
        caps = tab.caps[j:stop]  # [J, g, i]
        lo = np.full(stop - j, tab.whole_mean)  # X > lo (or X >= the mean)
        hi = np.full(stop - j, max(top, tab.whole_mean) * 2)
        excess = _pair_excess(tab, caps) if ends else np.zeros(stop - j)  # round 18: >= 0, inf: no plan
        base = tab.whole_base[j:stop] + np.where(np.isfinite(excess), excess, 0.0)

        def holds_at(level: np.ndarray) -> np.ndarray:
            limit = np.where(per[None] > 0, np.floor(level[:, None, None] / per[None] * ROUND_UP), np.inf)
            if suffix and WHOLE_SUFFIX and tab.suffix_backward > 0:  # round 20 (timesmall): later backwards too
                limit = np.minimum(limit, _suffix_limit(tab, caps, level))
            if v > 1:  # [J, g, i]
                limit = np.floor(limit / v) * v
            capped = np.minimum(caps, limit)
            return _holds(tab, capped) & _supply_test()(tab, capped)

        with np.errstate(divide="ignore", invalid="ignore"):
            bounded = math.isfinite(cutoff)
            open_ = tab.iteration[j:stop] < cutoff if bounded else np.ones(stop - j, dtype=bool)  # undecided
            if bounded:
                level = cutoff - base
                tried = open_ & (level > lo) & (level < hi)
                if tried.any():
                    holds = holds_at(np.where(tried, level, lo))
                    lo = np.where(tried & ~holds, level, lo)
                    hi = np.where(tried & holds, level, hi)
                open_ &= base + lo < cutoff
            for _ in range(WHOLE_BISECTION):
                if not open_.any():
                    break
                mid = np.sqrt(np.maximum(lo, 1e-300) * hi)
                holds = holds_at(mid)
                lo, hi = np.where(open_ & ~holds, mid, lo), np.where(open_ & holds, mid, hi)
                if bounded:
                    open_ &= base + lo < cutoff
        value = np.maximum(tab.iteration[j:stop] + excess, base + lo)
        if tab.hide is not None:  # the hiding floor counts E at its least too: the excess adds to it
            with np.errstate(invalid="ignore"):  # inf - inf where an interval admits no pair: that row takes -inf
                hide_cut = np.where(value < cutoff, cutoff - excess, -np.inf)
            value = np.maximum(value, excess + _hiding_floor(tab, j, stop, caps, hide_cut))
        ok = np.ones(stop - j, dtype=bool)
        if max_time_s is not None:
            ok &= value * iterations <= max_time_s * slack
        if ok.any():
            best = min(best, float(value[ok].min()))
        j = stop
    return None if not math.isfinite(best) else best


WHOLE_FAST = True  # whole_levels_iteration searches the rows below the least value found only (round 22, flight22)
# Each interval's value (its level bisection, hiding floor and pair excess) is computed row by row (no row's value
# depends on the other rows of its chunk), and is at least its it(M_j), which grows with j. The walk's value is the
# least over the intervals from j0 up to the first one whose it(M_j) reaches the least value found before it. With
# WHOLE_FAST the first interval is searched alone, and each chunk after it only up to its first row at or above the
# least value so far (_rows_below): a row left out has a value >= its it(M_j) >= that least value, so the least is
# the same float, and the walk stops at or before the old chunk start where it stopped (the rows between are such
# rows). On Megatron 39B (mixed-pool-8k, time<=B) the first chunk searched 15,318 rows for 1,327 below the value.


def _with_whole_levels(tab: InFlightTables, best: float, iterations: int, max_time_s: float | None,
                       max_cost_usd: float | None, max_usd_per_hour: float | None,
                       cutoff: float = math.inf) -> float | None:
    """best (a lower bound on the iteration of the plans that meet the limits, from _time_under_cost) and
    whole_levels_iteration from the first interval whose (rent, it) bounds meet the limits (_meets; every plan that
    meets them lies in it or later): their maximum, or None where the levels leave no plan within the deadline."""
    n = len(tab.marks)
    j = 0
    while j < n:
        if max_time_s is not None and tab.iteration[j] * iterations > max_time_s * BOUND_SLACK:
            return None  # it grows with j (not expected: _time_under_cost found a bucket)
        stop = min(j + CHUNK, n)
        _rent(tab, stop)
        ok = _meets(tab.rent[j:stop], tab.iteration[j:stop], iterations, max_time_s, max_cost_usd, max_usd_per_hour)
        if ok.any():
            whole = whole_levels_iteration(tab, j + int(np.argmax(ok)), iterations, max_time_s, suffix=False,
                                           **({"cutoff": cutoff} if math.isfinite(cutoff) else {}))
            return None if whole is None else max(best, whole)
        j = stop
    return None


def _ends_forward(problem: Problem, g: str, tp: int, mbs: int, first: bool, cp: int, call) -> float:
    """costmodel.stage_forward_s of an empty first (first) or last stage on g: the embedding's or the head's forward,
    kept in call's cache (round 13; the function's own value)."""
    from optsearch.costmodel import stage_forward_s
    cache = getattr(call, "cache", None)
    key = ("stage_forward_s", g, tp, mbs, first, cp)
    if cache is None or key not in cache:
        value = stage_forward_s(problem, g, {}, tp, mbs, first, not first, cp)
        if cache is None:
            return value
        cache[key] = value
    return cache[key]


def hiding_terms(problem: Problem, d: DegreeTerms, kind, tp: int, mbs: int, cp: int, pp: int, steps: np.ndarray,
                 m: int, slowest: np.ndarray, stages_s: float, call, part=None) -> tuple[np.ndarray, float, np.ndarray]:
    """(alpha_full[g] P_layer, rho, [j] base) of the per-mark hiding floor (v = 1, the overlap on; round 9). A plan
    whose slowest stage M* lies in [M_j, M_{j+1}) has every last backward W_i = max(0, compute_i - F_i) <= rho
    compute_i <= rho M*, rho the largest (step - forward) / step of a layer in any mode and of the embedding and the
    head on any type (compute_i is the sum of those parts' steps, F_i of their forwards), so stage s's reduce hides
    behind H_s <= h_s = max(1, s) rho M_{j+1} (stage 0: W_0 (n - 1) / n, stage s > 0: sum_{i<s} W_i) and
    A_s >= max(whole_s - h_s, rest_s) >= max(alpha_full[g_s] n_s P_layer - h_s, allreduce_per_layer[g_s] n_s).
    The iteration is then at least (m - 1) max(M_j, slowest_s, stages_s / pp) + max(stages_s, M_j) + max_s A_s
    + E_min + O_min: base[j] is all but max_s A_s (the old expression's form, it(M_j), with its all-reduce floor
    replaced), and _hiding_floor finds the least max_s A_s of the interval from the caps by bisection."""
    rho = None if part is None else part.hiding_rho  # round 15: pp-free, kept on the degree's part
    if rho is None:
        from optsearch.costmodel import layer_forward_s
        names = [u.name for u in d.uses]
        fwd = np.array([call(layer_forward_s, problem, g, kind, tp, mbs) / cp for g in names])
        # (step - forward) / step of every part (a part with a zero step adds -forward <= 0: no constraint on rho)
        ratios = [float(np.where(steps > 0, (steps - fwd[:, None]) / np.where(steps > 0, steps, 1.0), 0.0).max())]
        for g, e, h in zip(names, d.emb_s, d.head_s):
            ratios += [(e - _ends_forward(problem, g, tp, mbs, True, cp, call)) / e if e > 0 else 0.0,
                       (h - _ends_forward(problem, g, tp, mbs, False, cp, call)) / h if h > 0 else 0.0]
        rho = min(1.0, max(0.0, max(ratios)))
        if part is not None:
            part.hiding_rho = rho
    if d.gather_hidden_at(problem, pp):  # A_0 also hides behind the forward (the gather, costmodel 7f):
        rho = 1.0                                 # H_0 <= W_0 + F_0 <= compute_0 <= M*
    params = d.all_params(pp)
    fixed = d.beta_min * params / pp + least_embedding_allreduce_s(problem, d, pp, getattr(call, "cache", None))
    base = (m - 1) * np.maximum(slowest, stages_s / pp) + np.maximum(stages_s, slowest) + fixed
    return np.array(d.alpha_full, float) * problem.model.layer_parameters(kind), rho, base


def _hiding_floor(tab: InFlightTables, j: int, stop: int, caps: np.ndarray,
                  cutoff: np.ndarray | None = None) -> np.ndarray:
    """[J] the per-mark hiding floor of intervals j..stop-1 (hiding_terms): base[j] + the least max_s A_s, by
    geometric bisection on its level c (the lower end kept): at c below a plan's max_s A_s, n_s <= floor((c + h_s) /
    alpha_full[g] P_layer) and n_s <= floor(c / allreduce_per_layer[g]) hold its layout within the caps k(M_j), so
    where the caps so limited do not hold L layers (within node supply), every plan of the interval has
    max_s A_s > c. It starts from allreduce_floor (the old floor: max_s A_s >= it).
    cutoff ([J], round 12; -inf: none): a row's search stops once base + the lower end reaches it (decided at or
    above the cutoff; rows with -inf are not searched at all, their value is decided elsewhere), and it first tries
    the level at which it would, as whole_levels_iteration does. Every lower end kept is still a failing level."""
    full, rho, base = tab.hide
    rest = tab.allreduce_per_layer
    pp = caps.shape[2]
    upper = np.append(tab.marks[1:], np.inf)[j:stop]  # M_{j+1}
    h = rho * upper[:, None] * np.maximum(1, np.arange(pp))[None, :]  # [J, i]
    lo = np.full(stop - j, tab.allreduce_floor)
    hi = np.full(stop - j, max(float(full.max()), float(rest.max())) * tab.L * 2 + 1.0)
    rows_base = base[j:stop]
    if cutoff is None:
        cutoff = np.full(stop - j, np.inf)

    def holds_at(level: np.ndarray) -> np.ndarray:
        a = np.where(full[None, :, None] > 0,
                     np.floor((level[:, None, None] + h[:, None, :]) / full[None, :, None] * ROUND_UP), np.inf)
        b = np.where(rest[None, :, None] > 0, np.floor(level[:, None, None] / rest[None, :, None] * ROUND_UP), np.inf)
        capped = np.minimum(caps, np.minimum(a, b))  # [J, g, i]
        return _holds(tab, capped) & _supply_test()(tab, capped)

    with np.errstate(divide="ignore", invalid="ignore"):
        finite = cutoff < np.inf  # -inf included: such a row is not searched
        open_ = ~finite | (rows_base + lo < cutoff)
        if (open_ & finite).any():
            level = cutoff - rows_base
            tried = open_ & finite & (level > lo) & (level < hi)
            if tried.any():
                holds = holds_at(np.where(tried, level, lo))
                lo = np.where(tried & ~holds, level, lo)
                hi = np.where(tried & holds, level, hi)
            open_ &= ~finite | (rows_base + lo < cutoff)
        for _ in range(WHOLE_BISECTION):
            if not open_.any():
                break
            mid = np.sqrt(np.maximum(lo, 1e-300) * hi)
            holds = holds_at(mid)
            lo, hi = np.where(open_ & ~holds, mid, lo), np.where(open_ & holds, mid, hi)
            open_ &= ~finite | (rows_base + lo < cutoff)
    return rows_base + lo


# ---- The largest whole reduce with the later stages' last backwards (issue 14, round 20, timesmall) ----
WHOLE_SUFFIX = True  # whole_levels_iteration's level test also counts every later stage's last backward (v = 1)


def whole_suffix_backward_s(problem: Problem, d: DegreeTerms, kind, tp: int, mbs: int, cp: int, pp: int,
                            steps: np.ndarray, call, part=None) -> float:
    """InFlightTables.suffix_backward: bw_min = min_g bw[g], bw[g] = max(0, the least step over the modes - forward)
    of a layer on g (whole_levels_terms' bw, the same expression; kept there on the degree's part), or 0 where the
    suffix is not taken: --overlap-param-gather's gather may hide behind the forward (DegreeTerms.gather_hidden_at;
    whole_levels_terms then credits no forward, and this bound is not claimed there).

    Why (cost-model 7c; the notation of whole_levels_terms). A plan's iteration at v = 1 is
    (m - 1) max t + sum t + max_s A_s + E + max O with A_s >= whole_s - H_s, H_0 <= W_0 and H_s = sum_{j<s} W_j for
    s > 0 (costmodel.exposed_grad_reduce_s), and t_j = F'_j + W_j. So for every s
        sum t + A_s >= sum_j F'_j + whole_s + sum_{j >= max(s, 1)} W_j,
    where whole_levels_terms keeps only W_s of the last sum (s > 0) and none at s = 0. Each W_j >= n_j bw[g_j] + the
    ends' negative corrections (whole_base holds them once, for both ends: every partial sum of the corrections is
    at least their total, as each is <= 0), and bw[g_j] >= bw_min, so with a_g = alpha_full[g] P_layer
        X' = max_s (whole_s + sum_{j >= max(s, 1)} W_j - corrections) >= a_{g_s} n_s + [s > 0] bw[g_s] n_s
                                                                        + bw_min sum_{j > s, j >= 1} n_j,
    and iteration >= whole_base[j] + X' (the same base: the forward, the ends, O and E). The later layers count at
    least the middle positions after s (each holds >= 1 layer) and at least L - n_s - K_s, K_s the most the
    positions before s hold at the interval's caps (sum_{i<s} max_g k[g, i](M_j)); at s = 0 exactly L - n_0.
    _suffix_limit turns "X' <= c" into a cap on each n_s (both terms grow with n_s, or the term gives no cap)."""
    if d.gather_hidden_at(problem, pp):
        return 0.0
    kept = None if part is None else part.whole_terms
    if kept is not None:
        bw = kept[3]
    else:
        from optsearch.costmodel import layer_forward_s
        fwd = np.array([call(layer_forward_s, problem, u.name, kind, tp, mbs) / cp for u in d.uses])
        bw = np.maximum(steps.min(axis=1) - fwd, 0.0)
    return float(np.min(bw)) if len(bw) else 0.0


def _suffix_limit(tab: InFlightTables, caps: np.ndarray, level: np.ndarray) -> np.ndarray:
    """[J, g, i] the most layers n_s a plan of interval j (caps [J, g, i] = k(M_j)) can put on position s of type g
    where its X' (whole_suffix_backward_s) is at most level[J]: the largest n with
        per[g, s] n + b max(mid_s, L - n - K_s) <= c   (s >= 1; per[g, s] = a_g + bw[g]),
        a_g n_0 + b max(pp - 2, L - n_0) <= c          (s = 0; per[g, 0] = a_g),
    b = bw_min, mid_s = the middle positions after s, K_s = sum_{i<s} max(0, max_g k[g, i]). Each side is a maximum
    of two lines in n; a line with a slope > 0 caps n at floor((c - intercept) / slope) (the quotient rounded up by
    ROUND_UP: a cap may only be too large), one with slope <= 0 (at s = 0 where a_g <= b) gives none. Below 0 (not
    even an empty stage fits) the cap is 0: a middle position then takes no layer of g, an end position may still be
    empty (a relaxation, valid). The caller takes the least of this and its own cap."""
    per, b, L = tab.whole_per_layer, tab.suffix_backward, tab.L
    P = per.shape[1]
    pos = np.arange(P)
    mid_after = np.maximum(P - 2 - pos, 0).astype(float)  # [i] middle positions s + 1 .. P - 2
    most = np.maximum(caps, 0.0).max(axis=1)  # [J, i]
    before = np.cumsum(most, axis=1) - most  # [J, i] K_s
    later = np.where(pos[None, :] > 0, L - before, float(L))  # [J, i] L - K_s (s = 0: L, exactly L - n_0 later)
    c = level[:, None, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        first = np.floor((c - b * mid_after[None, None, :]) / per[None] * ROUND_UP)
        slope = per - b  # [g, i] >= a_g > 0 at s >= 1 (bw[g] >= b); at s = 0 a_g - b, any sign
        second = np.where(slope[None] > 0, np.floor((c - b * later[:, None, :]) / slope[None] * ROUND_UP), np.inf)
    return np.maximum(np.minimum(first, second), 0.0)
