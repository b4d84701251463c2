"""The evaluator's checks compiled: a task's float64 reference and the output comparison as torch.compile
(Inductor) kernels, fused, where eager torch runs one kernel per operation over the whole tensor.

Why it exists: docs/decisions/judge.md, "Compiled checks".

`Fused` holds both for one task on one device, kept by the evaluator across judgements (`reuse.Reuse.fused`),
compiled on first use with dynamic shapes (one graph serves every configuration; Dynamo compiles again for a
new dtype, a size of 0 or 1, a new scalar value). Calls of fewer than `MIN_ELEMENTS` elements stay eager.

Guarantees:
- before its first use for outputs of a dtype, the compiled comparison passes a self-test (`Fused._self_test`):
  elements off by 3 tolerances, NaN and infinities planted at both ends and in the middle of a 1M-element
  output are all counted, none where the reference is not finite, and the worst passing ratio is the one
  planted; else it is turned off;
- the verdict is never the compiled code's alone to give: the comparison counts the elements NOT within
  tolerance (`not err <= tol`: a NaN is counted), and any count above zero is diagnosed by the eager code
  (`Checker._diagnose`), which gives the verdict and its text; a pass needs the count to be zero;
- each configuration's compiled reference is compared with the eager one (`Checker.expected`'s own) on the
  first inputs it is asked for, element for element within a thousandth of the task's tolerance, NaN and Inf
  in the same places, before any compiled reference of that configuration is used; a mismatch turns the
  compiled reference off for the task in this evaluator (`Fused.off`, said in the log) and eager is used;
- a compile or run error of either turns that part off for the task (eager from then on), said in the log —
  except running out of device memory, which goes on to the harness as it does from eager code;
- the harness uses compiled checks only where the worker is Landlock-confined (`judge.worker.confine`): the
  evaluator's Inductor and Triton caches are then out of a kernel's reach.
Not guaranteed: the compiled reference is as fast on every task (an operation Inductor cannot fuse runs as
eager's does: matmul and convolution call the same libraries).
"""
from __future__ import annotations

import logging

from kevolve.task.spec import as_list

log = logging.getLogger(__name__)

AGREE = 1e-3        # the compiled reference may differ from eager's by this fraction of the task's tolerance
SELF_TEST_N = (1 << 20) + 7   # the comparison's self-test: its graph is first compiled on this size
MIN_ELEMENTS = 1 << 16   # smaller calls stay eager: Dynamo's guards cost more than eager's few small kernels
                         # (on the CPU, a 1000-element comparison: 19 µs compiled, 10 µs eager)


class Fused:
    """A task's float64 reference and its output comparison, compiled for `device`; `off` says what was turned
    off and why (`reference`, `compare` -> reason)."""

    def __init__(self, task, device: str, min_elements: int | None = None):
        self.task, self.device = task, device
        self.min_elements = MIN_ELEMENTS if min_elements is None else min_elements
        self.off: dict[str, str] = {}
        self.agreed: set = set()            # configuration ids whose compiled reference matched eager's
        self._reference = self._compare = self._compare_masked = None
        self.tested: set = set()            # (masked, output dtype) whose compiled comparison passed `_self_test`

    # ------------------------------------------------------------------ the reference
    def reference(self, cfg, inputs: dict, eager) -> tuple | None:
        """Per output, the float64 reference and where it is finite (None: everywhere), as `Checker.expected`
        gives them, computed by the compiled reference — after it agreed with `eager()` (that call's result)
        on this configuration's first inputs. None when the compiled reference is off or the inputs have fewer
        than `min_elements` elements in all (the caller uses eager)."""
        if "reference" in self.off or sum(t.numel() for t in inputs.values()) < self.min_elements:
            return None
        try:
            got = self._run_reference(cfg, inputs)
        except Exception as e:          # noqa: BLE001 — any compile or run error: eager from now on
            _unless_out_of_memory(e)
            self._turn_off("reference", f"{type(e).__name__}: {str(e)[:300]}")
            return None
        if cfg.id in self.agreed:
            return got
        want = eager()
        why = self._disagree(got, want)
        if why:
            self._turn_off("reference", f"{cfg.id}: {why}")
            return want
        self.agreed.add(cfg.id)
        return want

    def _run_reference(self, cfg, inputs: dict) -> tuple:
        import torch
        task = self.task
        if self._reference is None:
            self._reference = _compile(_reference_fn(task))
        args, kwargs = task._args(inputs, cfg)         # sizes and scalar values: plain numbers, not the Case
        refs, flags = self._reference(tuple(args), kwargs)
        refs = [r.reshape(task.shape(spec, cfg.size_dict)) for spec, r in zip(task.outputs, refs)]
        everywhere = iter(flags.tolist() if flags is not None else [])     # one sync for every output
        out = []
        for r in refs:
            if not r.dtype.is_floating_point:
                out.append((r, None))
                continue
            out.append((r, None if next(everywhere) else torch.isfinite(r)))
        return tuple(out)

    def _disagree(self, got: tuple, want: tuple) -> str | None:
        """Why the compiled reference `got` is not eager's `want` (None: they agree)."""
        import torch
        task = self.task
        for spec, (g, gf), (w, wf) in zip(task.outputs, got, want):
            if g.shape != w.shape or g.dtype != w.dtype:
                return f"output {spec.name}: {tuple(g.shape)} {g.dtype}, eager {tuple(w.shape)} {w.dtype}"
            if not w.dtype.is_floating_point:
                if not torch.equal(g, w):
                    return f"output {spec.name}: differs from eager's"
                continue
            if (gf is None) != (wf is None) or (wf is not None and not torch.equal(gf, wf)):
                return f"output {spec.name}: NaN or Inf where eager's is finite, or the other way round"
            if wf is not None and not (torch.equal(torch.isnan(g), torch.isnan(w)) and        # NaN != NaN: compared
                                       torch.equal(torch.where(torch.isinf(g), g, 0),         # as places, and the
                                                   torch.where(torch.isinf(w), w, 0))):       # infinities by sign
                return f"output {spec.name}: NaN or Inf values differ from eager's"
            fin = torch.isfinite(w)
            gap = torch.where(fin, (g - w).abs() - AGREE * (task.atol + task.rtol * w.abs()), 0)
            if gap.numel() and float(gap.max()) > 0:
                return (f"output {spec.name}: differs from eager's by more than {AGREE:g} of the tolerance "
                        f"(worst {float(torch.where(fin, (g - w).abs(), 0).max()):.3g})")
        return None

    # ------------------------------------------------------------------ the comparison
    def compare(self, out, ref, finite):
        """A float64 tensor [elements not within tolerance (NaN counted), worst ratio |out - ref| / (atol +
        rtol |ref|), worst |out - ref|] — the ratio and error 0 where the reference is not finite (`finite`:
        None, finite everywhere) — or None when the compiled comparison is off or `out` has fewer than
        `min_elements` elements (the caller compares eagerly)."""
        if "compare" in self.off or out.numel() < self.min_elements:
            return None
        task = self.task
        try:
            masked = finite is not None
            fn = self._compiled_compare(masked, out.dtype)
            if fn is None:
                return None
            if not masked:
                return fn(out.reshape(-1), ref.reshape(-1), task.atol, task.rtol)
            return fn(out.reshape(-1), ref.reshape(-1), finite.reshape(-1), task.atol, task.rtol)
        except Exception as e:          # noqa: BLE001
            _unless_out_of_memory(e)
            self._turn_off("compare", f"{type(e).__name__}: {str(e)[:300]}")
            return None

    def _compiled_compare(self, masked: bool, dtype):
        """The compiled comparison (masked: with the reference's finite mask) once it has passed its self-test
        for outputs of `dtype` (`_self_test`); None (and turned off) when it fails it."""
        if masked and self._compare_masked is None:
            self._compare_masked = _compile(_stats_masked)
        if not masked and self._compare is None:
            self._compare = _compile(_stats)
        fn = self._compare_masked if masked else self._compare
        if (masked, dtype) not in self.tested:
            why = self._self_test(fn, masked, dtype)
            if why:
                self._turn_off("compare", why)
                return None
            self.tested.add((masked, dtype))
        return fn

    def _self_test(self, fn, masked: bool, dtype) -> str | None:
        """The compiled comparison on a crafted output of `dtype` (SELF_TEST_N elements, first compiled on it)
        with known answers: elements 3 tolerances off, NaN, +Inf and -Inf planted at both ends and in the middle
        must all be counted, one half a tolerance off must be the worst ratio of the rest (0.5), and where the
        reference is not finite (masked) nothing may count. Why it is wrong, or None."""
        import torch
        task, n = self.task, SELF_TEST_N
        ref = torch.linspace(-3, 3, n, dtype=torch.float64, device=self.device).to(dtype).double()
        tol = task.atol + task.rtol * ref.abs()
        out = ref.clone()
        off = [0, 1, n // 2, n - 2, n - 1]
        out[off] = ref[off] + 3 * tol[off]
        odd = [7, n // 3, n - 5]
        out[odd] = torch.tensor([float("nan"), float("inf"), float("-inf")], dtype=torch.float64, device=self.device)
        out[n // 4] = ref[n // 4] + 0.5 * tol[n // 4]
        if masked:
            skip = [3, n // 5, n - 3]
            ref[skip] = torch.tensor([float("nan"), float("inf"), float("nan")], dtype=torch.float64,
                                     device=self.device)
            out[skip[2]] = float("nan")
            finite = torch.isfinite(ref)
            got = fn(out.to(dtype), ref, finite, task.atol, task.rtol)
        else:
            got = fn(out.to(dtype), ref, task.atol, task.rtol)
        bad, worst, _ = got.tolist()
        planted = len(off) + len(odd)
        if bad != planted:
            return f"self-test ({dtype}{', masked' if masked else ''}): counted {bad:g} of {planted} planted elements"
        if not 0.4 <= worst <= 0.6:
            return f"self-test ({dtype}{', masked' if masked else ''}): worst passing ratio {worst:.3g}, 0.5 planted"
        return None

    def _turn_off(self, part: str, why: str) -> None:
        if part not in self.off:
            self.off[part] = why
            log.warning("compiled %s of task %s turned off, eager from now on: %s", part, self.task.name, why)


def _unless_out_of_memory(e: Exception) -> None:
    """Device memory running out is the evaluator's state, not the compiled code's fault: raised on, to the
    harness (`harness._evaluator_out_of_memory` lets the references go and judges again)."""
    import torch
    if isinstance(e, torch.OutOfMemoryError):
        raise e


def _compile(fn):
    import torch
    import torch._dynamo
    # one code object serves every task and configuration: a dtype, a 0/1 size or a scalar value is a new graph
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
    return torch.compile(fn, dynamic=True, fullgraph=False)


def _reference_fn(task):
    """The task's reference on float64 copies of its floating inputs (made inside the compiled graph, so fused
    into the first reads), with one flag per floating output: finite everywhere."""
    import torch

    def reference(inputs: tuple, kwargs: dict):
        up = [t.double() if t.dtype.is_floating_point else t for t in inputs]
        refs = as_list(task.reference(*up, **kwargs))
        flags = [torch.isfinite(r).all() for r in refs if r.dtype.is_floating_point]
        return refs, (torch.stack(flags) if flags else None)
    return reference


def _stats(out, ref, atol: float, rtol: float):
    err = (out.double() - ref).abs()
    return _summary(err, err / (ref.abs() * rtol + atol))


def _stats_masked(out, ref, finite, atol: float, rtol: float):
    import torch
    err = torch.where(finite, (out.double() - ref).abs(), 0)     # where the reference is NaN or Inf, any value
    return _summary(err, err / torch.where(finite, ref.abs() * rtol + atol, atol))      # passes


def _summary(err, ratio):
    """[elements whose ratio is not <= 1 (a NaN is not), the worst ratio and error of the others]: eager's
    predicate (`Checker._compare`: worst ratio <= 1), counted rather than maximised, so NaN needs no rule."""
    import torch
    ok = ratio <= 1
    bad = torch.logical_not(ok).sum().double()
    return torch.stack([bad, torch.where(ok, ratio, 0).amax(), torch.where(ok, err, 0).amax()])

