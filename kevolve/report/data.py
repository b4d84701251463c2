"""What a run's store says, as plain data for pictures and tables: read-only, from `kevolve.db` alone.

`load(run_dir)` reads one run (finished, stopped or still running: the store is opened read-only, so a
search writing it goes on) into a `Run`; the functions below derive what the report and the tracker show:
- `curve(run)`: after each verdict, in the order verdicts came: candidates so far, seconds since the run
  started, dollars spent so far, the candidate's fitness and the best fitness so far;
- `best(run)` and `best_evaluation(run)`: the fittest correct candidate, and its numbers from the final
  judgement with baselines interleaved when the run confirmed it (else from the search);
- `ancestry(run, id)`: every ancestor of a candidate and the edges parent → child, each with the child's operator;
  `founder(run, id)`: the founding ancestor (first parents followed to a candidate without parents);
- `rates(run, key)`: per operator (or model) how many candidates ended in each status, correct apart;
- `confusion(records)`: per LLM verifier, its verdicts against the judge's outcome (`screening.truth`);
- `lineage(records)`: one row per edge parent → child (roots with parent ""), for tables that rebuild the tree;
- `run_dirs(paths)`: run directories among paths (a multirun directory stands for the runs below it);
- `plan(run)`, `search_kind(run)`: what a run turned on (mode, LLM operators or knob only, verifiers, budget);
- `op(run)`: the run's assembled op (`messages.Op`) and its judgement, from its last `assembled` event;
- `compared(runs)`: runs side by side at the same budget — each one's best within the first n verdicts (n: the
  fewest any of them reached), LLM calls, LLM-made candidates, spend — and the configuration keys that differ.

Not guaranteed: wall time excludes the time a stopped run was not running (a resumed run's clock includes
the gap); costs of LLM calls recorded as events, not candidates, count from the time of the event.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from kevolve.judge.results import Evaluation
from kevolve.messages import Op, OpRoute
from kevolve.record.read import Record
from kevolve.record.store import DB_NAME, Store

STATUS_ORDER = ("correct", "incorrect", "build_failed", "rejected", "failed")


@dataclass(frozen=True)
class Run:
    dir: Path
    meta: dict[str, Any]
    records: list[Record]                     # every candidate, in the order it was added
    finished: list[Record]                    # those with a verdict, in the order verdicts came
    events: list[tuple[float, str, Any]]

    @property
    def task(self) -> str:
        return str(self.meta.get("task", "?"))

    @property
    def name(self) -> str:
        return self.dir.name

    @property
    def started(self) -> float:
        return float(self.meta.get("started") or (self.records[0].candidate.created if self.records else 0.0))

    @property
    def by_id(self) -> dict[str, Record]:
        return {r.candidate.id: r for r in self.records}

    def target(self) -> str:
        config = self.meta.get("config") or {}
        ev = best_evaluation(self)
        return ev.target if ev else str((config.get("resources") or {}).get("target") or "?")


def load(run_dir: str | Path) -> Run:
    run_dir = Path(run_dir)
    with Store.open(run_dir, readonly=True) as store:
        return Run(run_dir, store.meta(), store.candidates(), store.finished(), store.events())


def run_dirs(paths: Iterable[str | Path]) -> list[Path]:
    """Run directories (holding kevolve.db) among paths; a directory without one stands for those below it."""
    out: list[Path] = []
    for p in map(Path, paths):
        if (p / DB_NAME).is_file():
            out.append(p)
        else:
            out += sorted(db.parent for db in p.glob(f"**/{DB_NAME}"))
    return out


def outcome(r: Record) -> str:
    """One of STATUS_ORDER: evaluated splits into correct and incorrect; unfinished candidates give ""."""
    if r.status == "evaluated":
        return "correct" if r.correct else "incorrect"
    return r.status if r.status in STATUS_ORDER else ""


@dataclass(frozen=True)
class Point:
    candidates: int
    seconds: float
    dollars: float
    fitness: float
    best: float


def curve(run: Run) -> list[Point]:
    costs = sorted((t, float(p.get("cost_usd") or 0.0)) for t, _, p in run.events
                   if isinstance(p, dict) and p.get("cost_usd"))
    points, best, spent, k = [], 0.0, 0.0, 0
    for n, r in enumerate(run.finished, 1):
        while k < len(costs) and costs[k][0] <= r.updated:
            spent += costs[k][1]
            k += 1
        spent += r.cost_usd
        fitness = (r.fitness or 0.0) if r.correct else 0.0
        best = max(best, fitness)
        points.append(Point(n, max(0.0, r.updated - run.started), spent, fitness, best))
    return points


def _confirmed(run: Run) -> dict | None:
    """The last `confirm` event of a correct judgement: the best kernel the run reported, judged again."""
    for _, kind, p in reversed(run.events):
        if kind == "confirm" and isinstance(p, dict) and p.get("correct") and p.get("id") in run.by_id:
            return p
    return None


def released(run: Run, cid: str | None = None) -> dict | None:
    """The last release check that passed (of candidate `cid`, when given): on which domain and how many
    configurations a result was proven (`search.finish`); None where the run made none."""
    checks = [p for _, kind, p in run.events if kind == "release" and p.get("passed")
              and (cid is None or p.get("id") == cid)]
    return checks[-1] if checks else None


def spend(run: Run) -> float:
    """Every dollar the run recorded: its candidates' costs and those of events (LLM calls that gave no kernel)."""
    return sum(r.cost_usd for r in run.records) + sum(float(p.get("cost_usd") or 0.0) for _, _, p in run.events
                                                      if isinstance(p, dict))


def best(run: Run) -> Record | None:
    """The run's best kernel: the one it confirmed at the end, else the fittest correct candidate so far."""
    confirmed = _confirmed(run)
    if confirmed:
        return run.by_id[confirmed["id"]]
    correct = [r for r in run.finished if r.correct]
    return max(correct, key=lambda r: r.fitness or 0.0) if correct else None


def best_evaluation(run: Run) -> Evaluation | None:
    """The best's numbers: from the run's final judgement (baselines interleaved) when there is one."""
    confirmed = _confirmed(run)
    if confirmed and confirmed.get("evaluation"):
        return Evaluation.from_json(confirmed["evaluation"])
    b = best(run)
    return Evaluation.from_json(b.evaluation) if b and b.evaluation else None


def op(run: Run) -> tuple[Op, Evaluation | None] | None:
    """The run's assembled op and its judgement (the last `assembled` event); None when it has none."""
    found = [p for _, kind, p in run.events if kind == "assembled" and isinstance(p, dict) and p.get("op")]
    if not found:
        return None
    d = dict(found[-1]["op"])
    d["routes"] = tuple(OpRoute(**{**r, "configs": tuple(r["configs"]), "ci": tuple(r["ci"]) if r.get("ci") else None})
                        for r in d.get("routes") or ())
    d["kernels"] = tuple(d.get("kernels") or ())
    text = found[-1].get("evaluation")
    return Op(**d), Evaluation.from_json(text) if text else None


def ancestry(run: Run, cid: str) -> tuple[list[Record], list[tuple[str, str, str]]]:
    """(the candidate and its ancestors, oldest generation first; edges (parent, child, child's operator))."""
    by_id, seen, edges, todo = run.by_id, {}, [], [cid]
    while todo:
        c = todo.pop()
        if c in seen or c not in by_id:
            continue
        seen[c] = by_id[c]
        for p in by_id[c].candidate.parents:
            if p in by_id:
                edges.append((p, c, by_id[c].candidate.operator))
                todo.append(p)
    nodes = sorted(seen.values(), key=lambda r: (r.candidate.generation, r.candidate.created))
    return nodes, sorted(set(edges))


def founder(run: Run, cid: str) -> Record | None:
    by_id, r, hops = run.by_id, run.by_id.get(cid), 0
    while r is not None and r.candidate.parents and r.candidate.parents[0] in by_id and hops < len(by_id):
        r, hops = by_id[r.candidate.parents[0]], hops + 1
    return r


def rates(run: Run, key: str = "operator") -> dict[str, Counter]:
    """key (operator | model) -> Counter of outcomes (STATUS_ORDER) over candidates with a verdict."""
    out: dict[str, Counter] = {}
    for r in run.finished:
        k = (r.candidate.operator if key == "operator" else r.candidate.model) or "none"
        out.setdefault(k, Counter())[outcome(r)] += 1
    return dict(sorted(out.items()))


def summary_row(run: Run) -> dict[str, Any]:
    """One run, for the comparison table."""
    ev, points = best_evaluation(run), curve(run)
    return {"run": str(run.dir), "task": run.task, "target": run.target(), "candidates": len(run.finished),
            "correct": sum(1 for r in run.finished if r.correct),
            "speedup": ev.speedup if ev else None, "speedup_eager": ev.speedup_eager if ev else None,
            "speedup_compile": ev.speedup_compile if ev else None, "floor_fraction": ev.floor_fraction if ev else None,
            "seconds": points[-1].seconds if points else 0.0, "dollars": spend(run),
            "stopped": next((p.get("stopped") for _, k, p in reversed(run.events) if k == "finish"), "running or "
                                                                                                     "killed")}


def plan(run: Run) -> dict[str, Any]:
    """What the run turned on: its last `plan` event (resolved weights, verifiers, mode), else what its stored
    configuration says (runs older than that event: weights left null read as unresolved)."""
    for _, kind, p in reversed(run.events):
        if kind == "plan" and isinstance(p, dict):
            return p
    config = run.meta.get("config") or {}
    search, llm = config.get("search") or {}, config.get("llm") or {}
    return {"mode": search.get("mode", "evolve"), "llm": llm.get("provider", "none"),
            "operators": (search.get("population") or {}).get("operators") or {},
            "verifiers": list((search.get("verifiers") or {}).get("checks") or []),
            "candidates": search.get("candidates"), "wall_time_s": search.get("wall_time_s"),
            "dollars": search.get("dollars")}


def search_kind(run: Run) -> str:
    """A short name for how a run searched: its mode, and the LLM operators on or `knob only`."""
    p = plan(run)
    ops = [op for op, w in (p.get("operators") or {}).items() if w and op != "knob"]
    how = "best-of-N" if p.get("mode") == "best_of_n" else "evolution"
    return f"{how}, " + (f"LLM ({p.get('llm')}: {', '.join(ops)})" if ops else "knob only")


def best_within(run: Run, n: int) -> float:
    """The best fitness among the first `n` verdicts (0 when none was correct): runs compared at equal budget."""
    points = curve(run)[:n]
    return points[-1].best if points else 0.0


def compared(runs: list[Run]) -> tuple[int, list[dict[str, Any]], list[tuple[str, list[Any]]]]:
    """Runs side by side at the same budget: (n, one row per run, the configuration keys whose values differ).
    n is the fewest verdicts any run reached; each row holds the run's best fitness within its first n verdicts
    (`best_within`) beside its overall numbers, its LLM calls, LLM-made candidates judged and spend."""
    n = min((len(r.finished) for r in runs), default=0)
    rows = []
    for r in runs:
        made = [x for x in r.finished if x.candidate.model is not None]
        finish = next((p for _, k, p in reversed(r.events) if k == "finish" and isinstance(p, dict)), {})
        p = plan(r)
        rows.append({**summary_row(r), "search": search_kind(r), "best_at_n": best_within(r, n),
                     "llm_made": len(made), "llm_made_correct": sum(1 for x in made if x.correct),
                     "llm_calls": finish.get("llm_calls"),
                     "budget": (p.get("candidates"), p.get("wall_time_s"), p.get("dollars"))})
    flat = [_flatten(r.meta.get("config") or {}) for r in runs]
    keys = sorted({k for f in flat for k in f} - {"run_dir", "resume"})
    differ = [(k, [f.get(k) for f in flat]) for k in keys if len({repr(f.get(k)) for f in flat}) > 1]
    return n, rows, differ


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out
