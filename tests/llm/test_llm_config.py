"""The `llm` config group: every option in conf/llm composes with Hydra onto LLMConfig and validates; a bad field
is a ValueError naming it."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from kevolve.config import from_hydra     # also registers the task group's options (tasks/), which compose needs
from kevolve.llm import LLMConfig, LLMConfigError, ModelSpec, make_provider, validate
from kevolve.llm.ensemble import Disabled
from kevolve.search import llm_defaults as pipeline

CONF = Path(__file__).resolve().parents[2] / "conf"
OPTIONS = sorted(p.stem for p in (CONF / "llm").glob("*.yaml"))


def load(*overrides: str) -> LLMConfig:
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        cfg = compose(config_name="config", overrides=list(overrides))
    llm = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(LLMConfig), cfg.llm))
    validate(llm)
    return llm


@pytest.mark.parametrize("option", OPTIONS)
def test_every_llm_option_composes_and_validates(option):
    assert isinstance(load(f"llm={option}"), LLMConfig)


def test_options_are_the_ones_documented():
    assert {"none", "openai", "gemini", "local"} == set(OPTIONS)          # providers only: prices is data
    assert load("llm=local").base_url == "http://localhost:8000/v1"
    assert load("llm=none").provider == "none"


def test_overrides_from_the_command_line():
    c = load("llm=openai", "llm.models=[{name: o3, weight: 2}]", "llm.reasoning_efforts=[low,null]",
             "++llm.prices={gpt-4.1: {input: 1, output: 4}, Qwen/Qwen3-32B: {input: 0.1, output: 0.2}}")
    assert [(m.name, m.weight) for m in c.models] == [("o3", 2.0)]
    assert c.reasoning_efforts == ["low", None] and c.prices["gpt-4.1"].output == 4    # a dotted name
    assert c.prices["Qwen/Qwen3-32B"].input == 0.1


def _readme_llm_commands() -> list[list[str]]:
    """The `python -m kevolve ...` commands of docs/search.md's "Using an LLM" section, as argument lists."""
    text = (CONF.parent / "docs" / "search.md").read_text()
    section = text.split("## Using an LLM", 1)[1].split("\n## ", 1)[0]
    block = section.split("```bash", 1)[1].split("```", 1)[0].replace("\\\n", " ")
    return [shlex.split(line, comments=True)[3:]
            for line in block.splitlines() if line.startswith("python -m kevolve ")]


def test_the_readmes_llm_commands_compose_and_validate():
    """Every command of "Using an LLM", and the price override its cost paragraph gives, composes into a Config
    that passes every check (kevolve.config.from_hydra), with the provider and models it names."""
    commands = _readme_llm_commands()
    providers = [next(a for a in c if a.startswith("llm=")) for c in commands]
    assert list(dict.fromkeys(providers)) == ["llm=openai", "llm=gemini", "llm=local"] and len(commands) >= 3
    price = re.search(r"`('\+\+llm\.prices=[^`]+')`", (CONF.parent / "docs" / "search.md").read_text())[1]
    for overrides in commands + [["llm=openai", *shlex.split(price)]]:
        with initialize_config_dir(config_dir=str(CONF), version_base=None):
            cfg = from_hydra(compose(config_name="config", overrides=overrides))
        assert cfg.llm.provider == next(a for a in overrides if a.startswith("llm="))[4:] and cfg.llm.models
        resolved = pipeline.resolve(cfg.search, llm=True).population.operators     # nulls: the pipeline's weights
        assert overrides not in commands or resolved["optimize"] > 0
        assert overrides is not commands[-1] or cfg.llm.models[0].name == "Qwen/Qwen2.5-Coder-32B-Instruct"
    assert cfg.llm.prices["gpt-4.1"].input == 2


def test_none_makes_a_disabled_provider_that_says_what_to_do():
    llm = make_provider(load("llm=none"), env={})
    assert isinstance(llm, Disabled)
    with pytest.raises(LLMConfigError, match="llm=openai"):
        llm.complete([{"role": "user", "content": "x"}], model="m")


BAD = [
    (dict(provider="anthropic"), "llm.provider"),
    (dict(models=[]), "llm.models"),
    (dict(models=[ModelSpec(name="a"), ModelSpec(name="a")]), "llm.models"),
    (dict(models=[ModelSpec(name="a", weight=0)]), "llm.models"),
    (dict(models=[ModelSpec(name="a", weight=-1), ModelSpec(name="b")]), "llm.models"),
    (dict(models=[ModelSpec(name="")]), "llm.models"),
    (dict(models=[ModelSpec(name="a", provider="bard")]), "llm.models.a.provider"),
    (dict(models=[ModelSpec(name="a", provider="local")]), "llm.models.a.base_url"),
    (dict(temperatures=[]), "llm.temperatures"),
    (dict(temperatures=[3.0]), "llm.temperatures"),
    (dict(reasoning_efforts=["turbo"]), "llm.reasoning_efforts"),
    (dict(reasoning_efforts=[]), "llm.reasoning_efforts"),
    (dict(thinking_budget=-5), "llm.thinking_budget"),
    (dict(max_output_tokens=0), "llm.max_output_tokens"),
    (dict(timeout_s=0), "llm.timeout_s"),
    (dict(max_retries=-1), "llm.max_retries"),
    (dict(concurrency=0), "llm.concurrency"),
    (dict(replay="/nonexistent/run"), "llm.replay"),
]


@pytest.mark.parametrize("change,field", BAD, ids=[f for _, f in BAD])
def test_bad_field_is_named(change, field):
    cfg = LLMConfig(**{**dict(provider="openai", models=[ModelSpec(name="gpt-5")]), **change})
    with pytest.raises(ValueError, match=f"config field '{field}'"):
        validate(cfg)
