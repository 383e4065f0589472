"""`solve --pipelined-param-gather`: the opt-in that searches --overlap-param-gather at pp > 1 too
(Problem.param_gather_pipelined; docs/cost-model.md 7f "At pp > 1"). Off by default (the space as before ppgather);
with it the problem tries both settings there; asking for it without the grad overlap it needs is an input error."""

from __future__ import annotations

import json

from optsearch.cli.options import problem_from_options
from optsearch.costmodel import overlap_param_gather_settings

from test_cli_errors import run_cli  # the toy fixture is conftest's


def test_off_by_default_and_on_when_asked():
    default = problem_from_options("gpt2-xl", "fasop-a100-a10", "analytic", None, None, None, target="megatron")
    asked = problem_from_options("gpt2-xl", "fasop-a100-a10", "analytic", None, None, None, target="megatron",
                                 param_gather_pipelined=True)
    assert not default.param_gather_pipelined and asked.param_gather_pipelined
    assert overlap_param_gather_settings(default, 8, 1, 1, 2, True) == (False,)
    assert overlap_param_gather_settings(asked, 8, 1, 1, 2, True) == (False, True)
    assert overlap_param_gather_settings(default, 8, 1, 1, 1, True) == (True,)  # one stage: on either way


def test_solve_with_the_opt_in_runs(toy):
    model, cluster = toy
    got = run_cli("solve", "-m", str(model), "-c", str(cluster), "--minimize", "time", "--pipelined-param-gather",
                  "--json", "--quiet")
    assert got.code == 0, got.stderr
    assert json.loads(got.stdout)["status"] == "optimal"


def test_the_opt_in_without_the_grad_overlap_is_an_input_error(toy):
    model, cluster = toy
    for extra in (("--no-overlap-grad-reduce",), ("--target", "fasop")):
        got = run_cli("solve", "-m", str(model), "-c", str(cluster), "--pipelined-param-gather", *extra)
        assert got.code == 2, (extra, got.stdout, got.stderr)
        assert "--pipelined-param-gather needs upstream Megatron-LM's --overlap-grad-reduce" in got.stderr
