"""The search's loop, from the task's seeds to the best kernel, recorded in the run's store: `run` builds the parts;
`Driver.loop` keeps the pipeline full — a source proposes (`sources`), the `pipeline` verifies, builds and
evaluates on the evaluator `pool` — with at most `pacing.in_flight` candidates between proposal and verdict,
`ray.wait`s on whatever finishes first and hands it to the part that owns its stage (`route`); `finish` sums up.

Guarantees: an evaluated candidate is never evaluated again on resume and never lost (the store commits each
verdict before anything else happens); budgets (candidates, wall time, dollars) stop new proposals; Ctrl-C or the
deadline cancels what is in flight, which stays unfinished in the store and is re-queued by `resume=RUN_DIR`; every
verdict reaches the population, the choice policy and the tracker once (`conclude`).
A resumed run continues with its recorded settings (kevolve/search/resumed.py), its budgets the run's over all its
parts, and reports its rates and busy share for this part alone.
Not guaranteed: identical results on resume (random choices continue from a new seed stream).
"""
from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Iterator

import ray

from kevolve.config import Config, ConfigError
from kevolve.judge.results import Evaluation
from kevolve.llm.config import provider_of
from kevolve.messages import Candidate, Outcome, RunSummary
from kevolve.record.store import Store
from kevolve.search import actors, pacing, restore, resumed, sources
from kevolve.search.banner import announce
from kevolve.search.champion import Champion
from kevolve.search.contest import Contest
from kevolve.search.finish import Finish
from kevolve.search.jobs import Tally
from kevolve.search.learning import Learning
from kevolve.search.llm_health import LLMHealth
from kevolve.search.pipeline import Pipeline
from kevolve.search.plan import Plan, resolve
from kevolve.search.pool import EvaluatorPool
from kevolve.search.recorded import Recorded
from kevolve.search.sources import Mutations
from kevolve.search.spend import Spend, prior_per_call
from kevolve.search.start import check_llm, open_store, start_ray
from kevolve.search.verification import Verification
from kevolve.task.load import load_task
from kevolve.task.spec import Task
from kevolve.tracking import make_tracker, row
from kevolve.record import events, failures


def run(cfg: Config, run_dir: Path, stream: Iterator[str] | None = None,
        command: list[str] | None = None) -> RunSummary:
    """Runs (or resumes) a search; returns its summary.

    `stream` replaces the operators with a fixed sequence of sources (no seeds, no mutation): the same
    pipeline judges exactly those candidates — what `experiments/bench_throughput.py` measures. `command`: the
    command line's overrides, kept in a new run's store (what `python -m kevolve.tasks best` quotes)."""
    notes, before = [], 0.0
    if cfg.resume:                                       # the run's recorded settings, and what this command changes
        cfg, notes, before = resumed.settings(cfg, run_dir, command)
    task = load_task(cfg.task.name)
    check_llm(cfg.llm)                                   # a missing key stops here, before Ray or a store
    start_ray(cfg.resources)
    plan = resolve(cfg, task, ray.cluster_resources())
    store, resumed_ = open_store(cfg, run_dir, task, command, notes)   # once the configuration is known to be good
    try:
        driver = Driver(plan, task, store, run_dir, stream, resumed_, before)
    except ConfigError:
        store.close()
        raise
    try:
        for line in notes:
            driver.finish.say(line)
        announce(driver.plan, task, store)               # operators, verifiers, expected cost per candidate
        driver.restore()
        driver.loop()
        driver.finish.confirm(driver.advance, driver.progress)
    except KeyboardInterrupt:
        driver.stop("interrupted (Ctrl-C)")
    finally:
        driver.cancel_in_flight()
        driver.release_actors()
    summary = driver.finish.summary(driver.stopped, driver.verification, driver.spend, driver.contest.suspects)
    store.log_event(events.Finish({**summary.as_dict(), "learning": driver.learning.state(),
                                   **({"pacing": driver.pacer.state()} if driver.pacer is not None else {})}))
    store.close()
    return summary


class Driver:
    def __init__(self, plan: Plan, task: Task, store: Store, run_dir: Path, stream: Iterator[str] | None = None,
                 resumed: bool = False, before: float = 0.0):
        """`before`: seconds the run's earlier parts searched (a resumed run's wall time is what they left)."""
        self.task, self.store, self.run_dir, self.stream = task, store, run_dir, stream
        self.tracker = make_tracker(plan.tracker)
        self.pool = EvaluatorPool.start(plan)
        self.plan = plan = plan.with_device(self.pool.info())
        self.tracker.start(store, plan)
        self.mutator, self.verifier = actors.start_llm_actors(plan, run_dir)   # ConfigError: no key there
        self.recorded = Recorded(plan.llm.replay) if plan.llm is not None and plan.llm.replay else None
        if self.recorded is not None:                   # replay takes the recorded run's steps, all of them
            self.plan = plan = replace(plan, candidates=len(self.recorded))
        self.learning = Learning.make(plan.population, plan.choice, plan.llm.models if plan.llm else [])
        self.verification = Verification(plan.verifiers, plan.seed)
        self.spend = Spend(plan.dollars, prior_per_call(plan.llm) if plan.llm else 0.0)
        self.pacer = pacing.Pacer(plan.evaluators, plan.target, plan.llm_calls_min, plan.llm_calls_max,
                                  plan.llm_calls) if plan.llm_calls else None        # LLM proposals in flight
        if self.pacer is not None:
            store.log_event(events.Pacing(self.pacer.state()))
        self.resumed = resumed and bool(store.candidates())   # a run killed before its seeds were stored: anew
        self.population, rng = restore.population(plan, store if self.resumed else None)
        self.tally, self.stopped = Tally(earlier_seconds=before), None
        self.deadline = self.tally.start + plan.wall_time_s - before
        self.health = LLMHealth(plan.llm.down_after, plan.llm.probe_s, {m.name: provider_of(plan.llm, m)
                                                                        for m in plan.llm.models}) \
            if plan.llm is not None else LLMHealth(1, 1.0)       # no LLM: no call is ever counted
        self.pipeline = Pipeline(plan, store, self.verifier, self.pool, self.verification, self.spend, self.tally,
                                 self.conclude, self.health)
        # the best as reported: replaced only on paired evidence (a fixed stream measures throughput: fitness)
        self.contest = Contest(plan, store, run_dir, self.pipeline,
                               Champion(paired=stream is None, share=plan.compare_share), self.tally, self._crowned)
        self.pipeline.on_judged, self.pipeline.on_seconds = self.contest.judged, self._paced
        self.finish = Finish(plan, task, store, run_dir, self.tally, self.contest, self.pool, self.tracker,
                             self.health)
        self.mutations = Mutations(plan, store, self.mutator, self.population, self.pipeline, self.contest,
                                   self.learning, self.spend, self.pacer, rng, self.stop)
        self.source = (sources.Stream(stream, self.population, self.pipeline, plan.population.islands) if stream
                       else sources.Replay(self.recorded, self.mutations, self.pipeline) if self.recorded
                       else sources.FromPopulation(self.mutations, self.pipeline, self.pacer))
        # each record's type -> (its result's handler, its error's): the part that owns that stage
        self.route = {**self.mutations.routes(), **self.pipeline.routes(), **self.contest.routes()}

    def restore(self) -> None:
        """A resumed run takes up its state from the store and re-queues its unfinished candidates; a new run is
        seeded (and its translate founders proposed); a stream starts from nothing."""
        if self.resumed:
            restore.resume(self.store, self.tally, self.learning, self.verification, self.spend, self.pacer,
                           self.contest, self.mutations, self.pipeline, self.recorded)
            self.finish.rejections.update(failures.counts(failures.rows(self.store.finished())))
        elif self.stream is None:
            for c in sources.seeds(self.plan, self.task, self.recorded):
                if self.population.reserve(c.source):
                    self.pipeline.admit(c)
            sources.found(self.mutations, self.task, self.plan.translations if self.recorded is None else 0)

    # ------------------------------------------------------------------ the loop
    def loop(self) -> None:
        while True:
            self._check_budgets()
            while not self.stopped and self.tally.created + self.tally.proposing < self.plan.candidates \
                    and self.pipeline.size() < pacing.in_flight(self.plan, self.pacer, self.pipeline.builds) \
                    and self.source.propose():
                pass
            self.pipeline.start_builds()
            self.pipeline.dispatch()
            if not self.pipeline.jobs:            # nothing in flight and nothing more to propose
                if self.mutations.spent():
                    self.stop(self.mutations.spent())
                elif self.health.paused:
                    self.stop(f"nothing left to judge while the LLM is paused ({self.health.line()})")
                break
            ready, _ = ray.wait(list(self.pipeline.jobs), num_returns=1, timeout=0.5)
            for ref in ready:
                self.advance(ref)
            self.progress()

    def advance(self, ref) -> None:
        """Hands a finished call's result (or its error) to the part that owns its stage."""
        job = self.pipeline.jobs.pop(ref)
        done, failed = self.route[type(job)]
        try:
            result = ray.get(ref)
        except ray.exceptions.RayError as e:
            return failed(job, e)
        done(job, result)

    def _check_budgets(self) -> None:
        if time.perf_counter() > self.deadline:
            before = self.tally.earlier_seconds
            self.stop(f"wall time ({self.plan.wall_time_s:.0f} s"
                      + (f" in all, {before:.0f} s of it before this part" if before else "") + ") reached")
            self.cancel_in_flight()
        elif self.spend.reached():
            self.stop(f"dollar budget (${self.plan.dollars}) reached: ${self.spend.spent:.4f} spent")

    def stop(self, why: str) -> None:
        if not self.stopped:
            self.stopped = why
            self.store.log_event(events.Stop(reason=why))

    # ------------------------------------------------------------------ verdicts
    def conclude(self, c: Candidate, outcome: Outcome, evaluation: Evaluation | None = None) -> None:
        """Every verdict, once: counted, back to the population and the choice policy (`Mutations.concluded`),
        to the tracker."""
        self.tally.finished += 1
        self.mutations.concluded(c, outcome, evaluation)
        record = self.store.get(c.id)
        self.finish.rejected(record)          # counted; a seed's rejection said on the console
        self.tracker.candidate(row(record))

    def _crowned(self, c: Candidate, ev: Evaluation) -> None:
        self.finish.write_best(c)
        self.store.log_event(events.Champion(id=c.id, fitness=ev.fitness))
        self.progress(force=True)

    def _paced(self, seconds: float) -> None:
        if self.pacer is not None and self.pacer.judged(seconds):
            self.store.log_event(events.Pacing(self.pacer.state()))

    def progress(self, force: bool = False, note: str = "") -> None:
        for notice in self.health.notices:     # the LLM paused, or back: said at once, and recorded
            self.finish.say(notice)
            self.store.log_event(events.LLMHealth(notice=notice, **self.health.summary()))
        self.health.notices.clear()
        self.finish.progress(self.population, self.pipeline, self.pacer, self.spend, force, note)

    # ------------------------------------------------------------------ the end
    def cancel_in_flight(self) -> None:
        """Cancels everything in flight; those candidates stay unfinished in the store (resume re-queues them)."""
        self.pipeline.cancel()
        self.contest.cancel()

    def release_actors(self) -> None:
        """Frees this run's actors (a multirun starts the next job in the same Ray)."""
        self.pool.kill()
        for actor in (self.mutator, self.verifier):
            ray.kill(actor)
