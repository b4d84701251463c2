"""One source per default: the typed schema (kevolve.config.schema, kevolve.llm.config) states every default, and is
the base conf/config.yaml composes onto (`kevolve_schema`); a YAML file of conf/ states only what its option
changes. A value YAML states that the schema already gives (a default twice, equal or not), any value in an option
conf/config.yaml selects by default, or a field the schema lacks fails here. Importing kevolve.config has no side
effects."""
from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from kevolve.config import Config

CONF = Path(__file__).resolve().parents[2] / "conf"
GROUPS = ("search", "resources", "llm", "logger", "task", "experiment")
TABLES: set = set()                      # data files are not options (the price table: kevolve/llm/prices.yaml)


def leaves(d: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    if isinstance(d, dict) and d:
        for k, v in d.items():
            yield from leaves(v, f"{prefix}.{k}" if prefix else str(k))
    else:
        yield prefix, d


def schema_default(path: str) -> Any:
    """The schema's default of a dotted field (a dict's key or a list's item: its container's default); KeyError
    for a field the schema does not have."""
    node: Any = Config()
    for part in path.split("."):
        if dataclasses.is_dataclass(node):
            if part not in {f.name for f in dataclasses.fields(node)}:
                raise KeyError(path)
            node = getattr(node, part)
        elif isinstance(node, dict):
            node = node.get(part)
        else:
            raise KeyError(path)
    return dataclasses.asdict(node) if dataclasses.is_dataclass(node) else node


def selected() -> dict[str, str]:
    raw = yaml.safe_load((CONF / "config.yaml").read_text())
    out = {}
    for entry in raw["defaults"]:
        if isinstance(entry, dict):
            for k, v in entry.items():
                out[k.split(" ")[-1]] = v
    return out


def stated() -> Iterator[tuple[str, str, Any, bool]]:
    """(file, dotted field, value, is the option config.yaml selects by default) for every value YAML states."""
    chosen = selected()
    top = yaml.safe_load((CONF / "config.yaml").read_text())
    for key, value in leaves({k: v for k, v in top.items() if k not in ("defaults", "hydra")}, ""):
        if key:
            yield "config.yaml", key, value, True
    for group in GROUPS:
        for path in sorted((CONF / group).glob("*.yaml")):
            if (group, path.stem) in TABLES:
                continue
            raw = yaml.safe_load(path.read_text()) or {}
            text = path.read_text()
            prefix = "" if "@package _global_" in text else group
            body = {k: v for k, v in raw.items() if k != "defaults"}
            for key, value in leaves(body, prefix):
                if key != prefix:
                    yield f"{group}/{path.name}", key, value, chosen.get(group) == path.stem


@pytest.mark.parametrize("where,key,value,default", list(stated()), ids=lambda x: str(x))
def test_no_default_is_stated_twice(where, key, value, default):
    try:
        schema = schema_default(key)
    except KeyError:
        pytest.fail(f"conf/{where}: {key} is no field of the schema (kevolve/config/schema.py)")
    assert not default, (f"conf/{where} is the option selected by default, so {key}: {value!r} states a default "
                         f"the schema gives ({schema!r}): keep defaults in kevolve/config/schema.py only")
    assert value != schema, (f"conf/{where}: {key}: {value!r} restates the schema's default: delete it there "
                             "(the schema is the one source of a default)")


def test_the_composition_starts_from_the_schema():
    """conf/config.yaml's first default is the schema itself, and the task is the schema's default (no option named):
    so the default options state nothing and every field can be overridden whatever the options."""
    raw = yaml.safe_load((CONF / "config.yaml").read_text())
    assert raw["defaults"][0] == "kevolve_schema"
    assert selected()["task"] is None
    from kevolve.config import from_hydra
    from kevolve.config.hydra import compose
    assert from_hydra(compose()).task.name == Config().task.name
    assert from_hydra(compose("logger=none", "logger.project=p", "llm=openai", "llm.timeout_s=9")).llm.timeout_s == 9


def test_a_restated_default_is_caught():
    assert schema_default("search.candidates") == 32 and schema_default("llm.timeout_s") == 600.0
    with pytest.raises(KeyError):
        schema_default("search.bogus")


def test_importing_config_has_no_side_effects():
    code = ("import sys, kevolve.config\n"
            "from hydra.core.config_store import ConfigStore\n"
            "from omegaconf import OmegaConf\n"
            "assert not OmegaConf.has_resolver('basename'), 'a resolver was registered on import'\n"
            "assert 'task' not in ConfigStore.instance().repo, 'task options were stored on import'\n"
            "from kevolve.config import hydra as h; h.install()\n"
            "assert OmegaConf.has_resolver('basename') and 'task' in ConfigStore.instance().repo\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_every_option_of_the_llm_group_is_a_provider():
    """conf/llm/ holds providers only: `llm=prices` (a data file once) is no option that runs the knob search."""
    from kevolve.config import ConfigError
    from kevolve.config.hydra import compose
    from kevolve.llm.config import PROVIDERS
    for path in (CONF / "llm").glob("*.yaml"):
        raw = yaml.safe_load(path.read_text()) or {}
        assert raw.get("provider", "none") in PROVIDERS and (raw.get("provider") or path.stem == "none"), path
    with pytest.raises(ConfigError, match="llm/prices|prices"):
        compose("llm=prices")
