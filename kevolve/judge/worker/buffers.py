"""The worker's guarded buffers: where a kernel's inputs, outputs and workspace live, how they are poisoned before
every call, and how a write outside them is found.

`allocate` puts every buffer between two guard zones (and, on the correctness calls, ends inputs and outputs
near or against memory that faults — a PROT_NONE page, or unmapped device memory — their bases 16-byte
aligned on the first two calls, not on the third); `poison_all` fills outputs with NaN and the workspace, integer
outputs and guard zones with fresh random bytes, for many buffer sets in a few device operations; `overruns` /
`overruns_all` compare the guards bit for bit with what was written into them. Used by the worker's correctness
calls and by the timing session (`judge.worker.session`); all of it runs in the worker, where the kernel does.
"""
from __future__ import annotations

import math
import os
import sys
from typing import TYPE_CHECKING

from kevolve.judge.worker import vmm

if TYPE_CHECKING:
    import torch

GUARD = 4096                                # elements of guard before and after every buffer
WORKSPACE_ALIGN = 16                        # bytes: the workspace's promised alignment, and its skew on edge calls
VECTOR_ALIGN = 16                           # bytes: x86 and NEON aligned vector loads need 16, 32 or 64, scalars
                                            # none. The first calls' page-ended bases are multiples of it (a vector
                                            # path runs), the third call's never are


def random_bytes(n: int, device) -> "torch.Tensor":
    """n bytes that change from call to call (a fresh OS-seeded generator each time), drawn as 64-bit words."""
    import torch
    g = torch.Generator(device=device)
    g.manual_seed(int.from_bytes(os.urandom(8), "little") & ((1 << 63) - 1))
    words = torch.empty(-(-n // 8), dtype=torch.int64, device=device).random_(-(1 << 63), (1 << 63) - 1, generator=g)
    return words.view(torch.uint8)[:n]


POISON_BLOCK = 1 << 20      # bytes of fresh randomness per poisoning; larger buffers repeat it (CPU RNG: ~3 ns a byte)


def poison_all(bufs: list[dict]) -> None:
    """Poisons every output and workspace of `bufs` and arms every guard zone with fresh bytes, in a
    few device operations rather than a few per tensor. Float outputs get NaN (so an unwritten element shows);
    guard zones, the workspace and integer outputs get random bytes that differ between calls, so no kernel can
    use the poison as an initial value: one block of fresh randomness (`POISON_BLOCK` at most, one OS-seeded
    generator), handed out in consecutive slices from a random start, tiled over anything larger than it.
    Each guard's expected bytes are its slice of that block, which `overruns` compares bit for bit."""
    import torch
    zones = [(b, name, k, g.view(-1).view(torch.uint8)) for b in bufs for name, gs in b["guards"].items()
             for k, g in enumerate(gs)]
    random, nan = [], []
    for b in bufs:
        for t in list(b["outputs"].values()) + [b["workspace"]]:
            if t.numel():
                (nan if t.dtype.is_floating_point else random).append(t)
    dst = [z[3] for z in zones] + [t.view(-1).view(torch.uint8) for t in random]
    total = sum(d.numel() for d in dst)
    if total:
        block = random_bytes(min(total, POISON_BLOCK), dst[0].device)
        size, at = block.numel(), int.from_bytes(os.urandom(4), "little") % block.numel()
        small, src = [], []
        for d in dst:
            n = d.numel()
            if n <= size:
                at = 0 if at + n > size else at
                small.append(d)
                src.append(block[at:at + n])
                at += n
            else:                                   # tiled: whole copies of the block, then its head
                m = n // size
                d[:m * size].view(m, size).copy_(block.expand(m, size))
                if n > m * size:
                    d[m * size:].copy_(block[:n - m * size])
        if small:
            torch._foreach_copy_(small, src)
        for (b, name, k, _), expect in zip(zones, src):   # guards come first, and none outgrows the block
            b["expected"][(name, k)] = expect
    for t in nan:
        t.fill_(float("nan"))


def overruns_all(bufs: list[dict]) -> list[list[str]]:
    """`overruns` of each of `bufs`, in one comparison of all their guard zones when none was touched."""
    import torch
    zones = [(g.view(-1).view(torch.uint8), b["expected"][(name, k)]) for b in bufs
             for name, gs in b["guards"].items() for k, g in enumerate(gs)]
    if not zones or torch.equal(torch.cat([z for z, _ in zones]), torch.cat([e for _, e in zones])):
        return [[] for _ in bufs]
    return [overruns(b) for b in bufs]


_NO_UNMAPPED_END: list[str] = []        # why page-ended device buffers failed here, once (then: skewed buffers)


def page_ended(elements: int, dtype, device: str, keep: list) -> "torch.Tensor":
    """A tensor of `elements` on `device` whose last byte is followed by memory that faults when touched: a
    PROT_NONE page on the CPU, an unmapped granule of device memory on the GPU (`judge.worker.vmm`). Its base is the end
    minus its bytes (`allocate` picks `elements` to place a buffer's base inside it).
    What keeps the memory mapped is appended to `keep`."""
    import torch
    item = dtype.itemsize
    size = elements * item
    if device != "cpu":
        return vmm.mapped(size, keep).view(dtype)     # raises OSError or RuntimeError where the driver refuses
    import ctypes
    import mmap
    page = mmap.PAGESIZE
    span = -(-size // page) * page
    region = mmap.mmap(-1, span + page, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    base = ctypes.addressof(ctypes.c_char.from_buffer(region))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mprotect(ctypes.c_void_p(base + span), ctypes.c_size_t(page), 0) != 0:
        raise OSError(ctypes.get_errno(), "mprotect of the guard page failed")
    whole = torch.frombuffer(region, dtype=torch.uint8, count=span, offset=0)   # holds a reference to region
    keep.append(region)
    return whole[span - size:].view(dtype)


# allocate's `edge` -> the layout a verdict names: (where buffers cannot end against unmapped memory, where they do)
LAYOUTS = {"": ("aligned", "aligned"), "aligned": ("aligned", "aligned, page-ended"),
           "misaligned": ("edge, skewed: no unmapped end here", "edge")}


def allocate(task, device: str, sizes: dict, edge: str = "") -> dict:
    """Every buffer sits between two guard zones (`poison_all` fills them with fresh random bytes before
    each call; `overruns` compares them bit for bit). With `edge="aligned"` (the first and second correctness
    calls' set): every input and output starts `VECTOR_ALIGN`-aligned, so a kernel's 16-byte vector path runs, and
    ends one element to 16 bytes before memory that faults (its end padded to the next 16-byte boundary, or by 16
    bytes where it is on one), those bytes a guard zone: a write just past the end shows in the guards, and a
    read or write past the 16-byte boundary after the end — a whole vector or line past the last row — faults,
    on the aligned path the third call (below) never runs. With
    `edge="misaligned"` (the third correctness call's set): every
    input and output instead ends against memory that faults when touched (`page_ended`: a PROT_NONE page on
    the CPU, unmapped device memory on the GPU), so reading past its end, or writing past it and putting the
    bytes back before the call returns (which guards, compared after the call, cannot see), is a crash verdict;
    and its base is never `VECTOR_ALIGN`-aligned (only element alignment is promised, so a kernel that
    assumes a vector-aligned base from the shape faults too): where the end would leave it aligned (its size a
    multiple of `VECTOR_ALIGN` bytes), it ends one element short instead, that element a guard zone (its base
    then one element short of an aligned address; touching two past its end faults). The guard before it
    stays. Only on the GPU, where the driver may refuse such mappings, are they skewed instead (guards on both
    sides, the layout says so); on the CPU a failed mapping fails the call. The workspace starts
    `WORKSPACE_ALIGN` bytes past an aligned address (the contract promises the untyped workspace 16-byte
    alignment, enough for any scalar or 16-byte vector a kernel keeps there), with both guards. `mappings` keeps
    the page-ended memory alive as long as the buffer set."""
    import torch
    if edge not in LAYOUTS:
        raise ValueError(f"allocate: edge={edge!r}, not one of {sorted(LAYOUTS)}")
    t, guards, keep = task, {}, []

    def mk(name: str, shape: tuple, dtype, role: str) -> "torch.Tensor":
        n = math.prod(shape)
        if edge and role in ("input", "output") and not _NO_UNMAPPED_END:
            item = dtype.itemsize
            if edge == "aligned":                       # 1 element to 16 bytes of guard, then the fault: aligned base
                short = (VECTOR_ALIGN - (n * item) % VECTOR_ALIGN) // item if item < VECTOR_ALIGN else 1
            else:
                short = 1 if (n * item) % VECTOR_ALIGN == 0 and item < VECTOR_ALIGN else 0
            try:
                flat = page_ended(GUARD + n + short, dtype, device, keep)
            except (OSError, RuntimeError) as e:        # a driver without virtual memory management: skewed
                if device == "cpu" or isinstance(e, vmm.OutOfMemoryError):    # no such excuse (a kernel that
                    raise                               # used up the memory in an earlier call must not earn skewed
                                                        # buffers; other judgements' memory: the search retries)
                _NO_UNMAPPED_END.append(f"{type(e).__name__}: {e}")
                print(f"kevolve worker: buffers cannot end against unmapped memory here ({_NO_UNMAPPED_END[0]}); "
                      "the third call's buffers are skewed instead", file=sys.stderr, flush=True)
            else:
                guards[name] = [flat[:GUARD]] + ([flat[GUARD + n:]] if short else [])
                return flat[GUARD:GUARD + n].view(shape)
        skew = (WORKSPACE_ALIGN if role == "workspace" else 1) if edge == "misaligned" else 0
        flat = torch.empty(GUARD + skew + n + GUARD, dtype=dtype, device=device)
        guards[name] = [flat[:GUARD + skew], flat[GUARD + skew + n:]]
        return flat[GUARD + skew:GUARD + skew + n].view(shape)
    dt = lambda s: getattr(torch, s.dtype)  # noqa: E731
    return {"inputs": {s.name: mk(s.name, t.shape(s, sizes), dt(s), "input") for s in t.inputs},
            "outputs": {s.name: mk(s.name, t.shape(s, sizes), dt(s), "output") for s in t.outputs},
            "workspace": mk("workspace", (t.workspace(sizes),), torch.uint8, "workspace"), "guards": guards,
            "expected": {}, "mappings": keep,
            "layout": LAYOUTS[edge][0 if _NO_UNMAPPED_END else 1]}


def overruns(buf: dict) -> list[str]:
    """Buffers whose guard zones (before or after) no longer hold the exact bytes written before the call."""
    import torch
    bad = []
    for name, zones in buf["guards"].items():
        for k, g in enumerate(zones):
            if not torch.equal(g.view(torch.uint8), buf["expected"][(name, k)]):
                bad.append(f"{name} ({'before its start' if k == 0 else 'past its end'})")
    return bad
