"""Trackers record a run's metrics and lineage somewhere people look: the interface, the null one, and the guard.

`Tracker` is what the driver calls: `start(store, plan)` (any plan with a `target` and `evaluators`: `RunShape`) once
the run's store is open (a tracker reads the run's
meta there and keeps its own run id in it, so a resumed run continues the same tracked run), `candidate(row)`
after every verdict with `row(record)` of the stored record (`kevolve.record.rows`), `progress(stats)` now
and then with the population's numbers, `finish(summary)` with the run's summary while the store is still open.

`make_tracker(logger)` gives the tracker for `logger.kind` (a `LoggerConfig`, or just the kind): `none` gives
`NullTracker`, which does nothing with the same interface; `wandb` gives a `WandbTracker`
(`kevolve.tracking.wandb_tracker`) inside a `Guarded`.

Guaranteed: a tracker never stops a search. `Guarded` catches whatever a tracker raises (W&B absent, offline
files unwritable, a service down), says so once on stderr and in the store's events (`tracker_failed`), and
from then on is the null tracker; the store stays the run's record. Not guaranteed: that a tracker saw every
candidate (one that failed midway saw those before); the store has them all.
"""
from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING, Any

from kevolve.record.events import TrackerFailed
from kevolve.record.rows import row  # noqa: F401  (the driver builds candidate rows with it)
from kevolve.tracking.interface import NullTracker, RunShape, Tracker

if TYPE_CHECKING:
    from kevolve.config import LoggerConfig
    from kevolve.record.store import Store

__all__ = ["Guarded", "NullTracker", "RunShape", "Tracker", "make_tracker", "row"]

log = logging.getLogger("kevolve.tracking")


class Guarded:
    """A tracker that becomes the null one at its first failure, saying so once (stderr and the store)."""

    def __init__(self, inner: Tracker, name: str):
        self.inner, self.name = inner, name
        self.store: "Store | None" = None
        self.failed: str | None = None

    def _call(self, method: str, *args: Any) -> None:
        try:
            getattr(self.inner, method)(*args)
        except Exception as e:             # noqa: BLE001 — any tracker failure, by contract, ends the tracker only
            self._fail(method, e)

    def _fail(self, method: str, error: Exception) -> None:
        self.failed = f"{self.name} tracker failed in {method}: {type(error).__name__}: {str(error)[:300]}"
        print(f"warning: {self.failed}; the search goes on, its store is the record", file=sys.stderr, flush=True)
        log.debug("tracker failure", exc_info=error)
        close = getattr(self.inner, "close", None)
        self.inner = NullTracker()
        if close is not None:
            try:
                close()
            except Exception:              # noqa: BLE001 — already failed; nothing more to say
                pass
        if self.store is not None:
            try:
                self.store.log_event(TrackerFailed(tracker=self.name, method=method, error=self.failed))
            except Exception:              # noqa: BLE001 — the store reports its own errors where it matters
                pass

    def start(self, store: "Store", plan: "RunShape") -> None:
        self.store = store
        self._call("start", store, plan)

    def candidate(self, r: dict[str, Any]) -> None:
        self._call("candidate", r)

    def progress(self, stats: dict[str, Any]) -> None:
        self._call("progress", stats)

    def finish(self, summary: dict[str, Any]) -> None:
        self._call("finish", summary)


def make_tracker(logger: "LoggerConfig | str") -> Tracker:
    """The tracker for `logger.kind` (see the module's docstring); W&B not installed gives the null tracker
    and one warning."""
    from kevolve.config import LoggerConfig
    cfg = logger if isinstance(logger, LoggerConfig) else LoggerConfig(kind=str(logger))
    if cfg.kind == "none":
        return NullTracker()
    if cfg.kind == "wandb":
        try:
            from kevolve.tracking.wandb_tracker import WandbTracker
        except ImportError as e:
            print(f"warning: logger=wandb but W&B cannot be imported ({e}); the search goes on, its store is the "
                  "record (pip install wandb)", file=sys.stderr, flush=True)
            return NullTracker()
        return Guarded(WandbTracker(cfg), "wandb")
    raise ValueError(f"logger.kind {cfg.kind!r}: expected none or wandb")
