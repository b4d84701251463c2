"""The torch baselines a kernel is timed against, in the worker: torch eager, or torch.compile (default mode, or
max-autotune without CUDA graphs), compiled once per (shape, scalar values) and kept in `Worker.compiled`.

Guarantees: a baseline that fails to compile is noted, never fatal; it is compiled before the kernel loads.
"""
from __future__ import annotations

COMPILE_MODES = {"compile": None, "compile-max-autotune": "max-autotune-no-cudagraphs"}


def compiled_baseline(worker, which: str, cfg, probe_args: list | None, notes: dict):
    """torch eager, or torch.compile (default mode, or max-autotune without CUDA graphs) compiled once per
    (shape, scalar values) on `probe_args` (a failure to compile is noted, not fatal; None: not compiled yet)."""
    import torch
    task, sizes, scalars = worker.task, cfg.size_dict, worker.task.scalar_values(cfg)
    fn = lambda *ins: task.baseline(*ins, **sizes, **scalars)  # noqa: E731
    if which == "eager":
        return fn
    key = (which, tuple(sorted(sizes.items())), tuple(sorted(scalars.items())))
    if key not in worker.compiled and probe_args is not None:
        try:
            import torch._dynamo
            torch._dynamo.config.recompile_limit = 64    # one code object, every shape of the set
            compiled = torch.compile(fn, dynamic=False, mode=COMPILE_MODES[which])
            compiled(*probe_args)
            worker.compiled[key] = compiled
        except Exception as e:
            notes[which] = f"torch.compile failed: {type(e).__name__}: {str(e)[:300]}"
            worker.compiled[key] = None
    return worker.compiled.get(key)
