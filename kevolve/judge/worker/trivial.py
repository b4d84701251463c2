"""The trivial call (`Worker.trivial`, sent before any kernel loads): ms per call of a function that does nothing,
timed through the same path and clock as a kernel's timed calls, and on CUDA the canary's unit. What the evaluator
holds as the least a call can take (`judge.evaluator.impossible`) and, on CUDA, the length of one cycle of
`torch.cuda._sleep` (`judge.evaluator.canary`). `w` is the `Worker`; it refuses the command once a kernel is loaded.
"""
from __future__ import annotations


def cpu(w, n: int) -> dict:
    """ms per call of a native function that does nothing (`kevolve_noop` in the evictor's library), bound
    with the task's C signature and called with arguments of its kind through the same path and clock as a
    kernel's timed CPU calls (`timing.CpuClock.wall`), `n` times: what the evaluator holds as the least a
    call can take (`judge.evaluator.impossible`). No samples without the evictor's library (then no such floor is
    applied)."""
    if w.evict_path is None:
        return {"samples": []}
    import torch
    from kevolve.judge.worker import timing
    from kevolve.task.abi import CKernel
    t = w.task
    noop = CKernel(w.evict_path, t, "cpu", symbol="kevolve_noop")
    one = torch.zeros(1)
    ins, outs = {s.name: one for s in t.inputs}, {s.name: one for s in t.outputs}
    sizes, scalars, ws = {name: 1 for name in t.sizes}, t.scalar_values(), torch.zeros(0, dtype=torch.uint8)
    clock = timing.CpuClock(w.evictor, "lines")
    return {"samples": [clock.wall(lambda: noop(ins, outs, sizes, ws, scalars=scalars)) for _ in range(n)]}


def cuda(w, n: int, per_graph: int = 10, cycles: int = 20000) -> dict:
    """CUDA: ms per call of an empty kernel (`torch.cuda._sleep(0)`) in the same kind of graph as a kernel's
    timed calls — `per_graph` × (L2 flush, call), less a graph of the flushes alone (`timing.per_call`) — `n`
    calls in all; and the ms one cycle of `torch.cuda._sleep` adds to a call so timed (from `cycles` per
    call): the unit of the canary (`judge.evaluator.canary`). Measured before any candidate code runs here."""
    import torch
    from kevolve.judge.worker import timing
    clock = timing.CudaClock()
    graphs = {"null": clock.capture(lambda i: None, per_graph),
              "empty": clock.capture(lambda i: torch.cuda._sleep(0), per_graph),
              "slept": clock.capture(lambda i: torch.cuda._sleep(cycles), per_graph)}
    raw: dict[str, list] = {name: [] for name in graphs}
    for graph in graphs.values():             # a graph's first replay uploads it: untimed
        graph.replay()
    w._sync()
    for _ in range(max(3, n // per_graph)):
        for name, graph in graphs.items():
            raw[name].append(clock.replay(graph))
    empty = timing.per_call(raw["empty"], raw["null"], per_graph, graph=True)
    slept = timing.per_call(raw["slept"], raw["null"], per_graph, graph=True)
    del graphs
    return {"samples": empty,
            "cycle_ms": max(0.0, timing.median(slept) - timing.median(empty)) / cycles or None}
