"""The canary: a duration the evaluator knows, hidden inside the kernel's own timed calls, to check the clock the
worker reports with.

Every time a verdict uses is measured in the worker, where the kernel's native code runs; a kernel that reached the
worker's Python (`tests/adversarial/cpu/slows_torch.cpp` shows a walk past both static layers) can rewrite the
samples of its own calls as they are taken — divide them, as the forgers of issue 37 did, by 5 on the CPU and by
thousands on an H200. The outside clock (`judge.evaluator.outside`) sees such a forgery only where the forged share
exceeds the noise of a round's harness work, which on small configurations is many times the kernel's whole time.

So the evaluator draws in secret which timed calls of each checked kernel carry a *canary* (`positions`: on the CPU a
quarter of the counted calls, spread over the rounds; on CUDA, where a graph's replay is one sample, a few extra
rounds), and tells the worker only in that round's request. A call that carries it has, inside its timed interval
and just after it, an addition of known length: on the CPU a spin of
`expect_ms` on the worker's monotonic clock; on CUDA `torch.cuda._sleep` of a number of cycles on the call's
stream (in its own graph), whose length per cycle the evaluator had measured in the same kind of graph before the
kernel loaded, in a worker no candidate code had run in (`Worker.trivial` → `impossible.Limits.cycle_ms`). An honest
clock reports canary calls about `expect_ms` slower than plain ones; a clock scaled by 1/k reports them `expect_ms`/k
slower. Their difference (`shift`: the median of every pairwise difference) under `REJECT` × `expect_ms` is a
rejection that names it; under `NEAR` ×, the
configuration is timed again (`measure.noisy_bound`). Canary calls are verified like every call, and never counted in
the kernel's samples; extra canary rounds are not counted by the outside clock's bounds, and in a counted round the
canary's known time is part of the kernel's share (`timed.time_config`).

What it stops: any forgery that shrinks the kernel's reported samples by a factor over 2 without reading which
calls carry the canary — on every configuration with enough calls to mark (`positions`), however fast (the canary
is as long as the slowest baseline's call). What remains: a forger that reads the round's request in the worker and
leaves the canary's calls alone; one that subtracts a constant from every sample (the difference survives; against
that, the impossible times of `judge.evaluator.impossible` and the outside clock remain); a factor under 2 (at most
2× claimed falsely, and between 1.33 and 2 a second timing is asked for first).
"""
from __future__ import annotations

import secrets
from dataclasses import dataclass

from kevolve.judge.worker.timing import median

SHARE = 1.0                                   # the canary lasts this share of the slowest baseline's call ...
MIN_MS = {"cpu": 0.05, "cuda": 0.005}         # ... at least this (ms)
MAX_MS = {"cpu": 20.0, "cuda": 2.0}           # ... at most this
UNKNOWN_MS = {"cpu": 0.1, "cuda": 0.01}       # no baseline's time known yet
REJECT, NEAR = 0.5, 0.75                      # of `expect_ms`: the reported difference must reach these
SHARE_OF_CALLS = 0.25                         # CPU: this share of the counted calls carry the canary ...
PER_CALL_MIN = 4                              # ... at least this many (fewer: no canary); on CUDA, extra rounds:
EXTRA = 3                                     # one extra canary round per this many counted rounds, at least one


@dataclass(frozen=True)
class Canary:
    """One configuration's canary: `send` is what the session adds inside a canary round's checked calls (ms on
    the CPU, sleep cycles on CUDA: `protocol.TimeSetup.canary`), `expect_ms` what that adds to a call's time."""
    send: float
    expect_ms: float


def length(baseline_ms: float | None, kernel_ms: float | None) -> float | None:
    """What the canary's length is planned from: the slowest baseline's call, or the kernel's own fastest correctness
    call where that is longer (issue 49: on a loaded host a kernel ten times slower than torch had a canary a tenth of
    its calls, under their noise: an honest one was rejected). The kernel's time is its worker's word, which can only
    make the canary longer than the baselines' — never shorter, so a forger gains nothing by lying about it."""
    known = [v for v in (baseline_ms, kernel_ms) if v is not None and v > 0]
    return max(known) if known else None


def plan(target: str, baseline_ms: float | None, cycle_ms: float | None = None) -> Canary | None:
    """The canary for a configuration whose slowest baseline takes `baseline_ms` per call; None on CUDA without a
    measured cycle (`cycle_ms`: then no canary rounds are run)."""
    want = UNKNOWN_MS[target] if not baseline_ms else min(MAX_MS[target], max(MIN_MS[target], SHARE * baseline_ms))
    if target != "cuda":
        return Canary(send=want, expect_ms=want)
    if not cycle_ms:
        return None
    cycles = int(want / cycle_ms)
    return Canary(send=float(cycles), expect_ms=cycles * cycle_ms)


def positions(rounds: int, calls: int, cuda: bool) -> tuple[int, dict[int, tuple[int, ...]], set[int]]:
    """Where the canary goes, drawn by the evaluator's secret random source (the worker learns each round's part in
    that round's request): all rounds to run, the calls of each round that carry it, and the rounds that are
    extra (never counted). On the CPU a random `SHARE_OF_CALLS` of the counted rounds' calls, so that canary and
    plain calls share the same moments of the machine's load — with fewer than 2 × `PER_CALL_MIN` counted calls, none
    (a canary round compared with other rounds was wrong by more than its length: a seed's calls vary from round to
    round); on CUDA (a graph's replay is one sample of all its calls, stable from round to round) extra rounds whose
    every call carries it."""
    rng = secrets.SystemRandom()
    if not cuda and rounds * calls < 2 * PER_CALL_MIN:      # too few calls to mark (the largest configurations,
        return rounds, {}, set()                             # where the outside clock is decisive): no canary
    if not cuda:
        cells = rng.sample(range(rounds * calls), max(PER_CALL_MIN, int(rounds * calls * SHARE_OF_CALLS)))
        marks: dict[int, list[int]] = {}
        for cell in cells:
            marks.setdefault(cell // calls, []).append(cell % calls)
        return rounds, {r: tuple(sorted(v)) for r, v in marks.items()}, set()
    extra = max(1, rounds // EXTRA)
    total = rounds + extra
    chosen = set(rng.sample(range(total), extra))
    return total, {r: tuple(range(calls)) for r in chosen}, chosen


def shift(canaried: list[float], plain: list[float]) -> float:
    """How much slower the canary calls were reported than the plain ones: the Hodges–Lehmann estimate, the median of
    every (canary − plain) difference. A difference of medians, used before issue 49, flips on a loaded host: when a
    kernel's calls are either clean or a time slice longer (an OpenMP team with one thread descheduled) in about equal
    shares, each set's median falls on either side of the gap at random, and an honest kernel's canary read under half
    its addition (rejected in 1 of 3 judgements on a busy 2-core host). The pairwise median rests on the pairs of like
    calls, which are at least half of all pairs whatever the share of slow ones. It measures a clock scaled by 1/k as
    well as the medians did: every difference shrinks by k, and so does their median."""
    diffs = sorted(c - p for c in canaried for p in plain)
    n = len(diffs)
    return (diffs[(n - 1) // 2] + diffs[n // 2]) / 2 if n else 0.0


def verdict(plain: list[float], canaried: list[float], canary: Canary, who: str) -> tuple[str | None, str | None]:
    """(failure, near) for one checked kernel: its per-call ms in plain and in canary rounds (`shift`)."""
    if not plain or not canaried:
        return None, None
    seen = shift(canaried, plain)
    said = (f"canary: {who}'s calls with {canary.expect_ms * 1e3:.1f} us of known work added inside their timed "
            f"interval were reported {seen * 1e3:.1f} us slower than its plain calls (medians "
            f"{median(canaried) * 1e3:.1f} against {median(plain) * 1e3:.1f} us)")
    if seen < REJECT * canary.expect_ms:
        return said + " — the clock it was timed with reports a fraction of what passed: times scaled in the worker", \
            None
    if seen < NEAR * canary.expect_ms:
        return None, said
    return None, None
