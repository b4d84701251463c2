"""The LLM as the search sees it (kevolve/search/llm_health.py): counts per provider/model with causes, the pause
after `down_after` failed calls in a row and its probes, what the progress line and the summary say."""
from __future__ import annotations

from kevolve.search.llm_health import LLMHealth

REFUSED = "connection refused at http://127.0.0.1:9/v1"


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_failures_are_counted_per_provider_and_model_with_their_causes():
    h = LLMHealth(100, 60.0, {"qwen": "local", "gpt-5": "openai"})
    assert h.line() == ""
    for _ in range(8):
        h.called("qwen", REFUSED)
    h.called("gpt-5", None)
    h.called("gpt-5", "HTTP 429 (rate limited) at https://api.openai.com/v1")
    assert h.line() == (f"LLM: 9 of 10 calls failed: {REFUSED} (8), "
                        "HTTP 429 (rate limited) at https://api.openai.com/v1 (1)")
    s = h.summary()
    assert s["models"] == {"local/qwen": {"calls": 8, "failed": 8, "causes": {REFUSED: 8}},
                           "openai/gpt-5": {"calls": 2, "failed": 1,
                                            "causes": {"HTTP 429 (rate limited) at https://api.openai.com/v1": 1}}}
    assert (s["calls"], s["failed"], s["paused"], s["ended"]) == (10, 9, False, False)


def test_only_failures_in_a_row_pause_the_llm_and_a_reply_ends_the_pause():
    clock = Clock()
    h = LLMHealth(3, 60.0, {"qwen": "local"}, clock)
    h.called("qwen", REFUSED)
    h.called("qwen", REFUSED)
    assert h.called("qwen", None) is None and not h.paused          # a reply: the count starts again
    h.called("qwen", REFUSED)
    h.called("qwen", REFUSED)
    notice = h.called("qwen", REFUSED)
    assert h.paused and notice == h.notices[-1]
    assert notice.startswith(f"LLM: 3 calls in a row failed ({REFUSED}); going on with knob mutation")
    assert h.line().endswith("paused, knob mutation only, next try in 60 s")
    assert h.called("qwen", REFUSED) is None and len(h.notices) == 1    # said once
    back = h.called("qwen", None)
    assert not h.paused and back.startswith("LLM: back") and h.notices == [notice, back]


def test_while_paused_one_llm_proposal_goes_per_probe_period():
    clock = Clock()
    h = LLMHealth(1, 30.0, {}, clock)
    assert h.allows()
    h.called("m", REFUSED)
    assert not h.allows()
    clock.now = 29.9
    assert not h.allows()
    clock.now = 30.0
    assert h.allows()
    h.probing()                                  # the probe was sent: the next in 30 s
    assert not h.allows()
    clock.now = 60.0
    assert h.allows()
