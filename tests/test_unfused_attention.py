"""The analytic profile's unfused-attention term (profile option `unfused_kernels`, CSV column of the same name):
hand-computed bytes per attention-score element, the default left unchanged, and the validation column.
docs/cost-model.md section 2, "Unfused attention kernels"."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from optsearch.catalog import gpu_catalog, load_model
from optsearch.errors import SpecError
from optsearch.profile.analytic import (
    AnalyticProfile,
    attention_score_elements,
    layer_forward_s,
    unfused_attention_extra_s,
)
from optsearch.validate import load_runs, price

ROOT = Path(__file__).resolve().parents[1]


def test_unfused_extra_by_hand_gpt2_medium_t4_tp2():
    model, gpus = load_model("gpt2-medium"), gpu_catalog()
    kind = model.kinds[0]
    # a s^2 b / tp = 16 x 1024^2 x 1 / 2 = 8,388,608 score elements on one GPU
    assert attention_score_elements(model, kind, 1, 2) == 8_388_608
    fwd, bwd = unfused_attention_extra_s(model, kind, gpus["T4"], 2, 1)
    # (17 - 10) B x 8,388,608 / 320e9 B/s and (23 - 20) B x 8,388,608 / 320e9 B/s
    assert fwd == pytest.approx(58_720_256 / 320e9, rel=1e-12)  # 183.5 us
    assert bwd == pytest.approx(25_165_824 / 320e9, rel=1e-12)  # 78.6 us
    # micro-batch 4 on a V100 (900 GB/s), tp 1: 16 x 1024^2 x 4 = 67,108,864 elements
    fwd, bwd = unfused_attention_extra_s(model, kind, gpus["V100-16GB"], 1, 4)
    assert fwd == pytest.approx(7 * 67_108_864 / 900e9, rel=1e-12)
    assert bwd == pytest.approx(3 * 67_108_864 / 900e9, rel=1e-12)


def test_cross_attention_kind_counts_its_second_score_matrix():
    model = load_model("t5-fasop")  # 32 heads, sequence 512
    kinds = {k.name: k for k in model.kinds}
    assert attention_score_elements(model, kinds["encoder"], 2, 4) == 32 * 512 * 512 * 2 / 4
    assert attention_score_elements(model, kinds["decoder"], 2, 4) == 2 * 32 * 512 * 512 * 2 / 4


def test_profile_option_adds_the_term_and_the_default_is_unchanged():
    model, gpus = load_model("gpt2-medium"), gpu_catalog()
    default = AnalyticProfile(model=model, gpus=gpus)
    unfused = replace(default, unfused_kernels=True)
    base = default.get("T4", "layer", 2, 1)
    fwd = layer_forward_s(model, model.kinds[0], gpus["T4"], 2, 1)
    assert base.forward_s == fwd and base.backward_s == 2 * fwd  # default: the roofline as before
    entry = unfused.get("T4", "layer", 2, 1)
    assert entry.forward_s - base.forward_s == pytest.approx(58_720_256 / 320e9, rel=1e-9)
    assert entry.backward_s - base.backward_s == pytest.approx(25_165_824 / 320e9, rel=1e-9)
    assert not entry.tp_comm_included
    # the embedding and the head have no score matrix
    assert unfused.get("T4", "embedding", 2, 1) == default.get("T4", "embedding", 2, 1)
    assert unfused.get("T4", "head", 2, 1) == default.get("T4", "head", 2, 1)


HEADER = ("run_id,group,source,model,cluster,global_batch_size,tp,dp,micro_batch_size,stages,"
          "measured_iteration_s,oom,precision,unfused_kernels\n")


def test_validation_column_prices_the_unfused_engine_slower(tmp_path):
    stages = ",".join(["g4dn.12xlarge:3"] * 8)
    runs_csv = tmp_path / "runs.csv"
    rows = [f"r{i},g,test,gpt2-medium,amp-g4dn,32,1,2,1,\"{stages}\",1.2,0,fp16,{flag}\n"
            for i, flag in enumerate(["1", "0", ""])]
    runs_csv.write_text(HEADER + "".join(rows))
    runs = load_runs(runs_csv)
    assert [r.unfused_kernels for r in runs] == [True, False, None]
    unfused, fused, default = (p.predicted_s for p in price(runs))
    assert fused == default
    # 8 equal stages of 3 layers at micro-batch 1, 16 micro-batches: the pipeline's critical path holds
    # 16 + 8 - 1 = 23 forward + backward slots of one stage, each layer 16 x 1024^2 x (7 + 3) B / 320e9 B/s slower
    per_layer = 16 * 1024**2 * 10 / 320e9  # 524.288 us
    assert unfused - default == pytest.approx(23 * 3 * per_layer, rel=1e-6)  # 36.18 ms


def test_validation_column_rejects_bad_values(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text(HEADER + "r1,g,test,gpt2-medium,amp-g4dn,32,1,16,1,g4dn.12xlarge:24,1.3,0,fp16,yes\n")
    with pytest.raises(SpecError, match=r"row 2 \(r1\): unfused_kernels = 'yes': must be 1, 0 or empty"):
        load_runs(bad)


def test_shipped_amp_sets_say_unfused():
    for name in ("amp-g4dn.csv", "amp-p3-g4dn.csv"):
        runs = load_runs(ROOT / "bench" / "validation" / name)
        assert {r.unfused_kernels for r in runs} == {True}
