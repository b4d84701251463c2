"""torch.compile's baselines compiled by two workers at once, the first time a node compiles a task's shape set.

A worker compiles the torch.compile baseline of every timed shape before the kernel loads (`harness._judge`,
`Worker.prepare`): on a node whose cache (`judge.evaluator.baseline_cache`) does not hold them yet, 37-41 s of a 60 s
CPU judgement of layernorm_bwd's `small` set on 2 cores (17 s for the first shape, which builds Inductor's
precompiled header, then 1.4 s each). `Precompiler` starts a second worker — the same confinement, environment
and code, never given a kernel — that compiles the later half of the shapes while the judging worker compiles the
first half; its caches are then harvested into the node's master and seeded into the judging worker, whose own
compile of that half finds them. Used only where the cache is (Landlock-confined workers), and only until the
node has compiled the shape set once (`mark`): later judgements find every graph in the master and need no help.

Guarantees: nothing changes in what is compiled or how (the same `Worker.prepare`); no candidate code runs in
the helper, so its caches are the harness's own; a helper that fails or dies only costs the judging worker its
compiles of that half (it compiles them itself). Not guaranteed: a speed-up where both workers contend for one
core.
"""
from __future__ import annotations

import hashlib
import threading
from pathlib import Path

from kevolve.judge import protocol
from kevolve.judge.evaluator import baseline_cache
from kevolve.judge.options import Options
from kevolve.judge.evaluator.process import WorkerDied, WorkerProcess

MIN_SHAPES = 4           # fewer shapes to compile than this: one worker does it


def _marker(task, options: Options) -> Path:
    key = hashlib.sha256(f"{task.name}|{task.dir}|{options.shapes}|{options.target}|{sorted(options.baselines)}"
                         .encode()).hexdigest()[:16]
    return baseline_cache.master(options.cache_dir) / ".prepared" / key


def needed(task, options: Options, wanted: list[int]) -> list[int]:
    """The configurations a helper should compile (the later half of `wanted`), or [] when one worker will do:
    too few, the cache unused, or the node has compiled this shape set before."""
    from kevolve.judge.worker.confine import landlock_abi
    if len(wanted) < MIN_SHAPES or not landlock_abi() or not baseline_cache.enabled(options.cache_dir) \
            or _marker(task, options).exists():
        return []
    return wanted[len(wanted) // 2:]


def mark(task, options: Options) -> None:
    """This node has compiled the task's shape set once: its graphs are in the master."""
    marker = _marker(task, options)
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.touch()


class Precompiler:
    """A worker compiling `configs`' baselines (`plan[i]["wanted"]`) on a thread of the evaluator, from now on."""

    def __init__(self, task, options: Options, lib_path: str, exchange: str, configs: list[int], plan: dict):
        self.options, self.configs, self.error, self.joined = options, configs, None, False
        self.worker = WorkerProcess(options)
        init = protocol.Init(task_dir=task.ref, lib=lib_path, abi=options.abi, target=options.target, module=None,
                             exchange=exchange, threads=options.threads, load=False)
        self.thread = threading.Thread(target=self._run, args=(init, plan), daemon=True, name="kevolve-precompile")
        self.thread.start()

    def _run(self, init: protocol.Init, plan: dict) -> None:
        try:
            info = self.worker.call(init, self.options.timeout + 120)
            if isinstance(info, protocol.Failed) or not (info.confinement or {}).get("landlock"):
                self.error = info.error if isinstance(info, protocol.Failed) else "not Landlock-confined"
                return
            self.worker.call(protocol.SetConfigs(self.options.shapes), 60)
            baseline_cache.seed(self.worker.tmp, self.options.cache_dir)
            for i in self.configs:
                self.worker.call(protocol.Prepare(i, tuple(plan[i]["wanted"])), 600 + self.options.timeout)
        except (WorkerDied, OSError) as e:
            self.error = str(e)

    def join(self) -> None:
        """Waits for the helper, harvests what it compiled into the node's master, and ends it (once: `joined`
        says it was, and a second call does nothing)."""
        if self.joined:
            return
        self.joined = True
        self.thread.join()
        try:
            if self.error is None:
                baseline_cache.harvest(self.worker.tmp, self.options.cache_dir)
        finally:
            self.worker.close()
