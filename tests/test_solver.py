"""The exact optimizer against brute force, CBC against CP-SAT, and the honesty rules of issue 3."""

from __future__ import annotations

import math
import os
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from draws import draws
from priced import least_recompute, solve_exhaustive

from optsearch.baselines.exhaustive import count_plans
from optsearch.candidates import (
    SpaceOptions, dp_candidates, in_search_space, micro_batch_candidates, node_uses, tp_candidates,
)
from optsearch.costmodel import estimate
from optsearch.errors import OptsearchError
from optsearch.problem import Problem
from optsearch.profile import AnalyticProfile
from optsearch.search import budget_violations, objective_value
from optsearch.solver import solve
from optsearch.spec import ClusterSpec, GpuSpec, JobSpec, ModelSpec, NodeTypeSpec
from optsearch.spec.budget import Budget

REL = 1e-6
MAX_PLANS = 2500


def usable_degrees(problem, options):
    """(tp, micro-batch, dp, node uses) of every degree triple with some usable node type: the loop the bound
    tests walk over every plan of."""
    for tp in tp_candidates(problem):
        for mbs in micro_batch_candidates(problem, options):
            for dp in dp_candidates(problem, tp, mbs):
                uses = tuple(node_uses(problem, tp, dp, mbs))
                if uses:
                    yield tp, mbs, dp, uses


def plans_as_searched(problem, options, tp, mbs, dp, uses, pp):
    """(plan, estimate) of every type sequence and layer split of the candidate (tp, mbs, dp, uses, pp), each at its
    least recomputation (exhaustive._least_recompute, priced once per instance by priced.least_recompute; None
    skipped) and with the distributed optimizer and --overlap-grad-reduce as the search sets them
    (costmodel.distributed_optimizer_on, overlap_grad_reduce_on): the plans the bound tests compare every bound with."""
    from optsearch.baselines.exhaustive import partitions, type_sequences
    from optsearch.costmodel import distributed_optimizer_on, overlap_grad_reduce_on
    from optsearch.plan import Plan, Stage

    for types in type_sequences(list(uses), pp, None, tp * dp):
        for parts in partitions(problem.model.num_layers, pp):
            plan = Plan(tp=tp, dp=dp, micro_batch_size=mbs,
                        stages=tuple(Stage(node_type=t, num_layers=n) for t, n in zip(types, parts)),
                        distributed_optimizer=distributed_optimizer_on(problem.job, dp),
                        overlap_grad_reduce=overlap_grad_reduce_on(problem, dp))
            found = least_recompute(problem, plan, options)
            if found is not None:
                yield found


def make_problem(*, layers: int, hidden: int, heads: int, gbs: int, node_types: list[dict], gpus: list[GpuSpec],
                 distributed_optimizer: bool = False, seq: int = 512) -> Problem:
    model = ModelSpec(
        name="tiny", num_layers=layers, hidden_size=hidden, num_attention_heads=heads, ffn_hidden_size=4 * hidden,
        seq_length=seq, vocab_size=8000,
        default_job=JobSpec(global_batch_size=gbs, train_iterations=1000, distributed_optimizer=distributed_optimizer),
    )
    cluster = ClusterSpec(name="random", node_types=[NodeTypeSpec(**n) for n in node_types], gpus=gpus)
    by_name = {g.name: g for g in gpus}
    return Problem(model=model, cluster=cluster, job=model.default_job, gpus=by_name,
                   profile=AnalyticProfile(model=model, gpus=by_name))


@st.composite
def instances(draw):
    n_types = draw(st.integers(1, 3))
    layers = draw(st.integers(2, 16))
    max_stages = draw(st.integers(1, 4 if n_types == 1 or layers <= 8 else 3))
    gpus, node_types = [], []
    for i in range(n_types):
        gpus.append(GpuSpec(
            name=f"G{i}",
            memory_gib=draw(st.sampled_from([2.25, 2.5, 3.0, 4.0, 6.0, 12.0, 40.0])),
            peak_fp16_tflop_per_s=draw(st.sampled_from([30.0, 65.0, 125.0, 312.0])),
            hbm_gbyte_per_s=draw(st.sampled_from([300.0, 900.0, 2000.0])),
        ))
        node_types.append(dict(
            name=f"t{i}", gpu=f"G{i}", gpus_per_node=draw(st.sampled_from([1, 2, 4])),
            num_nodes_available=draw(st.integers(1, 8) | st.integers(1, 2)),
            price_usd_per_node_hour=draw(st.floats(0.5, 40.0).map(lambda x: round(x, 4))),
            intra_node_link="nvlink", intra_node_gbyte_per_s=draw(st.sampled_from([16.0, 150.0, 300.0])),
            inter_node_gbit_per_s=draw(st.sampled_from([10.0, 100.0, 400.0])),
        ))
    problem = make_problem(
        layers=layers, hidden=draw(st.sampled_from([256, 512, 1024])), heads=draw(st.sampled_from([1, 2, 4])),
        gbs=draw(st.sampled_from([2, 4, 8])), node_types=node_types, gpus=gpus,
        distributed_optimizer=draw(st.booleans()), seq=draw(st.sampled_from([512, 2048])),
    )
    options = SpaceOptions(micro_batch_sizes=(1, 2), max_stages=max_stages)
    objective = draw(st.sampled_from(["cost", "time"]))
    kind = draw(st.sampled_from(["none", "time", "cost", "gpus", "rate"]))
    factor = draw(st.floats(0.2, 1.5))
    return problem, options, objective, kind, factor


def _budget(problem: Problem, options: SpaceOptions, objective: str, kind: str, factor: float) -> Budget:
    """A budget that binds often: a fraction of the cheapest plan's time, or of the fastest plan's cost."""
    if kind == "none":
        return Budget(objective=objective)
    if kind == "gpus":
        return Budget(objective=objective, max_gpus=max(1, int(8 * factor)))
    free = solve_exhaustive(problem, Budget(objective="cost" if kind == "time" else "time"), options=options,
                            max_plans=MAX_PLANS)
    if free.estimate is None:
        return Budget(objective=objective)
    if kind == "time":
        return Budget(objective=objective, max_time_s=free.estimate.training_time_s * factor)
    if kind == "cost":
        return Budget(objective=objective, max_cost_usd=free.estimate.cost_usd * factor)
    return Budget(objective=objective, max_usd_per_hour=free.estimate.usd_per_hour * factor)


def _assert_honest(problem: Problem, budget: Budget, options: SpaceOptions, result) -> None:
    """The returned plan is in the space, meets every limit, and re-prices to the reported objective."""
    assert result.plan is not None and result.estimate is not None
    assert in_search_space(problem, result.plan, options)
    est = estimate(problem, result.plan)
    assert not budget_violations(result.plan, est, budget)
    assert math.isclose(objective_value(est, budget.objective), result.objective_value, rel_tol=1e-12)
    # None when the answer is a quick plan whose value already met every remaining bound (no model was solved).
    if result.solver_objective_value is not None:
        assert math.isclose(result.solver_objective_value, result.objective_value, rel_tol=1e-5)
    assert sum(s.num_layers for s in result.plan.stages) == problem.model.num_layers
    assert result.plan.num_gpus == result.plan.tp * result.plan.cp * result.plan.dp * result.plan.pp


def assert_backends_equal_brute_force(problem, budget, options):
    """Both backends answer what brute force over the same space answers: infeasible, or optimal at the same value
    with an honest plan (re-priced by the cost model, in the space, within the budget). Returns brute force's answer."""
    truth = solve_exhaustive(problem, budget, options=options, max_plans=MAX_PLANS)
    for name in ("cbc", "cpsat"):
        got = solve(problem, budget, solver=name, options=options)
        if truth.status == "infeasible":
            assert got.status == "infeasible", (name, got.plan)
            continue
        assert truth.status == "optimal"
        assert got.status == "optimal", (name, got.status, got.message)
        _assert_honest(problem, budget, options, got)
        assert math.isclose(got.objective_value, truth.objective_value, rel_tol=REL), (
            name, got.objective_value, truth.objective_value, got.plan, truth.plan)
    return truth


# The draws of the test below hold at most this many plans (MAX_PLANS elsewhere). Its draws between 1,200 and 2,500
# plans are about 8 % of its draws but half of its brute force's plans (a few draws at 1-2 s of CPU each moved the
# test by 10-15 s between runs); below the cap it still draws three kinds at three or four stages, memory-tight
# GPUs and every budget kind. Both backends against brute force on these instances() up to MAX_PLANS:
# test_overlap_solve.py::test_optimum_with_the_overlap_equals_brute_force_and_backends_agree and
# test_context_parallel.py::test_optimum_with_cp_and_distributed_optimizer_equals_brute_force (round 17, trim3).
MAX_DRAW_PLANS = 1200


@settings(max_examples=draws(30), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(instances())
def test_optimum_equals_brute_force_and_backends_agree(case):
    problem, options, objective, kind, factor = case
    assume(count_plans(problem, Budget(), options, limit=MAX_DRAW_PLANS) <= MAX_DRAW_PLANS)
    budget = _budget(problem, options, objective, kind, factor)
    truth = assert_backends_equal_brute_force(problem, budget, options)
    event(f"brute force: {truth.status}")
    if truth.plan is not None:
        event(f"node types in the optimum: {len({s.node_type for s in truth.plan.stages})}")
        event(f"recomputation used: {any(s.recompute != 'none' for s in truth.plan.stages)}")


@settings(max_examples=draws(12), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(instances(), st.floats(1.05, 3.0))
def test_looser_budget_never_gives_a_worse_optimum(case, looser):
    problem, options, objective, _, factor = case
    assume(count_plans(problem, Budget(), options, limit=MAX_PLANS) <= MAX_PLANS)
    budget = _budget(problem, options, objective, "time" if objective == "cost" else "cost", factor)
    tight = solve(problem, budget, solver="cpsat", options=options)
    loose_budget = budget.model_copy(update={
        "max_time_s": budget.max_time_s * looser if budget.max_time_s else None,
        "max_cost_usd": budget.max_cost_usd * looser if budget.max_cost_usd else None,
    })
    loose = solve(problem, loose_budget, solver="cpsat", options=options)
    if tight.status == "optimal":
        assert loose.status == "optimal"
        assert loose.objective_value <= tight.objective_value * (1 + REL)


def _fasop_like() -> Problem:
    gpus = [GpuSpec(name="A100", memory_gib=40, peak_fp16_tflop_per_s=312, hbm_gbyte_per_s=1555),
            GpuSpec(name="A10", memory_gib=24, peak_fp16_tflop_per_s=70, hbm_gbyte_per_s=600)]
    nodes = [
        dict(name="a100", gpu="A100", gpus_per_node=4, num_nodes_available=1, price_usd_per_node_hour=32.7726,
             intra_node_link="nvlink", intra_node_gbyte_per_s=300, inter_node_gbit_per_s=40),
        dict(name="a10", gpu="A10", gpus_per_node=4, num_nodes_available=7, price_usd_per_node_hour=8.144,
             intra_node_link="pcie", intra_node_gbyte_per_s=32, inter_node_gbit_per_s=40),
    ]
    return make_problem(layers=24, hidden=1024, heads=16, gbs=64, node_types=nodes, gpus=gpus)


def cpu_seconds() -> float:
    """CPU seconds of this process and of its reaped children (CBC runs as one, reaped after each solve)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class _CpuTime:
    """The time module, but its perf_counter reads cpu_seconds()."""

    def __getattr__(self, name):
        return getattr(time, name)

    @staticmethod
    def perf_counter() -> float:
        return cpu_seconds()


def on_cpu_clock(monkeypatch) -> None:
    """Run the solver's --time-limit on CPU time (both backends run one thread): a loaded machine then stretches
    neither the limit nor the work the solver does within it, so a test on the limit cannot fail from the load. What
    the limit does on the wall clock of a whole command is measured in bench/objective_grid.py (its "wall" column
    against the limit, docs/benchmarks.md), not in tests. The backends' own limits stay wall time: under load they stop
    earlier, never later, in CPU time."""
    import optsearch.formulation.kinds
    import optsearch.formulation.positional
    import optsearch.solver

    for module in (optsearch.solver, optsearch.formulation.positional, optsearch.formulation.kinds):
        monkeypatch.setattr(module, "time", _CpuTime())


# The work the solver may do after its last look at the clock, in CPU seconds: on a quiet machine the solves with a
# limit end within 0.02 s of it (measured: 2.00 s for a 2 s limit); 0.5 s is 25 times that.
AFTER_DEADLINE_CPU_S = 0.5


@pytest.mark.parametrize("solver", ["cbc", "cpsat"])
def test_time_limit_reports_feasible_with_a_gap_never_optimal(solver, monkeypatch):
    """GPT-3 175B on 4 x 256 nodes needs about 35 s of CPU to prove within 1 % (docs/benchmarks.md, round 5); 2 s of
    CPU stop it with a plan (its first plan comes at 0.15-0.18 s of CPU, from the early seeds' quick plans, before any
    model solve, so CBC's wall-clock limit is not on its path (round 21); test_solver_time_limit's large-pool test
    stops the time row at 2 s with CP-SAT, this one the cost row on each backend). The limit runs on CPU time
    (on_cpu_clock), so machine load changes neither the status nor the time checked here."""
    from optsearch.edits import edited_problem

    problem = edited_problem("gpt3-175b", "mixed-pool-8k", [])
    on_cpu_clock(monkeypatch)
    cpu0 = cpu_seconds()
    limit_s = 2.0
    result = solve(problem, Budget(objective="cost"), solver=solver, time_limit_s=limit_s)
    cpu = cpu_seconds() - cpu0
    # what a failure needs to be told apart (round 21: one CI run ended "timeout" with no plan, not reproduced): the
    # CPU the solve used, the solver's own clock, its message and stats (candidates listed, first plan, models)
    seen = (result.status, cpu, result.solve_time_s, result.message, result.stats)
    assert result.status == "feasible", seen
    assert result.plan is not None, seen
    assert cpu <= limit_s * 1.1 + AFTER_DEADLINE_CPU_S, seen  # the limit is honoured
    assert result.solve_time_s <= cpu + 1e-6  # the time reported is the solver's own clock
    assert result.gap is not None and result.gap > 0
    assert result.bound is not None and result.bound <= result.objective_value


def test_a_gap_stops_early_with_an_honest_bound():
    """--gap 0.5: the answer may stop short of optimal, but then its bound lies below the true optimum and its gap is
    within the request; never reported optimal unless proven."""
    problem, budget = _fasop_like(), Budget(objective="time")
    exact = solve(problem, budget)
    loose = solve(problem, budget, gap=0.5)
    assert exact.status == "optimal"
    assert loose.status == "feasible", loose.status  # this instance stops early (checked when the test was written)
    assert "gap" in loose.message
    assert loose.bound <= exact.objective_value * (1 + 1e-9) <= loose.objective_value * (1 + 2e-9)
    assert 0 < loose.gap <= 0.5
    with pytest.raises(OptsearchError, match="--gap"):
        solve(problem, budget, gap=1.0)


def test_infeasible_budget_is_reported_not_raised():
    problem = _fasop_like()
    result = solve(problem, Budget(objective="cost", max_time_s=1.0), solver="cpsat")
    assert result.status == "infeasible" and result.plan is None


def test_same_inputs_give_the_same_plan():
    problem = _fasop_like()
    options = SpaceOptions(max_stages=4)
    for name in ("cbc", "cpsat"):
        for objective in ("cost", "time"):
            budget = Budget(objective=objective)
            first = solve(problem, budget, solver=name, options=options)
            second = solve(problem, budget, solver=name, options=options)
            assert first.plan is not None and first.plan == second.plan, (name, objective)


@st.composite
def mixed_instances(draw):
    """Two node types where mixing pays: a fast, dear type with few nodes beside a slow, cheap one."""
    layers = draw(st.integers(2, 10))
    gpus = [GpuSpec(name="FAST", memory_gib=draw(st.sampled_from([3.0, 6.0, 40.0])), peak_fp16_tflop_per_s=312.0,
                    hbm_gbyte_per_s=2000.0),
            GpuSpec(name="SLOW", memory_gib=draw(st.sampled_from([2.5, 3.0, 6.0])),
                    peak_fp16_tflop_per_s=draw(st.sampled_from([30.0, 65.0])), hbm_gbyte_per_s=600.0)]
    gpn = draw(st.sampled_from([1, 2]))
    nodes = [
        dict(name="fast", gpu="FAST", gpus_per_node=gpn, num_nodes_available=1,
             price_usd_per_node_hour=draw(st.floats(5.0, 40.0).map(lambda x: round(x, 4))), intra_node_link="nvlink",
             intra_node_gbyte_per_s=300.0, inter_node_gbit_per_s=draw(st.sampled_from([100.0, 400.0]))),
        dict(name="slow", gpu="SLOW", gpus_per_node=gpn, num_nodes_available=draw(st.integers(1, 4)),
             price_usd_per_node_hour=draw(st.floats(0.5, 5.0).map(lambda x: round(x, 4))), intra_node_link="pcie",
             intra_node_gbyte_per_s=16.0, inter_node_gbit_per_s=draw(st.sampled_from([50.0, 100.0]))),
    ]
    problem = make_problem(layers=layers, hidden=draw(st.sampled_from([512, 1024])), heads=2,
                           gbs=draw(st.sampled_from([16, 32])),
                           node_types=nodes, gpus=gpus, seq=draw(st.sampled_from([512, 2048])))
    options = SpaceOptions(micro_batch_sizes=(1,), max_stages=draw(st.integers(2, 4)))
    return problem, options, draw(st.sampled_from(["cost", "time"])), draw(st.floats(1.0, 1.5))


@settings(max_examples=draws(15), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(mixed_instances())
def test_heterogeneous_optimum_equals_brute_force(case):
    problem, options, objective, factor = case
    assume(count_plans(problem, Budget(), options, limit=MAX_PLANS) <= MAX_PLANS)
    # The fastest plan, then the cheapest plan within a deadline a little above it: both tend to mix types.
    fastest = solve_exhaustive(problem, Budget(objective="time"), options=options, max_plans=MAX_PLANS)
    assume(fastest.estimate is not None)
    budget = (Budget(objective="time") if objective == "time"
              else Budget(objective="cost", max_time_s=fastest.estimate.training_time_s * factor))
    truth = solve_exhaustive(problem, budget, options=options, max_plans=MAX_PLANS)
    if truth.plan is not None:
        event(f"node types in the optimum: {len({s.node_type for s in truth.plan.stages})}")
    for name in ("cbc", "cpsat"):
        got = solve(problem, budget, solver=name, options=options)
        assert got.status == truth.status, (name, got.status, truth.status)
        if truth.plan is not None:
            _assert_honest(problem, budget, options, got)
            assert math.isclose(got.objective_value, truth.objective_value, rel_tol=REL), (
                name, got.plan, truth.plan)


@settings(max_examples=draws(6), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(mixed_instances(), st.sampled_from([1e-12, 1e-9, 1e-7]))
def test_a_deadline_a_hair_below_the_cheapest_plan_excludes_it(case, hair):
    """pareto's next limit sits one part in 10^6 below the last frontier plan: with BUDGET_REL that plan overshoots
    the limit by a hair, which the model's rounded rows may not see. The solvers must leave it out as brute force
    does (solver._solve_model), never answer with it or raise."""
    problem, options, _, _ = case
    assume(count_plans(problem, Budget(), options, limit=MAX_PLANS) <= MAX_PLANS)
    cheapest = solve_exhaustive(problem, Budget(objective="cost"), options=options, max_plans=MAX_PLANS)
    assume(cheapest.estimate is not None)
    budget = Budget(objective="cost", max_time_s=cheapest.estimate.training_time_s / (1 + 1e-6) / (1 + hair))
    truth = solve_exhaustive(problem, budget, options=options, max_plans=MAX_PLANS)
    for name in ("cbc", "cpsat"):
        got = solve(problem, budget, solver=name, options=options)
        assert got.status == truth.status, (name, got.status, truth.status)
        if truth.plan is not None:
            _assert_honest(problem, budget, options, got)
            assert math.isclose(got.objective_value, truth.objective_value, rel_tol=REL), (name, got.plan, truth.plan)


@settings(max_examples=draws(8), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(mixed_instances(), st.floats(1.0, 1.6))
def test_a_window_above_a_tighter_optimum_gives_the_same_optimum(case, step):
    """A cost sweep solves each deadline with the plans within the previous, tighter deadline left out
    (slower_than_s), that deadline's optimum being the warm start: the answer must still equal brute force."""
    problem, options, _, factor = case
    assume(count_plans(problem, Budget(), options, limit=MAX_PLANS) <= MAX_PLANS)
    fastest = solve_exhaustive(problem, Budget(objective="time"), options=options, max_plans=MAX_PLANS)
    assume(fastest.estimate is not None)
    tight = fastest.estimate.training_time_s * factor
    first = solve_exhaustive(problem, Budget(objective="cost", max_time_s=tight), options=options, max_plans=MAX_PLANS)
    budget = Budget(objective="cost", max_time_s=tight * step)
    truth = solve_exhaustive(problem, budget, options=options, max_plans=MAX_PLANS)
    event(f"the optimum moved: {truth.objective_value < first.objective_value * (1 - REL)}")
    for name in ("cbc", "cpsat"):
        got = solve(problem, budget, solver=name, options=options, warm_start=first.plan, slower_than_s=tight)
        assert got.status == "optimal", (name, got.status)
        _assert_honest(problem, budget, options, got)
        assert math.isclose(got.objective_value, truth.objective_value, rel_tol=REL), (name, got.plan, truth.plan)


@settings(max_examples=draws(5), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(mixed_instances(), st.lists(st.floats(0.9, 2.0), min_size=2, max_size=5))
def test_a_cost_sweep_with_windows_equals_brute_force_at_every_point(case, factors):
    """whatif.sweep solves deadlines from the tightest up, each above the last proven one (rule 4): every point must
    still equal brute force."""
    from optsearch import whatif

    problem, options, _, _ = case
    assume(count_plans(problem, Budget(), options, limit=MAX_PLANS) <= MAX_PLANS)
    fastest = solve_exhaustive(problem, Budget(objective="time"), options=options, max_plans=MAX_PLANS)
    assume(fastest.estimate is not None)
    # and a point just above the least time: its window starts at the least time less the incumbent tolerance
    values = tuple(fastest.estimate.training_time_s * f for f in factors) + (fastest.estimate.training_time_s * 1.0001,)
    points = whatif.sweep(problem, Budget(objective="cost"), whatif.Sweep(limit="max_time_s", values=values),
                          options=options)
    for p in points:
        truth = solve_exhaustive(problem, p.budget, options=options, max_plans=MAX_PLANS)
        assert p.result.status == truth.status, (p.budget.max_time_s, p.result.status, truth.status)
        if truth.plan is not None:
            assert math.isclose(p.estimate.cost_usd, truth.objective_value, rel_tol=REL), (
                p.budget.max_time_s, p.plan, truth.plan)


@settings(max_examples=draws(12), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(mixed_instances(), st.floats(0.0, 1.0))
def test_the_slower_than_rows_price_each_plan_at_rent_times_the_later_of_its_time_and_the_window(case, where):
    """With T >= W and the McCormick row v >= W b, a candidate's model prices a plan at rent x max(time, W): its
    optimum (no incumbent cut) must equal that minimum over the candidate's plans, with both backends."""
    from optsearch.baselines.exhaustive import _least_recompute, partitions, type_sequences
    from optsearch.candidates import node_uses
    from optsearch.formulation.model import Candidate, build, objective_to_user
    from optsearch.plan import Plan, Stage
    from optsearch.solver import backend

    problem, options, _, _ = case
    assume(count_plans(problem, Budget(), options, limit=MAX_PLANS) <= MAX_PLANS)
    uses = tuple(node_uses(problem, 1, 1, 1))
    pp = max(1, options.max_stages - 1)
    plans = []
    for types in type_sequences(list(uses), pp, None, 1):
        for parts in partitions(problem.model.num_layers, pp):
            stages = tuple(Stage(node_type=t, num_layers=n) for t, n in zip(types, parts))
            found = _least_recompute(problem, Plan(tp=1, dp=1, micro_batch_size=1, stages=stages), options)
            if found is not None:
                plans.append(found[1])
    assume(plans)
    times = sorted(e.training_time_s for e in plans)
    window = times[0] + where * (times[-1] - times[0])
    want = min(e.usd_per_hour * max(e.training_time_s, window) / 3600 for e in plans)
    cand = Candidate(tp=1, dp=1, micro_batch_size=1, pp=pp, uses=uses)
    for name in ("cbc", "cpsat"):
        f = build(problem, Budget(objective="cost"), cand, options, slower_than_s=window)
        sol = backend(name).solve(f.lm, None)
        assert sol.status == "optimal", name
        assert math.isclose(objective_to_user(f, sol.objective), want, rel_tol=1e-5), (name, want)


def test_a_mixed_pipeline_is_found_when_it_is_optimal():
    """One fast A100 node beside A10 nodes under a tight deadline: the optimum mixes both types (brute force agrees)."""
    problem = _fasop_like()
    problem = make_problem(layers=12, hidden=1024, heads=16, gbs=64, node_types=[n.model_dump() for n in
                           problem.cluster.node_types], gpus=list(problem.gpus.values()))
    options = SpaceOptions(micro_batch_sizes=(1,), max_stages=3)
    fastest = solve_exhaustive(problem, Budget(objective="time"), options=options, max_plans=50_000)
    budget = Budget(objective="cost", max_time_s=fastest.estimate.training_time_s * 1.001)
    truth = solve_exhaustive(problem, budget, options=options, max_plans=50_000)
    assert truth.status == "optimal"
    assert {s.node_type for s in truth.plan.stages} == {"a100", "a10"}, truth.plan
    for name in ("cbc", "cpsat"):
        got = solve(problem, budget, solver=name, options=options)
        _assert_honest(problem, budget, options, got)
        assert math.isclose(got.objective_value, truth.objective_value, rel_tol=REL)


def _check_bounds_below_every_plan(problem: Problem, options: SpaceOptions, budget: Budget) -> int:
    """Every candidate's bounds (cheap, refined and positional) lie below every plan of that candidate that meets the
    budget, and a candidate the bounds call infeasible has no such plan. Returns how many plans were compared.

    Both forms of the refined bound are checked: per composition of node types, and the aggregate one the solver
    uses when there are too many compositions to list (forced here with a composition limit of 0). The positional
    bound is checked without a cutoff and with the cutoff at the candidate's median plan (the solver passes its
    incumbent; the result must stay a bound), and with only the plans slower than the median plan's time counted
    (slower_than_s, what a sweep's window passes). Every call after the first re-uses the skeleton's tables, so each is
    also compared with the same call on a fresh skeleton. The composition bounds under that window (each
    composition's time and cost raised by it) lie below every plan at least that slow."""
    from unittest import mock

    from optsearch import bounds as bounds_module
    from optsearch.bounds import bound_over_compositions, candidate_bound, composition_bounds, degree_terms
    from optsearch.candidates import max_stages
    from optsearch.formulation.model import Candidate, skeleton
    from optsearch.formulation.positional import _least_rent, _most_cover, positional_bound
    from optsearch.formulation.positional import tables as positional_tables

    compared = 0
    for tp, mbs, dp, uses in usable_degrees(problem, options):
        terms = degree_terms(problem, tp, dp, mbs, uses)
        for pp in range(1, max_stages(problem, options) + 1):
            bounds = [candidate_bound(problem, terms, pp, budget, refined=r) for r in (False, True)]
            with mock.patch.object(bounds_module, "MAX_COMPOSITIONS", 0):
                bounds.append(candidate_bound(problem, terms, pp, budget, refined=True))
            values = []
            per_plan = []  # (time, iteration, USD per iteration)
            for found in plans_as_searched(problem, options, tp, mbs, dp, uses, pp):
                if budget_violations(*found, budget):
                    continue
                est = found[1]
                values.append((objective_value(est, budget.objective), est.training_time_s))
                compared += 1
                per_iteration = est.usd_per_hour * est.iteration_time_s / 3600
                per_plan.append((est.training_time_s, est.iteration_time_s, per_iteration))
                for bound in bounds:
                    assert bound.feasible, (found[0], bound)
                    assert bound.iteration_s <= est.iteration_time_s * (1 + 1e-9), (found[0], bound)
                    assert bound.rate_usd_per_hour <= est.usd_per_hour * (1 + 1e-9), (found[0], bound)
                    assert bound.cost_per_iteration_usd <= per_iteration * (1 + 1e-9), (found[0], bound)
            comps = composition_bounds(problem, terms, pp)
            if comps is not None and per_plan:
                w = sorted(t for t, _, _ in per_plan)[len(per_plan) // 2]
                windowed = bound_over_compositions(problem, comps, budget, w)
                slow = [(i, c) for t, i, c in per_plan if t >= w]
                assert windowed.feasible
                assert windowed.iteration_s <= min(i for i, _ in slow) * (1 + 1e-9), (w, windowed)
                assert windowed.cost_per_iteration_usd <= min(c for _, c in slow) * (1 + 1e-9), (w, windowed)
                assert windowed.cost_per_iteration_usd >= bounds[1].cost_per_iteration_usd  # never looser
            sk = skeleton(problem, Candidate(tp=tp, dp=dp, micro_batch_size=mbs, pp=pp, uses=uses), options)
            if sk.patterns is None:
                continue
            cand = sk.cand
            tab = positional_tables(sk)
            if len(tab.marks):  # the cheap feasibility programme of C's bisection agrees with R's
                caps = tab.caps(np.arange(len(tab.marks)))
                covers = _most_cover(tab.groups, tab.sup, caps, pp) >= tab.L
                assert (covers == np.isfinite(_least_rent(tab.groups, tab.sup, caps, pp, tab.L))).all()
            cutoffs = [math.inf] + ([sorted(values)[len(values) // 2][0]] if values else [])
            slower = [0.0] + ([sorted(t for _, t in values)[len(values) // 2]] if values else [])
            for cutoff in cutoffs:
                for w in slower:
                    pos = positional_bound(sk, budget, cutoff=cutoff, slower_than_s=w)
                    fresh = positional_bound(skeleton(problem, cand, options), budget, cutoff=cutoff,
                                             slower_than_s=w)
                    assert pos == fresh, (cand.key, cutoff, w, pos, fresh)
                    counted = [v for v, t in values if t >= w]
                    if counted:
                        assert pos.bound <= min(counted) * (1 + 1e-9), (cand.key, cutoff, w, pos, min(counted))
    return compared


@settings(max_examples=draws(12), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.one_of(instances(), mixed_instances()))
def test_candidate_bounds_lie_below_every_plan(case):
    """The outer loop skips a candidate on its bound alone, so every bound must hold for every plan (bounds.py)."""
    problem, options = case[:2]
    # Draws up to MAX_DRAW_PLANS (round 18, trim4), before _budget's brute force. Every bound below every plan up to
    # MAX_PLANS: under every budget kind on memory-tight instances in
    # test_solver_memory.py::test_tight_memory_bounds_lie_below_every_plan, and on these instances() (three kinds,
    # four stages) in test_overlap_solve.py::test_bounds_lie_below_every_plan_with_the_overlap.
    assume(count_plans(problem, Budget(), options, limit=MAX_DRAW_PLANS) <= MAX_DRAW_PLANS)
    if len(case) == 5:
        problem, options, objective, kind, factor = case
        budget = _budget(problem, options, objective, kind, factor)
    else:
        problem, options, objective, factor = case
        budget = Budget(objective=objective)
    event(f"plans compared: {'0' if not _check_bounds_below_every_plan(problem, options, budget) else '> 0'}")


def test_quick_plans_are_plans_of_their_candidate_and_hints_decode_to_them():
    """The heuristic's plans become incumbents: each must be in the space, fit in memory, and belong to the candidate;
    its hint must set the model's binaries to exactly that plan."""
    from optsearch.candidates import node_uses
    from optsearch.formulation.heuristic import hint, quick_plans
    from optsearch.formulation.linear import Solution
    from optsearch.formulation.model import Candidate, build, decode

    problem, options = _fasop_like(), SpaceOptions()
    seen = 0
    for tp, dp, pp in [(1, 1, 4), (1, 2, 6), (2, 2, 5), (1, 4, 3), (4, 1, 8)]:
        cand = Candidate(tp=tp, dp=dp, micro_batch_size=1, pp=pp, uses=tuple(node_uses(problem, tp, dp, 1)))
        f = build(problem, Budget(objective="cost"), cand, options)
        for plan in quick_plans(f):
            seen += 1
            assert (plan.tp, plan.dp, plan.pp) == (tp, dp, pp)
            assert in_search_space(problem, plan, options)
            assert estimate(problem, plan).fits
            values = {name: 0.0 for name in f.lm.variables} | hint(f, plan)
            assert decode(f, Solution("feasible", values, None, None)) == plan
            # the structural rows (blocks, one type per stage, node supply, patterns, layer cover) hold at the hint
            assert not [v for v in f.lm.violations(values) if v.startswith(("blk_", "one_", "supply_", "pat_", "cover"))]
    assert seen >= 5


def test_stage_patterns_match_the_memory_row_for_every_layer_count():
    """stage_patterns computes each (stage, type, mode)'s largest layer count in closed form; it must give exactly the
    patterns (and least modes) that checking the memory row for every count gives."""
    roomy = _fasop_like()
    tight = make_problem(layers=24, hidden=1024, heads=16, gbs=64, node_types=[
        n.model_dump() for n in roomy.cluster.node_types], gpus=[g.model_copy(update={"memory_gib": m}) for g, m in
                                                                zip(roomy.gpus.values(), (3.0, 2.5))])
    options = SpaceOptions()
    checked = capped = 0
    for problem in (roomy, tight):
        checked, capped = _check_patterns(problem, options, checked, capped)
    assert checked > 100 and capped > 10  # some stages hold fewer than all layers: the closed form is exercised


def _check_patterns(problem: Problem, options: SpaceOptions, checked: int, capped: int) -> tuple[int, int]:
    from optsearch.candidates import dp_candidates, micro_batch_candidates, node_uses, tp_candidates
    from optsearch.formulation.model import Candidate, memory_fixed_bytes, memory_per_layer_bytes, skeleton

    for tp in tp_candidates(problem):
        for mbs in micro_batch_candidates(problem, options):
            for dp in dp_candidates(problem, tp, mbs):
                uses = tuple(node_uses(problem, tp, dp, mbs))
                for pp in (1, 2, 3, 7):
                    sk = skeleton(problem, Candidate(tp=tp, dp=dp, micro_batch_size=mbs, pp=pp, uses=uses), options)
                    c, L, expected = sk.c, problem.model.num_layers, {}
                    for s in range(pp):
                        for g in range(len(uses)):
                            for n in range(1 if 0 < s < pp - 1 else 0, L + 1):
                                for r in range(len(c.modes)) if n else range(1):
                                    need = memory_fixed_bytes(c, s, g, r, pp) + n * memory_per_layer_bytes(c, s, g, r, 0)
                                    if need <= c.capacity_bytes[g]:
                                        expected[(s, g, n)] = r
                                        break
                    assert sk.patterns == expected, (tp, dp, mbs, pp)
                    checked += len(expected)
                    capped += sum(1 for s in range(pp) for g in range(len(uses)) if (s, g, L) not in expected)
    return checked, capped


def test_row_check_allows_a_binary_terms_integrality_noise_and_nothing_more():
    """CBC handed back v = -8.4e-9 s in the row v >= 7.45 b with b = 1.6e-16 (optsearch pareto, GPT-2 large on
    amp-p3-g4dn): noise of |coef| x its integrality tolerance, which LinearModel.violations allows. A real breach of
    the row is still reported."""
    from optsearch.formulation.linear import LinearModel, Lin

    lm = LinearModel()
    lm.var("v", "time", 0, 100)
    lm.var("b", "bool")
    lm.add("mclo", Lin.of((1.0, "v"), (-7.45, "b")), ">=", 0, "time")
    assert lm.violations({"v": -8.4e-9, "b": 1.6e-16}) == []
    assert lm.violations({"v": -1e-6, "b": 0.0}) != []
    assert lm.violations({"v": 7.0, "b": 1.0}) != []


def test_cpsat_ticks_keep_every_row_within_int64():
    """A cost row over many blocks: 12 products priced 1.26e8 (scaled USD/hour) with times up to 3 s. At 10^9 ticks
    per second (what the time bounds alone gave) its extremes reach 4.6e18, and CP-SAT rejected the model as
    MODEL_INVALID, which the solver took for a time-limit stop (as on gpt2-small / mixed-pool-8k under 46m45s). The
    tick is lowered until every row fits."""
    from optsearch.formulation.cpsat import INT_ROOM, CpSat, ticks_per_s
    from optsearch.formulation.linear import LinearModel, Lin

    lm = LinearModel(objective_unit="rate")
    names = [lm.var(f"v{i}", "time", 0, 3.0) for i in range(12)]
    lm.var("b", "bool")
    lm.add("floor", Lin.of(*((1.0, n) for n in names)), ">=", 1.5, "time")
    lm.add("bud", Lin.of(*((1.26e8, n) for n in names), (1.0e8, "b")), "<=", 4.0e8, "rate")
    lm.objective = Lin.of(*((1.26e8 + i, n) for i, n in enumerate(names)))
    ticks = ticks_per_s(lm)
    assert ticks < 10**9 and ticks * (12 * 1.26e8 * 3.0 + 1e8 + 4e8) < INT_ROOM
    sol = CpSat().solve(lm, 10.0)
    assert sol.status == "optimal" and math.isclose(sol.objective, 1.26e8 * 1.5, rel_tol=1e-6)
