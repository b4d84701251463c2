"""Size buckets: the regions of a task's sizes in which a kernel is judged on its own, so that a search keeps the
fastest kernel per region beside the fastest on the geometric mean, and a run's result can dispatch each size to
its own kernel (`kevolve.search.assemble`).

A bucket is one interval per size. The intervals come from the task.yaml's optional `buckets:` field — per size,
its inner boundaries (`buckets: {N: [1024, 65536], B: [64]}`; a size not named is one interval) — or, without one,
from the decades of every size (`B < 10`, `10 <= B < 100`, ...). `Buckets.of(task, shapes)` resolves them for one
shape set and names the bucket of each of its configurations; `fitness(evaluation)` is then a judgement's speedup
over the faster torch baseline per bucket: the geometric mean over the bucket's timed configurations.

Guarantees: every size, in or out of the shape set, falls in exactly one bucket (`name`, `index`); the same sizes
give the same bucket in Python and in the C dispatch that `assemble` writes (both compare against `edges`); a
malformed `buckets:` field raises `BucketError` naming the task file and what to write. Pure: no Ray, no torch.
Not guaranteed: that a bucket holds any judged configuration (buckets are intervals of sizes; `judged` lists the
ones that do).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from kevolve.task.expr import TaskError, geomean

if TYPE_CHECKING:
    from kevolve.task.spec import Task


class BucketError(TaskError):
    """A task's `buckets:` field that cannot be used (a malformed task: exit status 2)."""


@dataclass(frozen=True)
class Buckets:
    """Per size, the ascending inner boundaries of its intervals; the bucket of each judged shape (shape id ->
    bucket name) of one shape set; whether the boundaries were stated by the task (else: decades)."""
    edges: tuple[tuple[str, tuple[int, ...]], ...]
    shapes: tuple[tuple[str, str], ...] = ()           # shape_id -> bucket name, in the shape set's order
    stated: bool = False
    sizes_of: tuple[tuple[str, tuple[tuple[str, int], ...]], ...] = field(default=(), compare=False)  # shape -> sizes

    # ---- one bucket
    def index(self, sizes: Mapping[str, int]) -> tuple[int, ...]:
        """Per size (in `edges`' order), the interval its value falls in: 0 below the first boundary."""
        return tuple(sum(1 for e in bounds if int(sizes[name]) >= e) for name, bounds in self.edges)

    def name(self, sizes: Mapping[str, int]) -> str:
        """The bucket's name (`label`)."""
        return label(self.edges, self.index(sizes))

    # ---- the shape set's buckets
    @property
    def of_shape(self) -> dict[str, str]:
        return dict(self.shapes)

    def judged(self) -> list[str]:
        """The buckets that hold a configuration of the shape set, smallest sizes first."""
        sizes = dict(self.sizes_of)
        first: dict[str, tuple[int, ...]] = {}
        for shape, bucket in self.shapes:
            first.setdefault(bucket, self.index(dict(sizes[shape])) if shape in sizes else ())
        return sorted(first, key=lambda b: first[b])

    def index_of(self, bucket: str) -> tuple[int, ...]:
        """The intervals of a judged bucket (those of its first configuration's sizes)."""
        sizes = dict(self.sizes_of)
        shape = next(s for s, b in self.shapes if b == bucket)
        return self.index(dict(sizes[shape]))

    def configs(self, bucket: str) -> list[str]:
        """The shape ids of the shape set in `bucket`."""
        return [s for s, b in self.shapes if b == bucket]

    def fitness(self, evaluation: Any) -> dict[str, float]:
        """Per bucket, the judgement's speedup over the faster torch baseline: the geometric mean over the bucket's
        timed configurations (a bucket none of whose configurations was timed is left out); {} unless correct."""
        if evaluation is None or not getattr(evaluation, "correct", False):
            return {}
        per: dict[str, list[float]] = {}
        of = self.of_shape
        for m in evaluation.measurements:
            s = m.speedup("best") if m.kernel is not None else None
            if s and m.shape in of:
                per.setdefault(of[m.shape], []).append(s)
        return {b: g for b, v in per.items() if not math.isnan(g := geomean(v))}

    def as_dict(self) -> dict[str, Any]:
        """Plain data (JSON): what the op's manifest and the export keep."""
        return {"edges": {n: list(e) for n, e in self.edges}, "stated": self.stated,
                "shapes": {s: b for s, b in self.shapes}}


def label(edges: Iterable[tuple[str, tuple[int, ...]]], index: tuple[int, ...]) -> str:
    """`B<10 1000<=N<10000`: one interval per size that has boundaries ("all sizes" when none has)."""
    parts = []
    for (name, bounds), i in zip(edges, index):
        lo = bounds[i - 1] if i > 0 else None
        hi = bounds[i] if i < len(bounds) else None
        if bounds:
            parts.append(f"{name}<{hi}" if lo is None else f"{name}>={lo}" if hi is None else f"{lo}<={name}<{hi}")
    return " ".join(parts) or "all sizes"


def decades(values: Iterable[int]) -> tuple[int, ...]:
    """Boundaries 10, 100, ... up to the decade of the largest value."""
    top = max((int(v) for v in values), default=1)
    return tuple(10 ** k for k in range(1, len(str(max(top, 1)))))


def of(task: "Task", shapes: str) -> Buckets:
    """The buckets of `task` for the shape set `shapes`: the task.yaml's `buckets:` field, else decades."""
    configs = task.configs(shapes)
    stated = stated_edges(task)
    if stated is None:
        edges = tuple((n, decades(c.size_dict[n] for c in configs)) for n in task.sizes)
    else:
        edges = tuple((n, stated.get(n, ())) for n in task.sizes)
    probe = Buckets(edges)
    shape_map = {c.shape_id: probe.name(c.size_dict) for c in configs}
    sizes = {c.shape_id: tuple(c.sizes) for c in configs}
    return Buckets(edges, tuple(shape_map.items()), stated is not None, tuple(sizes.items()))


def stated_edges(task: "Task") -> dict[str, tuple[int, ...]] | None:
    """The task.yaml's `buckets:` field, checked: per size, ascending positive integer boundaries; None when the
    task states none. (Read from the file: the task schema does not carry it yet.)"""
    import yaml
    path = Path(task.dir) / "task.yaml"
    raw = yaml.safe_load(path.read_text()) if path.is_file() else None
    spec = (raw or {}).get("buckets") if isinstance(raw, dict) else None
    if spec is None:
        return None
    return check_edges(spec, task.sizes, str(path))


def check_edges(spec: Any, sizes: Iterable[str], where: str) -> dict[str, tuple[int, ...]]:
    sizes = list(sizes)
    how = (f"write it as one list of ascending boundaries per size, e.g. `buckets: {{{sizes[-1]}: [1024, 65536]}}`"
           if sizes else "")
    if not isinstance(spec, dict) or not spec:
        raise BucketError(f"{where}: buckets: {spec!r} is not a mapping of sizes to boundaries; {how}")
    out = {}
    for name, bounds in spec.items():
        if name not in sizes:
            raise BucketError(f"{where}: buckets: {name!r} is not a size of the task (sizes: {sizes}); {how}")
        if not isinstance(bounds, list) or not all(isinstance(b, int) and not isinstance(b, bool) and b > 0
                                                   for b in bounds):
            raise BucketError(f"{where}: buckets.{name}: {bounds!r} is not a list of positive integers; {how}")
        if any(b >= c for b, c in zip(bounds, bounds[1:])):
            raise BucketError(f"{where}: buckets.{name}: {bounds} is not strictly ascending; {how}")
        out[name] = tuple(bounds)
    return out
