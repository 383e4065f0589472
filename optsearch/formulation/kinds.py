"""A position-aware lower bound for models with several layer kinds (T5: encoder, then decoder), where
formulation/positional.py (pattern mode, one kind) does not apply. docs/solver.md, "The positional bound with
several layer kinds", has the proof; tests/test_kinds_bound.py checks it against brute force.

Layers stay in model order (model.add_kind_order): a stage holds a contiguous range [l, l + n) of the L = sum_k L_k
layers, so the layers placed before a stage, l, fix exactly how many layers of each kind it holds,
n_k(l, n) = |[l, l + n) ∩ [B_k, B_{k+1})| with B_k the first layer of kind k. Per (stage s, type g, l, n):

    t_lb(s, g, l, n) = min over the modes r whose memory fits of sum_k n_k step[g][r][k] + ends(s, g)
                       + in_lb(s, g) + out_lb(s, g),

and with block recomputation in the space also sum_k n_k min(step_none, step_full) + ends + sends where the block
plan's memory with each kind's least activation (none or full, whichever is smaller) fits. No mode is assumed to
need the least memory: every mode (and the block plan) whose memory fits is considered, and each stage keeps the
fastest of them. A send into stage s is 0 on the first stage; otherwise at least the cheapest inter-node send into g
when a block of g spans one stage (every boundary then crosses nodes), else the lesser of that and g's intra-node
send; likewise out. A stage of g costs price_g x nodes_per_block_g / stages_per_block_g per hour: the rent of a plan
is exactly the sum of these over its stages. A type's stages are at most (nodes available // nodes per block) x
stages per block; the programmes count the stages of the scarce types (those that cannot fill the pipeline) while the
state stays small (_supply). The whole-node block structure and the other types' supply are relaxed (valid, weaker).

Programmes. For an upper limit M on every stage's t_lb and weights (a, b), a dynamic programme over stages in
pipeline order with the layers placed so far as state gives

    P(M; a, b) = min over stage sequences (g_s, n_s) covering the L layers, with t_lb <= M on every stage, of
                 sum_s (a t_lb(s, g_s, l_s, n_s) + b rent_s),

so S(M) = P(M; 1, 0) (least sum of stage times), R(M) = P(M; 0, 1) (least rent), and the McCormick programme
P(M; 1, w). Every function of M here only falls as M grows (a larger M allows more).

Intervals. Let p_0 < p_1 < ... < p_K be any values with p_0 at most every plan's largest t_lb. A plan whose largest
t_lb, M', lies in [p_i, p_{i+1}) (or [p_K, inf)) is allowed at q_i = p_{i+1} (resp. p_K = the largest t_lb there
is), and its slowest stage takes t_max >= M' >= p_i, so its iteration takes
T >= (m - 1) p_i + S(q_i) + comm = T0_i and its rent is at least R(q_i). Hence on that interval
time >= iterations T0_i, cost >= iterations / 3600 x R(q_i) T0_i, and by McCormick ((rent - R)(T - T0) >= 0)
cost >= iterations / 3600 x (R ((m - 1) p_i + comm) + R P(q_i; 1, T0_i / R) - R T0_i). The least over the intervals
bounds every plan; an interval whose bounds break the budget holds no plan that meets it. Any grid is valid; the
intervals with the least bounds are split again (a few passes) to tighten it. comm is comm_lower_s (the all-reduce
and optimizer floor), the tied-embedding all-reduce E >= 0.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from optsearch.costmodel import MEMORY_RESERVE_BYTES
from optsearch.formulation.model import Skeleton, memory_fixed_bytes, memory_per_layer_bytes
from optsearch.formulation.positional import OutOfTime, PositionalBound, comm_lower_s, supply_strides
from optsearch.search import BOUND_SLACK
from optsearch.spec.budget import Budget
from optsearch.units import SECONDS_PER_HOUR

GRID = 16  # values of M in the first pass
SPLIT = 4  # sub-intervals per interval split in a refining pass
PASSES = 4  # refining passes after the first
SPLITS_PER_PASS = 3  # intervals split per pass (those with the least bounds)
SUPPLY_STATES = 32  # the most (stages of each scarce type) states the programme tracks


@dataclass(slots=True)
class _KindTables:
    """The budget-free part: t_lb[s, g, l, n] (inf where not allowed) and the rent per stage of each type; programme
    values by (M, a, b) computed so far."""

    times: np.ndarray  # [s, g, l, n]
    rent: np.ndarray  # [g] USD/hour per stage
    supply: tuple[int, np.ndarray]  # _supply
    lowest: float  # every plan's largest t_lb is at least this
    highest: float  # the largest finite t_lb (at it every allowed count is allowed)
    cache: dict = field(default_factory=dict)


def _kind_counts(kind_layers: tuple[int, ...]) -> np.ndarray:
    """[k, l, n] -> layers of kind k in [l, l + n) (0 where l + n > L: not used)."""
    L = sum(kind_layers)
    edges = np.concatenate([[0], np.cumsum(kind_layers)])
    l = np.arange(L + 1)[:, None]
    n = np.arange(L + 1)[None, :]
    return np.stack([np.clip(np.minimum(l + n, edges[k + 1]) - np.maximum(l, edges[k]), 0, None)
                     for k in range(len(kind_layers))])


def stage_lower_times(f: Skeleton) -> np.ndarray:
    """[s, g, l, n] -> t_lb of the module docstring (inf where n layers from l do not fit in any mode, n is below
    the stage's least count, l + n > L, or no block of g fits the pipeline)."""
    c, pp, uses = f.c, f.cand.pp, f.cand.uses
    G, R, K = len(uses), len(c.modes), len(c.kind_layers)
    L = sum(c.kind_layers)
    counts = _kind_counts(c.kind_layers).astype(float)  # [k, l, n]
    l = np.arange(L + 1)[:, None]
    n = np.arange(L + 1)[None, :]
    inside = (l + n) <= L
    total = counts.sum(axis=0)
    out = np.full((pp, G, L + 1, L + 1), np.inf)
    inter_in = [min(c.send_inter_s[h][g] for h in range(G)) for g in range(G)]
    inter_out = [min(c.send_inter_s[g][h] for h in range(G)) for g in range(G)]
    for g, use in enumerate(uses):
        q = use.stages_per_block
        if q > pp:
            continue  # no block of g fits the pipeline
        work = [np.tensordot(np.array([c.step_s[g][r][k] for k in range(K)]), counts, axes=1) for r in range(R)]
        fastest_block = None
        if f.block is not None:
            bc = f.block
            fastest_block = np.tensordot(np.array([min(bc.step_none_s[g][k], bc.step_full_s[g][k])
                                                   for k in range(K)]), counts, axes=1)
        for s in range(pp):
            best = np.full((L + 1, L + 1), np.inf)
            for r in range(R):
                need = memory_fixed_bytes(c, s, g, r, pp) + np.tensordot(
                    np.array([memory_per_layer_bytes(c, s, g, r, k) for k in range(K)]), counts, axes=1)
                best = np.where(need <= c.capacity_bytes[g], np.minimum(best, work[r]), best)
            if fastest_block is not None:
                bc = f.block
                fixed = MEMORY_RESERVE_BYTES + c.state_bytes_per_param * c.fixed_params[s]
                fixed += c.logits_bytes if s == pp - 1 else 0.0
                per = np.array([c.layer_state_bytes(k) + c.in_flight[s] * min(bc.act_full_bytes[g][k],
                                                                                bc.act_none_bytes[g][k])
                                for k in range(K)])
                need = fixed + np.where(total > 0, bc.working_bytes[g], 0.0) + np.tensordot(per, counts, axes=1)
                best = np.where(need <= c.capacity_bytes[g], np.minimum(best, fastest_block), best)
            ends = (c.embedding_s[g] if s == 0 else 0.0) + (c.head_s[g] if s == pp - 1 else 0.0)
            send_in = 0.0 if s == 0 else (inter_in[g] if q == 1 else min(inter_in[g], c.send_intra_s[g]))
            send_out = 0.0 if s == pp - 1 else (inter_out[g] if q == 1 else min(inter_out[g], c.send_intra_s[g]))
            low = 1 if 0 < s < pp - 1 else 0
            ok = inside & (n >= low) & np.isfinite(best)
            out[s, g] = np.where(ok, best + ends + send_in + send_out, np.inf)
    return out


def kind_tables(f: Skeleton) -> _KindTables:
    """The skeleton's tables (kept in f.positional, which pattern mode uses for its own and which is free here)."""
    if not isinstance(f.positional, _KindTables):
        times = stage_lower_times(f)
        finite = times[np.isfinite(times)]
        per_stage = times.reshape(f.cand.pp, -1).min(axis=1)
        rent = np.array([u.node.price_usd_per_node_hour * u.nodes_per_block / u.stages_per_block
                         for u in f.cand.uses])
        f.positional = _KindTables(times=times, rent=rent, supply=_supply(f),
                                   lowest=float(per_stage.max()) if len(finite) else math.inf,
                                   highest=float(finite.max()) if len(finite) else math.inf)
    return f.positional


def _supply(f: Skeleton, limit: int = SUPPLY_STATES) -> tuple[int, np.ndarray]:
    """How many stages of each type whose node supply can bind (at most (nodes available // nodes per block) x stages
    per block stages, fewer than pp) the stages so far used, as one mixed-radix index u in [0, U): (U, nxt) with
    nxt[g, u] the index after one more stage of g, or U (a sentinel that stays infinite) where g's supply is spent.
    Types are counted from the scarcest while U stays within `limit`; a type left out is relaxed (valid, weaker)."""
    pp = f.cand.pp
    most = [(u.node.num_nodes_available // u.nodes_per_block) * u.stages_per_block for u in f.cand.uses]
    size, strides = supply_strides(sorted((most[g], g) for g in range(len(most)) if most[g] < pp), limit)
    us = np.arange(size)
    nxt = np.tile(us, (len(most), 1))
    for g, (stride, cap) in strides.items():
        nxt[g] = np.where((us // stride) % (cap + 1) < cap, us + stride, size)
    return size, nxt


def programme(times: np.ndarray, rent: np.ndarray, Ms: np.ndarray, a: np.ndarray, b: np.ndarray,
              supply: tuple[int, np.ndarray] | None = None) -> np.ndarray:
    """[point] -> min over stage sequences covering every layer, with t_lb <= M on every stage and the stages of each
    counted type within its supply (_supply), of sum_s (a t_lb + b rent) (inf where no sequence exists). One dynamic
    programme over stages, every point at once: V_s[P, l, u] = min over (g, n) of the stage's term +
    V_{s+1}[P, l + n, nxt[g, u]]."""
    pp, G, L1, _ = times.shape
    L = L1 - 1
    U, nxt = supply if supply is not None else (1, np.zeros((G, 1), dtype=np.int64))
    P = len(Ms)
    finite = np.isfinite(times).any(axis=(0, 1, 2))
    top = int(np.nonzero(finite)[0].max()) + 1 if finite.any() else 1  # counts 0 .. top - 1 occur
    V = np.full((P, 2 * L1, U + 1), np.inf)
    V[:, L, :U] = 0.0  # past the last stage: every layer placed; indices above L and u = U stay infinite
    for s in range(pp - 1, -1, -1):
        new = np.full((P, 2 * L1, U + 1), np.inf)
        best = new[:, :L1, :U]
        for g in range(G):
            t = times[s, g][:, :top]  # [l, n]
            if not np.isfinite(t).any():
                continue
            term = np.where(t[None] <= Ms[:, None, None],
                            a[:, None, None] * np.where(np.isfinite(t), t, 0.0)[None] + b[:, None, None] * rent[g],
                            np.inf)  # [P, l, n]
            # [P, l, n, u] = V[P, l + n, nxt[g, u]] (a view: windows of length top along the layers placed)
            ahead = sliding_window_view(V[:, :, nxt[g]], top, axis=1)[:, :L1].transpose(0, 1, 3, 2)
            np.minimum(best, (term[:, :, :, None] + ahead).min(axis=2), out=best)
        V = new
    return V[:, 0, 0]


def kinds_bound(f: Skeleton, budget: Budget, cutoff: float = math.inf, slower_than_s: float = 0.0,
                deadline: float | None = None) -> PositionalBound:
    """The bound of the module docstring for f's candidate (several layer kinds, v = 1) under the budget. A result at
    or above cutoff means no plan of the candidate beats the incumbent; inf: no plan meets the budget. No sequences
    (incumbents come from the candidates' models). Past deadline (time.perf_counter()) OutOfTime is raised."""
    assert f.most is None and f.cand.v == 1, "kinds_bound: several layer kinds, v = 1"
    c = f.c
    tab = kind_tables(f)
    if not math.isfinite(tab.highest):
        return PositionalBound(math.inf, ())
    comm = comm_lower_s(f)
    per_hour = c.iterations / SECONDS_PER_HOUR
    is_cost = budget.objective == "cost"
    least_iteration_s = slower_than_s / c.iterations
    rent_counts = is_cost or budget.max_cost_usd is not None or budget.max_usd_per_hour is not None
    slack = BOUND_SLACK

    def values(Ms: np.ndarray, a: float, b: np.ndarray | float) -> np.ndarray:
        bs = np.broadcast_to(np.asarray(b, dtype=float), Ms.shape)
        keys = [(float(M), float(a), float(w)) for M, w in zip(Ms, bs)]
        miss = [k for k in keys if k not in tab.cache]
        if miss:
            if deadline is not None and time.perf_counter() > deadline:
                raise OutOfTime
            got = programme(tab.times, tab.rent, np.array([k[0] for k in miss]), np.array([k[1] for k in miss]),
                            np.array([k[2] for k in miss]), tab.supply)
            tab.cache.update(zip(miss, got.tolist()))
        return np.array([tab.cache[k] for k in keys])

    def bound_of(lows: np.ndarray, qs: np.ndarray) -> np.ndarray:
        """[interval] -> the bound of the plans whose largest t_lb lies in [low, next) (allowed at q)."""
        S = values(qs, 1.0, 0.0)
        iteration = np.maximum((c.m - 1) * lows + S + comm, least_iteration_s)
        ok = np.isfinite(iteration)
        if budget.max_time_s is not None:
            ok &= iteration * c.iterations <= budget.max_time_s * slack
        if not rent_counts:
            return np.where(ok, c.iterations * iteration, np.inf)
        R = values(qs, 0.0, 1.0)
        ok &= np.isfinite(R)
        if budget.max_usd_per_hour is not None:
            ok &= R <= budget.max_usd_per_hour * slack
        cost = per_hour * R * iteration
        if is_cost or budget.max_cost_usd is not None:
            sharpen = ok & (R > 0)
            if sharpen.any():
                w = np.zeros(len(qs))
                w[sharpen] = iteration[sharpen] / R[sharpen]
                comb = values(qs[sharpen], 1.0, w[sharpen])
                K = (c.m - 1) * lows[sharpen] + comm
                mcc = per_hour * (R[sharpen] * (K + comb) - R[sharpen] * iteration[sharpen])
                cost[sharpen] = np.maximum(cost[sharpen], mcc)
        if budget.max_cost_usd is not None:
            ok &= cost <= budget.max_cost_usd * slack
        value = cost if is_cost else c.iterations * iteration
        return np.where(ok, value, np.inf)

    lo, hi = tab.lowest, tab.highest
    if math.isfinite(cutoff):  # one interval [lo, inf) evaluated at hi: one programme per value, often enough
        crude = float(bound_of(np.array([min(lo, hi)]), np.array([hi]))[0])
        if crude >= cutoff:
            return PositionalBound(crude * (1 - 1e-9) if math.isfinite(crude) else math.inf, ())
    if lo >= hi:
        points = np.array([hi])
    elif lo > 0:
        points = np.unique(np.geomspace(lo, hi, GRID))
    else:
        points = np.unique(np.linspace(lo, hi, GRID))
    points[-1] = hi
    # Intervals [lows[i], highs[i]) evaluated at highs[i]; the last one [hi, inf) at hi.
    lows = points
    highs = np.append(points[1:], hi)
    got = bound_of(lows, highs)
    for _ in range(PASSES):
        best = float(got.min())
        if best >= cutoff:
            break
        order = [i for i in np.argsort(got, kind="stable")[:SPLITS_PER_PASS]
                 if np.isfinite(got[i]) and got[i] < cutoff and highs[i] > lows[i] * (1 + 1e-6)]
        if not order:
            break
        new_lows, new_highs, keep = [], [], np.ones(len(lows), dtype=bool)
        for i in order:
            inner = np.linspace(lows[i], highs[i], SPLIT + 1)
            inner[0], inner[-1] = lows[i], highs[i]
            new_lows.append(inner[:-1])
            new_highs.append(inner[1:])
            keep[i] = False
        add_lows, add_highs = np.concatenate(new_lows), np.concatenate(new_highs)
        lows = np.concatenate([lows[keep], add_lows])
        highs = np.concatenate([highs[keep], add_highs])
        got = np.concatenate([got[keep], bound_of(add_lows, add_highs)])
    best = float(got.min())
    return PositionalBound(best * (1 - 1e-9) if math.isfinite(best) else math.inf, ())
