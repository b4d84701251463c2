"""What LLM verdicts do to a candidate, and how good each verifier has proven: aggregation, modes, audits, stats.

- `rejects(verdicts, how)`: whether a set of verdicts rejects: `any` (one fail), `majority` (fails are more than
  half of the verdicts given), `all` (every verdict given is fail, at least one).
  No-verdicts (passed=None) never count.
- `decide(verdicts, screen, earned, rng) -> Decision`. `shadow`: build everything, in arrival order (verdicts
  are only recorded). `filter`: only verifiers that have *earned the right to reject* vote; a rejected candidate
  is dropped unless it falls in the audit share (drawn from rng), then it is built and judged anyway, so false
  rejects are measured, not guessed. In both filter outcomes the share of verifiers saying fail is the build
  priority (lower builds first): verifiers that have not earned the right only order the queue.
- `truth(verifier, compiled, correct, failure)`: what the judge says the verifier should have said (True: the
  kernel is bad in that verifier's sense; None: not observable, e.g. numerics of a kernel that crashed).
- `VerifierStats`: confusion counts per verifier (a "positive" is a fail verdict), precision / recall /
  accuracy, and `earned(v)`: precision ≥ `screen.precision_bar` over ≥ `screen.min_samples` judged fail verdicts.
  Audited candidates are weighted by 1 / audit_share, so recall and accuracy are estimates for all candidates,
  not only the ones that were built.

Guarantees: pure functions and plain data; every random draw from the rng passed in; `state()` is JSON and
`from_state` restores it. Not guaranteed: that a verifier's precision on past candidates holds for later ones.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from random import Random
from typing import Iterable

from kevolve.operators.verifiers import VERIFIERS, LLMVerdict

AGGREGATIONS = ("any", "majority", "all")
MODES = ("filter", "shadow")
# the judge's words (judge.evaluator.checks, .timed)
_MEMORY = re.compile(r"crash|illegal|segmentation|out of bounds|wrote (past|outside)|input .*modified|misaligned|"
                     r"invalid (device|memory)|bus error", re.I)
_UNOBSERVED = re.compile(r"time ?out|timed out|hang|killed", re.I)


@dataclass(frozen=True)
class Screen:
    """How verdicts are used (the `search.verifiers` settings)."""
    mode: str = "shadow"            # filter | shadow
    aggregation: str = "any"        # any | majority | all
    audit_share: float = 0.1        # filter mode: the fraction of rejected candidates judged anyway
    precision_bar: float = 0.9      # a verifier rejects only once its precision on this run reaches this …
    min_samples: int = 20           # … over at least this many judged fail verdicts

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"verifier mode {self.mode!r}: expected one of {MODES}")
        if self.aggregation not in AGGREGATIONS:
            raise ValueError(f"verifier aggregation {self.aggregation!r}: expected one of {AGGREGATIONS}")
        if not 0.0 <= self.audit_share <= 1.0 or not 0.0 <= self.precision_bar <= 1.0 or self.min_samples < 0:
            raise ValueError("audit_share and precision_bar in [0, 1], min_samples >= 0")


@dataclass(frozen=True)
class Decision:
    build: bool
    priority: float = 0.0                   # lower builds first
    audited: bool = False                   # rejected, built and judged anyway
    rejected_by: tuple[str, ...] = ()       # verifiers with the right to reject that said fail
    flagged_by: tuple[str, ...] = ()        # every verifier that said fail
    reason: str = ""


def rejects(verdicts: Iterable[LLMVerdict], how: str = "any") -> bool:
    given = [v.passed for v in verdicts if v.passed is not None]
    fails = sum(1 for p in given if p is False)
    if how == "any":
        return fails > 0
    if how == "majority":
        return fails * 2 > len(given)
    if how == "all":
        return bool(given) and fails == len(given)
    raise ValueError(f"aggregation {how!r}: expected one of {AGGREGATIONS}")


def decide(verdicts: Iterable[LLMVerdict], screen: Screen, earned: Iterable[str], rng: Random) -> Decision:
    verdicts = list(verdicts)
    flagged = tuple(v.verifier for v in verdicts if v.passed is False)
    if screen.mode == "shadow":
        return Decision(True, 0.0, flagged_by=flagged)
    given = [v for v in verdicts if v.passed is not None]
    priority = len(flagged) / len(given) if given else 0.0
    earned = set(earned)
    voting = [v for v in verdicts if v.verifier in earned]
    if not rejects(voting, screen.aggregation):
        return Decision(True, priority, flagged_by=flagged)
    by = tuple(v.verifier for v in voting if v.passed is False)
    reason = "; ".join(f"{v.verifier}: {v.reason}" for v in voting if v.passed is False)
    audited = rng.random() < screen.audit_share
    return Decision(audited, priority, audited, by, flagged, reason)


def truth(verifier: str, compiled: bool, correct: bool, failure: str | None = None) -> bool | None:
    """Is the kernel bad in `verifier`'s sense, by the judge? None where the judge could not see it."""
    if verifier == "compile":
        return not compiled
    if not compiled:
        return None
    if correct:
        return False
    failure = failure or ""
    if _UNOBSERVED.search(failure) and not _MEMORY.search(failure):
        return None
    memory_fault = bool(_MEMORY.search(failure))
    if verifier == "memory":
        return memory_fault
    return None if memory_fault else True          # numerics: values seen only when the kernel did not fault


@dataclass(frozen=True)
class Confusion:
    """Weighted counts; a positive is a fail verdict (the verifier says the kernel is bad)."""
    tp: float = 0.0        # said fail, was bad
    fp: float = 0.0        # said fail, was good: a false reject
    fn: float = 0.0        # said pass, was bad
    tn: float = 0.0        # said pass, was good
    rejections: int = 0    # judged fail verdicts, unweighted (the sample behind precision)
    samples: int = 0       # judged verdicts, unweighted
    no_verdict: int = 0
    unobserved: int = 0    # verdicts whose truth the judge could not see

    @staticmethod
    def _ratio(a: float, b: float) -> float | None:
        return a / b if b > 0 else None

    @property
    def precision(self) -> float | None:
        return self._ratio(self.tp, self.tp + self.fp)

    @property
    def recall(self) -> float | None:
        return self._ratio(self.tp, self.tp + self.fn)

    @property
    def accuracy(self) -> float | None:
        return self._ratio(self.tp + self.tn, self.tp + self.fp + self.fn + self.tn)


class VerifierStats:
    def __init__(self, screen: Screen = Screen(), verifiers: Iterable[str] = VERIFIERS):
        self.screen = screen
        self.counts = {v: dict(tp=0.0, fp=0.0, fn=0.0, tn=0.0, rejections=0, samples=0, no_verdict=0, unobserved=0)
                       for v in verifiers}

    def add(self, verdict: LLMVerdict, bad: bool | None, weight: float = 1.0) -> None:
        """One verdict and the truth (see `truth`); `weight` 1 / audit_share for an audited candidate."""
        c = self.counts.setdefault(verdict.verifier, dict(tp=0.0, fp=0.0, fn=0.0, tn=0.0, rejections=0, samples=0,
                                                          no_verdict=0, unobserved=0))
        if verdict.passed is None:
            c["no_verdict"] += 1
            return
        if bad is None:
            c["unobserved"] += 1
            return
        said_fail = verdict.passed is False
        c[("tp" if bad else "fp") if said_fail else ("fn" if bad else "tn")] += weight
        c["samples"] += 1
        c["rejections"] += int(said_fail)

    def add_outcome(self, verdicts: Iterable[LLMVerdict], compiled: bool, correct: bool, failure: str | None = None,
                    audited: bool = False) -> None:
        """A judged candidate's verdicts against its evaluation."""
        weight = 1.0 / self.screen.audit_share if audited and self.screen.audit_share > 0 else 1.0
        for v in verdicts:
            self.add(v, truth(v.verifier, compiled, correct, failure), weight)

    def confusion(self, verifier: str) -> Confusion:
        return Confusion(**self.counts.get(verifier, {}))

    def earned(self, verifier: str) -> bool:
        c = self.confusion(verifier)
        return (c.rejections >= self.screen.min_samples and c.precision is not None
                and c.precision >= self.screen.precision_bar)

    def earned_set(self) -> set[str]:
        return {v for v in self.counts if self.earned(v)}

    def summary(self) -> dict:
        out = {}
        for v in self.counts:
            c = self.confusion(v)
            out[v] = {"precision": c.precision, "recall": c.recall, "accuracy": c.accuracy, "samples": c.samples,
                      "rejections": c.rejections, "no_verdict": c.no_verdict, "unobserved": c.unobserved,
                      "earned": self.earned(v)}
        return out

    def state(self) -> dict:
        return {"counts": {v: dict(c) for v, c in self.counts.items()}}

    @staticmethod
    def from_state(state: dict, screen: Screen = Screen()) -> "VerifierStats":
        s = VerifierStats(screen, verifiers=())
        s.counts = {v: dict(c) for v, c in state["counts"].items()}
        return s
