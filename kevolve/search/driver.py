"""The driver: one search, from the task's seeds to the best kernel, recorded in the run's store.

Reads top to bottom: open (or resume) the store, start Ray and the actors, restore the population, then
keep the pipeline full — mutate → verify → build → evaluate — with a bounded number of candidates in
flight, `ray.wait` on whatever finishes first, and every verdict written to the store the moment it
arrives. Budgets (candidates, wall time, dollars) stop new proposals; Ctrl-C or the deadline cancels what
is in flight, which stays `unfinished` in the store and is re-queued by `resume=RUN_DIR`.

Guarantees: an evaluated candidate is never evaluated again on resume and never lost (the store commits
each verdict before anything else happens); duplicates (after comment/whitespace normalisation) are
dropped before building; evaluators are kept fed (each has up to two judgements queued).
Not guaranteed: identical results on resume (random choices continue from a new seed stream).
"""
from __future__ import annotations

import json
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import ray

from kevolve.search import actors
from kevolve.judge.build import SUFFIX
from kevolve.config import Config, ConfigError
from kevolve.judge.options import Options
from kevolve.search.population import Candidate, Outcome, Population, PopulationConfig
from kevolve.judge.results import Evaluation
from kevolve.search.store import Store
from kevolve.task.spec import Task, load_task
from kevolve.tracking import make_tracker

ABI = "c"


@dataclass
class Job:
    """Driver bookkeeping for one candidate in flight (not a message: it never leaves the driver)."""
    stage: str                                  # mutate | verify | build | queued | evaluate
    candidate: Candidate | None = None
    proposal: dict = field(default_factory=dict)
    started: float = field(default_factory=time.perf_counter)
    evaluator: int | None = None
    lib: tuple | None = None                    # (key, bytes ref, module) once built
    retries: int = 0


def run(cfg: Config, run_dir: Path, stream: Iterator[str] | None = None) -> dict:
    """Runs (or resumes) a search; returns the summary printed as the last line.

    `stream` replaces the operators with a fixed sequence of sources (no seeds, no mutation): the same
    pipeline judges exactly those candidates — what `experiments/bench_throughput.py` measures."""
    task = load_task(cfg.task.name)
    _start_ray(cfg)
    target = _target(cfg)
    shapes = cfg.task.shapes or ("bench" if target == "cuda" else "small")
    if shapes not in task.shape_sets:
        raise ConfigError(f"config field 'task.shapes': task {task.name} has no shape set {shapes!r}")
    store, resumed = _open_store(cfg, run_dir, task)      # only once the configuration is known to be good
    options = Options(target=target, abi=ABI, shapes=shapes, timeout=cfg.search.timeout_s,
                      baselines=tuple(cfg.search.baselines), reps=cfg.search.reps, budget_s=cfg.search.budget_s,
                      time_inits=cfg.search.time_inits,
                      threads=cfg.resources.worker_threads)
    driver = Driver(cfg, task, store, options, run_dir, stream)
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
    store.log_event("finish", summary)
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
    run_dir.mkdir(parents=True, exist_ok=True)
    from omegaconf import OmegaConf
    meta = {"task": task.name, "config": OmegaConf.to_container(OmegaConf.structured(cfg)), "started": time.time()}
    return Store.create(run_dir, meta), False


def _start_ray(cfg: Config) -> None:
    if ray.is_initialized():
        return
    import logging
    kwargs = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    if cfg.resources.address is None:
        ray.init(num_cpus=cfg.resources.num_cpus, **kwargs)
    else:
        ray.init(address=cfg.resources.address, **kwargs)


def _target(cfg: Config) -> str:
    gpus = int(ray.cluster_resources().get("GPU", 0))
    target = cfg.resources.target or ("cuda" if gpus else "cpu")
    if target == "cuda" and not gpus:
        raise ConfigError("config field 'resources.target': cuda, but the Ray cluster has no GPUs "
                          "(use resources.target=cpu, or join a GPU cluster with resources.address=auto)")
    return target


class Driver:
    def __init__(self, cfg: Config, task: Task, store: Store, options: Options, run_dir: Path,
                 stream: Iterator[str] | None = None):
        self.cfg, self.task, self.store, self.options, self.run_dir = cfg, task, store, options, run_dir
        self.stream = stream
        s = cfg.search
        self.population = Population(PopulationConfig(islands=s.islands, archive_size=s.archive_size,
                                                      per_family=s.per_family, migration_interval=s.migration_interval,
                                                      tournament=s.tournament))
        self.rng = random.Random(s.seed)
        self.tracker = make_tracker(cfg.logger)
        self.evaluators = self._start_evaluators()
        self.arch = ray.get(self.evaluators[0].info.remote()).get("arch")
        self.n_builders = cfg.resources.builders or max(1, int(ray.cluster_resources().get("CPU", 1))
                                                         - int(len(self.evaluators) * cfg.resources.cpus_per_evaluator))
        self.mutator, self.verifier = actors.Mutator.remote(), actors.Verifier.remote()
        # enough to keep each evaluator fed (one judging, one queued, two building), few enough that
        # children are proposed from recent verdicts rather than all from the seeds
        self.max_in_flight = s.in_flight or 4 * len(self.evaluators)
        self.jobs: dict = {}                    # ObjectRef -> Job
        self.queue: list[Job] = []              # built, waiting for an evaluator
        self.load = [0] * len(self.evaluators)  # judgements outstanding per evaluator
        self.created = self.finished = self.correct = 0
        self.proposing = 0                      # mutations in flight: candidates the budget already counts
        self.stage_seconds = {"mutate": 0.0, "verify": 0.0, "build": 0.0, "evaluate": 0.0}
        self.judge_phases: dict[str, float] = {}    # the evaluate stage, split (Evaluation.phases summed)
        self.busy_seconds = 0.0
        self.failed_proposals = 0
        self.stopped: str | None = None
        self.start = time.perf_counter()
        self.deadline = self.start + s.wall_time_s
        self.last_progress = 0.0
        self.best_evaluation: Evaluation | None = None
        self.confirmed: Candidate | None = None   # the best, judged again with baselines interleaved
        self.not_confirmed: list[str] = []         # better candidates that failed that judgement, and why

    # ------------------------------------------------------------------ setup
    def _start_evaluators(self) -> list:
        r, opts = self.cfg.resources, self.options
        gpus = int(ray.cluster_resources().get("GPU", 0))
        n = r.evaluators or (gpus if opts.target == "cuda" else 1)
        resources = {"num_gpus": 1} if opts.target == "cuda" else {}
        if r.evaluator_resources:
            resources["resources"] = dict(r.evaluator_resources)
        gb = r.reference_cache_gb if r.reference_cache_gb is not None else (16.0 if opts.target == "cuda" else 2.0)
        refresh = self.cfg.search.baseline_refresh_s
        # GPU times are stable under host load; on the CPU, builds beside the evaluator skew a kernel's time
        # and its baselines' alike only when they are timed interleaved
        self.baseline_refresh_s = refresh if refresh is not None else (300.0 if opts.target == "cuda" else 0.0)
        return [actors.Evaluator.options(num_cpus=r.cpus_per_evaluator, **resources)
                .remote(self.task.ref, opts, gb, self.baseline_refresh_s) for _ in range(n)]

    def restore(self, resumed: bool) -> None:
        """Rebuilds the population from the store; re-queues unfinished candidates; seeds a new run."""
        if resumed and self.store.candidates():      # a run killed before its seeds were stored is seeded anew
            done = self.store.finished()
            self.population = Population.restore(self.population.config, [(r.candidate, r.outcome) for r in done])
            self.finished = len(done)
            self.correct = sum(1 for r in done if r.correct)
            self.rng = random.Random(f"{self.cfg.search.seed}/{self.finished}")
            for r in self.store.unfinished():
                self.population.reserve(r.candidate.source)
                self._submit_verify(Job("verify", r.candidate))
            self.created = len(self.store.candidates())
            best = self.store.best(1)
            if best and best[0].evaluation:
                self.best_evaluation = Evaluation.from_json(best[0].evaluation)
            return
        if self.stream is not None:
            return
        for i, path in enumerate(self.task.seed_paths(self.options.target, ABI)):
            c = Candidate.new(path.read_text(), island=i % self.cfg.search.islands, operator="seed",
                              meta={"file": path.name})
            if self.population.reserve(c.source):
                self.store.add_candidate(c)
                self.created += 1
                self._submit_verify(Job("verify", c))

    # ------------------------------------------------------------------ the loop
    def loop(self) -> None:
        while True:
            self._check_budgets()
            while not self.stopped and len(self.jobs) + len(self.queue) < self.max_in_flight and self._propose():
                pass
            self._dispatch()
            if not self.jobs:                    # nothing in flight and nothing more to propose
                if self.failed_proposals >= 200:
                    self.stop("no new candidates: 200 proposals in a row were duplicates or had no knobs to turn "
                              "(the knob space reachable from the population is spent)")
                break
            ready, _ = ray.wait(list(self.jobs), num_returns=1, timeout=0.5)
            for ref in ready:
                self._advance(self.jobs.pop(ref), ref)
            self._progress()

    def _check_budgets(self) -> None:
        s = self.cfg.search
        if time.perf_counter() > self.deadline:
            self.stop(f"wall time ({s.wall_time_s:.0f} s) reached")
            self.cancel_in_flight()
        elif s.dollars is not None and self.store.total_cost() >= s.dollars:
            self.stop(f"dollar budget ({s.dollars}) reached")

    def stop(self, why: str) -> None:
        if not self.stopped:
            self.stopped = why
            self.store.log_event("stop", {"reason": why})

    def _can_propose(self) -> bool:
        return (not self.stopped and self.created + self.proposing < self.cfg.search.candidates
                and self.failed_proposals < 200)

    def _propose(self) -> bool:
        """Starts one new candidate through an operator; False when the budget or the ideas ran out."""
        if self.stream is not None:
            return self._replay()
        if not self._can_propose() or not self.population.best() and self.finished < self.created:
            return False                         # wait for a first correct parent before mutating
        island = self.rng.randrange(self.cfg.search.islands)
        parent = self.population.select_parent(island, self.rng)
        if parent is None:
            return False
        ops = self.cfg.search.operators
        operator = self.rng.choices(list(ops), weights=list(ops.values()))[0]
        other = None
        if self.rng.random() < 0.3:
            inspo = self.population.inspirations(island, 1, self.rng, exclude=[parent.id])
            other = inspo[0].source if inspo else None
        ref = self.mutator.mutate.remote(operator, parent.source, other, self.rng.getrandbits(63),
                                         self.cfg.search.knob_changes)
        self.jobs[ref] = Job("mutate", proposal={"parent": parent, "island": island, "operator": operator})
        self.proposing += 1
        return True

    def _replay(self) -> bool:
        source = next(self.stream, None) if self._can_propose() else None
        if source is None:
            return False
        c = Candidate.new(source, operator="replay", island=self.created % self.cfg.search.islands)
        self.population.reserve(source)
        self.store.add_candidate(c)
        self.created += 1
        self._submit_verify(Job("verify", c))
        return True

    def _advance(self, job: Job, ref) -> None:
        try:
            result = ray.get(ref)
        except (ray.exceptions.RayError, ValueError) as e:
            return self._on_error(job, e)
        getattr(self, f"_after_{job.stage}")(job, result)

    def _after_mutate(self, job: Job, result) -> None:
        source, meta, seconds = result
        self.proposing -= 1
        self.stage_seconds["mutate"] += seconds
        p = job.proposal
        if source is None or not self.population.reserve(source):
            self.failed_proposals += 1           # no knobs to turn, or a duplicate: dropped before building
            return
        self.failed_proposals = 0
        parent: Candidate = p["parent"]
        c = Candidate.new(source, parents=(parent.id,), island=p["island"], generation=parent.generation + 1,
                          operator=p["operator"], meta=_jsonable(meta))
        self.store.add_candidate(c, timings={"mutate": seconds})
        self.created += 1
        self._submit_verify(Job("verify", c))

    def _submit_verify(self, job: Job) -> None:
        job.stage, job.started = "verify", time.perf_counter()
        self.jobs[self.verifier.check.remote(job.candidate.source, self.options.target, ABI)] = job

    def _after_verify(self, job: Job, result) -> None:
        verdict, seconds = result
        self.stage_seconds["verify"] += seconds
        c = job.candidate
        if not verdict.ok:
            self.store.set_stage(c.id, "rejected", verdict=verdict, feedback=f"static rule: {verdict.reason}",
                                 timings={"verify": seconds})
            return self._finish(c, Outcome(0.0, False, False, f"static rule: {verdict.reason}"))
        self.store.set_stage(c.id, "verified", verdict=verdict, timings={"verify": seconds})
        job.stage, job.started = "build", time.perf_counter()
        self.jobs[self._build(c.source)] = job

    def _after_build(self, job: Job, result) -> None:
        b, data = result
        self.stage_seconds["build"] += b.seconds
        c = job.candidate
        if not b.ok:
            self.store.set_stage(c.id, "build_failed", build=b, timings={"build": b.seconds})
            return self._finish(c, Outcome(0.0, False, False, f"compile error: {b.error}"))
        self.store.set_stage(c.id, "built", build=b, timings={"build": b.seconds})
        job.lib, job.stage = (b.key, data, b.module_name), "queued"
        self.queue.append(job)

    def _dispatch(self) -> None:
        """Hands built candidates to the least-loaded evaluators, two outstanding each at most."""
        while self.queue:
            i = min(range(len(self.evaluators)), key=lambda k: self.load[k])
            if self.load[i] >= 2:
                return
            job = self.queue.pop(0)
            job.stage, job.evaluator, job.started = "evaluate", i, time.perf_counter()
            self.load[i] += 1
            self.jobs[self.evaluators[i].evaluate.remote(*job.lib)] = job

    def _after_evaluate(self, job: Job, result) -> None:
        ev, seconds = result
        self.load[job.evaluator] -= 1
        self.busy_seconds += seconds
        self.stage_seconds["evaluate"] += seconds
        for phase, t in ev.phases.items():
            self.judge_phases[phase] = self.judge_phases.get(phase, 0.0) + t
        c = job.candidate
        self.store.record_evaluation(c.id, ev, seconds)
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
        self.tracker.candidate({"id": c.id, "operator": c.operator, "fitness": outcome.fitness,
                                "correct": outcome.correct, "parents": list(c.parents)})
        return member

    def _on_error(self, job: Job, error: Exception) -> None:
        """An actor or task failed (not the candidate: the harness turns those into verdicts)."""
        if job.stage == "evaluate":
            self.load[job.evaluator] -= 1
            if job.retries < 1 and isinstance(error, ray.exceptions.RayActorError):
                job.retries += 1
                self.queue.append(job)           # the evaluator restarts; judge the candidate again
                return
        if job.candidate is None:
            self.proposing -= 1
            self.failed_proposals += 1
            if isinstance(error, ValueError) or "needs an LLM" in str(error):
                raise ConfigError(str(error).splitlines()[-1]) from None
            return
        reason = f"{job.stage} failed: {type(error).__name__}: {str(error).splitlines()[0][:300]}"
        self.store.set_stage(job.candidate.id, "failed", feedback=reason)
        self._finish(job.candidate, Outcome(0.0, False, job.stage == "evaluate", reason))

    def cancel_in_flight(self) -> None:
        """Cancels everything in flight; those candidates stay unfinished in the store (resume re-queues them)."""
        for ref in list(self.jobs):
            try:
                ray.cancel(ref, force=self.jobs[ref].stage == "build")
            except Exception:               # an actor task may refuse a forced cancel; it ends with its actor
                pass
        self.jobs.clear()
        self.queue.clear()
        self.proposing = 0
        self.load = [0] * len(self.evaluators)

    def release_actors(self) -> None:
        """Frees this run's actors (a multirun starts the next job in the same Ray)."""
        for actor in self.evaluators + [self.mutator, self.verifier]:
            ray.kill(actor)

    # ------------------------------------------------------------------ output
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
            b, data = ray.get(self._build(c.source))
            if not b.ok:                              # cannot happen with an intact build cache; say so if it does
                self.not_confirmed.append(f"{c.id}: could not be rebuilt: {b.error}")
                continue
            ev, seconds = ray.get(self.evaluators[0].evaluate.remote(b.key, data, b.module_name, True))
            self.store.log_event("confirm", {"id": c.id, "correct": ev.correct, "failure": ev.failure,
                                             "seconds": round(seconds, 1), "evaluation": ev.to_json()})
            if ev.correct:
                self.confirmed, self.best_evaluation = c, ev
                self._write_best(c)
                return
            self.not_confirmed.append(f"{c.id}: {ev.failure}")

    def _build(self, source: str):
        """A build task for `source`, placed by `resources.builder_resources`: a ref to (Build, bytes)."""
        return (actors.build_task.options(resources=dict(self.cfg.resources.builder_resources) or None)
                .remote(source, self.options.target, ABI, self.arch))

    def _write_best(self, c: Candidate) -> None:
        path = self.run_dir / f"best{SUFFIX[self.options.target]}"
        path.write_text(c.source)

    def _progress(self, force: bool = False, note: str = "") -> None:
        now = time.perf_counter()
        if not self.cfg.progress or (not force and now - self.last_progress < (1.0 if sys.stderr.isatty() else 15.0)):
            return
        self.last_progress = now
        best = self.population.best()
        busy = sum(1 for x in self.load if x > 0)
        pct = 100 * self.correct / self.finished if self.finished else 0.0
        line = (f"[{_clock(now - self.start)}] candidates {self.finished}/{self.cfg.search.candidates} "
                f"correct {self.correct} ({pct:.0f}%) best {best.fitness if best else 0:.2f}x "
                f"evaluators {busy}/{len(self.evaluators)} busy, in flight {len(self.jobs) + len(self.queue)}"
                + (f"; {note}" if note else ""))
        print(("\r" + line) if sys.stderr.isatty() else line, file=sys.stderr, end="" if sys.stderr.isatty() else "\n",
              flush=True)
        self.tracker.progress({"finished": self.finished, "correct": self.correct})

    def summary(self) -> dict:
        elapsed = time.perf_counter() - self.start
        best = self.population.best()
        best_candidate = self.confirmed or (best.candidate if best is not None else None)
        ev = self.best_evaluation
        out = {"run_dir": str(self.run_dir), "task": self.task.name, "target": self.options.target,
               "shapes": self.options.shapes, "candidates": self.finished, "correct": self.correct,
               "stopped": self.stopped or "budget of candidates spent", "seconds": round(elapsed, 1),
               "candidates_per_minute": round(60 * self.finished / elapsed, 2) if elapsed else 0.0,
               "evaluators": len(self.evaluators),
               "evaluator_busy": round(self.busy_seconds / (len(self.evaluators) * elapsed), 3) if elapsed else 0.0,
               "stage_seconds": {k: round(v, 1) for k, v in self.stage_seconds.items()},
               "judge_phases": {k: round(v, 1) for k, v in self.judge_phases.items()}, "best": None}
        if best_candidate is not None and ev is not None:
            out["best"] = {"id": best_candidate.id, "kernel": str(self.run_dir / f"best{SUFFIX[self.options.target]}"),
                           "operator": best_candidate.operator, "speedup": ev.speedup,
                           "speedup_eager": ev.speedup_eager, "speedup_compile": ev.speedup_compile,
                           "floor_fraction": ev.floor_fraction, "confirmed": self.confirmed is not None}
            if self.not_confirmed:
                out["best"]["not_confirmed"] = self.not_confirmed
        self.tracker.finish(out)
        return out


def _clock(seconds: float) -> str:
    return f"{int(seconds // 60):02d}:{int(seconds % 60):02d}"


def _jsonable(meta: dict) -> dict:
    return json.loads(json.dumps(meta, default=str))
