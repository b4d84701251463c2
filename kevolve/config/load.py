"""From composed YAML to a checked `Config`: `from_hydra(cfg)` and `validate(config)`.

`from_hydra` merges Hydra's composed `DictConfig` (or a plain dict) onto the schema (`kevolve.config.schema`):
OmegaConf checks types and unknown keys; then `validate` checks ranges and choices. Any bad value raises
`ConfigError` naming the field, what it got and what it accepts — before Ray starts or anything is built.
Importing this module has no side effects (OmegaConf is imported when a config is merged).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kevolve.config.schema import (BASELINES, CHOICES, COMPILED_CHECKS, CPU_FLUSH, LOGGERS, MODES, SEEDS, TARGETS,
                                   VERIFIERS, WANDB_MODES, Config, ConfigError)
from kevolve.config.tasks import list_tasks
from kevolve.llm.config import validate as validate_llm

if TYPE_CHECKING:
    from omegaconf import DictConfig


def from_hydra(cfg: DictConfig | dict) -> Config:
    """Merges composed YAML onto the schema; raises ConfigError naming the offending field."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException
    # a plain copy: a composed config is typed already (conf/ starts from the schema), and a key a `+override`
    # added to a typed node would pass into the dataclass unseen; merged from plain data, it is refused
    raw = OmegaConf.create(cfg if isinstance(cfg, dict) else OmegaConf.to_container(cfg, resolve=False))
    try:
        merged = OmegaConf.merge(OmegaConf.structured(Config), raw)
        config = OmegaConf.to_object(merged)
        assert isinstance(config, Config)
    except OmegaConfBaseException as e:
        if isinstance(e.__cause__, ConfigError):      # a schema's own check (__post_init__) names its field
            raise e.__cause__ from None
        key = getattr(e, "full_key", None) or ""
        msg = str(e).splitlines()[0]
        raise ConfigError(f"config field {key!r}: {msg}") from None
    validate(config)
    return config


def validate(c: Config) -> None:
    def need(ok: bool, key: str, got: Any, accepts: str) -> None:
        if not ok:
            raise ConfigError(f"config field {key!r}: got {got!r}; expected {accepts}")

    need(c.task.name in list_tasks() or (Path(c.task.name) / "task.yaml").is_file(), "task.name", c.task.name,
         f"one of {list_tasks()} or the path of a folder holding task.yaml")
    need(c.resources.target is None or c.resources.target in TARGETS, "resources.target", c.resources.target,
         "cpu, cuda or null")
    s = c.search
    for key in ("candidates", "knob_changes", "reps"):
        need(getattr(s, key) >= 1, f"search.{key}", getattr(s, key), "an integer >= 1")
    for key in ("wall_time_s", "timeout_s", "budget_s"):
        need(getattr(s, key) > 0, f"search.{key}", getattr(s, key), "a number > 0")
    need(s.dollars is None or s.dollars >= 0, "search.dollars", s.dollars, "null or a number >= 0")
    need(s.in_flight is None or s.in_flight >= 1, "search.in_flight", s.in_flight, "null or an integer >= 1")
    need(s.time_inits in ("first", "all"), "search.time_inits", s.time_inits, "first or all")
    need(s.domain in ("draw", "off"), "search.domain", s.domain, "draw or off")
    need(s.release >= 0, "search.release", s.release, "an integer >= 0 (0: no release check)")
    need(set(s.baselines) <= set(BASELINES), "search.baselines", list(s.baselines),
         "a subset of [eager, compile, compile-max-autotune]")
    need(0.0 <= s.compare_share <= 1.0, "search.compare_share", s.compare_share, "a share between 0 and 1")
    need(s.baseline_refresh_s is None or s.baseline_refresh_s >= 0, "search.baseline_refresh_s", s.baseline_refresh_s,
         "null or seconds >= 0 (0: with every candidate)")
    ops = s.population.operators
    llm_ops = sorted(o for o, w in ops.items() if o != "knob" and w is not None and w > 0)
    need(not (llm_ops and c.llm.provider == "none"), "search.population.operators", llm_ops,
         "only `knob` when llm.provider is none (configure an llm=...)")
    r = c.resources
    need(r.evaluators is None or r.evaluators >= 1, "resources.evaluators", r.evaluators, "null or an integer >= 1")
    need(r.builders is None or r.builders >= 1, "resources.builders", r.builders, "null or an integer >= 1")
    for key in ("builder_resources", "evaluator_resources"):
        need(all(v > 0 for v in getattr(r, key).values()), f"resources.{key}", dict(getattr(r, key)),
             "custom Ray resource amounts > 0, e.g. {builder: 1}")
    need(r.reference_cache_gb is None or r.reference_cache_gb >= 0, "resources.reference_cache_gb",
         r.reference_cache_gb, "null or a number of GiB >= 0")
    need(r.cpus_per_evaluator > 0, "resources.cpus_per_evaluator", r.cpus_per_evaluator, "a number > 0")
    need(r.exchange in ("auto", "files"), "resources.exchange", r.exchange, "auto or files")
    need(r.compiled_checks in COMPILED_CHECKS, "resources.compiled_checks", r.compiled_checks,
         " | ".join(COMPILED_CHECKS) + " (auto: on cuda)")
    need(r.cpu_flush in CPU_FLUSH, "resources.cpu_flush", r.cpu_flush, " | ".join(CPU_FLUSH))
    need(r.cuda_arch is None or bool(re.fullmatch(r"\d{2,3}a?", str(r.cuda_arch))), "resources.cuda_arch",
         r.cuda_arch, 'null or an nvcc architecture such as "90a" or "80"')
    try:
        validate_llm(c.llm)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    need(s.choice in CHOICES, "search.choice", s.choice, " | ".join(CHOICES))
    need(s.seeds in SEEDS or all(Path(f).is_file() for f in s.seeds.split(",")), "search.seeds", s.seeds,
         "all (listed seeds, then the best/ kernel) | listed | best | kernel files, comma-separated (PATH.cpp,…)")
    need(s.llm_calls is None or s.llm_calls >= 1, "search.llm_calls", s.llm_calls, "null or an integer >= 1")
    for key in ("translations", "meta_children", "strategies_shown"):
        need(getattr(s, key) >= (0 if key != "meta_children" else 1), f"search.{key}", getattr(s, key),
             "an integer >= 0" if key != "meta_children" else "an integer >= 1")
    need(s.mode in MODES, "search.mode", s.mode, "evolve | best_of_n (independent samples from the seeds)")
    v = s.verifiers
    checks = list(v.checks or [])
    need(set(checks) <= set(VERIFIERS) and len(set(checks)) == len(checks), "search.verifiers.checks",
         v.checks, f"null (all three with an LLM) or distinct names among {list(VERIFIERS)}")
    need(not (checks and c.llm.provider == "none"), "search.verifiers.checks", checks,
         "[] or null when llm.provider is none (LLM verifiers need an llm=...)")
    need(v.mode in ("filter", "shadow"), "search.verifiers.mode", v.mode, "filter or shadow")
    need(v.aggregation in ("any", "majority", "all"), "search.verifiers.aggregation", v.aggregation,
         "any, majority or all")
    for key in ("audit_share", "precision_bar"):
        need(0 <= getattr(v, key) <= 1, f"search.verifiers.{key}", getattr(v, key), "a number in [0, 1]")
    need(v.min_samples >= 0, "search.verifiers.min_samples", v.min_samples, "an integer >= 0")
    need(c.logger.kind in LOGGERS, "logger.kind", c.logger.kind, " | ".join(LOGGERS))
    need(c.logger.mode is None or c.logger.mode in WANDB_MODES, "logger.mode", c.logger.mode,
         f"null ($WANDB_MODE, else offline) or {' | '.join(WANDB_MODES)}")
