"""The evaluator's side of correctness: the same inputs the worker drew, float64 references, inputs compared
exactly after every call, and the element-wise verdict on every output of every call.

`Checker.check_config` asks the worker for three calls per configuration (fresh buffers; the same buffers
with new contents; a second set of buffers, each input and output ending against memory that faults), each with
outputs and workspace poisoned, and compares. Their inputs are variants salt, salt + 1 and salt + 2, the salt
drawn at random once per evaluator (`reuse.References.salt`; `KEVOLVE_INPUT_SALT` fixes it): their references are
computed once per evaluator, and no candidate's source can know them. A failed call's verdict names the call, its
inputs' variant and the salt.
Guarantees: the reference is computed here and never exists in the worker; whether a kernel modified an input
is decided here, by comparing the worker's input buffers (through the output exchange, on the device when IPC
works) bit for bit with inputs drawn here — nothing the kernel can reach computes it; a verdict names the output,
the call, how many elements failed and the worst one; NaN or Inf where the reference is finite fails.
Not guaranteed: tolerances per output (they are per task).
"""
from __future__ import annotations

import collections
import math

from kevolve.judge import protocol
from kevolve.judge import exchange
from kevolve.judge.evaluator.fused import Fused
from kevolve.judge.options import Options
from kevolve.judge.evaluator.phases import Phases
from kevolve.judge.evaluator.process import WorkerDied, WorkerProcess
from kevolve.judge.results import Measurement
from kevolve.judge.evaluator.reuse import References
from kevolve.task import draw
from kevolve.task.spec import Case, Task


class Checker:
    """The evaluator's side of correctness: same inputs, float64 reference, exact input check, element-wise verdict."""

    CALLS = ((0, False), (1, False), (2, True))   # (inputs: variant salt + k, new buffers): fresh, same buffers
                                                  # new data, new buffers (the edge call: `buffers.allocate`)

    def __init__(self, task: Task, options: Options, clock: Phases | None = None,
                 references: References | None = None, folder=None, fused: Fused | None = None):
        self.task, self.options, self.clock = task, options, clock or Phases()
        self.folder = folder                # the judgement's exchange folder: output files are read from it only
        self.references = references if references is not None else References(0)
        self.device = "cuda" if options.target == "cuda" else "cpu"
        # the compiled reference and comparison (`judge.evaluator.fused`), or None: eager
        self.fused = fused
        self.timed_used: collections.Counter = collections.Counter()   # pool variants this judgement used, per cfg
        self.call_ms: dict[str, float] = {}   # per cfg: the kernel's fastest correctness call, as its worker said

    def _inputs(self, variant: int) -> str:
        """How a verdict names a correctness call's inputs: their variant and the salt (`KEVOLVE_INPUT_SALT=<salt>`
        draws them again)."""
        return f"inputs {variant} of salt {self.references.salt}"

    def _label(self, variant: int) -> str:
        """How a verdict names the call of inputs `variant`: a correctness call and its inputs, else a timed call."""
        k = variant - self.references.salt
        return f"{_CALLS[k]}, {self._inputs(variant)}" if k in _CALLS else "a timed call"

    def reference(self, cfg: Case, variant: int, inputs: dict | None = None) -> tuple[dict, tuple]:
        """The inputs' fingerprints (`worker.fingerprint`) and, per output, the float64 reference and where it is
        finite (None: all of it, the usual case) for inputs `variant` of `cfg` (`inputs`, when drawn already)."""
        from kevolve.judge.exchange import fingerprint

        def compute():
            drawn = inputs if inputs is not None else self.task.make_inputs(cfg, self.device, variant)
            return {n: fingerprint(t) for n, t in drawn.items()}, self.expected(cfg, drawn)
        if cfg.drawn:                           # a configuration drawn for this judgement alone: not kept
            with self.clock("reference"):
                return compute()
        with self.clock("reference"):           # keyed by all that decides the inputs: task, configuration, variant
            return self.references.get((self.task.name, str(self.task.dir), self.device, cfg, variant), compute)

    def timed_variants(self, cfg: Case, count: int) -> list[int]:
        """Input variants for `count` timed calls' sets on `cfg`: the next ones of the evaluator's pool
        (`References.timed_salt` + 0, 1, 2, ...), so each is used at most once in this judgement — no kernel sees an
        input set twice, and nothing of a judgement outlives its worker — while every candidate an evaluator
        judges gets the same sequence, so the inputs and float64 references of the timed calls are drawn and
        computed once per evaluator (`timed_set`), as the correctness calls' are. The pool's salt is drawn at
        random per evaluator: no candidate's source can know the inputs."""
        k = self.timed_used[cfg.id]
        self.timed_used[cfg.id] += count
        return [self.references.timed_salt + k + j for j in range(count)]

    def timed_set(self, cfg: Case, variant: int) -> tuple[dict, tuple]:
        """Inputs `variant` of `cfg` drawn here and their float64 references (`expected`), kept by the evaluator's
        reference cache while it has room (never evicted: what does not fit is computed each time)."""
        def compute():
            with self.clock("reference", f"inputs {cfg.id} #{variant}"):
                mine = self.task.make_inputs(cfg, self.device, variant)
            return mine, self.expected(cfg, mine)

        def size(value) -> int:
            mine, expected = value
            return sum(t.numel() * t.element_size() for t in mine.values()) + \
                sum(t.numel() * t.element_size() for pair in expected for t in pair if t is not None)
        if not 0 <= variant - self.references.timed_salt < 1 << 40:    # not of the pool (a warm-up's): not kept
            return compute()
        with self.clock("reference"):
            return self.references.get((self.task.name, str(self.task.dir), self.device, cfg, variant, "timed"),
                                       compute, size)

    def changed_inputs(self, cfg: Case, variant: int, handles: dict, mine: dict | None = None) -> list[str]:
        """The inputs whose buffers in the worker (`handles`, as `exchange.export` gave them) differ in any bit
        from inputs `variant` of `cfg` drawn here (or `mine`, drawn already). Every handle is read (a file
        handle is consumed)."""
        import torch
        if mine is None:
            with self.clock("reference", f"inputs {cfg.id} #{variant}"):
                mine = self.task.make_inputs(cfg, self.device, variant)
        differs = []                                # compared as bits (a NaN input equals itself), then one sync
        for name, t in mine.items():
            theirs = exchange.read(handles[name], t.dtype, tuple(t.shape), self.device, self.folder)
            a, b = theirs.reshape(-1).view(torch.uint8), t.reshape(-1).view(torch.uint8)
            differs.append(torch.ne(a, b).any() if a.numel() == b.numel() else torch.tensor(True, device=a.device))
            del theirs, a
        flags = torch.stack(differs).tolist() if differs else []
        return [name for name, bad in zip(mine, flags) if bad]

    def expected(self, cfg: Case, inputs: dict) -> tuple:
        """Per output, the float64 reference on `inputs` and where it is finite (None: everywhere): compiled
        where `fused` has it (after it agreed with this eager code on the configuration), else eager."""
        with self.clock("expected"):            # drawn configurations: eager (their shapes are seen once)
            if self.fused is not None and not cfg.drawn:
                got = self.fused.reference(cfg, inputs, lambda: self._expected(cfg, inputs))
                if got is not None:
                    return got
            return self._expected(cfg, inputs)

    def _expected(self, cfg: Case, inputs: dict) -> tuple:
        import torch
        up = {n: t.double() if t.dtype.is_floating_point else t for n, t in inputs.items()}
        refs = [r.reshape(self.task.shape(spec, cfg.size_dict))
                for spec, r in zip(self.task.outputs, self.task.call_reference(up, cfg))]
        del up
        finite = [torch.isfinite(r) if r.dtype.is_floating_point else None for r in refs]
        alls = [f.all() for f in finite if f is not None]
        everywhere = iter(torch.stack(alls).tolist() if alls else [])    # one sync for every output
        return tuple((r, None if f is None or next(everywhere) else f) for r, f in zip(refs, finite))

    def check_config(self, worker: WorkerProcess, index: int, cfg: Case) -> Measurement:
        with exchange.kept_open():        # the three calls' buffers (two sets), each opened once
            return self._check_config(worker, index, cfg)

    def _check_config(self, worker: WorkerProcess, index: int, cfg: Case) -> Measurement:
        worst_abs = worst_rel = 0.0
        pointers = None
        for k, new_buffers in self.CALLS:
            variant = self.references.salt + k
            where, edge = f"call {k + 1}, {self._inputs(variant)}", EDGE_CALL if new_buffers else FIRST_CALLS
            try:
                with self.clock("check", f"{cfg.id} call {k + 1}"):
                    case = draw.as_message(cfg) if cfg.drawn and k == 0 else None   # sent with its first call
                    reply = worker.call(protocol.Check(index, variant, new_buffers, case), self.options.timeout)
            except WorkerDied as e:    # a fault (on the CPU, past the edge call's page ends) or a hang: which call
                raise WorkerDied(e.kind, f"{e.detail} ({where}){edge}") from None
            fail = lambda why: Measurement(cfg.id, cfg.shape_id, cfg.init, cfg.heldout, False,  # noqa: E731
                                           worst_abs, worst_rel, failure=why)
            if isinstance(reply, protocol.Failed):
                worker.kill()          # a CUDA error poisons the context: never reuse this worker
                return fail(f"crash: {reply.error} ({where}){edge}")
            with self.clock("reference", f"inputs {cfg.id} #{variant}"):
                drawn = self.task.make_inputs(cfg, self.device, variant)
            mine, expected = self.reference(cfg, variant, drawn)
            if reply.before != mine:
                raise RuntimeError(f"harness error: the worker drew different inputs for {cfg.id} "
                                   "(nondeterministic generator?) — please report this")
            self.call_ms[cfg.id] = min(self.call_ms.get(cfg.id, float("inf")), max(0.0, float(reply.seconds)) * 1e3)
            if reply.rc != 0:
                return fail(f"the kernel returned {reply.rc} ({where})")
            if reply.overruns:
                return fail(f"wrote outside {', '.join(reply.overruns)} ({where}, {reply.layout} "
                            "buffers)")
            changed = self.changed_inputs(cfg, variant, reply.input_handles, drawn)
            del drawn
            if changed:
                return fail(f"input {', '.join(changed)} modified by the kernel ({where})")
            if new_buffers and pointers == reply.pointers:
                raise RuntimeError("harness error: the second buffer set reused the first one's addresses")
            pointers = reply.pointers
            with self.clock("reference"):
                why, a, r = self._compare(expected, cfg, reply.outputs, self._label(variant))
            worst_abs, worst_rel = max(worst_abs, a), max(worst_rel, r)
            if why:
                return fail(why)
        return Measurement(cfg.id, cfg.shape_id, cfg.init, cfg.heldout, True, worst_abs, worst_rel)

    def compare_files(self, cfg: Case, variant: int, files: dict, call: str | None = None,
                      expected: tuple | None = None, verdict_only: bool = False) -> tuple[str | None, float, float]:
        """Checks outputs a worker wrote for inputs `variant` (a timed call's, named `call`) against the
        reference (`expected`, when the caller computed it already); `verdict_only`: see `_compare`."""
        if expected is None:
            _, expected = self.reference(cfg, variant)
        with self.clock("reference"):
            return self._compare(expected, cfg, files, call or self._label(variant), verdict_only)

    def _compare(self, expected: tuple, cfg: Case, files: dict, call: str, verdict_only: bool = False
                 ) -> tuple[str | None, float, float]:
        """One pass per output for the verdict (compiled, `judge.evaluator.fused`: one read of the output and its
        reference; eager: NaN and Inf propagate through the maxima), one device sync for all outputs; the
        diagnosis of a failure (what is NaN, what is out of tolerance, and where) runs only when there is one,
        eagerly, and gives the verdict. `verdict_only` (a timed call's check) lets eager skip the worst absolute
        error, reported 0."""
        with self.clock("outputs"):
            return self._compared(expected, cfg, files, call, verdict_only)

    def _compared(self, expected: tuple, cfg: Case, files: dict, call: str, verdict_only: bool
                  ) -> tuple[str | None, float, float]:
        import torch
        task, sizes = self.task, cfg.size_dict
        outs, stats = [], []
        for spec, (ref, finite) in zip(task.outputs, expected):
            out = exchange.read(files[spec.name], getattr(torch, spec.dtype), task.shape(spec, sizes), self.device,
                                self.folder)
            outs.append(out)
            if not out.dtype.is_floating_point:
                bad = torch.ne(out, ref).sum().double()
                stats.append(torch.stack([bad, bad, bad]))
                continue
            if not out.numel():
                stats.append(torch.zeros(3, dtype=torch.float64, device=out.device))
                continue
            fused = self.fused.compare(out, ref, finite) if self.fused is not None else None
            if fused is None:          # [not within tolerance (1: some, or NaN), worst ratio, worst error]
                ratio, err = self._ratio(out, ref, finite, need_err=not verdict_only)
                worst = ratio.max()
                fused = torch.stack([torch.logical_not(worst <= 1).double(), worst,
                                     err.max() if err is not None else torch.zeros_like(worst)])
                del ratio, err
            stats.append(fused)
        values = torch.stack(stats).tolist() if stats else []
        worst_abs = worst_rel = 0.0
        for spec, (ref, finite), out, (bad, worst, worst_err) in zip(task.outputs, expected, outs, values):
            if not out.dtype.is_floating_point:
                if bad:
                    return f"output {spec.name}: {int(bad)} wrong values ({call})", 0.0, float("inf")
                continue
            if bad == 0:
                worst_abs, worst_rel = max(worst_abs, worst_err), max(worst_rel, worst)
                continue
            ratio, err = self._ratio(out, ref, finite, need_err=True)    # eager decides: within tolerance after
            worst, worst_err = float(ratio.max()), (float(err.max()) if err.numel() else 0.0)   # all (the
            if math.isfinite(worst) and worst <= 1.0:    # compiled tolerance's last bit may round the other way)
                worst_abs, worst_rel = max(worst_abs, worst_err), max(worst_rel, worst)
                continue
            return self._diagnose(spec.name, out.double(), ref, finite, ratio, call, max(worst_abs, worst_err),
                                  max(worst_rel, worst))
        return None, worst_abs, worst_rel

    def _ratio(self, out, ref, finite, need_err: bool):
        """|out - ref| / (atol + rtol |ref|) in float64, 0 where the reference is not finite (any value passes
        there); and |out - ref| itself when `need_err` (else None)."""
        import torch
        task = self.task
        # in float64 by type promotion against a float64 reference (a float32 value converts exactly): no copy
        err = torch.sub(out if ref.dtype == torch.float64 else out.double(), ref).abs_()
        tol = torch.abs(ref).mul_(task.rtol).add_(task.atol)
        if finite is not None:             # where the reference is NaN or Inf, any value passes
            err.masked_fill_(~finite, 0)
            tol.masked_fill_(~finite, task.atol)
        if need_err:
            return torch.div(err, tol), err
        return err.div_(tol), None

    def _diagnose(self, name: str, out64, ref, finite, ratio, call: str, worst_abs: float, worst_rel: float):
        import numpy as np
        import torch
        task, shape = self.task, tuple(out64.shape)
        not_finite = ~torch.isfinite(out64)
        if finite is not None:
            not_finite &= finite
        if not_finite.any():
            nan = torch.isnan(out64) & not_finite
            if nan.any():
                return (f"output {name}: {int(nan.sum())} of {out64.numel()} elements NaN — not written? "
                        f"first at {_first(nan)} ({call})", float("inf"), float("inf"))
            return (f"output {name}: {int(not_finite.sum())} elements Inf where the reference is finite, "
                    f"first at {_first(not_finite)} ({call})", float("inf"), float("inf"))
        flat = int(ratio.reshape(-1).argmax())
        idx = tuple(int(i) for i in np.unravel_index(flat, shape))
        n_bad = int((ratio > 1).sum())
        return (f"output {name}: {n_bad} of {out64.numel()} elements outside tolerance "
                f"(atol={task.atol:g}, rtol={task.rtol:g}); worst at {idx}: got {float(out64.reshape(-1)[flat]):.6g}, "
                f"expected {float(ref.reshape(-1)[flat]):.6g} ({call})", worst_abs, worst_rel)


EDGE_CALL = (" (on the third call, whose inputs and outputs end against memory that faults when touched — reading "
             "past an end, or writing past it even to put the bytes back, faults — and start at addresses only "
             "element-aligned, as the contract promises)")
FIRST_CALLS = (" (on the first two calls, whose inputs and outputs start 16-byte aligned and end at most 16 bytes "
               "before memory that faults when touched — a vector or a line read past the 16-byte boundary after "
               "an end faults)")
_CALLS = {0: "first call", 1: "second call, same buffers, new inputs", 2: "third call, new buffers"}


def _first(mask) -> tuple[int, ...]:
    import numpy as np
    flat = int(mask.reshape(-1).nonzero()[0, 0])
    return tuple(int(i) for i in np.unravel_index(flat, tuple(mask.shape)))
