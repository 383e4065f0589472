"""The cost model's work per plan, the same values (issue 14, item 3, round 21, loop39; docs/solver.md "Round 21:
time under a cost budget, the proof loop's work per bound (loop39, 2026-11-25)").

- costmodel.ESTIMATE_MEMO: estimate computes each per-stage term once per distinct arguments within one call
  (_Once). Every Estimate must equal, field for field (floats bit for bit), the one computed without it, on plans of
  random instances (experts, block and uniform recomputation, cp, interleaving, the overlap) with each stage's
  recomputation drawn on its own; the memo must be read (fewer term calls: not vacuous), and a memo whose key leaves
  out an argument (the recomputation) gives estimates that differ, which the same check sees.
- profile.analytic.GET_CACHE: AnalyticProfile.get keeps its entries. Each equals the uncached computation, and after
  the inputs it is keyed on change (dataclasses.replace of a flag, a GpuSpec replaced in the profile's gpus) the
  answers are the new inputs' ones; a cache without the GpuSpec check returns the stale entry, which the check sees.
"""

from __future__ import annotations

import random
from dataclasses import replace
from itertools import islice

import pytest

import optsearch.costmodel as costmodel
import optsearch.profile.analytic as analytic
from draws import draws
from optsearch.errors import OptsearchError
from optsearch.profile.analytic import AnalyticProfile
from optsearch.spec.model import EMBEDDING_KIND, HEAD_KIND

from test_audit_dist_bounds import random_instance, space_plans

MODES = ("none", "selective", "full")


def _plans(seed: int, most: int = 60) -> tuple:
    """The problem and up to `most` plans of random_instance(seed)'s space (deeper pipelines where one type), each
    also with its stages' recomputation drawn one by one."""
    problem, options = random_instance(seed)
    if len(problem.cluster.node_types) == 1:
        options = replace(options, max_stages=4)
    rng = random.Random(seed)
    plans = []
    for _, plan, _ in islice(space_plans(problem, options), most):
        plans.append(plan)
        if plan.recompute_num_layers is None:
            plans.append(replace(plan, stages=tuple(replace(s, recompute=rng.choice(MODES)) for s in plan.stages)))
    return problem, plans


def _estimates(problem, plans, memo: bool, cache: bool = True) -> list:
    was = costmodel.ESTIMATE_MEMO, analytic.GET_CACHE
    costmodel.ESTIMATE_MEMO, analytic.GET_CACHE = memo, cache
    try:
        out = []
        for plan in plans:
            try:
                out.append(costmodel.estimate(problem, plan))
            except OptsearchError as e:  # a plan the cost model refuses: refused both ways
                out.append(type(e).__name__)
        return out
    finally:
        costmodel.ESTIMATE_MEMO, analytic.GET_CACHE = was


def _counting(monkeypatch, name: str) -> list:
    count, orig = [0], getattr(costmodel, name)

    def counted(*a, **k):
        count[0] += 1
        return orig(*a, **k)
    monkeypatch.setattr(costmodel, name, counted)
    return count


@pytest.mark.parametrize("seed", range(draws(6)))
def test_estimate_memo_gives_the_same_estimates(seed, monkeypatch):
    problem, plans = _plans(seed)
    if not plans:
        pytest.skip("no plan in this instance's space")
    steps = _counting(monkeypatch, "cp_layer_step_s")
    before = _estimates(problem, plans, memo=False)
    calls_off = steps[0]
    after = _estimates(problem, plans, memo=True)
    calls_on = steps[0] - calls_off
    assert after == before  # dataclass equality: every field, floats exact
    assert calls_on <= calls_off


def test_estimate_memo_is_read_and_a_short_key_is_caught(monkeypatch):
    """Over several instances the memo spares term calls; a memo keyed on the node type alone (no layer kind,
    recomputation, ...) gives other estimates, which test_estimate_memo_gives_the_same_estimates's check sees."""
    spared = differ = 0
    for seed in range(4):
        problem, plans = _plans(seed, most=40)
        steps = _counting(monkeypatch, "cp_layer_step_s")
        base = _estimates(problem, plans, memo=False)
        off = steps[0]
        _estimates(problem, plans, memo=True)
        spared += off - (steps[0] - off)
        monkeypatch.undo()
        short = costmodel._Once.__call__

        def mutant(self, fn, *args):
            key = (fn, args[0])
            if key not in self.memo:
                self.memo[key] = fn(self.problem, *args)
            return self.memo[key]
        monkeypatch.setattr(costmodel._Once, "__call__", mutant)
        differ += sum(a != b for a, b in zip(_estimates(problem, plans, memo=True), base))
        monkeypatch.setattr(costmodel._Once, "__call__", short)
    assert spared > 0
    assert differ > 0


def test_profile_cache_returns_the_uncached_entries_and_follows_its_inputs(monkeypatch):
    problem, _ = random_instance(3)
    profile = problem.profile
    assert isinstance(profile, AnalyticProfile)
    kinds = [EMBEDDING_KIND, HEAD_KIND, *(k.name for k in problem.model.kinds)]
    keys = [(g, kind, tp, b) for g in problem.gpus for kind in kinds for tp in (1, 2, 4) for b in (1, 2)]
    for key in keys:
        assert profile.get(*key) == profile._get(*key)
        assert profile.get(*key) == profile._get(*key)  # read back from the cache
    assert len(profile._got) == len(keys)
    # a flag changed by dataclasses.replace: a fresh cache, the new flag's entries
    other = replace(profile, flash_attention=False, unfused_kernels=not profile.unfused_kernels)
    assert not other._got
    assert all(other.get(*key) == other._get(*key) for key in keys)
    assert any(other.get(*key) != profile.get(*key) for key in keys)
    # a GpuSpec replaced in the profile's gpus (in place): its entries are computed again
    gpu = next(iter(problem.gpus))
    old = {key: profile.get(*key) for key in keys if key[0] == gpu}
    spec = profile.gpus[gpu]
    profile.gpus[gpu] = spec.model_copy(update={"peak_fp16_tflop_per_s": 2 * spec.peak_fp16_tflop_per_s})
    try:
        new = {key: profile.get(*key) for key in old}
        assert all(new[key] == profile._get(*key) for key in old)
        assert any(new[key] != old[key] for key in old)
        # the mutant: a cache that does not check the GpuSpec returns the stale entries
        monkeypatch.setattr(analytic.AnalyticProfile, "get", lambda self, *k: self._got.get(k, (None, None))[1]
                            or self._get(*k))
        profile.gpus[gpu] = spec  # back to the first spec: the cache holds the doubled one's entries
        assert any(profile.get(*key) != profile._get(*key) for key in old)
    finally:
        profile.gpus[gpu] = spec
    # switched off: the uncached computation
    monkeypatch.undo()
    monkeypatch.setattr(analytic, "GET_CACHE", False)
    fresh = replace(profile)
    assert all(fresh.get(*key) == fresh._get(*key) for key in keys) and not fresh._got
