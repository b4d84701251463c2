"""The champion: the kernel a search reports as its best, replaced only on evidence beyond noise.

Every judgement times a candidate against torch, so fitnesses of two candidates measured minutes apart differ by
noise as much as by merit. A candidate whose fitness beats the champion's becomes a challenger; the driver has
the two timed paired and interleaved in one worker (`judge.evaluator.harness.compare`, every call of both checked) and
`settle`s: the challenger takes over only when the 95% interval of its time over the champion's lies below 1.
An interval that holds 1 is a tie, recorded (the summary names the kernels indistinguishable from the best), and
it raises the *bar* a later challenger must beat to the tied challenger's fitness: the champion was shown as fast
as a kernel judged that fit, so a judgement no fitter is no evidence of being faster (docs/decisions/search.md).
A failed comparison keeps the champion. One comparison at a time; challengers wait,
fittest first, and one that no longer beats the bar when its turn comes is dropped. Comparisons take at most
`share` of the evaluators' time (`search.compare_share`): past it, challengers wait for judgements to catch up,
and the fittest one left is compared at the finish (`finishing`).

`PerBucket` keeps a champion per size bucket in the same way, each ranked by the speedup on its bucket's
configurations and compared on those alone: the fastest kernel per size is kept whatever its geomean.

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
    score: float | None = None  # what this contest ranks by (a size bucket's speedup); None: the geomean fitness

    @property
    def fitness(self) -> float:
        return self.evaluation.fitness if self.score is None else self.score


@dataclass
class Champion:
    paired: bool = True                    # False: a fitter candidate takes over at once (no comparison)
    current: Entry | None = None
    challengers: list[Entry] = field(default_factory=list)
    pending: Entry | None = None           # the challenger being compared
    ties: list[str] = field(default_factory=list)        # candidates indistinguishable from the champion
    comparisons: int = 0
    share: float = 1.0                     # of the evaluators' busy time, comparisons may take at most this
    bar: float = 0.0                       # the fitness a challenger must beat: the champion's, or a tied one's
    compare_s: float = 0.0                 # evaluator seconds spent comparing / judging (`spent`)
    judge_s: float = 0.0

    def offer(self, entry: Entry) -> bool:
        """A correct candidate's verdict. True when it is crowned at once (there was no champion, or it is
        fitter and comparisons are off)."""
        if self.current is None or (not self.paired and entry.fitness > self.current.fitness):
            self.crown(entry)
            return True
        if entry.fitness > self.bar:
            self.challengers.append(entry)
        return False

    def crown(self, entry: Entry) -> None:
        """`entry` is the champion now (also a champion restored on resume); the bar is its fitness."""
        self.current, self.bar, self.ties = entry, entry.fitness, []

    def spent(self, judging: float = 0.0, comparing: float = 0.0) -> None:
        """Evaluator seconds spent on a judgement or a comparison: what `share` is measured against."""
        self.judge_s += judging
        self.compare_s += comparing

    def within_share(self) -> bool:
        return self.compare_s <= self.share * (self.compare_s + self.judge_s)

    def next_challenge(self, finishing: bool = False) -> Entry | None:
        """The challenger to compare now (fittest first), or None while one is being compared, comparisons have
        had their share of the time (unless `finishing`: the search is over, one last comparison), or none beats
        the bar any more."""
        if self.pending is not None or self.current is None or not (finishing or self.within_share()):
            return None
        self.challengers.sort(key=lambda e: -e.fitness)
        while self.challengers:
            entry = self.challengers.pop(0)
            if entry.fitness > self.bar:
                self.pending = entry
                return entry
        return None

    def settle(self, comparison: Comparison | None) -> str:
        """The pending challenger's comparison (a = challenger, b = champion; None: it could not be had):
        "replaced", "tie" or "kept"."""
        entry, self.pending = self.pending, None
        self.comparisons += 1
        if comparison is not None and comparison.faster == "a":
            self.crown(entry)
            return "replaced"
        if comparison is not None and comparison.failure is None and comparison.indistinguishable:
            self.ties.append(entry.candidate.id)
            self.bar = max(self.bar, entry.fitness)
            return "tie"
        return "kept"

    def cancel(self) -> None:
        """In-flight work was cancelled: the pending comparison will not come back."""
        if self.pending is not None:
            self.challengers.append(self.pending)
            self.pending = None


@dataclass
class PerBucket:
    """A `Champion` per size bucket (`kevolve.search.buckets`): each ranks by the speedup on its bucket's
    configurations (`Entry.score`) and is replaced, like the geomean's, only on paired evidence timed on that
    bucket's configurations alone. Challenges are taken in turn across the buckets; the caller keeps them to one
    comparison in flight and to the comparisons' share of the time (the geomean champion's accounting). `fastest`
    is, per bucket, the entry scored highest there by its own judgement, compared or not."""
    champions: dict[str, Champion] = field(default_factory=dict)
    turn: int = 0
    fastest: dict[str, Entry] = field(default_factory=dict)
    waiting: int = 4                       # challengers kept per bucket, the fittest (each holds a library ref)

    def offer(self, bucket: str, entry: Entry) -> bool:
        """`entry` (scored on `bucket`) offered to that bucket's champion; True when it is crowned at once. Only
        the `waiting` fittest challengers of a bucket are kept."""
        if bucket not in self.fastest or entry.fitness > self.fastest[bucket].fitness:
            self.fastest[bucket] = entry
        champion = self.champions.setdefault(bucket, Champion())
        crowned = champion.offer(entry)
        champion.challengers = sorted(champion.challengers, key=lambda e: -e.fitness)[: self.waiting]
        return crowned

    def pending(self) -> str | None:
        """The bucket whose comparison is in flight, if any."""
        return next((b for b, c in self.champions.items() if c.pending is not None), None)

    def next_challenge(self) -> tuple[str, Entry] | None:
        """The next bucket in turn with a challenger that beats its bar, and that challenger (now pending)."""
        if self.pending() is not None:
            return None
        names = sorted(self.champions)
        for k in range(len(names)):
            bucket = names[(self.turn + k) % len(names)]
            entry = self.champions[bucket].next_challenge(finishing=True)    # the caller keeps to the share
            if entry is not None:
                self.turn = (self.turn + k + 1) % len(names)
                return bucket, entry
        return None

    def current(self) -> dict[str, Entry]:
        return {b: c.current for b, c in self.champions.items() if c.current is not None}

    def cancel(self) -> None:
        for c in self.champions.values():
            c.cancel()
