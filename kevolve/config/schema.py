"""The typed configuration schema: every field of a search, its default and its meaning, in dataclasses.

This module is the one place a default lives: it is the base conf/config.yaml composes onto (`kevolve_schema`,
installed by `kevolve.config.hydra`), and a YAML file of conf/ states only what its option changes
(tests/config/test_defaults.py fails on a default stated twice). It imports nothing but the standard library and
the LLM's own schema (`kevolve.llm.config`), reads no environment and touches no file: no side effects on import.
`kevolve.config.load` merges Hydra's YAML onto it and checks ranges and choices; `kevolve.config.hydra` installs
what Hydra's composition needs (resolvers, the task group's options).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from kevolve.llm.config import LLMConfig


class ConfigError(ValueError):
    """A configuration value kevolve cannot run with; the message names the field, what it got and what it accepts."""


@dataclass
class TaskConfig:
    name: str = "layernorm_bwd"          # a folder of tasks/, or the path of a task folder of your own
    shapes: Optional[str] = None         # shape set; None: bench on cuda, small on cpu



OPERATORS = ("knob", "translate", "optimize", "crossover", "repair", "meta", "red_team")
LLM_OPERATORS = OPERATORS[1:]
CHOICES = ("weights", "ucb1", "thompson")
SEEDS = ("all", "listed", "best")
VERIFIERS = ("compile", "memory", "numerics")
MODES = ("evolve", "best_of_n")
TARGETS = ("cpu", "cuda")
BASELINES = ("eager", "compile", "compile-max-autotune")   # compile-max-autotune: mode max-autotune-no-cudagraphs
COMPILED_CHECKS = ("auto", "on", "off")
CPU_FLUSH = ("lines", "llc")       # judge/worker/timing.py CpuClock


@dataclass
class PopulationConfig:
    """How the population is shaped and how it proposes (`search.population`; `Population.propose`).

    islands:            independent sub-populations (≥ 1); migration connects them in a ring.
    archive_size:       the elite archive's capacity (≥ 1): inspirations are drawn from it.
    per_family:         at most this many archive members per family (≥ 1): keeps the archive diverse.
    migration_interval: copy each island's best to the next island after this many additions (≥ 1).
    tournament:         parent selection draws this many island members (with replacement) and keeps the best
                        (≥ 1): larger is greedier; 1 is uniform.
    usage_penalty:      a member's fitness is divided by (1 + usage_penalty × uses) in the tournament, uses
                        = children added + selections whose child has not arrived (≥ 0; 0 = pure fitness).
    founders:           operators whose candidates found a new family instead of joining their parent's.
    operators:          operator -> weight: how often each is proposed (knob needs no LLM; translate, optimize,
                        crossover, repair, meta and red_team need an llm=...; red_team is off unless weighted:
                        its accepted children are reported as suspected judge bugs, never as kernels). A weight
                        left null (the default) is the pipeline's for the LLM chosen, resolved in the plan
                        (kevolve/search/llm_defaults.py): with llm=none knob alone, with an LLM the paper's pipeline.
    inspiration_rate:   the probability that a proposal carries inspirations from the archive (0–1).
    inspirations:       how many it carries then (≥ 1).
    bucket_parents:     the probability that a parent is drawn from the size buckets' champions (the fastest
                        correct kernel of each bucket, `kevolve.search.buckets`) instead of the tournament (0–1):
                        lets a kernel that wins on some sizes only have children; 0 = geomean fitness alone.
    """
    islands: int = 2
    archive_size: int = 16
    per_family: int = 4
    migration_interval: int = 12
    tournament: int = 3
    usage_penalty: float = 0.5
    founders: list[str] = field(default_factory=lambda: ["seed", "translate", "meta"])
    operators: dict[str, Optional[float]] = field(default_factory=lambda: dict.fromkeys(OPERATORS))
    inspiration_rate: float = 0.3
    inspirations: int = 1
    bucket_parents: float = 0.25

    def __post_init__(self):
        def need(ok: bool, key: str, accepts: str) -> None:
            if not ok:
                raise ConfigError(f"config field 'search.population.{key}': got {getattr(self, key)!r}; "
                                  f"expected {accepts}")
        for key in ("islands", "archive_size", "per_family", "migration_interval", "tournament", "inspirations"):
            value = getattr(self, key)
            need(isinstance(value, int) and not isinstance(value, bool) and value >= 1, key, "an integer >= 1")
        need(isinstance(self.usage_penalty, (int, float)) and self.usage_penalty >= 0, "usage_penalty", "a number >= 0")
        need(0 <= self.inspiration_rate <= 1, "inspiration_rate", "a probability in [0, 1]")
        need(0 <= self.bucket_parents <= 1, "bucket_parents", "a probability in [0, 1]")
        ops = self.operators
        given = [w for w in ops.values() if w is not None]
        need(all(isinstance(w, (int, float)) and w >= 0 for w in given), "operators",
             "operator weights >= 0, or null for the pipeline's default")
        need(not given or len(given) < len(ops) or sum(given) > 0, "operators", "operator weights, not all zero")
        need(not set(ops) - set(OPERATORS), "operators", f"operators among {list(OPERATORS)}")
        self.founders, self.operators = list(self.founders), dict(ops)

    @property
    def weights(self) -> dict[str, float]:
        """The weights once resolved (kevolve/search/llm_defaults.py); raises when one is still null."""
        if any(w is None for w in self.operators.values()):
            raise ValueError("operator weights not resolved: kevolve.search.llm_defaults.resolve fills the nulls")
        return {op: float(w or 0.0) for op, w in self.operators.items()}


@dataclass
class VerifiersConfig:
    """LLM verifiers (`search.verifiers`; kevolve.operators.verifiers and .screening): they read a candidate that
    passed the static rules and predict, without compiling it, whether it fails a check.

    checks:         which verifiers run: any of compile, memory, numerics ([] = none; each is one LLM call per
                    candidate); null (the default): all three with an LLM, none without
                    (kevolve/search/llm_defaults.py).
    mode:           shadow (record verdicts, build and judge everything) | filter (drop rejected candidates).
    aggregation:    any | majority | all: how the verdicts of the verifiers that may reject combine.
    audit_share:    filter mode: this fraction of rejected candidates is built and judged anyway (0–1), so false
                    rejects are measured.
    precision_bar:  a verifier may reject only once its precision on this run reaches this (0–1) …
    min_samples:    … over at least this many judged fail verdicts; until then its verdict only orders the
                    build queue.
    """
    checks: Optional[list[str]] = None
    mode: str = "shadow"
    aggregation: str = "any"
    audit_share: float = 0.1
    precision_bar: float = 0.9
    min_samples: int = 20


@dataclass
class SearchConfig:
    seed: int = 0                        # seeds every random choice of the search
    candidates: int = 32                 # budget: candidates evaluated (seeds included)
    wall_time_s: float = 480.0           # budget: seconds of wall time, then the run stops cleanly
    dollars: Optional[float] = None      # budget: LLM spend in USD (None: no limit)
    seeds: str = "all"                   # what the search starts from: all (the seeds task.yaml lists for the
                                         # target, then the task's best/ kernel for it, if any) | listed (the
                                         # listed seeds only) | best (the best/ kernel only: `python -m
                                         # kevolve.tasks best RUN_DIR` makes one) | kernel files of your own,
                                         # comma-separated (a task without seeds: an import, say); replay takes
                                         # the recorded run's seeds, and a resumed run is not seeded again
    population: PopulationConfig = field(default_factory=PopulationConfig)   # islands, archive, selection, operators
    mode: str = "evolve"                 # evolve (the search) | best_of_n (the same budget as independent samples
                                         # from the seeds: no parents from the archive, no inspirations, repair,
                                         # crossover, strategies shown or bandit; kevolve/search/llm_defaults.py)
    dry_run: bool = False                # compose the first prompts, print their token counts and the expected
                                         # cost per candidate and per run at the configured prices, call nothing,
                                         # exit 0 (kevolve/search/dry_run.py)
    choice: str = "weights"              # operator × model choice: weights (search.population.operators × the
                                         # llm.models weights) | ucb1 | thompson (bandits rewarded by the child's
                                         # fitness over its parent's; a weight of 0 switches an arm off)
    llm_calls: Optional[int] = None      # LLM proposals in flight; None: sized to keep every evaluator fed,
                                         # 1.25 × evaluators × LLM latency / (judgement time × children per
                                         # reply), from priors (60 s replies; 4 s cuda, 30 s cpu judgements) at
                                         # the start, then from this run's measurements, at most llm.concurrency
                                         # × endpoints (kevolve/search/pacing.py); a number: exactly that many
    translations: int = 2                # with an LLM and translate weighted: first kernels written from the torch
                                         # reference at start (founders without parents; the task's seeds stay);
                                         # every second one from a torch-extension seed of the task, if it has one
    meta_children: int = 4               # meta-generation: strategies asked for, one child each
    strategies_shown: int = 3            # the best strategies so far shown in optimize and meta prompts
    profile: bool = True                 # cuda, with `ncu` on the evaluators' PATH: a parent's first optimize or
                                         # meta proposal has it profiled by Nsight Compute (one call, on an
                                         # evaluator), and later prompts on it show the profile (search/profile.py)
    verifiers: VerifiersConfig = field(default_factory=VerifiersConfig)     # LLM verifiers before any build
    knob_changes: int = 2                # knob operator: at most this many knobs changed per child
    in_flight: Optional[int] = None      # candidates between mutation and verdict; None: 4 per evaluator (and
                                         # the LLM calls), or on cuda without LLM operators one per builder and 2
                                         # per evaluator if that is more (kevolve.search.plan.default_in_flight)
    timeout_s: float = 60.0              # per call that runs candidate code
    reps: int = 50                       # timing: at most this many calls per function and configuration
    budget_s: float = 0.15               # timing: or this many seconds per function and configuration
    time_inits: str = "first"            # time one initialisation per shape (first), or every one (all)
    baselines: list[str] = field(default_factory=lambda: ["eager", "compile"])   # torch timed beside each kernel:
                                         # eager | compile | compile-max-autotune (speedup is over the fastest)
    baseline_refresh_s: Optional[float] = None  # evaluators re-time baselines after this long (0: with every
                                         # candidate); None: 300 (the best is chosen by paired timings)
    domain: str = "draw"                 # draw: every judgement also checks a few configurations drawn from the
                                         # task's domain with a secret salt (judge/evaluator/drawn.py) | off: the
                                         # shape set's configurations alone
    release: int = 200                   # before a run names its best: that kernel checked on this many
                                         # configurations swept over the domain in a fresh worker, a failure shrunk
                                         # and the next candidate taken (search/release.py); 0: no release check
    compare_share: float = 0.10          # paired comparisons of challengers with the best take at most this share
                                         # of the evaluators' time (the fittest left is compared at the finish)


@dataclass
class ResourcesConfig:
    address: Optional[str] = None        # None: start a local Ray; "auto" or "host:port": join a cluster
    target: Optional[str] = None         # cpu | cuda; None: cuda when the cluster has GPUs, else cpu
    evaluators: Optional[int] = None     # None: one per GPU on cuda, 1 on cpu; more than the GPUs: they share
                                         # them (checks overlap, timed rounds take turns: judge/evaluator/gpu_lock.py)
    builders: Optional[int] = None       # builds in flight at most; None: CPUs left after evaluators (at least 1)
    cpus_per_evaluator: float = 1.0      # Ray CPUs an evaluator claims (builders get the CPUs left)
    # CPU target: threads torch and the kernel get, each worker pinned to that many claimed CPUs (None: all cores)
    worker_threads: Optional[int] = None
    num_cpus: Optional[int] = None       # local Ray only: CPUs to give it (None: all)
    reference_cache_gb: Optional[float] = None   # per evaluator, float64 references kept (None: 2 on cpu; on cuda a
                                                 # quarter of the GPU's memory times the evaluator's share of it)
    builder_resources: dict[str, float] = field(default_factory=dict)    # custom Ray resources a build needs
    evaluator_resources: dict[str, float] = field(default_factory=dict)  # ... and an evaluator (node placement)
    cache_dir: Optional[str] = None      # build cache (None: ~/.cache/kevolve); KEVOLVE_CACHE on a node overrides it
    cuda_arch: Optional[str] = None      # e.g. "90a"; None: the evaluators' GPU; KEVOLVE_CUDA_ARCH overrides it
    exchange: str = "auto"               # outputs worker -> evaluator on cuda: auto (CUDA IPC when a probe
                                         # passes) | files; KEVOLVE_EXCHANGE overrides it
    compiled_checks: str = "auto"        # the evaluators' float64 references and output comparisons compiled by
                                         # torch.compile (judge/evaluator/fused.py): auto (on cuda) | on | off
    strict_cuda: bool = True             # cuda: the driver started after Landlock, no new threads after the seal, a
                                         # refused attempt a rejection; false: attempts only noted (guarantees.md)
    # cpu: how a timed call is made cold (judge/worker/timing.py CpuClock): lines (its
    cpu_flush: str = "lines"
                                         # own buffers evicted, cost ∝ their bytes) | llc (2 × the LLC rewritten)


LOGGERS = ("none", "wandb")
WANDB_MODES = ("offline", "online", "disabled")


@dataclass
class LoggerConfig:
    """Where a run's metrics go besides its store (`kevolve.tracking`). The store is always the record.

    kind:    none (the run directory's store only) | wandb (Weights & Biases, as well).
    project: W&B project; None: $WANDB_PROJECT, else "kevolve".
    entity:  W&B user or team; None: $WANDB_ENTITY, else the account's default.
    mode:    offline (files in the run directory; `wandb sync` uploads them) | online | disabled;
             None: $WANDB_MODE, else offline — so it works without an account.
    group:   W&B group; None: in a Hydra multirun the sweep directory's name (its jobs side by side), else none.
    tags:    W&B tags (the task and target are added).
    name:    W&B run name; None: "<task>/<run directory's name>".
    dir:     where W&B writes its files; None: $WANDB_DIR, else the run directory.
    """
    kind: str = "none"
    project: Optional[str] = None
    entity: Optional[str] = None
    mode: Optional[str] = None
    group: Optional[str] = None
    tags: list[str] = field(default_factory=list)
    name: Optional[str] = None
    dir: Optional[str] = None


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

