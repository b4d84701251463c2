"""The records of work in flight, one frozen type per stage, and the run's tally.

A candidate moves `Verifying` (and `LLMVerifying`: waited for in filter mode only) → `Verified` (waiting for a
builder) → `Building` → `Built` (waiting for an evaluator) → `Judging` → a verdict; a proposal is `Mutating` until its
children come back; `Comparing` and `Profiling` hold an evaluator for the champion and the profiler. Each stage's
record carries what the next stage needs and nothing it has not got yet; a stage never edits a record, it makes the
next one (`advance`). `retries` travels with the candidate: the losses of its actors, and the harness's own failures,
so far. Not messages: they never leave the driver's process; the store keeps each candidate's `Status`.
"""
from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, ClassVar

from kevolve.messages import Candidate, Proposal


class Step(enum.Enum):
    """Where a record is in the pipeline (the store keeps the candidate's `Status`)."""
    MUTATE = "mutate"
    VERIFY = "verify"
    BUILD = "build"
    QUEUED = "queued"            # verified (waiting for a builder) or built (waiting for an evaluator)
    EVALUATE = "evaluate"
    COMPARE = "compare"          # a challenger timed paired with the champion
    PROFILE = "profile"          # a parent profiled by Nsight Compute (search.profile)


def _now() -> float:
    return time.perf_counter()


@dataclass(frozen=True)
class Mutating:
    """A proposal at the Mutator. `send` makes the call (again, when its actor died); `calls`: the LLM calls one
    sending makes (0 for knob mutation and replay); `expect`: the children it may give (meta: one per strategy);
    `recorded`: replay's child the reply must give again."""
    step: ClassVar[Step] = Step.MUTATE
    proposal: Proposal
    send: Callable[[], Any]
    expect: int = 1
    calls: int = 0
    retries: int = 0
    recorded: Candidate | None = None
    started: float = field(default_factory=_now)
    candidate: ClassVar[None] = None


@dataclass(frozen=True)
class Verifying:
    """A candidate at the Verifier; `calls`: its LLM verifier calls in flight."""
    step: ClassVar[Step] = Step.VERIFY
    candidate: Candidate
    calls: int = 0
    retries: int = 0
    started: float = field(default_factory=_now)


@dataclass(frozen=True)
class LLMVerifying:
    """A candidate's LLM verifier calls in flight (`calls` of them). In filter mode the candidate waits for their
    verdicts (`waits`; `verdict`: its static one, stored with them); in shadow mode it went on to its build, and
    their verdicts are recorded beside its own verdict whenever they come."""
    step: ClassVar[Step] = Step.VERIFY
    candidate: Candidate
    calls: int
    waits: bool
    verdict: Any = None
    retries: int = 0
    started: float = field(default_factory=_now)


@dataclass(frozen=True)
class Verified:
    """Passed the static rules (and the LLM verifiers' filter): waits for a builder, lowest `priority` first."""
    step: ClassVar[Step] = Step.QUEUED
    candidate: Candidate
    screening: Any = None                    # verification.Screening: the LLM verdicts and the decision
    priority: float = 0.0
    retries: int = 0


@dataclass(frozen=True)
class Building:
    step: ClassVar[Step] = Step.BUILD
    verified: Verified
    lib: Any                                 # ref to the library's bytes, never fetched in the driver
    started: float = field(default_factory=_now)

    @property
    def candidate(self) -> Candidate:
        return self.verified.candidate

    @property
    def retries(self) -> int:
        return self.verified.retries


@dataclass(frozen=True)
class Built:
    """Compiled: waits for an evaluator."""
    step: ClassVar[Step] = Step.QUEUED
    candidate: Candidate
    build: Any                               # kevolve.judge.build.Build
    lib: Any
    screening: Any = None
    retries: int = 0


@dataclass(frozen=True)
class Judging:
    step: ClassVar[Step] = Step.EVALUATE
    built: Built
    evaluator: int
    started: float = field(default_factory=_now)

    @property
    def candidate(self) -> Candidate:
        return self.built.candidate

    @property
    def retries(self) -> int:
        return self.built.retries


@dataclass(frozen=True)
class Comparing:
    step: ClassVar[Step] = Step.COMPARE
    candidate: Candidate                     # the challenger
    evaluator: int
    retries: ClassVar[int] = 0
    started: float = field(default_factory=_now)
    bucket: str | None = None                # a size bucket's champion is challenged (None: the geomean's)


@dataclass(frozen=True)
class Profiling:
    step: ClassVar[Step] = Step.PROFILE
    candidate: Candidate                     # the parent profiled
    evaluator: int
    retries: ClassVar[int] = 0
    started: float = field(default_factory=_now)


Record = Mutating | Verifying | LLMVerifying | Building | Judging | Comparing | Profiling   # what `ray.wait` waits on


def again(record, **changes):
    """The record sent once more: one retry more (`Building`/`Judging` go back to their queue's record)."""
    if isinstance(record, Building):
        return replace(record.verified, retries=record.retries + 1)
    if isinstance(record, Judging):
        return replace(record.built, retries=record.retries + 1)
    return replace(record, retries=record.retries + 1, **changes)


@dataclass
class Tally:
    """The run's counts and seconds so far (what the progress line and the summary read; the pipeline and the
    driver add to them)."""
    created: int = 0                   # candidates in the store
    finished: int = 0                  # ... with a verdict
    correct: int = 0                   # ... correct (red-team children excluded)
    evaluated: int = 0                 # ... judged by an evaluator
    proposing: int = 0                 # children of the mutations in flight (the budget already counts them)
    busy_seconds: float = 0.0          # evaluator seconds judging
    stage_seconds: dict = field(default_factory=lambda: dict.fromkeys(
        ("mutate", "verify", "build", "evaluate", "compare"), 0.0))
    judge_phases: dict = field(default_factory=dict)       # the evaluate stage, split (Evaluation.phases summed)
    unfinished: list = field(default_factory=list)         # judgements cut off by the budget, described
    unfinished_busy: float = 0.0       # ... and the evaluator seconds they had used
    start: float = field(default_factory=_now)
    searched: float | None = None      # seconds from the start to the end of the loop (None: not over)
    earlier_seconds: float = 0.0       # a resumed run: seconds its earlier parts searched …
    earlier_finished: int = 0          # … the verdicts they had …
    earlier_busy: float = 0.0          # … and the evaluator seconds they used (judging, comparing)
