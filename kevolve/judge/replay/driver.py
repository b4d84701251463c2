"""The CUDA driver calls the replay needs, through ctypes on the `libcuda.so.1` torch has loaded (`judge.replay`): the
graph queries the kernel's worker describes a captured call with (`describe`) and the module, graph and launch calls
the timing worker replays it with (`device`). The harness's own use of the driver API: a candidate may not name it
(the static rules' `driver-entry-point`, the symbol allow-list).

Structures are cuda.h's (CUDA 12.4+/13: `CUDA_KERNEL_NODE_PARAMS_v2`, `CUDA_MEMSET_NODE_PARAMS`, `CUDA_MEMCPY3D`), and
the versioned entry points are the ones cuda.h maps the plain names to (`cuGraphKernelNodeGetParams_v2`,
`cuGraphNodeGetDependencies_v2`, `cuStreamGetCaptureInfo_v3`, ...). Guarantees: `call` raises `DriverError` naming
the call and the driver's error; nothing is loaded that the process had not (RTLD_NOLOAD first; a fresh load only
where no driver is loaded yet). Not guaranteed: a driver older than CUDA 12.4 (`cuFuncGetParamInfo`): `DriverError`.
"""
from __future__ import annotations

import ctypes
import os
from ctypes import POINTER, Structure, c_int, c_size_t, c_uint, c_uint64, c_void_p

NODE_KERNEL, NODE_MEMCPY, NODE_MEMSET, NODE_EMPTY = 0, 1, 2, 5
MEMORY_HOST, MEMORY_DEVICE, MEMORY_ARRAY, MEMORY_UNIFIED = 1, 2, 3, 4
POINTER_ATTRIBUTE_MEMORY_TYPE = 2
ATTRIBUTE_CLUSTER_DIMENSION = 4                     # CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
FUNC_MAX_DYNAMIC_SHARED = 8                         # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
FUNC_NON_PORTABLE_CLUSTER = 14                      # CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED
CAPTURE_ACTIVE = 1                                  # CU_STREAM_CAPTURE_STATUS_ACTIVE
SET_CAPTURE_DEPENDENCIES = 1                        # CU_STREAM_SET_CAPTURE_DEPENDENCIES
INVALID_VALUE = 1                                   # CUDA_ERROR_INVALID_VALUE


class DriverError(RuntimeError):
    """A driver call failed."""

    def __init__(self, what: str, rc: int):
        super().__init__(f"{what} failed: CUDA driver error {rc}")
        self.rc = rc


class KernelNodeParams(Structure):
    _fields_ = [("func", c_void_p), ("gridDimX", c_uint), ("gridDimY", c_uint), ("gridDimZ", c_uint),
                ("blockDimX", c_uint), ("blockDimY", c_uint), ("blockDimZ", c_uint), ("sharedMemBytes", c_uint),
                ("kernelParams", POINTER(c_void_p)), ("extra", POINTER(c_void_p)), ("kern", c_void_p),
                ("ctx", c_void_p)]


class MemsetParams(Structure):
    _fields_ = [("dst", c_uint64), ("pitch", c_size_t), ("value", c_uint), ("elementSize", c_uint),
                ("width", c_size_t), ("height", c_size_t)]


class Memcpy3D(Structure):
    _fields_ = [(side + name, kind) for side in ("src", "dst") for name, kind in (
        ("XInBytes", c_size_t), ("Y", c_size_t), ("Z", c_size_t), ("LOD", c_size_t), ("MemoryType", c_int),
        ("Host", c_void_p), ("Device", c_uint64), ("Array", c_void_p), ("Reserved", c_void_p), ("Pitch", c_size_t),
        ("Height", c_size_t))] + [("WidthInBytes", c_size_t), ("Height", c_size_t), ("Depth", c_size_t)]


class LaunchAttributeValue(ctypes.Union):
    """CUlaunchAttributeValue: 64 bytes; a cluster's dimensions are its first three unsigned ints."""
    _fields_ = [("cluster", c_uint * 3), ("pad", ctypes.c_char * 64)]


_LIB: list = []


def lib():
    """The loaded driver library, its return types set once."""
    if not _LIB:
        try:
            cu = ctypes.CDLL("libcuda.so.1", mode=os.RTLD_NOW | getattr(os, "RTLD_NOLOAD", 4))
        except OSError:
            cu = ctypes.CDLL("libcuda.so.1")
        for name in ("cuGraphGetNodes", "cuGraphNodeGetType", "cuGraphNodeGetDependencies_v2",
                     "cuGraphNodeGetDependencies", "cuGraphGetEdges_v2",
                     "cuGraphKernelNodeGetParams_v2", "cuGraphMemsetNodeGetParams", "cuGraphMemcpyNodeGetParams",
                     "cuGraphKernelNodeGetAttribute", "cuGraphKernelNodeSetAttribute", "cuKernelGetFunction",
                     "cuFuncGetName", "cuFuncGetParamInfo", "cuFuncGetModule", "cuModuleGetGlobal_v2",
                     "cuMemcpyDtoH_v2", "cuMemcpyHtoD_v2", "cuModuleLoadData", "cuModuleGetFunction",
                     "cuModuleUnload", "cuFuncSetAttribute", "cuGraphCreate", "cuGraphAddKernelNode_v2",
                     "cuGraphAddMemsetNode", "cuGraphAddMemcpyNode", "cuGraphAddEmptyNode", "cuGraphDestroy",
                     "cuGraphInstantiateWithFlags", "cuGraphExecDestroy", "cuGraphLaunch", "cuStreamIsCapturing",
                     "cuStreamGetCaptureInfo_v3", "cuGraphAddChildGraphNode", "cuStreamUpdateCaptureDependencies_v2",
                     "cuCtxGetCurrent", "cuPointerGetAttribute", "cuCtxSynchronize"):
            getattr(cu, name).restype = c_int
        _LIB.append(cu)
    return _LIB[0]


def call(name: str, *args) -> None:
    """`name(*args)` in the driver; raises `DriverError` unless it succeeded."""
    rc = getattr(lib(), name)(*args)
    if rc != 0:
        raise DriverError(name, rc)


def function_name(func: int) -> str:
    name = ctypes.c_char_p()
    call("cuFuncGetName", ctypes.byref(name), c_void_p(func))
    return (name.value or b"").decode(errors="replace")


def parameter_layout(func: int) -> tuple[tuple[int, int], ...]:
    """Each parameter's (offset, size) in the function's argument buffer (`cuFuncGetParamInfo`, until it says there
    is no such parameter)."""
    out = []
    offset, size = c_size_t(), c_size_t()
    while True:
        rc = lib().cuFuncGetParamInfo(c_void_p(func), c_size_t(len(out)), ctypes.byref(offset), ctypes.byref(size))
        if rc == INVALID_VALUE:
            return tuple(out)
        if rc != 0:
            raise DriverError("cuFuncGetParamInfo", rc)
        out.append((int(offset.value), int(size.value)))


def current_context() -> int:
    ctx = c_void_p()
    call("cuCtxGetCurrent", ctypes.byref(ctx))
    return int(ctx.value or 0)
