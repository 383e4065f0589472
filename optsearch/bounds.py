"""Valid lower bounds on a candidate (tp, dp, micro-batch b, pp), so the outer loop can skip candidates unsolved.

Every bound holds for every plan of the candidate (never an estimate), which is what keeps the search exact.
Notation: step_min[g] = min_k step[g,none,k] (a layer on g), S_g = stage slots of type g (whole-node blocks available),
p_g = USD per GPU-hour of g, w = tp x dp, m micro-batches, L layers.

  sum_s t_s >= SUM = sum_k L_k min_g step[g,none,k] + min_g emb[g] + min_g head[g] + 2 (pp - 1) e_min
  max_s t_s >= SUM / pp
  Pipeline, per composition (s_g stages of type g): (m - 1) max t + sum t >= min over M of (m - 1) M + SIGMA(M), where
  a stage of g holds at most k_g(M) = min(NMAX[g], floor((M - its sends) / step_min[g])) whole layers and SIGMA(M)
  pours the L layers into them fastest-first (`_pipeline_s`); PIPE denotes this bound below.
  A >= min_g alpha[g] x P_total / pp,   O >= min_g beta[g] x P_total / pp   (some stage holds >= 1/pp of the params)
  Per composition also A >= max_{g present} alpha[g] x P_stage_min (likewise O with beta): every stage of g all-reduces
  its own parameters, and every stage holds at least P_stage_min (`_least_stage_parameters`).
  T >= max((m - 1) SUM / pp + SUM, PIPE) + A_lb + O_lb
Rent: rate >= w x (sum of the pp cheapest stage slots' p_g) = RATE.
Cost per iteration >= max( RATE x T_lb,
                           w (m C + (pp - 1) p_min SUM) + RATE (A_lb + O_lb) ),
  where C = sum_k L_k min_g p_g step[g,none,k] + min_g p_g emb[g] + min_g p_g head[g] + 2 (pp - 1) p_min e_min,
  because rate x T_pipe = w sum_s p_s ((m - 1) max t + sum t) >= w (m sum_s p_s t_s + (pp - 1) p_min sum_s t_s);
  C is raised to `_weighted_with_sends` where that is larger (every send at its own type's least send e_g).
  With too many compositions to list, also >= min over M of w LP_rate(k(M)) x ((m - 1) max(M, SUM / pp) + SUM +
  A_lb + O_lb)  (`_joint_cost_rate_s`): the rent of pp slots that hold L layers when none exceeds M.
Under solver.solve's window (only plans slower than W count) each composition's T_lb is raised to W / iterations
and its cost per iteration to at least its own RATE x that, before the least over compositions is taken: sharper
than raising the least ones (`bound_over_compositions`). The composition bounds themselves are budget-free, and the
solver's memo keeps them for every later budget of a sweep.
Memory: a stage of type g holds at most NMAX[g] layers (capacity: the usable memory less the headroom; one micro-batch in flight, nothing else on it, in whichever
recomputation mode, or block recomputation, lets it hold the most: `max_layers_per_stage`);
if the pp best slots cannot hold L layers, or the average parameter share does not fit the largest GPU,
the candidate is infeasible.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from optsearch.candidates import NodeUse
from optsearch.costmodel import (
    MEMORY_RESERVE_BYTES, memory_capacity_bytes, num_micro_batches, stage_parameters,
)
from optsearch.costmodel import (
    expert_allreduce_s, expert_optimizer_step_s, expert_state_bytes_per_param, moe_layer_alltoall_s,
    cp_embedding_step_s, cp_full_recompute_working_bytes, cp_head_step_s, cp_layer_activation_bytes, cp_layer_step_s,
    distributed_optimizer_on, gradient_sync_s, optimizer_s, stage_send_s, state_bytes,
)
from optsearch.costmodel import WEIGHT_BYTES_PER_PARAM, gradient_bytes
from optsearch.plan import RECOMPUTE_MODES
from optsearch.problem import Problem
from optsearch.search import BOUND_SLACK
from optsearch.units import SECONDS_PER_HOUR


@dataclass(frozen=True, slots=True, kw_only=True)
class DegreeTerms:
    """Everything about (tp, dp, b) that the per-pp bounds need."""

    m: int
    tp: int
    w: int
    uses: tuple[NodeUse, ...]
    slots: tuple[int, ...]  # [g] stage slots available
    step_min_s: tuple[float, ...]  # [g]
    price_per_gpu_hour: tuple[float, ...]  # [g]
    layer_work_min_s: float  # sum_k L_k min_g step
    end_work_min_s: float  # min emb + min head
    cost_work_min: float  # C without the p2p part (USD/GPU-hour x s)
    send_min_s: float
    alpha_min: float
    beta_min: float
    layer_params: float
    max_layers_per_stage: tuple[int, ...]  # [g] NMAX
    stages_per_block: tuple[int, ...]  # [g] q_g
    layer_work_s: tuple[float, ...]  # [g] sum_k L_k step[g,none,k]
    end_work_s: tuple[float, ...]  # [g] emb[g] + head[g] (a lower bound on the ends if g holds them)
    emb_s: tuple[float, ...]  # [g]
    head_s: tuple[float, ...]  # [g]
    alpha: tuple[float, ...]  # [g]
    beta: tuple[float, ...]  # [g]
    send_inter_s: tuple[tuple[float, ...], ...]  # [g][h]
    send_intra_s: tuple[float | None, ...]  # [g], None when g's stages never share a node
    capacity_bytes_max: float
    state_bytes_per_param: float
    ends_params: tuple[float, float] = (0.0, 0.0)  # embedding + head of the model at pp = 1, and at pp > 1
    least_stage_params: tuple[float, float, float] = (0.0, 0.0, 0.0)  # P_stage_min at pp = 1, 2, > 2
    # --overlap-grad-reduce (Problem.overlap_grad_reduce): alpha above is the exposed floor (grad_overlap_floor) and
    # these are the whole collective's rates, for sum_s t_s + A >= every stage's whole reduce (overlap_iteration_s).
    alpha_full: tuple[float, ...] = ()  # [g]; empty when the overlap is off
    alpha_full_min: float = 0.0
    distributed_optimizer: bool | None = None  # the setting these terms are at (degree_terms' dist)
    # --overlap-param-gather searched (Problem.overlap_param_gather): alpha above is the floor of every pp (0, the
    # pp = 1 one) and these are the floor of pp > 1 candidates, where the gather is off (grad_overlap_floor's pp).
    alpha_multi: tuple[float, ...] = ()  # [g]; empty when it equals alpha
    alpha_multi_min: float = 0.0
    # The terms of the --overlap-param-gather copies at pp > 1 (Candidate.gather, issue 15 ppgather; gather_terms):
    # alpha_multi empty, so every pp takes alpha (the gather's floor 0, as at pp = 1), and the in-flight bound's
    # pp = 1 changes of 7f (no forward credit, rho = 1) apply at every pp (gather_hidden_at).
    param_gather: bool = False

    def all_params(self, pp: int) -> float:
        """P_total: every layer, the embedding and the head (with the tied copy when pp > 1)."""
        return self.layer_params + self.ends_params[pp > 1]

    def alpha_at(self, pp: int) -> tuple[float, ...]:
        """alpha of the candidates with pp stages (alpha_multi where pp > 1 and it is kept, else alpha)."""
        return self.alpha_multi if pp > 1 and self.alpha_multi else self.alpha

    def alpha_min_at(self, pp: int) -> float:
        """min_g alpha_at(pp)."""
        return self.alpha_multi_min if pp > 1 and self.alpha_multi else self.alpha_min

    def gather_hidden_at(self, problem, pp: int) -> bool:
        """Whether the plans of these terms at pp may run --overlap-param-gather (stage 0's gather then waits on its
        first forward, 7f): the problem searches it and pp = 1, or these are the gather copy's terms."""
        return problem.overlap_param_gather and (pp == 1 or self.param_gather)


def gather_terms(d: DegreeTerms) -> DegreeTerms:
    """The terms of the --overlap-param-gather copies at pp > 1 (Candidate.gather) from the default setting's d (the
    distributed optimizer on): the same but for the gather's floor, 0 at every pp (alpha, grad_overlap_floor's pp =
    None; the gather's delay at main's dispatch is >= 0), and param_gather set. Every bound through them holds for
    the copy's plans: A_on = max_s e_s + delay_0 + sum_{i>0} G_i >= every e_s (docs/solver.md "The gather floor")."""
    from dataclasses import replace as _replace
    return _replace(d, alpha_multi=(), alpha_multi_min=0.0, param_gather=True)


def _calls(cache: dict | None):
    """fn(problem, *args) for the cost model's per-layer functions, memoized in `cache` (one problem's: solver.Memo
    keeps it) by the function's name and its arguments (a layer kind by its name). Those functions do not depend on
    dp, and the solver asks for the same (type, kind, tp, b, mode, cp) at every dp: GPT-3 175B in the megatron
    target's space has 1,190 (tp, dp, b, cp) and about 80 (tp, b, cp). The values are the functions' own."""
    def call(fn, problem, *args):
        if cache is None:
            return fn(problem, *args)
        key = (fn.__name__, *(getattr(a, "name", a) if not isinstance(a, str) else a for a in args))
        if key not in cache:
            cache[key] = fn(problem, *args)
        return cache[key]
    call.cache = cache  # type: ignore[attr-defined]  (for callers that keep derived values beside the calls)
    return call


SHARED_SENDS = True  # degree_terms' pipeline sends kept in its cache per (types, w, b, tp, cp) (round 15, lists)


def degree_terms(problem: Problem, tp: int, dp: int, mbs: int, uses: tuple[NodeUse, ...], ep: int = 1,
                 cp: int = 1, cache: dict | None = None, dist: bool | None = None) -> DegreeTerms:
    """The terms at (tp, dp, b, ep, cp). Context parallelism enters every per-layer term through the cost model's cp_*
    functions, and the distributed optimizer at `dist` (None: as the search decides it, distributed_optimizer_on;
    a candidate that sets it, formulation.model.Candidate.dist, takes the terms at its own setting), so every bound
    below holds for each cp and either optimizer setting: they bound the same coefficients the model uses.
    Mixture of experts: steps include the expert all-to-alls at this ep (exact); alpha, beta and the state bytes are
    the lesser of the dense and the expert per-parameter rates (moe_rates), so every bound over parameters holds."""
    model = problem.model
    names = [u.name for u in uses]
    w = tp * cp * dp
    kinds = model.kinds
    dist = distributed_optimizer_on(problem.job, dp, cp) if dist is None else dist
    spans = {u.name: w > u.node.gpus_per_node for u in uses}
    call = _calls(cache)
    step = {g: [call(cp_layer_step_s, problem, g, k, tp, mbs, "none", cp)
                + moe_layer_alltoall_s(problem, g, k, tp, ep, mbs, "none", spans[g]) for k in kinds] for g in names}
    emb = {g: call(cp_embedding_step_s, problem, g, tp, mbs, cp) for g in names}
    head = {g: call(cp_head_step_s, problem, g, tp, mbs, cp) for g in names}
    price = {u.name: u.node.price_usd_per_node_hour / u.node.gpus_per_node for u in uses}
    send_key = ("degree_sends", tuple(names), tuple(u.stages_per_block > 1 for u in uses), w, mbs, tp, cp)
    sent = cache.get(send_key) if cache is not None and SHARED_SENDS else None
    if sent is None:  # the sends do not depend on ep or the optimizer setting: once per memo (round 15, lists)
        sent = (tuple(tuple(stage_send_s(problem, g, h, False, w, mbs, tp, cp) for h in names) for g in names),
                tuple(stage_send_s(problem, u.name, u.name, True, w, mbs, tp, cp) if u.stages_per_block > 1
                      else None for u in uses))
        if cache is not None and SHARED_SENDS:
            cache[send_key] = sent
    inter, intra = sent
    sends = [s for row in inter for s in row] + [s for s in intra if s is not None]  # each send computed once
    state = state_bytes(problem.job, dp, cp, dist)
    nmax = [max_layers_per_stage(problem, g, tp, dp, mbs, ep, cp, cache, dist) for g in names]
    alpha = tuple(gradient_sync_s(problem, u.name, 1.0, tp, dp, w > u.node.gpus_per_node, cp, dist) for u in uses)
    alpha_full: tuple[float, ...] = ()
    alpha_multi: tuple[float, ...] = ()
    if problem.overlap_grad_reduce:  # --overlap-grad-reduce may hide the reduce: only its exposed floor (section 7c)
        alpha_full, alpha = alpha, grad_overlap_floor(problem, dist, alpha)
        if problem.overlap_param_gather and dist:  # the floor at pp > 1 (no gather there, 7f); alpha: every pp's
            alpha_multi = grad_overlap_floor(problem, dist, alpha_full, pp=2)
    beta = tuple(optimizer_s(problem, g, 1.0, tp, dp, cp, dist) for g in names)
    if model.is_moe:
        if alpha_full:
            alpha_full = moe_rates(problem, uses, tp, dp, ep, alpha_full, beta, state, dist)[0]
        if alpha_multi:
            alpha_multi = moe_rates(problem, uses, tp, dp, ep, alpha_multi, beta, state, dist)[0]
        alpha, beta, state = moe_rates(problem, uses, tp, dp, ep, alpha, beta, state, dist)
    model_terms = cache.get(("model_terms",)) if cache is not None else None
    if model_terms is None:  # the model's own (no degree): one computation per problem, the same values
        model_terms = (float(sum(model.layer_parameters(k) * k.num_layers for k in kinds)),
                       (stage_parameters(model, {}, True, True, 1), stage_parameters(model, {}, True, True, 2)),
                       tuple(_least_stage_parameters(model, pp) for pp in (1, 2, 3)))
        if cache is not None:
            cache[("model_terms",)] = model_terms
    return DegreeTerms(
        m=num_micro_batches(problem.job, dp, mbs),
        tp=tp,
        w=w,
        uses=uses,
        slots=tuple(u.node.num_nodes_available // u.nodes_per_block * u.stages_per_block for u in uses),
        step_min_s=tuple(min(step[g]) for g in names),
        price_per_gpu_hour=tuple(price[g] for g in names),
        layer_work_min_s=sum(k.num_layers * min(step[g][i] for g in names) for i, k in enumerate(kinds)),
        end_work_min_s=min(emb.values()) + min(head.values()),
        cost_work_min=sum(k.num_layers * min(price[g] * step[g][i] for g in names) for i, k in enumerate(kinds))
        + min(price[g] * emb[g] for g in names) + min(price[g] * head[g] for g in names),
        send_min_s=min(sends),
        alpha_min=min(alpha),
        beta_min=min(beta),
        layer_params=model_terms[0],
        max_layers_per_stage=tuple(nmax),
        stages_per_block=tuple(u.stages_per_block for u in uses),
        layer_work_s=tuple(sum(k.num_layers * step[g][i] for i, k in enumerate(kinds)) for g in names),
        end_work_s=tuple(emb[g] + head[g] for g in names),
        emb_s=tuple(emb[g] for g in names),
        head_s=tuple(head[g] for g in names),
        alpha=alpha,
        beta=beta,
        send_inter_s=inter,
        send_intra_s=intra,
        capacity_bytes_max=max(memory_capacity_bytes(problem, problem.node(g).gpu) for g in names),
        state_bytes_per_param=state,
        ends_params=model_terms[1],
        least_stage_params=model_terms[2],
        alpha_full=alpha_full,
        alpha_full_min=min(alpha_full) if alpha_full else 0.0,
        distributed_optimizer=dist,
        alpha_multi=alpha_multi,
        alpha_multi_min=min(alpha_multi) if alpha_multi else 0.0,
    )


def grad_overlap_floor(problem: Problem, distributed: bool, alpha: tuple[float, ...], pp: int | None = None
                       ) -> tuple[float, ...]:
    """alpha with --overlap-grad-reduce (costmodel section 7c): the overlapped collective (the all-reduce, or the
    distributed optimizer's reduce-scatter, g of its g + 2 bytes) may be hidden by the backward, so only the rest
    (the parameter all-gather) is a floor on A: 0, or alpha x 2 / (g + 2). Applied to every candidate of a problem
    with the overlap on (also where overlap_grad_reduce_on is off for it: lower, still valid). With
    --overlap-param-gather in the search (Problem.overlap_param_gather; costmodel.overlap_param_gather_on turns it on
    for one-stage plans) the all-gather's delay may be as small as the gather / its buckets: 0 for candidates of
    pp = 1 and for a set of candidates of any pp (pp None: the least floor over them); candidates with pp > 1 keep
    the gather exposed after the step (the default candidates leave the flag off there), so theirs is the floor
    above; the copies with the flag on at pp > 1 take 0 (gather_terms)."""
    if not distributed or (problem.overlap_param_gather and (pp is None or pp == 1)):
        return tuple(0.0 for _ in alpha)
    g = gradient_bytes(problem.job)
    return tuple(a * WEIGHT_BYTES_PER_PARAM / (g + WEIGHT_BYTES_PER_PARAM) for a in alpha)


def moe_rates(problem: Problem, uses: tuple[NodeUse, ...], tp: int, dp: int, ep: int, alpha: tuple[float, ...],
              beta: tuple[float, ...], state: float, distributed: bool = False
              ) -> tuple[tuple[float, ...], tuple[float, ...], float]:
    """Per-parameter rates that bound a mixture-of-experts stage from below: a stage's all-reduce is
    alpha[g] D + alpha_e[g] X >= min(alpha[g], alpha_e[g]) (D + X) for its dense D and expert X parameters; the same for
    beta and for the per-GPU state bytes (state / tp dense, expert_state / (tp ep) expert: returned per tp).
    Context parallelism is not combined with experts (costmodel.context_parallel_error), so a stage is tp x dp GPUs."""
    w = tp * dp
    alpha_e = [expert_allreduce_s(problem, u.name, 1.0, tp, dp, ep, w > u.node.gpus_per_node, distributed) for u in uses]
    beta_e = [expert_optimizer_step_s(problem, u.name, 1.0, tp, dp, ep, distributed) for u in uses]
    state_e = expert_state_bytes_per_param(problem.job, dp, ep, distributed) / ep
    return (tuple(min(a, b) for a, b in zip(alpha, alpha_e)), tuple(min(a, b) for a, b in zip(beta, beta_e)),
            min(state, state_e))


def max_layers_per_stage(problem: Problem, node_type: str, tp: int, dp: int, mbs: int, ep: int = 1,
                         cp: int = 1, cache: dict | None = None, dist: bool | None = None) -> int:
    """NMAX[g]: the most layers one stage of this type can hold, over EVERY recomputation mode and layer kind.

    A stage of n >= 1 layers in mode r needs at least reserve + [r = full] W + n min_k (state P_k / tp + act[r, k])
    bytes per GPU (one micro-batch in flight, no embedding, head or logits), W being full recomputation's working
    memory (one whole layer's activations, costmodel.full_recompute_working_bytes). So n <= the largest n_r of any
    mode. No mode is assumed to need the least memory: full recomputation keeps only the layer input per layer but
    adds W, and with long sequences selective may hold more layers (issue 14: 8 layers, hidden 1536, seq 8192 on a
    24 GiB A10 fit 8 layers at b = 4 with selective and none with full). Every mode of the plan space is taken, so
    the cap also holds under a restricted mode list. The quotient is rounded up by 1e-9 (the cost model sums in
    another order) and capped at the model's layers."""
    model = problem.model
    call = _calls(cache)  # memoized per-layer calls (the same values)
    dist = distributed_optimizer_on(problem.job, dp, cp) if dist is None else dist  # degree_terms' setting
    state = state_bytes(problem.job, dp, cp, dist)
    expert_state = expert_state_bytes_per_param(problem.job, dp, ep, dist) if model.is_moe else state
    key = ("max_layers_per_stage", node_type, tp, mbs, ep, cp, state, expert_state)  # everything it depends on
    if cache is not None and key in cache:
        return cache[key]
    most = _max_layers(problem, node_type, tp, mbs, ep, cp, state, expert_state, call)
    if cache is not None:
        cache[key] = most
    return most


def _max_layers(problem: Problem, node_type: str, tp: int, mbs: int, ep: int, cp: int, state: float,
                expert_state: float, call) -> int:
    """max_layers_per_stage's computation, given its state bytes per parameter (dp and the optimizer enter only
    through them): the same operations in the same order."""
    model = problem.model
    key = ("_max_layers_terms", node_type, tp, mbs, cp)  # what does not depend on dp (the same values, kept)
    terms = call.cache.get(key) if call.cache is not None else None
    if terms is None:
        kinds = model.kinds  # a property that builds the kinds: once here
        terms = (memory_capacity_bytes(problem, problem.node(node_type).gpu) - MEMORY_RESERVE_BYTES,
                 [(k.is_moe, model.layer_parameters(k), model.expert_parameters(k)) for k in kinds],
                 {mode: [call(cp_layer_activation_bytes, problem, node_type, k, tp, mbs, mode, cp) for k in kinds]
                  for mode in RECOMPUTE_MODES + tuple(m for m in ("none", "full") if m not in RECOMPUTE_MODES)},
                 call(cp_full_recompute_working_bytes, problem, node_type, tp, mbs, cp))
        if call.cache is not None:
            call.cache[key] = terms
    capacity, params, act, working = terms
    most = 0
    for mode in RECOMPUTE_MODES:
        per_layer = min((state / tp * lp if not moe else state / tp * (lp - xp) + expert_state / (tp * ep) * xp)
                        + a for (moe, lp, xp), a in zip(params, act[mode]))
        room = capacity - (working if mode == "full" else 0.0)
        if room > 0:
            most = max(most, math.floor(room / per_layer * (1 + 1e-9)))
    # Block recomputation mixes full and none layers and adds W: each layer needs at least the lesser of the two.
    per_layer = min((state / tp * lp if not moe else state / tp * (lp - xp) + expert_state / (tp * ep) * xp)
                    + min(a_none, a_full) for (moe, lp, xp), a_none, a_full in zip(params, act["none"], act["full"]))
    room = capacity - working
    if room > 0:
        most = max(most, math.floor(room / per_layer * (1 + 1e-9)))
    return min(most, model.num_layers)


def _best_slots(values: tuple[float, ...], slots: tuple[int, ...], pp: int, *, largest: bool) -> float | None:
    """Sum of `values` over pp slots chosen greedily (largest or smallest first), at most slots[g] of each g."""
    order = sorted(range(len(values)), key=lambda g: values[g], reverse=largest)
    left, total = pp, 0.0
    for g in order:
        take = min(left, slots[g])
        total += take * values[g]
        left -= take
        if left == 0:
            return total
    return None


FAST_FLOOR = True  # least_slowest_stage_s with one supply: per mark, not per pp (the bisection below gives the same)
SLOWEST_SLACK = 1 - 2e-9  # the slowest-stage floor is lowered by this: a cap rounded up by 1e-9 may hold near a mark


def _fewest_middle_stages(k_mid: np.ndarray, slots: np.ndarray, rem: np.ndarray) -> np.ndarray:
    """Per mark (row), the fewest middle stages that hold `rem` layers when type g's stages hold k_mid[:, g] each and
    it has slots[g] of them: the greedy, largest caps first (ceil of what the last group must add); 0 where rem <= 0,
    inf where every slot together falls short. Made non-increasing along the marks (the caps only grow with M), so
    the first mark with at most pp - 2 is a searchsorted. Shared by least_slowest_stage_s's one-supply path and
    `_least_slowest_one_supply` (the same operations, so the same floats)."""
    n = len(rem)
    order = np.argsort(-k_mid, axis=1, kind="stable")
    ks, ss = np.take_along_axis(k_mid, order, axis=1), slots[order]
    cover, used = np.cumsum(ks * ss, axis=1), np.cumsum(ss, axis=1)
    reach = cover >= rem[:, None]  # the greedy reaches rem within the first groups
    gi = np.argmax(reach, axis=1)
    at_n = np.arange(n)
    before_cover, before_used = cover[at_n, gi] - (ks * ss)[at_n, gi], used[at_n, gi] - ss[at_n, gi]
    with np.errstate(divide="ignore", invalid="ignore"):
        fewest = before_used + np.ceil((rem - before_cover) / ks[at_n, gi])
    fewest = np.where(rem <= 0, 0.0, np.where(reach.any(axis=1), fewest, math.inf))
    return np.minimum.accumulate(fewest)  # it never grows with M (the caps only grow)


def least_slowest_stage_s(d: DegreeTerms, L: int, pps: np.ndarray, slots: np.ndarray | None = None,
                          v: int = 1) -> np.ndarray:
    """[P] a lower bound on the slowest stage time (s) of every plan with pps[i] stages, from node supply: inf where
    no plan exists (issue 14, item 3: the time rows).

    Why. The other aggregate bounds take the slowest stage at >= (the least sum of stage times) / pp, which puts every
    layer on the fastest type. Minimizing time on a large pool, the candidates at the front use more GPUs than the
    fastest type has (GPT-3 175B on mixed-pool-8k: 2,048 H100, candidates of 3,072-7,008 GPUs), so some middle stages
    run on a slower type, and a middle stage holds at least one layer: the slowest stage is at least one layer on
    that type, several times the average. The cheap bound missed it, 9,645 candidates had cheap bounds below 0.99 x
    the optimum against 497 refined ones, and their refined bounds took the first 11 s of a 10 s limit.

    Proof. Take a plan with pp >= 2 stages whose slowest stage takes M'. Stage s on type g_s with n_s layers takes
    t_s >= n_s step_min[g_s] + its sends (costmodel.estimate: compute in any mode >= the no-recomputation step of
    the fastest kind; every send >= e = send_min_s; a middle stage sends 2 v times, an end stage 2 v - 1 times,
    costmodel.interleaved_send_counts), and n_s <= NMAX[g_s] (max_layers_per_stage: every mode and kind, one
    micro-batch in flight), n_s a multiple of v. So n_s <= k_mid[g_s](M') for a middle stage and
    n_s <= k_end[g_s](M') for an end stage, with
        k_mid[g](M) = v floor(min(NMAX[g], floor((M - 2 v e) / step_min[g])) / v),  k_end likewise with (2 v - 1) e.
    A middle stage holds >= 1 layer, so its type has k_mid >= 1; at most slots[g] stages run on g. Hence
      (a) the types with k_mid[g](M') >= 1 have >= pp - 2 slots, and
      (b) L = sum_s n_s <= (the pp - 2 largest k_mid over the slots, at most slots[g] of g) + 2 max_g k_end[g](M')
    (the ends' supply is relaxed, which only raises the right side). Both sides only grow with M, and the caps are
    constant between the marks sends + n step_min[g]; so M' >= the least mark where (a) and (b) hold (found for
    every pp at once: with one supply, from the fewest middle stages that hold L at each mark, which never grows with
    M; with a supply per row, by bisection; both give the same marks). One stage (pp = 1) holds all L layers: M' >= min over g with NMAX[g] >= L of
    L step_min[g]. The result is lowered by SLOWEST_SLACK (caps are rounded up by 1e-9 near a mark).
    slots: [G] or [P, G] stage slots per type (default d.slots; a composition's own counts give its own floor).
    The iteration is then at least (m - 1) x this + the least sum of stage times (1F1B; interleaved: see
    inflight.py)."""
    pps = np.asarray(pps, dtype=np.int64)
    if slots is None and FAST_FLOOR and ONE_SUPPLY_VECTORS:
        return _least_slowest_one_supply(d, L, pps, v)
    P = len(pps)
    S = np.broadcast_to(np.asarray(d.slots if slots is None else slots, dtype=np.int64), (P, len(d.slots)))
    step = np.asarray(d.step_min_s, dtype=float)
    nmax = np.asarray(d.max_layers_per_stage, dtype=np.int64)
    out = np.full(P, math.inf)
    one = pps == 1
    if one.any():
        single = np.where((nmax[None, :] >= L) & (S[one] >= 1), L * step[None, :], math.inf).min(axis=1)
        out[one] = single * SLOWEST_SLACK
    rows = np.flatnonzero(~one)
    if len(rows) == 0:
        return out
    e = d.send_min_s
    e_mid, e_end = 2 * v * e, (2 * v - 1) * e
    marks = np.unique(np.concatenate([s + np.arange(1, n + 1) * st for s in (e_mid, e_end)
                                      for st, n in zip(step, nmax) if n > 0] or [np.array([math.inf])]))
    need = pps[rows] - 2
    Sr = S[rows]
    # (a) alone: the least mark where the types whose middle stage can hold v layers have pp - 2 slots
    usable_at = np.where(nmax >= v, e_mid + v * step, math.inf)  # the mark where g's k_mid reaches v
    by = np.argsort(usable_at, kind="stable")
    enough = np.cumsum(Sr[:, by], axis=1) >= need[:, None]
    first = np.where(need <= 0, 0.0,
                     np.where(enough.any(axis=1), usable_at[by][np.argmax(enough, axis=1)], math.inf))

    def caps(M: np.ndarray, sends: float) -> np.ndarray:
        k = np.floor((M[:, None] - sends) / step[None, :] + 1e-9)
        return np.clip(k, 0, nmax[None, :]) // v * v

    def holds(M: np.ndarray, ix: np.ndarray) -> np.ndarray:
        """(b) at M [r] for the rows ix [r] ((a) is given: M is at least their `first`)."""
        k_mid = caps(M, e_mid)
        order = np.argsort(-k_mid, axis=1, kind="stable")
        ks, ss = np.take_along_axis(k_mid, order, axis=1), np.take_along_axis(Sr[ix], order, axis=1)
        take = np.clip(need[ix, None] - (np.cumsum(ss, axis=1) - ss), 0, ss)  # the greedy: largest caps first
        cover = (take * ks).sum(axis=1) + 2 * caps(M, e_end).max(axis=1)
        return cover >= L

    lo = np.searchsorted(marks, first).astype(np.int64)  # (a) and (b) both grow with M: the answer is >= first
    n = len(marks)
    if slots is None and FAST_FLOOR:  # one supply for every pp: per mark, the fewest middle stages that hold L
        fewest = _fewest_middle_stages(caps(marks, e_mid), S[0], L - 2 * caps(marks, e_end).max(axis=1))
        j = np.searchsorted(-fewest, -need, side="left")  # the first mark whose fewest is <= pp - 2
        lo = np.maximum(lo, j)
    else:  # bisection, every row at once (a composition's own counts as its supply)
        hi = np.full(len(rows), n, dtype=np.int64)
        at = np.arange(len(rows))
        while (lo < hi).any():
            mid = (lo + hi) // 2
            ok = holds(marks[np.minimum(mid, n - 1)], at)
            active = lo < hi
            hi = np.where(active & ok, mid, hi)
            lo = np.where(active & ~ok, mid + 1, lo)
    out[rows] = np.where(lo < len(marks), marks[np.minimum(lo, len(marks) - 1)] * SLOWEST_SLACK, math.inf)
    return out


ONE_SUPPLY_VECTORS = True  # least_slowest_stage_s with one supply: its per-type steps on [G] vectors (round 15, lists)


def _least_slowest_one_supply(d: DegreeTerms, L: int, pps: np.ndarray, v: int) -> np.ndarray:
    """least_slowest_stage_s(d, L, pps, v=v) with one supply (slots None, FAST_FLOOR), the same floats with fewer
    array operations (round 15, lists: it was about 40 % of the candidate lists' cheap bounds, 0.35 ms a degree,
    most of it numpy's per-call overhead on [P, G] arrays whose P rows are one supply repeated):
    - pp = 1: the least of the same [G] values (a row of the [1, G] array);
    - the marks: the same values (sends + n step_min[g], n = 1..NMAX[g], added in the same order) from one [G, N]
      product, masked, in place of 2 G aranges; np.unique sorts the same set;
    - (a): the supply's cumulative slots in the `usable_at` order are one [G] vector, non-decreasing (slots >= 0),
      so the first type where it reaches pp - 2 (argmax of the [P, G] row) is np.searchsorted's left index, and
      "any" is that index < G: the same element of usable_at;
    - the per-mark fewest middle stages: unchanged (one [n, G] pass, as FAST_FLOOR).
    tests/test_lists_round15.py compares it with the [P, G] path on the catalog's and random instances' terms."""
    out = np.full(len(pps), math.inf)
    step = np.asarray(d.step_min_s, dtype=float)
    nmax = np.asarray(d.max_layers_per_stage, dtype=np.int64)
    slots = np.asarray(d.slots, dtype=np.int64)
    one = pps == 1
    if one.any():
        single = np.where((nmax >= L) & (slots >= 1), L * step, math.inf).min()
        out[one] = single * SLOWEST_SLACK
    rows = np.flatnonzero(~one)
    if len(rows) == 0:
        return out
    e = d.send_min_s
    e_mid, e_end = 2 * v * e, (2 * v - 1) * e
    most = int(nmax.max(initial=0))
    if most > 0:
        counts = np.arange(1, most + 1)
        layers = counts[None, :] * step[:, None]  # [G, N] n x step_min[g], as np.arange(1, n + 1) * st
        held = counts[None, :] <= nmax[:, None]
        marks = np.unique(np.concatenate([e_mid + layers[held], e_end + layers[held]]))
    else:
        marks = np.array([math.inf])
    need = pps[rows] - 2
    usable_at = np.where(nmax >= v, e_mid + v * step, math.inf)  # the mark where g's k_mid reaches v
    by = np.argsort(usable_at, kind="stable")
    reached = np.searchsorted(np.cumsum(slots[by]), need, side="left")  # the first type where pp - 2 slots exist
    first = np.where(need <= 0, 0.0, np.where(reached < len(by), usable_at[by][np.minimum(reached, len(by) - 1)],
                                              math.inf))

    def caps(M: np.ndarray, sends: float) -> np.ndarray:
        k = np.floor((M[:, None] - sends) / step[None, :] + 1e-9)
        return np.clip(k, 0, nmax[None, :]) // v * v

    lo = np.searchsorted(marks, first).astype(np.int64)
    fewest = _fewest_middle_stages(caps(marks, e_mid), slots, L - 2 * caps(marks, e_end).max(axis=1))
    j = np.searchsorted(-fewest, -need, side="left")  # the first mark whose fewest is <= pp - 2
    lo = np.maximum(lo, j)
    out[rows] = np.where(lo < len(marks), marks[np.minimum(lo, len(marks) - 1)] * SLOWEST_SLACK, math.inf)
    return out


_FLOORS: dict[tuple, np.ndarray] = {}  # least_slowest_stage_s at pp = 1.. by what it depends on (many calls share it)


def slowest_floor(d: DegreeTerms, L: int, pps: np.ndarray, v: int = 1) -> np.ndarray:
    """least_slowest_stage_s(d, L, pps, v=v) at the candidate's own supply, computed once for pp = 1..P per (step_min,
    NMAX, slots, send_min, L, v) and kept: the cheap bounds of every pp, then the refined and in-flight bounds of the
    candidates that reach the front, ask for the same values (the same array, so the same bits)."""
    pps = np.asarray(pps, dtype=np.int64)
    key = (d.step_min_s, d.max_layers_per_stage, d.slots, d.send_min_s, L, v)
    have = _FLOORS.get(key)
    most = int(pps.max(initial=1))
    if have is None or len(have) < most:
        have = least_slowest_stage_s(d, L, np.arange(1, max(most, 64) + 1), v=v)
        _FLOORS[key] = have
    return have[pps - 1]


@dataclass(frozen=True, slots=True)
class CandidateBound:
    feasible: bool
    iteration_s: float = math.inf  # lower bound on one iteration
    rate_usd_per_hour: float = math.inf  # lower bound on the rent
    cost_per_iteration_usd: float = math.inf


MAX_COMPOSITIONS = 300


def _count_compositions_upto(d: DegreeTerms, most: int) -> list[int]:
    """How many compositions `_compositions` would list, for every pp up to `most` (a DP over types; capped)."""
    pp = min(most, 512)
    ways = np.zeros(pp + 1, dtype=np.int64)
    ways[0] = 1
    for g in range(len(d.slots)):
        nxt = np.zeros(pp + 1, dtype=np.int64)
        for n in range(0, min(pp, d.slots[g]) + 1, d.stages_per_block[g]):  # n stages of type g
            nxt[n:] += ways[: pp + 1 - n]
        ways = np.minimum(nxt, 10**9)  # each term is at most 10^9 and at most 513 of them: no overflow
    return ways.tolist()


_COUNTS: dict[tuple, list[int]] = {}
_LISTED: dict[tuple, list[tuple[int, ...]]] = {}  # (slots, q, pp) -> compositions; many (tp, dp, b) share them


def _compositions(d: DegreeTerms, pp: int, limit: int) -> list[tuple[int, ...]] | None:
    """Stage counts per type (multiples of q_g, within slots, summing to pp); None when there are over `limit`."""
    key = (d.slots, d.stages_per_block)
    if key not in _COUNTS:
        _COUNTS[key] = _count_compositions_upto(d, sum(d.slots))
    counts = _COUNTS[key]
    if pp >= len(counts) or counts[pp] > limit:
        return None
    if (*key, pp) not in _LISTED:
        _LISTED[(*key, pp)] = _list_compositions(d, pp)
    return _LISTED[(*key, pp)]


def composition_count(d: DegreeTerms, pp: int) -> int:
    """How many compositions of pp `_compositions` would list (capped at 10^9; 0 past the slots)."""
    key = (d.slots, d.stages_per_block)
    if key not in _COUNTS:
        _COUNTS[key] = _count_compositions_upto(d, sum(d.slots))
    counts = _COUNTS[key]
    return counts[pp] if pp < len(counts) else 0


def _list_compositions(d: DegreeTerms, pp: int) -> list[tuple[int, ...]]:
    out: list[tuple[int, ...]] = []
    G = len(d.slots)
    room = [sum(d.slots[h] // d.stages_per_block[h] * d.stages_per_block[h] for h in range(g, G)) for g in range(G)]

    def rec(g: int, left: int, acc: tuple[int, ...]) -> None:
        if left > room[g]:  # the types from g on cannot take the stages left
            return
        if g == G - 1:
            if left <= d.slots[g] and left % d.stages_per_block[g] == 0:
                out.append(acc + (left,))
            return
        for n in range(0, min(left, d.slots[g]) + 1, d.stages_per_block[g]):
            rec(g + 1, left - n, acc + (n,))

    rec(0, pp, ())
    return out


def _pipeline_s(d: DegreeTerms, pp: int, counts: tuple[int, ...], send_min: float, L: int,
                cap_of: tuple[int, ...] | None = None) -> float:
    """min over M of (m - 1) M + SIGMA(M), where SIGMA(M) is the least sum of stage times when no stage exceeds M.

    A stage of type g sends at least 2 e_min (the two end stages at least e_min; they are given to the fastest
    stages, which only loosens the bound) and holds a whole number of layers, at most
    k_g(M) = min(NMAX[g], floor((M - sends) / step_min[g])). SIGMA(M) pours the L layers fastest-first into those
    stages; it is infinite while they cannot hold L. Between two breakpoints M = sends + n step_min[g], every k_g
    and so SIGMA are constant and (m - 1) M grows: the minimum sits on a breakpoint. Breakpoints are walked upwards
    from the first that holds L, and the walk stops once (m - 1) M plus the least SIGMA (every stage at NMAX)
    reaches the best value. cap_of overrides NMAX (the aggregate bound gives every slot the largest NMAX)."""
    caps = cap_of if cap_of is not None else d.max_layers_per_stage
    # Groups of identical stages, fastest first: (step, cap, send, how many).
    groups: list[tuple[float, int, float, int]] = []
    ends_left = 2 if pp > 1 else 0
    for g in sorted((g for g, n in enumerate(counts) if n), key=lambda g: d.step_min_s[g]):
        n = counts[g]
        light = min(ends_left, n)
        ends_left -= light
        if light:
            groups.append((d.step_min_s[g], caps[g], send_min, light))
        if n - light:
            groups.append((d.step_min_s[g], caps[g], 2 * send_min if pp > 1 else 0.0, n - light))
    if sum(c * cap for _, cap, _, c in groups) < L:
        return math.inf
    sends_total = sum(e * c for _, _, e, c in groups)

    def per_stage(M: float, step: float, cap: int, e: float) -> int:
        # + 1e-9: at a breakpoint M = e + n step, rounding must not lose the n-th layer (that would overstate)
        return cap if M == math.inf else max(0, min(cap, math.floor((M - e) / step + 1e-9)))

    def sigma(M: float) -> float | None:
        left, total = L, sends_total
        for step, cap, e, c in groups:
            take = min(left, c * per_stage(M, step, cap, e))
            total += take * step
            left -= take
        return None if left > 0 else total

    least_sigma = sigma(math.inf)
    assert least_sigma is not None
    marks = sorted({e + n * step for step, cap, e, _ in groups for n in range(1, cap + 1)})
    lo, hi = 0, len(marks) - 1  # the first mark that holds L (sigma is finite from there on)
    while lo < hi:
        mid = (lo + hi) // 2
        if sigma(marks[mid]) is None:
            lo = mid + 1
        else:
            hi = mid
    best = math.inf
    for M in marks[lo:]:
        if (d.m - 1) * M + least_sigma >= best:
            break
        got = sigma(M)
        if got is not None:
            best = min(best, (d.m - 1) * M + got)
    return best * (1 - 1e-9)  # float sums: stay below the true minimum


def _composition_bound(problem: Problem, d: DegreeTerms, pp: int, counts: tuple[int, ...], all_params: float,
                       slowest_s: float = 0.0) -> tuple[float, float, float] | None:
    """(iteration lower bound, rent, cost-per-iteration lower bound) when exactly counts[g] stages run on g.
    slowest_s: a lower bound on the slowest stage of these plans (least_slowest_stage_s with the counts as slots)."""
    L = problem.model.num_layers
    present = [g for g, n in enumerate(counts) if n]
    if sum(counts[g] * d.max_layers_per_stage[g] for g in present) < L or slowest_s == math.inf:
        return None
    sends = [d.send_inter_s[g][h] for g in present for h in present]
    sends += [d.send_intra_s[g] for g in present if d.send_intra_s[g] is not None]
    send_min = min(sends)
    ends = min(d.emb_s[g] for g in present) + min(d.head_s[g] for g in present)
    total = min(d.layer_work_s[g] for g in present) + ends + 2 * (pp - 1) * send_min
    # Every stage of g has A >= alpha_g x its parameters, and every stage holds at least P_stage_min of them.
    least = d.least_stage_params[min(pp, 3) - 1]
    alpha = d.alpha_at(pp)  # the floor of pp (--overlap-param-gather: 0 at pp = 1 only)
    comm = (max(min(alpha[g] for g in present) * all_params / pp, max(alpha[g] for g in present) * least)
            + max(min(d.beta[g] for g in present) * all_params / pp, max(d.beta[g] for g in present) * least))
    pipeline = max((d.m - 1) * total / pp + total, _pipeline_s(d, pp, counts, send_min, L) + ends,
                   (d.m - 1) * slowest_s + total)
    iteration = pipeline + comm
    if d.alpha_full:  # --overlap-grad-reduce: (m - 1) M + (sum t + A) + O, sum t + A >= the whole reduce
        whole = (max(min(d.alpha_full[g] for g in present) * all_params / pp, max(d.alpha_full[g] for g in present) * least)
                 + max(min(d.beta[g] for g in present) * all_params / pp, max(d.beta[g] for g in present) * least))
        iteration = max(iteration, (d.m - 1) * max(total / pp, slowest_s) + whole)
    rate = d.w * sum(counts[g] * d.price_per_gpu_hour[g] for g in present)
    p_min = min(d.price_per_gpu_hour[g] for g in present)
    weighted = (min(d.price_per_gpu_hour[g] * d.layer_work_s[g] for g in present)
                + min(d.price_per_gpu_hour[g] * d.emb_s[g] for g in present)
                + min(d.price_per_gpu_hour[g] * d.head_s[g] for g in present) + 2 * (pp - 1) * p_min * send_min)
    cost = max(rate * iteration, d.w * (d.m * weighted + (pp - 1) * p_min * total) + rate * comm)
    return iteration, rate, cost / SECONDS_PER_HOUR


def _least_stage_parameters(model, pp: int) -> float:
    """P_stage_min: the fewest parameters any stage holds. A middle stage holds at least one layer (of the smallest
    kind), the first the embedding, the last the head (with the tied copy when pp > 1), a single stage everything."""
    one_layer = min(model.layer_parameters(k) for k in model.kinds)
    if pp == 1:
        return float(sum(model.layer_parameters(k) * k.num_layers for k in model.kinds)
                     + stage_parameters(model, {}, True, True, 1))
    ends = min(stage_parameters(model, {}, True, False, pp), stage_parameters(model, {}, False, True, pp))
    return float(min(one_layer, ends) if pp > 2 else ends)


def _least_rate_per_gpu(d: DegreeTerms, pp: int, L: int, hold: tuple[int, ...]) -> float:
    """A lower bound on sum_s p_s over pp stage slots (at most S_g of type g) that hold L layers when a stage of g
    holds at most hold[g]: the LP relaxation min { sum p_g n_g : sum n_g = pp, sum hold_g n_g >= L, 0 <= n <= S },
    by its Lagrangian dual max_{lam >= 0} lam L + min { sum (p_g - lam hold_g) n_g : sum n_g = pp, 0 <= n <= S }.
    Every lam gives a valid bound (weak duality); the maximum sits at lam = 0 or where two types tie, all tried.
    Infinite when no pp slots hold L. Kept by what it depends on (bigproof: the aggregate refined bounds of one
    problem ask for the same prices, slots, pp and caps again and again, about 13 breakpoints a candidate)."""
    key = (d.price_per_gpu_hour, d.slots, pp, L, hold)
    got = _RATES.get(key)
    if got is None:
        if len(_RATES) > RATES_KEPT:
            _RATES.clear()
        got = _RATES[key] = _least_rate_per_gpu_of(d, pp, L, hold)
    return got


_RATES: dict[tuple, float] = {}
RATES_KEPT = 200_000  # entries of _RATES before it is emptied (a few tens of MB)


def _least_rate_per_gpu_of(d: DegreeTerms, pp: int, L: int, hold: tuple[int, ...]) -> float:
    """_least_rate_per_gpu's computation."""
    G = len(d.slots)
    if _best_slots(tuple(float(h) for h in hold), d.slots, pp, largest=True) < L:
        return math.inf
    p = d.price_per_gpu_hour
    lams = {0.0} | {(p[g] - p[h]) / (hold[g] - hold[h]) for g in range(G) for h in range(G)
                    if hold[g] != hold[h] and (p[g] - p[h]) / (hold[g] - hold[h]) > 0}
    best = 0.0
    for lam in lams:
        inner = _best_slots(tuple(p[g] - lam * hold[g] for g in range(G)), d.slots, pp, largest=False)
        best = max(best, lam * L + inner)
    return best * (1 - 1e-12)


def sender_send_min_s(d: DegreeTerms) -> np.ndarray:
    """[g] e_g, the least time of one pipeline send that a stage of type g makes: the least over the receivers' types
    h of its inter-node send (g, h), and its intra-node send where g's stages share nodes (send_intra_s not None).

    Every send in a stage's time has the stage's own type as the sender (costmodel.estimate: forward and backward
    sends and the wrap-around, stage_send_s(problem, g_i, other, same_node, ...)); a send inside one node exists only
    where g's stages share a node (stages_per_block > 1: a stage of w >= GPUs per node crosses nodes to every
    neighbour, and the ends share a node only when the whole pipeline fits one node of g, which implies it). So
    every send of a stage of g takes at least e_g, and e_g >= e = send_min_s, the candidate's least send over every
    pair, which the bound used before (issue 14, item 3, costgap: GPT-3 175B, mixed-pool-8k, cost: a middle A100
    stage of tp 2, cp 4 sends for 1.0 ms each way over its 400 Gbit/s NIC, against e = 0.13 ms on H100's 3,200;
    with three layers at 13.6 ms that is 4 % of the slowest stage, and of the bound)."""
    return np.array([min(min(row), math.inf if intra is None else intra)
                     for row, intra in zip(d.send_inter_s, d.send_intra_s)], dtype=float)


def _joint_cost_rate_s(d: DegreeTerms, pp: int, L: int, stages_s: float, comm_s: float, max_iteration_s: float | None,
                       max_rate: float | None) -> float:
    """A lower bound on rent x iteration time (USD/hour x s) when the node types are not listed per composition.

    Rent and time cannot both be at their separate minimums: the cheapest types may hold too few layers to keep the
    slowest stage short. Let M be the slowest stage's time: a stage of g then holds at most
    k_g(M) = min(NMAX[g], floor((M - e_g) / step_min[g])) layers (with pp > 1 every stage makes at least one send,
    sent by its own type, so it takes at least e_g: `sender_send_min_s`; before issue 14's costgap round the
    candidate's least send e_min over every pair stood there), so the rent is at least w x
    `_least_rate_per_gpu`(k(M)), and the iteration takes at least (m - 1) max(M, stages_s / pp) + stages_s + comm_s
    (stages_s: the least sum of stage times; comm_s: the all-reduce and optimizer bounds). Both pieces are constant or increasing
    between breakpoints M = e_g + n step_min[g], so the least product over every M sits on a breakpoint; the walk
    stops once the cheapest possible rent times (m - 1) M reaches the best. M beyond the deadline (or a rent above
    the USD/hour limit) is skipped. Infinite when no M works."""
    G = len(d.slots)
    e = tuple(sender_send_min_s(d)) if pp > 1 else (0.0,) * G  # [g] every stage of g sends at least once

    def hold(M: float) -> tuple[int, ...]:
        return tuple(max(0, min(d.max_layers_per_stage[g], math.floor((M - e[g]) / d.step_min_s[g] + 1e-9)))
                     for g in range(G))

    floor_rate = d.w * _least_rate_per_gpu(d, pp, 0, d.max_layers_per_stage)
    marks = sorted({e[g] + n * d.step_min_s[g] for g in range(G) for n in range(1, d.max_layers_per_stage[g] + 1)})
    best = math.inf
    for M in marks:
        iteration = (d.m - 1) * max(M, stages_s / pp) + stages_s + comm_s
        if floor_rate * iteration >= best:
            break
        if max_iteration_s is not None and iteration > max_iteration_s:
            break
        rate = d.w * _least_rate_per_gpu(d, pp, L, hold(M))
        if rate == math.inf or (max_rate is not None and rate > max_rate):
            continue
        best = min(best, rate * iteration)
    return best * (1 - 1e-9)


def _least_iteration_under_cost_s(d: DegreeTerms, pp: int, L: int, stages_s: float, comm_s: float,
                                  max_cost_rate_s: float, max_iteration_s: float | None,
                                  max_rate: float | None) -> float:
    """A lower bound on the iteration time of every plan whose rent x iteration time (USD/hour x s) is at most
    max_cost_rate_s (a cost budget), when the node types are not listed per composition (issue 14, item 3).

    As in _joint_cost_rate_s: a plan whose slowest stage takes M* has every stage of g within
    k_g(M*) = min(NMAX[g], floor((M* - e_min) / step_min[g])) layers, so its rent is at least
    rate(M*) = w x `_least_rate_per_gpu`(k(M*)) and its iteration at least
    it(M*) = (m - 1) max(M*, stages_s / pp) + stages_s + comm_s. Let M_i be the largest breakpoint
    e_min + n step_min[g] at or below M* (below the first one no stage holds a layer). k is constant between
    breakpoints and it(M) grows with M, so rate(M*) = rate(M_i) and it(M*) >= it(M_i): the plan's cost rate is at least
    rate(M_i) x it(M_i) and its iteration at least it(M_i). A plan within the budget therefore has M_i among the
    breakpoints where rate x it <= max_cost_rate_s, and its iteration is at least it at the first of them (it grows
    with M). Breakpoints past the deadline end the walk, and a rent above the USD/hour limit is skipped, as in
    _joint_cost_rate_s. Infinite when no breakpoint meets the budget (no plan does). Without it, minimizing time under
    a cost budget bounded a candidate by its fastest pipeline, which only plans far above the budget reach."""
    e = d.send_min_s if pp > 1 else 0.0
    G = len(d.slots)
    marks = sorted({e + n * d.step_min_s[g] for g in range(G) for n in range(1, d.max_layers_per_stage[g] + 1)})
    for M in marks:
        iteration = (d.m - 1) * max(M, stages_s / pp) + stages_s + comm_s
        if max_iteration_s is not None and iteration > max_iteration_s:
            break
        hold = tuple(max(0, min(d.max_layers_per_stage[g], math.floor((M - e) / d.step_min_s[g] + 1e-9)))
                     for g in range(G))
        rate = d.w * _least_rate_per_gpu(d, pp, L, hold)
        if rate == math.inf or (max_rate is not None and rate > max_rate):
            continue
        if rate * iteration <= max_cost_rate_s:
            return iteration * (1 - 1e-9)
    return math.inf


Composition = tuple[float, float, float]  # lower bounds of one composition: (iteration s, rent USD/h, USD/iteration)


def _holds_parameters(problem: Problem, d: DegreeTerms, pp: int) -> bool:
    """Enough stage slots, and the average parameter share fits the largest GPU (else the candidate is infeasible)."""
    L = problem.model.num_layers
    if sum(d.slots) < pp or (pp > 2 and L < pp - 2):
        return False
    all_params = d.all_params(pp)
    return all_params / pp / d.tp * d.state_bytes_per_param + MEMORY_RESERVE_BYTES <= d.capacity_bytes_max


def composition_bounds(problem: Problem, d: DegreeTerms, pp: int, budget=None, slower_than_s: float = 0.0
                       ) -> tuple[Composition, ...] | None:
    """The budget-free part of the refined bound with few node types: the bounds of every composition that can hold
    the layers (none: the candidate is infeasible). None when there are too many compositions to list.

    With a budget (round 13, budgetbound): only the compositions whose floors meet it (`_meeting_floors`), the others
    left out before the pipeline walk. Every composition left out breaks the budget with its own bound too, so
    bound_over_compositions(problem, composition_bounds(problem, d, pp, budget, s), budget, s) equals the same call
    on the budget-free list, bit for bit (the bounds kept are computed by the same row-wise operations); the list is
    then the budget's, not to be kept for another budget."""
    comps = _compositions(d, pp, MAX_COMPOSITIONS)
    if comps is None:
        return None
    if not _holds_parameters(problem, d, pp):
        return ()
    all_params = d.all_params(pp)
    if budget is not None and len(comps) >= VECTOR_FROM:
        comps = _meeting_floors(problem, d, pp, comps, all_params, budget, slower_than_s)
    return bounds_of_compositions(problem, d, pp, comps)


def bounds_of_compositions(problem: Problem, d: DegreeTerms, pp: int, comps: list[tuple[int, ...]]
                           ) -> tuple[Composition, ...]:
    """The bounds of these compositions of pp (listed by `_compositions`, pp's parameters fit), in their order, the
    ones that cannot hold the layers left out: composition_bounds' last step."""
    if not comps:
        return ()
    all_params = d.all_params(pp)
    # the candidate's slowest-stage floor from node supply (issue 14, item 3) holds for every composition's plans.
    # Each composition's own counts as its slots give a sharper floor (least_slowest_stage_s takes them), but by
    # bisection per composition: 0.76 -> 1.20 ms per refined bound on Llama-2 70B (cost), for 315 -> 304 refined
    # bounds below 0.99 x the optimum on GPT-3 175B (time); not kept.
    low = float(slowest_floor(d, problem.model.num_layers, np.array([pp]))[0])
    if VECTOR_COMPOSITIONS and len(comps) >= VECTOR_FROM:
        return _composition_bounds_at_once(problem, d, pp, comps, all_params, low)
    return tuple(got for counts in comps if (got := _composition_bound(problem, d, pp, counts, all_params, low)))


VECTOR_COMPOSITIONS = True  # composition_bounds by _composition_bounds_at_once (the same values, bit for bit)
VECTOR_FROM = 6  # compositions from which the arrays are faster than the scalar loop (one or two: 4x slower)


def _present_terms(d: DegreeTerms, pp, present: np.ndarray, all_params):
    """Per composition (rows of present, [C, g]: the types it uses): least and most (min / max of a per-type value
    over its present types, exact), its least send, the ends' least work, the least total stage work, the smallest
    stage's parameters and the gradient reduce's floor: the terms `_composition_bounds_at_once` and
    `_meeting_floors` share (the same float operations in the same order as the scalar `_composition_bound`).
    pp and all_params: one pp (int, float) or one per row ([C] arrays, `degree_floors`; the same operations).
    A min or max over the present types depends only on which types are present (at most 2^G - 1 sets): it is taken
    once per set and given to its rows (round 14, budgetrows; exact, so the same values as per row)."""
    inf = math.inf
    C, G = present.shape
    code = present.astype(np.int64) @ (1 << np.arange(G, dtype=np.int64))  # [C] the set of present types
    sets = np.unique(code).tolist()
    members = {c: [g for g in range(G) if c >> g & 1] for c in sets}

    def table(values, pick) -> np.ndarray:  # [C]: pick (min or max) of values over each row's present types
        out = np.zeros(1 << G)
        for c in sets:
            out[c] = pick([values[g] for g in members[c]]) if members[c] else (inf if pick is min else -inf)
        return out[code]

    def least(values) -> np.ndarray:  # min over the present types (exact)
        return table([float(v) for v in values], min)

    def most(values) -> np.ndarray:
        return table([float(v) for v in values], max)

    intra = [inf if v is None else v for v in d.send_intra_s]
    send = np.zeros(1 << G)
    for c in sets:
        S = members[c]
        send[c] = min(min((d.send_inter_s[g][h] for g in S for h in S), default=inf),
                      min((intra[g] for g in S), default=inf))
    send_min = send[code]
    ends = least(d.emb_s) + least(d.head_s)
    total = least(d.layer_work_s) + ends + 2 * (pp - 1) * send_min
    if isinstance(pp, np.ndarray):
        small = np.asarray(d.least_stage_params, dtype=float)[np.minimum(pp, 3) - 1]
        multi = pp > 1
        least_alpha = np.where(multi, least(d.alpha_at(2)), least(d.alpha_at(1)))
        most_alpha = np.where(multi, most(d.alpha_at(2)), most(d.alpha_at(1)))
    else:
        small = d.least_stage_params[min(pp, 3) - 1]
        least_alpha, most_alpha = least(d.alpha_at(pp)), most(d.alpha_at(pp))
    comm = (np.maximum(least_alpha * all_params / pp, most_alpha * small)
            + np.maximum(least(d.beta) * all_params / pp, most(d.beta) * small))
    return least, most, send_min, ends, total, small, comm


def _rate_and_cost(d: DegreeTerms, pp, counts: np.ndarray, present: np.ndarray, least, send_min: np.ndarray,
                   total: np.ndarray, iteration: np.ndarray, comm: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per composition: its rent rate (USD per hour) and its cost bound per iteration x SECONDS_PER_HOUR, the larger
    of rent x iteration and the price-weighted work (shared by `_composition_bounds_at_once` and `_meeting_floors`).
    pp: an int or one per row."""
    price = np.array(d.price_per_gpu_hour, dtype=float)
    rent = np.zeros(len(counts))
    for g in range(counts.shape[1]):  # sum(counts[g] x p_g for g present), in order of g
        rent = rent + np.where(present[:, g], counts[:, g] * price[g], 0.0)
    rate = d.w * rent
    p_min = least(d.price_per_gpu_hour)
    weighted = (least([p * s for p, s in zip(d.price_per_gpu_hour, d.layer_work_s)])
                + least([p * s for p, s in zip(d.price_per_gpu_hour, d.emb_s)])
                + least([p * s for p, s in zip(d.price_per_gpu_hour, d.head_s)]) + 2 * (pp - 1) * p_min * send_min)
    return rate, np.maximum(rate * iteration, d.w * (d.m * weighted + (pp - 1) * p_min * total) + rate * comm)


def _least_marks_holding(d: DegreeTerms, pp, counts: np.ndarray, present: np.ndarray, send_min: np.ndarray,
                         L: int) -> np.ndarray:
    """[C] M*: the least mark e + n step_g (e = send_min where pp > 1, else 0; n = 1..NMAX[g]; g present) at which
    held(M) = sum_h c_h min(NMAX[h], floor((M - e) / step_h + 1e-9)) >= L, inf where none. Rows with the same e (a
    float) share the marks and the per-stage counts at each: taken once per e, every type's marks (an absent type's
    count is 0, and held changes only at a present type's mark, so the least mark where held >= L is a present
    type's), held summed over the types (integers, exact), and the first mark in ascending order where it reaches L
    (held grows with M)."""
    C, G = counts.shape
    step = np.array(d.step_min_s, dtype=float)
    nmax = np.array(d.max_layers_per_stage, dtype=np.int64)
    multi = (pp > 1) if isinstance(pp, np.ndarray) else np.full(C, pp > 1)
    e_rows = np.where(multi, send_min, 0.0)
    live = [g for g in range(G) if nmax[g] > 0]
    out = np.full(C, math.inf)
    if not live:
        return out
    values, which = np.unique(e_rows, return_inverse=True)
    cf = counts.astype(float)
    for j, e in enumerate(values.tolist()):
        rows = np.flatnonzero(which == j)
        M = np.sort(np.concatenate([e + np.arange(1, nmax[g] + 1, dtype=float) * step[g] for g in live]))
        held = np.zeros((len(rows), len(M)))
        for h in live:  # integers: exact in any order (no BLAS product: its threads spin on a loaded machine)
            per = np.maximum(0.0, np.minimum(nmax[h], np.floor((M - e) / step[h] + 1e-9)))
            held = held + cf[rows, h:h + 1] * per[None, :]
        ok = held >= L  # [rows, K]
        out[rows] = np.where(ok.any(axis=1), M[np.argmax(ok, axis=1)], math.inf)
    return out


def _floor_values(problem: Problem, d: DegreeTerms, pp, counts: np.ndarray, all_params
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """[C] the floors of every composition (rows of counts [C, g], pp an int or one per row): iteration s (inf
    where the composition cannot hold L layers at its caps), rent USD/h, and cost USD per iteration, budget-free
    (`_meeting_floors` for the derivation)."""
    L = problem.model.num_layers
    present = counts > 0
    nmax = np.array(d.max_layers_per_stage, dtype=np.int64)
    keep = (counts * nmax[None, :]).sum(axis=1) >= L  # the others hold no plan (the bound leaves them out too)
    least, most, send_min, ends, total, small, comm = _present_terms(d, pp, present, all_params)
    least_M = _least_marks_holding(d, pp, counts, present, send_min, L) * (1 - 1e-8)
    with np.errstate(invalid="ignore"):
        pipeline = np.maximum((d.m - 1) * total / pp + total,
                              (d.m - 1) * least_M + _least_sigma(d, pp, counts, send_min, L) * (1 - 1e-8) + ends)
    iteration = np.where(keep, pipeline + comm, math.inf)
    rate, cost = _rate_and_cost(d, pp, counts, present, least, send_min, total, iteration, comm)
    return iteration, rate, cost / SECONDS_PER_HOUR


def _floors_meet(problem: Problem, iteration: np.ndarray, rate: np.ndarray, cost: np.ndarray, budget,
                 slower_than_s: float = 0.0) -> np.ndarray:
    """[C] whether each composition's floors (`_floor_values`) meet the budget: bound_over_compositions' tests."""
    n, slack = problem.iterations, BOUND_SLACK
    iteration = np.maximum(iteration, slower_than_s / n)
    with np.errstate(invalid="ignore"):
        cost = np.maximum(cost, rate * iteration / SECONDS_PER_HOUR)
    meets = np.isfinite(iteration)
    if budget.max_time_s is not None:
        meets &= ~(iteration * n > budget.max_time_s * slack)
    if budget.max_usd_per_hour is not None:
        meets &= ~(rate > budget.max_usd_per_hour * slack)
    if budget.max_cost_usd is not None:
        meets &= ~(cost * n > budget.max_cost_usd * slack)
    return meets


def _meeting_floors(problem: Problem, d: DegreeTerms, pp: int, comps: list[tuple[int, ...]], all_params: float,
                    budget, slower_than_s: float = 0.0) -> list[tuple[int, ...]]:
    """The compositions (in their order) whose floors meet the budget: the others' bounds
    (`_composition_bounds_at_once`, `_composition_bound`) break it too, and `bound_over_compositions` skips them.

    The floors skip the pipeline walk (`_pipelines_at_once`, most of a refined bound's time) and the slowest-stage
    floor. Per composition (stage counts c_g of its present types), with the bound's own send_min, ends, total, comm,
    rent and cost-work terms (the same expressions): M* is the least of the marks e + n step_g (e = send_min where
    pp > 1, else 0; n = 1..NMAX[g]) at which sum_g c_g min(NMAX[g], floor((M - e) / step_g + 1e-9)) >= L. Every
    breakpoint at which the walk takes a value places every layer with per-stage counts at most these (its groups'
    sends are send_min or 2 send_min >= e), so it lies at or above M* (less the 1e-9 of the floor: M* is lowered by
    a relative 1e-8), and its value (m - 1) M + SIGMA(M) is at least (m - 1) M* + SIGMA(inf) (`_least_sigma`, also
    lowered by a relative 1e-8; round 14, budgetrows: before it SIGMA >= 0 stood there). The floor iteration
    max((m - 1) total / pp + total, (m - 1) M* + SIGMA(inf) + ends) + comm is then at most the bound's (whose
    pipeline is the max of the first term, walk + ends and the slowest-stage term, and with --overlap-grad-reduce a
    max with one more term), the floor cost max(rent x it, cost work) at most the bound's cost, with the same rent;
    and the budget's tests (bound_over_compositions', with slower_than_s) grow with iteration, rent and cost."""
    counts = np.array(comps, dtype=np.int64).reshape(len(comps), len(d.slots))  # [C, g]
    iteration, rate, cost = _floor_values(problem, d, pp, counts, all_params)
    meets = _floors_meet(problem, iteration, rate, cost, budget, slower_than_s)
    return [comps[i] for i in np.flatnonzero(meets).tolist()]


@dataclass(frozen=True, slots=True)
class DegreeFloors:
    """The floors (`_floor_values`) of every listed composition of every pp = 1..most of one DegreeTerms, computed
    at once (round 14, budgetrows: `_meeting_floors` one pp at a time was most of a budget row's refining, about
    0.7 ms a candidate, thousands of candidates). Budget-free: `degree_floors_meeting` applies a budget."""

    start: np.ndarray  # [most + 1]: the rows of pp are start[pp - 1]:start[pp]
    listed: np.ndarray  # [most] bool: pp's compositions are listed (composition_bounds is not None)
    comps: list  # [R] the compositions, pp after pp, each pp's in _compositions' order
    iteration_s: np.ndarray  # [R]
    rate_usd_per_hour: np.ndarray  # [R]
    cost_usd: np.ndarray  # [R] per iteration


def degree_floors(problem: Problem, d: DegreeTerms, most: int) -> DegreeFloors:
    """The floors of every composition that `composition_bounds` lists at pp = 1..most (none where the parameters
    cannot fit: it returns () there), pp by pp, by the per-row operations of `_meeting_floors` (the same floats)."""
    key = (d.slots, d.stages_per_block, most, MAX_COMPOSITIONS)  # the limit too: a patched one lists other pp
    if key not in _DEGREE_ROWS:  # the compositions of every pp, as rows: shared by the degrees of the same slots
        if len(_DEGREE_ROWS) > 64:
            _DEGREE_ROWS.clear()
        comps: list = []
        pps: list[int] = []
        start = [0]
        listed = np.zeros(most, dtype=bool)
        for pp in range(1, most + 1):
            got = _compositions(d, pp, MAX_COMPOSITIONS)
            if got is not None:
                listed[pp - 1] = True
                comps.extend(got)
                pps.extend([pp] * len(got))
            start.append(len(comps))
        _DEGREE_ROWS[key] = (comps, np.array(comps, dtype=np.int64).reshape(len(comps), len(d.slots)),
                             np.array(pps, dtype=np.int64), np.array(start), listed)
    comps, counts, pp_rows, start, listed = _DEGREE_ROWS[key]
    if not comps:
        empty = np.zeros(0)
        return DegreeFloors(start, listed, comps, empty, empty, empty)
    all_params = np.where(pp_rows > 1, d.layer_params + d.ends_params[1], d.layer_params + d.ends_params[0])
    iteration, rate, cost = _floor_values(problem, d, pp_rows, counts, all_params)
    holds = np.array([_holds_parameters(problem, d, pp) for pp in range(1, most + 1)])
    iteration = np.where(holds[pp_rows - 1], iteration, math.inf)  # composition_bounds gives () where they do not
    return DegreeFloors(start, listed, comps, iteration, rate, cost)


_DEGREE_ROWS: dict[tuple, tuple] = {}  # (slots, q, most, MAX_COMPOSITIONS) -> every pp's compositions (degree_floors)


def degree_floors_meeting(problem: Problem, fl: DegreeFloors, pp: int, budget, slower_than_s: float = 0.0
                          ) -> list[tuple[int, ...]]:
    """`_meeting_floors` of pp's listed compositions under the budget, from the degree's floors (pp listed)."""
    lo, hi = int(fl.start[pp - 1]), int(fl.start[pp])
    meets = _floors_meet(problem, fl.iteration_s[lo:hi], fl.rate_usd_per_hour[lo:hi], fl.cost_usd[lo:hi], budget,
                         slower_than_s)
    return [fl.comps[lo + i] for i in np.flatnonzero(meets).tolist()]


FLOOR_SIGMA = True  # _meeting_floors' pipeline floor adds SIGMA(inf), the least sum of stage times (budgetrows)


def _least_sigma(d: DegreeTerms, pp, counts: np.ndarray, send_min: np.ndarray, L: int) -> np.ndarray:
    """[C] SIGMA(inf) of `_pipeline_s` for every composition (rows of counts [C, g]): its sends (two end stages at
    send_min, every other stage at 2 send_min; none at pp = 1) plus the L layers poured fastest first (step_min) into
    c_g stages of cap NMAX[g] of each type. The walk's SIGMA(M) pours the same layers into per-stage counts at most
    NMAX (the same sends), so SIGMA(M) >= SIGMA(inf) at every M: the greedy fill is the least sum of layer steps
    under per-type capacities, and smaller capacities cannot lower it. The float sums differ from the walk's order
    (one term per type, not per group of ends and middles): the caller lowers it by a relative 1e-8."""
    C, G = counts.shape
    if not FLOOR_SIGMA:
        return np.zeros(C)
    sends = np.where(pp > 1, (2 * pp - 2) * send_min, 0.0)
    left = np.full(C, float(L))
    work = np.zeros(C)
    for g in sorted(range(G), key=lambda g: d.step_min_s[g]):
        take = np.minimum(left, counts[:, g] * float(d.max_layers_per_stage[g]))
        work = work + take * d.step_min_s[g]
        left = left - take
    return sends + work


def _composition_bounds_at_once(problem: Problem, d: DegreeTerms, pp: int, comps: list[tuple[int, ...]],
                                all_params: float, slowest_s: float) -> tuple[Composition, ...]:
    """`_composition_bound` of every composition in comps at once, in their order, the Nones left out: the same
    formulas and the same float operations in the same order, so every value equals the scalar function's bit for bit
    (tests/test_composition_arrays.py). Issue 14, item 3 (bigproof): the refined bound of the large models' candidates
    spent most of its time in one Python call of `_composition_bound` and `_pipeline_s` per composition (GPT-3 175B
    and Megatron 145B on mixed-pool-8k, cost: 36 compositions per candidate, about half of a proof's CPU).

    Every breakpoint of every composition is evaluated (padded with inf where a group holds fewer layers), sorted,
    and the least value taken up to where `_pipeline_s`'s walk stops (`_pipelines_at_once`); the groups, sends and
    sums are taken in the scalar function's order (a term of 0.0 where a group is absent changes no sum)."""
    L = problem.model.num_layers
    if not comps or slowest_s == math.inf:
        return ()
    G = len(d.slots)
    counts = np.array(comps, dtype=np.int64).reshape(len(comps), G)  # [C, g]
    present = counts > 0
    nmax = np.array(d.max_layers_per_stage, dtype=np.int64)
    keep = (counts * nmax[None, :]).sum(axis=1) >= L  # sum over present g: absent g add 0 (integers, exact)
    counts, present = counts[keep], present[keep]
    if len(counts) == 0:
        return ()
    least, most, send_min, ends, total, small, comm = _present_terms(d, pp, present, all_params)
    pipeline = np.maximum(np.maximum((d.m - 1) * total / pp + total, _pipelines_at_once(d, pp, counts, send_min, L)
                                     + ends), (d.m - 1) * slowest_s + total)
    iteration = pipeline + comm
    if d.alpha_full:
        whole = (np.maximum(least(d.alpha_full) * all_params / pp, most(d.alpha_full) * small)
                 + np.maximum(least(d.beta) * all_params / pp, most(d.beta) * small))
        iteration = np.maximum(iteration, (d.m - 1) * np.maximum(total / pp, slowest_s) + whole)
    rate, cost = _rate_and_cost(d, pp, counts, present, least, send_min, total, iteration, comm)
    return tuple(zip(iteration.tolist(), rate.tolist(), (cost / SECONDS_PER_HOUR).tolist()))


def _pipelines_at_once(d: DegreeTerms, pp: int, counts: np.ndarray, send_min: np.ndarray, L: int,
                       cap_of: tuple[int, ...] | None = None) -> np.ndarray:
    """[C] `_pipeline_s`(d, pp, counts[c], send_min[c], L, cap_of) for every row (each holds L layers at its caps),
    bit for bit: the groups fastest first (a stable sort by step_min, as `sorted`), the two end stages' single sends
    on the fastest stages, SIGMA(M) at every breakpoint M = e + n step of every group (n = 1..cap) in ascending order,
    and the least of (m - 1) M + SIGMA(M) up to where _pipeline_s's walk stops. pp enters only as pp > 1, so rows of
    several pp > 1 may share a call (`refined_tables`: the fastest pp slots of every pp)."""
    caps = cap_of if cap_of is not None else d.max_layers_per_stage
    C, G = counts.shape
    order = sorted(range(G), key=lambda g: d.step_min_s[g])
    ends_left = np.full(C, 2 if pp > 1 else 0, dtype=np.int64)
    groups = []  # (step, cap, send [C], stages [C]) in the scalar function's order (stages 0: no such group)
    for g in order:
        n = counts[:, g]
        light = np.minimum(ends_left, n)
        ends_left = ends_left - light
        groups.append((d.step_min_s[g], caps[g], send_min, light))
        groups.append((d.step_min_s[g], caps[g], 2 * send_min if pp > 1 else np.zeros(C), n - light))
    if LIVE_GROUPS:  # a group with no stage in any row adds exact zeros to every sum below, and only inf marks
        groups = [group for group in groups if group[3].any()]
    sends_total = np.zeros(C)
    for _, _, e, c in groups:
        sends_total = sends_total + np.where(c > 0, e * c, 0.0)
    marks = [np.full((C, 1), math.inf)]  # M = inf (every stage at its cap): SIGMA's least value, last once sorted
    for step, cap, e, c in groups:  # e + n step for n = 1..cap, only where the group exists
        if cap > 0:
            n = np.arange(1, cap + 1, dtype=float)
            marks.append(np.where((c > 0)[:, None], e[:, None] + n[None, :] * step, math.inf))
    M = np.sort(np.concatenate(marks, axis=1), axis=1)  # [C, K] ascending; inf pads at the end
    left = np.full(M.shape, L, dtype=float)
    total = np.broadcast_to(sends_total[:, None], M.shape).copy()
    for step, cap, e, c in groups:  # at M = inf every per-stage count is cap, as in _pipeline_s
        per = np.maximum(0.0, np.minimum(cap, np.floor((M - e[:, None]) / step + 1e-9)))
        take = np.minimum(left, c[:, None] * per)
        total = total + take * step
        left = left - take
    finite = np.isfinite(M)
    least_sigma = total[:, -1:]
    with np.errstate(invalid="ignore"):  # 0 x inf at the pads when m = 1 (not used)
        value = np.where(finite & (left <= 0), (d.m - 1) * M + total, math.inf)
        # the walk's stop, as _pipeline_s takes it: at the first breakpoint (ascending) where (m - 1) M plus the
        # least SIGMA reaches the best value before it (a float sum of the same layers may differ by an ulp from
        # SIGMA(inf), so the stop decides the last bits)
        before = np.concatenate([np.full((C, 1), math.inf), np.minimum.accumulate(value, axis=1)[:, :-1]], axis=1)
        stop = ~finite | ((d.m - 1) * M + least_sigma >= before)
    at = np.argmax(stop, axis=1)  # the last column is inf: a stop exists in every row
    return before[np.arange(C), at] * (1 - 1e-9)


# _pipelines_at_once leaves out the groups (a type's end or middle stages) with no stage in any row (round 17,
# compbatch; on Megatron 76B, mixed-pool-8k, 1.7 of 6 groups per call, and 7 of 58 marks per row). Exact: such a
# group's sends add 0.0, its marks are inf columns (the walk stops at the first inf column, whose running minimum is
# that of the finite columns; the explicit M = inf column stays), and in SIGMA its take is min(left, 0 x per) = 0.0,
# which adds 0.0 to the sum and takes 0.0 from the layers left: the same floats.
LIVE_GROUPS = True


def bound_over_compositions(problem: Problem, comps: tuple[Composition, ...], budget=None,
                            slower_than_s: float = 0.0) -> CandidateBound:
    """The least of the composition bounds that can meet the budget. slower_than_s (solver.solve: only slower plans
    count) bounds each composition's time from below, and so its cost by its own rent x that time."""
    slack = BOUND_SLACK
    least_iteration_s = slower_than_s / problem.iterations
    if OVER_ARRAYS and len(comps) >= OVER_ARRAYS_FROM:
        got = _bound_over_arrays(problem, comps, budget, least_iteration_s)
        if got is not None:
            return got
    best: Composition | None = None
    for iteration, rate, cost in comps:
        iteration = max(iteration, least_iteration_s)
        cost = max(cost, rate * iteration / SECONDS_PER_HOUR)
        if budget is not None:
            if budget.max_time_s is not None and iteration * problem.iterations > budget.max_time_s * slack:
                continue
            if budget.max_usd_per_hour is not None and rate > budget.max_usd_per_hour * slack:
                continue
            if budget.max_cost_usd is not None and cost * problem.iterations > budget.max_cost_usd * slack:
                continue
        best = (iteration, rate, cost) if best is None else (
            min(best[0], iteration), min(best[1], rate), min(best[2], cost))
    return CandidateBound(False) if best is None else CandidateBound(True, *best)


OVER_ARRAYS = True  # bound_over_compositions by _bound_over_arrays from OVER_ARRAYS_FROM compositions (round 14)
OVER_ARRAYS_FROM = 8  # below it the Python loop is as fast


def _bound_over_arrays(problem: Problem, comps: tuple[Composition, ...], budget, least_iteration_s: float
                       ) -> CandidateBound | None:
    """bound_over_compositions' loop as arrays, bit for bit (issue 14, item 3, round 14, costrows): the same
    elementwise operations (Python's max(a, b), which is b only where b > a, as where(b > a, b, a); rent x
    iteration / 3600; the budget's three tests, each the scalar expression on the same floats), and the least of each
    column over the compositions kept (a minimum of numbers does not depend on the order). None where a NaN appears
    (never expected): the loop then decides, as before."""
    arr = np.array(comps, dtype=float).reshape(len(comps), 3)
    iteration = np.where(least_iteration_s > arr[:, 0], least_iteration_s, arr[:, 0])
    rate = arr[:, 1]
    with_rent = rate * iteration / SECONDS_PER_HOUR
    cost = np.where(with_rent > arr[:, 2], with_rent, arr[:, 2])
    if np.isnan(iteration).any() or np.isnan(cost).any() or np.isnan(rate).any():
        return None
    keep = np.ones(len(arr), dtype=bool)
    if budget is not None:
        slack, n = BOUND_SLACK, problem.iterations
        if budget.max_time_s is not None:
            keep &= ~(iteration * n > budget.max_time_s * slack)
        if budget.max_usd_per_hour is not None:
            keep &= ~(rate > budget.max_usd_per_hour * slack)
        if budget.max_cost_usd is not None:
            keep &= ~(cost * n > budget.max_cost_usd * slack)
    if not keep.any():
        return CandidateBound(False)
    return CandidateBound(True, float(iteration[keep].min()), float(rate[keep].min()), float(cost[keep].min()))


def candidate_bound(problem: Problem, d: DegreeTerms, pp: int, budget=None, *, refined: bool = True) -> CandidateBound:
    """The bounds of the module docstring. Refined: with few node types they are taken per composition (how many
    stages of each type), the minimum over compositions that can meet the deadline and rent limit; otherwise
    aggregated with the pipeline bound over the fastest slots and the joint rent x time bound. Not refined: the
    aggregate bound without those two terms (cheap), which the solver computes for every candidate and refines only
    for those that reach the front of its queue."""
    model = problem.model
    L = model.num_layers
    if refined and (comps := composition_bounds(problem, d, pp)) is not None:
        return bound_over_compositions(problem, comps, budget)
    if not _holds_parameters(problem, d, pp):
        return CandidateBound(False)
    all_params = d.all_params(pp)
    hold = _best_slots(tuple(float(n) for n in d.max_layers_per_stage), d.slots, pp, largest=True)
    if hold is None or hold < L:
        return CandidateBound(False)
    # Too many compositions to list: the fastest pp slots (blocks ignored, which only adds capacity) bound the
    # pipeline of every composition from below.
    fastest = [0] * len(d.slots)
    left = pp
    for g in sorted(range(len(d.slots)), key=lambda g: d.step_min_s[g]):
        fastest[g] = min(left, d.slots[g])
        left -= fastest[g]
    total = d.layer_work_min_s + d.end_work_min_s + 2 * (pp - 1) * d.send_min_s
    comm = (d.alpha_min_at(pp) + d.beta_min) * all_params / pp
    pipeline = (d.m - 1) * total / pp + total
    slowest = slowest_floor(d, L, np.array([pp]))  # node supply (issue 14, item 3); cheap_bounds' operations
    if not np.isfinite(slowest[0]):
        return CandidateBound(False)
    pipeline = max(pipeline, ((d.m - 1) * slowest + total)[0])
    if refined:
        largest = (max(d.max_layers_per_stage),) * len(d.slots)
        pipeline = max(pipeline, _pipeline_s(d, pp, tuple(fastest), d.send_min_s, L, largest) + d.end_work_min_s)
    iteration = pipeline + comm
    if d.alpha_full:  # --overlap-grad-reduce (overlap_iteration_s); as cheap_bounds, bit for bit
        iteration = max(iteration, (d.m - 1) * max(total / pp, float(slowest[0]))
                        + (d.alpha_full_min + d.beta_min) * all_params / pp)
    cheapest = _best_slots(d.price_per_gpu_hour, d.slots, pp, largest=False)
    assert cheapest is not None
    rate = d.w * cheapest
    p_min = min(d.price_per_gpu_hour)
    weighted = d.cost_work_min + 2 * (pp - 1) * p_min * d.send_min_s
    weighted = max(weighted, float(_weighted_with_sends(d, L, np.array([pp]))[0]))  # as cheap_bounds, bit for bit
    cost_rate_s = max(rate * iteration, d.w * (d.m * weighted + (pp - 1) * p_min * total) + rate * comm)
    if refined:
        slack = BOUND_SLACK
        joint = _joint_cost_rate_s(
            d, pp, L, total, comm,
            None if budget is None or budget.max_time_s is None else budget.max_time_s * slack / problem.iterations,
            None if budget is None or budget.max_usd_per_hour is None else budget.max_usd_per_hour * slack)
        if joint == math.inf:
            return CandidateBound(False)
        cost_rate_s = max(cost_rate_s, joint)
        if budget is not None and budget.max_cost_usd is not None and budget.objective == "time":
            # the first breakpoint whose cost fits (minimizing cost, the joint bound above already prunes by it)
            under = _least_iteration_under_cost_s(
                d, pp, L, total, comm, budget.max_cost_usd * slack * SECONDS_PER_HOUR / problem.iterations,
                None if budget.max_time_s is None else budget.max_time_s * slack / problem.iterations,
                None if budget.max_usd_per_hour is None else budget.max_usd_per_hour * slack)
            if under == math.inf:
                return CandidateBound(False)
            iteration = max(iteration, under)
            if UNDER_COST_ENDS and pp > 1:  # round 23 (flat76): the stage classes' caps (under_ends_grid)
                ends = _under_ends_s(
                    problem, d, pp, total, comm, budget,
                    None if budget.max_time_s is None else budget.max_time_s * slack / problem.iterations,
                    None if budget.max_usd_per_hour is None else budget.max_usd_per_hour * slack)
                if ends == math.inf:
                    return CandidateBound(False)
                iteration = max(iteration, ends)
    return CandidateBound(True, iteration, rate, cost_rate_s / SECONDS_PER_HOUR)


def interleaving_factor(m: int, pp: int, v: int) -> float:
    """f_v = 1 / v + (1 - 1 / v) m / (m + pp - 1): interleaved pipeline time >= f_v x the 1F1B pipeline time of the
    same stages at v = 1 (docs/cost-model.md, "Interleaved pipeline", bounds).

    With u_i a stage's time at v = 1 (the same layers and placement: its compute, and its sends once each way),
    the stage's time at v is t_i >= u_i (v times the sends, plus the wrap-around), so
    ((m v - 1) max t + sum t) / v >= (m - 1/v) U + S / v, with U = max u, S = sum u. Writing P = (m - 1) U + S:
    (m - 1/v) U + S / v = P / v + (1 - 1/v) m U, and P <= (m + pp - 1) U gives U >= P / (m + pp - 1)."""
    if v == 1:
        return 1.0
    return 1.0 / v + (1.0 - 1.0 / v) * m / (m + pp - 1)


def interleaved_bound(bound: CandidateBound, m: int, pp: int, v: int) -> CandidateBound:
    """A bound for the candidate with v chunks per rank from a budget-free bound of the same (tp, dp, b, pp) at
    v = 1. Valid because every plan of the v candidate is also a plan of the v = 1 candidate (its layer counts are
    allowed there, and its memory at v = 1 is no larger: in-flight chunks / v >= min(pp - rank, m), see
    costmodel.in_flight_per_layer), and
      iteration at v >= f_v x pipeline at 1 + the same all-reduces and optimizer step >= f_v x iteration at 1,
      rent is the same, so rent x iteration at v >= f_v x (rent x iteration at 1).
    Infeasible stays infeasible (memory and node supply). The v = 1 bound must be taken without a budget: a budget
    prunes by the v = 1 times, which v > 1 may beat."""
    if v == 1 or not bound.feasible:
        return bound
    factor = interleaving_factor(m, pp, v)
    return CandidateBound(True, bound.iteration_s * factor, bound.rate_usd_per_hour,
                          bound.cost_per_iteration_usd * factor)


def _best_slots_by_pp(values: tuple[float, ...], slots: tuple[int, ...], pps: np.ndarray, *, largest: bool
                      ) -> tuple[np.ndarray, np.ndarray]:
    """`_best_slots` for every pp in pps at once: (the sums, whether pp slots exist). The same greedy order and the
    same float operations in the same order (a group past the last one taken adds 0.0, which changes nothing), so
    each sum equals `_best_slots`'s bit for bit."""
    order = sorted(range(len(values)), key=lambda g: values[g], reverse=largest)
    left, total = pps.astype(np.int64), np.zeros(len(pps))
    for g in order:
        take = np.minimum(left, slots[g])
        total = total + take * values[g]
        left = left - take
    return total, left == 0


def _weighted_with_sends(d: DegreeTerms, L: int, pps: np.ndarray) -> np.ndarray:
    """[P] a lower bound on sum_s p_s t_s (USD/GPU-hour x s) over every plan with pps[i] stages (v = 1), from each
    stage's sends at its own type's price: a stage of g with n >= 1 layers takes at least n step_min[g] + c e_g
    (c >= 1 sends, all sent by g, e_g = `sender_send_min_s`; n <= NMAX[g]), so
        p_g t_s >= n p_g (step_min[g] + e_g / NMAX[g]) >= n q,   q = min_g p_g (step_min[g] + e_g / NMAX[g]);
    its other c - 1 sends, pp - 2 over the pipeline (2 (pp - 1) in all, one per stage counted), take at least
    min_g p_g e_g each, an empty end stage's one send at least 0, and the embedding and the head at least
    min_g p_g emb[g] and min_g p_g head[g]. So sum_s p_s t_s >= L q + (pp - 2) min_g p_g e_g + those ends (pp >= 2).
    It replaces the candidate's cheapest send e_min at p_min (`cost_work_min` + 2 (pp - 1) p_min e_min) where a type
    that is cheap per layer sends slowly (issue 14, item 3, costgap: A100 on mixed-pool-8k, 1.0 ms a send over a
    400 Gbit/s NIC shared by 8 GPUs, against 0.13 ms on H100's 3,200). The solver takes the larger of the two."""
    e = sender_send_min_s(d)
    price = np.asarray(d.price_per_gpu_hour, dtype=float)
    usable = [g for g in range(len(d.slots)) if d.max_layers_per_stage[g] > 0]
    if not usable:
        return np.zeros(len(pps))
    q = min(d.price_per_gpu_hour[g] * (d.step_min_s[g] + float(e[g]) / d.max_layers_per_stage[g]) for g in usable)
    ends = min(p * s for p, s in zip(d.price_per_gpu_hour, d.emb_s)) + min(p * s for p, s in zip(d.price_per_gpu_hour,
                                                                                                  d.head_s))
    pe = float((price * e).min())
    return np.where(np.asarray(pps) > 1, L * q + np.maximum(np.asarray(pps) - 2, 0) * pe + ends, 0.0)


def cheap_bounds(problem: Problem, d: DegreeTerms, pps: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`candidate_bound(problem, d, pp, refined=False)` for every pp in pps at once, as arrays: (feasible, iteration
    s, rent USD/h, USD per iteration). The same formulas and the same float operations in the same order, so every
    value equals the scalar function's bit for bit (tests/test_cheap_bounds.py): the solver computes this bound for
    every candidate (136,579 in the megatron target's space for GPT-3 175B on mixed-pool-8k), where one Python call
    per candidate took about 2 s of a 10 s limit."""
    ok, iteration, rate, cost_rate_s, _, _ = _aggregate_arrays(problem, d, np.asarray(pps, dtype=np.int64), False)
    return ok, iteration, rate, cost_rate_s / SECONDS_PER_HOUR


def _aggregate_arrays(problem: Problem, d: DegreeTerms, pps: np.ndarray, refined: bool
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """candidate_bound's aggregate path at every pp in pps, without the joint rent x time term (and, unrefined,
    without the pipeline of the fastest slots): (feasible, iteration s, rent USD/h, USD/h x s per iteration, the
    least sum of stage times, the all-reduce and optimizer floor), in the scalar function's float operations."""
    L = problem.model.num_layers
    all_params = np.where(pps > 1, d.layer_params + d.ends_params[1], d.layer_params + d.ends_params[0])
    ok = (sum(d.slots) >= pps) & ~((pps > 2) & (L < pps - 2))
    ok &= all_params / pps / d.tp * d.state_bytes_per_param + MEMORY_RESERVE_BYTES <= d.capacity_bytes_max
    hold, enough = _best_slots_by_pp(tuple(float(n) for n in d.max_layers_per_stage), d.slots, pps, largest=True)
    ok &= enough & ~(hold < L)
    total = d.layer_work_min_s + d.end_work_min_s + 2 * (pps - 1) * d.send_min_s
    comm = (np.where(pps > 1, d.alpha_min_at(2), d.alpha_min) + d.beta_min) * all_params / pps  # alpha_min_at(pp)
    pipeline = (d.m - 1) * total / pps + total
    slowest = slowest_floor(d, L, pps)  # node supply (issue 14, item 3)
    ok &= np.isfinite(slowest)
    pipeline = np.maximum(pipeline, (d.m - 1) * np.where(ok, slowest, 0.0) + total)
    if refined:  # the pipeline of the fastest pp slots, each at the largest NMAX (candidate_bound)
        pipeline = np.maximum(pipeline, _fastest_pipelines(d, L, pps, ok) + d.end_work_min_s)
    iteration = pipeline + comm
    if d.alpha_full:  # --overlap-grad-reduce: (m - 1) M + (sum t + A) + O, sum t + A >= the whole reduce
        iteration = np.maximum(iteration, (d.m - 1) * np.maximum(total / pps, np.where(ok, slowest, 0.0))
                               + (d.alpha_full_min + d.beta_min) * all_params / pps)
    cheapest, _ = _best_slots_by_pp(d.price_per_gpu_hour, d.slots, pps, largest=False)
    rate = d.w * cheapest
    p_min = min(d.price_per_gpu_hour)
    weighted = d.cost_work_min + 2 * (pps - 1) * p_min * d.send_min_s
    weighted = np.maximum(weighted, _weighted_with_sends(d, L, pps))
    cost_rate_s = np.maximum(rate * iteration, d.w * (d.m * weighted + (pps - 1) * p_min * total) + rate * comm)
    return ok, iteration, rate, cost_rate_s, total, comm


def cheap_bounds_many(problem: Problem, ds: list[DegreeTerms], pps: np.ndarray
                      ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """`cheap_bounds(problem, d, pps)` of every d in ds, computed together (round 16, lists2): the same floats, bit
    for bit, with a few dozen numpy calls on [D, P] arrays per group of terms with as many node types, in place of
    about 90 calls on [P] arrays per d (the candidate lists' 2,000-2,600 calls were numpy's per-call overhead,
    about 45 % of the lists' CPU on the large models). Every step is `_aggregate_arrays`'s (refined False) row by
    row: the degree's scalars become [D, 1] columns in the same operations and the same order (a Python int or
    float and a float64 column give the same IEEE results), the greedy slot sums go over each row's own stable
    order (`_best_slots_many`), and the slowest-stage floor is `slowest_floor`'s, through its kept arrays
    (`slowest_floors_many`). tests/test_lists_round16.py checks the values against `cheap_bounds`, and the lists."""
    pps = np.asarray(pps, dtype=np.int64)
    out: list = [None] * len(ds)
    groups: dict[int, list[int]] = {}
    for i, d in enumerate(ds):
        groups.setdefault(len(d.slots), []).append(i)
    for ix in groups.values():
        for i, got in zip(ix, _cheap_group(problem, [ds[i] for i in ix], pps)):
            out[i] = got
    return out


def _column(values, dtype=float) -> np.ndarray:
    """[D, 1]: one scalar of each degree, as a column that broadcasts against [P] and [D, P]."""
    return np.array(values, dtype=dtype)[:, None]


def _cheap_group(problem: Problem, ds: list[DegreeTerms], pps: np.ndarray) -> list[tuple]:
    """cheap_bounds_many for terms of one number of node types: `_aggregate_arrays(problem, d, pps, False)` (then /
    SECONDS_PER_HOUR) of each, as rows of [D, P] arrays; the comments name the scalar function's line."""
    L = problem.model.num_layers
    slots = np.array([d.slots for d in ds], dtype=np.int64)
    price = np.array([d.price_per_gpu_hour for d in ds], dtype=float)
    m1 = _column([d.m - 1 for d in ds], np.int64)
    # all_params = np.where(pps > 1, d.layer_params + d.ends_params[1], d.layer_params + d.ends_params[0])
    all_params = np.where(pps > 1, _column([d.layer_params + d.ends_params[1] for d in ds]),
                          _column([d.layer_params + d.ends_params[0] for d in ds]))
    ok = (_column([sum(d.slots) for d in ds], np.int64) >= pps) & ~((pps > 2) & (L < pps - 2))
    ok &= (all_params / pps / _column([d.tp for d in ds], np.int64) * _column([d.state_bytes_per_param for d in ds])
           + MEMORY_RESERVE_BYTES <= _column([d.capacity_bytes_max for d in ds]))
    hold, enough = _best_slots_many(np.array([[float(n) for n in d.max_layers_per_stage] for d in ds], dtype=float),
                                    slots, pps, largest=True)
    ok &= enough & ~(hold < L)
    send = _column([d.send_min_s for d in ds])
    total = _column([d.layer_work_min_s + d.end_work_min_s for d in ds]) + 2 * (pps - 1) * send
    comm = ((np.where(pps > 1, _column([d.alpha_min_at(2) for d in ds]), _column([d.alpha_min for d in ds]))
             + _column([d.beta_min for d in ds])) * all_params / pps)
    pipeline = m1 * total / pps + total
    slowest = slowest_floors_many(ds, L, pps)
    ok &= np.isfinite(slowest)
    pipeline = np.maximum(pipeline, m1 * np.where(ok, slowest, 0.0) + total)
    iteration = pipeline + comm
    full = np.array([bool(d.alpha_full) for d in ds])
    if full.any():  # --overlap-grad-reduce: the rows whose terms have alpha_full
        overlap = np.maximum(iteration, m1 * np.maximum(total / pps, np.where(ok, slowest, 0.0))
                             + _column([d.alpha_full_min + d.beta_min for d in ds]) * all_params / pps)
        iteration = np.where(full[:, None], overlap, iteration)
    cheapest, _ = _best_slots_many(price, slots, pps, largest=False)
    rate = _column([d.w for d in ds], np.int64) * cheapest
    p_min = _column([min(d.price_per_gpu_hour) for d in ds])
    weighted = _column([d.cost_work_min for d in ds]) + 2 * (pps - 1) * p_min * send
    weighted = np.maximum(weighted, _weighted_with_sends_many(ds, L, pps, price))
    cost_rate_s = np.maximum(rate * iteration, _column([d.w for d in ds], np.int64)
                             * (_column([d.m for d in ds], np.int64) * weighted + (pps - 1) * p_min * total)
                             + rate * comm)
    ok, iteration, rate, cost = (np.ascontiguousarray(a) for a in (ok, iteration, rate, cost_rate_s / SECONDS_PER_HOUR))
    return [(ok[i], iteration[i], rate[i], cost[i]) for i in range(len(ds))]


def _best_slots_many(values: np.ndarray, slots: np.ndarray, pps: np.ndarray, *, largest: bool
                     ) -> tuple[np.ndarray, np.ndarray]:
    """[D, P] `_best_slots_by_pp(tuple(values[i]), tuple(slots[i]), pps, largest=...)` of every row i, bit for bit:
    each row's types in its own stable order (descending for largest: a stable sort of -values keeps equal values
    in their order, as `sorted(..., reverse=True)` does), the same products and sums in the same order."""
    order = np.argsort(-values if largest else values, axis=1, kind="stable")
    vs, ss = np.take_along_axis(values, order, axis=1), np.take_along_axis(slots, order, axis=1)
    left = np.broadcast_to(pps, (len(values), len(pps))).astype(np.int64)
    total = np.zeros(left.shape)
    for j in range(values.shape[1]):
        take = np.minimum(left, ss[:, j:j + 1])
        total = total + take * vs[:, j:j + 1]
        left = left - take
    return total, left == 0


def _weighted_with_sends_many(ds: list[DegreeTerms], L: int, pps: np.ndarray, price: np.ndarray) -> np.ndarray:
    """[D, P] `_weighted_with_sends(d, L, pps)` of every d, bit for bit: its scalars on [D, G] arrays in the same
    elementwise operations (e_g the least of the row's sends and its intra-node send, inf where there is none, as
    `sender_send_min_s`; q the least over the types that hold a layer of p_g (step_min[g] + e_g / NMAX[g]); the
    ends' least products; pe the least p_g e_g), then the [P] formula on columns (0 where no type holds a layer)."""
    inter = np.array([d.send_inter_s for d in ds], dtype=float)  # [D, G, G]
    intra = np.array([[math.inf if s is None else s for s in d.send_intra_s] for d in ds], dtype=float)
    e = np.minimum(inter.min(axis=2), intra)  # min(min(row), intra): the same element
    nmax = np.array([d.max_layers_per_stage for d in ds], dtype=np.int64)
    step = np.array([d.step_min_s for d in ds], dtype=float)
    usable = nmax > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(usable, price * (step + e / nmax), math.inf).min(axis=1)
    ends = ((price * np.array([d.emb_s for d in ds], dtype=float)).min(axis=1)
            + (price * np.array([d.head_s for d in ds], dtype=float)).min(axis=1))
    pe = (price * e).min(axis=1)
    value = np.where(pps > 1, (L * q)[:, None] + np.maximum(pps - 2, 0) * pe[:, None] + ends[:, None], 0.0)
    return np.where(usable.any(axis=1)[:, None], value, 0.0)


def slowest_floors_many(ds: list[DegreeTerms], L: int, pps: np.ndarray, v: int = 1) -> np.ndarray:
    """[D, P] `slowest_floor(d, L, pps, v=v)` of every d in ds: the kept arrays where they are long enough, the
    others computed together (`_least_slowest_many`, the same floats as `least_slowest_stage_s`' one-supply path)
    at pp = 1..max(P, 64), as slowest_floor computes them, and kept (so a later slowest_floor of the same terms gets
    the same array). With FAST_FLOOR or ONE_SUPPLY_VECTORS off, slowest_floor one d at a time. v > 1: round 21
    (costflight), the in-flight step's interleaved candidates (inflight.sharpened_many)."""
    pps = np.asarray(pps, dtype=np.int64)
    most = int(pps.max(initial=1))
    keys = [(d.step_min_s, d.max_layers_per_stage, d.slots, d.send_min_s, L, v) for d in ds]
    if not (FAST_FLOOR and ONE_SUPPLY_VECTORS):
        return np.array([slowest_floor(d, L, pps, v=v) for d in ds]).reshape(len(ds), len(pps))
    missing: dict[tuple, DegreeTerms] = {}
    for key, d in zip(keys, ds):
        have = _FLOORS.get(key)
        if (have is None or len(have) < most) and key not in missing:
            missing[key] = d
    groups: dict[int, list[tuple]] = {}
    for key, d in missing.items():
        groups.setdefault(len(d.slots), []).append(key)
    for group in groups.values():
        floors = _least_slowest_many([missing[key] for key in group], L, max(most, 64), v)
        for key, row in zip(group, floors):
            _FLOORS[key] = row
    return np.array([_FLOORS[key][pps - 1] for key in keys]).reshape(len(ds), len(pps))


def _least_slowest_many(ds: list[DegreeTerms], L: int, P: int, v: int = 1) -> np.ndarray:
    """[D, P] `least_slowest_stage_s(d, L, np.arange(1, P + 1), v=v)` (one supply) of every d (one number of node
    types G), bit for bit as `_least_slowest_one_supply`, on [D, K] and [D, K, G] arrays (v enters as there: the
    sends 2 v e and (2 v - 1) e, the usable marks at v layers, the caps rounded down to multiples of v):
    - every row's marks (sends + n step_min[g], the same sums) sorted, padded at the end with inf to the longest row's
      count, and not made unique: a mark repeated gives the same caps and fewest middle stages at each copy, so the
      first index where a condition holds is the first copy of the same mark, and the answer (the mark there) is
      the same; a padded inf is never the answer (below);
    - np.searchsorted per row becomes a count: of the marks below each value `first` takes (0, the types' usable
      marks, inf), and of the marks whose fewest middle stages exceed pp - 2 (those are non-increasing along the
      marks, and are whole numbers or inf: one bincount of their ceilings capped at P);
    - a padded mark's fewest is set to inf before the running minimum, so it carries the last real mark's: the
      count reaches a pad only where no real mark holds, and a pad's mark is inf, the scalar function's answer there
      (lo = len(marks)).
    The per-mark fewest middle stages are `_fewest_middle_stages`' operations on each [K, G] slab."""
    D, G = len(ds), len(ds[0].slots)
    pps = np.arange(1, P + 1)
    step = np.array([d.step_min_s for d in ds], dtype=float)
    nmax = np.array([d.max_layers_per_stage for d in ds], dtype=np.int64)
    slots = np.array([d.slots for d in ds], dtype=np.int64)
    e = np.array([d.send_min_s for d in ds], dtype=float)
    e_mid, e_end = 2 * v * e, (2 * v - 1) * e
    out = np.full((D, P), math.inf)
    single = np.where((nmax >= L) & (slots >= 1), L * step, math.inf).min(axis=1)
    out[:, 0] = single * SLOWEST_SLACK
    if P < 2:
        return out
    most = int(nmax.max(initial=0))
    if most > 0:
        counts = np.arange(1, most + 1)
        layers = counts[None, None, :] * step[:, :, None]  # [D, G, N] n x step_min[g]
        held = counts[None, None, :] <= nmax[:, :, None]
        marks = np.sort(np.concatenate([np.where(held, e_mid[:, None, None] + layers, math.inf).reshape(D, -1),
                                        np.where(held, e_end[:, None, None] + layers, math.inf).reshape(D, -1)],
                                       axis=1), axis=1)
        real = 2 * held.sum(axis=(1, 2))  # [D] the row's marks (the rest: inf padding)
        marks = marks[:, :max(int(real.max()), 1)]
    else:
        marks, real = np.full((D, 1), math.inf), np.zeros(D, dtype=np.int64)
    K = marks.shape[1]
    need = pps[1:] - 2  # [P - 1]
    usable_at = np.where(nmax >= v, e_mid[:, None] + v * step, math.inf)
    by = np.argsort(usable_at, axis=1, kind="stable")
    usable = np.take_along_axis(usable_at, by, axis=1)
    cumulative = np.cumsum(np.take_along_axis(slots, by, axis=1), axis=1)
    reached = (cumulative[:, :, None] < need[None, None, :]).sum(axis=1)  # [D, P - 1] searchsorted(..., "left")
    # first: 0 where pp - 2 <= 0, else the usable mark of the type reached (G: none, inf)
    values = np.concatenate([usable, np.full((D, 1), math.inf), np.zeros((D, 1))], axis=1)  # [D, G + 2]
    below = (marks[:, :, None] < values[:, None, :]).sum(axis=1)  # searchsorted(marks, value) of each
    lo = np.take_along_axis(below, np.where(need[None, :] <= 0, G + 1, np.minimum(reached, G)), axis=1)

    def caps(sends: np.ndarray) -> np.ndarray:
        k = np.floor((marks[:, :, None] - sends[:, None, None]) / step[:, None, :] + 1e-9)
        return np.clip(k, 0, nmax[:, None, :]) // v * v

    k_mid = caps(e_mid)
    rem = L - 2 * caps(e_end).max(axis=2)  # [D, K]
    order = np.argsort(-k_mid, axis=2, kind="stable")
    ks = np.take_along_axis(k_mid, order, axis=2)
    ss = np.take_along_axis(np.broadcast_to(slots[:, None, :], k_mid.shape), order, axis=2)
    cover, used = np.cumsum(ks * ss, axis=2), np.cumsum(ss, axis=2)
    reach = cover >= rem[:, :, None]
    gi = np.argmax(reach, axis=2)[:, :, None]
    before_cover = np.take_along_axis(cover, gi, axis=2)[:, :, 0] - np.take_along_axis(ks * ss, gi, axis=2)[:, :, 0]
    before_used = np.take_along_axis(used, gi, axis=2)[:, :, 0] - np.take_along_axis(ss, gi, axis=2)[:, :, 0]
    with np.errstate(divide="ignore", invalid="ignore"):
        fewest = before_used + np.ceil((rem - before_cover) / np.take_along_axis(ks, gi, axis=2)[:, :, 0])
    fewest = np.where(rem <= 0, 0.0, np.where(reach.any(axis=2), fewest, math.inf))
    fewest[np.arange(K)[None, :] >= real[:, None]] = math.inf  # the padding
    fewest = np.minimum.accumulate(fewest, axis=1)
    # j: the first mark whose fewest is <= pp - 2, i.e. how many exceed it (fewest > n <=> ceil(fewest) > n)
    capped = np.minimum(np.ceil(fewest), P).astype(np.int64)  # 0..P
    counts_of = np.bincount((np.arange(D)[:, None] * (P + 1) + capped).ravel(), minlength=D * (P + 1)).reshape(D, P + 1)
    above = np.cumsum(counts_of[:, ::-1], axis=1)[:, ::-1]  # [D, P + 1]: how many have capped >= x
    j = above[:, need + 1]  # capped > need
    lo = np.maximum(lo, j)
    picked = np.take_along_axis(marks, np.minimum(lo, K - 1), axis=1)
    out[:, 1:] = np.where(lo < K, picked * SLOWEST_SLACK, math.inf)
    return out


def _fastest_pipelines(d: DegreeTerms, L: int, pps: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """[P] candidate_bound's `_pipeline_s`(d, pp, fastest, send_min_s, L, largest) at every pp where ok (0 elsewhere:
    those pp are infeasible, and an infinite term there made 0 x inf in their unused cost): the fastest pp slots (blocks ignored), every one at the largest NMAX, by `_pipelines_at_once` for the
    pp > 1 (bit for bit) and by the scalar function at pp = 1."""
    G = len(d.slots)
    fastest = np.zeros((len(pps), G), dtype=np.int64)
    left = pps.astype(np.int64)
    for g in sorted(range(G), key=lambda g: d.step_min_s[g]):  # candidate_bound's greedy, every pp at once
        fastest[:, g] = np.minimum(left, d.slots[g])
        left = left - fastest[:, g]
    largest = (max(d.max_layers_per_stage),) * G
    out = np.zeros(len(pps))
    rows = np.flatnonzero(ok & (pps > 1))
    if len(rows):
        out[rows] = _pipelines_at_once(d, 2, fastest[rows], np.full(len(rows), d.send_min_s), L, largest)
    for r in np.flatnonzero(ok & (pps == 1)):
        out[r] = _pipeline_s(d, 1, tuple(int(n) for n in fastest[r]), d.send_min_s, L, largest)
    return out


def _greedy_sums(values: np.ndarray, slots: tuple[int, ...], pps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[K, P] `_best_slots`(values[k], slots, pps[p], largest=False) for every row of values [K, G] and every pp,
    and whether pp slots exist: each row's types in the order of a stable ascending sort (as `sorted`), the same
    products and sums in the same order (a type past the last one taken adds a 0 product, which changes no sum):
    `_best_slots_many` with every row's slots the same."""
    return _best_slots_many(values, np.broadcast_to(np.asarray(slots, dtype=np.int64), values.shape), pps,
                            largest=False)


def _pair_multipliers(hold: np.ndarray, price: np.ndarray) -> list[np.ndarray]:
    """The Lagrangian rent's multipliers of every row of hold [K, G] (caps per type): 0, then for each pair of types
    g < h the multiplier (price_g - price_h) / (hold_g - hold_h) where it is positive (0 where not, or where the caps
    are equal), one [K] array each."""
    K, G = hold.shape
    lams = [np.zeros(K)]
    with np.errstate(divide="ignore", invalid="ignore"):
        for g in range(G):
            for h in range(g + 1, G):
                diff = hold[:, g] - hold[:, h]
                lam = (price[g] - price[h]) / diff
                lams.append(np.where((diff != 0) & (lam > 0), lam, 0.0))
    return lams


def _least_rates_at_once(d: DegreeTerms, pps: np.ndarray, L: int, hold: np.ndarray) -> np.ndarray:
    """[K, P] `_least_rate_per_gpu`(d, pps[p], L, tuple(hold[k])) for every row of hold [K, G] (integers) and every
    pp, bit for bit (inf where the pp largest caps cannot hold L or pp slots do not exist): the same multipliers
    (0, and every positive (p_g - p_h) / (hold_g - hold_h); a pair in either order gives the same float, and an
    invalid pair is given 0, a copy of the first), the same greedy sums, and their maximum (the order of a maximum
    does not change it)."""
    p = np.asarray(d.price_per_gpu_hour, dtype=float)
    K, G = hold.shape
    holds, enough = _greedy_sums(-hold.astype(float), d.slots, pps)  # the largest caps first: -sum (integers, exact)
    can = enough & ~(-holds < L)
    lams = _pair_multipliers(hold, p)
    lam = np.concatenate(lams)  # [J K]: every multiplier of every row in one call (the same per-element operations)
    inner, _ = _greedy_sums(p[None, :] - lam[:, None] * np.tile(hold, (len(lams), 1)), d.slots, pps)
    best = np.maximum(0.0, (lam[:, None] * L + inner).reshape(len(lams), K, len(pps)).max(axis=0))
    return np.where(can, best * (1 - 1e-12), math.inf)


def _joint_tables(d: DegreeTerms, pps: np.ndarray, L: int, stages_s: np.ndarray, comm_s: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`_joint_cost_rate_s`'s budget-free values at every pp > 1 in pps: (iteration [P, K] and rent [P, K] at each of
    its breakpoints M_k, ascending, and the floor rent [P]), the same floats as its walk computes them (stages_s,
    comm_s [P]: its arguments)."""
    G = len(d.slots)
    e = tuple(sender_send_min_s(d))
    marks = sorted({e[g] + n * d.step_min_s[g] for g in range(G) for n in range(1, d.max_layers_per_stage[g] + 1)})
    M = np.array(marks, dtype=float)
    step = np.array(d.step_min_s, dtype=float)
    nmax = np.array(d.max_layers_per_stage, dtype=np.int64)
    hold = np.maximum(0, np.minimum(nmax[None, :], np.floor((M[:, None] - np.array(e)[None, :]) / step[None, :]
                                                            + 1e-9).astype(np.int64)))
    rate = d.w * _least_rates_at_once(d, pps, L, hold)  # [K, P]
    floor = d.w * _least_rates_at_once(d, pps, 0, nmax[None, :])[0]  # [P]
    iteration = (d.m - 1) * np.maximum(M[:, None], (stages_s / pps)[None, :]) + stages_s[None, :] + comm_s[None, :]
    return np.ascontiguousarray(iteration.T), np.ascontiguousarray(rate.T), floor


@dataclass(frozen=True, slots=True)
class RefinedTables:
    """The budget-free part of candidate_bound's refined aggregate path (more compositions than MAX_COMPOSITIONS) for
    every such pp of one DegreeTerms, as arrays indexed by pp - 1 (`refined_tables`); `refined_bound_at` finishes
    one pp under a budget."""

    listed: np.ndarray  # [most] bool: pp's bound is per composition (not in these tables)
    ok: np.ndarray  # [most] feasible before the joint term
    iteration_s: np.ndarray
    rate_usd_per_hour: np.ndarray
    cost_rate_s: np.ndarray  # USD/hour x s per iteration, before the joint term
    stages_s: np.ndarray
    comm_s: np.ndarray
    joint_iteration_s: list  # [most] lists: the joint walk's iteration at each breakpoint (empty where not ok)
    joint_rate: list  # [most] lists: its rent at each breakpoint
    joint_floor_rate: np.ndarray  # [most]
    every_pp: bool = False  # the terms are also kept at the listed pp (aggregate_bound_at; round 15, aggfirst)


def refined_tables(problem: Problem, d: DegreeTerms, most: int, every_pp: bool = False) -> RefinedTables:
    """The aggregate refined bound's budget-free terms at every pp = 1..most whose compositions are too many to list,
    at once (issue 14, item 3, round 12: the cost rows of the large models computed about 17,500 refined bounds one
    Python call each, 0.28 ms apiece). The same formulas and float operations as `candidate_bound`, so
    `refined_bound_at` equals it bit for bit (tests/test_refined_arrays.py).

    every_pp (round 15, aggfirst): the same terms also at the pp > 1 whose compositions are listed, where
    `aggregate_bound_at` gives the aggregate bound that candidate_bound computes when no composition is listed
    (bounds.MAX_COMPOSITIONS = 0), a valid bound at every pp; `listed` still says which pp the refined bound takes
    per composition."""
    pps = np.arange(1, most + 1, dtype=np.int64)
    key = (d.slots, d.stages_per_block)
    if key not in _COUNTS:
        _COUNTS[key] = _count_compositions_upto(d, sum(d.slots))
    counts = _COUNTS[key]
    listed = np.array([pp < len(counts) and counts[pp] <= MAX_COMPOSITIONS for pp in pps.tolist()], dtype=bool)
    ok, iteration, rate, cost_rate_s, total, comm = _aggregate_arrays(problem, d, pps, True)
    ok = ok & (pps > 1) & (True if every_pp else ~listed)  # pp = 1 (at most G compositions): the scalar path
    if every_pp:  # a pp with no composition at all has no plan (candidate_bound: an empty list, infeasible)
        ok &= ~listed | np.array([pp < len(counts) and counts[pp] > 0 for pp in pps.tolist()], dtype=bool)
    its: list = [[] for _ in pps]
    rates: list = [[] for _ in pps]
    floor = np.full(most, math.inf)
    rows = np.flatnonzero(ok)
    if len(rows):
        it_t, rate_t, floor_r = _joint_tables(d, pps[rows], problem.model.num_layers, total[rows], comm[rows])
        for j, r in enumerate(rows.tolist()):
            its[r], rates[r] = it_t[j].tolist(), rate_t[j].tolist()
        floor[rows] = floor_r
    return RefinedTables(listed, ok, iteration, rate, cost_rate_s, total, comm, its, rates, floor, every_pp)


def _joint_from_tables(tab: RefinedTables, pp: int, max_iteration_s: float | None, max_rate: float | None) -> float:
    """`_joint_cost_rate_s` at pp (> 1, not listed, feasible) from the tables: its walk over the same breakpoints
    with the same stops and skips, on the same floats."""
    i = pp - 1
    floor_rate = float(tab.joint_floor_rate[i])
    best = math.inf
    for iteration, rate in zip(tab.joint_iteration_s[i], tab.joint_rate[i]):
        if floor_rate * iteration >= best:
            break
        if max_iteration_s is not None and iteration > max_iteration_s:
            break
        if rate == math.inf or (max_rate is not None and rate > max_rate):
            continue
        best = min(best, rate * iteration)
    return best * (1 - 1e-9)


def under_cost_tables(problem: Problem, d: DegreeTerms, tab: RefinedTables) -> tuple[list, list]:
    """`_least_iteration_under_cost_s`'s budget-free values at every pp of the tables that is feasible and not
    listed (round 14, budgetrows: one Python walk per candidate, about 1.2 ms, was a third of a time<=B row's
    refining on Megatron 18B, mixed-pool-3k): ([most] lists of its iteration and [most] lists of its rent at each of
    its marks e + n step_min[g], e = send_min, ascending), by `_least_rates_at_once` (bit for bit
    `_least_rate_per_gpu`) and the walk's own float operations; `under_cost_from_tables` walks them."""
    most = len(tab.ok)
    its: list = [[] for _ in range(most)]
    rates: list = [[] for _ in range(most)]
    rows = np.flatnonzero(tab.ok & ~tab.listed)  # (tables built with every_pp: the listed pp left out)
    if not len(rows):
        return its, rates
    pps = rows + 1
    G = len(d.slots)
    e = d.send_min_s  # every pp here is > 1
    marks = sorted({e + n * d.step_min_s[g] for g in range(G) for n in range(1, d.max_layers_per_stage[g] + 1)})
    M = np.array(marks, dtype=float)
    step = np.array(d.step_min_s, dtype=float)
    nmax = np.array(d.max_layers_per_stage, dtype=np.int64)
    hold = np.maximum(0, np.minimum(nmax[None, :], np.floor((M[:, None] - e) / step[None, :] + 1e-9).astype(np.int64)))
    rate = d.w * _least_rates_at_once(d, pps, problem.model.num_layers, hold)  # [K, P]
    stages_s, comm_s = tab.stages_s[rows], tab.comm_s[rows]
    iteration = (d.m - 1) * np.maximum(M[:, None], (stages_s / pps)[None, :]) + stages_s[None, :] + comm_s[None, :]
    for j, r in enumerate(rows.tolist()):
        its[r], rates[r] = iteration[:, j].tolist(), rate[:, j].tolist()
    if UNDER_COST_ENDS:  # round 23 (flat76): the ends and the middle stages apart, a third list [most]
        grids = under_ends_grid(problem, d, pps, stages_s, comm_s)
        ends: list = [None] * most
        if grids is not None:
            for j, r in enumerate(rows.tolist()):
                ends[r] = grids[j]
        return its, rates, ends
    return its, rates


def under_cost_from_tables(under: tuple[list, list], pp: int, max_cost_rate_s: float, max_iteration_s: float | None,
                           max_rate: float | None) -> float:
    """`_least_iteration_under_cost_s` at pp from `under_cost_tables`: its walk, stops and skips on the same floats."""
    for iteration, rate in zip(under[0][pp - 1], under[1][pp - 1]):
        if max_iteration_s is not None and iteration > max_iteration_s:
            break
        if rate == math.inf or (max_rate is not None and rate > max_rate):
            continue
        if rate * iteration <= max_cost_rate_s:
            return iteration * (1 - 1e-9)
    return math.inf


def refined_bound_at(problem: Problem, d: DegreeTerms, tab: RefinedTables, pp: int, budget=None,
                     under: tuple[list, list] | None = None) -> CandidateBound:
    """candidate_bound(problem, d, pp, budget, refined=True) from the tables (pp not listed): the joint rent x time
    walk over the kept breakpoints under the budget, exactly as `_joint_cost_rate_s` walks them (its two stops
    and its skips), and the time-under-cost term by its own function; pp = 1 by candidate_bound itself."""
    assert not tab.listed[pp - 1], "a pp with listed compositions has its bound per composition"
    if pp == 1:  # one stage: no sends, other breakpoints (never reached with MAX_COMPOSITIONS >= the types)
        return candidate_bound(problem, d, pp, budget, refined=True)
    return _aggregate_at(problem, d, tab, pp, budget, under)


def aggregate_bound_at(problem: Problem, d: DegreeTerms, tab: RefinedTables, pp: int, budget=None,
                       under: tuple[list, list] | None = None) -> CandidateBound:
    """The aggregate refined bound at pp > 1 from tables built with every_pp, listed or not: at a listed pp the
    value candidate_bound(problem, d, pp, budget, refined=True) has when no composition is listed
    (MAX_COMPOSITIONS = 0), bit for bit (tests/test_aggregate_first.py). It is a valid lower bound over every plan
    of the candidate, as the per-composition bound is (both are checked against every plan by
    tests/test_solver._check_bounds_below_every_plan), so where it rules a candidate out under the budget or above
    a value, the per-composition bound need not be computed (Memo.aggregate_first, round 15, aggfirst)."""
    assert pp > 1 and (tab.every_pp or not tab.listed[pp - 1]), "built with every_pp, pp > 1"
    return _aggregate_at(problem, d, tab, pp, budget, under)


def _aggregate_at(problem: Problem, d: DegreeTerms, tab: RefinedTables, pp: int, budget=None,
                  under: tuple[list, list] | None = None) -> CandidateBound:
    """refined_bound_at's and aggregate_bound_at's common part at pp > 1."""
    i = pp - 1
    if not tab.ok[i]:
        return CandidateBound(False)
    slack = BOUND_SLACK
    max_iteration_s = None if budget is None or budget.max_time_s is None else \
        budget.max_time_s * slack / problem.iterations
    max_rate = None if budget is None or budget.max_usd_per_hour is None else budget.max_usd_per_hour * slack
    joint = _joint_from_tables(tab, pp, max_iteration_s, max_rate)
    if joint == math.inf:
        return CandidateBound(False)
    iteration = float(tab.iteration_s[i])
    cost_rate_s = max(float(tab.cost_rate_s[i]), joint)
    if budget is not None and budget.max_cost_usd is not None and budget.objective == "time":
        under_tables = under
        if under is not None:  # the walk from the degree's tables (the same value)
            under = under_cost_from_tables(under, pp, budget.max_cost_usd * slack * SECONDS_PER_HOUR
                                           / problem.iterations, max_iteration_s, max_rate)
        else:
            under = _least_iteration_under_cost_s(
                d, pp, problem.model.num_layers, float(tab.stages_s[i]), float(tab.comm_s[i]),
                budget.max_cost_usd * slack * SECONDS_PER_HOUR / problem.iterations, max_iteration_s, max_rate)
        if under == math.inf:
            return CandidateBound(False)
        iteration = max(iteration, under)
        if UNDER_COST_ENDS:  # round 23 (flat76): the stage classes' caps (under_ends_grid)
            grid = under_tables[2][i] if under_tables is not None and len(under_tables) > 2 else None
            ends = _under_ends_s(problem, d, pp, float(tab.stages_s[i]), float(tab.comm_s[i]), budget, max_iteration_s,
                                 max_rate, grid)
            if ends == math.inf:
                return CandidateBound(False)
            iteration = max(iteration, ends)
    return CandidateBound(True, iteration, float(tab.rate_usd_per_hour[i]), cost_rate_s / SECONDS_PER_HOUR)


# ---- Time under a cost budget at the cheap level: the layers' work priced and timed by one assignment (round 19) ----
def budget_work_lift(problem: Problem, d: DegreeTerms, pps: np.ndarray, iteration: np.ndarray, rate: np.ndarray,
                     max_cost_rate_s: np.ndarray) -> np.ndarray:
    """[P] a lower bound on the iteration time (s) of every plan with pps[i] stages (v = 1) whose rent x iteration
    (USD/h x s) is at most max_cost_rate_s[i] (a cost budget: B x slack x 3600 / iterations), at least iteration[i]
    (the cheap bound, `cheap_bounds`); inf where no plan meets it. rate: the cheap bound's rent floor (w x the pp
    cheapest slots). One layer kind only (elsewhere the iteration is returned unchanged).

    The cheap bound takes the least time with every layer on its fastest type and the least cost with every layer on
    its cheapest per unit of work, separately: a fast, dear type gives both at once. Here one assignment pays both.
    A plan puts x_g layers on type g (sum x_g = L; x_g = 0 where NMAX[g] = 0), each taking at least s_g =
    step_min[g] in any mode. With W = sum_g x_g s_g and P = sum_g x_g p_g s_g, its stages satisfy
    sum_s t_s >= W + E_t (E_t = the cheapest embedding and head plus 2 (pp - 1) e_min: the cheap bound's `total`
    less its layer work) and sum_s p_s t_s >= P + E_p (E_p = min_g p_g emb[g] + min_g p_g head[g] +
    2 (pp - 1) p_min e_min). Its iteration T >= (m - 1) max t + sum t + comm, comm the cheap bound's all-reduce and
    optimizer floor, and as in the module docstring rent x (T - comm) >= w (m sum_s p_s t_s + (pp - 1) p_min sum_s t_s),
    rent >= rate. Meeting the budget, rent x T <= b, so
        sum_g x_g a_g <= beta,   a_g = s_g (m p_g + (pp - 1) p_min),
        beta = (b - rate x comm) / w - m E_p - (pp - 1) p_min E_t.
    W is then at least the least W over the x that satisfy this and sum x_g = L (a linear programme), which by
    weak duality is at least, for every lam >= 0, L min_g (s_g + lam a_g) - lam beta (the maximum over lam lies at
    lam = 0 or where two types tie; all are tried, any is valid); if L min_g a_g > beta no x satisfies it and no plan
    meets the budget. The iteration is then at least max((m - 1) (W + E_t) / pp, (m - 1) slowest) + W + E_t + comm
    (slowest: `slowest_floor`), as the cheap bound's with W in place of the least layer work. Nothing is assumed
    about a plan's mode, pattern, degree or interleaving beyond what the cheap bound rests on (per-layer steps at
    least step_min, every send at least e_min, the ends at least their cheapest type's). Interleaved candidates take
    f_v x the bound of the v = 1 sibling under the budget / f_v (bounds.interleaved_bound's argument; the caller).
    Float care: infeasibility needs a margin of a relative 1e-9, and the bound is lowered by a relative 1e-9."""
    pps = np.asarray(pps, dtype=np.int64)
    iteration = np.asarray(iteration, dtype=float)
    if len(problem.model.kinds) != 1 or len(pps) == 0:
        return iteration
    L = problem.model.num_layers
    usable = [g for g in range(len(d.slots)) if d.max_layers_per_stage[g] > 0]
    if not usable:
        return iteration
    s = np.array([d.step_min_s[g] for g in usable], dtype=float)  # [G']
    p = np.array([d.price_per_gpu_hour[g] for g in usable], dtype=float)
    p_min = min(d.price_per_gpu_hour)
    all_params = np.where(pps > 1, d.layer_params + d.ends_params[1], d.layer_params + d.ends_params[0])
    comm = (np.where(pps > 1, d.alpha_min_at(2), d.alpha_min) + d.beta_min) * all_params / pps
    sends = 2 * (pps - 1) * d.send_min_s
    e_t = d.end_work_min_s + sends
    e_p = (min(q * t for q, t in zip(d.price_per_gpu_hour, d.emb_s))
           + min(q * t for q, t in zip(d.price_per_gpu_hour, d.head_s)) + p_min * sends)
    beta = (np.asarray(max_cost_rate_s, dtype=float) - np.asarray(rate, dtype=float) * comm) / d.w \
        - d.m * e_p - (pps - 1) * p_min * e_t  # [P]
    a = s[None, :] * (d.m * p[None, :] + ((pps - 1) * p_min)[:, None])  # [P, G']
    need = L * a.min(axis=1)
    none = need - beta > 1e-9 * (np.abs(need) + np.abs(beta))
    # the multipliers: 0 and every positive tie (s_h - s_g) / (a_g - a_h) of two types
    with np.errstate(divide="ignore", invalid="ignore"):
        ties = (s[None, None, :] - s[None, :, None]) / (a[:, :, None] - a[:, None, :])  # [P, g, h]
    ties = np.where(np.isfinite(ties) & (ties > 0), ties, 0.0).reshape(len(pps), -1)
    lams = np.concatenate([np.zeros((len(pps), 1)), ties], axis=1)  # [P, K]
    dual = L * (s[None, None, :] + lams[:, :, None] * a[:, None, :]).min(axis=2) - lams * beta[:, None]
    work = np.maximum(dual.max(axis=1), L * s.min())
    slowest = slowest_floor(d, L, pps)
    with np.errstate(invalid="ignore"):
        lifted = (np.maximum((d.m - 1) * (work + e_t) / pps, (d.m - 1) * np.where(np.isfinite(slowest), slowest, 0.0))
                  + work + e_t + comm) * (1 - 1e-9)
    return np.where(none, math.inf, np.maximum(iteration, lifted))


# ---- Time under a cost budget at the refined level: the ends and the middle stages apart (round 23, flat76) ----
UNDER_COST_ENDS = True  # the aggregate refined bound's time under B with each stage class's caps (under_ends_grid)
ENDS_PAIRS = False  # under_ends_grid: every (first, last) pair apart (G^2 programmes a mark; sharper, dearer)
CLASS_TIES = (0,)  # _class_rents: the classes whose ties give multipliers (0 middle, 1 first, 2 last; any are valid)


def under_ends_grid(problem: Problem, d: DegreeTerms, pps: np.ndarray, stages_s: np.ndarray, comm_s: np.ndarray
                    ) -> list | None:
    """[P] (iteration [K], rent [K]) at the marks M_k of `least_iteration_in_grid`, per pp of pps (all > 1),
    budget-free; None where the model has several layer kinds. stages_s, comm_s [P]: the aggregate bound's least
    sum of stage times and its all-reduce + optimizer floor (`_aggregate_arrays`).

    `_least_iteration_under_cost_s` caps every stage of g at floor((M - e_min) / step_min[g]) layers, every slot
    alike, so its rent may fill positions with slots that hold no layer at M. Here the stages are taken in three
    classes (costmodel.estimate, v = 1): a middle stage (0 < i < pp - 1) holds at least one layer and sends twice,
    to i - 1 and to i + 1; the first sends once and runs the embedding, the last sends once and runs the head; every
    send of a stage of g takes at least e_g (`sender_send_min_s`), a layer on g at least step_min[g]. So a plan
    whose slowest stage takes at most M has n_i <= H^c_g(M) = min(NMAX[g], floor((M - o^c_g) / step_min[g])) on a
    stage of class c and type g, o^mid = 2 e_g, o^first = e_g + emb_g, o^last = e_g + head_g; a middle stage needs
    H^mid >= 1 and an end stage H^end >= 0 (it may hold no layer). The rent w sum_i p_{g_i} is then at least w x
    the LP relaxation's Lagrangian of `_class_rents` (the ends' types free, the middle stages within the slots S_g;
    with ENDS_PAIRS, every (first f, last l) pair: the middle stages hold L - H^first_f - H^last_l on S_g - [f = g]
    - [l = g] slots, the least over the pairs taken: sharper, G^2 programmes a mark); inf where no sequence holds
    L. Every H is a step function of M that changes only at the marks
    o^c_g + n step_min[g]; with M_k the largest mark at or below the plan's slowest stage T_s, H(M_k) = H(T_s), so
    the plan's rent is at least rent(M_k) and its iteration at least it(M_k) = (m - 1) max(M_k, stages_s / pp)
    + stages_s + comm_s (as in `_least_iteration_under_cost_s`). A plan whose slowest stage lies below every mark
    holds no layer. What it rests on: the cost model's send counts and ends, step_min, NMAX and the slots (as the
    in-flight bound's positions, inflight.py 1-3, with the positions' types pooled and node supply as slots)."""
    model = problem.model
    if len(model.kinds) != 1 or not len(pps):
        return None
    L = model.num_layers
    G = len(d.slots)
    pps = np.asarray(pps, dtype=np.int64)
    e = sender_send_min_s(d)
    step = np.array(d.step_min_s, dtype=float)
    nmax = np.array(d.max_layers_per_stage, dtype=np.int64)
    off = np.stack([2 * e, e + np.array(d.emb_s, dtype=float), e + np.array(d.head_s, dtype=float)])  # [3, G]
    marks = sorted({float(off[c, g]) + n * d.step_min_s[g] for c in range(3) for g in range(G)
                    for n in range(1 if c == 0 else 0, d.max_layers_per_stage[g] + 1)})
    M = np.array(marks, dtype=float)  # [K]
    K = len(M)
    H = np.minimum(nmax[None, None, :], np.floor((M[:, None, None] - off[None, :, :]) / step[None, None, :]
                                                   + 1e-9)).astype(np.int64)  # [K, 3, G] (negative: no such stage)
    price = np.array(d.price_per_gpu_hour, dtype=float)
    mids = np.maximum(pps - 2, 0)
    if ENDS_PAIRS:  # every (first, last) pair of types, the slots less the ends' own
        slots = np.array(d.slots, dtype=np.int64)
        eye = np.eye(G, dtype=np.int64)
        rent = np.full((K, len(pps)), math.inf)
        for f in range(G):
            for l in range(G):
                left = slots - eye[f] - eye[l]  # [G]
                if left.min() < 0:
                    continue
                ok = (H[:, 1, f] >= 0) & (H[:, 2, l] >= 0)  # [K]
                need = L - np.maximum(H[:, 1, f], 0) - np.maximum(H[:, 2, l], 0)  # [K]
                got = _middle_rents(d, H[:, 0, :], left, need, mids, price[f] + price[l], ok)
                rent = np.minimum(rent, got)
    else:  # the ends in the programme beside the middle stages, their slots not counted in the supply
        rent = _class_rents(d, H, L, mids)
    stages_s, comm_s = np.asarray(stages_s, dtype=float), np.asarray(comm_s, dtype=float)
    it = (d.m - 1) * np.maximum(M[:, None], (stages_s / pps)[None, :]) + stages_s[None, :] + comm_s[None, :]
    return [(np.ascontiguousarray(it[:, j]), np.ascontiguousarray(rent[:, j])) for j in range(len(pps))]


def _middle_rents(d: DegreeTerms, h_mid: np.ndarray, slots: np.ndarray, need: np.ndarray, mids: np.ndarray,
                  ends_price, ok: np.ndarray) -> np.ndarray:
    """[K, P] w x (ends_price + the least rent of mids[p] middle stages on at most slots[g] of type g, each holding
    at most h_mid[k, g] layers (a type with h_mid < 1 not at all: a middle stage holds a layer), together at least
    need[k]) x (1 - 1e-12): the LP of `_least_rate_per_gpu` by its Lagrangian at 0 and every positive tie of two types
    (weak duality: any multiplier gives a valid bound); inf where the mids best slots cannot hold need or ok[k] is
    False."""
    K, G = h_mid.shape
    price = np.asarray(d.price_per_gpu_hour, dtype=float)
    hold = np.maximum(h_mid, 0)  # [K, G]
    rows_slots = np.where(h_mid >= 1, slots[None, :], 0)  # [K, G]
    held, enough = _best_slots_many(hold.astype(float), rows_slots, mids, largest=True)  # [K, P]
    can = np.asarray(ok)[:, None] & enough & ~(held < need[:, None])
    lams = _pair_multipliers(hold, price)
    lam = np.concatenate(lams)  # [J K]
    inner, _ = _best_slots_many(price[None, :] - lam[:, None] * np.tile(hold, (len(lams), 1)),
                                np.tile(rows_slots, (len(lams), 1)), mids, largest=False)
    best = (lam[:, None] * np.tile(need, len(lams))[:, None] + inner).reshape(len(lams), K, len(mids))
    with np.errstate(invalid="ignore"):
        got = d.w * (np.asarray(ends_price, dtype=float)[..., None] + np.maximum(0.0, best.max(axis=0))) * (1 - 1e-12)
    return np.where(can, got, math.inf)


def _class_rents(d: DegreeTerms, H: np.ndarray, L: int, mids: np.ndarray) -> np.ndarray:
    """[K, P] w x a lower bound on sum_i p_{g_i} over the type sequences of mids[p] + 2 stages (one first, mids
    middle, one last) that hold L layers with a stage of class c on g holding at most H[k, c, g] (c: 0 middle, 1
    first, 2 last; a middle stage needs H >= 1, an end H >= 0) and at most S_g middle stages on g (the ends' own
    slots not counted: a relaxation), x (1 - 1e-12); inf where none holds L. The LP relaxation's Lagrangian in the
    capacity: for lam >= 0, lam L + min_f (p_f - lam H^1_f) + min_l (p_l - lam H^2_l) + the mids cheapest slots of
    p - lam H^0 (weak duality: any lam is valid), at 0 and every positive tie of two types within a class (where
    the concave dual's breakpoints lie)."""
    K, _, G = H.shape
    price = np.asarray(d.price_per_gpu_hour, dtype=float)
    slots = np.asarray(d.slots, dtype=np.int64)
    first, last = H[:, 1, :] >= 0, H[:, 2, :] >= 0  # [K, G]
    hold = np.maximum(H[:, 0, :], 0)  # [K, G]
    rows_slots = np.where(H[:, 0, :] >= 1, slots[None, :], 0)  # [K, G] a middle stage holds a layer
    held, enough = _best_slots_many(hold.astype(float), rows_slots, mids, largest=True)  # [K, P]
    ends_most = np.where(first, H[:, 1, :], -1).max(axis=1) + np.where(last, H[:, 2, :], -1).max(axis=1)  # [K]
    can = (first.any(axis=1) & last.any(axis=1))[:, None] & enough & ~(held + ends_most[:, None] < L)
    lams = [np.zeros(K)]
    with np.errstate(divide="ignore", invalid="ignore"):
        for c in CLASS_TIES:
            for g in range(G):
                for h in range(g + 1, G):
                    diff = H[:, c, g] - H[:, c, h]
                    lam = (price[g] - price[h]) / diff
                    lams.append(np.where((diff != 0) & (lam > 0), lam, 0.0))
    lam = np.concatenate(lams)  # [J K]
    J = len(lams)
    inner, _ = _best_slots_many(price[None, :] - lam[:, None] * np.tile(hold, (J, 1)), np.tile(rows_slots, (J, 1)),
                                mids, largest=False)  # [J K, P]
    H1, H2 = np.tile(H[:, 1, :], (J, 1)), np.tile(H[:, 2, :], (J, 1))
    f1, f2 = np.tile(first, (J, 1)), np.tile(last, (J, 1))
    with np.errstate(invalid="ignore"):
        e1 = np.where(f1, price[None, :] - lam[:, None] * H1, np.inf).min(axis=1)  # [J K]
        e2 = np.where(f2, price[None, :] - lam[:, None] * H2, np.inf).min(axis=1)
        best = ((lam * L + e1 + e2)[:, None] + inner).reshape(J, K, len(mids))
        got = d.w * np.maximum(0.0, best.max(axis=0)) * (1 - 1e-12)
    return np.where(can, got, math.inf)


def least_iteration_in_grid(grid: tuple, max_cost_rate_s: float, max_iteration_s: float | None,
                            max_rate: float | None) -> float:
    """The least iteration (s) over one pp's marks of `under_ends_grid` whose rent x iteration fits the budget
    (max_cost_rate_s: USD/h x s), within the deadline and the rent limit; inf where none does (no plan of the
    candidate meets the budget). Lowered by a relative 1e-9."""
    time, rate = grid
    ok = np.isfinite(rate) & (rate * time <= max_cost_rate_s)
    if max_iteration_s is not None:
        ok &= time <= max_iteration_s
    if max_rate is not None:
        ok &= rate <= max_rate
    if not ok.any():
        return math.inf
    return float(time[ok].min()) * (1 - 1e-9)


def _under_ends_s(problem: Problem, d: DegreeTerms, pp: int, stages_s: float, comm_s: float, budget,
                  max_iteration_s: float | None, max_rate: float | None, grid: tuple | None = None) -> float:
    """The refined bound's time-under-cost term by the stage classes (`under_ends_grid`) at pp > 1: the least
    iteration (s) of a mark that fits the budget, inf where none does; 0 where the grid does not apply. grid: the
    degree's tables' row for pp (else computed for pp alone)."""
    if grid is None:
        grids = under_ends_grid(problem, d, np.array([pp]), np.array([stages_s]), np.array([comm_s]))
        if grids is None:
            return 0.0
        grid = grids[0]
    return least_iteration_in_grid(grid, budget.max_cost_usd * BOUND_SLACK * SECONDS_PER_HOUR / problem.iterations,
                                   max_iteration_s, max_rate)


# ---- Time under a cost budget at the refined level, v > 1: the stage classes in the interleaved form (v2refined) ----
INTERLEAVED_UNDER_ENDS = True  # Memo.refined_bound (v > 1, time under B): interleaved_ends_grid beside the f_v bound


def interleaved_ends_grid(problem: Problem, d: DegreeTerms, pps: np.ndarray, comm_s: np.ndarray, v: int
                          ) -> list | None:
    """[P] (iteration [K], rent [K]) at the marks of `least_iteration_in_grid` for the candidates of the degree with
    v > 1 chunks per rank at every pp of pps (all > 1), budget-free: `under_ends_grid`'s stage classes taken in the
    interleaved time directly (round 23, v2refined); None where the model has several layer kinds or v does not
    divide L (no plan at v: check_interleaving). comm_s [P]: the aggregate bound's all-reduce + optimizer floor.

    costmodel.estimate at v prices T = ((m v - 1) max_i t_i + sum_i t_i) / v + A + E + O with t_i = compute_i
    + v fwd_i + v bwd_i + wrap_i (interleaved_send_counts: a middle stage sends v times each way, an end stage v
    times to its one neighbour and v - 1 times across the wrap-around, every send with the stage's own type as the
    sender, so each at least e_g = `sender_send_min_s`). With t'_i = t_i / v, T = (m v - 1) max t' + sum t' + A + E
    + O, and with k_i = n_i / v (an integer: check_interleaving), t'_i >= k_i step_min[g] + o^c_g, o^mid = 2 e_g,
    o^first = e_g + emb_g / v + (v - 1) / v e_g, o^last = e_g + head_g / v + (v - 1) / v e_g. So a plan whose slowest
    t' is at most M has k_i <= H^c_g(M) = min(floor(NMAX[g] / v), floor((M - o^c_g) / step_min[g])) (NMAX at v = 1
    bounds the layers at v: its memory per layer is no smaller, interleaved_bound), a middle stage k >= 1 (it holds
    a layer: estimate refuses an empty middle stage), an end k >= 0, and sum k_i = L / v: `_class_rents`' programme
    with L / v in place of L. The marks, the rent at them and the argument are `under_ends_grid`'s in t', and
    it(M) = (m v - 1) max(M, S' / pp) + S' + comm_s, S' = (layer_work_min + end_work_min) / v + 2 (pp - 1) send_min
    + 2 (v - 1) / v min_g e_g (the least sum of t': the two ends are distinct stages at pp > 1). Memory beyond
    NMAX, the node blocks and the modes are relaxed."""
    model = problem.model
    L = model.num_layers
    if len(model.kinds) != 1 or not len(pps) or v < 2 or L % v:
        return None
    G = len(d.slots)
    pps = np.asarray(pps, dtype=np.int64)
    e = sender_send_min_s(d)
    step = np.array(d.step_min_s, dtype=float)
    most = np.array(d.max_layers_per_stage, dtype=np.int64) // v  # [G] chunks of v layers a stage of g holds
    wrap = (v - 1) / v * e
    off = np.stack([2 * e, e + np.array(d.emb_s, dtype=float) / v + wrap,
                    e + np.array(d.head_s, dtype=float) / v + wrap])  # [3, G]
    marks = sorted({float(off[c, g]) + n * d.step_min_s[g] for c in range(3) for g in range(G)
                    for n in range(1 if c == 0 else 0, int(most[g]) + 1)})
    M = np.array(marks, dtype=float)  # [K]
    H = np.minimum(most[None, None, :], np.floor((M[:, None, None] - off[None, :, :]) / step[None, None, :]
                                                   + 1e-9)).astype(np.int64)  # [K, 3, G] (negative: no such stage)
    rent = _class_rents(d, H, L // v, np.maximum(pps - 2, 0))
    stages_s = (d.layer_work_min_s + d.end_work_min_s) / v + 2 * (pps - 1) * d.send_min_s + 2 * float(wrap.min())
    comm_s = np.asarray(comm_s, dtype=float)
    it = (d.m * v - 1) * np.maximum(M[:, None], (stages_s / pps)[None, :]) + stages_s[None, :] + comm_s[None, :]
    return [(np.ascontiguousarray(it[:, j]), np.ascontiguousarray(rent[:, j])) for j in range(len(pps))]


def interleaved_ends_s(problem: Problem, grid: tuple | None, budget) -> float:
    """The least iteration (s) at v of a mark of `interleaved_ends_grid`'s row that fits the budget (minimizing time
    under a cost budget), inf where none does (no plan of the candidate at v meets it); 0 where grid is None."""
    if grid is None:
        return 0.0
    slack = BOUND_SLACK
    return least_iteration_in_grid(
        grid, budget.max_cost_usd * slack * SECONDS_PER_HOUR / problem.iterations,
        None if budget.max_time_s is None else budget.max_time_s * slack / problem.iterations,
        None if budget.max_usd_per_hour is None else budget.max_usd_per_hour * slack)
