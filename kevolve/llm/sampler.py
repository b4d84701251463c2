"""Which model, temperature and reasoning effort one call uses: a weighted draw from the configured lists.

Guarantees: `Sampler.draw(rng)` depends only on the configuration and the state of the `random.Random` the caller
passes (same seed, same draws, on any machine), consumes exactly three numbers from it, and picks a model with
probability weight / total weight (a weight of 0 is never picked). The draw is the request's intent: whether a
temperature or effort is actually sent depends on the model (kevolve/llm/providers.py, `request_params`).
"""
from __future__ import annotations

import bisect
import itertools
import random
from typing import Optional, Sequence

from kevolve.llm.config import LLMConfig
from kevolve.llm.messages import Sampling


class Sampler:
    def __init__(self, models: Sequence[tuple[str, float]], temperatures: Sequence[float],
                 efforts: Sequence[Optional[str]]):
        self.names = [name for name, _ in models]
        self._cumulative = list(itertools.accumulate(w for _, w in models))
        self.temperatures = list(temperatures)
        self.efforts = list(efforts)

    @classmethod
    def from_config(cls, cfg: LLMConfig) -> "Sampler":
        return cls([(m.name, m.weight) for m in cfg.models], cfg.temperatures, cfg.reasoning_efforts)

    def draw(self, rng: random.Random) -> Sampling:
        x = rng.random() * self._cumulative[-1]
        i = min(bisect.bisect_right(self._cumulative, x), len(self.names) - 1)
        temperature = self.temperatures[int(rng.random() * len(self.temperatures))]
        effort = self.efforts[int(rng.random() * len(self.efforts))]
        return Sampling(model=self.names[i], temperature=temperature, reasoning_effort=effort)
