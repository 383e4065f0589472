"""The H100 validation set (bench/validation/megatron-h100.csv, Megatron-LM README's weak-scaling table) and the two
CSV columns it needs: distributed_optimizer and flash_attention (the analytic profile's flash-attention option)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from optsearch.catalog import gpu_catalog, load_model
from optsearch.errors import ProfileError, SpecError
from optsearch.profile.analytic import AnalyticProfile
from optsearch.validate import load_runs, metrics, price

ROOT = Path(__file__).resolve().parents[1]
SET = ROOT / "bench/validation/megatron-h100.csv"
# README images/model_table.png (commit f2e5db40): size -> (tp, pp, dp, GPUs, batch, TFLOP/s per GPU)
TABLE = {
    "1.7b": (1, 1, 48, 48, 192, 408.8), "7.1b": (2, 1, 48, 96, 192, 465.9), "16b": (4, 1, 48, 192, 192, 489.1),
    "32b": (8, 1, 48, 384, 192, 459.6), "70b": (8, 2, 48, 768, 384, 419.7), "119b": (8, 4, 48, 1536, 768, 420.5),
    "177b": (8, 6, 48, 2304, 1152, 432.8), "314b": (8, 8, 48, 3072, 1536, 474.4),
    "462b": (8, 16, 48, 6144, 3072, 459.9),
}


def test_h100_set_rows_match_the_readme_table_and_the_flop_formula():
    """Nine rows; each plan is the table's row, each time Megatron's model-FLOP count (training.py,
    num_floating_point_operations at tag core_v0.8.0: 72 B s l h^2 (1 + s/6h + V/12lh) for this GPT) / GPUs x rate."""
    runs = load_runs(SET)
    assert [r.group.removeprefix("megatron-h100-") for r in runs] == list(TABLE)
    for run in runs:
        tp, pp, dp, gpus, batch, tflops = TABLE[run.group.removeprefix("megatron-h100-")]
        plan = run.plan
        assert (plan.tp, plan.pp, plan.dp, run.global_batch_size) == (tp, pp, dp, batch)
        assert plan.tp * plan.pp * plan.dp == gpus
        assert plan.distributed_optimizer and all(s.recompute == "selective" for s in plan.stages)
        assert run.flash_attention is True and run.sequence_parallel == (tp > 1) and run.precision == "bf16"
        model = load_model(run.model)
        s, h, lay, v = model.seq_length, model.hidden_size, model.num_layers, model.vocab_size
        assert (s, v) == (4096, 131072) and sum(st.num_layers for st in plan.stages) == lay
        flops = 72 * batch * s * lay * h * h * (1 + s / (6 * h) + v / (12 * lay * h))
        assert run.measured_s == pytest.approx(flops / (gpus * tflops * 1e12), abs=5e-5)


def test_h100_set_fits_and_ranks():
    """Every run fits (they ran); the model ranks them as measured. The bound on the ratios is the honest one today
    (0.89-1.52 with --overlap-grad-reduce priced; the runs also overlap the tp communication and the parameter all-gather, which the model prices exposed, docs/validation.md, "H100")."""
    rows = price(load_runs(SET))
    assert len(rows) == 9 and all(p.fits for p in rows)
    result = metrics(rows)
    assert result["spearman"] == pytest.approx(1.0)
    ratios = [p.predicted_s / p.run.measured_s for p in rows]
    assert all(0.85 <= r <= 1.8 for r in ratios), ratios


def test_flash_attention_column_lowers_every_prediction():
    runs = load_runs(SET)
    with_flash = price(runs)
    without = price([replace(r, flash_attention=None) for r in runs])
    assert all(a.predicted_s < b.predicted_s for a, b in zip(with_flash, without))


def test_flash_attention_saving_by_hand():
    """1.7B row's layer on an H100: a s^2 b / t = 16 x 4096^2 = 268,435,456 score elements x 10 B / 3350 GB/s
    = 0.80130 ms less forward, twice that less backward."""
    model = load_model(str(ROOT / "bench/validation/megatron-h100-1.7b.yaml"))
    gpus = {"H100-SXM-80GB": gpu_catalog()["H100-SXM-80GB"]}
    kind = model.kinds[0].name
    plain = AnalyticProfile(model=model, gpus=gpus).get("H100-SXM-80GB", kind, 1, 1)
    flash = AnalyticProfile(model=model, gpus=gpus, flash_attention=True).get("H100-SXM-80GB", kind, 1, 1)
    saving = 16 * 4096 * 4096 * 10 / 3350e9
    assert saving == pytest.approx(0.80130e-3, rel=1e-4)
    assert plain.forward_s - flash.forward_s == pytest.approx(saving, rel=1e-9)
    assert plain.backward_s - flash.backward_s == pytest.approx(2 * saving, rel=1e-9)
    with pytest.raises(ProfileError, match="flash_attention excludes"):
        AnalyticProfile(model=model, gpus=gpus, flash_attention=True, unfused_kernels=True).get(
            "H100-SXM-80GB", kind, 1, 1)


@pytest.mark.parametrize("column", ["flash_attention", "distributed_optimizer"])
def test_bad_flag_columns_name_the_field(tmp_path, column):
    text = SET.read_text().splitlines()
    header = text[0].split(",")
    row = text[1].split(",")
    row[header.index(column)] = "yes"
    bad = tmp_path / "bad.csv"
    bad.write_text("\n".join([text[0], ",".join(row)]) + "\n")
    with pytest.raises(SpecError, match=f"row 2 .*{column} = 'yes'"):
        load_runs(bad)


def test_calibrate_runs_refuse_mixed_flash_attention(tmp_path):
    """calibrate --runs prices every row with one profile: rows that disagree on flash_attention are refused."""
    from optsearch.problem import build_problem
    from optsearch.profile.calibrate import observations_from_runs

    header, first = SET.read_text().splitlines()[:2]
    cells = first.split(",")
    column = header.split(",").index("flash_attention")
    cells[0], other = "r2", list(cells)
    other[0], other[column] = "r3", "0"
    mixed = tmp_path / "mixed.csv"
    mixed.write_text("\n".join([header, first, ",".join(cells), ",".join(other)]) + "\n")
    for name in ("megatron-h100-1.7b.yaml", "dgx-h100.yaml"):
        (tmp_path / name).write_text((SET.parent / name).read_text())
    problem = build_problem(str(tmp_path / "megatron-h100-1.7b.yaml"), str(tmp_path / "dgx-h100.yaml"),
                            global_batch_size=192)
    same = tmp_path / "same.csv"
    same.write_text("\n".join([header, first, ",".join(cells)]) + "\n")
    observations, fitted = observations_from_runs(same, problem)
    assert len(observations) == 2 and fitted.profile.flash_attention is True
    with pytest.raises(SpecError, match=r"run r3: flash_attention = False, but run megatron-h100-1.7b-readme has True"):
        observations_from_runs(mixed, problem)
