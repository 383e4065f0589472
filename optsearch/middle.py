"""A middle level between the cheap and the refined bound: the joint rent x time floor of many degrees at once.

Issue 14, item 3, round 20 (costmid). Minimizing cost, most cheap-level entries that hold a large model's proof at
its time limit are lifted past 0.99 x the incumbent by one refinement, and on GPT-3 175B (mixed-pool-8k) 92 % of those
by one term of it alone: the joint rent x time bound (`bounds._joint_cost_rate_s`: the cheapest types cannot hold
enough layers to keep the slowest stage short, so rent and time are not both at their separate floors). The loop
computes it one degree at a time (the degree's refined tables, 2-3 ms each, at its second ask), about 550 degrees in
a 10 s row. Here the same floor is computed for a batch of degrees at once, on [D, K, P] arrays (D degrees, K
breakpoints of the slowest stage, P pipeline depths), for every pp of each degree.

The bound, for a plan of a degree d with pp > 1 stages at v = 1 (notation of bounds.py's docstring: e_g the least
send a stage of type g makes, `bounds.sender_send_min_s`; step_min[g]; NMAX[g]; S_g slots; p_g prices; w = tp dp cp):
let M* be its slowest stage's time. Every stage of g sends at least once and holds n whole layers, each at least
step_min[g], so n <= k_g(M*) = min(NMAX[g], floor((M* - e_g) / step_min[g])); its n_g stages of g (sum n_g = pp,
n_g <= S_g) hold L layers, so sum_g k_g(M*) n_g >= L, and its rent is w sum_g p_g n_g >= w R(k(M*)), where
R(h) = min { sum p_g n_g : sum n_g = pp, sum h_g n_g >= L, 0 <= n <= S } >= lam L + greedy_pp(p - lam h) for every
lam >= 0 (weak duality; greedy_pp(c): the least sum of pp slot values c_g, at most S_g of g, the pp cheapest). Its
iteration is at least it(M*) = (m - 1) max(M*, SUM / pp) + SUM + A_lb + O_lb (SUM the least sum of stage times,
A_lb + O_lb the all-reduce and optimizer floors: `bounds._aggregate_arrays`' total and comm). For breakpoints
c_0 < c_1 < ... < c_J (any subset of the marks e_g + n step_min[g], c_0 the least of them all): below c_0 no stage
holds a layer (no plan); for c_j <= M* < c_{j+1}, k(M*) <= k(c_{j+1}) elementwise (k grows with M), so R(k(M*)) >=
R(k(c_{j+1})) (fewer layers per stage only shrink R's feasible set), and it(M*) >= it(c_j); for M* >= c_J,
R(k(M*)) >= R(NMAX) and it(M*) >= it(c_J). So rent x iteration >= min over j of w R(k(c_{j+1})) it(c_j) (with
c_{J+1} = inf, k = NMAX), which is `joint_floors_many`'s value. Under a deadline (an iteration of at most T), a plan
with M* in segment j has it(c_j) <= it(M*) <= T, so the segments with it(c_j) > T are left out; none left: no plan.
With every mark taken (J + 1 = all of them) this is `bounds._joint_cost_rate_s`'s walk, up to the multipliers
tried; with fewer, a smaller (still valid) floor for less work.

Every step uses only terms whose validity the refined bound already rests on (DegreeTerms: step_min and NMAX over
every recomputation mode, pattern, layer kind and degree, round 14's cap fix; e_g, costgap's), and the joint bound is
valid at every pp, listed compositions or not (`bounds.aggregate_bound_at`). A v > 1 candidate's plans are plans of
its v = 1 sibling's layout with iteration and rent x iteration at least f_v times theirs (`bounds.interleaved_bound`):
its floor is f_v x the v = 1 floor under the deadline T / f_v.
"""

from __future__ import annotations

import math

import numpy as np

from optsearch.bounds import DegreeTerms, sender_send_min_s

MIDDLE_MARKS = 48  # breakpoints per degree at most (the first mark and evenly spaced ones of the sorted marks)
MIDDLE_SLACK = 1e-9  # the floor is lowered by this fraction (float sums: stay below the true minimum)


def _marks(d: DegreeTerms, e: np.ndarray, most: int) -> tuple[np.ndarray, np.ndarray]:
    """The degree's segments of the slowest stage M: (their lower ends c_j, and for each the mark just below the next
    one's c_{j+1}, inf for the last). The marks are every e_g + n step_min[g] (n = 1..NMAX[g]) sorted and unique;
    with at most `most` of them each is a segment's lower end (k is constant between two marks, so the next end's
    mark below is c_j itself), else the first and most - 1 others evenly spaced up to the last."""
    marks = np.unique(np.concatenate([e[g] + np.arange(1, n + 1) * d.step_min_s[g]
                                      for g, n in enumerate(d.max_layers_per_stage) if n > 0] or [np.zeros(0)]))
    if len(marks) <= most:
        return marks, np.concatenate([marks[:-1], [math.inf]]) if len(marks) else marks
    ix = np.unique(np.linspace(0, len(marks) - 1, most).round().astype(np.int64))
    return marks[ix], np.concatenate([marks[ix[1:] - 1], [math.inf]])


def joint_floors_many(problem, ds: list[DegreeTerms], most: int, vs: tuple[int, ...] = (1,),
                      max_iteration_s: float | None = None, marks_most: int | None = None
                      ) -> list[dict[int, np.ndarray]]:
    """For each d of ds: {v: [most] floors} with floors[pp - 1] a lower bound on rent x iteration (USD/hour x s per
    iteration) of every plan of the candidate (d, pp, v) whose iteration meets max_iteration_s (none: every plan),
    by the module docstring's bound; 0.0 at pp = 1 (no bound taken there), inf where no plan can exist.
    vs: the v asked; the floor at v is f_v x the v = 1 floor under max_iteration_s / f_v (loosened by 1e-9, as
    solver._interleaved_budget), f_v = `bounds.interleaving_factor`(m, pp, v) in its float operations."""
    L = problem.model.num_layers
    pps = np.arange(1, most + 1, dtype=np.int64)
    marks_most = MIDDLE_MARKS if marks_most is None else marks_most
    out: list = [None] * len(ds)
    groups: dict[tuple, list[int]] = {}
    for i, d in enumerate(ds):
        groups.setdefault((d.price_per_gpu_hour, d.slots), []).append(i)
    for (price, slots), ix in groups.items():
        for i, got in zip(ix, _group(L, [ds[i] for i in ix], np.asarray(price, dtype=float),
                                     np.asarray(slots, dtype=np.int64), pps, vs, max_iteration_s, marks_most)):
            out[i] = got
    return out


def _group(L: int, ds: list[DegreeTerms], price: np.ndarray, slots: np.ndarray, pps: np.ndarray,
           vs: tuple[int, ...], max_iteration_s: float | None, marks_most: int) -> list[dict]:
    """joint_floors_many for degrees with the same prices and slots (one G)."""
    D = len(ds)
    es = [sender_send_min_s(d) for d in ds]
    marks = [_marks(d, e, marks_most) for d, e in zip(ds, es)]
    J = max(1, max(len(mk) for mk, _ in marks))
    lower = np.full((D, J), math.inf)  # each row's segments' lower ends c_j (inf: a padded column, no segment)
    upper = np.full((D, J), math.inf)  # and the mark below the next one's (inf: the last segment, k = NMAX)
    for r, (lo, up) in enumerate(marks):
        lower[r, :len(lo)], upper[r, :len(up)] = lo, up
    e = np.array(es, dtype=float)  # [D, G]
    step = np.array([d.step_min_s for d in ds], dtype=float)
    nmax = np.array([d.max_layers_per_stage for d in ds], dtype=np.int64)
    # k [D, J, G]: the most layers a stage of g holds in segment j (at the mark below the next segment; NMAX past
    # the last mark). (+ 1e-9: rounding must not lose a layer, which would overstate.)
    with np.errstate(invalid="ignore"):
        k = np.floor((upper[:, :, None] - e[:, None, :]) / step[:, None, :] + 1e-9)
    hold = np.minimum(np.where(np.isinf(upper)[:, :, None], nmax[:, None, :], np.clip(k, 0, None)), nmax[:, None, :])
    rate = _least_rates(price, slots, L, hold, pps)  # [D, J, P] sum p_g n_g floor (USD/GPU-hour)
    w = np.array([d.w for d in ds], dtype=float)[:, None, None]
    m1 = np.array([d.m - 1 for d in ds], dtype=float)[:, None, None]
    lw = np.array([d.layer_work_min_s + d.end_work_min_s for d in ds], dtype=float)[:, None]
    smin = np.array([d.send_min_s for d in ds], dtype=float)[:, None]
    total = lw + 2 * (pps - 1)[None, :] * smin  # [D, P]: bounds._aggregate_arrays' total
    params = np.array([[d.layer_params + d.ends_params[0], d.layer_params + d.ends_params[1]] for d in ds])
    all_params = np.where(pps[None, :] > 1, params[:, 1:2], params[:, 0:1])
    alpha = np.array([[d.alpha_min, d.alpha_min_at(2)] for d in ds])
    beta = np.array([d.beta_min for d in ds])[:, None]
    comm = (np.where(pps[None, :] > 1, alpha[:, 1:2], alpha[:, 0:1]) + beta) * all_params / pps[None, :]
    with np.errstate(invalid="ignore"):  # padded columns (inf x 0 where m = 1): masked below
        it = m1 * np.maximum(lower[:, :, None], (total / pps[None, :])[:, None, :]) + (total + comm)[:, None, :]
        product = w * rate * it  # [D, J, P]
    product = np.where(np.isfinite(lower)[:, :, None], product, math.inf)  # padded columns: no segment
    result: list[dict] = [dict() for _ in range(D)]
    m = np.array([d.m for d in ds], dtype=np.int64)[:, None]
    for v in vs:  # f_v [D, P] as interleaving_factor: 1 / v + (1 - 1 / v) m / (m + pp - 1), 1.0 at v = 1
        f = np.ones((D, len(pps))) if v == 1 else 1.0 / v + (1.0 - 1.0 / v) * m / (m + pps[None, :] - 1)
        if max_iteration_s is None:
            least = product.min(axis=1)
        else:
            limit = max_iteration_s / f * (1.0 + 1e-9)  # [D, P]
            least = np.where(it <= limit[:, None, :], product, math.inf).min(axis=1)
        floor = np.where(pps[None, :] > 1, least * (1.0 - MIDDLE_SLACK) * f, 0.0)
        for r in range(D):
            result[r][v] = floor[r]
    return result


def _least_rates(price: np.ndarray, slots: np.ndarray, L: int, hold: np.ndarray, pps: np.ndarray) -> np.ndarray:
    """[D, J, P] a lower bound on min { sum p_g n_g : sum n_g = pp, sum hold_g n_g >= L, 0 <= n_g <= S_g } for each
    row of hold [D, J, G] and each pp: the largest of lam L + greedy_pp(p - lam hold) over lam = 0 and every positive
    (p_g - p_h) / (hold_g - hold_h) (weak duality: each is a bound); inf where the pp slots of the largest holds
    cannot hold L (no n meets the constraints) or fewer than pp slots exist."""
    D, J, G = hold.shape
    h = hold.astype(float)
    lams = [np.zeros((D, J))]
    with np.errstate(divide="ignore", invalid="ignore"):
        for g in range(G):
            for o in range(g + 1, G):
                diff = h[:, :, g] - h[:, :, o]
                lam = (price[g] - price[o]) / diff
                lams.append(np.where((diff != 0) & (lam > 0), lam, 0.0))
    lam = np.stack(lams)  # [Q, D, J]
    values = price[None, None, None, :] - lam[:, :, :, None] * h[None, :, :, :]  # [Q, D, J, G]
    inner = _greedy(values, slots, pps)  # [Q, D, J, P]
    best = np.maximum(0.0, (lam[:, :, :, None] * L + inner).max(axis=0))
    most_held = -_greedy(-h[None], slots, pps)[0]  # [D, J, P]: the pp largest holds' sum
    enough = pps <= slots.sum()
    return np.where((most_held >= L) & enough[None, None, :], best, math.inf)


def _greedy(values: np.ndarray, slots: np.ndarray, pps: np.ndarray) -> np.ndarray:
    """[..., P] the least sum of pp slot values, at most slots[g] of value values[..., g]: the pp smallest, taken
    cheapest first (exact for this knapsack of unit items); values [..., G]."""
    order = np.argsort(values, axis=-1, kind="stable")
    vs = np.take_along_axis(values, order, axis=-1)
    ss = slots[order]
    left = np.broadcast_to(pps, vs.shape[:-1] + (len(pps),)).astype(np.int64)
    total = np.zeros(left.shape)
    for j in range(vs.shape[-1]):
        take = np.minimum(left, ss[..., j:j + 1])
        total = total + take * vs[..., j:j + 1]
        left = left - take
    return total
