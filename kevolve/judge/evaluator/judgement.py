"""One judgement's fixed facts (`Judgement`): what the harness hands to each step it calls, in place of a dozen
parameters. Frozen: a step reads it and never changes it; what a step finds, it returns.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kevolve.judge.evaluator.baseline_worker import BaselineWorker
from kevolve.judge.evaluator.phases import Phases
from kevolve.judge.evaluator.process import WorkerProcess
from kevolve.judge.evaluator.reuse import Reuse
from kevolve.judge.options import Options
from kevolve.task.spec import Task


@dataclass(frozen=True)
class Judgement:
    """One judgement's fixed facts, handed to every step instead of a dozen parameters."""
    task: Task
    lib_path: str
    options: Options
    module: str | None
    reuse: Reuse | None
    fresh_baselines: bool
    worker: WorkerProcess
    files: Path                           # the judgement's own exchange folder
    start: float                          # perf_counter at the judgement's start
    configs: tuple
    clock: Phases
    baseline: BaselineWorker | None = None    # the clean worker torch's baselines are timed in (`baseline_worker`)
    drawn: tuple | None = None            # configurations checked after `configs`: None, this judgement's draws
                                          # (`Options.domain` draw); a release sweep's (`harness.release`)

    @property
    def base(self) -> dict:
        o = self.options
        return dict(task=self.task.name, target=o.target, abi=o.abi, shapes=o.shapes, compiled=True)
