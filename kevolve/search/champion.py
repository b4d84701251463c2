"""The champion: the kernel a search reports as its best, replaced only on evidence beyond noise.

Every judgement times a candidate against torch, so fitnesses of two candidates measured minutes apart differ by
noise as much as by merit. A candidate whose fitness beats the champion's becomes a challenger; the driver has
the two timed paired and interleaved in one worker (`judge.harness.compare`, every call of both checked) and
`settle`s: the challenger takes over only when the 95% interval of its time over the champion's lies below 1.
An interval that holds 1 is a tie, recorded (the summary names the kernels indistinguishable from the best);
a failed comparison keeps the champion. One comparison at a time; challengers wait, fittest first, and one that
no longer beats the champion's fitness when its turn comes is dropped.

Pure bookkeeping: no Ray, no timing. Not guaranteed: that the champion is the fittest candidate of the
population (that ranking, by single judgements, still chooses parents).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kevolve.judge.results import Comparison, Evaluation
from kevolve.messages import Candidate


@dataclass
class Entry:
    candidate: Candidate
    evaluation: Evaluation
    build: Any = None          # a Build, or a ref to one (Ray resolves either); None until rebuilt
    lib: Any = None            # a ref to the library's bytes; None until rebuilt


@dataclass
class Champion:
    paired: bool = True                    # False: a fitter candidate takes over at once (no comparison)
    current: Entry | None = None
    challengers: list[Entry] = field(default_factory=list)
    pending: Entry | None = None           # the challenger being compared
    ties: list[str] = field(default_factory=list)        # candidates indistinguishable from the champion
    comparisons: int = 0

    def offer(self, entry: Entry) -> bool:
        """A correct candidate's verdict. True when it is crowned at once (there was no champion, or it is
        fitter and comparisons are off)."""
        if self.current is None or (not self.paired and entry.evaluation.fitness > self.current.evaluation.fitness):
            self.current = entry
            return True
        if entry.evaluation.fitness > self.current.evaluation.fitness:
            self.challengers.append(entry)
        return False

    def next_challenge(self) -> Entry | None:
        """The challenger to compare now (fittest first), or None while one is being compared or none beats
        the champion's fitness any more."""
        if self.pending is not None or self.current is None:
            return None
        self.challengers.sort(key=lambda e: -e.evaluation.fitness)
        while self.challengers:
            entry = self.challengers.pop(0)
            if entry.evaluation.fitness > self.current.evaluation.fitness:
                self.pending = entry
                return entry
        return None

    def settle(self, comparison: Comparison | None) -> str:
        """The pending challenger's comparison (a = challenger, b = champion; None: it could not be had):
        "replaced", "tie" or "kept"."""
        entry, self.pending = self.pending, None
        self.comparisons += 1
        if comparison is not None and comparison.faster == "a":
            self.ties = []
            self.current = entry
            return "replaced"
        if comparison is not None and comparison.failure is None and comparison.indistinguishable:
            self.ties.append(entry.candidate.id)
            return "tie"
        return "kept"

    def cancel(self) -> None:
        """In-flight work was cancelled: the pending comparison will not come back."""
        if self.pending is not None:
            self.challengers.append(self.pending)
            self.pending = None
