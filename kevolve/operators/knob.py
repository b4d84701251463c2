"""Knob mutation, the operator that needs no LLM: a child that differs from its parent in a few knob values
(`kevolve.operators.knobs`), sometimes with values crossed in from an inspiration.

`KnobOperator(changes)` is it behind the `registry.Operator` interface (`apply(request, seed)`: one child).

Guarantees: `mutate(proposal, rng, changes)` returns a `Mutation` and never raises for a bad parent: a
parent without knobs to turn, or with a malformed knob line (which LLM-written code will produce), gives
`source=None` and the reason, so that one proposal fails and the search goes on. Every draw comes from `rng`.
"""
from __future__ import annotations

import time
from random import Random

from kevolve.messages import Mutation, Proposal
from kevolve.operators import knobs


def mutate(proposal: Proposal, rng: Random, changes: int) -> Mutation:
    """Crosses in the first inspiration's knob values (when it has any the parent lacks), then changes
    between 1 and `changes` knobs of the result."""
    start = time.perf_counter()
    source, meta = proposal.parent.source, {}
    try:
        if proposal.inspirations:
            crossed = knobs.crossover(source, proposal.inspirations[0].source, rng)
            if crossed is not None:
                source, meta["crossover"] = crossed
        mutated = knobs.mutate(source, rng, n=changes)
    except ValueError as e:                          # a malformed knob line in the parent or the inspiration
        return Mutation(None, meta, time.perf_counter() - start, failure=f"knob: {e}")
    if mutated is None:
        return Mutation(None, meta, time.perf_counter() - start, failure="knob: no knob left to turn")
    source, meta["changes"] = mutated
    return Mutation(source, meta, time.perf_counter() - start)


class KnobOperator:
    """Knob mutation as a `registry.Operator`: changes between 1 and `changes` knobs of the request's parent."""

    def __init__(self, changes: int):
        self.changes = changes

    def apply(self, request, seed: int, model: str | None = None) -> list[Mutation]:
        return [mutate(request.proposal, Random(seed), self.changes)]
