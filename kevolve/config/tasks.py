"""Where the tasks that ship with kevolve live: `TASKS_DIR` (the checkout's tasks/) and `list_tasks()`, its folders
holding a task.yaml, by name. The configuration checks `task.name` against them; `kevolve.task.load` loads them.

Guaranteed: `list_tasks()` reads the directory when called (sorted names; [] without tasks/) and nothing else.
"""
from __future__ import annotations

from kevolve import ROOT

TASKS_DIR = ROOT / "tasks"


def list_tasks() -> list[str]:
    """The folders of tasks/ that hold a task.yaml, sorted by name."""
    tasks = TASKS_DIR
    return sorted(p.name for p in tasks.iterdir() if (p / "task.yaml").exists()) if tasks.exists() else []
