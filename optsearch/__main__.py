"""`python -m optsearch` and the `optsearch` script. The CLI's imports (typer, rich, pydantic, numpy) take a moment;
a Ctrl-C during them is one line and exit code 130, like a Ctrl-C later on, not a traceback."""

import sys


def main() -> None:
    try:
        from optsearch.cli import main as cli_main
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    cli_main()


if __name__ == "__main__":
    main()
