"""The `optsearch` command: a thin typer shell over the library. Errors become one line and an exit code."""

from __future__ import annotations

import os
import sys

import typer

from optsearch.errors import OptsearchError

app = typer.Typer(
    name="optsearch",
    help=(
        "Plan Transformer training on heterogeneous GPU clusters: which nodes to rent, how to split layers into "
        "pipeline stages, tp/dp/pp, micro-batch and recomputation — provably optimal under optsearch's cost model."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _blank_flag_types() -> None:
    """Recent typer prints a type column in --help with `<bool>` beside every flag (--json, --quiet,
    --[no-]flash-attention, --help), options that take no value; leave that cell blank for flags, as click and older
    typer do. typer without that column (no TyperOption.display_type_rich): nothing to do."""
    from typer import core

    option = getattr(core, "TyperOption", None)
    shown = getattr(option, "display_type_rich", None)
    if shown is None or getattr(shown, "blank_for_flags", False):
        return

    def display_type_rich(self, ctx):
        return None if getattr(self, "is_flag", False) else shown(self, ctx)

    display_type_rich.blank_for_flags = True
    option.display_type_rich = display_type_rich


_blank_flag_types()


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            print(f"optsearch {version('optsearch')}")
        except PackageNotFoundError:  # run from a source tree that was never installed
            print("optsearch (not installed)")
        raise typer.Exit(0)


@app.callback()
def _top(version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                      help="Print optsearch's version and exit.")) -> None:
    """Plan Transformer training on heterogeneous GPU clusters."""


# Each module registers its commands on `app`.
from optsearch.cli import catalog_cmd, estimate_cmd, import_cmd, launch_cmd, profile_cmd, solve_cmd, compare_cmd, whatif_cmd  # noqa: E402,F401
from optsearch.cli import validate_cmd  # noqa: E402,F401


# Recent typer vendors click as typer._click (no `click` module may be installed); typer.BadParameter derives
# from whichever ClickException typer raises.
_CLICK_EXCEPTION = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


# The conventional status of a process whose reader closed its output pipe (128 + SIGPIPE), as `head` leaves it.
EXIT_OUTPUT_CLOSED = 141


def main() -> None:
    # On a closed output pipe (`optsearch solve ... | head -3`) rich's console and typer's command layer each end
    # the process with exit code 1, the code that means "no plan meets the budget"; 141 says what happened instead.
    from rich.console import Console

    Console.on_broken_pipe = _output_closed
    wide = "COLUMNS" not in os.environ and not sys.stdout.isatty() and ("--help" in sys.argv or "-h" in sys.argv)
    if wide:
        # Off a terminal rich lays help out in 80 columns and cut option names and examples with "…" (`optsearch
        # launch --help | less`); a file or pipe has room.
        os.environ["COLUMNS"] = "160"
    try:
        _main()
    except SystemExit:
        if type(sys.stdout).__name__ == "PacifyFlushWrapper":  # typer's quiet stdout after EPIPE
            sys.exit(EXIT_OUTPUT_CLOSED)
        raise
    finally:
        if wide:
            del os.environ["COLUMNS"]


def _output_closed(console) -> None:
    """rich.console.Console.on_broken_pipe: as rich does (stdout to /dev/null, so that the interpreter's last flush
    says nothing), with EXIT_OUTPUT_CLOSED."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    raise SystemExit(EXIT_OUTPUT_CLOSED)


def _main() -> None:
    try:
        code = app(standalone_mode=False)
    except OptsearchError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(err.exit_code)
    except typer.Exit as ex:
        code = ex.exit_code
    except (typer.Abort, KeyboardInterrupt):
        code = 130
    except _CLICK_EXCEPTION as err:  # a bad option value or an unknown option: one line, like our own errors
        if err.format_message():  # empty when no arguments were given: the help has been printed
            print(f"error: {err.format_message()}", file=sys.stderr)
        sys.exit(err.exit_code)
    # typer turns a KeyboardInterrupt inside a command into exit code 130 and, without standalone mode, returns it
    if code == 130:
        print("interrupted", file=sys.stderr)
    sys.exit(code if isinstance(code, int) else 0)
