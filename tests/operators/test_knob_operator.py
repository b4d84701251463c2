"""Contracts of kevolve.operators.knob: a Mutation for every proposal, never an exception for a bad parent."""
from __future__ import annotations

import random

from kevolve.messages import Candidate, Proposal
from kevolve.operators import knob, knobs

GOOD = "constexpr int T = 128;   // knob: 64, 128, 256\nconstexpr int U = 1;   // knob: 1, 2\n"
MALFORMED = "constexpr int T = 128;   // knob: 64 128 256\n"          # no commas: LLM-written code does this


def proposal(source: str, inspiration: str | None = None) -> Proposal:
    inspirations = (Candidate(id="i", source=inspiration),) if inspiration else ()
    return Proposal(0, Candidate(id="p", source=source), "knob", inspirations)


def test_a_child_differs_in_knob_values_only():
    m = knob.mutate(proposal(GOOD), random.Random(0), changes=2)
    assert m.failure is None and m.source != GOOD and m.meta["changes"]
    assert set(knobs.parse(m.source)) == {"T", "U"}


def test_a_malformed_knob_line_fails_the_proposal_not_the_run():
    m = knob.mutate(proposal(MALFORMED), random.Random(0), changes=2)
    assert m.source is None and m.failure.startswith("knob: line 1") and "commas" in m.failure


def test_a_malformed_inspiration_fails_the_proposal_too():
    m = knob.mutate(proposal(GOOD, inspiration=MALFORMED), random.Random(0), changes=2)
    assert m.source is None and "commas" in m.failure


def test_no_knob_left_to_turn_says_so():
    m = knob.mutate(proposal("int x = 1;\n"), random.Random(0), changes=2)
    assert m.source is None and m.failure == "knob: no knob left to turn"


def test_crossover_takes_values_from_the_inspiration():
    other = GOOD.replace("= 128;", "= 256;").replace("= 1;", "= 2;")
    m = knob.mutate(proposal(GOOD, inspiration=other), random.Random(3), changes=1)
    assert m.source is not None and "crossover" in m.meta
