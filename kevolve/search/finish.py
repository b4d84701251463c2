"""What a run tells its user: the progress line while it runs, the best judged once more at its end, the best
kernel's file, the op assembled from the size buckets' champions and judged as a whole (`search.assembly`), and the
summary (`messages.RunSummary`) it returns and hands to the tracker. It reads the parts it
is given (the tally, the pool, the pipeline, the champion, ...), decides nothing about the search.

Guarantees: the reported numbers of the best come from a judgement with baselines timed afresh (`confirm`) when it
is correct again and lost no baseline the search timed; otherwise the search's own, and `not_confirmed` says why;
the search's rates end where its loop ended (`Tally.searched`), not diluted by the confirmation.
"""
from __future__ import annotations

import sys
import time
from collections import Counter
from pathlib import Path

import ray

from kevolve.judge.build import SUFFIX
from kevolve.judge.results import Evaluation, Release
from kevolve.messages import Best, Candidate, RunSummary
from kevolve.search import assembly
from kevolve.search.contest import Contest
from kevolve.search.jobs import Tally
from kevolve.record import events, failures


def lost_baselines(searched: str | None, confirmed) -> str | None:
    """Why a correct confirmation cannot stand in for the search's numbers, or None: a baseline the search timed
    on a configuration that the confirmation lacks (its speedup "over the faster torch baseline" would be over the
    other one alone; docs/decisions/search.md)."""
    if not searched:
        return None
    before = {m.config: m for m in Evaluation.from_json(searched).measurements if m.kernel is not None}
    lost = [(m.config, name, m.failure) for m in confirmed.measurements if m.config in before
            for name in ("eager", "compile") if before[m.config].baseline(name) and not m.baseline(name)]
    if not lost:
        return None
    names = sorted({name for _, name, _ in lost})
    why = next((f for _, _, f in lost if f), None)
    return (f"judged again without {' and '.join(names)} on {len(lost)} configuration(s) the search timed it on"
            + (f" ({why[:300]})" if why else "") + "; the numbers are the search's")


class Finish:
    def __init__(self, plan, task, store, run_dir: Path, tally: Tally, contest: Contest, pool, tracker, health=None):
        self.plan, self.task, self.store, self.run_dir, self.tally = plan, task, store, run_dir, tally
        self.contest, self.pool, self.tracker, self.health = contest, pool, tracker, health
        self.confirmed: tuple[Candidate, Evaluation] | None = None   # the best, judged again, baselines interleaved
        self.not_confirmed: list[str] = []         # better candidates that failed that judgement, and why
        self.released: tuple[str, Release] | None = None   # (candidate id, its release check) that passed
        self.op = None                             # the assembled op (kevolve.search.assembly), once judged
        self.last_progress = 0.0
        self.rejections: Counter = Counter()      # failed candidates per reason (record/failures.py), the run's

    @property
    def best_path(self) -> Path:
        return self.run_dir / f"best{SUFFIX[self.plan.target]}"

    def write_best(self, c: Candidate) -> None:
        self.best_path.write_text(c.source)

    def confirm(self, advance, line, tries: int = 5) -> None:
        """The best confirmed (`confirm_best`), then the op assembled from the size buckets' champions and judged
        as a whole (`search.assembly`)."""
        self.confirm_best(advance, line, tries)
        self.op = assembly.run(self, line)

    def confirm_best(self, advance, line, tries: int = 5) -> None:
        """Judges the best candidate once more, its baselines timed afresh (before it loads, and interleaved) as
        `python -m kevolve.evaluate` does: the search ranks with baseline times up to `search.baseline_refresh_s`
        old, and the numbers it reports come from this judgement. A best that is not correct again (a race, say)
        is recorded as such and the next best is tried, `tries` in all; so is one that fails the release check
        (`search.release` configurations swept over the task's domain in a fresh worker, `harness.release`), which
        a best must pass before the run names it. First the fittest challenger still
        waiting is compared with the champion once (`advance`: the driver's handling of that result), so the
        best is decided on paired evidence. `line`: the progress line, shown with a note."""
        self.tally.searched = time.perf_counter() - self.tally.start
        self.contest.finishing = True
        champion = self.contest.champion
        if champion.current is None:
            return
        if not champion.paired:                   # no confirmation judgement; the release check still stands
            if self.plan.release:
                c = champion.current.candidate
                build_ref, lib = self.contest.pipeline.build(c.source)
                b = ray.get(build_ref)
                if b.ok:
                    self.release(c, b, lib, line)
            return
        ref = self.contest.challenge(finishing=True)
        if ref is not None:
            line(force=True, note="comparing the fittest challenger with the best")
            advance(ref)
        line(force=True, note="confirming the best")
        first = champion.current.candidate
        ranked = [first] + [r.candidate for r in self.store.best(tries) if r.candidate.id != first.id]
        for c in ranked[:tries]:
            build_ref, lib = self.contest.pipeline.build(c.source)
            b = ray.get(build_ref)
            if not b.ok:                              # cannot happen with an intact build cache; say so if it does
                self.not_confirmed.append(f"{c.id}: could not be rebuilt: {b.error}")
                continue
            ev = self.pool.confirm(b, lib)
            self.store.log_event(events.Confirm(id=c.id, correct=ev.correct, failure=ev.failure,
                                                seconds=round(ev.eval_seconds, 1), evaluation=ev.to_json()))
            lost = lost_baselines(self.store.get(c.id).evaluation, ev) if ev.correct else None
            if ev.correct and not lost and self.plan.release and not self.release(c, b, lib, line):
                continue
            if ev.correct and not lost:
                self.confirmed = (c, ev)
                self.write_best(c)
                return
            self.not_confirmed.append(f"{c.id}: {lost or ev.failure}")

    def release(self, c: Candidate, b, lib, line) -> bool:
        """The release check of `c` (built as `b`, its library `lib`): recorded, said on the console; False (and
        why, in `not_confirmed`) when a configuration of the domain fails."""
        line(force=True, note=f"release check of {c.id}: {self.plan.release} configurations of the domain")
        checked = self.pool.release(b, lib, self.plan.release)
        self.store.log_event(events.Release(id=c.id, passed=checked.passed, planned=checked.planned,
                                            checked=checked.checked, proven=checked.proven,
                                            failure=checked.failure, seconds=checked.seconds))
        print(f"{c.id}: {checked.line()}", file=sys.stderr, flush=True)
        if not checked.passed:
            self.not_confirmed.append(f"{c.id}: failed the release check: {checked.failure}")
            return False
        self.released = (c.id, checked)
        return True

    def progress(self, population, pipeline, pacer, spend, force: bool = False, note: str = "") -> None:
        """The progress line on stderr (every second on a terminal, every 15 s in a log), and the population's
        statistics to the tracker."""
        now, t = time.perf_counter(), self.tally
        if not self.plan.progress or (not force and now - self.last_progress < (1.0 if sys.stderr.isatty() else 15.0)):
            return
        self.last_progress = now
        best = population.best()
        pct = 100 * t.correct / t.finished if t.finished else 0.0
        line = (f"[{_clock(now - t.start)}] candidates {t.finished}/{self.plan.candidates} "
                f"correct {t.correct} ({pct:.0f}%) best {best.fitness if best else 0:.2f}x "
                f"evaluators {self.pool.busy()}/{len(self.pool)} busy, "
                f"in flight {pipeline.size()} "
                f"({pipeline.building()} building, {len(pipeline.queue)} built and waiting)"
                + (f", LLM proposals {pipeline.llm_proposals()}/{pacer.target}" if pacer is not None else "")
                + (f", spent ${spend.spent:.2f} ({spend.calls} LLM calls)" if self.plan.llm else "")
                + (f"; {self.rejections_line()}" if self.rejections else "")
                + (f"; {self.health.line()}" if self.health is not None and self.health.line() else "")
                + (f"; {note}" if note else ""))
        print(("\r" + line) if sys.stderr.isatty() else line, file=sys.stderr, end="" if sys.stderr.isatty() else "\n",
              flush=True)
        self.tracker.progress(population.stats())

    def rejected(self, record) -> None:
        """A verdict that is not correct (a stored record): its reason counted; a seed's said at once."""
        if not failures.failed(record):
            return
        row = failures.rows([record])[0]
        self.rejections[row["reason"]] += 1
        c = record.candidate
        if c.operator == "seed":
            where = f" on {row['configuration']}" if row["configuration"] else ""
            detail = row["detail"].removeprefix("static rule: ").removeprefix(f"{row['configuration']}: ")
            self.say(f"seed {c.meta_dict().get('file') or ''} ({c.id}) rejected at {row['stage']}{where}: "
                     f"{row['reason']} — {detail[:300]}")

    def rejections_line(self) -> str:
        n = sum(self.rejections.values())
        return (f"rejected {n}: " + ", ".join(f"{k} {r}" for r, k in self.rejections.most_common(3))
                + (", …" if len(self.rejections) > 3 else "")) if n else ""

    def say(self, line: str) -> None:
        """A line on stderr that stays (a notice: the LLM paused, a seed rejected), whether or not the progress line
        is on."""
        print(("\n" if sys.stderr.isatty() else "") + line, file=sys.stderr, flush=True)

    def summary(self, stopped: str | None, verification, spend, suspects) -> RunSummary:
        t = self.tally
        elapsed = time.perf_counter() - t.start
        searched = min(elapsed, t.searched if t.searched is not None else elapsed)
        stages = dict(t.stage_seconds)             # paired comparisons hold an evaluator as judgements do
        busy = t.busy_seconds + stages["compare"] + t.unfinished_busy   # cut-off judgements count as busy
        busy -= t.earlier_busy                     # a resumed run: this part's alone, as its rate
        judged = t.finished - t.earlier_finished
        champion = self.contest.champion
        best, ev = self.confirmed or ((champion.current.candidate, champion.current.evaluation)
                                      if champion.current is not None else (None, None))
        not_released: tuple[str, ...] = ()
        if self.plan.release and best is not None and (self.released is None or self.released[0] != best.id):
            not_released = tuple(self.not_confirmed) or (f"{best.id}: not checked (no release check ran)",)
            best, ev = None, None              # no kernel is named unless it passed the release check
            self.best_path.unlink(missing_ok=True)
        verifiers, saved = verification.summary(t.busy_seconds / t.evaluated if t.evaluated else 0.0)
        n = len(self.pool)
        summary = RunSummary(
            run_dir=str(self.run_dir), task=self.task.name, target=self.plan.target, shapes=self.plan.shapes,
            candidates=t.finished, correct=t.correct, stopped=stopped or "budget of candidates spent",
            seconds=round(elapsed, 1), search_seconds=round(searched, 1),
            candidates_per_minute=round(60 * judged / searched, 2) if searched else 0.0,
            evaluators=n, evaluator_busy=round(busy / (n * searched), 3) if searched else 0.0,
            stage_seconds={k: round(v, 1) for k, v in stages.items()},
            judge_phases={k: round(v, 1) for k, v in t.judge_phases.items()},
            best=None if best is None or ev is None else Best(
                id=best.id, kernel=str(self.best_path), operator=best.operator, speedup=ev.speedup,
                speedup_eager=ev.speedup_eager, speedup_compile=ev.speedup_compile, floor_fraction=ev.floor_fraction,
                confirmed=self.confirmed is not None, not_confirmed=tuple(self.not_confirmed),
                speedup_ci=ev.speedup_ci, ties=tuple(champion.ties), comparisons=champion.comparisons,
                release=self.released[1].line() if self.released is not None else ""),
            spend_usd=round(spend.spent, 6), llm_calls=spend.calls, verifiers=verifiers,
            gpu_seconds_saved=saved, suspected_judge_bugs=tuple(suspects), unfinished=tuple(t.unfinished),
            not_released=not_released, op=self.op,
            llm_health=self.health.summary() if self.health is not None and self.plan.llm else {},
            rejections=dict(self.rejections.most_common()), earlier=t.earlier_finished)
        self.tracker.finish(summary.as_dict())
        return summary


def _clock(seconds: float) -> str:
    return f"{int(seconds // 60):02d}:{int(seconds % 60):02d}"
