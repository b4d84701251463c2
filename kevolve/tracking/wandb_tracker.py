"""Weights & Biases as a tracker (`logger=wandb`): what a search looks like in W&B, from the run's store.

What goes there, x-axis `candidates` (verdicts so far):
- per candidate, one history row: `candidate/<key>` for every key of `tracking.row` (id, parents, island,
  generation, operator, model, static rules and LLM verifier verdicts, seconds per stage, correct, fitness,
  per-configuration times and speedups, cost);
- over time: `run/best_fitness`, `run/correct_rate`, `run/candidates_per_minute`, `run/evaluator_busy` (the share
  of evaluator time spent judging, this session), `run/spend_usd`; at each progress call, `population/...`;
- at the end: the `candidates` table (every row), the `lineage` table (one row per edge parent → child, with the
  child's operator: W&B panels rebuild the family tree from it), the `failures` table (every candidate that was not
  correct: operator, stage, reason, configuration, the failure's text — the report's; `failures/<reason>` counts in
  the summary), the `verifiers` table (confusion per LLM
  verifier, when the run has verdicts), the best kernel as an artifact of type `kernel` (its source and
  `numbers.json`: the summary of its final judgement and its per-configuration numbers), and the summary;
- as the run's config: the resolved configuration from the store, secrets scrubbed (`record.scrub`).

Settings are resolved once in `settings()`: a `LoggerConfig` field wins, then W&B's own variables (WANDB_MODE,
WANDB_PROJECT, WANDB_ENTITY, WANDB_DIR), then: offline, project "kevolve", the run directory. WANDB_API_KEY is
W&B's business (online mode, `wandb sync`); it never enters a field. The W&B run id is kept in the store's
meta (`wandb`), so `resume=RUN_DIR` continues the same W&B run (`resume="allow"`).

Guaranteed: nothing here writes the store but its own meta key and one `tracker` event; W&B collects no
command line, environment or code (`x_disable_meta`, no code saving) and no console output. Not guaranteed: that
this survives W&B failing — `tracking.Guarded` makes that harmless; that history rows of a killed run reach W&B
(the end-of-run tables, logged again at the end of a resumed run, hold every candidate).
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

import wandb

from kevolve.config import LoggerConfig
from kevolve.progress import bar
from kevolve.record import failures
from kevolve.record.events import Confirm, Tracker
from kevolve.record.read import confusion as confusion_of
from kevolve.record.read import lineage
from kevolve.record.rows import evaluation_of, per_config, row
from kevolve.record.scrub import scrub

if TYPE_CHECKING:
    from kevolve.record.store import Store
    from kevolve.tracking.interface import RunShape

PROJECT = "kevolve"


@dataclass(frozen=True)
class Settings:
    project: str
    entity: str | None
    mode: str
    group: str | None
    tags: tuple[str, ...]
    name: str
    dir: str


def settings(cfg: LoggerConfig, run_dir: Path, task: str, target: str,
             env: Mapping[str, str] | None = None) -> Settings:
    """The W&B settings of a run: config fields first, then W&B's environment variables, then our defaults."""
    env = os.environ if env is None else env
    return Settings(project=cfg.project or env.get("WANDB_PROJECT") or PROJECT,
                    entity=cfg.entity or env.get("WANDB_ENTITY") or None,
                    mode=cfg.mode or env.get("WANDB_MODE") or "offline",
                    group=cfg.group, tags=tuple(dict.fromkeys([*cfg.tags, task, target])),
                    name=cfg.name or f"{task}/{run_dir.name}",
                    dir=cfg.dir or env.get("WANDB_DIR") or str(run_dir))


class WandbTracker:
    def __init__(self, cfg: LoggerConfig):
        self.cfg = cfg
        self.run = None

    # ------------------------------------------------------------------ start
    def start(self, store: "Store", plan: "RunShape") -> None:
        self.store, self.evaluators, self.target = store, plan.evaluators, plan.target
        meta = store.meta()
        run_dir = store.path.parent
        self.task = str(meta.get("task", "task"))
        s = settings(self.cfg, run_dir, self.task, plan.target)
        known = meta.get("wandb") or {}
        run_id = known.get("id") or uuid.uuid4().hex[:12]
        if not known:
            store.set_meta({"wandb": {"id": run_id, "project": s.project, "entity": s.entity}})
        store.log_event(Tracker(kind="wandb", id=run_id, mode=s.mode, dir=s.dir, resumed=bool(known)))
        Path(s.dir).mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(
            project=s.project, entity=s.entity, mode=s.mode, dir=s.dir, id=run_id, resume="allow",
            group=s.group, name=s.name, tags=list(s.tags), job_type="search", reinit="finish_previous",
            config=scrub(meta.get("config") or {}),
            settings=wandb.Settings(console="off", quiet=True, x_disable_meta=True, save_code=False,
                                    x_save_requirements=False))
        self.mode = s.mode
        self.run.define_metric("candidates")
        self.run.define_metric("*", step_metric="candidates")
        self.run.define_metric("candidate/*", step_metric="candidates", summary="none")   # rows, not a summary
        self.run.define_metric("run/best_fitness", step_metric="candidates", summary="max")
        done = store.finished()                  # a resumed run's counts go on from the store
        self.n = self.n0 = len(done)
        self.correct = sum(1 for r in done if r.correct)
        self.best = max([r.fitness or 0.0 for r in done if r.correct] or [0.0])
        self.eval_seconds, self.t0 = 0.0, time.time()

    # ------------------------------------------------------------------ during
    def candidate(self, r: dict[str, Any]) -> None:
        self.n += 1
        self.correct += bool(r.get("correct"))
        if r.get("correct"):
            self.best = max(self.best, float(r.get("fitness") or 0.0))
        self.eval_seconds += float(r.get("evaluate_s") or 0.0)
        elapsed = max(time.time() - self.t0, 1e-6)
        self.run.log({"candidates": self.n, **{f"candidate/{k}": v for k, v in scrub(r).items()},
                      "run/best_fitness": self.best, "run/correct_rate": self.correct / self.n,
                      "run/candidates_per_minute": 60 * (self.n - self.n0) / elapsed,
                      "run/evaluator_busy": self.eval_seconds / (self.evaluators * elapsed),
                      "run/spend_usd": self.store.total_cost()})

    def progress(self, stats: dict[str, Any]) -> None:
        flat = {f"population/{k}": v for k, v in stats.items()
                if isinstance(v, (int, float)) and not isinstance(v, bool)}
        for island in stats.get("islands", ()):
            flat[f"population/island{island['island']}/best_fitness"] = island.get("best_fitness", 0.0)
            flat[f"population/island{island['island']}/members"] = island.get("members", 0)
        self.run.log({"candidates": self.n, **flat})

    # ------------------------------------------------------------------ the end
    def finish(self, summary: dict[str, Any]) -> None:
        records = self.store.candidates()
        rows = [scrub(row(r)) for r in bar(records, "W&B tables")]
        columns = list(dict.fromkeys(k for r in rows for k in r))
        self.run.log({"candidates": self.n,
                      "candidates_table": wandb.Table(columns=columns,
                                                      data=[[r.get(c) for c in columns] for r in rows]),
                      "lineage": _table(lineage(records))})
        failed = failures.rows(records)           # the report's failures table, the same rows
        if failed:
            self.run.log({"candidates": self.n, "failures": _table(failed)})
            self.run.summary.update({f"failures/{reason}": n for reason, n in failures.counts(failed).items()})
        confusion = confusion_of(records)
        if confusion:
            self.run.log({"candidates": self.n, "verifiers": _table(
                [{"verifier": v, **c, **_rates(c)} for v, c in confusion.items()])})
            for v, c in confusion.items():
                self.run.summary.update({f"verifier/{v}/{k}": x for k, x in {**c, **_rates(c)}.items()})
        self._log_best(summary)
        self.run.summary.update(scrub(_flat(summary, "summary")))
        self.close()

    def _log_best(self, summary: dict[str, Any]) -> None:
        best_id = (summary.get("best") or {}).get("id")
        if not best_id:
            return
        record = self.store.get(best_id)
        ev = None
        for confirmed in reversed(self.store.events_of(Confirm)):
            if confirmed.id == best_id and confirmed.correct and confirmed.evaluation:
                from kevolve.judge.results import Evaluation
                ev = Evaluation.from_json(confirmed.evaluation)
                break
        ev = ev or evaluation_of(record)
        numbers = {"id": best_id, "operator": record.candidate.operator, "parents": list(record.candidate.parents),
                   "summary": ev.summary() if ev else None, "configurations": per_config(ev) if ev else {},
                   "confirmed": bool((summary.get("best") or {}).get("confirmed"))}
        ext = ".cu" if self.target == "cuda" else ".cpp"
        art = wandb.Artifact(f"best-{_slug(self.task)}", type="kernel",
                             description=f"the best {self.task} kernel of this run, and its numbers",
                             metadata=scrub({k: v for k, v in (numbers["summary"] or {}).items()
                                             if isinstance(v, (int, float, str, bool)) or v is None}))
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / f"best{ext}").write_text(record.candidate.source)
            (Path(tmp) / "numbers.json").write_text(json.dumps(scrub(numbers), indent=1))
            art.add_file(str(Path(tmp) / f"best{ext}"))
            art.add_file(str(Path(tmp) / "numbers.json"))
            self.run.log_artifact(art)

    def close(self) -> None:
        if self.run is not None:
            run, self.run = self.run, None
            sync_dir = getattr(run.settings, "sync_dir", None)
            run.finish()
            if self.mode == "offline" and sync_dir:
                print(f"W&B (offline): upload this run with `wandb sync {sync_dir}`", file=sys.stderr, flush=True)


def _table(rows: list[dict[str, Any]]) -> "wandb.Table":
    columns = list(dict.fromkeys(k for r in rows for k in r))
    return wandb.Table(columns=columns, data=[[r.get(c) for c in columns] for r in scrub(rows)])


def _rates(c: dict[str, int]) -> dict[str, float | None]:
    said_fail, bad, n = c["tp"] + c["fp"], c["tp"] + c["fn"], c["tp"] + c["fp"] + c["fn"] + c["tn"]
    return {"precision": c["tp"] / said_fail if said_fail else None, "recall": c["tp"] / bad if bad else None,
            "accuracy": (c["tp"] + c["tn"]) / n if n else None}


def _flat(d: Any, prefix: str) -> dict[str, Any]:
    if isinstance(d, dict):
        return {k: v for key, x in d.items() for k, v in _flat(x, f"{prefix}/{key}").items()}
    return {prefix: json.dumps(d) if isinstance(d, list) else d}


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in text)
