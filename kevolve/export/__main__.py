"""`python -m kevolve.export RUN_DIR -o DIR`: a run's op as a torch package (`kevolve.cli.export`)."""
import sys

from kevolve.cli.export import main

if __name__ == "__main__":
    sys.exit(main())
