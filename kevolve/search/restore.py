"""A resumed run takes up where the store says it stopped (`resume=RUN_DIR`).

Guarantees: the population is exactly `add` of every finished candidate in order, with its judgement
(`Population.restore`); the counts, the evaluator seconds, the dollars spent, the choice policy's and the
verifiers' learning, the profiles made, the suspected judge bugs and the champion (the last `champion` event, else
the fittest) are the store's; every unfinished candidate is verified again from the start (its source reserved,
its arm kept). The random choices continue from a new seed stream (`{seed}/{finished}`). What the earlier parts
did is marked in the tally (`earlier_finished`, `earlier_busy`), so that this part's rates and busy share are its
own.
"""
from __future__ import annotations

import random

from kevolve.judge.results import Evaluation
from kevolve.search.champion import Entry
from kevolve.search.contest import Contest
from kevolve.search.jobs import Tally
from kevolve.search.learning import Learning
from kevolve.search.pipeline import Pipeline
from kevolve.search.population import Population, red_team
from kevolve.search.recorded import Recorded
from kevolve.search.sources import Mutations


def population(plan, store=None) -> tuple[Population, random.Random]:
    """The population and the rng a run starts from: a new run's (`store` None), or a resumed run's."""
    if store is None:
        return Population(plan.population, plan.seeds_only, plan.buckets), random.Random(plan.seed)
    done = store.finished()
    records = [(r.candidate, r.outcome, Evaluation.from_json(r.evaluation) if r.evaluation else None) for r in done]
    return (Population.restore(plan.population, records, plan.seeds_only, plan.buckets),
            random.Random(f"{plan.seed}/{len(done)}"))


def resume(store, tally: Tally, learning: Learning, verification, spend, pacer, contest: Contest,
           mutations: Mutations, pipeline: Pipeline, recorded: Recorded | None) -> None:
    """Takes up a resumed run's state from its store into the parts given, and re-queues its unfinished
    candidates (through the `pipeline`, their arms to `mutations`)."""
    done = store.finished()
    tally.finished, tally.correct = len(done), sum(1 for r in done if r.correct)
    tally.evaluated = sum(1 for r in done if r.status == "evaluated")
    tally.busy_seconds = sum(r.timings.get("evaluate", 0.0) for r in done)
    learning.restore(store)
    verification.restore(done)
    spend.spent = store.total_cost()
    contest.profiles = {p["id"]: p.get("text") or "" for _, _, p in store.events("profile")}
    contest.suspects = [r.candidate.id for r in done if red_team(r.candidate) and r.correct]
    if pacer is not None:                    # the judgements' seconds so far size the LLM calls
        for r in done[-32:]:
            pacer.judged(r.timings.get("evaluate", 0.0))
    for r in store.unfinished():
        mutations.population.reserve(r.candidate.source)
        if r.arm:
            mutations.arm_of[r.candidate.id] = r.arm
        pipeline.verify(r.candidate)
    tally.created = len(store.candidates())
    if recorded is not None:
        recorded.skip({r.candidate.id for r in store.candidates()})
    crowned = [p["id"] for _, _, p in store.events("champion")]
    best = [store.get(crowned[-1])] if crowned else store.best(1)
    if best and best[0].evaluation:
        contest.champion.crown(Entry(best[0].candidate, Evaluation.from_json(best[0].evaluation)))
    contest.restore_buckets(store)
    tally.stage_seconds["compare"] = sum(p.get("seconds") or 0.0 for _, _, p in store.events("compare"))
    contest.champion.spent(judging=tally.busy_seconds, comparing=tally.stage_seconds["compare"])
    tally.earlier_finished = tally.finished        # this part's rates and busy share count from here
    tally.earlier_busy = tally.busy_seconds + tally.stage_seconds["compare"]
