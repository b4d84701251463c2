"""Meta-generation's strategies: parsed from the LLM's list, scored by the children that implement them.

A meta proposal asks the LLM for K distinct strategies for one parent (the `meta` prompt); each strategy becomes
its own implementation prompt (the `optimize` prompt with the strategy) and so its own child. `Board` keeps the
rewards of each strategy's children and shows the best strategies in later prompts.

Guarantees: `parse_strategies` never raises: it returns the strategies of the last JSON list in the reply (fenced
or bare) whose items are objects with a non-empty `name` and `idea` (other items dropped, duplicates by name
dropped), or no strategies and the reason. `Board` is plain data: `state()` is JSON and `Board.from_state`
restores it exactly; strategies are identified by their name, case and spacing ignored. Not guaranteed: that
two differently named strategies are different ideas.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

MAX_NAME, MAX_IDEA = 80, 1200


@dataclass(frozen=True)
class Strategy:
    name: str
    idea: str

    @property
    def key(self) -> str:
        return " ".join(self.name.lower().split())


def _lists(text: str) -> list:
    """Every JSON array in the text, last first: fenced json blocks, then bare arrays found by decoding."""
    found = []
    decoder = json.JSONDecoder()
    for i in [m.start() for m in re.finditer(r"\[", text)]:
        try:
            value, _ = decoder.raw_decode(text[i:])
        except ValueError:
            continue
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            found.append(value)
    return found[::-1]


def parse_strategies(text: str, limit: int | None = None) -> tuple[list[Strategy], str | None]:
    """(strategies, None), or ([], the reason there are none)."""
    lists = _lists(text)
    if not lists:
        return [], "the reply holds no JSON list of {name, idea} objects"
    for items in lists:
        out, seen = [], set()
        for item in items:
            name, idea = item.get("name"), item.get("idea")
            if not (isinstance(name, str) and isinstance(idea, str) and name.strip() and idea.strip()):
                continue
            s = Strategy(name.strip()[:MAX_NAME], idea.strip()[:MAX_IDEA])
            if s.key not in seen:
                seen.add(s.key)
                out.append(s)
        if out:
            return out[:limit] if limit else out, None
    return [], "the reply's JSON list has no object with a non-empty string `name` and `idea`"


class Board:
    """Each strategy's children's rewards (see kevolve.operators.choice.reward): count, sum, the best idea text."""

    def __init__(self) -> None:
        self._scores: dict[str, dict] = {}

    def record(self, strategy: Strategy, reward: float) -> None:
        s = self._scores.setdefault(strategy.key, {"name": strategy.name, "idea": strategy.idea, "n": 0, "sum": 0.0})
        s["n"] += 1
        s["sum"] += float(reward)

    def mean(self, strategy: Strategy) -> float | None:
        s = self._scores.get(strategy.key)
        return s["sum"] / s["n"] if s else None

    def best(self, k: int, min_children: int = 1) -> list[tuple[Strategy, float, int]]:
        """The k strategies with the highest mean reward (ties: more children, then name)."""
        rows = [(Strategy(s["name"], s["idea"]), s["sum"] / s["n"], s["n"])
                for s in self._scores.values() if s["n"] >= min_children]
        rows.sort(key=lambda r: (-r[1], -r[2], r[0].key))
        return rows[:k]

    def state(self) -> dict:
        return {"scores": {k: dict(v) for k, v in self._scores.items()}}

    @staticmethod
    def from_state(state: dict) -> "Board":
        b = Board()
        b._scores = {k: dict(v) for k, v in state.get("scores", {}).items()}
        return b
