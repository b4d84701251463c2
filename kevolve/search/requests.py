"""`founders(task, target, n)`: what the n translate founders of a run start from — the torch reference (None), and,
when the task has seed kernels in the torch-extension format for the target (robust-kbench's and KernelBench's
format, `seeds: torch-cuda:` in task.yaml), every second one from one of those kernels in turn, translated into
the C ABI.
"""
from __future__ import annotations

from kevolve.task.spec import TaskError


def founders(task, target: str, n: int) -> list[str | None]:
    """The torch-extension source each translate founder starts from, None for the torch reference."""
    try:
        kernels = [p.read_text() for p in task.seed_paths(target, "torch")]
    except TaskError:
        kernels = []
    return [kernels[(i // 2) % len(kernels)] if kernels and i % 2 else None for i in range(n)]

