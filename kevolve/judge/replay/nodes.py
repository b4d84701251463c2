"""What one captured call of a CUDA kernel is, node by node, and whether a worker that never ran its host code can
replay it (`judge.replay`).

A `Description` is what the kernel's worker reports after capturing one call into a CUDA graph (`describe`): the
nodes in an order where every node comes after the nodes it depends on, each with its kind, its dependencies and, for
what can be replayed, what it does — a kernel node's function (its mangled name), grid, block, dynamic shared memory,
cluster shape and argument bytes laid out as the function's parameters are (`cuFuncGetParamInfo`); a memset's or a
1-D device-to-device copy's addresses — the buffers that call was given (name, base, bytes) and the contents of the
module's `__device__`/`__constant__` data after it. It travels as JSON (`to_wire`, `from_wire`).

`unreplayable` is the evaluator's rule: a host node (host code on a runtime thread), a copy to or from the host, an
allocation or free inside the graph, a child graph, an event or semaphore node, a conditional node, a kernel whose
function is not in the candidate's device code (another library's kernel: torch's, cuBLAS's), a memset or copy outside
the buffers the call was given, or a description that does not hold together (a dependency out of order, argument
bytes that do not fit their layout) — each a reason naming the node. `relocate` rewrites a description onto other
buffers: every address inside one of the describing call's buffers, wherever it stands in a kernel's argument bytes
(an 8-byte word of a parameter, a struct's field included) or as a memset's or copy's address, is moved to the same
offset in the buffer of the same name.

Guarantees: pure functions of the description, no CUDA; nothing the worker reports is trusted — a description that
lies is replayed as it says, and the replay's outputs are checked like any call's. Not guaranteed: that an argument
word equal to an address inside a buffer was meant as one (it is moved all the same: a value the kernel could only
have computed from the address), nor that a kernel reads only the addresses it was passed (one that reads an
address of the worker's own memory faults in the replay, its verdict a crash).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field, replace

KERNEL, MEMSET, MEMCPY, EMPTY = "kernel", "memset", "memcpy", "empty"
REPLAYABLE = (KERNEL, MEMSET, MEMCPY, EMPTY)
# CUgraphNodeType (cuda.h) -> kind, and why the kinds past `empty` cannot be replayed
KINDS = {0: KERNEL, 1: MEMCPY, 2: MEMSET, 3: "host", 4: "graph", 5: EMPTY, 6: "event wait", 7: "event record",
         8: "semaphore signal", 9: "semaphore wait", 10: "allocation", 11: "free", 12: "memory operation",
         13: "conditional"}
WHY = {"host": "runs host code on a runtime thread, which the timing worker never runs",
       "graph": "embeds a child graph (not replayed)",
       "event wait": "waits on an event of its host code's",
       "event record": "records an event of its host code's",
       "semaphore signal": "signals an external semaphore", "semaphore wait": "waits on an external semaphore",
       "allocation": "allocates memory inside its graph (use the workspace the harness passes)",
       "free": "frees memory inside its graph", "memory operation": "is a batch memory operation",
       "conditional": "is a conditional node (not replayed)", "host copy": "copies to or from the host",
       "copy shape": "is a copy of more than one dimension (not replayed)", "extra": "passes its arguments "
       "through `extra` (not replayed)"}


@dataclass(frozen=True)
class Buffer:
    """One buffer the describing call was given: its name (an input's, an output's, or `workspace`), base, bytes."""
    name: str
    base: int
    nbytes: int


@dataclass(frozen=True)
class Node:
    """One node of a captured call; only a replayable kind's fields are filled."""
    kind: str
    deps: tuple[int, ...] = ()
    function: str = ""                          # kernel: its mangled name
    grid: tuple[int, int, int] = (1, 1, 1)
    block: tuple[int, int, int] = (1, 1, 1)
    shared: int = 0                             # kernel: dynamic shared memory, bytes
    cluster: tuple[int, int, int] = (0, 0, 0)   # kernel: thread-block cluster dimensions, (0, 0, 0) if none
    args: bytes = b""                           # kernel: the argument bytes, each parameter at its offset
    layout: tuple[tuple[int, int], ...] = ()    # kernel: each parameter's (offset, size)
    dst: int = 0                                # memset, memcpy: destination address
    src: int = 0                                # memcpy: source address
    nbytes: int = 0                             # memcpy: bytes; memset: elements per row × element size
    value: int = 0                              # memset: the value, and its element size, rows and pitch
    element: int = 1
    height: int = 1
    pitch: int = 0
    detail: str = ""                            # an unreplayable kind's specifics ("host copy", "extra", ...)


@dataclass(frozen=True)
class Description:
    nodes: tuple[Node, ...]
    buffers: tuple[Buffer, ...]
    globals: tuple[tuple[str, bytes], ...] = field(default=())   # (name, contents) of the module's data

    def functions(self) -> set[str]:
        return {n.function for n in self.nodes if n.kind == KERNEL}


def unreplayable(desc: Description, functions: set[str] | None = None, allowed: tuple[str, ...] = ()) -> list[str]:
    """Why `desc` cannot be replayed where its host code never runs, one reason per node (empty: it can).
    `functions`: the names the candidate's device code defines (None: not known here; the timing worker's load checks
    them); `allowed`: name prefixes of other libraries' kernels a task allows."""
    out = []
    for i, node in enumerate(desc.nodes):
        where = f"node {i + 1} of {len(desc.nodes)} ({node.kind}{' ' + node.function if node.function else ''})"
        if any(not 0 <= d < i for d in node.deps):
            out.append(f"{where}: depends on a node that does not come before it (a malformed description)")
        if node.kind not in REPLAYABLE or node.detail:
            out.append(f"{where}: {WHY.get(node.detail or node.kind, 'is a kind of node that is not replayed')}")
            continue
        if node.kind == KERNEL:
            if not node.function:
                out.append(f"{where}: a kernel node without a function name")
            elif functions is not None and node.function not in functions and not node.function.startswith(allowed):
                out.append(f"{where}: runs another library's kernel `{node.function}`, not the candidate's device "
                           "code")
            if any(o < 0 or s <= 0 or o + s > len(node.args) for o, s in node.layout):
                out.append(f"{where}: argument bytes that do not fit the function's parameters (a malformed "
                           "description)")
            if min(node.grid) < 1 or min(node.block) < 1:
                out.append(f"{where}: an empty grid or block")
        elif node.kind in (MEMSET, MEMCPY):
            span = _span(node)
            for what, start in (("writes", node.dst), ("reads", node.src if node.kind == MEMCPY else None)):
                if start is not None and _owner(desc.buffers, start, span) is None:
                    out.append(f"{where}: {what} {span} bytes at {start:#x}, outside the buffers the call was given")
    return out


def _span(node: Node) -> int:
    """The bytes a memset or copy touches from its address."""
    if node.kind == MEMCPY:
        return node.nbytes
    rows = max(1, node.height)
    return (rows - 1) * node.pitch + node.nbytes if rows > 1 else node.nbytes


def _owner(buffers, address: int, span: int = 0) -> Buffer | None:
    """The buffer that holds `address` and the `span` bytes from it; for a bare address (`span` 0) a one-past-the-end
    address belongs to its buffer, where no buffer starts there."""
    inside = [b for b in buffers if b.base <= address < b.base + b.nbytes and address + span <= b.base + b.nbytes]
    if inside:
        return inside[0]
    ends = [b for b in buffers if span == 0 and address == b.base + b.nbytes]
    return ends[0] if ends else None


def relocate(desc: Description, targets: dict[str, int]) -> tuple[Node, ...]:
    """`desc`'s nodes with every address inside one of its buffers moved to the same offset in `targets[name]` (the
    base of the replaying worker's buffer of that name)."""
    def move(address: int) -> int:
        b = _owner(desc.buffers, address)
        return address if b is None or b.name not in targets else targets[b.name] + (address - b.base)
    out = []
    for node in desc.nodes:
        if node.kind == KERNEL:
            out.append(replace(node, args=_moved_args(node, move)))
        elif node.kind == MEMSET:
            out.append(replace(node, dst=move(node.dst)))
        elif node.kind == MEMCPY:
            out.append(replace(node, dst=move(node.dst), src=move(node.src)))
        else:
            out.append(node)
    return tuple(out)


def _moved_args(node: Node, move) -> bytes:
    """The argument bytes with every 8-byte-aligned word of a parameter of 8 bytes or more moved (`relocate`)."""
    args = bytearray(node.args)
    for offset, size in node.layout:
        if size < 8:
            continue
        for at in range(offset + (-offset % 8), offset + size - 7, 8):
            word, = struct.unpack_from("<Q", args, at)
            struct.pack_into("<Q", args, at, move(word))
    return bytes(args)


# ---------------------------------------------------------------------- the wire
def to_wire(desc: Description) -> dict:
    """JSON-able: bytes as hex, tuples as lists."""
    return {"nodes": [{**{k: v for k, v in n.__dict__.items() if k != "args"}, "args": n.args.hex()}
                      for n in desc.nodes],
            "buffers": [[b.name, b.base, b.nbytes] for b in desc.buffers],
            "globals": [[name, data.hex()] for name, data in desc.globals]}


def from_wire(obj) -> Description:
    """A `Description` from `to_wire`'s form; anything else raises ValueError (it is the worker's word)."""
    try:
        nodes = []
        for n in obj["nodes"]:
            fields = {k: n[k] for k in Node.__dataclass_fields__ if k in n}
            fields["args"] = bytes.fromhex(n.get("args", ""))
            for key in ("deps", "grid", "block", "cluster"):
                if key in fields:
                    fields[key] = tuple(int(x) for x in fields[key])
            fields["layout"] = tuple((int(o), int(s)) for o, s in n.get("layout", ()))
            for key in ("shared", "dst", "src", "nbytes", "value", "element", "height", "pitch"):
                if key in fields:
                    fields[key] = int(fields[key])
            nodes.append(Node(**fields))
        buffers = tuple(Buffer(str(name), int(base), int(size)) for name, base, size in obj["buffers"])
        globals_ = tuple((str(name), bytes.fromhex(data)) for name, data in obj.get("globals", ()))
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"a graph description the protocol does not allow: {type(e).__name__}: {e}") from None
    return Description(tuple(nodes), buffers, globals_)
