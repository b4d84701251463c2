"""The typed commands between the evaluator and its worker, and their replies (`judge.protocol_replies`, re-exported
here): one frozen dataclass each, one encoding (JSON lines), shared by both sides of the pipe
(`judge.evaluator.process`, `judge.worker.serve`).

A command is written as one JSON object, `{"cmd": <name>, "nonce": <hex>, <fields>...}`; a reply as one JSON
object carrying the same nonce, or `{"error": ..., "traceback": ...}` with it where the command raised.

Guarantees (the worker is untrusted: a kernel may write to the pipe, or rewrite the worker's memory):
- decoding is `json.loads` and nothing else: no eval, no pickle, no object built from a name the worker chose;
- `decode_reply` accepts a reply only for the command just sent, with that command's nonce, as a JSON object
  whose every field has the type the reply declares (an int is not a bool, a dict is not a list); anything else
  is a `ProtocolError`, which the evaluator turns into a `protocol` failure with the worker killed. Keys the
  reply does not declare are ignored. Nested containers (exchange handles, times, notes) are typed as
  containers here and read by the code that owns them (`judge.exchange.read` checks every handle);
- the worker's word is never trusted for a shape, a dtype or a verdict: a reply says what the worker did.
"""
from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass
from typing import Any, ClassVar, Union

from kevolve.judge.protocol_replies import (  # noqa: F401 (re-exported: `protocol.Started`, ...)
    Reply, Failed, Done, Started, Configs, Probe, Prepared, Sealed, Checked, Warmed, TimedRound, TrivialTimes,
    Uploaded, Described)


class ProtocolError(ValueError):
    """A line that is not the reply (or command) the protocol allows here; `nonce`, where the line had one."""

    def __init__(self, why: str, nonce: str | None = None):
        super().__init__(why)
        self.nonce = nonce


class WorkerDied(Exception):
    """The worker failed the judgement's exchange with it: `kind` is `crash` (it died), `timeout` (a command past
    its limit) or `protocol` (a reply, or an exchanged file, that the protocol does not allow); the harness
    turns it into a verdict."""

    def __init__(self, kind: str, detail: str):
        super().__init__(f"{kind}: {detail}")
        self.kind, self.detail = kind, detail


# ---------------------------------------------------------------------- commands
@dataclass(frozen=True)
class Command:
    """A request to the worker; `name` is its wire name, `reply` the reply it expects."""
    name: ClassVar[str]
    reply: ClassVar[type[Reply]] = Done
    loads_kernel: ClassVar[bool] = False        # from here on, what the worker tries is the kernel's


@dataclass(frozen=True)
class Init(Command):
    """Load the task, confine, and (unless `load=False`) load the library; see `Worker.init`."""
    name: ClassVar[str] = "init"
    reply: ClassVar[type[Reply]] = Started
    task_dir: str
    lib: str
    abi: str
    target: str
    module: str | None
    exchange: str
    threads: int | None = None
    also: tuple[str, ...] = ()
    load: bool = True
    evict: str | None = None
    cpu_flush: str = "lines"
    strict_cuda: bool = True

    @property
    def loads_kernel(self) -> bool:                 # type: ignore[override]
        return self.load


@dataclass(frozen=True)
class SetConfigs(Command):
    name: ClassVar[str] = "set_configs"
    reply: ClassVar[type[Reply]] = Configs
    shapes: str


@dataclass(frozen=True)
class IpcProbe(Command):
    name: ClassVar[str] = "ipc_probe"
    reply: ClassVar[type[Reply]] = Probe


@dataclass(frozen=True)
class SetExchange(Command):
    name: ClassVar[str] = "set_exchange"
    ipc: bool


@dataclass(frozen=True)
class Prepare(Command):
    """torch.compile the baselines for one configuration's shape."""
    name: ClassVar[str] = "prepare"
    reply: ClassVar[type[Reply]] = Prepared
    config: int
    baselines: tuple[str, ...]


@dataclass(frozen=True)
class Seal(Command):
    name: ClassVar[str] = "seal"
    reply: ClassVar[type[Reply]] = Sealed
    threads: bool | None = None


@dataclass(frozen=True)
class Load(Command):
    name: ClassVar[str] = "load"
    loads_kernel: ClassVar[bool] = True


@dataclass(frozen=True)
class LoadOther(Command):
    name: ClassVar[str] = "load_other"
    loads_kernel: ClassVar[bool] = True
    lib: str
    module: str | None = None


@dataclass(frozen=True)
class Check(Command):
    """One correctness call on configuration `config`; `case` (a configuration drawn from the domain,
    `task.draw.as_message`) is sent with its first call, never before: the worker knows it as `config` from then."""
    name: ClassVar[str] = "check"
    reply: ClassVar[type[Reply]] = Checked
    config: int
    variant: int
    new_buffers: bool
    case: dict | None = None


@dataclass(frozen=True)
class Release(Command):
    name: ClassVar[str] = "release"


@dataclass(frozen=True)
class Trivial(Command):
    """Time `n` calls of a function that does nothing (`Worker.trivial`); sent before the kernel loads."""
    name: ClassVar[str] = "trivial"
    reply: ClassVar[type[Reply]] = TrivialTimes
    n: int


@dataclass(frozen=True)
class TimeSetup(Command):
    name: ClassVar[str] = "time_setup"
    reply: ClassVar[type[Reply]] = Warmed
    config: int
    baselines: tuple[str, ...]
    seed: int
    calls: int
    reps: int
    budget_s: float | None = None
    baseline_ms: float | None = None
    other: bool = False
    kernel: bool = True
    canary: float = 0.0            # added inside a canary round's checked calls: ms (CPU), sleep cycles (CUDA)
    stand_in: bool = False         # before any kernel loads: a no-op in the kernel's place (`Worker.time_setup`)


@dataclass(frozen=True)
class TimeRound(Command):
    name: ClassVar[str] = "time_round"
    reply: ClassVar[type[Reply]] = TimedRound
    variants: tuple[int, ...]
    hollow: tuple[str, ...] = ()
    canary: tuple[int, ...] = ()   # the checked kernels' calls that carry the canary (CUDA: all of a round's, or none)


@dataclass(frozen=True)
class TimeUpload(Command):
    name: ClassVar[str] = "time_upload"
    reply: ClassVar[type[Reply]] = Uploaded


@dataclass(frozen=True)
class TimeEnd(Command):
    name: ClassVar[str] = "time_end"


@dataclass(frozen=True)
class Describe(Command):
    """Capture one call of the loaded kernel on configuration `config`, inputs `variant`, and describe its graph
    (`judge.replay.describe`): sent to the kernel's worker, for a replay where its host code never runs."""
    name: ClassVar[str] = "describe"
    reply: ClassVar[type[Reply]] = Described
    config: int
    variant: int


@dataclass(frozen=True)
class LoadDevice(Command):
    """Load the named library's device code alone and replay `description` as the kernel (`judge.replay.device`):
    sent to a worker that never loads the library's host code; none of the candidate's host code runs."""
    name: ClassVar[str] = "load_device"
    description: dict


@dataclass(frozen=True)
class Exit(Command):
    name: ClassVar[str] = "exit"


COMMANDS: dict[str, type[Command]] = {c.name: c for c in (Init, SetConfigs, IpcProbe, SetExchange, Prepare, Seal,
                                                           Load, LoadOther, Check, Release, Trivial, TimeSetup,
                                                           TimeRound, TimeUpload, TimeEnd, Describe, LoadDevice,
                                                           Exit)}


# ---------------------------------------------------------------------- the wire
def encode(msg: Command | Reply, nonce: str | None) -> bytes:
    """One JSON line: a command with its name and nonce, or a reply with the nonce it answers."""
    fields = {f.name: getattr(msg, f.name) for f in dataclasses.fields(msg)}
    head = {"cmd": msg.name} if isinstance(msg, Command) else {}
    return (json.dumps({**head, **fields, "nonce": nonce}) + "\n").encode()


def encode_fields(fields: dict, nonce: str | None) -> bytes:
    """A reply given as its fields (the worker's handlers return them), with the nonce it answers."""
    return (json.dumps({**fields, "nonce": nonce}) + "\n").encode()


def decode_command(line: bytes | str) -> tuple[Command, str | None]:
    """The command on one line and its nonce (worker side): a known name, the declared fields only."""
    obj = _object(line)
    nonce = obj.pop("nonce", None)
    kind = COMMANDS.get(obj.pop("cmd", None))
    if kind is None:
        raise ProtocolError("no such command", nonce if isinstance(nonce, str) else None)
    try:
        return _build(kind, obj, strict=True), nonce
    except ProtocolError as e:
        raise ProtocolError(str(e), nonce if isinstance(nonce, str) else None) from None


def decode_reply(line: bytes | str, command: Command, nonce: str) -> Reply:
    """The reply to `command` on one line (evaluator side): its nonce must be `nonce`, its fields the declared
    types; a `Failed` where the worker reports an error."""
    obj = _object(line)
    if obj.pop("nonce", None) != nonce:
        raise ProtocolError("the reply does not carry the request's nonce")
    if "error" in obj:
        return _build(Failed, {"error": obj.get("error"), "traceback": obj.get("traceback", "")}, strict=False)
    return _build(command.reply, obj, strict=False)


def _object(line: bytes | str) -> dict:
    try:
        obj = json.loads(line)
    except ValueError:
        raise ProtocolError("not JSON") from None
    if not isinstance(obj, dict):
        raise ProtocolError("not a JSON object")
    return obj


def _build(kind: type, obj: dict, strict: bool):
    """`kind(**obj)`, every declared field type-checked; `strict`: undeclared keys are an error too."""
    hints = _hints(kind)
    if strict and set(obj) - set(hints):
        raise ProtocolError(f"{kind.__name__}: unknown fields {sorted(set(obj) - set(hints))}")
    args = {}
    for f in dataclasses.fields(kind):
        if f.name not in obj:
            if f.default is dataclasses.MISSING:
                raise ProtocolError(f"{kind.__name__}: no `{f.name}`")
            continue
        value = obj[f.name]
        if not _valid(value, hints[f.name]):
            raise ProtocolError(f"{kind.__name__}.{f.name}: {type(value).__name__} is not {hints[f.name]}")
        args[f.name] = tuple(value) if typing.get_origin(hints[f.name]) is tuple and isinstance(value, list) else value
    return kind(**args)


_HINTS: dict[type, dict] = {}


def _hints(kind: type) -> dict:
    if kind not in _HINTS:
        _HINTS[kind] = {k: v for k, v in typing.get_type_hints(kind).items() if typing.get_origin(v) is not ClassVar}
    return _HINTS[kind]


def _valid(value, hint) -> bool:
    """Whether the JSON `value` has the type `hint` (str, int, float, bool, None, dict, list, tuple[T, ...], unions)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if origin in (Union, types.UnionType):
        return any(_valid(value, a) for a in args)
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if hint is dict or origin is dict:
        return isinstance(value, dict)
    if hint is list or origin is list:
        return isinstance(value, list)
    if origin is tuple:
        return isinstance(value, (list, tuple)) and all(_valid(v, args[0]) for v in value)
    return False
