"""How a worker's outputs reach the evaluator: CUDA IPC handles to the output buffers, or files.

Worker side: `export(outputs, directory, stem, ipc)` → plain JSON per output (an IPC description, never a
pickle, or a file path). Evaluator side: `ipc_works(call, uuid)` decides once per worker, and
`read(handle, dtype, shape, device)` gives the output as a tensor on the evaluator's device.

Guarantees: the evaluator reads an output only after the worker synchronised the device and replied, and
the worker stays idle until the next request, so what is read is what the kernel left. Shape and dtype are
always the task's, never the worker's word; an IPC storage too small for them is an error, not a read past
its end. A file is unlinked once read.
Not guaranteed: IPC across GPUs or nodes (the probe then fails and files are used).
"""
from __future__ import annotations

import math
import os
import shutil
from pathlib import Path


# ---------------------------------------------------------------------- worker side
def export(outputs: dict, directory: Path, stem: str, ipc: bool) -> dict:
    """One JSON-able handle per output: an IPC description of its buffer, or a file holding a copy."""
    import torch
    if ipc:
        return {name: describe(t) for name, t in outputs.items()}
    files = {}
    for name, t in outputs.items():
        path = directory / f"{stem}.{name}.bin"
        shared = torch.from_file(str(path), shared=True, size=t.numel(), dtype=t.dtype)
        shared.copy_(t.detach().reshape(-1))
        del shared
        files[name] = str(path)
    return files


def describe(t) -> dict:
    """A CUDA tensor's IPC handle and place in its storage, as plain JSON."""
    device, handle, size, offset, ref, ref_offset, event, sync = t.untyped_storage()._share_cuda_()
    hexed = lambda b: b.hex() if isinstance(b, (bytes, bytearray)) else None  # noqa: E731
    return {"ipc": {"device": device, "handle": hexed(handle), "size": size, "offset": offset,
                    "ref": hexed(ref), "ref_offset": ref_offset, "event": hexed(event), "sync": bool(sync)},
            "storage_offset": t.storage_offset()}


# ---------------------------------------------------------------------- evaluator side
def read(handle, dtype, shape: tuple, device: str):
    """The output behind `handle` (an IPC description or a file path) as a tensor on `device`."""
    import torch
    if isinstance(handle, dict):
        return open_ipc(handle, dtype, shape)
    mapped = torch.from_file(handle, shared=True, size=math.prod(shape), dtype=dtype)
    out = mapped.reshape(shape).to(device, copy=True)
    del mapped
    os.unlink(handle)
    return out


def open_ipc(desc: dict, dtype, shape: tuple):
    """A view of a worker's buffer, shaped as the task says; the storage must hold it."""
    import torch
    i = desc["ipc"]
    raw = lambda k: bytes.fromhex(i[k]) if i.get(k) else None  # noqa: E731
    storage = torch.UntypedStorage._new_shared_cuda(int(i["device"]), raw("handle"), int(i["size"]), int(i["offset"]),
                                                    raw("ref"), int(i["ref_offset"]), raw("event"), bool(i["sync"]))
    n, itemsize, start = math.prod(shape), torch.empty(0, dtype=dtype).element_size(), int(desc["storage_offset"])
    if start < 0 or (start + n) * itemsize > storage.nbytes():
        raise ValueError(f"the worker's shared buffer holds {storage.nbytes()} bytes, not {n} × {itemsize} at {start}")
    return torch.empty(0, dtype=dtype, device=storage.device).set_(storage, start, tuple(shape))   # contiguous


def ipc_works(call, uuid: str | None, mode: str = "auto") -> bool:
    """True when `mode` is auto (`resources.exchange`; KEVOLVE_EXCHANGE set here overrides it), this process's
    current GPU is the worker's (`uuid`) and a probe tensor the worker shares (`call("ipc_probe")`) reads
    back exactly. Mode `files` forces files."""
    import torch
    if (os.environ.get("KEVOLVE_EXCHANGE") or mode) == "files" or not torch.cuda.is_available():
        return False
    if uuid != str(torch.cuda.get_device_properties(torch.cuda.current_device()).uuid):
        return False
    try:
        probe = open_ipc(call("ipc_probe")["probe"], torch.float32, (1024,))
        ok = bool(torch.equal(probe, torch.arange(1024, dtype=torch.float32, device=probe.device)))
        del probe
        return ok
    except (RuntimeError, KeyError, TypeError, ValueError):
        return False


def files_root() -> str | None:
    """/dev/shm when it has room (8 GiB free), else the default temporary directory."""
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK) and shutil.disk_usage(shm).free > (8 << 30):
        return shm
    return None
