"""bench/refined_step.py's batched composition bounds (round 17, compbatch: what batching the refined step's
composition bounds by degree could win, measured by its --replay) are `bounds.composition_bounds`, bit for bit: every
pp of a degree as rows of one array, pp per row, on random roomy and memory-tight instances, T5-like and
mixture-of-experts memory-tight ones, with and without --overlap-grad-reduce, and on a catalog model on a four-type
pool. The replay's numbers in docs/benchmarks.md rest on this equality. bench/refined_step.py does not exist on
3e0ad5b (these tests fail there on import)."""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from draws import draws

from optsearch.bounds import composition_bounds, degree_terms

from test_audit_round15 import _gpt_tight, _moe, _t5_tight
from test_composition_arrays import _every_terms
from test_solver import instances
from test_solver_memory import tight_instances

_SPEC = importlib.util.spec_from_file_location(
    "refined_step", Path(__file__).resolve().parent.parent / "bench" / "refined_step.py")
refined_step = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(refined_step)

PPS = range(1, 13)


def _hexes(bounds):
    return None if bounds is None else tuple(tuple(x.hex() for x in row) for row in bounds)


def _check_every_degree(problem, options, pps=PPS) -> int:
    """Every degree's batched bounds (all pp in one call, and every other pp in another) equal the one-pp path's;
    returns how many compositions were compared."""
    compared = 0
    for d in _every_terms(problem, options):
        want = {pp: composition_bounds(problem, d, pp) for pp in pps}
        for asked in (list(pps), list(pps)[::2]):
            got = refined_step.degree_rows_bounds(problem, d, asked)
            assert set(got) == set(asked)
            for pp in asked:
                assert _hexes(got[pp]) == _hexes(want[pp]), (d.tp, pp)
        compared += sum(len(b or ()) for b in want.values())
    return compared


@settings(max_examples=draws(8), derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.one_of(instances(), tight_instances()), st.booleans())
def test_the_batched_composition_bounds_equal_the_one_pp_path_on_random_instances(case, overlap):
    problem, options = case[0], case[1]
    _check_every_degree(replace(problem, overlap_grad_reduce=overlap), options)


def test_the_batched_composition_bounds_equal_the_one_pp_path_on_t5_and_moe_tight_instances():
    compared = 0
    for make in (_t5_tight, _moe, _gpt_tight):
        problem, options = make()
        for overlap in (False, True):
            compared += _check_every_degree(replace(problem, overlap_grad_reduce=overlap), options)
    assert compared >= 20  # the instances have compositions to compare


def test_the_batched_composition_bounds_equal_the_one_pp_path_on_a_four_type_pool():
    from optsearch.candidates import node_uses
    from optsearch.cli.options import space_from_target
    from optsearch.edits import edited_problem
    from optsearch.targets import engine_problem

    problem = engine_problem("megatron", edited_problem("gpt2-xl", "mixed-pool-8k", []))
    options = space_from_target("megatron", problem)
    many = 0
    for tp, dp, mbs, cp in [(1, 8, 1, 1), (2, 4, 2, 2)]:
        d = degree_terms(problem, tp, dp, mbs, tuple(node_uses(problem, tp, dp, mbs, cp, options)), 1, cp)
        pps = range(1, 25)
        want = {pp: composition_bounds(problem, d, pp) for pp in pps}
        got = refined_step.degree_rows_bounds(problem, d, list(pps))
        assert {pp: _hexes(b) for pp, b in got.items()} == {pp: _hexes(b) for pp, b in want.items()}
        many += sum(len(b) >= 6 for b in want.values() if b)
    assert many >= 10  # the arrays' path, with many compositions per pp


def test_a_hair_of_difference_in_the_batched_rows_fails_the_comparison(monkeypatch):
    """The comparison is exact: the batched walk 1e-15 higher (the one-pp path untouched) is caught."""
    from optsearch import bounds

    problem, options = _gpt_tight()
    real = bounds._pipelines_at_once

    class Higher:  # the bench module's view of bounds, with its walk raised
        def __getattr__(self, name):
            if name == "_pipelines_at_once":
                return lambda *a: real(*a) * (1 + 1e-15)
            return getattr(bounds, name)

    import optsearch
    monkeypatch.setattr(optsearch, "bounds", Higher())
    try:
        _check_every_degree(problem, options)
    except AssertionError:
        return
    raise AssertionError("a walk 1e-15 higher went unnoticed")
