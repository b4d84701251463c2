"""A CUDA timing round of a `judge.worker.session.Session` (`run`), and the calls of a contender timed queued
(`queued`): split from the session's module, which holds what both targets share. `self` is the session.
"""
from __future__ import annotations

import os

from kevolve.judge.worker import buffers


def run(self, order: list[str], hollow: set = frozenset(), canary: tuple = ()) -> dict:
    """One CUDA round of session `self` (`Session.run_round`): the graph of flushes, then every contender's graph
    replayed (or its calls queued), then each one's synced latency call."""
    clock, times = self.clock, {}
    null = self.graphs.get("_null")
    if null is not None:       # an untimed wake first: the null is every contender's base, and the round's
        clock.replay(null)     # first replay, after the host's work, may run slow (experiments/clock_position.py)
    times["_null_graph"] = [clock.replay(null)] if null is not None else []
    times["_null_queued"] = [clock.queued(lambda: None)]
    times["_null_synced"] = [clock.synced(lambda: None)]
    graphs = {**self.graphs, **self.canary_graphs} if canary else self.graphs
    for name in order:
        call = self.calls[name] if name not in hollow else (lambda i: None)
        if canary and name in self.checked:
            call = self._canaried(call)
        if name in graphs and (name not in hollow or null is not None):
            graph = graphs[name] if name not in hollow else null
            times[name] = [clock.replay(graph)]
            self.returned.replayed(name, graph)
        else:
            times[name] = self._queued_calls(name, call)
    for name in order:                               # the latency column: one synced call, its own inputs
        call = self.calls[name] if name not in hollow else (lambda i: None)
        times[f"latency:{name}"] = [self.clock.synced(lambda c=call: c(self.n))]
    return times


def queued(self, name: str, call) -> list:
    """A contender timed queued (its capture failed): n samples, one per call — so, as on the CPU, no call
    may find a later call's inputs ready. Every input set first gets a decoy's contents (fresh random inputs
    of the same shapes), then set i its round's inputs, and the contender's call-i outputs their poison,
    just before call i, outside its interval (a hollow probe does the same around its no-op): a first call
    that computed the whole round's outputs from a table of the buffers it had seen would compute them
    from the decoys, and its later calls' outputs are poisoned again before they run
    (`QUEUED_AHEAD` in `tests/adversarial/test_cuda.py`). A graph's calls need none of this: a
    replay is one sample of all n calls together."""
    decoy = self.w.task.make_inputs(self.cfg, self.w.device, (1 << 41) + int.from_bytes(os.urandom(5), "little"))
    for i in range(self.n):
        self._put(i, decoy)
    del decoy
    samples = []
    for i in range(self.n):
        self._fill_slot(i, self.variants[i])
        if name in self.checked:
            buffers.poison_all([self.outs[name][i]])
        samples.append(self.clock.queued(lambda i=i: call(i)))
    return samples
