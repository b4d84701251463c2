"""The operators, in one place: what each needs and what it gives (`Spec`), and the one interface every operator
implements (`Operator.apply`: a complete `Request` and a seed in, the children out).

Every other module asks this registry instead of naming operators: the population (which parent an operator takes,
whether best-of-N can serve it), the prompts (which need a parent, which may answer with edit blocks), the search
(which write with an LLM, which give several children, which show a profile), the defaults (the weights with an
LLM). A new operator is its implementation (a knob-like `Operator`, or for an LLM operator a prompt in
`prompts/` and its function in `compose`) and one line in `SPECS`.

Guarantees: `SPECS` names exactly `kevolve.config.OPERATORS` (a test checks it); `spec(name)` raises KeyError for
a name that is not an operator.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Spec:
    name: str
    llm: bool                   # writes with an LLM (False: knob mutation, local and free)
    parent: str = "ranked"      # "ranked": a parent the population selects; "failed": a recent failure (repair);
                                # "optional": given one, its prompt does not need it (red_team); "none": from scratch
    second_parent: bool = False  # the first inspiration is a second parent (crossover): needs two archive members
    edits: bool = False         # its reply may be edit blocks on the parent
    profiled: bool = False      # its prompt shows the parent's Nsight Compute profile, when the run makes one
    many: bool = False          # one proposal gives several children (meta: strategies, then a child each)
    dependent: bool = False     # builds on another sample (a failure, a second parent): never served in best_of_n
    ranked: bool = True         # False: its children are judged but never ranked (red_team: suspected judge bugs)
    weight: float = 0.0         # its weight with an LLM when the configuration leaves it null

    @property
    def needs_parent(self) -> bool:
        return self.parent in ("ranked", "failed")


SPECS = {s.name: s for s in (
    Spec("knob", llm=False, weight=1.0),
    Spec("translate", llm=True, parent="none", weight=0.5),
    Spec("optimize", llm=True, edits=True, profiled=True, weight=4.0),
    Spec("crossover", llm=True, second_parent=True, dependent=True, weight=0.5),
    Spec("repair", llm=True, parent="failed", edits=True, dependent=True, weight=1.0),
    Spec("meta", llm=True, profiled=True, many=True, weight=1.0),
    Spec("red_team", llm=True, parent="optional", ranked=False, weight=0.0),   # audits the judge, does not search: off
)}
LLM_OPERATORS = tuple(name for name, s in SPECS.items() if s.llm)


def spec(name: str) -> Spec:
    return SPECS[name]


def where(**properties) -> tuple[str, ...]:
    """The operators whose spec has every one of `properties`, in registry order: `where(edits=True)`."""
    return tuple(name for name, s in SPECS.items() if all(getattr(s, k) == v for k, v in properties.items()))


class Operator(Protocol):
    """What every operator does: the children of one proposal (its `Request`: the proposal and what its prompt
    quotes), drawing every random choice from `seed`; a failure is a `Mutation` with `failure`, never a raise."""

    def apply(self, request, seed: int, model: str | None = None) -> list:
        ...
