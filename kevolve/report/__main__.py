"""`python -m kevolve.report RUN_DIR ...`: the HTML report (`kevolve.cli.report`)."""
import sys

from kevolve.cli.report import main

if __name__ == "__main__":
    sys.exit(main())
