"""The driver's bookkeeping of work in flight: a `Job` per candidate (or proposal), at a `Step`. Not messages:
they never leave the driver; the store keeps each candidate's `Status`."""
from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import Callable

import ray

from kevolve.judge.build import Build
from kevolve.messages import Candidate, Proposal


class Step(enum.Enum):
    """Where a job is in the pipeline (driver bookkeeping; the store keeps the candidate's `Status`)."""
    MUTATE = "mutate"
    VERIFY = "verify"
    BUILD = "build"
    QUEUED = "queued"            # built (or verified, waiting for a builder), not yet handed on
    EVALUATE = "evaluate"
    COMPARE = "compare"          # a challenger timed paired with the champion
    PROFILE = "profile"          # a parent profiled by Nsight Compute (search.profile)


@dataclass
class Job:
    """One candidate in flight (not a message: it never leaves the driver)."""
    step: Step
    candidate: Candidate | None = None
    proposal: Proposal | None = None
    build: Build | None = None
    lib: ray.ObjectRef | None = None            # the library's bytes, in the object store, never fetched here
    evaluator: int | None = None
    retries: int = 0
    started: float = field(default_factory=time.perf_counter)
    send: Callable[[], ray.ObjectRef] | None = None   # the mutation call (sent again if its actor died)
    expect: int = 1                             # children the mutation may give (meta: one per strategy)
    calls: int = 0                              # LLM calls in flight for this job (the dollar budget's estimate)
    per_send: int = 0                           # LLM calls one sending of the mutation makes
    priority: float = 0.0                       # the verifiers' build priority (lower builds first)
    screening: dict | None = None               # the LLM verdicts and the decision
    recorded: Candidate | None = None           # replay: the recorded child this mutation must give again
