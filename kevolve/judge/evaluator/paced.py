"""One configuration's torch baselines timed in the clean baseline worker (`judge.evaluator.baseline_worker`), paced
by the kernel's timing: a baseline round beside each counted round of the kernel's (`timed.time_config(pace=...)`
calls `round`), on the same input variants, the kernel's worker stopped meanwhile.

Guarantees: the baselines' times come from a process no candidate code has run in, interleaved round by round with
the kernel's; a round in which the kernel's stopped worker burned CPU is a failure naming the quiet bound; anything
the baseline worker fails at is `HarnessFailed`. Called by `measure`; calls nothing above.
"""
from __future__ import annotations

import collections

from kevolve.judge import protocol
from kevolve.judge.evaluator import timed
from kevolve.judge.evaluator.baseline_worker import BaselineWorker, HarnessFailed, frozen, quiet_bound
from kevolve.judge.evaluator.checks import Checker
from kevolve.judge.evaluator.process import WorkerProcess
from kevolve.judge.evaluator.reuse import Baselines
from kevolve.judge.options import Options
from kevolve.judge.worker import timing
from kevolve.task.spec import Case


class Paced:
    """The baselines of configuration `cfg` in the baseline worker `bw`, beside the kernel's worker `kernel_worker`."""

    def __init__(self, bw: BaselineWorker, kernel_worker: WorkerProcess, checker: Checker, cfg: Case, index: int,
                 options: Options, baselines: tuple[str, ...], baseline_ms: float | None):
        self.bw, self.kernel_worker, self.checker, self.cfg, self.index = bw, kernel_worker, checker, cfg, index
        self.options, self.names, self.baseline_ms = options, tuple(baselines), baseline_ms
        self.raw: dict[str, list] = collections.defaultdict(list)
        self.clock: dict = {}
        self.notes: dict = {}
        self.n = self.inputs = 0
        self.rounds = 0
        self.limit = options.timeout + 60

    def setup(self) -> None:
        """The baselines' session in the baseline worker: buffers, warm-up, graphs (and their first replays)."""
        o = self.options
        with self.checker.clock("setup", f"{self.cfg.id} baselines"):
            setup = self.bw.call(protocol.TimeSetup(self.index, self.names, timed.fresh_variant(), o.calls, o.reps,
                                                    o.budget_s, self.baseline_ms, kernel=False), self.limit + 600)
            self.n, self.inputs, self.clock, self.notes = setup.calls, setup.inputs, setup.clock, setup.notes
            if o.target == "cuda":
                self.bw.call(protocol.TimeUpload(), self.limit * max(1, self.n))

    def round(self, k: int, variants: list[int]) -> str | None:
        """Baseline round `k` on `variants` (the kernel's round's), the kernel's worker stopped; the quiet bound's
        failure, if any."""
        with self.checker.clock("round", f"{self.cfg.id} baselines {k + 1}"):
            with frozen(self.kernel_worker) as burned:
                reply = self.bw.call(protocol.TimeRound(tuple(variants[:self.inputs])), self.limit * max(1, self.n))
                quiet = burned()
        self.checker.clock.add(reply.worker_s)
        self.checker.clock.count(reply.work)
        for name, values in reply.times.items():
            self.raw[name].extend(values)
        self.rounds += 1
        return quiet_bound(quiet, f"round {k + 1}")

    def end(self) -> None:
        """The session's buffers let go (a failure here is left to the next session's start, which ends it too)."""
        try:
            self.bw.call(protocol.TimeEnd(), 120)
        except HarnessFailed:
            pass

    def baselines(self) -> Baselines:
        """The baselines' per-call times over the rounds run, as `Baselines` (what the verdict compares with)."""
        samples, latency = {}, {}
        for name, kind in self.clock.items():
            samples[name] = timed._per_call(self.raw, self.raw[name], kind, self.n)
            if kind != "wall":
                latency[name] = timing.per_call(self.raw[f"latency:{name}"], self.raw["_null_synced"], 1)
        return Baselines(samples, latency, dict(self.clock), dict(self.notes))
