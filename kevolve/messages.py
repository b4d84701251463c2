"""The messages between the parts of a search: frozen, plain data, JSON round-trippable.

A candidate's life, and the message each step hands on:

    Population.propose(rng)  -> Proposal   (island, parent, inspirations, operator)
    an operator              -> Mutation   (a child source, or why there is none)
    judge.static.rules.check        -> Verdict    (kevolve.judge.static.rules)
    judge.build.build        -> Build      (kevolve.judge.build)
    judge.evaluator.harness.judge      -> Evaluation (kevolve.judge.results)
    the driver records each in the store under the candidate's `Status`, and hands the population an `Outcome`.

`Status` is the one vocabulary of candidate states, used by the driver, the store and the summaries.
"""
from __future__ import annotations

import enum
import json
import math
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping


class Status(str, enum.Enum):
    """Where a candidate is: pending → verified → built → evaluated, or stopped at rejected (static rules or
    a verifier), build_failed, or failed (no verdict could be had: a mutation without a kernel, an actor
    that kept dying). The last four are terminal; a resumed run queues the others again."""
    PENDING = "pending"
    VERIFIED = "verified"
    BUILT = "built"
    EVALUATED = "evaluated"
    REJECTED = "rejected"
    BUILD_FAILED = "build_failed"
    FAILED = "failed"

    @property
    def terminal(self) -> bool:
        return self in (Status.EVALUATED, Status.REJECTED, Status.BUILD_FAILED, Status.FAILED)

    def __str__(self) -> str:
        return self.value


def _freeze(value: Any) -> Any:
    """JSON-like data as hashable, immutable data: lists become tuples, mappings sorted (key, value) pairs."""
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), _freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    return value


def _thaw(value: Any) -> Any:
    return [_thaw(v) for v in value] if isinstance(value, tuple) else value


def new_id() -> str:
    """A short random id (12 hex digits): unique enough for one run's thousands of candidates."""
    return uuid.uuid4().hex[:12]


@dataclass(frozen=True)
class Candidate:
    """One kernel source and where it came from. `meta` holds operator details (knob values, a strategy):
    pass a dict, it is stored as sorted (key, value) pairs of JSON values; read it with `meta_dict()`."""
    id: str
    source: str
    parents: tuple[str, ...] = ()
    island: int = 0
    generation: int = 0
    operator: str = "seed"          # seed | knob | translate | optimize | crossover | repair | meta | ...
    model: str | None = None        # the LLM that wrote it; None for seeds and knob mutation
    created: float = 0.0
    meta: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "parents", tuple(self.parents))
        object.__setattr__(self, "meta", _freeze(dict(self.meta)))
        try:
            json.dumps(self.to_dict())
        except (TypeError, ValueError) as e:
            raise ValueError(f"candidate {self.id}: meta must hold JSON values only ({e})") from None

    @staticmethod
    def new(source: str, **fields) -> "Candidate":
        """A candidate with a fresh id and the current time; other fields as given."""
        return Candidate(id=fields.pop("id", None) or new_id(), source=source,
                         created=fields.pop("created", None) or time.time(), **fields)

    def meta_dict(self) -> dict[str, Any]:
        return {k: _thaw(v) for k, v in self.meta}

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "source": self.source, "parents": list(self.parents), "island": self.island,
                "generation": self.generation, "operator": self.operator, "model": self.model,
                "created": self.created, "meta": self.meta_dict()}

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> "Candidate":
        d = dict(d)
        d["parents"] = tuple(d.get("parents", ()))
        d["meta"] = d.get("meta") or {}
        return Candidate(**d)


@dataclass(frozen=True)
class Outcome:
    """What the population needs to know of a verdict: fitness (0 unless correct), correctness, whether it
    compiled (incorrect but compiled candidates are parents for repair), and feedback for the next prompt."""
    fitness: float
    correct: bool
    compiled: bool = True
    feedback: str = ""

    def __post_init__(self):
        if not self.correct or not math.isfinite(self.fitness) or self.fitness < 0:
            object.__setattr__(self, "fitness", 0.0)


@dataclass(frozen=True)
class Proposal:
    """What the population asks for next: apply `operator` to `parent` (with `inspirations` from the
    archive, best first) and put the child on `island`. `model` is the LLM a bandit chose (None: the LLM layer
    draws one by the configured weights; always None for knob mutation). `parent` is None only for operators
    that write from scratch (translate, red_team)."""
    island: int
    parent: Candidate | None
    operator: str
    inspirations: tuple[Candidate, ...] = ()
    model: str | None = None

    @property
    def arm(self) -> str:
        """The choice policy's arm key (kevolve.operators.choice.Arm.key): operator, or operator@model."""
        return f"{self.operator}@{self.model}" if self.model else self.operator


@dataclass(frozen=True)
class Mutation:
    """What an operator made of a proposal: a child source, or `source=None` and `failure` saying why (no
    knob left to turn, a malformed knob line, an LLM reply without code). `meta` records the operator's
    choices (knob values, a strategy), `cost_usd` and `model` what an LLM call cost and who answered."""
    source: str | None
    meta: dict = field(default_factory=dict)
    seconds: float = 0.0
    failure: str | None = None
    cost_usd: float = 0.0
    model: str | None = None


@dataclass(frozen=True)
class Best:
    """The best kernel of a run, with the numbers of its final judgement (baselines interleaved)."""
    id: str
    kernel: str                      # the file the run wrote it to
    operator: str
    speedup: float | None
    speedup_eager: float | None
    speedup_compile: float | None
    floor_fraction: float | None
    confirmed: bool                  # judged again at the end and correct again
    not_confirmed: tuple[str, ...] = ()   # better candidates that failed that judgement, and why
    speedup_ci: tuple[float, float] | None = None   # 95% bootstrap interval of `speedup`
    ties: tuple[str, ...] = ()       # candidates that timed paired with it were indistinguishable from it
    comparisons: int = 0             # paired comparisons the run made before replacing (or keeping) its best
    release: str = ""                # the release check's line: on which domain and how many configurations it
                                     # was proven correct ("" when the run made none: search.release=0)


@dataclass(frozen=True)
class OpRoute:
    """One size bucket of the assembled op (`kevolve.search.assemble`): the kernel it runs, or torch (`kernel`
    None), and the numbers that decided it, from the op's own judgement."""
    bucket: str
    configs: tuple[str, ...]         # the shape ids of the bucket that were judged
    kernel: str | None               # the candidate that runs these sizes; None: torch does
    library_kernel: str              # the candidate the op's library calls for these sizes (judged correct there)
    speedup: float | None            # that kernel's speedup over the faster torch baseline here (geomean)
    ci: tuple[float, float] | None = None   # its 95% interval (conservative: the configurations' bounds' geomean)
    worst: float | None = None       # its smallest speedup on one configuration of the bucket
    why: str = ""


@dataclass(frozen=True)
class Op:
    """The run's result: one library dispatching each size bucket to its kernel, torch where none is confirmed
    faster, judged as a whole (every configuration correct, baselines timed afresh)."""
    correct: bool
    source: str                      # the file the run wrote it to (op.cu / op.cpp)
    kernels: tuple[str, ...] = ()    # the candidates in the library, kevolve_k0 first (the geomean best)
    routes: tuple[OpRoute, ...] = ()
    speedup: float | None = None     # geomean over the judged configurations: the kernel's where it runs, 1 for torch
    best_speedup: float | None = None   # the best single kernel's, from its own final judgement
    failure: str | None = None       # why the op could not be built or judged correct (the best kernel stands alone)
    seconds: float = 0.0


@dataclass(frozen=True)
class RunSummary:
    """What a search reports when it ends: printed as a table and, as the last line, `as_dict()` in JSON."""
    run_dir: str
    task: str
    target: str
    shapes: str
    candidates: int                  # candidates that reached a verdict
    correct: int
    stopped: str                     # why the search stopped
    seconds: float                   # the whole run, the best's final judgement included
    search_seconds: float            # the search alone: from the driver's start to the end of its loop (this
                                     # part's, for a resumed run)
    candidates_per_minute: float     # verdicts per minute of search_seconds (this part's verdicts)
    evaluators: int
    evaluator_busy: float            # the share of the evaluators' search_seconds spent judging candidates or
                                     # timing a challenger paired with the best (stage_seconds' evaluate, compare)
    stage_seconds: dict[str, float]
    judge_phases: dict[str, float]
    best: Best | None
    spend_usd: float = 0.0           # LLM spend: every operator and verifier call (cached replies cost 0)
    llm_calls: int = 0               # LLM calls made (operators and verifiers; cached ones included)
    verifiers: dict[str, dict] = field(default_factory=dict)   # per LLM verifier: precision, recall, accuracy…
    gpu_seconds_saved: float = 0.0   # rejections dropped before building × mean judgement seconds
    suspected_judge_bugs: tuple[str, ...] = ()   # red-team candidates the judge accepted (saved under the run dir)
    unfinished: tuple[str, ...] = ()  # judgements the budget cut off: how long each ran, in which phase
    not_released: tuple[str, ...] = ()   # with search.release, when no candidate passed it: each one tried, and why
                                         # (`best` is then None: the run names no kernel)
    op: Op | None = None             # the assembled op (None: no correct kernel, or a fixed stream of sources)
    llm_health: dict[str, Any] = field(default_factory=dict)   # LLM calls, failed, causes, per provider/model;
                                     # `ended`: the LLM's failures stopped an LLM-only run (exit status 2)
    rejections: dict[str, int] = field(default_factory=dict)   # failed candidates per reason (record/failures.py)
    earlier: int = 0                 # a resumed run: verdicts of its earlier parts (in `candidates`, not in the rate)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["suspected_judge_bugs"] = list(d["suspected_judge_bugs"])
        d["unfinished"] = list(d["unfinished"])
        d["not_released"] = list(d["not_released"])
        if d["best"] is not None:
            d["best"]["not_confirmed"] = list(d["best"]["not_confirmed"])
            d["best"]["ties"] = list(d["best"]["ties"])
            d["best"]["speedup_ci"] = list(d["best"]["speedup_ci"]) if d["best"]["speedup_ci"] else None
            if not d["best"]["not_confirmed"]:
                del d["best"]["not_confirmed"]
        if d["op"] is not None:                      # JSON's lists, as the store gives them back
            d["op"] = json.loads(json.dumps(d["op"]))
        return d
