"""`python -m kevolve.tasks list | check | import` — see `kevolve.cli.tasks`.

Why a module of this name: `python -m` runs a module, and the command reads best as `kevolve.tasks` (it acts on
the checkout's `tasks/` folder, the task data); the code lives in the `kevolve.task` package beside what a task
is, and this file only runs it, as `kevolve/evaluate.py` runs `kevolve.cli.evaluate`.
"""
import sys

from kevolve.cli.tasks import main

if __name__ == "__main__":
    sys.exit(main())
