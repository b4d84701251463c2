"""GPU buffers that end against unmapped device memory, for the edge call's buffers (`buffers.allocate`): a read
or write past the end faults (an illegal address: a crash verdict), as a PROT_NONE page does on the CPU.

CUDA's caching allocator hands out pieces of large mapped segments, so reading or writing a little past a
tensor's end lands in mapped memory (a guard zone, or a neighbour) and faults only where a kernel strays far.
Here a buffer gets its own virtual address range through the driver's virtual memory management
(`cuMemAddressReserve`, `cuMemCreate`, `cuMemMap`, `cuMemSetAccess`): the range reserved is one allocation
granule (2 MiB on an H200) longer than the physical memory mapped into it, and the buffer's last byte is the last
mapped byte, so the next byte has no mapping. `mapped(nbytes, keep)` returns a uint8 tensor of exactly `nbytes`
ending there; the mapping is unmapped once `keep` (the buffer set's list) and every view of it let it go.

Such memory is not the caching allocator's: CUDA IPC (`judge.exchange.describe`) cannot share it, so the worker
exports copies of these buffers (`owns`). Runs in the worker, before and after kernel calls, never during one.
Not guaranteed: a fault for an access more than a granule past the end (the next reservation may be mapped).
"""
from __future__ import annotations

import ctypes

_LIB = None
_MAPPED: dict[int, int] = {}       # start address -> bytes mapped, for `owns`


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _Flags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class _Prop(ctypes.Structure):          # CUmemAllocationProp
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", _Location),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", _Flags)]


class _Access(ctypes.Structure):        # CUmemAccessDesc
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


_PINNED, _DEVICE, _READ_WRITE = 1, 1, 3     # CU_MEM_ALLOCATION_TYPE_PINNED, CU_MEM_LOCATION_TYPE_DEVICE, PROT_READWRITE


def _lib():
    global _LIB
    if _LIB is None:
        lib = ctypes.CDLL("libcuda.so.1")
        u64, size = ctypes.c_uint64, ctypes.c_size_t
        lib.cuMemGetAllocationGranularity.argtypes = [ctypes.POINTER(size), ctypes.POINTER(_Prop), ctypes.c_int]
        lib.cuMemAddressReserve.argtypes = [ctypes.POINTER(u64), size, size, u64, ctypes.c_ulonglong]
        lib.cuMemCreate.argtypes = [ctypes.POINTER(u64), size, ctypes.POINTER(_Prop), ctypes.c_ulonglong]
        lib.cuMemMap.argtypes = [u64, size, size, u64, ctypes.c_ulonglong]
        lib.cuMemSetAccess.argtypes = [u64, size, ctypes.POINTER(_Access), size]
        lib.cuMemUnmap.argtypes = [u64, size]
        lib.cuMemRelease.argtypes = [u64]
        lib.cuMemAddressFree.argtypes = [u64, size]
        _LIB = lib
    return _LIB


class OutOfMemoryError(RuntimeError):
    """The device had no memory for the mapping (named as torch names its own, so that a search judges the
    candidate again when other judgements held the memory: `search.outcome.harness_failure`)."""


_OUT_OF_MEMORY = 2                      # CUDA_ERROR_OUT_OF_MEMORY


def _check(rc: int, what: str) -> None:
    if rc != 0:
        name = ctypes.c_char_p()
        _lib().cuGetErrorName(rc, ctypes.byref(name))
        text = f"{what} failed: {(name.value or b'').decode() or rc}"
        raise OutOfMemoryError(text) if rc == _OUT_OF_MEMORY else RuntimeError(text)


class _Mapping:
    """One reserved range with its mapped head; what `torch.as_tensor` views (CUDA array interface), freed when the
    last view goes."""

    def __init__(self, nbytes: int, device: int):
        lib = _lib()
        prop = _Prop(type=_PINNED, location=_Location(type=_DEVICE, id=device))
        gran = ctypes.c_size_t()
        _check(lib.cuMemGetAllocationGranularity(ctypes.byref(gran), ctypes.byref(prop), 0),
               "cuMemGetAllocationGranularity")
        g = gran.value
        self.span = max(g, -(-nbytes // g) * g)
        self.reserved = self.span + g                       # one unmapped granule after the mapped span
        self.base, self.handle = ctypes.c_uint64(), ctypes.c_uint64()
        _check(lib.cuMemAddressReserve(ctypes.byref(self.base), self.reserved, g, 0, 0), "cuMemAddressReserve")
        try:
            _check(lib.cuMemCreate(ctypes.byref(self.handle), self.span, ctypes.byref(prop), 0), "cuMemCreate")
            _check(lib.cuMemMap(self.base.value, self.span, 0, self.handle.value, 0), "cuMemMap")
            access = _Access(location=_Location(type=_DEVICE, id=device), flags=_READ_WRITE)
            _check(lib.cuMemSetAccess(self.base.value, self.span, ctypes.byref(access), 1), "cuMemSetAccess")
        except RuntimeError:
            self.free()
            raise
        self.start = self.base.value + self.span - nbytes
        _MAPPED[self.start] = nbytes
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (self.start, False),
                                         "version": 3, "strides": None}

    def free(self) -> None:
        lib, base = _lib(), self.base.value
        if not base:
            return
        _MAPPED.pop(getattr(self, "start", None), None)
        try:
            import torch
            torch.cuda.synchronize()                        # no work of this process may still use it
        except Exception:                                   # noqa: BLE001 — a faulted context: free what we can
            pass
        if self.handle.value:
            lib.cuMemUnmap(base, self.span)
            lib.cuMemRelease(self.handle.value)
            self.handle = ctypes.c_uint64()
        lib.cuMemAddressFree(base, self.reserved)
        self.base = ctypes.c_uint64()

    def __del__(self):
        try:
            self.free()
        except Exception:                                   # noqa: BLE001 — at interpreter exit, or a dead context
            pass


def mapped(nbytes: int, keep: list) -> "torch.Tensor":  # noqa: F821
    """A uint8 CUDA tensor of `nbytes` on the current device whose last byte is followed by unmapped memory. The
    mapping is appended to `keep` and lives while that list holds it (and while torch's view holds it, where
    `torch.as_tensor` keeps its source alive): keep the list with the buffers."""
    import torch
    torch.cuda.synchronize()                                # the runtime's context is current on this thread
    holder = _Mapping(max(1, nbytes), torch.cuda.current_device())
    keep.append(holder)
    return torch.as_tensor(holder, device="cuda")[:nbytes]


def region(t) -> tuple[int, int] | None:
    """(start, end) of the memory `mapped` gave that tensor `t` lies in — its end is where the mapping ends —
    or None."""
    ptr = t.data_ptr()
    return next(((start, start + n) for start, n in _MAPPED.items() if start <= ptr < start + n), None)


def owns(t) -> bool:
    """True when tensor `t` lies in memory `mapped` gave (CUDA IPC cannot share it: export a copy)."""
    return region(t) is not None
