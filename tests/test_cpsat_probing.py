"""CP-SAT without presolve probing (cp_model_probing_level 0, the default here until 2026-11-23) returned OPTIMAL at
a worse point than a feasible one. Found by an extended property run (tests/test_kinds_bound.py, hypothesis seed 47):
a two-kind model (1 encoder + 2 decoder layers, sequence 4096) on one 40 GiB GPU, minimize cost. The candidate at
micro-batch 4 has the plan with no recomputation (21.3 of 36 GiB, 0.5536 s per iteration); the model came back
"optimal" with selective recomputation (0.6185 s), and with the mode fixed to none CP-SAT found 0.5536 s under the
same parameters. With CP-SAT's default probing, or presolve off, it gives 0.5536 s. The root cause was presolve's
inclusion detection (google/or-tools#5293), now off at every probing level: tests/test_cpsat_inclusion.py."""

from __future__ import annotations

from optsearch.candidates import SpaceOptions, node_uses
from optsearch.formulation.cpsat import CpSat
from optsearch.formulation.milp import PulpCbc
from optsearch.formulation.model import Candidate, build, decode, skeleton
from optsearch.problem import Problem
from optsearch.profile import AnalyticProfile
from optsearch.spec import ClusterSpec, GpuSpec, JobSpec, LayerKindSpec, ModelSpec, NodeTypeSpec
from optsearch.spec.budget import Budget


def tight_two_kind_problem(hidden_size: int, memories_gib: list[float]) -> tuple[Problem, SpaceOptions]:
    """A T5-like model (1 encoder + 2 cross-attention decoder layers, sequence 4096) on one-GPU node types of the
    given memories, in the space where both wrong CP-SAT optima showed (one stage, uniform and block recomputation)."""
    job = JobSpec(global_batch_size=4, train_iterations=1000, precision="bf16", optimizer="adam",
                  distributed_optimizer=False)
    model = ModelSpec(name="tight", num_layers=3, hidden_size=hidden_size, num_attention_heads=8,
                      ffn_hidden_size=4 * hidden_size, seq_length=4096, vocab_size=8000, tied_embeddings=True,
                      position_embedding="learned", bias=True, norm="layernorm", default_job=job,
                      layer_kinds=[LayerKindSpec(name="enc", num_layers=1, cross_attention=False),
                                   LayerKindSpec(name="dec", num_layers=2, cross_attention=True)])
    gpus = [GpuSpec(name=f"G{i}", memory_gib=gib, peak_fp16_tflop_per_s=65.0, hbm_gbyte_per_s=600.0)
            for i, gib in enumerate(memories_gib)]
    cluster = ClusterSpec(name="tight", gpus=gpus, node_types=[NodeTypeSpec(
        name=f"t{i}", gpu=f"G{i}", gpus_per_node=1, num_nodes_available=1, price_usd_per_node_hour=1.0,
        intra_node_link="nvlink", intra_node_gbyte_per_s=32.0, inter_node_gbit_per_s=40.0, collective_latency="nccl")
        for i in range(len(gpus))])
    by_name = {g.name: g for g in gpus}
    problem = Problem(model=model, cluster=cluster, job=job, gpus=by_name,
                      profile=AnalyticProfile(model=model, gpus=by_name, name="analytic"), memory_headroom=0.1)
    options = SpaceOptions(micro_batch_sizes=(1, 2, 4), recompute_modes=("none", "selective", "full"), max_stages=1,
                           uniform_recompute=True, block_recompute=True, context_parallel_sizes=(1,),
                           virtual_stages=(1,))
    return problem, options


def _problem() -> tuple[Problem, SpaceOptions]:
    return tight_two_kind_problem(1536, [40.0])


def test_the_candidates_model_gives_its_best_plan_on_cpsat():
    problem, options = _problem()
    cand = Candidate(tp=1, dp=1, micro_batch_size=4, pp=1, uses=tuple(node_uses(problem, 1, 1, 4)))
    f = build(problem, Budget(objective="cost"), cand, options, skel=skeleton(problem, cand, options))
    sol = CpSat().solve(f.lm, 30)
    assert sol.status == "optimal"
    assert [s.recompute for s in decode(f, sol).stages] == ["none"]
    cbc = PulpCbc().solve(f.lm, 30)  # the same model on the other backend
    assert cbc.status == "optimal" and abs(sol.objective - cbc.objective) <= 1e-6 * cbc.objective
