"""The outside clock: the evaluator's own check of the times a worker reports, which holds whatever the worker
says about them.

Every time a verdict uses is measured inside the worker, where the candidate's native code runs; a kernel that
reaches the worker's memory by pointer arithmetic could rewrite those numbers (shrink its own, inflate the
baselines'), and the checks of outputs would not notice. So the evaluator measures each timed round from
outside, on clocks the worker cannot write: its own monotonic clock, from writing the request to reading the
reply (`wall_ms`), and the worker's CPU time as the Linux kernel accounts it — all its threads, exited ones
included (`clock_getcpuclockid`: `cpu_ms`), and its main thread, which makes every contender's calls
(`/proc/PID/task/PID/schedstat`: `main_ms`) — read by the evaluator before the request and once it has read
the round's outputs (`Span`), while an honest worker sits idle on its pipe. It also fixed what each round runs: the
counted rounds run every contender on `n` fresh input sets; it also asks for *probe* rounds in which a party is *hollow*
— each checked kernel alone (before the counted rounds), and all contenders together (after them, when there are
several): its calls are no-ops, everything around them (input draws, poison, flushes, graphs of flushes, snapshots,
exports, a torch-ABI kernel's result copies) is done as in a counted round (`Session.run_round(hollow=...)`). A party's
share of a counted round, seen from outside, is the difference between a counted round (the median of them) and its
probe.

The bounds (a violation is a rejected verdict that names the bound — of bounds 2, 2b and 3, once a second timing of
the configuration confirms it, since a busy machine can break them for an honest worker: `harness.noisy_bound`;
a miss that eats more than half its slack is *near*, and the configuration is timed again; a second near miss
passes):
1. **sum** — in every round, probes and CUDA's uncounted first round included, the intervals the worker
   reports (all contenders, the empty graphs, the latency calls) fit in the round's wall time. Honest intervals
   are disjoint and lie inside it, so this holds for every honest worker on any machine, however loaded. A
   worker that reports more time than passed is rejected: baselines inflated beyond the round. It has no
   near band: an honest round also spends the harness's own work outside every interval it reports.
2. **under** (each checked kernel) — its reported share (n × its median per-call time, plus its latency call
   on CUDA) is at least the CPU time its calls burned: the main thread's difference (counted − probe), since
   one thread cannot burn more CPU than the wall time that passes, or the whole process's difference divided
   by the cores the worker may run on, whichever is larger. Both are laws for an honest worker, and
   preemption by other processes only lengthens the wall. The probe's CPU is the larger of the party's own
   probe and the probe without any call (both leave its calls out: two samples of the shared work, so one
   that ran light does not charge the difference to the kernel); the slack is half of it: the noise of the
   work both rounds share (contention on a shared machine moved it by a third between two rounds; the CPU
   flush is single-threaded, `timing.CpuClock`, since a thread pool's barrier spins made it far noisier). A
   worker that shrinks its kernel's times below what its calls demonstrably burned is rejected. Where the excess
   is the main thread's, its user time must show it too (`_user_confirms`): else it is near, not a rejection.
2b. **side work** — the probe without any call (or the kernel's, where it is the only contender) burned at most
   the CPU of the same round taken before the kernel loaded (the *clean probe*, `timed.clean_probe`: the same
   session with a no-op in the kernel's place, in a worker no candidate code had run in), plus as much again
   and 5 ms (`SIDE_NOISE`, `SIDE_MS`).
   Work a kernel adds to the harness's own steps in its worker (its answer computed while the harness poisons
   its outputs) is in its probes too, where bound 2 would cancel it out; here it is not. As in bound 2, an excess
   on the main thread must show in its user time too. A round without any
   call is the harness's work alone: no baseline's thread pool meets the kernel's there (an honest OpenMP
   kernel's probe with the eager calls in it burned 13 ms more than before it loaded, on 2 cores).
3. **over** (all contenders together: the kernel, the baselines; in a paired comparison both kernels) — their
   reported shares together are at most the wall difference between the counted rounds and the probe without
   any call, plus half the longer of the two (on a loaded
   machine two rounds' walls differ by half and more: this bound is the weakest, and holds for an honest
   worker as long as two rounds' shared work does not differ twofold). A worker that inflates its baselines
   (or, in a paired comparison, the other kernel) well beyond their share of the round is rejected; one that
   moves its kernel's time onto them keeps the total and meets bound 2.

Why a worker cannot escape by doing less: every call of a checked kernel in a counted round or a probe
is checked against the float64 reference on fresh inputs the evaluator named in that request, so its work
happens after that request, and is counted by the CPU clock even if the worker defers it past its reply (the
CPU window closes once the evaluator has read the outputs; the wall window, at the reply); skipping the
baselines' unchecked calls only makes their outside share smaller. Why a kernel cannot turn this off: the probes and the
bounds live in the evaluator; the worker learns only which contenders to leave out of a round.

What it does not guarantee:
- A worker that *paces itself* — knowing a probe leaves its kernel out, it burns (spins) as much CPU and
  wall time as its kernel would have — makes its kernel look free from outside; so does one that runs its
  baselines slowly for real (nothing outside can tell slow baselines from inflated ones). The outside clock
  catches forged numbers, not a worker that lies with its own speed; against that, the memory floor
  (`timed.floor_verdict`) and the final re-judgement remain.
- Resolution: the bounds see a forgery only when the forged share exceeds the rounds' noise. On the CPU the
  harness work of a round (drawing inputs, 2 × LLC flushed before every call, exports) can be ten times the
  kernel's; bound 2 uses CPU time, which preemption does not inflate, but loses the wall's excess over CPU
  (a loaded machine lengthens the honest wall the forger divides) and, for work spread over threads, a factor
  up to `cores`; bound 3 loses what the machine's load adds to the wall. On CUDA the shares are
  device times of microseconds against a host round of milliseconds: only bound 1 and large configurations
  are decisive there. Where the CPU clock of the worker cannot be read, bound 2 is skipped.
"""
from __future__ import annotations

import ctypes
import os
import time
from dataclasses import dataclass

SUM_TOL, SUM_MS = 0.01, 0.2          # bound 1: reported ≤ wall × 1.01 + 0.2 ms (clock granularity, GPU vs host clock)
CPU_NOISE, WALL_NOISE = 0.50, 0.50   # bounds 2, 3: slack as a share of the probe's CPU / the longer wall
SLACK_MS = 2.0                       # ... plus this much
NEAR = 0.5                           # a miss past this share of its slack is near: re-timed, not rejected
SIDE_NOISE, SIDE_MS = 1.0, 5.0       # bound 2b: a probe may cost twice the clean round, plus 5 ms (a session's first
                                     # round after the kernel loaded burned up to 5.6 ms more than before, honest)
TICK_HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
USER_TICKS = 3                       # bounds 2 and 2b on the main thread: its user time must also show the excess,
                                     # past this many ticks of sampling (`_user_confirms`)


@dataclass(frozen=True)
class Round:
    """One round as the evaluator saw it."""
    wall_ms: float                   # request written → reply read, the evaluator's monotonic clock
    cpu_ms: float | None             # the worker's CPU time, request → outputs read, all threads (None: unreadable)
    main_ms: float | None            # ... its main thread's, which makes every contender's calls
    reported_ms: float               # every interval the worker reported, summed
    hollow: tuple[str, ...] = ()     # the contenders left out (a probe); () for a counted round
    main_user_ms: float | None = None  # its main thread's user time (`CpuClock.user_ms`: clock ticks, sampled)


@dataclass(frozen=True)
class ClockRuling:
    """The outside clock's word on one configuration: `failure` (reject, naming the bound) or `near` (re-time)."""
    failure: str | None = None
    near: str | None = None
    checks: tuple = ()               # (party, bound, reported ms, outside ms, slack ms) per check made


class CpuClock:
    """Another process's CPU time as the Linux kernel accounts it (ns resolution): all its threads, exited ones
    included (`clock_getcpuclockid`), and its main thread alone (`/proc/PID/task/PID/schedstat`), the one that
    makes every call of a contender. None where either cannot be read."""

    def __init__(self, pid: int):
        self.pid, self.clock = pid, None
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            cid = ctypes.c_int()
            if libc.clock_getcpuclockid(pid, ctypes.byref(cid)) == 0:
                self.clock = cid.value
        except (OSError, AttributeError):
            pass

    def user_ms(self) -> float | None:
        """The main thread's user time (`/proc/PID/task/PID/stat`), in ms: clock ticks, and on most kernels the
        split between user and system time is sampled at each tick, so a round's reads ± `USER_TICKS` ticks."""
        try:
            with open(f"/proc/{self.pid}/task/{self.pid}/stat") as f:
                return int(f.read().rsplit(")", 1)[1].split()[11]) * 1e3 / TICK_HZ
        except (OSError, ValueError, IndexError):
            return None

    def ms(self) -> tuple[float | None, float | None]:
        """(all threads, main thread) in ms."""
        total = main = None
        if self.clock is not None:
            try:
                total = time.clock_gettime(self.clock) * 1e3
            except OSError:                          # the process is gone
                pass
        try:
            with open(f"/proc/{self.pid}/task/{self.pid}/schedstat") as f:
                main = int(f.read().split()[0]) / 1e6
        except (OSError, ValueError, IndexError):
            pass
        return total, main


class Span:
    """One round seen from outside: the wall time from writing the request to reading the reply, and the
    worker's CPU time from before the request until the evaluator has read every output of the round — so work
    a worker defers past its reply (outputs written while the evaluator computes references) still counts. An
    honest worker sits idle on its pipe on both sides of the request."""

    def __init__(self, cpu: CpuClock):
        self.cpu = cpu
        (self.c0, self.m0), self.u0, self.t0 = cpu.ms(), cpu.user_ms(), time.monotonic()
        self.wall_ms = None

    def replied(self) -> None:
        self.wall_ms = (time.monotonic() - self.t0) * 1e3

    def round(self, times: dict, hollow: tuple[str, ...] = ()) -> Round:
        """The round, once its outputs are read (`times`: the reply's)."""
        (c1, m1), u1 = self.cpu.ms(), self.cpu.user_ms()
        return Round(self.wall_ms, _minus(c1, self.c0), _minus(m1, self.m0), reported_ms(times), tuple(hollow),
                     _minus(u1, self.u0))


def reported_ms(times: dict) -> float:
    """Every interval in a round's reply summed: wall samples (CPU), or the longer of stream and device time of
    each (stream, device) pair (CUDA)."""
    total = 0.0
    for values in times.values():
        for v in values:
            total += max(float(x) for x in v) if isinstance(v, (list, tuple)) else float(v)
    return total


def sum_bound(r: Round, when: str) -> str | None:
    """Bound 1: the reported intervals of a round fit in its wall time."""
    if r.reported_ms > r.wall_ms * (1 + SUM_TOL) + SUM_MS:
        return (f"outside clock, sum bound: the worker reported {r.reported_ms:.2f} ms of timed intervals in a "
                f"round ({when}) that took {r.wall_ms:.2f} ms on the evaluator's clock — times forged in the worker")
    return None


def cores(pid: int) -> int:
    """The CPUs the worker may run on (its affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(pid)))
    except OSError:
        return os.cpu_count() or 1


def check(counted: list[Round], probes: dict[str, Round], shares: dict[str, float], bounds: dict[str, tuple],
          n_cores: int, clean: dict[str, tuple[Round, ...]] | None = None) -> ClockRuling:
    """Bounds 2 and 3 for every party probed: `probes` maps a party's name to its probe round, `shares` to its
    reported ms per counted round, `bounds` to the bounds it must meet ("under": a kernel the verdict favours
    when it is faster; "over": a contender it favours when it is slower, the baselines and, in a paired
    comparison, each kernel). `clean`: the same rounds as a party's probe, taken before the kernel loaded in a
    worker no candidate had run in (`timed.clean_probe`), for bound 2b."""
    if not counted:
        return ClockRuling()
    wall = _median([r.wall_ms for r in counted])
    cpu, main, main_user = (_median([getattr(r, f) for r in counted]) if all(getattr(r, f) is not None for r in counted)
                            else None for f in ("cpu_ms", "main_ms", "main_user_ms"))
    made, near = [], None
    for party, probe in probes.items():
        share = shares[party]
        base_cpu, base_main = _without(probe, probes.values(), "cpu_ms"), _without(probe, probes.values(), "main_ms")
        side = _side_work(party, probe, (clean or {}).get(party) or (), n_cores)   # bound 2b, before bound 2
        if side is not None:
            made.append(side[0])
            if side[1]:
                return ClockRuling(failure=side[1], checks=tuple(made))
            near = near or side[2]
        if "under" in bounds[party] and cpu is not None and base_cpu is not None:
            burned = cpu - base_cpu                             # bound 2: the wall share is at least the CPU its
            floor = burned / n_cores                            # calls burned on the one thread that makes them,
            noise = base_cpu / n_cores                          # and at least all they burned over the cores; the
            on_main = _minus(main, base_main)
            by_main = on_main is not None and on_main > floor   # noise is the shared work's: the probe's CPU
            if by_main:
                floor, noise = on_main, base_main
            slack = CPU_NOISE * noise + SLACK_MS
            made.append((party, "under", share, floor, slack))
            user = _minus(main_user, _without(probe, probes.values(), "main_user_ms")) if by_main else None
            if floor > share + slack and by_main and not _user_confirms(user, share + slack):
                near = near or (f"{party}: under bound on the main thread's system time only ({floor:.2f} ms "
                                f"against {share:.2f} ms reported; user time {user:.2f} ms)")
            elif floor > share + slack:
                where = f"{on_main:.2f} ms on the worker's main thread and " if on_main is not None else ""
                return ClockRuling(failure=(
                    f"outside clock, under bound: the worker reported {share:.2f} ms per round for {party}, but its "
                    f"calls burned {where}{burned:.2f} ms of CPU on all its threads ({n_cores} cores): at least "
                    f"{floor:.2f} ms of wall per round (slack {slack:.2f} ms) — its times were shrunk in the worker"),
                    checks=tuple(made))
            if floor > share + NEAR * slack:
                near = near or f"{party}: under bound, {share:.2f} ms reported against {floor:.2f} ms"
        if "over" in bounds[party]:
            ceiling = max(0.0, wall - probe.wall_ms)             # bound 3: wall share ≤ wall difference
            slack = WALL_NOISE * max(wall, probe.wall_ms) + SLACK_MS
            made.append((party, "over", share, ceiling, slack))
            if share > ceiling + slack:
                return ClockRuling(failure=(
                    f"outside clock, over bound: the worker reported {share:.2f} ms per round for {party}, but "
                    f"rounds with its calls took {ceiling:.2f} ms longer than without them (slack {slack:.2f} ms) "
                    "— its times were inflated in the worker"), checks=tuple(made))
            if share > ceiling + NEAR * slack:
                near = near or f"{party}: over bound, {share:.2f} ms reported against {ceiling:.2f} ms"
    return ClockRuling(near=near, checks=tuple(made))


def _side_work(party: str, probe: Round, clean: tuple[Round, ...], n_cores: int) -> tuple | None:
    """Bound 2b, *side work*: a party's probe in the kernel's worker burned at most as much CPU as the same round
    before the kernel loaded (`clean`: the clean probe's rounds, the heaviest of them), plus its slack.
    Work a kernel added to the harness's own steps — its answer computed while the harness poisons its outputs —
    is in the one and not the other. Returns (check, failure, near), or None where there is no clean probe or
    CPU clock."""
    if not clean:
        return None
    field = "main_ms" if probe.main_ms is not None and None not in [r.main_ms for r in clean] else "cpu_ms"
    if getattr(probe, field) is None or None in [getattr(r, field) for r in clean]:
        return None
    scale = 1 if field == "main_ms" else n_cores
    before = max(getattr(r, field) for r in clean) / scale
    extra = getattr(probe, field) / scale - before
    slack = SIDE_NOISE * before + SIDE_MS
    check = (party, "side work", 0.0, extra, slack)
    users = [r.main_user_ms for r in clean]
    user = _minus(probe.main_user_ms, None if None in users else max(users)) if field == "main_ms" else None
    if extra > slack and field == "main_ms" and not _user_confirms(user, slack):
        return check, None, (f"{party}: side-work bound on the main thread's system time only ({extra:.2f} ms over "
                             f"the clean probe; user time {user:.2f} ms)")
    if extra > slack:
        return check, (f"outside clock, side-work bound: a round without the calls of {party} burned {extra:.2f} ms "
                       f"more CPU in the kernel's worker than the same round before the kernel loaded (slack "
                       f"{slack:.2f} ms) — work added to the harness's own steps, outside every timed call"), None
    if extra > NEAR * slack:
        return check, None, f"{party}: side-work bound, {extra:.2f} ms over the clean probe"
    return check, None, None


def _minus(a: float | None, b: float | None) -> float | None:
    """a - b; None where either is unknown."""
    return a - b if a is not None and b is not None else None


def _user_confirms(user: float | None, limit: float) -> bool:
    """Whether a main thread's CPU excess past `limit` shows in its user time too (past `USER_TICKS` of sampling).
    Faulting in a round's fresh pages is system time whose cost per page moved fivefold between rounds of the same
    honest work on a 2-core VM (60–430 ms for 34,000 faults), while a kernel's side work and the calls it hid are
    computation, user time. Unknown user time confirms: the bound then stands on the total, as before."""
    return user is None or user > limit + USER_TICKS * 1e3 / TICK_HZ


def _without(probe: Round, probes, field: str) -> float | None:
    """A party's CPU time (`field`) of a round without its calls: the most any probe that leaves them out burned
    — its own, and the probe without any call — since each is one sample of the shared work, and one that ran
    light would charge the difference to the party (bound 2 is the honest worker's to lose on noise)."""
    values = [getattr(p, field) for p in probes if set(probe.hollow) <= set(p.hollow)]
    return max(values) if values and None not in values else None


def _median(values: list[float]) -> float:
    s = sorted(values)
    return s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2
