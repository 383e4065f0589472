"""The solver's vectorized cheap bounds (bounds.cheap_bounds, solver._candidates) equal the scalar ones they replace
(bounds.candidate_bound with refined=False, relaxed by bounds.interleaved_bound, and solver._bounded) bit for bit,
on every candidate of random instances, budgets and search spaces, including the CLI's megatron target."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from draws import draws

from optsearch.bounds import candidate_bound, cheap_bounds, degree_terms, interleaved_bound
from optsearch.candidates import (
    SpaceOptions, context_parallel_candidates, dp_candidates, ep_candidates, interleaving_allowed, max_stages,
    micro_batch_candidates, node_uses, tp_candidates,
)
from optsearch.formulation.model import Candidate
from optsearch.solver import Memo, _bounded, _candidates
from optsearch.spec.budget import Budget

from test_solver import instances


def _reference(memo: Memo, budget: Budget, slower_than_s: float) -> tuple[list[tuple], int]:
    """solver._candidates as it was written before: one scalar bound per candidate."""
    problem, options = memo.problem, memo.options
    kept, total = [], 0
    for tp in tp_candidates(problem):
        for mbs, cp in [(b, c) for b in micro_batch_candidates(problem, options)
                        for c in context_parallel_candidates(problem, options)]:
            for dp in dp_candidates(problem, tp, mbs, budget.max_gpus, cp):
                uses = tuple(node_uses(problem, tp, dp, mbs, cp))
                if not uses:
                    continue
                for ep in ep_candidates(problem, tp, dp, options):
                    terms = degree_terms(problem, tp, dp, mbs, uses, ep, cp)
                    for pp, v in ((p, v) for p in range(1, max_stages(problem, options) + 1)
                                  for v in options.virtual_stages if interleaving_allowed(problem, p, dp, mbs, v)):
                        total += 1
                        if budget.max_gpus is not None and pp * tp * cp * dp > budget.max_gpus:
                            continue
                        cand = Candidate(tp=tp, dp=dp, micro_batch_size=mbs, pp=pp, uses=uses, ep=ep, cp=cp, v=v)
                        bound = interleaved_bound(candidate_bound(problem, terms, pp, None, refined=False), terms.m,
                                                  pp, v)
                        item = _bounded(problem, budget, terms, cand, False, bound, slower_than_s)
                        if item is not None:
                            kept.append((item.lower_bound, item.cand.key, item.level))
    kept.sort()
    return kept, total


@settings(max_examples=draws(40), derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(instances(), st.sampled_from(["plain", "megatron"]), st.sampled_from([0.0, 0.5, 1.0, 2.0]))
def test_vectorized_cheap_bounds_equal_the_scalar_ones(case, space, window):
    problem, options, objective, kind, factor = case
    if space == "megatron":  # the CLI's knobs: cp and v multiply the candidates
        options = SpaceOptions(micro_batch_sizes=(1, 2), max_stages=options.max_stages + 2,
                               context_parallel_sizes=(1, 2, 4), virtual_stages=(1, 2, 3), uniform_recompute=True)
    memo = Memo(problem, options)
    # budgets of each kind, at a level that prunes some candidates: from the cheap bounds themselves
    free, _ = _reference(memo, Budget(objective=objective), 0.0)
    level = free[len(free) // 2][0] * factor if free else 1.0
    slower = 0.0
    if window and free:
        slower = free[0][0] * window if objective == "time" else 0.0
    budget = {"none": Budget(objective=objective), "gpus": Budget(objective=objective, max_gpus=max(1, int(8 * factor))),
              "time": Budget(objective=objective, max_time_s=level if objective == "time" else None),
              "cost": Budget(objective=objective, max_cost_usd=level if objective == "cost" else None),
              "rate": Budget(objective=objective, max_usd_per_hour=40.0 * factor)}[kind]
    got, total = _candidates(memo, budget, slower)
    want, want_total = _reference(Memo(problem, options), budget, slower)
    assert total == want_total
    assert [(b.lower_bound, b.cand.key, b.level) for b in got] == want  # exact, not approximate
    # and the arrays themselves, at every pp, against the scalar bound
    for key, (ok, iteration, rate, cost) in memo.cheap_by_pp.items():
        terms = memo.terms[key]
        tp, dp, mbs, ep, cp = key  # the memoized cost-model calls (bounds._calls) give the same terms
        assert terms == degree_terms(problem, tp, dp, mbs, terms.uses, ep, cp)
        for pp in range(1, len(ok) + 1):
            one = candidate_bound(problem, terms, pp, None, refined=False)
            assert one.feasible == bool(ok[pp - 1])
            if one.feasible:
                assert (one.iteration_s, one.rate_usd_per_hour, one.cost_per_iteration_usd) == (
                    iteration[pp - 1], rate[pp - 1], cost[pp - 1])


def test_cheap_bounds_on_the_catalog_in_the_megatron_target_space():
    from optsearch.cli.options import space_from_target
    from optsearch.edits import edited_problem

    problem = edited_problem("gpt2-xl", "fasop-a100-a10", [])
    options = space_from_target("megatron", problem)
    for objective in ("cost", "time"):
        got, total = _candidates(Memo(problem, options), Budget(objective=objective))
        want, want_total = _reference(Memo(problem, options), Budget(objective=objective), 0.0)
        assert total == want_total and [(b.lower_bound, b.cand.key, b.level) for b in got] == want
    d = degree_terms(problem, 1, 2, 1, tuple(node_uses(problem, 1, 2, 1)))
    pps = np.arange(1, 51)
    ok, iteration, rate, cost = cheap_bounds(problem, d, pps)
    assert ok.any() and not ok.all()  # some pp infeasible (too few slots), some feasible
