"""How to judge: the options every judgement takes (target, ABI, shape set, limits, timing effort).

Resolved once (by `kevolve.search.plan` for a search, by `kevolve.judge.cli` for one kernel) and passed down
unchanged; nothing below re-derives a default.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Options:
    """How to judge: target, ABI, shape set, limits and timing effort."""
    target: str = "cpu"
    abi: str = "c"
    shapes: str = "small"
    timeout: float = 60.0          # seconds any one step that runs candidate code may take
    baselines: tuple[str, ...] = ("eager", "compile")
    reps: int = 100                # at most this many timed calls per function and configuration...
    budget_s: float = 0.5          # ...or until this many seconds per function are spent
    rotate: int = 3                # input sets the timed calls rotate through
    time_kernel: bool = True
    time_inits: str = "all"        # time every (shape, init), or "first": one init per shape (the search's default)
    gpu: int | None = None         # CUDA device index the evaluator owns (None: what CUDA_VISIBLE_DEVICES gives)
    threads: int | None = None     # CPU threads for the worker (None: all)
    exchange: str = "auto"         # how outputs reach the evaluator on cuda: auto (CUDA IPC when it works) | files


def default_shapes(target: str) -> str:
    """The shape set a judgement uses unless told: `bench` (robust-kbench's sizes) on a GPU, `small` on the CPU."""
    return "bench" if target == "cuda" else "small"
