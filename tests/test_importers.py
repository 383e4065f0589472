"""Importers of published profiles (FASOP, Metis, Aceso): exact values against the raw files, round trips, errors."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from optsearch.costmodel import estimate
from optsearch.errors import ProfileError, SpecError
from optsearch.plan import Plan, Stage
from optsearch.problem import build_problem
from optsearch.profile import load_table
from optsearch.profile.importers import import_aceso, import_fasop, import_metis, import_profile

ANCHORS = Path(__file__).resolve().parents[2] / "shared" / "anchors"
FASOP = ANCHORS / "fasop" / "known_cost"
METIS = ANCHORS / "metis"
ACESO = ANCHORS / "aceso" / "profiled-time-eurosys"

def needs_anchors(test):
    """Tests that read ../shared/anchors: marked `anchors`, skipped when the folder is absent."""
    skip = pytest.mark.skipif(not ANCHORS.is_dir(), reason=f"reference data not found at {ANCHORS}")
    return pytest.mark.anchors(skip(test))


def _aceso_ops(path: Path) -> list[tuple[str, float, float, float]]:
    with path.open() as fh:
        return [
            (r["op_name"], float(r["forward-compute"]), float(r["backward-compute"]), float(r["activations"]))
            for r in csv.DictReader(fh)
        ]


# ---- FASOP -------------------------------------------------------------------------------------------------------
@needs_anchors
def test_fasop_gpt2xl_values_are_the_raw_forward_times_and_twice_them():
    table = import_fasop(FASOP, "gpt2-xl")
    for token, gpu in (("A10", "A10G"), ("A100", "A100-SXM-40GB")):
        for tp in (1, 2, 4):
            arr = np.load(FASOP / f"gpt2XL_{token}_{tp}.npy")
            for kind, fwd in (("embedding", arr[0]), ("layer", arr[1]), ("head", arr[-1])):
                entry = table.get(gpu, kind, tp, 1)
                assert entry.forward_s == fwd, (gpu, kind, tp)
                assert entry.backward_s == 2 * fwd, (gpu, kind, tp)
                assert entry.tp_comm_included and entry.activation_bytes is None
    assert not table.has("A10G", "layer", 1, 2)  # FASOP publishes micro-batch 1 only
    assert table.metadata["gpus"] == "A10 -> A10G, A100 -> A100-SXM-40GB"


@needs_anchors
def test_fasop_bert_layers_are_identical_so_no_spread_is_recorded():
    table = import_fasop(FASOP, "bert-large")
    arr = np.load(FASOP / "bert_A10_2.npy")
    assert table.get("A10G", "layer", 2, 1).forward_s == arr[5]
    assert not [k for k in table.metadata if k.startswith("spread")]


@needs_anchors
def test_fasop_t5_mapping_keeps_the_sum_over_all_modules():
    table = import_fasop(FASOP, "t5-fasop")
    for token, gpu in (("A10", "A10G"), ("A100", "A100-SXM-40GB")):
        for tp in (1, 2, 4):
            arr = np.load(FASOP / f"T5_{token}_{tp}.npy")
            get = lambda kind: table.get(gpu, kind, tp, 1).forward_s  # noqa: E731
            assert get("embedding") == pytest.approx(arr[0] + arr[25], rel=1e-12)
            assert get("encoder") == arr[1]
            assert get("decoder") == arr[26]
            total = get("embedding") + 24 * get("encoder") + 24 * get("decoder") + get("head")
            assert total == pytest.approx(arr.sum(), rel=1e-12)
            assert get("head") == pytest.approx((arr[24] - arr[1]) + (arr[49] - arr[26]), rel=1e-9)
            assert get("head") > 0


@needs_anchors
def test_fasop_gpu_map_override_and_unknown_gpu(tmp_path):
    table = import_profile("fasop", FASOP, "gpt2-xl", "A100=A100-SXM-80GB")
    assert table.gpus() == {"A100-SXM-80GB", "A10G"}
    shutil.copy(FASOP / "gpt2XL_A10_1.npy", tmp_path / "gpt2XL_H100_1.npy")
    with pytest.raises(ProfileError, match=r"gpt2XL_H100_1\.npy: GPU 'H100' has no catalog name; give --gpu-map"):
        import_fasop(tmp_path, "gpt2-xl")
    with pytest.raises(SpecError, match=r"--gpu-map A10=Nope: 'Nope' is not a catalog GPU"):
        import_profile("fasop", FASOP, "gpt2-xl", "A10=Nope")


@needs_anchors
def test_fasop_wrong_model_length_names_the_file(tmp_path):
    shutil.copy(FASOP / "bert_A10_1.npy", tmp_path / "gpt2XL_A10_1.npy")
    with pytest.raises(ProfileError, match=r"gpt2XL_A10_1\.npy: 26 entries but gpt2-xl needs 50"):
        import_fasop(tmp_path, "gpt2-xl")


def test_fasop_missing_and_unreadable_files_name_the_file(tmp_path):
    with pytest.raises(ProfileError, match=r"gpt2XL_A10_1\.npy: missing"):
        import_fasop(tmp_path, "gpt2-xl")
    (tmp_path / "gpt2XL_A10_1.npy").write_text("not an array")
    with pytest.raises(ProfileError, match=r"gpt2XL_A10_1\.npy: not a readable \.npy array"):
        import_fasop(tmp_path, "gpt2-xl")
    np.save(tmp_path / "gpt2XL_A10_1.npy", np.zeros((2, 2)))
    with pytest.raises(ProfileError, match=r"gpt2XL_A10_1\.npy: expected a 1-D float array"):
        import_fasop(tmp_path, "gpt2-xl")
    with pytest.raises(ProfileError, match=r"nowhere: not a folder"):
        import_fasop(tmp_path / "nowhere", "gpt2-xl")
    with pytest.raises(ProfileError, match=r"FASOP publishes tables for gpt2-xl, bert-large, t5-fasop only"):
        import_fasop(tmp_path, "llama2-7b")


def test_fasop_unequal_layers_take_the_median_and_record_the_spread(tmp_path):
    arr = np.full(50, 2e-3)
    arr[0], arr[-1], arr[7] = 3e-4, 2e-3, 2.2e-3
    np.save(tmp_path / "gpt2XL_A10_1.npy", arr)
    table = import_fasop(tmp_path, "gpt2-xl")
    assert table.get("A10G", "layer", 1, 1).forward_s == 2e-3
    assert "spread gpt2XL_A10_1.npy layer" in table.metadata
    assert "spread 10.00%" in table.metadata["spread gpt2XL_A10_1.npy layer"]


# ---- Metis -------------------------------------------------------------------------------------------------------
@needs_anchors
def test_metis_values_split_one_to_two():
    table = import_metis(METIS, "llama2-7b")
    for tp in (1, 2, 4):
        for bs in (1, 2, 4):
            data = json.loads((METIS / f"DeviceType.A100_tp{tp}_bs{bs}.json").read_text())
            ms = data["execution_time"]["layer_compute_total_ms"]
            for kind, total_ms in (("embedding", ms[0]), ("layer", ms[1]), ("head", ms[-1])):
                e = table.get("A100-SXM-80GB", kind, tp, bs)
                assert e.forward_s + e.backward_s == pytest.approx(total_ms / 1e3, rel=1e-12)
                assert e.backward_s == pytest.approx(2 * e.forward_s, rel=1e-12)
                assert e.tp_comm_included and e.activation_bytes is None
    assert "cannot be separated" in table.metadata["activation_bytes"]


@needs_anchors
def test_metis_checks_the_layer_shape():
    with pytest.raises(ProfileError, match=r"202,383,360 parameters but a gpt3-6.7b layer has 201,379,840"):
        import_metis(METIS, "gpt3-6.7b")


def test_metis_garbled_file_names_the_file(tmp_path):
    (tmp_path / "DeviceType.A100_tp1_bs1.json").write_text("{")
    with pytest.raises(ProfileError, match=r"DeviceType\.A100_tp1_bs1\.json: not valid JSON"):
        import_metis(tmp_path, "llama2-7b")
    (tmp_path / "DeviceType.A100_tp1_bs1.json").write_text('{"execution_time": {}}')
    with pytest.raises(ProfileError, match=r"A100_tp1_bs1\.json: lacks execution_time\.layer_compute_total_ms"):
        import_metis(tmp_path, "llama2-7b")
    (tmp_path / "DeviceType.A100_tp1_bs1.json").unlink()
    with pytest.raises(ProfileError, match=r"DeviceType\.A100_tp1_bs1\.json: missing"):
        import_metis(tmp_path, "llama2-7b")


# ---- Aceso -------------------------------------------------------------------------------------------------------
@needs_anchors
def test_aceso_sums_the_thirteen_layer_operators():
    table = import_aceso(ACESO, "gpt3-1.3b")
    for mbs in (1, 2, 4, 8):
        for tp in (1, 2, 4, 8):
            ops = _aceso_ops(ACESO / f"gpt_1_3B_mbs{mbs}_tp{tp}_algo0.csv")
            layer = table.get("V100-SXM2-32GB", "layer", tp, mbs)
            assert layer.forward_s == pytest.approx(sum(o[1] for o in ops[1:14]) / 1e6, rel=1e-12)
            assert layer.backward_s == pytest.approx(sum(o[2] for o in ops[1:14]) / 1e6, rel=1e-12)
            assert layer.activation_bytes == round(sum(o[3] for o in ops[1:14]) * 2**20)
            emb = table.get("V100-SXM2-32GB", "embedding", tp, mbs)
            head = table.get("V100-SXM2-32GB", "head", tp, mbs)
            assert emb.forward_s == pytest.approx(ops[0][1] / 1e6, rel=1e-12)
            assert head.backward_s == pytest.approx((ops[14][2] + ops[15][2]) / 1e6, rel=1e-12)
            assert [o[0] for o in ops[14:]] == ["final-layernorm", "gpt-post-process"]


@needs_anchors
def test_aceso_tp_comm_is_inside_the_row_parallel_operators():
    # The evidence behind tp_comm_included = true: with half the work per GPU, the row-parallel output projection's
    # forward takes longer at tp 2 than at tp 1 (it now ends with an all-reduce).
    one = {o[0]: o for o in _aceso_ops(ACESO / "gpt_350M_mbs1_tp1_algo0.csv")}
    two = {o[0]: o for o in _aceso_ops(ACESO / "gpt_350M_mbs1_tp2_algo0.csv")}
    assert two["enc-attention-dense"][1] > 2 * one["enc-attention-dense"][1]
    assert two["enc-MLP-GEMM-2"][1] > one["enc-MLP-GEMM-2"][1]
    assert import_aceso(ACESO, "350M").get("V100-SXM2-32GB", "layer", 2, 1).tp_comm_included


@needs_anchors
def test_aceso_algo_and_shape_check(tmp_path):
    a0 = import_aceso(ACESO, "gpt3-2.7b")
    a1 = import_aceso(ACESO, "gpt3-2.7b", algo=1)
    assert a0.get("V100-SXM2-32GB", "layer", 1, 1) != a1.get("V100-SXM2-32GB", "layer", 1, 1)
    assert a0.get("V100-SXM2-32GB", "embedding", 1, 1) == a1.get("V100-SXM2-32GB", "embedding", 1, 1)
    shutil.copy(ACESO / "gpt_350M_mbs1_tp1_algo0.csv", tmp_path / "gpt_1_3B_mbs1_tp1_algo0.csv")
    with pytest.raises(ProfileError, match=r"1_3B_mbs1_tp1_algo0\.csv: the layer's input is 4\.0 MiB but gpt3-1.3b"):
        import_aceso(tmp_path, "gpt3-1.3b")
    with pytest.raises(SpecError, match=r"--gpu-map: Aceso's files were all timed on V100"):
        import_profile("aceso", ACESO, "350M", "A10=A10G")


def test_aceso_truncated_file_names_the_file(tmp_path):
    (tmp_path / "gpt_350M_mbs1_tp1_algo0.csv").write_text(
        "op_name,forward-compute,backward-compute,input_size,output_size,weights,activations\nemb,1,2,0,0,0,0\n"
    )
    with pytest.raises(ProfileError, match=r"gpt_350M_mbs1_tp1_algo0\.csv: 1 operator rows; expected 16"):
        import_aceso(tmp_path, "350M")
    with pytest.raises(ProfileError, match=r"gpt_350M_mbs1_tp1_algo1\.csv: missing"):
        import_aceso(tmp_path, "350M", algo=1)


# ---- round trips and use -----------------------------------------------------------------------------------------
@needs_anchors
@pytest.mark.parametrize(
    "kind, source, model",
    [("fasop", FASOP, "t5-fasop"), ("metis", METIS, "llama2-7b"), ("aceso", ACESO, "gpt3-1.3b")],
)
def test_round_trip_save_load(tmp_path, kind, source, model):
    table = import_profile(kind, source, model)
    path = tmp_path / f"{kind}.csv"
    table.save(path)
    again = load_table(path)
    assert again.entries == table.entries
    assert again.metadata == table.metadata


@needs_anchors
def test_estimate_runs_with_an_imported_table(tmp_path):
    path = tmp_path / "fasop-t5.csv"
    import_fasop(FASOP, "t5-fasop").save(path)
    problem = build_problem("t5-fasop", "fasop-a100-a10", profile=str(path))
    node = "a10"
    plan = Plan(tp=2, dp=2, micro_batch_size=1, stages=(Stage(node_type=node, num_layers=24),
                                                        Stage(node_type=node, num_layers=24)))
    est = estimate(problem, plan)
    gpu = problem.node(node).gpu
    fwd = problem.profile.get(gpu, "encoder", 2, 1).forward_s
    assert est.stages[0].compute_s == pytest.approx(
        3 * (24 * fwd + problem.profile.get(gpu, "embedding", 2, 1).forward_s), rel=1e-12
    )


@needs_anchors
def test_cli_import_profile_writes_a_table_and_errors_exit_2(tmp_path):
    out = tmp_path / "aceso.csv"
    cmd = [sys.executable, "-m", "optsearch", "import-profile"]
    ok = subprocess.run([*cmd, "aceso", "--source", str(ACESO), "--model", "350M", "--out", str(out)],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert "wrote 48 rows (V100-SXM2-32GB)" in ok.stderr
    assert load_table(out).has("V100-SXM2-32GB", "layer", 8, 8)
    bad = subprocess.run([*cmd, "fasop", "--source", str(tmp_path), "--model", "gpt2-xl"],
                         capture_output=True, text=True)
    assert bad.returncode == 2
    assert bad.stderr.strip().startswith("error: ") and "gpt2XL_A10_1.npy: missing" in bad.stderr
