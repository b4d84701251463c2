"""The object the search talks to: a set of models behind their endpoints, a sampler, and the response cache.

`Ensemble.complete(messages, model=…, temperature=…, reasoning_effort=…, seed=…)` makes one call to a named model;
`Ensemble.sample(messages, seed)` first draws the model and parameters from `random.Random(seed)`, so a call is
fully determined by (config, messages, seed) — which is what makes a run replayable. Guarantees: a cache hit
answers without a request (cached=True, cost 0); in replay mode no endpoint exists, no key is read, and a miss
raises `ReplayMiss`; replies fetched from the network, or answered by replay, are written to this run's cache, so
a replayed run can itself be replayed; `spent_usd` is the sum of the cost of every reply returned (thread-safe).
"""
from __future__ import annotations

import random
import threading
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional

from kevolve.llm.cache import Cache, cache_key, replay_miss
from kevolve.llm.errors import LLMConfigError, LLMError
from kevolve.llm.messages import MessageLike, Reply, Sampling, as_messages
from kevolve.llm.providers import Endpoint, request_params
from kevolve.llm.sampler import Sampler


@dataclass(frozen=True)
class Route:
    provider: str                     # openai | gemini | local
    endpoint: Optional[Endpoint]      # None in replay mode
    reasoning: Optional[bool] = None  # ModelSpec.reasoning


class Ensemble:
    def __init__(self, routes: Mapping[str, Route], sampler: Sampler, *, max_output_tokens: int,
                 thinking_budget: Optional[int] = None, cache: Optional[Cache] = None,
                 replay: Optional[Cache] = None):
        self.routes = dict(routes)
        self.sampler = sampler
        self.max_output_tokens, self.thinking_budget = max_output_tokens, thinking_budget
        self.cache, self.replay = cache, replay
        self._lock = threading.Lock()
        self.spent_usd = 0.0

    def __repr__(self) -> str:
        mode = f", replay={str(self.replay.path.parent)!r}" if self.replay else ""
        return f"Ensemble(models={list(self.routes)}{mode})"

    @property
    def slots(self) -> int:
        """Requests that can be in flight at once over all endpoints (1 per model in replay mode)."""
        endpoints = {id(r.endpoint): r.endpoint for r in self.routes.values() if r.endpoint is not None}
        return sum(e.concurrency for e in endpoints.values()) or len(self.routes)

    def draw(self, rng: random.Random) -> Sampling:
        return self.sampler.draw(rng)

    def sample(self, messages: Iterable[MessageLike], seed: int) -> Reply:
        """Draws model, temperature and effort from random.Random(seed), then completes with that seed."""
        d = self.draw(random.Random(seed))
        return self.complete(messages, model=d.model, temperature=d.temperature,
                             reasoning_effort=d.reasoning_effort, seed=seed)

    def complete(self, messages: Iterable[MessageLike], *, model: str, temperature: Optional[float] = None,
                 reasoning_effort: Optional[str] = None, seed: Optional[int] = None) -> Reply:
        """One reply from `model`. Raises LLMError when the call fails for good, ReplayMiss on a replay miss."""
        msgs = as_messages(messages)
        route = self.routes.get(model)
        if route is None:
            raise LLMError(f"model {model!r} is not configured (llm.models has {list(self.routes)})", model=model)
        params = request_params(route.provider, model, Sampling(model, temperature, reasoning_effort),
                                max_output_tokens=self.max_output_tokens, thinking_budget=self.thinking_budget,
                                reasoning=route.reasoning)
        key = cache_key(route.provider, model, msgs, params, seed)
        reply = self.cache.get(key) if self.cache is not None else None
        if reply is None and self.replay is not None:
            reply = self.replay.get(key)
            if reply is None:
                raise replay_miss(self.replay.path.parent, route.provider, model)
            self._remember(key, reply, msgs, seed)
        if reply is None:
            reply = route.endpoint.complete(msgs, model, params)
            self._remember(key, reply, msgs, seed)
        with self._lock:
            self.spent_usd += reply.cost_usd
        return reply

    def _remember(self, key, reply, msgs, seed) -> None:
        if self.cache is not None:
            self.cache.put(key, reply, msgs, seed)

    def close(self) -> None:
        for endpoint in {id(r.endpoint): r.endpoint for r in self.routes.values() if r.endpoint}.values():
            endpoint.close()
        for c in (self.cache, self.replay):
            if c is not None:
                c.close()


class Disabled:
    """`llm.provider: none`: the same interface, and every call says how to turn an LLM on."""
    slots = 1
    spent_usd = 0.0
    routes: dict = {}

    def __repr__(self) -> str:
        return "Disabled()"

    def _refuse(self, *args, **kwargs):
        raise LLMConfigError("llm.provider is none: no LLM calls can be made; choose llm=openai, llm=gemini or "
                             "llm=local (and weight only the `knob` operator otherwise)")

    draw = sample = complete = _refuse

    def close(self) -> None:
        pass
