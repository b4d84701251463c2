"""Fixtures for the LLM layer's tests: a scripted loopback server (stopped after each test), a recording sleep."""
from __future__ import annotations

import pytest

from llm_servers import LLMServer


@pytest.fixture
def server():
    """A started server; the test scripts it with .then(...)."""
    s = LLMServer()
    yield s
    s.stop()


@pytest.fixture
def sleeps():
    """A sleep that records its argument and returns at once: back-off is observed, not waited."""
    class Recorder(list):
        def __call__(self, seconds: float) -> None:
            self.append(seconds)
    return Recorder()
