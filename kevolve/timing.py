"""Timing, the same code for a candidate and for torch's baselines (runs inside the worker).

Each timed call, on CUDA: flush the L2 (a memset larger than the cache, enqueued before the start event so
the launch overhead hides behind it), record the start event, call, synchronise the whole device, record the
end event. The device-wide synchronisation counts work a kernel hides on another stream or thread; its own
cost is measured by timing an empty call the same way, and that median is subtracted. On the CPU: flush the
last-level cache by writing a buffer twice its size, then a monotonic clock around the call.

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
                rotate: int = 1, warmup: int = 3, min_reps: int = 5) -> dict[str, list[float]]:
    """Times each `fn(k)` (k = input set) interleaved; stops at `reps` or when `budget_s` is spent."""
    flush = _flush_buffer(device)
    names = list(fns)
    for _ in range(warmup):
        for n in names:
            fns[n](0)
    if device == "cuda":
        import torch
        torch.cuda.synchronize()
        timer = _cuda_timer(flush)
    else:
        timer = _cpu_timer(flush)
    samples: dict[str, list[float]] = {n: [] for n in names}
    null: list[float] = []
    start = time.perf_counter()
    for r in range(reps):
        order = names[r % len(names):] + names[:r % len(names)]
        for n in order:
            samples[n].append(timer(lambda: fns[n](r % rotate)))
        null.append(timer(lambda: None))
        if r + 1 >= min_reps and time.perf_counter() - start > budget_s * len(names):
            break
    overhead = sorted(null)[len(null) // 2]
    return {n: [max(s - overhead, 1e-6) for s in v] for n, v in samples.items()} | {"_overhead": null}


def _cuda_timer(flush):
    import torch
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def timed(call) -> float:
        flush.zero_()
        start.record()
        call()
        torch.cuda.synchronize()          # device-wide: side streams and threads are counted
        end.record()
        end.synchronize()
        return start.elapsed_time(end)
    return timed


def _cpu_timer(flush):
    def timed(call) -> float:
        flush.fill_(1.0)
        t0 = time.perf_counter()
        call()
        return (time.perf_counter() - t0) * 1e3
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
