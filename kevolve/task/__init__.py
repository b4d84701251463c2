"""What a task is: `spec` (the folder format, signature, shape sets, inputs), `load` (reading a folder), `expr`
(size expressions), `inits` (initialisers) and `abi` (how a kernel is called); `filters` (is a task a fair test?),
KernelBench import (`kernelbench`, `kernelbench_folder`, `problem`). The command over tasks is `kevolve.cli.tasks`."""
from kevolve.task.expr import TaskError, geomean  # noqa: F401
from kevolve.config.tasks import list_tasks  # noqa: F401
from kevolve.task.load import load_task  # noqa: F401
from kevolve.config.tasks import TASKS_DIR  # noqa: F401
from kevolve.task.spec import Case, Task  # noqa: F401
