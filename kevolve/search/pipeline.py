"""The pipeline from a new candidate to its verdict: verify → (queue by priority) → build → (queue) → evaluate, and
every call in flight that `ray.wait` waits on (`flying`: ref → its stage's record, `jobs`).

Guarantees: each stage's result is written to the store (`set_stage`, `record_evaluation`) before the candidate
moves on; a candidate the static rules or the LLM verifiers' filter refuse is never built; in shadow mode (the
default) no candidate waits for an LLM verifier: it is built and judged as soon as the static rules pass it, and
its LLM verdicts are stored when they come (none are asked while the LLM is paused, `llm_health`, or while as many
screenings are in flight as the endpoints take); at most
`plan.builders` builds run at once, verified candidates build lowest priority first (FIFO among equals); a
library's bytes go from builder to evaluator as an object reference, never fetched here; a call lost with its
actor's process is sent again `outcome.ACTOR_RETRIES` times at most, then the candidate gets a `failed` verdict
naming the error; a harness failure is judged again as many times (`pool`). Every verdict goes through
`conclude(candidate, Outcome[, Evaluation])` exactly once.
"""
from __future__ import annotations

import bisect
from typing import Callable

import ray

from kevolve.judge.build import Build
from kevolve.messages import Candidate, Status
from kevolve.search import actors, outcome
from kevolve.search.jobs import (Building, Built, Judging, LLMVerifying, Mutating, Record, Step, Tally, Verified,
                                 Verifying, again)
from kevolve.search.outcome import ACTOR_RETRIES
from kevolve.search.pacing import Builds
from kevolve.search.plan import ABI
from kevolve.search.pool import EvaluatorPool
from kevolve.search.spend import Spend
from kevolve.search.llm_health import LLMHealth
from kevolve.search.verification import Screened, Screening, Verification
from kevolve.record import events


class Pipeline:
    def __init__(self, plan, store, verifier, pool: EvaluatorPool, verification: Verification, spend: Spend,
                 tally: Tally, conclude: Callable[..., object], health: LLMHealth | None = None):
        self.plan, self.store, self.verifier, self.pool = plan, store, verifier, pool
        self.verification, self.spend, self.tally, self.conclude = verification, spend, tally, conclude
        self.health = health or LLMHealth(1, 1.0)     # the LLM's calls counted; paused: no LLM verifier calls
        # shadow screenings, until paired with their candidate's verdict: id -> None (both to come), the verdict's
        # (compiled, correct, failure), or the Screening that came first
        self.shadowed: dict[str, tuple | Screening | None] = {}
        self.builds = Builds(plan.evaluators, plan.builders)   # sizes the builds kept in flight (pacing)
        self.jobs: dict[ray.ObjectRef, Record] = {}   # waiting on Ray
        self.to_build: list[Verified] = []            # verified, waiting for a builder
        self.queue: list[Built] = []                  # built, waiting for an evaluator
        self.on_judged: Callable[[Judging, object], None] = lambda judging, ev: None   # after its verdict
        self.on_seconds: Callable[[float], None] = lambda seconds: None               # a judgement's seconds

    # ------------------------------------------------------------------ what is in flight
    def routes(self) -> dict:
        """The records this part owns -> (the handler of their result, of their error)."""
        return {Verifying: (self.verified, self.lost), LLMVerifying: (self.screened, self.lost),
                Building: (self.built, self.lost), Judging: (self.judged, self.lost)}

    def send(self, ref, record: Record) -> None:
        self.jobs[ref] = record

    def size(self) -> int:
        """Candidates (and proposals) between proposal and verdict now."""
        return len(self.jobs) + len(self.to_build) + len(self.queue)

    def building(self) -> int:
        return sum(1 for r in self.jobs.values() if r.step is Step.BUILD)

    def llm_proposals(self) -> int:
        return sum(1 for r in self.jobs.values() if isinstance(r, Mutating) and r.calls)

    # ------------------------------------------------------------------ admit and verify
    def admit(self, c: Candidate, **record) -> None:
        """A new candidate: stored (`record`: cost_usd, timings, arm) and sent to the verifier."""
        self.store.add_candidate(c, **record)
        self.tally.created += 1
        self.verify(c)

    def verify(self, c: Candidate, retries: int = 0) -> None:
        self.send(self.verifier.check.remote(c.source, self.plan.target, ABI, self.plan.task),
                  Verifying(c, 0, retries))

    def screen(self, c: Candidate, waits: bool, verdict=None, retries: int = 0) -> bool:
        """Sends `c` to the LLM verifiers; False when none is sent (none configured; the LLM paused; in shadow
        mode, as many screenings in flight as the endpoints take: this candidate goes unscreened)."""
        if not self.verification.on or not self.health.allows() or \
                (not waits and self.screenings() >= max(1, self.plan.llm_calls_max)):
            return False
        calls = len(self.verification.checks)
        self.spend.start(calls)
        self.send(self.verifier.screen.remote(c.source, self.verification.seeds(c.source)),
                  LLMVerifying(c, calls, waits, verdict, retries))
        if not waits:
            self.shadowed[c.id] = None
        return True

    def screenings(self) -> int:
        return sum(1 for r in self.jobs.values() if isinstance(r, LLMVerifying))

    def verified(self, job: Verifying, screened: Screened) -> None:
        """The static rules' verdict. Shadow mode: the candidate goes on to its build at once, its LLM verdicts
        follow on their own (`screened`); filter mode: it waits for them."""
        verdict = screened.verdict
        self.tally.stage_seconds["verify"] += verdict.seconds
        c, timings = job.candidate, {"verify": verdict.seconds}
        if not verdict.ok:
            said = outcome.static_rejection(verdict.reason)
            self.store.set_stage(c.id, Status.REJECTED, verdict=verdict, feedback=said.feedback, timings=timings)
            return self.conclude(c, said)
        if self.verification.screen.mode == "filter" and self.screen(c, True, verdict, job.retries):
            return
        self.store.set_stage(c.id, Status.VERIFIED, verdict=verdict, timings=timings)
        self.screen(c, False)
        bisect.insort(self.to_build, Verified(c, None, 0.0, job.retries), key=lambda v: v.priority)

    def screened(self, job: LLMVerifying, llm_verdicts: tuple) -> None:
        """The LLM verifiers' verdicts on a candidate: counted (`health`), stored; in filter mode, the decision
        on its build; in shadow mode, recorded beside its own verdict (now, or when that comes)."""
        cost = sum(v.cost_usd for v in llm_verdicts)
        self.spend.done(job.calls, cost, len(llm_verdicts))
        for v in llm_verdicts:
            self.health.called(v.model, v.error)
        c = job.candidate
        decision = self.verification.decide(llm_verdicts) if llm_verdicts else None
        screening = Screening(tuple(llm_verdicts), decision) if decision is not None else None
        if screening is not None:
            self.store.set_screening(c.id, screening.to_dict(), cost_usd=cost)
        if not job.waits:
            known = self.shadowed.pop(c.id, None)
            if isinstance(known, tuple):          # its verdict came first
                self.verification.judged(screening, *known)
            elif screening is not None:           # it comes later (`judged_screening`)
                self.shadowed[c.id] = screening
            return
        verdict, timings = job.verdict, {"verify": job.verdict.seconds}
        if decision is not None and not decision.build:    # filter mode, by verifiers that earned it, not audited
            said = outcome.screened_out(decision.rejected_by, decision.reason)
            self.store.set_stage(c.id, Status.REJECTED, verdict=verdict, feedback=said.feedback, timings=timings)
            return self.conclude(c, said)
        self.store.set_stage(c.id, Status.VERIFIED, verdict=verdict, timings=timings)
        bisect.insort(self.to_build, Verified(c, screening, decision.priority if decision else 0.0, job.retries),
                      key=lambda v: v.priority)     # after its equals: FIFO among them

    def judged_screening(self, c: Candidate, screening, compiled: bool, correct: bool, failure) -> None:
        """A candidate's true outcome, for its verifiers' accuracy: now (its screening is here, or it has none), or
        when its shadow screening comes back."""
        if screening is None and c.id in self.shadowed:
            known = self.shadowed.pop(c.id)
            if known is None:                     # still in flight: judged when it comes
                self.shadowed[c.id] = (compiled, correct, failure)
                return
            screening = known
        self.verification.judged(screening, compiled, correct, failure)

    # ------------------------------------------------------------------ build
    def build(self, source: str) -> tuple[ray.ObjectRef, ray.ObjectRef]:
        """A build task for `source`, placed by `resources.builder_resources`: refs to (Build, bytes)."""
        return (actors.build_task.options(resources=dict(self.plan.builder_resources) or None)
                .remote(source, self.plan.target, ABI, self.plan.arch, self.plan.cache_dir))

    def start_builds(self) -> None:
        """Starts builds of verified candidates while fewer than `plan.builders` run."""
        building = self.building()
        while self.to_build and building < self.plan.builders:
            verified = self.to_build.pop(0)
            build_ref, lib = self.build(verified.candidate.source)
            self.send(build_ref, Building(verified, lib))
            building += 1

    def built(self, job: Building, b: Build) -> None:
        self.tally.stage_seconds["build"] += b.seconds
        self.builds.built(b.seconds)
        c, v = job.candidate, job.verified
        if not b.ok:
            self.store.set_stage(c.id, Status.BUILD_FAILED, build=b, timings={"build": b.seconds})
            self.judged_screening(c, v.screening, False, False, b.error)
            return self.conclude(c, outcome.build_failure(b.error))
        self.store.set_stage(c.id, Status.BUILT, build=b, timings={"build": b.seconds})
        self.queue.append(Built(c, b, job.lib, v.screening, v.retries))

    # ------------------------------------------------------------------ evaluate
    def dispatch(self) -> None:
        """Hands built candidates to the least-loaded evaluators, `pool.DEPTH` outstanding each at most."""
        while self.queue and self.pool.room():
            self.send(*self.pool.judge(self.queue.pop(0)))

    def judged(self, job: Judging, ev) -> None:
        self.pool.returned(job.evaluator)
        t = self.tally
        t.busy_seconds += ev.eval_seconds
        t.stage_seconds["evaluate"] += ev.eval_seconds
        for phase, s in ev.phases.items():
            t.judge_phases[phase] = t.judge_phases.get(phase, 0.0) + s
        c = job.candidate
        if self.pool.judge_again(job, ev):   # the harness failed, not the kernel: judged again later, once the
            built = again(job)               # GPU's other judgements moved on
            self.store.log_event(events.Retry(id=c.id, step=Step.EVALUATE.value, attempt=built.retries,
                                              error=(ev.failure or "")[:300]))
            self.queue.append(built)
            return
        t.evaluated += 1
        self.builds.judged(ev.eval_seconds)
        self.store.record_evaluation(c.id, ev, ev.eval_seconds)
        self.on_seconds(ev.eval_seconds)
        self.judged_screening(c, job.built.screening, ev.compiled, ev.correct, ev.failure)
        self.conclude(c, outcome.judged(ev), ev)
        self.on_judged(job, ev)

    # ------------------------------------------------------------------ losses
    def lost(self, job: Verifying | LLMVerifying | Building | Judging, error: Exception) -> None:
        """An actor or task failed (not the candidate: the judge turns those into verdicts). A call lost with its
        actor's process (Ray restarts the actor) is sent again, `ACTOR_RETRIES` times at most; then the candidate
        gets a `failed` verdict naming the error."""
        if isinstance(job, Judging):
            self.pool.returned(job.evaluator, freed=False)
        if isinstance(job, LLMVerifying):           # its LLM calls are not sent again: the candidate goes on unscreened
            self.spend.done(job.calls, 0.0, 0)
            self.shadowed.pop(job.candidate.id, None)
            if job.waits:
                self.store.set_stage(job.candidate.id, Status.VERIFIED, verdict=job.verdict)
                self.to_build.append(Verified(job.candidate, None, 0.0, job.retries))
            return
        lost = isinstance(error, (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError))
        c = job.candidate
        if lost and job.retries < ACTOR_RETRIES:
            self.store.log_event(events.Retry(id=c.id, step=job.step.value, attempt=job.retries + 1,
                                              error=outcome.first_line(error)))
            if isinstance(job, Verifying):
                self.verify(c, job.retries + 1)
            elif isinstance(job, Building):
                self.to_build.append(again(job))
            else:
                self.queue.append(again(job))
            return
        said = outcome.lost(job.step.value, error, job.retries if lost else None)
        self.store.set_stage(c.id, Status.FAILED, feedback=said.feedback)
        self.conclude(c, said)

    def cancel(self) -> None:
        """Cancels every call in flight and empties the queues; those candidates stay unfinished in the store.
        First the evaluator seconds the running judgements had used, and where they were (`pool.cut_off`)."""
        seconds, lines = self.pool.cut_off(list(self.jobs.values()))
        self.tally.unfinished_busy += seconds
        for line, payload in lines:
            self.tally.unfinished.append(line)
            self.store.log_event(events.CutOff(**payload))
        for ref, job in list(self.jobs.items()):
            try:
                ray.cancel(ref, force=job.step is Step.BUILD)
            except Exception:               # an actor task may refuse a forced cancel; it ends with its actor
                pass
        self.jobs.clear()
        self.shadowed.clear()
        self.to_build.clear()
        self.queue.clear()
        self.pool.reset()
        self.tally.proposing = 0
        self.spend.in_flight = 0

