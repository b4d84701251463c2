"""What a search does before its driver exists: check the LLM configuration (a missing key stops the run
here, naming the variable, before Ray or a store), start or join Ray, open or create the run's store.

On resume the store's spend is squared with the run's response cache first: a reply that came back after the
driver stopped listening (a call in flight when the run was stopped or killed) is in the cache, paid for, and in
no candidate or event of the store, and the resumed run would get it again from the cache at no cost. Such
replies are booked as one `unrecorded_spend` event, so that the store's total — where a resumed run's spend
starts — counts every reply the run fetched. Not counted: a call the service billed whose reply never arrived.
"""
from __future__ import annotations

import time
from pathlib import Path

import ray

from kevolve.config import Config, ConfigError, ResourcesConfig
from kevolve.llm import LLMConfig, LLMConfigError, make_provider
from kevolve.llm.cache import Cache
from kevolve.llm.config import CACHE_FILE
from kevolve.record.scrub import redact_arg
from kevolve.record.store import Store
from kevolve.task.spec import Task
from kevolve.record import events


def open_store(cfg: Config, run_dir: Path, task: Task, command: list[str] | None = None,
               notes: list[str] | None = None) -> tuple[Store, bool]:
    """The run's store: opened to resume (it must have searched the same task; `notes`: what the resume said, kept
    in its `resume` event), or created with the config and the command line's overrides (`command`, when the run
    came from `python -m kevolve`; secret values redacted)."""
    if cfg.resume:
        store = Store.open(run_dir)
        meta = store.meta()
        if meta.get("task") != task.name:
            raise ConfigError(f"config field 'task.name': the run in {run_dir} searched {meta.get('task')!r}, "
                              f"not {task.name!r}; resume with task={meta.get('task')}")
        store.log_event(events.Resume(run_dir=str(run_dir), said=tuple(notes or ()),
                                      command=tuple(redact_arg(a) for a in command or ())))
        book_unrecorded_spend(store, run_dir)
        return store, True
    from omegaconf import OmegaConf
    meta = {"task": task.name, "config": OmegaConf.to_container(OmegaConf.structured(cfg)), "started": time.time()}
    if command is not None:
        meta["command"] = [redact_arg(a) for a in command]
    return Store.create(run_dir, meta), False


def book_unrecorded_spend(store: Store, run_dir: Path) -> float:
    """Books the cost of the replies in the run's response cache that the store does not hold (see the module's
    docstring) as an `unrecorded_spend` event; returns it (0 when there are none, or no cache)."""
    path = Path(run_dir) / CACHE_FILE
    if not path.is_file():
        return 0.0
    cache = Cache(path, readonly=True)
    try:
        fetched = cache.total_cost()
    finally:
        cache.close()
    missing = fetched - store.total_cost()
    if missing <= 1e-9 * max(1.0, fetched):          # none, up to the rounding of two sums
        return 0.0
    store.log_event(events.UnrecordedSpend(cost_usd=missing, fetched_usd=fetched,
                                           why="replies that came back after the run stopped recording"))
    return missing


def check_llm(llm: LLMConfig) -> None:
    """The LLM configuration can work: keys present (the variable named), replay directory readable."""
    try:
        make_provider(llm).close()
    except LLMConfigError as e:
        raise ConfigError(str(e)) from None


def start_ray(r: ResourcesConfig) -> None:
    """A local Ray (`resources.num_cpus`) or the cluster at `resources.address`; nothing if Ray is up."""
    if ray.is_initialized():
        return
    import logging
    kwargs = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    if r.address is None:
        ray.init(num_cpus=r.num_cpus, **kwargs)
    else:
        ray.init(address=r.address, **kwargs)
