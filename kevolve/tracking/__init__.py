"""Trackers record a run's metrics and lineage somewhere people look. The interface, and the null one.

`Tracker` is what the driver calls: `start` once with the run's description, `candidate` after every verdict,
`progress` now and then, `finish` with the summary. `NullTracker` does nothing with the same interface, so a
run without a tracking service behaves the same (the run directory and its store are the record).
W&B comes with the tracking issue as another implementation of this interface.
"""
from __future__ import annotations

from typing import Any, Protocol


class Tracker(Protocol):
    def start(self, run: dict[str, Any]) -> None: ...
    def candidate(self, record: dict[str, Any]) -> None: ...
    def progress(self, stats: dict[str, Any]) -> None: ...
    def finish(self, summary: dict[str, Any]) -> None: ...


class NullTracker:
    def start(self, run: dict[str, Any]) -> None:
        pass

    def candidate(self, record: dict[str, Any]) -> None:
        pass

    def progress(self, stats: dict[str, Any]) -> None:
        pass

    def finish(self, summary: dict[str, Any]) -> None:
        pass


def make_tracker(kind: str) -> Tracker:
    """The tracker for `logger.kind`; config validation admits only `none` for now."""
    return NullTracker()
