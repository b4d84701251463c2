"""In the kernel's worker: one call of the kernel captured into a CUDA graph and described node by node
(`judge.replay.nodes.Description`), for a worker that never runs its host code to replay (`judge.replay`).

`describe(worker, config, variant)` takes a buffer set as a timing session's calls get one (`Worker._allocate`), fills
its inputs (`variant`), poisons its outputs, captures the kernel's call on the same blocking stream the clock captures
on (`timing.capture_stream`) into a graph kept for reading (`torch.cuda.CUDAGraph(keep_graph=True)`), and reads it
with the driver: the nodes in an order where each follows what it depends on, each kernel node's function name,
launch shape, dynamic shared memory, cluster shape and argument bytes (at the offsets `cuFuncGetParamInfo` gives),
each memset's and 1-D device-to-device copy's addresses, the kind of every other node; the buffers the call was given;
and the contents of the module's `__device__`/`__constant__` data after the call (the data objects its cubins define,
`fatbin.symbols`: what the host code set, which the replay copies across).

Guarantees: runs in the kernel's worker, after the kernel's host code ran there — so it is that worker's word, and
nothing in it is trusted: the evaluator checks what cannot be replayed (`nodes.unreplayable`) and every replayed
call's outputs. A call whose capture fails raises (the driver's or torch's error): the harness rejects it as not
replayable. Not guaranteed: data the device code reaches by an address it was not passed (its replay faults).
"""
from __future__ import annotations

import ctypes
from ctypes import c_int, c_size_t, c_void_p

from kevolve.judge.replay import driver, fatbin
from kevolve.judge.replay.driver import DriverError
from kevolve.judge.replay.nodes import KINDS, Buffer, Description, Node, to_wire

GLOBALS_MAX = 64 << 20          # bytes of `__device__`/`__constant__` data copied across, at most


def describe(worker, config: int, variant: int) -> dict:
    """The wire form (`nodes.to_wire`) of one captured call of `worker.kernel` on configuration `config`."""
    import torch
    from kevolve.judge.worker import buffers, timing
    cfg = worker.task_configs[config]
    buf = worker._allocate(cfg.size_dict)
    for name, t in worker.task.make_inputs(cfg, worker.device, variant).items():
        buf["inputs"][name].copy_(t)
    buffers.poison_all([buf])
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph(keep_graph=True)
    try:
        with torch.cuda.graph(graph, stream=timing.capture_stream()):
            rc = worker.kernel(buf["inputs"], buf["outputs"], cfg.size_dict, buf["workspace"], worker._stream(),
                               scalars=worker.task.scalar_values(cfg))
    finally:
        worker.state.restore()
    if rc != 0:
        raise RuntimeError(f"the kernel returned {rc} on the described call")
    nodes, modules = _nodes(int(graph.raw_cuda_graph()))
    held = {**buf["inputs"], **buf["outputs"], "workspace": buf["workspace"]}
    table = [Buffer(n, t.data_ptr(), t.numel() * t.element_size()) for n, t in held.items()]
    desc = Description(tuple(nodes), tuple(table), _globals(worker.lib, modules))
    del graph
    return to_wire(desc)


def _nodes(graph: int) -> tuple[list[Node], set[int]]:
    """The graph's nodes in dependency order, described; and the modules of its kernels' functions."""
    count = c_size_t(0)
    driver.call("cuGraphGetNodes", c_void_p(graph), None, ctypes.byref(count))
    handles = (c_void_p * count.value)()
    driver.call("cuGraphGetNodes", c_void_p(graph), handles, ctypes.byref(count))
    deps = _dependencies(graph, [int(h) for h in handles])
    order: list[int] = []
    placed: set[int] = set()
    while len(order) < len(deps):                       # Kahn's order: a node after all it depends on
        ready = [h for h in deps if h not in placed and all(d in placed for d in deps[h])]
        if not ready:
            raise RuntimeError("the captured graph has a cycle")
        for h in ready:
            order.append(h)
            placed.add(h)
    index = {h: i for i, h in enumerate(order)}
    out, modules = [], set()
    for h in order:
        kind = c_int()
        driver.call("cuGraphNodeGetType", c_void_p(h), ctypes.byref(kind))
        node, module = _node(h, kind.value)
        if module:
            modules.add(module)
        out.append(Node(**{**node.__dict__, "deps": tuple(sorted(index[d] for d in deps[h]))}))
    return out, modules


EDGE_DATA = 8                   # sizeof(CUgraphEdgeData): from_port, to_port, type, 5 reserved bytes
EDGES_MAX = 4096                # dependencies of one node, or edges of one graph, read at most
ASKED: list[str] = []           # the way `_dependencies` read the graph (the first that worked), for reports


def _dependencies(graph: int, handles: list[int]) -> dict[int, list[int]]:
    """Each node's dependencies. Drivers differ in which query they accept for a captured graph (the CUDA 13 driver
    answers `cuGraphNodeGetDependencies_v2` with no buffers by CUDA_ERROR_INVALID_VALUE on an H100): the ways are
    tried in order — per node with buffers for the nodes and their edge data, per node without edge data, the
    CUDA 12 three-argument entry point, then the graph's edge list — and the first that answers for every node is
    used. Raises the first way's `DriverError` when none does."""
    ways = (("per node, edge data read", lambda: {h: _node_edges(h, "edge data") for h in handles}),
            ("per node, no edge data", lambda: {h: _node_edges(h, "no edge data") for h in handles}),
            ("per node, CUDA 12 entry", lambda: {h: _node_edges(h, "CUDA 12") for h in handles}),
            ("the graph's edges", lambda: _graph_edges(graph, handles)))
    first = None
    for name, way in ways:
        try:
            found = way()
        except (DriverError, AttributeError) as e:      # AttributeError: the driver lacks that entry point
            first = first or e
            continue
        if name not in ASKED:
            ASKED.append(name)
        return found
    raise first if isinstance(first, DriverError) else DriverError("reading the captured graph's edges", -1)


def _node_edges(node: int, form: str) -> list[int]:
    """One node's dependencies by one form of the query: "edge data" (`_v2` with an edge-data buffer), "no edge
    data" (`_v2` without), "CUDA 12" (the three-argument entry point)."""
    count = c_size_t(EDGES_MAX)
    found = (c_void_p * EDGES_MAX)()
    if form == "CUDA 12":
        driver.call("cuGraphNodeGetDependencies", c_void_p(node), found, ctypes.byref(count))
    else:
        edges = (ctypes.c_uint8 * (EDGE_DATA * EDGES_MAX))() if form == "edge data" else None
        driver.call("cuGraphNodeGetDependencies_v2", c_void_p(node), found, edges, ctypes.byref(count))
    if count.value >= EDGES_MAX:
        raise RuntimeError(f"a node of the captured graph has {EDGES_MAX} or more dependencies")
    return [int(found[k]) for k in range(count.value) if found[k]]


def _graph_edges(graph: int, handles: list[int]) -> dict[int, list[int]]:
    count = c_size_t(EDGES_MAX)
    src, dst = (c_void_p * EDGES_MAX)(), (c_void_p * EDGES_MAX)()
    edges = (ctypes.c_uint8 * (EDGE_DATA * EDGES_MAX))()
    driver.call("cuGraphGetEdges_v2", c_void_p(graph), src, dst, edges, ctypes.byref(count))
    if count.value >= EDGES_MAX:
        raise RuntimeError(f"the captured graph has {EDGES_MAX} or more edges")
    out: dict[int, list[int]] = {h: [] for h in handles}
    for k in range(count.value):
        out.setdefault(int(dst[k]), []).append(int(src[k]))
    return out


def _node(h: int, kind: int) -> tuple[Node, int]:
    """One node described, and its function's module (0 but for a kernel)."""
    name = KINDS.get(kind, f"type {kind}")
    if kind == driver.NODE_KERNEL:
        return _kernel(h)
    if kind == driver.NODE_MEMSET:
        p = driver.MemsetParams()
        driver.call("cuGraphMemsetNodeGetParams", c_void_p(h), ctypes.byref(p))
        return Node(name, dst=int(p.dst), value=int(p.value), element=int(p.elementSize),
                    nbytes=int(p.width) * int(p.elementSize), height=int(p.height), pitch=int(p.pitch)), 0
    if kind == driver.NODE_MEMCPY:
        p = driver.Memcpy3D()
        driver.call("cuGraphMemcpyNodeGetParams", c_void_p(h), ctypes.byref(p))
        if not all(_on_device(getattr(p, f"{side}MemoryType"), getattr(p, f"{side}Device")) for side in ("src", "dst")):
            return Node(name, detail="host copy"), 0
        if p.Height > 1 or p.Depth > 1:
            return Node(name, detail="copy shape"), 0
        return Node(name, src=int(p.srcDevice) + int(p.srcXInBytes), dst=int(p.dstDevice) + int(p.dstXInBytes),
                    nbytes=int(p.WidthInBytes)), 0
    return Node(name), 0


def _kernel(h: int) -> tuple[Node, int]:
    p = driver.KernelNodeParams()
    driver.call("cuGraphKernelNodeGetParams_v2", c_void_p(h), ctypes.byref(p))
    func = p.func
    if not func and p.kern:
        f = c_void_p()
        driver.call("cuKernelGetFunction", ctypes.byref(f), c_void_p(p.kern))
        func = f.value
    if not func:
        raise RuntimeError("a kernel node without a function")
    name, layout = driver.function_name(func), driver.parameter_layout(func)
    shape = dict(grid=(p.gridDimX, p.gridDimY, p.gridDimZ), block=(p.blockDimX, p.blockDimY, p.blockDimZ),
                 shared=int(p.sharedMemBytes), cluster=_cluster(h))
    if layout and not p.kernelParams:
        return Node("kernel", function=name, layout=layout, detail="extra", **shape), 0
    args = bytearray(max((o + s for o, s in layout), default=0))
    if args:
        base = ctypes.addressof((ctypes.c_char * len(args)).from_buffer(args))
        for k, (offset, size) in enumerate(layout):
            ctypes.memmove(base + offset, p.kernelParams[k], size)
    module = c_void_p()
    driver.call("cuFuncGetModule", ctypes.byref(module), c_void_p(func))
    return Node("kernel", function=name, layout=layout, args=bytes(args), **shape), int(module.value or 0)


def _cluster(h: int) -> tuple[int, int, int]:
    value = driver.LaunchAttributeValue()
    if driver.lib().cuGraphKernelNodeGetAttribute(c_void_p(h), driver.ATTRIBUTE_CLUSTER_DIMENSION,
                                                  ctypes.byref(value)) != 0:
        return (0, 0, 0)
    return tuple(int(x) for x in value.cluster)  # type: ignore[return-value]


def _on_device(memory_type: int, address: int) -> bool:
    """Whether a copy's side is device memory (a unified address asked of the driver)."""
    if memory_type == driver.MEMORY_DEVICE:
        return True
    if memory_type != driver.MEMORY_UNIFIED or not address:
        return False
    kind = c_int()
    rc = driver.lib().cuPointerGetAttribute(ctypes.byref(kind), driver.POINTER_ATTRIBUTE_MEMORY_TYPE,
                                            ctypes.c_uint64(address))
    return rc == 0 and kind.value == driver.MEMORY_DEVICE


def _globals(lib_path: str, modules: set[int]) -> tuple[tuple[str, bytes], ...]:
    """The contents of every data object the library's cubins define that the kernels' modules hold, read now."""
    try:
        found = fatbin.symbols(fatbin.images(lib_path))
    except fatbin.FatbinError:
        found = None
    names = sorted(found[1]) if found else []
    out, total = [], 0
    for name in names:
        for module in modules:
            dptr, size = ctypes.c_uint64(), c_size_t()
            if driver.lib().cuModuleGetGlobal_v2(ctypes.byref(dptr), ctypes.byref(size), c_void_p(module),
                                                 name.encode()) != 0:
                continue
            total += size.value
            if total > GLOBALS_MAX:
                raise RuntimeError(f"the kernel's device data is over {GLOBALS_MAX >> 20} MiB: not replayed")
            data = (ctypes.c_char * size.value)()
            driver.call("cuMemcpyDtoH_v2", data, dptr, size)
            out.append((name, bytes(data)))
            break
    return tuple(out)

