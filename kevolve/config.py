"""Typed configuration: the schema Hydra's YAML is checked against, and nothing below the entry point reads YAML.

`conf/config.yaml` and its groups (task/, llm/, search/, resources/, logger/, experiment/) compose into a
`DictConfig`; `from_hydra(cfg)` merges it onto these dataclasses (OmegaConf checks types and unknown keys)
and `validate` checks ranges and choices. Any bad value fails at start with `ConfigError` naming the field,
what it got and what it accepts — before Ray starts or anything is built.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException


class ConfigError(ValueError):
    pass


# conf/config.yaml names run directories after the task; a task given as a folder path by its last part
OmegaConf.register_new_resolver("basename", lambda p: Path(str(p)).name, replace=True)


@dataclass
class TaskConfig:
    name: str = "layernorm_bwd"          # a folder of tasks/, or the path of a task folder of your own
    shapes: Optional[str] = None         # shape set; None: bench on cuda, small on cpu


@dataclass
class SearchConfig:
    seed: int = 0                        # seeds every random choice of the search
    candidates: int = 32                 # budget: candidates evaluated (seeds included)
    wall_time_s: float = 480.0           # budget: seconds of wall time, then the run stops cleanly
    dollars: Optional[float] = None      # budget: LLM spend in USD (None: no limit)
    islands: int = 2
    archive_size: int = 16               # elite archive for inspirations
    per_family: int = 4                  # at most this many archive members descend from one seed
    migration_interval: int = 12         # additions between migrations (ring)
    tournament: int = 3                  # parent selection: tournament size
    operators: dict[str, float] = field(default_factory=lambda: {"knob": 1.0})   # operator -> weight
    knob_changes: int = 2                # knob operator: at most this many knobs changed per child
    in_flight: Optional[int] = None      # candidates between mutation and verdict; None: 4 per evaluator
    timeout_s: float = 60.0              # per call that runs candidate code
    reps: int = 50                       # timing: at most this many calls per function and configuration
    budget_s: float = 0.15               # timing: or this many seconds per function and configuration
    time_inits: str = "first"            # time one initialisation per shape (first), or every one (all)
    baselines: list[str] = field(default_factory=lambda: ["eager", "compile"])
    baseline_refresh_s: Optional[float] = None  # evaluators re-time baselines after this long (0: with every
                                         # candidate); None: 300 on cuda, 0 on cpu (host load skews CPU timing)


@dataclass
class ResourcesConfig:
    address: Optional[str] = None        # None: start a local Ray; "auto" or "host:port": join a cluster
    target: Optional[str] = None         # cpu | cuda; None: cuda when the cluster has GPUs, else cpu
    evaluators: Optional[int] = None     # None: one per GPU on cuda, 1 on cpu
    builders: Optional[int] = None       # None: CPUs left after evaluators (at least 1)
    cpus_per_evaluator: float = 1.0
    worker_threads: Optional[int] = None # CPU target: threads a kernel's OpenMP may use (None: all cores)
    num_cpus: Optional[int] = None       # local Ray only: CPUs to give it (None: all)
    reference_cache_gb: Optional[float] = None   # per evaluator, float64 references kept (None: 16 on cuda, 2 on cpu)
    builder_resources: dict[str, float] = field(default_factory=dict)    # custom Ray resources a build needs
    evaluator_resources: dict[str, float] = field(default_factory=dict)  # ... and an evaluator (node placement)


@dataclass
class LLMConfig:
    provider: str = "none"               # none | openai | gemini  (LLM operators come with the LLM issue)
    model: Optional[str] = None
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class LoggerConfig:
    kind: str = "none"                   # none (W&B arrives with the tracking issue)
    project: str = "kevolve"
    entity: Optional[str] = None
    mode: str = "online"                 # wandb: online | offline


@dataclass
class Config:
    task: TaskConfig = field(default_factory=TaskConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    resources: ResourcesConfig = field(default_factory=ResourcesConfig)
    llm: LLMConfig = field(default_factory=LLMConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    resume: Optional[str] = None         # a run directory to continue
    run_dir: Optional[str] = None        # where this run writes (Hydra's run dir by default)
    progress: bool = True                # the live progress line


def from_hydra(cfg: DictConfig | dict) -> Config:
    """Merges composed YAML onto the schema; raises ConfigError naming the offending field."""
    raw = OmegaConf.create(cfg) if isinstance(cfg, dict) else cfg
    try:
        merged = OmegaConf.merge(OmegaConf.structured(Config), raw)
        config = OmegaConf.to_object(merged)
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None) or ""
        msg = str(e).splitlines()[0]
        raise ConfigError(f"config field {key!r}: {msg}") from None
    validate(config)
    return config


def validate(c: Config) -> None:
    def need(ok: bool, key: str, got: Any, accepts: str) -> None:
        if not ok:
            raise ConfigError(f"config field {key!r}: got {got!r}; expected {accepts}")

    from kevolve.task.spec import list_tasks
    need(c.task.name in list_tasks() or (Path(c.task.name) / "task.yaml").is_file(), "task.name", c.task.name,
         f"one of {list_tasks()} or the path of a folder holding task.yaml")
    need(c.resources.target in (None, "cpu", "cuda"), "resources.target", c.resources.target, "cpu, cuda or null")
    s = c.search
    for key in ("candidates", "islands", "archive_size", "per_family", "migration_interval", "tournament",
                "knob_changes", "reps"):
        need(getattr(s, key) >= 1, f"search.{key}", getattr(s, key), "an integer >= 1")
    for key in ("wall_time_s", "timeout_s", "budget_s"):
        need(getattr(s, key) > 0, f"search.{key}", getattr(s, key), "a number > 0")
    need(s.dollars is None or s.dollars >= 0, "search.dollars", s.dollars, "null or a number >= 0")
    need(s.in_flight is None or s.in_flight >= 1, "search.in_flight", s.in_flight, "null or an integer >= 1")
    need(bool(s.operators) and all(w >= 0 for w in s.operators.values()) and sum(s.operators.values()) > 0,
         "search.operators", dict(s.operators), "operator weights >= 0, not all zero")
    known_ops = {"knob", "translate", "optimize", "crossover", "repair", "meta"}
    unknown = set(s.operators) - known_ops
    need(not unknown, "search.operators", sorted(unknown), f"operators among {sorted(known_ops)}")
    need(s.time_inits in ("first", "all"), "search.time_inits", s.time_inits, "first or all")
    need(set(s.baselines) <= {"eager", "compile", "compile-max-autotune"}, "search.baselines", list(s.baselines),
         "a subset of [eager, compile, compile-max-autotune]")
    r = c.resources
    need(r.evaluators is None or r.evaluators >= 1, "resources.evaluators", r.evaluators, "null or an integer >= 1")
    need(r.builders is None or r.builders >= 1, "resources.builders", r.builders, "null or an integer >= 1")
    for key in ("builder_resources", "evaluator_resources"):
        need(all(v > 0 for v in getattr(r, key).values()), f"resources.{key}", dict(getattr(r, key)),
             "custom Ray resource amounts > 0, e.g. {builder: 1}")
    need(r.reference_cache_gb is None or r.reference_cache_gb >= 0, "resources.reference_cache_gb",
         r.reference_cache_gb, "null or a number of GiB >= 0")
    need(s.baseline_refresh_s is None or s.baseline_refresh_s >= 0, "search.baseline_refresh_s", s.baseline_refresh_s,
         "null or seconds >= 0 (0: with every candidate)")
    need(r.cpus_per_evaluator > 0, "resources.cpus_per_evaluator", r.cpus_per_evaluator, "a number > 0")
    need(c.llm.provider in ("none", "openai", "gemini"), "llm.provider", c.llm.provider, "none, openai or gemini")
    llm_ops = set(s.operators) - {"knob"}
    need(not (llm_ops and c.llm.provider == "none" and any(s.operators[o] > 0 for o in llm_ops)),
         "search.operators", sorted(llm_ops), "only `knob` when llm.provider is none (configure an llm=...)")
    need(c.logger.kind == "none", "logger.kind", c.logger.kind, "none (W&B tracking is not part of this version)")
    need(c.logger.mode in ("online", "offline", "disabled"), "logger.mode", c.logger.mode, "online, offline or disabled")
