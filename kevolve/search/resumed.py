"""What a resumed run (`resume=RUN_DIR`) continues with: the settings the run recorded, budget and all, with what
this command line changes said, and how much of its budget the earlier parts used.

`settings(cfg, run_dir, command)` returns the configuration to run and the lines that say what the run continues
from. A setting the resume command line gives (`command`: its overrides, as Hydra passes them; a group choice such
as `llm=openai` gives its whole subtree, an `experiment=` every field its file sets) is taken and said if it differs
from the recorded one; every other setting is the recorded one, not this command's default. Called without a command
line (`kevolve.search.run(cfg, ...)` from Python), `cfg` is taken whole, each difference said.

Budgets are the run's, over all its parts: `search.candidates` counts every candidate the run made, `search.dollars`
every dollar, and `search.wall_time_s` every second searched — a resumed part gets what the earlier parts left
(`searched_before`: each part from its start, the run's or a `resume` event, to its `finish` event's search time, or,
for a part that was killed, to the last thing it recorded). A run with no wall time left is refused, saying how to
give it more.

Guarantees: a setting that would make the resumed part judge differently from the earlier ones (`FIXED`: the task,
the shape set, the target, the mode, the baselines) is refused with a `ConfigError` naming it and the recorded value;
the per-invocation fields (`resume`, `run_dir`, `progress`) are never restored. Not guaranteed: the exact seconds of
a killed part (its last record's time stands in for its end).
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import yaml

from kevolve import ROOT
from kevolve.config import Config, ConfigError, from_hydra
from kevolve.record import events

PER_INVOCATION = ("resume", "run_dir", "progress")
FIXED = ("task.name", "task.shapes", "resources.target", "search.mode", "search.baselines")
GROUPS = ("task", "search", "resources", "llm", "logger")


def flat(d: Any, prefix: tuple = ()) -> dict[tuple, Any]:
    """The leaves of a nested dict by their key path (a tuple: a key may hold dots, as `gpt-5.1` does); a list, a
    scalar or an empty dict is a leaf."""
    if isinstance(d, dict) and d:
        out: dict[tuple, Any] = {}
        for k, v in d.items():
            out.update(flat(v, (*prefix, str(k))))
        return out
    return {prefix: d}


def nested(leaves: dict[tuple, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path, value in leaves.items():
        node = out
        *parents, last = path
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return out


def given(command: list[str]) -> set[str]:
    """The dotted keys (or key prefixes) a command line's overrides set."""
    keys: set[str] = set()
    for arg in command:
        key, sep, value = arg.lstrip("+~").partition("=")
        if not sep and not arg.startswith("~"):
            continue
        if key.startswith("hydra."):
            continue
        if key == "experiment" and value:
            path = ROOT / "conf" / "experiment" / f"{value}.yaml"
            data = yaml.safe_load(path.read_text()) if path.is_file() else {}
            for over in (data or {}).get("defaults") or []:
                if isinstance(over, dict):
                    keys.update(k.split("/")[-1].strip() for k in over)      # override /task: … → task
            keys.update(".".join(k) for k in flat({k: v for k, v in (data or {}).items() if k != "defaults"}) if k)
            continue
        keys.add(key)
    return keys


def _show(v: Any) -> str:
    return "null" if v is None else repr(v) if isinstance(v, str) else str(v)


def _known(recorded: Any, current: Any) -> Any:
    """What of the recorded configuration the schema still has: a section's keys it knows, a table (a dict the
    schema leaves open: prices, operator weights, Ray resources) whole, a value as it is."""
    if isinstance(current, dict) and current and isinstance(recorded, dict):
        return {k: _known(recorded[k], current[k]) if k in recorded else v for k, v in current.items()}
    return recorded


def _at(tree: dict, key: str) -> tuple[tuple, Any] | None:
    """(path, value) of a dotted key in `tree`, a part of it holding dots where the tree says so (`gpt-5.1`)."""
    parts, node, path = key.split("."), tree, ()
    while parts:
        for n in range(len(parts), 0, -1):
            name = ".".join(parts[:n])
            if isinstance(node, dict) and name in node:
                node, path, parts = node[name], (*path, name), parts[n:]
                break
        else:
            return None
    return path, node


def merge(cfg: Config, recorded: dict, command: list[str] | None) -> tuple[Config, list[str]]:
    """The resumed configuration and the differences said (see the module's docstring)."""
    from omegaconf import OmegaConf
    now_tree = OmegaConf.to_container(OmegaConf.structured(cfg))
    then_tree = _known(recorded, now_tree)
    if command is None:                               # from Python: the configuration given, whole
        tree = now_tree
    else:
        tree = nested(flat(then_tree))
        for key in sorted(given(command) | set(PER_INVOCATION), key=len):
            found = _at(now_tree, key)
            if found is not None:
                path, value = found
                node = tree
                for part in path[:-1]:
                    node = node.setdefault(part, {})
                node[path[-1]] = value
    then, now = flat(then_tree), flat(tree)
    changed = []
    for path in dict.fromkeys([*then, *now]):
        key = ".".join(path)
        if path[0] in PER_INVOCATION or then.get(path) == now.get(path):
            continue
        if key in FIXED and then.get(path) is not None:
            raise ConfigError(f"config field {key!r}: the run in {cfg.resume} was searched with {_show(then[path])}, "
                              f"not {_show(now.get(path))}; a resumed run judges as its earlier parts did (leave it "
                              "out, or start a new run)")
        changed.append(f"{key}: {_show(then.get(path))} → {_show(now.get(path))}")
    return from_hydra(tree), changed


def searched_before(store) -> float:
    """Seconds the run's earlier parts searched (see the module's docstring)."""
    meta = store.meta()
    stamps = sorted([t for t, _, _ in store.events()] + [r.updated for r in store.candidates()])
    starts = [float(meta.get("started") or (stamps[0] if stamps else time.time()))]
    starts += [t for t, kind, _ in store.events(events.Resume.KIND)]
    finishes = [(t, p) for t, _, p in store.events(events.Finish.KIND)]
    total = 0.0
    for i, start in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else float("inf")
        done = [p for t, p in finishes if start <= t < end]
        if done:
            total += float(done[-1].get("search_seconds") or 0.0)
        else:
            inside = [t for t in stamps if start <= t < end]
            total += max(0.0, (max(inside) if inside else start) - start)
    return total


def settings(cfg: Config, run_dir: Path, command: list[str] | None) -> tuple[Config, list[str], float]:
    """(the configuration a resumed run continues with, the lines that say so, seconds searched before)."""
    from kevolve.record.store import Store
    if not (Path(run_dir) / "kevolve.db").is_file():
        return cfg, [], 0.0                      # `open_store` says the run is missing
    with Store.open(run_dir, readonly=True) as store:
        meta = store.meta()
        done, made = store.finished(), len(store.candidates())
        before = searched_before(store)
        best = store.best(1)
        parts = 1 + len(store.events(events.Resume.KIND))
    recorded = meta.get("config") or {}
    resumed, changed = merge(cfg, recorded, command)
    s = resumed.search
    left = s.wall_time_s - before
    if left <= 0:
        raise ConfigError(f"config field 'search.wall_time_s': the run in {run_dir} has searched {before:.0f} s of its "
                          f"{s.wall_time_s:.0f} s; give it more with search.wall_time_s={int(before + 300)} (the "
                          "run's total) on the resume command line")
    started = time.strftime("%Y-%m-%d %H:%M", time.localtime(float(meta.get("started") or 0)))
    lines = [f"resuming {run_dir}: {meta.get('task')}, started {started}, {parts} part(s) so far, {before:.0f} s "
             f"searched; {made} candidates ({len(done)} judged, {sum(bool(r.correct) for r in done)} correct, "
             f"{made - len(done)} unfinished: verified again)"
             + (f"; best {best[0].fitness:.2f}x ({best[0].candidate.id})" if best and best[0].correct else ""),
             f"budget (the run's, over its parts): {s.candidates} candidates ({max(0, s.candidates - made)} left), "
             f"wall time {s.wall_time_s:.0f} s ({left:.0f} s left), "
             + (f"${s.dollars:g}" if s.dollars is not None else "no dollar limit"),
             "settings: the run's own" + (", but as given now: " + "; ".join(changed) if changed else
                                          " (none changed on this command line)")]
    return resumed, lines, before
