"""README's hand-plan `optsearch estimate` lines run as written (new-user review: `--stages ...` without --tp, --dp
and --micro-batch-size exited 2)."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_calibrate import run_cli  # noqa: E402

README = Path(__file__).resolve().parent.parent / "README.md"


def _estimate_lines() -> list[str]:
    blocks = re.findall(r"```(?:bash|sh)?\n(.*?)```", README.read_text(), flags=re.S)
    lines = [line.split("  #")[0].strip() for block in blocks for line in block.splitlines()]
    return [line for line in lines if line.startswith("optsearch estimate ") and "--plan" not in line]


def test_readme_has_hand_plan_examples():
    lines = _estimate_lines()
    assert any("--stages" in line for line in lines) and any("--balance" in line for line in lines)


@pytest.mark.parametrize("line", _estimate_lines())
def test_readme_estimate_line_runs(line, capsys, monkeypatch):
    code, out, err = run_cli(shlex.split(line)[1:], capsys, monkeypatch)
    assert code == 0, err
    assert "training time" in out and "fits in memory" in out


def test_readme_fasop_line_prices_as_validate(capsys, monkeypatch):
    # new-user review: README's FASOP line gave 1.5609 s (estimate defaults to the distributed optimizer, FASOP's run
    # had none) while docs/fasop-validation.md and `validate bench/validation/fasop-a10.csv` give 1.5727 s
    import json

    (line,) = [line for line in _estimate_lines() if "--balance 0-11-8-8-8-8-5-0" in line]
    assert "--no-distributed-optimizer" in line
    code, out, err = run_cli([*shlex.split(line)[1:], "--json"], capsys, monkeypatch)
    assert code == 0, err
    estimated = json.loads(out)["iteration_time_s"]
    csv = README.parent / "bench" / "validation" / "fasop-a10.csv"
    code, out, err = run_cli(["validate", str(csv), "--json"], capsys, monkeypatch)
    assert code == 0, err
    assert estimated == pytest.approx(json.loads(out)["runs"][0]["predicted_iteration_s"], rel=1e-12)
    # and the number docs/fasop-validation.md quotes (its table's "iteration" row, last column)
    docs = (README.parent / "docs" / "fasop-validation.md").read_text()
    quoted = re.search(r"^\| \*\*iteration\*\* \|.*\| \*\*([0-9.]+) s\*\* \|$", docs, flags=re.M).group(1)
    assert f"{estimated:.4f}" == quoted
