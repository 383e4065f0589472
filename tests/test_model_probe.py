"""An interleaved candidate's model is tried before its sibling's positional bound (issue 14, item 3, round 8;
solver._model_probe, MODEL_PROBE_S). On the large pools the fronts of the time rows' queues are interleaved
candidates whose v = 1 sibling's positional bound costs 1-4 s of CPU each, while CP-SAT closes their models under the
incumbent's cut in about 0.1 s (GPT-3 175B time on mixed-pool-8k: 21 % gap at 9 s of CPU before, proven optimal in
8 s after; Llama-2 70B time under B on mixed-pool-3k: 38 % -> proven optimal; docs/benchmarks.md, round 8).
The answer must not change: brute force, and the same search without the probe, give the same optimum."""

from __future__ import annotations

import math

import optsearch.solver as solver_module
from optsearch.baselines.exhaustive import solve_exhaustive
from optsearch.candidates import SpaceOptions
from optsearch.solver import solve
from optsearch.spec import GpuSpec
from optsearch.spec.budget import Budget

from test_solver import MAX_PLANS, make_problem


def _instance():
    """Two types, only v = 3 plans (found by drawing test_interleaved's instances): the probe closes two of the
    three candidates whose models are solved, and the positional bound runs once instead of three times."""
    gpus = [GpuSpec(name="G0", memory_gib=40.0, peak_fp16_tflop_per_s=30.0, hbm_gbyte_per_s=300.0),
            GpuSpec(name="G1", memory_gib=4.0, peak_fp16_tflop_per_s=125.0, hbm_gbyte_per_s=300.0)]
    nodes = [dict(name="t0", gpu="G0", gpus_per_node=2, num_nodes_available=2, price_usd_per_node_hour=3.0259,
                  intra_node_link="nvlink", intra_node_gbyte_per_s=300.0, inter_node_gbit_per_s=400.0),
             dict(name="t1", gpu="G1", gpus_per_node=2, num_nodes_available=3, price_usd_per_node_hour=3.0597,
                  intra_node_link="nvlink", intra_node_gbyte_per_s=300.0, inter_node_gbit_per_s=10.0)]
    problem = make_problem(layers=6, hidden=512, heads=2, gbs=12, node_types=nodes, gpus=gpus, seq=512)
    return problem, SpaceOptions(micro_batch_sizes=(1,), max_stages=3, virtual_stages=(3,))


def test_interleaved_models_are_probed_before_the_positional_bound_same_optimum(monkeypatch):
    problem, options = _instance()
    budget = Budget(objective="time")
    truth = solve_exhaustive(problem, budget, options=options, max_plans=MAX_PLANS)
    probed = solve(problem, budget, solver="cpsat", options=options)
    monkeypatch.setattr(solver_module, "MODEL_PROBE_S", 0.0, raising=False)  # old code: no probe
    plain = solve(problem, budget, solver="cpsat", options=options)
    assert truth.status == probed.status == plain.status == "optimal"
    assert math.isclose(probed.objective_value, truth.objective_value, rel_tol=1e-6)
    assert math.isclose(plain.objective_value, truth.objective_value, rel_tol=1e-6)
    assert probed.stats.get("models_probed", 0) >= 1
    assert probed.stats["positional_bounded"] < plain.stats["positional_bounded"]
