"""The fuzz harness's hang judge (tests/fuzz_cli.run_case): a child that a loaded machine only slows is not killed as
a hang, and a real hang is, whether it spins (its CPU time) or sleeps (the wall-time backstop)."""

from __future__ import annotations

import os
import sys
import time

import pytest

from fuzz_cli import Case, group_cpu_s, problems, run_case

pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or sys.platform == "darwin" or group_cpu_s(os.getpgid(0))
                                is None, reason="needs os.fork and /proc")


def _sleep():  # slow in wall time, no CPU: what a starved child looks like to the harness
    time.sleep(1.5)


def _spin():
    while True:
        pass


def test_a_child_slow_in_wall_time_but_cheap_in_cpu_is_not_a_hang():
    outcome = run_case(("slow",), timeout_s=60, cpu_limit_s=1.0, entry=_sleep)
    assert outcome.code == 0 and not problems(Case(argv=("slow",)), outcome)
    assert outcome.seconds >= 1.5


def test_a_spinning_child_is_killed_by_its_cpu_time():
    outcome = run_case(("spin",), timeout_s=120, cpu_limit_s=0.5, entry=_spin)
    assert outcome.code is None and outcome.cpu_seconds is not None and outcome.cpu_seconds > 0.5
    assert problems(Case(argv=("spin",)), outcome)[0].startswith("hang: killed after")


def test_a_sleeping_hang_is_killed_by_the_wall_limit():
    outcome = run_case(("asleep",), timeout_s=0.5, cpu_limit_s=30, entry=lambda: time.sleep(3600))
    assert outcome.code is None and outcome.seconds < 60
