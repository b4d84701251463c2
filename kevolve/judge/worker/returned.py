"""Torch ABI: what a kernel's timed calls returned, and which of it reaches the checked buffers.

A torch-ABI kernel returns its outputs instead of writing the harness's buffers; the session keeps what each call
returned and copies it into that call's checked buffers outside the timed interval (`Returned.store`, through
`TorchKernel.store`: count, shape, dtype and device checked). A call whose result is missing leaves its NaN poison.

On CUDA a call captured in a graph returns tensors of that graph's memory pool, which each replay of *that* graph
rewrites and no other graph's. A kernel timed on graphs has two (plain, and its twin with the evaluator's canary),
so the tensors of each capture are kept apart (`captured`), and after a replay the ones of the graph replayed are
what is stored (`replayed`): the last capture's (the twin's) would be stale after a plain round.
"""
from __future__ import annotations


class Returned:
    def __init__(self, n: int):
        self.n = n                                    # the calls a graph holds (the last slot: the latency call)
        self.calls: dict[str, list] = {}              # contender -> what each of its calls (by slot) returned last
        self.graphs: dict[int, list] = {}             # id(graph) -> what its capture's calls returned

    def track(self, name: str, slots: int) -> None:
        self.calls[name] = [None] * slots

    def set(self, name: str, slot: int, result) -> None:
        self.calls[name][slot] = result

    def captured(self, name: str, graph) -> None:
        """`graph` was just captured from `name`'s calls: their returned tensors are its pool's."""
        if name in self.calls:
            self.graphs[id(graph)] = list(self.calls[name][:self.n])

    def replayed(self, name: str, graph) -> None:
        """`graph` was just replayed for `name` (its own, or its canaried twin; a hollow probe's null graph is none
        of `name`'s and changes nothing): what `store` copies is that graph's."""
        if name in self.calls and id(graph) in self.graphs:
            self.calls[name][:self.n] = self.graphs[id(graph)]

    def store(self, kernels: dict, outs: dict, only: str | None = None, slot: int | None = None) -> bool:
        """Copies each kept result into its call's checked outputs (`outs[name][slot]["outputs"]`), for every
        contender or `only`, every slot or `slot`; whether there was any torch-ABI contender."""
        for name, returned in self.calls.items():
            if only is not None and name != only:
                continue
            for i, r in enumerate(returned):
                if r is not None and (slot is None or i == slot):
                    kernels[name].store(r, outs[name][i]["outputs"])
        return bool(self.calls)

    def clear(self) -> None:
        self.calls, self.graphs = {}, {}
