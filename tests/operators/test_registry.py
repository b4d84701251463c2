"""kevolve/operators/registry.py: one registry names every operator the configuration accepts, and what the rest of
the house asks of an operator comes from it."""
from __future__ import annotations

from kevolve.config import OPERATORS
from kevolve.messages import Candidate, Proposal
from kevolve.operators.compose import EDITING, Request
from kevolve.operators.knob import KnobOperator
from kevolve.operators.registry import LLM_OPERATORS, SPECS, spec, where
from kevolve.search.llm_defaults import DEPENDENT, KNOB_ONLY, PIPELINE


def test_the_registry_names_exactly_the_configured_operators():
    assert tuple(SPECS) == OPERATORS
    assert LLM_OPERATORS == OPERATORS[1:] and not spec("knob").llm


def test_the_properties_read_from_the_registry():
    assert EDITING == ("optimize", "repair")
    assert DEPENDENT == ("crossover", "repair")
    assert where(parent="none") == ("translate",) and where(many=True) == ("meta",)
    assert where(profiled=True) == ("optimize", "meta") and where(ranked=False) == ("red_team",)
    assert PIPELINE == {"knob": 1.0, "translate": 0.5, "optimize": 4.0, "crossover": 0.5, "repair": 1.0, "meta": 1.0,
                        "red_team": 0.0}
    assert KNOB_ONLY == {"knob": 1.0, **dict.fromkeys(LLM_OPERATORS, 0.0)}


def test_knob_mutation_is_an_operator_like_the_others():
    parent = Candidate.new("constexpr int ROWS = 1;     // knob: 1, 2, 4\nint f() { return ROWS; }\n")
    request = Request("knob", Proposal(0, parent, "knob"))
    [a] = KnobOperator(2).apply(request, seed=7)
    [b] = KnobOperator(2).apply(request, seed=7)
    assert a.source is not None and a.source != parent.source and (a.source, a.meta) == (b.source, b.meta)   # the seed
