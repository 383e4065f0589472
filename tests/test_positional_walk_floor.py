"""The positional bound's walk over marks under --overlap-grad-reduce (formulation/positional.py positional_bound,
lead_s; issue 14, round 11, timepos; docs/solver.md "Round 11: the walk's floor with stage 0's reduce").

Round 10's stage-0 floor (first_stage_reduce_s) raised the bound at the largest mark, where the walk starts, above the
floors the walk stops on (S at the largest mark without the floor): the walk refined nearly every mark, one sum
programme per mark (GPT-2 XL time on mixed-pool-8k: 212 programmes, 10.4 s of a 16.5 s profile). The walk's floor now
takes S + comm with stage 0's excess at the largest mark: for each layout, comm + max(0, h_0 - max(0, comm - C_O -
E)) grows with comm and C_O, both are at least their largest mark's values at every mark, and a smaller mark allows
fewer layouts. Checked here on overlap instances (the first-reduce test's cases and memory-tight ones): at every mark
the value with stage 0's excess is at least the floor, the bound equals the least value over every mark (the walk
that refines them all), and the new floor ends some walks before every mark is refined (counted: not vacuous)."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from draws import draws

import optsearch.formulation.positional as positional
from optsearch.solver import Memo
from optsearch.spec.budget import Budget

from test_audit_dist_bounds import MAX_PLANS, space_plans
from test_positional_first_reduce import _cases
from test_solver_memory import overlapped_tight_case, tight_instances


def _every_mark(sk) -> tuple[np.ndarray, float]:
    """(the iteration floor of refine at every possible mark with a layout, in mark order (inf elsewhere), the walk's
    floor lead_s): what a walk that refines every mark computes, minimizing time with no budget."""
    tab = positional.tables(sk)
    c, emb = sk.c, positional.embedding_floor_s(sk)
    top = int(np.nonzero(tab.possible)[0][-1])
    comm_s = max(positional.comm_lower_s(sk) + emb, float(tab.comm_at(np.array([top]))[0]) + emb)
    values = np.full(len(tab.marks), math.inf)
    lead = math.inf
    for i in np.nonzero(tab.possible)[0]:
        ix = np.array([i])
        if not np.isfinite(tab.rent_at(ix)[0]):
            continue
        comm = np.array([comm_s]) if i == top else np.maximum(comm_s, tab.comm_at(ix) + emb)
        c_o = max(tab.comm_o[i], tab.comm_o[top])
        shift = np.maximum(comm - c_o - emb, 0.0)
        both = tab.total_first_at(ix, shift) + comm
        values[i] = (c.m - 1) * tab.marks[i] + both[0]
        if i == top:
            lead = float(both[0])
    return values, lead


def _check(problem, options) -> tuple[int, int]:
    """Asserts the floor and the bound on every v = 1 pattern-mode candidate with the overlap on; (how many walks
    stopped before refining every mark, how many floors carry stage 0's excess above S + comm_s)."""
    memo, full = Memo(problem, options), Memo(problem, options)
    stopped = raised = 0
    seen = set()
    for cand, _, _ in space_plans(problem, options):
        if cand.v != 1 or cand.key in seen:
            continue
        seen.add(cand.key)
        sk = memo.skeleton(cand)
        if sk.most is None or positional.tables(sk).first is None or not len(positional.tables(sk).blocks):
            continue
        got = positional.positional_bound(sk, Budget(objective="time")).bound
        refined = len(positional.tables(sk).total_first)
        values, lead = _every_mark(full.skeleton(cand))
        c = sk.c
        for i in np.nonzero(np.isfinite(values))[0]:
            assert values[i] >= (c.m - 1) * positional.tables(sk).marks[i] + lead * (1 - 1e-12), (cand, i)
        least = float(values.min())
        want = c.iterations * least * (1 - 1e-9) if math.isfinite(least) else math.inf
        assert got == want or abs(got - want) <= 1e-12 * want, (cand, got, want)
        stopped += refined < np.isfinite(values).sum()
        tab = positional.tables(full.skeleton(cand))
        top = int(np.nonzero(tab.possible)[0][-1])
        raised += math.isfinite(lead) and lead > float(tab.total_at(np.array([top]))[0]) + float(
            np.maximum(positional.comm_lower_s(sk), tab.comm[top]) + positional.embedding_floor_s(sk)) * (1 + 1e-12)
    return stopped, raised


def test_the_walk_floor_holds_and_the_bound_is_every_marks_least():
    stopped = raised = 0
    for problem, options in _cases():
        s, r = _check(problem, options)
        stopped, raised = stopped + s, raised + r
    assert stopped > 0 and raised > 0


@settings(max_examples=draws(4), derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(tight_instances())
def test_the_walk_floor_holds_on_memory_tight_instances(case):
    made = overlapped_tight_case(case, max_plans=MAX_PLANS)
    if made is None:
        return
    problem, options = made
    _check(problem, options)


def test_the_sum_programme_block_by_block_equals_every_block_at_once(monkeypatch):
    """_least_sum's loop over layer counts takes each block alone over its run of finite marks (_min_into); the
    choices path keeps the sum over every block at once: the same values bit for bit, with and without stage 0's
    excess, at every mark of every candidate (the loop path forced: small instances would take the vectorized one)."""
    monkeypatch.setattr(positional, "SUM_VECTOR_LIMIT", 0)
    rng = np.random.default_rng(11)
    compared = 0
    for problem, options in list(_cases())[:4]:
        memo, seen = Memo(problem, options), set()
        for cand, _, _ in space_plans(problem, options):
            if cand.v != 1 or cand.key in seen:
                continue
            seen.add(cand.key)
            sk = memo.skeleton(cand)
            if sk.most is None or not len(positional.tables(sk).blocks):
                continue
            tab = positional.tables(sk)
            caps = tab.caps(np.arange(len(tab.marks)))
            extras = [None] if tab.first is None else [None, tab.first_extra(rng.uniform(0, 2, len(tab.marks))
                                                                             * float(tab.first.max()))]
            for extra in extras:
                fast = positional._least_sum(tab.groups, tab.sup, caps, tab.pp, tab.L, first_extra=extra)[0]
                whole = positional._least_sum(tab.groups, tab.sup, caps, tab.pp, tab.L, choices=True,
                                              first_extra=extra)[0]
                assert np.array_equal(fast, whole), cand
                compared += int(np.isfinite(fast).sum())
    assert compared > 0
