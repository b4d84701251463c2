"""Inputs a task accepts as unused: task.yaml's `unused_inputs` (the `input_impact` filter's exceptions).

`unused_inputs(task)` reads `{name: why}` or `{name: {why: ..., when: COND}}` (COND: comparisons of size
expressions joined by and/or/not). Guaranteed: every name is an input of the task and every condition evaluates on
every configuration of every shape set, else ValueError naming task.yaml and the entry.
"""
from __future__ import annotations

from dataclasses import dataclass

import yaml

from kevolve.task.expr import TaskError, eval_condition
from kevolve.task.spec import Task


@dataclass(frozen=True)
class Unused:
    """An input task.yaml accepts as unused: why, and on which shapes (`when`, a condition; None: all)."""
    why: str
    when: str | None = None

    def holds(self, sizes: dict[str, int]) -> bool:
        return self.when is None or eval_condition(self.when, sizes)

    def where(self) -> str:
        return f" when {self.when}" if self.when else ""


def unused_inputs(task: Task) -> dict[str, Unused]:
    """task.yaml's `unused_inputs: {name: why}` or `{name: {why: ..., when: COND}}`: inputs the operation takes
    but does not need (on the shapes where COND holds; input_impact accepts them there); a name that is not
    an input, or a condition that does not evaluate on every configuration, is an error."""
    path = task.dir / "task.yaml"
    raw = yaml.safe_load(path.read_text()) or {}
    declared: dict[str, Unused] = {}
    for k, v in (raw.get("unused_inputs") or {}).items():
        if isinstance(v, dict):
            if set(v) - {"why", "when"} or "why" not in v:
                raise ValueError(f"{path}: unused_inputs.{k} takes `why` and optionally `when`, got {sorted(v)}")
            declared[str(k)] = Unused(str(v["why"]), str(v["when"]) if v.get("when") is not None else None)
        else:
            declared[str(k)] = Unused(str(v))
    wrong = set(declared) - {s.name for s in task.inputs}
    if wrong:
        raise ValueError(f"{path}: unused_inputs names {sorted(wrong)}, which are not inputs")
    for name, u in declared.items():
        for shape_set in task.shape_sets:
            for case in task.configs(shape_set):
                try:
                    u.holds(case.size_dict)
                except TaskError as e:
                    raise ValueError(f"{path}: unused_inputs.{name}: {e}") from None
    return declared
