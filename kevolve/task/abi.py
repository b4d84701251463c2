"""The kernel contract: how a candidate is called.

ABI `c` (the default): the candidate exports `extern "C" int <direction>(...)` taking, in order, the task's
inputs (`const T*`), outputs (`T*`), sizes (`int64_t`), scalars, `void* workspace, int64_t workspace_bytes`
and, on CUDA, `cudaStream_t stream`; it returns 0 on success. Scalar values belong to the configuration
(`Task.scalar_values(case)`): every call takes them, so no caller can fall back on the defaults.
`c_prototype` writes that declaration for a task — the text a prompt shows and a seed kernel implements —
and `CKernel` calls it through ctypes.

ABI `torch` (robust-kbench / KernelBench format): a torch extension exporting `<direction>` that takes tensors
and Python values and returns the outputs. `TorchKernel` calls it as robust-kbench's harness does — the
arguments, their order and the tensors' shapes from the task's `torch_abi` declaration (`task.torch_call`),
0-dim upstream gradients for scalar losses included — or, for a task without one, with the inputs in the
task's shapes and then the scalars if it takes them. It checks the returned tensors (count, shape, dtype,
device) and copies them into the harness's buffers, a separate step (`store`) so that timing can leave the
copy out; both ABIs meet one harness.

Not guaranteed here: anything about what the kernel does — that is the harness's job.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

from kevolve.task.spec import SCALAR_TYPES, Case, Task, as_list

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

    def __init__(self, lib_path: str, task: Task, target: str, symbol: str | None = None):
        """`symbol`: the entry point (default: the task's direction), bound with the task's C signature."""
        self.task, self.target = task, target
        self.lib = ctypes.CDLL(lib_path, mode=ctypes.RTLD_LOCAL)
        try:
            self.fn = getattr(self.lib, symbol or task.direction)
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
                 scalars: dict[str, float | int], case: Case | None = None) -> int:
        """One call; `scalars`: this configuration's values (`Task.scalar_values(case)`), never assumed
        (`case` is for the torch ABI's shapes; the C ABI's sizes say everything)."""
        t = self.task
        args: list[Any] = [inputs[s.name].data_ptr() for s in t.inputs]
        args += [outputs[s.name].data_ptr() for s in t.outputs]
        args += [sizes[n] for n in t.sizes]
        args += [scalars[s.name] for s in t.scalars]
        args += [workspace.data_ptr() if workspace.numel() else None, workspace.numel()]
        if self.target == "cuda":
            args.append(stream)
        return self.fn(*args)


@dataclass(frozen=True)
class Returned:
    """What one torch-ABI call returned: its tensors, and for each the shape robust-kbench's convention gives
    it (the declared view; None: the task's own shape only)."""
    tensors: tuple
    views: tuple


class TorchKernel:
    """A torch extension module with robust-kbench's calling convention, behind the same call as CKernel.

    `run` is the kernel's own work — the call — and returns what it returned; `store` checks that against the
    task (count, shape, dtype, device) and copies it into the harness's buffers; calling the object does both.
    A task's `torch_abi` declaration (`torch_call`) gives the arguments and views; without one the inputs go in
    the task's shapes, then the scalars if the function takes them."""

    def __init__(self, module, task: Task):
        self.task = task
        try:
            self.fn = getattr(module, task.direction)
        except AttributeError:
            raise LookupError(f"the extension defines no `{task.direction}` function (m.def(\"{task.direction}\", "
                              "...))") from None
        self.with_scalars: bool | None = None if task.scalars else False

    def __call__(self, inputs: dict, outputs: dict, sizes: dict[str, int], workspace, stream=None, *,
                 scalars: dict[str, float | int], case: Case | None = None) -> int:
        """One call with this configuration's `scalars` (never assumed); its results copied into `outputs`."""
        self.store(self.run(inputs, sizes, scalars, case), outputs)
        return 0

    def run(self, inputs: dict, sizes: dict[str, int], scalars: dict[str, float | int],
            case: Case | None = None) -> Returned:
        """Calls the extension on the harness's input tensors (in their declared views) and this
        configuration's `scalars`; nothing else (`store` copies the results)."""
        values = {s.name: int(scalars[s.name]) if s.type == "int" else float(scalars[s.name])
                  for s in self.task.scalars}
        call = self.task.torch_call
        if call is None:
            return Returned(tuple(as_list(self._undeclared([inputs[s.name] for s in self.task.inputs],
                                                            list(values.values())))),
                            (None,) * len(self.task.outputs))
        dims = call.dim_values(sizes, dict(case.dims) if case is not None else None)
        args = call.arguments(inputs, sizes, values, dims)
        try:
            result = self.fn(*args)
        except TypeError as e:
            if "incompatible function arguments" not in str(e):
                raise
            raise TypeError(f"`{self.task.direction}` does not take the task's torch-ABI arguments "
                            f"({describe(args)}): {e}") from None
        return Returned(tuple(as_list(result)), tuple(call.view(name, sizes, dims) for name in call.returns))

    def _undeclared(self, args: list, scalars: list):
        if self.with_scalars is None:          # first call: does it take the scalars (eps, ...) or not?
            try:
                result = self.fn(*args, *scalars)
                self.with_scalars = True
                return result
            except TypeError as e:
                if "incompatible function arguments" not in str(e):
                    raise
                self.with_scalars = False
        return self.fn(*args, *scalars) if self.with_scalars else self.fn(*args)

    def store(self, returned: Returned, outputs: dict) -> None:
        """Checks what a call returned and copies it into `outputs` (the task's shapes); raises ValueError
        naming the output that does not fit."""
        call, t = self.task.torch_call, self.task
        names = list(call.returns) if call is not None else [s.name for s in t.outputs]
        if len(returned.tensors) != len(names):
            raise ValueError(f"{t.direction} returned {len(returned.tensors)} tensors; the task has {len(names)} "
                             f"outputs ({', '.join(names)})")
        for name, r, view in zip(names, returned.tensors, returned.views):
            dst = outputs[name]
            if not hasattr(r, "shape") or not hasattr(r, "dtype"):
                raise ValueError(f"output {name}: {t.direction} returned a {type(r).__name__}, not a tensor")
            shape, want = tuple(r.shape), tuple(dst.shape)
            if call is not None and shape not in (view, want):
                raise ValueError(f"output {name}: returned shape {shape}, expected "
                                 + (f"{view} (robust-kbench's) or {want} (the task's)" if view not in (None, want)
                                    else f"{want}"))
            if call is None and shape != want and r.numel() != dst.numel():
                raise ValueError(f"output {name}: returned shape {shape}, expected {want}")
            if r.dtype != dst.dtype:
                raise ValueError(f"output {name}: returned dtype {r.dtype}, expected {dst.dtype}")
            if r.device != dst.device:
                raise ValueError(f"output {name}: returned a tensor on {r.device}, expected {dst.device}")
            dst.copy_(r.reshape(want))


def describe(args: list) -> str:
    """`Tensor[16, 64, 256, 256] float32, 1e-05, (64, 256, 256)`: what a torch-ABI call passed."""
    def one(a) -> str:
        if hasattr(a, "shape") and hasattr(a, "dtype"):
            return f"Tensor{list(a.shape)} {str(a.dtype).replace('torch.', '')}"
        if isinstance(a, tuple):
            return "(" + ", ".join(one(m) for m in a) + ("," if len(a) == 1 else "") + ")"
        return repr(a)
    return ", ".join(one(a) for a in args)

