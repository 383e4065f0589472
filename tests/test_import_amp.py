"""`import-profile amp`: AMP's known_cost/gpt2_{G4,P3}_{tp}.npy (GPT-2 medium) through the FASOP code path.

AMP's arrays are never in the repository: the tests build small synthetic arrays with hand-computed expectations;
one optional test reads the published files from the folder in OPTSEARCH_AMP_KNOWN_COST (skipped when unset).
"""

from __future__ import annotations

import hashlib
import os
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
from optsearch.profile.importers import import_amp, import_profile

AMP_DIR = os.environ.get("OPTSEARCH_AMP_KNOWN_COST")
VALIDATION = Path(__file__).resolve().parents[1] / "bench" / "validation"


def _amp_array(layer_a: float, layer_b: float) -> np.ndarray:
    """30 specs: embedding 0.2 ms, transpose 0.1 ms, 12 layers at layer_a and 12 at layer_b, then transpose
    0.02 ms, final norm 0.07 ms, logits 3 ms, fp32 cast 1.5 ms."""
    return np.array([0.2e-3, 0.1e-3, *([layer_a] * 12), *([layer_b] * 12), 0.02e-3, 0.07e-3, 3e-3, 1.5e-3])


@pytest.fixture
def amp_dir(tmp_path: Path) -> Path:
    np.save(tmp_path / "gpt2_G4_1.npy", _amp_array(5e-3, 6e-3))
    np.save(tmp_path / "gpt2_G4_2.npy", _amp_array(6e-3, 6e-3))
    np.save(tmp_path / "gpt2_P3_4.npy", _amp_array(4e-3, 5e-3))
    np.save(tmp_path / "transgan_P3_1.npy", np.ones(7))  # AMP's other model: not read for gpt2-medium
    return tmp_path


def test_amp_mapping_by_hand(amp_dir):
    table = import_amp(amp_dir, "gpt2-medium")
    t4 = lambda kind, tp=1: table.get("T4", kind, tp, 1)  # noqa: E731
    # embedding = 0.2 + 0.1 ms; layer = mean(12 x 5, 12 x 6) = 5.5 ms; head = 0.02 + 0.07 + 3 + 1.5 = 4.59 ms
    assert t4("embedding").forward_s == pytest.approx(0.3e-3, rel=1e-12)
    assert t4("layer").forward_s == pytest.approx(5.5e-3, rel=1e-12)
    assert t4("head").forward_s == pytest.approx(4.59e-3, rel=1e-12)
    assert t4("layer", 2).forward_s == pytest.approx(6e-3, rel=1e-12)
    assert table.get("V100-16GB", "layer", 4, 1).forward_s == pytest.approx(4.5e-3, rel=1e-12)
    for key, entry in table.entries.items():
        assert entry.backward_s == 2 * entry.forward_s, key
        assert entry.tp_comm_included and entry.activation_bytes is None, key
        assert key[3] == 1, key  # micro-batch 1 only
    assert len(table.entries) == 9  # 3 files x (embedding, layer, head)
    # the sum over all 30 specs is kept: 0.3 + 24 x 5.5 + 4.59 = 136.89 ms
    total = t4("embedding").forward_s + 24 * t4("layer").forward_s + t4("head").forward_s
    assert total == pytest.approx(136.89e-3, rel=1e-12)
    assert total == pytest.approx(float(_amp_array(5e-3, 6e-3).sum()), rel=1e-12)


def test_amp_metadata_records_every_convention(amp_dir):
    meta = import_amp(amp_dir, "gpt2-medium").metadata
    assert meta["gpus"].startswith("G4 -> T4, P3 -> V100-16GB")
    assert meta["backward"].startswith("2 x forward")
    assert meta["tp_comm_included"].startswith("true")
    assert meta["micro_batch_size"].startswith("1 only") and "does not extrapolate" in meta["micro_batch_size"]
    # Megatron v1.1.5 pads 50257 to a multiple of 128 x tp: 50304 (tp 1), 50432 (tp 2), 50688 (tp 4)
    assert "50304 at tp 1, 50432 at tp 2, 50688 at tp 4" in meta["vocabulary"]
    digest = hashlib.sha256((amp_dir / "gpt2_G4_1.npy").read_bytes()).hexdigest()[:16]
    assert f"gpt2_G4_1.npy (sha256 {digest}...)" in meta["files"]
    assert "transgan" not in meta["files"]
    # spread of the G4 tp 1 layers: (6 - 5) / 5.5 = 18.18%; the G4 tp 2 layers are equal: no spread line
    assert "spread 18.18%" in meta["spread gpt2_G4_1.npy layer"]
    assert meta["spread gpt2_G4_1.npy layer"].startswith("mean 0.0055")
    assert "spread gpt2_G4_2.npy layer" not in meta


def test_amp_errors_name_the_file_or_rule(amp_dir, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ProfileError, match=r"gpt2_G4_1\.npy: missing \(no gpt2_<GPU>_<tp>\.npy file"):
        import_amp(empty, "gpt2-medium")
    with pytest.raises(ProfileError, match=r"AMP publishes per-layer tables for gpt2-medium only"):
        import_amp(amp_dir, "gpt2-xl")
    np.save(amp_dir / "gpt2_G4_4.npy", np.ones(26) * 1e-3)  # FASOP's length, not AMP's
    with pytest.raises(ProfileError, match=r"gpt2_G4_4\.npy: 26 entries but gpt2-medium needs 30"):
        import_amp(amp_dir, "gpt2-medium")
    (amp_dir / "gpt2_G4_4.npy").unlink()
    np.save(amp_dir / "gpt2_P4_1.npy", _amp_array(1e-3, 1e-3))
    with pytest.raises(ProfileError, match=r"gpt2_P4_1\.npy: GPU 'P4' has no catalog name; give --gpu-map P4="):
        import_amp(amp_dir, "gpt2-medium")
    table = import_profile("amp", amp_dir, "gpt2-medium", "P4=A10G,P3=V100-SXM2-32GB")
    assert table.gpus() == {"T4", "A10G", "V100-SXM2-32GB"}
    with pytest.raises(SpecError, match=r"--gpu-map G4=Nope: 'Nope' is not a catalog GPU"):
        import_profile("amp", amp_dir, "gpt2-medium", "G4=Nope")


def test_amp_table_prices_micro_batch_1_and_refuses_others(amp_dir, tmp_path):
    path = tmp_path / "amp.csv"
    cli = subprocess.run(
        [sys.executable, "-m", "optsearch", "import-profile", "amp", "--source", str(amp_dir),
         "--model", "gpt2-medium", "--out", str(path)], capture_output=True, text=True,
    )
    assert cli.returncode == 0, cli.stderr
    assert "wrote 9 rows (T4, V100-16GB)" in cli.stderr
    table = load_table(path)
    assert table.entries == import_amp(amp_dir, "gpt2-medium").entries
    problem = build_problem("gpt2-medium", "amp-g4dn", profile=str(path), global_batch_size=32)
    node = "g4dn.12xlarge"
    one = Plan(tp=1, dp=4, micro_batch_size=1, stages=(Stage(node_type=node, num_layers=24),))
    est = estimate(problem, one)
    # forward + backward = 3 x forward: 3 x (0.3 + 24 x 5.5 + 4.59) ms per micro-batch, 8 micro-batches
    assert est.stages[0].compute_s == pytest.approx(3 * 136.89e-3, rel=1e-9)
    two = Plan(tp=1, dp=4, micro_batch_size=2, stages=(Stage(node_type=node, num_layers=24),))
    with pytest.raises(ProfileError, match=r"no entry for gpu=T4 layer_kind=\w+ tp=1 micro_batch_size=2"):
        estimate(problem, two)


@pytest.mark.skipif(not AMP_DIR, reason="set OPTSEARCH_AMP_KNOWN_COST to the folder with AMP's gpt2_*.npy files")
def test_amp_published_files(tmp_path):
    source = Path(AMP_DIR or "")
    table = import_amp(source, "gpt2-medium")
    for token, gpu in (("G4", "T4"), ("P3", "V100-16GB")):
        for tp in (1, 2, 4):
            arr = np.load(source / f"gpt2_{token}_{tp}.npy")
            assert arr.shape == (30,)
            get = lambda kind: table.get(gpu, kind, tp, 1).forward_s  # noqa: E731
            assert get("embedding") == pytest.approx(arr[0] + arr[1], rel=1e-12)
            assert get("layer") == pytest.approx(arr[2:26].mean(), rel=1e-12)
            assert get("head") == pytest.approx(arr[26:].sum(), rel=1e-12)
    # the micro-batch-1 rows of AMP's homogeneous set are priced with it
    rows = [line for line in (VALIDATION / "amp-g4dn.csv").read_text().splitlines()
            if line.startswith(("#", "run_id")) or line.split(",")[8] == "1"]
    runs = tmp_path / "amp-g4dn-mbs1.csv"
    runs.write_text("\n".join(rows) + "\n")
    path = tmp_path / "amp.csv"
    table.save(path)
    from optsearch.validate import load_runs, price

    priced = price(load_runs(runs), profile=str(path))
    assert len(priced) == len(rows) - 3 > 0
    assert all(p.predicted_s > 0 for p in priced)
