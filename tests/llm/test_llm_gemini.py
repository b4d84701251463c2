"""The gemini provider against a loopback server speaking the Gemini generateContent REST API, through the real
`google-genai` client: what is sent (system instruction, generation config, thinking), what is read back, the
retry policy, and Vertex AI's path."""
from __future__ import annotations

import pytest
from google.oauth2.credentials import Credentials

from kevolve.llm import LLMConfigError, LLMError, make_provider
from kevolve.llm.config import VertexConfig
from llm_servers import ENV, GEMINI_KEY, USER, Hang, Ok, Status, gemini_config


def test_good_reply_text_tokens_cost_and_request(server, sleeps):
    server.then(Ok(text="__global__ void k() {}", tokens_in=1000, tokens_out=400, thoughts=100))
    cfg = gemini_config(server, "gemini-2.5-pro", thinking_budget=2048, max_output_tokens=4096)
    messages = [{"role": "system", "content": "be fast"}, {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "hello"}, {"role": "user", "content": "a kernel"}]
    r = make_provider(cfg, env=ENV, sleep=sleeps).complete(messages, model="gemini-2.5-pro", temperature=0.5)
    assert (r.text, r.provider, r.tokens_in, r.tokens_out) == ("__global__ void k() {}", "gemini", 1000, 500)
    assert r.cost_usd == pytest.approx((1000 * 1.25 + 500 * 10.0) / 1e6)   # thoughts billed as output
    assert r.finish_reason == "STOP" and r.attempts == 1 and not r.cached
    (req,) = server.requests
    assert req.path.endswith("/models/gemini-2.5-pro:generateContent")
    assert req.headers["x-goog-api-key"] == GEMINI_KEY
    assert req.body["systemInstruction"]["parts"] == [{"text": "be fast"}]
    assert [c["role"] for c in req.body["contents"]] == ["user", "model", "user"]
    gen = req.body["generationConfig"]
    assert gen["temperature"] == 0.5 and gen["maxOutputTokens"] == 4096
    thinking = gen["thinkingConfig"]
    assert (thinking.get("thinkingBudget") or thinking.get("thinking_budget")) == 2048
    assert r.params == {"temperature": 0.5, "thinking_budget": 2048, "max_output_tokens": 4096}


def test_gemini3_effort_becomes_thinking_level(server):
    cfg = gemini_config(server, "gemini-3-pro-preview", thinking_budget=2048)
    r = make_provider(cfg, env=ENV).complete(USER, model="gemini-3-pro-preview", temperature=1.0,
                                             reasoning_effort="low")
    thinking = server.requests[0].body["generationConfig"]["thinkingConfig"]
    assert (thinking.get("thinkingLevel") or thinking.get("thinking_level")) == "LOW"
    assert not {"thinkingBudget", "thinking_budget"} & set(thinking)
    assert r.params["thinking_level"] == "low"


def test_no_thinking_config_unless_configured(server):
    make_provider(gemini_config(server), env=ENV).complete(USER, model="gemini-2.5-pro", reasoning_effort="high")
    assert "thinkingConfig" not in server.requests[0].body["generationConfig"]


def test_google_api_key_is_accepted(server):
    make_provider(gemini_config(server), env={"GOOGLE_API_KEY": GEMINI_KEY}).complete(USER, model="gemini-2.5-pro")
    assert server.requests[0].headers["x-goog-api-key"] == GEMINI_KEY


def test_429_with_retry_after_then_success(server, sleeps):
    server.then(Status(429, "quota", {"Retry-After": "2"}), Ok(text="second"))
    r = make_provider(gemini_config(server), env=ENV, sleep=sleeps).complete(USER, model="gemini-2.5-pro")
    assert r.text == "second" and r.attempts == 2 and sleeps == [pytest.approx(2.0)]


def test_500_then_success(server, sleeps):
    server.then(Status(500), Ok(text="second"))
    r = make_provider(gemini_config(server), env=ENV, sleep=sleeps).complete(USER, model="gemini-2.5-pro")
    assert r.text == "second" and r.attempts == 2 and len(sleeps) == 1


@pytest.mark.parametrize("code,message", [(401, "unauthenticated"), (403, "permission denied"),
                                          (400, "API key not valid. Please pass a valid API key.")])
def test_key_refused_is_not_retried_and_names_the_variable(server, sleeps, code, message):
    server.then(Status(code, message))
    with pytest.raises(LLMError) as e:
        make_provider(gemini_config(server), env=ENV, sleep=sleeps).complete(USER, model="gemini-2.5-pro")
    assert not e.value.retryable and e.value.status == code and e.value.attempts == 1
    assert "GEMINI_API_KEY" in str(e.value) and len(server.requests) == 1


def test_hang_past_timeout_is_retried_then_fails(server, sleeps):
    server.then(Hang(), Hang(), Hang())
    with pytest.raises(LLMError, match="no reply within 0.3 s") as e:
        make_provider(gemini_config(server, timeout_s=0.3), env=ENV, sleep=sleeps).complete(
            USER, model="gemini-2.5-pro")
    assert e.value.retryable and e.value.attempts == 3 and len(server.requests) == 3


def test_vertex_path_and_bearer_token(server):
    cfg = gemini_config(server, vertex=VertexConfig(enabled=True, project="my-proj", location="us-central1"))
    llm = make_provider(cfg, env={}, vertex_credentials=Credentials(token="ya29.test-token"))
    assert llm.complete(USER, model="gemini-2.5-pro").text == "a reply"
    req = server.requests[0]
    assert "/projects/my-proj/locations/us-central1/publishers/google/models/gemini-2.5-pro:generateContent" in req.path
    assert req.headers["authorization"] == "Bearer ya29.test-token" and "x-goog-api-key" not in req.headers


def test_vertex_without_project_names_what_to_set(server):
    cfg = gemini_config(server, vertex=VertexConfig(enabled=True, project=None))
    with pytest.raises(LLMConfigError, match="GOOGLE_CLOUD_PROJECT"):
        make_provider(cfg, env={}, vertex_credentials=Credentials(token="t"))
