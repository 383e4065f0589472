"""AnalyticProfile.to_table keeps what the analytic profile prices (new-user review: it dropped forward_repeats on
the way to CSV and did not say `derived_from: analytic`): the table, written and read back, prices a plan as the
analytic profile does, eager engine included."""

from __future__ import annotations

from dataclasses import replace

import pytest

from optsearch.costmodel import estimate
from optsearch.plan import Plan, Stage
from optsearch.problem import build_problem
from optsearch.profile.analytic import EAGER_ENGINES
from optsearch.profile.table import analytic_derived, parse_csv


@pytest.mark.parametrize("engine", [None, sorted(EAGER_ENGINES)[0]])
def test_to_table_round_trip_prices_as_analytic(engine):
    problem = build_problem("gpt2-medium", "fasop-a100-a10")
    if engine is not None:
        problem = replace(problem, profile=replace(problem.profile, eager_engine=engine))
    plan = Plan(tp=2, dp=1, micro_batch_size=2, stages=(Stage(node_type="a100", num_layers=12),
                                                        Stage(node_type="a10", num_layers=12)))
    gpus = sorted({problem.gpu_of(s.node_type).name for s in plan.stages})
    table = problem.profile.to_table(gpus, [2], [2])
    assert analytic_derived(table)
    back = parse_csv(table.to_csv(), "t.csv")
    assert back.entries == table.entries  # forward_repeats included
    if engine is not None:
        assert any(e.forward_repeats != 1 for e in back.entries.values())
    want = estimate(problem, plan).iteration_time_s
    assert estimate(replace(problem, profile=back), plan).iteration_time_s == pytest.approx(want, rel=1e-12)


def test_a_table_names_only_a_known_eager_engine():
    from optsearch.errors import ProfileError
    from optsearch.profile.table import ProfileTable

    assert ProfileTable(name="t").eager_engine is None
    known = sorted(EAGER_ENGINES)[0]
    assert ProfileTable(name="t", metadata={"eager_engine": known}).eager_engine == known
    with pytest.raises(ProfileError, match="eager_engine = 'pytorch-0.1'"):
        ProfileTable(name="t", metadata={"eager_engine": "pytorch-0.1"}).eager_engine  # noqa: B018
