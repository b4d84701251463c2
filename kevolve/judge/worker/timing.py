"""How we time: the clock, the same code for a candidate and for torch's baselines (runs inside the worker).

What a number means. On CUDA the headline time of a call is its device time with the host's launch overhead
removed, measured the same way for the kernel and every baseline:
- graph clock (the default): a CUDA graph holds N × (L2 flush, call), each call on its own freshly drawn
  inputs and, for a kernel, its own output buffers. One sample is one replay: events around `replay()` on
  the stream (stream time), then a device-wide synchronisation and a third event (device time). The same
  is done for a graph of N flushes alone; a call's time is (max(stream, device − sync cost) − flushes) / N,
  where the sync cost and the flushes' time are the medians of that empty graph's samples. Host work
  (ctypes, Python, torch.compile's guards and launcher) does not run on replay, so it is not counted;
  every byte the call moves comes from DRAM, since the flush evicted the L2 before it.
- queued clock (when a callable cannot be captured: capture raises, or torch.compile refuses): per call,
  the flush is enqueued, then the start event, the call, the end event — no synchronisation between, so the
  host's launch overhead hides behind the flush (triton's `do_bench` style) — then a device-wide
  synchronisation and a third event; the sample is max(stream, device − sync cost) as above.
- synced latency (a second column, never the headline): synchronise the device, events around one call,
  synchronise the device again: what a caller who waits for each call sees, launch overhead included.
The device term (after a device-wide synchronisation) counts work a call hides on another stream, a
persistent kernel or a thread; the stream term keeps a call from timing faster than its own stream shows.

On the CPU there is no launch overhead to remove: a sample is the wall time of one call (monotonic clock)
after the call was made cold: every buffer the harness hands it (inputs; a kernel's outputs and workspace)
evicted from every cache level, line by line (`judge.worker.evict`; `CpuClock`), so its reads come from DRAM.

What a number does not mean: stable across machines or a busy GPU — compare ratios measured side by side,
interleaved, in one worker. The verification of timed calls (fresh inputs per call, outputs poisoned
before and checked after every call) is `judge.worker.session` and `judge.evaluator.timed`; this module only measures.
"""
from __future__ import annotations

import os
import time
from typing import Callable

from kevolve.config import env
from kevolve.judge.options import CPU_FLUSH

_FLUSH: dict[str, object] = {}


def flush_buffer(device: str):
    """The buffer whose rewrite evicts the cache: 2 × L2 (at least 64 MiB) on CUDA, 2 × LLC on the CPU (the `llc`
    flush, at most `LLC_FLUSH_CAP`)."""
    import torch
    if device not in _FLUSH:
        if device == "cuda":
            l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
            nbytes = max(2 * l2, 64 << 20)
        else:
            nbytes = min(2 * _llc_bytes(), LLC_FLUSH_CAP)
        _FLUSH[device] = torch.empty(nbytes // 4, dtype=torch.float32, device=device)
    return _FLUSH[device]


def _llc_bytes() -> int:
    """The host's last-level cache in bytes, from sysfs; `KEVOLVE_LLC_BYTES` overrides it (to show what a host
    with another cache would cost: only the `llc` flush reads it)."""
    if env.llc_bytes():
        return int(env.llc_bytes() or 0)
    best = 0
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for idx in os.listdir(base):
            try:
                text = open(f"{base}/{idx}/size").read().strip()
                mult = {"K": 1 << 10, "M": 1 << 20}.get(text[-1], 1)
                best = max(best, int(text.rstrip("KM")) * mult)
            except (OSError, ValueError):
                continue
    except OSError:
        pass
    return best or (32 << 20)


class CudaClock:
    """Samples as (stream ms, device ms) pairs; every method returns once the device is idle."""

    def __init__(self):
        import torch
        self.torch, self.flush = torch, flush_buffer("cuda")
        self.events = [torch.cuda.Event(enable_timing=True) for _ in range(3)]

    def capture(self, call: Callable[[int], None], n: int):
        """A CUDA graph of n × (flush, call(i)), captured on a blocking stream (`capture_stream`; a C-ABI kernel
        must take `torch.cuda.current_stream()` at call time). Raises whatever capture raises."""
        torch = self.torch
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, stream=capture_stream()):
                for i in range(n):
                    self.flush.zero_()
                    call(i)
        except BaseException:
            try:                          # a failed capture leaves nothing queued; make sure of it
                torch.cuda.synchronize()
            except RuntimeError:
                pass
            raise
        return graph

    def replay(self, graph) -> tuple[float, float]:
        return self._around(graph.replay, flush=False, sync_first=False)

    def queued(self, call: Callable[[], None]) -> tuple[float, float]:
        return self._around(call, flush=True, sync_first=False)

    def synced(self, call: Callable[[], None]) -> tuple[float, float]:
        return self._around(call, flush=True, sync_first=True)

    def _around(self, call, flush: bool, sync_first: bool) -> tuple[float, float]:
        torch = self.torch
        start, end, after = self.events
        if flush:
            self.flush.zero_()
        if sync_first:
            torch.cuda.synchronize()
        start.record()
        call()
        end.record()
        torch.cuda.synchronize()          # device-wide: other streams, persistent kernels, threads' launches
        after.record()
        after.synchronize()
        return start.elapsed_time(end), start.elapsed_time(after)


_CAPTURE: list = []


def capture_stream():
    """The stream graphs are captured on: one created blocking (driver API, flags 0), unlike torch's pool
    streams. A launch on the legacy default stream — `kernel<<<grid, block>>>` in a torch extension, as
    robust-kbench's kernels write it — then depends implicitly on the capturing stream, which CUDA refuses
    (cudaErrorStreamCaptureImplicit): the capture fails and the call is timed queued, on the stream it
    really uses. On torch's non-blocking capture stream the same launch would run once, eagerly, during
    capture and be missing from the graph, so every replay would leave its outputs stale. None (torch's own
    capture stream) where the driver library cannot be reached."""
    if not _CAPTURE:
        import ctypes

        import torch
        stream = None
        try:
            torch.cuda.current_stream().synchronize()          # torch's context is current on this thread
            handle = ctypes.c_void_p()
            if ctypes.CDLL("libcuda.so.1").cuStreamCreate(ctypes.byref(handle), ctypes.c_uint(0)) == 0:
                stream = torch.cuda.ExternalStream(handle.value)
        except (OSError, AttributeError):
            pass
        _CAPTURE.append(stream)
    return _CAPTURE[0]


class CpuClock:
    """Wall time of one call after the call is made cold. `lines` (the default): every buffer the harness hands
    the contender is evicted from every cache level (`judge.worker.evict`), at a cost proportional to those bytes;
    `llc` (`resources.cpu_flush=llc`, the older way): a buffer of 2 × the last-level cache (at most
    `LLC_FLUSH_CAP`) is rewritten before every call, which also evicts what the contender allocates itself, at a
    cost that grows with the host's cache (99 ms a call on a 300 MiB L3). Either runs on the calling thread alone:
    torch's `fill_` splits a fill over its intra-op threads, and on a loaded machine the main thread then spins at
    the pool's barrier for a preempted helper — noise that the outside clock's under bound (`judge.evaluator.outside`)
    would charge to the kernel. `flushed_bytes` and `flush_s` count the eviction's work."""

    def __init__(self, evictor=None, mode: str = "lines"):
        if mode not in CPU_FLUSH:
            raise ValueError(f"cpu_flush={mode!r}: one of {', '.join(CPU_FLUSH)}")
        self.evictor = evictor if mode == "lines" else None
        self.flush = None if self.evictor is not None else flush_buffer("cpu").numpy()
        self.flushed_bytes, self.flush_s = 0, 0.0

    def wall(self, call: Callable[[], None], ranges=None) -> float:
        """ms of `call()`, after `ranges` (`Evictor.ranges` of the contender's buffers; None: nothing of the
        harness's) were evicted — or, in `llc` mode (or without an evictor), after the LLC-sized rewrite."""
        f0 = time.perf_counter()
        if self.flush is not None:
            self.flush.fill(1.0)
            self.flushed_bytes += self.flush.nbytes
        elif ranges is not None:
            self.flushed_bytes += self.evictor.evict(ranges)
        t0 = time.perf_counter()
        call()
        t1 = time.perf_counter()
        self.flush_s += t0 - f0
        return (t1 - t0) * 1e3


LLC_FLUSH_CAP = 1 << 30       # the `llc` mode's rewrite: 2 × LLC, at most this many bytes


def canaried(call: Callable[[int], None], canary: float, cuda: bool) -> Callable[[int], None]:
    """`call` with the evaluator's canary added inside its timed interval, just after it: on the CPU a spin of
    `canary` ms on this thread's clock, on CUDA `torch.cuda._sleep(canary)` (cycles) on the call's stream — a known
    duration the evaluator measured in a worker no candidate had run in (`judge.evaluator.canary`). After, not
    before: a call made just after its buffers were evicted runs slower than one made after a pause (the
    eviction's write-backs are still draining), so a canary first shortened the call it preceded (an honest CPU
    seed once reported 11 of 27 us)."""
    if cuda:
        import torch
        cycles = int(canary)

        def slept(i: int) -> None:
            call(i)
            torch.cuda._sleep(cycles)
        return slept
    seconds = canary / 1e3

    def spun(i: int) -> None:
        call(i)
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass
    return spun


# ---------------------------------------------------------------------- from raw pairs to per-call times
def median(values: list[float]) -> float:
    s = sorted(values)
    return s[len(s) // 2] if s else 0.0


def per_call(pairs: list, null: list, calls: int = 1, graph: bool = False) -> list[float]:
    """Per-call milliseconds from raw (stream, device) samples of one contender and of the empty measurement
    taken the same way (`null`: a graph of flushes only, or an empty queued/synced call): each sample is
    max(stream, device − sync cost), less the empty graph's stream time (the flushes) when `graph`, over
    `calls` calls. Never
    below a nanosecond (a time that low is rejected by the floor rule, not divided by)."""
    sync_cost = median([d - s for s, d in null]) if null else 0.0
    base = median([s for s, _ in null]) if null and graph else 0.0
    return [max(1e-6, (max(s, d - sync_cost) - base) / calls) for s, d in pairs]


def copy_bandwidth(device: str) -> float:
    """Bytes read plus written per second by a large device-local copy, in GB/s: the memory ceiling."""
    import torch
    n = (1 << 30 if device == "cuda" else 64 << 20) // 4
    a = torch.ones(n, dtype=torch.float32, device=device)
    b = torch.empty_like(a)
    best = float("inf")
    for _ in range(5):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        b.copy_(a)
        if device == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    del a, b
    return 2 * n * 4 / best / 1e9
