"""Time under a cost budget, the loop's throughput (issue 14, item 3, round 20, inflightb; docs/solver.md "Round 20:
the in-flight step under B below the incumbent; the interleaved quick plans' rent (inflightb, 2026-11-25)").

- inflight.BUDGET_CUTOFF: the in-flight bound under B with the incumbent as its cutoff (_budget_cut) prices only the
  buckets below it and skips the whole levels at or above it. Where the value without the cutoff is below it the
  value is the same float; elsewhere both rule the candidate out (None, or at least the incumbent x (1 -
  INCUMBENT_REL)). Checked on every listed candidate of a fast, dear type beside a cheap one (v = 1 and 2), a random
  instance with experts and the overlap, and a memory-tight T5 instance, under budgets at plans' exact costs and
  cutoffs at plans' times; the cutoff must spare rent rows somewhere (not vacuous).
- solver.QUICK_RATE_SKIP: the loop's interleaved branch under B leaves out the quick plans whose rent x the
  candidates' bound breaks B (_quick_within, _sibling_floor). Every plan left out, priced, breaks B; the list is the
  whole list less them, in order; a floor set too high (10 x) leaves out a plan that meets B, which the check catches.
"""

from __future__ import annotations

from dataclasses import replace

import optsearch.inflight as inflight
import optsearch.solver as solver
from optsearch.search import budget_violations
from optsearch.spec.budget import Budget

from test_audit_dist_bounds import random_instance, space_plans
from test_budget_time_lift import _coupled
from test_solver_memory import tight_problem
from optsearch.candidates import SpaceOptions
from optsearch.spec import GpuSpec, LayerKindSpec


def _instances():
    problem, options = _coupled(layers=4, stages=2)
    yield problem, replace(options, virtual_stages=(1, 2))
    yield random_instance(7)  # a mixture of experts, the overlap on (the whole levels)
    gpus = [GpuSpec(name="G0", memory_gib=24.0, peak_fp16_tflop_per_s=125.0, hbm_gbyte_per_s=900.0),
            GpuSpec(name="G1", memory_gib=40.0, peak_fp16_tflop_per_s=312.0, hbm_gbyte_per_s=2000.0)]
    nodes = [dict(name=f"t{i}", gpu=f"G{i}", gpus_per_node=1, num_nodes_available=2, price_usd_per_node_hour=p,
                  intra_node_link="nvlink", intra_node_gbyte_per_s=300.0, inter_node_gbit_per_s=g)
             for i, (p, g) in enumerate([(2.0, 40.0), (9.0, 400.0)])]
    t5 = [LayerKindSpec(name="enc", num_layers=2), LayerKindSpec(name="dec", num_layers=2, cross_attention=True)]
    yield tight_problem(layers=4, hidden=1024, heads=8, seq=4096, gbs=8, node_types=nodes, gpus=gpus,
                        kinds=t5), SpaceOptions(micro_batch_sizes=(1, 2), max_stages=2)


def _budgets(priced) -> list[tuple[Budget, list[float]]]:
    """Cost budgets at the exact costs of the cheapest and the median plan, each with cutoffs at the time of the
    fastest plan that meets it (the optimum: the loop's last incumbent) and 0.9 x that (an incumbent below every
    plan: every candidate is ruled out at its cutoff)."""
    ests = sorted((e for _, _, e in priced), key=lambda e: e.cost_usd)
    out = []
    for est in (ests[0], ests[len(ests) // 2]):
        budget = Budget(objective="time", max_cost_usd=est.cost_usd)
        fastest = min(e.training_time_s for e in ests if not budget_violations(None, e, budget))
        out.append((budget, [fastest, 0.9 * fastest]))
    return out


def inflight_bounds(problem, options, budget, cutoffs) -> list:
    """(candidate, cutoff, in-flight bound) for every candidate with a refined bound, each cutoff on fresh memos (the
    kept tables and rents start empty)."""
    out = []
    for cut in cutoffs:
        memo = solver.Memo(problem, options)
        for item in solver._candidates(memo, budget, 0.0, solver.ALL)[0]:
            refined = solver._bounded(problem, budget, item.terms, item.cand, True,
                                      memo.refined_bound(item.terms, item.cand, budget))
            if refined is not None:
                out.append((item.cand.key, cut, solver._inflight_bounded(memo, budget, refined, 0.0, cut)))
    return out


def _inflight_values(problem, options, budget, cutoffs, on: bool, rows: list) -> list:
    switch, least_rent = inflight.BUDGET_CUTOFF, inflight._least_rent

    def counted(tab, caps):
        rows[0] += len(caps)
        return least_rent(tab, caps)

    inflight.BUDGET_CUTOFF, inflight._least_rent = on, counted
    try:
        return inflight_bounds(problem, options, budget, cutoffs)
    finally:
        inflight.BUDGET_CUTOFF, inflight._least_rent = switch, least_rent


def _cutoff_check(instances) -> tuple[int, int, int]:
    """(asks compared, asks where the switch on breaks the claim, budgets where it spared rent rows)."""
    spared = compared = wrong = 0
    for problem, options in instances:
        priced = list(space_plans(problem, options))
        for budget, cutoffs in _budgets(priced):
            rows_on, rows_off = [0], [0]
            on = _inflight_values(problem, options, budget, cutoffs, True, rows_on)
            off = _inflight_values(problem, options, budget, cutoffs, False, rows_off)
            assert len(on) == len(off)
            for (key, cut, a), (key_on, _, b) in zip(off, on):
                assert key_on == key
                test = cut * (1 - solver.INCUMBENT_REL)
                if a is not None and a < test:
                    wrong += b != a  # the same float below the cutoff
                else:
                    wrong += not (b is None or b >= test)  # ruled out both ways
                compared += 1
            assert rows_on[0] <= rows_off[0]
            spared += rows_on[0] < rows_off[0]
    return compared, wrong, spared


def test_the_cutoff_takes_the_same_decisions_and_keeps_the_values_below_it():
    compared, wrong, spared = _cutoff_check(_instances())
    assert wrong == 0
    assert compared > 50 and spared > 0  # the cutoff spared rent rows somewhere: the check is not vacuous


def test_a_cut_below_the_incumbent_is_caught(monkeypatch):
    cut = inflight._budget_cut
    monkeypatch.setattr(inflight, "_budget_cut", lambda cutoff_s, iterations: 0.5 * cut(cutoff_s, iterations))
    _, wrong, _ = _cutoff_check([next(_instances())])  # invalid: values between half the cut and it come back lower
    assert wrong > 0


def _floors(memo, budget, item, scale: float):
    """(own floor, sibling floor) as the loop takes them: the candidate's in-flight bound, and _sibling_floor."""
    refined = solver._bounded(memo.problem, budget, item.terms, item.cand, True,
                              memo.refined_bound(item.terms, item.cand, budget))
    if refined is None:
        return None
    sharper = solver._inflight_bounded(memo, budget, refined)
    if sharper is None:
        return None
    return scale * sharper, scale * solver._sibling_floor(memo, budget, item, sharper)


def _left_out_meeting(problem, options, scale: float = 1.0) -> tuple[int, int]:
    """(plans _quick_within left out, of which some meet the budget) over the interleaved candidates of the coupled
    instance under budgets at the exact costs of the plans at the 10th and 30th percentiles of cost, for the candidate's own quick plans and its v = 1 sibling's (the list must be the
    whole list less those left out, in order)."""
    left = meeting = 0
    costs = sorted(est.cost_usd for _, _, est in space_plans(problem, options))
    for budget in [Budget(objective="time", max_cost_usd=costs[int(q * len(costs))]) for q in (0.1, 0.3)]:
        memo = solver.Memo(problem, options)
        for item in solver._candidates(memo, budget, 0.0, solver.ALL)[0]:
            if item.cand.v == 1 or (floors := _floors(memo, budget, item, scale)) is None:
                continue
            for sk, floor in ((memo.skeleton(item.cand), floors[0]), (memo.skeleton(replace(item.cand, v=1)), floors[1])):
                if sk.most is None:
                    continue
                got = solver._quick_within(solver.Memo(problem, options), budget, sk, floor)
                whole = solver.Memo(problem, options).quick_plans(sk)
                kept = [p for p, _ in got]
                assert kept == [p for p, _ in whole if p in kept]
                for plan, est in whole:
                    if plan not in kept:
                        left += 1
                        meeting += not budget_violations(plan, est, budget)
    return left, meeting


def test_the_quick_plans_left_out_all_break_the_budget():
    problem, options = _coupled(layers=4, stages=2, fast_usd=20.0)
    options = replace(options, virtual_stages=(1, 2))
    left, meeting = _left_out_meeting(problem, options)
    assert meeting == 0 and left > 0  # some plans were left out, none of them meets the budget
    _, wrong = _left_out_meeting(problem, options, scale=10.0)  # an invalid floor: 10 x the bound
    assert wrong > 0  # leaves out plans that meet the budget, and the check sees it


def test_the_plans_by_rate_with_nothing_left_out_are_the_heuristics_own():
    from optsearch.formulation.heuristic import quick_plans
    problem, options = _coupled(layers=4, stages=2)
    options = replace(options, virtual_stages=(1, 2))
    budget = Budget(objective="time", max_cost_usd=1e9)
    memo = solver.Memo(problem, options)
    seen = 0
    for item in solver._candidates(memo, budget, 0.0, solver.ALL)[0]:
        sk = memo.skeleton(item.cand)
        whole = quick_plans(sk)
        assert solver._quick_plans_by_rate(problem, sk, lambda rate: False) == whole
        assert solver._quick_plans_by_rate(problem, sk, lambda rate: True) == []
        seen += len(whole)
    assert seen > 0


def test_the_switches_off_give_the_old_paths():
    problem, options = _coupled(layers=4, stages=2)
    options = replace(options, virtual_stages=(1, 2))
    budget = Budget(objective="time", max_cost_usd=1e9)
    memo = solver.Memo(problem, options)
    item = next(i for i in solver._candidates(memo, budget, 0.0, solver.ALL)[0] if i.cand.v == 2)
    sk = memo.skeleton(item.cand)
    old = solver.QUICK_RATE_SKIP
    solver.QUICK_RATE_SKIP = False
    try:
        assert solver._quick_within(memo, budget, sk, 1e30) == memo.quick_plans(sk)  # no plan left out
    finally:
        solver.QUICK_RATE_SKIP = old
    old = inflight.BUDGET_CUTOFF
    inflight.BUDGET_CUTOFF = False
    try:
        assert inflight._budget_cut(123.0, 10) == float("inf")
    finally:
        inflight.BUDGET_CUTOFF = old
    assert inflight._budget_cut(123.0, 10) > 12.3  # the incumbent's iteration, raised for the roundings
    assert inflight._budget_cut(float("inf"), 10) == float("inf")
