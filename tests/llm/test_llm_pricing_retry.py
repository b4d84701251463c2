"""Pricing from token counts and the price table; the retry policy's schedule and its reading of Retry-After."""
from __future__ import annotations

import email.utils
import logging
import random
import time

import pytest

from kevolve.llm.config import Price
from kevolve.llm.pricing import Pricer, load_table
from kevolve.llm.retry import RetryPolicy, retry_after


def test_every_price_in_the_table_is_readable():
    table = load_table()
    assert {"gpt-5", "gpt-5-mini", "o3", "gemini-2.5-pro", "gemini-2.5-flash"} <= set(table)
    assert all(p.input > 0 and p.output > 0 for p in table.values())


@pytest.mark.parametrize("model,tin,tout,usd", [
    ("gpt-5", 1_000_000, 1_000_000, 11.25),
    ("gpt-5-2025-08-07", 1_000_000, 0, 1.25),               # a dated snapshot: its base price
    ("models/gemini-2.5-flash", 0, 1_000_000, 2.50),
    ("gemini-2.5-pro", 100_000, 10_000, 0.125 + 0.1),
    ("gemini-2.5-pro", 300_000, 10_000, 0.75 + 0.15),       # long-context tier
])
def test_cost(model, tin, tout, usd):
    assert Pricer().cost(model, tin, tout) == pytest.approx(usd)


def test_unknown_model_costs_nothing_and_warns_once(caplog):
    caplog.set_level(logging.WARNING)
    p = Pricer()
    assert p.cost("mystery-model-x", 10, 10) == p.cost("mystery-model-x", 10, 10) == 0
    assert sum("mystery-model-x" in r.getMessage() for r in caplog.records) == 1


def test_a_price_in_the_config_wins():
    p = Pricer({"gpt-5": Price(input=2.0, output=20.0), "mine": Price(input=1.0, output=1.0)})
    assert p.cost("gpt-5", 1_000_000, 0) == 2.0 and p.cost("mine", 500_000, 500_000) == 1.0


def test_local_models_are_free_without_a_warning(caplog):
    assert Pricer().cost("Qwen/Qwen3-32B", 10**6, 10**6, provider="local") == 0 and not caplog.records


def test_backoff_doubles_with_jitter_up_to_the_cap():
    policy, rng = RetryPolicy(max_retries=8, backoff_s=1.0, backoff_max_s=10.0), random.Random(0)
    for retry, cap in enumerate([1, 2, 4, 8, 10, 10]):
        delays = [policy.delay(retry, rng) for _ in range(200)]
        assert cap / 2 <= min(delays) and max(delays) <= cap and len(set(delays)) > 100


def test_retry_after_wins_when_longer():
    policy = RetryPolicy(backoff_s=1.0, backoff_max_s=10.0)
    assert policy.delay(0, random.Random(0), retry_after_s=30.0) == 30.0
    assert policy.delay(3, random.Random(0), retry_after_s=0.1) >= 4.0
    assert policy.delay(0, random.Random(0), retry_after_s=1e9) == policy.retry_after_max_s


@pytest.mark.parametrize("headers,seconds", [
    ({"retry-after": "7"}, 7.0), ({"retry-after": "1.5"}, 1.5), ({"retry-after-ms": "250"}, 0.25),
    ({"retry-after": "soon"}, None), ({"retry-after": "inf"}, None), ({"retry-after": "-3"}, 0.0), ({}, None),
    (None, None),
])
def test_retry_after_header(headers, seconds):
    assert retry_after(headers) == seconds


def test_retry_after_http_date():
    when = email.utils.formatdate(time.time() + 20, usegmt=True)
    assert 15 < retry_after({"retry-after": when}) <= 21
