"""`Pool`: many LLM calls in flight from one process (a Ray actor, a script), on a thread pool.

LLM calls spend their 30–120 s waiting on the network, so threads are the right tool: `submit(messages, seed)`
returns at once with a Future of the Reply. How many calls to keep in flight: enough that a judged candidate is
always waiting for every evaluator, i.e.

    in-flight calls ≈ evaluators × (LLM latency / judgement time per candidate)

e.g. 8 GPUs judging a candidate in 4 s, with replies taking 60 s, need about 8 × 60 / 4 = 120 calls in flight —
more than one endpoint's `llm.concurrency` may allow, which is then the bound (raise it if the provider's rate
limit permits, or add models on other endpoints). A search sizes its LLM proposals in flight this way by
itself, from the latencies it measures (kevolve/search/pacing.py); a script using a Pool sizes it by hand.

Guarantees: at most `size` calls run at once (default: the ensemble's total concurrency, i.e. every endpoint's
limit); a call's failure is its Future's exception (LLMError, ReplayMiss), never the pool's; `in_flight` counts
calls submitted and not finished, for budgets that must count calls still running; `close()` waits for them.
"""
from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Iterable, Optional, Union

from kevolve.llm.ensemble import Disabled, Ensemble
from kevolve.llm.messages import MessageLike, Reply


class Pool:
    def __init__(self, provider: Union[Ensemble, Disabled], size: Optional[int] = None):
        self.provider = provider
        self.size = size or provider.slots
        if self.size < 1:
            raise ValueError(f"Pool size must be >= 1, got {self.size}")
        self._executor = ThreadPoolExecutor(max_workers=self.size, thread_name_prefix="kevolve-llm")
        self._lock = threading.Lock()
        self._in_flight = 0

    def __repr__(self) -> str:
        return f"Pool({self.provider!r}, size={self.size}, in_flight={self.in_flight})"

    @property
    def in_flight(self) -> int:
        with self._lock:
            return self._in_flight

    def submit(self, messages: Iterable[MessageLike], seed: int) -> "Future[Reply]":
        """A call whose model and parameters are drawn from random.Random(seed) (Ensemble.sample)."""
        msgs = list(messages)
        with self._lock:
            self._in_flight += 1
        future = self._executor.submit(self.provider.sample, msgs, seed)
        future.add_done_callback(self._finished)
        return future

    def _finished(self, _future: Future) -> None:
        with self._lock:
            self._in_flight -= 1

    def close(self, *, wait: bool = True) -> None:
        self._executor.shutdown(wait=wait, cancel_futures=not wait)

    def __enter__(self) -> "Pool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
