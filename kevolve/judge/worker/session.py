"""One configuration's timing session inside the worker: buffers, contenders, warm-up, rounds.

A round times every contender (checked kernels — the candidate, and for `harness.compare` a second one —
and torch baselines) interleaved, each on the same `n` input sets, which the evaluator names per round by
fresh random variants (so nothing can be precomputed or memoised). Each checked kernel's call i writes its
own output and workspace buffers, poisoned before it (on CUDA at the start of the round); after the round the
device is synchronised and every one of those outputs goes back to the evaluator, with the input sets themselves
(to be compared exactly with the evaluator's own), to be checked against the float64 reference of its input set. On
CUDA each contender runs as one CUDA graph of n × (flush, call) — one sample for all n calls — or, when capture
fails, as n queued calls, each a sample, whose input set is filled and outputs poisoned just before it (after a
decoy fill of every set: `_queued_calls`), then one synced call on input set n for the latency column; on the CPU
calls are interleaved one by one, each input set filled and its outputs poisoned just before its calls (so no
call can compute a later call's outputs ahead), and each checked output is copied the moment the call returns
(work a call leaves to a thread after returning is not in the copy). A torch-ABI kernel's call is the extension's call
alone: what it returns is kept and copied into that call's checked buffers after the round (on the CPU, the moment it
returns), outside the timed interval (`returned.Returned`).

Guarantees: the number of rounds is fixed before the first timed call, from `reps` and the baselines'
warm-up time (never the kernel's); warm-up calls are poisoned and checked like the rest. This module
measures and hands outputs back; it judges nothing (that is `judge.evaluator.timed`, in the evaluator).
"""
from __future__ import annotations

import contextlib
import time

from kevolve.judge import exchange
from kevolve.judge.rounds import MAX_ROUNDS, WARMUP_SETS, calls_for, plan_rounds, set_bytes  # noqa: F401
from kevolve.judge.worker import buffers, cuda_round, l2, returned, timing


class KernelFailed(RuntimeError):
    pass


class Session:
    def __init__(self, worker, config: int, checked: dict, baselines: dict, calls: int, canary: float = 0.0):
        cfg = worker.task_configs[config]
        self.w, self.config, self.cfg, self.sizes = worker, config, cfg, cfg.size_dict
        self.scalars = worker.task.scalar_values(cfg)
        self.cuda = worker.device == "cuda"
        self.n = calls
        slots = calls + (1 if self.cuda else 0)              # the last one takes the synced latency call
        self.slots = [worker._allocate(self.sizes) for _ in range(slots)]
        self.outs = {name: self.slots if j == 0 else [worker._allocate(self.sizes) for _ in range(slots)]
                     for j, name in enumerate(checked)}
        self.kernels = checked
        self.returned = returned.Returned(calls)             # torch ABI: what each call returned (_store_returned)
        self.calls = {name: self._kernel_call(name, k) for name, k in checked.items()}
        self.calls.update({name: self._baseline_call(fn) for name, fn in baselines.items()})
        self.checked = list(checked)
        self.clock = timing.CudaClock() if self.cuda else timing.CpuClock(worker.evictor, worker.cpu_flush)
        self._cold: dict = {}                                # (contender, i) -> its buffers' ranges (`_cold_ranges`)
        self.kind: dict[str, str] = {}
        self.graphs: dict = {}
        self.canary = canary                                 # the evaluator's known addition (`_canaried`)
        self.canary_graphs: dict = {}                        # checked kernel -> its graph with the canary
        self.notes: dict[str, str] = {}
        self.round = 0
        self.variants: list[int] = []                       # what `_fill` drew the input sets from, in order
        self.seconds: dict[str, float] = {}                 # this command's breakdown (`_span`)
        self.described: dict = {}                            # IPC descriptions of this session's live buffers

    # ------------------------------------------------------------------ contenders
    def _kernel_call(self, name: str, kernel):
        if hasattr(kernel, "store"):                 # torch ABI: results kept, copied after the timed calls
            self.returned.track(name, len(self.slots))

            def run(i: int) -> None:
                self.returned.set(name, i, kernel.run(self.slots[i]["inputs"], self.sizes, self.scalars, self.cfg))
            return run

        def call(i: int) -> None:
            b = self.outs[name][i]
            rc = kernel(self.slots[i]["inputs"], b["outputs"], self.sizes, b["workspace"], self.w._stream(),
                        scalars=self.scalars)
            if rc != 0:
                raise KernelFailed(f"{name} returned {rc} on a timed call")
        return call

    def _baseline_call(self, fn):
        names = [s.name for s in self.w.task.inputs]
        return lambda i: fn(*[self.slots[i]["inputs"][n] for n in names])

    # ------------------------------------------------------------------ setup
    def warmup(self, variants: list[int]) -> tuple[dict, float | None]:
        """Every contender once on each of the first `len(variants)` input sets (`WARMUP_SETS`; each kernel call's
        outputs poisoned just before it), on a side stream on CUDA, then CUDA graphs captured. Returns the checked
        outputs and the slowest baseline's wall ms per call (its last warm-up call: the first may compile or
        autotune)."""
        self.seconds = {}
        with self._span("fill"):
            self._fill(variants)
        with self._span("poison"):
            self._poison()
        slowest = None
        side = self._side_stream()
        with self._span("warm-up calls"):
            for name, call in self.calls.items():
                for i in range(len(variants)):
                    if name in self.checked:         # just before its call, as in a CPU round (`_cpu_round`)
                        buffers.poison_all([self.outs[name][i]])
                    self.w._sync()
                    t0 = time.perf_counter()
                    with side():
                        call(i)
                    self.w._sync()
                    per = (time.perf_counter() - t0) * 1e3
                    self._restore(name)
                if name not in self.checked:
                    slowest = max(slowest or 0.0, per)
        self._store_returned()
        with self._span("export"):
            reply = self._export(variants, "warm-up")
        if self.cuda:
            with self._span("capture"):
                self._capture()
        return reply, slowest

    @contextlib.contextmanager
    def _span(self, name: str):
        """Adds the seconds of a `with` block to `self.seconds[name]` (the worker's own breakdown of a command:
        a diagnostic the evaluator shows as phases `worker …`, `Phases.add`)."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0

    def upload(self) -> dict:
        """Replays every captured graph once, untimed and unchecked: a graph's first replay uploads it to the
        device, and costs more than the rest. Sent by the evaluator once it has checked the warm-up's outputs,
        so this replay (on the warm-up's inputs, copied into the sets past them: `_fill_rest`, over outputs the
        next round poisons) hides nothing."""
        self.seconds = {}
        with self._span("upload"):
            self._fill_rest()
            for graph in [*self.graphs.values(), *self.canary_graphs.values()]:
                graph.replay()
            self.w._sync()
        return {"worker_s": self.seconds}

    def close(self) -> None:
        """Drops the buffers, graphs and calls now: the calls close over this session (a reference cycle), which
        would otherwise wait for a garbage collection (0.1–0.3 s each with torch loaded)."""
        self.calls, self.graphs, self.outs, self.slots, self.described = {}, {}, {}, [], {}
        self.canary_graphs = {}
        self.returned.clear()
        self._cold = {}
        self.snapshots = None

    def _side_stream(self):
        """A context factory: torch's advice is to warm up on a side stream before capturing."""
        if not self.cuda:
            return contextlib.nullcontext
        import torch
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        return lambda: torch.cuda.stream(side)

    def _capture_graph(self, name: str, call):
        """`clock.capture` of `call`, its torch-ABI results kept as this graph's (`Returned.captured`)."""
        graph = self.clock.capture(call, self.n)
        self.returned.captured(name, graph)
        return graph

    def _capture(self) -> None:
        for name, call in list(self.calls.items()) + [("_null", lambda i: None)]:
            try:
                self.graphs[name] = self._capture_graph(name, call)
                self.kind[name] = "graph"
            except Exception as e:                       # noqa: BLE001 — any refusal means: time it queued
                self.kind[name] = "queued"
                if name != "_null":
                    self.notes[name] = ("not capturable in a CUDA graph, timed queued: "
                                        f"{type(e).__name__}: {str(e)[:200]}")
                    self._clear_error(call)
        if self.canary:
            for name in self.checked:
                if self.kind.get(name) == "graph":        # a kernel captured once must capture again: a failure here
                    try:                                  # is a refusal of the canary, not a reason to time without it
                        self.canary_graphs[name] = self._capture_graph(name, self._canaried(self.calls[name]))
                    except Exception as e:                # noqa: BLE001
                        raise KernelFailed(f"{name} was captured in a CUDA graph once, but not a second time with the "
                                           f"judge's canary before its calls: {type(e).__name__}: {str(e)[:200]}")
        self.w._sync()
        self._restore(*self.checked)                    # capture ran their host code

    def _canaried(self, call):
        """`call` with the evaluator's canary inside its timed interval (`timing.canaried`)."""
        return timing.canaried(call, self.canary, self.cuda)

    def _restore(self, *names: str) -> None:
        """The worker's own process state back after candidate code ran (`judge.worker.state`): after a checked
        contender's call (or its hollow no-op: the same harness work), never for torch's."""
        if any(n in self.checked for n in names):
            self.w.state.restore()

    def _clear_error(self, call) -> None:
        """A failed capture leaves its error as the CUDA runtime's last error, which a kernel's own
        `cudaGetLastError()` would then report on its first queued call (a kernel built with the static
        runtime keeps its own). One untimed, unchecked call outside capture reads it off; every timed call's
        outputs are poisoned and checked as always, so this call can neither help nor hide anything."""
        import torch
        try:
            torch.cuda.synchronize()
            call(0)
        except Exception:                                # noqa: BLE001 — its result is thrown away
            pass

    # ------------------------------------------------------------------ one round
    def run_round(self, variants: list[int], hollow: list[str] | tuple = (), canary: tuple[int, ...] = ()) -> dict:
        """One round; the contenders named in `hollow` (a probe of `judge.evaluator.outside`) are replaced by no-ops
        that cost what everything around their calls costs — the same flushes, graph of flushes, snapshots and
        exports — so that the evaluator's outside clock sees the round without their calls. A hollow round is
        never counted. `canary`: the calls (indices) of the checked kernels that carry the session's canary inside
        their timed interval (`_canaried`; the evaluator's check of the clock, `judge.evaluator.canary`) — on CUDA
        every call of the round or none."""
        canary = tuple(int(i) for i in canary)
        if canary and (not self.canary or hollow or not all(0 <= i < self.n for i in canary)
                       or (self.cuda and sorted(canary) != list(range(self.n)))):
            raise ValueError(f"canary calls {canary}: a session with a canary, no hollow contender, and call indices "
                             "under the round's calls (on CUDA all of them)")
        self.seconds = {}
        with self._span("fill"):
            self._fill(variants, now=self.cuda)      # the CPU fills each set just before its calls (`_cpu_round`)
        with self._span("poison"):
            if self.cuda:
                self._poison()
            self.w._sync()
        names = list(self.calls)
        k = self.round % len(names)
        order = names[k:] + names[:k]
        self.round += 1
        hollow = set(hollow) & set(names)
        if self.cuda:                   # set-aside 0 before every round: a persisting access-policy window (which
            l2.reset_persisting_l2()    # a launch attribute can carry unnamed) keeps nothing in L2 past the flush
        flushed, flush_s = getattr(self.clock, "flushed_bytes", 0), getattr(self.clock, "flush_s", 0.0)
        with self._span("timed calls"):
            times = self._cuda_round(order, hollow, canary) if self.cuda else self._cpu_round(order, hollow, canary)
            self.w._sync()
            if self.cuda:                                # queued calls ran host code (the CPU restores per call)
                self._restore(*self.checked)
        if not self.cuda:                                # the eviction's share of the timed calls' span
            self.seconds["flush"] = self.clock.flush_s - flush_s
        if self.cuda and l2.persisting_l2_limit():
            raise KernelFailed("the persisting-L2 set-aside was raised during a timed round (a kernel may not "
                               "reserve L2 for its own data: the judge flushes L2 before every timed call)")
        with self._span("export"):
            self._store_returned()                       # a hollow kernel's stale results too: the same work
            reply = self._export(variants, f"round {self.round}")
        reply["times"] = times
        reply["worker_s"] = self.seconds
        reply["work"] = {"timed_calls": sum(len(v) for k, v in times.items() if not k.startswith("_")) if not self.cuda
                         else sum(self.n for k in times if not k.startswith(("_", "latency:"))),
                         "flushed_bytes": getattr(self.clock, "flushed_bytes", 0) - flushed}
        return reply

    def _cuda_round(self, order: list[str], hollow: set = frozenset(), canary: tuple = ()) -> dict:
        return cuda_round.run(self, order, hollow, canary)

    def _queued_calls(self, name: str, call) -> list:
        return cuda_round.queued(self, name, call)

    def _cpu_round(self, order: list[str], hollow: set = frozenset(), canary: tuple = ()) -> dict:
        """Calls interleaved one by one. Input set i is filled, and every checked contender's call-i outputs
        poisoned, only just before the calls on set i (outside their timed intervals; a hollow round does the
        same): were every set filled and every output poisoned at the round's start, one call could compute the
        whole round's outputs into the later calls' buffers, and the median call would do no work at all
        (`tests/adversarial/cpu/ahead_of_calls.cpp`)."""
        times: dict[str, list] = {name: [] for name in order}
        self.snapshots = {name: [None] * self.n for name in self.checked}
        calls = {name: (lambda i: None) if name in hollow else c for name, c in self.calls.items()}
        spiked = {name: self._canaried(calls[name]) for name in self.checked} if canary else {}
        for i in range(self.n):
            self._fill_slot(i, self.variants[i])
            buffers.poison_all([self.outs[name][i] for name in self.checked])
            for j in range(len(order)):
                name = order[(i + j) % len(order)]
                call = spiked[name] if name in spiked and i in canary else calls[name]
                times[name].append(self.clock.wall(lambda c=call: c(i), self._cold_ranges(name, i)))
                self._restore(name)                     # outside its interval; a hollow no-op's too
                if name in self.snapshots:              # what the call left when it returned, nothing later
                    self._store_returned(name, i)
                    self.snapshots[name][i] = {n: t.clone() for n, t in self.outs[name][i]["outputs"].items()}
        return times

    def _cold_ranges(self, name: str, i: int):
        """What the clock evicts before contender `name`'s call i (`timing.CpuClock`): every buffer the harness
        hands that call — input set i, and a checked kernel's own outputs and workspace for call i. The same for a
        hollow probe's no-op, so a probe costs what a counted round does around the calls."""
        if self.clock.evictor is None:
            return None
        key = (name, i)
        if key not in self._cold:
            mine = list(self.slots[i]["inputs"].values())
            if name in self.outs:
                b = self.outs[name][i]
                mine += [*b["outputs"].values(), b["workspace"]]
            self._cold[key] = self.clock.evictor.ranges(mine)
        return self._cold[key]

    # ------------------------------------------------------------------ torch ABI: results into the buffers
    def _store_returned(self, only: str | None = None, slot: int | None = None) -> None:
        """Torch ABI: what each call returned into that call's checked buffers (`Returned.store`), outside the
        timed interval — after a round on CUDA, the moment the call returned on the CPU (`only`, `slot`) — and
        before the outputs are exported."""
        if self.returned.store(self.kernels, self.outs, only, slot) and only is None:
            self.w._sync()

    # ------------------------------------------------------------------ buffers
    def _fill(self, variants: list[int], now: bool = True) -> None:
        """Input sets 0 .. len(variants) - 1 drawn from `variants` (a round fills every set); `now=False`: only
        recorded, for `_cpu_round` to fill each set just before its calls (`_fill_slot`)."""
        if not 0 < len(variants) <= len(self.slots):
            raise ValueError(f"{len(variants)} variants for {len(self.slots)} input sets")
        self.variants = list(variants)
        if now:
            for i, v in enumerate(variants):
                self._fill_slot(i, v)

    def _fill_slot(self, i: int, variant: int) -> None:
        self._put(i, self.w.task.make_inputs(self.cfg, self.w.device, variant))

    def _put(self, i: int, inputs: dict) -> None:
        """Input set i's buffers get `inputs`' contents."""
        for name, t in inputs.items():
            self.slots[i]["inputs"][name].copy_(t)

    def _fill_rest(self) -> None:
        """Input sets past the warm-up's (which filled `WARMUP_SETS` of them) get copies of those, so that a
        replay over every set reads valid inputs (a class label in range, an index within its tensor) before
        the first round fills them all."""
        filled = len(self.variants) or 1
        for k in range(len(self.slots) - filled):
            self._put(filled + k, self.slots[k % filled]["inputs"])

    def _poison(self) -> None:
        """Outputs NaN, workspace random, guard zones re-armed with fresh bytes, before every round (in one
        batch: `buffers.poison_all`)."""
        buffers.poison_all([b for name in self.checked for b in self.outs[name]])

    def _export(self, variants: list[int], when: str) -> dict:
        """Handles for every checked output and every input set of the round (or warm-up): IPC descriptions on CUDA,
        else files — on the CPU the small ones packed into one file per round (`exchange.Packer`)."""
        if not self.checked:                             # torch alone (the clean baseline worker): nothing to check
            return {"outputs": [], "input_handles": [], "overruns": {}}
        outputs = []
        snaps = getattr(self, "snapshots", None) if not self.cuda else None
        packer = None if self.cuda or self.w.ipc else exchange.Packer(self.w.exchange, f"{self.config}.t{self.round}")

        def export(tensors: dict, stem: str) -> dict:
            if packer is not None:
                return packer.add(tensors, stem)
            return exchange.export(tensors, self.w.exchange, stem, self.w.ipc, self.described)
        for name in self.checked:
            for i, v in enumerate(variants):
                live = self.outs[name][i]["outputs"]
                out = snaps[name][i] if snaps and snaps[name][i] is not None else live
                outputs.append({"who": name, "slot": i, "variant": v, "when": when,
                                "handles": export(out, f"{self.config}.t{self.round}.{name}.{i}")})
        self.snapshots = None
        inputs = [export(s["inputs"], f"{self.config}.t{self.round}.in.{i}")
                  for i, s in enumerate(self.slots[:len(variants)])]
        if packer is not None:
            packer.close()
        return {"outputs": outputs, "input_handles": inputs, "overruns": self._overruns()}

    def _overruns(self) -> dict[str, list[str]]:
        bufs = [(name, b) for name in self.checked for b in self.outs[name]]
        found = buffers.overruns_all([b for _, b in bufs])
        return {name: sorted({o for (who, _), over in zip(bufs, found) if who == name for o in over})
                for name in self.checked}
