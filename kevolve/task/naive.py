"""A naive kernel written from a task's torch reference: plain loops, double precision, one loop nest per
operation — a correct first seed, not a fast one (`python -m kevolve.tasks new`, KernelBench imports).

`lower(reference, inputs, sizes, scalars, outputs)` traces the reference once (torch's `make_fx`, decomposed to core
ATen operations) at sizes that are distinct primes and scalars at distinctive values, so that every dimension in the
graph reads back as an expression of the sizes (19 → `N`, 323 → `B*N`) and every scalar literal as its name; then
turns each operation into a loop nest over its result (`Loop`), kept in double in the workspace. Views (reshape of a
contiguous result, unsqueeze, squeeze, expand, permute, transpose, select) are index arithmetic, not copies.
kevolve/task/naive_source.py writes the loops as a C++ kernel for the CPU or a CUDA one (one kernel per loop).

Covered: pointwise arithmetic, comparisons and the usual math functions (with broadcasting), reductions over any
dims (sum, mean, amax, amin, prod, var), softmax and log-softmax, layer norm, GELU, matrix products (mm, bmm,
addmm), constants. Anything else raises `NaiveError` naming the operation: the task then needs a seed written by
hand, or a search with an LLM (its translate operator writes the first kernels). Guarantees: no kernel is emitted
for a graph with an operation not covered; every float32 output is written from its double value. Not guaranteed:
that the kernel is correct for every size — a reference whose code branches on its sizes is traced down one branch,
and a literal that merely equals a size is read as it — which is why `kevolve.task.new` judges the seed before it
lists it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

PRIMES = (17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61)
SCALAR_TRACE = 0.0123456789        # + k / 1000 for the k-th scalar: a value no other literal takes


class NaiveError(ValueError):
    """The reference uses something the naive writer does not cover; the message names it."""


@dataclass
class Val:
    """A tensor value: its shape (C expressions) and how to read element `idx` (a list of C index expressions)."""
    shape: tuple[str, ...]
    load: Callable[[list[str]], str]
    flat: str | None = None             # the pointer when it is a contiguous buffer read from its start


@dataclass
class Loop:
    dest: str                           # the buffer written (a temporary, or an output)
    shape: tuple[str, ...]
    body: Callable[[str, list[str]], str]   # C statements writing dest[i], given the names of the linear index i
                                            # and of the index per dimension (the emitter declares both)
    cast: str = "double"
    inner: str = "1"                    # iterations per element (a reduction's length): the loop's work is numel × it


@dataclass
class Lowered:
    temps: list[tuple[str, str]] = field(default_factory=list)      # (name, element count expression)
    loops: list[Loop] = field(default_factory=list)

    def workspace_bytes(self) -> str:
        return "8 * (" + " + ".join(n for _, n in self.temps) + ")" if self.temps else "0"


def numel(shape) -> str:
    return "*".join(f"({d})" for d in shape) if shape else "1"


def contiguous(ptr: str, shape: tuple[str, ...], cast: str = "(double)") -> Callable[[list[str]], str]:
    def load(idx: list[str]) -> str:
        off = "0"
        for i, d in zip(idx, shape):
            off = f"({off})*({d}) + ({i})"
        return f"{cast}{ptr}[{off}]"
    return load


def decompose(i: str, shape: tuple[str, ...], prefix: str) -> tuple[str, list[str]]:
    """C statements that split linear index `i` over `shape` into `prefix0…`; and those names."""
    names = [f"{prefix}{k}" for k in range(len(shape))]
    if not shape:
        return "", []
    lines = [f"int64_t {prefix}_rest = {i};"]
    for k in range(len(shape) - 1, 0, -1):
        lines.append(f"const int64_t {names[k]} = {prefix}_rest % ({shape[k]}); {prefix}_rest /= ({shape[k]});")
    lines.append(f"const int64_t {names[0]} = {prefix}_rest;")
    return " ".join(lines), names


class Sizes:
    """Reads a traced integer back as an expression of the sizes (their primes), or a literal."""

    def __init__(self, primes: dict[str, int]):
        self.primes = primes

    def expr(self, v: int) -> str:
        v = int(v)
        if v <= 1:
            return str(v)
        parts, rest = [], v
        for name, p in self.primes.items():
            while rest % p == 0:
                parts.append(name)
                rest //= p
        if rest != 1:
            parts.append(str(rest))
        return "*".join(parts) if parts else str(v)

    def number(self, x: float, scalars: dict[str, float]) -> str:
        """A literal of the graph as C: a scalar's name, an expression of the sizes, or the number."""
        for name, trace in scalars.items():
            if x == trace:
                return f"(double){name}"
        if float(x).is_integer() and abs(x) > 1 and any(int(abs(x)) % p == 0 for p in self.primes.values()):
            e = self.expr(int(abs(x)))
            return f"{'-' if x < 0 else ''}(double)({e})"
        if math.isinf(x):
            return "INFINITY" if x > 0 else "-INFINITY"
        if math.isnan(x):
            return "NAN"
        return repr(float(x))


def broadcast(shapes: list[tuple[str, ...]]) -> tuple[str, ...]:
    n = max((len(s) for s in shapes), default=0)
    out = []
    for k in range(n):
        dims = {s[len(s) - n + k] for s in shapes if len(s) - n + k >= 0} - {"1"}
        if len(dims) > 1:
            raise NaiveError(f"shapes {shapes} do not broadcast as the trace read them")
        out.append(dims.pop() if dims else "1")
    return tuple(out)


def aligned(v: Val, shape: tuple[str, ...], idx: list[str]) -> str:
    """`v` read at output index `idx` of a broadcast result of `shape`."""
    lead = len(shape) - len(v.shape)
    return v.load(["0" if d == "1" and shape[lead + k] != "1" else idx[lead + k] for k, d in enumerate(v.shape)])


def trace(reference, tensors, values):
    """The reference's graph: make_fx over core ATen decompositions, with `values` as keyword arguments."""
    import torch
    from torch._decomp import core_aten_decompositions
    from torch.fx.experimental.proxy_tensor import make_fx
    with torch.no_grad():
        reference(*tensors, **values)            # once untraced: what it builds on a first call (a module) stays out
        graph = make_fx(lambda *ts: reference(*ts, **values),
                        decomposition_table=core_aten_decompositions())(*tensors)
    graph.graph.eliminate_dead_code()
    return graph


def lower(reference, inputs: list[tuple[str, tuple[str, ...], str]], sizes: list[str], scalars: dict[str, float],
          outputs: list[tuple[str, tuple[str, ...], str]]) -> Lowered:
    """The loops of `reference(*inputs, **sizes_and_scalars)` (see the module's docstring)."""
    import torch
    from kevolve.task.expr import eval_expr
    from kevolve.task.naive_ops import Lowering
    if len(sizes) > len(PRIMES):
        raise NaiveError(f"{len(sizes)} sizes: the naive writer reads at most {len(PRIMES)}")
    primes = dict(zip(sizes, PRIMES))
    traced = {n: SCALAR_TRACE + k / 1000 for k, n in enumerate(scalars)}
    tensors = []
    for name, shape, dtype in inputs:
        if dtype != "float32":
            raise NaiveError(f"input {name} is {dtype}: the naive writer reads float32 inputs only")
        dims = [eval_expr(d, primes) for d in shape]
        tensors.append(torch.randn(dims, dtype=torch.float64, generator=torch.Generator().manual_seed(len(tensors))))
    try:
        graph = trace(reference, tensors, {**primes, **traced})
    except NaiveError:
        raise
    except Exception as e:
        raise NaiveError(f"the reference could not be traced: {type(e).__name__}: {str(e)[:300]}") from None
    read = Sizes(primes)
    low = Lowering(read, traced)
    placeholders = [n for n in graph.graph.nodes if n.op == "placeholder"]
    for node, (name, shape, _) in zip(placeholders, inputs):
        dims = tuple(read.expr(d) for d in node.meta["val"].shape)
        low.env[node] = Val(dims, contiguous(name, dims), flat=name)
    result = None
    for node in graph.graph.nodes:
        if node.op == "call_function":
            low.env[node] = low.call(node)
        elif node.op == "get_attr":
            low.env[node] = low.constant(getattr(graph, node.target))
        elif node.op == "output":
            result = node.args[0]
    found = list(result) if isinstance(result, (list, tuple)) else [result]
    if len(found) != len(outputs):
        raise NaiveError(f"the reference returns {len(found)} tensors, the task has {len(outputs)} outputs")
    for node, (name, shape, dtype) in zip(found, outputs):
        if dtype != "float32":
            raise NaiveError(f"output {name} is {dtype}: the naive writer writes float32 outputs only")
        v = low.value(node)
        if not isinstance(v, Val):
            raise NaiveError(f"output {name} is a number, not a tensor")
        if numel(v.shape).replace("(1)*", "") != numel(tuple(low.read.expr(eval_expr(d, primes)) for d in shape)) \
                .replace("(1)*", ""):
            raise NaiveError(f"output {name}: the trace gives shape {v.shape}, the task {shape}")
        low.write(name, v)
    return low.out
