"""Round 12 (timerows, docs/solver.md): minimizing time without a cost budget or a rent limit, the in-flight walk
(inflight.inflight_bound) reads R(M_j) only for being finite, and R is finite exactly from `holds_from` on, so the
walk computes no rent programme. The bound must equal the walk that computes R (forced here by a rent limit that no
plan reaches), with and without a deadline, and R computed at every interval must be infinite exactly below
`holds_from` (the claim the shortcut rests on)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import HealthCheck, given, settings
from draws import draws
from hypothesis import strategies as st

from optsearch.bounds import CandidateBound
from optsearch.candidates import context_parallel_candidates, dp_candidates, micro_batch_candidates, node_uses, \
    tp_candidates
from optsearch.formulation.model import Candidate
from optsearch.inflight import _rent, sharpened
from optsearch.solver import Memo
from optsearch.spec.budget import Budget

from test_solver_memory import overlapped_tight_case, tight_instances

NO_LIMIT_USD_PER_HOUR = 1e12  # a rent limit every interval meets: the walk then computes R (the old path)


def _candidates(problem, options):
    for tp in tp_candidates(problem):
        for mbs in micro_batch_candidates(problem, options):
            for cp in context_parallel_candidates(problem, options):
                for dp in dp_candidates(problem, tp, mbs, None, cp):
                    uses = tuple(node_uses(problem, tp, dp, mbs, cp))
                    for pp in range(1, options.max_stages + 1) if uses else ():
                        yield Candidate(tp=tp, dp=dp, micro_batch_size=mbs, pp=pp, uses=uses, cp=cp)


def _compare(problem, options, cands) -> int:
    """Checks each candidate's time bound both ways; the count of candidates compared."""
    plain, forced = Memo(problem, options), Memo(problem, options)
    compared = 0
    for cand in cands:
        free = _bound(problem, plain, cand, Budget(objective="time"))
        tab = plain.inflight.get(cand.key)
        if tab is None:
            continue
        # no rent programme ran: every R from holds_from on is still unknown (NaN), below it inf (inflight_tables)
        assert np.isnan(tab.rent[tab.holds_from:]).all()
        assert np.isposinf(tab.rent[:tab.holds_from]).all()
        with_rent = _bound(problem, forced, cand, Budget(objective="time", max_usd_per_hour=NO_LIMIT_USD_PER_HOUR))
        assert free == with_rent, (cand, free, with_rent)
        if free is not None:
            deadline = 1.5 * free * problem.iterations
            assert _bound(problem, plain, cand, Budget(objective="time", max_time_s=deadline)) == _bound(
                problem, forced, cand, Budget(objective="time", max_time_s=deadline,
                                              max_usd_per_hour=NO_LIMIT_USD_PER_HOUR))
        # R at every interval: finite exactly from holds_from on
        every = forced.inflight[cand.key]
        _rent(every, len(every.marks))
        assert (np.isfinite(every.rent) == (np.arange(len(every.marks)) >= every.holds_from)).all(), cand
        compared += 1
    return compared


def _bound(problem, memo, cand, budget):
    d = memo.degree_terms(cand.tp, cand.dp, cand.micro_batch_size, cand.uses, 1, cand.cp)
    got = sharpened(problem, memo.inflight, d, cand, budget, CandidateBound(True, 0.0, 0.0, 0.0), memo.calls)
    return got.iteration_s if got.feasible else None


@settings(max_examples=draws(10), derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(tight_instances(), st.sampled_from(["per-stage", "uniform+block+cp"]))
def test_the_time_walk_computes_no_rent_and_equals_the_walk_that_does(case, space):
    problem, options, _, _, _ = case
    options = replace(options, max_stages=6)  # deeper than brute force goes: supply binds on more positions
    if space != "per-stage":
        options = replace(options, uniform_recompute=True, block_recompute=True, context_parallel_sizes=(1, 2))
    _compare(problem, options, _candidates(problem, options))


def test_the_time_walk_computes_no_rent_on_a_catalog_model_where_supply_binds():
    """GPT-2 XL on the four-type pool (megatron target): deep candidates whose H100 supply binds (holds_from > 0)."""
    from optsearch.cli.options import space_from_target
    from optsearch.edits import edited_problem
    from optsearch.targets import engine_problem

    problem = engine_problem("megatron", edited_problem("gpt2-xl", "mixed-pool-8k", []))
    options = space_from_target("megatron", problem)
    cands = []
    for tp, dp, mbs, pp, cp in [(1, 8, 1, 12, 1), (2, 4, 2, 24, 1), (1, 16, 1, 8, 2), (1, 64, 1, 24, 1),
                                (2, 32, 1, 48, 1)]:
        uses = tuple(node_uses(problem, tp, dp, mbs, cp, options))
        cands.append(Candidate(tp=tp, dp=dp, micro_batch_size=mbs, pp=pp, uses=uses, cp=cp))
    assert _compare(problem, options, cands) == len(cands)
    memo = Memo(problem, options)
    for cand in cands:
        _bound(problem, memo, cand, Budget(objective="time"))
    assert any(t.holds_from > 0 for t in memo.inflight.values())


def _supply_one_type_at_a_time(tab, caps):
    """_holds_within_supply as written before round 12: each binding type alone, in a Python loop (the reference)."""
    usable = (caps >= 1) | ~tab.middle[None, None, :]
    k = np.where(usable, np.maximum(caps, 0.0), -np.inf)
    G = k.shape[1]
    ok = np.ones(len(caps), dtype=bool)
    for g in range(G):
        if tab.slots[g] >= k.shape[2]:
            continue
        others = np.delete(k, g, axis=1).max(axis=1) if G > 1 else np.full((len(caps), k.shape[2]), -np.inf)
        own = k[:, g, :]
        forced = ~np.isfinite(others)
        ok &= forced.sum(axis=1) <= tab.slots[g]
        with np.errstate(invalid="ignore"):
            gain = np.where(forced, np.where(np.isfinite(own), own, -np.inf), np.maximum(own - others, 0.0))
        gain = np.where(np.isfinite(gain), gain, -np.inf)
        top = -np.sort(-gain, axis=1)[:, :int(tab.slots[g])]
        base = np.where(forced, 0.0, others).sum(axis=1)
        ok &= base + np.where(np.isfinite(top), top, 0.0).sum(axis=1) >= tab.L
    return ok


def _brute_holds(slots, middle, L, caps) -> bool:
    """Whether some assignment of types to positions within supply holds L layers, every middle position >= 1."""
    import itertools

    G, P = caps.shape
    for types in itertools.product(range(G), repeat=P):
        if any(types.count(g) > slots[g] for g in range(G)):
            continue
        held = [caps[g, i] for i, g in enumerate(types)]
        if all(h >= 1 or not middle[i] for i, h in enumerate(held)) and sum(max(h, 0) for h in held) >= L:
            return True
    return False


@settings(max_examples=draws(60), derandomize=True, database=None, deadline=None)
@given(st.integers(1, 4), st.integers(1, 5), st.integers(0, 2**32 - 1))
def test_the_supply_check_of_every_type_at_once_equals_one_type_at_a_time_and_never_drops_a_layout(G, P, seed):
    from types import SimpleNamespace

    from optsearch.inflight import _holds_within_supply

    rng = np.random.default_rng(seed)
    caps = rng.integers(-1, 5, size=(12, G, P)).astype(float)  # -1 .. 0: a type that holds nothing there
    slots = rng.integers(0, P + 1, size=G)
    middle = np.zeros(P, dtype=bool)
    middle[1:P - 1] = True
    tab = SimpleNamespace(slots=slots, middle=middle, L=int(rng.integers(1, 3 * P + 2)))
    got = _holds_within_supply(tab, caps)
    assert (got == _supply_one_type_at_a_time(tab, caps)).all()
    for row, passed in zip(caps, got):  # a relaxation: it never rules out an assignment that holds L
        if _brute_holds(slots, middle, tab.L, row):
            assert passed


def _time_bound(problem, memo, cand, budget, cutoff_s=float("inf")):
    d = memo.degree_terms(cand.tp, cand.dp, cand.micro_batch_size, cand.uses, 1, cand.cp)
    got = sharpened(problem, memo.inflight, d, cand, budget, CandidateBound(True, 0.0, 0.0, 0.0), memo.calls,
                    cutoff_s=cutoff_s)
    return got.iteration_s * problem.iterations if got.feasible else None


def _check_cutoffs(problem, options) -> tuple[int, int]:
    """Minimizing time, the in-flight bound with cutoffs at each plan's own time x (0.5, 1, 2) and just around the
    bound without one: below the plan (brute force, least recomputation, the overlap as the search sets it), and at
    or above the cutoff wherever the bound without it is. (comparisons, those decided at or above the cutoff)"""
    from optsearch.costmodel import overlap_grad_reduce_on
    from test_inflight_bound import _plans

    memo = Memo(problem, options)
    checked = decided = 0
    budget = Budget(objective="time")
    for cand, (plan, est) in _plans(problem, options, as_searched=True):
        if not overlap_grad_reduce_on(problem, cand.dp, cand.cp):
            continue
        free = _time_bound(problem, memo, cand, budget)
        tab = memo.inflight.get(cand.key)
        if free is None or tab is None or tab.whole_per_layer is None:
            continue
        assert free <= est.training_time_s * (1 + 1e-9)
        for f in (0.5, 1.0, 2.0, 0.999 * free / est.training_time_s, 1.001 * free / est.training_time_s,
                  free / est.training_time_s):
            cutoff = f * est.training_time_s
            cut = _time_bound(problem, memo, cand, budget, cutoff)
            assert cut is not None and cut <= est.training_time_s * (1 + 1e-9), (cand, plan, f, cut)
            margin = cutoff * (1 - 1e-9)  # inflight_bound's rounding
            if free >= margin * (1 + 1e-8):  # (the cutoff is raised by 1e-12 inside: a band around it is left out)
                assert cut >= margin, (cand, f, cut, free, cutoff)  # it prunes whatever the walk without it does
            decided += cut >= margin
            checked += 1
    return checked, decided


def test_the_time_walk_with_a_cutoff_lies_below_every_plan_and_prunes_what_the_walk_without_it_prunes():
    """Round 12: minimizing time, the whole reduce's levels searched only as far as the cutoff decides
    (whole_levels_iteration, _hiding_floor), on the first-reduce test's overlap instances."""
    from test_positional_first_reduce import _cases

    checked = decided = 0
    for problem, options in list(_cases())[::2]:  # four of the eight
        a, b = _check_cutoffs(problem, options)
        checked, decided = checked + a, decided + b
    assert checked > 0 and 0 < decided < checked  # both sides of the cutoff are seen


@settings(max_examples=draws(3), derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(tight_instances())
def test_the_time_walk_with_a_cutoff_lies_below_every_plan_on_memory_tight_instances(case):
    made = overlapped_tight_case(case)
    if made is None:
        return
    problem, options = made
    _check_cutoffs(problem, options)
