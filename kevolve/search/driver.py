"""The driver: one search, from the task's seeds to the best kernel, recorded in the run's store.

Reads top to bottom: resolve the plan, open (or resume) the store, start the actors, restore the population,
then keep the pipeline full — propose → mutate → verify → build → evaluate — with at most `plan.in_flight`
candidates between proposal and verdict and `plan.builders` builds at once, `ray.wait` on whatever finishes
first, and every verdict written to the store the moment it arrives. The driver routes and records; the
population chooses (`Population.propose`, with the choice policy of `learning`), operators write, the judge
decides. Budgets (candidates, wall time, dollars) stop new proposals; Ctrl-C or the deadline cancels what is in
flight, which stays unfinished in the store and is re-queued by `resume=RUN_DIR`; the dollar budget lets the
calls in flight finish (`spend` counts them before they are made).

With an LLM (`llm=openai|gemini|local`): a proposal for an LLM operator becomes a `Request` filled from the
store (`requests`) and goes to the threaded Mutator, which may answer with several children (meta-generation);
translate founders are written at start; the Verifier asks the LLM verifiers after the static rules, and their
decision (`verification`) drops a candidate or orders the build queue; the LLM proposals in flight follow `pacing`
(sized from the LLM latencies and judgement times measured), and while they are at that number knob mutation (when
weighted) keeps the evaluators busy; each judged child's reward goes to the
choice policy and the strategy board (`learning`); an accepted red-team child is saved as a suspected judge bug
(`suspected_judge_bugs/`), never ranked. `llm.replay=RUN_DIR` replays a recorded run's steps (`recorded`). On
cuda with `ncu` on the evaluators' PATH, a parent's first optimize or meta proposal has an evaluator profile it
(`profile`), and later prompts on it show the profile (a `profile` event in the store).

Guarantees: an evaluated candidate is never evaluated again on resume and never lost (the store commits
each verdict before anything else happens); duplicates (after comment/whitespace normalisation) are
dropped before building; a library's bytes go from builder to evaluator without passing through the driver;
a proposal an operator cannot serve (a malformed knob line, say) is recorded and the search goes on.
Not guaranteed: identical results on resume (random choices continue from a new seed stream).
"""
from __future__ import annotations

import bisect
import json
import random
import time
from dataclasses import replace
from pathlib import Path
from typing import Iterator

import ray

from kevolve.config import Config, ConfigError
from kevolve.judge.build import SUFFIX, Build
from kevolve.judge.results import Comparison, Evaluation
from kevolve.messages import Candidate, Mutation, Outcome, Proposal, RunSummary, Status
from kevolve.operators.choice import reward
from kevolve.search import actors, requests, suspects
from kevolve.search.banner import announce
from kevolve.search.champion import Champion, Entry
from kevolve.search.learning import Learning, strategy_of
from kevolve.search.pacing import Builds, Pacer
from kevolve.search.plan import ABI, Plan, resolve
from kevolve.search.population import Population, red_team
from kevolve.search.recorded import Recorded
from kevolve.search.spend import Spend, prior_per_call
from kevolve.search.jobs import Job, Step
from kevolve.search.start import check_llm, open_store, start_ray
from kevolve.record.store import Store
from kevolve.search.summary import Summarising
from kevolve.search.verification import Screened, Verification
from kevolve.task.spec import Task, TaskError
from kevolve.task.load import load_task
from kevolve.tracking import make_tracker, row

DUPLICATE_STREAK = 200       # proposals of a kind (knob, LLM) in a row that gave nothing new: that kind is spent
ACTOR_RETRIES = 2            # a call lost with its actor's process, or a harness failure, is sent again this many times


def run(cfg: Config, run_dir: Path, stream: Iterator[str] | None = None,
        command: list[str] | None = None) -> RunSummary:
    """Runs (or resumes) a search; returns its summary.

    `stream` replaces the operators with a fixed sequence of sources (no seeds, no mutation): the same
    pipeline judges exactly those candidates — what `experiments/bench_throughput.py` measures. `command`: the
    command line's overrides, kept in a new run's store (what `python -m kevolve.tasks best` quotes)."""
    task = load_task(cfg.task.name)
    check_llm(cfg.llm)                                   # a missing key stops here, before Ray or a store
    start_ray(cfg.resources)
    plan = resolve(cfg, task, ray.cluster_resources())
    store, resumed = open_store(cfg, run_dir, task, command)   # only once the configuration is known to be good
    try:
        driver = Driver(plan, task, store, run_dir, stream)
    except ConfigError:
        store.close()
        raise
    try:
        announce(driver.plan, task, store)               # operators, verifiers, expected cost per candidate
        driver.restore(resumed)
        driver.loop()
        driver.confirm_best()
    except KeyboardInterrupt:
        driver.stop("interrupted (Ctrl-C)")
    finally:
        driver.cancel_in_flight()
        driver.release_actors()
    summary = driver.summary()
    store.log_event("finish", {**summary.as_dict(), "learning": driver.learning.state(),
                               **({"pacing": driver.pacing()} if driver.pacer is not None else {})})
    store.close()
    return summary


class Driver(Summarising):
    def __init__(self, plan: Plan, task: Task, store: Store, run_dir: Path, stream: Iterator[str] | None = None):
        self.plan, self.task, self.store, self.run_dir, self.stream = plan, task, store, run_dir, stream
        self.population = Population(plan.population, plan.seeds_only)
        self.rng = random.Random(plan.seed)
        self.tracker = make_tracker(plan.tracker)
        self.evaluators = [actors.Evaluator.options(**plan.evaluator_placement)
                           .remote(plan.task, plan.options, plan.reference_bytes, plan.baseline_refresh_s,
                                   plan.cache_dir, plan.evaluator_placement.get("num_gpus", 1.0))
                           for _ in range(plan.evaluators)]
        self.plan = plan = plan.with_device(ray.get(self.evaluators[0].info.remote()))
        self.tracker.start(store, self.plan)
        self.mutator, self.verifier = actors.start_llm_actors(plan, run_dir)   # ConfigError: no key there
        self.recorded = Recorded(plan.llm.replay) if plan.llm is not None and plan.llm.replay else None
        if self.recorded is not None:                   # replay takes the recorded run's steps, all of them
            self.plan = plan = replace(plan, candidates=len(self.recorded))
        self.learning = Learning.make(plan.population, plan.choice, plan.llm.models if plan.llm else [])
        self.verification = Verification(plan.verifiers, plan.seed)
        self.spend = Spend(plan.dollars, prior_per_call(plan.llm) if plan.llm else 0.0)
        self.pacer = Pacer(plan.evaluators, plan.target, plan.llm_calls_min, plan.llm_calls_max,
                           plan.llm_calls) if plan.llm_calls else None        # LLM proposals in flight
        if self.pacer is not None:
            self.store.log_event("pacing", self.pacing())
        self.arm_of: dict[str, str] = {}            # candidate id -> the arm that made it (until it is judged)
        self.suspects: list[str] = []               # accepted red-team candidates
        self.profiles: dict[str, str] = {}          # candidate id -> its Nsight Compute profile ("" until made)
        self.evaluated = 0
        self.jobs: dict[ray.ObjectRef, Job] = {}   # waiting on Ray
        self.to_build: list[Job] = []               # verified, waiting for a builder
        self.queue: list[Job] = []                  # built, waiting for an evaluator
        self.load = [0] * len(self.evaluators)      # judgements outstanding per evaluator
        self.created = self.finished = self.correct = 0
        self.proposing = 0                          # mutations in flight: candidates the budget already counts
        self.misses = {"knob": 0, "llm": 0}         # proposals of each kind in a row that gave no new candidate
        self.stage_seconds = {"mutate": 0.0, "verify": 0.0, "build": 0.0, "evaluate": 0.0, "compare": 0.0}
        self.builds = Builds(plan.evaluators, plan.builders)   # sizes the builds kept in flight (pacing)
        self.judge_phases: dict[str, float] = {}    # the evaluate stage, split (Evaluation.phases summed)
        self.busy_seconds = 0.0
        self.finishing = False                      # the loop is over: no comparison but the finish's own
        self.stopped: str | None = None
        self.start = time.perf_counter()
        self.freed = [self.start] * len(self.evaluators)   # when each evaluator last handed back a result
        self.unfinished: list[str] = []             # judgements cut off by the budget: how long, and where they were
        self.unfinished_busy = 0.0                  # ... and the evaluator seconds they had used
        self.deadline = self.start + plan.wall_time_s
        self.last_progress = 0.0
        self.best_evaluation: Evaluation | None = None
        # the best as reported: replaced only on paired evidence (a fixed stream measures throughput: fitness)
        self.champion = Champion(paired=stream is None, share=plan.compare_share)
        self.confirmed: Candidate | None = None   # the best, judged again with baselines interleaved
        self.not_confirmed: list[str] = []         # better candidates that failed that judgement, and why

    # ------------------------------------------------------------------ start
    def restore(self, resumed: bool) -> None:
        """Rebuilds the population from the store; re-queues unfinished candidates; seeds a new run."""
        if resumed and self.store.candidates():      # a run killed before its seeds were stored is seeded anew
            done = self.store.finished()
            self.population = Population.restore(self.plan.population, [(r.candidate, r.outcome) for r in done],
                                                 self.plan.seeds_only)
            self.finished = len(done)
            self.correct = sum(1 for r in done if r.correct)
            self.rng = random.Random(f"{self.plan.seed}/{self.finished}")
            self.learning.restore(self.store)
            self.verification.restore(done)
            self.spend.spent = self.store.total_cost()
            self.suspects = [r.candidate.id for r in done if red_team(r.candidate) and r.correct]
            self.profiles = {p["id"]: p.get("text") or "" for _, _, p in self.store.events("profile")}
            self.evaluated = sum(1 for r in done if r.status == "evaluated")
            self.busy_seconds = sum(r.timings.get("evaluate", 0.0) for r in done)
            if self.pacer is not None:                 # the judgements' seconds so far size the LLM calls
                for r in done[-32:]:
                    self.pacer.judged(r.timings.get("evaluate", 0.0))
            for r in self.store.unfinished():
                self.population.reserve(r.candidate.source)
                if r.arm:
                    self.arm_of[r.candidate.id] = r.arm
                self._verify(Job(Step.VERIFY, r.candidate))
            self.created = len(self.store.candidates())
            if self.recorded is not None:
                self.recorded.skip({r.candidate.id for r in self.store.candidates()})
            crowned = [p["id"] for _, _, p in self.store.events("champion")]
            best = [self.store.get(crowned[-1])] if crowned else self.store.best(1)
            if best and best[0].evaluation:
                self.best_evaluation = Evaluation.from_json(best[0].evaluation)
                self.champion.crown(Entry(best[0].candidate, self.best_evaluation))
            self.stage_seconds["compare"] = sum(p.get("seconds") or 0.0 for _, _, p in self.store.events("compare"))
            self.champion.spent(judging=self.busy_seconds, comparing=self.stage_seconds["compare"])
            return
        if self.stream is not None:
            return
        if self.recorded is not None:
            seeds = [replace(c, created=time.time()) for c in self.recorded.seeds()]
        else:                                        # search.seeds: the listed seeds, the best/ kernel, or both
            if not self.plan.seeds:
                raise TaskError(f"task {self.task.name} has no seed kernel for target={self.plan.target} abi={ABI}: "
                                f"list one under seeds: in its task.yaml, or promote a best kernel "
                                f"(`python -m kevolve.tasks best RUN_DIR`)")
            seeds = [Candidate.new(Path(path).read_text(), island=i % self.plan.population.islands,
                                   operator="seed", meta={"file": label})
                     for i, (label, path) in enumerate(self.plan.seeds)]
        for c in seeds:
            if self.population.reserve(c.source):
                self._add(c)
        translations = self.plan.translations if self.recorded is None else 0   # first kernels from torch:
        for i, source in enumerate(requests.founders(self.task, self.plan.target, translations)):  # its reference,
            arm = self.learning.policy.choose(self.rng, allowed=["translate"])          # or its torch-ABI seeds
            self._submit(Proposal(i % self.plan.population.islands, None, "translate", (), arm.model), source)

    # ------------------------------------------------------------------ the loop
    def loop(self) -> None:
        while True:
            self._check_budgets()
            while len(self.jobs) + len(self.to_build) + len(self.queue) < self._in_flight() and self._propose():
                pass
            self._start_builds()
            self._dispatch()
            if not self.jobs:                    # nothing in flight and nothing more to propose
                kinds = self._kinds()
                if kinds and not any(kinds.values()):
                    self.stop(f"no new candidates: {DUPLICATE_STREAK} proposals in a row were duplicates or had no "
                              "knobs to turn (the knob space reachable from the population is spent)"
                              + (", and as many LLM proposals gave no new kernel" if self.plan.llm_operators else ""))
                break
            ready, _ = ray.wait(list(self.jobs), num_returns=1, timeout=0.5)
            for ref in ready:
                self._advance(self.jobs.pop(ref), ref)
            self._progress()

    def _check_budgets(self) -> None:
        if time.perf_counter() > self.deadline:
            self.stop(f"wall time ({self.plan.wall_time_s:.0f} s) reached")
            self.cancel_in_flight()
        elif self.spend.reached():
            self.stop(f"dollar budget (${self.plan.dollars}) reached: ${self.spend.spent:.4f} spent")

    def stop(self, why: str) -> None:
        if not self.stopped:
            self.stopped = why
            self.store.log_event("stop", {"reason": why})

    def _propose(self) -> bool:
        """Starts one new candidate; False when the budget or the ideas ran out, or when the first verdicts
        must come back before a parent can be chosen."""
        if self.stopped or self.created + self.proposing >= self.plan.candidates:
            return False
        if self.stream is not None:
            return self._replay()
        if self.recorded is not None:
            return self._recorded_step()
        if not self.population.best() and self.finished < self.created:
            return False                         # wait for a first correct parent before mutating
        kinds = self._kinds()
        if kinds.get("llm") and self._llm_jobs() >= self.pacer.target:
            kinds["llm"] = False                 # as many LLM calls in flight as there should be: knob meanwhile,
        if not any(kinds.values()):              # so that no evaluator waits on the network
            return False
        only = None if all(kinds.values()) else (("knob",) if kinds.get("knob") else self.plan.llm_operators)
        proposal = self.population.propose(self.rng, self.learning.policy, only)
        if proposal is None:
            return False
        return self._submit(proposal)

    def _kinds(self) -> dict[str, bool]:
        """The kinds of operator this run weights (knob, llm), each True while it is not spent (DUPLICATE_STREAK
        proposals in a row without a new candidate; any new candidate, or a correct one, renews both)."""
        kinds = {"knob": self.plan.population.operators.get("knob", 0) > 0, "llm": bool(self.plan.llm_operators)}
        return {k: self.misses[k] < DUPLICATE_STREAK for k, weighted in kinds.items() if weighted}

    def _llm_jobs(self) -> int:
        return sum(1 for j in self.jobs.values() if j.step is Step.MUTATE and j.calls)

    def _in_flight(self) -> int:
        """Candidates between proposal and verdict at most: the plan's, or, when it follows the LLM calls, the
        plan's with the LLM calls' current target in place of the one it started with; and, unless
        `search.in_flight` is set, more where the builds the measured build and judgement times ask for
        (`pacing.Builds`) and two per evaluator (one judging, one queued) pass the plan's bound."""
        n, llm = self.plan.in_flight, 0
        if self.plan.in_flight_follows_llm and self.pacer is not None:
            n += self.pacer.target - self.plan.llm_calls
            llm = self.plan.llm_calls
        builds = self.builds.wanted() if self.plan.in_flight_follows_builds else None
        # the plan's bound past its LLM calls holds one judging and one queued per evaluator; builds beyond that
        return n + max(0, 2 * self.plan.evaluators + (builds or 0) - (self.plan.in_flight - llm))

    def _paced(self, moved: bool) -> None:
        """Records a new target for the LLM calls in flight, with what it was computed from."""
        if moved:
            self.store.log_event("pacing", self.pacing())

    def pacing(self) -> dict:
        """The LLM proposals' target in flight, its bounds, and the measurements it follows."""
        p = self.pacer
        return {"llm_calls": p.target, "least": p.least, "most": p.most, "capped": p.capped, **p.measured()}

    def _submit(self, proposal: Proposal, torch_source: str | None = None) -> bool:
        """Sends a proposal to the Mutator: knob mutation, or an LLM operator's Request filled from the store
        (`torch_source`: a translate founder's torch-extension kernel).
        An LLM proposal the dollar budget has no room for (its calls, and its children's verifier calls, at
        the estimate per call) stops the search instead."""
        seed, job = self.rng.getrandbits(63), Job(Step.MUTATE, proposal=proposal)
        if proposal.operator == "knob":
            if not self.spend.room(len(self.plan.verifiers.checks)):     # its child's verifier calls
                self.stop(f"dollar budget (${self.plan.dollars}) reached: ${self.spend.spent:.4f} spent, "
                          f"${self.spend.estimate() - self.spend.spent:.4f} estimated for the calls in flight")
                return False
            job.send = lambda: self.mutator.mutate.remote(proposal, seed, self.plan.knob_changes)
        else:
            job.expect = self.plan.meta_children if proposal.operator == "meta" else 1
            job.calls = job.per_send = 1 + (job.expect if proposal.operator == "meta" else 0)
            if not self.spend.room(job.calls + job.expect * len(self.plan.verifiers.checks)):
                self.stop(f"dollar budget (${self.plan.dollars}) reached: ${self.spend.spent:.4f} spent, "
                          f"${self.spend.estimate() - self.spend.spent:.4f} estimated for the calls in flight")
                return False
            request = requests.request(proposal, self.store, self.learning.board, self.plan.strategies_shown,
                                       self.plan.meta_children, self.profiles, torch_source)
            job.send = lambda: self.mutator.write.remote(request, seed, proposal.model)
            self.spend.start(job.calls)
            self._profile(proposal)
        self.jobs[job.send()] = job
        self.proposing += job.expect
        return True

    def _recorded_step(self) -> bool:
        """Replay: the recorded run's next candidate — a knob child as it was, an LLM child from its reply."""
        r = self.recorded.next()
        if r is None:
            return False
        c = replace(r.candidate, created=time.time())
        made = self.recorded.request(c)
        if made is None:
            if self.population.reserve(c.source):
                self._add(c, arm=r.arm)
            return True
        request, key = made
        job = Job(Step.MUTATE, proposal=request.proposal, recorded=c)
        job.send = lambda: self.mutator.recorded.remote(request, key)
        self.jobs[job.send()] = job
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
         Step.EVALUATE: self._judged, Step.COMPARE: self._compared, Step.PROFILE: self._profiled}[job.step](job, result)

    def _mutated(self, job: Job, result: Mutation | list[Mutation]) -> None:
        self.proposing -= job.expect
        mutations = result if isinstance(result, list) else [result]
        llm = bool(job.calls)
        if llm:
            made = len(mutations) + any("strategy_seed" in m.meta for m in mutations)
            self.spend.done(job.calls, sum(m.cost_usd for m in mutations), made)
        new = sum(bool(self._child(job, m)) for m in mutations)
        if llm and self.pacer is not None:
            self._paced(self.pacer.returned(time.perf_counter() - job.started, new))

    def _child(self, job: Job, m: Mutation) -> bool:
        """One child of a proposal: a new candidate (True), or a recorded failure (no kernel, or a duplicate)."""
        self.stage_seconds["mutate"] += m.seconds
        p = job.proposal
        llm = p.operator != "knob"
        if m.source is None or not self.population.reserve(m.source):
            self.misses["llm" if llm else "knob"] += 1   # no knobs to turn, a bad parent, no kernel, a duplicate
            if m.source is None or llm:
                payload = {"parent": p.parent.id if p.parent else None, "operator": p.operator, "model": m.model,
                           "reason": m.failure or "a duplicate of a candidate already made", "cost_usd": m.cost_usd,
                           "arm": p.arm, "reward": 0.0, **{k: m.meta[k] for k in ("seed", "call") if k in m.meta}}
                self.store.log_event("mutation_failed", payload)
                self.learning.rewarded(p.arm, 0.0, strategy_of(m.meta))
            return False
        self.misses = dict.fromkeys(self.misses, 0)
        if job.recorded is not None:             # replay: the recorded child, if the reply gives it again
            if m.source != job.recorded.source:
                self.population.release(m.source)
                self.store.log_event("mutation_failed", {"id": job.recorded.id, "reason": "replay: the recorded "
                                                         "reply no longer gives the recorded kernel"})
                return False
            self._add(job.recorded, cost_usd=m.cost_usd, timings={"mutate": m.seconds})
            return True
        meta = {**m.meta, **({"inspirations": [i.id for i in p.inspirations]} if p.inspirations else {})}
        parent = p.parent
        c = Candidate.new(m.source, parents=(parent.id,) if parent else (), island=p.island,
                          generation=parent.generation + 1 if parent else 0, operator=p.operator, model=m.model,
                          meta=json.loads(json.dumps(meta, default=str)))
        self._add(c, cost_usd=m.cost_usd, timings={"mutate": m.seconds}, arm=p.arm)
        return True

    def _add(self, c: Candidate, **record) -> None:
        self.store.add_candidate(c, **record)
        if record.get("arm"):
            self.arm_of[c.id] = record["arm"]
        self.created += 1
        self._verify(Job(Step.VERIFY, c))

    def _verify(self, job: Job) -> None:
        job.step, job.started = Step.VERIFY, time.perf_counter()
        seeds = self.verification.seeds(job.candidate.source) if self.verification.on else None
        job.calls = len(self.verification.checks)
        self.spend.start(job.calls)
        self.jobs[self.verifier.check.remote(job.candidate.source, self.plan.target, ABI, seeds)] = job

    def _verified(self, job: Job, screened: Screened) -> None:
        verdict, llm_verdicts = screened.verdict, screened.llm
        self.stage_seconds["verify"] += verdict.seconds
        cost = sum(v.cost_usd for v in llm_verdicts)
        self.spend.done(job.calls, cost, len(llm_verdicts))
        job.calls = 0
        c = job.candidate
        if not verdict.ok:
            self.store.set_stage(c.id, Status.REJECTED, verdict=verdict, feedback=f"static rule: {verdict.reason}",
                                 timings={"verify": verdict.seconds})
            return self._finish(c, Outcome(0.0, False, False, f"static rule: {verdict.reason}"))
        if llm_verdicts:
            decision = self.verification.decide(llm_verdicts)
            job.screening = Verification.record(llm_verdicts, decision)
            self.store.set_screening(c.id, job.screening, cost_usd=cost)
            if not decision.build:                 # filter mode, by verifiers that earned it, not audited
                why = f"rejected by LLM verifiers ({', '.join(decision.rejected_by)}): {decision.reason}"
                self.store.set_stage(c.id, Status.REJECTED, verdict=verdict, feedback=why,
                                     timings={"verify": verdict.seconds})
                return self._finish(c, Outcome(0.0, False, False, why))
            job.priority = decision.priority
        self.store.set_stage(c.id, Status.VERIFIED, verdict=verdict, timings={"verify": verdict.seconds})
        job.step = Step.QUEUED
        bisect.insort(self.to_build, job, key=lambda j: j.priority)     # after its equals: FIFO among them

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
        self.builds.built(b.seconds)
        c = job.candidate
        if not b.ok:
            job.lib = None
            self.store.set_stage(c.id, Status.BUILD_FAILED, build=b, timings={"build": b.seconds})
            self.verification.judged(job.screening, False, False, b.error)
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
        self.freed[job.evaluator] = time.perf_counter()
        self.busy_seconds += ev.eval_seconds
        self.champion.spent(judging=ev.eval_seconds)
        self.stage_seconds["evaluate"] += ev.eval_seconds
        for phase, t in ev.phases.items():
            self.judge_phases[phase] = self.judge_phases.get(phase, 0.0) + t
        c = job.candidate
        if not ev.correct and harness_failure(ev) and job.retries < ACTOR_RETRIES:
            job.retries += 1                 # the harness failed, not the kernel: judged again later, once the
            self.store.log_event("retry", {"id": c.id, "step": job.step.value, "attempt": job.retries,
                                           "error": (ev.failure or "")[:300]})   # GPU's other judgements moved on
            job.step = Step.QUEUED
            self.queue.append(job)
            return
        self.evaluated += 1
        self.builds.judged(ev.eval_seconds)
        self.store.record_evaluation(c.id, ev, ev.eval_seconds)
        if self.pacer is not None:
            self._paced(self.pacer.judged(ev.eval_seconds))
        self.verification.judged(job.screening, ev.compiled, ev.correct, ev.failure)
        self._finish(c, Outcome(ev.fitness, ev.correct, ev.compiled, ev.failure or ""))
        if ev.correct and red_team(c):       # never ranked: saved for a regression test, reported
            folder = suspects.save(self.run_dir, c, ev, SUFFIX[self.plan.target])
            self.suspects.append(c.id)
            self.store.log_event("suspected_judge_bug", {"id": c.id, "speedup": ev.speedup, "dir": str(folder)})
        elif ev.correct:
            self.correct += 1
            if self.champion.offer(Entry(c, ev, job.build, job.lib)):
                self._crown(c, ev)
            self._challenge()

    def _crown(self, c: Candidate, ev: Evaluation) -> None:
        self.best_evaluation = ev
        self._write_best(c)
        self.store.log_event("champion", {"id": c.id, "fitness": ev.fitness})
        self._progress(force=True)

    def _challenge(self, finishing: bool = False):
        """Starts the next paired comparison of a challenger with the champion (`search.champion`); returns its
        reference, or None. `finishing`: the loop is over, the fittest challenger left is compared regardless of
        the comparisons' share of the time."""
        if self.finishing and not finishing:
            return None
        entry = self.champion.next_challenge(finishing)
        if entry is None:
            return None
        best = self.champion.current
        if best.lib is None:                       # a champion restored on resume: rebuilt (a cache hit)
            best.build, best.lib = self._build(best.candidate.source)
        i = min(range(len(self.evaluators)), key=lambda k: self.load[k])
        self.load[i] += 1
        ref = self.evaluators[i].compare.remote(entry.build, entry.lib, best.build, best.lib)
        self.jobs[ref] = Job(Step.COMPARE, candidate=entry.candidate, evaluator=i)
        return ref

    def _compared(self, job: Job, comparison: Comparison | None) -> None:
        self.load[job.evaluator] -= 1
        self.freed[job.evaluator] = time.perf_counter()
        challenger, champion = self.champion.pending, self.champion.current
        self.champion.spent(comparing=comparison.seconds if comparison is not None else 0.0)
        if not self.finishing:                   # the finish's own comparison is not the search's time
            self.stage_seconds["compare"] += comparison.seconds if comparison is not None else 0.0
        outcome = self.champion.settle(comparison)
        self.store.log_event("compare", {
            "challenger": challenger.candidate.id, "champion": champion.candidate.id, "outcome": outcome,
            "ratio": comparison and comparison.ratio, "ci": comparison and comparison.ci,
            "failure": comparison.failure if comparison else "the comparison could not be made",
            "seconds": comparison and round(comparison.seconds, 1)})
        if outcome == "replaced":
            self._crown(challenger.candidate, challenger.evaluation)
        self._challenge()

    def _profile(self, proposal: Proposal) -> None:
        """Profiles the parent of an optimize or meta proposal once (`search.profile`: cuda, ncu found), on the
        least-loaded evaluator; this proposal goes without, later ones on that parent show it."""
        parent = proposal.parent
        if self.plan.ncu is None or proposal.operator not in ("optimize", "meta") or parent is None \
                or parent.id in self.profiles:
            return
        self.profiles[parent.id] = ""
        build_ref, lib = self._build(parent.source)          # a hit in the build cache
        i = min(range(len(self.evaluators)), key=lambda k: self.load[k])
        self.load[i] += 1
        ref = self.evaluators[i].profile.remote(build_ref, lib, self.plan.ncu)
        self.jobs[ref] = Job(Step.PROFILE, candidate=parent, evaluator=i)

    def _profiled(self, job: Job, found) -> None:
        self.load[job.evaluator] -= 1
        self.profiles[job.candidate.id] = found.text if found is not None else ""
        self.store.log_event("profile", {"id": job.candidate.id, "text": found.text if found else "",
                                         "failure": found.failure if found else "the profile could not be made"})

    def _finish(self, c: Candidate, outcome: Outcome):
        self.finished += 1
        parent = self.population.get(c.parents[0]).fitness if c.parents and c.parents[0] in self.population else None
        member = self.population.add(c, outcome)
        arm = self.arm_of.pop(c.id, None)
        if arm is not None:                      # the child's reward, to its arm and (meta) its strategy
            r = reward(outcome.fitness, parent)
            self.store.set_reward(c.id, r)
            self.learning.rewarded(arm, r, strategy_of(c.meta_dict()))
        if outcome.correct:
            self.misses = dict.fromkeys(self.misses, 0)     # a new parent: its neighbours may not have been tried
        self.tracker.candidate(row(self.store.get(c.id)))
        return member

    def _on_error(self, job: Job, error: Exception) -> None:
        if job.step is Step.COMPARE:             # no comparison: the champion stays
            return self._compared(job, None)
        if job.step is Step.PROFILE:             # no profile: prompts go without
            return self._profiled(job, None)
        self._lost(job, error)

    def _lost(self, job: Job, error: Exception) -> None:
        """An actor or task failed (not the candidate: the judge turns those into verdicts). A call lost with
        its actor's process (Ray restarts the actor) is sent again, `ACTOR_RETRIES` times at most; then the
        candidate gets a `failed` verdict naming the error. A lost mutation is a lost proposal."""
        if job.step is Step.EVALUATE:
            self.load[job.evaluator] -= 1
        self.spend.done(job.calls, 0.0, 0)       # its LLM calls are sent again, or not at all
        job.calls = 0
        lost = isinstance(error, (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError))
        if lost and job.retries < ACTOR_RETRIES:
            job.retries += 1
            self.store.log_event("retry", {"id": job.candidate.id if job.candidate else None, "step": job.step.value,
                                           "attempt": job.retries, "error": _first_line(error)})
            if job.step is Step.MUTATE:
                job.calls = job.per_send
                self.spend.start(job.calls)
                self.jobs[job.send()] = job
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
            self.proposing -= job.expect
            self.misses["knob" if job.proposal.operator == "knob" else "llm"] += 1
            p = job.proposal
            self.store.log_event("mutation_failed", {"parent": p.parent.id if p.parent else None, "arm": p.arm,
                                                     "reward": 0.0, "operator": p.operator,
                                                     "reason": _first_line(error)})
            self.learning.rewarded(p.arm, 0.0)
            return
        reason = f"{job.step.value} failed: {_first_line(error)}" + (f" (after {job.retries} retries)" if lost else "")
        self.store.set_stage(job.candidate.id, Status.FAILED, feedback=reason)
        self._finish(job.candidate, Outcome(0.0, False, job.step is Step.EVALUATE, reason))

    def _cut_off(self) -> None:
        """Before in-flight work is cancelled: the evaluator seconds its running judgements or comparisons had used
        (so the summary's busy share agrees with the progress line), and where each was (`Evaluator.status`), so
        a budget that ends before a verdict says which phase is slow."""
        now = time.perf_counter()
        for i in range(len(self.evaluators)):
            running = [j for j in self.jobs.values() if j.evaluator == i and j.step in (Step.EVALUATE, Step.COMPARE)]
            if not running:
                continue
            began = max(min(j.started for j in running), self.freed[i])
            self.unfinished_busy += now - began
            try:
                where = ray.get(self.evaluators[i].status.remote(), timeout=10)
            except Exception:                       # noqa: BLE001 — a dead or hung actor: said without its phase
                where = None
            kind = "comparison" if any(j.step is Step.COMPARE for j in running) else "judgement"
            self.unfinished.append(describe_unfinished(i, kind, now - began, where))
            self.store.log_event("cut_off", {"evaluator": i, "seconds": round(now - began, 1), "status": where})

    def cancel_in_flight(self) -> None:
        """Cancels everything in flight; those candidates stay unfinished in the store (resume re-queues them)."""
        self._cut_off()
        for ref, job in list(self.jobs.items()):
            try:
                ray.cancel(ref, force=job.step is Step.BUILD)
            except Exception:               # an actor task may refuse a forced cancel; it ends with its actor
                pass
        self.jobs.clear()
        self.to_build.clear()
        self.queue.clear()
        self.proposing = 0
        self.spend.in_flight = 0
        self.champion.cancel()
        self.load = [0] * len(self.evaluators)

    def release_actors(self) -> None:
        """Frees this run's actors (a multirun starts the next job in the same Ray)."""
        for actor in self.evaluators + [self.mutator, self.verifier]:
            ray.kill(actor)


def describe_unfinished(evaluator: int, kind: str, seconds: float, status: dict | None) -> str:
    """One line for a judgement (or comparison) cut off by the budget: how long it ran, the phase it was in, what
    it had done."""
    text = f"evaluator {evaluator}: a {kind} cut off after {seconds:.0f} s"
    if not status:
        return text
    if status.get("in"):
        phase, what, for_s = status["in"][-1]
        text += f", in phase '{phase}'" + (f" ({what})" if what else "") + f" for {for_s:.0f} s"
    done = sorted(((s, p) for p, s in (status.get("done") or {}).items() if s >= 0.5), reverse=True)[:5]
    if done:
        text += "; so far " + ", ".join(f"{p} {s:.0f} s" for s, p in done)
    return text


def harness_failure(ev: Evaluation) -> bool:
    """A rejection that says nothing of the kernel: the harness's own failure (`harness: …`) or the device out of
    memory (on a GPU that other evaluators share, their buffers and cached references count; `judge` already tried
    once more in a fresh worker). The search judges such a candidate again, `ACTOR_RETRIES` times at most, so a
    kernel that does exhaust the memory itself still ends with its verdict."""
    failure = ev.failure or ""
    return "harness: " in failure or "OutOfMemoryError" in failure


def _first_line(error: Exception) -> str:
    return f"{type(error).__name__}: {str(error).splitlines()[0][:300] if str(error) else ''}"
