"""A search's LLM verifiers, as the driver sees them: the seed of each call, the decision on each candidate, and
each verifier's measured accuracy (kevolve.operators.screening does the deciding and the counting).

- `seeds(source)`: one seed per verifier, a function of the run's seed and the source only, so a verifier's
  call (its messages depend only on the source) is the same call in a replay of the run.
- `decide(verdicts)`: `screening.decide` with the verifiers that have earned the right to reject on this run
  (`VerifierStats.earned_set()`), the audit draw from this module's own rng (seeded by the run's seed).
- `judged(screening, compiled, correct, failure)`: a candidate with verdicts has its true outcome: counted.
- `dropped`: candidates rejected and not built; `summary(mean_judge_seconds)`: precision, recall, accuracy per
  verifier and the GPU-seconds the dropped rejections saved (dropped × the mean seconds of one judgement).
- `Screening`: the verdicts and the decision on one candidate, typed from the Verifier actor to the verdict
  (`judged`); `Screening.to_dict()` is what the store keeps per candidate (`Store.set_screening`: the verdicts as
  `LLMVerdict.to_dict()`, and the decision), read back only on resume (`restore(records)` rebuilds the counts).

Not guaranteed: that the stats of a resumed run equal the interrupted one's to the audit draw (the audit rng
starts anew).
"""
from __future__ import annotations

import dataclasses
import hashlib
import random
from typing import Any, Iterable

from kevolve.config import VerifiersConfig
from kevolve.operators.screening import Decision, Screen, VerifierStats, decide
from kevolve.operators.verifiers import LLMVerdict


@dataclasses.dataclass(frozen=True)
class Screened:
    """What the Verifier actor hands back: the static rules' verdict and, when it passed, one LLM verdict per
    configured verifier."""
    verdict: Any                          # kevolve.judge.static.rules.Verdict
    llm: tuple[LLMVerdict, ...] = ()


@dataclasses.dataclass(frozen=True)
class Screening:
    """The LLM verifiers' verdicts on one candidate and the decision taken on them."""
    verdicts: tuple[LLMVerdict, ...]
    decision: Decision

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self.decision)
        d["rejected_by"], d["flagged_by"] = list(d["rejected_by"]), list(d["flagged_by"])
        return {"verdicts": [v.to_dict() for v in self.verdicts], "decision": d}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "Screening":
        decision = {k: tuple(v) if k in ("rejected_by", "flagged_by") else v
                    for k, v in (d.get("decision") or {"build": True}).items()}
        return Screening(tuple(LLMVerdict.from_dict(v) for v in d.get("verdicts") or ()), Decision(**decision))


class Verification:
    def __init__(self, config: VerifiersConfig, seed: int):
        if config.checks is None:
            raise ValueError("verifier checks not resolved: kevolve.search.llm_defaults.resolve fills a null list")
        self.checks = tuple(config.checks)
        self.screen = Screen(config.mode, config.aggregation, config.audit_share, config.precision_bar,
                             config.min_samples)
        self.stats = VerifierStats(self.screen, self.checks)
        self.seed = seed
        self.rng = random.Random(f"{seed}/audit")
        self.dropped = 0

    @property
    def on(self) -> bool:
        return bool(self.checks)

    def seeds(self, source: str) -> dict[str, int]:
        return {v: int(hashlib.sha256(f"{self.seed}/{v}/{source}".encode()).hexdigest()[:15], 16)
                for v in self.checks}

    def decide(self, verdicts: Iterable[LLMVerdict]) -> Decision:
        d = decide(verdicts, self.screen, self.stats.earned_set(), self.rng)
        if not d.build:
            self.dropped += 1
        return d

    def judged(self, screening: Screening | None, compiled: bool, correct: bool, failure: str | None) -> None:
        """A screened candidate's true outcome: counted for each verifier's accuracy."""
        if screening is None or not screening.verdicts:
            return
        self.stats.add_outcome(list(screening.verdicts), compiled, correct, failure,
                               audited=bool(screening.decision.audited))

    def restore(self, records: Iterable[Any]) -> None:
        """Counts from stored records (kevolve.record.store.Record) in the order they finished."""
        for r in records:
            s = r.screening
            if not s:
                continue
            if not s.get("decision", {}).get("build", True):
                self.dropped += 1
            elif r.status in ("evaluated", "build_failed"):
                self.judged(Screening.from_dict(s), bool(r.compiled), bool(r.correct), r.feedback)

    def summary(self, mean_judge_seconds: float) -> tuple[dict[str, dict], float]:
        """(per verifier: precision, recall, accuracy, samples…; GPU-seconds saved)."""
        if not self.on:
            return {}, 0.0
        return self.stats.summary(), round(self.dropped * mean_judge_seconds, 1)
