"""The response cache and replay: a hit makes no request and costs nothing; a run replays without a server; a
prompt the run never asked is a clear error, not a network call."""
from __future__ import annotations

import dataclasses

import pytest

from kevolve.llm import LLMConfigError, ReplayMiss, make_provider
from kevolve.llm.cache import Cache
from kevolve.llm.config import CACHE_FILE
from llm_servers import ENV, USER, Ok, gemini_config, openai_config

OTHER = [{"role": "user", "content": "write another kernel"}]


def test_cache_hit_is_free_and_makes_no_request(server, tmp_path):
    server.then(Ok(text="first", tokens_in=100, tokens_out=100))
    llm = make_provider(openai_config(server), env=ENV, run_dir=tmp_path)
    first = llm.complete(USER, model="gpt-4.1", temperature=0.5, seed=1)
    again = llm.complete(USER, model="gpt-4.1", temperature=0.5, seed=1)
    assert len(server.requests) == 1
    assert not first.cached and first.cost_usd > 0
    assert again.cached and again.cost_usd == 0 and again.attempts == 0
    assert (again.text, again.tokens_in, again.tokens_out, again.params) == ("first", 100, 100, first.params)
    assert llm.spent_usd == pytest.approx(first.cost_usd)


@pytest.mark.parametrize("change", [dict(seed=2), dict(temperature=0.9), dict(messages=OTHER)])
def test_another_seed_params_or_prompt_is_another_request(server, tmp_path, change):
    llm = make_provider(openai_config(server), env=ENV, run_dir=tmp_path)
    call = dict(messages=USER, model="gpt-4.1", temperature=0.5, seed=1)
    llm.complete(**call)
    assert not llm.complete(**{**call, **change}).cached
    assert len(server.requests) == 2


def test_cache_off_always_asks(server, tmp_path):
    llm = make_provider(openai_config(server, cache=False), env=ENV, run_dir=tmp_path)
    for _ in range(2):
        llm.complete(USER, model="gpt-4.1", seed=1)
    assert len(server.requests) == 2 and not (tmp_path / CACHE_FILE).exists()


def test_cache_survives_a_new_provider(server, tmp_path):
    make_provider(openai_config(server), env=ENV, run_dir=tmp_path).sample(USER, seed=3)
    r = make_provider(openai_config(server), env=ENV, run_dir=tmp_path).sample(USER, seed=3)
    assert r.cached and len(server.requests) == 1


@pytest.mark.parametrize("config", [openai_config, gemini_config])
def test_replay_without_a_server_and_without_keys(server, tmp_path, config):
    run, rerun = tmp_path / "run", tmp_path / "rerun"
    server.then(*[Ok(text=f"reply {i}") for i in range(4)])
    live = make_provider(config(server), env=ENV, run_dir=run)
    originals = [live.sample(USER, seed=s) for s in range(4)]
    server.stop()
    replayed = make_provider(config(server, replay=str(run)), env={}, run_dir=rerun)
    again = [replayed.sample(USER, seed=s) for s in range(4)]
    assert [r.text for r in again] == [r.text for r in originals]
    assert all(r.cached and r.cost_usd == 0 for r in again)
    assert [dataclasses.replace(r, cached=False, cost_usd=0, attempts=0) for r in again] == \
           [dataclasses.replace(r, cost_usd=0, attempts=0) for r in originals]
    # the replayed run keeps its own cache, so it can be replayed in turn
    assert len(Cache.in_run(rerun)) == 4


def test_replay_miss_is_a_clear_error(server, tmp_path):
    make_provider(openai_config(server), env=ENV, run_dir=tmp_path).sample(USER, seed=0)
    replayed = make_provider(openai_config(server, replay=str(tmp_path)), env={})
    with pytest.raises(ReplayMiss,
                       match=r"no cached reply for this prompt in .*: replay needs the same config and seed"):
        replayed.sample(USER, seed=1)
    assert len(server.requests) == 1


def test_replay_of_a_directory_without_cache_stops_at_start(tmp_path, server):
    with pytest.raises(LLMConfigError, match="'llm.replay'"):
        make_provider(openai_config(server, replay=str(tmp_path)), env={})
