"""How a worker's outputs reach the evaluator: CUDA IPC handles to the output buffers, or files.

Worker side: `export(outputs, directory, stem, ipc)` → plain JSON per output (an IPC description, never a
pickle, or a file path). Evaluator side: `ipc_works(call, uuid)` decides once per worker, and
`read(handle, dtype, shape, device)` gives the output as a tensor on the evaluator's device.

Guarantees: the evaluator reads an output only after the worker synchronised the device and replied, and
the worker stays idle until the next request, so what is read is what the kernel left. Shape and dtype are
always the task's, never the worker's word; an IPC storage too small for them is an error, not a read past
its end. A file is read only from the judgement's own exchange folder, by a name `export` gives, as a regular
file of exactly the expected size, never through a symlink (`read`), and unlinked once read; nothing elsewhere
is read or unlinked whatever path the worker's reply names.
Not guaranteed: IPC across GPUs or nodes (the probe then fails and files are used). IPC goes through the CUDA
driver API directly (handles of the driver allocations holding each buffer): the worker creates nothing in
/dev/shm, which its Landlock rules forbid (docs/decisions/judge.md, "IPC through the driver API").
"""
from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
import weakref
from pathlib import Path

from kevolve.judge.protocol import WorkerDied


# ---------------------------------------------------------------------- worker side
def export(outputs: dict, directory: Path, stem: str, ipc: bool, described: dict | None = None) -> dict:
    """One JSON-able handle per output: an IPC description of its buffer, or a file holding a copy.
    `described`: descriptions already made, by tensor address — only for buffers kept alive meanwhile (a
    timing session's), since a freed allocation's address can come back as another allocation."""
    import torch
    if ipc:
        def one(t) -> dict:
            if described is None:
                return describe(t)
            key = (t.data_ptr(), t.numel())
            if key not in described:
                described[key] = describe(t)
            return described[key]
        return {name: one(t) for name, t in outputs.items()}
    files = {}
    for name, t in outputs.items():
        path = directory / f"{stem}.{name}.bin"
        shared = torch.from_file(str(path), shared=True, size=t.numel(), dtype=t.dtype)
        shared.copy_(t.detach().reshape(-1))
        del shared
        files[name] = str(path)
    return files


PACK_ALIGN = 64           # a packed tensor's offset is a multiple of this
PACK_MAX = 1 << 20        # tensors up to this many bytes share one file per export (`Packer`); larger get their own


class Packer:
    """Files for a timing round's many small tensors: each `add`ed tensor up to `PACK_MAX` bytes is appended to one
    file, `<stem>.pack.bin`, written by `close()`; its handle names the file and the tensor's byte offset in it.
    A tensor file costs a creation, a mapping and an unlink on each side (0.16 ms); a layernorm_bwd round on the
    `small` set exported 70 of them. Larger tensors go to files of their own (`export`), so no pack is large."""

    def __init__(self, directory: Path, stem: str):
        self.path, self.parts, self.size = directory / f"{stem}.pack.bin", [], 0

    def add(self, outputs: dict, stem: str) -> dict:
        """Handles for `outputs` (name -> tensor): small ones into the pack, the rest as files of their own."""
        handles, big = {}, {}
        for name, t in outputs.items():
            nbytes = t.numel() * t.element_size()
            if nbytes > PACK_MAX:
                big[name] = t
                continue
            pad = -self.size % PACK_ALIGN                  # every tensor starts aligned for any dtype
            if pad:
                self.parts.append(bytes(pad))
            handles[name] = {"pack": str(self.path), "offset": self.size + pad}
            self.parts.append(t.detach().reshape(-1))
            self.size += pad + nbytes
        handles.update(export(big, self.path.parent, stem, False) if big else {})
        return handles

    def close(self) -> None:
        """Writes the pack (the tensors as they are now: the caller has finished with the round's calls)."""
        if not self.parts:
            return
        with open(self.path, "wb") as f:
            for t in self.parts:
                f.write(t if isinstance(t, bytes) else memoryview(t.contiguous().numpy()).cast("B"))
        self.parts = []


def describe(t) -> dict:
    """A CUDA tensor's place as plain JSON: an IPC handle of the driver allocation holding it (`cuIpcGetMemHandle`
    through the driver API, so nothing is created in /dev/shm — torch's `_share_cuda_` makes a shared-memory
    reference counter there, which the worker's Landlock rules rightly forbid), and where the tensor starts
    in that allocation."""
    ptr = t.data_ptr()
    base, size = _driver().address_range(ptr)
    return {"ipc": {"pid": os.getpid(), "base": base, "size": size, "handle": _driver().get_handle(base).hex()},
            "offset": ptr - base}


# ---------------------------------------------------------------------- evaluator side
_FILE_NAME = re.compile(r"[\w.+-]+\.bin")        # what `export` names a file: "<config>.<variant>.<output>.bin"


def _own(path, folder) -> str | None:
    """`path` when it names a file directly in `folder` (the judgement's exchange folder, which the evaluator made
    and the worker cannot rename), by a name `export` could have written; else None. The worker's reply names the
    files, and the evaluator reads and unlinks them unconfined: a path anywhere else (another judgement's folder,
    a user's file) must not be touched."""
    p = str(path)
    if folder is None or os.path.dirname(p) != str(folder) or not _FILE_NAME.fullmatch(os.path.basename(p)):
        return None
    return p


def read(handle, dtype, shape: tuple, device: str, folder=None):
    """The output behind `handle` (an IPC description or a file path) as a tensor on `device`.

    A file is read only if it is a regular file of exactly the expected size, opened without following a
    symlink (`_read_file`): the exchange folder is writable by the worker, and this process is not confined
    (docs/decisions/judge.md, "Exchange files are read, never mapped";
    `tests/adversarial/cpu/exchange_symlink.cpp`). Anything else is a `protocol` failure of the worker
    (`WorkerDied`), which the harness turns into a verdict."""
    import torch
    if isinstance(handle, dict) and "pack" in handle:
        return _from_pack(handle, dtype, shape, device, folder)
    if isinstance(handle, dict):
        return open_ipc(handle, dtype, shape)
    if _own(handle, folder) is None:
        raise WorkerDied("protocol", f"the worker named an exchange file outside its folder "
                                     f"({os.path.basename(str(handle))[:80]!r} "
                                     f"in {os.path.dirname(str(handle))[:120]!r})")
    n = math.prod(shape)
    data = _read_file(handle, n * dtype.itemsize)
    flat = torch.frombuffer(data, dtype=dtype, count=n) if n else torch.empty(0, dtype=dtype)
    out = flat.reshape(shape).to(device, copy=True)
    del flat, data
    os.unlink(handle)
    return out


_PACKS: dict[str, tuple[bytearray, list]] = {}    # pack path -> (its bytes, the byte ranges read from it)
PACK_LIMIT = 1 << 30      # a pack larger than this is the worker's lie (`Packer` packs tensors of at most PACK_MAX)


def _from_pack(handle: dict, dtype, shape: tuple, device: str, folder):
    """A tensor from a pack (`Packer`): the file is read whole and unlinked the first time it is named (the same
    checks as any exchange file: in the judgement's folder, by an `export` name, regular, not a symlink), then
    kept until `forget_packs`. The worker's offset must lie inside the pack, aligned for the dtype, and no byte
    may be read twice: two outputs named at the same bytes (a worker rewritten to answer one call with another's
    outputs) are a `protocol` failure, as a file named twice is (the first read unlinks it)."""
    import torch
    path = _own(handle.get("pack", ""), folder)
    offset = handle.get("offset")
    if path is None or not isinstance(offset, int):
        raise WorkerDied("protocol", f"the worker named a pack outside its exchange folder or no offset "
                                     f"({str(handle)[:160]!r})")
    if path not in _PACKS:
        _PACKS[path] = (_read_file(path, None), [])
        os.unlink(path)
    data, taken = _PACKS[path]
    n = math.prod(shape)
    end = offset + n * dtype.itemsize
    if offset < 0 or end > len(data) or offset % dtype.itemsize or any(a < end and offset < b for a, b in taken):
        raise WorkerDied("protocol", f"the worker named bytes {offset}-{end} of its pack of {len(data)} bytes: "
                                     "outside it, misaligned, or read already")
    if n:
        taken.append((offset, end))
    flat = torch.frombuffer(data, dtype=dtype, count=n, offset=offset) if n else torch.empty(0, dtype=dtype)
    return flat.reshape(shape).to(device, copy=True)


def forget_packs(folder) -> None:
    """Every pack of the judgement's exchange `folder` is let go (and unlinked if no handle was read from it): a
    round's verification is over."""
    prefix = str(folder) + os.sep
    for path in [p for p in _PACKS if p.startswith(prefix)]:
        del _PACKS[path]
    if folder is not None:
        for name in os.listdir(folder):
            if name.endswith(".pack.bin"):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(folder, name))


def _read_file(path: str, nbytes: int | None) -> bytearray:
    """The `nbytes` bytes of the exchange file `path` (None: whatever size it has, up to `PACK_LIMIT`): a regular
    file of that size, its last component not a symlink (O_NOFOLLOW), never a FIFO or device that could block or
    answer (O_NONBLOCK, then S_ISREG)."""
    import stat
    name = os.path.basename(str(path))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise WorkerDied("protocol", f"the worker's exchange file {name} cannot be opened as a plain file "
                                     f"({e.strerror}: a symlink where the worker exports?)") from None
    try:
        st = os.fstat(fd)
        if nbytes is None and stat.S_ISREG(st.st_mode) and st.st_size <= PACK_LIMIT:
            nbytes = st.st_size
        if not stat.S_ISREG(st.st_mode) or st.st_size != nbytes:
            raise WorkerDied("protocol", f"the worker's exchange file {name} is not a regular file of {nbytes} "
                                         f"bytes (mode {oct(st.st_mode)}, {st.st_size} bytes)")
        data = bytearray(nbytes)
        view, got = memoryview(data), 0
        while got < nbytes:
            k = os.readv(fd, [view[got:]])
            if k <= 0:
                raise WorkerDied("protocol", f"the worker's exchange file {name} ended after {got} of {nbytes} bytes")
            got += k
        return data
    finally:
        os.close(fd)


def discard(handles: dict, folder=None) -> None:
    """Drops exported outputs the evaluator will not read (an outside-clock probe's): files in `folder` (the
    judgement's exchange folder) are unlinked; a path elsewhere is left alone (`_own`)."""
    for h in handles.values():
        if isinstance(h, str) and _own(h, folder) is not None:
            try:
                os.unlink(h)
            except OSError:
                pass


def open_ipc(desc: dict, dtype, shape: tuple):
    """A view of a worker's buffer, shaped as the task says; the allocation must hold it. The mapping is
    shared by every view of one allocation alive at once, and closed when the last view is freed."""
    import torch
    i = desc["ipc"]
    n, itemsize, start = math.prod(shape), dtype.itemsize, int(desc["offset"])
    if start < 0 or start + n * itemsize > int(i["size"]):
        raise ValueError(f"the worker's shared allocation holds {i['size']} bytes, "
                         f"not {n} × {itemsize} at byte {start}")
    mapping = _Mapping.of(int(i["pid"]), int(i["base"]), int(i["size"]), bytes.fromhex(i["handle"]))
    raw = torch.as_tensor(_Window(mapping, start, n * itemsize), device="cuda")   # zero-copy; keeps the mapping
    return raw.view(dtype).view(tuple(shape)) if n else torch.empty(tuple(shape), dtype=dtype, device="cuda")


@contextlib.contextmanager
def kept_open():
    """Every IPC mapping opened inside the block stays open until it ends, not only while a view of it is
    alive: a timing session's rounds export the same buffers each time, and opening and closing each one per
    round cost more than the comparisons (0.17 ms a pair; 3,400 pairs in one layernorm_fwd judgement on an H200). A
    mapping is keyed by the worker's allocation handle, so a new allocation at an old address is opened anew."""
    outer = _Mapping._kept
    if outer is None:
        _Mapping._kept = {}
    try:
        yield
    finally:
        if outer is None:
            _Mapping._kept = None


class _Window:
    """`nbytes` bytes of an opened mapping, seen by torch through `__cuda_array_interface__`."""

    def __init__(self, mapping: "_Mapping", offset: int, nbytes: int):
        self.mapping = mapping
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "version": 3,
                                         "data": (mapping.ptr + offset, False), "strides": None}


class _Mapping:
    """One worker allocation opened in this process (`cuIpcOpenMemHandle`), closed when no view needs it (and,
    inside `kept_open`, not before that block ends)."""
    _open: "weakref.WeakValueDictionary[tuple, _Mapping]" = weakref.WeakValueDictionary()
    _kept: dict | None = None

    def __init__(self, ptr: int):
        self.ptr = ptr

    @classmethod
    def of(cls, pid: int, base: int, size: int, handle: bytes) -> "_Mapping":
        key = (pid, base, size, handle)
        m = cls._open.get(key)
        if m is None:
            m = cls._open[key] = cls(_driver().open_handle(handle))
        if cls._kept is not None:
            cls._kept[key] = m
        return m

    def __del__(self):
        try:
            _driver().close_handle(self.ptr)
        except Exception:                       # noqa: BLE001 — interpreter shutdown, a dead context
            pass


class _Driver:
    """The four CUDA driver calls the exchange needs, through ctypes on libcuda."""

    def __init__(self):
        import ctypes
        self.c = ctypes
        self.lib = ctypes.CDLL("libcuda.so.1")

        class Handle(ctypes.Structure):
            _fields_ = [("reserved", ctypes.c_ubyte * 64)]
        self.Handle = Handle
        self.lib.cuIpcOpenMemHandle_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), Handle, ctypes.c_uint]

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            name = self.c.c_char_p()
            self.lib.cuGetErrorName(rc, self.c.byref(name))
            raise RuntimeError(f"{what} failed: {(name.value or b'').decode() or rc}")

    def _context(self) -> None:
        """Driver calls act on the calling thread's current context: make it torch's (the primary one)."""
        ctx = self.c.c_void_p()
        self._check(self.lib.cuCtxGetCurrent(self.c.byref(ctx)), "cuCtxGetCurrent")
        if not ctx.value:
            import torch
            torch.cuda.synchronize()                # a runtime call makes the primary context current here

    def address_range(self, ptr: int) -> tuple[int, int]:
        self._context()
        base, size = self.c.c_uint64(), self.c.c_size_t()
        self._check(self.lib.cuMemGetAddressRange_v2(self.c.byref(base), self.c.byref(size), self.c.c_uint64(ptr)),
                    "cuMemGetAddressRange")
        return base.value, size.value

    def get_handle(self, base: int) -> bytes:
        self._context()
        h = self.Handle()
        self._check(self.lib.cuIpcGetMemHandle(self.c.byref(h), self.c.c_uint64(base)), "cuIpcGetMemHandle")
        return bytes(bytearray(h.reserved))

    def open_handle(self, handle: bytes) -> int:
        self._context()
        h, ptr = self.Handle(), self.c.c_uint64()
        self.c.memmove(self.c.addressof(h), handle, 64)
        self._check(self.lib.cuIpcOpenMemHandle_v2(self.c.byref(ptr), h, 1), "cuIpcOpenMemHandle")   # lazy peer access
        return ptr.value

    def close_handle(self, ptr: int) -> None:
        self._check(self.lib.cuIpcCloseMemHandle(self.c.c_uint64(ptr)), "cuIpcCloseMemHandle")


_DRIVER: _Driver | None = None


def _driver() -> _Driver:
    global _DRIVER
    if _DRIVER is None:
        _DRIVER = _Driver()
    return _DRIVER


def ipc_works(probe, uuid: str | None, mode: str = "auto") -> bool:
    """True when `mode` is auto (`resources.exchange`, resolved by `options.resolved`), this process's
    current GPU is the worker's (`uuid`) and a probe tensor the worker shares (`probe()`: the IPC description
    of its `protocol.IpcProbe` reply) reads back exactly. Mode `files` forces files."""
    import torch
    if mode == "files" or not torch.cuda.is_available():
        return False
    if uuid != str(torch.cuda.get_device_properties(torch.cuda.current_device()).uuid):
        return False
    try:
        shared = open_ipc(probe(), torch.float32, (1024,))
        ok = bool(torch.equal(shared, torch.arange(1024, dtype=torch.float32, device=shared.device)))
        del shared
        return ok
    except (RuntimeError, KeyError, TypeError, ValueError, OSError, AttributeError):
        return False


def files_root() -> str | None:
    """/dev/shm when it has room (8 GiB free), else the default temporary directory."""
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK) and shutil.disk_usage(shm).free > (8 << 30):
        return shm
    return None


def fingerprint(t) -> str:
    """A cheap checksum of a tensor's bytes, computed where the tensor lives (only a number crosses to the host):
    the integer sum of its 32-bit words (bytes when its size is not a multiple of 4). It tells the evaluator
    that the worker drew the same inputs — a harness self-check, not a defence: whether a kernel modified
    an input is decided by the evaluator comparing the buffer itself, exactly (`exchange.read` + `torch.equal`)."""
    import torch
    flat = t.detach().reshape(-1).contiguous()
    if not flat.numel():
        return "0:0"
    raw = flat.view(torch.uint8)
    words = raw.view(torch.int32) if raw.numel() % 4 == 0 else raw
    return f"{raw.numel()}:{int(torch.sum(words, dtype=torch.int64))}"
