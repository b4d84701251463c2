"""The tracker interface: what the driver calls (`Tracker`), what a tracker may read of the plan (`RunShape`), and
the tracker that does nothing with the same interface (`NullTracker`). See `kevolve.tracking` for the contract."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from kevolve.record.store import Store


class RunShape(Protocol):
    """What a tracker needs of the run's plan (`kevolve.search.plan.Plan` has it): where it runs and how wide."""
    @property
    def target(self) -> str: ...

    @property
    def evaluators(self) -> int: ...


class Tracker(Protocol):
    def start(self, store: "Store", plan: "RunShape") -> None: ...
    def candidate(self, r: dict[str, Any]) -> None: ...
    def progress(self, stats: dict[str, Any]) -> None: ...
    def finish(self, summary: dict[str, Any]) -> None: ...


class NullTracker:
    def start(self, store: "Store", plan: "RunShape") -> None:
        pass

    def candidate(self, r: dict[str, Any]) -> None:
        pass

    def progress(self, stats: dict[str, Any]) -> None:
        pass

    def finish(self, summary: dict[str, Any]) -> None:
        pass
