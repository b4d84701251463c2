"""A timing session's plan, fixed before its first timed call and known to both sides: how many rounds
(`plan_rounds`), how many calls a round (`calls_for`), and the bytes one call moves (`set_bytes`). The worker
plans its session with it (`Worker.time_setup`); the evaluator checks the worker's plan against its own
(`timed._plan_forged`), so a plan rewritten in the worker's memory is refused.

Guarantees: every number here depends on the task, the configuration, the options and the baselines' time,
never on the kernel's.
"""
from __future__ import annotations

import math

WARMUP_SETS = 2          # warm-up calls per contender (each checked): a first call, and one that is not
MAX_ROUNDS = 10          # rounds per configuration at most: each checks every call against its own reference
VERIFY_BYTES = {True: 32 << 30, False: 2 << 30}   # CUDA, CPU: the checked calls' inputs and outputs over a
                         # configuration's counted rounds, each set verified against its own float64 reference


def plan_rounds(reps: int, calls: int, cuda: bool, budget_s: float | None, baseline_ms: float | None,
                set_bytes: int = 0) -> int:
    """Rounds to time, fixed before the first timed call: `reps` calls per contender, fewer when `reps`
    calls of the slowest baseline (its warm-up time, or the evaluator's record of it) would take longer than
    `budget_s`, fewer where memory allows only a few calls per round (`calls_per_round`: the largest
    configurations), and fewer where the evaluator's verification of them would pass `VERIFY_BYTES` (a call's
    inputs and outputs, `set_bytes`, each drawn again, computed in float64 and compared: on layernorm_bwd's
    bench set 10 rounds of its four 4M-element-row configurations were most of a judgement) — at most
    `MAX_ROUNDS`; at least 3 rounds on CUDA (a graph round is one sample), 1 on the CPU. Depends on the
    configuration and the baselines only, never on the kernel."""
    want = reps
    if budget_s and baseline_ms:
        want = min(reps, max(1, int(budget_s * 1e3 / baseline_ms)))
    most = MAX_ROUNDS
    if set_bytes > 0:
        most = min(most, VERIFY_BYTES[cuda] // (set_bytes * calls))
    return max(3 if cuda else 1, min(most, math.ceil(want / calls)))


def set_bytes(task, sizes: dict, specs=None) -> int:
    """One call's inputs and outputs (or `specs`): what the evaluator draws, computes in float64 and compares
    for every checked call."""
    import torch
    return sum(math.prod(task.shape(s, sizes)) * getattr(torch, s.dtype).itemsize
               for s in (task.inputs + task.outputs if specs is None else specs))


def call_bytes(task, sizes: dict, abi: str) -> int:
    """One call's buffers: its inputs, outputs, workspace, and the torch ABI's results until the round's copy."""
    return set_bytes(task, sizes) + set_bytes(task, sizes, task.outputs if abi == "torch" else ()) \
        + task.workspace(sizes)


def calls_for(task, sizes: dict, abi: str, calls: int, reps: int, cuda: bool, checked: int) -> int:
    """The calls a round of `checked` kernels' session makes (`calls_per_round` on its buffers): what the worker
    plans (`Worker.time_setup`) and the evaluator checks the worker's plan against (`timed._plan_forged`)."""
    return calls_per_round(calls, reps, call_bytes(task, sizes, abi) * max(1, checked), cuda)


def calls_per_round(calls: int, reps: int, per_call_bytes: int, cuda: bool) -> int:
    """Calls per round (each with its own buffers): `calls`, fewer when their buffers would pass 16 GiB on
    CUDA or 1 GiB on the CPU, never more than `reps` on the CPU."""
    limit = (16 << 30) if cuda else (1 << 30)
    n = max(1, min(calls, limit // max(per_call_bytes, 1)))
    return n if cuda else max(1, min(n, reps))
