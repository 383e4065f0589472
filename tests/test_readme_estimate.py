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
