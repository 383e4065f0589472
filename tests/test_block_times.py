"""The positional bound's block-recomputation stage times, computed for every (stage, type, layer count) at once
(positional._block_times), equal the scalar functions they replace (model.block_least_recomputed and
model.pattern_compute_at_none) bit for bit, on memory-tight instances (where blocks matter) with cp and on catalog
candidates of the CLI's megatron target."""

from __future__ import annotations


import numpy as np
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from draws import draws

from optsearch.candidates import (
    SpaceOptions, context_parallel_candidates, dp_candidates, micro_batch_candidates, node_uses, tp_candidates,
)
from optsearch.formulation.model import (
    Candidate, block_least_recomputed, pattern_compute_at_none, skeleton,
)
from optsearch.formulation.positional import _block_times

from test_solver_memory import tight_instances


def _scalar(f, top: np.ndarray, counts: int) -> np.ndarray:
    """The loop positional._stage_times ran before: one Python call per (s, g, n)."""
    bc, pp, G = f.block, f.cand.pp, len(f.cand.uses)
    out = np.full((pp, G, counts), np.nan)
    for s in range(pp):
        for g in range(G):
            for n in range(1, int(top[s, g]) + 1):
                least = block_least_recomputed(f, bc, s, g, n)
                if least is not None:
                    out[s, g, n] = pattern_compute_at_none(f, bc, s, g, n) + least * (
                        bc.step_full_s[g][0] - bc.step_none_s[g][0])
    return out


def _compare(problem, options, limit: int = 400) -> int:
    compared = 0
    for tp in tp_candidates(problem):
        for mbs in micro_batch_candidates(problem, options):
            for cp in context_parallel_candidates(problem, options):
                for dp in dp_candidates(problem, tp, mbs, None, cp):
                    uses = tuple(node_uses(problem, tp, dp, mbs, cp))
                    for pp in range(1, (options.max_stages or 3) + 1) if uses else ():
                        f = skeleton(problem, Candidate(tp=tp, dp=dp, micro_batch_size=mbs, pp=pp, uses=uses, cp=cp),
                                     options)
                        if f.block is None or f.most is None:
                            continue
                        top = f.most.max(axis=2)
                        counts = max(int(top.max()), 0) + 1
                        want, got = _scalar(f, top, counts), _block_times(f, top, counts)
                        assert np.array_equal(np.isnan(want), np.isnan(got)), (tp, dp, mbs, cp, pp)
                        assert np.array_equal(want[~np.isnan(want)], got[~np.isnan(got)]), (tp, dp, mbs, cp, pp)
                        compared += int((~np.isnan(want)).sum())
                        if compared > limit:
                            return compared
    return compared


@settings(max_examples=draws(25), derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(tight_instances(), st.sampled_from([(1,), (1, 2)]))
def test_vectorized_block_times_equal_the_scalar_ones(case, cps):
    problem, options, *_ = case
    if problem.model.layer_kinds is not None:  # blocks are pattern mode: one layer kind
        return
    options = SpaceOptions(micro_batch_sizes=options.micro_batch_sizes, max_stages=options.max_stages,
                           uniform_recompute=True, block_recompute=True, context_parallel_sizes=cps)
    event(f"block values compared: {'> 0' if _compare(problem, options) else '0'}")


def test_block_times_on_catalog_candidates_in_the_megatron_target_space():
    from optsearch.cli.options import space_from_target
    from optsearch.edits import edited_problem

    problem = edited_problem("llama2-7b", "fasop-a100-a10", ["model.seq_length=8192"])
    options = space_from_target("megatron", problem)
    options = SpaceOptions(**{**{k: getattr(options, k) for k in options.__slots__}, "max_stages": 4,
                              "micro_batch_sizes": (1, 2)})
    assert _compare(problem, options, limit=2000) > 0
