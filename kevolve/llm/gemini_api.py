"""Gemini through the `google-genai` client, with an API key (Gemini API) or Vertex AI (Application Default
Credentials, a project and a location).

Guarantees: one `models.generate_content` per request with the client's retries off (no `retry_options`, the
SDK's default) and our timeout. System messages become the `system_instruction`, assistant turns the `model`
role. Sent per call: temperature, `max_output_tokens`, and either `thinking_level` (a Gemini 3 model with a
reasoning effort drawn) or `thinking_budget` (when configured). The reply's text joins its text parts, thoughts
left out; tokens are `usageMetadata`'s prompt count in, candidates + thoughts out (Google bills thoughts as
output). A blocked prompt is a reply with empty text and finish_reason "blocked: REASON", not an error.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional

import httpx
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from kevolve.llm.keys import Secret, key_var
from kevolve.llm.messages import Completion, Message
from kevolve.llm.retry import Failure, connection_cause, retry_after, status_cause, status_retryable

_MAX_MESSAGE = 600
_TRANSIENT: tuple[type[BaseException], ...] = (httpx.TransportError,)
try:                                   # the SDK talks through `requests` when Vertex uses mTLS
    import requests
    _TRANSIENT += (requests.exceptions.ConnectionError, requests.exceptions.Timeout)
except ImportError:                    # pragma: no cover - requests comes with google-auth
    pass
try:
    from google.auth import exceptions as auth_exceptions
    _TRANSIENT += (auth_exceptions.TransportError,)
except ImportError:                    # pragma: no cover
    auth_exceptions = None


class GeminiAdapter:
    def __init__(self, key: Optional[Secret], *, base_url: Optional[str], timeout_s: float,
                 vertex: Optional[tuple[str, str, Any]] = None):
        """`key` for the Gemini API, or `vertex` = (project, location, credentials) for Vertex AI."""
        self.name = "gemini"
        self._key = key or Secret("")
        self.timeout_s = timeout_s
        self.base_url = base_url
        self.vertex = vertex is not None
        http = types.HttpOptions(base_url=base_url, timeout=int(timeout_s * 1000))
        if vertex is not None:
            project, location, credentials = vertex
            self._client = genai.Client(vertexai=True, project=project, location=location, credentials=credentials,
                                        http_options=http)
        else:
            self._client = genai.Client(vertexai=False, api_key=self._key.reveal(), http_options=http)

    def __repr__(self) -> str:
        return f"GeminiAdapter(vertex={self.vertex}, base_url={self.base_url!r})"

    def send(self, messages: tuple[Message, ...], model: str, params: Mapping[str, Any]) -> Completion:
        system = "\n\n".join(m.content for m in messages if m.role == "system") or None
        contents = [types.Content(role="model" if m.role == "assistant" else "user", parts=[types.Part(text=m.content)])
                    for m in messages if m.role != "system"]
        thinking = None
        if "thinking_level" in params:
            thinking = types.ThinkingConfig(thinking_level=params["thinking_level"].upper())
        elif "thinking_budget" in params:
            thinking = types.ThinkingConfig(thinking_budget=params["thinking_budget"])
        config = types.GenerateContentConfig(system_instruction=system, temperature=params.get("temperature"),
                                             max_output_tokens=params["max_output_tokens"], thinking_config=thinking)
        r = self._client.models.generate_content(model=model, contents=contents, config=config)
        return _completion(r)

    def classify(self, exc: BaseException) -> Failure:
        scrub = self._key.scrub
        where = self.base_url or ("Vertex AI" if self.vertex else "generativelanguage.googleapis.com")
        if isinstance(exc, genai_errors.APIError):
            status = int(exc.code) if exc.code else None
            text = scrub(str(exc.message or exc.status or "error"))[:_MAX_MESSAGE]
            if status in (401, 403) or "api key" in text.lower():
                text += (" — the service refused the credentials: check your Application Default Credentials "
                         "(gcloud auth application-default login) and llm.vertex.project" if self.vertex
                         else f" — the service refused the key: check {key_var('gemini')}")
            headers = getattr(exc.response, "headers", None)
            return Failure(f"HTTP {status}: {text}", status, status_retryable(status),
                           retry_after(headers), cause=f"{status_cause(status)} at {where}")
        if isinstance(exc, httpx.TimeoutException) or "Timeout" in type(exc).__name__:
            return Failure(f"no reply within {self.timeout_s:g} s (llm.timeout_s)", None, True,
                           cause=f"no reply within {self.timeout_s:g} s at {where}")
        if isinstance(exc, _TRANSIENT):
            detail = scrub(f"{type(exc).__name__}: {exc}")
            return Failure(f"connection failed: {detail}"[:_MAX_MESSAGE], None, True,
                           cause=f"{connection_cause(detail)} at {where}")
        if auth_exceptions is not None and isinstance(exc, auth_exceptions.RefreshError):
            return Failure("Vertex AI credentials could not be refreshed: run `gcloud auth application-default "
                           "login` or set GOOGLE_APPLICATION_CREDENTIALS", None, False,
                           cause="Vertex AI credentials could not be refreshed")
        return Failure(scrub(f"{type(exc).__name__}: {exc}")[:_MAX_MESSAGE], None, False,
                       cause=f"{type(exc).__name__} at {where}")

    def close(self) -> None:
        close = getattr(self._client, "close", None)
        if close is not None:
            close()


def _completion(r: types.GenerateContentResponse) -> Completion:
    usage = r.usage_metadata
    tokens_in = int(getattr(usage, "prompt_token_count", 0) or 0)
    tokens_out = (int(getattr(usage, "candidates_token_count", 0) or 0)
                  + int(getattr(usage, "thoughts_token_count", 0) or 0))
    if not r.candidates:
        block = getattr(getattr(r, "prompt_feedback", None), "block_reason", None)
        reason = f"blocked: {getattr(block, 'value', block)}" if block else "no candidates"
        return Completion(text="", tokens_in=tokens_in, tokens_out=tokens_out, finish_reason=reason)
    cand = r.candidates[0]
    parts = (cand.content.parts if cand.content is not None else None) or []
    text = "".join(p.text for p in parts if p.text and not p.thought)
    finish = cand.finish_reason
    return Completion(text=text, tokens_in=tokens_in, tokens_out=tokens_out,
                      finish_reason=getattr(finish, "value", finish))
