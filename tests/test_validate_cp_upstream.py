"""Issue 15 seam: `optsearch validate` prices a cp > 1 row that upstream Megatron-LM cannot run (no attention with
context parallelism on one of its node types; `estimate` and `launch` refuse the same plan) as recorded, since the run
was measured on some engine, and says so for that row: a warning on stderr with launch's reason, and
`upstream_refuses` in the JSON rows (docs/validation.md "Rows upstream cannot run")."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_calibrate import run_cli  # noqa: E402
from test_validate_plan_knobs import HEADER, ROW  # noqa: E402

# gpt2-small's heads of 64 run flash attention on the A100 (8.0): cp 2 there is a plan upstream runs
SMALL = 'small,h,test,gpt2-small,aws-p4d,64,1,4,1,"p4d.24xlarge:12",1.0,0'


def test_validate_flags_the_cp_rows_upstream_cannot_run(tmp_path, capsys, monkeypatch):
    runs = tmp_path / "runs.csv"
    runs.write_text(f"{HEADER},cp,distributed_optimizer,flash_attention\n{ROW},2,1,\n{ROW.replace('readme', 'cp1')},"
                    f"1,0,\n{SMALL},2,1,1\n{SMALL.replace('small,h', 'unfused,h')},2,1,0\n")
    code, out, err = run_cli(["validate", str(runs), "--json"], capsys, monkeypatch)
    assert code == 0, err
    rows = {r["run_id"]: r for r in json.loads(out)["runs"]}
    assert rows["readme"]["upstream_refuses"].startswith("cp = 2: node type a10 runs no flash attention (model "
                                                         "gpt2-xl: head dimension 100")
    assert rows["cp1"]["upstream_refuses"] is None and rows["small"]["upstream_refuses"] is None
    assert rows["unfused"]["upstream_refuses"] == ("cp = 2: the row says flash_attention = 0, and Transformer "
                                                   "Engine's unfused attention has no context parallelism")
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 2
    assert warnings[0].startswith(f"warning: {runs} row 2 (readme): cp = 2: node type a10 runs no flash attention")
    assert warnings[0].endswith("upstream Megatron-LM cannot run this plan (estimate and launch refuse it); "
                                "priced as recorded")
    code, table, err2 = run_cli(["validate", str(runs)], capsys, monkeypatch)  # the table: the same warning
    assert code == 0 and [line for line in err2.splitlines() if line.startswith("warning:")] == warnings
    assert "readme" in table
