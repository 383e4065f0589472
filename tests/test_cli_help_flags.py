"""--help shows no `<bool>` beside flags (--json, --quiet, --[no-]flash-attention, --help): options that take no value.
Recent typer prints a type column for every option; optsearch.cli blanks it for flags (issue 15, review), and keeps
the types of options that take a value."""

from __future__ import annotations

import pytest

from test_cli_errors import run_cli

COMMANDS = ["solve", "estimate", "launch", "whatif"]


@pytest.mark.parametrize("command", COMMANDS)
def test_help_has_no_bool_type_on_flags(command):
    run = run_cli(command, "--help")
    assert run.code in (0, None), run.stderr
    text = run.stdout
    assert "--help" in text and "<bool>" not in text
    if command in ("solve", "estimate"):
        assert "--no-flash-attention" in text and "--json" in text
        assert "<int" in text  # options with a value keep their type (--max-cp, --tp, ...)
