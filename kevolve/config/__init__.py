"""Typed configuration: the schema Hydra's YAML is checked against; nothing below the entry point reads YAML.

`conf/config.yaml` and its groups (task/, llm/, search/, resources/, logger/, experiment/) compose into a
`DictConfig` (after `kevolve.config.hydra.install()`); `from_hydra(cfg)` merges it onto the dataclasses of
`kevolve.config.schema` and `validate` checks ranges and choices. Any bad value fails at start with `ConfigError`
naming the field, what it got and what it accepts — before Ray starts or anything is built.

Modules: `schema` (the dataclasses: every default), `load` (from_hydra, validate), `hydra` (resolvers and the task
group's options, installed on request), `tasks` (the shipped tasks' names), `env` (the KEVOLVE_* environment).
Importing this package has no side effects: no resolver, no ConfigStore entry, no environment read.
"""
from kevolve.config.load import from_hydra, validate
from kevolve.config.schema import (BASELINES, CHOICES, COMPILED_CHECKS, CPU_FLUSH, LLM_OPERATORS, LOGGERS, MODES,
                                   OPERATORS, SEEDS, TARGETS, VERIFIERS, WANDB_MODES, Config, ConfigError,
                                   LoggerConfig, PopulationConfig, ResourcesConfig, SearchConfig, TaskConfig,
                                   VerifiersConfig)

__all__ = ["from_hydra", "validate", "BASELINES", "CHOICES", "COMPILED_CHECKS", "CPU_FLUSH", "LLM_OPERATORS",
           "LOGGERS", "MODES", "OPERATORS", "SEEDS", "TARGETS", "VERIFIERS", "WANDB_MODES", "Config", "ConfigError",
           "LoggerConfig", "PopulationConfig", "ResourcesConfig", "SearchConfig", "TaskConfig", "VerifiersConfig"]
