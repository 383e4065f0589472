"""CBC's files live in a directory of the solve's own, removed however the solve ends (milp._run_cbc).

PuLP's PULP_CBC_CMD writes <uuid>-pulp.mps / .sol to the temp directory and deletes them only when CBC returns
normally: a solve that ended in an exception left them (87 pairs in /tmp after round 10), and one interrupted while
CBC ran also left CBC running. The temp directory here is the test's own (TMPDIR for PuLP, tempfile.tempdir for
Python), so every file a solve leaves behind is seen."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time

import pulp
import pytest

from optsearch.formulation.linear import Lin, LinearModel
from optsearch.formulation.milp import PulpCbc


class Interrupted(Exception):
    pass


@pytest.fixture
def tmpdir_only(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setenv("TMP", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def _parity(n: int = 41) -> LinearModel:
    """2 x (sum of n binaries) == n, n odd: integer-infeasible, LP-feasible everywhere. With cuts and preprocessing off
    CBC branches until its time limit (3 s on the dev machine at n = 41)."""
    lm = LinearModel()
    for i in range(n):
        lm.var(f"x{i}", "bool")
    lm.add("parity", Lin.of(*((2.0, f"x{i}") for i in range(n))), "==", float(n), "count")
    lm.objective = Lin.of(*((1.0 + i % 3, f"x{i}") for i in range(n)))
    lm.objective_unit = "count"
    return lm


def _easy() -> LinearModel:
    lm = LinearModel()
    lm.var("x", "int", 0, 5)
    lm.add("floor", Lin.of((1.0, "x")), ">=", 2.0, "count")
    lm.objective = Lin.of((1.0, "x"))
    lm.objective_unit = "count"
    return lm


def test_a_solve_leaves_no_file(tmpdir_only):
    got = PulpCbc().solve(_easy(), 10)
    assert got.status == "optimal" and got.values["x"] == 2
    assert os.listdir(tmpdir_only) == []


def test_a_solve_interrupted_by_an_exception_leaves_no_file(tmpdir_only, monkeypatch):
    """CBC has written its solution; reading it raises (as CBC's crash or an alarm would end the solve there)."""
    def broken(*args, **kwargs):
        raise Interrupted
    monkeypatch.setattr(pulp.PULP_CBC_CMD, "readsol_MPS", broken)
    with pytest.raises(Interrupted):
        PulpCbc().solve(_easy(), 10)
    assert os.listdir(tmpdir_only) == []


def test_a_solve_interrupted_while_cbc_runs_ends_cbc(tmpdir_only, monkeypatch):
    """The exception comes while PuLP waits on CBC (the CLI's OutOfTime alarm, a KeyboardInterrupt): CBC, 0.2 s into a
    search that would run to its 20 s limit, is killed and reaped, and its files are gone."""
    started: list[subprocess.Popen] = []

    class Watched(subprocess.Popen):
        def wait(self, timeout=None):
            started.append(self)
            time.sleep(0.2)
            assert self.poll() is None, "CBC ended before the interruption: the model is too easy for this test"
            raise Interrupted

    monkeypatch.setattr(pulp.apis.coin_api.subprocess, "Popen", Watched)
    with pytest.raises(Interrupted):
        PulpCbc().solve(_parity(), 20)
    assert len(started) == 1
    with pytest.raises(ChildProcessError):  # killed and reaped: no such child any more
        os.waitpid(started[0].pid, os.WNOHANG)
    assert os.listdir(tmpdir_only) == []
