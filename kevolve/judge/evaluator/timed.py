"""The evaluator's side of timing: runs one configuration's timing session in the worker and verifies every
timed call — the timed calls are checked, not trusted.

`time_config` sends the worker a fresh random seed for the warm-up (only now: the kernel is loaded, so
nothing could be precomputed), then fresh random input variants for every round; after each round it
compares every input set exactly with its own draw, computes each set's float64 reference once, compares
every checked call's outputs to it within tolerance, checks that no guard was written, and only then asks for
the next round. The number of rounds is fixed by the worker before the first timed call (`round_plan.plan_rounds`).
`floor_verdict` is the rule for a time the hardware cannot deliver. Every round is also measured from outside
(`judge.evaluator.outside`): its wall time and the worker's CPU time on the evaluator's side; besides the counted
rounds, one probe round per checked kernel before them with its calls left out, and one after them with every call
left out; never counted, every kernel call in them checked like the rest; a reported time the outside clock refutes is a
failure naming the bound, a near miss `Timed.near` (the caller times the configuration again).

Guarantees: a timed call that skipped work, replayed a memoised answer, left outputs to a thread or to a
stream outside its graph, or wrote outside its buffers, is a failure naming the call. Not guaranteed:
a kernel that computes correctly but does extra work outside the call (it is counted by the device
term of the clock on CUDA, not on the CPU).
"""
from __future__ import annotations

import collections
import secrets
from dataclasses import dataclass, field

from kevolve.judge import protocol
from kevolve.judge import exchange
from kevolve.judge.evaluator import canary as canaries
from kevolve.judge.evaluator import outside
from kevolve.judge import rounds as round_plan
from kevolve.judge.worker import timing
from kevolve.judge.evaluator.checks import Checker
from kevolve.judge.options import Options
from kevolve.judge.evaluator.process import WorkerDied, WorkerProcess
from kevolve.task.spec import Case

FLOOR_REJECT, FLOOR_MIN_MS = 0.8, 0.020   # under 0.8× a floor of at least 20 µs: impossible, not fast


@dataclass(frozen=True)
class Timed:
    """One configuration's timing: per-call milliseconds per contender on its clock, verified."""
    samples: dict = field(default_factory=dict)    # contender -> per-call ms, paired by round/call
    latency: dict = field(default_factory=dict)    # contender -> synced end-to-end ms of one call (CUDA)
    clock: dict = field(default_factory=dict)      # contender -> graph | queued | wall
    notes: dict = field(default_factory=dict)
    checked_calls: int = 0                          # kernel calls whose outputs were checked
    canary_calls: int = 0                           # the kernel's timed calls that carried the canary (not in samples)
    failure: str | None = None
    near: str | None = None                         # the outside clock's near miss: time again
    outside: tuple = ()                             # the outside clock's checks (`outside.ClockRuling.checks`)


def fresh_variant() -> int:
    """An input variant no one can predict: the evaluator draws it, the worker learns it when it must fill."""
    return (1 << 40) + secrets.randbits(40)


def time_config(worker: WorkerProcess, checker: Checker, cfg: Case, index: int, options: Options,
                baselines: tuple[str, ...], other: bool = False, baseline_ms: float | None = None,
                kernel: bool = True, canary: canaries.Canary | None = None,
                clean: tuple[outside.Round, ...] = (), pace=None) -> Timed:
    """Times the kernel (and the `other` kernel, for `harness.compare`) and `baselines` on `cfg`, every
    kernel call checked, every round also timed from outside (`judge.evaluator.outside`). A wrong timed call or a time
    the outside clock refutes is `Timed.failure`, a near miss of it `Timed.near`; a worker error raises
    `WorkerDied`. `kernel=False` times the baselines alone, in a worker that has not loaded the kernel yet
    (`harness._judge`): no code of the candidate has run in that process, so nothing checks them from outside.
    `canary`: where the kernel's calls carry the canary (`judge.evaluator.canary`), whose difference is checked;
    `clean`: the clean probe's rounds (`clean_probe`), the harness's own cost of a round without the kernel's calls,
    measured before the kernel loaded: what the probe without any call may cost in the kernel's worker (the outside
    clock's side-work bound). `pace` (a `paced.Paced`): torch's baselines timed in the clean baseline worker, one
    round beside each counted round of this session's (before it on odd rounds, after it on even ones), on the same
    input variants; its failure (the quiet bound) is this timing's, its harness failure raises `HarnessFailed`."""
    with exchange.kept_open():          # the session's buffers, opened once for all its rounds
        return _time_config(worker, checker, cfg, index, options, baselines, other, baseline_ms, kernel,
                            canary if kernel else None, clean, pace)


def _time_config(worker: WorkerProcess, checker: Checker, cfg: Case, index: int, options: Options,
                 baselines: tuple[str, ...], other: bool, baseline_ms: float | None, kernel: bool = True,
                 canary: canaries.Canary | None = None, clean: tuple[outside.Round, ...] = (), pace=None) -> Timed:
    limit = options.timeout + 60
    seed = fresh_variant()
    with checker.clock("setup", f"{cfg.id}"):
        setup = _call(worker, limit + 600, protocol.TimeSetup(
            index, tuple(baselines), seed, options.calls, options.reps, options.budget_s, baseline_ms, other, kernel,
            canary.send if canary else 0.0))
    checker.clock.add(setup.worker_s)
    n, inputs, cuda = setup.calls, setup.inputs, options.target == "cuda"
    forged = _plan_forged(setup, checker.task, cfg, options, baseline_ms, (1 + other) if kernel else 0)
    if forged:
        worker.call(protocol.TimeEnd(), 120)
        return Timed(clock=setup.clock, notes=setup.notes, failure=forged)
    checked = len(setup.outputs)
    # the checked kernels the canary checks: on CUDA graph replays only — a kernel timed queued (its capture failed:
    # an event pair per call) gets none, an honest one read a third of its addition there (docs/decisions.md)
    canaried = [k for k in ("kernel", "other") if k in setup.clock and not (cuda and setup.clock[k] == "queued")]
    if not canaried:
        canary = None
    why = _verify(checker, cfg, setup, [seed + i for i in range(setup.warm)], n, "warm-up", other)
    if not why and cuda:                # the graphs' first replays (they upload), untimed: no round is thrown away
        with checker.clock("setup", f"{cfg.id} upload"):
            uploaded = _call(worker, limit * max(1, n), protocol.TimeUpload())
        checker.clock.add(uploaded.worker_s)
    raw: dict[str, list] = collections.defaultdict(list)
    raw_canary: dict[str, list] = collections.defaultdict(list)     # the canary rounds' (`judge.evaluator.canary`)
    cpu = outside.CpuClock(worker.pid)
    counted: list[outside.Round] = []

    def run(hollow: tuple[str, ...], when: str, canaried: tuple[int, ...] = (), variants: list | None = None
            ) -> tuple[str | None, protocol.TimedRound, outside.Round]:
        """One round: the worker's reply, verified, and the round as the outside clock saw it."""
        variants = variants or _variants(checker, cfg, inputs, kernel)
        with checker.clock("round", f"{cfg.id} {when}"):
            span = outside.Span(cpu)
            reply = _call(worker, limit * max(1, n), protocol.TimeRound(tuple(variants), tuple(hollow), canaried))
            span.replied()
        checker.clock.add(reply.worker_s)
        checker.clock.count(reply.work)
        wrong = _verify(checker, cfg, reply, variants, n, when, other, hollow)
        seen = span.round(reply.times, hollow)
        return wrong or outside.sum_bound(seen, when), reply, seen

    parties = _parties(setup.clock, other) if kernel else {}
    probes: dict[str, outside.Round] = {}

    def probe(party: str) -> str | None:
        nonlocal checked
        when = f"outside-clock probe without {party}"
        wrong, reply, probes[party] = run(parties[party], when)
        checked += sum(o["who"] not in parties[party] for o in reply.outputs)
        return wrong

    # the checked kernels' probes first, the empty one last: a judgement's first round costs the harness more
    # (allocations settle), which then errs on the side of the kernel in both bounds
    for party in [p for p in parties if p != ALL]:
        why = why or probe(party)
    rounds = setup.rounds
    total, marks, extra = canaries.positions(rounds, n, cuda) if canary else (rounds, {}, set())
    if pace is not None and not why:
        pace.setup()
    for r in range(total):
        if why:
            break
        when = f"round {r + 1} of {total}"
        variants, k = _variants(checker, cfg, inputs, kernel), len(counted)
        if pace is not None and r not in extra and k % 2:          # torch's round first, on odd rounds
            why = pace.round(k, variants)
            if why:
                break
        why, reply, seen = run((), when, marks.get(r, ()), variants)
        checked += len(reply.outputs)
        if pace is not None and r not in extra and not k % 2 and not why:
            why = pace.round(k, variants)
        if r not in extra:               # an extra canary round is verified, never counted
            counted.append(seen)
        for name, values in reply.times.items():
            marked = set(marks.get(r, ())) if name in ("kernel", "other") or r in extra else set()
            if marked and len(values) != n and r not in extra:
                raise WorkerDied("crash", f"while timing: {len(values)} samples of {name} for {n} calls")
            raw_canary[name].extend(v for i, v in enumerate(values) if i in marked or r in extra)
            raw[name].extend(v for i, v in enumerate(values) if not (i in marked or r in extra))
    if ALL in parties:
        why = why or probe(ALL)
    with checker.clock("release", cfg.id):
        worker.call(protocol.TimeEnd(), 120)
        if pace is not None:
            pace.end()
    if why:
        return Timed(clock=setup.clock, notes=setup.notes, checked_calls=checked, failure=why)
    samples, latency = {}, {}
    for name, kind in setup.clock.items():
        samples[name] = _per_call(raw, raw[name], kind, n)
        if kind != "wall":
            latency[name] = timing.per_call(raw[f"latency:{name}"], raw["_null_synced"], 1)
    near = None
    for name in (canaried if canary else ()):
        failure, near_miss = canaries.verdict(samples[name], _per_call(raw, raw_canary[name], setup.clock[name], n),
                                              canary, {"kernel": "kernel a", "other": "kernel b"}[name] if other
                                              else "the kernel")
        if failure:
            return Timed(clock=setup.clock, notes=setup.notes, checked_calls=checked, failure=failure)
        near = near or near_miss
    # each checked kernel's canary calls per counted round (the same calls for both kernels): their known addition
    spun_ms = sum(len(v) for r, v in marks.items() if r not in extra) / max(1, len(counted)) * canary.expect_ms \
        if canary else 0.0
    shares = {party: sum(n * timing.median(samples[c]) + (timing.median(latency[c]) if latency.get(c) else 0.0)
                         + (spun_ms if c in ("kernel", "other") else 0.0)
                         for c in hollow) for party, hollow in parties.items()}
    bounds = {party: ("over",) if party == ALL else ("under",) for party in parties}
    quiet = ALL if ALL in parties else next(iter(parties), "")       # the kernel's worker's probe without any call
    seen = outside.check(counted, probes, shares, bounds, outside.cores(worker.pid), clean={quiet: clean})
    per_sample = n if setup.clock.get("kernel") == "graph" else 1          # a graph's sample is n calls
    return Timed(samples, latency, setup.clock, setup.notes, checked, failure=seen.failure, near=seen.near or near,
                 outside=seen.checks, canary_calls=len(raw_canary["kernel"]) * per_sample)


def _variants(checker: Checker, cfg: Case, inputs: int, kernel: bool) -> list[int]:
    """A round's input variants: the next of the evaluator's pool where a kernel's calls are checked on them (its
    references are kept), fresh ones for torch alone (nothing checked: no reference to keep, no pool used up)."""
    return checker.timed_variants(cfg, inputs) if kernel else [fresh_variant() for _ in range(inputs)]


def _per_call(raw: dict, values: list, kind: str, n: int) -> list[float]:
    """Per-call ms of one contender's raw samples on its clock `kind` (`timing.per_call`), with the empty
    measurements of the counted rounds (`raw`) as the base."""
    if kind == "wall":
        return list(values)
    null = raw["_null_graph"] if kind == "graph" else raw["_null_queued"]
    return timing.per_call(values, null, n if kind == "graph" else 1, graph=kind == "graph")


CLEAN_ROUNDS = 2                        # rounds of a clean probe (`clean_probe`); the heaviest counts


def clean_probe(worker: WorkerProcess, checker: Checker, cfg: Case, index: int, options: Options,
                baselines: tuple[str, ...], baseline_ms: float | None) -> tuple[outside.Round, ...]:
    """The harness's own cost of one of `cfg`'s timed rounds without the kernel's calls, measured from outside in a
    worker no candidate code has run in yet (before the kernel loads): the same session as the kernel's will be —
    the same baselines, calls, buffers, flushes and exports — with a function that does nothing in the kernel's
    place and every contender's calls left out (`Worker.time_setup(stand_in=True)`), `CLEAN_ROUNDS` rounds. The
    probe rounds run in the kernel's own worker, where work a kernel adds to the harness's steps (computing its
    answer while the harness poisons its outputs, say) would be in them too and cancel out of the under bound;
    the side-work bound compares its probe without any call with this one (`outside._side_work`). Nothing of the
    stand-in's outputs is checked; the inputs come back as always. Raises `WorkerDied` if the worker fails (the
    harness's failure: no kernel is loaded)."""
    hollow = ("kernel", *baselines)     # every contender left out: the probe without any call
    limit = options.timeout + 60
    with exchange.kept_open():
        seed = fresh_variant()
        setup = _call(worker, limit + 600, protocol.TimeSetup(
            index, tuple(baselines), seed, options.calls, options.reps, options.budget_s, baseline_ms,
            stand_in=True))
        n, cuda = setup.calls, options.target == "cuda"
        _verify(checker, cfg, setup, [seed + i for i in range(setup.warm)], n, "clean warm-up", False, hollow)
        if cuda:
            _call(worker, limit * max(1, n), protocol.TimeUpload())
        cpu, rounds = outside.CpuClock(worker.pid), []
        for _ in range(CLEAN_ROUNDS):
            variants = checker.timed_variants(cfg, setup.inputs)
            span = outside.Span(cpu)
            reply = _call(worker, limit * max(1, n), protocol.TimeRound(tuple(variants), hollow))
            span.replied()
            _verify(checker, cfg, reply, variants, n, "clean probe", False, hollow)
            rounds.append(span.round(reply.times, hollow))
        worker.call(protocol.TimeEnd(), 120)
    return tuple(rounds)


def _plan_forged(setup: protocol.Warmed, task, cfg: Case, options: Options, baseline_ms: float | None,
                 checked: int) -> str | None:
    """The worker's timing plan checked against the evaluator's own: the calls per round and their input sets are
    what `round_plan.calls_for` gives, and the rounds lie between the fewest and the most `round_plan.plan_rounds`
    allows (exactly its count where the evaluator gave the baselines' time: the worker's own warm-up time
    decides it otherwise). A kernel that rewrote the plan in the worker's memory — no rounds, so no timed call
    at all, or fewer calls to check — is refused, not obeyed."""
    cuda = options.target == "cuda"
    sizes = cfg.size_dict
    n = round_plan.calls_for(task, sizes, options.abi, options.calls, options.reps, cuda, checked)
    verify = round_plan.set_bytes(task, sizes)
    most = round_plan.plan_rounds(options.reps, n, cuda, None, None, verify)
    fewest = round_plan.plan_rounds(options.reps, n, cuda, options.budget_s, baseline_ms, verify) if baseline_ms \
        else round_plan.plan_rounds(1, n, cuda, None, None, verify)
    calls, inputs, rounds = setup.calls, setup.inputs, setup.rounds
    if calls != n or inputs != n + cuda or not isinstance(rounds, int) or not fewest <= rounds <= most:
        return (f"the worker's timing plan ({calls} calls a round on {inputs} input sets, {rounds} rounds) is not "
                f"the evaluator's ({n} calls on {n + cuda} sets, {fewest}-{most} rounds) — rewritten in the worker")
    return None


def _parties(clock: dict, other: bool) -> dict[str, tuple[str, ...]]:
    """The parties the outside clock probes, each with the contenders its probe leaves out: each checked
    kernel on its own, and, where there is more than one contender, all of them (a probe with no call at all,
    so none to check)."""
    kernels = ("kernel", "other") if other else ("kernel",)
    parties = {("kernel a" if other else "the kernel") if k == "kernel" else "kernel b": (k,) for k in kernels}
    if len(clock) > 1:
        parties[ALL] = tuple(clock)
    return parties


ALL = "all contenders"


def _call(worker: WorkerProcess, timeout: float, command: protocol.Command) -> protocol.Reply:
    reply = worker.call(command, timeout)
    if isinstance(reply, protocol.Failed):
        worker.kill()                   # a CUDA error poisons the context: never reuse this worker
        raise WorkerDied("crash", f"while timing: {reply.error}")
    return reply


def _verify(checker: Checker, cfg: Case, reply: protocol.Warmed | protocol.TimedRound, variants: list[int], n: int,
            when: str, other: bool, hollow: tuple[str, ...] = ()) -> str | None:
    try:
        return _verify_round(checker, cfg, reply, variants, n, when, other, hollow)
    finally:                            # the round's packed files (`exchange.Packer`), read or not, are let go
        exchange.forget_packs(checker.folder)


def _verify_round(checker: Checker, cfg: Case, reply: protocol.Warmed | protocol.TimedRound, variants: list[int],
                  n: int, when: str, other: bool, hollow: tuple[str, ...] = ()) -> str | None:
    """Guards intact; then per input set: the inputs unchanged (compared exactly), its reference computed once
    (or found in the evaluator's cache: `Checker.timed_set`), and every call's outputs on it within tolerance. The
    outputs of `hollow` contenders (not called: an outside-clock probe) are discarded unread, and so are the inputs
    when no checked call is left."""
    for who, over in reply.overruns.items():
        if over and who not in hollow:
            return f"{_who(who, other)}wrote outside {', '.join(over)} during timing ({when})"
    by_slot = collections.defaultdict(list)
    for o in reply.outputs:
        if o["who"] in hollow:
            exchange.discard(o["handles"], checker.folder)
        else:
            by_slot[o["slot"]].append(o)
    if not by_slot:
        for handles in reply.input_handles:
            exchange.discard(handles, checker.folder)
        return None
    for i, v in enumerate(variants):
        # no checked call on this set (a probe): its inputs compared exactly all the same
        if not by_slot[i]:
            with checker.clock("reference", f"inputs {cfg.id} {when} set {i + 1}"):
                mine = checker.task.make_inputs(cfg, checker.device, v)
            expected = None
        else:
            mine, expected = checker.timed_set(cfg, v)
        with checker.clock("inputs", f"{cfg.id} {when} set {i + 1}"):
            changed = checker.changed_inputs(cfg, v, reply.input_handles[i], mine)
        if changed:
            return f"input {', '.join(changed)} modified during timing ({when}, input set {i + 1})"
        del mine
        for o in by_slot[i]:
            what = f"call {i + 1} of {n}" if i < n else "the synced latency call"
            label = f"warm-up, {what}" if when == "warm-up" else f"timed call, {when}, {what}"
            why, _, _ = checker.compare_files(cfg, v, o["handles"], call=label, expected=expected, verdict_only=True)
            if why:
                return _who(o["who"], other) + why
        del expected
    return None


def _who(name: str, other: bool) -> str:
    return {"kernel": "kernel a: ", "other": "kernel b: "}[name] if other else ""


def floor_verdict(kernel_ms: float, floor_ms: float | None, target: str) -> str | None:
    """'below' (reject: under 0.8× the memory floor), 'near' (0.8–1.0×: time again) or None. Only on CUDA
    and a floor of at least 20 µs, where the floor is a hard limit (on the CPU, caches beat DRAM)."""
    if target != "cuda" or not floor_ms or floor_ms < FLOOR_MIN_MS:
        return None
    if kernel_ms < FLOOR_REJECT * floor_ms:
        return "below"
    return "near" if kernel_ms < floor_ms else None
