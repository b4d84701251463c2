"""What an evaluator keeps between judgements, none of it reachable by a kernel: a spare worker process, the clean
baseline worker (torch's baselines are compiled and timed there, `judge.evaluator.baseline_worker`), the float64
references, and recent baseline times.
"""
from __future__ import annotations

import dataclasses
import os
import secrets
import time
from dataclasses import dataclass

from kevolve.judge.evaluator.baseline_worker import BaselineWorker
from kevolve.judge.evaluator.fused import Fused
from kevolve.judge.options import Options
from kevolve.judge.evaluator.process import WorkerProcess
from kevolve.judge.results import Measurement, Stats

LAUNCH_BOUND_MS = 0.005     # device time under 5 µs: launch cost (several µs) is of the same order


SALT_ENV = "KEVOLVE_INPUT_SALT"      # an integer: fixes the correctness calls' input variants (to reproduce a verdict)


def input_salt() -> int:
    """Where the correctness calls' input variants start (`Checker`: salt, salt + 1, salt + 2): drawn at random
    (`secrets`) in [2^42, 2^42 + 2^40), so no candidate's source can know its correctness inputs (a kernel right on
    fixed inputs alone, wrong elsewhere, would pass every configuration that is only checked), unless
    `KEVOLVE_INPUT_SALT` fixes it (the salt a failed call's verdict names). Kept apart from the timing rounds'
    variants (`timed.fresh_variant`: [2^40, 2^41); a queued CUDA round's decoys, `Session._queued_calls`: [2^41,
    2^41 + 2^40)), the timed rounds' pool (`References.timed_salt`: [2^43, 2^43 + 2^41)) and the baselines'
    probe (`worker.prepare`: 99)."""
    fixed = os.environ.get(SALT_ENV)
    if fixed:
        try:
            return int(fixed)
        except ValueError:
            raise ValueError(f"{SALT_ENV}={fixed!r}: give an integer (the salt a verdict names), or unset it") from None
    return (1 << 42) + secrets.randbits(40)


class References:
    """Input fingerprints and float64 reference outputs, up to `max_bytes`, keyed by all that decides the inputs
    (`Checker.reference`: task, device, configuration, input variant), and the `salt` the correctness calls'
    variants start from (`input_salt`), drawn once per References: every candidate an evaluator judges is checked
    on the same inputs, so their references are computed once (recomputing them is the evaluator's largest cost on
    small shapes), and no candidate's source can know them. Entries are kept in the order first needed and never
    evicted (the configurations are swept in order, so LRU would thrash); what does not fit is computed each time."""

    def __init__(self, max_bytes: int):
        self.max_bytes, self.bytes, self.entries = max_bytes, 0, {}
        self.salt = input_salt()
        self.timed_salt = (1 << 43) + secrets.randbits(40)      # the timed rounds' pool (`Checker.timed_variants`)

    def clear(self) -> None:
        """Lets every cached reference go (the evaluator ran out of device memory)."""
        self.entries, self.bytes = {}, 0

    def get(self, key, compute, size=None):
        """The value of `key`, computed (and kept, if it fits) the first time. `size(value)`: its bytes (default:
        a (fingerprints, ((reference, finite), ...)) pair's tensors)."""
        if key in self.entries:
            return self.entries[key]
        value = compute()
        size = size(value) if size is not None else \
            sum(t.numel() * t.element_size() for pair in value[1] for t in pair if t is not None)
        if self.bytes + size <= self.max_bytes:
            self.entries[key] = value
            self.bytes += size
        return value


@dataclass(frozen=True)
class Baselines:
    """The torch baselines' times on one configuration, as `judge.evaluator.timed` measured them: per-call samples
    (device time on CUDA), synced latency samples, the clock each was timed on, and notes (a failed compile)."""
    samples: dict
    latency: dict
    clock: dict
    notes: dict

    @staticmethod
    def of(t, names, notes: dict) -> "Baselines":
        """From a `timed.Timed` of this configuration."""
        pick = lambda d: {n: d[n] for n in names if n in d}  # noqa: E731
        return Baselines(pick(t.samples), pick(t.latency), pick(t.clock), {**notes, **pick(t.notes)})

    def faster(self, clean: "Baselines | None") -> "Baselines":
        """Per baseline, these times or `clean`'s (timed before the kernel loaded), whichever has the lower
        median: a kernel that slowed torch down in its own process is compared with the clean times, and
        honest drift only makes the kernel's speedup the more conservative."""
        if clean is None:
            return self
        samples, latency, clock = dict(self.samples), dict(self.latency), dict(self.clock)
        for name, theirs in clean.samples.items():
            mine = samples.get(name)
            if theirs and (not mine or Stats.of(theirs).median < Stats.of(mine).median):
                samples[name] = theirs
                latency[name], clock[name] = clean.latency.get(name, latency.get(name)), clean.clock.get(name, "")
        return Baselines(samples, latency, clock, {**clean.notes, **self.notes})

    @property
    def slowest_ms(self) -> float | None:
        """What one call of the slowest baseline costs, launch included: sets how many reps fit the budget."""
        times = [Stats.of(v).median for v in (self.latency or self.samples).values() if v]
        return max(times) if times else None

    def apply(self, m: Measurement, t) -> Measurement:
        """`m` (the kernel's times set) with these baselines, the latency and clock columns and the
        launch-bound flag: the kernel's or best torch's device time under 5 µs, or under its own launch cost
        (synced latency − device time > device time)."""
        stats = {n: Stats.of(v) for n, v in self.samples.items() if v}
        latency = {n: Stats.of(v) for n, v in {**self.latency, "kernel": t.latency.get("kernel")}.items() if v}
        m = dataclasses.replace(m, eager=stats.get("eager"), compile=stats.get("compile"),
                                autotune=stats.get("compile-max-autotune"), latency=latency,
                                clock={**self.clock, "kernel": t.clock.get("kernel", "")})
        notes = {**self.notes, **({"kernel": t.notes["kernel"]} if "kernel" in t.notes else {})}
        bound = False
        for name in ("kernel", m.best_torch_name):
            dev = m.kernel if name == "kernel" else m.baseline(name) if name else None
            if dev is not None and name in latency:
                bound = bound or dev.median < LAUNCH_BOUND_MS or latency[name].median - dev.median > dev.median
        failure = "; ".join(f"{k}: {v}" for k, v in notes.items()) or None
        return dataclasses.replace(m, launch_bound=bound, failure=failure)


class Recent:
    """Values kept per key for `refresh_s` seconds: an evaluator's baseline times (`Reuse.baselines`) and its
    clean probes (`Reuse.clean_probes`).

    Baselines do not depend on the candidate; timing them for each one (and compiling torch.compile in
    each fresh worker) is most of a search's judging time. Every `refresh_s` they are timed again for that
    candidate as `python -m kevolve.evaluate` always does; what is kept are the times the clean baseline worker took
    (alone, `torch_baselines.time_alone`, then beside the kernel's rounds: `paced.Paced`). A clean probe
    (`timed.clean_probe`) does not depend on the candidate either, and is kept the same way: only ever one measured
    before a kernel loaded."""

    def __init__(self, refresh_s: float):
        self.refresh_s, self.entries = refresh_s, {}

    def get(self, key):
        hit = self.entries.get(key)
        return hit[1] if hit and time.monotonic() - hit[0] < self.refresh_s else None

    def put(self, key, value) -> None:
        self.entries[key] = (time.monotonic(), value)


class Reuse:
    """An evaluator's state across judgements: a spare worker process started while the last candidate
    was judged (its Python and torch imports are done; no candidate code has touched
    it), the clean baseline worker (kept warm, with the graphs torch.compile made there), the reference cache, the
    baseline times and the clean probes (`Recent`)."""

    def __init__(self, options: Options, reference_bytes: int, baseline_refresh_s: float):
        self.options = options
        self.references = References(reference_bytes)
        self.baselines = Recent(baseline_refresh_s) if baseline_refresh_s > 0 else None
        self.clean_probes = Recent(baseline_refresh_s) if baseline_refresh_s > 0 else None
        self._spare: WorkerProcess | None = None
        self.baseline = BaselineWorker()
        self.compiled: dict = {}          # (task, its folder, device) -> its compiled checks (`fused`)
        self.phases = None                # the latest judgement's or comparison's `Phases` (its `snapshot`)

    def fused(self, task, device: str):
        """The task's compiled checks on `device` (`judge.evaluator.fused.Fused`), compiled once for every judgement."""
        key = (task.name, str(task.dir), device)
        if key not in self.compiled:
            self.compiled[key] = Fused(task, device)
        return self.compiled[key]

    def worker(self) -> WorkerProcess:
        """The spare if it is alive, else a new worker."""
        spare, self._spare = self._spare, None
        if spare is not None and spare.proc.poll() is None:
            return spare
        if spare is not None:
            spare.close()
        return WorkerProcess(self.options)

    def start_spare(self) -> None:
        """Starts the next judgement's worker. `judge` calls this once its own worker has loaded, so the
        spare's imports overlap the correctness calls, never the timed ones."""
        if self._spare is None:
            self._spare = WorkerProcess(self.options)

    def close(self) -> None:
        self.baseline.close()
        if self._spare is not None:
            self._spare.close()
            self._spare = None
