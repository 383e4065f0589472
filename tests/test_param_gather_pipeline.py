"""--overlap-param-gather searched at pp > 1 (issue 15, ppgather; docs/cost-model.md section 7f, "At pp > 1").
At upstream main's dispatch a later stage gathers its one bucket when its first micro-batch arrives, so the flag
adds sum_{i>0} G_i along the pipeline fill and takes every stage's gather out of the exchange after the step:
neither setting dominates. The search tries both (a candidate copy with the flag on, Candidate.gather): the copy's
model prices it exactly (A >= every row + PG, PG >= delay_0 + sum_{i>0} G_i), its bounds lie below its plans, the
optimum equals brute force over both settings on both backends, and plan files say which Megatron-Core's dispatch
prices them (Plan.param_gather_dispatch; the H100 validation rows ran core_r0.8.0)."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from draws import draws

from optsearch.baselines.exhaustive import count_plans
from priced import solve_exhaustive
from optsearch.candidates import SpaceOptions, node_uses
from optsearch.costmodel import (
    WEIGHT_BYTES_PER_PARAM, estimate, gradient_bytes, gradient_sync_s, overlap_bucket_count,
    overlap_param_gather_settings, param_gather_chain_can_win, param_gather_chain_gain_s, param_gather_delay_main_s,
    param_gather_delay_s,
    stage_forward_s, stage_layer_kinds,
)
from optsearch.errors import SpecError
from optsearch.formulation.model import Candidate, build, candidate_plan, decode, objective_to_user
from optsearch.plan import Plan, Stage, plan_from_dict
from optsearch.solver import backend, solve
from optsearch.spec import GpuSpec
from optsearch.spec.budget import Budget

from test_megatron_parse import _check, _run_upstream, upstream  # noqa: F401  (the fixture)
from test_param_gather_search import _gather as _gather_one_stage


def _gather(problem):
    """_gather_one_stage's problem with the flag tried at pp > 1 too (`solve --pipelined-param-gather`)."""
    return replace(_gather_one_stage(problem), param_gather_pipelined=True)
from test_solver import MAX_PLANS, assert_backends_equal_brute_force, make_problem


def _two_nodes(peak_tflop: float = 65.0, nodes: int = 2, gpus_per_node: int = 8):
    """One PCIe node type, hidden 2048 (a layer holds 50.3M parameters, the embedding 16.4M + positions): at tp 1 and
    dp 8 a stage 0 of n layers has ceil(P / 40M) buckets; the gather is slow next to HBM (16 GB/s)."""
    gpus = [GpuSpec(name="G0", memory_gib=80.0, peak_fp16_tflop_per_s=peak_tflop, hbm_gbyte_per_s=900.0)]
    types = [dict(name="t0", gpu="G0", gpus_per_node=gpus_per_node, num_nodes_available=nodes,
                  price_usd_per_node_hour=3.0, intra_node_link="pcie", intra_node_gbyte_per_s=16.0,
                  inter_node_gbit_per_s=100.0)]
    return _gather(make_problem(layers=8, hidden=2048, heads=16, gbs=64, node_types=types, gpus=gpus, seq=2048))


def _plan(split, on: bool, dp: int = 8, mbs: int = 2) -> Plan:
    return Plan(tp=1, dp=dp, micro_batch_size=mbs, stages=tuple(Stage(node_type="t0", num_layers=n) for n in split),
                distributed_optimizer=True, overlap_grad_reduce=True, ddp_average_in_collective=True,
                overlap_param_gather=on)


def _by_hand(problem, plan: Plan) -> tuple[float, float]:
    """(A off, A on) from the cost model's parts: G_s the gather (2 of the g + 2 bytes of gradient_sync_s), e_s the
    rest of stage s's exposed exchange (off's dp_allreduce_s - G_s), F_0 stage 0's forward, n its buckets:
    off max_s (e_s + G_s); on max_s e_s + max(G_0 / n, G_0 - F_0 (n - 1) / n) + sum_{s>0} G_s."""
    off = estimate(problem, replace(plan, overlap_param_gather=False))
    g = gradient_bytes(problem.job)
    gathers = [gradient_sync_s(problem, "t0", s.parameters, plan.tp, plan.dp, False, 1, True)
               * WEIGHT_BYTES_PER_PARAM / (g + WEIGHT_BYTES_PER_PARAM) for s in off.stages]
    rest = [s.dp_allreduce_s - x for s, x in zip(off.stages, gathers)]
    kinds = stage_layer_kinds(problem.model, plan)
    forward = stage_forward_s(problem, "t0", kinds[0], plan.tp, plan.micro_batch_size, True, plan.pp == 1)
    n = overlap_bucket_count(off.stages[0].parameters / plan.tp, plan.dp, True)
    delay = max(gathers[0] / n, gathers[0] - forward * (n - 1) / n) + sum(gathers[1:])
    assert n >= 2 and delay == pytest.approx(param_gather_delay_main_s(gathers, [forward], n))
    return off.dp_allreduce_s, max(rest) + delay


def test_on_wins_on_an_uneven_split_off_on_an_even_one_by_hand():
    """pp 2, dp 8: 7 + 1 layers, stage 0's gather (453M of 604M parameters, 12 buckets) mostly hides behind its
    forward and stage 1's is small, so on wins; 4 + 4, the later stage's whole gather along the fill costs more than
    the gather after the step, so off wins. The estimate equals the hand formula on both."""
    problem = _two_nodes()
    for split, on_wins in (((7, 1), True), ((4, 4), False)):
        plan = _plan(split, True)
        a_off, a_on = _by_hand(problem, plan)
        e_on, e_off = estimate(problem, plan), estimate(problem, replace(plan, overlap_param_gather=False))
        assert e_off.dp_allreduce_s == pytest.approx(a_off, rel=1e-12)
        assert e_on.dp_allreduce_s == pytest.approx(a_on, rel=1e-12)
        assert e_on.pipeline_time_s == e_off.pipeline_time_s
        assert [s.memory_bytes for s in e_on.stages] == [s.memory_bytes for s in e_off.stages]
        assert (e_on.iteration_time_s < e_off.iteration_time_s) is on_wins, split


def test_the_settings_and_where_on_can_win():
    problem = _two_nodes()
    assert overlap_param_gather_settings(problem, 8, 1, 1, 1, True) == (True,)  # one stage: never loses
    assert overlap_param_gather_settings(problem, 8, 1, 1, 2, True) == (False, True)  # pp > 1: both
    assert overlap_param_gather_settings(problem, 8, 1, 1, 2, False) == (False,)  # upstream needs the optimizer
    assert overlap_param_gather_settings(problem, 8, 1, 2, 2, True) == (False,)  # interleaved: no grad overlap
    assert overlap_param_gather_settings(replace(problem, overlap_param_gather=False), 8, 1, 1, 2, True) == (False,)
    # stage 0 holds at most 4 of 8 layers: G_0 (1 - 1/n_b) <= the later stages' gathers, never on (claimed)
    assert param_gather_chain_can_win(problem, ["t0"], 1, 8, 1, 2, 8)
    assert not param_gather_chain_can_win(problem, ["t0"], 1, 8, 1, 2, 4)
    assert not param_gather_chain_can_win(problem, ["t0"], 8, 1, 1, 2, 8)  # tp 8: one bucket, delay_0 = G_0


def test_the_switch_takes_the_copies_out_of_the_space():
    """Problem.param_gather_pipelined False (the default; `solve` without --pipelined-param-gather): the search as
    before ppgather, and the space with it (brute force and in_search_space agree): the 6 + 2 instance's optimum is
    then the plan without the flag, on both backends, and the flag's plan is in the space only with the opt-in."""
    from optsearch.candidates import in_search_space

    problem = replace(_fast_then_slow(30.0, 64), param_gather_pipelined=False)
    assert overlap_param_gather_settings(problem, 8, 1, 1, 2, True) == (False,)
    options = SpaceOptions(micro_batch_sizes=(2,), recompute_modes=("none",), max_stages=2,
                           node_type_order=("t0", "t1"))
    truth = assert_backends_equal_brute_force(problem, Budget(objective="time"), options)
    assert truth.objective_value == pytest.approx(1222.2974861522052, rel=1e-9)
    assert not in_search_space(problem, replace(truth.plan, overlap_param_gather=True), options)
    assert in_search_space(replace(problem, param_gather_pipelined=True), replace(truth.plan, overlap_param_gather=True),
                           options)


def test_where_on_is_claimed_never_to_win_it_does_not():
    """Every split of 8 layers over 2 and 3 stages at dp 8 and 4: on is never faster than off by more than
    param_gather_chain_gain_s for the split's stage-0 layer count (its most_first_layers), so never where that is 0
    (param_gather_chain_can_win says no); and some split is faster, by up to the gain."""
    problem = _two_nodes(nodes=3)
    wins = 0
    for dp, pp in ((8, 2), (4, 2), (8, 3)):
        for split in itertools.product(range(9), repeat=pp):
            if sum(split) != 8 or 0 in split[1:-1]:
                continue
            on = estimate(problem, _plan(split, True, dp=dp))
            off = estimate(problem, _plan(split, False, dp=dp))
            wins += on.iteration_time_s < off.iteration_time_s
            gain = param_gather_chain_gain_s(problem, ["t0"], 1, dp, 1, pp, split[0])
            assert off.iteration_time_s - on.iteration_time_s <= gain + 1e-12 * off.iteration_time_s, (dp, split)
            if not param_gather_chain_can_win(problem, ["t0"], 1, dp, 1, pp, split[0]):
                assert gain == 0 and on.iteration_time_s >= off.iteration_time_s * (1 - 1e-12), (dp, split)
    assert wins > 0


@pytest.mark.parametrize("pp", [2, 3])
@pytest.mark.parametrize("objective", ["time", "cost"])
def test_the_gather_copy_equals_brute_force_over_its_plans(pp, objective):
    """The copy of (tp 1, dp 8, b 2, pp) with the flag on: its model, on both backends, finds the least of every
    split of 8 layers priced with the flag on, and its decoded plan (flag on) re-prices to the solver's value.
    Dropping PG from the rows (the gather's delay) would price on plans at their exposed reduce-scatter only."""
    problem = _two_nodes(nodes=3)
    options = SpaceOptions(micro_batch_sizes=(2,), recompute_modes=("none",))
    cand = Candidate(tp=1, dp=8, micro_batch_size=2, pp=pp, uses=tuple(node_uses(problem, 1, 8, 2)), gather=True)
    budget = Budget(objective=objective)
    priced = []
    for split in itertools.product(range(9), repeat=pp):
        if sum(split) != 8 or 0 in split[1:-1]:
            continue
        plan = candidate_plan(problem, cand, tuple(Stage(node_type="t0", num_layers=n) for n in split))
        est = estimate(problem, plan)
        if est.fits:
            priced.append((est.training_time_s if objective == "time" else est.cost_usd, plan))
    best, best_plan = min(priced, key=lambda x: x[0])
    assert best_plan.overlap_param_gather and best_plan.pp == pp
    for name in ("cbc", "cpsat"):
        f = build(problem, budget, cand, options)
        sol = backend(name).solve(f.lm, None)
        assert sol.status == "optimal"
        plan = decode(f, sol)
        assert plan.overlap_param_gather
        est = estimate(problem, plan)
        value = est.training_time_s if objective == "time" else est.cost_usd
        assert math.isclose(value, best, rel_tol=1e-6), (name, plan.balance, best_plan.balance)
        assert math.isclose(objective_to_user(f, sol.objective), value, rel_tol=1e-5), name
        assert sol.values["PG"] > 0


def _bounds_of_copies(problem, options, budget, bounds_terms=None) -> int:
    """Every gather copy's cheap, refined and in-flight bounds (at bounds.gather_terms, as the solver keeps them)
    and its positional bound lie below every plan of the copy (the flag on). Returns plans compared, -1 on a bound
    above a plan."""
    from optsearch.bounds import candidate_bound, gather_terms
    from optsearch.formulation.model import skeleton
    from optsearch.formulation.positional import positional_bound
    from optsearch.inflight import sharpened
    from optsearch.search import objective_value
    from optsearch.solver import Memo

    from test_distopt_search import _plans_at
    from test_solver import usable_degrees

    memo = Memo(problem, options)
    compared = 0
    for tp, mbs, dp, uses in usable_degrees(problem, options):
        for pp in range(2, (options.max_stages or 2) + 1):
            if True not in overlap_param_gather_settings(problem, dp, 1, 1, pp, True):
                continue
            terms = (bounds_terms or gather_terms)(memo.degree_terms(tp, dp, mbs, uses, 1, 1, None))
            cand = Candidate(tp=tp, dp=dp, micro_batch_size=mbs, pp=pp, uses=uses, gather=True)
            bounds = [candidate_bound(problem, terms, pp, budget, refined=r) for r in (False, True)]
            bounds.append(sharpened(problem, {}, terms, cand, budget, bounds[1], memo.calls))
            sk = skeleton(problem, cand, options)
            positional = positional_bound(sk, budget).bound if sk.patterns is not None else -math.inf
            for plan, est in _plans_at(problem, options, cand):
                assert plan.overlap_param_gather
                compared += 1
                for bound in bounds:
                    if not bound.feasible or bound.iteration_s > est.iteration_time_s * (1 + 1e-9) or \
                            bound.cost_per_iteration_usd > est.usd_per_hour * est.iteration_time_s / 3600 * (1 + 1e-9):
                        return -1
                if positional > objective_value(est, budget.objective) * (1 + 1e-9):
                    return -1
    return compared


def _copies_cheap_bounds_below_their_plans(problem, options, budget) -> None:
    """The cheap bounds solve builds for the copies (solver._gather_rows: the larger of the copy's own and its twin's
    less the gain) lie below every plan of the copy."""
    from optsearch.search import objective_value
    from optsearch.solver import ALL, Memo, _candidates

    from test_distopt_search import _plans_at

    copies = [b for b in _candidates(Memo(problem, options), budget, 0.0, ALL)[0] if b.cand.gather]
    assert copies
    for b in copies:
        for _, est in _plans_at(problem, options, b.cand):
            assert b.lower_bound <= objective_value(est, budget.objective) * (1 + 1e-9), b.cand


def test_bounds_of_the_copies_lie_below_their_plans():
    """Time and cost. The copies need their own floor: the default candidate's per-stage floor (A >= the gather's
    rate x P_s on every stage, the rows C_A of the positional bound and alpha_at(pp) of the others) lies above the
    7 + 1 plan's A with the flag on; the copy's is 0."""
    from optsearch.formulation.model import coefficients

    problem = _two_nodes(nodes=3)
    options = SpaceOptions(micro_batch_sizes=(2,), recompute_modes=("none",), max_stages=3)
    for objective in ("time", "cost"):
        assert _bounds_of_copies(problem, options, Budget(objective=objective)) > 0
        _copies_cheap_bounds_below_their_plans(problem, options, Budget(objective=objective))
    uses = tuple(node_uses(problem, 1, 8, 2))
    est = estimate(problem, _plan((7, 1), True))
    for gather, above in ((False, True), (True, False)):
        c = coefficients(problem, Candidate(tp=1, dp=8, micro_batch_size=2, pp=2, uses=uses, gather=gather), options)
        floor = max(c.allreduce_floor_s_per_param[0] * s.parameters for s in est.stages)
        assert (floor > est.dp_allreduce_s) is above


def _fast_then_slow(peak1: float, gbs: int):
    """Two types, one 8-GPU PCIe node each (16 GB/s): t0 (80 GiB, 65 or 125 TFLOP/s) takes stage 0 and t1 (8 GiB,
    peak1) the last (node_type_order), so that the time-balanced split puts more layers on stage 0."""
    peak0 = 65.0 if peak1 < 65.0 else 125.0
    gpus = [GpuSpec(name="G0", memory_gib=80.0, peak_fp16_tflop_per_s=peak0, hbm_gbyte_per_s=900.0),
            GpuSpec(name="G1", memory_gib=8.0, peak_fp16_tflop_per_s=peak1, hbm_gbyte_per_s=900.0)]
    types = [dict(name=f"t{i}", gpu=f"G{i}", gpus_per_node=8, num_nodes_available=1, price_usd_per_node_hour=price,
                  intra_node_link="pcie", intra_node_gbyte_per_s=16.0, inter_node_gbit_per_s=100.0)
             for i, price in ((0, 3.0), (1, 1.0))]
    return _gather(make_problem(layers=8, hidden=2048, heads=16, gbs=gbs, node_types=types, gpus=gpus, seq=2048))


@pytest.mark.parametrize("peak1, gbs, mbs, split, on", [(30.0, 64, 2, "6-2", True), (65.0, 256, 1, "5-3", False)])
def test_solve_picks_the_better_setting_at_pp_2(peak1, gbs, mbs, split, on):
    """Minimizing time, the optimum is a pp 2 plan on both types: 6 + 2 layers with the flag on (it beats every plan
    without it), 5 + 3 with it off (on loses there); both backends equal brute force over both settings."""
    problem = _fast_then_slow(peak1, gbs)
    options = SpaceOptions(micro_batch_sizes=(mbs,), recompute_modes=("none",), max_stages=2,
                           node_type_order=("t0", "t1"))
    truth = assert_backends_equal_brute_force(problem, Budget(objective="time"), options)
    plan = truth.plan
    assert (plan.balance, plan.overlap_param_gather, plan.dp) == (split, on, 8)
    flipped = estimate(problem, replace(plan, overlap_param_gather=not on))
    assert flipped.training_time_s > truth.objective_value
    without = solve_exhaustive(replace(problem, overlap_param_gather=False), Budget(objective="time"), options=options)
    assert (without.objective_value > truth.objective_value * (1 + 1e-9)) is on


@st.composite
def _pipelined(draw):
    """One PCIe type of 2-8 GPUs per node, hidden 2048 (stage 0 has several buckets), 4-8 layers, 2 or 3 stages."""
    layers = draw(st.integers(4, 8))
    per_node = draw(st.sampled_from([2, 4, 8]))
    gpus = [GpuSpec(name="G0", memory_gib=draw(st.sampled_from([12.0, 24.0, 80.0])),
                    peak_fp16_tflop_per_s=draw(st.sampled_from([30.0, 65.0, 125.0])), hbm_gbyte_per_s=900.0)]
    types = [dict(name="t0", gpu="G0", gpus_per_node=per_node, num_nodes_available=draw(st.integers(1, 3)),
                  price_usd_per_node_hour=3.0, intra_node_link="pcie",
                  intra_node_gbyte_per_s=draw(st.sampled_from([16.0, 64.0])), inter_node_gbit_per_s=100.0)]
    problem = _gather(make_problem(layers=layers, hidden=2048, heads=16, gbs=draw(st.sampled_from([16, 64])),
                                   node_types=types, gpus=gpus, seq=2048))
    options = SpaceOptions(micro_batch_sizes=(1, 2), recompute_modes=("none",), max_stages=draw(st.integers(2, 3)))
    return problem, options, draw(st.sampled_from(["time", "cost"]))


@settings(max_examples=draws(3), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(_pipelined())
def test_optimum_over_both_settings_equals_brute_force_and_backends_agree(case):
    """Brute force prices every plan of pp > 1 with the flag off and on (exhaustive._param_gather_variants)."""
    problem, options, objective = case
    assume(count_plans(problem, Budget(), options, limit=MAX_PLANS) <= MAX_PLANS)
    assert_backends_equal_brute_force(problem, Budget(objective=objective), options)


def test_plan_files_name_the_dispatch():
    """A plan file's param_gather_dispatch: absent, upstream main's (what launch emits for and the search prices);
    core_r0.8.0 prices pp > 1 at zero_grad's dispatch (section 7d); anything else is refused. One stage: the same."""
    problem = _two_nodes()
    plan = _plan((7, 1), True)
    assert "param_gather_dispatch" not in plan.to_dict()
    old = replace(plan, param_gather_dispatch="core_r0.8.0")
    assert plan_from_dict(old.to_dict()) == old and plan_from_dict(plan.to_dict()) == plan
    main, r080, off = (estimate(problem, p) for p in (plan, old, replace(plan, overlap_param_gather=False)))
    kinds = stage_layer_kinds(problem.model, plan)
    g = gradient_bytes(problem.job)
    gathers = [gradient_sync_s(problem, "t0", s.parameters, 1, 8, False, 1, True) * 2 / (g + 2) for s in off.stages]
    forwards = [stage_forward_s(problem, "t0", kinds[i], 1, 2, i == 0, i == 1) for i in range(2)]
    n = overlap_bucket_count(off.stages[0].parameters, 8, True)
    rest = max(s.dp_allreduce_s - x for s, x in zip(off.stages, gathers))
    assert main.dp_allreduce_s == pytest.approx(rest + param_gather_delay_main_s(gathers, forwards, n), rel=1e-12)
    assert r080.dp_allreduce_s == pytest.approx(rest + param_gather_delay_s(gathers, forwards, n), rel=1e-12)
    assert r080.iteration_time_s < main.iteration_time_s
    one = _plan((8,), True)
    assert estimate(problem, one).iteration_time_s == estimate(
        problem, replace(one, param_gather_dispatch="core_r0.8.0")).iteration_time_s
    with pytest.raises(SpecError, match="p.json: param_gather_dispatch = 'r0.8': must be one of main, core_r0.8.0"):
        plan_from_dict(plan.to_dict() | {"param_gather_dispatch": "r0.8"}, "p.json")


def test_the_h100_rows_name_core_r080():
    """The H100 validation set ran Megatron-Core r0.8.0 with --overlap-param-gather: its CSV says so per row, so its
    pipelined rows keep r0.8.0's dispatch (main's would add every later stage's gather: 7-17 % slower there)."""
    from pathlib import Path

    from optsearch.validate import _load_runs

    csv = Path(__file__).resolve().parents[1] / "bench" / "validation" / "megatron-h100.csv"
    runs = _load_runs(csv)
    assert runs and all(r.plan.param_gather_dispatch == "core_r0.8.0" for r in runs)
    assert any(r.plan.pp > 1 and r.plan.overlap_param_gather for r in runs)


def test_upstream_accepts_the_pipelined_gather_plan(upstream, monkeypatch):  # noqa: F811
    """With OPTSEARCH_MEGATRON_LM set: the pp 2 plan the search returns with the flag on launches as upstream main
    takes it (parse_args / validate_args: --overlap-param-gather with --use-distributed-optimizer and
    --overlap-grad-reduce, two pipeline stages of 6 and 2 layers), and launch notes main's dispatch."""
    from optsearch import megatron

    problem = _fast_then_slow(30.0, 64)
    options = SpaceOptions(micro_batch_sizes=(2,), recompute_modes=("none",), max_stages=2,
                           node_type_order=("t0", "t1"))
    plan = solve(problem, Budget(objective="time"), options=options).plan
    assert plan.pp == 2 and plan.overlap_param_gather
    assert any("upstream main" in n for n in megatron.megatron_args(problem, plan).notes)
    _check(upstream, monkeypatch, problem, plan)
    _, args, _, _ = _run_upstream(upstream, monkeypatch, problem, plan)
    assert args.overlap_param_gather and args.overlap_grad_reduce and args.use_distributed_optimizer
    assert args.pipeline_model_parallel_size == 2 and not args.align_param_gather  # 1F1B: main's dispatch (7f)
