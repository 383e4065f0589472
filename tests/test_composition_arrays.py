"""The refined bound's per-composition terms computed as arrays (bounds._composition_bounds_at_once, issue 14, item 3,
bigproof) equal the scalar ones (bounds._composition_bound, one call per composition) bit for bit: on every
(tp, dp, b) of random instances, with and without --overlap-grad-reduce, at every pp up to 12 (every composition the
solver lists, and the arrays forced where it would use the loop), and on candidates of a catalog model on a
four-type pool, where the solver uses them."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from draws import draws

from optsearch import bounds
from optsearch.bounds import (
    _composition_bound, _composition_bounds_at_once, _list_compositions, composition_bounds, degree_terms,
    slowest_floor,
)
from optsearch.candidates import dp_candidates, micro_batch_candidates, node_uses, tp_candidates

from test_solver import instances


def _scalar(problem, d, pp):
    """composition_bounds as it was: one _composition_bound per composition."""
    comps = _list_compositions(d, pp)
    low = float(slowest_floor(d, problem.model.num_layers, np.array([pp]))[0])
    all_params = d.all_params(pp)
    return tuple(got for counts in comps if (got := _composition_bound(problem, d, pp, counts, all_params, low)))


def _arrays(problem, d, pp):
    comps = _list_compositions(d, pp)
    low = float(slowest_floor(d, problem.model.num_layers, np.array([pp]))[0])
    return _composition_bounds_at_once(problem, d, pp, comps, d.all_params(pp), low)


def _every_terms(problem, options):
    for tp in tp_candidates(problem):
        for mbs in micro_batch_candidates(problem, options):
            for dp in dp_candidates(problem, tp, mbs, None):
                uses = tuple(node_uses(problem, tp, dp, mbs))
                if uses:
                    yield degree_terms(problem, tp, dp, mbs, uses)


@settings(max_examples=draws(30), derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(instances(), st.booleans())
def test_the_composition_arrays_equal_the_scalar_bounds_bit_for_bit(case, overlap):
    problem, options, *_ = case
    problem = replace(problem, overlap_grad_reduce=overlap)
    for d in _every_terms(problem, options):
        for pp in range(1, 13):
            want = _scalar(problem, d, pp)
            assert _arrays(problem, d, pp) == want  # exact, not approximate
            COMPARED.append(len(want))


COMPARED: list[int] = []


def test_the_random_instances_compared_many_compositions():
    """The property test above compared something (its instances may have no candidate at all)."""
    if not COMPARED:  # run alone or in another worker: run it here
        test_the_composition_arrays_equal_the_scalar_bounds_bit_for_bit()
    assert sum(COMPARED) >= 500 and sum(n >= bounds.VECTOR_FROM for n in COMPARED) >= 50


def test_the_composition_arrays_equal_the_scalar_bounds_on_a_four_type_pool(monkeypatch):
    from optsearch.cli.options import space_from_target
    from optsearch.edits import edited_problem
    from optsearch.targets import engine_problem

    problem = engine_problem("megatron", edited_problem("gpt2-xl", "mixed-pool-8k", []))
    options = space_from_target("megatron", problem)
    many = 0
    for tp, dp, mbs, cp in [(1, 8, 1, 1), (2, 4, 2, 2), (4, 16, 1, 1), (1, 2, 4, 4), (8, 1, 1, 1)]:
        uses = tuple(node_uses(problem, tp, dp, mbs, cp, options))
        d = degree_terms(problem, tp, dp, mbs, uses, 1, cp)
        for pp in (2, 3, 5, 8, 10):
            want = _scalar(problem, d, pp)
            assert _arrays(problem, d, pp) == want
            assert composition_bounds(problem, d, pp) == want  # what the solver calls
            many += len(want) >= bounds.VECTOR_FROM
    assert many >= 10  # the arrays were used, not only the loop


def test_a_hair_of_difference_in_the_arrays_fails_the_comparison(monkeypatch):
    """The comparison is exact: the pipeline term 1e-15 higher in the arrays is caught."""
    problem = _small()
    d = next(iter(_every_terms(problem, _options())))
    want = _scalar(problem, d, 3)
    assert want
    real = bounds._pipelines_at_once
    monkeypatch.setattr(bounds, "_pipelines_at_once", lambda *a: real(*a) * (1 + 1e-15))
    assert _arrays(problem, d, 3) != want


def _small():
    from test_solver import make_problem
    from optsearch.spec import GpuSpec

    gpus = [GpuSpec(name=f"G{i}", memory_gib=40.0, peak_fp16_tflop_per_s=p, hbm_gbyte_per_s=900.0)
            for i, p in enumerate([125.0, 312.0])]
    node_types = [dict(name=f"t{i}", gpu=f"G{i}", gpus_per_node=1, num_nodes_available=4,
                       price_usd_per_node_hour=price, intra_node_link="nvlink", intra_node_gbyte_per_s=150.0,
                       inter_node_gbit_per_s=100.0) for i, price in enumerate([1.0, 3.0])]
    return make_problem(layers=12, hidden=512, heads=4, gbs=8, node_types=node_types, gpus=gpus,
                        distributed_optimizer=False, seq=512)


def _options():
    from optsearch.candidates import SpaceOptions

    return SpaceOptions(micro_batch_sizes=(1,), max_stages=4)


def test_the_kept_rates_equal_the_computed_ones():
    """bounds._least_rate_per_gpu keeps its values by (prices, slots, pp, L, caps): the same as computing them."""
    from optsearch.bounds import _least_rate_per_gpu, _least_rate_per_gpu_of

    problem = _small()
    rng = np.random.default_rng(5)
    for d in _every_terms(problem, _options()):
        for _ in range(20):
            hold = tuple(int(x) for x in rng.integers(0, 6, len(d.slots)))
            pp, L = int(rng.integers(1, 5)), int(rng.integers(1, 13))
            if sum(d.slots) < pp:
                continue
            want = _least_rate_per_gpu_of(d, pp, L, hold)
            assert _least_rate_per_gpu(d, pp, L, hold) == want
            assert _least_rate_per_gpu(d, pp, L, hold) == want  # kept
