"""The kernel contract: how a candidate is called.

ABI `c` (the default): the candidate exports `extern "C" int <direction>(...)` taking, in order, the task's
inputs (`const T*`), outputs (`T*`), sizes (`int64_t`), scalars, `void* workspace, int64_t workspace_bytes`
and, on CUDA, `cudaStream_t stream`; it returns 0 on success. Scalar values belong to the configuration
(`Task.scalar_values(case)`): every call takes them, so no caller can fall back on the defaults.
`c_prototype` writes that declaration for a task — the text a prompt shows and a seed kernel implements —
and `CKernel` calls it through ctypes.

ABI `torch` (robust-kbench / KernelBench format): a torch extension exporting `<direction>` that takes the
inputs as tensors (then, if it accepts them, the scalars) and returns the outputs. `TorchKernel` calls it and
copies what it returns into the harness's buffers, so both ABIs meet one harness.

Not guaranteed here: anything about what the kernel does — that is the harness's job.
"""
from __future__ import annotations

import ctypes
from typing import Any

from kevolve.task.spec import SCALAR_TYPES, Task

ABIS = ("c", "torch")
_CTYPES = {"float": ctypes.c_float, "double": ctypes.c_double, "int64_t": ctypes.c_int64}


def c_prototype(task: Task, target: str) -> str:
    """The C declaration a kernel for `task` on `target` must define."""
    args = [f"const {s.ctype()}* {s.name}" for s in task.inputs]
    args += [f"{s.ctype()}* {s.name}" for s in task.outputs]
    args += [f"int64_t {n}" for n in task.sizes]
    args += [f"{SCALAR_TYPES[s.type]} {s.name}" for s in task.scalars]
    args += ["void* workspace", "int64_t workspace_bytes"]
    if target == "cuda":
        args.append("cudaStream_t stream")
    return f'extern "C" int {task.direction}({", ".join(args)});'


class CKernel:
    """A built shared library with the C ABI, loaded into this process."""

    def __init__(self, lib_path: str, task: Task, target: str):
        self.task, self.target = task, target
        self.lib = ctypes.CDLL(lib_path, mode=ctypes.RTLD_LOCAL)
        try:
            self.fn = getattr(self.lib, task.direction)
        except AttributeError:
            raise LookupError(f'the library exports no `extern "C" int {task.direction}(...)`') from None
        argtypes = [ctypes.c_void_p] * (len(task.inputs) + len(task.outputs))
        argtypes += [ctypes.c_int64] * len(task.sizes)
        argtypes += [_CTYPES[SCALAR_TYPES[s.type]] for s in task.scalars]
        argtypes += [ctypes.c_void_p, ctypes.c_int64]
        if target == "cuda":
            argtypes.append(ctypes.c_void_p)
        self.fn.argtypes, self.fn.restype = argtypes, ctypes.c_int

    def __call__(self, inputs: dict, outputs: dict, sizes: dict[str, int], workspace, stream=None, *,
                 scalars: dict[str, float | int]) -> int:
        """One call; `scalars`: this configuration's values (`Task.scalar_values(case)`), never assumed."""
        t = self.task
        args: list[Any] = [inputs[s.name].data_ptr() for s in t.inputs]
        args += [outputs[s.name].data_ptr() for s in t.outputs]
        args += [sizes[n] for n in t.sizes]
        args += [scalars[s.name] for s in t.scalars]
        args += [workspace.data_ptr() if workspace.numel() else None, workspace.numel()]
        if self.target == "cuda":
            args.append(stream)
        return self.fn(*args)


class TorchKernel:
    """A torch extension module with robust-kbench's calling convention, behind the same call as CKernel."""

    def __init__(self, module, task: Task):
        self.task = task
        try:
            self.fn = getattr(module, task.direction)
        except AttributeError:
            raise LookupError(f"the extension defines no `{task.direction}` function (m.def(\"{task.direction}\", ...))") from None
        self.with_scalars: bool | None = None if task.scalars else False

    def __call__(self, inputs: dict, outputs: dict | None, sizes: dict[str, int], workspace, stream=None, *,
                 scalars: dict[str, float | int]) -> int:
        """Calls the extension with this configuration's `scalars`; with `outputs` given, copies its results
        there (`None` while timing)."""
        args = [inputs[s.name] for s in self.task.inputs]
        scalars = [scalars[s.name] for s in self.task.scalars]
        if self.with_scalars is None:          # first call: does it take the scalars (eps, ...) or not?
            try:
                result = self.fn(*args, *scalars)
                self.with_scalars = True
            except TypeError as e:
                if "incompatible function arguments" not in str(e):
                    raise
                result = self.fn(*args)
                self.with_scalars = False
        else:
            result = self.fn(*args, *scalars) if self.with_scalars else self.fn(*args)
        if outputs is None:                      # timing: the kernel's own work only, no copy
            return 0
        results = list(result) if isinstance(result, (tuple, list)) else [result]
        if len(results) != len(self.task.outputs):
            raise ValueError(f"{self.task.direction} returned {len(results)} tensors; the task has "
                             f"{len(self.task.outputs)} outputs ({', '.join(s.name for s in self.task.outputs)})")
        for spec, r in zip(self.task.outputs, results):
            dst = outputs[spec.name]
            if tuple(r.shape) != tuple(dst.shape) and r.numel() != dst.numel():
                raise ValueError(f"output {spec.name}: returned shape {tuple(r.shape)}, expected {tuple(dst.shape)}")
            if r.dtype != dst.dtype:
                raise ValueError(f"output {spec.name}: returned dtype {r.dtype}, expected {dst.dtype}")
            dst.copy_(r.reshape(dst.shape))
        return 0
