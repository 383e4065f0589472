"""The `optsearch` command: a thin typer shell over the library. Errors become one line and an exit code."""

from __future__ import annotations

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

# Each module registers its commands on `app`.
from optsearch.cli import catalog_cmd, estimate_cmd  # noqa: E402,F401


def main() -> None:
    try:
        app(standalone_mode=False)
    except OptsearchError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(err.exit_code)
    except typer.Exit as ex:
        sys.exit(ex.exit_code)
    except typer.Abort:
        print("aborted", file=sys.stderr)
        sys.exit(130)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    except __import__("click").ClickException as err:
        err.show()
        sys.exit(err.exit_code)
