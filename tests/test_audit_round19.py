"""Post-merge audit of round 19 (audit11; bench/audit_round19.py runs the same checks over many seeds and kinds):
- cheapq (solver.KEEP_REFINED, Memo.kept_refined, _kept_key): the kept bounds of the solver's own listed items (the
  distributed-optimizer-off candidates and the --overlap-param-gather copies, each with its own terms, and v > 1
  siblings), asked in a shuffled order over many budgets on one memo, equal a fresh memo's first ask bit for bit; a
  key that forgot the candidate's optimizer bit (o) is caught;
- supply1t (positional.pair_cover_floor_s, PAIR_COVER): M_pair at or below the slowest stage of every v = 1 plan of
  its candidate, with the gate PAIR_COVER_ONLY_WIDER off and the wide index cut to two states too; the positional
  bound with the floor at least the bound without it and at or below every plan that meets the budget;
- budgetlow (inflight.BUDGET_FLOOR_STOP: the same bits on and off, with timepark's JOINT_SUPPLY on; BUDGET_WORK_LIFT
  turned on: valid). timepark's JOINT_SUPPLY is checked by the bench's sweep only (its raises need instances too
  large for this file's CPU; tests/test_inflight_joint_supply.py checks it against brute-force assignments).
On 523dd76 (the session's base) none of KEEP_REFINED, pair_cover_floor_s, JOINT_SUPPLY, BUDGET_FLOOR_STOP exists:
every test here fails there on the import or the switch."""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path
from unittest import mock

import pytest

from optsearch import solver as solver_module
from optsearch.formulation import positional
from optsearch.formulation.positional import PAIR_COVER, pair_cover_floor_s  # noqa: F401  (absent on the base)
from optsearch.solver import KEEP_REFINED  # noqa: F401  (absent on the base)
from optsearch.spec.budget import Budget

from test_positional_type_boundary import boundary_instance

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import audit_round19  # noqa: E402


def _gather_instance():
    """A roomy two-type boundary instance with --overlap-grad-reduce, the optimizer left open and
    --overlap-param-gather searched at pp > 1 (the solver lists dist = False candidates and gather copies)."""
    from dataclasses import replace

    problem, options = boundary_instance(0)
    job = problem.job.model_copy(update={"distributed_optimizer": None})
    return replace(problem, overlap_grad_reduce=True, overlap_param_gather=True, param_gather_pipelined=True,
                   job=job), replace(options, virtual_stages=(1, 2))


def _stats():
    return defaultdict(int)


def test_kept_bounds_of_listed_items_equal_first_asks_with_off_and_gather_copies():
    """cheapq: the solver's listed items (v = 1 and 2, dist = False, the gather copies) over the instance's edge
    budgets, asked in a shuffled order on ONE memo with KEEP_REFINED: each equals a fresh memo's first ask."""
    import random

    problem, options = _gather_instance()
    by_cand = audit_round19.audit_round14.plans_by_candidate(problem, options)
    priced = [(c, p, e) for c, plans in by_cand.values() for p, e in plans]
    stats = _stats()
    audit_round19._kept_listed(problem, options, audit_round19.round19_budgets(priced, random.Random(0))[:8],
                               random.Random(1), stats)
    assert stats["kept_listed"] >= 80 and stats["kept_listed_gather"] > 0 and stats["kept_listed_off"] > 0
    assert stats["kept_listed_interleaved"] > 0


def test_a_kept_key_without_the_optimizer_bit_is_caught():
    """The check above fails for a key that leaves out the candidate's o (dist = False and gather copies then take
    the default candidate's bound): so it can tell a key that forgot a term."""
    import random

    problem, options = _gather_instance()
    by_cand = audit_round19.audit_round14.plans_by_candidate(problem, options)
    priced = [(c, p, e) for c, plans in by_cand.values() for p, e in plans]
    real = solver_module._kept_key
    with mock.patch.object(solver_module, "_kept_key", lambda cand, budget: (cand.key[:7],) + real(cand, budget)[1:]), \
            pytest.raises(AssertionError, match="kept bound differs"):
        audit_round19._kept_listed(problem, options, audit_round19.round19_budgets(priced, random.Random(0))[:8],
                                   random.Random(1), _stats())


@pytest.mark.parametrize("seed, tight, raises", [(9, False, True), (12, True, False)])
def test_pair_cover_floor_lies_below_every_plans_slowest_stage_and_the_bound_below_the_plans(seed, tight, raises):
    """supply1t: bench/audit_round19.check_pair on one roomy and one memory-tight two/three-type instance: M_pair (the
    gate on and off, the wide index cut short) at or below the slowest stage of every v = 1 plan of its candidate;
    the positional bound with PAIR_COVER at least without it, at or below every plan that meets the budget (edge
    budgets, slower_than_s 0 and the median plan's time); some floors finite, some bounds raised (on the roomy one)."""
    problem, options = boundary_instance(seed, tight)
    stats = _stats()
    audit_round19.check_pair(problem, options, seed, stats, budgets_kept=6, gate_on=False)
    assert stats["pair_finite"] > 0 and stats["pair_below_plans"] > 0 and stats["pair_bound_below_plans"] > 0
    assert (stats["pair_raised"] > 0) == raises


def test_an_invalid_pair_floor_is_caught():
    """The check above fails where M_pair is taken one row value up (a floor above some plan's slowest stage)."""
    real = positional.pair_cover_floor_s

    def up(f, blocks, start=-float("inf")):
        got = real(f, blocks, start)
        return got * 1.5 if got > 0 else got

    problem, options = boundary_instance(9)
    with mock.patch.object(positional, "pair_cover_floor_s", up), pytest.raises(AssertionError, match="above"):
        audit_round19.check_pair(problem, options, 9, _stats(), budgets_kept=2, gate_on=False)


def test_budget_floor_stop_same_bits_and_the_work_lift_below_the_plans():
    """budgetlow: the in-flight bound under cost caps at plans' exact costs and 5 % above (time minimized; cutoff inf
    and at the candidate's best plan) with BUDGET_FLOOR_STOP on equals off bit for bit, JOINT_SUPPLY on (timepark's
    change to the same module's tables: the seam); and BUDGET_WORK_LIFT turned on (off in the solver) never lowers a
    cheap row and leaves every candidate with a plan that meets the cap at or below that plan."""
    from optsearch.inflight import BUDGET_FLOOR_STOP, JOINT_SUPPLY  # noqa: F401  (absent on the base)

    problem, options = boundary_instance(9)
    stats = _stats()
    audit_round19.check_stop(problem, options, 9, stats)
    assert stats["stop_same_compared"] > 0 and stats["lift_below_plans"] > 0


def test_a_kept_bound_follows_a_patched_bound_slack():
    """audit11's find, fixed: Memo.kept_refined's key (_kept_key) holds the module limits the refined bound reads;
    BOUND_SLACK patched between two asks on one memo gives the fresh memo's bound, not the old setting's."""
    from optsearch import bounds

    problem, options = boundary_instance(9)
    by_cand = audit_round19.audit_round14.plans_by_candidate(problem, options)
    times = sorted(e.training_time_s for _, plans in by_cand.values() for _, e in plans)
    budget = Budget(objective="cost", max_time_s=times[len(times) // 3])
    memo = solver_module.Memo(problem, options)
    stale = 0
    for cand, _ in by_cand.values():
        terms = audit_round19.audit_round14._terms(memo, cand)
        memo.refined_bound(terms, cand, budget)
        with mock.patch.object(bounds, "BOUND_SLACK", 0.5):
            again = memo.refined_bound(terms, cand, budget)
            fresh = solver_module.Memo(problem, options)
            stale += again != fresh.refined_bound(audit_round19.audit_round14._terms(fresh, cand), cand, budget)
    assert stale == 0
