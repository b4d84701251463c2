"""What Hydra's composition of conf/ needs from Python, installed by `install()` — never on import.

- the `basename` resolver: conf/config.yaml names run directories after the task (a task given as a folder path
  by its last part);
- the `task` group's options: one per folder of tasks/ (`{name, shapes: null}`), unless conf/task/<name>.yaml
  exists (that file is the option then), so a new task folder needs no file under conf/task/.

`install()` is idempotent; the entry points (`kevolve.cli.search`) and whatever composes conf/ (tests) call it
before composing.
"""
from __future__ import annotations

from pathlib import Path

from kevolve import ROOT
from kevolve.config.schema import TaskConfig
from kevolve.config.tasks import list_tasks


def install() -> None:
    """Registers the resolvers and the task group's options with OmegaConf and Hydra's ConfigStore."""
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf
    OmegaConf.register_new_resolver("basename", lambda p: Path(str(p)).name, replace=True)
    store = ConfigStore.instance()
    for name in list_tasks():
        if not (ROOT / "conf" / "task" / f"{name}.yaml").exists():
            store.store(group="task", name=name, node=TaskConfig(name=name))

