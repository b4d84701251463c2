"""In the timing worker: a kernel's described call replayed from its device code alone (`judge.replay`).

`ReplayedKernel(lib, description)` loads the library's fat binaries as modules (`fatbin.images`, `cuModuleLoadData`:
none of its host code runs, no constructor, no registration), finds every described kernel's function by name in them (a
name they do not define is another library's kernel: `Unreplayable`), raises a function's dynamic shared memory limit
where the description needs more than the default, allows a cluster of more than the portable 8 blocks where a described
launch has one (as the kernel's host code did, or its launch would have failed), and copies the module's
`__device__`/`__constant__` data in as the description holds it. Called like a C-ABI kernel (`task.abi.CKernel`), it
rewrites the description onto the buffers it is given (`nodes.relocate`: every address inside one of the describing
call's buffers moved to the same offset of the caller's buffer of that name) and builds, once per buffer set, a graph of
those nodes with their dependencies; under stream capture it adds that graph to the capture as a child node (so a timing
session's graph holds it between its flushes, like a kernel's own launches), else it launches it on the stream.

Guarantees: only the candidate's device code runs, on the buffers the harness hands it, with the launch shapes,
arguments and data the description gives; what it computes is checked like any call's. Not guaranteed: the same
time as in the kernel's own worker where its host code did more than launch (that work is not replayed, by design),
or where its device code reads an address it was not passed (it faults here: a crash verdict).
"""
from __future__ import annotations

import ctypes
from ctypes import c_int, c_size_t, c_uint64, c_void_p

from kevolve.judge.replay import driver, fatbin
from kevolve.judge.replay.nodes import EMPTY, KERNEL, MEMCPY, MEMSET, Description, relocate

DEFAULT_SHARED = 48 << 10
PORTABLE_CLUSTER = 8


class Unreplayable(RuntimeError):
    """The description names what the candidate's device code does not hold."""


class ReplayedKernel:
    def __init__(self, lib: str, desc: Description):
        self.desc = desc
        self.modules = []
        for image in fatbin.images(lib):
            module = c_void_p()
            data = ctypes.create_string_buffer(image, len(image))
            driver.call("cuModuleLoadData", ctypes.byref(module), data)
            self.modules.append(module.value)
        self.functions: dict[str, int] = {}
        for node in desc.nodes:
            if node.kind == KERNEL and node.function not in self.functions:
                self.functions[node.function] = self._function(node.function)
        for name, need in _largest_shared(desc).items():
            if need > DEFAULT_SHARED:
                driver.call("cuFuncSetAttribute", c_void_p(self.functions[name]), driver.FUNC_MAX_DYNAMIC_SHARED,
                            c_int(need))
        for name in _non_portable_clusters(desc):      # more than 8 blocks a cluster: its host code allowed it
            driver.call("cuFuncSetAttribute", c_void_p(self.functions[name]), driver.FUNC_NON_PORTABLE_CLUSTER,
                        c_int(1))
        for name, data in desc.globals:
            self._set_global(name, data)
        self.ctx = driver.current_context()
        self.graphs: dict[tuple, tuple[int, int | None]] = {}

    def _function(self, name: str) -> int:
        for module in self.modules:
            f = c_void_p()
            if driver.lib().cuModuleGetFunction(ctypes.byref(f), c_void_p(module), name.encode()) == 0:
                return int(f.value)
        raise Unreplayable(f"the kernel's graph runs `{name}`, which its device code does not define (another "
                           "library's kernel)")

    def _set_global(self, name: str, data: bytes) -> None:
        for module in self.modules:
            dptr, size = c_uint64(), c_size_t()
            if driver.lib().cuModuleGetGlobal_v2(ctypes.byref(dptr), ctypes.byref(size), c_void_p(module),
                                                 name.encode()) == 0:
                if size.value != len(data):
                    raise Unreplayable(f"device data `{name}`: {len(data)} bytes described, {size.value} defined")
                driver.call("cuMemcpyHtoD_v2", dptr, ctypes.create_string_buffer(data, len(data)), size)
                return
        raise Unreplayable(f"device data `{name}` is not in the kernel's device code")

    # ------------------------------------------------------------------ a call
    def __call__(self, inputs: dict, outputs: dict, sizes: dict, workspace, stream=None, scalars=None,
                 case=None) -> int:
        targets = {n: int(t.data_ptr()) for n, t in {**inputs, **outputs}.items()}
        targets["workspace"] = int(workspace.data_ptr())
        key = tuple(sorted(targets.items()))
        if key not in self.graphs:
            self.graphs[key] = (self._graph(targets), None)
        graph, _ = self.graphs[key]
        status = c_int()
        driver.call("cuStreamIsCapturing", c_void_p(stream), ctypes.byref(status))
        if status.value == driver.CAPTURE_ACTIVE:
            self._add_to_capture(stream, graph)
        else:
            driver.call("cuGraphLaunch", c_void_p(self._exec(key)), c_void_p(stream))
        return 0

    def _add_to_capture(self, stream, graph: int) -> None:
        """The call's graph as one child node of the stream's capture, after what the capture holds so far."""
        status, ident, captured = c_int(), c_uint64(), c_void_p()
        deps, edges, count = ctypes.POINTER(c_void_p)(), c_void_p(), c_size_t()
        driver.call("cuStreamGetCaptureInfo_v3", c_void_p(stream), ctypes.byref(status), ctypes.byref(ident),
                    ctypes.byref(captured), ctypes.byref(deps), ctypes.byref(edges), ctypes.byref(count))
        node = c_void_p()
        driver.call("cuGraphAddChildGraphNode", ctypes.byref(node), captured, deps, count, c_void_p(graph))
        driver.call("cuStreamUpdateCaptureDependencies_v2", c_void_p(stream), ctypes.byref(node), None,
                    c_size_t(1), driver.SET_CAPTURE_DEPENDENCIES)

    def _exec(self, key: tuple) -> int:
        graph, made = self.graphs[key]
        if made is None:
            exe = c_void_p()
            driver.call("cuGraphInstantiateWithFlags", ctypes.byref(exe), c_void_p(graph), ctypes.c_ulonglong(0))
            made = int(exe.value)
            self.graphs[key] = (graph, made)
        return made

    def _graph(self, targets: dict[str, int]) -> int:
        """A graph of the description's nodes on the buffers at `targets`."""
        graph = c_void_p()
        driver.call("cuGraphCreate", ctypes.byref(graph), c_int(0))
        handles: list[c_void_p] = []
        for node in relocate(self.desc, targets):
            deps = (c_void_p * max(1, len(node.deps)))(*[handles[d] for d in node.deps])
            made, n = c_void_p(), c_size_t(len(node.deps))
            if node.kind == KERNEL:
                args = ctypes.create_string_buffer(node.args, max(1, len(node.args)))
                base = ctypes.addressof(args)
                params = (c_void_p * max(1, len(node.layout)))(*[base + o for o, _ in node.layout])
                p = driver.KernelNodeParams(c_void_p(self.functions[node.function]), *node.grid, *node.block,
                                            node.shared, params, None, None, None)
                driver.call("cuGraphAddKernelNode_v2", ctypes.byref(made), graph, deps, n, ctypes.byref(p))
                if any(node.cluster):
                    value = driver.LaunchAttributeValue()
                    value.cluster[:] = list(node.cluster)
                    driver.call("cuGraphKernelNodeSetAttribute", made, driver.ATTRIBUTE_CLUSTER_DIMENSION,
                                ctypes.byref(value))
            elif node.kind == MEMSET:
                m = driver.MemsetParams(node.dst, node.pitch, node.value, node.element,
                                        node.nbytes // max(1, node.element), max(1, node.height))
                driver.call("cuGraphAddMemsetNode", ctypes.byref(made), graph, deps, n, ctypes.byref(m),
                            c_void_p(self.ctx))
            elif node.kind == MEMCPY:
                c = driver.Memcpy3D()
                c.srcMemoryType = c.dstMemoryType = driver.MEMORY_DEVICE
                c.srcDevice, c.dstDevice, c.WidthInBytes, c.Height, c.Depth = node.src, node.dst, node.nbytes, 1, 1
                driver.call("cuGraphAddMemcpyNode", ctypes.byref(made), graph, deps, n, ctypes.byref(c),
                            c_void_p(self.ctx))
            elif node.kind == EMPTY:
                driver.call("cuGraphAddEmptyNode", ctypes.byref(made), graph, deps, n)
            else:
                raise Unreplayable(f"a {node.kind} node is not replayed")
            handles.append(made)
        return int(graph.value)

    def close(self) -> None:
        for graph, exe in self.graphs.values():
            if exe:
                driver.lib().cuGraphExecDestroy(c_void_p(exe))
            driver.lib().cuGraphDestroy(c_void_p(graph))
        self.graphs = {}


def _largest_shared(desc: Description) -> dict[str, int]:
    out: dict[str, int] = {}
    for node in desc.nodes:
        if node.kind == KERNEL:
            out[node.function] = max(out.get(node.function, 0), node.shared)
    return out


def _non_portable_clusters(desc: Description) -> set[str]:
    """The functions a described launch runs in clusters of more than 8 blocks (CUDA's portable cluster size)."""
    return {n.function for n in desc.nodes
            if n.kind == KERNEL and any(n.cluster) and max(1, n.cluster[0]) * max(1, n.cluster[1])
            * max(1, n.cluster[2]) > PORTABLE_CLUSTER}
