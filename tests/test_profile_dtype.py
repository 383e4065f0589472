"""A profile table's `# dtype:` is compared with the job's precision (new-user review: a `# dtype: fp32` table priced
an fp16 job without a word): another dtype than fp16/bf16 is refused (exit 2, one line), the other 16-bit type is
warned about on stderr, a table without a dtype line is used as before."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_calibrate import run_cli  # noqa: E402

ROWS = """gpu,layer_kind,tp,micro_batch_size,forward_s,backward_s,activation_bytes,tp_comm_included
A10G,embedding,1,1,0.001,0.002,,false
A10G,layer,1,1,0.01,0.02,,false
A10G,head,1,1,0.002,0.004,,false
"""
# gpt2-xl's job: fp16; a plan that fits (estimate exits 1 on one that does not)
ESTIMATE = ["estimate", "-m", "gpt2-xl", "-c", "fasop-a10", "--stages", "a10:24:full,a10:24:full", "--tp", "1",
            "--dp", "1", "--micro-batch-size", "1"]


def table(tmp_path: Path, dtype: str | None) -> Path:
    path = tmp_path / f"table-{dtype}.csv"
    path.write_text((f"# dtype: {dtype}\n" if dtype else "") + ROWS)
    return path


def test_fp32_table_for_fp16_job_exits_2(tmp_path, capsys, monkeypatch):
    path = table(tmp_path, "fp32")
    code, out, err = run_cli([*ESTIMATE, "--profile", str(path)], capsys, monkeypatch)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1
    line = " ".join(err.split())
    assert str(path) in line and "dtype = 'fp32'" in line and "precision is fp16" in line


def test_bf16_table_for_fp16_job_warns(tmp_path, capsys, monkeypatch):
    code, out, err = run_cli([*ESTIMATE, "--profile", str(table(tmp_path, "bf16"))], capsys, monkeypatch)
    assert code == 0, err
    assert "training time" in out
    assert "warning:" in err and "measured in bf16" in " ".join(err.split()) and "runs fp16" in " ".join(err.split())


def test_matching_or_absent_dtype_is_silent(tmp_path, capsys, monkeypatch):
    for dtype in ("fp16", None):
        code, out, err = run_cli([*ESTIMATE, "--profile", str(table(tmp_path, dtype))], capsys, monkeypatch)
        assert code == 0 and "warning" not in err, err


def test_validate_compares_the_row_precision(tmp_path, capsys, monkeypatch):
    # gpt2-xl's job is fp16; a row that ran bf16 priced with a bf16 table says nothing, an fp16 row warns
    path = table(tmp_path, "bf16")
    runs = tmp_path / "runs.csv"
    header = ("run_id,group,source,model,cluster,global_batch_size,tp,dp,micro_batch_size,stages,measured_iteration_s,"
              "oom,precision")
    for precision, warned in (("bf16", False), ("fp16", True)):
        runs.write_text(f'{header}\nr,g,t,gpt2-xl,fasop-a10,64,1,1,1,"a10:24,a10:24",1.0,0,{precision}\n')
        code, out, err = run_cli(["validate", str(runs), "--profile", str(path)], capsys, monkeypatch)
        assert code == 0, err
        assert ("measured in bf16" in " ".join(err.split())) == warned, err
