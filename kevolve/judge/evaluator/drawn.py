"""Configurations drawn from the task's domain, checked in every judgement after the fixed ones.

`check` draws a few configurations (`kevolve.task.draw.for_judgement`) with a salt drawn here for this judgement
(`secrets`; `KEVOLVE_DOMAIN_SALT` fixes it, to reproduce a verdict), and checks each as a fixed one is checked
(`Checker.check_config`: three calls, poisoned outputs, exact inputs, the float64 reference). Each configuration
reaches the worker with its own first call, never before. A wrong answer is shrunk in the same worker
(`draw.shrink`: smaller neighbours, greedily, within `TRIES` checks and `SHRINK_S` seconds) and the verdict names
the smallest failing configuration found, its sizes and scalars, so an LLM's repair sees where it fails.

Guarantees: no drawn configuration is in a prompt, a log or the worker before its calls (the salt lives in the
evaluator); a crash or a hang on one is a verdict naming it; drawn configurations are never timed and never enter
fitness. Not guaranteed: that a kernel wrong somewhere in the domain meets it here (`release` sweeps wider).
"""
from __future__ import annotations

import random
import secrets
import time

from kevolve.config import env
from kevolve.judge.evaluator.checks import Checker
from kevolve.judge.evaluator.process import WorkerDied, WorkerProcess
from kevolve.judge.results import Measurement
from kevolve.task import draw
from kevolve.task.spec import Case, Task

TRIES = 24          # checks a shrink may take
SHRINK_S = 20.0     # seconds a shrink may take
NOTE = "a configuration drawn from the task's domain"


def salt() -> int:
    """This judgement's salt: secret and fresh, unless KEVOLVE_DOMAIN_SALT fixes it."""
    fixed = env.domain_salt()
    return fixed if fixed is not None else secrets.randbits(63)


def check(task: Task, target: str, worker: WorkerProcess, checker: Checker, first: int,
          cases: tuple[Case, ...] | None = None) -> tuple[list[Measurement], str | None]:
    """Checks `cases` (default: this judgement's draws) as configurations `first`, `first + 1`, ...; returns their
    measurements and the verdict's failure (None: all correct)."""
    if cases is None:
        cases = draw.for_judgement(task, target, random.Random(salt()))
    out: list[Measurement] = []
    for k, cfg in enumerate(cases):
        try:
            m = checker.check_config(worker, first + k, cfg)
        except WorkerDied as e:
            return out, f"{cfg.id} ({NOTE}): {e.kind}: {e.detail}"
        out.append(m)
        if not m.correct:
            return out, failure(task, target, worker, checker, cfg, m, first + len(cases))
    return out, None


def failure(task: Task, target: str, worker: WorkerProcess, checker: Checker, cfg: Case, m: Measurement,
            next_index: int) -> str:
    """The verdict's text for a drawn configuration that failed: shrunk first when the worker lives."""
    if m.failure and m.failure.startswith("crash"):       # the worker is gone: nothing to shrink in
        return f"{cfg.id} ({NOTE}): {m.failure}"
    index, deadline = [next_index], time.monotonic() + SHRINK_S

    def fails(c: Case) -> str | None:
        if time.monotonic() > deadline or worker.proc.poll() is not None:
            return None
        index[0] += 1
        try:
            got = checker.check_config(worker, index[0], c)
        except WorkerDied:
            return None
        return got.failure
    small, why, tries = draw.shrink(task, target, cfg, fails, TRIES)
    if why is None:
        return f"{cfg.id} ({NOTE}): {m.failure}"
    return f"{small.id} ({NOTE}; shrunk from {cfg.id} in {tries} checks): {why}"
