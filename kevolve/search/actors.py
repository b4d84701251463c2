"""Ray at the edge: thin actor and task wrappers over the pure core. Nothing here decides anything.

- `Mutator`     — runs an operator on a `Proposal` → a `Mutation` (knob mutation here; LLM operators plug in
                  the same way).
- `Verifier`    — the static rules (`kevolve.judge.rules`) → a `Verdict`.
- `build_task`  — a Ray task on any CPU with two results, the `Build` and the library's bytes: the driver
                  waits on the first and hands the second, unopened, to an evaluator, so the bytes go from
                  builder to evaluator through the object store (builders and evaluators may sit on
                  different nodes) and never through the driver.
- `Evaluator`   — owns one GPU (`num_gpus=1`) on cuda, or a CPU slot on cpu; installs the bytes in its node's
                  build cache and calls `judge.harness.judge`, which runs the kernel in a fresh worker
                  process; it keeps a `judge.reuse.Reuse` (spare worker, cached references, recent baselines).
Every actor is restarted by Ray when its process dies (`max_restarts=-1`) and a build is retried when its
process dies; the driver re-sends the call that was lost, a bounded number of times
(`driver.ACTOR_RETRIES`), then gives that candidate a `failed` verdict. The driver routes all work;
actors never call each other.
"""
from __future__ import annotations

import dataclasses
import os
import random
import time
from pathlib import Path

import ray

from kevolve.judge import build as builder
from kevolve.judge import rules
from kevolve.judge.harness import judge
from kevolve.judge.options import Options
from kevolve.judge.results import Evaluation
from kevolve.judge.reuse import Reuse
from kevolve.messages import Mutation, Proposal
from kevolve.operators import knob
from kevolve.task.spec import load_task


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=0)
class Mutator:
    """Applies an operator to a proposal. Knob mutation needs no LLM and no network."""

    def mutate(self, proposal: Proposal, seed: int, knob_changes: int) -> Mutation:
        if proposal.operator != "knob":                # the configuration admits only knob without an LLM
            return Mutation(None, failure=f"operator {proposal.operator!r} needs an LLM (configure llm=...)")
        return knob.mutate(proposal, random.Random(seed), knob_changes)


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=0)
class Verifier:
    def check(self, source: str, target: str, abi: str) -> rules.Verdict:
        start = time.perf_counter()
        verdict = rules.check(source, target, abi)
        return dataclasses.replace(verdict, seconds=time.perf_counter() - start)


@ray.remote(num_cpus=1, max_retries=2, num_returns=2)     # retried when its process dies, not for errors
def build_task(source: str, target: str, abi: str, arch: str | None, cache_dir: str | None):
    """Compiles on whichever node runs it; returns the Build and the library's bytes (None when it failed)."""
    b = builder.build(source, target, abi, arch=arch, cache_dir=cache_dir)
    return b, (Path(b.lib_path).read_bytes() if b.ok else None)


@ray.remote(max_restarts=-1, max_task_retries=0)
class Evaluator:
    """One per GPU (or CPU slot). Each judgement runs in its own worker process; this actor survives it."""

    def __init__(self, task: str, options: Options, reference_bytes: int = 0, baseline_refresh_s: float = 0.0,
                 cache_dir: str | None = None):
        self.task = load_task(task)
        self.options, self.cache_dir = options, cache_dir
        self.reuse = Reuse(options, reference_bytes, baseline_refresh_s)

    def info(self) -> dict:
        import torch
        if self.options.target == "cuda" and torch.cuda.is_available():
            return {"device": torch.cuda.get_device_name(), "node": ray.util.get_node_ip_address(),
                    "arch": os.environ.get("KEVOLVE_CUDA_ARCH") or builder.arch_name(*torch.cuda.get_device_capability()),
                    "gpus": os.environ.get("CUDA_VISIBLE_DEVICES")}
        return {"device": "cpu", "arch": None, "node": ray.util.get_node_ip_address()}

    def evaluate(self, key: str, lib: bytes, module: str | None, fresh_baselines: bool = False) -> Evaluation:
        """`lib` arrives as an object reference from `build_task`, resolved by Ray in this process.
        `eval_seconds` of the verdict is this call's whole time (installing the library included)."""
        start = time.perf_counter()
        path = builder.install(key, lib, self.cache_dir)      # a no-op when the build ran on this node
        ev = judge(self.task, str(path), self.options, module=module, reuse=self.reuse,
                   fresh_baselines=fresh_baselines)
        return dataclasses.replace(ev, eval_seconds=time.perf_counter() - start)
