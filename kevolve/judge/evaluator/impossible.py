"""Times no hardware delivers: a rejection on every configuration, however small.

Two limits, both measured or read before the kernel loads, in a worker no candidate code has run in yet, and
held by the evaluator (so nothing the kernel later does in its worker moves them):
- **the trivial call** (CPU): the least time the worker's clock has given a native function that does nothing,
  bound with the task's C signature and called with arguments of its kind through the same path as a
  kernel's timed calls (`Worker.trivial`). A kernel whose median call is under `TRIVIAL_SHARE` of it reports
  less time than the call itself costs.
- **the memory floor at peak** (every target): before each timed call every byte of the kernel's inputs was
  evicted from the caches (the L2 flush on CUDA; `judge.worker.evict` or the LLC rewrite on the CPU), so
  reading them once comes from device memory, at no more than its peak bandwidth: the properties' (double
  data rate × bus width) on CUDA, else `PEAK_OVER_COPY` × the copy bandwidth measured at the worker's start.
  Only the inputs count: outputs may still sit in a write-back cache when the call returns.

What this does not catch: a forged time above both limits (a kernel's samples divided by a few); against
that, the outside clock (`judge.evaluator.outside`) and the memory floor at the measured bandwidth
(`timed.floor_verdict`, on CUDA at 20 µs and over) remain.
"""
from __future__ import annotations

from dataclasses import dataclass

from kevolve.judge import protocol
from kevolve.judge.rounds import set_bytes

TRIVIAL_SHARE = 0.5        # a median call under half the trivial call's least time: impossible
TRIVIAL_CALLS = 200        # trivial calls timed per judgement (about 1 µs each on the CPU)
PEAK_OVER_COPY = {"cpu": 4.0, "cuda": 1.5}   # peak read bandwidth at most this × the measured copy's (no properties)



@dataclass(frozen=True)
class Limits:
    """What no honest call can beat, for one judgement: `trivial_ms` (None: not measured) and `peak_gbs`, the
    device memory's read bandwidth bound (None: unknown), with `peak_from` saying where it came from."""
    trivial_ms: float | None = None
    peak_gbs: float | None = None
    peak_from: str = ""
    cycle_ms: float | None = None         # CUDA: what one cycle of `torch.cuda._sleep` adds (the canary's unit)


def measure(worker, info: protocol.Started, target: str) -> Limits:
    """The limits of this worker's device, read before the kernel loads (`harness._judge`)."""
    reply = worker.call(protocol.Trivial(TRIVIAL_CALLS), 60)
    samples = [float(s) for s in reply.samples if isinstance(s, (int, float)) and s > 0] \
        if isinstance(reply, protocol.TrivialTimes) else []
    if target == "cuda" and info.peak_gbs:
        peak, source = info.peak_gbs, "the device's properties"
    elif info.bandwidth_gbs:
        factor = PEAK_OVER_COPY.get(target, 4.0)
        peak, source = factor * info.bandwidth_gbs, f"{factor:g} x the measured copy bandwidth"
    else:
        peak, source = None, ""
    cycle = reply.cycle_ms if isinstance(reply, protocol.TrivialTimes) else None
    return Limits(trivial_ms=min(samples) if samples else None, peak_gbs=peak, peak_from=source,
                  cycle_ms=cycle if isinstance(cycle, (int, float)) and cycle > 0 else None)


def verdict(limits: Limits, task, sizes: dict[str, int], kernel_ms: float) -> str | None:
    """Why `kernel_ms` per call is impossible for these sizes, or None."""
    if limits.trivial_ms and kernel_ms < TRIVIAL_SHARE * limits.trivial_ms:
        return (f"timed at {kernel_ms * 1e3:.3f} us per call, under {TRIVIAL_SHARE:g}x the "
                f"{limits.trivial_ms * 1e3:.3f} us the same clock gave a native call that does nothing: a time no "
                "call takes — forged, or hidden from the clock")
    if limits.peak_gbs:
        read = set_bytes(task, sizes, task.inputs)
        floor_ms = read / (limits.peak_gbs * 1e9) * 1e3
        if kernel_ms < floor_ms:
            return (f"timed at {kernel_ms * 1e3:.3f} us per call, under the {floor_ms * 1e3:.3f} us its "
                    f"{read} input bytes take to read at {limits.peak_gbs:.0f} GB/s "
                    f"({limits.peak_from}), evicted before the call: a time no memory delivers — work skipped, or "
                    "hidden from the clock")
    return None
