"""What the search learns from its children: the operator × model choice policy and meta-generation's strategy
board, both fed by the reward each child earns (`kevolve.operators.choice.reward`: its fitness over its parent's).

- `arms(population, choice, models)`: with `search.choice=weights` one arm per operator (the LLM layer draws the
  model by `llm.models` weights); with a bandit (ucb1, thompson) knob plus every LLM operator × every model, an
  arm weighted operator weight × model weight (0 switches it off).
- `Learning.rewarded(arm, reward, strategy)`: one child's reward, to the policy and (for a meta child) the board.
- `Learning.restore(store)`: the policy replayed from the stored (arm, reward) pairs (`Store.rewards`), the board
  from the stored meta children's strategies and rewards: a resumed run continues where it stopped.
- `state()`: the policy's and the board's JSON state (logged with the run's summary).
Plain Python: no Ray, no I/O beyond the store passed in.
"""
from __future__ import annotations

from typing import Any, Sequence

from kevolve.config import PopulationConfig
from kevolve.operators.choice import Arm, Policy, make_policy
from kevolve.operators.registry import spec
from kevolve.operators.strategies import Board, Strategy


def arms(population: PopulationConfig, choice: str, models: Sequence[Any]) -> tuple[list[Arm], list[float]]:
    ops = population.operators
    if choice == "weights" or not models:
        return [Arm(op) for op in ops], [float(w) for w in ops.values()]
    total = sum(m.weight for m in models) or 1.0
    out, weights = [], []
    for op, w in ops.items():
        if not spec(op).llm:                 # no model to choose
            out.append(Arm(op))
            weights.append(float(w))
            continue
        for m in models:
            out.append(Arm(op, m.name))
            weights.append(float(w) * m.weight / total)
    return out, weights


class Learning:
    def __init__(self, policy: Policy, board: Board | None = None):
        self.policy, self.board = policy, board or Board()

    @classmethod
    def make(cls, population: PopulationConfig, choice: str, models: Sequence[Any]) -> "Learning":
        return cls(make_policy(choice, *arms(population, choice, models)))

    def rewarded(self, arm: str, reward: float, strategy: Strategy | None = None) -> None:
        a = Arm.parse(arm)
        if a.key in self.policy.n:             # an arm of an earlier configuration is recorded, not learned from
            self.policy.update(a, reward)
        if strategy is not None:
            self.board.record(strategy, reward)

    def restore(self, store) -> None:
        self.policy.replay((a, r) for a, r in store.rewards() if Arm.parse(a).key in self.policy.n)
        for r in store.finished():
            meta = r.candidate.meta_dict()
            if r.reward is not None and meta.get("strategy") and meta.get("idea"):
                self.board.record(Strategy(meta["strategy"], meta["idea"]), r.reward)

    def state(self) -> dict:
        return {"policy": self.policy.state(), "board": self.board.state()}


def strategy_of(meta: dict) -> Strategy | None:
    """The strategy a meta child implemented, from its Mutation / Candidate meta."""
    return Strategy(meta["strategy"], meta["idea"]) if meta.get("strategy") and meta.get("idea") else None
