"""kevolve/search/finish.py: the search's last judgement of its best (baselines interleaved) replaces the
search's numbers only when it timed every baseline the search did."""
from __future__ import annotations

from kevolve.judge.results import Evaluation, Measurement, Stats
from kevolve.search.finish import lost_baselines


def _ms(x: float) -> Stats:
    return Stats(median=x, p10=x, p90=x, n=5)


def _ev(compile_ms: list, failure: str | None = None) -> Evaluation:
    ms = tuple(Measurement(config=f"B={i}/random/s0", shape=f"B={i}", init="random", heldout=False, correct=True,
                           kernel=_ms(0.005), eager=_ms(0.13), compile=_ms(c) if c else None,
                           failure=failure if not c else None) for i, c in enumerate(compile_ms))
    return Evaluation(task="layernorm_fwd", target="cuda", abi="c", shapes="bench", compiled=True, correct=True,
                      measurements=ms)


def test_a_confirmation_without_the_compile_baseline_the_search_had_does_not_stand():
    why = "compile: torch.compile failed: PermissionError: [Errno 13] Permission denied: '/tmp/kevolve-worker-x'"
    searched = _ev([0.0056, 0.0075, 0.033]).to_json()
    lost = lost_baselines(searched, _ev([0.0056, None, None], why))
    assert lost and "without compile on 2 configuration(s)" in lost and "PermissionError" in lost
    assert "the numbers are the search's" in lost


def test_a_full_confirmation_or_a_search_without_compile_stands():
    assert lost_baselines(_ev([0.0056, 0.0075]).to_json(), _ev([0.0055, 0.0076])) is None
    assert lost_baselines(_ev([None, None]).to_json(), _ev([None, None])) is None     # baselines: [eager]
    assert lost_baselines(None, _ev([None])) is None
