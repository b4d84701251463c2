"""Timing, the same code for a candidate and for torch's baselines (runs inside the worker).

Each timed call, on CUDA: flush the L2 (a memset larger than the cache, enqueued before the start event so
the launch overhead hides behind it), record the start event, call, record an end event, synchronise the
whole device, record a third event. A sample is the larger of the stream time (start→end) and the device
time (start→third, less the median cost of the synchronisation, measured on an empty call the same way):
work hidden on another stream or thread is counted, and no kernel is timed faster than its own stream
shows. On the CPU: flush the last-level cache by writing a buffer twice its size, then a monotonic clock.

Calls are interleaved — kernel, eager, compile, kernel, eager, … with the order rotated every repetition — so
clock drift and thermal state affect all alike, and inputs rotate among several sets. Warm-up calls come
first. Returns every sample in milliseconds; the caller summarises (median, spread).
Not guaranteed: stable numbers on a busy machine — compare ratios measured side by side in one run.
"""
from __future__ import annotations

import os
import time
from typing import Callable

_FLUSH: dict[str, object] = {}


def _flush_buffer(device: str):
    import torch
    if device not in _FLUSH:
        if device == "cuda":
            l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
            nbytes = max(2 * l2, 64 << 20)
        else:
            nbytes = 2 * _llc_bytes()
        _FLUSH[device] = torch.empty(nbytes // 4, dtype=torch.float32, device=device)
    return _FLUSH[device]


def _llc_bytes() -> int:
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


def interleaved(fns: dict[str, Callable[[int], None]], device: str, reps: int = 100, budget_s: float = 1.0,
                rotate: int = 1, warmup: int = 3, min_reps: int = 5,
                prepare: dict[str, Callable[[int], None]] | None = None) -> dict[str, list[float]]:
    """Times each `fn(k)` (k = input set) interleaved; stops at `reps` or when `budget_s` is spent.
    `prepare[name](k)` runs before each of that function's calls, outside the timed interval (the
    harness poisons the kernel's outputs there, so a timed call cannot skip work a checked call does).

    Each sample is max(stream time, device time - synchronisation cost): the stream time (start and end
    events around the call on the given stream) is exact for work on that stream, and a lower bound that
    keeps a tiny kernel from being timed as zero; the device time (end event after a device-wide
    synchronisation, less that synchronisation's median cost measured on an empty call) catches work
    hidden on other streams or threads."""
    flush = _flush_buffer(device)
    names = list(fns)
    for _ in range(warmup):
        for n in names:
            fns[n](0)
    timer = _cuda_timer(flush) if device == "cuda" else _cpu_timer(flush)
    if device == "cuda":
        import torch
        torch.cuda.synchronize()
    raw: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
    null: list[tuple[float, float]] = []
    start = time.perf_counter()
    for r in range(reps):
        order = names[r % len(names):] + names[:r % len(names)]
        for n in order:
            if prepare and n in prepare:
                prepare[n](r % rotate)
            raw[n].append(timer(lambda: fns[n](r % rotate)))
        null.append(timer(lambda: None))
        if r + 1 >= min_reps and time.perf_counter() - start > budget_s * len(names):
            break
    sync_cost = sorted(d for _, d in null)[len(null) // 2]
    return {n: [max(s, d - sync_cost) for s, d in v] for n, v in raw.items()} | {"_sync": [d for _, d in null]}


def _cuda_timer(flush):
    import torch
    start, end, after_sync = (torch.cuda.Event(enable_timing=True) for _ in range(3))

    def timed(call) -> tuple[float, float]:
        flush.zero_()
        torch.cuda.synchronize()          # nothing (a side stream's work included) may start before `start`
        start.record()
        call()
        end.record()
        torch.cuda.synchronize()          # device-wide: side streams and threads are counted
        after_sync.record()
        after_sync.synchronize()
        return start.elapsed_time(end), start.elapsed_time(after_sync)
    return timed


def _cpu_timer(flush):
    def timed(call) -> tuple[float, float]:
        flush.fill_(1.0)
        t0 = time.perf_counter()
        call()
        t = (time.perf_counter() - t0) * 1e3
        return t, t                       # the host clock already sees everything the call did
    return timed


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
