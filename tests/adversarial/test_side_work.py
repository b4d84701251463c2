"""Work moved out of the timed call into the harness's own steps is charged to the kernel: the outside clock's
side-work bound compares the kernel's probe (a round without its calls, in its own worker) with the same round
measured before the kernel loaded, in a worker no candidate code had run in (`timed.clean_probe`).

The attacker (`POISONER`, in our own words after issue 37's layernorm_bwd kernel that was accepted at 4.36x): the
walk of cpu/slows_torch.cpp past both static layers to CPython, with Python that wraps the harness's poison
function — each time the harness poisons the kernel's outputs for a timed call, torch computes the answer into
them (the task's torch baseline on that call's inputs) — and replaces the kernel's timed call with a spin of
20 us, above every impossible-time limit. Its correctness calls compute honestly, every timed call's outputs are
right, the canary sees an honest clock. The work is real, and it is done in the worker; only not inside the timed
interval. On `layernorm_heavy`, whose baseline repeats the operation, that work is many times a round's own.
Its probe rounds in its own worker poison, and so compute, all the same: against them (the under bound) the work
cancels out; against the clean probe it does not.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from kevolve.judge import build as builder
from kevolve.judge.evaluator import measure
from kevolve.judge.evaluator.harness import judge
from kevolve.judge.evaluator.reuse import Reuse
from kevolve.judge.options import Options
from kevolve.task import load_task
from reach_python import POISON, judged, with_python

HERE = Path(__file__).resolve().parent
HEAVY = HERE.parent / "kernels" / "tasks" / "layernorm_heavy"
# the timing layer alone: the configurations a judgement draws from the domain (a layer of their own,
# tests/adversarial/test_domain_attacks.py) catch some of these kernels first, at correctness
TIMED = Options(target="cpu", shapes="small", baselines=("eager",), reps=5, budget_s=5.0, timeout=60, domain="off")
POISONER = with_python(POISON)

pytestmark = pytest.mark.usefixtures("private_build_cache")   # tests/conftest.py


def _judged(source: str):
    return judged(source, HEAVY, TIMED)


def test_work_done_while_the_harness_poisons_is_charged_to_the_kernel():
    ev = _judged(POISONER)
    assert "POISONER armed" in ev.log, "the attack itself must work here, or this test proves nothing"
    assert not ev.correct and ev.stage == "timing", ev.failure
    assert "outside clock, side-work bound" in ev.failure and "the kernel" in ev.failure, ev.failure


@pytest.mark.slow
def test_a_clean_probe_reused_from_an_earlier_judgement_still_charges_it():
    """A search's evaluator measures a configuration's clean probe once and reuses it while its baseline times
    hold (`measure.clean_probes`): the poisoner judged after two honest kernels, on the second one's probe
    and measuring none of its own, is rejected all the same."""
    reuse, task = Reuse(TIMED, 1 << 30, 3600), load_task(HEAVY)
    honest = builder.build((HEAVY / "seeds" / "cpu.cpp").read_text(), "cpu").lib_path
    try:
        first, second = (judge(task, honest, TIMED, reuse=reuse) for _ in range(2))
        assert first.correct and second.correct, (first.failure, second.failure)
        assert "clean probe" in second.phases and reuse.clean_probes.entries     # timed alone: its probe is kept
        ev = judged(POISONER, HEAVY, TIMED, reuse)
    finally:
        reuse.close()
    assert "POISONER armed" in ev.log and "clean probe" not in ev.phases    # the second judgement's probe, reused
    assert not ev.correct and "outside clock, side-work bound" in ev.failure, ev.failure


@pytest.mark.slow
def test_measured_against_its_own_workers_probes_the_same_attack_is_accepted(monkeypatch):
    """What the clean probe is for: without it (the probes in the kernel's own worker only, as before), the same
    kernel is accepted, with a time of a few tens of microseconds against the baseline's hundreds of milliseconds."""
    monkeypatch.setattr(measure, "clean_probes", lambda *a, **k: None)
    ev = _judged(POISONER)
    assert "POISONER armed" in ev.log
    assert ev.correct, ev.failure
    m = ev.measurements[0]
    assert m.kernel.median < 0.001 * m.best_torch, (m.kernel, m.best_torch)


def test_the_honest_twin_is_accepted():
    ev = judge(load_task(HEAVY), builder.build((HEAVY / "seeds" / "cpu.cpp").read_text(), "cpu").lib_path, TIMED)
    assert ev.correct, ev.failure
