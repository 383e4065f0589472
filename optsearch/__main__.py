"""`python -m optsearch`: the same entry point as the `optsearch` script."""

from optsearch.cli import main

if __name__ == "__main__":
    main()
