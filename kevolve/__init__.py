"""kevolve: evolutionary search for fast, correct kernels, judged by a harness no kernel can cheat.

The packages are layers, top to bottom (an import points down, never in a circle: tests/test_layers.py):

- `cli/`        every entry point: `python -m kevolve` (a search), `kevolve.evaluate`, `kevolve.tasks` (and its tools),
                `kevolve.report`.
- `report/`     tables for the terminal, the HTML report, a task's best kernel promoted from a run.
- `search/`     the resolved plan, the population, the Ray actors, the driver.
- `tracking/`   where a run's metrics go besides its record (a null tracker without a service; W&B).
- `record/`     the run's record: the SQLite store, its read model, typed events, secret redaction.
- `operators/`  text in, source out: knob mutation, the LLM operators, prompts.
- `judge/`      source in, verdict out: static rules, builds, the worker process, checks, the clock, results.
- `task/`       what a task is: the folder format, its signature and shape sets, the kernel ABIs, filters, imports.
- `config/`     the typed schema Hydra's YAML is checked against (every default), the KEVOLVE_* environment.
- `llm/`        providers, pricing, the response cache: the only code that touches the network.
- `messages.py` the frozen messages between parts; `progress.py` progress bars.

`ROOT` is the checkout holding `conf/` and `tasks/`.
"""
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
