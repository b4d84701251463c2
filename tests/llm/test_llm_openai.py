"""The openai and local providers against a loopback server speaking the Chat Completions API, through the real
`openai` client: what is sent, what is read back, and the retry policy's behaviour on each failure."""
from __future__ import annotations

import pytest

from kevolve.llm import LLMError, make_provider
from kevolve.llm.config import ModelSpec
from llm_servers import ENV, OPENAI_KEY, USER, Hang, Ok, Status, openai_config


def test_good_reply_text_tokens_cost_and_request(server, sleeps):
    server.then(Ok(text="__global__ void k() {}", tokens_in=1000, tokens_out=500))
    llm = make_provider(openai_config(server, "gpt-4.1", max_output_tokens=1234), env=ENV, sleep=sleeps)
    r = llm.complete([{"role": "system", "content": "be fast"}] + USER, model="gpt-4.1", temperature=0.7)
    assert (r.text, r.model, r.provider, r.tokens_in, r.tokens_out) == (
        "__global__ void k() {}", "gpt-4.1", "openai", 1000, 500)
    assert r.cost_usd == pytest.approx((1000 * 2.0 + 500 * 8.0) / 1e6)     # kevolve/llm/prices.yaml: gpt-4.1
    assert not r.cached and r.attempts == 1 and r.finish_reason == "stop" and sleeps == []
    (req,) = server.requests
    assert req.path == "/v1/chat/completions"
    assert req.headers["authorization"] == f"Bearer {OPENAI_KEY}"
    assert req.body["model"] == "gpt-4.1" and req.body["temperature"] == 0.7
    assert req.body["max_completion_tokens"] == 1234 and "reasoning_effort" not in req.body
    assert req.body["messages"] == [{"role": "system", "content": "be fast"},
                                    {"role": "user", "content": "write a kernel"}]
    assert r.params == {"temperature": 0.7, "max_output_tokens": 1234}


@pytest.mark.parametrize("model", ["gpt-5", "gpt-5-mini-2025-08-07", "o3", "o4-mini"])
def test_reasoning_models_get_effort_and_no_temperature(server, model):
    llm = make_provider(openai_config(server, model), env=ENV)
    r = llm.complete(USER, model=model, temperature=0.7, reasoning_effort="high")
    body = server.requests[0].body
    assert body["reasoning_effort"] == "high" and "temperature" not in body
    assert r.params == {"reasoning_effort": "high", "max_output_tokens": 32768}


def test_reasoning_effort_null_is_not_sent(server):
    make_provider(openai_config(server, "gpt-5"), env=ENV).complete(USER, model="gpt-5", temperature=1.0)
    body = server.requests[0].body
    assert "reasoning_effort" not in body and "temperature" not in body


def test_chat_model_named_gpt5_takes_temperature(server):
    make_provider(openai_config(server, "gpt-5-chat-latest"), env=ENV).complete(
        USER, model="gpt-5-chat-latest", temperature=0.3, reasoning_effort="high")
    body = server.requests[0].body
    assert body["temperature"] == 0.3 and "reasoning_effort" not in body


def test_openai_base_url_from_environment(server):
    cfg = openai_config(server, base_url=None)
    llm = make_provider(cfg, env={**ENV, "OPENAI_BASE_URL": server.url + "/v1"})
    assert llm.complete(USER, model="gpt-4.1").text == "a reply"
    assert len(server.requests) == 1


def test_local_server_gets_max_tokens_and_a_dummy_key(server):
    cfg = openai_config(server, "Qwen/Qwen2.5-Coder-32B-Instruct", provider="local", max_output_tokens=99)
    r = make_provider(cfg, env={}).complete(USER, model="Qwen/Qwen2.5-Coder-32B-Instruct", temperature=0.6)
    req = server.requests[0]
    assert req.headers["authorization"] == "Bearer EMPTY"
    assert req.body["max_tokens"] == 99 and "max_completion_tokens" not in req.body and req.body["temperature"] == 0.6
    assert r.provider == "local" and r.cost_usd == 0


def test_local_reasoning_override_sends_effort(server):
    cfg = openai_config(server, provider="local", models=[ModelSpec(name="gpt-oss-120b", reasoning=True)])
    make_provider(cfg, env={}).complete(USER, model="gpt-oss-120b", temperature=0.6, reasoning_effort="low")
    assert server.requests[0].body["reasoning_effort"] == "low"


def test_429_with_retry_after_then_success(server, sleeps):
    server.then(Status(429, "rate limited", {"Retry-After": "3"}), Ok(text="second"))
    r = make_provider(openai_config(server), env=ENV, sleep=sleeps).complete(USER, model="gpt-4.1")
    assert r.text == "second" and r.attempts == 2 and len(server.requests) == 2
    assert sleeps == [pytest.approx(3.0)]          # the service's Retry-After, not our 0.01 s back-off


def test_500_then_success_backs_off_with_jitter(server, sleeps):
    server.then(Status(500), Status(503), Ok(text="third"))
    r = make_provider(openai_config(server, backoff_s=1.0, backoff_max_s=100.0), env=ENV, sleep=sleeps).complete(
        USER, model="gpt-4.1")
    assert r.text == "third" and r.attempts == 3
    assert 0.5 <= sleeps[0] <= 1.0 and 1.0 <= sleeps[1] <= 2.0     # base × 2^retry, equal jitter


def test_retries_exhausted_on_5xx(server, sleeps):
    server.then(*[Status(502)] * 5)
    with pytest.raises(LLMError) as e:
        make_provider(openai_config(server, max_retries=2), env=ENV, sleep=sleeps).complete(USER, model="gpt-4.1")
    assert e.value.retryable and e.value.status == 502 and e.value.attempts == 3
    assert len(server.requests) == 3 and len(sleeps) == 2


@pytest.mark.parametrize("code", [401, 403])
def test_auth_failure_is_not_retried_and_names_the_variable(server, sleeps, code):
    server.then(Status(code, "Incorrect API key provided"))
    with pytest.raises(LLMError) as e:
        make_provider(openai_config(server), env=ENV, sleep=sleeps).complete(USER, model="gpt-4.1")
    assert not e.value.retryable and e.value.status == code and e.value.attempts == 1
    assert "OPENAI_API_KEY" in str(e.value) and len(server.requests) == 1 and sleeps == []


def test_bad_request_is_not_retried(server, sleeps):
    server.then(Status(400, "Unsupported parameter: 'temperature'"))
    with pytest.raises(LLMError, match="Unsupported parameter") as e:
        make_provider(openai_config(server), env=ENV, sleep=sleeps).complete(USER, model="gpt-4.1")
    assert e.value.status == 400 and not e.value.retryable and len(server.requests) == 1


def test_hang_past_timeout_is_retried_then_fails(server, sleeps):
    server.then(Hang(), Hang(), Hang())
    cfg = openai_config(server, timeout_s=0.3, max_retries=2)
    with pytest.raises(LLMError, match="no reply within 0.3 s") as e:
        make_provider(cfg, env=ENV, sleep=sleeps).complete(USER, model="gpt-4.1")
    assert e.value.retryable and e.value.status is None and e.value.attempts == 3 and len(server.requests) == 3


def test_hang_then_success(server, sleeps):
    server.then(Hang(), Ok(text="late but fine"))
    r = make_provider(openai_config(server, timeout_s=0.3), env=ENV, sleep=sleeps).complete(USER, model="gpt-4.1")
    assert r.text == "late but fine" and r.attempts == 2


def test_connection_refused_is_retried(server, sleeps):
    url = server.url
    server.stop()
    cfg = openai_config(server, base_url=url + "/v1", max_retries=1)
    with pytest.raises(LLMError, match="connection") as e:
        make_provider(cfg, env=ENV, sleep=sleeps).complete(USER, model="gpt-4.1")
    assert e.value.retryable and e.value.attempts == 2
