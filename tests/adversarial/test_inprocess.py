"""An attacker inside the worker: a kernel that reaches CPython by pointer arithmetic (no forbidden identifier,
no forbidden import, so neither static layer can see it) and rewrites torch in its own process.

What must hold however the worker's Python is rewritten: the baselines a speedup is measured against are timed in
the evaluator's clean baseline worker (`judge.evaluator.baseline_worker`, issue 49), which never loads candidate
code, so a kernel that slows torch in its own process slows nothing that is timed, and the evaluator's reused
baselines — what the next candidates are compared with — are that worker's.
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
# the timing layer alone: the configurations a judgement draws from the domain (a layer of their own,
# tests/adversarial/test_domain_attacks.py) catch some of these kernels first, at correctness
TIMED = Options(target="cpu", shapes="small", baselines=("eager",), reps=5, budget_s=0.05, timeout=60, domain="off")
SLOWED_MS = 20.0          # what the hostile kernel's patch adds to every eager call


pytestmark = pytest.mark.usefixtures("private_build_cache")   # tests/conftest.py


def eager_ms(ev) -> list[float]:
    return [m.eager.median for m in ev.measurements if m.kernel is not None and m.eager is not None]


def judged(task, source: str, reuse: Reuse):
    assert rules.check(source, "cpu").ok, "the attacker must get past the static rules"
    built = builder.build(source, "cpu")
    assert built.ok, built.error
    return judge(task, built.lib_path, TIMED, reuse=reuse)


def test_a_kernel_that_slows_torch_in_its_own_worker_gains_nothing():
    tiny = load_task(TINY)
    reuse = Reuse(TIMED, reference_bytes=1 << 28, baseline_refresh_s=3600)
    try:
        hostile = judged(tiny, (HERE / "cpu" / "slows_torch.cpp").read_text(), reuse)
        assert hostile.correct, hostile.failure
        assert "PROBE pyrun=0" in hostile.log, "the attack itself must work here, or this test proves nothing"
        slow = [ms for ms in eager_ms(hostile) if ms >= SLOWED_MS / 2]
        assert eager_ms(hostile) and not slow, f"eager timed slowed beside the kernel: {slow} ms"
        assert hostile.speedup_eager < 20, hostile.speedup_eager
        honest = judged(tiny, (TINY / "seeds" / "cpu.cpp").read_text(), reuse)
        assert honest.correct and honest.baselines_reused, honest.failure
        assert eager_ms(honest) and max(eager_ms(honest)) < SLOWED_MS / 2, eager_ms(honest)
    finally:
        reuse.close()
