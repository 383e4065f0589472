"""bench/validation/h100_rows.py: the checks behind docs/validation.md, "H100 rows off by more than 10 %", on
hand-computed numbers (wave quantization on 132 SMs, the cross-entropy and gradient-buffer byte counts)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _module():
    spec = importlib.util.spec_from_file_location("h100_rows", ROOT / "bench" / "validation" / "h100_rows.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_wave_efficiency_by_hand():
    rows = _module()
    # 4096 x 2048 output (1.7B's projection): 32 x 8 = 256 tiles of 128 x 256, 2 waves of 132 SMs = 264 slots
    assert rows.wave_efficiency(4096, 2048) == pytest.approx(256 / 264)
    # 4096 x 2688 (32B's QKV per rank at tp 8): 10.5 tiles wide -> 32 x 11 = 352 tiles, 3 waves = 396 slots, work 336
    assert rows.wave_efficiency(4096, 2688) == pytest.approx(32 * 10.5 / 396)
    # exactly 132 full tiles: no loss
    assert rows.wave_efficiency(128 * 132, 256) == pytest.approx(1.0)


def test_layer_wave_efficiency_orders_the_rows_as_the_docs_say():
    rows = _module()
    small = rows.layer_wave_efficiency(4096, 2048, 1)  # 1.7B
    assert small == pytest.approx(256 / 264)  # every GEMM of this layer fills 2, 6 or 8 waves of 128 of 132 SMs
    assert rows.layer_wave_efficiency(4096, 7168, 8) < rows.layer_wave_efficiency(4096, 6144, 4) < small


def test_byte_counts_by_hand():
    rows = _module()
    assert rows.CE_BYTES_R080 == 52  # forward 6 + 4 + 8 + 8 + 4 + 8, backward 8 + 6
    assert rows.CE_BYTES_CHARGED == 36  # 3 x 4 B forward, twice that backward
    assert rows.GRAD_BUFFER_BYTES == 16
