"""A position-aware lower bound on one candidate's objective, and the node-type sequences that come close to it: a
dynamic programme over whole-node blocks in pipeline order (pattern mode: models with one layer kind).

Why: the bounds of bounds.py give every stage of a type the same layer capacity. In a deep pipeline the early stages
hold up to pp micro-batches of activations, so a GPU that holds three layers at the end of the pipeline holds two at
its start, or needs full recomputation to hold three. Deciding which type goes where is what the model's optimum
trades off, and what those bounds cannot see.

The bound. Let M be an upper limit on every stage's time. A stage s of type g that is the j-th of its block holds
n layers only if the pattern (s, g, n) exists (its memory fits; the least mode that fits, as in the model) and

    t_lb(s, g, j, n) = compute[s,g,n] + in_lb + out_lb <= M,

where a send inside a block is the intra-node send of g, and one across a block boundary is at least the cheapest
inter-node send into (out of) g. Since compute grows with n, the counts allowed at M are lo..cap(s, g, j, M), with
lo = 1 in the middle of the pipeline and 0 at its ends. Over blocks in pipeline order (types free; the node supply of
the types that could bind counted in the state, see _Supply, the rest relaxed), dynamic programmes give for many M:

    R(M) = min rent (USD/hour) of blocks whose caps hold L layers,
    S(M) = min sum_s t_s >= sum over blocks of (step_g x layers + ends + 2 x their sends),

with step_g the fastest mode's time per layer (no stage is faster). Every plan of the candidate has
M' = max_s t_lb(s, ...) equal to one of the finitely many values t_lb takes (the marks), it is a plan the programmes
allow at M', and its slowest stage takes at least M'. So its iteration takes T >= T0(M') = (m - 1) M' + S(M') + comm,
its rent is at least R(M'), and

    cost >= iterations / 3600 x R(M') x T0(M'),     time >= iterations x T0(M');

with comm = max(the all-reduce and optimizer floor of comm_lower_s, C_A(M') + C_O(M')) + E_min (embedding_floor_s;
round 10; under --overlap-grad-reduce also stage 0's reduce, first_stage_reduce_s). A >= alpha_g (n P + P_fixed)
for every stage, so A is at least the least largest stage all-reduce over the layouts the programme of R allows at M'
with every stage's all-reduce at most C: C_A(M) is the least such C, found by bisection over the values C takes; C_O
likewise for the optimizer step (beta). This closes most of the gap to the model's least time: on FASOP's candidates
from about 3 % to about 0.3 %. C is computed only at marks whose bound with the floor in its place still matters.
For cost also the McCormick bound rent x T >= R x T + T0 x rent - R x T0 (both factors are at least R and T0 at M'),
whose right side is additive over blocks and minimized by the same programme. The minimum over the marks of these
bounds every plan. With slower_than_s (solver.solve: only slower plans count), T0 is at least its share per
iteration.

Work is skipped only where a cheaper bound already decides: a mark where some stage holds nothing on any type, or
the stages cannot hold L layers, has no plan; floors (pp stages at the cheapest rent per stage, a floor on the sum of
stage times) drop marks that break the budget and end the walk at the first mark whose floor reaches the cutoff (the
incumbent; floors grow with M); S is computed only for marks whose bound with the floor in place of S(M) is below
the best so far and the cutoff. A skipped mark contributes its cheaper bound, so the result stays a bound.

A sweep bounds the same candidate under many budgets: the budget-free values (R, C, S and the combined programme at
each mark, the sequences) are kept on the skeleton (_Tables) and computed only for marks not asked for before.

The sequences: the node types of the programmes' best blocks at the best marks (when the bound is below the
cutoff). The caller splits the layers over them (heuristic.split_layers) and prices the plans with the cost model;
they are incumbents, never proofs.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace

import numpy as np

from optsearch.costmodel import MEMORY_RESERVE_BYTES
from optsearch.formulation import heuristic as _heuristic
from optsearch.formulation.heuristic import end_matched
from optsearch.formulation.model import Coefficients, Skeleton
from optsearch.search import BOUND_SLACK
from optsearch.spec.budget import Budget
from optsearch.units import SECONDS_PER_HOUR

CHUNK = 64  # values of M per vectorized pass
SUM_VECTOR_LIMIT = 20_000  # _least_sum takes every layer count of a group at once while its array stays this small
COMM_WAYS = 4  # values of C tried per pass of comm_at's search (one programme over all of them)
LAST_END_EMBEDDING = True  # the sum programmes charge the last block its type's least tied-embedding all-reduce
# in excess of the bound's E floor (embedding_last_rows; round 17, timerows)
BUDGET_LAGRANGE = True  # time under a cost budget: each refined mark's iteration lifted by budget_time_lift (round 18)
LAGRANGE_WEIGHTS = (0.125, 0.25, 0.5)  # the rent weights tried, in units of T0^2 / b (budget_time_lift)


class OutOfTime(Exception):
    """The caller's deadline passed inside a programme: no bound is returned (the caller keeps its cheaper one)."""


def _on_time(deadline: float | None) -> None:
    if deadline is not None and time.perf_counter() > deadline:
        raise OutOfTime


@dataclass(frozen=True, slots=True)
class PositionalBound:
    bound: float  # objective units (USD or training seconds); inf when no plan can meet the budget
    sequences: tuple[tuple[int, ...], ...]  # node type index per stage, best first


@dataclass(frozen=True, slots=True)
class _Blocks:
    """Every whole-node block that may start somewhere (each of its stages holds at least its least layer count),
    as arrays over blocks in order of (start, type)."""

    g: np.ndarray
    start: np.ndarray
    stages: np.ndarray
    low: np.ndarray  # least layers (sum of lo)
    rent_usd_per_hour: np.ndarray
    fixed_s: np.ndarray  # ends and sends counted in S
    step_s: np.ndarray
    rows: np.ndarray  # [block stage, n] t_lb, block after block (NaN where n is not allowed)
    row_position: np.ndarray  # [block stage] its stage index s
    row_low: np.ndarray  # [block stage] lo
    comm_rows: tuple[np.ndarray, np.ndarray]  # [block stage, n] its all-reduce, and its optimizer step (_stage_comm_s)

    def __len__(self) -> int:
        return len(self.g)


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
    if f.block is not None:  # block recomputation: n x step(none) + the fewest recomputed layers that fit x the extra
        tb = _block_times(f, top, len(ns))
        t = np.where(tb < t, tb, t)  # min(t, tb) as Python's min; NaN (no block plan) keeps t
    t = np.maximum.accumulate(np.where(valid, t, -np.inf), axis=2)  # grows with n; guards float noise
    return np.where(valid, t, np.nan)


def _block_times(f: Skeleton, top: np.ndarray, counts: int) -> np.ndarray:
    """[s, g, n] -> block recomputation's compute time of stage s on g with n layers (1 <= n <= top[s, g]):
    pattern_compute_at_none + the fewest recomputed layers that fit (block_least_recomputed) x (step full - step
    none); NaN where none fits or n is out of range. The same float operations in the same order as those two
    functions, for every (s, g, n) at once: the same values bit for bit (tests/test_block_times.py). A Python call per
    (s, g, n) took about 6 ms of a 20 ms positional bound on GPT-3 175B's candidates in the megatron target's space."""
    c, pp, bc = f.c, f.cand.pp, f.block
    G = len(f.cand.uses)
    s = np.arange(pp)[:, None, None]
    n = np.arange(counts)[None, None, :]
    g = np.arange(G)
    cap = np.array(c.capacity_bytes)[None, :, None]
    none = np.array([bc.act_none_bytes[x][0] for x in g])[None, :, None]
    full = np.array([bc.act_full_bytes[x][0] for x in g])[None, :, None]
    working = np.array(bc.working_bytes)[None, :, None]
    flight = np.array(c.in_flight, dtype=np.int64)[:, None, None]
    fixed = np.array([MEMORY_RESERVE_BYTES + c.state_bytes_per_param * c.fixed_params[x]
                      + (c.logits_bytes if x == pp - 1 else 0.0) for x in range(pp)])[:, None, None]
    state = c.layer_state_bytes(0)

    def stage_bytes(r: np.ndarray) -> np.ndarray:  # model.block_stage_bytes for one kind, n >= 1
        return fixed + working + state * n + flight * (r * full + (n - r) * none)

    def fits(r: np.ndarray) -> np.ndarray:
        return stage_bytes(r) <= cap

    drop = flight * (none - full)
    shape = (pp, G, counts)
    n_all = np.broadcast_to(n, shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        guess = np.ceil((stage_bytes(np.zeros(shape, dtype=np.int64)) - cap) / drop - 1e-9)
    r = np.where(drop > 0, np.minimum(n_all, np.maximum(1, np.nan_to_num(guess, nan=1.0, posinf=counts,
                                                                           neginf=1.0))), 1).astype(np.int64)
    walk = np.broadcast_to(drop > 0, shape)
    while (down := walk & (r > 1) & fits(r - 1)).any():
        r = np.where(down, r - 1, r)
    while (up := walk & (r <= n_all) & ~fits(r)).any():
        r = np.where(up, r + 1, r)
    least_ok = np.where(walk, r <= n_all, fits(np.ones(shape, dtype=np.int64)))
    step_none = np.array([bc.step_none_s[x][0] for x in g])[None, :, None]
    step_full = np.array([bc.step_full_s[x][0] for x in g])[None, :, None]
    ends = (np.where(s == 0, np.array(c.embedding_s)[None, :, None], 0.0))
    base = n * step_none + ends + np.where(s == pp - 1, np.array(c.head_s)[None, :, None], 0.0)
    times = base + r * (step_full - step_none)
    in_range = (n_all >= 1) & (n_all <= top[:, :, None])
    return np.where(in_range & least_ok, times, np.nan)


def _blocks(f: Skeleton) -> _Blocks:
    c, pp, uses = f.c, f.cand.pp, f.cand.uses
    G = len(uses)
    inter_in = np.array([min(c.send_inter_s[h][g] for h in range(G)) for g in range(G)])
    inter_out = np.array([min(c.send_inter_s[g][h] for h in range(G)) for g in range(G)])
    intra = np.array(c.send_intra_s)
    q_of = np.array([u.stages_per_block for u in uses])
    compute = _stage_times(f)
    usable = np.vstack([np.zeros((1, G), dtype=np.int64), np.cumsum(~np.isnan(compute).all(axis=2), axis=0)])
    keys = np.array(sorted(f.block_starts), dtype=np.int64).reshape(-1, 2)
    s0, g = keys[:, 0], keys[:, 1]
    q = q_of[g]
    keep = usable[s0 + q, g] - usable[s0, g] == q  # every stage of the block holds its least layer count
    s0, g, q = s0[keep], g[keep], q[keep]
    j = np.arange(int(q.sum())) - np.repeat(np.cumsum(q) - q, q)  # position inside the block
    rg, rs = np.repeat(g, q), np.repeat(s0, q) + j
    send_in = np.where(rs == 0, 0.0, np.where(j > 0, intra[rg], inter_in[rg]))
    send_out = np.where(rs == pp - 1, 0.0, np.where(j < np.repeat(q, q) - 1, intra[rg], inter_out[rg]))
    lows = ((rs > 0) & (rs < pp - 1)).astype(np.int64)
    between = 2 * (q - 1) * intra[g] + np.where(s0 + q < pp, 2 * inter_out[g], 0.0)
    ends = np.where(s0 == 0, np.array(c.embedding_s)[g], 0.0) + np.where(s0 + q == pp, np.array(c.head_s)[g], 0.0)
    rent = np.array([u.node.price_usd_per_node_hour * u.nodes_per_block for u in uses])
    return _Blocks(
        g=g, start=s0, stages=q, low=np.add.reduceat(lows, np.cumsum(q) - q) if len(q) else q,
        rent_usd_per_hour=rent[g], fixed_s=between + ends,
        step_s=np.array([_step_min(c, gg) for gg in range(G)])[g],
        rows=compute[rs, rg] + (send_in + send_out)[:, None], row_position=rs, row_low=lows,
        comm_rows=tuple(_stage_comm_s(c, per, compute.shape[2], expert)[rs, rg]
                        for per, expert in ((c.allreduce_floor_s_per_param, c.layer_allreduce_s),
                                            (c.optimizer_s_per_param, c.layer_optimizer_s))))


def _stage_comm_s(c: Coefficients, per_param_s: tuple[float, ...], counts: int, expert_per_layer=None) -> np.ndarray:
    """[s, g, n] -> per_param[g] x (n P + P_fixed[s]) (+ n x the experts' share per layer on g, mixture of experts):
    with alpha, A is at least this for every stage of a plan; with beta, O is."""
    params = np.arange(counts)[None, :] * c.layer_params[0] + np.array(c.fixed_params)[:, None]  # [s, n]
    out = np.array(per_param_s)[None, :, None] * params[:, None, :]
    if expert_per_layer is not None and any(c.expert_params):
        extra = np.array([expert_per_layer(g, 0) for g in range(len(per_param_s))])
        out = out + extra[None, :, None] * np.arange(counts)[None, None, :]
    return out


def _step_min(c: Coefficients, g: int) -> float:
    """The fastest mode's time per layer on g: no stage of g spends less per layer."""
    return min(c.step_s[g][r][0] for r in range(len(c.modes)))


class _Caps:
    """Most layers each block holds with no stage above M, for many M at once (-1 where some stage cannot stay
    under M): every block stage's t_lb row is compared with every M in one array operation."""

    def __init__(self, blocks: _Blocks, pp: int):
        self.times = blocks.rows  # NaN <= M is False: counts that are not allowed never fit
        self.comm = blocks.comm_rows
        self.lows = blocks.row_low
        self.offsets = np.cumsum(blocks.stages) - blocks.stages
        self.position = blocks.row_position
        self.pp = pp
        self.whole: np.ndarray | None = None  # [block stage, n] rest + X (hidden_reduce_rows), or None
        self.hide: np.ndarray | None = None  # [block stage] max(1, s) rho: the hiding is at most this x M
        self.back: tuple | None = None  # backward_rows: what a stage's last backward can be (prefix_hide)
        self.prefix_rounds = PREFIX_HIDE_ROUNDS  # the switch as the tables are built (kept, as _PAIR_SWITCHES are:
        # a table's kept marks and a later ask's under another setting would mix; audit13, round 21)
        self.rho = 0.0  # ... at most rho x M (hidden_reduce_rows' rho)
        self.kappa = 0.0  # (m - 1) / (pp - 1): what a stage's backward above M may grow per second of slowest stage
        self.row_g: np.ndarray | None = None  # [block stage] its node type
        self.slots: np.ndarray | None = None  # [g] the most stages of g (node supply)

    def at(self, Ms: np.ndarray, Cs: np.ndarray | None = None, which: int = 0) -> np.ndarray:
        """[block, M] -> cap; with Cs, also no stage's all-reduce (which=0) or optimizer step (1) above C (pairwise
        with Ms)"""
        return self.both(Ms, Cs, which)[0]

    def both(self, Ms: np.ndarray, Cs: np.ndarray | None = None, which: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """[block, M] -> cap, and [stage, M] -> the most layers stage s holds on any type (-1: on none)."""
        fit = self.times[:, :, None] <= Ms[None, None, :]
        if Cs is not None and which == 2:  # rest + max(0, X - max(1, s) rho M) <= C (hidden_reduce_rows)
            hide = self.hide[:, None] * Ms[None, :]  # [block stage, M]
            timed = fit
            fit = timed & (self.whole[:, :, None] - hide[:, None, :] <= Cs[None, None, :])
            for _ in range(self.prefix_rounds if self.back is not None else 0):
                # round 21: what the earlier stages can hide, from the counts the level itself allows them
                hide = np.minimum(hide, self.prefix_hide(fit, Ms))
                fit = timed & (self.whole[:, :, None] - hide[:, None, :] <= Cs[None, None, :])
        elif Cs is not None:
            fit &= self.comm[which][:, :, None] <= Cs[None, None, :]
        k = fit.sum(axis=1)  # allowed counts from lo that fit (both grow with n: a prefix)
        cap = np.add.reduceat(self.lows[:, None] + k - 1, self.offsets, axis=0)
        ok = np.minimum.reduceat(k, self.offsets, axis=0) > 0
        per_stage = np.full((self.pp, len(Ms)), -1, dtype=np.int64)
        np.maximum.at(per_stage, self.position, np.where(k > 0, self.lows[:, None] + k - 1, -1))
        return np.where(ok, cap, -1), per_stage

    def prefix_hide(self, fit: np.ndarray, Ms: np.ndarray) -> np.ndarray:
        """[block stage, M] -> a bound on the backward that the stages before its position hide (H_s below; at
        stage 0 the old rho M, its own), given that every stage holds no more layers than `fit` ([block stage, n, M])
        allows its row (round 21, timepark: prefix_hide in docs/solver.md).

        A plan at mark M (every stage's t_lb <= M) whose slowest stage takes T = M + d: a stage j on g with n_j layers
        run one way (backward_rows) computes x = n_j step + ends <= t_j <= M + d and hides W_j <= n_j back + ends_back
        and W_j <= rho t_j <= rho M + rho d. So W_j - kappa (x - M)^+ <= v(n_j) := max(0, n_j back + ends_back -
        kappa (x - M)^+), and W_j <= min(rho M, v(n_j)) + kappa d (kappa >= rho: hidden_reduce_rows' m - 1 >= (pp -
        1) rho). v grows with n while x <= M and, past it, falls (its slope back - kappa step <= 0, back <= rho
        step): its largest value over n <= the row's cap within fit lies at n1 = floor((M - ends) / step) or n1 + 1
        (clipped to the cap; n1 - 1 too, against the float floor). V[j, g] = the largest over the rows of g at j and
        the ways; then sum_{j<s} W_j <= sum_{j<s} V[j, g_j] + (pp - 1) kappa d, (pp - 1) kappa d = (m - 1) d: the
        iteration's (m - 1) T pays it, as it paid round 10b's max(1, s) rho d. Over the positions j < s, with at
        most slots[g] stages of g: prefix_supply_sum."""
        k = fit.sum(axis=1)  # [row, M]
        cap = np.where(k > 0, self.lows[:, None] + k - 1, -1)  # [row, M]
        back, step, ends, ends_back = self.back
        safe = np.where(step > 0, step, 1.0)
        n1 = np.floor((Ms[None, None, :] - ends[None, :, None]) / safe[:, :, None])  # [way, row, M]
        w = np.zeros(cap.shape)
        for shift in (-1, 0, 1):
            n = np.clip(n1 + shift, 0, cap[None])  # [way, row, M]
            x = n * step[:, :, None] + ends[None, :, None]
            v = n * back[:, :, None] + ends_back[None, :, None] - self.kappa * np.maximum(x - Ms[None, None, :], 0.0)
            w = np.maximum(w, v.max(axis=0))
        w = np.where(cap >= 0, np.minimum(w, self.rho * Ms[None, :]), 0.0)
        V = np.zeros((self.pp, len(self.slots), len(Ms)))
        np.maximum.at(V, (self.position, self.row_g), w)
        H = prefix_supply_sum(V, self.slots)
        out = H[self.position] * (1 + 1e-12)
        return np.where(self.position[:, None] > 0, out, self.hide[:, None] * Ms[None, :])


def prefix_supply_sum(V: np.ndarray, slots: np.ndarray) -> np.ndarray:
    """[j, g, M] values (>= 0) -> [s, M] an upper bound on max sum_{j<s} V[j, a_j] over the assignments a of types to
    positions with at most slots[g] positions of g: for every lam >= 0 (Lagrange, as the in-flight tables'
    JOINT_SUPPLY), sum_{j<s} V[j, a_j] = sum_{j<s} (V[j, a_j] - lam_{a_j}) + sum_g lam_g #{j < s: a_j = g}
    <= sum_{j<s} max_g (V[j, g] - lam_g) + sum_g lam_g min(slots[g], s). Tried at lam = 0 and, for the types whose
    supply binds (slots[g] < positions), at lam_g = the (slots[g] + 1)-th largest over j of (V[j, g] - max_{h != g}
    V[j, h])^+ (g's slots filled at that price)."""
    P, G, _ = V.shape
    s = np.arange(P)

    def before(x: np.ndarray) -> np.ndarray:  # [j, M] -> [s, M]: the sum over j < s
        return np.vstack([np.zeros((1, x.shape[1])), np.cumsum(x, axis=0)[:-1]])

    H = before(V.max(axis=1))
    binds = slots < P
    if binds.any() and G > 1:
        others = np.stack([np.delete(V, g, axis=1).max(axis=1) for g in range(G)], axis=1)  # [j, g, M]
        gain = -np.sort(-np.maximum(V - others, 0.0), axis=0)  # [rank, g, M]: each type's gains, largest first
        lam = np.where(binds[:, None], gain[np.minimum(slots, P - 1), np.arange(G)], 0.0)  # [g, M]
        paid = (lam[None, :, :] * np.minimum(slots[None, :], s[:, None])[:, :, None]).sum(axis=1)
        H = np.minimum(H, paid + before((V - lam[None]).max(axis=1)))
    return H


@dataclass(frozen=True, slots=True)
class _Group:
    """The blocks that start at one stage and span the same number of stages (one row per block)."""

    stages: int
    index: np.ndarray  # block numbers (rows of the caps)
    g: np.ndarray  # node type of each block
    rent_usd_per_hour: np.ndarray
    fixed_s: np.ndarray
    step_s: np.ndarray
    low: np.ndarray


def _groups(blocks: _Blocks, pp: int) -> list[list[_Group]]:
    out: list[list[_Group]] = [[] for _ in range(pp)]
    for s0, q in sorted(set(zip(blocks.start.tolist(), blocks.stages.tolist()))):
        ix = np.nonzero((blocks.start == s0) & (blocks.stages == q))[0]
        out[s0].append(_Group(stages=q, index=ix, g=blocks.g[ix], rent_usd_per_hour=blocks.rent_usd_per_hour[ix],
                              fixed_s=blocks.fixed_s[ix], step_s=blocks.step_s[ix], low=blocks.low[ix]))
    return out


@dataclass(frozen=True, slots=True)
class _Supply:
    """How many blocks of each type whose node supply can bind the pipeline has used so far, as one mixed-radix
    index u in [0, U). Slot U is a sentinel that stays infinite: src[g, u] is u less one block of g, or U where u
    holds no block of g. Types whose supply cannot bind (alone they could fill every stage) are not counted."""

    size: int
    src: np.ndarray  # [g, u]
    reach: np.ndarray | None = None  # [k]: 1 + the largest u whose counts sum to at most k (SUPPLY_REACH), or None


def supply_strides(caps: list[tuple[int, int]], limit: int) -> tuple[int, dict[int, tuple[int, int]]]:
    """A mixed-radix index over the counts 0..cap of the types in `caps` ((cap, g), scarcest first), taken while the
    number of states U stays within `limit`: (U, {g: (stride, cap)}). A type left out is not counted, which only
    relaxes its supply."""
    size, strides = 1, {}
    for cap, g in caps:
        if size * (cap + 1) > limit:
            break
        strides[g] = (size, cap)
        size *= cap + 1
    return size, strides


def _supply(f: Skeleton, limit: int = 256) -> _Supply:
    """The supply index. Types are counted from the scarcest while U stays within `limit`; leaving a type out only
    relaxes its supply, so the bound stays valid."""
    pp = f.cand.pp
    most = [u.node.num_nodes_available // u.nodes_per_block for u in f.cand.uses]
    size, strides = supply_strides(
        sorted((most[g], g) for g, u in enumerate(f.cand.uses) if most[g] * u.stages_per_block < pp), limit)
    us = np.arange(size)
    src = np.tile(us, (len(most), 1))
    sums = np.zeros(size, dtype=np.int64)  # each state's counted blocks in all
    for g, (stride, blocks) in strides.items():
        src[g] = np.where((us // stride) % (blocks + 1) >= 1, us - stride, size)
        sums += (us // stride) % (blocks + 1)
    # SUPPLY_REACH: a suffix of k stages uses at most k counted blocks, so the programmes' states past reach[k] at
    # stage pp - k stay as they start (inf, or -inf in _most_cover): they compute only the first reach[pp - s]
    most_at = np.zeros(pp + 2, dtype=np.int64)  # [k]: 1 + the largest u whose sum is k (k = pp + 1: above pp)
    np.maximum.at(most_at, np.minimum(sums, pp + 1), us + 1)
    reach = np.maximum.accumulate(most_at)[:pp + 1]
    return _Supply(size=size, src=src, reach=reach if SUPPLY_REACH else None)


SUPPLY_REACH = True  # the bound's programmes (_least_rent, _least_sum, _most_cover) compute at stage s only the
# supply states a suffix of pp - s stages can reach (the first _Supply.reach[pp - s]; the rest stay infinite, as they
# would be computed): round 22, quick1t


def _reach(sup: _Supply, pp: int, s: int) -> int:
    """The states the programmes compute at stage s (SUPPLY_REACH): every one that holds a finite value there."""
    return sup.size if sup.reach is None else int(sup.reach[pp - s])


def _start(sup: _Supply, nM: int, L: int) -> np.ndarray:
    F = np.full((nM, sup.size + 1, L + 1), np.inf)
    F[:, 0, 0] = 0.0  # past the last stage: no block used, no layer left
    return F


RENT_SLICED = True  # _least_rent by slices (_least_rent_sliced; round 23, front1t): each block's sums over the runs of
# marks where its cap is one value, as shifted slices of the next table, instead of one gather through an index array
# of every (mark, block, state, layer): the same sums and the same min, so the same values bit for bit
RENT_SLICED_FROM = 8192  # ... where a table (marks x (states + 1) x (L + 1)) has at least this many entries: below it
# the gather's few array operations cost less than the slices' Python steps (175B / 76B's candidates, 2^8-2^12 entries:
# the gather 1.2-2x faster; 1T 3k's front, 1.5e5 entries: the slices 3x faster)


def _runs(values: np.ndarray) -> list[tuple[int, int, int]]:
    """[(lo, hi, value)]: the maximal runs of equal values in a 1-d integer array."""
    cut = np.flatnonzero(np.diff(values)) + 1
    starts = np.concatenate([[0], cut]).tolist()
    ends = np.concatenate([cut, [len(values)]]).tolist()
    return [(lo, hi, int(values[lo])) for lo, hi in zip(starts, ends)]


def _rent_top(groups_s: list[_Group], caps: np.ndarray, top: np.ndarray, s: int, L: int) -> int:
    """The largest l at which F[s][M, u, l] can be finite (_least_rent_sliced): a block with cap c reads the next
    table's l - c (l >= c), which is inf past that table's top, so l <= top[s + q] + c, at most L."""
    ahead = 0
    for grp in groups_s:
        most = int(caps[grp.index].max(initial=-1))
        if most >= 0:
            ahead = max(ahead, min(L, int(top[s + grp.stages]) + most))
    return ahead


def _least_rent_sliced(groups: list[list[_Group]], sup: _Supply, caps: np.ndarray, pp: int, L: int,
                       deadline: float | None = None) -> np.ndarray:
    """_least_rent's programme, each candidate sum computed as rent + F[s + q][M, src, max(l - cap, 0)] as there, but
    by slices: for a block and a run of marks where its cap is c >= 0 (caps grow with M, so a run per value), the
    layers l >= c read the next table's columns l - c (one slice), and the layers l < c its column 0 (one column,
    broadcast). A block at a mark where its cap is negative (no count fits) adds inf there, which changes no min: it
    is skipped. The min over blocks, groups and runs is taken into the stage's table in another order than
    _least_rent's, and min is exact, so every F[s] holds the same floats (tests/test_positional_rent_sliced.py). The
    states' src for one node type is read once per (stage, type) from the next table ([M, u, l], a gather over u
    only)."""
    nM, U = caps.shape[1], sup.size
    runs: dict[int, list] = {}  # [block] -> its runs of marks with one cap
    by_row: dict[bytes, list] = {}  # ... the same list for blocks with the same caps (the middle of a pipeline)
    for b in range(len(caps)):
        key = caps[b].tobytes()
        if key not in by_row:
            by_row[key] = _runs(caps[b])
        runs[b] = by_row[key]
    # F[s] is read only by the stages s - q, q <= the longest block: a ring of that many + 1 tables, each filled
    # with inf again before it is reused (fresh arrays cost more in the allocator's page faults than the sums)
    ring = 1 + max((grp.stages for gs in groups for grp in gs), default=1)
    tables = [np.full((nM, U + 1, L + 1), np.inf) for _ in range(ring)]
    tables[pp % ring][:, 0, 0] = 0.0  # past the last stage: no block used, no layer left
    scratch = np.empty((nM, U + 1, L + 1))  # each run's sums
    gathered = np.empty((nM, U + 1, L + 1))  # the next table's rows src[g, u], where they are not the rows u
    identity = [bool(np.array_equal(sup.src[g], np.arange(U))) for g in range(len(sup.src))]
    top = np.zeros(pp + 1, dtype=np.int64)  # [s]: every F[s][M, u, l] with l above it is inf (past the last stage: 0)
    for s in range(pp - 1, -1, -1):
        _on_time(deadline)
        best = tables[s % ring]
        best.fill(np.inf)
        n = _reach(sup, pp, s)  # the states a suffix from s can reach (the others stay inf)
        top[s] = ahead = _rent_top(groups[s], caps, top, s, L)
        w = ahead + 1  # the layers computed: l < w (past it every sum reads inf: the next table's l - c > its top)
        out = best[:, :n, :w]
        for grp in groups[s]:
            after = tables[(s + grp.stages) % ring]
            read = -1  # the type whose rows `gathered` holds now
            for b, g, rent in zip(grp.index.tolist(), grp.g.tolist(), grp.rent_usd_per_hour.tolist()):
                live = [(lo, hi, min(c, w)) for lo, hi, c in runs[b] if c >= 0]
                if not live:
                    continue
                if identity[g]:
                    nxt = after[:, :n, :w]
                else:
                    nxt = gathered[:, :n, :w]
                    if read != g:
                        np.take(after[:, :, :w], sup.src[g, :n], axis=1, out=nxt, mode="clip")
                        read = g
                for lo, hi, c in live:
                    if c < w:
                        got = np.add(nxt[lo:hi, :, :w - c], rent, out=scratch[lo:hi, :n, :w - c])
                        np.minimum(out[lo:hi, :, c:], got, out=out[lo:hi, :, c:])
                    if c > 0:
                        got = np.add(nxt[lo:hi, :, :1], rent, out=scratch[lo:hi, :n, :1])
                        np.minimum(out[lo:hi, :, :c], got, out=out[lo:hi, :, :c])
    return tables[0][:, :U, L].min(axis=1)


def _least_rent(groups: list[list[_Group]], sup: _Supply, caps: np.ndarray, pp: int, L: int,
                deadline: float | None = None) -> np.ndarray:
    """R(M): F[s][M, u, l] = least rent of blocks from stage s on, using the blocks u, whose caps hold l layers."""
    if RENT_SLICED and caps.shape[1] * (sup.size + 1) * (L + 1) >= RENT_SLICED_FROM:
        return _least_rent_sliced(groups, sup, caps, pp, L, deadline)
    nM, U = caps.shape[1], sup.size
    cols = np.arange(L + 1)[None, None, None, :]
    rows = (np.arange(nM) * ((U + 1) * (L + 1)))[:, None, None, None]  # flat offset of F[s][M]
    F: list[np.ndarray | None] = [None] * (pp + 1)
    F[pp] = _start(sup, nM, L)
    for s in range(pp - 1, -1, -1):
        _on_time(deadline)
        best = np.full((nM, U + 1, L + 1), np.inf)
        n = _reach(sup, pp, s)  # the states a suffix from s can reach (the others stay inf)
        for grp in groups[s]:
            cap = caps[grp.index].T  # [M, block]
            lines = rows + (sup.src[grp.g][:, :n] * (L + 1))[None, :, :, None]  # [M, block, u, 1]: F[s + q][M, src]
            got = F[s + grp.stages].ravel().take(lines + np.maximum(cols - np.maximum(cap, 0)[:, :, None, None], 0))
            rent = np.where(cap >= 0, grp.rent_usd_per_hour[None, :], np.inf)
            np.minimum(best[:, :n], (got + rent[:, :, None, None]).min(axis=1), out=best[:, :n])
        F[s] = best
    return F[0][:, :U, L].min(axis=1)


def _most_cover(groups: list[list[_Group]], sup: _Supply, caps: np.ndarray, pp: int,
                deadline: float | None = None) -> np.ndarray:
    """[M] -> the most layers the caps of a block sequence hold within node supply (-inf where none exists). The least
    rent of _least_rent is finite exactly where this reaches L; without the layer dimension it is L + 1 times cheaper,
    which is what the bisections of C need."""
    nM, U = caps.shape[1], sup.size
    G: list[np.ndarray | None] = [None] * (pp + 1)
    G[pp] = np.full((nM, U + 1), -np.inf)
    G[pp][:, 0] = 0.0  # past the last stage: no block used
    for s in range(pp - 1, -1, -1):
        _on_time(deadline)
        best = np.full((nM, U + 1), -np.inf)
        n = _reach(sup, pp, s)  # the states a suffix from s can reach (the others stay -inf)
        for grp in groups[s]:
            cap = caps[grp.index].T  # [M, block]
            got = G[s + grp.stages][:, sup.src[grp.g][:, :n]]  # [M, block, u]
            held = np.where(cap >= 0, cap, -np.inf)[:, :, None] + got
            np.maximum(best[:, :n], held.max(axis=1), out=best[:, :n])
        G[s] = best
    return G[0][:, :U].max(axis=1)


def _least_sum(groups: list[list[_Group]], sup: _Supply, caps: np.ndarray, pp: int, L: int,
               rent_weight: np.ndarray | None = None, choices: bool = False, deadline: float | None = None,
               first_extra: np.ndarray | None = None, last_extra: np.ndarray | None = None, kept: list | None = None):
    """S(M): least sum of stage times (step_g x layers + ends + sends per block) with every block within its caps and
    node supply. rent_weight[M] x rent is added per block (the combined objective of the cost bound); choices
    records the best (block, layers) per (s, u, l) for the first M, and the u it ends with. first_extra[g, n, M] is
    added to a block of type g that starts the pipeline holding n layers (_first_stage_extra: stage 0's reduce);
    last_extra[g] to a block of type g that ends it (embedding_last_rows: the tied embedding's all-reduce). kept (a
    list): F[s] for s = 0..pp is put in it (_traced_sequence)."""
    nM, U = caps.shape[1], sup.size
    F: list[np.ndarray | None] = [None] * (pp + 1)
    F[pp] = _start(sup, nM, L)
    pick: dict[int, list] = {}
    ring = 0  # SUM_RING: F[s] in tables[s % ring], refilled (0: a fresh table per stage, all kept)
    if SUM_RING and not choices and kept is None and nM * (U + 1) * (L + 1) >= SUM_RING_FROM:
        ring = 1 + max((grp.stages for gs in groups for grp in gs), default=1)
        tables = [np.full((nM, U + 1, L + 1), np.inf) for _ in range(ring)]
        tables[pp % ring] = F[pp]  # stage s reads s + q, q < ring: the table it refills was s + ring's
        scratch = np.empty((nM, U + 1, L + 1))  # each (count, block)'s sums
        identity = [bool(np.array_equal(sup.src[g], np.arange(U))) for g in range(len(sup.src))]
    for s in range(pp - 1, -1, -1):
        _on_time(deadline)
        if ring:
            best = tables[s % ring]
            best.fill(np.inf)
        else:
            best = np.full((nM, U + 1, L + 1), np.inf)
        arg = [[None] * (L + 1) for _ in range(U)] if choices else None
        top = U if choices else _reach(sup, pp, s)  # the states computed (the others stay inf)
        for grp in groups[s]:
            cap = caps[grp.index]  # [block, M]
            if ring and not nM * len(grp.index) * U * len(range(int(grp.low.min()), min(
                    L, int(cap.max(initial=-1))) + 1)) * (L + 1) <= SUM_VECTOR_LIMIT:
                _sum_group_ring(grp, cap, tables[(s + grp.stages) % ring], best, scratch, identity, sup, top, L, s,
                                pp, rent_weight, first_extra, last_extra)
                continue
            after = tables[(s + grp.stages) % ring] if ring else F[s + grp.stages]
            nxt = after[:, sup.src[grp.g][:, :top], :]  # [M, block, u, l]
            base, ns, extra = _group_sums_setup(grp, cap, L, s, pp, rent_weight, first_extra, last_extra)
            if len(ns) == 0:
                continue
            if not choices and nM * len(grp.index) * U * len(ns) * (L + 1) <= SUM_VECTOR_LIMIT:
                # Every count n at once (the loop below, one array operation): [M, block, u, n, l] holds
                # per[n, block, M] + nxt[M, block, u, l - n], infinite where l < n; the least over blocks and n.
                per = np.where((ns[:, None, None] >= grp.low[None, :, None]) & (ns[:, None, None] <= cap[None]),
                               base[None] + grp.step_s[None, :, None] * ns[:, None, None], np.inf)  # [n, block, M]
                if extra is not None:
                    per = per + extra[:, ns, :].transpose(1, 0, 2)
                shift = np.arange(L + 1)[None, :] - ns[:, None]  # [n, l]: l - n
                padded = np.concatenate([nxt, np.full(nxt.shape[:3] + (1,), np.inf)], axis=3)
                got = per.transpose(2, 1, 0)[:, :, None, :, None] + padded[:, :, :, np.where(shift >= 0, shift, L + 1)]
                np.minimum(best[:, :top, :], got.min(axis=(1, 3)), out=best[:, :top, :])
                continue
            for n in ns.tolist():
                per = np.where((n >= grp.low[:, None]) & (n <= cap), base + grp.step_s[:, None] * n, np.inf)
                if extra is not None:
                    per = per + extra[:, n, :]
                if not choices:
                    _min_into(best[:, :top, n:], per, nxt[:, :, :, : L + 1 - n])
                    continue
                got = per.T[:, :, None, None] + nxt[:, :, :, : L + 1 - n]  # [M, block, u, l - n]
                low = got.min(axis=1)
                if choices:
                    which = got[0].argmin(axis=0)  # [u, l - n]
                    for u, l in zip(*np.nonzero(low[0] < best[0, :U, n:])):
                        arg[u][l + n] = (int(grp.g[which[u, l]]), grp.stages, n)
                np.minimum(best[:, :U, n:], low, out=best[:, :U, n:])
        F[s] = None if ring else best
        if choices:
            pick[s] = arg
    if kept is not None:
        kept[:] = F
    ends = (tables[0] if ring else F[0])[:, :U, L]
    return ends.min(axis=1), (pick, int(ends[0].argmin()) if choices else 0)


SUM_RING = True  # _least_sum's plain path (no choices, no kept tables) in a ring of tables refilled, each block's
# next rows read as a view (or one gather into a buffer) and each (count, block)'s sums in one buffer (_sum_group_ring;
# round 23, front1t): the same sums and min, the same values bit for bit, without the fresh arrays whose page faults
# were most of its time on Megatron 1T 3k's deep candidates
SUM_RING_FROM = 8192  # ... where a table (marks x (states + 1) x (L + 1)) has at least this many entries


def _group_sums_setup(grp: _Group, cap: np.ndarray, L: int, s: int, pp: int, rent_weight: np.ndarray | None,
                      first_extra: np.ndarray | None, last_extra: np.ndarray | None
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """A group's terms in _least_sum at stage s: each block's fixed time (plus its rent at rent_weight, plus the last
    block's extra where the block ends the pipeline; inf where the block holds no count at a mark), [block, M]; the
    counts n it may hold; the first block's extra per count, [block, n, M], or None."""
    base = grp.fixed_s[:, None] + (0.0 if rent_weight is None else
                                   rent_weight[None, :] * grp.rent_usd_per_hour[:, None])  # [block, M]
    if last_extra is not None and s + grp.stages == pp:  # the block that ends the pipeline
        base = base + last_extra[grp.g][:, None]
    base = np.where(cap >= 0, base, np.inf)
    ns = np.arange(int(grp.low.min()), min(L, int(cap.max(initial=-1))) + 1)
    extra = first_extra[grp.g] if first_extra is not None and s == 0 else None  # [block, n, M]
    return base, ns, extra


def _sum_group_ring(grp: _Group, cap: np.ndarray, after: np.ndarray, best: np.ndarray, scratch: np.ndarray,
                    identity: list[bool], sup: _Supply, top: int, L: int, s: int, pp: int,
                    rent_weight: np.ndarray | None, first_extra: np.ndarray | None,
                    last_extra: np.ndarray | None) -> None:
    """One group's step of _least_sum's plain path (the loop over counts n and _min_into), with the next table's rows
    of each block's type read as a view of `after` (a type not counted: src[g, u] = u) or gathered once per type, and
    each sum per[b, M] + next[M, u, l - n] into `scratch`: the same expressions in the same order for each (n,
    block, run of marks), so the same floats min'd into best[:, :top, n:] (min is exact)."""
    base, ns, extra = _group_sums_setup(grp, cap, L, s, pp, rent_weight, first_extra, last_extra)
    rows: dict[int, np.ndarray] = {}
    for n in ns.tolist():
        per = np.where((n >= grp.low[:, None]) & (n <= cap), base + grp.step_s[:, None] * n, np.inf)
        if extra is not None:
            per = per + extra[:, n, :]
        finite = np.isfinite(per)
        for b in np.nonzero(finite.any(axis=1))[0].tolist():
            g = int(grp.g[b])
            if g not in rows:
                rows[g] = after[:, :top] if identity[g] else after[:, sup.src[g, :top]]  # [M, u, l]
            live = np.nonzero(finite[b])[0]
            lo, hi = int(live[0]), int(live[-1]) + 1  # the marks outside [lo, hi) give infinity: nothing to take
            got = np.add(per[b, lo:hi, None, None], rows[g][lo:hi, :, :L + 1 - n], out=scratch[lo:hi, :top, n:])
            np.minimum(best[lo:hi, :top, n:], got, out=best[lo:hi, :top, n:])


def _min_into(best: np.ndarray, per: np.ndarray, nxt: np.ndarray) -> None:
    """best[M, u, l] = min(best, min over blocks of per[block, M] + nxt[M, block, u, l]), in place: _least_sum's step
    for one layer count, block by block over the blocks and the run of marks where per is finite (round 11,
    timepos). The same sums, and min is exact, so the same values bit for bit as the least over every block at once
    (the choices path, tests/test_positional_walk_floor.py); at a count above a block's cap at every mark its
    [M, u, l] sum is skipped (GPT-3 175B's candidates on mixed-pool-8k: 41 % of (block, mark, count) are finite)."""
    finite = np.isfinite(per)
    for b in np.nonzero(finite.any(axis=1))[0].tolist():
        live = np.nonzero(finite[b])[0]
        lo, hi = int(live[0]), int(live[-1]) + 1  # the marks outside [lo, hi) give infinity: nothing to take
        got = per[b, lo:hi, None, None] + nxt[lo:hi, b]
        np.minimum(best[lo:hi], got, out=best[lo:hi])


def _sequence(picked: tuple[dict[int, list], int], sup: _Supply, pp: int, L: int) -> tuple[int, ...] | None:
    pick, u = picked
    s, left, seq = 0, L, []
    while s < pp:
        got = pick[s][u][left]
        if got is None:
            return None
        g, q, n = got
        seq += [g] * q
        s, left, u = s + q, left - n, int(sup.src[g, u])
    return tuple(seq)


SEQUENCE_TRACED = True  # _Tables.sequence traces the sum programme's tables back along one path (_traced_sequence;
# round 22, quick1t) instead of recording every state's choice (choices=True): the same sequence, 0.10-0.11 s -> less
# on Megatron 1T 3k's deep two-node candidates (a quarter of their positional step)


def _traced_sequence(groups: list[list[_Group]], sup: _Supply, caps: np.ndarray, pp: int, L: int,
                     rent_weight: np.ndarray | None, last_extra: np.ndarray | None,
                     deadline: float | None = None) -> tuple[int, ...] | None:
    """_sequence(_least_sum(..., choices=True)) at one mark (caps [block, 1]), from the tables of the plain programme.
    The choices path records at each (s, u, l) the choice of the last strict improvement over the groups in order,
    each count n from the least up, and within (group, n) the first block at the least: that is the first (group, n,
    block) in this order whose sum equals the state's final value (an earlier one equal to it would have made the
    improvement; none is below it). The plain programme's F holds those final values, the same floats (the same
    sums per + F[s + q][src, l - n], the same min; tests/test_positional_walk_floor.py), so walking from stage 0's
    least end (the first u at l = L, as choices' argmin) and taking at each stage the first (group, n, block) whose
    sum, computed by the same expressions, equals F[s][u, left] gives the same choices along the one path _sequence
    reads; None where that value is infinite (no choice recorded)."""
    F: list = []
    _least_sum(groups, sup, caps, pp, L, rent_weight, deadline=deadline, last_extra=last_extra, kept=F)
    U = sup.size
    u = int(F[0][0, :U, L].argmin())
    s, left, seq = 0, L, []
    while s < pp:
        want = F[s][0, u, left]
        if not np.isfinite(want):
            return None
        got = None
        for grp in groups[s]:
            cap = caps[grp.index]  # [block, 1]
            base = grp.fixed_s[:, None] + (0.0 if rent_weight is None else
                                           rent_weight[None, :] * grp.rent_usd_per_hour[:, None])
            if last_extra is not None and s + grp.stages == pp:
                base = base + last_extra[grp.g][:, None]
            base = np.where(cap >= 0, base, np.inf)
            nxt = F[s + grp.stages][0]  # [u, l]
            for n in range(int(grp.low.min()), min(L, int(cap.max(initial=-1))) + 1):
                if n > left:
                    break
                per = np.where((n >= grp.low[:, None]) & (n <= cap), base + grp.step_s[:, None] * n, np.inf)
                sums = per[:, 0] + nxt[sup.src[grp.g, u], left - n]  # [block]
                hit = np.nonzero(sums == want)[0]
                if len(hit):
                    got = (int(grp.g[hit[0]]), grp.stages, n)
                    break
            if got is not None:
                break
        if got is None:
            return None
        g, q, n = got
        seq += [g] * q
        s, left, u = s + q, left - n, int(sup.src[g, u])
    return tuple(seq)


def comm_lower_s(f: Skeleton) -> float:
    """A + O >= (min_g alpha_g + min_g beta_g) x P_total / pp: some stage holds at least 1/pp of the parameters."""
    c = f.c
    total = sum(p * n for p, n in zip(c.layer_params, c.kind_layers)) + sum(c.fixed_params)
    rate = min(c.allreduce_floor_s_per_param) + min(c.optimizer_s_per_param)
    if any(c.expert_params):  # experts have their own per-parameter rates: the lesser rate over all parameters
        total += sum(x * n for x, n in zip(c.expert_params, c.kind_layers))
        rate = min(rate, min(c.expert_allreduce_s_per_param) + min(c.expert_optimizer_s_per_param))
    return rate * total / f.cand.pp


def embedding_floor_s(f: Skeleton) -> float:
    """E >= this for every plan of the candidate: the tied embedding's all-reduce between the first and the last
    stage (costmodel.embedding_allreduce_s, 0 when pp = 1 or untied) at its least over the types the ends may take,
    across nodes, and within one node only where one type can hold the whole pipeline on one node (the model's rows
    of E: ends on one node need a single block of such a type). It depends on the end types only, never on modes,
    patterns or the optimizer setting. (Round 10: the bound left E out; on GPT-3 13B, tp 2, it is 0.0103 s of a
    0.254 s iteration.)"""
    c = f.c
    if f.cand.pp <= 1 or not c.emb_inter_s:
        return 0.0
    values = [x for row in c.emb_inter_s for x in row]
    values += [x for x, same in zip(c.emb_intra_s, c.emb_same_possible) if same]
    return max(0.0, min(values)) * (1 - 1e-12)


def embedding_last_rows(f: Skeleton) -> np.ndarray | None:
    """[g] -> a floor on E - embedding_floor_s(f) for every plan whose last stage runs on g (round 17, timerows); None
    where the candidate has no tied-embedding all-reduce (pp = 1, untied) or every row is 0.

    The cost model prices E by the pair of end types (costmodel.embedding_allreduce_s; the model's rows in
    model.add_embedding_allreduce): across nodes c_inter[g0][g] for stage 0 on g0 and the last stage on g, and within
    one node c_intra[g] only where the ends are one node of g (then g0 = g, and only where emb_same_possible[g]). So
    a plan whose last stage runs on g has E >= E_L[g] = min(min over g0 of c_inter[g0][g], c_intra[g] where possible),
    whatever its modes, patterns, first type or optimizer setting. embedding_floor_s is the least of every E_L[g], so
    the excess E_L[g] - it is >= 0, and it is additive in the iteration beside the bound's comm (which counts E at
    embedding_floor_s) and stage 0's reduce excess (first_stage_reduce_s, on the other end's block): the sum
    programmes add it to the block that ends the pipeline. Without it the bound let a slow-NIC type hold the last
    stage (the head, no layer) at the fastest pair's E: Megatron 7.5B on mixed-pool-8k, tp 2, dp 32, cp 4, pp 16, an
    A100 last stage, E 0.067 s against the 0.0084 s counted."""
    c, G = f.c, len(f.cand.uses)
    if f.cand.pp <= 1 or not c.emb_inter_s or not LAST_END_EMBEDDING:
        return None
    least = np.array([min([c.emb_inter_s[g0][g] for g0 in range(G)]
                          + ([c.emb_intra_s[g]] if c.emb_same_possible[g] else [])) for g in range(G)])
    extra = np.maximum(least * (1 - 1e-12) - embedding_floor_s(f), 0.0)  # both with the same rounding margin
    return extra if extra.any() else None


def first_stage_reduce_s(f: Skeleton) -> np.ndarray | None:
    """[g, n] -> a floor on stage 0's exposed gradient reduce A_0 when it runs on g with n layers (0 <= n <= L), under
    --overlap-grad-reduce (v = 1); None where the overlap is off. A block of q > 1 stages that starts the pipeline
    with n layers holds n_0 <= n of them on stage 0: its row is the least over n_0 <= n.

    The cost model (section 7c, exposed_grad_reduce_s) prices A_0 = rest_0 + max(X_0 / n_b, X_0 - W_0 (n_b - 1) / n_b):
    rest_0 the exposed part (alpha's share that is never overlapped, and the experts' exchange: the rows of C_A),
    X_0 = share x alpha[g] x (n P + P_fixed[0]) the overlapped collective, n_b its buckets (Coefficients.grad_buckets0)
    and W_0 = max(0, compute_0 - F_0) stage 0's own last backward, the only work that hides it. A_0 falls as W_0
    grows, and W_0 <= n x max(0, max over modes of step - forward) + max(0, embedding step - forward) (+ the head's on
    a one-stage pipeline): every mode (and block recomputation, whose layers take none's or full's step) is covered,
    so this floor holds whatever mode, pattern or optimizer setting the plan runs."""
    c, pp = f.c, f.cand.pp
    if c.grad_overlap_share <= 0 or c.virtual_stages > 1:
        return None
    G, L = len(f.cand.uses), c.kind_layers[0]
    n = np.arange(L + 1, dtype=float)
    out = np.empty((G, L + 1))
    for g in range(G):
        steps = [c.step_s[g][r][0] for r in range(len(c.modes))]
        if f.block is not None:
            steps += [f.block.step_none_s[g][0], f.block.step_full_s[g][0]]
        back = max(0.0, max(steps) - c.forward_layer_s[g])
        ends = max(0.0, c.embedding_s[g] - c.forward_embedding_s[g])
        if pp == 1:
            ends += max(0.0, c.head_s[g] - c.forward_head_s[g])
        hidden = (n * back + ends) * (1 + 1e-12)  # an upper bound on W_0 (float sums of the same parts may differ)
        params = n * c.layer_params[0] + c.fixed_params[0]
        rest = c.allreduce_floor_s_per_param[g] * params + n * c.layer_allreduce_s(g, 0)
        whole = c.allreduce_s_per_param[g] * params * c.grad_overlap_share
        buckets = np.array([c.grad_buckets0(x) for x in params], dtype=float)
        out[g] = rest + np.maximum(whole / buckets, whole - hidden * (buckets - 1) / buckets)
    for g, use in enumerate(f.cand.uses):
        if use.stages_per_block > 1:
            out[g] = np.minimum.accumulate(out[g])
    return np.maximum(out, 0.0) * (1 - 1e-12)


HIDDEN_LEVELS = 256  # values of C tried (geometrically spaced) by the hidden-reduce floor's search (comm_at)
PREFIX_HIDE_ROUNDS = 2  # the hidden-reduce level test's rounds of what earlier stages can hide (_Caps.prefix_hide;
# round 21, timepark; 0: only max(1, s) rho M, as before)


def hidden_reduce_rows(f: Skeleton, blocks: _Blocks) -> tuple[np.ndarray, np.ndarray] | None:
    """([block stage, n] whole, [block stage] hide), or None: a floor on every stage's exposed gradient reduce under
    --overlap-grad-reduce (v = 1) at mark M, A_s >= whole - hide x M, whole = rest_s + X_s (round 10b, timeb2).

    The cost model (section 7c, exposed_grad_reduce_s) prices A_s = rest_s + max(0, X_s - sum_{j<s} W_j) for s > 0 and
    A_0 = rest_0 + max(X_0 / n_b, X_0 - W_0 (n_b - 1) / n_b) >= rest_0 + X_0 - W_0, with rest_s, X_s as in
    first_stage_reduce_s (with --overlap-param-gather the gather is out of A and its delay >= 0 is left out) and
    W_j = max(0, compute_j - F_j) <= rho compute_j <= rho T, T = max_j t_j the plan's slowest stage: rho is the largest
    share of a step that is not its forward (layers in every mode and block recomputation's, the embedding, the head:
    W_j is a sum of such parts, each at most rho x its step). So A_s >= rest_s + max(0, X_s - h_s rho T), h_s =
    max(1, s). A plan at mark M' (its stages' t_lb at most M' <= T) has iteration (m - 1) T + sum t + max A + E + max O;
    with T = M' + d and max A >= floor_s(M') - h_s rho d (floor_s(M) = rest_s + max(0, X_s - h_s rho M)), the
    iteration is at least its value with T = M' and A = floor(M') whenever m - 1 >= h_s rho for every s, which is
    checked here (None otherwise). So max A >= the least C such that the layouts at M' with every floor_s(M') <= C
    hold L layers: comm_at's C_A(M) takes the larger of that and its own. floor_s(M) falls as M grows and the layouts
    allowed grow, so the value at the largest mark is still a floor at every mark. Where the overlap is off (X = 0 in
    the cost model), None: C_A's rows already hold the whole reduce."""
    c, pp = f.c, f.cand.pp
    if c.grad_overlap_share <= 0 or c.virtual_stages > 1 or not c.forward_layer_s:
        return None
    rho = 0.0
    for g in range(len(f.cand.uses)):
        steps = [c.step_s[g][r][0] for r in range(len(c.modes))]
        if f.block is not None:
            steps += [f.block.step_none_s[g][0], f.block.step_full_s[g][0]]
        parts = [(x, c.forward_layer_s[g]) for x in steps] + [(c.embedding_s[g], c.forward_embedding_s[g]),
                                                              (c.head_s[g], c.forward_head_s[g])]
        rho = max([rho] + [1.0 - fw / x for x, fw in parts if x > 0])
    rho = min(1.0, rho * (1 + 1e-9))
    if c.m - 1 < (pp - 1 if pp > 1 else 1) * rho:
        return None
    rg = np.repeat(blocks.g, blocks.stages)
    rs = blocks.row_position
    counts = blocks.rows.shape[1]
    params = np.arange(counts)[None, :] * c.layer_params[0] + np.array(c.fixed_params)[rs][:, None]  # [row, n]
    floor = np.array(c.allreduce_floor_s_per_param)[rg][:, None]
    alpha = np.array(c.allreduce_s_per_param)[rg][:, None] * c.grad_overlap_share
    experts = np.array([c.layer_allreduce_s(g, 0) for g in range(len(f.cand.uses))])[rg][:, None]
    whole = (floor + alpha) * params + experts * np.arange(counts)[None, :]
    hide = np.maximum(rs, 1) * rho
    return whole * (1 - 1e-12), hide


def backward_rows(f: Skeleton, blocks: _Blocks) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]:
    """(back [way, block stage], step [way, block stage], ends [block stage], ends_back [block stage], rho): a stage at
    that row with n layers run one way (a recomputation mode, or block recomputation's none and full steps) computes
    n step + ends and its last backward W = max(0, compute - forward) is at most n back + ends_back (back = step -
    forward, at least 0; ends: the embedding's at stage 0, the head's at the last stage; as first_stage_reduce_s
    takes them), and at most rho x its time (hidden_reduce_rows' rho). Block recomputation's stage with k of its n
    layers recomputed computes n step_none + k (step_full - step_none) and hides n back_none + k (back_full -
    back_none): both linear in k, so every value prefix_hide takes of them lies between its k = 0 and k = n ways."""
    c, pp = f.c, f.cand.pp
    G = len(f.cand.uses)
    ways = [[c.step_s[g][r][0] for r in range(len(c.modes))] for g in range(G)]
    if f.block is not None:
        ways = [w + [f.block.step_none_s[g][0], f.block.step_full_s[g][0]] for g, w in enumerate(ways)]
    step = np.array(ways).T  # [way, g]
    back = np.maximum(step - np.array(c.forward_layer_s)[None, :], 0.0)
    rho = 0.0
    for g in range(G):
        parts = [(x, c.forward_layer_s[g]) for x in ways[g]] + [(c.embedding_s[g], c.forward_embedding_s[g]),
                                                                (c.head_s[g], c.forward_head_s[g])]
        rho = max([rho] + [1.0 - fw / x for x, fw in parts if x > 0])
    emb_back = np.maximum(np.array(c.embedding_s) - np.array(c.forward_embedding_s), 0.0)
    head_back = np.maximum(np.array(c.head_s) - np.array(c.forward_head_s), 0.0)
    rg, rs = np.repeat(blocks.g, blocks.stages), blocks.row_position
    ends = np.where(rs == 0, np.array(c.embedding_s)[rg], 0.0) + np.where(rs == pp - 1, np.array(c.head_s)[rg], 0.0)
    ends_back = np.where(rs == 0, emb_back[rg], 0.0) + np.where(rs == pp - 1, head_back[rg], 0.0)
    return back[:, rg], step[:, rg], ends, ends_back, min(1.0, rho * (1 + 1e-9))


TYPE_BOUNDARY_FLOOR = True  # marks below the least slowest stage of a plan that mixes types admit one type only
# (mixed_slowest_floor_s; round 18, costbound)


def mixed_slowest_floor_s(f: Skeleton, compute: np.ndarray | None = None) -> tuple[float, bool]:
    """(M_mix, single): every plan of the candidate that runs stages on two or more node types has a stage that takes
    at least M_mix per micro-batch (math.inf where none can: one type, or pp = 1), and single is False where no plan
    on one type alone exists (no type has the node supply for every stage, or some stage holds nothing on it). Round
    18, costbound.

    Why it holds. A plan on two or more types has a boundary j | j + 1 whose stages run on types g != h. Different
    types never share a node (costmodel.place: send_same_node is False there), and stage j pays its forward send to
    j + 1 while stage j + 1 pays its backward send to j, each at the inter-node time of the pair
    (costmodel.estimate: stage_send_s(own, neighbour); the model's rows add_p2p: e[j] >= c_inter[g][h], paid by
    both stages), v >= 1 of each. So t_j >= compute_j + pair(g, h) and t_{j+1} >= compute_{j+1} + pair(g, h), with
    pair(g, h) = min(c_inter[g][h], c_inter[h][g]) (either orientation). compute_s is at least the least value of
    _stage_times over the counts its position allows (the least mode that fits, block recomputation, the ends'
    embedding and head: the positional bound's own rows); a middle stage also pays a send the other way, at least
    the least send any stage of its type makes (inter in either orientation or intra). The slowest stage takes at
    least the larger of the two, so at least the least of that over boundaries j and pairs g != h. Nothing assumes a
    mode, pattern, optimizer setting, cp, the budget or the micro-batch count: only the stage times' parts.

    How the bound uses it (_Tables): its argument holds at any M with max_s t_lb <= M <= the plan's slowest stage
    (R, S, C and the McCormick sharpening at M bound every plan the programmes allow at M, and the hidden-reduce floor
    needs only t_lb <= M <= T), so M_mix is added to the marks; a plan that mixes types and has max t_lb < M_mix is
    bounded at M_mix. Where single is False every plan mixes types, and the marks below M_mix are dropped (no plan
    lies there). Where a single-type plan may exist they stay. Megatron 1T on mixed-pool-3k, tp 2, cp 4, 129 stages:
    128 p5 nodes, so some stage runs elsewhere, and the H100 stage beside it sends at the A100's 400 Gbit/s (2.1 ms
    against 0.26 ms): the bound's slowest stage went 18.5 -> 20.3 ms, its bound $14.94M -> about the plan's
    $16.35M."""
    c, pp, uses = f.c, f.cand.pp, f.cand.uses
    G = len(uses)
    if pp <= 1 or G <= 1 or f.most is None:
        return math.inf, True
    if compute is None:
        compute = _stage_times(f)
    with np.errstate(invalid="ignore"):
        least = np.where(np.isnan(compute).all(axis=2), np.inf, np.nanmin(np.where(np.isnan(compute), np.inf,
                                                                                    compute), axis=2))  # [s, g]
    inter = np.array(c.send_inter_s, dtype=float)
    pair = np.minimum(inter, inter.T)  # [g, h]
    other = np.minimum(np.minimum(inter.min(axis=1), inter.min(axis=0)), np.array(c.send_intra_s, dtype=float))
    middle = ((np.arange(pp) > 0) & (np.arange(pp) < pp - 1)).astype(float)  # [s]: a send the other way too
    time_at = least[:, :, None] + pair[None, :, :]  # [s, own g, other h]
    time_at = time_at + (middle[:, None] * other[None, :])[:, :, None]
    before = time_at[:-1]  # stage j on g beside j + 1 on h: [j, g, h]
    after = time_at[1:].transpose(0, 2, 1)  # stage j + 1 on h beside j on g: [j, g, h]
    both = np.maximum(before, after)
    both[:, np.arange(G), np.arange(G)] = np.inf  # the same type on both sides: not a boundary between types
    floor = float(both.min()) * (1 - 1e-12)
    most = [u.node.num_nodes_available // u.nodes_per_block for u in uses]
    single = any(-(-pp // u.stages_per_block) <= most[g] and np.isfinite(least[:, g]).all()
                 for g, u in enumerate(uses))
    return floor, single


PAIR_COVER = True  # marks below the least slowest stage with each boundary's own send and two types' supply are
# dropped (pair_cover_floor_s; round 19, supply1t)
PAIR_COVER_STATES = 4096  # the most supply states (the counted types' block counts) pair_cover_floor_s takes
PAIR_COVER_WAYS = 8  # values of M tried per pass of pair_cover_floor_s's search (one programme over all of them)
PAIR_COVER_ONLY_WIDER = True  # only where its index counts more binding types than the bound's own (_supply)
PAIR_COVER_WORK = 10_000_000  # the most (block variant x state x M) sums per pass; above it the floor is not run
PAIR_COVER_WITHIN_PP = True  # the pair-cover floors' supply index holds only the counts a pipeline can use (the
# counted blocks at most pp in all: _pair_supply; round 22, deep1t22): Megatron 1T 3k's 65/66-stage candidates, two
# types of 64 blocks, 2,209/2,272 states where the full mixed-radix index needs 4,225 (> PAIR_COVER_STATES)

_PAIR_SUPPLY: dict = {}  # (pp, ((cap, g), ...), G, limit) -> (_Supply, upto): one index a shape


def _pair_supply(f: Skeleton, limit: int) -> tuple[_Supply, np.ndarray | None]:
    """The pair-cover floors' supply index (PAIR_COVER_WITHIN_PP; _supply's otherwise, with upto None): the binding
    types counted from the scarcest, as _supply, but only the count vectors c with sum_g c[g] <= pp, while there are
    at most `limit` of them, ordered by that sum; upto[k] = how many have sum <= k (k = 0..pp). The programmes' state
    at stage s counts the blocks of the suffix from s, and every block holds at least one stage, so no suffix from s
    uses more than pp - s counted blocks: at stage s a state whose sum is over pp - s holds -inf in the full index,
    and the programmes compute only the first upto[pp - s] states there (the rest stay -inf; each one's src has a
    smaller sum, so it lies among them too). So over the same counted types the floor is the full index's, bit for
    bit; where the full index's product of (cap + 1) is over the limit and this one is not, it counts one more type
    (only relaxing less). Index 0 is no block; src[g, u] is u less one block of g, or U (the sentinel) where u holds
    none; an uncounted type leaves u as it is."""
    if not PAIR_COVER_WITHIN_PP:
        return _supply(f, limit), None
    pp, G = f.cand.pp, len(f.cand.uses)
    most = [u.node.num_nodes_available // u.nodes_per_block for u in f.cand.uses]
    caps = tuple(sorted((most[g], g) for g, u in enumerate(f.cand.uses) if most[g] * u.stages_per_block < pp))
    key = (pp, caps, G, limit)
    if key not in _PAIR_SUPPLY:
        states, taken = np.zeros((1, 0), dtype=np.int64), []  # [state, counted type]: the count vectors
        for cap, g in caps:
            grow = np.minimum(cap, pp - states.sum(axis=1)) + 1  # each vector's next count: 0..min(cap, pp - sum)
            if grow.sum() > limit:
                break
            starts = np.cumsum(grow) - grow
            nxt = np.arange(grow.sum()) - np.repeat(starts, grow)
            states, taken = np.column_stack([np.repeat(states, grow, axis=0), nxt]), taken + [g]
        sums = states.sum(axis=1)
        states, sums = states[np.argsort(sums, kind="stable")], np.sort(sums)  # stable: index 0 stays no block
        size = len(states)
        radix = np.cumprod([1] + [cap + 1 for cap, g in caps[:len(taken)]])[:len(taken)]
        codes = states @ radix if len(taken) else np.zeros(size, dtype=np.int64)
        order = np.argsort(codes)
        src = np.tile(np.arange(size), (G, 1))
        for j, g in enumerate(taken):
            less = order[np.searchsorted(codes[order], codes - radix[j]).clip(0, size - 1)]  # one block of g fewer
            src[g] = np.where(states[:, j] >= 1, less, size)
        upto = np.searchsorted(sums, np.arange(pp + 1), side="right")
        _PAIR_SUPPLY[key] = (_Supply(size=size, src=src), upto)
    return _PAIR_SUPPLY[key]


def _counted(sup: _Supply) -> int:
    """How many types a supply index counts (those whose src moves u)."""
    return int(sum((row != np.arange(sup.size)).any() for row in sup.src))


def _pair_cover_setup(f: Skeleton, blocks: _Blocks) -> tuple | None:
    """What both pair-cover floors start from (pair_cover_floor_s, pair_cover_both_floor_s), or None where they are
    not run (PAIR_COVER off, one stage or one type, no block, or no binding type counted beyond the bound's own
    index under PAIR_COVER_ONLY_WIDER): pp, the number of types G, the wider supply index, L, the inter-node sends
    [g, h], their pairs' cheaper direction, each block's first row and whether it ends the pipeline."""
    pp, G = f.cand.pp, len(f.cand.uses)
    if not PAIR_COVER or pp <= 1 or G <= 1 or len(blocks) == 0:
        return None
    base, (wide, upto) = _supply(f), _pair_supply(f, PAIR_COVER_STATES)
    if PAIR_COVER_ONLY_WIDER and _counted(wide) <= _counted(base):  # no binding type counted beyond the bound's own
        return None
    inter = np.array(f.c.send_inter_s, dtype=float)
    pair = np.minimum(inter, inter.T)  # [g, h]
    offsets = np.cumsum(blocks.stages) - blocks.stages
    ends = blocks.start + blocks.stages == pp  # the block that ends the pipeline sends nothing forward
    upto = np.full(pp + 1, wide.size) if upto is None else upto  # the states computed at stage s: upto[pp - s]
    return pp, G, wide, upto, f.c.kind_layers[0], inter, pair, offsets, ends


def _variant_caps(stacked: np.ndarray, lows: np.ndarray, v_offsets: np.ndarray, Xs: np.ndarray) -> np.ndarray:
    """[variant, X]: the most layers each block variant holds with every one of its stages' rows at most X (the
    stacked rows, [stage row, count from its low]; rows grow with the count, so the allowed counts are a prefix), or
    -inf where one of its stages holds none (the pair-cover floors' most_held)."""
    k = (stacked[:, :, None] <= Xs[None, None, :]).sum(axis=1)  # [row, X]: allowed counts from lo (NaN <= X: False)
    cap = np.add.reduceat(lows[:, None] + k - 1, v_offsets, axis=0)
    return np.where(np.minimum.reduceat(k, v_offsets, axis=0) > 0, cap, -np.inf)


def _least_covering(values: np.ndarray, most_held, L: int) -> float:
    """The pair-cover floors' search (pair_cover_floor_s, pair_cover_both_floor_s): the least of the sorted candidate
    values X at which most_held(X) (the most layers a block sequence holds with every row at most X; it grows with
    X) reaches L, found PAIR_COVER_WAYS points at a time, less 1e-12 relative; -inf where the least value already
    reaches it (no mark the bound allows is dropped), inf where none does (no plan)."""
    if most_held(values[:1])[0] >= L:
        return -math.inf
    lo, hi = 1, len(values)  # the least index whose most held reaches L lies in [lo, hi] (hi: none does)
    while lo < hi:
        points = np.unique(np.linspace(lo, hi - 1, PAIR_COVER_WAYS).round().astype(np.int64))
        ok = most_held(values[points]) >= L
        hi = int(points[ok].min()) if ok.any() else hi
        lo = max(lo, int(points[~ok].max()) + 1) if (~ok).any() else lo
        lo = min(lo, hi)
    return float(values[lo]) * (1 - 1e-12) if lo < len(values) else math.inf


PAIR_COVER_RING = True  # pair_cover_floor_s's most_held in a ring of tables filled again and one buffer for each
# block's sums (_most_held_ring; round 23, front1t): the same sums and max, the same values bit for bit, without a
# fresh array per stage and per block variant (the allocator's page faults were most of its time on 1T 3k's front)


def _most_held_ring(cap: np.ndarray, nX: int, by_start: list, wide: _Supply, upto: np.ndarray, pp: int, G: int,
                    U: int) -> np.ndarray:
    """most_held's programme (pair_cover_floor_s): H[s][X, h, u] = the most layers the blocks from stage s on hold,
    the first of them on h, using the counted blocks u; each stage's table is computed as there (the same variants in
    the same order, each cap + the next table's rows src[g, u] of its type, max into the rows of g), only kept in a
    ring of 1 + the longest block's tables (stage s reads s + q) refilled with -inf, laid out [h, X, u] (one type's
    rows contiguous), and a block's variants for every type after it summed at once into one buffer (max is exact and
    order-free). tests/test_positional_rent_sliced.py compares it with the list of tables bit for bit."""
    ring = 1 + max((q for row in by_start for _, _, q, _ in row), default=1)
    tables = [np.full((G, nX, U + 1), -np.inf) for _ in range(ring)]  # [h, X, u]: one type's rows contiguous
    tables[pp % ring][:, :, 0] = 0.0  # past the last stage: no block used (the type "after" it is free)
    got = np.empty((G, nX, U + 1))
    caps = cap[:, :, None]  # [variant, X, 1]
    every = list(range(G))
    grouped = []  # [s] -> [(g, q, [variant], [next type])]: one block's variants, one per type after it
    for row in by_start:
        one: dict = {}
        for i, g, q, h in row:
            one.setdefault((g, q), ([], []))
            one[(g, q)][0].append(i)
            one[(g, q)][1].append(max(h, 0))
        grouped.append([(g, q, np.array(ii), hh) for (g, q), (ii, hh) in one.items()])
    for s in range(pp - 1, -1, -1):
        best = tables[s % ring]
        best.fill(-np.inf)
        n = int(upto[pp - s])  # the states a suffix from s can reach (the others stay -inf)
        for g, q, ii, hh in grouped[s]:
            nxt = tables[(s + q) % ring]
            if hh == every:  # every type after it: the rows of every h at once, the max over h
                part = np.take(nxt, wide.src[g][:n], axis=2, out=got[:, :, :n])
                np.add(caps[ii], part, out=part)  # the blocks after, starting on h, one g fewer; plus this one
                np.maximum(best[g, :, :n], part.max(axis=0), out=best[g, :, :n])
                continue
            for i, h in zip(ii.tolist(), hh):
                part = np.take(nxt[h], wide.src[g][:n], axis=1, out=got[0, :, :n])
                np.add(caps[i], part, out=part)
                np.maximum(best[g, :, :n], part, out=best[g, :, :n])
    return tables[0][:, :, :U].max(axis=(0, 2))


def pair_cover_floor_s(f: Skeleton, blocks: _Blocks, start: float = -math.inf, at: float | None = None) -> float:
    """M_pair: every plan of the candidate has a stage that takes at least M_pair per micro-batch (-inf where the
    search is not run: one type, pp = 1, no binding type that the bound's own supply index leaves out, or more work
    per pass than PAIR_COVER_WORK). Round 19, supply1t.

    The rows. A block of type g whose last stage j is followed by a block of type h pays, on stage j, the forward
    send across nodes of the pair: at least pair(g, h) = min(c_inter[g][h], c_inter[h][g]) (costmodel.estimate:
    stage_send_s(own, next); the model's rows add_p2p: e[j] >= c_inter[g][h], paid by stage j). The bound's rows
    (_blocks) charge it the least over every next type, inter_out[g]; here the row of the block followed by h charges
    max(inter_out[g], pair(g, h)). Every other part of the row is the bound's own t_lb (the least mode that fits at
    the position, block recomputation, the ends, the send in at its least over the types before): so every stage of
    a plan takes at least its row, and its slowest stage at least X = max over its stages of these rows.

    The programme. Over blocks in pipeline order from the last, with the type of the block that follows as part of
    the state (so each block's last stage pays the send to the type that really follows it) and the node supply of
    the binding types counted (_supply with PAIR_COVER_STATES states: two of three types of 128 nodes at four nodes a
    stage, where the bound's index counts one), the most layers blocks hold with every row <= X, each stage from its
    least count (lo) up. The plan's own blocks are such a sequence at its X, holding L layers, so the most at X is at
    least L. The most grows with X (a larger X allows every count a smaller one does), so the least X among the
    rows' values at which it reaches L, M_pair, is at most the plan's X, hence at most its slowest stage. No mode,
    pattern, optimizer setting, cp, budget or micro-batch count enters but through the bound's own rows.

    How the bound uses it (_Tables): as M_mix (mixed_slowest_floor_s): the bound's argument holds at any M with
    max_s t_lb <= M <= the plan's slowest stage, so M_pair joins the marks and every mark below it is dropped (a plan
    whose max t_lb lies below it is bounded at M_pair). Megatron 1T on mixed-pool-3k, tp 4, dp 4, cp 2, 66 stages:
    at most 32 stages of each type, so two or more A10G stages (100 Gbit/s); the stage beside one pays about 8.4 ms of
    send on top of compute its neighbours cannot take over."""
    setup = _pair_cover_setup(f, blocks)
    if setup is None:
        return -math.inf
    pp, G, wide, upto, L, inter, pair, offsets, ends = setup
    inter_out = inter.min(axis=1)
    # variant h of block b: its rows with the last stage's send out at the pair (b's type, h); one variant (h = 0,
    # the same rows) for a block that ends the pipeline
    variants = [(b, h) for b in range(len(blocks)) for h in (range(G) if not ends[b] else (0,))]
    rows = []
    for b, h in variants:
        r = blocks.rows[offsets[b]:offsets[b] + blocks.stages[b]].copy()
        if not ends[b]:
            g = int(blocks.g[b])
            r[-1] += max(pair[g, h] - inter_out[g], 0.0)
        rows.append(r)
    stacked = np.concatenate(rows)
    lows = np.concatenate([blocks.row_low[offsets[b]:offsets[b] + blocks.stages[b]] for b, _ in variants])
    v_offsets = np.cumsum([blocks.stages[b] for b, _ in variants]) - np.array([blocks.stages[b] for b, _ in variants])
    values = np.unique(stacked[~np.isnan(stacked)])
    values = values[values >= start]  # below the least mark the bound allows, a floor changes nothing
    if len(values) == 0:
        return -math.inf
    U = wide.size
    work = int(sum(upto[pp - blocks.start[b]] for b, _ in variants))  # states computed (len(variants) x U without
    if work * PAIR_COVER_WAYS > PAIR_COVER_WORK:  # PAIR_COVER_WITHIN_PP): its time is not the bound's to spend (no
        return -math.inf  # deadline inside _Tables): Megatron 1T 3k's 66 stages are 5.2 M a pass, about 20 ms
    by_start: list[list[tuple[int, int, int, int]]] = [[] for _ in range(pp)]  # s -> (variant, g, q, next type)
    for i, (b, h) in enumerate(variants):
        by_start[int(blocks.start[b])].append((i, int(blocks.g[b]), int(blocks.stages[b]), -1 if ends[b] else h))

    def most_held(Xs: np.ndarray) -> np.ndarray:
        cap = _variant_caps(stacked, lows, v_offsets, Xs)  # [variant, X]
        nX = len(Xs)
        if PAIR_COVER_RING:
            return _most_held_ring(cap, nX, by_start, wide, upto, pp, G, U)
        H: list[np.ndarray | None] = [None] * (pp + 1)
        H[pp] = np.full((nX, G, U + 1), -np.inf)
        H[pp][:, :, 0] = 0.0  # past the last stage: no block used (the type "after" it is free)
        for s in range(pp - 1, -1, -1):
            best = np.full((nX, G, U + 1), -np.inf)
            n = upto[pp - s]  # the states a suffix from s can reach (the others stay -inf)
            for i, g, q, h in by_start[s]:
                got = H[s + q][:, max(h, 0), wide.src[g][:n]]  # [X, u]: the blocks after, starting on h, one g fewer
                np.maximum(best[:, g, :n], cap[i][:, None] + got, out=best[:, g, :n])
            H[s] = best
        return H[0][:, :, :U].max(axis=(1, 2))

    if at is not None:  # PAIR_COVER_DEFER's test: -inf where M_pair <= at (its cover at `at` reaches L), else inf
        return -math.inf if most_held(np.array([at]))[0] >= L else math.inf
    return _least_covering(values, most_held, L)


PAIR_COVER_BOTH = False  # M_pair also with both sends of a block: the send out of its last stage to the type that
# follows AND the send back of its first stage to the type before (pair_cover_both_floor_s; round 20, deep1t). Off:
# it lifts some candidates (1T 3k cost<=D's 65-stage one 16.63M -> 17.47M) but none that holds a row at 10 s, and its
# full searches (0.3-0.45 s a candidate) cost 1T 3k time<=B's loop most of its share (docs/solver.md, round 20)
PAIR_COVER_LAZY = True  # M_pair is computed only when a positional_bound call's structural floors (with the rent of
# the largest mark) lie below its cutoff, not for every candidate whose tables are built (_Tables.apply_pair_cover)
PAIR_COVER_BOTH_WORK = 30_000_000  # the most (block variant x state x M) sums per pass of the symmetric programme
_PAIR_SWITCHES = ("PAIR_COVER", "PAIR_COVER_STATES", "PAIR_COVER_WAYS", "PAIR_COVER_ONLY_WIDER", "PAIR_COVER_WORK",
                  "PAIR_COVER_BOTH", "PAIR_COVER_BOTH_WORK",
                  "PAIR_COVER_WITHIN_PP")  # kept by _Tables as it is built, used when M_pair is applied


SEND_VARIANTS_AT_ONCE = True  # _send_variants' rows by one gather and two masked additions (round 24, sum1t): the same
# floats as the loop over variants (0.02 s a candidate on Megatron 1T 3k's deep ones, set up for cost_pair_lift)


def _send_variants(f: Skeleton, blocks: _Blocks) -> tuple:
    """The block variants of the both-sends floors (pair_cover_both_floor_s, ends_class_floor_s, budget_pair_lift):
    variant (b, p, h) is block b preceded by type p (-1: it starts the pipeline) and followed by type h (-1: it ends
    it), its rows with its first stage's send back at the pair (b's type, p) and its last stage's send out at (b's
    type, h), each above the type's cheapest inter-node send. (variants, their rows stacked, those rows' lows, each
    variant's number of rows, each block's first row)."""
    G, pp = len(f.cand.uses), f.cand.pp
    inter = np.array(f.c.send_inter_s, dtype=float)
    pair, inter_out, inter_in = np.minimum(inter, inter.T), inter.min(axis=1), inter.min(axis=0)
    offsets = np.cumsum(blocks.stages) - blocks.stages
    ends, starts = blocks.start + blocks.stages == pp, blocks.start == 0
    variants = [(b, p, h) for b in range(len(blocks)) for p in ((-1,) if starts[b] else range(G))
                for h in ((-1,) if ends[b] else range(G))]
    if SEND_VARIANTS_AT_ONCE:  # round 24 (sum1t): the same rows and additions, every variant at once
        vb, vp, vh = (np.array([v[x] for v in variants], dtype=np.int64).reshape(-1) for x in range(3))
        sizes = blocks.stages[vb]
        starts = np.cumsum(sizes) - sizes
        at = np.repeat(offsets[vb] - starts, sizes) + np.arange(int(sizes.sum()))  # each variant's block rows
        stacked = blocks.rows[at].copy()
        t = blocks.g[vb]
        back, out = vp >= 0, vh >= 0
        stacked[starts[back]] += np.maximum(pair[t[back], vp[back]] - inter_in[t[back]], 0.0)[:, None]
        stacked[(starts + sizes - 1)[out]] += np.maximum(pair[t[out], vh[out]] - inter_out[t[out]], 0.0)[:, None]
        return variants, stacked, blocks.row_low[at], sizes, offsets
    rows = []
    for b, p, h in variants:
        r = blocks.rows[offsets[b]:offsets[b] + blocks.stages[b]].copy()
        t = int(blocks.g[b])
        if p >= 0:
            r[0] += max(pair[t, p] - inter_in[t], 0.0)
        if h >= 0:
            r[-1] += max(pair[t, h] - inter_out[t], 0.0)
        rows.append(r)
    lows = np.concatenate([blocks.row_low[offsets[b]:offsets[b] + blocks.stages[b]] for b, _, _ in variants])
    sizes = np.array([blocks.stages[b] for b, _, _ in variants])
    return variants, np.concatenate(rows), lows, sizes, offsets


def pair_cover_both_floor_s(f: Skeleton, blocks: _Blocks, start: float = -math.inf) -> float:
    """M_pair with both sends of every block charged (round 20, deep1t): every plan of the candidate has a stage that
    takes at least this per micro-batch (-inf where the search is not run, as pair_cover_floor_s; math.inf where no
    block sequence holds L layers at any value: no plan).

    The rows. As pair_cover_floor_s, a block of type t whose last stage is followed by a block of type h charges that
    stage's send out at max(inter_out[t], pair(t, h)); here also a block of type t preceded by a block of type p
    charges its first stage's send back at max(inter_in[t], pair(t, p)), pair(t, p) = min(c_inter[t][p],
    c_inter[p][t]). Why it holds: stage i pays its backward send to stage i - 1 (costmodel.estimate: backward x
    stage_send_s(own, previous), backward >= 1 at v = 1 for every stage but the first; the model's rows add_p2p), and
    two blocks are two sets of whole nodes, so across a block boundary that send is an inter-node one between the
    pair, c_inter[t][p] >= pair(t, p); the bound's row already charges it inter_in[t] = min_h c_inter[h][t] <=
    c_inter[t][t] <= c_inter[t][p] (the slower NIC of the two, and the sender's latency: p2p_send_s), so the larger of
    the two is at most the send paid. The forward send of the block's last stage is pair_cover_floor_s's argument.
    Every other part of a row is the bound's own t_lb. A stage that is both (a block of one stage, q = 1) pays both
    sends, and its row both excesses: the backward and forward sends are two terms of its p2p time.

    The programme. Over blocks in pipeline order from the last, with state (the type t of the block that starts at
    s, the type p it was charged as its predecessor, the counted block numbers u): a block of type t' ending at s
    (before that suffix) is allowed only at state (t, p = t'), and its own variant is charged for its own
    predecessor p' (none at stage 0) and its follower t (none at the last stage); the suffix from s starting at
    stage 0 has no predecessor. A plan's own blocks, each with the variant of its real neighbours, are such a
    sequence at its X = max over its stages of these rows, holding L layers; so, as in pair_cover_floor_s, the
    least X among the rows' values at which the most held reaches L is at most the plan's X, hence at most its
    slowest stage. The most held grows with X. No mode, pattern, optimizer setting, cp, budget or micro-batch count
    enters but through the bound's own rows, so the floor holds for every one of them. Used by _Tables exactly as
    pair_cover_floor_s's value (the marks below it dropped)."""
    setup = _pair_cover_setup(f, blocks)
    if setup is None:
        return -math.inf
    pp, G, wide, upto, L, inter, pair, offsets, ends = setup
    variants, stacked, lows, sizes, _ = _send_variants(f, blocks)
    v_offsets = np.cumsum(sizes) - sizes
    values = np.unique(stacked[~np.isnan(stacked)])
    values = values[values >= start]  # below the least mark the bound allows, a floor changes nothing
    if len(values) == 0:
        return -math.inf
    U = wide.size
    work = int(sum(upto[pp - blocks.start[b]] for b, _, _ in variants))  # states computed (len(variants) x U
    if work * PAIR_COVER_WAYS > PAIR_COVER_BOTH_WORK:  # without PAIR_COVER_WITHIN_PP): no deadline inside _Tables
        return -math.inf
    by_start: list[list[tuple[int, int, int, int, int]]] = [[] for _ in range(pp)]  # s -> (variant, t, q, p, h)
    for i, (b, p, h) in enumerate(variants):
        by_start[int(blocks.start[b])].append((i, int(blocks.g[b]), int(blocks.stages[b]), p, h))

    def most_held(Xs: np.ndarray) -> np.ndarray:
        cap = _variant_caps(stacked, lows, v_offsets, Xs)  # [variant, X]
        nX = len(Xs)
        done = np.full((nX, U + 1), -np.inf)  # past the last stage: no block used
        done[:, 0] = 0.0
        H: list[np.ndarray | None] = [None] * (pp + 1)  # H[s][X, t, p, u]: the suffix from s starts with t, after p
        for s in range(pp - 1, -1, -1):
            best = np.full((nX, G, G, U + 1), -np.inf)
            n = upto[pp - s]  # the states a suffix from s can reach (the others stay -inf)
            for i, t, q, p, h in by_start[s]:
                after = done if h < 0 else H[s + q][:, h, t, :]  # [X, u]: the suffix after it expects t before it
                got = after[:, wide.src[t][:n]]  # [X, u]: one block of t fewer
                slot = best[:, t, max(p, 0), :n]
                np.maximum(slot, cap[i][:, None] + got, out=slot)
            H[s] = best
        return H[0][:, :, :, :U].max(axis=(1, 2, 3))

    return _least_covering(values, most_held, L)


ENDS_CLASS_FLOOR = True  # minimizing time: a floor on the iteration of each class of plans by its end types, with
# both sends of every block (ends_class_floor_s; round 22, park530)
ENDS_CLASS_WAYS = 2  # values of the floor tried per pass of its search (one programme over all of them x the classes)
ENDS_CLASS_WORK = 200_000_000  # the most (block variant x state x column) sums per pass; above it the floor is not run
ENDS_CLASS_STATES = 256  # its supply index (_supply's limit): the bound's own (the pair-cover floors take 4096)
ENDS_CLASS_LAST_SUMS = True  # its base's sum by the last block's type (one sum programme a type at the largest mark)
ENDS_CLASS_SPAN = 0.03  # ... spread evenly over the cutoff's gap, at most this share of the walk's bound
ENDS_CLASS_MARKS = 8  # the floor's base also at the first marks B (round 23, end530): the plans with X_plan <= B
# take S(B) and C(B) there, those above the last B the largest mark's (ends_class_base); 0: the largest mark's only.
# Round 24 (time530): 3 -> 8 with ENDS_CLASS_LIVE_SUMS (GPT-3 175B 8k's (2, 32, 1, 16, cp 4) candidate needs its
# 8th mark below the cutoff's reach; alone neither switch lifts it)
ENDS_CLASS_MARKS_MAX = True  # round 23 (lead): the larger of the one-interval floor (ENDS_CLASS_MARKS = 0's) and the
# marks' floor, both valid: the marks' floor alone lowered 130 of 39,524 bounds (end530's bench/ends_marks.py,
# off_heavy) and broke round 17's audit property that the last-end floor never lowers the bound (--hypothesis-seed=25)
ENDS_CLASS_MARKS_LAST_SUMS = False  # ... with S(B) by the last block's type (G programmes); off: S(B) - le[gL] (one;
# the same bound on 530B 3k's pp 28, 0.1 s less on a candidate the floor does not lift)
ENDS_CLASS_LIVE_SUMS = True  # round 24 (time530): each interval's sum of stage times at the largest mark at or
# below its upper end whose walk floor lies within the cutoff (_live_sum): a plan's own mark is one of those
ENDS_CLASS_LIVE_SCAN = 32  # the most marks _live_sum looks at a call (past it: the next mark down's S, a floor too)
ENDS_CLASS_LEVELS = 4  # with the overlap's hidden-reduce test: the reduce levels above the bound's own A, geometric up
# to the cutoff's (ends_class_floor_s; 0: the test is not taken, the sends and the ends only)


def _hidden_fit(caps: "_Caps", Ms: np.ndarray, Cs: np.ndarray) -> np.ndarray:
    """[block stage, n, column] the counts _Caps.both's hidden-reduce test (which=2, with its prefix-hide rounds)
    allows at (Ms, Cs) pairwise, before the caps are summed (ends_class_floor_s)."""
    timed = caps.times[:, :, None] <= Ms[None, None, :]
    hide = caps.hide[:, None] * Ms[None, :]
    fit = timed & (caps.whole[:, :, None] - hide[:, None, :] <= Cs[None, None, :])
    for _ in range(caps.prefix_rounds if caps.back is not None else 0):
        hide = np.minimum(hide, caps.prefix_hide(fit, Ms))
        fit = timed & (caps.whole[:, :, None] - hide[:, None, :] <= Cs[None, None, :])
    return fit


def ends_class_floor_s(f: Skeleton, blocks: _Blocks, slope: float, base: np.ndarray, above: float,
                       limit: float, deadline: float | None = None, hidden: tuple | None = None,
                       uppers: np.ndarray | None = None) -> float:
    """A floor V on every plan's iteration, given per class of end types k = (g0, gL) (the first block's type, the
    last block's) a floor base[k] on everything in its iteration but (m - 1) x its slowest stage (inf: not counted):
    the least V = slope x X + base[k] over the classes k and the rows' values X at which a block sequence that
    starts on g0 and ends on gL, with both sends of every block charged (pair_cover_both_floor_s' rows), holds L
    layers with every row at most X. Only V in (above, limit] is searched: -inf where `above` already has such a
    sequence (the floor does not exceed it), `limit` where none does up to it. Round 22, park530.

    Why it holds. A plan of class k with slowest stage T has X_plan = max over its stages of these rows <= T
    (pair_cover_both_floor_s), and its own blocks, with their real neighbours' variants, are a sequence of class k
    holding L layers at X_plan; so its iteration >= slope x T + base[k] >= slope x X_plan + base[k] >= the least such
    value over the classes. At a value V the test takes, for each class, the largest row value X_k <= (V - base[k])
    / slope (rounded up: a larger X only allows more); where no class holds L layers at its X_k, every plan's
    X_plan > X_k, so its iteration > V. The most held grows with X, so the test grows with V and the least value
    that passes it (over the finite set slope x X + base[k]) is the floor; the search (ENDS_CLASS_WAYS values a
    pass) rests only on the values that failed. -inf where it is not run: pp = 1, one type, no block, more work per
    pass than ENDS_CLASS_WORK.

    With hidden = (caps, a0, levels) (the overlap on: the bound's _Caps with hidden_reduce_rows' tables, a0[g0] the
    reduce that base[g0, :] already counts, levels C_0 < ... the reduce levels tried): a plan's iteration is (m - 1)
    X_plan + C^ + sum t + E + max O with C^ = max A + (m - 1) (T - X_plan) = max_s A~_s at mark X_plan (>= its every
    t_lb), so where C^ <= C_j every stage's count lies within the hidden-reduce test's caps at (X_plan, C_j) (round
    21's induction, _Caps.both which=2; its rows are ANDed with these), and where C^ > C_(j-1) the iteration is at
    least slope x X_plan + base[k] - a0[g0] + max(a0[g0], C_(j-1)) (max O >= C_O as base counts, and max A >= a0
    too). Each plan lies in one level (C_(-1) = -inf, the last level without the test), so the least over the
    classes and the levels of the least such value at which the class holds L layers within level j's test bounds
    it: the test at V passes where some (class, level) does.

    With uppers = B_1 < ... < B_I (the last inf; round 23, end530: ENDS_CLASS_MARKS), base is [I, g0, gL] (and
    hidden's a0 [I, g0], levels [I, j]): base[i] bounds the plans whose X_plan lies in (B_(i-1), B_i] (B_0 = -inf),
    ends_class_base at the mark B_i. Each plan lies in one interval; at V the test of interval i's columns takes X <=
    min((V - base) / slope, B_i) and fails without a programme where that is at most B_(i-1) (every plan of the
    interval has X_plan > B_(i-1)); a plan of interval i with X_plan <= (V - base) / slope passes at its own X_plan
    as above."""
    pp, G = f.cand.pp, len(f.cand.uses)
    if pp <= 1 or G <= 1 or len(blocks) == 0 or not np.isfinite(base).any():
        return -math.inf
    wide, L = _supply(f, ENDS_CLASS_STATES), f.c.kind_layers[0]
    variants, stacked, lows, sizes, offsets = _send_variants(f, blocks)  # pair_cover_both_floor_s' rows
    v_offsets = np.cumsum(sizes) - sizes
    own = np.concatenate([np.arange(offsets[b], offsets[b] + blocks.stages[b]) for b, _, _ in variants])  # its row
    values = np.unique(stacked[~np.isnan(stacked)])
    U = wide.size
    finite = np.isfinite(base.reshape((-1, G, G))).any(axis=0)
    classes = [(g0, gl) for g0 in range(G) for gl in range(G) if finite[g0, gl]]
    if len(values) == 0 or len(variants) * U * ENDS_CLASS_WAYS * G * G > ENDS_CLASS_WORK:
        return -math.inf
    by_start: list[list[tuple[int, int, int, int, int]]] = [[] for _ in range(pp)]  # s -> (variant, t, q, p, h)
    for i, (b, p, h) in enumerate(variants):
        by_start[int(blocks.start[b])].append((i, int(blocks.g[b]), int(blocks.stages[b]), p, h))
    reach = int(sizes.max())

    def held(Xs: np.ndarray, g0: np.ndarray, last: np.ndarray, Cs: np.ndarray) -> np.ndarray:
        """[column] the most layers a sequence from g0 to one of the types `last` ([column, g]) allows holds with
        every row at most Xs and, at a finite Cs, within the hidden-reduce test at (Xs, Cs) (columns pairwise)."""
        if hidden is None or not np.isfinite(Cs).any():
            cap = _variant_caps(stacked, lows, v_offsets, Xs)  # [variant, column]
        else:
            fit = _hidden_fit(hidden[0], Xs, Cs)[own]  # [variant row, n, column]; an infinite C: the times only
            k = ((stacked[:, :, None] <= Xs[None, None, :]) & fit[:, :stacked.shape[1]]).sum(axis=1)
            cap = np.add.reduceat(lows[:, None] + k - 1, v_offsets, axis=0)
            cap = np.where(np.minimum.reduceat(k, v_offsets, axis=0) > 0, cap, -np.inf)
        nX = len(Xs)
        H: dict[int, np.ndarray] = {}  # H[s][column, t, p, u]: the suffix from s starts with t, after p
        for s in range(pp - 1, -1, -1):
            best = np.full((nX, G, G, U + 1), -np.inf)
            for i, t, q, p, h in by_start[s]:
                if h < 0:  # it ends the pipeline: only in the columns whose class may end on t
                    got = np.where(last[:, t][:, None] & (wide.src[t] == 0)[None, :], 0.0, -np.inf)
                else:
                    got = H[s + q][:, h, t, :][:, wide.src[t]]  # [column, u]: one block of t fewer
                slot = best[:, t, max(p, 0), :U]
                np.maximum(slot, cap[i][:, None] + got, out=slot)
            H[s] = best
            H.pop(s + reach + 1, None)
        return H[0][np.arange(nX), g0, 0, :U].max(axis=1)

    # the intervals of X_plan (round 23, end530): (B_(i-1), B_i], each with its own base (and a0, levels)
    bases = base.reshape((-1, G, G))
    ups = np.array([np.inf]) if uppers is None else np.asarray(uppers, dtype=float)
    a0s = None if hidden is None else np.asarray(hidden[1], dtype=float).reshape((len(bases), G))
    lvs = None if hidden is None else np.asarray(hidden[2], dtype=float).reshape((len(bases), -1))
    cols = []  # (g0, its last types, C_j, base, B_i, B_(i-1))
    for i, bi in enumerate(bases):
        # the classes with one first type and the same base share a column (the same test: any of their last types)
        groups: dict[tuple[int, float], np.ndarray] = {}
        for g0, gl in classes:
            if np.isfinite(bi[g0, gl]):
                groups.setdefault((g0, float(bi[g0, gl])), np.zeros(G, dtype=bool))[gl] = True
        # columns: (group, level): C_j (inf: no test) and the base with max(a0, C_(j-1)) in place of a0
        levels = np.append(lvs[i], np.inf) if hidden is not None else np.array([np.inf])
        below = np.append(-np.inf, levels[:-1])
        low = ups[i - 1] if i else -np.inf
        cols += [(g, lasts, lv, b + max(0.0, lo - (a0s[i][g] if hidden is not None else 0.0)), ups[i], low)
                 for (g, b), lasts in groups.items() for lv, lo in zip(levels, below)]
    if not cols:
        return limit  # no interval has a class with a finite base: no plan
    k0 = np.array([g for g, *_ in cols])
    kl = np.array([lasts for _, lasts, *_ in cols])
    kc = np.array([col[2] for col in cols])
    kb = np.array([col[3] for col in cols])
    kup = np.array([col[4] for col in cols])
    klow = np.array([col[5] for col in cols])

    def passes(Vs: np.ndarray) -> np.ndarray:
        """[V] whether some class holds L layers at its X_k(V)."""
        _on_time(deadline)
        x = (Vs[:, None] - kb[None, :]) / slope  # [V, class]
        x = np.minimum(x * (1 + 1e-9) + 1e-15, kup[None, :])  # rounded up; within the column's interval
        at = np.searchsorted(values, x, side="right") - 1  # the largest value <= x
        live = (at >= 0) & (x > klow[None, :])
        out = np.zeros(len(Vs), dtype=bool)
        if live.any():
            v_ix, c_ix = np.nonzero(live)
            got = held(values[at[v_ix, c_ix]], k0[c_ix], kl[c_ix], kc[c_ix]) >= L
            np.logical_or.at(out, v_ix, got)
        return out

    if passes(np.array([above]))[0]:
        return -math.inf
    inside = (values[:, None] > klow[None, :]) & (values[:, None] <= kup[None, :])  # a column's own X_plan
    cands = np.unique((slope * values[:, None] + kb[None, :])[inside])
    cands = cands[(cands > above) & (cands <= limit)]
    lo, hi = 0, len(cands)  # the least index that passes lies in [lo, hi] (hi: none does)
    while lo < hi:
        points = np.unique(np.linspace(lo, hi - 1, ENDS_CLASS_WAYS).round().astype(np.int64))
        ok = passes(cands[points])
        hi = int(points[ok].min()) if ok.any() else hi
        lo = max(lo, int(points[~ok].max()) + 1) if (~ok).any() else lo
        lo = min(lo, hi)
    return float(cands[lo]) * (1 - 1e-12) if lo < len(cands) else limit


def _live_sum(tab: "_Tables", upper: float, slope: float, comm_s: float, emb_s: float, limit: float,
              least_s: float = -math.inf) -> float:
    """A floor on sum t + le[gL] over the plans with X_plan <= upper whose iteration is at most `limit` (round 24,
    time530; ENDS_CLASS_LIVE_SUMS): S(M*) at M* the largest possible mark <= upper at which the walk's own floor
    max(slope x M + S(M) + max(comm_s, C(M) + emb_s), least_s) is at most `limit`; inf where no mark is.

    Why it holds. A plan's mark M' (its largest t_lb) is at most X_plan <= upper, and the least possible mark M_p >=
    M' is one of the marks at or below upper (upper is a possible mark, or inf). Its slowest stage is at least M_p
    (M_p = M' or the pair cover's / the mixed floor M_p that every plan's slowest stage reaches), its layout is
    allowed at M_p, so its iteration is at least the walk's floor at M_p (positional_bound: S(M), C(M) and E at a
    mark) and its sum t + le[gL] at least S(M_p). A plan of iteration <= limit has its M_p among the marks whose
    floor is <= limit, so M_p <= M* and S(M_p) >= S(M*) (S never grows with M). The scan stops after
    ENDS_CLASS_LIVE_SCAN marks: then the next mark down, above every mark not looked at, gives the floor."""
    ix = np.nonzero(tab.possible)[0]
    if slope > 0:  # above this mark even S at the largest mark and comm_s pass the limit
        upper = min(upper, (limit - float(tab.total_at(ix[-1:])[0]) - comm_s) / slope)
    ix = ix[tab.marks[ix] <= upper][::-1]  # descending
    if len(ix) == 0:
        return math.inf
    look = ix[:ENDS_CLASS_LIVE_SCAN]
    sums = tab.total_at(look)
    rough = np.maximum(slope * tab.marks[look] + sums + comm_s, least_s)
    for r in range(len(look)):
        if rough[r] > limit:
            continue
        if max(rough[r], slope * tab.marks[look[r]] + sums[r] + float(tab.comm_at(look[r:r + 1])[0]) + emb_s) <= limit:
            return float(sums[r])
    return float(tab.total_at(ix[len(look):len(look) + 1])[0]) if len(ix) > len(look) else math.inf


def ends_class_base(f: Skeleton, tab: "_Tables", top: np.ndarray, comm_s: float,
                    emb_s: float, below: np.ndarray | None = None,
                    sums: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """[g0, gL] -> a floor on every plan's iteration less (m - 1) x its slowest stage, for the plans whose first
    block runs on g0 and last on gL (ends_class_floor_s' base; round 22, park530). From the bound's own floors at
    the largest mark (each is a floor at every mark: positional_bound): S_top = S(M_top) with the last block's
    tied-embedding excess le[gL] (embedding_last_rows), comm_s >= max A + max O + emb_s less E's part, C_O(M_top)
    <= max O. A plan of the class has sum t + le[gL] >= S_top (its own blocks are a layout the programme allows),
    E >= E(g0, gL) = the pair's all-reduce (across nodes; within one node only where one block of g0 = gL holds the
    pipeline: embedding_floor_s' rows), and, under the overlap, max A >= stage 0's reduce floor on g0 at its least
    over the layer counts (first_stage_reduce_s), so max A + max O >= comm_s - emb_s + max(0, h0 - shift), shift =
    comm_s - emb_s - C_O (positional_bound's sum_and_comm). So iteration - (m - 1) T >= S_top - le[gL] + comm_s +
    (E(g0, gL) - emb_s) + max(0, h0[g0] - shift). Also a0[g0] = shift + max(0, h0[g0] - shift): what the base
    counts of max A (with C_O unknown, taken as 0, of max A + max O), for ends_class_floor_s' levels.

    With below (marks under the largest, ascending; round 23, end530): one row per mark B of them, [B, g0, gL] and
    [B, g0], each at B with comm = max(comm_s, C(B) + emb_s) and C_O(B): a floor for the plans whose layout the
    programmes allow at B (X_plan <= B: every t_lb of the plan is at most its both-sends row), their sum of stage
    times at least S(B) on gL, max O >= C_O(B), and max A + (m - 1) (T - B)^+ at least C(B)'s reduce part (comm_at:
    the hidden-reduce test at B holds the plan's counts at that level, round 21's larger-mark case), with (T - B)^+
    <= T - X_plan paid by the iteration's (m - 1) T beside the floor's (m - 1) X_plan.

    sums (one per row: the top, or each mark of below; round 24, time530): another floor on the rows' sum t +
    le[gL] (_live_sum's), taken where larger."""
    c, G = f.c, len(f.cand.uses)
    biggest = top[0]
    one = below is None
    top = top if one else np.asarray(below)
    last = tab.last if tab.last is not None else np.zeros(G)
    by_last = ENDS_CLASS_LAST_SUMS and (one or ENDS_CLASS_MARKS_LAST_SUMS)
    if not by_last or one:
        s_top = tab.total_at(top)[:, None]
    if by_last:  # S_top by the last block's type: the sum programme with only gL allowed to end
        caps = tab.caps(top)
        s_top = np.stack([_least_sum(tab.groups, tab.sup, caps, tab.pp, tab.L, deadline=tab.deadline,
                                     last_extra=np.where(np.arange(G) == g, last, np.inf))[0] for g in range(G)],
                         axis=1)  # [mark, gL]
        s_top = np.where(np.isfinite(s_top), s_top, np.inf)
    if sums is not None:
        s_top = np.maximum(s_top, np.asarray(sums, dtype=float)[:, None])
    pair = np.zeros((G, G))
    if c.emb_inter_s:
        pair = np.array(c.emb_inter_s, dtype=float)
        for g in range(G):
            if c.emb_same_possible[g]:
                pair[g, g] = min(pair[g, g], c.emb_intra_s[g])
        pair = np.maximum(pair * (1 - 1e-12) - emb_s, 0.0)  # as embedding_last_rows: the same rounding margin
    c_o = float(tab.comm_o[biggest]) if not np.isnan(tab.comm_o[biggest]) else 0.0
    comm = np.full(len(top), comm_s)
    c_os = np.full(len(top), c_o)
    if not one:  # the marks below the top: their own C(B) and C_O(B) (the top's as given, as before)
        comm = np.maximum(comm_s, tab.comm_at(top) + emb_s)
        c_os = np.maximum(c_o, np.nan_to_num(tab.comm_o[top], nan=0.0))
    shift = np.maximum(comm - emb_s - c_os, 0.0)  # [mark]
    head = np.zeros((len(top), G))
    if tab.first is not None:
        head = np.maximum(tab.first.min(axis=1)[None, :] - shift[:, None], 0.0)
    base = s_top[:, None, :] - last[None, None, :] + comm[:, None, None] + pair[None] + head[:, :, None]
    a0 = shift[:, None] + head
    return (base[0], a0[0]) if one else (base, a0)


class _Tables:
    """The budget-free work of one candidate's bound, kept on its skeleton between solves (a what-if sweep bounds the
    same candidate under many budgets): its blocks and caps, and R(M), C(M), S(M) and the combined programme's value
    at every mark asked for so far (NaN: not yet)."""

    def __init__(self, f: Skeleton):
        pp, self.L = f.cand.pp, f.c.kind_layers[0]
        self.pp = pp
        self.blocks = _blocks(f)
        self.groups = _groups(self.blocks, pp)
        self.caps_of = _Caps(self.blocks, pp)
        hidden = hidden_reduce_rows(f, self.blocks)
        self.hidden_marks = None  # the values of C the hidden-reduce floor's search tries (comm_at), or None
        if hidden is not None and len(self.blocks):
            self.caps_of.whole, self.caps_of.hide = hidden
            *back, self.caps_of.rho = backward_rows(f, self.blocks)
            self.caps_of.back = tuple(back)
            self.caps_of.kappa = (f.c.m - 1) / max(self.pp - 1, 1)
            self.caps_of.row_g = np.repeat(self.blocks.g, self.blocks.stages)
            self.caps_of.slots = np.array([u.node.num_nodes_available // u.nodes_per_block * u.stages_per_block
                                           for u in f.cand.uses], dtype=np.int64)
            top = float(np.nanmax(np.where(np.isnan(self.blocks.rows), np.nan, hidden[0]), initial=0.0))
            if top > 0:
                self.hidden_marks = np.concatenate([[0.0], np.geomspace(top * 1e-4, top, HIDDEN_LEVELS)])
        self.sup = _supply(f)
        allowed = ~np.isnan(self.blocks.rows)
        self.marks = np.unique(self.blocks.rows[allowed])
        mixed, single = mixed_slowest_floor_s(f) if TYPE_BOUNDARY_FLOOR else (math.inf, True)
        if math.isfinite(mixed) and len(self.marks):  # plans that mix types: bounded at M_mix at least (also where
            self.marks = np.unique(np.append(self.marks, mixed))  # it lies above every t_lb: then it is the top)
        self.comm_marks = tuple(np.unique(rows[allowed]) for rows in self.blocks.comm_rows)
        _, per_stage = self.caps_of.both(self.marks)
        # A mark where some stage holds nothing on any type, or the stages cannot hold L layers, has no plan.
        self.possible = (per_stage >= 0).all(axis=0) & (np.maximum(per_stage, 0).sum(axis=0) >= self.L)
        if not single:  # every plan mixes types: none below M_mix (mixed_slowest_floor_s)
            self.possible &= self.marks >= mixed
        self.mixed_floor = mixed if not single else -math.inf  # every plan's slowest stage is at least this
        self.pair_pending = PAIR_COVER  # M_pair not applied yet (apply_pair_cover; lazily under PAIR_COVER_LAZY;
        # the switches as the tables are built decide, as for the other floors)
        self.pair_switches = {name: globals()[name] for name in _PAIR_SWITCHES}
        n = len(self.marks)
        self.rent, self.comm, self.total = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
        self.comm_o = np.full(n, np.nan)  # C_O(M) alone (the optimizer step's part of comm)
        self.first = first_stage_reduce_s(f)  # [g, n] stage 0's reduce floor under the overlap, or None
        self.last = embedding_last_rows(f)  # [g] the last block's tied-embedding excess, or None (round 17)
        self.total_first: dict[tuple[int, float], float] = {}  # (mark, shift) -> S with stage 0's excess over shift
        self.combined: dict[tuple[int, float], float] = {}  # (mark, rent weight) -> least sum + weight x rent
        self.sequences: dict[tuple[int, float | None], tuple[int, ...] | None] = {}  # (mark, weight) -> node types
        self.deadline: float | None = None  # set by each positional_bound call: the programmes raise OutOfTime
        self.pair_rent: tuple | None = None  # _pair_rent_setup's variants (() where it has none), built when asked
        if not PAIR_COVER_LAZY:
            self.apply_pair_cover(f)

    def apply_pair_cover(self, f: Skeleton) -> None:
        """M_pair (pair_cover_floor_s, or pair_cover_both_floor_s under PAIR_COVER_BOTH) joins the marks and every
        mark below it is dropped: every plan's slowest stage is at least M_pair (round 19). Once per candidate; the
        values kept at the marks so far move with their marks (the inserted mark has none yet), so the kept work
        stays the same values at the same M (round 20, deep1t: run lazily from positional_bound)."""
        if not self.pair_pending:
            return
        self.pair_pending = False
        least = self.marks[self.possible][:1]
        now = {name: globals()[name] for name in _PAIR_SWITCHES}
        globals().update(self.pair_switches)  # the switches as the tables were built (a lazy call comes later)
        try:
            paired = pair_cover_floor_s(f, self.blocks, float(least[0])) if len(least) else -math.inf
            if PAIR_COVER_BOTH and len(least) and paired < math.inf:
                # both sends: its rows are at least the one-sided ones, so its cover is at most theirs and its floor
                # at least M_pair: searched from there (one programme at one value where it does not raise it)
                both = pair_cover_both_floor_s(f, self.blocks, max(float(least[0]), paired))
                paired = max(paired, both)
        finally:
            globals().update(now)
        if paired == -math.inf:
            return
        if math.isfinite(paired):
            at = int(np.searchsorted(self.marks, paired))
            if at == len(self.marks) or self.marks[at] != paired:  # a new mark at index at: later ones move up one
                self.marks = np.insert(self.marks, at, paired)
                for name in ("rent", "comm", "total", "comm_o"):
                    setattr(self, name, np.insert(getattr(self, name), at, np.nan))
                for name in ("total_first", "combined", "sequences"):
                    setattr(self, name, {(k[0] + (k[0] >= at),) + tuple(k[1:]): v
                                         for k, v in getattr(self, name).items()})
        _, per_stage = self.caps_of.both(self.marks)
        self.possible = ((per_stage >= 0).all(axis=0) & (np.maximum(per_stage, 0).sum(axis=0) >= self.L)
                         & (self.marks >= paired) & (self.marks >= self.mixed_floor))

    def pair_cover_within(self, f: Skeleton, at: float) -> bool:
        """Whether M_pair (apply_pair_cover's floor, under the switches as the tables were built) is at most `at`:
        one programme at one value (PAIR_COVER_DEFER), where the floor's search takes several passes of
        PAIR_COVER_WAYS. True where the floor is not run (it would be -inf)."""
        least = self.marks[self.possible][:1]
        now = {name: globals()[name] for name in _PAIR_SWITCHES}
        globals().update(self.pair_switches)
        try:
            return not len(least) or pair_cover_floor_s(f, self.blocks, float(least[0]), at) == -math.inf
        finally:
            globals().update(now)

    def caps(self, ix: np.ndarray) -> np.ndarray:
        """[block, mark] caps at these marks (recomputed: kept for every mark they would take the most memory)"""
        return self.caps_of.at(self.marks[ix])

    def rent_at(self, ix: np.ndarray) -> np.ndarray:
        """R(M) at these marks."""
        miss = ix[np.isnan(self.rent[ix])]
        if len(miss):
            self.rent[miss] = _least_rent(self.groups, self.sup, self.caps(miss), self.pp, self.L, self.deadline)
        return self.rent[ix]

    def comm_at(self, ix: np.ndarray) -> np.ndarray:
        """C(M) = C_A(M) + C_O(M) at these marks (where R(M) is finite). C_A(M) is the least C such that blocks whose
        stages stay within M and whose all-reduce stays within C still hold L layers (by bisection over the values C
        takes, _most_cover deciding); C_O(M) the same for the optimizer step. Every plan at M has A at least
        its largest stage all-reduce, which is at least C_A(M), and O >= C_O(M) likewise."""
        miss = ix[np.isnan(self.comm[ix])]
        if len(miss):
            Ms = self.marks[miss]
            comm = np.zeros(len(Ms))  # kept only once both searches are done (OutOfTime may stop them)
            parts = []
            for which, cm in enumerate(self.comm_marks):
                parts.append(cm[self._least_comm(Ms, cm, which)])
                comm += parts[-1]
            if self.hidden_marks is not None:
                # max A >= the largest level at which the layouts within M with every hidden-reduce floor under it
                # do not hold L layers (hidden_reduce_rows): the value below the least one that does. Searched only
                # at the marks where the layouts do not hold them at C_A itself (elsewhere it cannot raise C_A).
                caps = self.caps_of.at(Ms, parts[0], 2)
                low = np.nonzero(_most_cover(self.groups, self.sup, caps, self.pp, self.deadline) < self.L)[0]
                if len(low):
                    at = self._least_comm(Ms[low], self.hidden_marks, 2)
                    comm[low] += np.maximum(self.hidden_marks[np.maximum(at - 1, 0)] - parts[0][low], 0.0)
            self.comm[miss] = comm
            self.comm_o[miss] = parts[1]
        return self.comm[ix]

    def _least_comm(self, Ms: np.ndarray, cm: np.ndarray, which: int, ways: int = COMM_WAYS) -> np.ndarray:
        """[M] -> the least index i into the sorted values cm such that blocks within M and with every stage's
        all-reduce (which=0) or optimizer step (1) within cm[i] hold L layers (len(cm) - 1 where none does: the last
        value allows every count). The cover only grows with C, so a search that tries `ways` values of C per M in
        one vectorized programme narrows [lo, hi] about ways + 1 times per pass (a bisection is ways = 1)."""
        lo, hi = np.zeros(len(Ms), dtype=np.int64), np.full(len(Ms), len(cm) - 1)
        steps = np.arange(1, ways + 1)
        while (open_ := lo < hi).any():
            rows = np.nonzero(open_)[0]
            span = hi[rows] - lo[rows]
            points = lo[rows, None] + span[:, None] * steps[None, :] // (ways + 1)  # [row, way], in lo..hi - 1
            caps = self.caps_of.at(np.repeat(Ms[rows], ways), cm[points.ravel()], which)
            ok = (_most_cover(self.groups, self.sup, caps, self.pp, self.deadline) >= self.L).reshape(points.shape)
            hi[rows] = np.where(ok, points, hi[rows, None]).min(axis=1)
            lo[rows] = np.maximum(lo[rows], np.where(ok, -1, points).max(axis=1) + 1)
        return lo

    def total_at(self, ix: np.ndarray) -> np.ndarray:
        """S(M) at these marks."""
        miss = ix[np.isnan(self.total[ix])]
        if len(miss):
            self.total[miss] = _least_sum(self.groups, self.sup, self.caps(miss), self.pp, self.L,
                                          deadline=self.deadline, last_extra=self.last)[0]
        return self.total[ix]

    def combined_at(self, ix: np.ndarray, weight: np.ndarray, shift: np.ndarray | None = None) -> np.ndarray:
        """min over blocks of (sum of stage times + weight x rent) at these marks; with shift (and the overlap on),
        plus stage 0's reduce floor in excess of shift (first_extra)."""
        if shift is None or self.first is None:
            keys = [(int(i), float(w)) for i, w in zip(ix, weight)]
        else:
            keys = [(int(i), float(w), float(x)) for i, w, x in zip(ix, weight, shift)]
        miss = [k for k in keys if k not in self.combined]
        if miss:
            rows = np.array([k[0] for k in miss], dtype=np.int64)
            extra = self.first_extra(np.array([k[2] for k in miss])) if len(keys[0]) == 3 else None
            got, _ = _least_sum(self.groups, self.sup, self.caps(rows), self.pp, self.L,
                                np.array([k[1] for k in miss]), deadline=self.deadline, first_extra=extra,
                                last_extra=self.last)
            self.combined.update(zip(miss, got.tolist()))
        return np.array([self.combined[k] for k in keys])

    def first_extra(self, shift: np.ndarray) -> np.ndarray:
        """[g, n, M] -> max(0, stage 0's reduce floor on g with n layers - shift[M])."""
        return np.maximum(self.first[:, :, None] - shift[None, None, :], 0.0)

    def total_first_at(self, ix: np.ndarray, shift: np.ndarray) -> np.ndarray:
        """min over blocks of (sum of stage times + max(0, stage 0's reduce floor - shift)) at these marks (the
        overlap on: self.first is not None)."""
        keys = [(int(i), float(x)) for i, x in zip(ix, shift)]
        miss = [k for k in keys if k not in self.total_first]
        if miss:
            rows = np.array([i for i, _ in miss], dtype=np.int64)
            got, _ = _least_sum(self.groups, self.sup, self.caps(rows), self.pp, self.L, deadline=self.deadline,
                                first_extra=self.first_extra(np.array([x for _, x in miss])), last_extra=self.last)
            self.total_first.update(zip(miss, got.tolist()))
        return np.array([self.total_first[k] for k in keys])

    def sequence(self, i: int, weight: float | None) -> tuple[int, ...] | None:
        """The node types of the combined (weight) or sum (None) programme's best blocks at mark i."""
        if (i, weight) not in self.sequences and SEQUENCE_TRACED:
            self.sequences[(i, weight)] = _traced_sequence(
                self.groups, self.sup, self.caps(np.array([i])), self.pp, self.L,
                None if weight is None else np.array([weight]), self.last, self.deadline)
        if (i, weight) not in self.sequences:
            _, pick = _least_sum(self.groups, self.sup, self.caps(np.array([i])), self.pp, self.L,
                                 None if weight is None else np.array([weight]), choices=True,
                                 deadline=self.deadline, last_extra=self.last)
            self.sequences[(i, weight)] = _sequence(pick, self.sup, self.pp, self.L)
        return self.sequences[(i, weight)]


def budget_time_lift(tab: _Tables, ix: np.ndarray, K: np.ndarray, iteration: np.ndarray, shift: np.ndarray | None,
                     b: float, weights: tuple[float, ...] | None = None) -> np.ndarray:
    """Minimizing time under a cost budget: a lower bound on the iteration of every plan at each mark (ix) that meets
    the budget, at least `iteration`. K[M] = (m - 1) M + comm (the bound's floor on every term of the iteration but
    the sum of stage times), iteration[M] = T0 >= K + S(M) (a floor on every plan's iteration at M), b = the budget x
    slack / (iterations per hour): a plan that meets it has rent x T <= b (cost = iterations / 3600 x rent x T).

    The bound at a mark took the least time and the least rent of its layouts separately (R(M) and S(M)); where the
    fastest layouts are the dear ones the budget never entered its time (issue 14, item 3; round 18 found Megatron
    1T on mixed-pool-3k held by the node supply instead, docs/solver.md "Round 18"). For a rent weight
    lam >= 0 let Phi(lam) = min over the layouts the programme allows at M of (sum + lam x rent) (combined_at, the
    McCormick bound's programme, with the same stage-0 shift). A plan X at M with rent r and iteration T has a
    layout whose programme sum s satisfies T >= K + s and s + lam r >= Phi(lam), and r <= b / T, so

        T >= K + s >= K + Phi(lam) - lam r >= K + Phi(lam) - lam b / T,

    i.e. h(T) = T^2 - (K + Phi) T + lam b >= 0: T lies at or below the smaller root t1 or at or above the larger t2.
    X also has T >= T0. Where T0 > t1 (h(T0) < 0: T0 lies between the roots), T <= t1 is impossible and T >= t2.
    So max(T0, t2) over the weights where T0 > t1 bounds every plan at M that meets the budget, whatever its
    mode, pattern, kind, degree or types: nothing is assumed beyond what the McCormick bound rests on (the
    programme's sum of the plan's own layout is below its sum of stage times and K below the rest of its iteration,
    its rent is the layout's rent). Any weights are valid; they are tried as multiples of T0^2 / b (the weight at
    which the budget's rent b / T0 and the sum trade at par), all in one programme with a row per (mark, weight).
    Float care: t1 is raised and t2 lowered by a relative 1e-9 before they are used."""
    ws = np.asarray(LAGRANGE_WEIGHTS if weights is None else weights, dtype=float)
    n, W = len(ix), len(ws)
    lam = (iteration ** 2 / b)[:, None] * ws[None, :]  # [mark, weight]
    phi = tab.combined_at(np.repeat(ix, W), lam.ravel(),
                          None if shift is None else np.repeat(shift, W)).reshape(n, W)
    a = K[:, None] + phi
    disc = a * a - 4.0 * lam * b
    root = np.sqrt(np.maximum(disc, 0.0))
    t1, t2 = (a - root) / 2 * (1 + 1e-9), (a + root) / 2 * (1 - 1e-9)
    usable = np.isfinite(a) & (disc > 0) & (iteration[:, None] > t1)
    return np.maximum(iteration, np.where(usable, t2, -np.inf).max(axis=1))


BUDGET_PAIR_RENT = True  # time under a cost budget: a refined mark whose layouts within each boundary's own send
# (pair_cover_floor_s' rows) all break the budget is lifted to the slowest stage they need (budget_pair_lift; round 22)
PAIR_RENT_SPAN = 0.25  # the thresholds X tried lie in (M, M + this x T / (m - 1)]: the lift is at most this x T
PAIR_RENT_WAYS = 12  # at most this many thresholds X per mark (one programme over all of them)
PAIR_RENT_WORK = 4_000_000  # the most table entries (thresholds x G^2 x supply states x layers x stages) per
# programme call: the (mark, X) pairs are taken in batches within it, and a candidate whose one pair exceeds it is
# not lifted
PAIR_RENT_CALLS = 4  # the thresholds per mark are cut (evenly) so that a lift makes at most about this many calls


def _pair_rent_setup(f: Skeleton, tab: _Tables) -> tuple | None:
    """pair_cover_both_floor_s' block variants for budget_pair_lift, once per candidate (kept on the tables): variant
    (b, p, h) has block b's rows with its first stage's send back at the pair (p, b's type) and its last stage's send
    out at the pair (b's type, h) (p = -1: b starts the pipeline; h = -1: b ends it). (by_start: s -> [(variant, its
    type, stages, p, h)], stacked rows, their lows, variant offsets, block of each variant, sorted row values), or
    None with one type or one stage."""
    if tab.pair_rent is not None:
        return tab.pair_rent or None
    blocks, pp, G = tab.blocks, tab.pp, len(f.cand.uses)
    if pp <= 1 or G <= 1 or len(blocks) == 0:
        tab.pair_rent = ()
        return None
    variants, stacked, lows, sizes, _ = _send_variants(f, blocks)
    by_start: list[list[tuple[int, int, int, int, int]]] = [[] for _ in range(pp)]
    for i, (b, p, h) in enumerate(variants):
        by_start[int(blocks.start[b])].append((i, int(blocks.g[b]), int(blocks.stages[b]), p, h))
    tab.pair_rent = (by_start, stacked, lows, np.cumsum(sizes) - sizes, np.array([b for b, _, _ in variants]),
                     np.unique(stacked[~np.isnan(stacked)]))
    return tab.pair_rent


def _pair_least_rent(tab: _Tables, setup: tuple, Ms: np.ndarray, Xs: np.ndarray) -> np.ndarray:
    """[k] -> the least rent of block sequences within node supply (the bound's own index) that hold L layers with
    every stage within the bound's caps at Ms[k] and every variant row (each block's sends at the pairs with the
    types really before and after it) at most Xs[k]: _least_rent's programme with the types of the block before and
    of the block itself in its state. inf where none does."""
    by_start, stacked, lows, v_offsets, of_block, _ = setup
    sup, pp, L = tab.sup, tab.pp, tab.L
    n, U, G = len(Ms), tab.sup.size, len(sup.src)
    cap = np.minimum(_variant_caps(stacked, lows, v_offsets, Xs), tab.caps_of.at(Ms)[of_block])  # [variant, k]
    cap = np.where(np.isfinite(cap), cap, -1).astype(np.int64)
    rent = tab.blocks.rent_usd_per_hour
    cols = np.arange(L + 1)
    # F[s][k, p, t, u, l]: least rent of the blocks from stage s on, the block at s of type t, the one before of
    # type p, using the supply u, holding l more layers; past the last stage (s = pp) every (p, t) ends at u = l = 0
    F: list[np.ndarray | None] = [None] * (pp + 1)
    F[pp] = np.full((n, G, G, U + 1, L + 1), np.inf)
    F[pp][:, :, :, 0, 0] = 0.0
    for s in range(pp - 1, -1, -1):
        _on_time(tab.deadline)
        best = np.full((n, G, G, U + 1, L + 1), np.inf)
        for i, t, q, p, h in by_start[s]:
            c_i = cap[i]  # [k]
            if (c_i < 0).all():
                continue
            nxt = F[s + q][:, t, max(h, 0)][:, sup.src[t], :]  # [k, u, l]: after it a block of h, one t fewer
            left = np.maximum(cols[None, :] - np.maximum(c_i, 0)[:, None], 0)  # [k, l]
            got = np.take_along_axis(nxt, np.broadcast_to(left[:, None, :], nxt.shape), axis=2)
            got = np.where((c_i >= 0)[:, None, None], got + rent[of_block[i]], np.inf)
            np.minimum(best[:, max(p, 0), t, :U, :], got, out=best[:, max(p, 0), t, :U, :])
        F[s] = best
    return F[0][:, 0, :, :U, L].min(axis=(1, 2))


def budget_pair_lift(f: Skeleton, tab: _Tables, ix: np.ndarray, lifted: np.ndarray, plain_of, b: float) -> np.ndarray:
    """Minimizing time under a cost budget: [mark] a floor on the iteration of every plan at mark ix that meets the
    budget, at least `lifted` (budget_time_lift's). plain_of(rows)[r] = (m - 1) M + a floor on the rest of the
    iteration that needs no share of the slowest stage's excess over M (S(M) + comm_lower_s + E's floor: no
    hidden-reduce level).

    The bound's rows charge each stage its least sends over every neighbouring type, so at a mark M the rent
    programme lets a cheap, slow type in beside a fast one at no cost in M; but the stages on both sides of that
    boundary send across the pair's slower network (pair_cover_both_floor_s: a block preceded by type p pays
    pair(p, g) on its first stage, one followed by h pays pair(g, h) on its last; every stage of a plan takes at
    least its variant row). Megatron 76B on mixed-pool-3k, tp 1, dp 14, cp 4, 16 stages: all-H100 at 4 layers a
    stage breaks B by 3.4 %, and an H100 stage beside an A100 one sends 1.5 ms slower, so no layout with an A100
    holds 60 layers at the bound's mark. For a plan P at M (its rows within the caps at M, its slowest stage
    T_s >= M) let M' = the largest of its variant rows (<= T_s). For any X_k > M either M' <= X_k: P's blocks lie
    within the caps at M and every variant row within X_k, so its rent is at least R_k (_pair_least_rent); or
    M' > X_k: T_s > X_k, and its iteration is at least (m - 1) X_k + its sum of stage times + A + E + O >= plain +
    (m - 1)(X_k - M) (the hidden-reduce level of the bound's comm rests on (m - 1)(T_s - M), which is why plain
    leaves it out). Where R_k x lifted breaks the budget (rent x T <= b, T >= lifted), every plan that meets it is of
    the second kind: T >= max(lifted, plain + (m - 1)(X_k - M)). Taken at the largest such X_k (R_k falls as X_k
    grows); valid for any X_k. The thresholds are the variant rows' values in (M, M + PAIR_RENT_SPAN x lifted /
    (m - 1)], each taken a relative 1e-12 below (more plans on the second side), at most PAIR_RENT_WAYS."""
    setup = _pair_rent_setup(f, tab)
    m = f.c.m
    if setup is None or m <= 1:
        return lifted
    values = setup[-1]
    Ms = tab.marks[ix]
    G = len(f.cand.uses)
    one = G * G * (tab.sup.size + 1) * (tab.L + 1) * (tab.pp + 1)  # table entries of one (mark, X) pair
    if one > PAIR_RENT_WORK:
        return lifted
    ways = min(PAIR_RENT_WAYS, max(1, PAIR_RENT_CALLS * (PAIR_RENT_WORK // one) // len(ix)))
    pairs = []  # (mark row, threshold)
    for j in range(len(ix)):
        xs = values[(values > Ms[j]) & (values <= Ms[j] + PAIR_RENT_SPAN * lifted[j] / (m - 1))] * (1 - 1e-12)
        xs = xs[xs > Ms[j]]
        if len(xs) > ways:
            xs = xs[np.unique(np.linspace(0, len(xs) - 1, ways).round().astype(np.int64))]
        pairs += [(j, x) for x in xs.tolist()]
    if not pairs:
        return lifted
    rows, xs = np.array([p[0] for p in pairs], dtype=np.int64), np.array([p[1] for p in pairs])
    step = max(1, PAIR_RENT_WORK // one)
    rent = np.concatenate([_pair_least_rent(tab, setup, Ms[rows[k:k + step]], xs[k:k + step])
                           for k in range(0, len(rows), step)])
    empty = rent * lifted[rows] > b * (1 + 1e-9)
    if not empty.any():
        return lifted
    reach = np.full(len(ix), -np.inf)  # the largest X_k whose layouts all break the budget, per mark
    np.maximum.at(reach, rows[empty], xs[empty])
    hit = np.nonzero(np.isfinite(reach))[0]
    out = lifted.copy()
    out[hit] = np.maximum(lifted[hit], plain_of(hit) + (m - 1) * (reach[hit] - Ms[hit]))
    return out


COST_PAIR_SUM = True  # minimizing cost: a refined mark still below the cutoff after McCormick is lifted by the layouts
# within each boundary's own send, with their own sum of stage times (cost_pair_lift; round 24, sum1t)
COST_PAIR_WAYS = 4  # at most this many thresholds X per mark (one programme over all of them)
COST_PAIR_WORK = 6_000_000  # the most table entries ((mark, X) rows x G^2 x supply states x layers) per stage of one
# programme call: a candidate whose one row exceeds it is not lifted


PAIR_SUM_RING = True  # _pair_least_sum in a ring of tables refilled, each stage only over the supply states and layer
# counts a suffix can reach, each (block, next type, count) sum once for every type before it whose cap allows it
# (_pair_least_sum_ring): the same sums and min, the same values bit for bit


def _pair_least_sum_ring(f: Skeleton, tab: _Tables, setup: tuple, Ms: np.ndarray, Xs: np.ndarray,
                         weight: np.ndarray, shift: np.ndarray | None) -> np.ndarray:
    """_pair_least_sum's programme, the same sums per + F[s + q][k, t, h, src[t, u], l - n] (per = the block's terms
    at count n, one float as there) min'd into F[s][k, p, t, u, l] in another order (min is exact): a row k and a
    block variant whose cap at k is below n adds inf there and is skipped; the states past _reach and the layers past
    the suffix's top (top[s] = min(L, max over the variants at s of top[s + q] + their largest cap), top[pp] = 0) stay
    inf as they would be computed (every sum there reads an inf); the tables in a ring of 1 + the longest block (stage
    s reads only s + q), refilled with inf; each (block, next type, count, row)'s sum computed once and min'd into the
    rows of every type before it whose variant's cap allows the count."""
    by_start, stacked, lows, v_offsets, of_block, _ = setup
    blocks, sup, pp, L = tab.blocks, tab.sup, tab.pp, tab.L
    n, U, G = len(Ms), tab.sup.size, len(sup.src)
    inter = np.array(f.c.send_inter_s, dtype=float)
    inter_out = inter.min(axis=1)
    bound_extra = inter + inter.T - 2 * inter_out[:, None]
    cap = np.minimum(_variant_caps(stacked, lows, v_offsets, Xs), tab.caps_of.at(Ms)[of_block])  # [variant, k]
    cap = np.where(np.isfinite(cap), cap, -1).astype(np.int64)
    first = None if shift is None or tab.first is None else tab.first_extra(shift)  # [g, n, k]
    ring = 1 + max((int(q) for vs in by_start for _, _, q, _, _ in vs), default=1)
    tables = [np.full((n, G, G, U + 1, L + 1), np.inf) for _ in range(ring)]
    tables[pp % ring][:, :, :, 0, 0] = 0.0
    scratch = np.empty((U + 1, L + 1))
    top = np.zeros(pp + 1, dtype=np.int64)
    caps_list = cap.tolist()
    for s in range(pp - 1, -1, -1):
        _on_time(tab.deadline)
        best = tables[s % ring]
        best.fill(np.inf)
        nU = _reach(sup, pp, s)
        groups: dict[tuple[int, int], list[tuple[int, int]]] = {}  # (block, next type) -> [(variant, type before)]
        ahead = 0
        for i, t, q, p, h in by_start[s]:
            most = max(caps_list[i])
            if most < 0:
                continue
            ahead = max(ahead, min(L, int(top[s + q]) + most))
            groups.setdefault((int(of_block[i]), h), []).append((i, p))
        top[s] = ahead
        w = ahead + 1
        for (b, h), members in groups.items():
            t, q = int(blocks.g[b]), int(blocks.stages[b])
            after = tables[(s + q) % ring]
            low = int(blocks.low[b])
            for k in range(n):
                nxt = after[k, t, max(h, 0)][sup.src[t, :nU], :w]  # [u, l]: after it a block of h, one t fewer
                base = (blocks.fixed_s[b] + weight[k] * blocks.rent_usd_per_hour[b]
                        + (bound_extra[t, h] if h >= 0 else 0.0))
                if tab.last is not None and h < 0:
                    base = base + tab.last[t]
                most = max(caps_list[i][k] for i, _ in members)
                for cnt in range(low, min(L, most, w - 1) + 1):
                    per = base + blocks.step_s[b] * cnt
                    if first is not None and s == 0:
                        per = per + first[t, cnt, k]
                    got = np.add(nxt[:, :w - cnt], per, out=scratch[:nU, :w - cnt])
                    for i, p in members:
                        if caps_list[i][k] >= cnt:
                            out = best[k, max(p, 0), t, :nU, cnt:w]
                            np.minimum(out, got, out=out)
    return tables[0][:, 0, :, :U, L].min(axis=(1, 2))


def _pair_least_sum(f: Skeleton, tab: _Tables, setup: tuple, Ms: np.ndarray, Xs: np.ndarray, weight: np.ndarray,
                    shift: np.ndarray | None) -> np.ndarray:
    """[k] -> min over the block sequences within node supply (the bound's own index) that hold L layers with every
    stage within the bound's caps at Ms[k] and every variant row at most Xs[k] (_pair_least_rent's layouts) of their
    sum of stage times + weight[k] x rent: _least_sum's combined programme with the types of the block before and of
    the block itself in its state, and each boundary's two sends at its own pair: a block of type t followed by one
    of type h charges the boundary c_inter[t][h] + c_inter[h][t] (the forward send of t's last stage to h and the
    backward send of h's first stage to t, costmodel.estimate: two blocks are two sets of whole nodes) where
    _least_sum's fixed_s charges 2 inter_out[t] (fixed_s + (that - 2 inter_out[t]), so the charge rests on the
    boundary's own sends alone). With shift (the overlap on), stage 0's reduce floor in excess of shift[k] rides on
    the first block (first_extra), and the last block carries the tied embedding's excess (tab.last), as in
    combined_at."""
    if PAIR_SUM_RING:
        return _pair_least_sum_ring(f, tab, setup, Ms, Xs, weight, shift)
    by_start, stacked, lows, v_offsets, of_block, _ = setup
    blocks, sup, pp, L = tab.blocks, tab.sup, tab.pp, tab.L
    n, U, G = len(Ms), tab.sup.size, len(sup.src)
    inter = np.array(f.c.send_inter_s, dtype=float)
    inter_out = inter.min(axis=1)
    bound_extra = inter + inter.T - 2 * inter_out[:, None]  # [t, h]: the boundary's own sends less _least_sum's
    cap = np.minimum(_variant_caps(stacked, lows, v_offsets, Xs), tab.caps_of.at(Ms)[of_block])  # [variant, k]
    cap = np.where(np.isfinite(cap), cap, -1).astype(np.int64)
    first = None if shift is None or tab.first is None else tab.first_extra(shift)  # [g, n, k]
    F: list[np.ndarray | None] = [None] * (pp + 1)
    F[pp] = np.full((n, G, G, U + 1, L + 1), np.inf)
    F[pp][:, :, :, 0, 0] = 0.0
    for s in range(pp - 1, -1, -1):
        _on_time(tab.deadline)
        best = np.full((n, G, G, U + 1, L + 1), np.inf)
        for i, t, q, p, h in by_start[s]:
            c_i = cap[i]  # [k]
            if (c_i < 0).all():
                continue
            b = int(of_block[i])
            base = blocks.fixed_s[b] + weight * blocks.rent_usd_per_hour[b] + (bound_extra[t, h] if h >= 0 else 0.0)
            if tab.last is not None and h < 0:
                base = base + tab.last[t]
            nxt = F[s + q][:, t, max(h, 0)][:, sup.src[t], :]  # [k, u, l]: after it a block of h, one t fewer
            out = best[:, max(p, 0), t, :U, :]
            for cnt in range(int(blocks.low[b]), min(L, int(c_i.max())) + 1):
                per = np.where(c_i >= cnt, base + blocks.step_s[b] * cnt, np.inf)  # [k]
                if first is not None and s == 0:
                    per = per + first[t, cnt, :]
                np.minimum(out[:, :, cnt:], per[:, None, None] + nxt[:, :, :L + 1 - cnt], out=out[:, :, cnt:])
        F[s] = best
    return F[0][:, 0, :, :U, L].min(axis=(1, 2))


def cost_pair_lift(f: Skeleton, tab: _Tables, ix: np.ndarray, value: np.ndarray, rent: np.ndarray,
                   iteration: np.ndarray, K: np.ndarray, shift: np.ndarray | None, plain: np.ndarray,
                   cutoff: float, per_hour: float) -> np.ndarray:
    """Minimizing cost: [mark] a lower bound on the cost of every plan at mark ix, at least `value` (the McCormick
    bound's). rent[M] = R(M), iteration[M] = T0 (the bound's floor on every plan's iteration at M), K[M] = (m - 1) M +
    comm (T >= K + the programme's sum of the plan's own layout), plain[M] = (m - 1) M + S(M) + the comm floor that
    needs no share of the slowest stage's excess over M (budget_pair_lift's plain_of).

    The McCormick bound's combined programme charges each stage its cheapest sends over every neighbouring type, so
    at M it lets a cheap type in beside a dear one at no cost in M or in the sum (Megatron 1T 3k: a 3-layer p5 stage
    after a p4d -> p5 boundary, whose send back crosses the A100's NIC, docs/solver.md round 23, front1t). For a plan
    P at M let M' = the largest of its variant rows (each block's sends at the pairs with its real neighbours,
    pair_cover_both_floor_s; every stage takes at least its variant row, so its slowest stage T_s >= M'). For any
    X > M either (a) M' <= X: P's layout lies within the caps at M with every variant row within X, its rent is r >=
    R(M), its iteration T >= T0 and T >= K + s_P, where s_P is the pair programme's sum of P's own layout (each
    boundary's two sends at its own pair; the sum of stage times is at least that), so (r - R)(T - T0) >= 0 gives r
    T >= R T + T0 r - R T0 >= R (K + s_P + (T0 / R) r) - R T0 >= R (K + Phi_X) - R T0 with Phi_X =
    _pair_least_sum at weight T0 / R (the McCormick bound's own weight); or (b) M' > X: T_s > X, so T >= plain + (m -
    1)(X - M) (and T >= T0), r >= R, r T >= R max(T0, plain + (m - 1)(X - M)). Every plan at M is one of the two, so
    its cost is at least the smaller, for each X; the bound takes the largest over the X tried. The thresholds: the
    variant rows' values in (M, X_c], X_c the least of them where (b) alone reaches the cutoff (at larger X (b) only
    grows past it and (a) falls), taken a relative 1e-12 below (more plans on side (b)), at most COST_PAIR_WAYS,
    evenly spread with X_c kept. Float care: both sides lowered by a relative 1e-9."""
    setup = _pair_rent_setup(f, tab)
    m = f.c.m
    if setup is None or m <= 1 or not len(ix):
        return value
    values = setup[-1]
    Ms = tab.marks[ix]
    G = len(f.cand.uses)
    one = G * G * (tab.sup.size + 1) * (tab.L + 1)  # table entries of one (mark, X) row per stage
    if one > COST_PAIR_WORK:
        return value
    weight = iteration / rent
    plain_comm = plain - (m - 1) * Ms - tab.total_at(ix)  # the comm floor in plain
    phi_b = tab.combined_at(ix, weight)  # the McCormick programme without stage 0's excess

    def side_b(rows: np.ndarray, xs: np.ndarray) -> np.ndarray:
        R, T0 = rent[rows], iteration[rows]
        return per_hour * np.maximum(R * np.maximum(T0, plain[rows] + (m - 1) * (xs - Ms[rows])),
                                     R * ((m - 1) * xs + plain_comm[rows] + phi_b[rows]) - R * T0) * (1 - 1e-9)

    pairs = []  # (mark row, threshold)
    for j in range(len(ix)):
        xs = values[values > Ms[j]] * (1 - 1e-12)
        xs = xs[xs > Ms[j]]
        b = side_b(np.full(len(xs), j), xs)  # grows with X; side (a) falls with X: only X where (b) lifts count,
        xs = xs[b > value[j]][:int(np.searchsorted(b[b > value[j]], cutoff)) + 1]  # up to the first at the cutoff
        if len(xs) > COST_PAIR_WAYS:
            xs = xs[np.unique(np.linspace(0, len(xs) - 1, COST_PAIR_WAYS).round().astype(np.int64))]
        pairs += [(j, x) for x in xs.tolist()]
    if not pairs:
        return value
    rows, xs = np.array([p[0] for p in pairs], dtype=np.int64), np.array([p[1] for p in pairs])
    step = max(1, COST_PAIR_WORK // one)
    phi = np.concatenate([_pair_least_sum(f, tab, setup, Ms[rows[k:k + step]], xs[k:k + step],
                                          weight[rows[k:k + step]],
                                          None if shift is None else shift[rows[k:k + step]])
                          for k in range(0, len(rows), step)])
    R, T0 = rent[rows], iteration[rows]
    side_a = per_hour * (R * (K[rows] + phi) - R * T0) * (1 - 1e-9)
    got = np.where(np.isnan(side_a), -np.inf, np.minimum(side_a, side_b(rows, xs)))
    out = value.copy()
    np.maximum.at(out, rows, got)
    return out


def interleaved_skeleton(f: Skeleton) -> Skeleton:
    """An interleaved candidate (v > 1) as a 1F1B one that positional_bound bounds directly (round 23, park145): its
    own skeleton with m v micro-batches and every stage's compute / v, sends unchanged, each end stage's time raised
    by (v - 1) / v x its type's least send, and each stage's most layers rounded down to a multiple of v.

    Valid: the cost model (costmodel.estimate, interleaved_pipeline_time_s) prices a plan at v as
    T = ((m v - 1) max t + sum t) / v + A + E + O, where stage i's time at v is its compute (n_i layers at its mode's
    step, the embedding on stage 0 and the head on the last; the same as at v = 1) plus v sends to each neighbour and
    v - 1 across the wrap-around on the two end stages (interleaved_send_counts), each sent by the stage's own type g
    (at least min(min_h send_inter_s[g][h], send_intra_s[g])). So t_i / v is at least compute_i / v + one send to
    each neighbour + (v - 1) / v x that least send on the ends, which is the v = 1 row (positional's t_lb) of these
    coefficients, and T = (m v - 1) max(t / v) + sum(t / v) + A + E + O is the 1F1B form with m v micro-batches.
    A, O and E are per iteration (unscaled); the overlap is off at v > 1 (overlap_grad_reduce_on), so the
    coefficients carry no overlap and the hidden-reduce rows are not built (they return at virtual_stages > 1).
    Memory: the skeleton's own `most` holds the in-flight activations at v (in_flight_per_layer), and every stage's
    layer count at v is a multiple of v (check_interleaving), so n_i <= v floor(most / v). Every bound positional_bound
    builds rests on the rows, the caps at each mark and that form of T (its docstrings), so it bounds every plan of
    the candidate; the sequences it returns are not plans of the candidate (the caller asks none: keep=0)."""
    c, v = f.c, f.cand.v
    assert v > 1 and f.most is not None and f.block is None and c.grad_overlap_share <= 0, f.cand
    G = len(f.cand.uses)
    wrap = [(v - 1) / v * min(min(c.send_inter_s[g]), c.send_intra_s[g]) for g in range(G)]
    c_v = replace(c, m=c.m * v, step_s=tuple(tuple(tuple(x / v for x in k) for k in r) for r in c.step_s),
                  embedding_s=tuple(x / v + w for x, w in zip(c.embedding_s, wrap)),
                  head_s=tuple(x / v + w for x, w in zip(c.head_s, wrap)))
    return Skeleton(problem=f.problem, cand=f.cand, c=c_v, block_starts=f.block_starts, most=(f.most // v) * v)


def tables(f: Skeleton) -> _Tables:
    if f.positional is None:
        f.positional = _Tables(f)
    return f.positional


PAIR_COVER_DEFER = False  # off: a trade (GPT-3 175B 8k cost 36 / 22 positional steps in 8.8 s against 43, closed
# candidates walk twice; Megatron 1T 3k's front 0.30 -> 0.25 s a step; docs/solver.md round 22, quick1t). On,
# minimizing cost with a cutoff: the walk first without M_pair; where its bound is below the
# cutoff and M_pair is at most the least mark of its kept answers (one programme, pair_cover_within), that is the
# bound with M_pair too; else M_pair is applied and the walk run again (round 22, quick1t; docs/solver.md)


def positional_bound(f: Skeleton, budget: Budget, cutoff: float = math.inf, keep: int = 2,
                     slower_than_s: float = 0.0, deadline: float | None = None) -> PositionalBound:
    """The bound of the module docstring for f's candidate under the budget, with up to `keep` type sequences.

    cutoff: the incumbent's value. A mark whose cheaper bound (with floors in place of the rent or the sum of stage
    times) already reaches it is not refined; the result is still a valid bound, and when it reaches the cutoff no
    sequences are returned (no plan of this candidate can beat the incumbent).
    slower_than_s: only plans slower than this count (solver.solve): every iteration time is at least its share.
    The budget-free programmes' values are kept on the skeleton (_Tables) and re-used by later calls.
    deadline (time.perf_counter()): past it, OutOfTime is raised and no bound is returned; what the programmes
    finished is kept, what they did not is computed again by a later call."""
    assert f.most is not None, "positional bounds need pattern mode (one layer kind)"
    c, pp, L = f.c, f.cand.pp, f.c.kind_layers[0]
    emb_s = embedding_floor_s(f)  # E, counted in every iteration below through comm (round 10)
    comm_s = comm_lower_s(f) + emb_s
    plain_comm_s = comm_s  # A + O + E's floor that needs no share of the slowest stage (budget_pair_lift)
    _on_time(deadline)
    tab = tables(f)
    tab.deadline = deadline
    blocks = tab.blocks
    slack = BOUND_SLACK
    per_hour = c.iterations / SECONDS_PER_HOUR
    is_cost = budget.objective == "cost"
    least_iteration_s = slower_than_s / c.iterations

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

    if len(blocks) == 0:
        return PositionalBound(math.inf, ())
    marks = tab.marks
    # Floors for every M: the rent of pp stages at the cheapest price per stage, and a sum of stage times no plan
    # goes below (every layer at the fastest step, the cheapest ends, every boundary's cheapest send).
    G = len(f.cand.uses)
    rent_floor = pp * float((blocks.rent_usd_per_hour / blocks.stages).min()) * (1 - 1e-12)  # pp x (r / q) may round up
    sum_floor = (L * min(_step_min(c, g) for g in range(G)) + min(c.embedding_s) + min(c.head_s)
                 + 2 * (pp - 1) * min(min(min(row) for row in c.send_inter_s), min(c.send_intra_s)))
    # Before any programme: drop each M at which some stage holds nothing or the stages cannot hold L layers even
    # on their best types, or whose floors already break the budget (no plan there), and stop at the first M whose
    # floors reach the cutoff (every later M has a larger floor).
    # R(M), S(M) and C(M) never grow with M (a larger M allows every layout a smaller one allows), so their values at
    # the largest mark (where every allowed count is allowed) are floors at every mark: one programme each, often far
    # above the structural floors. With m = 1 the bound's minimum sits at that mark, and the walk below ends there.
    # They are taken one at a time, cheapest first (R at the largest mark: one programme; R at the first CHUNK
    # useful marks, which the walk needs anyway; S: one; C: a search of programmes), and the bound stops at the first
    # that already reaches the cutoff (issue 14: all three floors for every candidate took 14 ms of CPU a candidate on
    # GPT-3 175B, mixed-pool-8k; in this order 6.5 ms, bench figures in docs/solver.md).
    def floors() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        floor_iteration = np.maximum((c.m - 1) * marks + sum_floor + comm_s, least_iteration_s)
        rents = np.full(len(marks), rent_floor)
        return floor_iteration, value_of(rents, floor_iteration), tab.possible & meets(rents, floor_iteration)

    top = np.nonzero(tab.possible)[0][-1:]
    rent_counts = is_cost or budget.max_cost_usd is not None or budget.max_usd_per_hour is not None
    defer = (PAIR_COVER_DEFER and is_cost and tab.pair_pending and not tab.pair_switches["PAIR_COVER_BOTH"]
             and math.isfinite(cutoff))  # M_pair only where the walk's answer needs it (below)
    for level in range(5) if len(top) else ():
        applied = level == 2 and tab.pair_pending and not defer
        if applied:  # round 20 (PAIR_COVER_LAZY): M_pair only where the structural floors with R at the largest mark
            tab.apply_pair_cover(f)  # (level 1) left the cutoff in reach
            marks, top = tab.marks, np.nonzero(tab.possible)[0][-1:]
            if len(top) == 0:
                return PositionalBound(math.inf, ())  # no mark at or above M_pair holds a plan
        if level:
            floor_iteration, floor, useful = floors()
            if not useful.any():
                return PositionalBound(math.inf, ())  # every mark breaks the budget on its floors
            least = float(floor[useful].min())  # floors grow with M: every useful mark's bound is at least this
            if applied and least >= cutoff:  # level 1 again on the marks left by M_pair, before R at the first ones
                return PositionalBound(least * (1 - 1e-9), ())
            if level == 2 and rent_counts:
                # R(M) itself at the first CHUNK useful marks (the walk's first programme, kept for it): where the
                # rent falls steeply with M this alone ends most candidates on a large pool before S and C. Only
                # where the rent counts (cost, or a cost or rent limit): minimizing time without them, the bound does
                # not depend on R(M) and the programme would only cost time (4x on GPT-3 13B, mixed-pool-8k).
                first, rest = np.nonzero(useful)[0][:CHUNK], np.nonzero(useful)[0][CHUNK:]
                rent = tab.rent_at(first)
                rough = np.where(meets(rent, floor_iteration[first]), value_of(rent, floor_iteration[first]), np.inf)
                least = min(float(rough.min()), float(floor[rest].min(initial=math.inf)))
            if least >= cutoff:
                if defer and level >= 2:  # closed before the walk: as at the walk's end below
                    tab.apply_pair_cover(f)
                    return positional_bound(f, budget, cutoff, keep, slower_than_s, deadline)
                return PositionalBound(least * (1 - 1e-9), ())
        if level == 0:
            rent_top = float(tab.rent_at(top)[0])
            if not math.isfinite(rent_top):
                return PositionalBound(math.inf, ())  # no layout holds the layers at any M
            rent_floor = max(rent_floor, rent_top * (1 - 1e-12))
        elif level == 2:
            sum_floor = max(sum_floor, float(tab.total_at(top)[0]))
        elif level == 3:
            comm_s = max(comm_s, float(tab.comm_at(top)[0]) + emb_s)
    floor_iteration, floor, useful = floors()
    best = math.inf  # least bound over the values of M seen so far
    beyond = np.nonzero(useful & (floor >= cutoff))[0]
    if len(beyond):
        best = float(floor[beyond[0]])
        useful[beyond[0]:] = False
    index = np.nonzero(useful)[0]  # the marks left, as indices into tab.marks

    def sum_and_comm(ix: np.ndarray, comm: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """S(M) + comm at these marks, with stage 0's reduce in excess of its shift under the overlap; the shift."""
        if tab.first is None:
            return tab.total_at(ix) + comm, None
        # --overlap-grad-reduce: max_s A_s >= A_0 >= stage 0's reduce floor h_0 (first_stage_reduce_s), and
        # max O >= C_O (at this mark, or at the largest one: it never grows with M), E >= emb_s, so
        # A + O + E >= comm + max(0, h_0 - (comm - C_O - emb_s)): the excess rides on stage 0's block in the sum
        # programme.
        c_o = np.where(np.isnan(tab.comm_o[ix]), 0.0, tab.comm_o[ix])
        if len(top) and not np.isnan(tab.comm_o[top[0]]):
            c_o = np.maximum(c_o, tab.comm_o[top[0]])
        shift = np.maximum(comm - c_o - emb_s, 0.0)
        return tab.total_first_at(ix, shift) + comm, shift

    def refine(ix: np.ndarray, rent: np.ndarray, comm: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The bound at each M with S(M) itself, and for cost the McCormick bound; the rent weight it used."""
        Ms = marks[ix]
        both, shift = sum_and_comm(ix, comm)
        iteration = np.maximum((c.m - 1) * Ms + both, least_iteration_s)
        value = np.where(meets(rent, iteration), value_of(rent, iteration), np.inf)
        weight = np.zeros(len(Ms))
        if is_cost or budget.max_cost_usd is not None:
            # McCormick: rent >= R and T >= T0 at this M, so (rent - R)(T - T0) >= 0 and
            # rent x T >= R x T + T0 x rent - R x T0 = R (K + sum + (T0 / R) rent) - R T0, minimized by the programme.
            # A lower bound on the cost of every plan at this M: the objective when minimizing cost, and under a cost
            # budget a mark whose plans all cost more than the budget has none (minimizing time under a cost budget,
            # R x T0 alone lets through marks whose plans all break it: issue 14).
            sharpen = np.isfinite(value) & (value < cutoff)
            if sharpen.any():
                weight[sharpen] = iteration[sharpen] / rent[sharpen]
                combined = tab.combined_at(ix[sharpen], weight[sharpen], None if shift is None else shift[sharpen])
                K = (c.m - 1) * Ms[sharpen] + comm[sharpen]
                mccormick = per_hour * (rent[sharpen] * (K + combined) - rent[sharpen] * iteration[sharpen])
                if is_cost:
                    value[sharpen] = np.maximum(value[sharpen], mccormick)
                    lift = np.nonzero(sharpen)[0][value[sharpen] < cutoff] if COST_PAIR_SUM else []
                    if len(lift):  # round 24 (sum1t): the layouts within each boundary's own send, their own sum
                        value[lift] = cost_pair_lift(
                            f, tab, ix[lift], value[lift], rent[lift], iteration[lift],
                            (c.m - 1) * Ms[lift] + comm[lift], None if shift is None else shift[lift],
                            (c.m - 1) * Ms[lift] + tab.total_at(ix[lift]) + plain_comm_s, cutoff, per_hour)
                if budget.max_cost_usd is not None:
                    value[sharpen] = np.where(mccormick > budget.max_cost_usd * slack,
                                              np.inf, value[sharpen])
                if BUDGET_LAGRANGE and not is_cost and budget.max_cost_usd is not None:
                    lift = sharpen & np.isfinite(value)
                    if lift.any():  # round 18: the least time with the rent the budget leaves (budget_time_lift)
                        lifted = budget_time_lift(tab, ix[lift], (c.m - 1) * Ms[lift] + comm[lift], iteration[lift],
                                                  None if shift is None else shift[lift],
                                                  budget.max_cost_usd * slack / per_hour)
                        if BUDGET_PAIR_RENT:  # round 22: the layouts within each boundary's own send
                            at = ix[lift]
                            lifted = budget_pair_lift(f, tab, at, lifted, lambda r: (
                                (c.m - 1) * marks[at[r]] + tab.total_at(at[r]) + plain_comm_s),
                                budget.max_cost_usd * slack / per_hour)
                        value[lift] = np.where(meets(rent[lift], lifted), c.iterations * lifted, np.inf)
        return value, weight

    found: list[tuple[float, int, float]] = []  # (bound, mark index, weight of the rent in the combined objective)
    lead_s = -math.inf  # a floor on S(M) + comm at every mark (below), once the largest mark is refined
    if len(top) and len(index) and index[-1] == top[0]:  # the largest mark first: its bound is one programme away
        value, weight = refine(top, np.array([rent_top]), np.array([comm_s]))
        if np.isfinite(value[0]):
            best = min(best, float(value[0]))
        found += [(float(value[0]), int(top[0]), float(weight[0]))] if value[0] < cutoff else []
        index = index[:-1]
        if tab.first is not None:
            # Round 11 (timepos): sum + comm with stage 0's excess never grows as M falls. For each layout, comm +
            # max(0, h_0 - max(0, comm - C_O - emb_s)) grows with comm and with C_O, and at a smaller M comm >=
            # comm_s and C_O >= the largest mark's, while the layouts allowed are fewer (caps grow with M). So
            # every mark's iteration is at least (m - 1) M + this value at the largest mark: the walk's floors
            # take it, and a walk whose top already carries stage 0's excess ends where it did before round 10
            # (GPT-2 XL, mixed-pool-8k, time: every mark was refined, one sum programme per mark).
            lead_s = float(sum_and_comm(top, np.array([comm_s]))[0][0])
    for i in range(0, len(index), CHUNK):
        ix = index[i:i + CHUNK]
        Ms = marks[ix]
        first_floor = max((c.m - 1) * Ms[0] + max(sum_floor + comm_s, lead_s), least_iteration_s)
        if value_of(np.array(rent_floor), np.array(first_floor)) >= best:
            break  # every later M has a bound at least this
        rent = tab.rent_at(ix)
        comm = np.full(len(Ms), comm_s)

        def rough_at() -> np.ndarray:
            rough_iteration = np.maximum((c.m - 1) * Ms + np.maximum(sum_floor + comm, lead_s),
                                         least_iteration_s)  # S(M) >= its floor
            return np.where(meets(rent, rough_iteration), value_of(rent, rough_iteration), np.inf)

        rough = rough_at()
        best = min(best, float(rough[rough >= cutoff].min(initial=math.inf)))
        # Refine the most promising value of M alone first: the bound it gives spares the others most of the time.
        # C(M) (a bisection of programmes) first, and only where the bound with comm_s might still matter.
        order = [r for r in np.argsort(rough, kind="stable") if rough[r] < min(best, cutoff)]
        for rows in (order[:1], order[1:]):
            rows = np.array([r for r in rows if rough[r] < min(best, cutoff)], dtype=np.int64)
            if len(rows) == 0:
                continue
            comm[rows] = np.maximum(comm_s, tab.comm_at(ix[rows]) + emb_s)
            rough = rough_at()
            best = min(best, float(rough[rows][rough[rows] >= cutoff].min(initial=math.inf)))
            rows = rows[rough[rows] < min(best, cutoff)]
            if len(rows) == 0:
                continue
            value, weight = refine(ix[rows], rent[rows], comm[rows])
            if np.isfinite(value).any():
                best = min(best, float(value.min()))
            found += [(float(v), int(j), float(wt)) for v, j, wt in zip(value, ix[rows], weight) if v < cutoff]
    if ENDS_CLASS_FLOOR and not is_cost and found and best < cutoff and len(top) and c.m > 1:
        # round 22 (park530): the slowest stage by the end types' class with both sends, each class with its own
        # ends' terms (ends_class_floor_s, ends_class_base); only where the walk left the candidate below the cutoff
        live = None
        if ENDS_CLASS_LIVE_SUMS and math.isfinite(cutoff):  # round 24 (time530): S at the live marks (_live_sum)
            def live(upper: float) -> float:
                return _live_sum(tab, upper, c.m - 1, comm_s, emb_s, cutoff / c.iterations * (1 + 1e-9),
                                 least_iteration_s)
        base, a0 = ends_class_base(f, tab, top, comm_s, emb_s, sums=None if live is None else [live(math.inf)])
        at = np.nonzero(tab.possible)[0][:ENDS_CLASS_MARKS]  # round 23 (end530): the first marks' own S and C
        at = at[(at < top[0]) & np.append(True, np.diff(tab.marks[at]) > 0)]
        least = float(base[np.isfinite(base)].min(initial=math.inf))  # the intervals that start below the cutoff
        at = at[:int(np.searchsorted(tab.marks[at], (cutoff / c.iterations - least) / (c.m - 1))) + 1]
        gap = min(cutoff - best, ENDS_CLASS_SPAN * best) / c.iterations

        def floor_of(base: np.ndarray, a0: np.ndarray, uppers: np.ndarray | None) -> float:
            hidden = None
            if ENDS_CLASS_LEVELS and tab.caps_of.whole is not None:  # reduce levels: the least a0 to the cutoff's
                steps = np.arange(ENDS_CLASS_LEVELS + 1) / ENDS_CLASS_LEVELS  # 0, gap / n, ..., gap
                hidden = (tab.caps_of, a0, a0.min(axis=-1, keepdims=True) + gap * steps)
                if a0.ndim == 1:
                    hidden = (tab.caps_of, a0, a0.min() + gap * steps)
            if uppers is None:
                return ends_class_floor_s(f, blocks, c.m - 1, base, best / c.iterations, cutoff / c.iterations,
                                          deadline, hidden)
            return ends_class_floor_s(f, blocks, c.m - 1, base, best / c.iterations, cutoff / c.iterations,
                                      deadline, hidden, uppers=uppers)

        floor = -math.inf if len(at) and not ENDS_CLASS_MARKS_MAX else floor_of(base, a0, None)
        if len(at):
            low, a0_low = ends_class_base(f, tab, top, comm_s, emb_s, below=at, sums=None if live is None else [
                live(float(tab.marks[j])) for j in at])
            # the top's floor on the rest (sum t + E + max O: base - a0) holds in every interval too
            low = np.maximum(low, base[None] - a0[None, :, None] + a0_low[:, :, None])
            floor = max(floor, floor_of(np.concatenate([low, base[None]]), np.concatenate([a0_low, a0[None]]),
                                        np.append(tab.marks[at], np.inf)))
        if c.iterations * floor > best:
            best = c.iterations * floor
            if budget.max_time_s is not None and best > budget.max_time_s * slack:
                best = math.inf  # no plan meets the deadline
    if defer and (best >= cutoff or not found):  # closed: M_pair applied and the walk again (the same value as
        tab.apply_pair_cover(f)  # without PAIR_COVER_DEFER; what the programmes computed is kept on the tables)
        return positional_bound(f, budget, cutoff, keep, slower_than_s, deadline)
    if best >= cutoff or not found:
        return PositionalBound(best * (1 - 1e-9), ())
    found.sort()
    if defer and not tab.pair_cover_within(f, float(min(marks[j] for _, j, _ in found[:keep]))):
        tab.apply_pair_cover(f)  # M_pair lies above a mark the answer rests on: applied, and the walk again
        return positional_bound(f, budget, cutoff, keep, slower_than_s, deadline)
    sequences: list[tuple[int, ...]] = []
    # Minimizing time under a cost budget, the fastest layout at a mark is often one that breaks the budget: the
    # layout of the combined programme (sum of stage times + weight x rent, the weight of the McCormick cost bound)
    # comes first, then the fastest. Sequences are incumbents only, never proofs.
    for _, j, wt in found[:keep]:
        for weight in [wt if is_cost else None] if is_cost or wt == 0.0 else [wt, None]:
            seq = tab.sequence(j, weight)
            if seq is not None and seq not in sequences:
                sequences.append(seq)
    if _heuristic.END_MATCHED:  # the sequence programme leaves stage 0's reduce and E's pair out: the ends on one type too
        sequences += [m for seq in list(sequences) if (m := end_matched(f, seq)) is not None and m not in sequences]
    return PositionalBound(best * (1 - 1e-9), tuple(sequences))
