"""The evaluators of a run as one pool: which evaluator takes the next call (the least loaded), how many calls each
has outstanding (`load`), when each last handed a result back, which verdicts are the harness's own failure and
go back to the queue, and what a judgement cut off by the budget had done.

Guarantees: every call the pool hands out (`judge`, `compare`, `profile`) holds one unit of its evaluator's load
until `returned` (or `reset`); a judgement goes only to an evaluator with fewer than `DEPTH` calls outstanding
(one judging, one waiting in its actor), while comparisons and profiles take the least loaded regardless; a
harness failure is judged again `outcome.ACTOR_RETRIES` times at most.
"""
from __future__ import annotations

import time

import ray

from kevolve.search import actors
from kevolve.search.jobs import Built, Comparing, Judging, Profiling, Step
from kevolve.search.outcome import ACTOR_RETRIES, describe_unfinished, harness_failure

DEPTH = 2              # judgements outstanding per evaluator at most


class EvaluatorPool:
    def __init__(self, evaluators: list):
        self.evaluators = evaluators
        self.load = [0] * len(evaluators)             # calls outstanding per evaluator
        self.freed = [time.perf_counter()] * len(evaluators)   # when each last handed a result back

    @classmethod
    def start(cls, plan) -> "EvaluatorPool":
        """`plan.evaluators` Evaluator actors, placed by `plan.evaluator_placement` (one GPU each on cuda)."""
        return cls([actors.Evaluator.options(**plan.evaluator_placement)
                    .remote(plan.task, plan.options, plan.reference_bytes, plan.baseline_refresh_s, plan.cache_dir,
                            plan.evaluator_placement.get("num_gpus", 1.0))
                    for _ in range(plan.evaluators)])

    def __len__(self) -> int:
        return len(self.evaluators)

    def info(self) -> dict:
        """The first evaluator's device (`Evaluator.info`): what the plan is completed with."""
        return ray.get(self.evaluators[0].info.remote())

    def busy(self) -> int:
        return sum(1 for x in self.load if x > 0)

    def _take(self) -> int:
        i = min(range(len(self.evaluators)), key=lambda k: self.load[k])
        self.load[i] += 1
        return i

    def room(self) -> bool:
        """Whether an evaluator takes another judgement now."""
        return min(self.load) < DEPTH

    def judge(self, built: Built):
        """Sends `built` to the least-loaded evaluator: (ref, Judging). Call only while `room()`."""
        i = self._take()
        b = built.build
        return self.evaluators[i].evaluate.remote(b.key, built.lib, b.module_name), Judging(built, i)

    def compare(self, challenger, champion, bucket: str | None = None, only: tuple[str, ...] | None = None):
        """A paired comparison of two `champion.Entry`s on the least-loaded evaluator, on the shapes `only` (a size
        `bucket`'s) or all: (ref, Comparing)."""
        i = self._take()
        ref = self.evaluators[i].compare.remote(challenger.build, challenger.lib, champion.build, champion.lib, only)
        return ref, Comparing(challenger.candidate, i, bucket=bucket)

    def profile(self, candidate, build_ref, lib, ncu: str):
        """Nsight Compute on `candidate`'s build, on the least-loaded evaluator: (ref, Profiling)."""
        i = self._take()
        return self.evaluators[i].profile.remote(build_ref, lib, ncu), Profiling(candidate, i)

    def confirm(self, build, lib):
        """The confirmation's judgement, baselines timed afresh, on the first evaluator (waited for)."""
        return ray.get(self.evaluators[0].evaluate.remote(build.key, lib, build.module_name, True))

    def release(self, build, lib, count: int):
        """The release check of a build (`Evaluator.release`), on the first evaluator (waited for)."""
        return ray.get(self.evaluators[0].release.remote(build.key, lib, build.module_name, count))

    def returned(self, evaluator: int, freed: bool = True) -> None:
        """A call to `evaluator` came back (`freed`: with a result, so it is idle from now if nothing else waits)."""
        self.load[evaluator] -= 1
        if freed:
            self.freed[evaluator] = time.perf_counter()

    @staticmethod
    def judge_again(judging: Judging, ev) -> bool:
        """Whether the verdict is the harness's own failure with retries left: the candidate is judged again."""
        return not ev.correct and harness_failure(ev) and judging.retries < ACTOR_RETRIES

    def cut_off(self, running: list) -> tuple[float, list[tuple[str, dict]]]:
        """Before in-flight work is cancelled: the evaluator seconds its running judgements or comparisons
        (`running`: their records) had used, and where each evaluator was (`Evaluator.status`) — so the summary's
        busy share agrees with the progress line and a budget that ends before a verdict says which phase is slow.
        Returns (seconds, [(line, event payload)])."""
        now, seconds, lines = time.perf_counter(), 0.0, []
        for i in range(len(self.evaluators)):
            mine = [r for r in running if r.step in (Step.EVALUATE, Step.COMPARE) and r.evaluator == i]
            if not mine:
                continue
            began = max(min(r.started for r in mine), self.freed[i])
            seconds += now - began
            try:
                where = ray.get(self.evaluators[i].status.remote(), timeout=10)
            except Exception:                       # noqa: BLE001 — a dead or hung actor: said without its phase
                where = None
            kind = "comparison" if any(r.step is Step.COMPARE for r in mine) else "judgement"
            lines.append((describe_unfinished(i, kind, now - began, where),
                          {"evaluator": i, "seconds": round(now - began, 1), "status": where}))
        return seconds, lines

    def reset(self) -> None:
        """Everything in flight was cancelled."""
        self.load = [0] * len(self.evaluators)

    def kill(self) -> None:
        for actor in self.evaluators:
            ray.kill(actor)
