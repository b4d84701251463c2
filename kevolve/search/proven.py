"""Where a result's kernels are proven correct: the task's domain (`kevolve.task.domain`) on the run's target, as
plain data an exported op checks each call against before it sends it to its kernels (`kevolve.export`), calling
torch outside it.

`ranges(task, shapes, target)` gives it: per size its [least, largest] (and, for a size of listed values, the
values), the domain's `where` conditions on the sizes, per scalar its [least, largest], the bytes one call's tensors
and workspace may take on the target (`max_bytes`), and where it comes from. Every judgement of the run checked
configurations drawn from it, and the release check swept it before the run named its result (search/finish.py).
`inside` says whether a call lies in it.

Guarantees: every configuration of the domain on the target is inside; a size, scalar or listed value beyond it, a
call whose sizes break a `where` condition (LayerNorm's rows of 2 or 3 elements), or tensors and workspace over its
budget, are outside, with the reason naming it. Not guaranteed: the init families' conditions are not checked per
call (the data's distribution cannot be checked by looking at a call).
"""
from __future__ import annotations

from typing import Any, Mapping

from kevolve.task.domain import config_bytes, show_bytes
from kevolve.task.expr import eval_condition
from kevolve.task.spec import Task


def ranges(task: Task, shapes: str, target: str = "cpu") -> dict[str, Any]:
    """The task's domain on `target` as plain data (see the module)."""
    dom = task.domain
    return {"sizes": {s.name: [s.lo, s.hi] for s in dom.sizes},
            "values": {s.name: list(s.values) for s in dom.sizes if s.values},
            "where": list(dom.where),
            "scalars": {r.name: [r.lo, r.hi] for r in dom.scalars},
            "max_bytes": dom.budget(target),
            "source": f"the task's domain on {target} ({dom.describe(target)}): drawn configurations in every "
                      f"judgement, a sweep of it before the result was released; the `{shapes}` set timed"}


def inside(domain: Mapping[str, Any], sizes: Mapping[str, int], scalars: Mapping[str, float],
           nbytes: int | None = None) -> str | None:
    """None when `sizes`, `scalars` (and a call's bytes, tensors and workspace, `nbytes`) lie in `domain` (`ranges`'
    data); else the reason. The exported package runs the same test (kevolve/export/runtime.py)."""
    for kind, values in (("sizes", sizes), ("scalars", scalars)):
        for name, (lo, hi) in domain.get(kind, {}).items():
            v = values.get(name)
            if v is None or not lo <= v <= hi:
                return f"{name}={v} is outside the proven range [{lo}, {hi}]"
    for name, listed in domain.get("values", {}).items():
        if sizes.get(name) not in listed:
            return f"{name}={sizes.get(name)} is not one of the proven values {listed}"
    for cond in domain.get("where", []):
        if not eval_condition(cond, dict(sizes)):
            return f"{_show(sizes)} breaks the proven domain's condition {cond}"
    most = domain.get("max_bytes")
    if nbytes is not None and most is not None and nbytes > most:
        took, proved = show_bytes(nbytes), show_bytes(most)
        if took == proved:                      # "32 MiB, over the 32 MiB": say the bytes
            took, proved = f"{nbytes:,} bytes", f"{most:,} bytes"
        return f"its tensors and workspace take {took}, over the {proved} proven on this target"
    return None


def contains(task: Task, sizes: Mapping[str, int], scalars: Mapping[str, float], shapes: str,
             target: str = "cpu") -> str | None:
    """Whether a call of `task` with these sizes and scalars is in the domain its kernels were proven on (see the
    module): None, else why not."""
    return inside(ranges(task, shapes, target), sizes, {**task.scalar_values(), **scalars},
                  config_bytes(task, dict(sizes)))


def _show(sizes: Mapping[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in sizes.items())
