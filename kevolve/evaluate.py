"""`python -m kevolve.evaluate task=NAME kernel=PATH ...` — judges one kernel; see `kevolve.judge.cli`."""
import sys

from kevolve.judge.cli import main

if __name__ == "__main__":
    sys.exit(main())
