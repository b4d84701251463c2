"""The persisting-L2 state of this process's CUDA context, read and reset through the CUDA runtime already loaded.

A persisting access-policy window keeps a kernel's inputs in a set-aside part of L2 that the clock's cache flush
does not evict. The static rules forbid spelling one (`persisting-l2`) and the symbol check rejects the calls
that set one on a stream or a graph node, but a window passed as a launch attribute to `cudaLaunchKernelExC`
(which cluster launches need) can be written as raw bytes. It has no effect while the context's persisting-L2
set-aside (`cudaLimitPersistingL2CacheSize`) is zero, which this module enforces from the worker:
`reset_persisting_l2()` sets the limit to 0 and turns every persisting line back into a normal one
(`cudaCtxResetPersistingL2Cache`); `persisting_l2_limit()` reads the limit back, so that a round after which it
is not zero can be failed.

The runtime is the `libcudart.so*` this process has loaded (torch's, which the kernel's library shares by its
soname), found with `RTLD_NOLOAD` by soname and by the paths in /proc/self/maps: nothing new is loaded, and
the limit is the one of the primary context torch and the kernel use. No dependency beyond ctypes.

Guarantees: both functions do nothing but return a reason (a string; `None` for the limit) when no CUDA runtime
is loaded, and `reset_persisting_l2` returns a reason when the device has no persisting L2
(`cudaErrorUnsupportedLimit`); any other CUDA error raises `L2Error` with the error's name. Not guaranteed: the
state of other processes' contexts, or of a second runtime loaded after the first one was found (the handle is
cached; calling `cudart()` once before the worker is confined spares the later calls the look-up).
"""
from __future__ import annotations

import ctypes
import os
import re
import sys

LIMIT_PERSISTING_L2_CACHE_SIZE = 0x06       # cudaLimitPersistingL2CacheSize (driver_types.h, enum cudaLimit)
SUCCESS = 0                                 # cudaSuccess
UNSUPPORTED_LIMIT = 215                     # cudaErrorUnsupportedLimit: no persisting L2 on this device
SONAMES = ("libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so")
_CUDART = re.compile(r"(^|/)libcudart\.so(\.\d+)*$")


class L2Error(RuntimeError):
    """A CUDA runtime call on the persisting-L2 state failed (other than: no runtime, no persisting L2)."""


def loaded_cudarts(maps: str = "/proc/self/maps") -> list[str]:
    """The paths of the CUDA runtimes mapped into this process, in the order they first appear."""
    try:
        with open(maps) as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    out: list[str] = []
    for line in lines:
        parts = line.split(None, 5)
        path = parts[5].strip() if len(parts) == 6 else ""
        if _CUDART.search(path) and path not in out:
            out.append(path)
    return out


def _open(name: str):
    """The handle of `name` if it is already loaded (RTLD_NOLOAD: never a fresh load), else None."""
    try:
        lib = ctypes.CDLL(name, mode=os.RTLD_NOW | getattr(os, "RTLD_NOLOAD", 4))
    except OSError:
        return None
    return lib if hasattr(lib, "cudaDeviceSetLimit") and hasattr(lib, "cudaCtxResetPersistingL2Cache") else None


def find_cudart(candidates: list[str] | None = None):
    """The loaded CUDA runtime's handle, or a reason (str) why there is none."""
    names = list(SONAMES) + loaded_cudarts() if candidates is None else list(candidates)
    for name in names:
        lib = _open(name)
        if lib is not None:
            lib.cudaGetErrorName.restype = ctypes.c_char_p
            lib.cudaGetErrorName.argtypes = [ctypes.c_int]
            lib.cudaDeviceSetLimit.argtypes = [ctypes.c_int, ctypes.c_size_t]
            lib.cudaDeviceGetLimit.argtypes = [ctypes.POINTER(ctypes.c_size_t), ctypes.c_int]
            return lib
    return ("no CUDA runtime (libcudart.so) is loaded in this process, so the persisting-L2 set-aside was not "
            f"reset (looked for {', '.join(names) or 'nothing'})")


_found: list = []


def cudart():
    """`find_cudart()`, the handle cached once found (a reason is not: a later call looks again)."""
    if not _found:
        lib = find_cudart()
        if isinstance(lib, str):
            return lib
        _found.append(lib)
    return _found[0]


def _device() -> int | None:
    """torch's current device, if torch has initialised CUDA (the runtime's own current device otherwise)."""
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_initialized():
            return int(torch.cuda.current_device())
    except Exception:                      # noqa: BLE001 - a half-imported torch: use the runtime's device
        return None
    return None


def _check(lib, rc: int, what: str) -> None:
    if rc != SUCCESS:
        name = lib.cudaGetErrorName(rc)
        raise L2Error(f"{what} failed: {name.decode() if name else rc} ({rc})")


class _on_device:
    """Makes `device` the runtime's current device for the block, restoring the previous one after."""

    def __init__(self, lib, device: int | None):
        self.lib, self.device, self.before = lib, device, None

    def __enter__(self):
        if self.device is not None:
            cur = ctypes.c_int(-1)
            _check(self.lib, self.lib.cudaGetDevice(ctypes.byref(cur)), "cudaGetDevice")
            if cur.value != self.device:
                _check(self.lib, self.lib.cudaSetDevice(self.device), "cudaSetDevice")
                self.before = cur.value
        return self

    def __exit__(self, *exc):
        if self.before is not None:
            self.lib.cudaSetDevice(self.before)


def reset_persisting_l2(device: int | None = None, lib=None) -> str | None:
    """Sets the persisting-L2 set-aside of the current context to 0 and resets every persisting line to normal.
    None when done; a reason when there is nothing to reset (no runtime loaded, no persisting L2 on the device).
    `device` defaults to torch's current device; `lib` to the loaded runtime (`cudart()`)."""
    lib = cudart() if lib is None else lib
    if isinstance(lib, str):
        return lib
    with _on_device(lib, _device() if device is None else device):
        rc = lib.cudaDeviceSetLimit(LIMIT_PERSISTING_L2_CACHE_SIZE, 0)
        if rc == UNSUPPORTED_LIMIT:
            lib.cudaGetLastError()                   # not sticky, but leave no error for the next caller
            return "the device has no persisting L2 (cudaErrorUnsupportedLimit): nothing to reset"
        _check(lib, rc, "cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, 0)")
        _check(lib, lib.cudaCtxResetPersistingL2Cache(), "cudaCtxResetPersistingL2Cache")
    return None


def persisting_l2_limit(device: int | None = None, lib=None) -> int | None:
    """The current context's persisting-L2 set-aside in bytes (`cudaDeviceGetLimit`); 0 on a device without
    persisting L2; None when no CUDA runtime is loaded."""
    lib = cudart() if lib is None else lib
    if isinstance(lib, str):
        return None
    value = ctypes.c_size_t(0)
    with _on_device(lib, _device() if device is None else device):
        rc = lib.cudaDeviceGetLimit(ctypes.byref(value), LIMIT_PERSISTING_L2_CACHE_SIZE)
        if rc == UNSUPPORTED_LIMIT:
            lib.cudaGetLastError()
            return 0
        _check(lib, rc, "cudaDeviceGetLimit(cudaLimitPersistingL2CacheSize)")
    return int(value.value)
