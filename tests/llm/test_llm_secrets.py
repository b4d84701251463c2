"""Keys: a provider without its key stops at start naming the variable; a key never appears in a repr, a log line,
an exception, a cache row or a Reply — even when the service echoes it back in an error."""
from __future__ import annotations

import logging
import pickle

import pytest

from kevolve.llm import LLMConfigError, LLMError, Pool, make_provider
from kevolve.llm.config import LLMConfig, ModelSpec
from kevolve.llm.keys import Secret
from llm_servers import ENV, GEMINI_KEY, OPENAI_KEY, USER, Ok, Status, gemini_config, openai_config


@pytest.mark.parametrize("provider,variable", [("openai", "OPENAI_API_KEY"), ("gemini", "GEMINI_API_KEY")])
def test_missing_key_stops_at_start_naming_the_variable(provider, variable):
    cfg = LLMConfig(provider=provider, models=[ModelSpec(name="m")])
    with pytest.raises(LLMConfigError, match=variable):
        make_provider(cfg, env={"SOME_OTHER": "x"})


def test_missing_key_of_one_ensemble_member_stops_at_start():
    cfg = LLMConfig(provider="openai",
                    models=[ModelSpec(name="gpt-5"), ModelSpec(name="gemini-2.5-pro", provider="gemini")])
    with pytest.raises(LLMConfigError, match="GEMINI_API_KEY or GOOGLE_API_KEY"):
        make_provider(cfg, env={"OPENAI_API_KEY": OPENAI_KEY})


def test_blank_key_counts_as_missing():
    with pytest.raises(LLMConfigError, match="OPENAI_API_KEY"):
        make_provider(LLMConfig(provider="openai", models=[ModelSpec(name="gpt-5")]), env={"OPENAI_API_KEY": "  "})


def test_secret_never_prints_and_is_not_pickled():
    s = Secret(OPENAI_KEY)
    assert OPENAI_KEY not in repr(s) + str(s) + f"{s}" and s.reveal() == OPENAI_KEY
    with pytest.raises(TypeError):
        pickle.dumps(s)
    assert s.scrub(f"bad key {OPENAI_KEY[:20]}... and {OPENAI_KEY}") == "bad key ***... and ***"


@pytest.mark.parametrize("config,key", [(openai_config, OPENAI_KEY), (gemini_config, GEMINI_KEY)])
def test_key_never_leaks(server, tmp_path, caplog, sleeps, config, key):
    echo = f"Incorrect API key provided: {key}. You can find your API key at …"
    server.then(Ok(text="fine"), Status(429, echo), Ok(text="after retry"), Status(401, echo), Status(400, echo))
    caplog.set_level(logging.DEBUG)
    llm = make_provider(config(server), env=ENV, run_dir=tmp_path, sleep=sleeps)
    model = next(iter(llm.routes))
    texts = []
    with Pool(llm) as pool:
        texts.append(repr(pool))
        replies = [pool.submit(USER, seed=0).result(timeout=30), pool.submit(USER, seed=1).result(timeout=30)]
        for seed in (2, 3):
            with pytest.raises(LLMError) as e:
                pool.submit(USER, seed=seed).result(timeout=30)
            texts += [str(e.value), repr(e.value), repr(e.value.__cause__), repr(e.value.__context__),
                      str(pickle.loads(pickle.dumps(e.value)))]
    texts += [repr(llm), repr(llm.routes), repr(llm.routes[model].endpoint), repr(llm.routes[model].endpoint.adapter)]
    texts += [repr(r) for r in replies] + [r.text for r in replies]
    texts += [rec.getMessage() for rec in caplog.records] + [caplog.text]
    blob = "\n".join(texts).encode() + b"".join(p.read_bytes() for p in tmp_path.iterdir())
    assert [r.text for r in replies] == ["fine", "after retry"]
    assert key.encode() not in blob and key[:20].encode() not in blob
    assert "***" in "\n".join(texts)                      # the echo was there, scrubbed
