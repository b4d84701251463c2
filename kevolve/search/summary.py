"""What a run tells its user: the progress line while it runs, the best judged once more at its end, and the
summary (`messages.RunSummary`) it returns and hands to the tracker. A mixin of `driver.Driver`, whose state it
reads; it decides nothing about the search."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import ray

from kevolve.judge.build import SUFFIX
from kevolve.messages import Best, Candidate, RunSummary
from kevolve.search.jobs import Step


def lost_baselines(searched: str | None, confirmed) -> str | None:
    """Why a correct confirmation cannot stand in for the search's numbers, or None: a baseline the search timed
    on a configuration that the confirmation lacks (on the H200 a seeded worker's torch.compile failed, and the
    confirmation's speedup "over the faster torch baseline" was over eager alone: 13.7x for a 1.19x kernel)."""
    if not searched:
        return None
    from kevolve.judge.results import Evaluation
    before = {m.config: m for m in Evaluation.from_json(searched).measurements if m.kernel is not None}
    lost = [(m.config, name, m.failure) for m in confirmed.measurements if m.config in before
            for name in ("eager", "compile") if before[m.config].baseline(name) and not m.baseline(name)]
    if not lost:
        return None
    names = sorted({name for _, name, _ in lost})
    why = next((f for _, _, f in lost if f), None)
    return (f"judged again without {' and '.join(names)} on {len(lost)} configuration(s) the search timed it on"
            + (f" ({why[:300]})" if why else "") + "; the numbers are the search's")


class Summarising:
    """`Driver`'s end of the run and its progress line (the attributes are the driver's)."""

    searched: float | None = None      # seconds from the driver's start to the end of its loop (None: interrupted)

    def confirm_best(self, tries: int = 3) -> None:
        """Judges the best candidate once more, its baselines timed afresh (before it loads, and interleaved) as
        `python -m kevolve.evaluate` does: the search ranks with baseline times up to
        `search.baseline_refresh_s` old, and the numbers it reports come from this judgement. A best that is
        not correct again (a race, say) is recorded as such and the next best is tried, `tries` in all.
        The search's own time ends here (`searched`): its rates are not diluted by this judgement."""
        self.searched = time.perf_counter() - self.start
        self.finishing = True
        if self.stream is not None or self.champion.current is None:
            return
        self._last_challenge()
        self._progress(force=True, note="confirming the best")
        first = self.champion.current.candidate
        ranked = [first] + [r.candidate for r in self.store.best(tries) if r.candidate.id != first.id]
        for c in ranked[:tries]:
            build_ref, lib = self._build(c.source)
            b = ray.get(build_ref)
            if not b.ok:                              # cannot happen with an intact build cache; say so if it does
                self.not_confirmed.append(f"{c.id}: could not be rebuilt: {b.error}")
                continue
            ev = ray.get(self.evaluators[0].evaluate.remote(b.key, lib, b.module_name, True))
            self.store.log_event("confirm", {"id": c.id, "correct": ev.correct, "failure": ev.failure,
                                             "seconds": round(ev.eval_seconds, 1), "evaluation": ev.to_json()})
            lost = lost_baselines(self.store.get(c.id).evaluation, ev) if ev.correct else None
            if ev.correct and not lost:
                self.confirmed, self.best_evaluation = c, ev
                self._write_best(c)
                return
            self.not_confirmed.append(f"{c.id}: {lost or ev.failure}")

    def _last_challenge(self) -> None:
        """The fittest challenger still waiting (comparisons had used their share of the time, or the budget ended
        first) compared with the champion once, before the confirmation: the run's best is decided on paired
        evidence, never on a single judgement's fitness."""
        ref = self._challenge(finishing=True)
        if ref is None:
            return
        self._progress(force=True, note="comparing the fittest challenger with the best")
        job = self.jobs.pop(ref)
        try:
            result = ray.get(ref)
        except Exception as e:                       # noqa: BLE001 — the champion stays (`_on_error`)
            self._on_error(job, e)
        else:
            self._compared(job, result)

    def _best_path(self) -> Path:
        return self.run_dir / f"best{SUFFIX[self.plan.target]}"

    def _write_best(self, c: Candidate) -> None:
        self._best_path().write_text(c.source)

    def _progress(self, force: bool = False, note: str = "") -> None:
        now = time.perf_counter()
        if not self.plan.progress or (not force and now - self.last_progress < (1.0 if sys.stderr.isatty() else 15.0)):
            return
        self.last_progress = now
        best = self.population.best()
        busy = sum(1 for x in self.load if x > 0)
        pct = 100 * self.correct / self.finished if self.finished else 0.0
        building = sum(1 for j in self.jobs.values() if j.step is Step.BUILD)
        line = (f"[{_clock(now - self.start)}] candidates {self.finished}/{self.plan.candidates} "
                f"correct {self.correct} ({pct:.0f}%) best {best.fitness if best else 0:.2f}x "
                f"evaluators {busy}/{len(self.evaluators)} busy, "
                f"in flight {len(self.jobs) + len(self.to_build) + len(self.queue)} "
                f"({building} building, {len(self.queue)} built and waiting)"
                + (f", LLM proposals {self._llm_jobs()}/{self.pacer.target}" if self.pacer is not None else "")
                + (f", spent ${self.spend.spent:.2f} ({self.spend.calls} LLM calls)" if self.plan.llm else "")
                + (f"; {note}" if note else ""))
        print(("\r" + line) if sys.stderr.isatty() else line, file=sys.stderr, end="" if sys.stderr.isatty() else "\n",
              flush=True)
        self.tracker.progress(self.population.stats())

    def summary(self) -> RunSummary:
        elapsed = time.perf_counter() - self.start
        searched = min(elapsed, self.searched if self.searched is not None else elapsed)
        stages = dict(self.stage_seconds)          # paired comparisons hold an evaluator as judgements do
        busy = self.busy_seconds + stages["compare"] + self.unfinished_busy   # cut-off judgements count as busy
        current = self.champion.current
        best = self.confirmed or (current.candidate if current is not None else None)
        ev = self.best_evaluation
        kernel = self._best_path()
        verifiers, saved = self.verification.summary(self.busy_seconds / self.evaluated if self.evaluated else 0.0)
        summary = RunSummary(
            run_dir=str(self.run_dir), task=self.task.name, target=self.plan.target, shapes=self.plan.shapes,
            candidates=self.finished, correct=self.correct, stopped=self.stopped or "budget of candidates spent",
            seconds=round(elapsed, 1), search_seconds=round(searched, 1),
            candidates_per_minute=round(60 * self.finished / searched, 2) if searched else 0.0,
            evaluators=len(self.evaluators),
            evaluator_busy=round(busy / (len(self.evaluators) * searched), 3) if searched else 0.0,
            stage_seconds={k: round(v, 1) for k, v in stages.items()},
            judge_phases={k: round(v, 1) for k, v in self.judge_phases.items()},
            best=None if best is None or ev is None else Best(
                id=best.id, kernel=str(kernel), operator=best.operator, speedup=ev.speedup,
                speedup_eager=ev.speedup_eager, speedup_compile=ev.speedup_compile, floor_fraction=ev.floor_fraction,
                confirmed=self.confirmed is not None, not_confirmed=tuple(self.not_confirmed),
                speedup_ci=ev.speedup_ci, ties=tuple(self.champion.ties), comparisons=self.champion.comparisons),
            spend_usd=round(self.spend.spent, 6), llm_calls=self.spend.calls, verifiers=verifiers,
            gpu_seconds_saved=saved, suspected_judge_bugs=tuple(self.suspects), unfinished=tuple(self.unfinished))
        self.tracker.finish(summary.as_dict())
        return summary


def _clock(seconds: float) -> str:
    return f"{int(seconds // 60):02d}:{int(seconds % 60):02d}"
