"""bounds.LIVE_GROUPS (round 17, compbatch): `_pipelines_at_once` leaves out the groups (a type's end or middle
stages) that have no stage in any row. Every value it feeds is the same float with the switch on and off: the
per-composition refined bounds (`composition_bounds`) and the aggregate refined tables (`refined_tables`, whose
pipeline of the fastest slots goes through it) of every degree and pp of random roomy and memory-tight instances,
T5-like, mixture-of-experts and interleaved memory-tight ones, with and without --overlap-grad-reduce, and of a
catalog model on a four-type pool; a small solve takes the same search. The switch does not exist on 3e0ad5b (the
tests fail there at monkeypatch.setattr)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from draws import draws

from optsearch import bounds
from optsearch.bounds import composition_bounds, degree_terms, refined_tables

from test_audit_round15 import _gpt_tight, _moe, _t5_tight
from test_composition_arrays import _every_terms, _options, _small
from test_solver import instances
from test_solver_memory import tight_instances

PPS = range(1, 13)


def _hexes(got):
    return None if got is None else tuple(tuple(x.hex() for x in row) for row in got)


def _tables_bytes(tab):
    return (tab.ok.tobytes(), tab.iteration_s.tobytes(), tab.rate_usd_per_hour.tobytes(), tab.cost_rate_s.tobytes(),
            repr([[x.hex() for x in row] for row in tab.joint_iteration_s]),
            repr([[x.hex() for x in row] for row in tab.joint_rate]), tab.joint_floor_rate.tobytes())


def _both(monkeypatch, problem, d, pps=PPS, most=12):
    """(composition bounds of every pp, refined tables) with the switch off, then on."""
    out = []
    for live in (False, True):
        monkeypatch.setattr(bounds, "LIVE_GROUPS", live)
        out.append(({pp: _hexes(composition_bounds(problem, d, pp)) for pp in pps},
                    _tables_bytes(refined_tables(problem, d, most, every_pp=True))))
    return out


def _check(monkeypatch, problem, options) -> int:
    compared = 0
    for d in _every_terms(problem, options):
        off, on = _both(monkeypatch, problem, d)
        assert on == off
        compared += sum(len(b or ()) for b in off[0].values())
    return compared


@settings(max_examples=draws(8), derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                 HealthCheck.function_scoped_fixture])
@given(st.one_of(instances(), tight_instances()), st.booleans())
def test_live_groups_give_the_same_bounds_on_random_instances(monkeypatch, case, overlap):
    problem, options = case[0], case[1]
    _check(monkeypatch, replace(problem, overlap_grad_reduce=overlap), options)


def test_live_groups_give_the_same_bounds_on_t5_moe_and_interleaved_tight_instances(monkeypatch):
    compared = 0
    for make in (_t5_tight, _moe, _gpt_tight):
        problem, options = make()
        for overlap in (False, True):
            compared += _check(monkeypatch, replace(problem, overlap_grad_reduce=overlap), options)
    assert compared >= 20


def test_live_groups_give_the_same_bounds_on_a_four_type_pool(monkeypatch):
    from optsearch.candidates import node_uses
    from optsearch.cli.options import space_from_target
    from optsearch.edits import edited_problem
    from optsearch.targets import engine_problem

    problem = engine_problem("megatron", edited_problem("gpt2-xl", "mixed-pool-8k", []))
    options = space_from_target("megatron", problem)
    for tp, dp, mbs, cp in [(1, 8, 1, 1), (2, 4, 2, 2)]:
        d = degree_terms(problem, tp, dp, mbs, tuple(node_uses(problem, tp, dp, mbs, cp, options)), 1, cp)
        off, on = _both(monkeypatch, problem, d, range(1, 25), 40)
        assert on == off
        assert sum(b is not None and len(b) >= 6 for b in off[0].values()) >= 5  # the arrays' path


def test_groups_with_no_stage_are_left_out_and_the_walk_is_the_same(monkeypatch):
    """Hand-made rows where groups are empty in every row: at pp = 1 no stage is an end stage (every type's end
    group is empty), and with one type used only the other type's groups are empty too; the walk over the rest is
    the full walk's value, exactly."""
    problem = _small()
    d = next(iter(_every_terms(problem, _options())))
    L = problem.model.num_layers
    real = bounds._pipelines_at_once

    for pp, counts in ((1, [[1, 0], [0, 1]]), (3, [[3, 0], [2, 0]]), (4, [[0, 4], [1, 3], [2, 2]])):
        counts = np.array(counts, dtype=np.int64)
        send = np.full(len(counts), d.send_min_s)
        got = {}
        for live in (False, True):
            monkeypatch.setattr(bounds, "LIVE_GROUPS", live)
            got[live] = real(d, pp, counts, send, L).tobytes()
        assert got[True] == got[False]


def test_a_small_solve_takes_the_same_search_with_and_without_live_groups(monkeypatch):
    from optsearch.solver import solve
    from optsearch.spec.budget import Budget

    problem = _small()
    answers = []
    for live in (False, True):
        monkeypatch.setattr(bounds, "LIVE_GROUPS", live)
        got = solve(problem, Budget(objective="cost"), options=_options())
        answers.append((got.status, got.objective_value, got.bound, got.stats["candidates_after_bounds"],
                        got.stats["candidates_explored"], got.stats["models_solved"]))
    assert answers[0] == answers[1]
