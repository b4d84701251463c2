"""Loopback HTTP servers that speak the OpenAI Chat Completions and Gemini generateContent REST APIs, scripted
per request, for driving the real `openai` and `google-genai` clients in tests.

A server answers each request with the next step of its script (then `Ok()` for ever), records every request
(path, headers, JSON body) and counts requests in progress at once. A `Gate` holds a request until the test opens
it, so a test can order what a concurrent client sees. Only 127.0.0.1; each test stops its server
(hanging handlers are released at stop, so no thread outlives the fixture by more than a moment).
"""
from __future__ import annotations

import json
import re
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional, Union

GEMINI_PATH = re.compile(r"^/(v1|v1beta|v1alpha|v1beta1)/(projects/[^/]+/locations/[^/]+/publishers/google/)?"
                         r"models/([^/:]+):generateContent$")


@dataclass(frozen=True)
class Ok:
    text: str = "a reply"
    tokens_in: int = 11
    tokens_out: int = 7
    thoughts: int = 0            # Gemini thoughtsTokenCount
    delay_s: float = 0.0


@dataclass(frozen=True)
class Status:
    code: int
    message: str = "error"
    headers: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Hang:
    seconds: float = 5.0         # longer than the client's timeout; released when the server stops


@dataclass(frozen=True)
class Gate:
    """Holds the request until `event` is set (released without a reply if the server stops first), then `then`."""
    event: threading.Event
    then: Union[Ok, Status, Hang]


Step = Union[Ok, Status, Hang, Gate]


@dataclass(frozen=True)
class Request:
    path: str
    headers: dict                # names in lower case
    body: Any


class LLMServer:
    """`respond(body) -> Step`, when given, answers every request the script does not (a router by content)."""

    def __init__(self, *steps: Step, respond=None):
        self.respond = respond
        self.script: deque = deque(steps)
        self.requests: list[Request] = []
        self.active = self.max_active = 0
        self.lock = threading.Lock()
        self.stop_event = threading.Event()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_port}"

    def then(self, *steps: Step) -> "LLMServer":
        with self.lock:
            self.script.extend(steps)
        return self

    def next_step(self, body: Any = None) -> Step:
        with self.lock:
            if self.script:
                return self.script.popleft()
            if self.respond is not None:
                return self.respond(body)
            return Ok()

    def stop(self) -> None:
        self.stop_event.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


def _handler(server: LLMServer):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):       # quiet
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"null")
            gemini = GEMINI_PATH.match(self.path.split("?")[0])
            openai = self.path.split("?")[0].endswith("/chat/completions")
            with server.lock:
                server.requests.append(Request(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                server.active += 1
                server.max_active = max(server.max_active, server.active)
            try:
                if not (gemini or openai):
                    return self._send(404, {"error": {"message": f"no route {self.path}"}})
                step = server.next_step(body)
                if isinstance(step, Gate):
                    while not step.event.wait(0.05):
                        if server.stop_event.is_set():
                            return None
                    step = step.then
                if isinstance(step, Hang):
                    server.stop_event.wait(step.seconds)
                    return self._send(200, {}) if not server.stop_event.is_set() else None
                if isinstance(step, Status):
                    return self._send(step.code, _error(step, bool(gemini)), step.headers)
                if step.delay_s:
                    server.stop_event.wait(step.delay_s)
                model = gemini.group(3) if gemini else body.get("model")
                self._send(200, _gemini_ok(step, model) if gemini else _openai_ok(step, model))
            finally:
                with server.lock:
                    server.active -= 1

        def _send(self, code: int, payload: dict, headers: Optional[dict] = None) -> None:
            data = json.dumps(payload).encode()
            try:
                self.send_response(code)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, str(v))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):   # the client timed out and left
                pass

    return Handler


def _openai_ok(step: Ok, model: str) -> dict:
    return {"id": "chatcmpl-test", "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": step.text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": step.tokens_in, "completion_tokens": step.tokens_out,
                      "total_tokens": step.tokens_in + step.tokens_out}}


def _gemini_ok(step: Ok, model: str) -> dict:
    parts = [{"text": "(thinking)", "thought": True}] if step.thoughts else []
    return {"candidates": [{"content": {"role": "model", "parts": parts + [{"text": step.text}]},
                            "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": step.tokens_in, "candidatesTokenCount": step.tokens_out,
                              "thoughtsTokenCount": step.thoughts,
                              "totalTokenCount": step.tokens_in + step.tokens_out + step.thoughts},
            "modelVersion": model}


_GOOGLE_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 429: "RESOURCE_EXHAUSTED",
                  500: "INTERNAL", 503: "UNAVAILABLE"}


def _error(step: Status, gemini: bool) -> dict:
    if gemini:
        return {"error": {"code": step.code, "message": step.message,
                          "status": _GOOGLE_STATUS.get(step.code, "UNKNOWN")}}
    return {"error": {"message": step.message, "type": "test_error", "param": None, "code": str(step.code)}}


# ---- configs pointed at a server, keys, a prompt: shared by the tests of tests/llm ----

OPENAI_KEY = "sk-test-0123456789abcdefSECRETopenai"
GEMINI_KEY = "AIza-test-0123456789SECRETgemini"
ENV = {"OPENAI_API_KEY": OPENAI_KEY, "GEMINI_API_KEY": GEMINI_KEY}
USER = [{"role": "user", "content": "write a kernel"}]


def openai_config(server: LLMServer, *models: str, **fields):
    from kevolve.llm.config import LLMConfig, ModelSpec
    base = dict(provider="openai", base_url=server.url + "/v1", timeout_s=5.0, max_retries=2, backoff_s=0.01,
                backoff_max_s=0.05, models=[ModelSpec(name=m) for m in models or ("gpt-4.1",)])
    return LLMConfig(**{**base, **fields})


def gemini_config(server: LLMServer, *models: str, **fields):
    from kevolve.llm.config import LLMConfig, ModelSpec
    base = dict(provider="gemini", base_url=server.url, timeout_s=5.0, max_retries=2, backoff_s=0.01,
                backoff_max_s=0.05, models=[ModelSpec(name=m) for m in models or ("gemini-2.5-pro",)])
    return LLMConfig(**{**base, **fields})
