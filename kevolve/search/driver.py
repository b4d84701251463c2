"""The driver: one search, from the task's seeds to the best kernel, recorded in the run's store.

Reads top to bottom: resolve the plan, open (or resume) the store, start the actors, restore the population,
then keep the pipeline full — propose → mutate → verify → build → evaluate — with at most `plan.in_flight`
candidates between proposal and verdict and `plan.builders` builds at once, `ray.wait` on whatever finishes
first, and every verdict written to the store the moment it arrives. The driver routes and records; the
population chooses (`Population.propose`), operators write, the judge decides. Budgets (candidates, wall
time, dollars) stop new proposals; Ctrl-C or the deadline cancels what is in flight, which stays
unfinished in the store and is re-queued by `resume=RUN_DIR`.

Guarantees: an evaluated candidate is never evaluated again on resume and never lost (the store commits
each verdict before anything else happens); duplicates (after comment/whitespace normalisation) are
dropped before building; a library's bytes go from builder to evaluator without passing through the driver;
a proposal an operator cannot serve (a malformed knob line, say) is recorded and the search goes on.
Not guaranteed: identical results on resume (random choices continue from a new seed stream).
"""
from __future__ import annotations

import enum
import json
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import ray

from kevolve.config import Config, ConfigError, ResourcesConfig
from kevolve.judge.build import SUFFIX, Build
from kevolve.judge.results import Evaluation
from kevolve.judge.rules import Verdict
from kevolve.messages import Best, Candidate, Mutation, Outcome, Proposal, RunSummary, Status
from kevolve.search import actors
from kevolve.search.plan import ABI, Plan, resolve
from kevolve.search.population import Population
from kevolve.search.store import Store
from kevolve.task.spec import Task, load_task
from kevolve.tracking import make_tracker, row

DUPLICATE_STREAK = 200       # proposals in a row that gave nothing new: the reachable space is spent
ACTOR_RETRIES = 2            # a call lost with its actor's process is sent again this many times, then a verdict


class Step(enum.Enum):
    """Where a job is in the pipeline (driver bookkeeping; the store keeps the candidate's `Status`)."""
    MUTATE = "mutate"
    VERIFY = "verify"
    BUILD = "build"
    QUEUED = "queued"            # built (or verified, waiting for a builder), not yet handed on
    EVALUATE = "evaluate"


@dataclass
class Job:
    """One candidate in flight (not a message: it never leaves the driver)."""
    step: Step
    candidate: Candidate | None = None
    proposal: Proposal | None = None
    build: Build | None = None
    lib: ray.ObjectRef | None = None            # the library's bytes, in the object store, never fetched here
    evaluator: int | None = None
    retries: int = 0
    started: float = field(default_factory=time.perf_counter)


def run(cfg: Config, run_dir: Path, stream: Iterator[str] | None = None) -> RunSummary:
    """Runs (or resumes) a search; returns its summary.

    `stream` replaces the operators with a fixed sequence of sources (no seeds, no mutation): the same
    pipeline judges exactly those candidates — what `experiments/bench_throughput.py` measures."""
    task = load_task(cfg.task.name)
    _start_ray(cfg.resources)
    plan = resolve(cfg, task, ray.cluster_resources())
    store, resumed = _open_store(cfg, run_dir, task)      # only once the configuration is known to be good
    driver = Driver(plan, task, store, run_dir, stream)
    try:
        driver.restore(resumed)
        driver.loop()
        driver.confirm_best()
    except KeyboardInterrupt:
        driver.stop("interrupted (Ctrl-C)")
    finally:
        driver.cancel_in_flight()
        driver.release_actors()
    summary = driver.summary()
    store.log_event("finish", summary.as_dict())
    store.close()
    return summary


def _open_store(cfg: Config, run_dir: Path, task: Task) -> tuple[Store, bool]:
    if cfg.resume:
        store = Store.open(run_dir)
        meta = store.meta()
        if meta.get("task") != task.name:
            raise ConfigError(f"config field 'task.name': the run in {run_dir} searched {meta.get('task')!r}, "
                              f"not {task.name!r}; resume with task={meta.get('task')}")
        store.log_event("resume", {"run_dir": str(run_dir)})
        return store, True
    from omegaconf import OmegaConf
    meta = {"task": task.name, "config": OmegaConf.to_container(OmegaConf.structured(cfg)), "started": time.time()}
    return Store.create(run_dir, meta), False


def _start_ray(r: ResourcesConfig) -> None:
    if ray.is_initialized():
        return
    import logging
    kwargs = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    if r.address is None:
        ray.init(num_cpus=r.num_cpus, **kwargs)
    else:
        ray.init(address=r.address, **kwargs)


class Driver:
    def __init__(self, plan: Plan, task: Task, store: Store, run_dir: Path, stream: Iterator[str] | None = None):
        self.plan, self.task, self.store, self.run_dir, self.stream = plan, task, store, run_dir, stream
        self.population = Population(plan.population)
        self.rng = random.Random(plan.seed)
        self.tracker = make_tracker(plan.tracker)
        self.evaluators = [actors.Evaluator.options(**plan.evaluator_placement)
                           .remote(plan.task, plan.options, plan.reference_bytes, plan.baseline_refresh_s,
                                   plan.cache_dir) for _ in range(plan.evaluators)]
        self.plan = plan.with_arch(ray.get(self.evaluators[0].info.remote()).get("arch"))
        self.tracker.start(store, self.plan)
        self.mutator, self.verifier = actors.Mutator.remote(), actors.Verifier.remote()
        self.jobs: dict[ray.ObjectRef, Job] = {}   # waiting on Ray
        self.to_build: list[Job] = []               # verified, waiting for a builder
        self.queue: list[Job] = []                  # built, waiting for an evaluator
        self.load = [0] * len(self.evaluators)      # judgements outstanding per evaluator
        self.created = self.finished = self.correct = 0
        self.proposing = 0                          # mutations in flight: candidates the budget already counts
        self.failed_proposals = 0                   # proposals in a row that gave no new candidate
        self.stage_seconds = {"mutate": 0.0, "verify": 0.0, "build": 0.0, "evaluate": 0.0}
        self.judge_phases: dict[str, float] = {}    # the evaluate stage, split (Evaluation.phases summed)
        self.busy_seconds = 0.0
        self.stopped: str | None = None
        self.start = time.perf_counter()
        self.deadline = self.start + plan.wall_time_s
        self.last_progress = 0.0
        self.best_evaluation: Evaluation | None = None
        self.confirmed: Candidate | None = None   # the best, judged again with baselines interleaved
        self.not_confirmed: list[str] = []         # better candidates that failed that judgement, and why

    # ------------------------------------------------------------------ start
    def restore(self, resumed: bool) -> None:
        """Rebuilds the population from the store; re-queues unfinished candidates; seeds a new run."""
        if resumed and self.store.candidates():      # a run killed before its seeds were stored is seeded anew
            done = self.store.finished()
            self.population = Population.restore(self.plan.population, [(r.candidate, r.outcome) for r in done])
            self.finished = len(done)
            self.correct = sum(1 for r in done if r.correct)
            self.rng = random.Random(f"{self.plan.seed}/{self.finished}")
            for r in self.store.unfinished():
                self.population.reserve(r.candidate.source)
                self._verify(Job(Step.VERIFY, r.candidate))
            self.created = len(self.store.candidates())
            best = self.store.best(1)
            if best and best[0].evaluation:
                self.best_evaluation = Evaluation.from_json(best[0].evaluation)
            return
        if self.stream is not None:
            return
        for i, path in enumerate(self.task.seed_paths(self.plan.target, ABI)):
            c = Candidate.new(path.read_text(), island=i % self.plan.population.islands, operator="seed",
                              meta={"file": path.name})
            if self.population.reserve(c.source):
                self._add(c)

    # ------------------------------------------------------------------ the loop
    def loop(self) -> None:
        while True:
            self._check_budgets()
            while len(self.jobs) + len(self.to_build) + len(self.queue) < self.plan.in_flight and self._propose():
                pass
            self._start_builds()
            self._dispatch()
            if not self.jobs:                    # nothing in flight and nothing more to propose
                if self.failed_proposals >= DUPLICATE_STREAK:
                    self.stop(f"no new candidates: {DUPLICATE_STREAK} proposals in a row were duplicates or had no "
                              "knobs to turn (the knob space reachable from the population is spent)")
                break
            ready, _ = ray.wait(list(self.jobs), num_returns=1, timeout=0.5)
            for ref in ready:
                self._advance(self.jobs.pop(ref), ref)
            self._progress()

    def _check_budgets(self) -> None:
        if time.perf_counter() > self.deadline:
            self.stop(f"wall time ({self.plan.wall_time_s:.0f} s) reached")
            self.cancel_in_flight()
        elif self.plan.dollars is not None and self.store.total_cost() >= self.plan.dollars:
            self.stop(f"dollar budget ({self.plan.dollars}) reached")

    def stop(self, why: str) -> None:
        if not self.stopped:
            self.stopped = why
            self.store.log_event("stop", {"reason": why})

    def _propose(self) -> bool:
        """Starts one new candidate; False when the budget or the ideas ran out, or when the first verdicts
        must come back before a parent can be chosen."""
        if (self.stopped or self.created + self.proposing >= self.plan.candidates
                or self.failed_proposals >= DUPLICATE_STREAK):
            return False
        if self.stream is not None:
            return self._replay()
        if not self.population.best() and self.finished < self.created:
            return False                         # wait for a first correct parent before mutating
        proposal = self.population.propose(self.rng)
        if proposal is None:
            return False
        ref = self.mutator.mutate.remote(proposal, self.rng.getrandbits(63), self.plan.knob_changes)
        self.jobs[ref] = Job(Step.MUTATE, proposal=proposal)
        self.proposing += 1
        return True

    def _replay(self) -> bool:
        source = next(self.stream, None)
        if source is None:
            return False
        self.population.reserve(source)
        self._add(Candidate.new(source, operator="replay", island=self.created % self.plan.population.islands))
        return True

    def _advance(self, job: Job, ref: ray.ObjectRef) -> None:
        try:
            result = ray.get(ref)
        except ray.exceptions.RayError as e:
            return self._on_error(job, e)
        {Step.MUTATE: self._mutated, Step.VERIFY: self._verified, Step.BUILD: self._built,
         Step.EVALUATE: self._judged}[job.step](job, result)

    def _mutated(self, job: Job, m: Mutation) -> None:
        self.proposing -= 1
        self.stage_seconds["mutate"] += m.seconds
        p = job.proposal
        if m.source is None or not self.population.reserve(m.source):
            self.failed_proposals += 1           # no knobs to turn, a bad parent, or a duplicate
            if m.source is None:
                self.store.log_event("mutation_failed", {"parent": p.parent.id, "operator": p.operator,
                                                         "reason": m.failure, "cost_usd": m.cost_usd})
            return
        self.failed_proposals = 0
        meta = {**m.meta, **({"inspirations": [i.id for i in p.inspirations]} if p.inspirations else {})}
        c = Candidate.new(m.source, parents=(p.parent.id,), island=p.island, generation=p.parent.generation + 1,
                          operator=p.operator, model=m.model, meta=json.loads(json.dumps(meta, default=str)))
        self._add(c, cost_usd=m.cost_usd, timings={"mutate": m.seconds})

    def _add(self, c: Candidate, **record) -> None:
        self.store.add_candidate(c, **record)
        self.created += 1
        self._verify(Job(Step.VERIFY, c))

    def _verify(self, job: Job) -> None:
        job.step, job.started = Step.VERIFY, time.perf_counter()
        self.jobs[self.verifier.check.remote(job.candidate.source, self.plan.target, ABI)] = job

    def _verified(self, job: Job, verdict: Verdict) -> None:
        self.stage_seconds["verify"] += verdict.seconds
        c = job.candidate
        if not verdict.ok:
            self.store.set_stage(c.id, Status.REJECTED, verdict=verdict, feedback=f"static rule: {verdict.reason}",
                                 timings={"verify": verdict.seconds})
            return self._finish(c, Outcome(0.0, False, False, f"static rule: {verdict.reason}"))
        self.store.set_stage(c.id, Status.VERIFIED, verdict=verdict, timings={"verify": verdict.seconds})
        job.step = Step.QUEUED
        self.to_build.append(job)

    def _start_builds(self) -> None:
        """Starts builds of verified candidates while fewer than `plan.builders` run."""
        building = sum(1 for j in self.jobs.values() if j.step is Step.BUILD)
        while self.to_build and building < self.plan.builders:
            job = self.to_build.pop(0)
            job.step, job.started = Step.BUILD, time.perf_counter()
            build_ref, job.lib = self._build(job.candidate.source)
            self.jobs[build_ref] = job
            building += 1

    def _build(self, source: str) -> tuple[ray.ObjectRef, ray.ObjectRef]:
        """A build task for `source`, placed by `resources.builder_resources`: refs to (Build, bytes)."""
        return (actors.build_task.options(resources=dict(self.plan.builder_resources) or None)
                .remote(source, self.plan.target, ABI, self.plan.arch, self.plan.cache_dir))

    def _built(self, job: Job, b: Build) -> None:
        self.stage_seconds["build"] += b.seconds
        c = job.candidate
        if not b.ok:
            job.lib = None
            self.store.set_stage(c.id, Status.BUILD_FAILED, build=b, timings={"build": b.seconds})
            return self._finish(c, Outcome(0.0, False, False, f"compile error: {b.error}"))
        self.store.set_stage(c.id, Status.BUILT, build=b, timings={"build": b.seconds})
        job.build, job.step = b, Step.QUEUED
        self.queue.append(job)

    def _dispatch(self) -> None:
        """Hands built candidates to the least-loaded evaluators, two outstanding each at most."""
        while self.queue:
            i = min(range(len(self.evaluators)), key=lambda k: self.load[k])
            if self.load[i] >= 2:
                return
            job = self.queue.pop(0)
            job.step, job.evaluator, job.started = Step.EVALUATE, i, time.perf_counter()
            self.load[i] += 1
            self.jobs[self.evaluators[i].evaluate.remote(job.build.key, job.lib, job.build.module_name)] = job

    def _judged(self, job: Job, ev: Evaluation) -> None:
        self.load[job.evaluator] -= 1
        self.busy_seconds += ev.eval_seconds
        self.stage_seconds["evaluate"] += ev.eval_seconds
        for phase, t in ev.phases.items():
            self.judge_phases[phase] = self.judge_phases.get(phase, 0.0) + t
        c = job.candidate
        self.store.record_evaluation(c.id, ev, ev.eval_seconds)
        member = self._finish(c, Outcome(ev.fitness, ev.correct, ev.compiled, ev.failure or ""))
        if ev.correct:
            self.correct += 1
            if self.population.best() is member:
                self.best_evaluation = ev
                self._write_best(c)
                self._progress(force=True)

    def _finish(self, c: Candidate, outcome: Outcome):
        self.finished += 1
        member = self.population.add(c, outcome)
        if outcome.correct:
            self.failed_proposals = 0            # a new parent: its neighbours may not have been tried
        self.tracker.candidate(row(self.store.get(c.id)))
        return member

    def _on_error(self, job: Job, error: Exception) -> None:
        """An actor or task failed (not the candidate: the judge turns those into verdicts). A call lost with
        its actor's process (Ray restarts the actor) is sent again, `ACTOR_RETRIES` times at most; then the
        candidate gets a `failed` verdict naming the error. A lost mutation is a lost proposal."""
        if job.step is Step.EVALUATE:
            self.load[job.evaluator] -= 1
        lost = isinstance(error, (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError))
        if lost and job.retries < ACTOR_RETRIES:
            job.retries += 1
            self.store.log_event("retry", {"id": job.candidate.id if job.candidate else None, "step": job.step.value,
                                           "attempt": job.retries, "error": _first_line(error)})
            if job.step is Step.MUTATE:
                self.jobs[self.mutator.mutate.remote(job.proposal, self.rng.getrandbits(63),
                                                     self.plan.knob_changes)] = job
            elif job.step is Step.VERIFY:
                self._verify(job)
            elif job.step is Step.BUILD:
                job.step = Step.QUEUED
                self.to_build.append(job)
            else:
                job.step = Step.QUEUED
                self.queue.append(job)
            return
        if job.candidate is None:                # the mutator failed: that proposal is lost, the search goes on
            self.proposing -= 1
            self.failed_proposals += 1
            self.store.log_event("mutation_failed", {"parent": job.proposal.parent.id,
                                                     "operator": job.proposal.operator, "reason": _first_line(error)})
            return
        reason = f"{job.step.value} failed: {_first_line(error)}" + (f" (after {job.retries} retries)" if lost else "")
        self.store.set_stage(job.candidate.id, Status.FAILED, feedback=reason)
        self._finish(job.candidate, Outcome(0.0, False, job.step is Step.EVALUATE, reason))

    def cancel_in_flight(self) -> None:
        """Cancels everything in flight; those candidates stay unfinished in the store (resume re-queues them)."""
        for ref, job in list(self.jobs.items()):
            try:
                ray.cancel(ref, force=job.step is Step.BUILD)
            except Exception:               # an actor task may refuse a forced cancel; it ends with its actor
                pass
        self.jobs.clear()
        self.to_build.clear()
        self.queue.clear()
        self.proposing = 0
        self.load = [0] * len(self.evaluators)

    def release_actors(self) -> None:
        """Frees this run's actors (a multirun starts the next job in the same Ray)."""
        for actor in self.evaluators + [self.mutator, self.verifier]:
            ray.kill(actor)

    # ------------------------------------------------------------------ the end
    def confirm_best(self, tries: int = 3) -> None:
        """Judges the best candidate once more, its baselines timed interleaved with it as
        `python -m kevolve.evaluate` does: the search ranks with baseline times up to
        `search.baseline_refresh_s` old, and the numbers it reports come from this judgement. A best that is
        not correct again (a race, say) is recorded as such and the next best is tried, `tries` in all."""
        if self.stream is not None or not self.store.best(1):
            return
        self._progress(force=True, note="confirming the best")
        for record in self.store.best(tries):
            c = record.candidate
            build_ref, lib = self._build(c.source)
            b = ray.get(build_ref)
            if not b.ok:                              # cannot happen with an intact build cache; say so if it does
                self.not_confirmed.append(f"{c.id}: could not be rebuilt: {b.error}")
                continue
            ev = ray.get(self.evaluators[0].evaluate.remote(b.key, lib, b.module_name, True))
            self.store.log_event("confirm", {"id": c.id, "correct": ev.correct, "failure": ev.failure,
                                             "seconds": round(ev.eval_seconds, 1), "evaluation": ev.to_json()})
            if ev.correct:
                self.confirmed, self.best_evaluation = c, ev
                self._write_best(c)
                return
            self.not_confirmed.append(f"{c.id}: {ev.failure}")

    def _write_best(self, c: Candidate) -> None:
        (self.run_dir / f"best{SUFFIX[self.plan.target]}").write_text(c.source)

    def _progress(self, force: bool = False, note: str = "") -> None:
        now = time.perf_counter()
        if not self.plan.progress or (not force and now - self.last_progress < (1.0 if sys.stderr.isatty() else 15.0)):
            return
        self.last_progress = now
        best = self.population.best()
        busy = sum(1 for x in self.load if x > 0)
        pct = 100 * self.correct / self.finished if self.finished else 0.0
        line = (f"[{_clock(now - self.start)}] candidates {self.finished}/{self.plan.candidates} "
                f"correct {self.correct} ({pct:.0f}%) best {best.fitness if best else 0:.2f}x "
                f"evaluators {busy}/{len(self.evaluators)} busy, "
                f"in flight {len(self.jobs) + len(self.to_build) + len(self.queue)}" + (f"; {note}" if note else ""))
        print(("\r" + line) if sys.stderr.isatty() else line, file=sys.stderr, end="" if sys.stderr.isatty() else "\n",
              flush=True)
        self.tracker.progress(self.population.stats())

    def summary(self) -> RunSummary:
        elapsed = time.perf_counter() - self.start
        member = self.population.best()
        best = self.confirmed or (member.candidate if member is not None else None)
        ev = self.best_evaluation
        kernel = self.run_dir / f"best{SUFFIX[self.plan.target]}"
        summary = RunSummary(
            run_dir=str(self.run_dir), task=self.task.name, target=self.plan.target, shapes=self.plan.shapes,
            candidates=self.finished, correct=self.correct, stopped=self.stopped or "budget of candidates spent",
            seconds=round(elapsed, 1), candidates_per_minute=round(60 * self.finished / elapsed, 2) if elapsed else 0.0,
            evaluators=len(self.evaluators),
            evaluator_busy=round(self.busy_seconds / (len(self.evaluators) * elapsed), 3) if elapsed else 0.0,
            stage_seconds={k: round(v, 1) for k, v in self.stage_seconds.items()},
            judge_phases={k: round(v, 1) for k, v in self.judge_phases.items()},
            best=None if best is None or ev is None else Best(
                id=best.id, kernel=str(kernel), operator=best.operator, speedup=ev.speedup,
                speedup_eager=ev.speedup_eager, speedup_compile=ev.speedup_compile, floor_fraction=ev.floor_fraction,
                confirmed=self.confirmed is not None, not_confirmed=tuple(self.not_confirmed)))
        self.tracker.finish(summary.as_dict())
        return summary


def _clock(seconds: float) -> str:
    return f"{int(seconds // 60):02d}:{int(seconds % 60):02d}"


def _first_line(error: Exception) -> str:
    return f"{type(error).__name__}: {str(error).splitlines()[0][:300] if str(error) else ''}"
