"""What a task is: `spec` (the folder format, signature, shape sets, inputs) and `abi` (how a kernel is called);
`filters` (is a task a fair test?), KernelBench import (`kernelbench`, `kernelbench_folder`, `problem`), a task's
best kernels and their promotion from a run (`best`), and the `python -m kevolve.tasks` command (`cli`)."""
from kevolve.task.spec import TASKS_DIR, Case, Task, TaskError, geomean, list_tasks, load_task  # noqa: F401
