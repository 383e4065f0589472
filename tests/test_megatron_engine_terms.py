"""Megatron-LM's engine costs on the Megatron path only (docs/cost-model.md sections 4b and 8b, issue 15): the
unfused cross entropy's passes over the fp32 logits, and the per-iteration passes over the gradient buffer. Hand-
computed numbers on the toy specs of test_costmodel; the eager engine's path (section 6c) stays as it was."""
from __future__ import annotations

from pathlib import Path

import pytest
from test_costmodel import GPU_X, GPUS, approx, plan, toy_model, toy_problem

from optsearch import costmodel as cm
from optsearch.profile import analytic
from optsearch.profile.analytic import AnalyticProfile, head_forward_s, megatron_head_times_s
from optsearch.spec import JobSpec
from optsearch.spec.model import HEAD_KIND

VALIDATION = Path(__file__).resolve().parents[1] / "bench" / "validation"

# toy_model on GPU_X (1e14 FLOP/s peak, sustained 7.5e13, 1e12 B/s): 2 b s h V = 2e10 FLOPs, b s V = 1e7 logits
GEMM_S = 2e10 / 7.5e13 + 41e-6 + 6 * 5e-6  # the head GEMM with its fixed time and 6 launches


def test_megatron_head_forward_and_backward_by_hand():
    fwd, bwd = megatron_head_times_s(toy_model(), GPU_X, 1, 1)
    assert fwd == approx(GEMM_S + 38 * 1e7 / 1e12)  # 3.8e-4 s of loss passes
    assert bwd == approx(2 * GEMM_S + 14 * 1e7 / 1e12)  # 1.4e-4 s
    # tp 2: the GEMM's FLOPs and the logits both halve (1e10 FLOPs, 5e6 elements)
    fwd2, bwd2 = megatron_head_times_s(toy_model(), GPU_X, 2, 1)
    gemm2 = 1e10 / 7.5e13 + 41e-6 + 3e-5
    assert (fwd2, bwd2) == (approx(gemm2 + 1.9e-4), approx(2 * gemm2 + 7e-5))
    # against head_forward_s's 12 B forward (x 2 backward): +26 B forward, -10 B backward, +16 B per logit in all
    old = head_forward_s(toy_model(), GPU_X, 1, 1)
    assert fwd + bwd - 3 * old == approx(16 * 1e7 / 1e12)


def test_analytic_head_row_is_megatron_unless_an_eager_engine():
    megatron = AnalyticProfile(model=toy_model(), gpus=GPUS).get("X", HEAD_KIND, 1, 1)
    assert (megatron.forward_s, megatron.backward_s) == tuple(approx(t) for t in
                                                              megatron_head_times_s(toy_model(), GPU_X, 1, 1))
    eager = AnalyticProfile(model=toy_model(), gpus=GPUS, eager_engine="amp-megatron-v1.1.5").get("X", HEAD_KIND, 1, 1)
    old = head_forward_s(toy_model(), GPU_X, 1, 1)
    assert (eager.forward_s, eager.backward_s) == (old, analytic.BACKWARD_OVER_FORWARD * old)


def test_grad_buffer_passes_by_hand():
    p = toy_problem()  # bf16 job: fp32 gradient buffer, 4 B per element
    # 5e7 local gradients; dp 4: zero 4 + norm 4 + scale 8 = 16 B -> 8e-4 s at 1e12 B/s; dp 1: no scale, 8 B -> 4e-4
    assert cm.grad_buffer_passes_s(p, "fast", 5e7, 4) == approx(8e-4)
    assert cm.grad_buffer_passes_s(p, "fast", 5e7, 1) == approx(4e-4)
    assert cm.grad_buffer_passes_s(p, "slow", 5e7, 4) == approx(1.6e-3)  # 5e11 B/s
    fp16 = toy_problem(job=JobSpec(global_batch_size=8, train_iterations=1000, precision="fp16"))
    assert cm.gradient_bytes(fp16.job) == 2
    assert cm.grad_buffer_passes_s(fp16, "fast", 5e7, 4) == approx(4e-4)  # 16-bit buffer: 8 B


def test_optimizer_s_carries_the_whole_buffer_passes():
    p = toy_problem()
    # 1e8 / tp 2 = 5e7 per GPU: Adam 5e7 x 28 / 1e12 = 1.4e-3, + buffer 5e7 x 16 / 1e12 = 8e-4
    assert cm.optimizer_s(p, "fast", 1e8, 2, 4) == approx(2.2e-3)
    # distributed optimizer: Adam over 1/dp (3.5e-4); the buffer is zeroed, checked and scaled whole (8e-4)
    assert cm.optimizer_s(p, "fast", 1e8, 2, 4, 1, True) == approx(1.15e-3)
    # dp 1, cp 2: scaled by 1/(dp x cp) = 1/2, so the scale pass is there
    assert cm.optimizer_s(p, "fast", 1e8, 2, 1, 2) == approx(1.4e-3 + 8e-4)
    assert cm.optimizer_s(p, "fast", 1e8, 2, 1, 1) == approx(1.4e-3 + 4e-4)
    # the step stays linear in the parameters (the formulation and the bounds use its per-parameter rate)
    assert cm.optimizer_s(p, "slow", 3e8, 2, 4) == approx(3 * cm.optimizer_s(p, "slow", 1e8, 2, 4))


def test_expert_optimizer_step_carries_its_buffer_passes():
    p = toy_problem()
    # 8e8 expert params / (tp 2 x ep 4) = 1e8 local: Adam 1e8 x 28 / 1e12 = 2.8e-3; buffer dp 4: 1e8 x 16 = 1.6e-3
    assert cm.expert_optimizer_step_s(p, "fast", 8e8, 2, 4, 4) == approx(4.4e-3)
    assert cm.expert_optimizer_step_s(p, "fast", 0.0, 2, 4, 4) == 0.0


def test_estimate_adds_the_passes_once_per_iteration():
    # test_costmodel's two-stage plan: the stage's step is Adam + the buffer passes, and the iteration takes the max
    est = cm.estimate(toy_problem(), plan(1, 2, 1, ("fast", 2), ("slow", 2)))
    s0, s1 = est.stages
    assert s0.optimizer_s == approx(34_004_000 * 28 / 1e12 + 34_004_000 * 16 / 1e12)
    assert s1.optimizer_s == approx(34_005_000 * 28 / 5e11 + 34_005_000 * 16 / 5e11)
    assert est.iteration_time_s == approx(est.pipeline_time_s + est.dp_allreduce_s + est.embedding_allreduce_s
                                          + s1.optimizer_s)


def _price_first(set_name: str):
    from optsearch.validate import load_runs, price

    runs = load_runs(VALIDATION / f"{set_name}.csv")
    return runs[0], price(runs[:1])[0].predicted_s


@pytest.mark.skipif(not (VALIDATION / "amp-g4dn.csv").exists(), reason="bench/validation not present")
def test_eager_engine_path_is_untouched(monkeypatch):
    """An AMP row (eager_engine amp-megatron-v1.1.5, DeepSpeed's step and head) prices the same with both terms off;
    a Megatron row (megatron-h100 1.7B) does not."""
    _, amp = _price_first("amp-g4dn")
    _, h100 = _price_first("megatron-h100")
    monkeypatch.setattr(cm, "grad_buffer_passes_s", lambda *args, **kwargs: 0.0)
    monkeypatch.setattr(analytic, "megatron_head_times_s",
                        lambda model, gpu, tp, b: (head_forward_s(model, gpu, tp, b),
                                                   analytic.BACKWARD_OVER_FORWARD * head_forward_s(model, gpu, tp, b)))
    _, amp_off = _price_first("amp-g4dn")
    _, h100_off = _price_first("megatron-h100")
    assert amp == amp_off
    assert h100 > h100_off * 1.03  # 0.4114 against 0.3928 s: the two terms, 4.7 % of the row
