"""`python -m kevolve.evaluate task=NAME kernel=PATH ...` — judges one kernel; see `kevolve.cli.evaluate`."""
import sys

from kevolve.cli.evaluate import main

if __name__ == "__main__":
    sys.exit(main())
