"""OpenAI Chat Completions through the `openai` client: the `openai` provider and `local` (any OpenAI-compatible
server: vLLM, SGLang, Ollama, llama.cpp).

Guarantees: one `chat.completions.create` per request, with the client's own retries off (`max_retries=0`; our
retry policy runs instead) and our timeout; the endpoint is `base_url`, else (openai only) OPENAI_BASE_URL, else
api.openai.com. Output is capped with `max_completion_tokens` on OpenAI and `max_tokens` on local servers (the
field every compatible server reads). Tokens come from the reply's `usage` (0 when a server sends none).
Failures are classified for the retry policy with the key scrubbed out of the service's message.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional

import openai

from kevolve.llm.keys import Secret, key_var
from kevolve.llm.messages import Completion, Message
from kevolve.llm.retry import Failure, connection_cause, retry_after, status_cause, status_retryable

_MAX_MESSAGE = 600      # characters of a service's error text kept in an exception


class OpenAIAdapter:
    def __init__(self, kind: str, key: Secret, *, base_url: Optional[str], timeout_s: float,
                 env: Mapping[str, str]):
        self.name = kind                 # openai | local
        self._key = key
        url = base_url or (env.get("OPENAI_BASE_URL") if kind == "openai" else None) or None
        self.base_url = url
        self._client = openai.OpenAI(api_key=key.reveal(), base_url=url, timeout=timeout_s, max_retries=0)
        self.timeout_s = timeout_s

    def __repr__(self) -> str:
        return f"OpenAIAdapter({self.name!r}, base_url={self.base_url!r})"

    def send(self, messages: tuple[Message, ...], model: str, params: Mapping[str, Any]) -> Completion:
        kwargs: dict[str, Any] = {"model": model,
                                  "messages": [{"role": m.role, "content": m.content} for m in messages]}
        cap = "max_completion_tokens" if self.name == "openai" else "max_tokens"
        kwargs[cap] = params["max_output_tokens"]
        for key in ("temperature", "reasoning_effort"):
            if key in params:
                kwargs[key] = params[key]
        r = self._client.chat.completions.create(**kwargs)
        choice = r.choices[0] if r.choices else None
        text = (choice.message.content or "") if choice is not None and choice.message is not None else ""
        usage = r.usage
        return Completion(text=text, tokens_in=int(getattr(usage, "prompt_tokens", 0) or 0),
                          tokens_out=int(getattr(usage, "completion_tokens", 0) or 0),
                          finish_reason=getattr(choice, "finish_reason", None))

    def classify(self, exc: BaseException) -> Failure:
        scrub, where = self._key.scrub, self.base_url or "https://api.openai.com/v1"
        if isinstance(exc, openai.APITimeoutError):
            return Failure(f"no reply within {self.timeout_s:g} s (llm.timeout_s)", None, True,
                           cause=f"no reply within {self.timeout_s:g} s at {where}")
        if isinstance(exc, openai.APIConnectionError):
            detail = scrub(str(exc.__cause__ or exc))
            return Failure(scrub(f"connection to {self.base_url or 'api.openai.com'} failed: {detail}"), None, True,
                           cause=f"{connection_cause(detail)} at {where}")
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            text = scrub(str(getattr(exc, "message", "") or exc))[:_MAX_MESSAGE]
            if status in (401, 403):
                text += (f" — the service refused the key: check {key_var(self.name)}"
                         + (" and llm.base_url" if self.name == "local" else " (and llm.base_url / OPENAI_BASE_URL)"))
            return Failure(f"HTTP {status}: {text}", status, status_retryable(status),
                           retry_after(exc.response.headers if exc.response is not None else None),
                           cause=f"{status_cause(status)} at {where}")
        return Failure(scrub(f"{type(exc).__name__}: {exc}")[:_MAX_MESSAGE], None, False,
                       cause=f"{type(exc).__name__} at {where}")

    def close(self) -> None:
        self._client.close()
