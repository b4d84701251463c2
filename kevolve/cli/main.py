"""`kevolve`, the console command (pyproject.toml's `[project.scripts]`): the search, and the other commands as
its subcommands.

    kevolve task=layernorm_fwd llm=openai …     python -m kevolve …            (the search; Hydra's overrides)
    kevolve evaluate task=… kernel=…           python -m kevolve.evaluate …
    kevolve tasks new|list|check|import|best … python -m kevolve.tasks …
    kevolve report RUN_DIR …                   python -m kevolve.report …

Tab completion (Hydra's, for the search's groups and fields): `eval "$(kevolve -sc install=bash)"` (zsh: the same
with `install=zsh` after `autoload -U bashcompinit && bashcompinit`; fish: `kevolve -sc install=fish | source`).
A subcommand is a first argument without `=` that names one; anything else is the search's.
"""
from __future__ import annotations

import sys

SUBCOMMANDS = {"evaluate": "kevolve.cli.evaluate", "tasks": "kevolve.cli.tasks", "report": "kevolve.cli.report"}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] in SUBCOMMANDS:
        import importlib
        sys.exit(importlib.import_module(SUBCOMMANDS[sys.argv[1]]).main(sys.argv[2:]))
    from kevolve.cli.search import cli
    cli()
