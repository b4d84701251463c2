"""Which operator, with which model, makes the next child: configured weights, or a bandit that learns from rewards.

An arm is an (operator, model) pair; `model` is None where it does not matter (knob mutation, or letting the LLM
layer draw the model by its configured weights). `reward(child, parent)` is what one child earned its arm: its
fitness over its parent's, capped and scaled into [0, 1] (0 for a failure, 1 for `cap`× or better, 1 as well
for a correct child of a parent that had no fitness — a first kernel, a repair).

Policies, all with `choose(rng, allowed=None) -> Arm`, `update(arm, reward)`, `state()`, `from_state(state)`:
- `Weighted`: the configured weights, never updated (rewards are counted for the record only).
- `UCB1`: every arm once, then the highest mean + sqrt(2 ln n / n_arm) (Auer et al. 2002); ties by arm order.
- `Thompson`: a Beta(1 + Σr, 1 + Σ(1 - r)) draw per arm (fractional rewards), the highest wins. It spreads
  choices made before their rewards arrive, which suits a search with many children in flight.

Guarantees: every draw comes from the rng passed in (same state, same rng seed → same choice); `state()` is JSON
and `from_state(state())` restores the policy exactly; `replay(records)` rebuilds it from stored (arm, reward)
pairs (what the store keeps per child), in order, so a resumed run continues where it stopped. Arms outside
`allowed` are never chosen; an `allowed` set with no known arm raises ValueError (the caller's bug). Not
guaranteed: that the best arm in the past is the best now (rewards drift as the population improves).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from random import Random
from typing import Iterable, Sequence


@dataclass(frozen=True, order=True)
class Arm:
    operator: str
    model: str | None = None

    @property
    def key(self) -> str:
        return f"{self.operator}@{self.model}" if self.model else self.operator

    @staticmethod
    def parse(key: str) -> "Arm":
        op, _, model = key.partition("@")
        return Arm(op, model or None)


def reward(child_fitness: float | None, parent_fitness: float | None, cap: float = 2.0) -> float:
    """The child's improvement over its parent in [0, 1]: min(child / parent, cap) / cap; 0 without fitness."""
    if not child_fitness or child_fitness <= 0 or not math.isfinite(child_fitness):
        return 0.0
    if not parent_fitness or parent_fitness <= 0 or not math.isfinite(parent_fitness):
        return 1.0
    return min(child_fitness / parent_fitness, cap) / cap


class Policy:
    """Counts and reward sums per arm; subclasses choose."""
    name = "policy"

    def __init__(self, arms: Sequence[Arm], weights: Sequence[float] | None = None):
        if not arms:
            raise ValueError("a choice needs at least one arm")
        self.arms = list(dict.fromkeys(arms))
        self.weights = list(weights) if weights is not None else [1.0] * len(self.arms)
        if len(self.weights) != len(self.arms) or any(w < 0 for w in self.weights) or not sum(self.weights) > 0:
            raise ValueError("weights: one per arm, >= 0, not all zero")
        self.n = {a.key: 0 for a in self.arms}
        self.sum = {a.key: 0.0 for a in self.arms}

    def _allowed(self, allowed: Iterable[str] | None) -> list[int]:
        if allowed is None:
            return list(range(len(self.arms)))
        allowed = set(allowed)
        idx = [i for i, a in enumerate(self.arms) if a.operator in allowed or a.key in allowed]
        if not idx:
            raise ValueError(f"no arm among {sorted(allowed)} (arms: {[a.key for a in self.arms]})")
        return idx

    def choose(self, rng: Random, allowed: Iterable[str] | None = None) -> Arm:
        """An arm; `allowed` restricts the choice to these operators (or arm keys)."""
        raise NotImplementedError

    def update(self, arm: Arm, r: float) -> None:
        if arm.key not in self.n:
            raise ValueError(f"unknown arm {arm.key!r}")
        self.n[arm.key] += 1
        self.sum[arm.key] += min(max(float(r), 0.0), 1.0)

    def mean(self, arm: Arm) -> float | None:
        return self.sum[arm.key] / self.n[arm.key] if self.n[arm.key] else None

    def replay(self, records: Iterable[tuple[str, float]]) -> "Policy":
        for key, r in records:
            self.update(Arm.parse(key), r)
        return self

    def state(self) -> dict:
        return {"policy": self.name, "arms": [a.key for a in self.arms], "weights": list(self.weights),
                "n": dict(self.n), "sum": dict(self.sum)}

    @staticmethod
    def from_state(state: dict) -> "Policy":
        cls = POLICIES[state["policy"]]
        p = cls([Arm.parse(k) for k in state["arms"]], state["weights"])
        p.n, p.sum = dict(state["n"]), {k: float(v) for k, v in state["sum"].items()}
        return p


class Weighted(Policy):
    name = "weights"

    def choose(self, rng: Random, allowed: Iterable[str] | None = None) -> Arm:
        idx = self._allowed(allowed)
        weights = [self.weights[i] for i in idx]
        if not sum(weights) > 0:
            return self.arms[idx[0]]
        return self.arms[rng.choices(idx, weights=weights)[0]]


class UCB1(Policy):
    name = "ucb1"

    def choose(self, rng: Random, allowed: Iterable[str] | None = None) -> Arm:
        idx = [i for i in self._allowed(allowed) if self.weights[i] > 0] or self._allowed(allowed)
        for i in idx:
            if self.n[self.arms[i].key] == 0:
                return self.arms[i]
        total = sum(self.n[self.arms[i].key] for i in idx)

        def score(i: int) -> float:
            k = self.arms[i].key
            return self.sum[k] / self.n[k] + math.sqrt(2 * math.log(total) / self.n[k])
        return self.arms[max(idx, key=lambda i: (score(i), -i))]


class Thompson(Policy):
    name = "thompson"

    def choose(self, rng: Random, allowed: Iterable[str] | None = None) -> Arm:
        idx = [i for i in self._allowed(allowed) if self.weights[i] > 0] or self._allowed(allowed)
        draws = []
        for i in idx:
            k = self.arms[i].key
            draws.append((rng.betavariate(1.0 + self.sum[k], 1.0 + self.n[k] - self.sum[k]), -i))
        return self.arms[-max(draws)[1]]


POLICIES = {p.name: p for p in (Weighted, UCB1, Thompson)}


def make_policy(name: str, arms: Sequence[Arm], weights: Sequence[float] | None = None) -> Policy:
    """`name` is weights | ucb1 | thompson; for the bandits a weight of 0 switches an arm off."""
    if name not in POLICIES:
        raise ValueError(f"operator choice {name!r}: expected one of {sorted(POLICIES)}")
    return POLICIES[name](arms, weights)
