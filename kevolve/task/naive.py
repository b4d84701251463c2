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

from kevolve.task.naive_ir import Lowered, NaiveError, Sizes, Val, contiguous, numel

__all__ = ["NaiveError", "lower", "trace", "PRIMES"]
PRIMES = (17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61)
SCALAR_TRACE = 0.0123456789        # + k / 1000 for the k-th scalar: a value no other literal takes


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
