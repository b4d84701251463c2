"""The population of the search: islands of scored candidates, an elite archive, duplicate detection.

`Population` holds the candidates that reached a verdict with their `Outcome`, split into islands that
evolve apart and exchange their best every `migration_interval` additions (a ring: island i → i+1).

Guarantees:
- Deterministic: every random choice draws from the `random.Random` the caller passes in; the same calls
  with the same rng states give the same answers. Migration draws nothing (it copies each island's best).
- `Population.restore(config, records)` is exactly `add` of each record in order: a resumed run starts from
  the state the interrupted one had reached (selection counts of parents whose children never arrived are
  the one thing lost).
- Duplicates (`kevolve.record.dedupe`): two sources that differ only in comments or whitespace between
  tokens are one; `seen`/`reserve` cover sources already scored and sources in flight.
- `request(proposal, ...)` hands an LLM operator a complete `Request`: the parent's and the inspirations' judgements
  (`Member.evaluation`, kept since their verdicts) and the harness's feedback on the parent, as the store has
  them; nothing is read back from the store.
- `propose(rng, policy)` is the population's one decision per child: island, operator (and model, from the
  choice policy over operator × model, or the configured weights), parent, inspirations. An operator is only
  proposed when it can be served: repair needs a failed member, crossover two archive members, translate no
  parent at all (it writes from the torch reference).
- Best-of-N (`seeds_only`, `search.mode=best_of_n`): every parent is one of the task's seeds (operator `seed`),
  drawn uniformly (correct seeds first); no inspirations; repair and crossover are never served. Each child is
  then an independent sample from the seeds, whatever the population holds.
- Red-team candidates (operator `red_team`) are members — scored, counted — but never ranked: never the best,
  never in the archive, never a parent or an inspiration. An accepted one is a suspected judge bug, not a kernel.
- Size buckets (`buckets`, `kevolve.search.buckets`): per bucket, the correct ranked member with the highest speedup
  on that bucket's configurations (by its single judgement; the earliest among equals) is the bucket's champion
  (`bucket_champions`), whatever its geomean; with probability `bucket_parents` a parent is drawn uniformly from
  the distinct bucket champions instead of the tournament, so a kernel that wins on some sizes only has children.
  Without buckets (or before any correct member) no such draw is made and the rng stream is as it was.
- The archive holds at most `archive_size` correct candidates, the fittest first, at most `per_family` of
  one family. A family is founded by a candidate written from scratch (operator in `founders`: seed,
  translate, meta) or one whose first parent is unknown; every other candidate (optimize, knob, repair,
  crossover) joins its first parent's family. Knob variants of one kernel thus compete for a few slots.

Not guaranteed: that normalisation catches semantic duplicates (renamed variables, reordered statements);
that islands stay bounded (a candidate is never forgotten: runs are thousands of candidates, not millions).
No Ray, no torch: plain Python, safe to use anywhere.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from random import Random
from typing import Any, Iterable

from kevolve.config import PopulationConfig
from kevolve.messages import Candidate, Outcome, Proposal
from kevolve.operators.compose import Request
from kevolve.operators.registry import SPECS, spec, where
from kevolve.record.dedupe import source_hash
from kevolve.search.buckets import Buckets

NO_PARENT = where(parent="none")           # operators that write a kernel from scratch
REPAIR_WINDOW = 16                         # repair draws from the most recent failures


def red_team(c: Candidate) -> bool:
    """A red-team candidate (an operator whose children are never `ranked`): judged like any other, never ranked
    (see the module's guarantees)."""
    s = SPECS.get(c.operator)
    return s is not None and not s.ranked


@dataclass(frozen=True)
class Member:
    """A scored candidate as the population holds it."""
    candidate: Candidate
    outcome: Outcome
    family: str
    order: int                      # 0, 1, 2 ... in order of addition (ties go to the earlier)
    evaluation: Any = None          # the judge's Evaluation, when an evaluator judged it

    @property
    def fitness(self) -> float:
        return self.outcome.fitness


# ---------------------------------------------------------------- the population
class Population:
    """Islands of scored candidates, an elite archive, and the set of sources seen or in flight."""

    def __init__(self, config: PopulationConfig | None = None, seeds_only: bool = False,
                 buckets: Buckets | None = None):
        self.config = config or PopulationConfig(operators={"knob": 1.0})
        self.seeds_only = seeds_only
        self.buckets = buckets
        self._bucket_best: dict[str, tuple[Member, float]] = {}   # bucket -> (its champion, its speedup there)
        self._members: dict[str, Member] = {}
        self._islands: list[list[str]] = [[] for _ in range(self.config.islands)]
        self._ranked: list[Member] = []            # correct members, fittest first
        self._archive: list[Member] = []
        self._hashes: set[str] = set()             # sources scored
        self._pending: set[str] = set()            # sources in flight
        self._children: dict[str, int] = {}
        self._selected: dict[str, int] = {}        # selections whose child has not arrived
        self._since_migration = 0
        self.migrations = 0

    @classmethod
    def restore(cls, config: PopulationConfig | None, records: Iterable[tuple],
                seeds_only: bool = False, buckets: Buckets | None = None) -> "Population":
        """The population that adding `records` — (candidate, outcome[, evaluation]) — one by one, in order, gives
        (the resume path)."""
        pop = cls(config, seeds_only, buckets)
        for candidate, outcome, *evaluation in records:
            pop.add(candidate, outcome, *evaluation)
        return pop

    # ---- duplicates
    def seen(self, source: str) -> bool:
        """True when this source (up to comments and whitespace) was scored or is in flight."""
        h = source_hash(source)
        return h in self._hashes or h in self._pending

    def reserve(self, source: str) -> bool:
        """Marks the source in flight; False (and nothing marked) when it was already seen."""
        if self.seen(source):
            return False
        self._pending.add(source_hash(source))
        return True

    def release(self, source: str) -> None:
        """Forgets an in-flight source that will never be added (so that it may be tried again)."""
        self._pending.discard(source_hash(source))

    # ---- adding
    def add(self, candidate: Candidate, outcome: Outcome, evaluation: Any = None) -> Member:
        """Records a verdict (correct or not: failures are members too, for repair and statistics); `evaluation`:
        the judge's, when an evaluator judged it (what prompts on it quote)."""
        if candidate.id in self._members:
            raise ValueError(f"candidate {candidate.id} was already added")
        if not 0 <= candidate.island < self.config.islands:
            raise ValueError(f"candidate {candidate.id}: island {candidate.island} not in 0..{self.config.islands - 1}")
        member = Member(candidate, outcome, self._family(candidate), len(self._members), evaluation)
        self._members[candidate.id] = member
        self._islands[candidate.island].append(candidate.id)
        h = source_hash(candidate.source)
        self._pending.discard(h)
        self._hashes.add(h)
        for p in candidate.parents:
            self._children[p] = self._children.get(p, 0) + 1
        if candidate.parents and self._selected.get(candidate.parents[0], 0) > 0:
            self._selected[candidate.parents[0]] -= 1
        if outcome.correct and not red_team(candidate):
            bisect.insort(self._ranked, member, key=lambda m: (-m.fitness, m.order))
            self._rebuild_archive()
            self._offer_buckets(member)
        self._since_migration += 1
        if self._since_migration >= self.config.migration_interval:
            self.migrate()
        return member

    def _offer_buckets(self, member: Member) -> None:
        if self.buckets is None:
            return
        for bucket, speedup in self.buckets.fitness(member.evaluation).items():
            held = self._bucket_best.get(bucket)
            if held is None or speedup > held[1]:
                self._bucket_best[bucket] = (member, speedup)

    def _family(self, c: Candidate) -> str:
        if c.operator in self.config.founders or not c.parents or c.parents[0] not in self._members:
            return c.id
        return self._members[c.parents[0]].family

    def _rebuild_archive(self) -> None:
        archive, per = [], {}
        for m in self._ranked:
            if per.get(m.family, 0) < self.config.per_family:
                archive.append(m)
                per[m.family] = per.get(m.family, 0) + 1
                if len(archive) == self.config.archive_size:
                    break
        self._archive = archive

    def migrate(self) -> list[tuple[str, int]]:
        """Copies each island's best correct member to the next island (ring); returns (id, to island).
        Called by `add` every `migration_interval` additions; deterministic, so it needs no rng."""
        self._since_migration = 0
        n = len(self._islands)
        if n < 2:
            return []
        bests = [self._best_of(self._islands[i]) for i in range(n)]
        moved = []
        for i, best in enumerate(bests):
            dest = self._islands[(i + 1) % n]
            if best is not None and best.candidate.id not in dest:
                dest.append(best.candidate.id)
                moved.append((best.candidate.id, (i + 1) % n))
        self.migrations += 1
        return moved

    def _best_of(self, ids: Iterable[str]) -> Member | None:
        correct = [self._members[i] for i in ids if self._members[i].outcome.correct
                   and not red_team(self._members[i].candidate)]
        return min(correct, key=lambda m: (-m.fitness, m.order), default=None)

    # ---- choosing
    def select_parent(self, island: int, rng: Random) -> Candidate | None:
        """A tournament among the island's correct members, fitness discounted by how often each was used.

        Falls back, when the island has no correct member, to the correct members of every island (at the
        start, seeds), then to compiled ones (parents for repair), then to any; None when there is none."""
        if not 0 <= island < len(self._islands):
            raise ValueError(f"island {island} not in 0..{len(self._islands) - 1}")
        if self.seeds_only:
            return self._seed_parent(rng)
        if self._bucket_best and self.config.bucket_parents > 0 and rng.random() < self.config.bucket_parents:
            return self._chosen(rng.choice(self._bucket_parents()))
        here = [self._members[i] for i in self._islands[island] if not red_team(self._members[i].candidate)]
        everywhere = [m for m in self._members.values() if not red_team(m.candidate)]
        pool = ([m for m in here if m.outcome.correct] or [m for m in everywhere if m.outcome.correct]
                or [m for m in here if m.outcome.compiled] or [m for m in everywhere if m.outcome.compiled]
                or everywhere)
        if not pool:
            return None
        entrants = rng.choices(pool, k=self.config.tournament)     # with replacement: anyone may win
        winner = max(entrants, key=lambda m: (m.fitness / (1 + self.config.usage_penalty * self.uses(m)),
                                              -self.uses(m)))
        cid = winner.candidate.id
        self._selected[cid] = self._selected.get(cid, 0) + 1
        return winner.candidate

    def _bucket_parents(self) -> list[Member]:
        """The distinct bucket champions, in order of addition."""
        return sorted({m.candidate.id: m for m, _ in self._bucket_best.values()}.values(), key=lambda m: m.order)

    def _chosen(self, member: Member) -> Candidate:
        cid = member.candidate.id
        self._selected[cid] = self._selected.get(cid, 0) + 1
        return member.candidate

    def _seed_parent(self, rng: Random) -> Candidate | None:
        """Best-of-N: a seed, uniformly, among the correct seeds (else the compiled ones, else any)."""
        seeds = [m for m in self._members.values() if m.candidate.operator == "seed"]
        pool = [m for m in seeds if m.outcome.correct] or [m for m in seeds if m.outcome.compiled] or seeds
        if not pool:
            return None
        winner = rng.choice(pool)
        cid = winner.candidate.id
        self._selected[cid] = self._selected.get(cid, 0) + 1
        return winner.candidate

    def propose(self, rng: Random, policy: Any = None, only: Iterable[str] | None = None) -> Proposal | None:
        """What to make next: an island; an operator (with `policy`, a kevolve.operators.choice.Policy, its arm:
        operator and model; without, the configured operator weights) among those that can be served now (and are
        in `only`, when given: knob mutation alone while the LLM calls in flight are at their target); a
        parent for it (`select_parent`, a recent failure for repair, none for translate); and, with probability
        `inspiration_rate` (always for crossover, whose second parent is the first inspiration), up to
        `inspirations` archive members. None when no operator can be served (no member yet, say)."""
        island = rng.randrange(self.config.islands)
        weights = {op: w for op, w in self.config.weights.items()      # resolved by the plan: no null left
                   if w > 0 and (only is None or op in only) and self._servable(op)}
        if not weights:
            return None
        if policy is not None:
            arm = policy.choose(rng, allowed=list(weights))
            operator, model = arm.operator, arm.model
        else:
            operator, model = rng.choices(list(weights), weights=list(weights.values()))[0], None
        if operator in NO_PARENT:
            return Proposal(island, None, operator, (), model)
        s = spec(operator)
        parent = self._repair_parent(island, rng) if s.parent == "failed" else self.select_parent(island, rng)
        if parent is None:
            return None
        inspirations: tuple[Candidate, ...] = ()
        if not self.seeds_only and (s.second_parent or rng.random() < self.config.inspiration_rate):
            inspirations = tuple(self.inspirations(island, self.config.inspirations, rng, exclude=[parent.id]))
        if s.second_parent and not inspirations:
            return None
        return Proposal(island, parent, operator, inspirations, model)

    def request(self, proposal: Proposal, board, strategies_shown: int, meta_children: int,
                profiles: dict[str, str] | None = None, torch_source: str | None = None) -> Request:
        """An LLM operator's complete `Request` for `proposal`: the judgements its prompt may quote (the parent's and
        each inspiration's), the harness's feedback on the parent verbatim, the best `strategies_shown` strategies
        of `board`, the parent's Nsight Compute profile (`profiles`, "" until made), `meta_children` strategies
        for meta; `torch_source`: a translate founder's torch-extension kernel."""
        evaluations, feedback = {}, ""
        for c in ([proposal.parent] if proposal.parent is not None else []) + list(proposal.inspirations):
            member = self._members.get(c.id)
            if member is None:
                continue
            if member.evaluation is not None:
                evaluations[c.id] = member.evaluation
            if c is proposal.parent:
                feedback = member.outcome.feedback
        profile = (profiles or {}).get(proposal.parent.id, "") if proposal.parent is not None else ""
        return Request(proposal.operator, proposal, evaluations, feedback, profile=profile,
                       strategies=tuple(board.best(strategies_shown)), count=meta_children, torch_source=torch_source)

    def _servable(self, operator: str) -> bool:
        if operator in NO_PARENT:
            return True
        s = spec(operator)
        if self.seeds_only:
            return not s.dependent and any(m.candidate.operator == "seed" for m in self._members.values())
        if s.parent == "failed":
            return bool(self._failures())
        if s.second_parent:
            return len(self._archive) >= 2
        return any(not red_team(m.candidate) for m in self._members.values())

    def _failures(self) -> list[Member]:
        """Members a repair can start from: incorrect, with the harness's feedback, not red-team; the most
        recent `REPAIR_WINDOW`."""
        failed = [m for m in self._members.values() if not m.outcome.correct and m.outcome.feedback
                  and not red_team(m.candidate) and m.candidate.source.strip()]
        return failed[-REPAIR_WINDOW:]

    def _repair_parent(self, island: int, rng: Random) -> Candidate | None:
        """A recent failure, this island's first, the least used first (a failure is repaired once before any
        is repaired twice)."""
        failed = self._failures()
        pool = [m for m in failed if m.candidate.island == island] or failed
        if not pool:
            return None
        least = min(self.uses(m) for m in pool)
        winner = rng.choice([m for m in pool if self.uses(m) == least])
        cid = winner.candidate.id
        self._selected[cid] = self._selected.get(cid, 0) + 1
        return winner.candidate

    def uses(self, member: Member | str) -> int:
        cid = member if isinstance(member, str) else member.candidate.id
        return self._children.get(cid, 0) + self._selected.get(cid, 0)

    def inspirations(self, island: int, k: int, rng: Random, exclude: Iterable[str] = ()) -> list[Candidate]:
        """Up to k archive members, fittest first: this island's before others, one per family before a
        second of any family; `exclude` (ids, e.g. the parent) never appears."""
        excluded = set(exclude)
        pool = [m for m in self._archive if m.candidate.id not in excluded]
        on_island = set(self._islands[island])
        chosen: list[Member] = []
        for group in ([m for m in pool if m.candidate.id in on_island],
                      [m for m in pool if m.candidate.id not in on_island]):
            group = rng.sample(group, len(group))
            families = {m.family for m in chosen}
            firsts = []
            for m in group:
                if m.family not in families:
                    firsts.append(m)
                    families.add(m.family)
            first_ids = {m.candidate.id for m in firsts}
            rest = [m for m in group if m.candidate.id not in first_ids]
            chosen.extend((firsts + rest)[: k - len(chosen)])
        chosen.sort(key=lambda m: (-m.fitness, m.order))
        return [m.candidate for m in chosen]

    # ---- reading
    def __len__(self) -> int:
        return len(self._members)

    def __contains__(self, cid: str) -> bool:
        return cid in self._members

    def get(self, cid: str) -> Member:
        return self._members[cid]

    def island(self, i: int) -> list[Member]:
        return [self._members[cid] for cid in self._islands[i]]

    @property
    def archive(self) -> list[Member]:
        return list(self._archive)

    def best(self) -> Member | None:
        """The fittest correct member (the earliest among equals); None before any correct one."""
        return self._ranked[0] if self._ranked else None

    def bucket_champions(self) -> dict[str, tuple[Member, float]]:
        """Per size bucket, its champion and the speedup there (by single judgements; see the module)."""
        return dict(self._bucket_best)

    def stats(self) -> dict[str, Any]:
        """Numbers for the log: totals, per island, archive, in flight."""
        best = self.best()
        islands = []
        for i, ids in enumerate(self._islands):
            ms = [self._members[c] for c in ids]
            b = self._best_of(ids)
            islands.append({"island": i, "members": len(ms), "correct": sum(m.outcome.correct for m in ms),
                            "best_fitness": b.fitness if b else 0.0})
        n = len(self._members)
        return {"candidates": n, "correct": len(self._ranked),
                "correct_frac": len(self._ranked) / n if n else 0.0,
                "best_fitness": best.fitness if best else 0.0, "best_id": best.candidate.id if best else None,
                "archive": len(self._archive), "families": len({m.family for m in self._members.values()}),
                "pending": len(self._pending), "migrations": self.migrations, "islands": islands,
                "buckets": {b: {"id": m.candidate.id, "speedup": f} for b, (m, f) in self._bucket_best.items()}}
