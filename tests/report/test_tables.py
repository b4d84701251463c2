"""kevolve/report/tables.py: a correct kernel's table says so when a baseline is missing, so a speedup over eager
alone (torch.compile failed on the H200 in a seeded worker, and the search printed 13.7x "over the faster torch
baseline") is never read as one over torch.compile."""
from __future__ import annotations

from kevolve.judge.results import Evaluation, Measurement, Stats
from kevolve.report.tables import evaluation_report


def _ms(x: float) -> Stats:
    return Stats(median=x, p10=x, p90=x, n=5)


def _m(name: str, compile_ms: float | None, failure: str | None = None) -> Measurement:
    return Measurement(config=f"{name}/random/s0", shape=name, init="random", heldout=False, correct=True,
                       kernel=_ms(0.005), eager=_ms(0.13), compile=_ms(compile_ms) if compile_ms else None,
                       failure=failure)


def _ev(*ms: Measurement) -> Evaluation:
    return Evaluation(task="layernorm_fwd", target="cuda", abi="c", shapes="bench", compiled=True, correct=True,
                      measurements=ms)


def test_a_compile_baseline_missing_on_some_configurations_is_a_warning_with_its_reason():
    why = "compile: torch.compile failed: PermissionError: [Errno 13] Permission denied: '/tmp/kevolve-worker-x'"
    text = evaluation_report(_ev(_m("B=1", 0.0055), _m("B=8", None, why), _m("B=16", None, why)))
    assert f"note: {why}" in text
    assert "WARNING: 2 of 3 timed configurations lack a torch baseline" in text


def test_compile_failing_everywhere_is_a_warning_too():
    why = "compile: torch.compile failed: RuntimeError: no compiler"
    assert "WARNING: 2 of 2 timed" in evaluation_report(_ev(_m("B=1", None, why), _m("B=8", None, why)))


def test_no_warning_when_every_baseline_asked_for_was_timed():
    assert "WARNING" not in evaluation_report(_ev(_m("B=1", 0.0055), _m("B=8", 0.007)))
    assert "WARNING" not in evaluation_report(_ev(_m("B=1", None), _m("B=8", None)))   # baselines: [eager]
