"""What a task is: `spec` (the folder format, signature, shape sets, inputs) and `abi` (how a kernel is called)."""
from kevolve.task.spec import TASKS_DIR, Case, Task, TaskError, geomean, list_tasks, load_task  # noqa: F401
