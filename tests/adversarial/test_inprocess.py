"""An attacker inside the worker: a kernel that reaches CPython by pointer arithmetic (no forbidden identifier,
no forbidden import, so neither static layer can see it) and rewrites torch in its own process.

What must hold however the worker's Python is rewritten: a kernel that slows torch beside its own calls is
rejected (its worker's rounds without its calls cost more than the same rounds before it loaded: the outside
clock's side-work bound); were it not, the baselines a speedup is measured against would still be the ones timed
before the kernel loaded (`torch_baselines.time_alone`), so it would gain nothing; and the evaluator's reused
baselines — what the next candidates are compared with — come from those clean times only.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from kevolve.judge import build as builder
from kevolve.judge.static import rules
from kevolve.judge.evaluator.harness import judge
from kevolve.judge.options import Options
from kevolve.judge.evaluator.reuse import Reuse
from kevolve.task import load_task

HERE = Path(__file__).resolve().parent
TINY = HERE.parent / "kernels" / "tasks" / "layernorm_tiny"
TIMED = Options(target="cpu", shapes="small", baselines=("eager",), reps=5, budget_s=0.05, timeout=60)
SLOWED_MS = 20.0          # what the hostile kernel's patch adds to every eager call


pytestmark = pytest.mark.usefixtures("private_build_cache")   # tests/conftest.py


def eager_ms(ev) -> list[float]:
    return [m.eager.median for m in ev.measurements if m.kernel is not None and m.eager is not None]


def judged(task, source: str, reuse: Reuse):
    assert rules.check(source, "cpu").ok, "the attacker must get past the static rules"
    built = builder.build(source, "cpu")
    assert built.ok, built.error
    return judge(task, built.lib_path, TIMED, reuse=reuse)


def test_a_kernel_that_slows_torch_in_its_own_worker_is_rejected_and_the_next_is_judged_on_clean_times():
    """Its probe rounds in its own worker run the slowed eager calls, the same rounds before it loaded did not: the
    outside clock's side-work bound names it. The evaluator's reused baselines are the clean ones all the same."""
    tiny = load_task(TINY)
    reuse = Reuse(TIMED, reference_bytes=1 << 28, baseline_refresh_s=3600)
    try:
        hostile = judged(tiny, (HERE / "cpu" / "slows_torch.cpp").read_text(), reuse)
        assert "PROBE pyrun=0" in hostile.log, "the attack itself must work here, or this test proves nothing"
        assert not hostile.correct and "outside clock, side-work bound" in hostile.failure, hostile.failure
        honest = judged(tiny, (TINY / "seeds" / "cpu.cpp").read_text(), reuse)
        assert honest.correct and honest.baselines_reused, honest.failure
        assert eager_ms(honest) and max(eager_ms(honest)) < SLOWED_MS / 2, eager_ms(honest)
    finally:
        reuse.close()


def test_without_the_side_work_bound_it_still_gains_nothing(monkeypatch):
    """The older layer, alone: each baseline counts at the faster of its time before the kernel loaded and beside
    it, so the slowed eager calls never reach the speedup."""
    from kevolve.judge.evaluator import outside
    monkeypatch.setattr(outside, "_side_work", lambda *a, **k: None)
    tiny = load_task(TINY)
    reuse = Reuse(TIMED, reference_bytes=1 << 28, baseline_refresh_s=3600)
    try:
        hostile = judged(tiny, (HERE / "cpu" / "slows_torch.cpp").read_text(), reuse)
        assert hostile.correct, hostile.failure
        assert "PROBE pyrun=0" in hostile.log, "the attack itself must work here, or this test proves nothing"
        slow = [ms for ms in eager_ms(hostile) if ms >= SLOWED_MS / 2]
        assert eager_ms(hostile) and not slow, f"eager timed slowed beside the kernel: {slow} ms"
        assert hostile.speedup_eager < 20, hostile.speedup_eager
    finally:
        reuse.close()
