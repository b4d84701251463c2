"""How to judge: the options every judgement takes (target, ABI, shape set, limits, timing effort).

Resolved once (by `kevolve.search.plan` for a search, by `kevolve.cli.evaluate` for one kernel) and passed down
unchanged; nothing below re-derives a default.
"""
from __future__ import annotations

from dataclasses import dataclass

from kevolve.config.schema import BASELINES, COMPILED_CHECKS, CPU_FLUSH  # noqa: F401  (the choices, kept in the schema)


@dataclass(frozen=True)
class Options:
    """How to judge: target, ABI, shape set, limits and timing effort."""
    target: str = "cpu"
    abi: str = "c"
    shapes: str = "small"
    timeout: float = 60.0          # seconds any one step that runs candidate code may take
    baselines: tuple[str, ...] = ("eager", "compile")   # any of BASELINES; "best torch" is the fastest timed
    reps: int = 100                # timed calls per contender and configuration, fixed before timing starts...
    budget_s: float = 0.5          # ...fewer when `reps` calls of the slowest baseline (its warm-up) take longer
    calls: int = 10                # calls per round, each on fresh inputs with its own buffers (one CUDA graph)
    time_kernel: bool = True
    time_inits: str = "all"        # time every (shape, init), or "first": one init per shape (the search's default)
    gpu: int | None = None         # CUDA device index the evaluator owns (None: what CUDA_VISIBLE_DEVICES gives)
    threads: int | None = None     # CPU target: threads for torch and the kernel, on as many claimed CPUs (judge/cpus.py; None: all)
    exchange: str = "auto"         # how outputs reach the evaluator on cuda: auto (CUDA IPC when it works) | files
    cache_dir: str | None = None   # resources.cache_dir: where the node keeps builds and torch.compile's caches
    compiled_checks: str = "auto"  # the evaluator's reference and comparison compiled (judge/evaluator/fused.py): auto (on
                                   # CUDA, where an evaluator keeps them across judgements) | on | off
    strict_cuda: bool = False      # cuda: the confinement of issue 37 in full — the driver started after Landlock, new
                                   # threads refused after the seal, a refused attempt a rejection (not a note in the
                                   # log) — off until the gpu tests pass with it on an H200 (the CPU target has it all)
    cpu_flush: str = "lines"       # how a timed CPU call is made cold (judge/worker/timing.py CpuClock): lines (its own
                                   # buffers evicted, cost ∝ their bytes) | llc (2 × the LLC rewritten, the old way)



def default_shapes(target: str) -> str:
    """The shape set a judgement uses unless told: `bench` (robust-kbench's sizes) on a GPU, `small` on the CPU."""
    return "bench" if target == "cuda" else "small"
