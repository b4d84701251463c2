"""kevolve: evolutionary search for fast, correct kernels, judged by a harness no kernel can cheat.

The package follows the flow of one candidate and the three processes it passes through:

- `task/`       what a task is: the folder format, its signature and shape sets (`spec`), the kernel ABIs (`abi`),
                task filters, KernelBench import; `python -m kevolve.tasks`.
- `operators/`  text in, source out: knob mutation today (`knobs`, `knob`), the LLM operators next.
- `judge/`      source in, verdict out: static rules, builds, the worker process and its protocol, checks,
                the clock, output exchange, the evaluator's reuse caches, results; `python -m kevolve.evaluate`.
- `search/`     the resolved plan, the population, duplicate detection, the store, the Ray actors, the driver.
- `tracking/`   where a run's metrics go (a null tracker without a service).
- `report/`     tables for the terminal.
- `config.py`   the typed schema Hydra's YAML is checked against; `messages.py` the frozen messages between parts.

`ROOT` is the checkout holding `conf/` and `tasks/`.
"""
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
