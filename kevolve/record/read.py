"""The read model of a run's record: `Record` (one candidate's row, decoded), `Reader` (the queries over the
database: candidates by status and order, the best, counts, spend, events, rewards) and what is derived from the
records alone (`lineage`, `confusion`).

Guaranteed: nothing here writes; a `Reader` works on a connection opened read-only (`Store.open(run_dir,
readonly=True)`) while the driver writes. `finished()` lists the terminal candidates in the order they got there,
`unfinished()` the others (the resume queue). Not guaranteed: a consistent view across two calls while a writer
commits between them.
"""
from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from kevolve.messages import Candidate, Outcome, Status
from kevolve.record.events import E, event_of

STATUSES = tuple(s.value for s in Status)
TERMINAL = tuple(s.value for s in Status if s.terminal)


def _loads(text: str | None) -> Any:
    return json.loads(text) if text else None


@dataclass(frozen=True)
class Record:
    """One row of `candidates`, decoded. `evaluation` is the Evaluation's JSON text (`Evaluation.from_json`)."""
    candidate: Candidate
    status: str
    source_hash: str
    fitness: float | None
    correct: bool | None
    compiled: bool | None
    feedback: str | None
    verdict: Any
    build: Any
    evaluation: str | None
    cost_usd: float
    timings: dict[str, float]
    updated: float
    arm: str | None = None
    reward: float | None = None
    screening: Any = None

    @property
    def outcome(self) -> Outcome:
        return Outcome(self.fitness or 0.0, bool(self.correct), bool(self.compiled), self.feedback or "")


_COLUMNS = ("id, parents, island, generation, operator, model, source, created, meta, status, source_hash, "
            "fitness, correct, compiled, feedback, verdict, build, evaluation, cost_usd, timings, updated, "
            "arm, reward, screening")


def _record(row: tuple) -> Record:
    (cid, parents, island, generation, operator, model, source, created, meta, status, source_hash,
     fitness, correct, compiled, feedback, verdict, build, evaluation, cost, timings, updated, arm, reward,
     screening) = row
    candidate = Candidate(id=cid, source=source, parents=tuple(json.loads(parents)), island=island,
                          generation=generation, operator=operator, model=model, created=created,
                          meta=json.loads(meta))
    return Record(candidate, status, source_hash, fitness, None if correct is None else bool(correct),
                  None if compiled is None else bool(compiled), feedback, _loads(verdict), _loads(build),
                  evaluation, cost, json.loads(timings), updated, arm, reward, _loads(screening))


class Reader:
    """The queries over a run's database (`Store` adds the writes)."""
    _conn: sqlite3.Connection
    path: Path

    def meta(self) -> dict[str, Any]:
        return {k: json.loads(v) for k, v in self._conn.execute("SELECT key, value FROM run")}

    def events(self, kind: str | None = None) -> list[tuple[float, str, Any]]:
        rows = self._conn.execute("SELECT time, kind, payload FROM events WHERE ? IS NULL OR kind = ? ORDER BY seq",
                                  (kind, kind))
        return [(t, k, json.loads(p)) for t, k, p in rows]

    def events_of(self, cls: type[E]) -> list[E]:
        """The events of one kind, typed (`kevolve.record.events`), oldest first."""
        return [event_of(cls, p) for _, _, p in self.events(cls.KIND)]

    def rewards(self) -> list[tuple[str, float]]:
        """(arm, reward) of every rewarded candidate and failed proposal, in the order they were rewarded: what
        `Policy.replay` rebuilds a choice policy from."""
        rows = [(seq, arm, r) for seq, arm, r in self._conn.execute(
            "SELECT done_seq, arm, reward FROM candidates WHERE arm IS NOT NULL AND reward IS NOT NULL")]
        return [(arm, r) for _, arm, r in sorted(rows, key=lambda x: x[0] or 0)] + [
            (p["arm"], float(p.get("reward", 0.0))) for _, _, p in self.events("mutation_failed") if p.get("arm")]

    def _select(self, where: str = "", params: Iterable[Any] = (), order: str = "rowid",
                limit: int = -1) -> list[Record]:
        where = f"WHERE {where}" if where else ""
        sql = f"SELECT {_COLUMNS} FROM candidates {where} ORDER BY {order} LIMIT {int(limit)}"
        return [_record(r) for r in self._conn.execute(sql, tuple(params))]

    def get(self, cid: str) -> Record:
        found = self._select("id = ?", (cid,))
        if not found:
            raise KeyError(f"no candidate {cid!r} in {self.path}")
        return found[0]

    def candidates(self, status: str | None = None) -> list[Record]:
        """All candidates (or those with `status`) in the order they were added."""
        return self._select("status = ?", (check_status(status),)) if status is not None else self._select()

    def evaluated(self) -> list[Record]:
        """Candidates with an Evaluation, in the order the evaluations came back."""
        return self._select("status = 'evaluated'", order="done_seq")

    def finished(self) -> list[Record]:
        """Candidates in a terminal status, in the order they got there: `Population.restore`'s input is
        `[(r.candidate, r.outcome) for r in store.finished()]`."""
        return self._select("done_seq IS NOT NULL", order="done_seq")

    def unfinished(self) -> list[Record]:
        """Candidates still pending, verified or built, in the order they were added: the resume queue."""
        return self._select("done_seq IS NULL")

    def best(self, n: int = 1) -> list[Record]:
        """The n fittest correct candidates (earliest first among equals)."""
        return self._select("correct = 1 AND operator != 'red_team'", order="fitness DESC, done_seq", limit=n)

    def counts(self) -> dict[str, int]:
        return dict(self._conn.execute("SELECT status, COUNT(*) FROM candidates GROUP BY status"))

    def total_cost(self) -> float:
        """USD spent on LLM calls: candidates' costs plus the costs events carry (failed proposals)."""
        cands = self._conn.execute("SELECT COALESCE(SUM(cost_usd), 0) FROM candidates").fetchone()[0]
        events = self._conn.execute("SELECT COALESCE(SUM(json_extract(payload, '$.cost_usd')), 0) FROM events "
                                    "WHERE json_extract(payload, '$.cost_usd') IS NOT NULL").fetchone()[0]
        return float(cands) + float(events)

    def hashes(self) -> set[str]:
        return {h for (h,) in self._conn.execute("SELECT source_hash FROM candidates")}

    def integrity(self) -> str:
        """SQLite's `PRAGMA integrity_check`: "ok" for a sound database."""
        return self._conn.execute("PRAGMA integrity_check").fetchone()[0]


def check_status(status: Status | str) -> str:
    """`status`'s value if it names a Status; ValueError listing them if not."""
    try:
        return Status(status).value
    except ValueError:
        raise ValueError(f"status {status!r} is not one of {', '.join(STATUSES)}") from None


def confusion(records: Iterable[Record]) -> dict[str, dict[str, int]]:
    """verifier -> counts: tp (said fail, was bad), fp (said fail, was good), fn (said pass, was bad), tn,
    no_verdict, unobserved (the judge could not tell) — over candidates that were judged (built)."""
    from kevolve.operators.screening import truth
    out: dict[str, dict[str, int]] = {}
    for r in records:
        screening = getattr(r, "screening", None) or {}
        if not screening.get("verdicts") or r.status not in ("evaluated", "build_failed"):
            continue
        for v in screening["verdicts"]:
            c = out.setdefault(v["verifier"], dict(tp=0, fp=0, fn=0, tn=0, no_verdict=0, unobserved=0))
            bad = truth(v["verifier"], bool(r.compiled), bool(r.correct), r.feedback)
            if v.get("passed") is None:
                c["no_verdict"] += 1
            elif bad is None:
                c["unobserved"] += 1
            else:
                c[("tp" if bad else "fp") if v["passed"] is False else ("fn" if bad else "tn")] += 1
    return dict(sorted(out.items()))


def lineage(records: Iterable[Record]) -> list[dict[str, Any]]:
    """One row per edge parent -> child (a founder: one row with parent ""), with the child's operator and result."""
    rows = []
    for r in records:
        c = r.candidate
        base = {"child": c.id, "operator": c.operator, "model": c.model or "", "island": c.island,
                "generation": c.generation, "fitness": r.fitness or 0.0, "correct": bool(r.correct),
                "status": r.status}
        rows += [{"parent": p, **base} for p in (c.parents or ("",))]
    return rows
