"""solve refuses a profile whose eager engine runs another pipeline schedule (DeepSpeed 0.3.13's, validate only):
the formulation and its bounds price Megatron-LM's 1F1B, so the decoded plan would not re-price to the objective
(before: ConsistencyError from the solver's own check; post-merge audit, round 8)."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

from optsearch.costmodel import pipe_engine_of
from optsearch.errors import ProfileError
from optsearch.problem import build_problem
from optsearch.profile.analytic import AnalyticProfile
from optsearch.solver import solve
from optsearch.spec.budget import Budget

sys.path.insert(0, str(Path(__file__).parent))
from test_whatif import CLUSTER, MODEL, OPTIONS  # noqa: E402


def test_solve_refuses_a_profile_with_another_pipeline_schedule():
    problem = build_problem(MODEL, CLUSTER, profile="analytic")
    profile = AnalyticProfile(model=problem.model, gpus=problem.gpus, eager_engine="amp-megatron-v1.1.5")
    table = replace(problem, profile=profile.to_table(sorted(problem.gpus), [1, 2, 4], [1]))
    assert pipe_engine_of(table) is not None
    with pytest.raises(ProfileError, match="priced for validate only"):
        solve(table, Budget(objective="time"), options=OPTIONS)
    assert solve(problem, Budget(objective="time"), options=OPTIONS).status == "optimal"  # without it: solved
