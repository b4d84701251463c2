"""Ray at the edge: thin actor and task wrappers over the pure core. Nothing here decides anything.

- `Mutator`     — applies an operator (`operators.registry.Operator`) to a complete `Request` → `Mutation`s: knob
                  mutation (local, cheap), or, with an LLM configured, an `LLMOperator` (one child;
                  meta-generation's several). It holds
                  the provider (`kevolve.llm.make_provider`, reading the key from its own environment) and runs
                  as a threaded actor (`max_concurrency`: the most LLM proposals the driver keeps in flight,
                  `plan.llm_calls_max`, and `plan.in_flight` more), so that many LLM calls wait on the network
                  at once while knob mutation still answers at once.
- `Verifier`    — the static rules (`kevolve.judge.static.rules`) → a `Verdict` (`check`); and, as a call of its
                  own (`screen`), for a candidate that passed them and only when `search.verifiers.checks` names
                  some, the LLM verifiers (in parallel) → `LLMVerdict`s. Threaded like the Mutator: LLM calls run
                  in the "llm" concurrency group, so they never hold the threads the rules and knob mutation use.
- `build_task`  — a Ray task on any CPU with two results, the `Build` and the library's bytes: the driver
                  waits on the first and hands the second, unopened, to an evaluator, so the bytes go from
                  builder to evaluator through the object store (builders and evaluators may sit on
                  different nodes) and never through the driver.
- `Evaluator`   — owns one GPU (`num_gpus=1`) on cuda, or a CPU slot on cpu; installs the bytes in its node's
                  build cache and calls `judge.evaluator.harness.judge`, which runs the kernel in a fresh worker
                  process; it keeps a `judge.evaluator.reuse.Reuse` (a spare worker, the first started with the actor so
                  that its imports overlap the seeds' builds; cached references; recent baselines);
                  it also profiles a parent with Nsight Compute when asked (`search.profile`).
Every actor is restarted by Ray when its process dies (`max_restarts=-1`) and a build is retried when its
process dies; the driver re-sends the call that was lost, a bounded number of times
(`outcome.ACTOR_RETRIES`), then gives that candidate a `failed` verdict. The driver routes all work;
actors never call each other. API keys: the two LLM actors read them from their process environment (a local
Ray's workers inherit the driver's; on a cluster, the environment of the node they are placed on — the driver
places them on its own node); a key never crosses Ray (a `Secret` refuses to be pickled).
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import ray

from kevolve.judge import build as builder
from kevolve.judge.static import rules
from kevolve.judge.evaluator.harness import compare, judge, release
from kevolve.judge.options import Options
from kevolve.judge.build import Build
from kevolve.judge.results import Comparison, Evaluation, Release
from kevolve.judge.evaluator.reuse import Reuse
from kevolve.llm import LLMConfig, LLMConfigError, make_provider
from kevolve.llm.cache import Cache
from kevolve.messages import Mutation
from kevolve.operators.knob import KnobOperator
from kevolve.operators.compose import Request
from kevolve.operators.context import Context
from kevolve.operators.llm_operator import LLMOperator, apply
from kevolve.operators.registry import spec
from kevolve.operators.verifiers import LLMVerifier
from kevolve.search import profile as ncu_profile
from kevolve.search.verification import Screened
from kevolve.task.load import load_task


@dataclasses.dataclass(frozen=True)
class LLMSetup:
    """What an LLM actor needs to make its provider and its prompts' Context (no key: it reads its own)."""
    llm: LLMConfig
    run_dir: str
    task: str                    # Task.ref
    target: str
    device: str
    shapes: str

    def make(self):
        """(the provider, the Context), or raises LLMConfigError naming what to set."""
        ctx = Context(load_task(self.task), self.target, self.device, self.shapes)
        return make_provider(self.llm, run_dir=self.run_dir), ctx


class Mutator:
    """Applies an operator to a proposal. Knob mutation needs no LLM and no network; LLM operators need `setup`."""

    def __init__(self, setup: LLMSetup | None = None, knob_changes: int = 2):
        self.knob, self.operator, self.error, self.replay = KnobOperator(knob_changes), None, None, None
        if setup is not None:
            try:
                llm, ctx = setup.make()
                self.operator = LLMOperator(llm, ctx)
                self.replay = Cache.in_run(setup.llm.replay, readonly=True) if setup.llm.replay else None
            except LLMConfigError as e:          # reported by ready(): the driver stops the run at start
                self.error = str(e)

    def ready(self) -> str | None:
        """None, or why the LLM cannot be used (a missing key, named)."""
        return self.error

    def apply(self, request: Request, seed: int, model: str | None = None) -> list[Mutation]:
        """The children of one proposal: knob mutation's one, an LLM operator's one (meta-generation's several)."""
        operator = self.operator if spec(request.operator).llm else self.knob
        if operator is None:
            return [Mutation(None, failure=f"operator {request.operator!r} needs an LLM (configure llm=...)")]
        return operator.apply(request, seed, model)

    @ray.method(concurrency_group="llm")
    def call(self, request: Request, seed: int, model: str | None = None) -> list[Mutation]:
        """`apply` on the LLM's own threads (the "llm" concurrency group): calls that wait on the network never
        hold a thread knob mutation needs."""
        return self.apply(request, seed, model)

    def recorded(self, request: Request, key: str) -> Mutation:
        """Replay: the child the recorded reply under `key` (a response-cache key) makes of `request`."""
        reply = self.replay.get(key) if self.replay is not None else None
        if reply is None:
            return Mutation(None, failure=f"{request.operator}: replay: no reply {key[:12]} in the recorded run")
        return apply(self.operator.ctx, request, reply)


class Verifier:
    """Static rules (`check`, at once), and the configured LLM verifiers (`screen`, each its own call, all at once,
    on the "llm" concurrency group's threads: a screening that waits on the network never delays a `check`)."""

    def __init__(self, setup: LLMSetup | None = None, checks: tuple[str, ...] = ()):
        self.checks, self.llm, self.error = tuple(checks), None, None
        if setup is not None and self.checks:
            try:
                llm, ctx = setup.make()
                self.llm = LLMVerifier(llm, ctx)
                self.pool = ThreadPoolExecutor(max(1, getattr(llm, "slots", 1)), thread_name_prefix="kevolve-verify")
            except LLMConfigError as e:
                self.error = str(e)

    def ready(self) -> str | None:
        return self.error

    def check(self, source: str, target: str, abi: str, task: str | None = None) -> Screened:
        """The static rules' verdict (`Verdict.seconds`: their time); `task` (its ref): the entry point is checked
        against its signature."""
        start = time.perf_counter()
        if task is not None and getattr(self, "_task", (None, None))[0] != task:
            self._task = (task, load_task(task))
        spec = self._task[1] if task is not None else None
        verdict = dataclasses.replace(rules.check(source, target, abi, task=spec), seconds=time.perf_counter() - start)
        return Screened(verdict)

    @ray.method(concurrency_group="llm")
    def screen(self, source: str, seeds: dict[str, int] | None = None) -> tuple:
        """One LLMVerdict per configured verifier (seeded by `seeds[name]`); () without an LLM."""
        if self.llm is None:
            return ()
        seeds = seeds or {}
        futures = [self.pool.submit(self.llm.verify, name, source, seeds.get(name, 0)) for name in self.checks]
        return tuple(f.result() for f in futures)


@ray.remote(num_cpus=1, max_retries=2, num_returns=2)     # retried when its process dies, not for errors
def build_task(source: str, target: str, abi: str, arch: str | None, cache_dir: str | None):
    """Compiles on whichever node runs it; returns the Build and the library's bytes (None when it failed)."""
    b = builder.build(source, target, abi, arch=arch, cache_dir=cache_dir)
    return b, (Path(b.lib_path).read_bytes() if b.ok else None)


@ray.remote(max_restarts=-1, max_task_retries=0, concurrency_groups={"status": 1})
class Evaluator:
    """One per GPU (or CPU slot). Each judgement runs in its own worker process; this actor survives it."""

    def __init__(self, task: str, options: Options, reference_bytes: int | None = 0, baseline_refresh_s: float = 0.0,
                 cache_dir: str | None = None, gpu_share: float = 1.0):
        self.task = load_task(task)
        self.options, self.cache_dir = options, cache_dir
        if reference_bytes is None:                 # sized to this evaluator's GPU (its share of it)
            reference_bytes = reference_budget(_gpu_memory(), gpu_share)
        self.reuse = Reuse(options, reference_bytes, baseline_refresh_s)
        self.reuse.start_spare()    # the first judgement's worker imports torch while the seeds build

    def info(self) -> dict:
        import torch
        if self.options.target == "cuda" and torch.cuda.is_available():
            return {"device": torch.cuda.get_device_name(), "node": ray.util.get_node_ip_address(),
                    "arch": builder.arch_name(*torch.cuda.get_device_capability()),   # overrides: the plan
                    "gpus": os.environ.get("CUDA_VISIBLE_DEVICES"), "ncu": shutil.which("ncu")}
        return {"device": "cpu", "arch": None, "node": ray.util.get_node_ip_address(), "cpu": cpu_name()}

    @ray.method(concurrency_group="status")
    def status(self) -> dict | None:
        """Where the judgement (or comparison) this evaluator runs now is (`Phases.snapshot`), answered from a
        thread of its own while `evaluate` runs in the default one (one call at a time there, as before); None
        before the first. For a search that ends before a verdict comes back: which phase is slow."""
        phases = self.reuse.phases
        return phases.snapshot() if phases is not None else None

    def evaluate(self, key: str, lib: bytes, module: str | None, fresh_baselines: bool = False) -> Evaluation:
        """`lib` arrives as an object reference from `build_task`, resolved by Ray in this process.
        `eval_seconds` of the verdict is this call's whole time (installing the library included)."""
        start = time.perf_counter()
        path = builder.install(key, lib, self.cache_dir)      # a no-op when the build ran on this node
        ev = judge(self.task, str(path), self.options, module=module, reuse=self.reuse,
                   fresh_baselines=fresh_baselines)
        return dataclasses.replace(ev, eval_seconds=time.perf_counter() - start)

    def release(self, key: str, lib: bytes, module: str | None, count: int) -> Release:
        """The release check (`harness.release`): the library checked on `count` configurations swept over the
        task's domain, in a fresh worker."""
        path = builder.install(key, lib, self.cache_dir)
        return release(self.task, str(path), self.options, count, module=module)

    def compare(self, a: Build, lib_a: bytes, b: Build, lib_b: bytes,
                only: tuple[str, ...] | None = None) -> Comparison:
        """Kernels a and b (Builds and bytes, resolved by Ray from the driver's refs) timed paired and
        interleaved in one fresh worker, every call of both checked (`judge.evaluator.harness.compare`); `only`:
        the shape ids to time (a size bucket's), else all."""
        path_a, path_b = builder.install(a.key, lib_a, self.cache_dir), builder.install(b.key, lib_b, self.cache_dir)
        return compare(self.task, str(path_a), str(path_b), self.options, a.module_name, b.module_name,
                       reuse=self.reuse, only=only)

    def profile(self, b: Build, lib: bytes, ncu: str) -> ncu_profile.Profile:
        """The kernel of Build `b` (bytes resolved by Ray) profiled by Nsight Compute (`search.profile`)."""
        path = builder.install(b.key, lib, self.cache_dir)
        found = ncu_profile.profile(self.task, str(path), self.options, b.module_name, ncu)
        return dataclasses.replace(found, raw="")                 # the CSV stays here


# of a GPU's memory, for one evaluator's float64 references (resources.reference_cache_gb)
REFERENCE_SHARE = 0.25
REFERENCE_FALLBACK = 16 << 30   # when the GPU's memory cannot be read


def reference_budget(gpu_bytes: int | None, share: float = 1.0) -> int:
    """Bytes of float64 references an evaluator keeps by default: a quarter of its GPU's memory, times its share of
    the GPU (half when two evaluators share one) — 35 GiB on an H200, 20 on an 80 GB H100, 6 on a 24 GB card.
    What does not fit is computed again for every candidate; an evaluator that runs out of memory lets them all go
    (judge.evaluator.harness) and fills again."""
    if not gpu_bytes:
        return REFERENCE_FALLBACK
    return int(gpu_bytes * REFERENCE_SHARE * max(0.0, min(1.0, share)))


def _gpu_memory() -> int | None:
    try:
        import torch
        return torch.cuda.get_device_properties(0).total_memory if torch.cuda.is_available() else None
    except Exception:
        return None


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), with its core count."""
    name = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import platform
    return f"{name or platform.processor() or platform.machine()}, {os.cpu_count()} cores"


def threaded(cls, llm_threads: int):
    """`Mutator` or `Verifier` as a Ray actor class whose "llm" concurrency group has `llm_threads` threads (Ray
    sizes a group only where the class is made, not in `.options`); restarted when its process dies."""
    return ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=0,
                      concurrency_groups={"llm": max(1, llm_threads)})(cls)


def start_llm_actors(plan, run_dir: Path):
    """The Mutator and the Verifier of a run: threaded (`plan.llm_calls_max` LLM calls at once, and room beside
    them for knob mutations and static checks, which must not wait behind the network), placed on the driver's
    node (they read the API key from its environment). Raises ConfigError, having freed them, when they cannot
    use the LLM (a key missing in that environment, named)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    from kevolve.config import ConfigError
    setup = (LLMSetup(plan.llm, str(run_dir), plan.task, plan.target, plan.device, plan.shapes)
             if plan.llm is not None else None)
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    # the LLM's calls on threads of their own (a concurrency group), as many as the endpoints take at once, twice
    # over (calls a proposal timed out on may still be draining); knob mutation and static checks on the others
    llm_threads = 2 * max(1, plan.llm_calls_max) + max(1, plan.llm_calls_max) * len(plan.verifiers.checks or ())
    options = dict(max_concurrency=max(4 * plan.evaluators, plan.in_flight) + 4, scheduling_strategy=here)
    mutator = threaded(Mutator, llm_threads).options(**options).remote(setup, plan.knob_changes)
    verifier = threaded(Verifier, llm_threads).options(**options).remote(setup, tuple(plan.verifiers.checks))
    errors = [e for e in ray.get([mutator.ready.remote(), verifier.ready.remote()]) if e]
    if errors:
        ray.kill(mutator)
        ray.kill(verifier)
        raise ConfigError(f"{errors[0]} (in the environment of the Ray node that runs the driver)")
    return mutator, verifier
