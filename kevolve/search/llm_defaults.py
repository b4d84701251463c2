"""What choosing an LLM turns on: the operator weights, the LLM verifiers and the search mode, resolved once.

`resolve(search, llm)` fills every weight left null in `search.population.operators` and a null
`search.verifiers.checks` from the table of the LLM chosen, and applies `search.mode`:

- `llm=none`: knob mutation alone (`KNOB_ONLY`), no verifiers.
- `llm=openai|gemini|local`: the paper's pipeline (`PIPELINE`): translate founders from the torch reference
  (`search.translations` at start, and translate weighted for new families later), optimize, meta-generation,
  repair and crossover, knob mutation for the waits (the driver proposes knob children while the LLM calls in
  flight are at their target, so no evaluator waits on the network), and the three LLM verifiers in shadow mode
  (they judge nothing away; their precision and recall are measured against the judge from the first run).
- `search.mode=best_of_n`: the same budget spent as independent samples from the task's seeds: every child's
  parent is a seed (`Population(seeds_only=True)`), no inspirations, no strategies shown, and the operators
  that build on other samples (repair, crossover) off; the choice must be `weights` (a bandit learns from other
  samples' rewards). Evolution must beat this to be worth its machinery.

Why these weights (README, "Using an LLM"): optimize is the workhorse (4); meta-generation (1) makes
`search.meta_children` (4) children per proposal from 1 + 4 calls, so at weight 1 it writes about as many
candidates as optimize does, each from a distinct strategy — the paper's evolutionary meta-generation; repair
(1) is only drawn while a recent failure exists and its prompt is short; translate (0.5) adds new families after
the start's founders; crossover (0.5) is only drawn once the archive holds two kernels and its prompt carries
two; knob (1) costs nothing but the verifiers' calls and, drawn beside the LLM operators, keeps a knob-tuned
neighbour of each good kernel in the population. red_team stays 0: it audits the judge, it does not search.

Guarantees: a weight or a verifier list a user set is kept as set (only nulls are filled); contradictions are
`ConfigError`s naming the field (an LLM operator weighted in best_of_n that builds on other samples, a bandit in
best_of_n, every weight 0). Pure: no I/O.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from kevolve.config import OPERATORS, VERIFIERS, ConfigError, PopulationConfig, SearchConfig, VerifiersConfig
from kevolve.operators.registry import SPECS, where

KNOB_ONLY = {name: 0.0 if s.llm else 1.0 for name, s in SPECS.items()}
PIPELINE = {name: s.weight for name, s in SPECS.items()}        # registry.Spec.weight
DEPENDENT = where(dependent=True)          # operators whose parent is another sample: off in best_of_n
assert set(KNOB_ONLY) == set(PIPELINE) == set(OPERATORS)


@dataclass(frozen=True)
class Pipeline:
    """The resolved search: concrete weights and verifiers, and what best_of_n changes."""
    population: PopulationConfig        # every weight a number
    verifiers: VerifiersConfig          # checks a list
    mode: str                           # evolve | best_of_n
    strategies_shown: int
    seeds_only: bool                    # parents are the task's seeds only (best_of_n)

    @property
    def operators(self) -> tuple[str, ...]:
        """The operators on (weight > 0), in OPERATORS order."""
        return tuple(o for o in OPERATORS if self.population.operators.get(o, 0) > 0)


def defaults(llm: bool) -> dict[str, float]:
    """The weights a null stands for: the pipeline's with an LLM, knob alone without."""
    return dict(PIPELINE if llm else KNOB_ONLY)


def resolve(search: SearchConfig, llm: bool) -> Pipeline:
    """The weights, verifiers and mode of a search of `search` with (`llm`) or without an LLM."""
    pop, best_of_n = search.population, search.mode == "best_of_n"
    table = defaults(llm)
    if best_of_n:
        for op in DEPENDENT:
            if (pop.operators.get(op) or 0) > 0:
                raise ConfigError(f"config field 'search.population.operators.{op}': got {pop.operators[op]!r} with "
                                  f"search.mode=best_of_n, whose samples are independent ({op} builds on another "
                                  f"sample); set it to 0 or null, or use search.mode=evolve")
            table[op] = 0.0
        if search.choice != "weights":
            raise ConfigError(f"config field 'search.choice': got {search.choice!r} with search.mode=best_of_n (a "
                              "bandit learns from other samples' rewards); use search.choice=weights")
    weights = {op: float(table[op] if pop.operators.get(op) is None else pop.operators[op]) for op in OPERATORS}
    if sum(weights.values()) <= 0:
        raise ConfigError(f"config field 'search.population.operators': got {weights}; expected at least one "
                          "weight > 0")
    population = replace(pop, operators=weights, inspiration_rate=0.0 if best_of_n else pop.inspiration_rate)
    v = search.verifiers
    checks = list(v.checks) if v.checks is not None else (list(VERIFIERS) if llm else [])
    return Pipeline(population=population, verifiers=replace(v, checks=checks), mode=search.mode,
                    strategies_shown=0 if best_of_n else search.strategies_shown, seeds_only=best_of_n)
