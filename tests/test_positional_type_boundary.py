"""The positional bound's floor on the slowest stage of a plan that mixes node types (formulation/positional.py
mixed_slowest_floor_s, TYPE_BOUNDARY_FLOOR; issue 14, item 3, round 18, costbound; docs/solver.md "Round 18: the
slowest stage beside a boundary between types (costbound, 2026-11-24)").

Two stages of different types never share a node, and each pays its send to the other at the pair's inter-node time:
every plan on two or more types has a stage at least M_mix slow, so the bound adds M_mix to its marks, and where no
type alone can run the pipeline (node supply, or a stage it cannot hold) drops the marks below it. Checked against
brute force on small instances of two or three types with NICs of 10 to 3,200 Gbit/s and one to three nodes of each
(so the supply binds), roomy and memory-tight: every plan lies above its candidate's positional bound with no budget
and under its own deadline, cost budget and rent, for both objectives; the floor raises some bounds; M_mix lies at or
below the slowest stage of every mixed plan; and a deliberately invalid floor (the pair's send counted twice) lies
above some plan."""

from __future__ import annotations

import math
import random

import optsearch.formulation.positional as positional
from optsearch.baselines.exhaustive import count_plans
from optsearch.candidates import SpaceOptions
from optsearch.problem import Problem
from optsearch.profile import AnalyticProfile
from optsearch.search import objective_value
from optsearch.solver import Memo
from optsearch.spec import ClusterSpec, GpuSpec, JobSpec, ModelSpec, NodeTypeSpec
from optsearch.spec.budget import Budget

from test_audit_dist_bounds import pattern_plans, space_plans
from test_inflight_bound import _budgets

MAX_PLANS = 1500
_FLOOR = positional.mixed_slowest_floor_s  # the function under test, before any monkeypatch


def boundary_instance(seed: int, tight: bool = False) -> tuple[Problem, SpaceOptions] | None:
    """Two or three node types whose NICs differ by up to 320x, one to three nodes of one or two GPUs each (the
    supply binds: no type alone runs every depth), 3-6 layers, pipelines of up to four stages; tight: long sequences
    on GPUs of 2.5-8 GiB (recomputation decides what fits). None when brute force would price too many plans."""
    rng = random.Random(seed)
    gpus, nodes = [], []
    for i in range(rng.choice([2, 2, 3])):
        gpus.append(GpuSpec(name=f"G{i}", memory_gib=rng.choice([2.5, 4.0, 8.0] if tight else [16.0, 40.0, 80.0]),
                            peak_fp16_tflop_per_s=rng.choice([30.0, 125.0, 312.0, 989.0]),
                            hbm_gbyte_per_s=rng.choice([300.0, 900.0, 3350.0])))
        nodes.append(NodeTypeSpec(name=f"t{i}", gpu=f"G{i}", gpus_per_node=rng.choice([1, 1, 2]),
                                  num_nodes_available=rng.randint(1, 3),
                                  price_usd_per_node_hour=round(rng.uniform(0.5, 40.0), 4),
                                  intra_node_link="nvlink", intra_node_gbyte_per_s=rng.choice([32.0, 300.0]),
                                  inter_node_gbit_per_s=rng.choice([10.0, 100.0, 400.0, 3200.0])))
    layers = rng.randint(3, 6)
    hidden = rng.choice([1024, 2048, 4096])
    model = ModelSpec(name="boundary", num_layers=layers, hidden_size=hidden, num_attention_heads=8,
                      ffn_hidden_size=4 * hidden, seq_length=rng.choice([4096, 8192] if tight else [1024, 2048]),
                      vocab_size=8000,
                      default_job=JobSpec(global_batch_size=rng.choice([8, 16, 32]), train_iterations=1000))
    cluster = ClusterSpec(name="boundary", node_types=nodes, gpus=gpus)
    by_name = {g.name: g for g in gpus}
    problem = Problem(model=model, cluster=cluster, job=model.default_job, gpus=by_name,
                      profile=AnalyticProfile(model=model, gpus=by_name))
    options = SpaceOptions(micro_batch_sizes=(1, 2), max_stages=4, uniform_recompute=rng.random() < 0.5)
    if count_plans(problem, Budget(), options, limit=MAX_PLANS) > MAX_PLANS:
        return None
    return problem, options


def _cases(seeds, tight=False):
    for seed in seeds:
        made = boundary_instance(seed, tight)
        if made is not None:
            yield made


def bound_with_off(sk, budget, switch: str, plain: dict) -> float:
    """The positional bound of sk under the budget from its tables built with positional.<switch> off (kept in plain
    by candidate key); sk's own tables are put back."""
    if sk.cand.key not in plain:
        setattr(positional, switch, False)
        try:
            plain[sk.cand.key] = positional._Tables(sk)
        finally:
            setattr(positional, switch, True)
    kept, sk.positional = sk.positional, plain[sk.cand.key]
    try:
        return positional.positional_bound(sk, budget).bound
    finally:
        sk.positional = kept


def _least_ratio(problem, options, compare: bool = True, first_below: bool = False) -> tuple[float, int, float]:
    """(the least plan value / positional bound over every plan of every v = 1 candidate and every budget of
    _budgets, how many (candidate, budget) bounds the floor raised (compare), the least slowest stage / M_mix over
    the plans on two or more types). The first and last are at least 1 (less 1e-9) when the floor is valid.
    compare stops at the first bound raised (the tests ask only that one is: the bounds without the floor were half
    the test's time); first_below returns at the first plan below its bound (the invalid floors' tests ask for one)."""
    memo = Memo(problem, options)
    least, raised, slowest = math.inf, 0, math.inf
    bounds: dict = {}
    plain: dict = {}  # candidate key -> its tables without the floor
    for cand, plan, est, sk in pattern_plans(problem, options, memo):
        if len({s.node_type for s in plan.stages}) > 1:
            floor, _ = positional.mixed_slowest_floor_s(sk)
            slowest = min(slowest, max(s.time_s for s in est.stages) / floor)
        for budget in _budgets(est):
            key = (cand.key, budget.objective, budget.max_time_s, budget.max_cost_usd, budget.max_usd_per_hour)
            if key not in bounds:
                bounds[key] = positional.positional_bound(sk, budget).bound
                if compare and not raised:
                    raised += bounds[key] > bound_with_off(sk, budget, "TYPE_BOUNDARY_FLOOR", plain) * (1 + 1e-9)
            got = bounds[key]
            value = objective_value(est, budget.objective)
            least = min(least, value / got if got > 0 else math.inf)
            if first_below and least < 1 - 1e-9:
                return least, raised, slowest
    return least, raised, slowest


# Seeds measured when written: roomy 4 (240 plans; the floor raises 280 of its (candidate, budget) bounds, the
# slowest mixed plan 1.044 x M_mix) and 7 (24 plans), memory-tight 108 (the slowest mixed plan 1.133 x M_mix).
ROOMY, TIGHT = (4, 7), (108,)


def test_every_plan_lies_above_the_bound_with_the_boundary_floor():
    total = 0
    for problem, options in _cases(ROOMY):
        least, raised, slowest = _least_ratio(problem, options)
        assert least >= 1 - 1e-9, problem.cluster
        assert slowest >= 1 - 1e-9, problem.cluster
        total += raised
    assert total > 0  # the floor raised some bounds: the check above is not vacuous


def test_every_plan_lies_above_the_bound_when_memory_is_tight():
    for problem, options in _cases(TIGHT, tight=True):
        least, _, slowest = _least_ratio(problem, options, compare=False)
        assert least >= 1 - 1e-9, problem.cluster
        assert slowest >= 1 - 1e-9, problem.cluster


def _every_plan_mixes(f, compute=None):
    """An invalid floor: the marks below M_mix dropped even where a plan on one type may exist."""
    return _FLOOR(f, compute)[0], False


def _scaled(f, compute=None):
    """An invalid floor: M_mix x 1.3."""
    floor, single = _FLOOR(f, compute)
    return floor * 1.3, single


def test_an_invalid_boundary_floor_fails(monkeypatch):
    monkeypatch.setattr(positional, "mixed_slowest_floor_s", _every_plan_mixes)
    assert _least_ratio(*next(_cases((4,))), compare=False, first_below=True)[0] < 1 - 1e-9
    monkeypatch.setattr(positional, "mixed_slowest_floor_s", _scaled)
    assert _least_ratio(*next(_cases((108,), tight=True)), compare=False, first_below=True)[0] < 1 - 1e-9


def test_one_type_or_one_stage_has_no_floor():
    problem, options = next(_cases((4,)))
    memo = Memo(problem, options)
    seen = 0
    for cand, _, _ in space_plans(problem, options):
        sk = memo.skeleton(cand)
        if sk.most is not None and (cand.pp == 1 or len(cand.uses) == 1):
            assert positional.mixed_slowest_floor_s(sk) == (math.inf, True)
            seen += 1
    assert seen


def test_a_floor_above_every_mark_is_a_mark_of_its_own(monkeypatch):
    """Where M_mix lies above every t_lb (a slow pair's send beside fast stages), the marks below it are dropped and
    M_mix itself is the only mark left: the bound stays finite where plans exist (they are bounded there), at least
    the bound without the floor."""
    problem, options = next(_cases((4,)))
    memo = Memo(problem, options)
    checked, seen = 0, set()
    for cand, _, _ in space_plans(problem, options):
        if cand.key in seen or cand.v != 1 or cand.pp == 1 or len(cand.uses) == 1:
            continue
        seen.add(cand.key)
        sk = memo.skeleton(cand)
        if sk.most is None:
            continue
        plain = positional.positional_bound(sk, Budget(objective="cost")).bound
        if not math.isfinite(plain):
            continue
        top = float(positional.tables(sk).marks[-1])
        monkeypatch.setattr(positional, "mixed_slowest_floor_s", lambda f, compute=None: (top * 1.5, False))
        sk.positional = None
        raised = positional.positional_bound(sk, Budget(objective="cost")).bound
        monkeypatch.setattr(positional, "mixed_slowest_floor_s", _FLOOR)
        assert math.isfinite(raised) and raised >= plain * (1 - 1e-9)
        checked += 1
    assert checked
