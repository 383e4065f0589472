"""Every example in examples/ runs with a short time limit and checks its own answer."""

from __future__ import annotations

import importlib.util
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_whatif_fasop(tmp_path):
    example = load("whatif_fasop")
    out = tmp_path / "whatif.png"
    points = example.run(time_limit_s=2.0, points=3, out=out, solver="cbc")  # run() checks budgets and monotonicity itself
    assert out.read_bytes()[:4] == b"\x89PNG"
    assert points[0].result.status == "infeasible"  # 15 days: faster than any plan on this cluster
    assert "the fastest feasible plan takes" in points[0].reason
    assert points[-1].plan is not None
