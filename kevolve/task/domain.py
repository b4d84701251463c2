"""A task's domain: every configuration its kernels must be correct on, not only the ones task.yaml lists.

task.yaml's `domain:` block declares it (docs/tasks.md, "The domain"):

    domain:
      sizes:                          # every size of `sizes:`, each a range or a list of values
        B: {min: 1, max: 65536}
        N: {min: 1, max: 4194304}
        STRIDE: {values: [1, 2]}
      scalars:                        # every scalar: a float range (drawn across its decades when min > 0) or ints
        eps: {min: 1.0e-8, max: 0.1}
      where: ["H >= 2"]               # optional: conditions on the sizes every configuration meets
      inits: {offset: "N <= 1048576"} # optional: an init family allowed only where its condition holds
      max_bytes: {cpu: 32 MiB, cuda: 2 GiB}   # per target: the most one configuration's buffers may take
      max_flops: {cpu: 2.0e+8, cuda: 1.0e+12} # optional (tasks with floor_flops): the most work one call may do

A configuration is in the domain when every size lies in its range (or list), every scalar in its range, every
`where` condition holds, its init family is one of the task's and its condition (if any) holds, and its buffers
(inputs, outputs and workspace; `config_bytes`) fit `max_bytes` of the target, and its FLOPs (`floor_flops`)
`max_flops` where the task declares it. `kevolve.task.draw` draws configurations from
it; the judge checks drawn ones in every judgement and a wide sweep before a result is released.

Guarantees: a task that loads has a domain naming every size and scalar exactly once, each range non-empty with
min <= max, ints for sizes (>= 0), finite numbers of the scalar's type, conditions that parse, init families the
task defines, a byte budget for every target (cpu, cuda) large enough for the domain's smallest configuration,
and every fixed configuration of every shape set inside it (its bytes within the largest budget); else
`TaskError` names the field and shows an example. Not guaranteed: that the domain is right for the operation
(`python -m kevolve.tasks check --shapes domain` runs torch's own baselines at its corners: if torch cannot meet
the tolerance there, the domain or the tolerance is wrong).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from kevolve.task.expr import TaskError, eval_condition, eval_expr

TARGETS = ("cpu", "cuda")
_UNITS = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "kb": 10**3, "mb": 10**6, "gb": 10**9}
EXAMPLE = """domain:
  sizes:
    B: {min: 1, max: 65536}
    N: {min: 1, max: 4194304}
  scalars:
    eps: {min: 1.0e-8, max: 0.1}
  max_bytes: {cpu: 32 MiB, cuda: 2 GiB}"""


@dataclass(frozen=True)
class SizeRange:
    """One size: every integer in [lo, hi], or only `values` when given."""
    name: str
    lo: int
    hi: int
    values: tuple[int, ...] = ()

    def contains(self, v: int) -> bool:
        return v in self.values if self.values else self.lo <= v <= self.hi

    def show(self) -> str:
        return f"{self.name} in {{{', '.join(map(str, self.values))}}}" if self.values else \
            f"{self.name} in [{self.lo}, {self.hi}]"


@dataclass(frozen=True)
class ScalarRange:
    """One scalar: every value in [lo, hi] (an int scalar: every int)."""
    name: str
    type: str                 # float | double | int
    lo: float | int
    hi: float | int

    def contains(self, v: float | int) -> bool:
        return self.lo <= v <= self.hi

    @property
    def log(self) -> bool:
        """Drawn across its decades (log-uniformly) rather than uniformly."""
        return self.type != "int" and self.lo > 0 and self.hi / self.lo >= 100

    def show(self) -> str:
        return f"{self.name} in [{self.lo:g}, {self.hi:g}]"


@dataclass(frozen=True)
class Domain:
    sizes: tuple[SizeRange, ...]
    scalars: tuple[ScalarRange, ...]
    where: tuple[str, ...]
    inits: tuple[tuple[str, str], ...]      # (init family, condition; "" = everywhere), in the task's order
    max_bytes: tuple[tuple[str, int], ...]  # (target, bytes)
    max_flops: tuple[tuple[str, float], ...] = ()   # (target, FLOPs); () where the task sets none

    def size(self, name: str) -> SizeRange:
        return next(s for s in self.sizes if s.name == name)

    def budget(self, target: str) -> int:
        """The most bytes one configuration's buffers may take on `target` (cuda's for a torch-ABI kernel's
        CPU twin is never asked: the targets are the task's two)."""
        return dict(self.max_bytes)[target]

    def flops_budget(self, target: str) -> float | None:
        return dict(self.max_flops).get(target)

    def init_allowed(self, init: str, sizes: dict[str, int]) -> bool:
        cond = dict(self.inits).get(init)
        return cond is not None and (cond == "" or eval_condition(cond, sizes))

    def violation(self, sizes: dict[str, int], scalars: dict[str, float | int], init: str | None = None
                  ) -> str | None:
        """Why this configuration lies outside the domain (sizes, scalars, `where`, init family; not its bytes:
        `outside` adds them), or None when it lies inside."""
        for s in self.sizes:
            if s.name not in sizes or not s.contains(sizes[s.name]):
                return f"{s.name}={sizes.get(s.name)} is outside the domain ({s.show()})"
        for r in self.scalars:
            if r.name in scalars and not r.contains(scalars[r.name]):
                return f"{r.name}={scalars[r.name]:g} is outside the domain ({r.show()})"
        for cond in self.where:
            if not eval_condition(cond, sizes):
                return f"the domain requires {cond}"
        if init is not None and not self.init_allowed(init, sizes):
            cond = dict(self.inits).get(init)
            return f"init {init!r} is not in the domain" + (f" here (only where {cond})" if cond else "")
        return None

    def describe(self, target: str | None = None) -> str:
        """One line: the ranges, the conditions, the inits and (for `target`) the byte budget."""
        parts = [s.show() for s in self.sizes] + [r.show() for r in self.scalars] + list(self.where)
        inits = ", ".join(i + (f" (where {c})" if c else "") for i, c in self.inits)
        text = "; ".join(parts) + f"; inits {inits}"
        if target is not None:
            text += f"; configurations up to {show_bytes(self.budget(target))}"
            if self.flops_budget(target):
                text += f" and {self.flops_budget(target):.3g} FLOPs"
            text += f" ({target})"
        return text


def config_bytes(task, sizes: dict[str, int]) -> int:
    """The bytes of one configuration's inputs, outputs and workspace (what `max_bytes` bounds)."""
    total = task.workspace(sizes)
    for spec in task.inputs + task.outputs:
        n = 1
        for e in spec.shape:
            n *= eval_expr(e, sizes)
        total += n * _itemsize(spec.dtype)
    return total


def fits(task, sizes: dict[str, int], target: str, bytes_budget: int | None = None) -> bool:
    """The configuration's bytes (and FLOPs, where the domain bounds them) within the target's budget
    (`bytes_budget` in place of max_bytes when given)."""
    dom = task.domain
    budget = dom.budget(target) if bytes_budget is None else bytes_budget
    flops = dom.flops_budget(target)
    return config_bytes(task, sizes) <= budget and (flops is None or (task.flops(sizes) or 0) <= flops)


def outside(task, sizes: dict[str, int], scalars: dict, init: str | None, target: str) -> str | None:
    """`Domain.violation`, and the configuration's bytes (and FLOPs) against the target's budget."""
    why = task.domain.violation(sizes, scalars, init)
    if why is None and config_bytes(task, sizes) > task.domain.budget(target):
        why = (f"its buffers take {show_bytes(config_bytes(task, sizes))}, over the domain's "
               f"{show_bytes(task.domain.budget(target))} on {target} (domain.max_bytes)")
    if why is None and not fits(task, sizes, target):
        why = (f"it does {task.flops(sizes):.3g} FLOPs, over the domain's {task.domain.flops_budget(target):.3g} "
               f"on {target} (domain.max_flops)")
    return why


def _itemsize(dtype: str) -> int:
    return {"float32": 4, "float64": 8, "int64": 8, "int32": 4}[dtype]


def show_bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n} B"


def parse_bytes(value, where: str) -> int:
    """`64 MiB`, `2 GiB`, `1000000` as bytes."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    m = re.fullmatch(r"\s*([0-9.]+)\s*([KMG]i?B|B)?\s*", str(value), re.IGNORECASE)
    if not m or (m.group(2) or "").lower() not in _UNITS:
        raise TaskError(f"{where}: {value!r} is not a size in bytes (write e.g. 64 MiB or 2 GiB)")
    n = int(float(m.group(1)) * _UNITS[(m.group(2) or "").lower()])
    if n <= 0:
        raise TaskError(f"{where}: {value!r} must be positive")
    return n


# ---------------------------------------------------------------- parsing
def parse(raw, sizes: tuple[str, ...], scalars, init_sets: tuple[str, ...]) -> Domain:
    """task.yaml's `domain:` block, checked field by field (`TaskError` names the field and shows the format)."""
    if raw is None:
        raise TaskError("missing field 'domain': the sizes, scalars and memory every kernel must be correct on "
                        f"(docs/tasks.md, \"The domain\"), e.g.\n{EXAMPLE}")
    if not isinstance(raw, dict):
        raise TaskError(f"domain: a mapping, e.g.\n{EXAMPLE}")
    unknown = sorted(set(raw) - {"sizes", "scalars", "where", "inits", "max_bytes", "max_flops"})
    if unknown:
        raise TaskError(f"domain: unknown key {', '.join(map(repr, unknown))} (sizes, scalars, where, inits, "
                        "max_bytes, max_flops)")
    ranges = _sizes(raw.get("sizes"), sizes)
    scalar_ranges = _scalars(raw.get("scalars") or {}, scalars)
    where = raw.get("where") or []
    where = tuple([where] if isinstance(where, str) else where)
    probe = {s.name: (s.values[0] if s.values else s.lo) for s in ranges}
    for cond in where:
        try:
            eval_condition(str(cond), probe)
        except TaskError as e:
            raise TaskError(f"domain.where: {e}") from None
    inits = _inits(raw.get("inits"), init_sets, probe)
    budget = raw.get("max_bytes")
    if not isinstance(budget, dict) or sorted(budget) != sorted(TARGETS):
        raise TaskError(f"domain.max_bytes: one budget per target ({', '.join(TARGETS)}), e.g. "
                        "{cpu: 32 MiB, cuda: 2 GiB}")
    max_bytes = tuple((t, parse_bytes(budget[t], f"domain.max_bytes.{t}")) for t in TARGETS)
    flops = raw.get("max_flops")
    if flops is not None and (not isinstance(flops, dict) or sorted(flops) != sorted(TARGETS) or not all(
            isinstance(flops[t], (int, float)) and not isinstance(flops[t], bool) and flops[t] > 0 for t in TARGETS)):
        raise TaskError("domain.max_flops: one positive number per target, e.g. {cpu: 2.0e+8, cuda: 1.0e+12}")
    max_flops = tuple((t, float(flops[t])) for t in TARGETS) if flops else ()
    return Domain(ranges, scalar_ranges, tuple(str(c) for c in where), inits, max_bytes, max_flops)


def _int(v, where: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise TaskError(f"{where}: a size is an integer >= 0, got {v!r}")
    return v


def _sizes(raw, names: tuple[str, ...]) -> tuple[SizeRange, ...]:
    if not isinstance(raw, dict) or sorted(raw) != sorted(names):
        got = sorted(raw) if isinstance(raw, dict) else raw
        raise TaskError(f"domain.sizes: give every size of the task ({', '.join(names)}) a range, got {got}; "
                        "e.g. N: {min: 1, max: 4194304} or STRIDE: {values: [1, 2]}")
    out = []
    for n in names:
        d, where = raw[n], f"domain.sizes.{n}"
        if not isinstance(d, dict) or not (set(d) == {"values"} or set(d) == {"min", "max"}):
            raise TaskError(f"{where}: {{min: A, max: B}} or {{values: [..]}}, got {d!r}")
        if "values" in d:
            vals = tuple(sorted({_int(v, where) for v in (d["values"] or [])}))
            if not vals:
                raise TaskError(f"{where}: an empty list of values")
            out.append(SizeRange(n, vals[0], vals[-1], vals))
        else:
            lo, hi = _int(d["min"], where + ".min"), _int(d["max"], where + ".max")
            if lo > hi:
                raise TaskError(f"{where}: min {lo} > max {hi}")
            out.append(SizeRange(n, lo, hi))
    return tuple(out)


def _scalars(raw, scalars) -> tuple[ScalarRange, ...]:
    names = [s.name for s in scalars]
    if not isinstance(raw, dict) or sorted(raw) != sorted(names):
        got = sorted(raw) if isinstance(raw, dict) else raw
        raise TaskError(f"domain.scalars: give every scalar of the task ({', '.join(names) or 'none'}) a range, "
                        f"got {got}; e.g. eps: {{min: 1.0e-8, max: 0.1}}")
    out = []
    for s in scalars:
        d, where = raw[s.name], f"domain.scalars.{s.name}"
        if not isinstance(d, dict) or set(d) != {"min", "max"}:
            raise TaskError(f"{where}: {{min: A, max: B}}, got {d!r}")
        lo, hi = (_number(s.type, d[k], f"{where}.{k}") for k in ("min", "max"))
        if lo > hi:
            raise TaskError(f"{where}: min {lo} > max {hi}")
        if not lo <= s.value <= hi:
            raise TaskError(f"{where}: the default {s.value} lies outside [{lo}, {hi}]")
        out.append(ScalarRange(s.name, s.type, lo, hi))
    return tuple(out)


def _number(kind: str, v, where: str) -> float | int:
    if kind == "int":
        if isinstance(v, bool) or not isinstance(v, int):
            raise TaskError(f"{where}: an int, got {v!r}")
        return v
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        hint = " (YAML reads 1e-6 as a string: write 1.0e-6)" if isinstance(v, str) else ""
        raise TaskError(f"{where}: a finite number, got {v!r}{hint}")
    return float(v)


def _inits(raw, init_sets: tuple[str, ...], probe: dict) -> tuple[tuple[str, str], ...]:
    conds = {}
    if raw is not None:
        if not isinstance(raw, dict):
            raise TaskError("domain.inits: a mapping of init family to the condition where it applies, e.g. "
                            "{offset: \"N <= 1048576\"} (families not named apply everywhere)")
        for name, cond in raw.items():
            if name not in init_sets:
                raise TaskError(f"domain.inits: {name!r} is not an init family of the task ({list(init_sets)})")
            try:
                eval_condition(str(cond), probe)
            except TaskError as e:
                raise TaskError(f"domain.inits.{name}: {e}") from None
            conds[name] = str(cond)
    return tuple((i, conds.get(i, "")) for i in init_sets)


def check_fixed(task) -> None:
    """Every fixed configuration of every shape set lies in the domain (its bytes within the largest budget);
    the domain's smallest configuration fits every target's budget."""
    dom = task.domain
    small = {s.name: (s.values[0] if s.values else s.lo) for s in dom.sizes}
    fixed = [c.size_dict for cases in task.shape_sets.values() for c in cases]
    least = min([config_bytes(task, c) for c in fixed] +           # the least sizes, where they meet the conditions
                ([config_bytes(task, small)] if dom.violation(small, task.scalar_values()) is None else []))
    for target, budget in dom.max_bytes:
        if least > budget:
            raise TaskError(f"domain.max_bytes.{target}: {show_bytes(budget)} does not hold even the smallest "
                            f"configuration ({show_bytes(least)})")
    largest = max(b for _, b in dom.max_bytes)
    for name, cases in task.shape_sets.items():
        for c in cases:
            why = dom.violation(c.size_dict, task.scalar_values(c), c.init)
            if why is None and config_bytes(task, c.size_dict) > largest:
                why = f"its buffers take {show_bytes(config_bytes(task, c.size_dict))}, over every max_bytes"
            if why:
                raise TaskError(f"shapes.{name}: configuration {c.id} lies outside the domain: {why} (widen the "
                                "domain or move the configuration)")
