"""Times no hardware delivers are rejections on every configuration (`judge.evaluator.impossible`), and a clock
scaled in the worker is caught by the canary (`judge.evaluator.canary`).

The attackers: cpu/slows_torch.cpp's walk past both static layers to CPython's PyRun_SimpleString, with the Python
it runs replaced: it rewrites the worker's timing session so that the kernel's own samples are divided as each round
returns them, the baselines' left alone. It computes correctly. On layernorm_tiny's small configurations, where the
outside clock's slack is larger than the whole kernel, nothing else sees it.
- `FORGER` divides by 1000 and reads each round's request: it leaves the canary's calls alone. The limit that stops it
  (a time under half of a native no-op's) is measured before the kernel loads and held by the evaluator.
- `SCALER` divides by 5 — a speedup a user would believe — in every round. The impossible limits cannot see it (its
  times are still above a no-op's); the canary can: its canary calls come back a fifth of the known addition slower.
On a GPU the same walk runs from a CUDA kernel's host code (issue 37's H200 kernel) and shortens its graph's replay,
the one sample of a round's calls: ÷1000 sparing the canary's rounds, ÷5 in every round.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from kevolve.judge import build as builder
from kevolve.judge import protocol
from kevolve.judge.evaluator import canary, impossible
from kevolve.judge.evaluator.harness import judge
from kevolve.judge.options import Options
from kevolve.judge.rounds import set_bytes
from kevolve.task import load_task
from reach_python import forger, judged

HERE = Path(__file__).resolve().parent
TINY = HERE.parent / "kernels" / "tasks" / "layernorm_tiny"
# the timing layer alone: the configurations a judgement draws from the domain (a layer of their own,
# tests/adversarial/test_domain_attacks.py) catch some of these kernels first, at correctness
TIMED = Options(target="cpu", shapes="small", baselines=("eager",), reps=5, budget_s=0.05, timeout=60, domain="off")


FORGER = forger(1000.0, spare=True)
SCALER = forger(5.0, spare=False)

pytestmark = pytest.mark.usefixtures("private_build_cache")   # tests/conftest.py


def _judged(source: str, options: Options = TIMED):
    return judged(source, TINY, options)


CANARIED = Options(**{**TIMED.__dict__, "reps": 20})   # 20 calls: enough to mark (`canary.PER_CALL_MIN`)


def test_a_kernel_that_divides_its_own_times_is_rejected_as_impossible():
    ev = _judged(FORGER)
    assert "PROBE pyrun=0" in ev.log, "the attack itself must work here, or this test proves nothing"
    assert not ev.correct and ev.stage == "timing", ev.failure
    assert "a native call that does nothing" in ev.failure, ev.failure


def test_without_the_limit_the_same_forgery_is_accepted(monkeypatch):
    """What the limit is for: with it off, nothing else in the judge rejects this forgery on these sizes."""
    monkeypatch.setattr(impossible, "verdict", lambda *a, **k: None)
    ev = _judged(FORGER)
    assert "PROBE pyrun=0" in ev.log
    assert ev.correct, ev.failure
    assert min(m.kernel.median for m in ev.measurements if m.kernel) < 0.001     # under a microsecond


def test_a_kernel_that_scales_its_times_by_a_fifth_is_caught_by_the_canary():
    ev = _judged(SCALER, CANARIED)
    assert "PROBE pyrun=0" in ev.log, "the attack itself must work here, or this test proves nothing"
    assert not ev.correct and ev.stage == "timing", ev.failure
    assert re.search(r"canary: the kernel's calls with [\d.]+ us of known work added .* scaled in the worker",
                     ev.failure), ev.failure


def test_without_the_canary_the_scaled_times_are_accepted(monkeypatch):
    """What the canary is for: without its rounds, a fifth of the kernel's time passes every other check here."""
    monkeypatch.setattr(canary, "plan", lambda *a, **k: None)
    ev = _judged(SCALER, CANARIED)
    assert "PROBE pyrun=0" in ev.log
    assert ev.correct, ev.failure


def test_the_honest_twin_is_accepted():
    ev = _judged((TINY / "seeds" / "cpu.cpp").read_text())
    assert ev.correct, ev.failure


GPU_TIMING = HERE.parent / "kernels" / "tasks" / "layernorm_gpu_timing"
ON_GPU = Options(target="cuda", shapes="short", baselines=("eager",), reps=30, timeout=60)


@pytest.mark.gpu
@pytest.mark.parametrize("divisor, spare, caught", [(1000.0, True, r"does nothing|no memory delivers|memory floor"),
                                                    (5.0, False, r"^canary: the kernel's calls with")],
                         ids=["forger-1000-spares-the-canary", "scaler-5"])
def test_on_gpu_forged_graph_times_are_rejected(divisor, spare, caught):
    import torch
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    ev = judged(forger(divisor, spare, cuda=True), GPU_TIMING, ON_GPU)
    assert "PROBE pyrun=0" in ev.log, "the attack itself must work here, or this test proves nothing"
    assert not ev.correct and ev.stage == "timing", ev.failure
    assert re.search(caught, ev.failure.split(": ", 1)[1]), ev.failure


# ---------------------------------------------------------------------- the rule itself
class _Worker:
    def __init__(self, samples):
        self.samples = samples

    def call(self, command, timeout):
        assert isinstance(command, protocol.Trivial)
        return protocol.TrivialTimes(samples=self.samples)


def test_the_trivial_call_is_its_fastest_sample_and_the_cpu_peak_is_a_multiple_of_the_copy():
    info = protocol.Started(device="cpu", bandwidth_gbs=10.0)
    limits = impossible.measure(_Worker([0.004, 0.002, 0.003]), info, "cpu")
    assert limits.trivial_ms == 0.002
    assert limits.peak_gbs == impossible.PEAK_OVER_COPY["cpu"] * 10.0


def test_cuda_reads_its_peak_from_the_properties_and_falls_back_to_the_copy():
    with_props = protocol.Started(device="H200", bandwidth_gbs=4200.0, peak_gbs=4800.0)
    assert impossible.measure(_Worker([]), with_props, "cuda") == impossible.Limits(
        trivial_ms=None, peak_gbs=4800.0, peak_from="the device's properties")
    without = protocol.Started(device="GPU", bandwidth_gbs=1000.0)
    assert impossible.measure(_Worker([]), without, "cuda").peak_gbs == 1000.0 * impossible.PEAK_OVER_COPY["cuda"]


def test_on_every_configuration_however_small():
    tiny = load_task(TINY)
    sizes = {"B": 5, "N": 64}                              # 2.8 KB of inputs: no 20 us minimum applies
    limits = impossible.Limits(trivial_ms=0.002, peak_gbs=40.0, peak_from="test")
    assert set_bytes(tiny, sizes, tiny.inputs) == 4 * (5 * 64 + 64 + 64)     # what the floor at peak reads
    assert impossible.verdict(limits, tiny, sizes, 0.0009) is not None           # under half the no-op
    assert impossible.verdict(limits, tiny, sizes, 0.0011) is None
    big = {"B": 4096, "N": 4096}                           # 64 MiB of inputs at 40 GB/s: at least 1.68 ms
    assert "input bytes" in impossible.verdict(limits, tiny, big, 1.5)
    assert impossible.verdict(limits, tiny, big, 1.8) is None
    assert impossible.verdict(impossible.Limits(), tiny, big, 1e-9) is None      # nothing measured: no rule


def test_the_trivial_call_is_refused_once_a_kernel_is_loaded():
    from kevolve.judge.worker.commands import Worker
    w = Worker()
    w.kernel = object()
    with pytest.raises(RuntimeError, match="before a kernel loads"):
        w.trivial(10)


@pytest.mark.gpu
def test_on_gpu_the_trivial_kernel_and_the_canary_cycle_are_measured_before_the_kernel_loads(monkeypatch):
    """CUDA: an empty kernel in the same kind of graph as a kernel's timed calls (flush, call) is the trivial
    call; one cycle of `torch.cuda._sleep` so timed is the canary's unit. Both measured, and the seed accepted
    with every rule on."""
    import torch
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    seen, real = [], impossible.measure
    monkeypatch.setattr(impossible, "measure", lambda *a, **k: seen.append(real(*a, **k)) or seen[-1])
    task = load_task(HERE.parent / "kernels" / "tasks" / "layernorm_gpu_timing")
    built = builder.build(task.seed_path("cuda").read_text(), "cuda")
    assert built.ok, built.error
    ev = judge(task, built.lib_path, Options(target="cuda", shapes="short", baselines=("eager",), reps=30, timeout=60))
    assert ev.correct, ev.failure
    limits = seen[-1]
    assert limits.trivial_ms and 1e-4 < limits.trivial_ms < 0.05, limits     # 0.1 to 50 us per call
    assert limits.cycle_ms and 1e-8 < limits.cycle_ms < 1e-5, limits        # a 100 MHz to 100 GHz clock
    assert limits.peak_from == "the device's properties" and limits.peak_gbs > 500, limits
