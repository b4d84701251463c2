"""The plan: every default of a search resolved once, from the configuration and the cluster, in one place.

`resolve(cfg, task, cluster)` turns the typed config (`kevolve.config.Config`) and what Ray reports of the
cluster (`ray.cluster_resources()`: CPU and GPU counts) into a frozen `Plan`: target, shape set, how many
evaluators and builders, how many candidates and LLM calls in flight (the LLM calls' start and bounds: the driver
adapts within them, kevolve/search/pacing.py), the judging options, cache sizes, budgets,
the LLM, its operators' weights and verifiers (nulls filled by kevolve/search/llm_defaults.py: the paper's pipeline
with an LLM, knob mutation alone without), the mode (evolve or best_of_n), and the seed kernels the search starts from
(`search.seeds`: the files task.yaml lists, the task's best/ kernel, or both; `best` without one is refused here). The
device the prompts name (GPU and arch, or the CPU) comes from the evaluators once they run (`with_device`). Nothing
below the driver re-derives a default; a configuration the cluster cannot serve (cuda without GPUs, a
shape set the task lacks) raises `ConfigError` here, naming the field, before anything starts.
Pure: no Ray calls (the caller passes the cluster's resources), so it is tested as plain Python.
"""
from __future__ import annotations

import math
from pathlib import Path

from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from kevolve.operators.registry import spec
from kevolve.config import Config, ConfigError, LoggerConfig, PopulationConfig, VerifiersConfig, env
from kevolve.llm.config import LLMConfig, base_url_of, provider_of
from kevolve.judge.options import Options, default_shapes
from kevolve.search import buckets as size_buckets
from kevolve.search import pacing
from kevolve.search import llm_defaults as pipeline
from kevolve.task.spec import BEST_FILES, Task, TaskError

ABI = "c"            # a search writes kernels in the C ABI (the torch ABI is for importing kernels)


@dataclass(frozen=True)
class Plan:
    task: str                            # Task.ref: how another process or node finds the task
    target: str                          # cpu | cuda
    shapes: str
    options: Options                     # how every candidate is judged
    evaluators: int
    evaluator_placement: Mapping[str, Any]   # Ray options of an Evaluator actor (num_cpus, num_gpus, resources)
    builders: int                        # builds in flight at most
    builder_resources: Mapping[str, float]
    in_flight: int                       # candidates between proposal and verdict at most (`default_in_flight`;
                                         # with `in_flight_follows_llm`, it moves with the LLM calls' target)
    reference_bytes: int | None          # float64 references an evaluator keeps (None: a share of its GPU's memory,
                                         # sized by the evaluator: kevolve.search.actors.reference_budget)
    baseline_refresh_s: float            # 0: baselines timed with every candidate
    compare_share: float                 # of the evaluators' time, paired comparisons take at most (search.champion)
    cache_dir: str | None                # configured build cache (a node's KEVOLVE_CACHE overrides it there)
    arch: str | None                     # nvcc arch; None until the evaluators report their GPU (`with_arch`)
    population: PopulationConfig
    seed: int
    candidates: int
    wall_time_s: float
    dollars: float | None
    knob_changes: int
    progress: bool
    tracker: LoggerConfig                # logger: where metrics go besides the store (kevolve.tracking)
    llm: LLMConfig | None = None         # None: no LLM (knob mutation only)
    llm_calls: int = 0                   # LLM proposals in flight at most, at the start (0 without an LLM) …
    llm_calls_min: int = 0               # … adapted within these bounds from measured latencies
    llm_calls_max: int = 0               #     (kevolve/search/pacing.py; equal when search.llm_calls is set)
    in_flight_follows_llm: bool = False  # in_flight = 4 per evaluator + the LLM calls' current target
    in_flight_follows_builds: bool = False   # + the builds measured times ask for past 2 per evaluator (pacing)
    choice: str = "weights"              # operator × model choice policy
    translations: int = 0                # translate founders made at start
    meta_children: int = 4
    strategies_shown: int = 3
    verifiers: VerifiersConfig = field(default_factory=VerifiersConfig)
    device: str | None = None            # what prompts name: "NVIDIA H200, sm_90a", or the CPU's name
    profile: bool = False                # profile parents with Nsight Compute (cuda and search.profile) …
    ncu: str | None = None               # … with this ncu, found on the evaluators' PATH (None: not profiled)
    seeds: tuple[tuple[str, str], ...] = ()   # (label, path): the kernels a new run starts from, in order; the
                                         # label is the candidate's meta "file" (`cpu.cpp`, `best/cpu.cpp`)
    mode: str = "evolve"                 # evolve | best_of_n (parents are the seeds only: `seeds_only`)
    seeds_only: bool = False
    release: int = 0                     # the best checked on this many configurations of the domain before it is
                                         # named (search.release; search/finish.py)
    buckets: size_buckets.Buckets | None = None   # the size buckets of the shape set (kevolve.search.buckets)

    @property
    def llm_operators(self) -> tuple[str, ...]:
        return tuple(o for o, w in self.population.operators.items() if spec(o).llm and (w or 0) > 0)

    def with_device(self, info: Mapping[str, Any]) -> "Plan":
        """The plan once an evaluator has said what it runs on: the arch (a configured one wins) and the device."""
        plan = self.with_arch(info.get("arch"))
        if plan.target == "cuda":
            device = f"{info.get('device', 'a CUDA GPU')}, sm_{plan.arch}" if plan.arch else info.get("device")
        else:
            device = info.get("cpu") or "a CPU"
        return replace(plan, device=device, ncu=info.get("ncu") if plan.profile else None)

    def with_arch(self, detected: str | None) -> "Plan":
        """The plan once the evaluators have said what GPU they hold (a configured arch wins)."""
        return self if self.arch or self.target != "cuda" else replace(self, arch=detected)


def seed_files(task: Task, target: str, which: str, replay: bool = False) -> tuple[tuple[str, str], ...]:
    """(label, path) of each kernel a new run of `task` on `target` starts from, for `search.seeds` = `which`:
    all (the listed seeds, then the best/ kernel), listed, or best. Empty when the task has none (the driver says
    so when it needs them); `best` without a best/ kernel is a ConfigError, unless a replay takes the recorded
    run's seeds instead."""
    try:
        listed = tuple((p.name, str(p)) for p in task.seed_paths(target, ABI))
    except TaskError:                            # none listed for the target: best/ may still have one
        listed = ()
    if which not in ("all", "listed", "best"):           # kernel files of the user's own, comma-separated
        return tuple((Path(f).name, str(Path(f).resolve())) for f in which.split(","))
    best = tuple((f"best/{p.name}", str(p)) for p in task.best_paths(target, ABI))
    if which == "best" and not best and not replay:
        name = BEST_FILES[target]
        raise ConfigError(f"config field 'search.seeds': best, but task {task.name} has no best kernel for "
                          f"target={target} ({task.dir / 'best' / name} is missing): promote one from a finished "
                          f"run with `python -m kevolve.tasks best RUN_DIR`, or use search.seeds=all|listed")
    return {"all": listed + best, "listed": listed, "best": best}[which]


def default_in_flight(target: str, evaluators: int, builders: int, llm_calls: int = 0) -> int:
    """Candidates between proposal and verdict at most, when `search.in_flight` is unset. Each evaluator holds two
    (one judging, one queued: the driver's dispatch), and more must be on their way, few enough that children are
    proposed from recent verdicts rather than all from the seeds:
    - with LLM operators, two building per evaluator, and the LLM calls waiting on the network on top;
    - on cuda without them, one for every builder: nvcc takes as long as a judgement or longer
      (docs/decisions/search.md). Children are proposed once the first seed's verdict is in, and then every
      builder compiles one; later, only as many build at once as the evaluators' pace needs, the rest wait built;
    - on the CPU, two building per evaluator: g++ takes 0.3 s against judgements of 8-60 s, so more would only
      queue built candidates made from older verdicts, and builds that run beside a judgement take its CPUs."""
    fed = 4 * evaluators
    if llm_calls:
        return fed + llm_calls
    return max(fed, builders + 2 * evaluators) if target == "cuda" else fed


def resolve(cfg: Config, task: Task, cluster: Mapping[str, float]) -> Plan:
    """The plan for searching `task` with `cfg` on a cluster with these resources (CPU, GPU counts)."""
    r, s = cfg.resources, cfg.search
    gpus, cpus = int(cluster.get("GPU", 0)), int(cluster.get("CPU", 1))
    target = r.target or ("cuda" if gpus else "cpu")
    if target == "cuda" and not gpus:
        raise ConfigError("config field 'resources.target': cuda, but the Ray cluster has no GPUs "
                          "(use resources.target=cpu, or join a GPU cluster with resources.address=auto)")
    shapes = cfg.task.shapes or default_shapes(target)
    if shapes not in task.shape_sets:
        raise ConfigError(f"config field 'task.shapes': task {task.name} has no shape set {shapes!r} "
                          f"(it has {', '.join(task.shape_sets)})")
    evaluators = r.evaluators or (gpus if target == "cuda" else 1)
    llm = cfg.llm if cfg.llm.provider != "none" else None
    chosen = pipeline.resolve(s, llm is not None)     # null weights and verifiers: the LLM's pipeline, or knob alone
    seeds = seed_files(task, target, s.seeds, replay=bool(llm is not None and llm.replay))
    llm_calls = least = most = 0
    if llm is not None:
        # in flight ≈ evaluators × LLM latency / judgement time (pacing.py): from priors now, measured later,
        # never more than the endpoints take at once; a configured number is kept as it is
        endpoints = len({(provider_of(llm, m), base_url_of(llm, m)) for m in llm.models}) or 1
        least, most = (s.llm_calls, s.llm_calls) if s.llm_calls else (1, llm.concurrency * endpoints)
        llm_calls = pacing.start(evaluators, target, least, most)
    llm_ops = [o for o in chosen.operators if spec(o).llm]
    placement: dict[str, Any] = {"num_cpus": r.cpus_per_evaluator}
    if target == "cuda":                   # more evaluators than GPUs: they share them, timing in turns (gpu_lock)
        placement["num_gpus"] = 1 / math.ceil(evaluators / gpus) if gpus else 1
    if r.evaluator_resources:
        placement["resources"] = dict(r.evaluator_resources)
    # references: as configured, else 2 GiB on the CPU and, on a GPU, a share of its memory the evaluator measures
    # (bench references reach 22 GiB: layernorm_bwd; 16 GiB kept rmsnorm's and layernorm_bwd's from fitting)
    cache_gb = r.reference_cache_gb if r.reference_cache_gb is not None else (None if target == "cuda" else 2.0)
    # Baselines re-timed every 300 s, on both targets: torch.compile runs in each fresh worker with a private
    # cache (a kernel must not reach a shared one), about 30 s per CPU judgement. Stale baselines only rank
    # parents; the best is chosen by paired kernel-against-kernel timings and reported from a final judgement
    # with its baselines interleaved, so host load between them no longer picks the reported best.
    refresh = s.baseline_refresh_s if s.baseline_refresh_s is not None else 300.0
    builders = r.builders or max(1, cpus - int(evaluators * r.cpus_per_evaluator))
    options = Options(target=target, abi=ABI, shapes=shapes, timeout=s.timeout_s, baselines=tuple(s.baselines),
                      reps=s.reps, budget_s=s.budget_s, time_inits=s.time_inits, threads=r.worker_threads,
                      exchange=r.exchange, cache_dir=r.cache_dir, compiled_checks=r.compiled_checks,
                      cpu_flush=r.cpu_flush, strict_cuda=r.strict_cuda, domain=s.domain)
    return Plan(task=task.ref, target=target, shapes=shapes, options=options, evaluators=evaluators,
                evaluator_placement=placement, builders=builders, builder_resources=dict(r.builder_resources),
                in_flight=s.in_flight or default_in_flight(target, evaluators, builders, llm_calls if llm_ops else 0),
                reference_bytes=None if cache_gb is None else int(cache_gb * (1 << 30)), baseline_refresh_s=refresh,
                compare_share=s.compare_share,
                cache_dir=r.cache_dir, arch=env.cuda_arch() or r.cuda_arch,
                population=chosen.population, seed=s.seed, candidates=s.candidates, wall_time_s=s.wall_time_s,
                dollars=s.dollars, knob_changes=s.knob_changes, progress=cfg.progress,
                tracker=cfg.logger, llm=llm, llm_calls=llm_calls, llm_calls_min=least, llm_calls_max=most,
                in_flight_follows_llm=s.in_flight is None and bool(llm_ops),
                in_flight_follows_builds=s.in_flight is None, choice=s.choice,
                translations=s.translations if llm is not None and "translate" in chosen.operators else 0,
                meta_children=s.meta_children, strategies_shown=chosen.strategies_shown, verifiers=chosen.verifiers,
                profile=s.profile and target == "cuda" and llm is not None, seeds=seeds, mode=chosen.mode,
                seeds_only=chosen.seeds_only, release=s.release, buckets=size_buckets.of(task, shapes))
