"""A recorded run, replayed (`llm.replay=RUN_DIR`): its candidates, in the order they were made, as the steps
of a new run that makes no LLM request.

A live search's prompts quote measured times, and its choices follow the order in which verdicts arrive, so
no second run asks the same prompts by itself. Replay therefore re-issues the recorded run's own steps: its
seeds (same ids), then each candidate in creation order — a knob child with its recorded source, an LLM child as
the `Request` that made it (operator, parent, second parent, strategy) answered by its recorded reply, looked up
by the call's response-cache key (`Mutation.meta["call"]`) and parsed again. Verifier calls need no such help:
their messages depend only on the source and their seeds on the run's seed and the source, so the replayed
run's verifiers hit the recorded run's cache as they are. Every child is built and judged anew.

Guarantees: the replayed run holds the same candidates (ids, lineage, sources) as the recorded one, and the same
LLM verdicts, with no network and no key; a reply missing from the cache is that child's recorded failure.
Not guaranteed: the same fitness (it is measured again) or the same best, where two kernels time alike.
"""
from __future__ import annotations

from pathlib import Path

from kevolve.messages import Candidate, Proposal
from kevolve.operators.compose import Request
from kevolve.search.learning import strategy_of
from kevolve.record.read import Record
from kevolve.record.store import Store


class Recorded:
    def __init__(self, run_dir: str | Path):
        with Store.open(run_dir, readonly=True) as store:
            self.records = store.candidates()
        self._by_id = {r.candidate.id: r.candidate for r in self.records}
        self._steps = [r for r in self.records if r.candidate.operator != "seed"]
        self._next = 0

    def seeds(self) -> list[Candidate]:
        return [r.candidate for r in self.records if r.candidate.operator == "seed"]

    def __len__(self) -> int:
        return len(self.records)

    def skip(self, ids: set[str]) -> None:
        """Steps already taken (a resumed replay)."""
        self._steps = [r for r in self._steps if r.candidate.id not in ids]

    def next(self) -> Record | None:
        if self._next >= len(self._steps):
            return None
        self._next += 1
        return self._steps[self._next - 1]

    def request(self, c: Candidate) -> tuple[Request, str] | None:
        """The request that made an LLM child, and its call's cache key; None for a child made without an LLM."""
        meta = c.meta_dict()
        if not meta.get("call"):
            return None
        parent = self._by_id.get(c.parents[0]) if c.parents else None
        second = meta.get("second_parent")
        ids = ([second] if second else []) + [i for i in meta.get("inspirations", []) if i != second]
        inspirations = tuple(self._by_id[i] for i in ids if i in self._by_id)
        proposal = Proposal(c.island, parent, c.operator, inspirations)
        return Request(c.operator, proposal, strategy=strategy_of(meta)), meta["call"]
