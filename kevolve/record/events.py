"""The events of a run's record, typed: one frozen dataclass per kind of event, its fields the event's payload.

`Store.log_event(event)` writes one (`kind` is the class's `KIND`; the payload is its fields, secrets redacted);
`Reader.events_of(cls)` reads them back as instances, oldest first. `EVENTS` maps each kind to its class. Kinds
whose payload is an open record of another part (the `finish` summary, the `plan` banner, the `pacing` state) carry
it whole in `data`, which is stored flat (its keys are the payload's).

Guaranteed: an event written from a dataclass reads back equal (JSON types: tuples come back as lists, numbers
as numbers); a payload read back that lacks a field gives that field's default, keys the class does not know are
dropped. Every writer uses these classes: `Store.log_event` takes nothing else.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping, TypeVar

E = TypeVar("E", bound="Event")


@dataclass(frozen=True)
class Event:
    KIND: ClassVar[str] = ""


@dataclass(frozen=True)
class Resume(Event):
    KIND: ClassVar[str] = "resume"
    run_dir: str = ""
    said: tuple[str, ...] = ()          # what the resume said: what it continues from, its budget, changed settings
    command: tuple[str, ...] = ()       # the resume command line's overrides (secret values redacted)


@dataclass(frozen=True)
class Stop(Event):
    KIND: ClassVar[str] = "stop"
    reason: str = ""


@dataclass(frozen=True)
class Retry(Event):
    KIND: ClassVar[str] = "retry"
    id: str | None = None
    step: str = ""
    attempt: int = 0
    error: str = ""


@dataclass(frozen=True)
class MutationFailed(Event):
    KIND: ClassVar[str] = "mutation_failed"
    reason: str = ""
    id: str | None = None
    parent: str | None = None
    arm: str | None = None
    operator: str | None = None
    model: str | None = None
    reward: float = 0.0
    cost_usd: float = 0.0
    seed: int | None = None             # an LLM child's sampling seed and call index, where the reply said
    call: int | None = None


@dataclass(frozen=True)
class SuspectedJudgeBug(Event):
    KIND: ClassVar[str] = "suspected_judge_bug"
    id: str = ""
    speedup: float | None = None
    dir: str = ""


@dataclass(frozen=True)
class Champion(Event):
    KIND: ClassVar[str] = "champion"
    id: str = ""
    fitness: float = 0.0


@dataclass(frozen=True)
class Compare(Event):
    KIND: ClassVar[str] = "compare"
    challenger: str = ""
    champion: str = ""
    outcome: str = ""
    ratio: float | None = None
    ci: Any = None
    failure: str | None = None
    seconds: float | None = None
    bucket: str | None = None           # a size bucket's champion was challenged (None: the geomean's)


@dataclass(frozen=True)
class BucketChampion(Event):
    KIND: ClassVar[str] = "bucket_champion"
    bucket: str = ""
    id: str = ""
    speedup: float = 0.0                # over the faster torch baseline on the bucket's configurations


@dataclass(frozen=True)
class Confirm(Event):
    KIND: ClassVar[str] = "confirm"
    id: str = ""
    correct: bool = False
    failure: str | None = None
    seconds: float = 0.0
    evaluation: str | None = None       # the Evaluation's JSON


@dataclass(frozen=True)
class Release(Event):
    """The release check of a candidate the run was about to name its best (`harness.release`)."""
    KIND: ClassVar[str] = "release"
    id: str = ""
    passed: bool = False
    planned: int = 0
    checked: int = 0
    proven: str = ""
    failure: str | None = None
    seconds: float = 0.0


@dataclass(frozen=True)
class Profile(Event):
    KIND: ClassVar[str] = "profile"
    id: str = ""
    text: str = ""
    failure: str | None = None


@dataclass(frozen=True)
class CutOff(Event):
    KIND: ClassVar[str] = "cut_off"
    evaluator: int = 0
    seconds: float = 0.0
    status: str = ""


@dataclass(frozen=True)
class UnrecordedSpend(Event):
    KIND: ClassVar[str] = "unrecorded_spend"
    cost_usd: float = 0.0
    fetched_usd: float = 0.0
    why: str = ""


@dataclass(frozen=True)
class Tracker(Event):
    KIND: ClassVar[str] = "tracker"
    kind: str = ""
    id: str = ""
    mode: str = ""
    dir: str = ""
    resumed: bool = False


@dataclass(frozen=True)
class TrackerFailed(Event):
    KIND: ClassVar[str] = "tracker_failed"
    tracker: str = ""
    method: str = ""
    error: str = ""


@dataclass(frozen=True)
class Finish(Event):
    KIND: ClassVar[str] = "finish"
    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Assembled(Event):
    KIND: ClassVar[str] = "assembled"
    data: Mapping[str, Any] = field(default_factory=dict)     # kevolve.search.assembly: the op and its judgement


@dataclass(frozen=True)
class Plan(Event):
    KIND: ClassVar[str] = "plan"
    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Pacing(Event):
    KIND: ClassVar[str] = "pacing"
    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Progress(Event):
    KIND: ClassVar[str] = "progress"
    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class LLMHealth(Event):
    """The LLM paused (its calls failed `llm.down_after` times in a row) or back: the notice the console showed,
    and the counts then (kevolve/search/llm_health.py `summary`)."""
    KIND: ClassVar[str] = "llm_health"
    notice: str = ""
    calls: int = 0
    failed: int = 0
    paused: bool = False
    ended: bool = False
    pauses: int = 0
    causes: Mapping[str, int] = field(default_factory=dict)
    models: Mapping[str, Any] = field(default_factory=dict)


EVENTS: dict[str, type[Event]] = {cls.KIND: cls for cls in (
    Resume, Stop, Retry, MutationFailed, SuspectedJudgeBug, Champion, BucketChampion, Compare, Confirm, Release,
    Profile, CutOff, UnrecordedSpend, Tracker, TrackerFailed, Finish, Assembled, Plan, Pacing, Progress, LLMHealth)}
_OPEN = ("data",)                       # the field of an open event, stored flat


def payload_of(event: Event) -> dict[str, Any]:
    """The JSON payload an event is stored as: its fields (an open event's `data`, flat)."""
    names = [f.name for f in dataclasses.fields(event)]
    if names == list(_OPEN):
        return dict(getattr(event, "data"))
    return {n: getattr(event, n) for n in names}


def event_of(cls: type[E], payload: Mapping[str, Any]) -> E:
    """The event of class `cls` a stored payload holds (missing fields: their defaults; unknown keys dropped)."""
    names = [f.name for f in dataclasses.fields(cls)]
    if names == list(_OPEN):
        return cls(data=dict(payload))          # type: ignore[call-arg]
    return cls(**{k: v for k, v in payload.items() if k in names})
