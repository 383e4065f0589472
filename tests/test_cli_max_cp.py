"""`solve --max-cp N` above the context-parallel sizes the search can try says so on stderr (a warning: like the other
--max-* caps, a cap above what is possible is no error, nothing is left out), naming the largest size searched and
why: the target's sizes, a target without context parallelism, the model's rule, or attention without flash (issue
15: Transformer Engine's unfused attention has no context parallelism)."""

from __future__ import annotations

import json

import pytest

from test_cli_errors import run_cli


def _solve(*args: str):
    run = run_cli("solve", *args, "--quiet", "--json")
    assert run.code in (0, None), run.stderr
    return run, json.loads(run.stdout)


@pytest.mark.parametrize("args, expected", [
    (("-m", "gpt2-medium", "-c", "fasop-a10", "--max-cp", "16"),
     "warning: --max-cp 16: the largest context-parallel size searched is 8; the megatron target runs cp 1, 2, 4, 8"),
    # heads of 100 channels: no flash attention, and Transformer Engine's unfused attention has no cp (issue 15)
    (("-m", "gpt2-xl", "-c", "fasop-a10", "--max-cp", "2"),
     "warning: --max-cp 2: the largest context-parallel size searched is 1; node type a10 runs no flash attention "
     "(model gpt2-xl: head dimension 100"),
    (("-m", "gpt2-medium", "-c", "fasop-a10", "--max-cp", "2", "--no-flash-attention"),
     "warning: --max-cp 2: the largest context-parallel size searched is 1; the attention is priced unfused"),
    (("-m", "gpt2-xl", "-c", "fasop-a10", "--max-cp", "4", "--target", "fasop"),
     "warning: --max-cp 4: the largest context-parallel size searched is 1; the fasop target has no context "
     "parallelism"),
    (("-m", "bert-large", "-c", "fasop-a10", "--max-cp", "2"),
     "warning: --max-cp 2: the largest context-parallel size searched is 1; cp 2: encoder-only models (BERT)"),
])
def test_max_cp_above_what_is_searched_warns(args, expected):
    run, payload = _solve(*args)
    assert run.stderr.startswith(expected), run.stderr
    assert len(run.stderr.strip().splitlines()) == 1
    assert payload["plan"] is not None


def test_max_cp_within_the_searched_sizes_is_quiet():
    run, _ = _solve("-m", "gpt2-medium", "-c", "fasop-a10", "--max-cp", "8")
    assert run.stderr == ""
    run, payload = _solve("-m", "gpt2-xl", "-c", "fasop-a10", "--max-cp", "1")
    assert run.stderr == "" and payload["plan"].get("cp", 1) == 1
