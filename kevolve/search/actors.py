"""Ray at the edge: thin actor and task wrappers over the pure core. Nothing here decides anything.

- `Mutator`     — runs an operator (knob mutation here; LLM operators plug in the same way) → a child source.
- `Verifier`    — the static rules (`kevolve.verify`) → a Verdict.
- `build_task`  — a Ray task on any CPU: compiles, returns the Build and the library's bytes, so a builder
                  and an evaluator may sit on different nodes (the bytes travel through the object store).
- `Evaluator`   — owns one GPU (`num_gpus=1`) on cuda, or a CPU slot on cpu; writes the bytes into its node's
                  build cache and calls `harness.judge`, which runs the kernel in a fresh worker process;
                  it keeps a `harness.Reuse` (spare worker, cached references, recent baseline times).
The driver (`kevolve.search`) routes all work; actors never call each other.
"""
from __future__ import annotations

import os
import random
import time
from pathlib import Path

import ray

from kevolve.judge import build as builder
from kevolve.operators import knobs
from kevolve.judge import rules as verify
from kevolve.judge.harness import judge
from kevolve.judge.options import Options
from kevolve.judge.reuse import Reuse
from kevolve.judge.results import Evaluation
from kevolve.task.spec import load_task


@ray.remote(num_cpus=0)
class Mutator:
    """Applies an operator to parent sources. Knob mutation needs no LLM and no network."""

    def mutate(self, operator: str, parent: str, other: str | None, seed: int, changes: int):
        rng = random.Random(seed)
        start = time.perf_counter()
        if operator != "knob":
            raise ValueError(f"operator {operator!r} needs an LLM; configure llm=... (see README)")
        source, meta = parent, {}
        if other is not None:
            crossed = knobs.crossover(parent, other, rng)
            if crossed is not None:
                source, meta["crossover"] = crossed[0], crossed[1]
        mutated = knobs.mutate(source, rng, n=changes)
        if mutated is None:
            return None, meta, time.perf_counter() - start
        meta["changes"] = mutated[1]
        return mutated[0], meta, time.perf_counter() - start


@ray.remote(num_cpus=0)
class Verifier:
    def check(self, source: str, target: str, abi: str):
        start = time.perf_counter()
        return verify.check(source, target, abi), time.perf_counter() - start


@ray.remote(num_cpus=1, max_retries=0)
def build_task(source: str, target: str, abi: str, arch: str | None):
    """Compiles on whichever node runs it; returns (Build, library bytes or None)."""
    b = builder.build(source, target, abi, arch=arch)
    data = Path(b.lib_path).read_bytes() if b.ok else None
    return b, data


@ray.remote(max_restarts=-1, max_task_retries=0)
class Evaluator:
    """One per GPU (or CPU slot). Each judgement runs in its own worker process; this actor survives it."""

    def __init__(self, task_name: str, options: Options, reference_gb: float = 0.0, baseline_refresh_s: float = 0.0):
        self.task = load_task(task_name)
        self.options = options
        self.reuse = Reuse(options, int(reference_gb * (1 << 30)), baseline_refresh_s)

    def info(self) -> dict:
        import torch
        if self.options.target == "cuda" and torch.cuda.is_available():
            arch = builder.arch_name(*torch.cuda.get_device_capability())
            return {"device": torch.cuda.get_device_name(), "arch": arch, "node": ray.util.get_node_ip_address(),
                    "gpus": os.environ.get("CUDA_VISIBLE_DEVICES")}
        return {"device": "cpu", "arch": None, "node": ray.util.get_node_ip_address()}

    def evaluate(self, key: str, lib: bytes, module: str | None,
                 fresh_baselines: bool = False) -> tuple[Evaluation, float]:
        start = time.perf_counter()
        path = builder.install(key, lib)            # a no-op when the build ran on this node
        ev = judge(self.task, str(path), self.options, module=module, reuse=self.reuse,
                   fresh_baselines=fresh_baselines)
        return ev, time.perf_counter() - start
