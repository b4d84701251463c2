"""One provider endpoint: what is sent to a model, and one call made well — limited, retried, timed, priced.

`request_params` decides, as a pure function of the model and the draw, which sampling parameters a request
carries: OpenAI reasoning models (o1/o3/o4…, gpt-5… except *-chat*) get `reasoning_effort` when one is drawn and
never a temperature (they reject it); other OpenAI-compatible models get the temperature and no effort; Gemini
gets the temperature, and a Gemini 3 model with an effort drawn gets it as `thinking_level` instead of the
configured `thinking_budget`. `ModelSpec.reasoning` overrides the name-based guess (e.g. gpt-oss on vLLM).

`Endpoint.complete` guarantees: at most `concurrency` requests of this endpoint in flight at once — over every
process of the run when its `Slots` are shared (kevolve/llm/slots.py) — (the limit is held during a request, not
while backing off), the retry policy of kevolve/llm/retry.py within `call_timeout_s` (no request starts later), the
endpoint's `Breaker` (kevolve/llm/breaker.py: down after `llm.down_after` failed requests in a row, then failing at
once but for a probe every `llm.probe_s`), and a `Reply` whose `cost_usd` is priced from the usage the service
reported. An `Endpoint` is thread-safe; its repr holds no key.
"""
from __future__ import annotations

import re
import time
from typing import Any, Callable, Mapping, Optional, Protocol

from kevolve.llm.breaker import Breaker
from kevolve.llm.messages import Completion, Message, Reply, Sampling
from kevolve.llm.pricing import Pricer, base_name
from kevolve.llm.retry import Failure, RetryPolicy, with_retries
from kevolve.llm.slots import Slots

_O_SERIES = re.compile(r"^o\d")


class Adapter(Protocol):
    """A client library behind one endpoint (kevolve/llm/openai_api.py, kevolve/llm/gemini_api.py)."""
    name: str

    def send(self, messages: tuple[Message, ...], model: str, params: Mapping[str, Any]) -> Completion: ...
    def classify(self, exc: BaseException) -> Failure: ...
    def close(self) -> None: ...


def is_reasoning(provider: str, model: str, override: Optional[bool] = None) -> bool:
    """Whether `model` takes a reasoning effort (and, on OpenAI-compatible APIs, no temperature)."""
    if override is not None:
        return override
    name = base_name(model).rsplit("/", 1)[-1].lower()
    if provider == "gemini":
        return name.startswith("gemini-3")
    return bool(_O_SERIES.match(name)) or (name.startswith("gpt-5") and "chat" not in name)


def request_params(provider: str, model: str, draw: Sampling, *, max_output_tokens: int,
                   thinking_budget: Optional[int] = None, reasoning: Optional[bool] = None) -> dict[str, Any]:
    """The sampling parameters a request for `model` carries, in provider-neutral names."""
    params: dict[str, Any] = {"max_output_tokens": max_output_tokens}
    thinks = is_reasoning(provider, model, reasoning)
    effort = draw.reasoning_effort
    if provider == "gemini":
        if draw.temperature is not None:
            params["temperature"] = draw.temperature
        if thinks and effort not in (None, "none"):
            params["thinking_level"] = effort
        elif thinking_budget is not None:
            params["thinking_budget"] = thinking_budget
        return params
    if thinks:
        if effort is not None:
            params["reasoning_effort"] = effort
    elif draw.temperature is not None:
        params["temperature"] = draw.temperature
    return params


class Endpoint:
    """An adapter with its concurrency limit, the retry policy and the price table."""

    def __init__(self, adapter: Adapter, *, concurrency: int, policy: RetryPolicy, pricer: Pricer,
                 sleep: Callable[[float], None] = time.sleep, slots: Optional[Slots] = None,
                 breaker: Optional[Breaker] = None, call_timeout_s: Optional[float] = None):
        self.adapter = adapter
        self.name = adapter.name
        self.concurrency = concurrency
        self._slots = slots or Slots(concurrency)
        self._policy, self._pricer, self._sleep = policy, pricer, sleep
        self.breaker, self.call_timeout_s = breaker, call_timeout_s

    def __repr__(self) -> str:
        return f"Endpoint({self.adapter!r}, concurrency={self.concurrency})"

    def complete(self, messages: tuple[Message, ...], model: str, params: Mapping[str, Any]) -> Reply:
        def request() -> Completion:
            with self._slots:
                if self.breaker is not None:
                    self.breaker.admit()                # raises EndpointDown: not sent
                return self.adapter.send(messages, model, params)

        start = time.monotonic()
        deadline = start + self.call_timeout_s if self.call_timeout_s else None
        done, attempts = with_retries(request, self.adapter.classify, self._policy, what=f"{self.name} {model}",
                                      provider=self.name, model=model, sleep=self._sleep, breaker=self.breaker,
                                      deadline=deadline)
        cost = self._pricer.cost(model, done.tokens_in, done.tokens_out, provider=self.name)
        return Reply(text=done.text, model=model, provider=self.name, tokens_in=done.tokens_in,
                     tokens_out=done.tokens_out, cost_usd=cost, seconds=time.monotonic() - start, cached=False,
                     finish_reason=done.finish_reason, params=dict(params), attempts=attempts)

    def close(self) -> None:
        self.adapter.close()
