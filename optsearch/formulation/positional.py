"""A position-aware lower bound on one candidate's objective, and the node-type sequences that come close to it: a
dynamic programme over whole-node blocks in pipeline order (pattern mode: models with one layer kind).

Why: the bounds of bounds.py give every stage of a type the same layer capacity. In a deep pipeline the early stages
hold up to pp micro-batches of activations, so a GPU that holds three layers at the end of the pipeline holds two at
its start. Deciding which type goes where is what the model's optimum trades off, and what those bounds cannot see.

The bound. Let M be an upper limit on every stage's time. A stage s of type g that is the j-th of its block holds
n layers only if the pattern (s, g, n) exists (its memory fits) and

    t_lb(s, g, j, n) = compute[s,g,n] + in_lb + out_lb <= M,

where a send inside a block is the intra-node send of g, and one across a block boundary is at least the cheapest
inter-node send into (out of) g. Since compute grows with n, the counts allowed at M are lo..cap(s, g, j, M), with
lo = 1 in the middle of the pipeline and 0 at its ends. Over blocks in pipeline order (types free, node supply
relaxed), two dynamic programmes give, for every M:

    R(M) = min rent (USD/hour) of blocks whose caps hold L layers,
    S(M) = min sum_s t_s >= sum over blocks of (step_g x layers + ends + 2 x their sends),

with step_g the fastest mode's time per layer (no stage is faster). Every plan of the candidate has
M' = max_s t_lb(s, ...) equal to one of the finitely many values t_lb takes, it is a plan the programmes allow at
M', and its slowest stage takes at least M'. So its iteration takes T >= (m - 1) M' + S(M') + comm (comm: the
all-reduce and optimizer bound of bounds.py), its rent is at least R(M'), and

    cost >= iterations / 3600 x R(M') x T_lb(M'),     time >= iterations x T_lb(M'),

and the minimum over the values M of these bounds every plan. Values of M are walked upwards and the walk stops once
(m - 1) M with the floors R(inf), S(inf) reaches the best bound. An M whose bounds break the deadline, the rent limit
or the cost budget is skipped (no plan with that M' meets them).

The sequences: the node types of the programmes' best blocks at the best few values of M. The caller splits the
layers over them (heuristic._partition) and prices the plans with the cost model; they are incumbents, never proofs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from optsearch.formulation.model import Coefficients, Skeleton
from optsearch.search import BUDGET_REL
from optsearch.spec.budget import Budget
from optsearch.units import SECONDS_PER_HOUR

CHUNK = 64  # values of M per vectorized pass


@dataclass(frozen=True, slots=True)
class PositionalBound:
    bound: float  # objective units (USD or training seconds); inf when no plan can meet the budget
    sequences: tuple[tuple[int, ...], ...]  # node type index per stage, best first


@dataclass(frozen=True, slots=True)
class _Block:
    g: int
    start: int
    stages: int
    low: int  # least layers (sum of lo)
    rent_usd_per_hour: float
    fixed_s: float  # ends and sends counted in S
    step_s: float


def _stage_times(f: Skeleton) -> np.ndarray:
    """[s, g, n] -> compute time of stage s on g with n layers (n x step at the least mode that fits, plus the
    embedding and head on the end stages); NaN where n < lo or n layers do not fit."""
    c, pp, most = f.c, f.cand.pp, f.most
    G, R = most.shape[1], most.shape[2]
    top = most.max(axis=2)  # [s, g]
    ns = np.arange(max(int(top.max()), 0) + 1)
    lo = np.array([1 if 0 < s < pp - 1 else 0 for s in range(pp)])
    mode = (most[:, :, None, :] >= np.maximum(ns, 1)[None, None, :, None]).argmax(axis=3)  # least mode that fits
    steps = np.array([[c.step_s[g][r][0] for r in range(R)] for g in range(G)])
    ends = np.zeros((pp, G))
    ends[0] += c.embedding_s
    ends[pp - 1] += c.head_s
    t = ns * steps[np.arange(G)[None, :, None], mode] + ends[:, :, None]
    valid = (ns >= lo[:, None, None]) & (ns <= top[:, :, None])
    t = np.maximum.accumulate(np.where(valid, t, -np.inf), axis=2)  # grows with n; guards float noise
    return np.where(valid, t, np.nan)


def _blocks(f: Skeleton) -> tuple[list[_Block], np.ndarray]:
    """The blocks whose every stage holds at least its least layer count, and each block stage's t_lb row (n from
    0, NaN where not allowed), block after block."""
    c, pp, uses = f.c, f.cand.pp, f.cand.uses
    G = len(uses)
    inter_in = [min(c.send_inter_s[h][g] for h in range(G)) for g in range(G)]
    inter_out = [min(c.send_inter_s[g][h] for h in range(G)) for g in range(G)]
    compute = _stage_times(f)
    usable = ~np.isnan(compute).all(axis=2)  # [s, g]
    out, at_s, at_g, sends = [], [], [], []
    for (s0, g) in sorted(f.block_starts):
        q = uses[g].stages_per_block
        if not usable[s0:s0 + q, g].all():
            continue
        for j, s in enumerate(range(s0, s0 + q)):
            send_in = 0.0 if s == 0 else (c.send_intra_s[g] if j > 0 else inter_in[g])
            send_out = 0.0 if s == pp - 1 else (c.send_intra_s[g] if j < q - 1 else inter_out[g])
            at_s.append(s)
            at_g.append(g)
            sends.append(send_in + send_out)
        between = 2 * (q - 1) * c.send_intra_s[g] + (2 * inter_out[g] if s0 + q < pp else 0.0)
        ends = (c.embedding_s[g] if s0 == 0 else 0.0) + (c.head_s[g] if s0 + q == pp else 0.0)
        out.append(_Block(
            g=g, start=s0, stages=q, low=sum(1 if 0 < s < pp - 1 else 0 for s in range(s0, s0 + q)),
            rent_usd_per_hour=uses[g].node.price_usd_per_node_hour * uses[g].nodes_per_block,
            fixed_s=between + ends, step_s=_step_min(c, g)))
    rows = compute[np.array(at_s, dtype=np.int64), np.array(at_g, dtype=np.int64)] + np.array(sends)[:, None]
    return out, rows.reshape(len(at_s), compute.shape[2])


def _step_min(c: Coefficients, g: int) -> float:
    """The fastest mode's time per layer on g: no stage of g spends less per layer."""
    return min(c.step_s[g][r][0] for r in range(len(c.modes)))


class _Caps:
    """Most layers each block holds with no stage above M, for many M at once (-1 where some stage cannot stay
    under M): every block stage's t_lb row is compared with every M in one array operation."""

    def __init__(self, blocks: list[_Block], rows: np.ndarray, pp: int):
        self.times = rows  # NaN <= M is False: counts that are not allowed never fit
        self.lows = np.array([1 if 0 < b.start + j < pp - 1 else 0 for b in blocks for j in range(b.stages)],
                             dtype=np.int64)
        self.offsets = np.cumsum([0] + [b.stages for b in blocks])[:-1]

    def at(self, Ms: np.ndarray) -> np.ndarray:
        """[block, M] -> cap"""
        if len(self.lows) == 0:
            return np.zeros((0, len(Ms)), dtype=np.int64)
        k = (self.times[:, :, None] <= Ms[None, None, :]).sum(axis=1)  # allowed counts from lo that fit
        cap = np.add.reduceat(self.lows[:, None] + k - 1, self.offsets, axis=0)
        ok = np.minimum.reduceat(k, self.offsets, axis=0) > 0
        return np.where(ok, cap, -1)


@dataclass(frozen=True, slots=True)
class _Group:
    """The blocks that start at one stage and span the same number of stages, as arrays (one row per block)."""

    stages: int
    index: np.ndarray  # block numbers (rows of the caps)
    blocks: tuple[_Block, ...]
    rent_usd_per_hour: np.ndarray
    fixed_s: np.ndarray
    step_s: np.ndarray
    low: np.ndarray


def _groups(blocks: list[_Block], pp: int) -> list[list[_Group]]:
    at: list[dict[int, list[int]]] = [{} for _ in range(pp)]
    for i, b in enumerate(blocks):
        at[b.start].setdefault(b.stages, []).append(i)
    return [[_Group(stages=q, index=np.array(ix), blocks=tuple(blocks[i] for i in ix),
                    rent_usd_per_hour=np.array([blocks[i].rent_usd_per_hour for i in ix]),
                    fixed_s=np.array([blocks[i].fixed_s for i in ix]), step_s=np.array([blocks[i].step_s for i in ix]),
                    low=np.array([blocks[i].low for i in ix])) for q, ix in sorted(by_q.items())] for by_q in at]


def _least_rent(groups: list[list[_Group]], caps: np.ndarray, pp: int, L: int) -> np.ndarray:
    """R(M): F[s][M, l] = least rent of blocks from stage s on whose caps hold l more layers."""
    nM = caps.shape[1]
    cols = np.arange(L + 1)[None, None, :]
    rows = (np.arange(nM) * (L + 1))[None, :, None]  # flat offset of each row
    F: list[np.ndarray | None] = [None] * (pp + 1)
    F[pp] = np.full((nM, L + 1), np.inf)
    F[pp][:, 0] = 0.0
    for s in range(pp - 1, -1, -1):
        best = np.full((nM, L + 1), np.inf)
        for grp in groups[s]:
            cap = caps[grp.index][:, :, None]  # [block, M, 1]
            got = F[s + grp.stages].ravel().take(rows + np.maximum(cols - np.maximum(cap, 0), 0))
            got += grp.rent_usd_per_hour[:, None, None]
            got[np.broadcast_to(cap < 0, got.shape)] = np.inf
            np.minimum(best, got.min(axis=0), out=best)
        F[s] = best
    return F[0][:, L]


def _least_sum(groups: list[list[_Group]], caps: np.ndarray, pp: int, L: int,
               rent_weight: np.ndarray | None = None, choices: bool = False):
    """S(M): least sum of stage times (step_g x layers + ends + sends per block) with every block within its caps.
    rent_weight[M] x rent is added per block (the combined objective of the cost bound); choices records the best
    (block, layers) per (s, l) for the first M."""
    nM = caps.shape[1]
    F: list[np.ndarray | None] = [None] * (pp + 1)
    F[pp] = np.full((nM, L + 1), np.inf)
    F[pp][:, 0] = 0.0
    pick: dict[int, list] = {}
    for s in range(pp - 1, -1, -1):
        best = np.full((nM, L + 1), np.inf)
        arg: list = [None] * (L + 1)
        for grp in groups[s]:
            cap = caps[grp.index]  # [block, M]
            nxt = F[s + grp.stages]
            base = grp.fixed_s[:, None] + (0.0 if rent_weight is None else
                                           rent_weight[None, :] * grp.rent_usd_per_hour[:, None])  # [block, M]
            base = np.where(cap >= 0, base, np.inf)
            for n in range(int(grp.low.min()), min(L, int(cap.max(initial=-1))) + 1):
                per = np.where((n >= grp.low[:, None]) & (n <= cap), base + grp.step_s[:, None] * n, np.inf)
                got = per[:, :, None] + nxt[None, :, : L + 1 - n]  # [block, M, l - n]
                low = got.min(axis=0)
                if choices:
                    which = got[:, 0].argmin(axis=0)
                    for l in np.nonzero(low[0] < best[0, n:])[0]:
                        arg[l + n] = (grp.blocks[which[l]], n)
                np.minimum(best[:, n:], low, out=best[:, n:])
        F[s] = best
        if choices:
            pick[s] = [arg]
    return F[0][:, L], pick


def _sequence(pick: dict[int, list], pp: int, L: int) -> tuple[int, ...] | None:
    s, left, seq = 0, L, []
    while s < pp:
        got = pick[s][0][left]
        if got is None:
            return None
        blk, n = got
        seq += [blk.g] * blk.stages
        s, left = s + blk.stages, left - n
    return tuple(seq)


def comm_lower_s(f: Skeleton) -> float:
    """A + O >= (min_g alpha_g + min_g beta_g) x P_total / pp: some stage holds at least 1/pp of the parameters."""
    c = f.c
    total = sum(p * n for p, n in zip(c.layer_params, c.kind_layers)) + sum(c.fixed_params)
    return (min(c.allreduce_s_per_param) + min(c.optimizer_s_per_param)) * total / f.cand.pp


def positional_bound(f: Skeleton, budget: Budget, cutoff: float = math.inf, keep: int = 2) -> PositionalBound:
    """The bound of the module docstring for f's candidate under the budget, with up to `keep` type sequences.

    cutoff: the incumbent's value. A value of M whose cheaper bound (S(M) replaced by its floor S(inf)) already
    reaches it is not refined; the result is then still a valid bound, and no sequences are returned when it
    reaches the cutoff (no plan of this candidate can beat the incumbent)."""
    assert f.patterns is not None, "positional bounds need pattern mode (one layer kind)"
    c, pp, L = f.c, f.cand.pp, f.c.kind_layers[0]
    comm_s = comm_lower_s(f)
    blocks, rows = _blocks(f)
    groups = _groups(blocks, pp)
    caps_of = _Caps(blocks, rows, pp)
    slack = 1 + BUDGET_REL
    per_hour = c.iterations / SECONDS_PER_HOUR
    is_cost = budget.objective == "cost"

    def value_of(rent: np.ndarray, iteration: np.ndarray) -> np.ndarray:
        return per_hour * rent * iteration if is_cost else c.iterations * iteration

    def meets(rent: np.ndarray, iteration: np.ndarray) -> np.ndarray:
        ok = np.isfinite(rent) & np.isfinite(iteration)
        if budget.max_time_s is not None:
            ok &= iteration * c.iterations <= budget.max_time_s * slack
        if budget.max_usd_per_hour is not None:
            ok &= rent <= budget.max_usd_per_hour * slack
        if budget.max_cost_usd is not None:
            ok &= per_hour * rent * iteration <= budget.max_cost_usd * slack
        return ok

    if not blocks:
        return PositionalBound(math.inf, ())
    marks = np.unique(rows[~np.isnan(rows)])
    # Floors for every M: the least rent with no limit on stage time (the DP at the largest M), and a sum of stage
    # times no plan goes below (every layer at the fastest step, the cheapest ends, every boundary's cheapest send).
    first = np.concatenate([marks[:CHUNK], marks[-1:]])  # the first chunk's DP also gives the floor (last row)
    first_caps = caps_of.at(first)
    first_rent = _least_rent(groups, first_caps, pp, L)
    rent_floor = float(first_rent[-1])
    if not math.isfinite(rent_floor):
        return PositionalBound(math.inf, ())
    G = len(f.cand.uses)
    sum_floor = (L * min(_step_min(c, g) for g in range(G)) + min(c.embedding_s) + min(c.head_s)
                 + 2 * (pp - 1) * min(min(min(row) for row in c.send_inter_s), min(c.send_intra_s)))

    def refine(caps: np.ndarray, rent: np.ndarray, Ms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The bound at each M with S(M) itself, and for cost the McCormick bound; the rent weight it used."""
        total, _ = _least_sum(groups, caps, pp, L)
        iteration = (c.m - 1) * Ms + total + comm_s
        value = np.where(meets(rent, iteration), value_of(rent, iteration), np.inf)
        weight = np.zeros(len(Ms))
        if is_cost:
            # McCormick: rent >= R and T >= T0 at this M, so (rent - R)(T - T0) >= 0 and
            # rent x T >= R x T + T0 x rent - R x T0 = R (K + sum + (T0 / R) rent) - R T0, minimized by the programme.
            sharpen = np.isfinite(value) & (value < cutoff)
            if sharpen.any():
                weight[sharpen] = iteration[sharpen] / rent[sharpen]
                combined, _ = _least_sum(groups, caps[:, sharpen], pp, L, weight[sharpen])
                K = (c.m - 1) * Ms[sharpen] + comm_s
                mccormick = per_hour * (rent[sharpen] * (K + combined) - rent[sharpen] * iteration[sharpen])
                value[sharpen] = np.maximum(value[sharpen], mccormick)
        return value, weight

    best = math.inf  # least bound over the values of M seen so far
    found: list[tuple[float, float, float]] = []  # (bound, M, weight of the rent in the combined objective)
    for i in range(0, len(marks), CHUNK):
        Ms = marks[i:i + CHUNK]
        floor_iteration = (c.m - 1) * Ms[0] + sum_floor + comm_s
        floor = value_of(np.array(rent_floor), np.array(floor_iteration))
        if not meets(np.array(rent_floor), np.array(floor_iteration)):
            break  # no later M meets the budget
        if floor >= min(best, cutoff):
            best = min(best, float(floor))  # every later M has a bound at least this
            break
        if i == 0:
            caps, rent = first_caps[:, :-1], first_rent[:-1]
        else:
            caps = caps_of.at(Ms)
            rent = _least_rent(groups, caps, pp, L)
        rough_iteration = (c.m - 1) * Ms + sum_floor + comm_s  # S(M) >= S(inf)
        rough = np.where(meets(rent, rough_iteration), value_of(rent, rough_iteration), np.inf)
        best = min(best, float(rough[rough >= cutoff].min(initial=math.inf)))
        # Refine the most promising value of M alone first: the bound it gives spares the others most of the time.
        order = [r for r in np.argsort(rough, kind="stable") if rough[r] < min(best, cutoff)]
        for rows in (order[:1], order[1:]):
            rows = np.array([r for r in rows if rough[r] < min(best, cutoff)], dtype=np.int64)
            if len(rows) == 0:
                continue
            value, weight = refine(caps[:, rows], rent[rows], Ms[rows])
            if np.isfinite(value).any():
                best = min(best, float(value.min()))
            found += [(float(v), float(M), float(wt)) for v, M, wt in zip(value, Ms[rows], weight) if v < cutoff]
    if best >= cutoff or not found:
        return PositionalBound(best * (1 - 1e-9), ())
    found.sort()
    sequences: list[tuple[int, ...]] = []
    for _, M, wt in found[:keep]:
        caps = caps_of.at(np.array([M]))
        _, pick = _least_sum(groups, caps, pp, L, np.array([wt]) if is_cost else None, choices=True)
        seq = _sequence(pick, pp, L)
        if seq is not None and seq not in sequences:
            sequences.append(seq)
    return PositionalBound(best * (1 - 1e-9), tuple(sequences))
