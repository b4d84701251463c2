"""The canary's statistic (`judge.evaluator.canary.shift`) on a busy host (issue 49): an honest kernel whose calls are
either clean or a time slice longer, in about equal shares, is not rejected however the slow calls fall between the
canary and the plain sets; a clock scaled by 1/k still is."""
from __future__ import annotations

import random

from kevolve.judge.evaluator import canary
from kevolve.judge.worker.timing import median

CANARY = canary.Canary(send=0.05, expect_ms=0.05)          # 50 us, the CPU's least canary
CLEAN, SLICE = 0.040, 2.0                                  # a 40 us call; a descheduled thread's time slice


def calls(clean: int, slow: int, added: float = 0.0) -> list[float]:
    return [CLEAN + added] * clean + [CLEAN + SLICE + added] * slow


def test_a_kernel_slowed_by_load_in_half_its_calls_is_not_rejected():
    plain, canaried = calls(14, 16), calls(6, 4, CANARY.expect_ms)      # more slow ones among the plain calls
    assert median(canaried) - median(plain) < 0                         # the medians' difference: a rejection
    failure, near = canary.verdict(plain, canaried, CANARY, "the kernel")
    assert failure is None and near is None, (failure, near)
    assert abs(canary.shift(canaried, plain) - CANARY.expect_ms) < 1e-9


def test_under_load_the_shift_rejects_scaled_clocks_and_seldom_an_honest_one():
    """Calls slowed by a time slice at random, each with the same chance (a fifth, half, four fifths of them), 30
    plain and 10 canary calls a configuration: the medians' difference rejected about a third of the honest
    configurations at even chances; the shift rejects almost none, and every clock scaled by 1/k, k > 2, where the
    honest one read the addition right. (Fixed seed: the counts are this draw's.)"""
    rng = random.Random(49)
    honest_rejected = medians_rejected = trials = 0
    for p_slow in (0.2, 0.5, 0.8):
        for _ in range(200):
            trials += 1
            plain = [CLEAN + (SLICE if rng.random() < p_slow else 0.0) for _ in range(30)]
            canaried = [CLEAN + CANARY.expect_ms + (SLICE if rng.random() < p_slow else 0.0) for _ in range(10)]
            medians_rejected += median(canaried) - median(plain) < canary.REJECT * CANARY.expect_ms
            honest, _ = canary.verdict(plain, canaried, CANARY, "the kernel")
            if honest:
                honest_rejected += 1
                continue
            if abs(canary.shift(canaried, plain) - CANARY.expect_ms) > 0.5 * CANARY.expect_ms:
                continue                 # the noise read the addition high: a small k would pass as it would honestly
            for k in (2.5, 5.0, 1000.0):
                forged, _ = canary.verdict([x / k for x in plain], [x / k for x in canaried], CANARY, "the kernel")
                assert forged and forged.startswith("canary:"), (p_slow, k)
    assert honest_rejected <= 0.02 * trials, (honest_rejected, trials)
    assert medians_rejected >= 5 * max(1, honest_rejected), (medians_rejected, honest_rejected)


def test_the_shift_of_like_samples_is_the_addition():
    rng = random.Random(7)
    plain = [0.1 + rng.random() * 0.01 for _ in range(40)]
    canaried = [0.1 + CANARY.expect_ms + rng.random() * 0.01 for _ in range(12)]
    assert abs(canary.shift(canaried, plain) - CANARY.expect_ms) < 0.005
    assert canary.shift([], plain) == 0.0


def test_the_canary_is_at_least_as_long_as_the_kernels_own_call():
    """A kernel ten times slower than torch got a canary a tenth of its calls, under their noise on a loaded host
    (issue 49's quick start: an honest 970 us call, a 100 us canary read 28.6 us): the kernel's own fastest correctness
    call lengthens it; its worker's word can only lengthen it, never shorten it below the baselines'."""
    assert canary.length(0.1, 0.97) == 0.97
    assert canary.length(0.1, 0.001) == 0.1                  # a kernel that says it is fast: the baselines' length
    assert canary.length(None, 0.5) == 0.5 and canary.length(None, None) is None
    assert canary.plan("cpu", canary.length(0.1, 0.97)).expect_ms == 0.97
