"""A resumed run takes up where the store says it stopped (`resume=RUN_DIR`).

Guarantees: the population is exactly `add` of every finished candidate in order, with its judgement
(`Population.restore`); the counts, the evaluator seconds, the dollars spent, the choice policy's and the
verifiers' learning, the profiles made and the champion (the last `champion` event, else the fittest) are the
store's; every unfinished candidate is verified again from the start (its source reserved, its arm kept). The
random choices continue from a new seed stream (`{seed}/{finished}`).
"""
from __future__ import annotations

import random

from kevolve.judge.results import Evaluation
from kevolve.search.champion import Entry
from kevolve.search.population import Population, red_team


def population(plan, store=None) -> tuple[Population, random.Random]:
    """The population and the rng a run starts from: a new run's (`store` None), or a resumed run's."""
    if store is None:
        return Population(plan.population, plan.seeds_only), random.Random(plan.seed)
    done = store.finished()
    records = [(r.candidate, r.outcome, Evaluation.from_json(r.evaluation) if r.evaluation else None) for r in done]
    return (Population.restore(plan.population, records, plan.seeds_only),
            random.Random(f"{plan.seed}/{len(done)}"))


def resume(d) -> None:
    """Takes up a resumed run's state from its store into the driver `d`'s parts (tally, learning, verification,
    spend, pacer, contest), re-queues its unfinished candidates."""
    store, t = d.store, d.tally
    done = store.finished()
    t.finished, t.correct = len(done), sum(1 for r in done if r.correct)
    t.evaluated = sum(1 for r in done if r.status == "evaluated")
    t.busy_seconds = sum(r.timings.get("evaluate", 0.0) for r in done)
    d.learning.restore(store)
    d.verification.restore(done)
    d.spend.spent = store.total_cost()
    d.contest.profiles = {p["id"]: p.get("text") or "" for _, _, p in store.events("profile")}
    if d.pacer is not None:                 # the judgements' seconds so far size the LLM calls
        for r in done[-32:]:
            d.pacer.judged(r.timings.get("evaluate", 0.0))
    for r in store.unfinished():
        d.population.reserve(r.candidate.source)
        if r.arm:
            d.mutations.arm_of[r.candidate.id] = r.arm
        d.pipeline.verify(r.candidate)
    t.created = len(store.candidates())
    if d.recorded is not None:
        d.recorded.skip({r.candidate.id for r in store.candidates()})
    crowned = [p["id"] for _, _, p in store.events("champion")]
    best = [store.get(crowned[-1])] if crowned else store.best(1)
    champion = d.contest.champion
    if best and best[0].evaluation:
        champion.crown(Entry(best[0].candidate, Evaluation.from_json(best[0].evaluation)))
    t.stage_seconds["compare"] = sum(p.get("seconds") or 0.0 for _, _, p in store.events("compare"))
    champion.spent(judging=t.busy_seconds, comparing=t.stage_seconds["compare"])
    d.contest.suspects = [r.candidate.id for r in done if red_team(r.candidate) and r.correct]
