"""Host time of an eager engine (analytic profile option `eager_engine`, CSV column of the same name): the
launch-bound roofline max(GPU, host) per forward pass, the engine's op count and repeated forward, the extra
tensor-parallel all-reduces the repeat makes, hand-computed. docs/cost-model.md section 14, "Host time of eager
engines"."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from optsearch.catalog import gpu_catalog, load_model
from optsearch.costmodel import layer_step_s, tp_allreduce_s
from optsearch.errors import ProfileError, SpecError
from optsearch.problem import build_problem
from optsearch.profile.analytic import (
    EAGER_ENGINES,
    HOST_S_PER_TORCH_OP,
    AnalyticProfile,
    eager_layer_times_s,
    gpu_layer_forward_s,
    host_forward_s,
    head_forward_s,
    layer_forward_s,
    megatron_head_times_s,
)
from optsearch.validate import load_runs, price

ROOT = Path(__file__).resolve().parents[1]
AMP = EAGER_ENGINES["amp-megatron-v1.1.5"]

# GPT-2 medium (s 1024, h 1024, 16 heads, f 4h), micro-batch 1: 24 b s h^2 + 4 b s^2 h = 28 x 2^30 FLOPs per layer
LAYER_FLOPS = 28 * 2**30
SCORE_ELEMENTS = 16 * 1024**2  # a s^2 b at tp 1


def test_per_op_host_time_and_op_counts():
    # BERT-base host-bound at 11.26 ms for 12 x 29 + 18 = 366 torch calls: 30.77 us per call
    assert HOST_S_PER_TORCH_OP == pytest.approx(11.26e-3 / 366)
    assert HOST_S_PER_TORCH_OP == pytest.approx(30.765e-6, rel=1e-4)
    assert (AMP.layer_ops, AMP.tp_call_ops, AMP.forward_passes) == (45, 3, 2)
    assert host_forward_s(AMP, 1) == pytest.approx(45 * 11.26e-3 / 366)  # 1.384 ms
    # tp > 1: two all-reduce calls per pass, each all_reduce + two torch.cuda.synchronize(): 45 + 6 = 51 ops
    assert host_forward_s(AMP, 2) == pytest.approx(51 * 11.26e-3 / 366)  # 1.569 ms
    assert host_forward_s(AMP, 8) == host_forward_s(AMP, 2)  # host work does not shrink with tp


def test_gpu_bound_t4_layer_runs_its_forward_twice():
    model, gpus = load_model("gpt2-medium"), gpu_catalog()
    kind, t4 = model.kinds[0], gpus["T4"]
    # T4: 24 TFLOP/s sustained, 320 GB/s. compute 28 x 2^30 / 24e12 + 41 us; traffic 2 s b h (10 + 24 + 5 a s / h)
    # = 2 x 2^20 x 114 = 239,075,328 B
    gpu = LAYER_FLOPS / 24e12 + 41e-6 + 239_075_328 / 320e9  # 2.0407 ms
    assert gpu_layer_forward_s(model, kind, t4, 1, 1) == pytest.approx(gpu, rel=1e-12)
    launches = 20 * 5e-6  # KERNELS_PER_LAYER x KERNEL_LAUNCH_S, the default's host share
    assert gpu_layer_forward_s(model, kind, t4, 1, 1) == pytest.approx(layer_forward_s(model, kind, t4, 1, 1) - launches)
    fwd, bwd = eager_layer_times_s(model, kind, t4, 1, 1, AMP, unfused=False)
    assert fwd == pytest.approx(2 * gpu, rel=1e-12)  # GPU-bound (2.04 ms > 1.38 ms), twice: 4.08 ms
    assert bwd == pytest.approx(2 * gpu, rel=1e-12)  # the backward runs once
    # with the unfused scale-mask-softmax: + 7 B per score element in each forward pass, + 3 B in the backward
    fwd, bwd = eager_layer_times_s(model, kind, t4, 1, 1, AMP, unfused=True)
    assert fwd == pytest.approx(2 * (gpu + 7 * SCORE_ELEMENTS / 320e9), rel=1e-12)  # 4.82 ms
    assert bwd == pytest.approx(2 * gpu + 3 * SCORE_ELEMENTS / 320e9, rel=1e-12)


def test_v100_layer_is_host_bound_at_micro_batch_1_and_gpu_bound_at_2():
    model, gpus = load_model("gpt2-medium"), gpu_catalog()
    kind, v100 = model.kinds[0], gpus["V100-16GB"]
    host = 45 * 11.26e-3 / 366  # 1.384 ms, whatever the micro-batch
    # V100: 94.84 TFLOP/s sustained, 900 GB/s; unfused: + 7 B per score element
    gpu1 = LAYER_FLOPS / 94.84e12 + 41e-6 + 239_075_328 / 900e9 + 7 * SCORE_ELEMENTS / 900e9  # 0.754 ms
    fwd, _ = eager_layer_times_s(model, kind, v100, 1, 1, AMP, unfused=True)
    assert gpu1 < host and fwd == pytest.approx(2 * host, rel=1e-12)  # 2.77 ms
    gpu2 = 2 * LAYER_FLOPS / 94.84e12 + 41e-6 + 2 * 239_075_328 / 900e9 + 14 * SCORE_ELEMENTS / 900e9  # 1.467 ms
    fwd, _ = eager_layer_times_s(model, kind, v100, 1, 2, AMP, unfused=True)
    assert gpu2 > host and fwd == pytest.approx(2 * gpu2, rel=1e-12)


def test_host_bound_h100_layer_takes_the_host_time():
    model, gpus = load_model("gpt2-medium"), gpu_catalog()
    kind, h100 = model.kinds[0], gpus["H100-SXM-80GB"]
    # tp 4: 7 x 2^30 FLOPs / 732e12 + 41 us; traffic 2 x 2^20 x (10 + 6 + 20) = 75,497,472 B at 3350 GB/s: 73.8 us
    gpu = LAYER_FLOPS / 4 / 732e12 + 41e-6 + 75_497_472 / 3350e9
    assert gpu == pytest.approx(73.80e-6, rel=1e-3)
    fwd, bwd = eager_layer_times_s(model, kind, h100, 4, 1, AMP, unfused=False)
    assert fwd == pytest.approx(2 * 51 * 11.26e-3 / 366, rel=1e-12)  # host-bound: 2 x 1.569 ms
    assert bwd == pytest.approx(2 * gpu, rel=1e-9)


def test_profile_option_default_unchanged_and_unknown_engine_refused():
    model, gpus = load_model("gpt2-medium"), gpu_catalog()
    default = AnalyticProfile(model=model, gpus=gpus)
    fwd = layer_forward_s(model, model.kinds[0], gpus["T4"], 2, 1)
    base = default.get("T4", "layer", 2, 1)
    assert (base.forward_s, base.backward_s, base.forward_repeats) == (fwd, 2 * fwd, 1)
    eager = replace(default, eager_engine="amp-megatron-v1.1.5", unfused_kernels=True)
    entry = eager.get("T4", "layer", 2, 1)
    assert (entry.forward_s, entry.backward_s) == pytest.approx(
        eager_layer_times_s(model, model.kinds[0], gpus["T4"], 2, 1, AMP, unfused=True))
    assert entry.forward_repeats == 2 and not entry.tp_comm_included
    # the embedding is a single spec of the pipeline: unchanged; the head keeps head_forward_s under the eager engine
    # and takes Megatron-LM's cross entropy without it (docs/cost-model.md section 4b)
    assert eager.get("T4", "embedding", 2, 1) == default.get("T4", "embedding", 2, 1)
    head = head_forward_s(model, gpus["T4"], 2, 1)
    assert (eager.get("T4", "head", 2, 1).forward_s, eager.get("T4", "head", 2, 1).backward_s) == (head, 2 * head)
    assert (default.get("T4", "head", 2, 1).forward_s, default.get("T4", "head", 2, 1).backward_s) == \
        megatron_head_times_s(model, gpus["T4"], 2, 1)
    with pytest.raises(ProfileError, match="unknown eager engine 'pytorch-9'"):
        replace(default, eager_engine="pytorch-9").get("T4", "layer", 1, 1)


def test_repeated_forward_prices_its_tp_allreduces():
    problem = build_problem("gpt2-medium", "amp-g4dn", profile="analytic", global_batch_size=32)
    eager = replace(problem, profile=replace(problem.profile, eager_engine="amp-megatron-v1.1.5"))
    node = "g4dn.12xlarge"
    kind = problem.model.kinds[0]
    ar = tp_allreduce_s(problem, node, 2, 1)
    entry = eager.profile.get("T4", "layer", 2, 1)
    # attention + MLP blocks: forward x 2 + backward = 3 passes -> 6 all-reduces (4 without the repeat)
    assert layer_step_s(eager, node, kind, 2, 1, "none") == pytest.approx(entry.forward_s + entry.backward_s + 6 * ar)
    plain = problem.profile.get("T4", "layer", 2, 1)
    assert layer_step_s(problem, node, kind, 2, 1, "none") == pytest.approx(plain.forward_s + plain.backward_s + 4 * ar)
    # full recomputation runs the (repeated) forward again: 2 x 2 forward passes + backward = 5 -> 10 all-reduces
    assert layer_step_s(eager, node, kind, 2, 1, "full") == pytest.approx(
        2 * entry.forward_s + entry.backward_s + 10 * ar)


HEADER = ("run_id,group,source,model,cluster,global_batch_size,tp,dp,micro_batch_size,stages,"
          "measured_iteration_s,oom,precision,eager_engine\n")


def test_validation_column_sets_the_engine(tmp_path):
    runs_csv = tmp_path / "runs.csv"
    runs_csv.write_text(HEADER + "".join(
        f"r{i},g,test,gpt2-medium,amp-g4dn,32,1,16,1,g4dn.12xlarge:24,1.3,0,fp16,{e}\n"
        for i, e in enumerate(["amp-megatron-v1.1.5", ""])))
    runs = load_runs(runs_csv)
    assert [r.eager_engine for r in runs] == ["amp-megatron-v1.1.5", None]
    eager, default = (p.predicted_s for p in price(runs))
    # dp 16, pp 1, micro-batch 1, 2 micro-batches: 24 layers x 2 micro-batches, each layer's forward now
    # 2 x (GPU forward) instead of GPU forward + 20 launches of 5 us; the backward loses the launches too
    model, t4 = load_model("gpt2-medium"), gpu_catalog()["T4"]
    gpu = gpu_layer_forward_s(model, model.kinds[0], t4, 1, 1)
    old_step = 3 * (gpu + 100e-6)
    # the engine's pipeline (DeepSpeed 0.3.13, docs/cost-model.md section 6c) also changes the optimizer step and
    # adds the gradient bucket's memory passes; the layer times are this test's part
    from optsearch.costmodel import deepspeed_bucket_s, deepspeed_optimizer_step_s, stage_parameters

    problem = build_problem("gpt2-medium", "amp-g4dn", profile="analytic", global_batch_size=32)
    params = stage_parameters(model, {"layer": 24}, True, True, 1)
    node = "g4dn.12xlarge"
    # the default (Megatron) path's step carries its buffer passes (section 8b; the rows are fp16, a 16-bit buffer,
    # dp 16: 4 passes x 2 B) and its head Megatron's cross entropy (section 4b), 2 micro-batches of it
    head = head_forward_s(model, t4, 1, 1)
    engine = (deepspeed_optimizer_step_s(problem, node, params, 24 * 12 + 4, 1) - params * (28 + 8) / 320e9
              + deepspeed_bucket_s(problem, node, params, 1, 16)
              + 2 * (3 * head - sum(megatron_head_times_s(model, t4, 1, 1))))
    assert eager - default == pytest.approx(24 * 2 * (4 * gpu - old_step) + engine, rel=1e-6)


def test_validation_column_rejects_unknown_engines(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text(HEADER + "r1,g,test,gpt2-medium,amp-g4dn,32,1,16,1,g4dn.12xlarge:24,1.3,0,fp16,deepspeed\n")
    with pytest.raises(SpecError, match=r"row 2 \(r1\): eager_engine = 'deepspeed': must be empty or one of "
                                        r"amp-megatron-v1.1.5"):
        load_runs(bad)


def test_shipped_amp_sets_name_the_engine():
    for name in ("amp-g4dn.csv", "amp-p3-g4dn.csv"):
        runs = load_runs(ROOT / "bench" / "validation" / name)
        assert {r.eager_engine for r in runs} == {"amp-megatron-v1.1.5"}


def test_calibrate_runs_take_the_engine_and_refuse_mixed_engines(tmp_path):
    from optsearch.profile.calibrate import observations_from_runs

    problem = build_problem("gpt2-medium", "amp-g4dn", profile="analytic", global_batch_size=32)
    same = tmp_path / "same.csv"
    same.write_text(HEADER + "".join(
        f"r{i},g,test,gpt2-medium,amp-g4dn,32,1,16,1,g4dn.12xlarge:24,1.3,0,fp16,amp-megatron-v1.1.5\n"
        for i in range(2)))
    observations, fitted = observations_from_runs(same, problem)
    assert len(observations) == 2 and fitted.profile.eager_engine == "amp-megatron-v1.1.5"
    mixed = tmp_path / "mixed.csv"
    mixed.write_text(HEADER + "r1,g,test,gpt2-medium,amp-g4dn,32,1,16,1,g4dn.12xlarge:24,1.3,0,fp16,amp-megatron-v1.1.5\n"
                     "r2,g,test,gpt2-medium,amp-g4dn,32,1,16,1,g4dn.12xlarge:24,1.3,0,fp16,\n")
    with pytest.raises(SpecError, match=r"run r2: precision, sequence_parallel, grad_reduce_in_fp32, unfused_kernels, "
                                        r"eager_engine = .*None\), but run r1 has .*'amp-megatron-v1.1.5'\)"):
        observations_from_runs(mixed, problem)
