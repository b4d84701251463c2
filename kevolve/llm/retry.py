"""Our retry policy for LLM requests (the clients' own retries are off, so this is the only one).

A request that fails transiently — HTTP 408, 409, 429, any 5xx, a timeout, a broken connection — is retried up to
`max_retries` times after a back-off: base × 2^retry, capped, with "equal jitter" (between half and all of it),
or the service's Retry-After when that is longer (up to 10 minutes). Anything else (400, 401, 403, 404, …) fails at
once. When the retries run out, or at once for a permanent failure, `LLMError` says what happened, with `retryable`,
`status`, `attempts` and the short `cause` ("connection refused at URL", "HTTP 429 (rate limited) at URL").
With an endpoint's `Breaker` (kevolve/llm/breaker.py), every request's outcome is reported to it, and a call whose
endpoint is down gives up at its next request instead of backing off. With a `deadline` (a `time.monotonic()` value:
`llm.call_timeout_s` after the call began), no request starts after it and no back-off runs past it, so a call ends
within `llm.call_timeout_s` + one request's `llm.timeout_s`.
Guarantees: at most 1 + max_retries requests per call; every wait is logged at INFO with its reason; `sleep` and the
jitter's rng are injectable so tests observe the schedule without waiting.
"""
from __future__ import annotations

import email.utils
import logging
import math
import random
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Optional, TypeVar

from kevolve.llm.breaker import Breaker, EndpointDown
from kevolve.llm.errors import LLMError

log = logging.getLogger(__name__)
T = TypeVar("T")
RETRYABLE_STATUS = frozenset({408, 409, 429}) | frozenset(range(500, 600))


@dataclass(frozen=True)
class Failure:
    """A provider's reading of one failed request; `message` is already scrubbed of any key."""
    message: str
    status: Optional[int] = None          # HTTP status; None for a timeout or connection error
    retryable: bool = False
    retry_after_s: Optional[float] = None
    cause: str = ""                       # short, the same for failures alike: counted and shown by the search


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int = 6
    backoff_s: float = 2.0
    backoff_max_s: float = 60.0
    retry_after_max_s: float = 600.0      # a service's Retry-After is honoured up to this (a bad header: no hang)

    def delay(self, retry: int, rng: random.Random, retry_after_s: Optional[float] = None) -> float:
        """Seconds to wait before retry number `retry` (0-based)."""
        cap = min(self.backoff_max_s, self.backoff_s * 2 ** retry)
        jittered = cap / 2 + rng.uniform(0, cap / 2)
        return max(jittered, min(retry_after_s or 0.0, self.retry_after_max_s))


def status_retryable(status: Optional[int]) -> bool:
    return status is None or status in RETRYABLE_STATUS


_STATUS_WORDS = {400: "bad request", 401: "key refused", 403: "forbidden", 404: "not found (model or URL?)",
                 408: "request timeout", 429: "rate limited", 500: "server error", 502: "bad gateway",
                 503: "unavailable", 504: "gateway timeout"}


def status_cause(status: Optional[int]) -> str:
    """An HTTP failure's cause in a few words: "HTTP 429 (rate limited)"."""
    words = _STATUS_WORDS.get(status) if status is not None else None
    return f"HTTP {status}" + (f" ({words})" if words else "")


def connection_cause(detail: str) -> str:
    """A connection failure's cause in a few words, from the client's text of it."""
    low = detail.lower()
    for needle, words in (("refused", "connection refused"), ("name or service not known", "host not found"),
                          ("nodename nor servname", "host not found"), ("name resolution", "host not found"),
                          ("reset by peer", "connection reset"), ("unreachable", "network unreachable"),
                          ("ssl", "TLS failed"), ("certificate", "TLS failed")):
        if needle in low:
            return words
    return "connection failed"


def retry_after(headers: Optional[Mapping[str, str]]) -> Optional[float]:
    """Seconds from `retry-after-ms` or `Retry-After` (seconds or an HTTP date); None when absent or unreadable."""
    if not headers:
        return None
    ms, value = headers.get("retry-after-ms"), headers.get("retry-after")
    if ms is not None and _number(ms) is not None:
        return _number(ms) / 1000
    if value is None:
        return None
    if _number(value) is not None:
        return _number(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _number(text: str) -> Optional[float]:
    """A finite number >= 0, or None."""
    try:
        x = float(text)
    except ValueError:
        return None
    return max(0.0, x) if math.isfinite(x) else None


def with_retries(request: Callable[[], T], classify: Callable[[BaseException], Failure], policy: RetryPolicy, *,
                 what: str, provider: str, model: str, sleep: Callable[[float], None] = time.sleep,
                 rng: Optional[random.Random] = None, breaker: Optional[Breaker] = None,
                 deadline: Optional[float] = None, clock: Callable[[], float] = time.monotonic) -> tuple[T, int]:
    """Runs `request` until it returns; returns (its value, requests made). Raises LLMError when it cannot.
    `request` raises `EndpointDown` (from `breaker.admit()`) for a request it did not send."""
    rng = rng or random.Random()
    attempts = 0
    while True:
        attempts += 1
        try:
            value = request()
        except EndpointDown as down:
            raise LLMError(f"{what}: {down}", provider=provider, model=model, retryable=True, attempts=attempts - 1,
                           cause=down.cause) from None
        except Exception as exc:      # noqa: BLE001 - classify decides; unknown errors are permanent
            failure = classify(exc)
            if breaker is not None:
                breaker.failed(failure.cause or failure.message[:120], failure.retry_after_s)
        else:
            if breaker is not None:
                breaker.succeeded()
            return value, attempts
        wait = policy.delay(attempts - 1, rng, failure.retry_after_s)
        why = ("failed on" if not failure.retryable
               else "gave up after" if attempts > policy.max_retries
               else "gave up (the call's time, llm.call_timeout_s, ran out) after"
               if deadline is not None and clock() + wait >= deadline
               else "gave up (the endpoint failed llm.down_after requests in a row) after"
               if breaker is not None and breaker.down else None)
        if why is not None:
            raise LLMError(f"{what}: {why} {attempts} request(s): {failure.message}", provider=provider,
                           model=model, status=failure.status, retryable=failure.retryable,
                           attempts=attempts, cause=failure.cause) from None
        log.info("%s: %s; retry %d/%d in %.1f s", what, failure.message, attempts, policy.max_retries, wait)
        sleep(wait)
