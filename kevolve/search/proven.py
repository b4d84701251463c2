"""Where a result's kernels are proven correct: the domain an exported op sends to its kernels, and outside which it
calls torch (`kevolve.export`).

Until tasks carry a `domain:` block (issue 46: `Task.domain.contains(sizes, scalars)`), the domain is the range of
the shape set's judged configurations: every size between its smallest and largest judged value, every scalar
likewise, and no tensor with more elements than the largest one judged. `ranges(task, shapes)` gives it as plain
data (what the op's manifest keeps, and the exported package checks without kevolve); `contains(task, sizes,
scalars, shapes)` says whether a call is inside: None, else why not.

Guarantees: every configuration of the shape set is inside; a size, scalar or tensor beyond the judged extremes is
outside, with the reason naming it and the range. Not guaranteed: that every point inside was judged (between the
extremes, kernels are trusted as they are on the judged points: the lead's domain sweep, not this range, is the
proof of the points between).
"""
from __future__ import annotations

import math
from typing import Any, Mapping

from kevolve.task.spec import Task


def ranges(task: Task, shapes: str) -> dict[str, Any]:
    """The judged range of `shapes`: per size and scalar [smallest, largest], the most elements of one tensor, and
    where it comes from."""
    configs = task.configs(shapes)
    sizes = {n: [min(c.size_dict[n] for c in configs), max(c.size_dict[n] for c in configs)] for n in task.sizes}
    scalars = {}
    for s in task.scalars:
        values = [task.scalar_values(c)[s.name] for c in configs]
        scalars[s.name] = [min(values), max(values)]
    elements = max(math.prod(task.shape(spec, c.size_dict)) for c in configs for spec in task.inputs + task.outputs)
    return {"sizes": sizes, "scalars": scalars, "elements": int(elements),
            "source": f"the range of the {len(configs)} judged configurations of the task's `{shapes}` shape set"}


def inside(domain: Mapping[str, Any], sizes: Mapping[str, int], scalars: Mapping[str, float],
           elements: int | None = None) -> str | None:
    """None when `sizes`, `scalars` (and a call's largest tensor, `elements`) lie in `domain` (`ranges`' data);
    else the reason. The exported package runs the same test (kevolve/export/runtime.py)."""
    for kind, values in (("sizes", sizes), ("scalars", scalars)):
        for name, (lo, hi) in domain.get(kind, {}).items():
            v = values.get(name)
            if v is None or not lo <= v <= hi:
                return f"{name}={v} is outside the proven range [{lo}, {hi}]"
    most = domain.get("elements")
    if elements is not None and most is not None and elements > most:
        return f"a tensor of {elements} elements is over the largest proven ({most})"
    return None


def contains(task: Task, sizes: Mapping[str, int], scalars: Mapping[str, float], shapes: str) -> str | None:
    """Whether a call of `task` with these sizes and scalars is in the domain its kernels were proven on (see the
    module): None, else why not."""
    largest = max(math.prod(task.shape(spec, dict(sizes))) for spec in task.inputs + task.outputs)
    return inside(ranges(task, shapes), sizes, {**task.scalar_values(), **scalars}, largest)
