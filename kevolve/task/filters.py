"""Task filters: is a task a fair test? The robust-kbench paper's filters, run on one of a task's shape sets.

robust-kbench (`robust_kbench/filter/forward.py`, `run_filter.py`) draws 5 seeds of inputs at a task's first
configuration and drops the task when every output lies in (-0.01, 0.01) (`output_range`), when every output
element's standard deviation across seeds is below 0.01 (`output_std`), when along some axis of the stacked
outputs every standard deviation is below 0.01 (`output_axes`), when new inputs under fixed weights leave every
deviation below 0.01 (`input_impact`), or when new weights do (`init_impact`, written but switched off there).
Here each runs on every configuration (shape × init set, the set's first seed) of a shape set, through the
task's float64 reference, and the paper's absolute 0.01 becomes the task's own tolerance (atol + rtol·|expected|,
what the harness accepts): "nearly constant" means a kernel that ignores the variation is judged correct.
- output_std:   on some configuration, the first input variant's outputs pass for every other variant
                (a kernel could return a memorised answer);
- output_range: on some configuration, zeros pass for every variant (a kernel could write nothing but zeros);
- output_axes:  on some configuration, an output equals its first slice along an axis of length > 1, within the
                tolerance, for every variant (one slice, copied, passes);
- input_impact: on some shape, redrawing one input alone (each other variant's values in turn) changes no output
                beyond the tolerance under any init set (a kernel could ignore it); task.yaml's
                `unused_inputs: {name: why}` names the accepted ones, `{name: {why: ..., when: COND}}` those
                accepted only on shapes where COND holds (`C == K and STRIDE == 1`: comparisons of size
                expressions joined by and/or);
- init_impact:  on some shape, every init set gives the same outputs within the tolerance (the initialisation
                changes nothing); pairs that agree are named (LayerNorm's offset inputs do, by design: other
                data, the same answer, a test of a kernel's numerics); passes with one init set;
- eager:        torch's own result (`baseline`, in the task's dtype) passes the tolerance on every configuration;
- compile:      so does torch.compile's (compiled per shape as the worker compiles it, dynamic=False).
Integer outputs compare exactly; where the reference is NaN or Inf any value passes, as in the harness.
Guarantees: each filter returns a frozen `FilterResult(name, passed, detail)`; the detail names the worst
configuration and the margin (×tolerance). torch's results are computed as the judge's worker computes its
baselines: IEEE float32, TF32 off for cuBLAS and cuDNN (`precision.strict_float32`, the caller's settings restored
after). A run goes configuration by configuration, every filter looking at one before the next is drawn: it holds
one configuration's inputs and references (its input variants, their float64 outputs) and, for init_impact, the
first variant's outputs of the shape's other init sets, kept on the host; on CUDA the device memory goes back to
the driver after each configuration, torch.compile's code after each shape (`torch._dynamo.reset()`). Not guaranteed:
that a task that passes is interesting, or that a
configuration left out by `max_shapes` would pass; the paper's LLM redundancy check is not run.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from kevolve.task import draw
from kevolve.task.precision import strict_float32
from kevolve.task.spec import Case, Task
from kevolve.task.unused import unused_inputs

DOMAIN = "domain"      # shapes `domain`: the domain's corners on the device (`task.draw.corners`); `domain:N` adds
                       # a sweep of N configurations (`task.draw.sweep`, seeded by N: the same ones each time)


def is_domain(shapes: str) -> bool:
    return shapes == DOMAIN or shapes.startswith(DOMAIN + ":")


def domain_cases(task: Task, shapes: str, device: str) -> tuple[Case, ...]:
    """The configurations `domain` or `domain:N` names (see DOMAIN)."""
    import random
    count = int(shapes.split(":")[1]) if ":" in shapes else 0
    return draw.sweep(task, device, random.Random(count), count) if count else draw.corners(task, device)
FILTERS = ("output_std", "output_range", "output_axes", "input_impact", "init_impact", "eager", "compile")
VARIANTS = 3


@dataclass(frozen=True)
class FilterResult:
    name: str
    passed: bool
    detail: str


class Runs:
    """The configurations a filter run looks at, and the inputs and float64 reference outputs of the configuration
    being looked at, cached until `release` (so a run holds one configuration's tensors at a time, not a set's)."""

    def __init__(self, task: Task, shapes: str, device: str, variants: int, max_shapes: int | None):
        self.task, self.device, self.variants = task, device, variants
        configs = domain_cases(task, shapes, device) if is_domain(shapes) else task.configs(shapes)
        first = configs[0].seed
        self.cases = [c for c in configs if c.seed == first]
        if max_shapes is not None:                       # the cheapest shapes, by their memory floor
            keep = sorted({c.sizes for c in self.cases}, key=lambda s: task.floor(dict(s)))[:max_shapes]
            self.cases = [c for c in self.cases if c.sizes in keep]
        self._inputs: dict = {}
        self._outputs: dict = {}

    def shapes(self) -> dict[tuple, list[Case]]:
        out: dict[tuple, list[Case]] = {}
        for c in self.cases:
            out.setdefault(c.sizes, []).append(c)
        return out

    def inputs(self, case: Case, variant: int) -> dict:
        key = (case.id, variant)
        if key not in self._inputs:
            self._inputs[key] = self.task.make_inputs(case, self.device, variant)
        return self._inputs[key]

    def outputs(self, case: Case, variant: int) -> list:
        key = (case.id, variant)
        if key not in self._outputs:
            self._outputs[key] = self.reference(case, self.inputs(case, variant))
        return self._outputs[key]

    def reference(self, case: Case, inputs: dict) -> list:
        up = {n: t.double() if t.is_floating_point() else t for n, t in inputs.items()}
        return self._shaped(case, self.task.call_reference(up, case))

    def _shaped(self, case: Case, outs: list) -> list:
        return [o.reshape(self.task.shape(s, case.size_dict)) for s, o in zip(self.task.outputs, outs)]

    def release(self) -> None:
        """Drops every cached input and output; on CUDA the freed memory goes back to the driver, so that other
        processes on the GPU can have it."""
        self._inputs.clear()
        self._outputs.clear()
        if str(self.device).startswith("cuda"):
            import gc
            import torch
            gc.collect()
            torch.cuda.empty_cache()


def run(task: Task, shapes: str = "small", device: str = "cpu", filters: tuple[str, ...] = FILTERS,
        variants: int = VARIANTS, max_shapes: int | None = None) -> tuple[FilterResult, ...]:
    """Runs `filters` on `task`'s shape set `shapes` on `device` (at most `max_shapes` shapes, the cheapest):
    configuration by configuration, every filter looking at one before the next is drawn, in IEEE float32 as
    the judge's worker computes torch's baselines (`precision.strict_float32`)."""
    unknown = set(filters) - set(FILTERS)
    if unknown:
        raise ValueError(f"unknown filters {sorted(unknown)}; known: {', '.join(FILTERS)}")
    if variants < 2:
        raise ValueError(f"variants must be at least 2 (got {variants}): a filter compares input variants")
    runs = Runs(task, shapes, device, variants, max_shapes)
    scans = [SCANS[f](runs) for f in filters]
    with strict_float32():
        try:
            for cases in runs.shapes().values():
                for case in cases:
                    for scan in scans:
                        scan.case(case)
                    runs.release()
                for scan in scans:
                    scan.shape(cases)
        finally:
            for scan in scans:
                scan.close()
            runs.release()
    return tuple(scan.result() for scan in scans)


# ---------------------------------------------------------------- the comparison the harness makes
def ratio(got, expected, task: Task) -> float:
    """max |got - expected| / (atol + rtol |expected|) (≤ 1: the harness accepts `got`); integers exactly (0 or
    inf); where `expected` is not finite any value passes; NaN or Inf in `got` where it is finite: inf."""
    import torch
    if not expected.is_floating_point():
        return 0.0 if torch.equal(got.to(expected.dtype), expected) else float("inf")
    got, expected = got.double(), expected.double()
    finite = torch.isfinite(expected)
    err = (got - expected).abs() / (task.atol + task.rtol * expected.abs())
    err = torch.where(finite, err.nan_to_num(nan=float("inf")), torch.zeros_like(err))
    return float(err.max()) if err.numel() else 0.0


def _verdict(name: str, findings: list[str], margin: float | None, what: str) -> FilterResult:
    if findings:
        more = f"; and {len(findings) - 3} more" if len(findings) > 3 else ""
        return FilterResult(name, False, "; ".join(findings[:3]) + more)
    return FilterResult(name, True, what if margin is None else f"{what} (margin {margin:.3g}x tolerance)")


# ---------------------------------------------------------------- the filters
class Scan:
    """One filter over a run: `case` looks at one configuration while `runs` caches its tensors, `shape` follows
    the last configuration of a shape, `close` drops what the filter kept, `result` is the verdict."""
    name = ""

    def __init__(self, runs: Runs):
        self.runs, self.task = runs, runs.task
        self.findings: list[str] = []
        self.least = float("inf")

    def case(self, case: Case) -> None:
        pass

    def shape(self, cases: list[Case]) -> None:
        pass

    def close(self) -> None:
        pass

    def result(self) -> FilterResult:
        raise NotImplementedError

    def _verdict(self, what: str, margin: bool = True) -> FilterResult:
        least = self.least if margin and self.least != float("inf") else None
        return _verdict(self.name, self.findings, least, what)


class OutputStd(Scan):
    name = "output_std"

    def case(self, case: Case) -> None:
        runs, first = self.runs, self.runs.outputs(case, 0)
        for j, spec in enumerate(self.task.outputs):
            r = max(ratio(first[j], runs.outputs(case, v)[j], self.task) for v in range(1, runs.variants))
            self.least = min(self.least, r)
            if r <= 1:
                self.findings.append(f"{spec.name} at {case.id}: one answer passes all {runs.variants} input "
                                     f"variants (they differ by at most {r:.3g}x tolerance)")

    def result(self) -> FilterResult:
        return self._verdict(f"outputs change with the inputs on all {len(self.runs.cases)} configurations")


class OutputRange(Scan):
    name = "output_range"

    def case(self, case: Case) -> None:
        import torch
        runs = self.runs
        for j, spec in enumerate(self.task.outputs):
            r = max(ratio(torch.zeros_like(o[j]), o[j], self.task)
                    for o in (runs.outputs(case, v) for v in range(runs.variants)))
            self.least = min(self.least, r)
            if r <= 1:
                self.findings.append(f"{spec.name} at {case.id}: zeros pass (outputs at most {r:.3g}x tolerance)")

    def result(self) -> FilterResult:
        return self._verdict("zeros fail every output on every configuration")


class OutputAxes(Scan):
    name = "output_axes"

    def case(self, case: Case) -> None:
        runs = self.runs
        for j, spec in enumerate(self.task.outputs):
            shape = self.task.shape(spec, case.size_dict)
            for axis in (a for a, n in enumerate(shape) if n > 1):
                r = max(ratio(o.narrow(axis, 0, 1).expand_as(o), o, self.task)
                        for o in (runs.outputs(case, v)[j] for v in range(runs.variants)))
                self.least = min(self.least, r)
                if r <= 1:
                    self.findings.append(f"{spec.name} at {case.id}: constant along axis {axis} of {list(shape)} "
                                         f"(within {r:.3g}x tolerance)")

    def result(self) -> FilterResult:
        return self._verdict("every output varies along every axis longer than 1")


class InputImpact(Scan):
    name = "input_impact"

    def __init__(self, runs: Runs):
        super().__init__(runs)
        self.accepted = unused_inputs(self.task)
        self.moved: dict[str, float] = {}            # input -> the most it moved an output on this shape so far

    def case(self, case: Case) -> None:
        for spec in self.task.inputs:
            u = self.accepted.get(spec.name)
            if u is None or not u.holds(case.size_dict):
                self.moved[spec.name] = max(self.moved.get(spec.name, 0.0), self._redrawn(case, spec.name))

    def shape(self, cases: list[Case]) -> None:
        for name, r in self.moved.items():
            self.least = min(self.least, r)
            if r <= 1:
                self.findings.append(f"input {name} at {cases[0].shape_id}: redrawing it changes no output beyond "
                                     f"the tolerance under any init set (at most {r:.3g}x)")
        self.moved = {}

    def _redrawn(self, case: Case, name: str) -> float:
        """How far the outputs move (×tolerance) when input `name` alone takes another variant's values (the most
        over every other variant: one redraw of a few integers can repeat the values)."""
        runs = self.runs
        base = runs.outputs(case, 0)
        worst = 0.0
        for v in range(1, runs.variants):
            inputs = dict(runs.inputs(case, 0))
            inputs[name] = runs.inputs(case, v)[name]
            worst = max(worst, max(ratio(a, b, self.task) for a, b in zip(base, runs.reference(case, inputs))))
        return worst

    def result(self) -> FilterResult:
        what = "every input changes an output on every shape"
        if self.accepted:
            accepted = "; ".join(f"{n} accepted as unused{u.where()}: {u.why}" for n, u in self.accepted.items())
            what += f" ({accepted})"
        return self._verdict(what)


class InitImpact(Scan):
    name = "init_impact"

    def __init__(self, runs: Runs):
        super().__init__(runs)
        self.kept: list[tuple[str, list]] = []      # this shape's earlier init sets: (init, outputs), on the host
        self.same: list[tuple[str, str]] = []       # pairs of this shape's init sets with the same outputs
        self.alike: list[str] = []

    def case(self, case: Case) -> None:
        if len(self.task.init_sets) < 2:
            return
        outs = self.runs.outputs(case, 0)
        for init, earlier in self.kept:
            if max(ratio(x.to(o.device), o, self.task) for x, o in zip(earlier, outs)) <= 1:
                self.same.append((init, case.init))
        self.kept.append((case.init, [o.cpu() for o in outs]))   # device memory goes back with the configuration

    def shape(self, cases: list[Case]) -> None:
        if len(cases) >= 2 and len(self.same) == len(cases) * (len(cases) - 1) // 2:
            self.findings.append(f"at {cases[0].shape_id} every init set ({', '.join(c.init for c in cases)}) gives "
                                 "the same outputs within the tolerance")
        self.alike += [f"{a}={b} at {cases[0].shape_id}" for a, b in self.same]
        self.close()

    def close(self) -> None:
        self.kept, self.same = [], []

    def result(self) -> FilterResult:
        if len(self.task.init_sets) < 2:
            return FilterResult(self.name, True, f"one init set ({self.task.init_sets[0]}): nothing to compare")
        what = "the init sets give different outputs on every shape"
        if self.alike:       # e.g. LayerNorm's offset inputs: other data, the same answer, a test of the numerics
            what += f"; pairs with the same outputs (other inputs): {', '.join(sorted(set(self.alike))[:4])}"
        return self._verdict(what, margin=False)


class EagerBaseline(Scan):
    """torch's own float32 result (`baseline`) against the float64 reference, on every configuration."""
    name = "eager"

    def __init__(self, runs: Runs):
        super().__init__(runs)
        self.worst = (0.0, "")

    def baseline(self, case: Case) -> Callable | None:
        """What computes torch's result on `case` (None: `task.call_baseline`)."""
        return None

    def case(self, case: Case) -> None:
        task, inputs = self.task, self.runs.inputs(case, 0)
        try:
            fn = self.baseline(case)
            got = (task.call_baseline(inputs, case) if fn is None
                   else _listed(fn(*[inputs[s.name] for s in task.inputs])))
        except Exception as e:                           # the task's own code failing is the finding
            self.findings.append(f"{case.id}: {self.name} fails: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
            return
        r = max(ratio(g, e, task) for g, e in zip(self.runs._shaped(case, got), self.runs.outputs(case, 0)))
        self.worst = max(self.worst, (r, case.id))
        if r > 1:
            self.findings.append(f"{case.id}: {self.name}'s result is {r:.3g}x the tolerance (atol={task.atol:g}, "
                                 f"rtol={task.rtol:g})")

    def result(self) -> FilterResult:
        return self._verdict(f"{self.name} passes the tolerance on every configuration, worst {self.worst[0]:.3g}x "
                             f"at {self.worst[1]}", margin=False)


class CompiledBaseline(EagerBaseline):
    """torch.compile's result, compiled per shape and scalar values as the worker compiles it (dynamic=False); the
    compiled code is dropped after each shape (`torch._dynamo.reset()`: every function compiled in this process)."""
    name = "compile"

    def __init__(self, runs: Runs):
        super().__init__(runs)
        self.compiled: dict = {}

    def baseline(self, case: Case) -> Callable:
        import torch
        torch._dynamo.config.recompile_limit = 64      # as the worker: one code object, every shape of the set
        sizes, scalars = case.size_dict, self.task.scalar_values(case)
        key = (tuple(sizes.items()), tuple(scalars.items()))
        if key not in self.compiled:
            task = self.task
            self.compiled[key] = torch.compile(lambda *ins: task.baseline(*ins, **sizes, **scalars), dynamic=False)
        return self.compiled[key]

    def shape(self, cases: list[Case]) -> None:
        self.close()

    def close(self) -> None:
        if self.compiled:
            import torch
            self.compiled = {}
            torch._dynamo.reset()


def _listed(x) -> list:
    return list(x) if isinstance(x, (tuple, list)) else [x]


SCANS: dict[str, type[Scan]] = {
    "output_std": OutputStd, "output_range": OutputRange, "output_axes": OutputAxes, "input_impact": InputImpact,
    "init_impact": InitImpact, "eager": EagerBaseline, "compile": CompiledBaseline}
