"""The Slurm step of docs/launch.md as written (new-user review): `optsearch launch ... --format slurm --out launch/`,
then `MEGATRON_DIR=... sbatch launch/job.sbatch --data-path ...` from the folder above launch/.

Slurm runs a copy of the batch script from its spool folder with the submit folder as working directory, so
job.sbatch cannot find torchrun.sh beside "$0". Here the script runs that way without Slurm: copied to a spool
folder, SLURM_SUBMIT_DIR set, and fake srun (runs its command once per node with SLURM_NODEID), scontrol and
torchrun (prints its arguments) on PATH.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

GOLDEN_PLAN = Path(__file__).resolve().parent / "golden" / "launch" / "gpt2-xl_fasop-a100-a10" / "plan.json"

FAKE_SRUN = r"""#!/usr/bin/env bash
# srun [--het-group=K] --nodes=N --ntasks-per-node=1 CMD...: CMD once per node, SLURM_NODEID = 0..N-1
nodes=1
while [[ "$1" == --* ]]; do case "$1" in --nodes=*) nodes="${1#--nodes=}" ;; esac; shift; done
for ((i = 0; i < nodes; i++)); do SLURM_NODEID=$i "$@" || exit $?; done
"""


@pytest.fixture(scope="module")
def emitted(tmp_path_factory):
    """launch/ written by the CLI from a working folder, with a relative --out as in docs/launch.md."""
    work = tmp_path_factory.mktemp("work")
    run = subprocess.run([sys.executable, "-m", "optsearch", "launch", str(GOLDEN_PLAN), "-m", "gpt2-xl", "-c",
                          "fasop-a100-a10", "--format", "slurm", "--out", "launch/"], cwd=work, capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stderr
    return work


def _env(tmp_path: Path, submit_dir: Path, **extra: str) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    log = tmp_path / "torchrun.log"
    for name, body in {"srun": FAKE_SRUN, "scontrol": "#!/bin/sh\necho node-0\n",
                       "torchrun": f'#!/bin/sh\necho "$@" >> {log}\n'}.items():
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    megatron = tmp_path / "Megatron-LM"
    megatron.mkdir(exist_ok=True)
    (megatron / "pretrain_gpt.py").write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OPTSEARCH_", "MEGATRON_"))}
    return {**env, "PATH": f"{bin_dir}:{env['PATH']}", "SLURM_SUBMIT_DIR": str(submit_dir),
            "SLURM_JOB_NODELIST": "node-[0-7]", "MEGATRON_DIR": str(megatron), **extra}


def _sbatch(tmp_path: Path, script: Path, submit_dir: Path, *args: str, **extra: str) -> subprocess.CompletedProcess:
    """Run job.sbatch as Slurm does: a copy in a spool folder, started in the submit folder."""
    spool = tmp_path / "spool" / "job00042"
    spool.mkdir(parents=True, exist_ok=True)
    shutil.copy(script, spool / "slurm_script")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    return subprocess.run(["bash", str(spool / "slurm_script"), *args], cwd=elsewhere,
                          env=_env(tmp_path, submit_dir, **extra), capture_output=True, text=True)


def _torchrun_calls(tmp_path: Path) -> list[list[str]]:
    return [line.split() for line in (tmp_path / "torchrun.log").read_text().splitlines()]


def _check_every_node_started(tmp_path: Path, extra: list[str]) -> None:
    calls = _torchrun_calls(tmp_path)
    ranks = sorted(int(c[c.index("--node-rank") + 1]) for c in calls)
    assert ranks == list(range(8))  # component 0: node rank 0; component 1: node ranks 1..7
    for call in calls:
        assert call[call.index("--nnodes") + 1] == "8"
        assert call[call.index("--master-addr") + 1] == "node-0"
        assert call[-len(extra):] == extra  # sbatch's extra arguments reach every torchrun
        entry = next(a for a in call if a.endswith("pretrain_gpt.py"))
        assert entry == str(tmp_path / "Megatron-LM" / "pretrain_gpt.py")


def test_sbatch_launch_job_from_the_folder_above(emitted, tmp_path):
    run = _sbatch(tmp_path, emitted / "launch" / "job.sbatch", emitted, "--data-path", "my data", "--lr", "1e-4")
    assert run.returncode == 0, run.stderr
    calls = _torchrun_calls(tmp_path)
    assert len(calls) == 8
    _check_every_node_started(tmp_path, ["--data-path", "my", "data", "--lr", "1e-4"])


def test_folder_moved_found_relative_to_the_submit_folder(emitted, tmp_path):
    moved = tmp_path / "moved"
    shutil.copytree(emitted, moved)  # the absolute path written no longer holds the files: hide it
    original = emitted / "launch"
    hidden = emitted / "launch.hidden"
    original.rename(hidden)
    try:
        run = _sbatch(tmp_path, moved / "launch" / "job.sbatch", moved, "--data-path", "d")
    finally:
        hidden.rename(original)
    assert run.returncode == 0, run.stderr
    _check_every_node_started(tmp_path, ["--data-path", "d"])


def test_submitted_from_another_folder_uses_the_absolute_folder(emitted, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    run = _sbatch(tmp_path, emitted / "launch" / "job.sbatch", other, "--data-path", "d")
    assert run.returncode == 0, run.stderr
    _check_every_node_started(tmp_path, ["--data-path", "d"])


def test_not_found_says_what_to_set_and_override_works(emitted, tmp_path):
    elsewhere = tmp_path / "copy"
    shutil.copytree(emitted / "launch", elsewhere)
    run = _sbatch(tmp_path, emitted / "launch" / "job.sbatch", tmp_path, OPTSEARCH_LAUNCH_DIR=str(tmp_path / "nope"))
    assert run.returncode == 2
    assert "set OPTSEARCH_LAUNCH_DIR" in run.stderr and str(tmp_path / "nope") in run.stderr
    run = _sbatch(tmp_path, emitted / "launch" / "job.sbatch", tmp_path, "--x", OPTSEARCH_LAUNCH_DIR=str(elsewhere))
    assert run.returncode == 0, run.stderr
    _check_every_node_started(tmp_path, ["--x"])


def test_torchrun_without_megatron_dir_says_so(emitted, tmp_path):
    env = _env(tmp_path, emitted)
    del env["MEGATRON_DIR"]
    run = subprocess.run(["bash", str(emitted / "launch" / "torchrun.sh"), "0"], cwd=tmp_path, env=env,
                         capture_output=True, text=True)
    assert run.returncode == 2
    assert "./pretrain_gpt.py not found" in run.stderr and "set MEGATRON_DIR" in run.stderr
    assert not (tmp_path / "torchrun.log").exists()
