"""An endpoint that keeps failing: its breaker (kevolve/llm/breaker.py) makes calls fail at once after
`llm.down_after` failed requests in a row, with the cause in a few words; a probe request goes every
`llm.probe_s`; a reply closes it. And a call's own deadline (`llm.call_timeout_s`). Through the real `openai` and
`google-genai` clients against the loopback servers."""
from __future__ import annotations

import socket

import pytest

from kevolve.llm import LLMError, make_provider
from kevolve.llm.breaker import Breaker, EndpointDown
from kevolve.llm.config import LLMConfig, ModelSpec
from llm_servers import ENV, USER, Hang, Ok, Status, gemini_config, openai_config


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def closed_port() -> int:
    """A port nothing listens on (bound, then closed): a connection to it is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_breaker_opens_after_failures_in_a_row_and_lets_one_probe_through_per_period():
    clock = Clock()
    b = Breaker(3, 10.0, clock)
    for _ in range(2):
        b.admit()
        b.failed("HTTP 500 (server error) at X")
    b.admit()
    b.succeeded()                                    # a reply: the count starts again
    for _ in range(3):
        b.admit()
        b.failed("connection refused at X")
    assert b.down
    with pytest.raises(EndpointDown, match=r"failed 3 requests in a row \(connection refused at X\)") as e:
        b.admit()
    assert e.value.cause == "connection refused at X"
    clock.now += 10.0
    b.admit()                                        # the probe
    with pytest.raises(EndpointDown):
        b.admit()                                    # only one per period
    b.failed("connection refused at X")
    clock.now += 9.9
    with pytest.raises(EndpointDown):
        b.admit()
    clock.now += 0.2
    b.admit()
    b.succeeded()
    assert not b.down
    b.admit()
    b.admit()


def test_a_long_retry_after_holds_the_probe_back():
    clock = Clock()
    b = Breaker(1, 5.0, clock)
    b.failed("HTTP 429 (rate limited) at X", retry_after_s=60.0)
    clock.now += 30
    with pytest.raises(EndpointDown):
        b.admit()
    clock.now += 30
    b.admit()


def test_a_refused_endpoint_fails_fast_once_down_naming_the_cause(sleeps):
    url = f"http://127.0.0.1:{closed_port()}/v1"
    cfg = LLMConfig(provider="openai", base_url=url, models=[ModelSpec("gpt-4.1")], max_retries=6, backoff_s=0.01,
                    down_after=3, probe_s=3600)
    llm = make_provider(cfg, env=ENV, sleep=sleeps)
    with pytest.raises(LLMError) as first:
        llm.complete(USER, model="gpt-4.1")          # 3 requests: then the endpoint is down, no more retries
    assert first.value.attempts == 3 and first.value.cause == f"connection refused at {url}"
    assert "the endpoint failed llm.down_after requests in a row" in str(first.value)
    assert len(sleeps) == 2
    with pytest.raises(LLMError, match="not sent: it is paused") as second:
        llm.complete(USER, model="gpt-4.1")
    assert second.value.attempts == 0 and second.value.cause == f"connection refused at {url}"
    assert len(sleeps) == 2                          # no back-off either


@pytest.mark.parametrize("step,cause", [
    (Status(500, "boom"), "HTTP 500 (server error) at {url}"),
    (Status(429, "slow down", {"retry-after": "0"}), "HTTP 429 (rate limited) at {url}"),
    (Status(404, "no such model"), "HTTP 404 (not found (model or URL?)) at {url}"),
    (Hang(5.0), "no reply within 0.3 s at {url}"),
])
def test_every_failure_has_a_short_cause_that_stays_the_same(server, sleeps, step, cause):
    server.then(*[step] * 10)
    cfg = openai_config(server, timeout_s=0.3, max_retries=1, down_after=100)
    llm = make_provider(cfg, env=ENV, sleep=sleeps)
    causes = set()
    for _ in range(2):
        with pytest.raises(LLMError) as e:
            llm.complete(USER, model="gpt-4.1")
        causes.add(e.value.cause)
    assert causes == {cause.format(url=server.url + "/v1")}


def test_a_probe_that_gets_a_reply_brings_the_endpoint_back(server, sleeps):
    server.then(Status(503), Status(503), Ok("back"))
    cfg = openai_config(server, max_retries=0, down_after=2, probe_s=0.2)
    llm = make_provider(cfg, env=ENV, sleep=sleeps)
    for _ in range(2):
        with pytest.raises(LLMError, match="HTTP 503"):
            llm.complete(USER, model="gpt-4.1")
    with pytest.raises(LLMError, match="not sent"):
        llm.complete(USER, model="gpt-4.1")
    assert len(server.requests) == 2
    import time
    time.sleep(0.25)
    assert llm.complete(USER, model="gpt-4.1").text == "back"       # the probe
    assert llm.complete(USER, model="gpt-4.1").text == "a reply"    # closed again
    assert len(server.requests) == 4


def test_gemini_endpoint_down_too(server, sleeps):
    server.then(*[Status(500)] * 5)
    llm = make_provider(gemini_config(server, max_retries=5, down_after=2, probe_s=3600), env=ENV, sleep=sleeps)
    with pytest.raises(LLMError) as e:
        llm.complete(USER, model="gemini-2.5-pro")
    assert e.value.attempts == 2 and e.value.cause == f"HTTP 500 (server error) at {server.url}"
    with pytest.raises(LLMError, match="not sent"):
        llm.complete(USER, model="gemini-2.5-pro")
    assert len(server.requests) == 2


def test_no_retry_starts_after_the_calls_deadline(server):
    server.then(*[Status(500)] * 10)
    waited = []
    cfg = openai_config(server, max_retries=9, backoff_s=1.0, backoff_max_s=1.0, call_timeout_s=2.5, down_after=100)
    llm = make_provider(cfg, env=ENV, sleep=lambda s: (waited.append(s), __import__("time").sleep(s)))
    with pytest.raises(LLMError, match=r"llm.call_timeout_s, ran out\) after \d request") as e:
        llm.complete(USER, model="gpt-4.1")
    # back-offs of 0.5-1 s (jitter): two to five requests, and the waits all ended before the deadline
    assert sum(waited) <= 2.5 and 2 <= e.value.attempts == len(server.requests) <= 5 < 10
