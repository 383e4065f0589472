"""Round 16 (smalltime): an interleaved candidate's own quick plans (solver.INTERLEAVED_QUICK) and the split by
parameters among the least-slowest-stage splits (heuristic.split_layers(..., by_params=True), PARAM_SPLIT).
Incumbents only: each plan must be a plan of its own candidate and of the space, priced by the cost model, and the
answers must stay brute force's on both backends."""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, assume, given, settings
from draws import draws

from optsearch.baselines.exhaustive import count_plans
from optsearch.candidates import SpaceOptions, in_search_space, node_uses
from optsearch.costmodel import estimate
from optsearch.formulation import heuristic
from optsearch.formulation.heuristic import _sends, split_layers
from optsearch.formulation.model import Candidate, pattern_compute_s
from optsearch.solver import DEFAULT, Memo, _best_meeting, _candidates
from optsearch.spec.budget import Budget

from test_interleaved import interleaved_instances
from test_solver import MAX_PLANS, _fasop_like, assert_backends_equal_brute_force


@settings(max_examples=draws(4), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(interleaved_instances())
def test_an_interleaved_candidates_quick_plans_are_its_own_plans_and_the_optimum_stays(case):
    """Every quick plan of every v > 1 candidate has the candidate's tp, dp, b, pp, cp and v, layer counts that are
    multiples of v, is in the space, fits, and carries the cost model's own estimate; the solve (which offers them as
    incumbents at its in-flight step) equals brute force on both backends. A guard: on f6816aa Memo.quick_plans gave
    a v > 1 candidate none, so there was nothing to check (that they exist is the next test's)."""
    problem, options, objective, _ = case
    assume(count_plans(problem, Budget(), options, limit=MAX_PLANS) <= MAX_PLANS)
    budget = Budget(objective=objective)
    memo = Memo(problem, options)
    bounded, _ = _candidates(memo, budget, 0.0, DEFAULT)
    for item in bounded:
        cand = item.cand
        if cand.v == 1:
            continue
        for plan, est in memo.quick_plans(memo.skeleton(cand)):
            assert (plan.tp, plan.dp, plan.micro_batch_size, plan.pp, plan.cp, plan.virtual_stages) == (
                cand.tp, cand.dp, cand.micro_batch_size, cand.pp, cand.cp, cand.v)
            assert all(stage.num_layers % cand.v == 0 for stage in plan.stages)
            assert in_search_space(problem, plan, options)
            assert est.fits and est == estimate(problem, plan)
    assert_backends_equal_brute_force(problem, budget, options)


def test_interleaved_candidates_have_quick_plans(monkeypatch):
    """The pattern-mode skeleton of a v > 1 candidate holds multiples of v only, so the heuristic's plans are its
    own: on a FASOP-like instance every v in {2, 3} candidate whose skeleton has a split gets quick plans (none on
    f6816aa, where Memo.quick_plans returned [] for v > 1), and with INTERLEAVED_QUICK off it gets none."""
    from optsearch import solver

    problem = _fasop_like()
    options = SpaceOptions(virtual_stages=(1, 2, 3), micro_batch_sizes=(1,), max_stages=6)
    memo = Memo(problem, options)
    got = 0
    for tp, dp, pp, v in itertools.product((1, 2), (1, 2), (2, 3, 4, 6), (2, 3)):
        cand = Candidate(tp=tp, dp=dp, micro_batch_size=1, pp=pp, uses=tuple(node_uses(problem, tp, dp, 1)), v=v)
        sk = memo.skeleton(cand)
        if sk.most is None or not heuristic.quick_plans(sk):
            continue
        plans = memo.quick_plans(sk)
        got += len(plans)
        for plan, _ in plans:
            assert plan.virtual_stages == v and all(s.num_layers % v == 0 for s in plan.stages)
    assert got > 10
    off = Memo(problem, options)
    cand = Candidate(tp=1, dp=1, micro_batch_size=1, pp=4, uses=tuple(node_uses(problem, 1, 1, 1)), v=2)
    assert memo.quick_plans(memo.skeleton(cand))
    monkeypatch.setattr(solver, "INTERLEAVED_QUICK", False)
    assert off.quick_plans(off.skeleton(cand)) == []


def _split_values(sk, seq, parts):
    """(slowest stage time as split_layers counts it, largest stage all-reduce + optimizer step per parameter rate)."""
    c, pp, e = sk.c, sk.cand.pp, _sends(sk, seq)
    times, params = [], []
    for s, (g, n) in enumerate(zip(seq, parts)):
        sends = (e[s - 1] if s > 0 else 0.0) + (e[s] if s < pp - 1 else 0.0)
        times.append(pattern_compute_s(sk, s, g, n) + sends)
        rate = c.allreduce_s_per_param[g] + c.optimizer_s_per_param[g]
        params.append(rate * (n * c.layer_params[0] + c.fixed_params[s]))
    return max(times), max(params)


def test_the_split_by_parameters_is_the_least_largest_reduce_among_the_least_slowest_stage_splits():
    """Brute force over every split of the layers (each stage's count from its patterns): split_layers gives the
    least slowest stage, and by_params the least largest (all-reduce + optimizer) among the splits with that slowest
    stage; on some sequences the two splits differ (the case it exists for). split_layers had no by_params on
    f6816aa."""
    problem = _fasop_like()
    options = SpaceOptions(micro_batch_sizes=(1,), max_stages=4)
    memo = Memo(problem, options)
    checked = differ = 0
    for tp, dp, pp in itertools.product((1, 2), (1, 2), (2, 3, 4)):
        cand = Candidate(tp=tp, dp=dp, micro_batch_size=1, pp=pp, uses=tuple(node_uses(problem, tp, dp, 1)))
        sk = memo.skeleton(cand)
        if sk.most is None:
            continue
        L = sk.c.kind_layers[0]
        for seq in heuristic._type_sequences(sk):
            plain, by_params = split_layers(sk, seq), split_layers(sk, seq, by_params=True)
            counts = [[n for n in range(L + 1) if (s, g, n) in sk.patterns] for s, g in enumerate(seq)]
            splits = [p for p in itertools.product(*counts) if sum(p) == L]
            if not splits:
                assert plain is None and by_params is None
                continue
            values = [_split_values(sk, seq, p) for p in splits]
            slowest = min(t for t, _ in values)
            assert _split_values(sk, seq, plain)[0] == slowest
            t, a = _split_values(sk, seq, by_params)
            assert t == slowest and sum(by_params) == L
            assert a == min(a2 for t2, a2 in values if t2 <= slowest)
            checked += 1
            differ += plain != by_params
    assert checked > 20 and differ > 0


def test_gpt3_1_3b_time_optimum_is_a_quick_plan_of_its_interleaved_candidate():
    """GPT-3 1.3B, mixed-pool-8k, megatron target, time: the optimum (8,720.98 s: tp 2, dp 32, cp 4, 8 p5 stages of
    0-4-4-4-4-4-4-0 at v = 4) came only from that candidate's model probe at 6.3 s of CPU; it is one of its quick
    plans (none on f6816aa). GPT-2 large, same pool: the optimum 5,424.86 s (tp 1, dp 32, cp 8, 0-6-6-6-6-6-6-0 at
    v = 3) is one of its candidate's quick plans through the split by parameters (5,766.75 s without)."""
    from optsearch.cli.options import space_from_target
    from optsearch.edits import edited_problem
    from optsearch.targets import engine_problem

    for model, (tp, dp, b, pp, cp, v), optimum in (("gpt3-1.3b", (2, 32, 2, 8, 4, 4), 8720.981953907969),
                                                   ("gpt2-large", (1, 32, 2, 8, 8, 3), 5424.859145285006)):
        problem = engine_problem("megatron", edited_problem(model, "mixed-pool-8k", []))
        options = space_from_target("megatron", problem)
        memo = Memo(problem, options)
        cand = Candidate(tp=tp, dp=dp, micro_batch_size=b, pp=pp, uses=tuple(node_uses(problem, tp, dp, b, cp,
                                                                                       options)), cp=cp, v=v)
        best = _best_meeting(Budget(objective="time"), memo.quick_plans(memo.skeleton(cand)))
        assert best is not None and best[0] <= optimum * (1 + 1e-9)
        assert best[1].virtual_stages == v and best[1].stages[0].num_layers == 0
