"""Where new candidates come from, behind one interface (`Source.propose() -> bool`: one more started, or False
when none can be now): the population (`FromPopulation`: a parent and an operator chosen by the choice policy,
written by the Mutator), a recorded run (`Replay`, `llm.replay=RUN_DIR`), or a fixed stream of sources
(`Stream`, what `experiments/bench_throughput.py` measures: no seeds, no mutation).

`Mutations` sends a proposal to the Mutator and turns what comes back into candidates for the pipeline: an LLM
proposal as a complete `Request` (`population.Population.request`: what its prompt quotes travels with it), a
knob proposal as it is. It owns the dollar budget's view of the calls it sends (`spend`), the LLM pacing's
measurements of them, and the duplicate streaks that tell when a kind of operator is spent.

Guarantees: a proposal the dollar budget has no room for (its calls and its children's verifier calls, at the
estimate per call) stops the search instead of being sent; a child that is a duplicate (after normalisation) is
never admitted; a proposal that yields no child is recorded (`mutation_failed`) with its reason and rewards its arm
0; a lost mutation call is sent again `outcome.ACTOR_RETRIES` times at most, then counts as a failed proposal.
"""
from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable, Iterator, Protocol

import ray

from kevolve.messages import Candidate, Mutation, Proposal
from kevolve.operators.choice import reward
from kevolve.operators.compose import Request
from kevolve.operators.registry import spec, where
from kevolve.search import outcome
from kevolve.search.contest import Contest
from kevolve.search.jobs import Mutating, again
from kevolve.search.learning import Learning, strategy_of
from kevolve.search.outcome import ACTOR_RETRIES
from kevolve.search.pacing import Pacer
from kevolve.search.pipeline import Pipeline
from kevolve.search.population import Population
from kevolve.search.recorded import Recorded
from kevolve.search.requests import founders
from kevolve.search.spend import Spend
from kevolve.record import events

DUPLICATE_STREAK = 200       # proposals of a kind (knob, LLM) in a row that gave nothing new: that kind is spent


class Source(Protocol):
    def propose(self) -> bool:
        """Starts one new candidate (or a mutation that will give some); False when none can be started now."""


class Mutations:
    def __init__(self, plan, store, mutator, population: Population, pipeline: Pipeline, contest: Contest,
                 learning: Learning, spend: Spend, pacer: Pacer | None, rng, stop: Callable[[str], None]):
        self.plan, self.store, self.mutator, self.population = plan, store, mutator, population
        self.pipeline, self.contest, self.learning, self.spend, self.pacer = pipeline, contest, learning, spend, pacer
        self.rng, self.stop = rng, stop
        self.misses = {"knob": 0, "llm": 0}         # proposals of each kind in a row that gave no new candidate
        self.arm_of: dict[str, str] = {}            # candidate id -> the arm that made it (until it is judged)

    def admit(self, c: Candidate, arm: str | None = None, **record) -> None:
        """A new candidate to the pipeline; `arm`: the choice policy's arm that made it (rewarded at its verdict)."""
        if arm:
            self.arm_of[c.id] = arm
        self.pipeline.admit(c, arm=arm, **record)

    def concluded(self, c: Candidate, outcome, evaluation=None) -> None:
        """Every verdict, once: to the population (with its judgement), the child's reward to its arm (and its
        strategy); a correct one renews both kinds of operator (a new parent: its neighbours may not have been
        tried)."""
        parent = self.population.get(c.parents[0]).fitness if c.parents and c.parents[0] in self.population else None
        self.population.add(c, outcome, evaluation)
        arm = self.arm_of.pop(c.id, None)
        if arm is not None:
            r = reward(outcome.fitness, parent)
            self.store.set_reward(c.id, r)
            self.learning.rewarded(arm, r, strategy_of(c.meta_dict()))
        if outcome.correct:
            self.renew()

    def kinds(self) -> dict[str, bool]:
        """The kinds of operator this run weights (knob, llm), each True while it is not spent (DUPLICATE_STREAK
        proposals in a row without a new candidate; any new candidate, or a correct one, renews both)."""
        ops = self.plan.population.operators
        kinds = {"knob": any(ops.get(o, 0) > 0 for o in where(llm=False)), "llm": bool(self.plan.llm_operators)}
        return {k: self.misses[k] < DUPLICATE_STREAK for k, weighted in kinds.items() if weighted}

    def spent(self) -> str | None:
        """Why no kind of operator this run weights can give a new candidate any more, or None."""
        kinds = self.kinds()
        if not kinds or any(kinds.values()):
            return None
        return (f"no new candidates: {DUPLICATE_STREAK} proposals in a row were duplicates or had no knobs to turn "
                "(the knob space reachable from the population is spent)"
                + (", and as many LLM proposals gave no new kernel" if self.plan.llm_operators else ""))

    def routes(self) -> dict:
        """The records this part owns -> (the handler of their result, of their error)."""
        return {Mutating: (self.mutated, self.lost)}

    def renew(self) -> None:
        """A new parent: its neighbours may not have been tried."""
        self.misses = dict.fromkeys(self.misses, 0)

    def _no_room(self) -> bool:
        self.stop(f"dollar budget (${self.plan.dollars}) reached: ${self.spend.spent:.4f} spent, "
                  f"${self.spend.estimate() - self.spend.spent:.4f} estimated for the calls in flight")
        return False

    def submit(self, proposal: Proposal, torch_source: str | None = None) -> bool:
        """Sends a proposal to the Mutator as a complete Request: knob mutation's, or an LLM operator's with what
        its prompt quotes (`Population.request`; `torch_source`: a translate founder's torch-extension kernel)."""
        seed, verifier_calls, s = self.rng.getrandbits(63), len(self.plan.verifiers.checks), spec(proposal.operator)
        expect = self.plan.meta_children if s.many else 1
        calls = 1 + (expect if s.many else 0) if s.llm else 0     # its LLM calls; its children's verifier calls:
        if not self.spend.room(calls + expect * verifier_calls):
            return self._no_room()
        request = (self.population.request(proposal, self.learning.board, self.plan.strategies_shown,
                                           self.plan.meta_children, self.contest.profiles, torch_source)
                   if s.llm else Request(proposal.operator, proposal))
        method = self.mutator.call if s.llm else self.mutator.apply     # the LLM's calls on threads of their own
        job = Mutating(proposal, lambda: method.remote(request, seed, proposal.model), expect, calls)
        if s.llm:
            self.spend.start(calls)
            self.pipeline.health.probing()
            self.contest.profile(proposal)
        self.pipeline.send(job.send(), job)
        self.pipeline.tally.proposing += job.expect
        return True

    def send_recorded(self, request, key: str, recorded: Candidate) -> None:
        """Replay: the recorded reply under `key` applied to `request` must give `recorded` again."""
        job = Mutating(request.proposal, lambda: self.mutator.recorded.remote(request, key), recorded=recorded)
        self.pipeline.send(job.send(), job)
        self.pipeline.tally.proposing += 1

    def mutated(self, job: Mutating, result: Mutation | list[Mutation]) -> None:
        self.pipeline.tally.proposing -= job.expect
        mutations = result if isinstance(result, list) else [result]
        if job.calls:
            made = len(mutations) + any("strategy_seed" in m.meta for m in mutations)
            self.spend.done(job.calls, sum(m.cost_usd for m in mutations), made)
            self.counted(mutations)
        new = sum(bool(self._child(job, m)) for m in mutations)
        if job.calls and self.pacer is not None and self.pacer.returned(time.perf_counter() - job.started, new):
            self.store.log_event(events.Pacing(self.pacer.state()))

    def counted(self, mutations: list[Mutation]) -> None:
        """Each LLM call of a proposal to the LLM's health: failed (`meta.llm_error`) or came back (any reply);
        a meta proposal's strategy call came back when it gave children."""
        health = self.pipeline.health
        if any("strategy_seed" in m.meta for m in mutations):
            health.called(mutations[0].model, None)
        for m in mutations:
            error = m.meta.get("llm_error")
            health.called(m.model, error.get("cause") or m.failure if error else None)

    def _child(self, job: Mutating, m: Mutation) -> bool:
        """One child of a proposal: a new candidate (True), or a recorded failure (no kernel, or a duplicate)."""
        self.pipeline.tally.stage_seconds["mutate"] += m.seconds
        p = job.proposal
        llm = spec(p.operator).llm
        if m.source is None or not self.population.reserve(m.source):
            if "llm_error" not in m.meta:                # a failed call says nothing of what the LLM would write
                self.misses["llm" if llm else "knob"] += 1   # no knobs to turn, a bad parent, no kernel, a duplicate
            if m.source is None or llm:
                self.store.log_event(events.MutationFailed(
                    parent=p.parent.id if p.parent else None, operator=p.operator, model=m.model,
                    reason=m.failure or "a duplicate of a candidate already made", cost_usd=m.cost_usd,
                    arm=p.arm, reward=0.0, seed=m.meta.get("seed"), call=m.meta.get("call")))
                self.learning.rewarded(p.arm, 0.0, strategy_of(m.meta))
            return False
        self.renew()
        if job.recorded is not None:             # replay: the recorded child, if the reply gives it again
            if m.source != job.recorded.source:
                self.population.release(m.source)
                self.store.log_event(events.MutationFailed(id=job.recorded.id, reason="replay: the recorded "
                                                           "reply no longer gives the recorded kernel"))
                return False
            self.admit(job.recorded, cost_usd=m.cost_usd, timings={"mutate": m.seconds})
            return True
        meta = {**m.meta, **({"inspirations": [i.id for i in p.inspirations]} if p.inspirations else {})}
        parent = p.parent
        c = Candidate.new(m.source, parents=(parent.id,) if parent else (), island=p.island,
                          generation=parent.generation + 1 if parent else 0, operator=p.operator, model=m.model,
                          meta=json.loads(json.dumps(meta, default=str)))
        self.admit(c, p.arm, cost_usd=m.cost_usd, timings={"mutate": m.seconds})
        return True

    def lost(self, job: Mutating, error: Exception) -> None:
        """The Mutator failed (not the operator: those are `Mutation.failure`). A call lost with its process is
        sent again, `ACTOR_RETRIES` times at most; then that proposal is lost and the search goes on."""
        self.spend.done(job.calls, 0.0, 0)       # its LLM calls are sent again, or not at all
        lost = isinstance(error, (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError))
        if lost and job.retries < ACTOR_RETRIES:
            job = again(job)
            self.store.log_event(events.Retry(id=None, step=job.step.value, attempt=job.retries,
                                              error=outcome.first_line(error)))
            self.spend.start(job.calls)
            self.pipeline.send(job.send(), job)
            return
        self.pipeline.tally.proposing -= job.expect
        p = job.proposal
        self.misses["llm" if spec(p.operator).llm else "knob"] += 1
        self.store.log_event(events.MutationFailed(parent=p.parent.id if p.parent else None, arm=p.arm,
                                                   reward=0.0, operator=p.operator,
                                                   reason=outcome.first_line(error)))
        self.learning.rewarded(p.arm, 0.0)


class FromPopulation:
    """The population's proposals: a parent (and inspirations) and an operator, from the choice policy."""

    def __init__(self, mutations: Mutations, pipeline: Pipeline, pacer: Pacer | None):
        self.mutations, self.pipeline, self.pacer = mutations, pipeline, pacer

    def propose(self) -> bool:
        m, tally = self.mutations, self.pipeline.tally
        if not m.population.best() and tally.finished < tally.created:
            return False                         # wait for a first correct parent before mutating
        kinds, health = m.kinds(), self.pipeline.health
        if health.paused and "knob" not in kinds:    # LLM-only, and the LLM is down: nothing can write candidates
            health.ended = True
            m.stop(health.stop_reason())
            return False
        if kinds.get("llm") and (self.pipeline.llm_proposals() >= self.pacer.target or not health.allows()):
            kinds["llm"] = False                 # as many LLM calls in flight as there should be, or the LLM paused:
        if not any(kinds.values()):              # knob meanwhile, so that no evaluator waits on the network
            return False
        only = None if all(kinds.values()) else (where(llm=False) if kinds.get("knob") else m.plan.llm_operators)
        proposal = m.population.propose(m.rng, m.learning.policy, only)
        return proposal is not None and m.submit(proposal)


class Replay:
    """A recorded run's steps (`recorded`): a knob child as it was, an LLM child from its recorded reply."""

    def __init__(self, recorded: Recorded, mutations: Mutations, pipeline: Pipeline):
        self.recorded, self.mutations, self.pipeline = recorded, mutations, pipeline

    def propose(self) -> bool:
        r = self.recorded.next()
        if r is None:
            return False
        c = replace(r.candidate, created=time.time())
        made = self.recorded.request(c)
        if made is None:
            if self.mutations.population.reserve(c.source):
                self.mutations.admit(c, r.arm)
            return True
        self.mutations.send_recorded(*made, recorded=c)
        return True


class Stream:
    """A fixed sequence of sources, judged as they come (no seeds, no mutation)."""

    def __init__(self, stream: Iterator[str], population: Population, pipeline: Pipeline, islands: int):
        self.stream, self.population, self.pipeline, self.islands = stream, population, pipeline, islands

    def propose(self) -> bool:
        source = next(self.stream, None)
        if source is None:
            return False
        self.population.reserve(source)
        self.pipeline.admit(Candidate.new(source, operator="replay", island=self.pipeline.tally.created % self.islands))
        return True


def seeds(plan, task, recorded: Recorded | None) -> list[Candidate]:
    """A new run's first candidates: the recorded run's seeds (replay), else `search.seeds` (the listed seeds, the
    best/ kernel, or both); raises TaskError when there are none."""
    if recorded is not None:
        return [replace(c, created=time.time()) for c in recorded.seeds()]
    if not plan.seeds:
        from kevolve.task.spec import TaskError
        raise TaskError(f"task {task.name} has no seed kernel for target={plan.target} abi=c: list one under seeds: "
                        f"in its task.yaml, or promote a best kernel (`python -m kevolve.tasks best RUN_DIR`)")
    return [Candidate.new(Path(path).read_text(), island=i % plan.population.islands, operator="seed",
                          meta={"file": label}) for i, (label, path) in enumerate(plan.seeds)]


def found(mutations: Mutations, task, n: int) -> None:
    """The first kernels from torch: `n` translate proposals, from the task's reference or its torch-ABI seeds."""
    islands = mutations.plan.population.islands
    for i, source in enumerate(founders(task, mutations.plan.target, n)):
        arm = mutations.learning.policy.choose(mutations.rng, allowed=["translate"])
        mutations.submit(Proposal(i % islands, None, "translate", (), arm.model), source)
