"""Time under a cost budget, the plain end's fuller stages on more dp past its main type's node supply
(solver._supply_steps, SUPPLY_STEPS; round 23, flight1t) on small drawn instances, where it fires (issue 14, item 3,
round 24, loopB; docs/solver.md "Round 24: ... (loopB, 2026-11-25)").

Round 23's audit saw the step never change a plan on the small random instances (random_instance and its kinds:
their plans are one to three stages, so no plain end holds more stages than ceil(L / (k + 1))). These instances are
drawn in the shape the step is for: a fast, dear type of few one-GPU nodes and a slower, cheap type with more; the
start is the plain end that spends the fast type's whole supply at dp 1 (every fast node a stage of k layers, the
rest and the head on one slow stage). Incumbents only: every plan the step returns must be a plan of the search
space that fits, priced as the cost model prices it, and meet the budget."""

from __future__ import annotations

import random

from optsearch import solver
from optsearch.candidates import SpaceOptions, in_search_space
from optsearch.costmodel import estimate
from optsearch.plan import Plan, Stage
from optsearch.problem import Problem
from optsearch.profile import AnalyticProfile
from optsearch.search import budget_violations
from optsearch.spec import ClusterSpec, GpuSpec, JobSpec, ModelSpec, NodeTypeSpec
from optsearch.spec.budget import Budget

from draws import draws

FACTORS = (0.6, 0.8, 1.0, 1.3)  # B: the start's own cost times these (below 1 too: whatever the start, what
# the step returns is the start or a plan that meets B; there the fastest of its plans break B)


def supply_instance(seed: int) -> tuple[Problem, SpaceOptions]:
    """A fast type F (3-6 one-GPU nodes, dear) and a slow type S (4-8 one-GPU nodes, cheap), 6-10 layers, one
    micro-batch size; speeds, prices, links and the global batch drawn."""
    rng = random.Random(seed)
    fast = GpuSpec(name="F", memory_gib=80.0, peak_fp16_tflop_per_s=rng.choice([300.0, 600.0, 1000.0]),
                   hbm_gbyte_per_s=3000.0)
    slow = GpuSpec(name="S", memory_gib=40.0, peak_fp16_tflop_per_s=rng.choice([60.0, 125.0, 250.0]),
                   hbm_gbyte_per_s=1500.0)
    nodes = [dict(name="f", gpu="F", gpus_per_node=1, num_nodes_available=rng.randint(3, 6),
                  price_usd_per_node_hour=rng.uniform(8.0, 30.0), intra_node_link="nvlink",
                  intra_node_gbyte_per_s=300.0, inter_node_gbit_per_s=rng.choice([100.0, 400.0])),
             dict(name="s", gpu="S", gpus_per_node=1, num_nodes_available=rng.randint(4, 8),
                  price_usd_per_node_hour=rng.uniform(1.0, 8.0), intra_node_link="nvlink",
                  intra_node_gbyte_per_s=150.0, inter_node_gbit_per_s=rng.choice([100.0, 400.0]))]
    hidden = rng.choice([1024, 2048])
    model = ModelSpec(name="supply", num_layers=rng.randint(6, 10), hidden_size=hidden, num_attention_heads=8,
                      ffn_hidden_size=4 * hidden, seq_length=2048, vocab_size=8000,
                      default_job=JobSpec(global_batch_size=rng.choice([4, 8, 16]), train_iterations=1000))
    cluster = ClusterSpec(name="supply", node_types=[NodeTypeSpec(**n) for n in nodes], gpus=[fast, slow])
    by_name = {"F": fast, "S": slow}
    problem = Problem(model=model, cluster=cluster, job=model.default_job, gpus=by_name,
                      profile=AnalyticProfile(model=model, gpus=by_name))
    return problem, SpaceOptions(micro_batch_sizes=(1,))


def supply_start(memo: solver.Memo, k: int) -> solver.Priced | None:
    """dp 1: every node of the fast type a stage of k layers, the rest of the layers and the head on one slow stage;
    priced (None where it does not fit or the fast type cannot take k layers a node)."""
    problem = memo.problem
    layers, fast = problem.model.num_layers, problem.cluster.node_types[0].num_nodes_available
    if k * fast > layers:
        return None
    stages = tuple([Stage(node_type="f", num_layers=k)] * fast + [Stage(node_type="s", num_layers=layers - k * fast)])
    found = memo.runnable(solver._with_degrees(problem, Plan(tp=1, dp=1, micro_batch_size=1, stages=stages),
                                               1, 1, 1, stages))
    return None if found is None else (found[1].training_time_s, found[0], found[1])


def supply_step_cases(seeds):
    """(seed, k, factor, memo, budget, bounded, start) of every start and budget of these seeds."""
    for seed in seeds:
        problem, options = supply_instance(seed)
        memo = solver.Memo(problem, options)
        for k in (1, 2):
            start = supply_start(memo, k)
            if start is None:
                continue
            for factor in FACTORS:
                budget = Budget(objective="time", max_cost_usd=start[2].cost_usd * factor)
                yield seed, k, factor, memo, budget, solver._candidates(memo, budget)[0], start


def check_stepped(memo, budget, bounded, start, got) -> list[str]:
    """What is wrong with a plan _supply_steps returned (empty: nothing): the start itself, or a plan of one of the
    step's keys that is in the space, fits, is priced as the cost model prices it, meets the budget and beats the
    start."""
    if got is start:
        return []
    problem, plan, est = memo.problem, got[1], got[2]
    wrong = []
    if not in_search_space(problem, plan, memo.options):
        wrong.append("not in the space")
    fresh = estimate(problem, plan)
    if not fresh.fits or (fresh.training_time_s, fresh.cost_usd) != (est.training_time_s, est.cost_usd):
        wrong.append("not the cost model's price")
    if got[0] != est.training_time_s:
        wrong.append("value is not its time")
    if budget_violations(plan, fresh, budget):
        wrong.append("breaks the budget")
    if not got[0] < start[0] * (1 - solver.INCUMBENT_REL):
        wrong.append("does not beat the start")
    keys = solver._supply_step_keys(problem, start[1], solver._v1_dps(bounded))
    if (plan.tp, plan.dp, plan.micro_batch_size, plan.pp, plan.ep, plan.cp, 1, 0) not in keys:
        wrong.append("not a key of the step")
    return wrong


def test_supply_steps_fire_on_small_draws_and_their_plans_are_priced_and_meet_the_budget():
    """On the drawn instances (seeds 0 .. 6 x OPTSEARCH_DRAWS) every plan _supply_steps returns passes
    check_stepped, and the step does change the plan: on seeds 0-6 it fires from 24 of the 48 (start, budget)
    pairs, every one at dp 2 on fewer stages (seed 2, k = 2: 452.2 s -> 149.2 s; seed 5, k = 1: 50.1 s -> 31.4 s;
    seeds 1 and 3 at 0.6 and 0.8 x: not the fastest keyed plan, which breaks B)."""
    fired = []
    for seed, k, factor, memo, budget, bounded, start in supply_step_cases(range(draws(7))):
        got = solver._supply_steps(memo, budget, bounded, start, None)
        assert check_stepped(memo, budget, bounded, start, got) == [], (seed, k, factor)
        if got is not start:
            fired.append((seed, k, factor))
            assert got[1].dp > start[1].dp and got[1].pp < start[1].pp
    assert len(fired) >= 12, fired


def test_a_step_that_skips_the_budget_is_caught(monkeypatch):
    """The mutant: _supply_steps keeps each candidate's fastest quick plan whether or not it meets B (its
    _best_meeting without the cost cap). check_stepped catches it on these draws: some plan it returns breaks B."""
    real = solver._best_meeting
    monkeypatch.setattr(solver, "_best_meeting",
                        lambda budget, plans: real(Budget(objective=budget.objective), plans))
    caught = []
    for seed, k, factor, memo, budget, bounded, start in supply_step_cases(range(7)):
        got = solver._supply_steps(memo, budget, bounded, start, None)
        if "breaks the budget" in check_stepped(memo, budget, bounded, start, got):
            caught.append((seed, k, factor))
    assert caught
