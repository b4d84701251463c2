"""What Hydra's composition of conf/ needs from Python, installed by `install()` — never on import — and
`compose(*overrides)`, conf/ composed as the entry point composes it.

- the schema (`kevolve.config.schema.Config`) as `kevolve_schema`, the base conf/config.yaml starts from: every
  field and its default come from it, so a YAML file states only what its option changes, and any field can be
  overridden (`search.candidates=100`) whatever the options chosen;
- the `basename` resolver: conf/config.yaml names run directories after the task (a task given as a folder path
  by its last part); `kevolve_swept`: a multirun job's folder is named by the values it sweeps (`3_seed=1,llm=openai`);
- the `task` group's options: one per folder of tasks/ (`{name, shapes: null}`), unless conf/task/<name>.yaml
  exists (that file is the option then), so a new task folder needs no file under conf/task/.

`install()` is idempotent; the entry points (`kevolve.cli.search`) and whatever composes conf/ (tests) call it
before composing. An override Hydra cannot merge (a value of the wrong type, a field the schema lacks) is a
`ConfigError` naming the field from `compose`; from `python -m kevolve` it is Hydra's message, exit status 2.
"""
from __future__ import annotations

import sys
from pathlib import Path

from kevolve import ROOT
from kevolve.config.schema import Config, ConfigError, TaskConfig
from kevolve.config.tasks import list_tasks


def install() -> None:
    """Registers the resolvers and the task group's options with OmegaConf and Hydra's ConfigStore."""
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf
    OmegaConf.register_new_resolver("basename", lambda p: Path(str(p)).name, replace=True)
    OmegaConf.register_new_resolver("kevolve_swept", lambda overrides: swept(list(overrides), sys.argv[1:]),
                                    replace=True)
    store = ConfigStore.instance()
    store.store(name="kevolve_schema", node=Config)      # the base of conf/config.yaml: every field, its default
    for name in list_tasks():
        if not (ROOT / "conf" / "task" / f"{name}.yaml").exists():
            store.store(group="task", name=name, node=TaskConfig(name=name))



def sweeps(value: str) -> bool:
    """Whether an override's value sweeps (Hydra's: a comma outside brackets and quotes, or a sweep function)."""
    if value.startswith(("range(", "choice(", "glob(", "interval(")):
        return True
    depth, quote = 0, None
    for ch in value:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[({":
            depth += 1
        elif ch in "])}":
            depth -= 1
        elif ch == "," and depth == 0:
            return True
    return False


def swept(overrides: list[str], argv: list[str]) -> str:
    """A multirun job's folder name: its values of the keys the command line sweeps (`seed=1,llm=openai`), each
    key by its last part, a path by its last part; "job" when nothing is swept."""
    keys = {a.lstrip("+~").partition("=")[0] for a in argv if "=" in a and sweeps(a.partition("=")[2])}
    parts = []
    for o in overrides:
        key, _, value = o.lstrip("+~").partition("=")
        if key in keys:
            parts.append(f"{key.rsplit('.', 1)[-1]}={Path(value).name if '/' in value else value}")
    return ",".join(parts) or "job"


def compose(*overrides: str):
    """conf/config.yaml composed with `overrides` (a `DictConfig`); ConfigError naming the field Hydra refused."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    install()
    try:
        with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
            return hydra_compose(config_name="config", overrides=list(overrides))
    except HydraException as e:
        cause = e.__cause__
        key = getattr(cause, "full_key", None) or ""
        why = str(cause or e).splitlines()[0]
        raise ConfigError(f"config field {key!r}: {why} ({str(e).splitlines()[0]})") from None
