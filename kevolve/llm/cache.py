"""The response cache: every reply of a run, in RUN_DIR/llm_cache.sqlite, keyed by what determines it.

The key is the sha256 of (provider, model, messages, the sampling parameters as sent, the caller's seed). The seed
is part of the key because a search asks the same prompt several times on purpose, for different samples; a
call with the same prompt, parameters and seed is the same sample. The endpoint URL is not part of the key, so a
run replays against any server (or none).

Guarantees: a hit returns the stored reply with cached=True, cost 0 and attempts 0, and makes no request;
`replay` mode (a read-only cache of another run) answers only from it and raises `ReplayMiss` naming the run
directory on a miss; writes are atomic per reply and safe from many threads; a row holds the prompt, the
parameters, the reply text and its usage, never a credential (nothing given to the cache holds one). Not
guaranteed: that a reply is still what the service would say today — that is the point of a replay.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Mapping, Optional

from kevolve.llm.config import CACHE_FILE
from kevolve.llm.errors import ReplayMiss
from kevolve.llm.messages import Message, Reply

_SCHEMA = """CREATE TABLE IF NOT EXISTS replies (
    key TEXT PRIMARY KEY, provider TEXT, model TEXT, params TEXT, seed INTEGER, messages TEXT, text TEXT,
    finish_reason TEXT, tokens_in INTEGER, tokens_out INTEGER, cost_usd REAL, seconds REAL, attempts INTEGER,
    created REAL)"""


def cache_key(provider: str, model: str, messages: tuple[Message, ...], params: Mapping[str, Any],
              seed: Optional[int]) -> str:
    blob = json.dumps({"provider": provider, "model": model, "messages": [[m.role, m.content] for m in messages],
                       "params": dict(params), "seed": seed}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


class Cache:
    """A SQLite file of replies. `readonly=True` opens another run's cache for replay."""

    def __init__(self, path: Path, *, readonly: bool = False):
        self.path = Path(path)
        self.readonly = readonly
        self._lock = threading.Lock()
        if readonly:
            self._db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, check_same_thread=False)
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(_SCHEMA)

    @classmethod
    def in_run(cls, run_dir: Path | str, *, readonly: bool = False) -> "Cache":
        return cls(Path(run_dir) / CACHE_FILE, readonly=readonly)

    def get(self, key: str) -> Optional[Reply]:
        with self._lock:
            row = self._db.execute("SELECT provider, model, params, text, finish_reason, tokens_in, tokens_out, "
                                   "seconds FROM replies WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        provider, model, params, text, finish, tokens_in, tokens_out, seconds = row
        return Reply(text=text, model=model, provider=provider, tokens_in=tokens_in, tokens_out=tokens_out,
                     cost_usd=0.0, seconds=seconds, cached=True, finish_reason=finish, params=json.loads(params),
                     attempts=0)

    def put(self, key: str, reply: Reply, messages: tuple[Message, ...], seed: Optional[int]) -> None:
        row = (key, reply.provider, reply.model, json.dumps(dict(reply.params), sort_keys=True), seed,
               json.dumps([dataclasses.asdict(m) for m in messages]), reply.text, reply.finish_reason,
               reply.tokens_in, reply.tokens_out, reply.cost_usd, reply.seconds, reply.attempts, time.time())
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO replies VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)", row)

    def total_cost(self) -> float:
        """USD of every reply stored here as fetched from the service (hits and replayed replies cost 0)."""
        with self._lock:
            return float(self._db.execute("SELECT COALESCE(SUM(cost_usd), 0) FROM replies").fetchone()[0])

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM replies").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()


def replay_miss(run_dir: Path | str, provider: str, model: str) -> ReplayMiss:
    return ReplayMiss(f"no cached reply for this prompt in {run_dir} ({provider} {model}): replay needs the same "
                      f"config and seed as the run that wrote it (llm.replay={run_dir})")
