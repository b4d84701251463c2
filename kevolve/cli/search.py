"""`python -m kevolve task=layernorm_bwd [group=option ...] [key=value ...]` — one search; `-m` sweeps.

`task=` takes any folder of tasks/ by name, or a task folder's path (then it means `task.name=PATH`).

Hydra composes `conf/config.yaml`; `kevolve.config.from_hydra` checks it against the typed schema (a bad
value stops here, naming the field); `kevolve.search.run` does the rest. Prints a live progress line on
stderr, then the summary table, and as the last line of stdout one JSON object.
`search.dry_run=true` prints what the run would send and spend instead (kevolve/search/dry_run.py), exit 0;
`--resolved` the configuration with the values the run would use where it says null (kevolve/search/resolved.py);
`--help [PREFIX]` every field and what it means; `target=` is `resources.target=` (as kevolve.evaluate spells it).
Exit status: 0 when a correct kernel was found, 1 when none was, 2 on a configuration error, a malformed
task, a run directory whose database cannot be written, or an LLM-only run (knob weighted 0) whose LLM failed
`llm.down_after` calls in a row (the message says which and what to do; the run's record is kept).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from kevolve import ROOT
from kevolve.config import hydra as hydra_setup

CONF = str(ROOT / "conf")
_started = False          # set once Hydra has composed the config and handed it to us
_resolved = False         # --resolved: print the values a run would use, and exit


@hydra.main(config_path=CONF, config_name="config", version_base=None)
def main(cfg: DictConfig) -> int:
    global _started
    _started = True
    from hydra.core.hydra_config import HydraConfig
    from kevolve.config import ConfigError, from_hydra
    from kevolve.record.store import StoreError
    from kevolve.task.spec import TaskError
    try:
        config = from_hydra(cfg)
        if _resolved:                                # the values the run would use, on this machine; runs nothing
            from kevolve.search.dry_run import resolved
            if config.resume:                        # a resumed run's: its recorded settings, as the run takes them
                from kevolve.search.resumed import settings
                config, notes, _ = settings(config, Path(config.resume), list(HydraConfig.get().overrides.task))
                print("\n".join(f"# {line}" for line in notes))
            print(resolved(config), flush=True)
            return 0
        if config.search.dry_run:                    # prices the first prompts; calls nothing, writes nothing
            from kevolve.search.dry_run import dry_run
            print(dry_run(config), flush=True)
            return 0
        if HydraConfig.get().mode.name == "MULTIRUN" and config.logger.group is None:
            config.logger.group = Path(HydraConfig.get().sweep.dir).name     # W&B groups a sweep's jobs
        run_dir = Path(config.resume or config.run_dir or HydraConfig.get().runtime.output_dir).resolve()
        from kevolve.search import run
        summary = run(config, run_dir, command=list(HydraConfig.get().overrides.task))
    except (ConfigError, StoreError, TaskError) as e:
        print(f"error: {e}", file=sys.stderr)
        if HydraConfig.get().mode.name == "RUN":
            sys.exit(2)
        raise
    from kevolve.report.tables import summary_text
    print(summary_text(summary, run_dir))
    print(json.dumps(summary.as_dict()), flush=True)
    if HydraConfig.get().mode.name == "RUN" and summary.llm_health.get("ended"):
        print("error: the LLM failed every call and no operator but the LLM's is weighted: check llm.base_url and "
              "the key, or weight knob mutation (search.population.operators.knob=1)", file=sys.stderr)
        sys.exit(2)
    if HydraConfig.get().mode.name == "RUN" and summary.best is None:
        sys.exit(1)
    return 0


ALIASES = {"target": "resources.target", "shapes": "task.shapes"}   # `python -m kevolve.evaluate`'s spellings


def task_paths(argv: list[str]) -> list[str]:
    """`task=PATH` (a task folder anywhere) becomes `task.name=PATH`: Hydra's option names cannot be paths, and
    the `task` group's options are the folders of tasks/ (kevolve.config.hydra.install). `target=` and `shapes=`,
    as `python -m kevolve.evaluate` spells them, are `resources.target=` and `task.shapes=`."""
    from kevolve.config.tasks import list_tasks
    out = []
    for arg in argv:
        key, sep, value = arg.partition("=")
        if key == "task" and sep and value not in list_tasks() and (Path(value) / "task.yaml").is_file():
            arg = f"task.name={value}"
        elif key in ALIASES and sep:
            arg = f"{ALIASES[key]}={value}"
        out.append(arg)
    return out


def cli() -> None:
    """Hydra reports its own override errors with status 1; they are usage errors, so they exit with 2.
    `--help [PREFIX]` prints every field with its meaning (kevolve/config/describe.py); `--resolved` the values a
    run would use (kevolve/search/resolved.py)."""
    global _resolved
    args = sys.argv[1:]
    if args and args[0] in ("-h", "--help"):
        from kevolve.config.describe import text
        print(text(args[1] if len(args) > 1 else ""))
        sys.exit(0)
    if "--resolved" in args:
        _resolved = True
        args.remove("--resolved")
    sys.argv[1:] = task_paths(args)
    hydra_setup.install()                        # the resolvers and task options conf/config.yaml composes with
    try:
        main()
    except SystemExit as e:
        if e.code == 1 and not _started:
            sys.exit(2)
        raise


if __name__ == "__main__":
    cli()
