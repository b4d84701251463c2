"""How many LLM proposals a search keeps in flight: enough that a judged candidate is always waiting for every
evaluator, sized from the latencies this run measures.

An evaluator judges a candidate in J seconds; an LLM proposal returns after L seconds with Y new candidates on
average (0 for a reply without a kernel or a duplicate, K for a meta proposal). With N proposals in flight, LLM
children arrive at N × Y / L a second and evaluators take E / J a second, so

    N = ceil(HEADROOM × E × L / (J × Y)),   kept within [least, most]

e.g. 8 GPUs judging in 4 s, replies taking 60 s with one child each: 8 × 60 / 4 = 120, × 1.25 = 150.

`start(...)` is that formula at the priors (before anything is measured); the plan resolves it once, with the bounds
(`search.llm_calls` set: least = most = it, nothing adapts; unset: 1 … `llm.concurrency` × endpoints, the most
requests the endpoints take at once). `Pacer` then measures: each LLM proposal's latency from the driver's
submission to its return (retries, back-off and queueing included) and the new candidates it gave, and each
judgement's seconds, over the last `WINDOW` of each, and moves its `target` when the formula's value leaves it by
a tenth or more, or reaches a bound (so a large target does not flutter by one). Guarantees: plain arithmetic, no I/O;
`least ≤ target ≤ most` always; a proposal with no candidates counts as `MIN_YIELD` of one, so a run of bad replies
raises the target without dividing by zero. Not guaranteed: that the evaluators are busy when `most` is below the
formula's value (`capped` says so; raise `llm.concurrency` if the provider's rate limit allows, or add models on other
endpoints).

Builds are paced the same way (`Builds`): an evaluator takes a candidate every J seconds and a build takes B, so
E × B / J builds must run at once for the evaluators never to wait on nvcc — `builds_wanted`, within the builders
the plan gives. The driver keeps that many more candidates in flight than its base bound, once it has measured
both (`in_flight`; docs/decisions/search.md).
"""
from __future__ import annotations

import math
from collections import deque

HEADROOM = 1.25              # latencies vary: a quarter more calls than the mean says
WINDOW = 32                  # measurements kept of each kind
MIN_YIELD = 0.25             # candidates per proposal, at the least, in the formula
PRIOR_LATENCY_S = 60.0       # an LLM reply, before one was measured (30–120 s for kernel-writing calls)
PRIOR_JUDGE_S = {"cuda": 4.0, "cpu": 30.0}   # a judgement (the CPU's includes a fresh torch.compile baseline)


def wanted(evaluators: int, latency_s: float, judge_s: float, yield_: float = 1.0) -> int:
    """The formula's N, before bounds."""
    return max(1, math.ceil(HEADROOM * evaluators * latency_s / (max(judge_s, 1e-3) * max(yield_, MIN_YIELD))))


def start(evaluators: int, target: str, least: int, most: int) -> int:
    """The number in flight before anything is measured: the formula at the priors, within the bounds."""
    return min(most, max(least, wanted(evaluators, PRIOR_LATENCY_S, PRIOR_JUDGE_S.get(target, 4.0))))


class Pacer:
    def __init__(self, evaluators: int, target: str, least: int, most: int, initial: int | None = None):
        if not 1 <= least <= most:
            raise ValueError(f"LLM calls in flight: need 1 <= least <= most, got {least}, {most}")
        self.evaluators, self.least, self.most = evaluators, least, most
        self.prior_judge_s = PRIOR_JUDGE_S.get(target, 4.0)
        self.target = initial if initial is not None else start(evaluators, target, least, most)
        self.target = min(most, max(least, self.target))
        self.latencies: deque[tuple[float, int]] = deque(maxlen=WINDOW)   # (seconds, new candidates)
        self.judgements: deque[float] = deque(maxlen=WINDOW)

    @property
    def adaptive(self) -> bool:
        return self.least < self.most

    def returned(self, seconds: float, candidates: int) -> bool:
        """One LLM proposal came back after `seconds` with `candidates` new candidates; True if the target moved."""
        self.latencies.append((max(0.0, seconds), max(0, candidates)))
        return self._update()

    def judged(self, seconds: float) -> bool:
        """One judgement took `seconds` of an evaluator; True if the target moved."""
        if seconds > 0:
            self.judgements.append(seconds)
        return self._update()

    def measured(self) -> dict:
        """What the target is computed from now: mean latency, candidates per proposal, mean judgement."""
        n = len(self.latencies)
        latency = sum(s for s, _ in self.latencies) / n if n else PRIOR_LATENCY_S
        yield_ = sum(c for _, c in self.latencies) / n if n else 1.0
        judge = sum(self.judgements) / len(self.judgements) if self.judgements else self.prior_judge_s
        return {"latency_s": round(latency, 2), "candidates_per_call": round(yield_, 3), "judge_s": round(judge, 2),
                "proposals_measured": n, "judgements_measured": len(self.judgements)}

    def state(self) -> dict:
        """The target in flight, its bounds, and the measurements it follows (the store's `pacing` event)."""
        return {"llm_calls": self.target, "least": self.least, "most": self.most, "capped": self.capped,
                **self.measured()}

    def wanted(self) -> int:
        m = self.measured()
        return wanted(self.evaluators, m["latency_s"], m["judge_s"], m["candidates_per_call"])

    @property
    def capped(self) -> bool:
        """Whether the formula asks for more than `most`."""
        return self.wanted() > self.most

    def _update(self) -> bool:
        if not self.adaptive:
            return False
        new = min(self.most, max(self.least, self.wanted()))
        if new == self.target or (abs(new - self.target) < self.target // 10 and new not in (self.least, self.most)):
            return False
        self.target = new
        return True


def builds_wanted(evaluators: int, build_s: float, judge_s: float, builders: int) -> int:
    """Builds to keep running at once so that built candidates arrive as fast as the evaluators judge them:
    ceil(HEADROOM × E × B / J), at least one, at most `builders`."""
    return min(max(1, builders), max(1, math.ceil(HEADROOM * evaluators * build_s / max(judge_s, 1e-3))))


class Builds:
    """The last `WINDOW` build and judgement seconds of a run, and the builds to keep in flight from them (None
    until both were measured three times: the seeds' first builds and judgements include one-off costs)."""

    def __init__(self, evaluators: int, builders: int):
        self.evaluators, self.builders = evaluators, builders
        self.builds: deque[float] = deque(maxlen=WINDOW)
        self.judgements: deque[float] = deque(maxlen=WINDOW)

    def built(self, seconds: float) -> None:
        self.builds.append(max(0.0, seconds))

    def judged(self, seconds: float) -> None:
        if seconds > 0:
            self.judgements.append(seconds)

    def wanted(self) -> int | None:
        if len(self.builds) < 3 or len(self.judgements) < 3:
            return None
        build = sorted(self.builds)[len(self.builds) // 2]
        judge = sorted(self.judgements)[len(self.judgements) // 2]
        return builds_wanted(self.evaluators, build, judge, self.builders)


def in_flight(plan, pacer: Pacer | None, builds: Builds) -> int:
    """Candidates between proposal and verdict at most: the plan's, or, when it follows the LLM calls, the
    plan's with the LLM calls' current target in place of the one it started with; and, unless
    `search.in_flight` is set, more where the builds the measured build and judgement times ask for
    (`Builds`) and two per evaluator (one judging, one queued) pass the plan's bound."""
    n, llm = plan.in_flight, 0
    if plan.in_flight_follows_llm and pacer is not None:
        n += pacer.target - plan.llm_calls
        llm = plan.llm_calls
    wanted = builds.wanted() if plan.in_flight_follows_builds else None
    # the plan's bound past its LLM calls holds one judging and one queued per evaluator; builds beyond that
    return n + max(0, 2 * plan.evaluators + (wanted or 0) - (plan.in_flight - llm))
