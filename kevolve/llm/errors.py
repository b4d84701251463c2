"""The two ways the LLM layer fails, so callers can tell a run's own configuration from one call's bad luck.

`LLMConfigError` is the run's configuration (a missing key, a bad field, a replay directory without a cache):
it is raised at start, before any call, and should end the run. `LLMError` is one call that did not produce a
reply after the retry policy ran out, or failed in a way retrying cannot fix (401, 400, a replay miss); the
caller records it against the candidate and goes on. Neither message ever contains an API key: providers scrub
the key out of any text the service sent back before it reaches an exception.
"""
from __future__ import annotations

from typing import Optional


class LLMConfigError(ValueError):
    """The LLM configuration cannot work; the message names the field or environment variable to fix."""


class LLMError(RuntimeError):
    """One call failed for good. `status` is the HTTP status (None for a timeout or a connection error);
    `retryable` says whether the failure was transient (the retries ran out) or permanent (retrying would not
    help); `attempts` counts the requests made; `cause` is the last failure in a few words, the same for failures
    alike ("connection refused at http://127.0.0.1:9/v1"), for counting and showing."""

    def __init__(self, message: str, *, provider: str = "", model: str = "", status: Optional[int] = None,
                 retryable: bool = False, attempts: int = 0, cause: str = ""):
        super().__init__(message)
        self.provider, self.model, self.status = provider, model, status
        self.retryable, self.attempts, self.cause = retryable, attempts, cause or message[:120]

    def __reduce__(self):   # picklable across Ray and futures, keyword fields included
        return (_rebuild, (str(self), self.provider, self.model, self.status, self.retryable, self.attempts,
                           self.cause))


def _rebuild(message, provider, model, status, retryable, attempts, cause=""):
    return LLMError(message, provider=provider, model=model, status=status, retryable=retryable, attempts=attempts,
                    cause=cause)


class ReplayMiss(LLMError):
    """Replay mode was asked a prompt its run directory's cache never saw."""

    def __reduce__(self):
        return (ReplayMiss, (str(self),), None)
