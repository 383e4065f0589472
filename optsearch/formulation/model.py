"""One candidate (tp, dp, micro-batch b, pp) as an exact mixed-integer model. Each family is one function.

Indices: s stage (0..pp-1), g usable node type, r recomputation mode, k layer kind.
Decisions:
    b[s,g]      binary   a whole-node block of type g starts at stage s (it covers q_g stages, k_g nodes)
    z[s,g]      binary   stage s runs on node type g
    y[s,g,r]    binary   stage s runs on g with recomputation r
    n[s,g,r,k]  integer  layers of kind k on stage s when (g, r) is chosen, else 0
    d[s,k]      binary   stage s holds layers of kind k (k >= 1; keeps kinds in model order)
    e[j]        time     one pipeline send across the boundary between stages j and j+1
    t[s]        time     stage s per micro-batch (compute + its sends)
    M           time     max_s t[s] (epigraph of the 1F1B max term)
    A, O        time     largest DP all-reduce, largest optimizer step
    E           time     tied-embedding gradient all-reduce between the first and the last stage (pp > 1)
    u_emb       binary   the first and the last stage are on different nodes (only when E has a term)
    T           time     one iteration
    v[s,g]      time     T if b[s,g] = 1 else 0 (exact McCormick product of a binary and T, for cost = price x time)
    u[r]        binary   the plan-wide recomputation mode (only where the target runs one mode on every stage)
    a[q]        binary   the plan uses nodes with q GPUs (only where the target needs one GPUs-per-node count)
All coefficients come from the cost model's own per-layer functions (costmodel.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from optsearch.candidates import NodeUse, SpaceOptions, block_recompute_enabled
from optsearch.costmodel import (
    MEMORY_RESERVE_BYTES, in_flight_per_layer, num_micro_batches, stage_parameters, memory_capacity_bytes, embedding_allreduce_s,
)
from optsearch.costmodel import (
    expert_allreduce_s, expert_optimizer_step_s, expert_state_bytes_per_param, moe_layer_alltoall_s,
    cp_embedding_step_s, cp_full_recompute_working_bytes, cp_head_step_s, cp_layer_activation_bytes, cp_layer_step_s,
    cp_logits_bytes, distributed_optimizer_on, gradient_sync_s, optimizer_s, stage_send_s, state_bytes,
)
from optsearch.costmodel import (  # --overlap-grad-reduce (section 7c)
    WEIGHT_BYTES_PER_PARAM, gradient_bytes, overlap_bucket_elements, overlap_grad_reduce_on, stage_forward_s,
)
from optsearch.costmodel import overlapped_grad_reduce_s, overlap_param_gather_on  # --overlap-param-gather (7f)
from optsearch.costmodel import overlap_param_gather_settings  # --overlap-param-gather at pp > 1 (7f, ppgather)
from optsearch.costmodel import ddp_average_on  # --ddp-average-in-collective (8c)
from optsearch.formulation.linear import Lin, LinearModel, Solution
from optsearch.plan import Plan, Recompute, Stage
from optsearch.problem import Problem
from optsearch.search import BUDGET_REL
from optsearch.spec.budget import Budget
from optsearch.units import SECONDS_PER_HOUR

PRICE_SCALE = 10_000  # prices enter the cost objective in 1e-4 USD/hour (catalog prices have <= 4 decimals)


@dataclass(frozen=True, slots=True, kw_only=True)
class Candidate:
    tp: int
    dp: int
    micro_batch_size: int
    pp: int
    uses: tuple[NodeUse, ...]
    ep: int = 1  # expert-parallel size (mixture-of-experts models)
    cp: int = 1  # context parallelism (issue 16)
    v: int = 1  # interleaved pipeline: model chunks per rank (Plan.virtual_stages)
    # The distributed optimizer: None, the search's default (costmodel.distributed_optimizer_on); False, off where
    # the search tries both (costmodel.distributed_optimizer_settings: under --overlap-grad-reduce)
    dist: bool | None = None
    # --overlap-param-gather on at pp > 1 (issue 15, ppgather): the copy of a candidate with the distributed optimizer
    # and --overlap-grad-reduce whose plans run the flag (costmodel.overlap_param_gather_settings: neither setting
    # dominates there); False: the search's default (costmodel.overlap_param_gather_on: on at pp = 1 only)
    gather: bool = False

    @property
    def gpus_per_stage(self) -> int:
        return self.tp * self.cp * self.dp

    @property
    def key(self) -> tuple[int, ...]:
        """(tp, dp, b, pp, ep, cp, v, o), o = 1 where dist is set (off), 2 for the gather copy (gather), else 0: one
        length, so that keys order (ties of the bound sort by it)."""
        return (self.tp, self.dp, self.micro_batch_size, self.pp, self.ep, self.cp, self.v,
                int(self.dist is not None) + 2 * int(self.gather))


def candidate_distributed_optimizer(problem: Problem, cand: Candidate) -> bool:
    """The candidate's distributed-optimizer setting: its own where set, else the search's default."""
    return distributed_optimizer_on(problem.job, cand.dp, cand.cp) if cand.dist is None else cand.dist


def candidate_param_gather(problem: Problem, cand: Candidate) -> bool:
    """Whether the candidate's plans run --overlap-param-gather: the search's default (on at pp = 1 where valid,
    costmodel.overlap_param_gather_on), or the gather copy's (Candidate.gather, pp > 1, costmodel 7f)."""
    dist = candidate_distributed_optimizer(problem, cand)
    if cand.gather:
        assert True in overlap_param_gather_settings(problem, cand.dp, cand.cp, cand.v, cand.pp, dist), cand
        return True
    return overlap_param_gather_on(problem, cand.dp, cand.cp, cand.v, cand.pp, dist)


def candidate_plan(problem: Problem, cand: Candidate, stages: tuple[Stage, ...],
                   recompute_num_layers: int | None = None) -> Plan:
    """The candidate's plan with these stages: its degrees (tp, dp, b, ep, cp, v), and its distributed-optimizer
    setting (candidate_distributed_optimizer)."""
    dist = candidate_distributed_optimizer(problem, cand)
    return Plan(tp=cand.tp, dp=cand.dp, micro_batch_size=cand.micro_batch_size, stages=stages, ep=cand.ep,
                cp=cand.cp, distributed_optimizer=dist,
                recompute_num_layers=recompute_num_layers, virtual_stages=cand.v,
                overlap_grad_reduce=overlap_grad_reduce_on(problem, cand.dp, cand.cp, cand.v),
                overlap_param_gather=candidate_param_gather(problem, cand),
                ddp_average_in_collective=ddp_average_on(problem, cand.dp, cand.cp))


@dataclass(frozen=True, slots=True, kw_only=True)
class Coefficients:
    """Every number the model needs, from the cost model. Lists are indexed [g], [g][r][k], [s] ..."""

    m: int
    iterations: int
    modes: tuple[Recompute, ...]
    kind_layers: tuple[int, ...]
    step_s: tuple[tuple[tuple[float, ...], ...], ...]  # [g][r][k]
    embedding_s: tuple[float, ...]  # [g]
    head_s: tuple[float, ...]  # [g]
    send_inter_s: tuple[tuple[float, ...], ...]  # [g][g']
    send_intra_s: tuple[float, ...]  # [g]
    layer_params: tuple[float, ...]  # [k]
    fixed_params: tuple[float, ...]  # [s]: embedding on the first stage, head on the last
    allreduce_s_per_param: tuple[float, ...]  # [g]
    optimizer_s_per_param: tuple[float, ...]  # [g]
    state_bytes_per_param: float  # per GPU, per parameter of the stage (already / tp)
    activation_bytes: tuple[tuple[tuple[float, ...], ...], ...]  # [g][r][k] per layer per micro-batch
    in_flight: tuple[int, ...]  # [s]
    full_working_bytes: tuple[float, ...]  # [g]
    logits_bytes: float
    capacity_bytes: tuple[float, ...]  # [g]
    price_scaled: tuple[int, ...]  # [g]: USD per block-hour x PRICE_SCALE (block = k_g nodes)
    emb_inter_s: tuple[tuple[float, ...], ...] = ()  # [g][h]: tied-embedding all-reduce, first on g, last on h
    emb_intra_s: tuple[float, ...] = ()  # [g]: the same inside one node of g
    emb_same_possible: tuple[bool, ...] = ()  # [g]: pp x w <= GPUs per node of g (the pipeline fits one node)
    # Mixture of experts: layer_params[k] holds a layer's dense parameters; its expert parameters X_k enter memory,
    # the all-reduce and the optimizer with their own per-parameter coefficients (over dp / ep, held / (tp ep)).
    expert_params: tuple[float, ...] = ()  # [k] X_k (0 for a dense kind)
    expert_allreduce_s_per_param: tuple[float, ...] = ()  # [g]
    expert_optimizer_s_per_param: tuple[float, ...] = ()  # [g]
    expert_state_bytes_per_param: float = 0.0  # per GPU, per expert parameter of the stage (already / (tp ep))

    def layer_state_bytes(self, k: int) -> float:
        """Per-GPU weight, gradient and optimizer bytes of one layer of kind k."""
        return self.state_bytes_per_param * self.layer_params[k] + self.expert_state_bytes_per_param * self.expert_params[k]

    def layer_allreduce_s(self, g: int, k: int) -> float:
        """The part of a layer of kind k on g in its stage's gradient all-reduce beyond alpha[g] x P_k (its experts)."""
        return self.expert_allreduce_s_per_param[g] * self.expert_params[k]

    def layer_optimizer_s(self, g: int, k: int) -> float:
        """The part of a layer of kind k on g in its stage's optimizer step beyond beta[g] x P_k (its experts)."""
        return self.expert_optimizer_s_per_param[g] * self.expert_params[k]
    virtual_stages: int = 1  # v: stage layer counts are multiples of v; sends and the pipeline rows scale with it
    wrap_inter_s: tuple[tuple[float, ...], ...] = ()  # [g][h]: v > 1, a send between the last (h) and first (g) stage
    wrap_intra_s: tuple[float, ...] = ()  # [g]: the same inside one node of g
    # Megatron's --overlap-grad-reduce (costmodel section 7c; overlap_grad_reduce_on): the share of alpha[g] that
    # overlaps with the backward (1, or g / (g + 2) with the distributed optimizer: the reduce-scatter); 0 when off.
    grad_overlap_share: float = 0.0
    forward_layer_s: tuple[float, ...] = ()  # [g]: a layer's forward of one micro-batch (costmodel.stage_forward_s)
    forward_embedding_s: tuple[float, ...] = ()  # [g]: the first stage's embedding forward
    forward_head_s: tuple[float, ...] = ()  # [g]: the last stage's head forward
    bucket_elements: int = 0  # Megatron's bucket size on pipeline rank 0 (costmodel.overlap_bucket_elements)
    tp: int = 1
    # Megatron's --overlap-param-gather (costmodel section 7f; candidate_param_gather: pp = 1, or the gather copy at
    # pp > 1): [g] the parameter all-gather's rate per parameter (the 2 of the g + 2 bytes of alpha[g]); empty when off.
    param_gather_s_per_param: tuple[float, ...] = ()

    @property
    def allreduce_floor_s_per_param(self) -> tuple[float, ...]:
        """[g] the part of alpha[g] that stays exposed whatever the overlap: every stage's A >= this x its
        parameters (the bounds' rate; alpha itself when the overlap is off; 0 with --overlap-param-gather, whose
        delay may be as small as the gather / its buckets)."""
        if self.param_gather_s_per_param:
            return tuple(0.0 for _ in self.allreduce_s_per_param)
        return tuple(a * (1.0 - self.grad_overlap_share) for a in self.allreduce_s_per_param)

    def grad_buckets0(self, params: float) -> int:
        """Buckets of stage 0's gradient buffer holding `params` dense parameters (costmodel.overlap_bucket_count)."""
        if params <= 0:
            return 1
        return max(1, math.ceil(params / self.tp / self.bucket_elements))

    @property
    def has_embedding_allreduce(self) -> bool:
        return any(x > 0 for row in self.emb_inter_s for x in row)


def coefficients(problem: Problem, cand: Candidate, options: SpaceOptions) -> Coefficients:
    model, tp, mbs, pp, w = problem.model, cand.tp, cand.micro_batch_size, cand.pp, cand.gpus_per_stage
    kinds, modes = model.kinds, options.recompute_modes
    names = [u.name for u in cand.uses]
    m = num_micro_batches(problem.job, cand.dp, mbs)
    ep, spans = cand.ep, [w > u.node.gpus_per_node for u in cand.uses]
    cp, dist = cand.cp, candidate_distributed_optimizer(problem, cand)
    return Coefficients(
        m=m,
        iterations=problem.iterations,
        modes=modes,
        kind_layers=tuple(k.num_layers for k in kinds),
        step_s=tuple(tuple(tuple(cp_layer_step_s(problem, g, k, tp, mbs, r, cp)
                                 + moe_layer_alltoall_s(problem, g, k, tp, ep, mbs, r, spans[i]) for k in kinds)
                           for r in modes) for i, g in enumerate(names)),
        embedding_s=tuple(cp_embedding_step_s(problem, g, tp, mbs, cp) for g in names),
        head_s=tuple(cp_head_step_s(problem, g, tp, mbs, cp) for g in names),
        send_inter_s=tuple(tuple(stage_send_s(problem, g, h, False, w, mbs, tp, cp) for h in names) for g in names),
        send_intra_s=tuple(stage_send_s(problem, g, g, True, w, mbs, tp, cp) for g in names),
        layer_params=tuple(float(model.layer_parameters(k) - model.expert_parameters(k)) for k in kinds),
        fixed_params=tuple(stage_parameters(model, {}, s == 0, s == pp - 1, pp) for s in range(pp)),
        allreduce_s_per_param=tuple(
            gradient_sync_s(problem, u.name, 1.0, tp, cand.dp, w > u.node.gpus_per_node, cp, dist) for u in cand.uses
        ),
        optimizer_s_per_param=tuple(optimizer_s(problem, g, 1.0, tp, cand.dp, cp, dist) for g in names),
        state_bytes_per_param=state_bytes(problem.job, cand.dp, cp, dist) / tp,
        activation_bytes=tuple(
            tuple(tuple(cp_layer_activation_bytes(problem, g, k, tp, mbs, r, cp) for k in kinds) for r in modes)
            for g in names
        ),
        in_flight=tuple(in_flight_per_layer(pp, s, m, cand.v) for s in range(pp)),
        full_working_bytes=tuple(cp_full_recompute_working_bytes(problem, g, tp, mbs, cp) for g in names),
        logits_bytes=cp_logits_bytes(model, tp, mbs, cp),
        capacity_bytes=tuple(memory_capacity_bytes(problem, problem.node(g).gpu) for g in names),
        price_scaled=tuple(
            round(u.node.price_usd_per_node_hour * u.nodes_per_block * PRICE_SCALE) for u in cand.uses
        ),
        emb_inter_s=tuple(tuple(embedding_allreduce_s(problem, g, h, False, w, tp) if pp > 1 else 0.0
                                for h in names) for g in names),
        emb_intra_s=tuple(embedding_allreduce_s(problem, g, g, True, w, tp) if pp > 1 else 0.0 for g in names),
        emb_same_possible=tuple(pp > 1 and pp * w <= u.node.gpus_per_node for u in cand.uses),
        expert_params=tuple(float(model.expert_parameters(k)) for k in kinds),
        expert_allreduce_s_per_param=tuple(expert_allreduce_s(problem, u.name, 1.0, tp, cand.dp, ep, spans[i], dist)
                                           for i, u in enumerate(cand.uses)),
        expert_optimizer_s_per_param=tuple(expert_optimizer_step_s(problem, g, 1.0, tp, cand.dp, ep, dist)
                                           for g in names),
        expert_state_bytes_per_param=expert_state_bytes_per_param(problem.job, cand.dp, ep, dist) / (tp * ep),
        virtual_stages=cand.v,
        wrap_inter_s=tuple(tuple(stage_send_s(problem, h, g, False, w, mbs, tp, cp) if cand.v > 1 else 0.0
                                 for h in names) for g in names),
        wrap_intra_s=tuple(stage_send_s(problem, g, g, True, w, mbs, tp, cp) if cand.v > 1 else 0.0 for g in names),
        **_grad_overlap_terms(problem, cand, names, dist),
    )


def _grad_overlap_terms(problem: Problem, cand: Candidate, names: list[str], dist: bool) -> dict[str, Any]:
    """Coefficients' --overlap-grad-reduce fields (costmodel section 7c), empty where the search leaves it off."""
    if not overlap_grad_reduce_on(problem, cand.dp, cand.cp, cand.v):
        return {}
    g = gradient_bytes(problem.job)
    kind, tp, mbs, cp = problem.model.kinds[0], cand.tp, cand.micro_batch_size, cand.cp
    return dict(
        grad_overlap_share=g / (g + WEIGHT_BYTES_PER_PARAM) if dist else 1.0,
        forward_layer_s=tuple(stage_forward_s(problem, h, {kind.name: 1}, tp, mbs, False, False, cp) for h in names),
        forward_embedding_s=tuple(stage_forward_s(problem, h, {}, tp, mbs, True, False, cp) for h in names),
        forward_head_s=tuple(stage_forward_s(problem, h, {}, tp, mbs, False, True, cp) for h in names),
        bucket_elements=overlap_bucket_elements(cand.dp * cp), tp=tp,
        param_gather_s_per_param=tuple(
            gradient_sync_s(problem, u.name, 1.0, tp, cand.dp, cand.gpus_per_stage > u.node.gpus_per_node, cp, True)
            * WEIGHT_BYTES_PER_PARAM / (g + WEIGHT_BYTES_PER_PARAM) for u in cand.uses)
        if candidate_param_gather(problem, cand) else ())


# ---- variable names ([A-Za-z0-9_] only) --------------------------------------------------------------------

def b_(s: int, g: int) -> str: return f"b_{s}_{g}"
def z_(s: int, g: int) -> str: return f"z_{s}_{g}"
def y_(s: int, g: int, r: int) -> str: return f"y_{s}_{g}_{r}"
def n_(s: int, g: int, r: int, k: int) -> str: return f"n_{s}_{g}_{r}_{k}"
def d_(s: int, k: int) -> str: return f"d_{s}_{k}"
def e_(j: int) -> str: return f"e_{j}"
def t_(s: int) -> str: return f"t_{s}"
def v_(s: int, g: int) -> str: return f"v_{s}_{g}"
def x_(s: int, g: int, n: int) -> str: return f"x_{s}_{g}_{n}"
def u_(r: int) -> str: return f"u_{r}"
def a_(q: int) -> str: return f"a_{q}"


def by_stage(patterns: dict[tuple[int, int, int], int] | None) -> dict[int, list[tuple[int, int]]]:
    """s -> [(g, n)] of every pattern (s, g, n)."""
    out: dict[int, list[tuple[int, int]]] = {}
    for (s, g, n) in patterns or {}:
        out.setdefault(s, []).append((g, n))
    return out


@dataclass(slots=True)
class Skeleton:
    """The budget-free part of a candidate's model: its coefficients, where whole-node blocks may start, and (one
    layer kind) its stage patterns. The heuristic and the positional bound work on it without building the model."""

    problem: Problem
    cand: Candidate
    c: Coefficients
    block_starts: dict[tuple[int, int], str]  # (s, g) -> b var name, only where a block fits
    most: np.ndarray | None = None  # pattern mode: [s, g, r] -> most layers that fit (most_layers)
    stage_patterns: dict[int, list[tuple[int, int]]] | None = None  # pattern mode: s -> [(g, n)], built once
    pattern_map: dict[tuple[int, int, int], int] | None = None  # built from `most` when first asked for
    positional: Any = None  # positional._Tables: the positional bound's budget-free work, kept between solves
    block: Any = None  # BlockCoefficients where block recomputation is in the space and worth modelling

    @property
    def patterns(self) -> dict[tuple[int, int, int], int] | None:
        """Pattern mode: (s, g, n) -> recompute index (stage_patterns); None with several layer kinds."""
        if self.pattern_map is None and self.most is not None:
            self.pattern_map = stage_patterns(self.c, self.cand.pp, len(self.cand.uses), self.most)
        return self.pattern_map

    def patterns_of(self, s: int) -> list[tuple[int, int]]:
        """(g, n) of every pattern of stage s."""
        if self.stage_patterns is None:
            self.stage_patterns = by_stage(self.patterns)
        return self.stage_patterns.get(s, [])


def skeleton(problem: Problem, cand: Candidate, options: SpaceOptions) -> Skeleton:
    c = coefficients(problem, cand, options)
    block_starts = {(s, g): b_(s, g) for s in range(cand.pp) for g, use in enumerate(cand.uses)
                    if s + use.stages_per_block <= cand.pp}
    if len(c.kind_layers) > 1:
        skel = Skeleton(problem=problem, cand=cand, c=c, block_starts=block_starts)
    else:
        skel = Skeleton(problem=problem, cand=cand, c=c, block_starts=block_starts,
                        most=most_layers(c, cand.pp, len(cand.uses)))
    if block_recompute_enabled(options) and cand.v == 1:  # v > 1: Megatron applies N per chunk, not modelled
        bc = block_coefficients(problem, cand)
        skel.block = bc if block_worth_modelling(skel, bc) else None
    return skel


@dataclass(slots=True)
class Formulation:
    problem: Problem
    budget: Budget
    cand: Candidate
    c: Coefficients
    lm: LinearModel
    block_starts: dict[tuple[int, int], str]  # (s, g) -> b var, only where a block fits
    time_upper_s: float  # U: a valid upper bound on T
    patterns: dict[tuple[int, int, int], int] | None = None  # pattern mode: (s, g, n) -> recompute index
    stage_patterns: dict[int, list[tuple[int, int]]] | None = None  # pattern mode: s -> [(g, n)], built once
    slower_than_s: float = 0.0  # T >= this / iterations (add_slower_than)
    uniform_recompute: bool = False  # one mode u[r] on every stage that holds layers
    most: Any = None  # pattern mode: [s, g, r] -> most layers that fit (most_layers)
    block: Any = None  # BlockCoefficients where the model holds block recomputation (u_blk, N_blk), else None

    def patterns_of(self, s: int) -> list[tuple[int, int]]:
        """(g, n) of every pattern of stage s."""
        if self.stage_patterns is None:
            self.stage_patterns = by_stage(self.patterns)
        return self.stage_patterns.get(s, [])


def _layers_on(f: Formulation, s: int) -> Lin:
    """sum_{g,r,k} n[s,g,r,k]"""
    lin = Lin()
    for g in range(len(f.cand.uses)):
        for r in range(len(f.c.modes)):
            for k in range(len(f.c.kind_layers)):
                lin.add(1, n_(s, g, r, k))
    return lin


def _stage_params(f: Formulation, s: int, g: int) -> Lin:
    """sum_{r,k} P_k n[s,g,r,k] + P_fixed[s] z[s,g]   (parameters of stage s if it runs on g, else 0)"""
    lin = Lin()
    for r in range(len(f.c.modes)):
        for k, p in enumerate(f.c.layer_params):
            lin.add(p, n_(s, g, r, k))
    return lin.add(f.c.fixed_params[s], z_(s, g))


def _block_starts_into(f: Formulation, s: int) -> Lin:
    """sum_g b[s,g]: 1 when stage s starts a new block (0 for s = pp)"""
    return Lin.of(*((1, f.block_starts[(s, g)]) for g in range(len(f.cand.uses)) if (s, g) in f.block_starts))


# ---- constraint families -----------------------------------------------------------------------------------

def add_blocks(f: Formulation) -> None:
    """z[s,g] == sum_{s - q_g < s' <= s} b[s',g]   (stage s is of type g iff it lies in a block of type g)"""
    for s in range(f.cand.pp):
        for g, use in enumerate(f.cand.uses):
            lin = Lin.of((1, z_(s, g)))
            for s0 in range(max(0, s - use.stages_per_block + 1), s + 1):
                if (s0, g) in f.block_starts:
                    lin.add(-1, f.block_starts[(s0, g)])
            f.lm.add(f"blk_{s}_{g}", lin, "==", 0, "count")


def add_one_type_per_stage(f: Formulation) -> None:
    """sum_g z[s,g] == 1"""
    for s in range(f.cand.pp):
        f.lm.add(f"one_{s}", Lin.of(*((1, z_(s, g)) for g in range(len(f.cand.uses)))), "==", 1, "count")


def add_recompute_choice(f: Formulation) -> None:
    """sum_r y[s,g,r] == z[s,g]"""
    for s in range(f.cand.pp):
        for g in range(len(f.cand.uses)):
            lin = Lin.of(*((1, y_(s, g, r)) for r in range(len(f.c.modes))), (-1, z_(s, g)))
            f.lm.add(f"rc_{s}_{g}", lin, "==", 0, "count")


def add_layer_cover(f: Formulation) -> None:
    """sum_{s,g,r} n[s,g,r,k] == L_k   (every layer of every kind on exactly one stage)"""
    for k, total in enumerate(f.c.kind_layers):
        lin = Lin()
        for s in range(f.cand.pp):
            for g in range(len(f.cand.uses)):
                for r in range(len(f.c.modes)):
                    lin.add(1, n_(s, g, r, k))
        f.lm.add(f"cover_{k}", lin, "==", total, "count")


def add_layer_bounds(f: Formulation) -> None:
    """n[s,g,r,k] <= L_k y[s,g,r]   (layers only on the chosen type and mode)"""
    for s in range(f.cand.pp):
        for g in range(len(f.cand.uses)):
            for r in range(len(f.c.modes)):
                for k, total in enumerate(f.c.kind_layers):
                    f.lm.add(f"nb_{s}_{g}_{r}_{k}", Lin.of((1, n_(s, g, r, k)), (-total, y_(s, g, r))), "<=", 0, "count")


def add_nonempty_middle(f: Formulation) -> None:
    """sum_{g,r,k} n[s,g,r,k] >= 1 for 0 < s < pp - 1   (only the end stages may hold no layer)"""
    for s in range(1, f.cand.pp - 1):
        f.lm.add(f"mid_{s}", _layers_on(f, s), ">=", 1, "count")


def add_no_recompute_when_empty(f: Formulation) -> None:
    """sum_{g, r != none} y[s,g,r] <= sum_{g,r,k} n[s,g,r,k] for the end stages   (an empty stage recomputes nothing)"""
    for s in {0, f.cand.pp - 1}:
        lin = Lin.of(*((1, y_(s, g, r)) for g in range(len(f.cand.uses)) for r in range(1, len(f.c.modes))))
        f.lm.add(f"emptyrc_{s}", lin.extend(_layers_on(f, s), -1), "<=", 0, "count")


def add_kind_order(f: Formulation) -> None:
    """sum_{g,r} n[s,g,r,k] <= L_k d[s,k];  sum_{s' <= s} sum_{g,r} n[s',g,r,k-1] >= L_{k-1} d[s,k]   (k >= 1)

    A stage may hold kind k only once every layer of kind k-1 sits on it or before it: layers stay in model order.
    """
    kinds = f.c.kind_layers
    for k in range(1, len(kinds)):
        for s in range(f.cand.pp):
            here = Lin()
            before = Lin()
            for g in range(len(f.cand.uses)):
                for r in range(len(f.c.modes)):
                    here.add(1, n_(s, g, r, k))
                    for s2 in range(s + 1):
                        before.add(1, n_(s2, g, r, k - 1))
            f.lm.add(f"ko_{s}_{k}", here.add(-kinds[k], d_(s, k)), "<=", 0, "count")
            f.lm.add(f"kp_{s}_{k}", before.add(-kinds[k - 1], d_(s, k)), ">=", 0, "count")


def add_node_supply(f: Formulation) -> None:
    """sum_s k_g b[s,g] <= nodes available of g"""
    for g, use in enumerate(f.cand.uses):
        lin = Lin.of(*((use.nodes_per_block, v) for (s, gg), v in f.block_starts.items() if gg == g))
        f.lm.add(f"supply_{g}", lin, "<=", use.node.num_nodes_available, "count")


def add_p2p(f: Formulation) -> None:
    """e[j] >= c_inter[g,g'] (z[j,g] + z[j+1,g'] - 2 + sum_h b[j+1,h]);  e[j] >= c_intra[g] (z[j,g] - sum_h b[j+1,h])

    A boundary crosses nodes exactly when stage j+1 starts a block; then its send costs the inter-node time of the
    pair of types, otherwise the intra-node time of the (shared) type.
    """
    G = len(f.cand.uses)
    for j in range(f.cand.pp - 1):
        starts = _block_starts_into(f, j + 1)
        for g in range(G):
            for h in range(G):
                c = f.c.send_inter_s[g][h]
                lin = Lin.of((1, e_(j)), (-c, z_(j, g)), (-c, z_(j + 1, h))).extend(starts, -c)
                f.lm.add(f"p2x_{j}_{g}_{h}", lin, ">=", -2 * c, "time")
            c = f.c.send_intra_s[g]
            f.lm.add(f"p2i_{j}_{g}", Lin.of((1, e_(j)), (-c, z_(j, g))).extend(starts, c), ">=", 0, "time")


def _minus_sends(lin: Lin, s: int, pp: int, v: int = 1) -> Lin:
    """lin - v e[s-1] - v e[s] (- (v - 1) e_wrap on the end stages): stage s pays its sends (gradients back to s-1,
    activations on to s+1), v of each per micro-batch when interleaved, and the v - 1 across the wrap-around
    (costmodel.interleaved_send_counts)."""
    if s > 0:
        lin.add(-v, e_(s - 1))
    if s < pp - 1:
        lin.add(-v, e_(s))
    if v > 1 and s in (0, pp - 1):
        lin.add(-(v - 1), "e_wrap")
    return lin


def add_stage_time(f: Formulation) -> None:
    """t[s] >= sum_{g,r,k} step[g,r,k] n[s,g,r,k] + [s=0] sum_g emb[g] z[0,g] + [s=pp-1] sum_g head[g] z[s,g] + e[s-1] + e[s]"""
    pp = f.cand.pp
    for s in range(pp):
        lin = Lin.of((1, t_(s)))
        for g in range(len(f.cand.uses)):
            for r in range(len(f.c.modes)):
                for k in range(len(f.c.kind_layers)):
                    lin.add(-f.c.step_s[g][r][k], n_(s, g, r, k))
            if s == 0:
                lin.add(-f.c.embedding_s[g], z_(s, g))
            if s == pp - 1:
                lin.add(-f.c.head_s[g], z_(s, g))
        f.lm.add(f"st_{s}", _minus_sends(lin, s, pp, f.cand.v), ">=", 0, "time")


def add_pipeline_max(f: Formulation) -> None:
    """M >= t[s]   (epigraph of max_s t[s])"""
    for s in range(f.cand.pp):
        f.lm.add(f"max_{s}", Lin.of((1, "M"), (-1, t_(s))), ">=", 0, "time")


def add_dp_allreduce(f: Formulation) -> None:
    """A >= alpha[g] (sum_{r,k} P_k n[s,g,r,k] + P_fixed[s] z[s,g])   (ring all-reduce time, linear in parameters)"""
    for s in range(f.cand.pp):
        for g in range(len(f.cand.uses)):
            lin = Lin.of((1, "A")).extend(_stage_params(f, s, g), -f.c.allreduce_s_per_param[g])
            _add_expert_terms(f, lin, s, g, f.c.layer_allreduce_s)
            f.lm.add(f"ar_{s}_{g}", lin, ">=", 0, "time")


def add_optimizer(f: Formulation) -> None:
    """O >= beta[g] (sum_{r,k} P_k n[s,g,r,k] + P_fixed[s] z[s,g])   (memory-bound Adam step)"""
    for s in range(f.cand.pp):
        for g in range(len(f.cand.uses)):
            lin = Lin.of((1, "O")).extend(_stage_params(f, s, g), -f.c.optimizer_s_per_param[g])
            _add_expert_terms(f, lin, s, g, f.c.layer_optimizer_s)
            f.lm.add(f"op_{s}_{g}", lin, ">=", 0, "time")


def _add_expert_terms(f: Formulation, lin: Lin, s: int, g: int, per_layer) -> None:
    """lin -= sum_{r,k} per_layer(g, k) n[s,g,r,k]: the expert parameters' share (nothing for a dense model)."""
    for r in range(len(f.c.modes)):
        for k in range(len(f.c.layer_params)):
            lin.add(-per_layer(g, k), n_(s, g, r, k))


def add_embedding_allreduce(f: Formulation) -> None:
    """Tied embeddings, pp > 1 (costmodel.embedding_allreduce_s; the ends share a node iff Placement.ends_same_node):
    u >= b[s,h] (s >= 1);  u >= z[0,g] (g: the pipeline cannot fit one node);  u <= sum of those
    E >= c_inter[g,h] (z[0,g] + z[pp-1,h] + u - 2);   E >= c_intra[g] (z[0,g] - u)   (g: it can)

    The ends are on one node exactly when no block starts after stage 0 and stage 0's type holds all pp x w GPUs
    in one node (blocks never overlap, so then one block covers the whole pipeline).
    """
    c, pp = f.c, f.cand.pp
    if not c.has_embedding_allreduce:
        return
    G = len(f.cand.uses)
    later = [v for (s, _), v in f.block_starts.items() if s >= 1]
    whole = [z_(0, g) for g in range(G) if not c.emb_same_possible[g]]
    for i, v in enumerate(later):
        f.lm.add(f"eu_b_{i}", Lin.of((1, "u_emb"), (-1, v)), ">=", 0, "count")
    for g in range(G):
        if not c.emb_same_possible[g]:
            f.lm.add(f"eu_z_{g}", Lin.of((1, "u_emb"), (-1, z_(0, g))), ">=", 0, "count")
    f.lm.add("eu_up", Lin.of((1, "u_emb"), *((-1, v) for v in later), *((-1, z) for z in whole)), "<=", 0, "count")
    for g in range(G):
        for h in range(G):
            x = c.emb_inter_s[g][h]
            lin = Lin.of((1, "E"), (-x, z_(0, g)), (-x, z_(pp - 1, h)), (-x, "u_emb"))
            f.lm.add(f"emx_{g}_{h}", lin, ">=", -2 * x, "time")
        if c.emb_same_possible[g]:
            x = c.emb_intra_s[g]
            f.lm.add(f"emi_{g}", Lin.of((1, "E"), (-x, z_(0, g)), (x, "u_emb")), ">=", 0, "time")


def add_wrap_p2p(f: Formulation) -> None:
    """v > 1: e_wrap >= one send across the wrap-around between the last and the first stage, priced as the tied
    embedding all-reduce's pair (same node iff Placement.ends_same_node):
    w >= b[s,h] (s >= 1);  w >= z[0,g] (g: the pipeline cannot fit one node);  w <= sum of those
    e_wrap >= c_inter[g,h] (z[0,g] + z[pp-1,h] + w - 2);   e_wrap >= c_intra[g] (z[0,g] - w)   (g: it can)"""
    c, pp = f.c, f.cand.pp
    if f.cand.v == 1:
        return
    G = len(f.cand.uses)
    later = [b for (s, _), b in f.block_starts.items() if s >= 1]
    whole = [z_(0, g) for g in range(G) if not c.emb_same_possible[g]]
    for i, b in enumerate(later):
        f.lm.add(f"wu_b_{i}", Lin.of((1, "u_wrap"), (-1, b)), ">=", 0, "count")
    for g in range(G):
        if not c.emb_same_possible[g]:
            f.lm.add(f"wu_z_{g}", Lin.of((1, "u_wrap"), (-1, z_(0, g))), ">=", 0, "count")
    f.lm.add("wu_up", Lin.of((1, "u_wrap"), *((-1, b) for b in later), *((-1, z) for z in whole)), "<=", 0, "count")
    for g in range(G):
        for h in range(G):
            x = c.wrap_inter_s[g][h]
            lin = Lin.of((1, "e_wrap"), (-x, z_(0, g)), (-x, z_(pp - 1, h)), (-x, "u_wrap"))
            f.lm.add(f"wrx_{g}_{h}", lin, ">=", -2 * x, "time")
        if c.emb_same_possible[g]:
            x = c.wrap_intra_s[g]
            f.lm.add(f"wri_{g}", Lin.of((1, "e_wrap"), (-x, z_(0, g)), (x, "u_wrap")), ">=", 0, "time")


def add_iteration_time(f: Formulation) -> None:
    """T >= (m - 1) M + sum_s t[s] + A + O + E   (1F1B pipeline + DP and embedding all-reduces + optimizer step)
    Interleaved (v > 1; costmodel.interleaved_pipeline_time_s), times v for integer coefficients:
    v T >= (m v - 1) M + sum_s t[s] + v (A + O + E)"""
    v = f.cand.v
    if v > 1:
        lin = Lin.of((v, "T"), (-(f.c.m * v - 1), "M"), (-v, "A"), (-v, "O"), (-v, "E"))
        for s in range(f.cand.pp):
            lin.add(-1, t_(s))
        f.lm.add("iter", lin, ">=", 0, "time")
        return
    lin = Lin.of((1, "T"), (-(f.c.m - 1), "M"), (-1, "A"), (-1, "O"), (-1, "E"))
    for s in range(f.cand.pp):
        lin.add(-1, t_(s))
    f.lm.add("iter", lin, ">=", 0, "time")


def memory_fixed_bytes(c: Coefficients, s: int, g: int, r: int, pp: int) -> float:
    """Per-GPU bytes of stage s on (g, r) that do not scale with its layer count."""
    fixed = MEMORY_RESERVE_BYTES + c.state_bytes_per_param * c.fixed_params[s]
    if s == pp - 1:
        fixed += c.logits_bytes
    if c.modes[r] == "full":
        fixed += c.full_working_bytes[g]
    return fixed


def memory_per_layer_bytes(c: Coefficients, s: int, g: int, r: int, k: int) -> float:
    """Per-GPU bytes one more layer of kind k adds to stage s on (g, r): its states and in-flight activations."""
    return c.layer_state_bytes(k) + c.in_flight[s] * c.activation_bytes[g][r][k]


def add_memory(f: Formulation) -> None:
    """sum_k (state P_k + inflight[s] act[g,r,k]) n[s,g,r,k] <= (capacity[g] - fixed[s,g,r]) y[s,g,r]"""
    pp = f.cand.pp
    for s in range(pp):
        for g in range(len(f.cand.uses)):
            for r in range(len(f.c.modes)):
                lin = Lin()
                for k in range(len(f.c.kind_layers)):
                    lin.add(memory_per_layer_bytes(f.c, s, g, r, k), n_(s, g, r, k))
                room = f.c.capacity_bytes[g] - memory_fixed_bytes(f.c, s, g, r, pp)
                f.lm.add(f"mem_{s}_{g}_{r}", lin.add(-room, y_(s, g, r)), "<=", 0, "bytes")


def add_cost_product(f: Formulation) -> None:
    """v[s,g] >= T - U (1 - b[s,g])   (v = b x T exactly, since b is binary and 0 <= T <= U)"""
    for (s, g), b in f.block_starts.items():
        lin = Lin.of((1, v_(s, g)), (-1, "T"), (-f.time_upper_s, b))
        f.lm.add(f"mc_{s}_{g}", lin, ">=", -f.time_upper_s, "time")


def cost_rate_expr(f: Formulation) -> Lin:
    """sum_{s,g} price[g] x PRICE_SCALE x v[s,g]: (USD/hour x PRICE_SCALE) x (seconds per iteration)"""
    return Lin.of(*((f.c.price_scaled[g], v_(s, g)) for (s, g) in f.block_starts))


def add_budgets(f: Formulation) -> None:
    """T <= max_time / iterations;  cost_rate <= max_cost x 3600 x PRICE_SCALE / iterations;
    sum_{s,g} price[g] b[s,g] <= max USD per hour"""
    budget, c, slack = f.budget, f.c, 1 + BUDGET_REL
    if budget.max_time_s is not None:
        f.lm.add("bud_time", Lin.of((1, "T")), "<=", budget.max_time_s * slack / c.iterations, "time")
    if budget.max_cost_usd is not None:
        rhs = budget.max_cost_usd * slack * SECONDS_PER_HOUR * PRICE_SCALE / c.iterations
        f.lm.add("bud_cost", cost_rate_expr(f), "<=", rhs, "rate")
    if budget.max_usd_per_hour is not None:
        lin = Lin.of(*((c.price_scaled[g], b) for (s, g), b in f.block_starts.items()))
        f.lm.add("bud_rate", lin, "<=", budget.max_usd_per_hour * slack * PRICE_SCALE, "count")


def objective_expr(f: Formulation) -> Lin:
    return cost_rate_expr(f) if f.budget.objective == "cost" else Lin.of((1, "T"))


def objective_to_user(f: Formulation, value: float) -> float:
    """Model objective -> USD for the run (cost) or training seconds (time)."""
    if f.budget.objective == "cost":
        return value * f.c.iterations / (SECONDS_PER_HOUR * PRICE_SCALE)
    return value * f.c.iterations


def user_to_objective(f: Formulation, value: float) -> float:
    if f.budget.objective == "cost":
        return value * SECONDS_PER_HOUR * PRICE_SCALE / f.c.iterations
    return value / f.c.iterations


def add_incumbent_cut(f: Formulation, incumbent_user: float | None, rel: float, name: str = "cut") -> None:
    """objective <= incumbent x (1 - rel)   (only strictly better plans than the best found so far)"""
    if incumbent_user is None:
        return
    unit = "rate" if f.budget.objective == "cost" else "time"
    f.lm.add(name, objective_expr(f), "<=", user_to_objective(f, incumbent_user) * (1 - rel), unit)


def add_slower_than(f: Formulation, slower_than_s: float) -> None:
    """T >= T_lo = slower_than / iterations (relaxed by 1e-7: the caller proved that faster plans do not matter, so
    the row only has to keep every plan that does; see solver.solve), and the lower McCormick envelope of the cost
    product with it, v[s,g] >= T_lo b[s,g] (with T >= T_lo, b x T >= T_lo b)"""
    f.slower_than_s = slower_than_s
    if slower_than_s <= 0:
        return
    lo = slower_than_s * (1 - 1e-7) / f.c.iterations
    f.lm.add("slower", Lin.of((1, "T")), ">=", lo, "time")
    if f.budget.objective == "cost" or f.budget.max_cost_usd is not None:
        for (s, g), b in f.block_starts.items():
            f.lm.add(f"mclo_{s}_{g}", Lin.of((1, v_(s, g)), (-lo, b)), ">=", 0, "time")


# ---- pattern mode (models with one layer kind) -------------------------------------------------------------
# One binary x[s,g,n] per stage, node type and layer count. The recomputation of (s, g, n) is the least mode whose
# memory fits: stage s's memory depends only on its own mode and less recomputation is never slower, so that mode
# dominates every other (exact). Patterns that fit in no mode are not created, which is the memory constraint.

def stage_patterns(c: Coefficients, pp: int, num_uses: int, most: np.ndarray | None = None
                   ) -> dict[tuple[int, int, int], int]:
    """(s, g, n) -> r: fixed[s,g,r] + n x per_layer[s,g,r] <= capacity[g] for the least such r; middle stages n >= 1"""
    most = (most_layers(c, pp, num_uses) if most is None else most).tolist()
    out = {}
    for s in range(pp):
        low = 1 if 0 < s < pp - 1 else 0
        for g in range(num_uses):
            by_mode = most[s][g]
            if low == 0 and by_mode[0] >= 0:
                out[(s, g, 0)] = 0  # an empty stage recomputes nothing
            for n in range(max(low, 1), max(by_mode) + 1):
                if n % c.virtual_stages:
                    continue  # interleaved: every stage's layers split into v equal chunks
                out[(s, g, n)] = next(r for r, k in enumerate(by_mode) if k >= n)
    return out


def most_layers(c: Coefficients, pp: int, num_uses: int) -> np.ndarray:
    """[s, g, r] -> the largest n <= L with fixed[s,g,r] + n x per_layer[s,g,r] <= capacity[g] (-1 if not even n = 0
    fits), for every stage, type and mode at once. The same sums as memory_fixed_bytes and memory_per_layer_bytes,
    in the same order; the estimate from the division is corrected by the row's own comparison, so rounding cannot
    make the two differ."""
    L, R = c.kind_layers[0], len(c.modes)
    fixed = np.full((pp, num_uses, R), float(MEMORY_RESERVE_BYTES))
    fixed += (c.state_bytes_per_param * np.array(c.fixed_params))[:, None, None]
    fixed[pp - 1] += c.logits_bytes
    for r, mode in enumerate(c.modes):
        if mode == "full":
            fixed[:, :, r] += np.array(c.full_working_bytes)[None, :]
    act = np.array([[c.activation_bytes[g][r][0] for r in range(R)] for g in range(num_uses)])
    per = c.layer_state_bytes(0) + np.array(c.in_flight, dtype=float)[:, None, None] * act[None]
    cap = np.array(c.capacity_bytes)[None, :, None]

    def fits(n: np.ndarray) -> np.ndarray:
        return fixed + n * per <= cap

    with np.errstate(divide="ignore", invalid="ignore"):
        n = np.where(per > 0, np.floor((cap - fixed) / per), L)
    n = np.clip(np.nan_to_num(n, nan=L, posinf=L, neginf=0), 0, L).astype(np.int64)
    for _ in range(3):
        n = np.where((n < L) & fits(n + 1), n + 1, n)
        n = np.where((n > 0) & ~fits(n), n - 1, n)
    some = fits(np.zeros_like(n))
    assert np.all(~some | (fits(n) & ((n == L) | ~fits(n + 1)))), "most_layers: the correction did not converge"
    return np.where(some, n, -1)


def pattern_compute_s(f: Formulation | Skeleton, s: int, g: int, n: int) -> float:
    c, pp = f.c, f.cand.pp
    r = f.patterns[(s, g, n)]
    return n * c.step_s[g][r][0] + (c.embedding_s[g] if s == 0 else 0.0) + (c.head_s[g] if s == pp - 1 else 0.0)


def pattern_compute_at(f: Formulation | Skeleton, s: int, g: int, n: int, r: int) -> float:
    """Compute time of pattern (s, g, n) in mode r (rather than its least mode)."""
    c, pp = f.c, f.cand.pp
    return n * c.step_s[g][r][0] + (c.embedding_s[g] if s == 0 else 0.0) + (c.head_s[g] if s == pp - 1 else 0.0)


def add_pattern_choice(f: Formulation) -> None:
    """sum_n x[s,g,n] == z[s,g]   (a stage of type g takes exactly one layer count that fits in memory)"""
    for s in range(f.cand.pp):
        for g in range(len(f.cand.uses)):
            lin = Lin.of(*((1, x_(s, g, n)) for (gg, n) in f.patterns_of(s) if gg == g), (-1, z_(s, g)))
            f.lm.add(f"pat_{s}_{g}", lin, "==", 0, "count")


def add_pattern_cover(f: Formulation) -> None:
    """sum_{s,g,n} n x[s,g,n] == L   (every layer on exactly one stage; stages are contiguous by construction)"""
    lin = Lin.of(*((n, x_(s, g, n)) for (s, g, n) in f.patterns))
    f.lm.add("cover", lin, "==", f.c.kind_layers[0], "count")


def add_pattern_stage_time(f: Formulation) -> None:
    """t[s] >= sum_{g,n} compute[s,g,n] x[s,g,n] + e[s-1] + e[s]"""
    pp = f.cand.pp
    for s in range(pp):
        lin = Lin.of((1, t_(s)))
        for (g, n) in f.patterns_of(s):
            lin.add(-pattern_compute_s(f, s, g, n), x_(s, g, n))
        f.lm.add(f"st_{s}", _minus_sends(lin, s, pp, f.cand.v), ">=", 0, "time")


def add_pattern_dp_allreduce_and_optimizer(f: Formulation) -> None:
    """A >= sum_{g,n} alpha[g] (n P + P_fixed[s]) x[s,g,n];  O >= sum_{g,n} beta[g] (n P + P_fixed[s]) x[s,g,n]
    (with --overlap-grad-reduce, alpha's exposed part only: add_pattern_overlapped_grad_reduce adds the rest)"""
    c = f.c
    alpha = c.allreduce_floor_s_per_param
    for s in range(f.cand.pp):
        a, o = Lin.of((1, "A")), Lin.of((1, "O"))
        for (g, n) in f.patterns_of(s):
            params = n * c.layer_params[0] + c.fixed_params[s]
            a.add(-(alpha[g] * params + n * c.layer_allreduce_s(g, 0)), x_(s, g, n))
            o.add(-(c.optimizer_s_per_param[g] * params + n * c.layer_optimizer_s(g, 0)), x_(s, g, n))
        if _gather_chain(f):  # pp > 1 with --overlap-param-gather: A >= ... + PG (add_pattern_param_gather_chain)
            a.add(-1, "PG")
        f.lm.add(f"ar_{s}", a, ">=", 0, "time")
        f.lm.add(f"op_{s}", o, ">=", 0, "time")



def _overlap_parts(f: Formulation, s: int) -> dict[tuple[int, int], tuple[float, float, float]]:
    """(g, n) -> (rest, R, F) of stage s's pattern: the exposed part of its all-reduce and its experts' (rest), the
    overlapped collective R = share x alpha[g] x dense parameters, and its forward of one micro-batch F. With
    --overlap-param-gather (pp = 1, costmodel section 7f) rest holds the gather's delay in place of the gather, a
    constant of the pattern: overlapped_grad_reduce_s(G, F, n_b), G = the gather's rate x dense parameters."""
    c, pp = f.c, f.cand.pp
    out = {}
    for (g, n) in f.patterns_of(s):
        params = n * c.layer_params[0] + c.fixed_params[s]
        rest = c.allreduce_floor_s_per_param[g] * params + n * c.layer_allreduce_s(g, 0)
        forward = (n * c.forward_layer_s[g] + (c.forward_embedding_s[g] if s == 0 else 0.0)
                   + (c.forward_head_s[g] if s == pp - 1 else 0.0))
        if c.param_gather_s_per_param and pp == 1:  # the one stage's gather waited for by its first forward
            rest += overlapped_grad_reduce_s(c.param_gather_s_per_param[g] * params, forward, c.grad_buckets0(params))
        out[(g, n)] = (rest, c.allreduce_s_per_param[g] * params * c.grad_overlap_share, forward)
    return out


def _minus_backward(f: Formulation, lin: Lin, j: int, parts, weight: float = 1.0) -> Lin:
    """lin - weight W[j], W[j] = t[j] - e[j-1] - e[j] - sum_{g,n} F[j,g,n] x[j,g,n]: stage j's backward of one
    micro-batch (its compute less its forward; t[j] >= compute + sends, so W[j] >= the backward, and any excess in
    t[j] costs the iteration at least as much as it takes off A)."""
    lin.add(-weight, t_(j))
    for (g, n), (_, _, forward) in parts.items():
        lin.add(weight * forward, x_(j, g, n))
    if j > 0:
        lin.add(weight, e_(j - 1))
    if j < f.cand.pp - 1:
        lin.add(weight, e_(j))
    return lin


def add_pattern_overlapped_grad_reduce(f: Formulation) -> None:
    """--overlap-grad-reduce (costmodel section 7c, exposed_grad_reduce_s), one layer kind, v = 1. With rest and R
    per pattern (_overlap_parts), n_b the buckets of stage 0's pattern, W[j] stage j's backward (_minus_backward):
      s >= 1:  A >= sum x[s] (rest + R) - sum_{j<s} W[j]                  (one bucket, hidden by the stages before)
      s = 0:   A >= sum x[0] (rest + R / n_b)
               k A >= k sum x[0] (rest + R) - k sum_{n_b > k} x[0] R (1 - 1/n_b) - (k - 1) W[0]   each k = n_b >= 2
    (the rows A >= sum x[s] rest are add_pattern_dp_allreduce_and_optimizer's). The row of k is exact for a pattern
    with k buckets, lower for fewer (W[0] (k - 1) / k is more), and for more it asks at most rest + R / n_b."""
    c, pp = f.c, f.cand.pp
    parts = [_overlap_parts(f, s) for s in range(pp)]
    for s in range(1, pp):
        lin = Lin.of((1, "A"))
        for (g, n), (rest, whole, _) in parts[s].items():
            lin.add(-(rest + whole), x_(s, g, n))
        for j in range(s):
            _minus_backward(f, lin, j, parts[j], -1.0)
        if _gather_chain(f):
            lin.add(-1, "PG")
        f.lm.add(f"og_{s}", lin, ">=", 0, "time")
    buckets = {(g, n): c.grad_buckets0(n * c.layer_params[0] + c.fixed_params[0]) for (g, n) in parts[0]}
    lin = Lin.of((1, "A"))
    for (g, n), (rest, whole, _) in parts[0].items():
        lin.add(-(rest + whole / buckets[(g, n)]), x_(0, g, n))
    if _gather_chain(f):
        lin.add(-1, "PG")
    f.lm.add("og_0", lin, ">=", 0, "time")
    for k in sorted({b for (g, n), b in buckets.items() if b >= 2 and parts[0][(g, n)][1] > 0}):
        lin = Lin.of((k, "A"))
        for (g, n), (rest, whole, _) in parts[0].items():
            b = buckets[(g, n)]
            lin.add(-k * (rest + whole - (whole * (1.0 - 1.0 / b) if b > k else 0.0)), x_(0, g, n))
        _minus_backward(f, lin, 0, parts[0], -(k - 1))
        if _gather_chain(f):
            lin.add(-k, "PG")
        f.lm.add(f"og_0_{k}", lin, ">=", 0, "time")


def _gather_chain(f: Formulation) -> bool:
    """--overlap-param-gather on a candidate of pp > 1 stages (Candidate.gather): A carries the gathers' delay PG."""
    return bool(f.c.param_gather_s_per_param) and f.cand.pp > 1


def add_pattern_param_gather_chain(f: Formulation) -> None:
    """--overlap-param-gather at pp > 1 as upstream main dispatches it (costmodel section 7f, param_gather_delay_main_s):
      PG >= sum_{g,n} delay_0[g,n] x[0,g,n] + sum_{s>=1} sum_{g,n} ag[g] (n P + P_fixed[s]) x[s,g,n]
    delay_0 = overlapped_grad_reduce_s(ag[g] P_0, F_0, n_b), a constant of stage 0's pattern; every row of A (ar_s,
    og_s, og_0, og_0_k times k) has + PG, and the rest of those rows has no gather (allreduce_floor_s_per_param is 0
    here). So A >= max_s (e_s + PG) = max_s e_s + PG, exactly the estimate's max_s (dp_allreduce_s - G_s) + delay
    (PG only ever raises A, so it sits at its least value)."""
    c, pp = f.c, f.cand.pp
    lin = Lin.of((1, "PG"))
    for s in range(pp):
        for (g, n), (_, _, forward) in _overlap_parts(f, s).items():
            params = n * c.layer_params[0] + c.fixed_params[s]
            gather = c.param_gather_s_per_param[g] * params
            lin.add(-(overlapped_grad_reduce_s(gather, forward, c.grad_buckets0(params)) if s == 0 else gather),
                    x_(s, g, n))
    f.lm.add("pg", lin, ">=", 0, "time")


# ---- what the target runs (targets.py) ---------------------------------------------------------------------

def add_uniform_recompute(f: Formulation) -> None:
    """sum_r u[r] == 1, and every stage that holds layers runs in mode u. One kind (patterns):
    sum_{(g,n): n >= 1 layers do not fit on (s,g) in mode r} x[s,g,n] + u[r] <= 1;
    t[s] >= sum_{g,n} compute_r[s,g,n] x[s,g,n] + e[s-1] + e[s] - D_r[s] (1 - u[r]), D_r[s] = max (compute_r - least).
    Several kinds: sum_g y[s,g,r] <= u[r] (r != none, or a middle stage); sum_{g,k} n[s,g,none,k] <= L u[none] on an
    end stage (which may hold no layer and then recomputes nothing)."""
    R, pp = len(f.c.modes), f.cand.pp
    f.lm.add("u_one", Lin.of(*((1, u_(r)) for r in range(R))), "==", 1, "count")
    if f.patterns is None:
        total = sum(f.c.kind_layers)
        for s in range(pp):
            for r in range(R):
                if r == 0 and s in (0, pp - 1):
                    lin = Lin.of(*((1, n_(s, g, 0, k)) for g in range(len(f.cand.uses))
                                   for k in range(len(f.c.kind_layers))), (-total, u_(0)))
                else:
                    lin = Lin.of(*((1, y_(s, g, r)) for g in range(len(f.cand.uses))), (-1, u_(r)))
                f.lm.add(f"ur_{s}_{r}", lin, "<=", 0, "count")
        return
    for s in range(pp):
        for r in range(R):
            misfit = Lin.of(*((1, x_(s, g, n)) for (g, n) in f.patterns_of(s) if n >= 1 and f.most[s][g][r] < n))
            if misfit.terms:
                f.lm.add(f"ufit_{s}_{r}", misfit.add(1, u_(r)), "<=", 1, "count")
            lin, extra = Lin.of((1, t_(s))), 0.0
            for (g, n) in f.patterns_of(s):
                least = pattern_compute_s(f, s, g, n)
                at_r = pattern_compute_at(f, s, g, n, r) if n >= 1 and f.most[s][g][r] >= n else least
                extra = max(extra, at_r - least)
                lin.add(-at_r, x_(s, g, n))
            if extra > 0:
                lin = _minus_sends(lin, s, pp, f.cand.v).add(-extra, u_(r))
                f.lm.add(f"ust_{s}_{r}", lin, ">=", -extra, "time")


def add_node_type_order(f: Formulation, order: tuple[str, ...]) -> None:
    """z[j,g] + z[j+1,h] <= 1 where h comes before g in the target's order;  z[s,g] == 0 for a type it does not name"""
    rank = {name: i for i, name in enumerate(order)}
    names = [u.name for u in f.cand.uses]
    for s in range(f.cand.pp):
        for g, name in enumerate(names):
            if name not in rank:
                f.lm.add(f"ord0_{s}_{g}", Lin.of((1, z_(s, g))), "==", 0, "count")
    for j in range(f.cand.pp - 1):
        for g, a in enumerate(names):
            for h, b in enumerate(names):
                if a in rank and b in rank and rank[b] < rank[a]:
                    f.lm.add(f"ord_{j}_{g}_{h}", Lin.of((1, z_(j, g)), (1, z_(j + 1, h))), "<=", 1, "count")


def add_same_gpus_per_node(f: Formulation) -> None:
    """sum_q a[q] <= 1;  z[s,g] <= a[gpus per node of g]   (every node used has the same GPUs per node)"""
    counts = sorted({u.node.gpus_per_node for u in f.cand.uses})
    if len(counts) < 2:
        return
    for q in counts:
        f.lm.var(a_(q), "bool")
    f.lm.add("gpn_one", Lin.of(*((1, a_(q)) for q in counts)), "<=", 1, "count")
    for s in range(f.cand.pp):
        for g, use in enumerate(f.cand.uses):
            f.lm.add(f"gpn_{s}_{g}", Lin.of((1, z_(s, g)), (-1, a_(use.node.gpus_per_node))), "<=", 0, "count")


def chosen_mode(f: Formulation, sol: Solution) -> int | None:
    """The plan-wide recomputation index u, or None where each stage picks its own."""
    if not f.uniform_recompute:
        return None
    return max(range(len(f.c.modes)), key=lambda r: sol.values[u_(r)])


# ---- build and decode ---------------------------------------------------------------------------------------

DEADLINE_UPPER_MARGIN = 1e-2  # U under a deadline: this much above the bud_time row (CP-SAT's allowance, budgetplans)


def _time_upper_bound(c: Coefficients, cand: Candidate, budget: Budget, incumbent: float | None) -> float:
    """A valid upper bound on T for any assignment that can still matter (the big-M of the cost product).

    Beyond the structural bound: with a deadline, T <= max_time / iterations, raised by DEADLINE_UPPER_MARGIN; with a
    cost incumbent, a better plan has rent x T < incumbent, and rent >= w x (the pp cheapest stage slots' USD per
    GPU-hour).
    The margin (round 15, budgetplans): CP-SAT rounds every time coefficient to its tick, so a plan exactly on the
    deadline can have a rounded T above max_time / iterations; its translation lets the bud_time row through by an
    allowance for that (solver._budget_allowance), but U capped T in the time variables' domains and in the rows
    v >= T - U (1 - b) at the exact deadline, so that plan was no point of CP-SAT's model all the same: Megatron 18B
    on fasop-a100-a10, cost under D = the fastest plan's own time, CP-SAT called the one candidate holding plans
    "infeasible" (allowance 0.005 s, 3.5e-5 relative; CBC's re-check then found the plan, 0.6 s later). A larger
    U is still an upper bound on T (a weaker big-M: 1 % on the LP relaxation's v >= T - U (1 - b)); 1e-2 covers the
    allowance, 2 x half a tick x (layers + 8) x (m + pp + 2), about 1e-9 of U per rounded coefficient at the
    tick the model's range gives."""
    layers = sum(c.kind_layers)
    step_hi = max(x for per_g in c.step_s for per_r in per_g for x in per_r)
    send_hi = max(max(max(row) for row in c.send_inter_s), max(c.send_intra_s))
    t_hi = layers * step_hi + max(c.embedding_s) + max(c.head_s) + 2 * send_hi * cand.v
    if cand.v > 1:
        t_hi += (cand.v - 1) * max(max(max(row) for row in c.wrap_inter_s), max(c.wrap_intra_s))
    params_hi = sum(p * n for p, n in zip(c.layer_params, c.kind_layers)) + max(c.fixed_params) * 2
    upper = (c.m - 1 + cand.pp) * t_hi + params_hi * (max(c.allreduce_s_per_param) + max(c.optimizer_s_per_param))
    upper += sum(n * max(c.layer_allreduce_s(g, k) + c.layer_optimizer_s(g, k) for g in range(len(cand.uses)))
                 for k, n in enumerate(c.kind_layers))
    upper += max((x for row in c.emb_inter_s for x in row), default=0.0) + max(c.emb_intra_s, default=0.0)
    if budget.max_time_s is not None:  # with room for CP-SAT's rounding of T at a plan on the deadline (below)
        upper = min(upper, budget.max_time_s * (1 + BUDGET_REL) * (1 + DEADLINE_UPPER_MARGIN) / c.iterations)
    if budget.objective == "cost" and incumbent is not None:
        prices = sorted(p for u in cand.uses for p in [u.node.price_usd_per_node_hour / u.node.gpus_per_node]
                        * (u.node.num_nodes_available // u.nodes_per_block * u.stages_per_block))
        if len(prices) >= cand.pp:
            rent = cand.gpus_per_stage * sum(prices[: cand.pp])
            upper = min(upper, incumbent * SECONDS_PER_HOUR / c.iterations / rent)
    return upper * (1 + 1e-9) + 1e-9


def build(problem: Problem, budget: Budget, cand: Candidate, options: SpaceOptions,
          incumbent: float | None = None, incumbent_rel: float = 1e-9, skel: Skeleton | None = None,
          slower_than_s: float = 0.0) -> Formulation:
    if skel is None:
        skel = skeleton(problem, cand, options)
    c, patterns = skel.c, skel.patterns
    lm = LinearModel(objective_unit="rate" if budget.objective == "cost" else "time")
    pp, G, R, K = cand.pp, len(cand.uses), len(c.modes), len(c.kind_layers)
    block_starts = {}
    for s in range(pp):
        for g in range(G):
            if (s, g) in skel.block_starts:
                block_starts[(s, g)] = lm.var(skel.block_starts[(s, g)], "bool")
            lm.var(z_(s, g), "bool")
            if patterns is not None:
                continue
            for r in range(R):
                lm.var(y_(s, g, r), "bool")
                for k in range(K):
                    lm.var(n_(s, g, r, k), "int", 0, c.kind_layers[k])
        for k in range(1, K):
            lm.var(d_(s, k), "bool")
    if patterns is not None:
        for (s, g, n) in patterns:
            lm.var(x_(s, g, n), "bool")
    block = block_recompute_enabled(options)
    uniform = options.uniform_recompute and (R > 1 or block)
    if uniform:
        for r in range(R):
            lm.var(u_(r), "bool")
    f = Formulation(problem=problem, budget=budget, cand=cand, c=c, lm=lm, block_starts=block_starts,
                    time_upper_s=0.0, patterns=patterns, stage_patterns=skel.stage_patterns,
                    uniform_recompute=uniform, most=skel.most.tolist() if uniform and skel.most is not None else None)
    f.time_upper_s = _time_upper_bound(c, cand, budget, incumbent)
    U = f.time_upper_s
    for j in range(pp - 1):
        lm.var(e_(j), "time", 0, U)
    for s in range(pp):
        lm.var(t_(s), "time", 0, U)
    for name in ("M", "A", "O", "E", "T"):
        lm.var(name, "time", 0, U)
    if c.has_embedding_allreduce:
        lm.var("u_emb", "bool")
    if c.param_gather_s_per_param and pp > 1:
        lm.var("PG", "time", 0, U)  # the gathers' delay (add_pattern_param_gather_chain)
    if cand.v > 1:
        lm.var("e_wrap", "time", 0, U)
        lm.var("u_wrap", "bool")
    need_cost = budget.objective == "cost" or budget.max_cost_usd is not None
    if need_cost:
        for (s, g) in block_starts:
            lm.var(v_(s, g), "time", 0, U)

    add_blocks(f)                       # z[s,g] == sum of block starts covering s
    add_one_type_per_stage(f)           # sum_g z[s,g] == 1
    add_node_supply(f)                  # nodes of g <= available
    add_p2p(f)                          # e[j] >= send time of boundary j
    if patterns is not None:            # one layer kind: stage patterns (memory by construction)
        add_pattern_choice(f)           # sum_n x[s,g,n] == z[s,g]
        add_pattern_cover(f)            # sum n x == L
        add_pattern_stage_time(f)       # t[s] >= compute + sends
        add_pattern_dp_allreduce_and_optimizer(f)
        if c.grad_overlap_share > 0:
            add_pattern_overlapped_grad_reduce(f)  # A >= the exposed gradient reduce (section 7c)
        if _gather_chain(f):
            add_pattern_param_gather_chain(f)  # PG >= the gathers' delay at pp > 1 (section 7f)
    else:                               # several layer kinds (T5): integer layer counts per kind
        add_recompute_choice(f)         # sum_r y[s,g,r] == z[s,g]
        add_layer_cover(f)              # sum n[.,.,.,k] == L_k
        add_layer_bounds(f)             # n <= L_k y
        add_nonempty_middle(f)          # middle stages hold >= 1 layer
        add_no_recompute_when_empty(f)  # empty end stages recompute nothing
        add_kind_order(f)               # layer kinds stay in model order
        add_stage_time(f)               # t[s] >= compute + sends
        add_dp_allreduce(f)             # A >= all-reduce of every stage
        add_optimizer(f)                # O >= optimizer step of every stage
        add_memory(f)                   # per-GPU bytes <= capacity
    add_embedding_allreduce(f)          # E >= tied-embedding all-reduce (first <-> last stage)
    add_wrap_p2p(f)                     # v > 1: e_wrap >= a send between the last and the first stage
    if uniform:
        add_uniform_recompute(f)        # one recomputation mode on every stage with layers
    if skel.block is not None:
        f.block = skel.block
        add_block_recompute(f, skel.block)  # or block recomputation: the first N layers of every stage
    if options.node_type_order is not None:
        add_node_type_order(f, options.node_type_order)  # node types in the target's order
    if options.same_gpus_per_node:
        add_same_gpus_per_node(f)       # one GPUs-per-node count
    if options.kinds_split_at_stages and K > 1 and pp > 1:
        add_kinds_split(f)              # no stage holds layers of two kinds
    add_pipeline_max(f)                 # M >= t[s]
    add_iteration_time(f)               # T >= (m-1) M + sum t + A + O
    if need_cost:
        add_cost_product(f)             # v[s,g] = b[s,g] x T
    add_budgets(f)                      # time, cost, USD/hour limits
    add_incumbent_cut(f, incumbent, incumbent_rel)
    add_slower_than(f, slower_than_s)   # T >= slower_than / iterations
    lm.objective = objective_expr(f)
    return f


def decode(f: Formulation, sol: Solution) -> Plan:
    """Solution values -> Plan (types, layer counts and recomputation per stage)."""
    val = sol.values
    stages = []
    blk = block_chosen(f, sol)
    if blk is not None:
        return _decode_block(f, sol, blk)
    if f.patterns is not None:
        u = chosen_mode(f, sol)
        for s in range(f.cand.pp):
            g, n = max(f.patterns_of(s), key=lambda gn: val[x_(s, *gn)])
            r = f.patterns[(s, g, n)] if u is None or n == 0 else u
            stages.append(Stage(node_type=f.cand.uses[g].name, num_layers=n, recompute=f.c.modes[r]))
        return candidate_plan(f.problem, f.cand, tuple(stages))
    for s in range(f.cand.pp):
        g = max(range(len(f.cand.uses)), key=lambda gg: val[z_(s, gg)])
        r = max(range(len(f.c.modes)), key=lambda rr: val[y_(s, g, rr)])
        layers = sum(int(round(val[n_(s, g, r, k)])) for k in range(len(f.c.kind_layers)))
        stages.append(Stage(node_type=f.cand.uses[g].name, num_layers=layers, recompute=f.c.modes[r]))
    return candidate_plan(f.problem, f.cand, tuple(stages))


def solver_memory_bytes(f: Formulation, sol: Solution) -> list[float]:
    """Per-GPU memory of each stage as the model sees it (for the re-evaluation check)."""
    out = []
    blk = block_chosen(f, sol)
    if blk is not None:
        for s, layers in enumerate(_block_layers(f, sol)):
            g = _block_type(f, sol, s)
            out.append(block_stage_bytes(f.c, f.block, s, g, f.cand.pp, layers, [min(blk, n) for n in layers]))
        return out
    if f.patterns is not None:
        for s, stage in enumerate(decode(f, sol).stages):
            g = [u.name for u in f.cand.uses].index(stage.node_type)
            r = f.c.modes.index(stage.recompute)
            n = stage.num_layers
            out.append(memory_fixed_bytes(f.c, s, g, r, f.cand.pp) + n * memory_per_layer_bytes(f.c, s, g, r, 0))
        return out
    for s in range(f.cand.pp):
        g = max(range(len(f.cand.uses)), key=lambda gg: sol.values[z_(s, gg)])
        r = max(range(len(f.c.modes)), key=lambda rr: sol.values[y_(s, g, rr)])
        total = memory_fixed_bytes(f.c, s, g, r, f.cand.pp)
        for k in range(len(f.c.kind_layers)):
            total += memory_per_layer_bytes(f.c, s, g, r, k) * round(sol.values[n_(s, g, r, k)])
        out.append(total)
    return out


# ---- block recomputation (targets that run --recompute-method block) ----------------------------------------
# One more plan-wide choice beside the modes u[r]: u_blk, with an integer N (1 <= N <= L) such that every stage
# fully recomputes the first min(N, n_{s,k}) layers of each of its transformer blocks (kinds) and keeps all the
# activations of the others. The exact linear form of c = min(N, n) (n the layers of kind k on stage s), with one
# binary delta and M = the most layers of any kind:
#     c <= N,   c <= n,   c >= N - M (1 - delta),   c >= n - M delta
# (delta = 1: c >= N, so c = N <= n; delta = 0: c >= n, so c = n <= N). Time grows with c (each recomputed layer adds
# step(full) - step(none)) and memory falls with it, so both sides are needed.

@dataclass(frozen=True, slots=True, kw_only=True)
class BlockCoefficients:
    """Block recomputation's numbers, from the cost model, whatever the candidate's mode list: [g][k]."""

    step_none_s: tuple[tuple[float, ...], ...]
    step_full_s: tuple[tuple[float, ...], ...]
    act_none_bytes: tuple[tuple[float, ...], ...]
    act_full_bytes: tuple[tuple[float, ...], ...]
    working_bytes: tuple[float, ...]  # [g] full_recompute_working_bytes: one layer re-materialized
    big_m: int  # the most layers of any kind


def block_coefficients(problem: Problem, cand: Candidate) -> BlockCoefficients:
    kinds, tp, mbs = problem.model.kinds, cand.tp, cand.micro_batch_size
    names = [u.name for u in cand.uses]
    spans = [cand.gpus_per_stage > u.node.gpus_per_node for u in cand.uses]

    def table(fn, mode):
        return tuple(tuple(fn(problem, g, k, tp, mbs, mode, cand.cp) for k in kinds) for g in names)

    def step(mode):  # a layer's compute and, for an expert layer, its all-to-alls (as Coefficients.step_s)
        return tuple(tuple(cp_layer_step_s(problem, g, k, tp, mbs, mode, cand.cp)
                           + moe_layer_alltoall_s(problem, g, k, tp, cand.ep, mbs, mode, spans[i]) for k in kinds)
                     for i, g in enumerate(names))

    return BlockCoefficients(
        step_none_s=step("none"), step_full_s=step("full"),
        act_none_bytes=table(cp_layer_activation_bytes, "none"), act_full_bytes=table(cp_layer_activation_bytes, "full"),
        working_bytes=tuple(cp_full_recompute_working_bytes(problem, g, tp, mbs, cand.cp) for g in names),
        big_m=max(k.num_layers for k in kinds),
    )


def block_fixed_bytes(c: Coefficients, s: int, pp: int) -> float:
    """Per-GPU bytes of stage s that do not scale with its layers, as memory_fixed_bytes in mode none."""
    fixed = MEMORY_RESERVE_BYTES + c.state_bytes_per_param * c.fixed_params[s]
    if s == pp - 1:
        fixed += c.logits_bytes
    return fixed


def block_stage_bytes(c: Coefficients, bc: BlockCoefficients, s: int, g: int, pp: int, layers: list[int],
                      recomputed: list[int]) -> float:
    """Per-GPU bytes of stage s on g holding layers[k] layers of kind k of which recomputed[k] are recomputed: the
    estimate's sum (state + in-flight activations, + the working memory when some layer is recomputed)."""
    total = block_fixed_bytes(c, s, pp)
    if sum(layers) > 0:
        total += bc.working_bytes[g]
    for k, (n, r) in enumerate(zip(layers, recomputed)):
        total += c.layer_state_bytes(k) * n
        total += c.in_flight[s] * (r * bc.act_full_bytes[g][k] + (n - r) * bc.act_none_bytes[g][k])
    return total


def block_least_recomputed(f: Formulation | Skeleton, bc: BlockCoefficients, s: int, g: int, n: int) -> int | None:
    """One layer kind: the fewest layers c in 1..n a stage s on g with n >= 1 layers must recompute to fit, or None
    when not even c = n fits (memory falls as c grows when act(full) < act(none); then the least is found from the
    quotient and checked with the same sum as the estimate's)."""
    c, pp = f.c, f.cand.pp
    cap = c.capacity_bytes[g]

    def fits(r: int) -> bool:
        return block_stage_bytes(c, bc, s, g, pp, [n], [r]) <= cap

    drop = c.in_flight[s] * (bc.act_none_bytes[g][0] - bc.act_full_bytes[g][0])
    if drop <= 0:
        return 1 if fits(1) else None
    over = block_stage_bytes(c, bc, s, g, pp, [n], [0]) - cap
    r = min(n, max(1, math.ceil(over / drop - 1e-9)))
    while r > 1 and fits(r - 1):
        r -= 1
    while r <= n and not fits(r):
        r += 1
    return r if r <= n else None


def block_worth_modelling(f: Formulation | Skeleton, bc: BlockCoefficients) -> bool:
    """Block recomputation can beat the one-mode plans only where some stage does not fit without recomputation:
    where every stage of every plan fits in mode none, that plan is never slower than any block plan (exact
    pruning). One kind: some pattern (s, g, n >= 2) whose least mode is not none; several kinds: always."""
    if f.patterns is None:
        return True
    return any(n >= 2 and r != 0 for (s, g, n), r in f.patterns.items())


def bk_(s: int, g: int) -> str: return f"bk_{s}_{g}"
def bkk_(s: int, g: int, k: int) -> str: return f"bkk_{s}_{g}_{k}"
def bd_(s: int, k: int) -> str: return f"bd_{s}_{k}"
def bw_(s: int, g: int) -> str: return f"bw_{s}_{g}"


def _rows_by_name(f: Formulation) -> dict[str, Any]:
    return {con.name: con for con in f.lm.constraints}


def _amend(rows: dict[str, Any], name: str, coef: float, var: str) -> None:
    """Add coef x var to the row `name` (a row the families above built; absent rows have nothing to relax)."""
    if name in rows:
        rows[name].lin.add(coef, var)


def add_block_recompute(f: Formulation, bc: BlockCoefficients) -> None:
    """u_blk + sum_r u[r] == 1;  u_blk <= N <= M u_blk;  c[s,g,k] <= n[s,g,k], c[s,g,k] <= M u_blk; min rows above.

    One kind (patterns; n[s,g] = sum_n n x[s,g,n], c[s,g] = bk):
        t[s] >= sum_{g,n} compute_none[s,g,n] x[s,g,n] + sum_g (step_full - step_none)[g] c[s,g] + e[s-1] + e[s];
        c[s,g] >= sum_n cmin[s,g,n] x[s,g,n] - M (1 - u_blk)   (memory: cmin = block_least_recomputed);
        sum_{n: no c fits} x[s,g,n] + u_blk <= 1;
        the mode rows t[s] >= ... (st, ust) are relaxed by D u_blk, D = their largest excess over compute_none.
    Several kinds: block uses the none slots (ur rows admit u_blk there), the stage time row gains
    (step_full - step_none)[g,k] c[s,g,k], and the none memory row loses (act_none - act_full) in_flight c and gains
    the working memory W[g] w[s,g], w[s,g] >= c[s,g,k] / L_k."""
    c, pp, G, K, M = f.c, f.cand.pp, len(f.cand.uses), len(f.c.kind_layers), bc.big_m
    lm = f.lm
    lm.var("u_blk", "bool")
    lm.var("N_blk", "int", 0, M)
    rows = _rows_by_name(f)
    _amend(rows, "u_one", 1, "u_blk")
    lm.add("bn_lo", Lin.of((1, "N_blk"), (-1, "u_blk")), ">=", 0, "count")
    lm.add("bn_hi", Lin.of((1, "N_blk"), (-M, "u_blk")), "<=", 0, "count")
    if f.patterns is not None:
        for s in range(pp):
            lm.var(bd_(s, 0), "bool")
            layers, rec = Lin(), Lin()
            for g in range(G):
                pats = [n for (gg, n) in f.patterns_of(s) if gg == g]
                top = max(pats, default=0)
                lm.var(bk_(s, g), "int", 0, top)
                rec.add(1, bk_(s, g))
                here = Lin.of(*((n, x_(s, g, n)) for n in pats))
                layers.extend(here)
                lm.add(f"bkn_{s}_{g}", Lin.of((1, bk_(s, g))).extend(here, -1), "<=", 0, "count")
                lm.add(f"bku_{s}_{g}", Lin.of((1, bk_(s, g)), (-top, "u_blk")), "<=", 0, "count")
                need, misfit = Lin.of((1, bk_(s, g)), (-M, "u_blk")), Lin.of((1, "u_blk"))
                for n in pats:
                    if n == 0:
                        continue
                    least = block_least_recomputed(f, bc, s, g, n)
                    if least is None:
                        misfit.add(1, x_(s, g, n))
                    else:
                        need.add(-least, x_(s, g, n))
                lm.add(f"bkm_{s}_{g}", need, ">=", -M, "count")
                if len(misfit.terms) > 1:
                    lm.add(f"bkf_{s}_{g}", misfit, "<=", 1, "count")
            _add_min_rows(f, s, 0, rec, layers, M)
            # time
            lin, excess = Lin.of((1, t_(s))), {}
            for (g, n) in f.patterns_of(s):
                none = pattern_compute_at_none(f, bc, s, g, n)
                lin.add(-none, x_(s, g, n))
                excess[(g, n)] = none
            for g in range(G):
                lin.add(-(bc.step_full_s[g][0] - bc.step_none_s[g][0]), bk_(s, g))
            lm.add(f"bst_{s}", _minus_sends(lin, s, pp), ">=", 0, "time")
            for name in [f"st_{s}", *(f"ust_{s}_{r}" for r in range(len(c.modes)))]:
                _relax_for_block(rows, s, name, excess)
        return
    total = sum(c.kind_layers)
    for s in range(pp):
        _amend(rows, f"ur_{s}_0", -(total if s in (0, pp - 1) else 1), "u_blk")
        for g in range(G):
            lm.var(bw_(s, g), "bool")
            for k in range(K):
                lm.var(bkk_(s, g, k), "int", 0, c.kind_layers[k])
                lm.add(f"bkn_{s}_{g}_{k}", Lin.of((1, bkk_(s, g, k)), (-1, n_(s, g, 0, k))), "<=", 0, "count")
                lm.add(f"bku_{s}_{g}_{k}", Lin.of((1, bkk_(s, g, k)), (-c.kind_layers[k], "u_blk")), "<=", 0, "count")
                lm.add(f"bkw_{s}_{g}_{k}", Lin.of((c.kind_layers[k], bw_(s, g)), (-1, bkk_(s, g, k))), ">=", 0, "count")
                _amend(rows, f"st_{s}", -(bc.step_full_s[g][k] - bc.step_none_s[g][k]), bkk_(s, g, k))
                drop = c.in_flight[s] * (bc.act_none_bytes[g][k] - bc.act_full_bytes[g][k])
                _amend(rows, f"mem_{s}_{g}_0", -drop, bkk_(s, g, k))
            _amend(rows, f"mem_{s}_{g}_0", bc.working_bytes[g], bw_(s, g))
        for k in range(K):
            lm.var(bd_(s, k), "bool")
            rec = Lin.of(*((1, bkk_(s, g, k)) for g in range(G)))
            layers = Lin.of(*((1, n_(s, g, 0, k)) for g in range(G)))
            _add_min_rows(f, s, k, rec, layers, M)


def _relax_for_block(rows: dict[str, Any], s: int, name: str, none_s: dict[tuple[int, int], float]) -> None:
    """A mode row t[s] - sum a[g,n] x[s,g,n] - sends (- ... u[r]) >= rhs gains + D u_blk, D = max(0, max (a - none)
    + rhs): with u_blk = 1 (every u[r] = 0) it asks no more than the block row bst, which prices the stage."""
    con = rows.get(name)
    if con is None:
        return
    worst = max((-con.lin.terms.get(x_(s, g, n), 0.0) - t for (g, n), t in none_s.items()), default=0.0)
    d = worst + con.rhs
    if d > 0:
        con.lin.add(d, "u_blk")


def _add_min_rows(f: Formulation, s: int, k: int, rec: Lin, layers: Lin, M: int) -> None:
    """rec <= N;  rec >= N - M (1 - delta);  rec >= layers - M delta   (rec <= layers: the caller's rows)"""
    f.lm.add(f"bmin1_{s}_{k}", Lin.of((-1, "N_blk")).extend(rec), "<=", 0, "count")
    f.lm.add(f"bmin2_{s}_{k}", Lin.of((-1, "N_blk"), (-M, bd_(s, k))).extend(rec), ">=", -M, "count")
    f.lm.add(f"bmin3_{s}_{k}", Lin.of((M, bd_(s, k))).extend(rec).extend(layers, -1), ">=", 0, "count")


def pattern_compute_at_none(f: Formulation | Skeleton, bc: BlockCoefficients, s: int, g: int, n: int) -> float:
    """Compute time of pattern (s, g, n) with no layer recomputed (block's base)."""
    c, pp = f.c, f.cand.pp
    return n * bc.step_none_s[g][0] + (c.embedding_s[g] if s == 0 else 0.0) + (c.head_s[g] if s == pp - 1 else 0.0)


def block_chosen(f: Formulation, sol: Solution) -> int | None:
    """N of a block plan, or None."""
    if getattr(f, "block", None) is None or sol.values.get("u_blk", 0.0) < 0.5:
        return None
    return int(round(sol.values["N_blk"]))


def _block_type(f: Formulation, sol: Solution, s: int) -> int:
    return max(range(len(f.cand.uses)), key=lambda g: sol.values[z_(s, g)])


def _block_layers(f: Formulation, sol: Solution) -> list[list[int]]:
    """[s][k] layers of kind k on stage s in a block solution."""
    out = []
    for s in range(f.cand.pp):
        g = _block_type(f, sol, s)
        if f.patterns is not None:
            out.append([max((n for (gg, n) in f.patterns_of(s) if gg == g), key=lambda n: sol.values[x_(s, g, n)])])
        else:
            out.append([int(round(sol.values[n_(s, g, 0, k)])) for k in range(len(f.c.kind_layers))])
    return out


def _decode_block(f: Formulation, sol: Solution, blk: int) -> Plan:
    """A block solution -> Plan: "full" on every stage with layers and recompute_num_layers = N, or plain full
    recomputation where N covers every stage's layers of every kind (the same plan, priced the same)."""
    layers = _block_layers(f, sol)
    stages = tuple(Stage(node_type=f.cand.uses[_block_type(f, sol, s)].name, num_layers=sum(ls),
                         recompute="full" if sum(ls) > 0 else "none") for s, ls in enumerate(layers))
    partial = any(n > blk for ls in layers for n in ls)
    return candidate_plan(f.problem, f.cand, stages, recompute_num_layers=blk if partial else None)


def hk_(s: int, k: int) -> str: return f"hk_{s}_{k}"


def add_kinds_split(f: Formulation) -> None:
    """sum_{g,r} n[s,g,r,k] <= L_k h[s,k];  sum_k h[s,k] <= 1   (pp > 1: every stage wholly one kind, as FASOP's fork
    runs encoder stages below the split rank and decoder stages from it)"""
    for s in range(f.cand.pp):
        for k, total in enumerate(f.c.kind_layers):
            f.lm.var(hk_(s, k), "bool")
            lin = Lin.of(*((1, n_(s, g, r, k)) for g in range(len(f.cand.uses)) for r in range(len(f.c.modes))))
            f.lm.add(f"hks_{s}_{k}", lin.add(-total, hk_(s, k)), "<=", 0, "count")
        f.lm.add(f"hk1_{s}", Lin.of(*((1, hk_(s, k)) for k in range(len(f.c.kind_layers)))), "<=", 1, "count")
