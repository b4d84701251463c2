"""The run's record: one SQLite database, `<run_dir>/kevolve.db`, holding every candidate and its verdicts.

Tables: `run` (key → JSON value: task, target, config, command, started, schema, version), `candidates` (one row per
candidate: source, lineage, status, verdict/build/evaluation JSON, fitness, cost, per-stage seconds; the choice
policy's `arm` and the `reward` the child earned it; `screening`: the LLM verifiers' verdicts and the decision),
`measurements` (one row per candidate × configuration, for plain SQL), `events` (time, kind, JSON payload).

A candidate's status (`kevolve.messages.Status`) moves  pending → verified → built → evaluated, or stops at
rejected | build_failed | failed (an outcome outside the evaluation: an actor died, a timeout). `evaluated` means an
Evaluation came
back, correct or not. The four stopping states are terminal; `unfinished()` lists the others, which a
resumed run queues again. `finished()` lists the terminal ones in the order they finished, as
`(candidate, outcome)` pairs ready for `Population.restore`.

Guarantees: each write is one short transaction, committed before the call returns. The database is in WAL
mode with synchronous=NORMAL: killing the writing process at any moment (SIGKILL included) loses no
committed row and corrupts nothing; a power cut or an OS crash may lose the last few commits, not the file.
Spend (`total_cost`) is every candidate's cost plus the cost of events that carry one (an LLM reply that gave
no kernel is an event, `mutation_failed`, not a candidate). A version-1 database is upgraded in place on open
(three columns added). Secrets never enter `run` or `events`: keys that name one (api_key, token, password, secret,
credential…) at any depth
of the meta are written as "***".
Not guaranteed: concurrent writers. The driver is the only writer (one connection, in its process);
other processes may read (`Store.open(run_dir, readonly=True)`) while it writes.
"""
from __future__ import annotations

import dataclasses
import json
import sqlite3
import time
from pathlib import Path
from typing import Any, Mapping

from kevolve.judge.results import Evaluation
from kevolve.messages import Candidate, Status
from kevolve.record.dedupe import source_hash
from kevolve.record.events import Event, payload_of
from kevolve.record.read import TERMINAL, Reader, check_status
from kevolve.record.scrub import redact

DB_NAME = "kevolve.db"
SCHEMA_VERSION = 2

_SCHEMA = """
CREATE TABLE run (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE candidates (
    id TEXT PRIMARY KEY, parents TEXT NOT NULL, island INTEGER NOT NULL, generation INTEGER NOT NULL,
    operator TEXT NOT NULL, model TEXT, source TEXT NOT NULL, source_hash TEXT NOT NULL,
    created REAL NOT NULL, meta TEXT NOT NULL, status TEXT NOT NULL,
    verdict TEXT, build TEXT, evaluation TEXT, fitness REAL, correct INTEGER, compiled INTEGER,
    feedback TEXT, cost_usd REAL NOT NULL DEFAULT 0, timings TEXT NOT NULL DEFAULT '{}',
    done_seq INTEGER, updated REAL NOT NULL, arm TEXT, reward REAL, screening TEXT);
CREATE INDEX candidates_status ON candidates (status);
CREATE INDEX candidates_hash ON candidates (source_hash);
CREATE TABLE measurements (
    candidate_id TEXT NOT NULL REFERENCES candidates (id), config TEXT NOT NULL, shape TEXT, init TEXT,
    heldout INTEGER, correct INTEGER, kernel_ms REAL, eager_ms REAL, compile_ms REAL, floor_ms REAL,
    max_rel_err REAL, failure TEXT);
CREATE INDEX measurements_candidate ON measurements (candidate_id);
CREATE TABLE events (seq INTEGER PRIMARY KEY AUTOINCREMENT, time REAL NOT NULL, kind TEXT NOT NULL,
                     payload TEXT NOT NULL);
"""
_MIGRATIONS = {1: "ALTER TABLE candidates ADD COLUMN arm TEXT; ALTER TABLE candidates ADD COLUMN reward REAL; "
                  "ALTER TABLE candidates ADD COLUMN screening TEXT;"}


class StoreError(RuntimeError):
    """A run directory without a database, or with one this version of kevolve cannot read."""


def _json(value: Any) -> str | None:
    if value is None:
        return None
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    return json.dumps(value, default=str)


class Store(Reader):
    """The run's database: the writes, on top of the read model (`kevolve.record.read.Reader`). Build one with
    `Store.create` (new run) or `Store.open` (resume, or read)."""

    def __init__(self, conn: sqlite3.Connection, path: Path, readonly: bool = False):
        self._conn = conn
        self.path, self.readonly = path, readonly

    # ---- opening
    @staticmethod
    def _connect(path: Path, readonly: bool = False) -> sqlite3.Connection:
        uri = f"file:{path}?mode=ro" if readonly else f"file:{path}"
        conn = sqlite3.connect(uri, uri=True, timeout=30.0, isolation_level=None)
        if not readonly:
            conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA foreign_keys=ON")
        return conn

    @classmethod
    def create(cls, run_dir: str | Path, meta: Mapping[str, Any]) -> "Store":
        """A new database in run_dir (created if needed) holding the run's meta, secrets redacted."""
        path = Path(run_dir) / DB_NAME
        if path.exists():
            raise StoreError(f"{path} already exists: resume that run with Store.open, or choose a new run dir")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            store = cls(cls._connect(path), path)
        except (OSError, sqlite3.OperationalError) as e:
            raise StoreError(f"cannot create the run's database {path}: {e}; choose a run directory you can "
                             "write (run_dir=...)") from None
        store._conn.executescript(f"BEGIN; {_SCHEMA} PRAGMA user_version={SCHEMA_VERSION}; COMMIT;")
        store.set_meta({"started": time.time(), "schema": SCHEMA_VERSION, "version": _version(), **meta})
        return store

    @classmethod
    def open(cls, run_dir: str | Path, readonly: bool = False) -> "Store":
        """The database of an existing run; StoreError when missing or of another schema version."""
        path = Path(run_dir) / DB_NAME
        if not path.exists():
            raise StoreError(f"no {DB_NAME} in {run_dir}: nothing to resume there (start a new run instead)")
        try:
            conn = cls._connect(path, readonly)
            version = conn.execute("PRAGMA user_version").fetchone()[0]
        except sqlite3.DatabaseError as e:
            raise StoreError(f"{path} is not a readable kevolve database ({e})") from None
        if version in _MIGRATIONS and not readonly:
            conn.executescript(f"BEGIN; {_MIGRATIONS[version]} PRAGMA user_version={SCHEMA_VERSION}; COMMIT;")
            version = SCHEMA_VERSION
        if version != SCHEMA_VERSION:
            conn.close()
            raise StoreError(f"{path} has schema version {version}, this kevolve reads version {SCHEMA_VERSION}:"
                             f" use the kevolve version that wrote it, or start a new run")
        return cls(conn, path, readonly)

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _tx(self):
        if self.readonly:
            raise StoreError(f"{self.path} was opened read-only (Store.open(..., readonly=True)): it cannot be written")
        return _Transaction(self._conn, self.path)

    # ---- run meta and events
    def set_meta(self, meta: Mapping[str, Any]) -> None:
        with self._tx() as c:
            c.executemany("INSERT OR REPLACE INTO run (key, value) VALUES (?, ?)",
                          [(k, json.dumps(v, default=str)) for k, v in redact(meta).items()])

    def log_event(self, event: Event) -> None:
        """Appends an event (`kevolve.record.events`: its kind, its fields as the payload, secrets redacted)."""
        if not isinstance(event, Event):
            raise TypeError(f"log_event takes an event of kevolve.record.events, not {type(event).__name__}")
        with self._tx() as c:
            c.execute("INSERT INTO events (time, kind, payload) VALUES (?, ?, ?)",
                      (time.time(), event.KIND, json.dumps(redact(payload_of(event)), default=str)))

    # ---- writing candidates
    def add_candidate(self, c: Candidate, *, status: Status | str = Status.PENDING, cost_usd: float = 0.0,
                      timings: Mapping[str, float] | None = None, arm: str | None = None) -> None:
        """Records a new candidate (its mutation cost and seconds, if known, and the choice policy's arm)."""
        state = check_status(status)
        d = c.to_dict()
        with self._tx() as tx:
            tx.execute("INSERT INTO candidates (id, parents, island, generation, operator, model, source, source_hash,"
                       " created, meta, status, cost_usd, timings, updated, arm)"
                       " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                       (c.id, json.dumps(d["parents"]), c.island, c.generation, c.operator, c.model, c.source,
                        source_hash(c.source), c.created, json.dumps(redact(d["meta"])), state, float(cost_usd),
                        json.dumps(dict(timings or {})), time.time(), arm))
            if state in TERMINAL:
                self._finish(tx, c.id)

    def set_stage(self, cid: str, status: Status | str, *, verdict: Any = None, build: Any = None,
                  fitness: float | None = None, correct: bool | None = None, compiled: bool | None = None,
                  feedback: str | None = None, cost_usd: float = 0.0,
                  timings: Mapping[str, float] | None = None) -> None:
        """Moves a candidate to `status`, setting the fields given: verdict and build (dataclasses or dicts,
        stored as JSON), fitness/correct/compiled/feedback; `cost_usd` is added to the candidate's cost,
        `timings` merged into its per-stage seconds. rejected and build_failed set fitness 0, correct 0."""
        state = check_status(status)
        fields: dict[str, Any] = {"status": state, "updated": time.time()}
        if verdict is not None:
            fields["verdict"] = _json(verdict)
        if build is not None:
            fields["build"] = _json(build)
            ok = build.get("ok") if isinstance(build, Mapping) else getattr(build, "ok", None)
            if ok is not None and compiled is None:
                compiled = bool(ok)
            error = build.get("error") if isinstance(build, Mapping) else getattr(build, "error", None)
            if error and feedback is None:
                feedback = str(error)
        if state in ("rejected", "build_failed"):
            fitness, correct = 0.0, False
            compiled = False if compiled is None else compiled
        for name, value in (("fitness", fitness), ("correct", correct), ("compiled", compiled),
                            ("feedback", feedback)):
            if value is not None:
                fields[name] = int(value) if isinstance(value, bool) else value
        with self._tx() as tx:
            self._update(tx, cid, fields, cost_usd, timings)
            if state in TERMINAL:
                self._finish(tx, cid)

    def set_screening(self, cid: str, screening: Mapping[str, Any], cost_usd: float = 0.0) -> None:
        """Stores the LLM verifiers' verdicts and the decision taken on them; their cost is added."""
        with self._tx() as tx:
            self._update(tx, cid, {"screening": json.dumps(redact(screening), default=str), "updated": time.time()},
                         cost_usd, None)

    def set_reward(self, cid: str, reward: float) -> None:
        """The reward the candidate earned its arm (kevolve.operators.choice.reward), once it is judged."""
        with self._tx() as tx:
            self._update(tx, cid, {"reward": float(reward)}, 0.0, None)

    def record_evaluation(self, cid: str, evaluation: Evaluation, seconds: float) -> None:
        """Stores an Evaluation (status evaluated, correct or not) and one `measurements` row per configuration."""
        fields = {"status": "evaluated", "updated": time.time(), "evaluation": evaluation.to_json(),
                  "fitness": evaluation.fitness, "correct": int(evaluation.correct),
                  "compiled": int(evaluation.compiled), "feedback": evaluation.failure}
        rows = [(cid, m.config, m.shape, m.init, int(m.heldout), int(m.correct), _median(m.kernel),
                 _median(m.eager), _median(m.compile), m.floor_ms, m.max_rel_err, m.failure)
                for m in evaluation.measurements]
        with self._tx() as tx:
            self._update(tx, cid, fields, 0.0, {"evaluate": seconds})
            tx.execute("DELETE FROM measurements WHERE candidate_id = ?", (cid,))
            tx.executemany("INSERT INTO measurements VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", rows)
            self._finish(tx, cid)

    def _update(self, tx: sqlite3.Connection, cid: str, fields: dict[str, Any], cost_usd: float,
                timings: Mapping[str, float] | None) -> None:
        row = tx.execute("SELECT timings FROM candidates WHERE id = ?", (cid,)).fetchone()
        if row is None:
            raise KeyError(f"no candidate {cid!r} in {self.path}")
        if timings:
            fields["timings"] = json.dumps({**json.loads(row[0]), **timings})
        sets = ", ".join(f"{k} = ?" for k in fields)
        tx.execute(f"UPDATE candidates SET {sets}, cost_usd = cost_usd + ? WHERE id = ?",
                   (*fields.values(), float(cost_usd), cid))

    @staticmethod
    def _finish(tx: sqlite3.Connection, cid: str) -> None:
        tx.execute("UPDATE candidates SET done_seq = (SELECT COALESCE(MAX(done_seq), 0) + 1 FROM candidates)"
                   " WHERE id = ? AND done_seq IS NULL", (cid,))

class _Transaction:
    """BEGIN IMMEDIATE … COMMIT (ROLLBACK on an exception): one write, all or nothing. A write SQLite refuses
    (a full disk, a read-only file) is rolled back and raised as a StoreError that says what to do."""

    def __init__(self, conn: sqlite3.Connection, path: Path):
        self.conn, self.path = conn, path

    def __enter__(self) -> sqlite3.Connection:
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as e:
            raise _unwritable(self.path, e) from None
        return self.conn

    def __exit__(self, exc_type, exc, _tb) -> None:
        if exc_type is None:
            try:
                self.conn.execute("COMMIT")
                return
            except sqlite3.OperationalError as e:
                exc_type, exc = type(e), e
        if self.conn.in_transaction:
            self.conn.execute("ROLLBACK")
        if issubclass(exc_type, sqlite3.OperationalError):
            raise _unwritable(self.path, exc) from None


def _unwritable(path: Path, e: Exception) -> StoreError:
    return StoreError(f"cannot write to {path}: {e}. Nothing committed is lost: free some space (or make the "
                      f"file writable) and continue the run with resume={path.parent}")


def _median(stats) -> float | None:
    return stats.median if stats is not None else None


def _version() -> str:
    try:
        from importlib.metadata import version
        return version("kevolve")
    except Exception:           # not installed (run from a checkout, e.g. a copy on a GPU machine): its pyproject's
        import re
        from kevolve import ROOT
        try:
            got = re.search(r'(?m)^version\s*=\s*"([^"]+)"', (ROOT / "pyproject.toml").read_text())
        except OSError:
            got = None
        return f"{got.group(1)} (checkout)" if got else "unknown"
