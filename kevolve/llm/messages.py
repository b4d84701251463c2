"""The values that cross the LLM layer's boundary: a chat `Message` in, a `Reply` out, and the `Sampling` that
says how one call is drawn.

All three are frozen: a Reply is a record of what was sent and what came back, and can be stored, cached and
compared. A Reply never holds a credential: it is built from the service's answer and from our own parameters,
never from the client or its headers.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional, Union

ROLES = ("system", "user", "assistant")


@dataclass(frozen=True)
class Message:
    role: str          # system | user | assistant
    content: str

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"message role {self.role!r}: expected one of {ROLES}")
        if not isinstance(self.content, str):
            raise ValueError(f"message content must be text, got {type(self.content).__name__}")


MessageLike = Union[Message, Mapping[str, str]]


def as_messages(messages: Iterable[MessageLike]) -> tuple[Message, ...]:
    """Accepts Messages or {role, content} mappings (the shape every chat API uses); returns Messages."""
    out = tuple(m if isinstance(m, Message) else Message(role=m["role"], content=m["content"]) for m in messages)
    if not out:
        raise ValueError("a call needs at least one message")
    return out


@dataclass(frozen=True)
class Sampling:
    """One call's draw from the configured lists: which model, at which temperature / reasoning effort."""
    model: str
    temperature: Optional[float] = None
    reasoning_effort: Optional[str] = None


@dataclass(frozen=True)
class Reply:
    """What one call returned. `params` holds the sampling parameters as actually sent (a reasoning model's
    temperature is absent because it was not sent). `cost_usd` is 0 for a cached reply; `seconds` is the time
    the call took, retries and back-off included (for a cached reply: the original call's time)."""
    text: str
    model: str
    provider: str
    tokens_in: int
    tokens_out: int                      # output tokens billed, thinking / reasoning tokens included
    cost_usd: float
    seconds: float
    cached: bool = False
    finish_reason: Optional[str] = None  # the service's word: stop, length, SAFETY, …
    params: Mapping[str, Any] = field(default_factory=dict)
    attempts: int = 1                    # HTTP requests made for it (1 + retries); 0 when cached


@dataclass(frozen=True)
class Completion:
    """A service's answer to one successful request, before pricing and caching turn it into a Reply."""
    text: str
    tokens_in: int
    tokens_out: int
    finish_reason: Optional[str] = None
