"""What an export starts from: a finished run's assembled op (its store's last `assembled` event) or a task's best/
folder (`best/op/<target>.json` and the source beside it, written by `python -m kevolve.tasks best`), read into one
`Bundle`: the task, the target, the op's source, the op's record (buckets, routes, numbers, domain) and its
judgement.

Guarantees: a bundle is only made of an op judged correct as a whole; anything else — not a run nor a best/ folder,
a run not finished, without a correct kernel, without a correct op, a best/ folder without an op — raises
`ExportError` with what to do. Reading is read-only (a running search is not disturbed).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kevolve.judge.build import SUFFIX
from kevolve.judge.results import Evaluation
from kevolve.search import proven
from kevolve.task.expr import TaskError
from kevolve.task.load import load_task
from kevolve.task.spec import Task


class ExportError(ValueError):
    """An export that cannot be made: the message says why and what to do."""


@dataclass(frozen=True)
class Bundle:
    task: Task
    target: str
    source: str                      # the op's one C-ABI source
    record: dict[str, Any]           # the `assembled` event's data (op, buckets, kernels, domain, device, shapes)
    evaluation: Evaluation           # the op's judgement
    origin: str                      # the run directory or best/ folder it came from

    @property
    def op(self) -> dict[str, Any]:
        return self.record["op"]


def read(path: str | Path, target: str | None = None) -> Bundle:
    """The bundle of a run directory or a best/ folder (or a task folder: its best/)."""
    from kevolve.record.store import DB_NAME
    p = Path(path).resolve()
    if (p / DB_NAME).is_file():
        return _run(p)
    if (p / "best" / "op").is_dir() and not (p / "op").is_dir():
        p = p / "best"
    if (p / "op").is_dir():
        return _best(p, target)
    raise ExportError(f"{p} is neither a run directory (no {DB_NAME}) nor a task's best/ folder (no op/): give the "
                      "run_dir a search printed, or tasks/<task>/best after `python -m kevolve.tasks best RUN_DIR`")


def _run(run_dir: Path) -> Bundle:
    from kevolve.record.store import Store, StoreError
    try:
        store = Store.open(run_dir, readonly=True)
    except StoreError as e:
        raise ExportError(str(e)) from None
    with store:
        finish = [p for _, _, p in store.events("finish")]
        assembled = [p for _, _, p in store.events("assembled")]
        meta = store.meta()
    if not finish:
        raise ExportError(f"{run_dir}: the run has not finished (no finish event): let it end, or resume it "
                          f"(resume={run_dir}), then export it")
    if not finish[-1].get("best"):
        raise ExportError(f"{run_dir}: the run found no correct kernel: there is nothing to export")
    if not assembled:
        raise ExportError(f"{run_dir}: the run has no assembled op (made by a kevolve before ops were assembled, "
                          "or stopped before its finish): run the search again, or resume it")
    record = assembled[-1]
    if not record.get("op", {}).get("correct"):
        raise ExportError(f"{run_dir}: the run's assembled op was not judged correct "
                          f"({str(record.get('op', {}).get('failure'))[:300]}): there is no op to export")
    task = _task(record["task"], meta)
    source = record.get("source_text")
    if source is None:                       # recorded before the store kept the source: the file the run wrote
        path = run_dir / f"op{SUFFIX[record['target']]}"
        if not path.is_file():
            raise ExportError(f"{run_dir}: the op's source {path.name} is missing: run the search again")
        source = path.read_text()
    if "domain" not in record:               # recorded before the domain was: the same range, from the task
        record = {**record, "domain": proven.ranges(task, record["shapes"], record.get("target", "cpu"))}
    return Bundle(task, record["target"], source, record, Evaluation.from_json(record["evaluation"]), str(run_dir))


def _best(best: Path, target: str | None) -> Bundle:
    found = sorted(p.stem for p in (best / "op").glob("*.json"))
    if target is None and len(found) > 1:
        raise ExportError(f"{best}/op holds ops for {', '.join(found)}: choose one with --target")
    target = target or (found[0] if found else None)
    path = best / "op" / f"{target}.json"
    if target is None or not path.is_file():
        raise ExportError(f"{best}/op has no op for target {target or '(any)'}: promote a run whose op was judged "
                          "correct with `python -m kevolve.tasks best RUN_DIR`")
    record = json.loads(path.read_text())
    source = best / "op" / f"{target}{SUFFIX[target]}"
    if not source.is_file():
        raise ExportError(f"{source} is missing beside {path}: promote the run again")
    if not record.get("op", {}).get("correct"):
        raise ExportError(f"{path}: the op was not judged correct: there is no op to export")
    folder = best.parent if (best.parent / "task.yaml").is_file() else None
    task = load_task(folder) if folder is not None else _task(record["task"], {})
    if task.name != record["task"]:
        raise ExportError(f"{path} is an op of task {record['task']}, not of {task.name} ({task.dir})")
    if "domain" not in record:
        record = {**record, "domain": proven.ranges(task, record["shapes"], record.get("target", "cpu"))}
    return Bundle(task, target, source.read_text(), record, Evaluation.from_json(record["evaluation"]), str(best))


def _task(name: str, meta: dict) -> Task:
    configured = ((meta.get("config") or {}).get("task") or {}).get("name")
    for candidate in (configured, name):
        if not candidate:
            continue
        try:
            task = load_task(candidate)
        except TaskError:
            continue
        if task.name == name:
            return task
    raise ExportError(f"the task {name!r} of the op is not among kevolve's tasks here (nor at {configured!r}): "
                      "export on a checkout that has it")
