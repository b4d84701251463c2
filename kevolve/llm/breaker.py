"""An endpoint's circuit breaker: after `down_after` failed requests in a row, the endpoint is down and its calls
fail at once instead of waiting through back-off — except one probe request every `probe_s`, whose reply closes it.

Why: a wrong URL, a dead server or an outage makes every request fail, and each call would otherwise spend its
whole retry schedule (2 + 4 + … + 60 s of back-off, or `llm.timeout_s` per hung request) before the search hears
of it; meanwhile nothing says why. With the breaker, the first `down_after` failures cost what they cost, then
every waiting call gives up at its next retry and new calls fail in microseconds, each with the cause
(`Failure.cause`: "connection refused at http://127.0.0.1:9/v1"), so the search can count them, say so and go on
with knob mutation.

Guarantees: thread-safe; any failed request counts (a transient one, or a permanent one such as 401 or 404: either
way the next call would fail the same); a request that gets a reply resets the count and closes the breaker; while
down, `admit` lets exactly one request through per `probe_s` (or the service's last Retry-After, when longer), all
others raise `EndpointDown` naming the failures and the cause. Not guaranteed: a shared view across processes (each
process that holds the provider has its own breaker: the Mutator's and the Verifier's see their own requests).
"""
from __future__ import annotations

import threading
import time
from typing import Callable, Optional


class EndpointDown(Exception):
    """A request not sent: the endpoint's breaker is open. `cause`: the last failure's short cause."""

    def __init__(self, message: str, cause: str):
        super().__init__(message)
        self.cause = cause


class Breaker:
    def __init__(self, down_after: int, probe_s: float, clock: Callable[[], float] = time.monotonic):
        if down_after < 1 or probe_s <= 0:
            raise ValueError(f"Breaker: need down_after >= 1 and probe_s > 0, got {down_after}, {probe_s}")
        self.down_after, self.probe_s, self.clock = down_after, probe_s, clock
        self._lock = threading.Lock()
        self.in_a_row = 0                   # failed requests since the last reply
        self.cause = ""                     # the last failure's cause
        self._next_probe: Optional[float] = None   # while down: when the next probe may go

    @property
    def down(self) -> bool:
        with self._lock:
            return self.in_a_row >= self.down_after

    def admit(self) -> None:
        """Returns when a request may be sent now; raises EndpointDown when the endpoint is down and no probe is
        due."""
        with self._lock:
            if self.in_a_row < self.down_after:
                return
            now = self.clock()
            if self._next_probe is None or now >= self._next_probe:
                self._next_probe = now + self.probe_s        # this request is the probe; the next one after that
                return
            wait = self._next_probe - now
        raise EndpointDown(f"the endpoint failed {self.in_a_row} requests in a row ({self.cause}); not sent: it is "
                           f"paused, a probe request goes every {self.probe_s:g} s (next in {wait:.0f} s; "
                           f"llm.down_after, llm.probe_s)", self.cause)

    def failed(self, cause: str, retry_after_s: Optional[float] = None) -> None:
        with self._lock:
            self.in_a_row += 1
            self.cause = cause
            if self.in_a_row >= self.down_after:
                wait = max(self.probe_s, retry_after_s or 0.0)
                self._next_probe = max(self._next_probe or 0.0, self.clock() + wait)

    def succeeded(self) -> None:
        with self._lock:
            self.in_a_row, self._next_probe = 0, None
