"""The DP baselines over the knobs of the space the exact search covers (issue 16's: cp, ep, interleaving v, block
recomputation, one recomputation mode, the distributed optimizer), beside the variants that search only what the
published tools search (dp-published, dp-amp-published).

Checked here: the partition DP at each knob is exact for fixed stage types (its pipeline time equals the cost model's
best over every partition); a DP plan re-priced by the cost model equals what the DP reports and lies in the space;
on small instances (brute force finishes) the exact plan is never worse than any DP variant; and where a knob is
needed, the same-space DP finds it while the published variant says what it does not search.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from optsearch.baselines.dp import partition_layers, published_lacks, solve_dp, stage_time_tables
from optsearch.baselines.exhaustive import partitions
from priced import solve_exhaustive
from optsearch.candidates import SpaceOptions, in_search_space
from optsearch.costmodel import distributed_optimizer_on, estimate
from optsearch.plan import Plan, Stage
from optsearch.search import objective_value
from optsearch.solver import solve
from optsearch.spec import LayerKindSpec
from optsearch.spec.budget import Budget
from optsearch.targets import FASOP, MEGATRON, space_options

from test_baselines import INSTANCES, model, node, problem
from test_solver_memory import issue_example

MOE_KIND = LayerKindSpec(name="layer", num_layers=4, num_experts=4, moe_router_topk=2)


def moe_problem():
    return problem(model(4, [MOE_KIND]), node("a", "Big", 2, 2, 9.0, 100, 300), node("b", "Small", 2, 2, 2.0, 25, 16))


def dense_problem(batch: int = 16):
    return problem(model(4, batch=batch), node("a", "Big", 2, 4, 9.0, 100, 300), node("b", "Small", 2, 4, 2.0, 25, 16))


# (problem, stage types, tp, dp, recompute, cp, ep, v, block N); micro-batches m from the parameter
TABLE_CASES = {
    "cp2": (dense_problem, ("a", "b"), 1, 1, "none", 2, 1, 1, None),
    "cp2-selective-3-stages": (dense_problem, ("b", "a", "b"), 1, 1, "selective", 2, 1, 1, None),
    "v2": (dense_problem, ("a", "b"), 1, 1, "none", 1, 1, 2, None),
    "v2-cp2-full-one-type": (dense_problem, ("a", "a"), 1, 1, "full", 2, 1, 2, None),
    "block1": (dense_problem, ("a", "b", "b"), 1, 1, "full", 1, 1, 1, 1),
    "block2-cp2": (dense_problem, ("b", "a"), 1, 1, "full", 2, 1, 1, 2),
    "ep2": (moe_problem, ("a", "b"), 1, 2, "none", 1, 2, 1, None),
    "ep2-block1": (moe_problem, ("b", "a"), 1, 2, "full", 1, 2, 1, 1),
}


@pytest.mark.parametrize("m", [2, 4])
@pytest.mark.parametrize("case", sorted(TABLE_CASES))
def test_partition_dp_is_exact_at_every_knob(case, m):
    """Against every partition (counts multiples of v): the DP's pipeline time equals the cost model's best."""
    make, types, tp, dp, recompute, cp, ep, v, block = TABLE_CASES[case]
    p = make()
    mbs = p.job.global_batch_size // (dp * m)
    L = p.model.num_layers

    def plan(layers) -> Plan:
        return Plan(tp=tp, dp=dp, micro_batch_size=mbs, cp=cp, ep=ep, virtual_stages=v, recompute_num_layers=block,
                    distributed_optimizer=distributed_optimizer_on(p.job, dp, cp),
                    stages=tuple(Stage(node_type=t, num_layers=n, recompute="none" if block and n == 0 else recompute)
                                 for t, n in zip(types, layers)))

    tables = stage_time_tables(p, types, tp, dp, mbs, recompute, cp=cp, ep=ep, virtual_stages=v,
                               recompute_num_layers=block)
    part = partition_layers(tables, m * v)
    layers = tuple(v * n for n in part.layers)
    every = [tuple(v * n for n in c) for c in partitions(L // v, len(types))]
    best = min(estimate(p, plan(c)).pipeline_time_s for c in every)
    assert sum(layers) == L and all(n % v == 0 for n in layers)
    assert estimate(p, plan(layers)).pipeline_time_s == pytest.approx(best, rel=1e-12)
    assert part.pipeline_time_s / v == pytest.approx(best, rel=1e-9)


# ---- the search ---------------------------------------------------------------------------------------------------

SEARCH_INSTANCES = {
    "two-types": lambda: INSTANCES["two-types"],
    "two-kinds": lambda: INSTANCES["two-kinds"],
    "tight": issue_example,  # needs recomputation to fit
    "tight-3-nodes": lambda: issue_example(nodes=3, layers=6),
    "moe": moe_problem,
    "interleavable": lambda: problem(model(4, batch=16), node("a", "Big", 2, 1, 9.0, 100, 300),
                                     node("b", "Small", 2, 3, 2.0, 25, 16)),
}
VARIANTS = list(itertools.product(("rotations", "fixed"), ("space", "published")))


def megatron_space(p):
    """The megatron target's space with its cp sizes on every node type: these synthetic GPUs state no compute
    capability, so the target's attention rule (cp > 1 only where flash attention runs, targets.space_options) would
    leave cp 1 alone; the DP's cp path is what is tested here."""
    return replace(space_options(MEGATRON, p), context_parallel_sizes=MEGATRON.context_parallel_sizes)


# every instance in the megatron target's space; the fork's space (built by hand: the fork refuses models by name)
# and the library's per-stage space on the memory-tight instances, where they differ from it
SEARCH_CASES = [(name, "megatron") for name in sorted(SEARCH_INSTANCES)] + [
    ("tight", "fasop"), ("tight", "library"), ("tight-3-nodes", "library")]


@pytest.mark.parametrize("objective", ["cost", "time"])
@pytest.mark.parametrize("name,space", SEARCH_CASES)
def test_exact_plan_is_never_worse_than_a_dp_plan_and_dp_plans_reprice(name, space, objective):
    p = SEARCH_INSTANCES[name]()
    options = {"megatron": lambda: megatron_space(p),
               "fasop": lambda: SpaceOptions(uniform_recompute=True, block_recompute=True,
                                             node_type_order=tuple(n.name for n in p.cluster.node_types),
                                             same_gpus_per_node=True),
               "library": SpaceOptions}[space]()
    budget = Budget(objective=objective)
    exact = solve(p, budget, solver="cpsat", options=options)
    assert exact.status == "optimal", exact.message
    if name not in ("moe", "interleavable"):  # brute force in well under a second (those two: test_moe, test_interleaved)
        ground = solve_exhaustive(p, budget, options=options)
        assert exact.objective_value == pytest.approx(ground.objective_value, rel=1e-6)
    for order, knobs in VARIANTS:
        d = solve_dp(p, budget, order=order, knobs=knobs, options=options)
        if d.plan is None:
            assert d.status == "infeasible", d.message
            continue
        assert d.status == "feasible"
        assert d.objective_value >= exact.objective_value * (1 - 1e-9), (d.method, d.plan, exact.plan)
        assert d.objective_value == objective_value(estimate(p, d.plan), objective)  # re-priced: the same number
        assert in_search_space(p, d.plan, options), d.plan
        if knobs == "published":
            assert (d.plan.cp, d.plan.ep, d.plan.virtual_stages, d.plan.recompute_num_layers) == (1, 1, 1, None)
            assert {s.recompute for s in d.plan.stages} == {"none"}


def test_same_space_dp_uses_the_knobs_the_published_variant_lacks():
    # memory-tight: no plan fits without recomputation; the same-space DP finds the optimum (selective, and cp 2
    # when minimizing time), the published variant has no plan and says what it leaves out
    p = issue_example()
    options = megatron_space(p)
    for objective in ("cost", "time"):
        budget = Budget(objective=objective)
        ground = solve_exhaustive(p, budget, options=options)
        d = solve_dp(p, budget, options=options)
        assert d.objective_value == pytest.approx(ground.objective_value, rel=1e-9)
        assert {s.recompute for s in d.plan.stages} == {"selective"}
        published = solve_dp(p, budget, options=options, knobs="published")
        assert published.method == "dp-published" and published.status == "infeasible"
        assert ("not searched here: recomputation selective/full, block recomputation, cp 2/4/8, v 2/3/4 "
                "(the same-space variant: dp)") in published.message
    assert solve_dp(p, Budget(objective="time"), options=options).plan.cp == 2
    # expert parallelism: the same-space DP reaches the optimum at ep 2, the published one is 8 % dearer at ep 1
    p = moe_problem()
    options = space_options(MEGATRON, p)
    d = solve_dp(p, Budget(objective="cost"), options=options)
    published = solve_dp(p, Budget(objective="cost"), options=options, knobs="published")
    assert d.plan.ep == 2 and published.plan.ep == 1
    assert published.objective_value > d.objective_value * 1.05
    assert "ep > 1" in published.message and "cp" not in published_lacks(p, options)[-1]


def test_published_lacks_names_only_what_the_space_has():
    p = INSTANCES["two-types"]
    assert published_lacks(p, SpaceOptions(recompute_modes=("none",))) == []
    assert published_lacks(p, SpaceOptions()) == ["recomputation selective/full"]
    fork = SpaceOptions(uniform_recompute=True, block_recompute=True, context_parallel_sizes=FASOP.context_parallel_sizes,
                        virtual_stages=FASOP.virtual_stages)
    assert published_lacks(p, fork) == ["recomputation selective/full", "block recomputation"]
    assert solve_dp(p, Budget(), options=SpaceOptions(recompute_modes=("none",)), knobs="published").message == ""


def test_block_recomputation_where_it_pays():
    """test_block_recompute's hand-found case: only block recomputation of the first 14 of 20 layers beats full; the
    same-space DP finds it, as brute force does."""
    from test_block_recompute import _block_pays

    p, options = _block_pays()
    ground = solve_exhaustive(p, Budget(objective="time"), options=options)
    d = solve_dp(p, Budget(objective="time"), options=options)
    assert d.plan.recompute_num_layers == ground.plan.recompute_num_layers == 14
    assert d.objective_value == pytest.approx(ground.objective_value, rel=1e-12)
    assert "block recomputation" in solve_dp(p, Budget(objective="time"), options=options, knobs="published").message
