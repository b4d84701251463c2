"""The worker's replies to the evaluator's commands (`judge.protocol`, which re-exports them): one frozen dataclass
each, decoded by `protocol.decode_reply` with every declared field type-checked. Split from `protocol` to keep each
module under the house's 400 lines; importers keep naming them `protocol.Started`, `protocol.TimedRound`, ...
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Reply:
    """What the worker answers to a command."""


@dataclass(frozen=True)
class Failed(Reply):
    """The command raised in the worker (a load error, a CUDA error, a kernel's failure)."""
    error: str
    traceback: str = ""


@dataclass(frozen=True)
class Done(Reply):
    """The command did what it says, and has nothing to tell."""


@dataclass(frozen=True)
class Started(Reply):
    """`Init`'s reply: the device, its copy bandwidth, its UUID (CUDA) and what the confinement holds; `peak_gbs`:
    the device memory's peak bandwidth from its properties (CUDA; None where they do not say)."""
    device: str
    bandwidth_gbs: float
    uuid: str | None = None
    confinement: dict | None = None
    peak_gbs: float | None = None


@dataclass(frozen=True)
class Configs(Reply):
    n: int


@dataclass(frozen=True)
class Probe(Reply):
    """An IPC description of a known tensor (`exchange.describe`), for the evaluator to open."""
    probe: dict


@dataclass(frozen=True)
class Prepared(Reply):
    notes: dict


@dataclass(frozen=True)
class Sealed(Reply):
    """What holds after the seal (`confine.seal`), or None and why it is missing."""
    seal: str | None = None
    missing: str | None = None


@dataclass(frozen=True)
class Checked(Reply):
    """One correctness call: the kernel's status, the inputs' fingerprints before it, handles to the inputs and
    outputs after it, the buffers whose guards changed, the layout and the inputs' addresses."""
    rc: int
    before: dict
    input_handles: dict
    outputs: dict
    seconds: float
    overruns: list
    layout: str
    pointers: dict


@dataclass(frozen=True)
class Warmed(Reply):
    """`TimeSetup`'s reply: the warm-up's outputs to check and the session's fixed plan."""
    outputs: list
    input_handles: list
    overruns: dict
    rounds: int
    calls: int
    inputs: int
    warm: int
    clock: dict
    notes: dict
    worker_s: dict


@dataclass(frozen=True)
class TimedRound(Reply):
    """One timing round: every checked call's outputs, the inputs, the reported times and the work done."""
    outputs: list
    input_handles: list
    overruns: dict
    times: dict
    worker_s: dict
    work: dict


@dataclass(frozen=True)
class TrivialTimes(Reply):
    """`Trivial`'s reply: ms per call of a no-op timed as a kernel's calls are (`Worker.trivial`), and on CUDA the
    ms one cycle of `torch.cuda._sleep` adds to such a call (`cycle_ms`, the canary's unit)."""
    samples: list
    cycle_ms: float | None = None


@dataclass(frozen=True)
class Uploaded(Reply):
    worker_s: dict


@dataclass(frozen=True)
class Described(Reply):
    """`Describe`'s reply: one captured call of the kernel, node by node (`judge.replay.nodes.to_wire`; the worker's
    word: `nodes.from_wire` reads it, `nodes.unreplayable` judges it)."""
    description: dict
