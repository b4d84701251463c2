"""What a correct verdict leads to, and what else the evaluators do for the search: a correct red-team child is saved
as a suspected judge bug (`suspects`), never ranked; any other correct child is offered to the champion and, scored
per size bucket, to each bucket's champion (`champion.PerBucket`; with more than one bucket judged), and paired
comparisons of a challenger with its champion are sent and recorded (`champion.Champion` decides; a bucket's
comparison times that bucket's configurations alone); Nsight Compute profiles of parents (`profile`) are made for
later prompts on that parent.

Guarantees: the reported best, and each bucket's champion, is replaced only on paired evidence (`Champion.settle`),
each `compare` event names both kernels, the outcome and the bucket (none: the geomean's); one comparison is in
flight at a time, the geomean's and the buckets' challenges in turn, and all of them share `search.compare_share`; a
comparison that could not be made keeps the champion; a parent is profiled at most once (`profiles[id]` is "" from
the moment it is asked for), a failed profile leaves prompts without one.
"""
from __future__ import annotations

from typing import Callable

from kevolve.judge.build import SUFFIX
from kevolve.judge.results import Evaluation
from kevolve.messages import Candidate, Proposal
from kevolve.operators.registry import where
from kevolve.search import suspects
from kevolve.search.champion import Champion, Entry, PerBucket
from kevolve.search.jobs import Comparing, Judging, Profiling, Tally
from kevolve.search.pipeline import Pipeline
from kevolve.search.population import red_team
from kevolve.record import events

PROFILED = where(profiled=True)        # the operators whose prompts show a parent's profile


class Contest:
    def __init__(self, plan, store, run_dir, pipeline: Pipeline, champion: Champion, tally: Tally,
                 crowned: Callable[[Candidate, object], None]):
        self.plan, self.store, self.run_dir, self.pipeline = plan, store, run_dir, pipeline
        self.champion, self.tally = champion, tally
        self.crowned = crowned                      # the driver's: a new best (written, logged, shown)
        self.finishing = False                      # the loop is over: no comparison but the finish's own
        self.profiles: dict[str, str] = {}          # candidate id -> its Nsight Compute profile ("" until made)
        self.suspects: list[str] = []               # accepted red-team candidates
        self.buckets = PerBucket()                  # a champion per size bucket (plan.buckets)
        judged = plan.buckets.judged() if getattr(plan, "buckets", None) is not None else []
        self.sized = len(judged) > 1                # one bucket is the geomean's contest again
        self.buckets_next = False                   # whose challenge comes next: the buckets' or the geomean's

    def routes(self) -> dict:
        """The records this part owns -> (the handler of their result, of their error: no comparison keeps the
        champion, no profile leaves prompts without one)."""
        return {Comparing: (self.compared, lambda job, error: self.compared(job, None)),
                Profiling: (self.profiled, lambda job, error: self.profiled(job, None))}

    # ------------------------------------------------------------------ the champion
    def judged(self, job: Judging, ev) -> None:
        """A judgement's verdict, once recorded: a correct red-team child is saved (`suspects`: for a regression
        test, reported); any other correct one is the champion at once (none yet, or unpaired), or a challenger."""
        c = job.candidate
        self.champion.spent(judging=ev.eval_seconds)   # what the comparisons' share is measured against
        if ev.correct and red_team(c):
            folder = suspects.save(self.run_dir, c, ev, SUFFIX[self.plan.target])
            self.suspects.append(c.id)
            self.store.log_event(events.SuspectedJudgeBug(id=c.id, speedup=ev.speedup, dir=str(folder)))
        elif ev.correct:
            self.tally.correct += 1
            if self.champion.offer(Entry(c, ev, job.built.build, job.built.lib)):
                self.crowned(c, ev)
            if self.sized:
                for bucket, score in sorted(self.plan.buckets.fitness(ev).items()):
                    if self.buckets.offer(bucket, Entry(c, ev, job.built.build, job.built.lib, score)):
                        self.store.log_event(events.BucketChampion(bucket=bucket, id=c.id, speedup=score))
            self.challenge()

    def challenge(self, finishing: bool = False):
        """Starts the next paired comparison of a challenger with the champion (`search.champion`); returns its
        reference, or None. `finishing`: the loop is over, the fittest challenger left is compared regardless of
        the comparisons' share of the time."""
        if (self.finishing and not finishing) or self.buckets.pending() is not None:
            return None
        entry, bucket = None, None
        for kind in (("bucket", "geomean") if self.buckets_next else ("geomean", "bucket")):
            if kind == "geomean":
                entry = self.champion.next_challenge(finishing)
            elif self.champion.pending is None and not finishing and self.champion.within_share():
                bucket, entry = self.buckets.next_challenge() or (None, None)
            if entry is not None:
                self.buckets_next = kind == "geomean"         # the geomean's and the buckets' challenges alternate
                break
        if entry is None:
            return None
        best = self.champion.current if bucket is None else self.buckets.champions[bucket].current
        if best.lib is None:                       # a champion restored on resume: rebuilt (a cache hit)
            best.build, best.lib = self.pipeline.build(best.candidate.source)
        only = tuple(self.plan.buckets.configs(bucket)) if bucket is not None else None
        ref, record = self.pipeline.pool.compare(entry, best, bucket, only)
        self.pipeline.send(ref, record)
        return ref

    def cancel(self) -> None:
        """In-flight work was cancelled: no pending comparison (the geomean's or a bucket's) comes back."""
        self.champion.cancel()
        self.buckets.cancel()

    def restore_buckets(self, store) -> None:
        """A resumed run's bucket champions (each bucket's last `bucket_champion` event, scored again) and the
        fastest judged per bucket."""
        if not self.sized:
            return
        for r in store.finished():
            if r.correct and r.evaluation and not red_team(r.candidate):
                ev = Evaluation.from_json(r.evaluation)
                for bucket, score in self.plan.buckets.fitness(ev).items():
                    if bucket not in self.buckets.fastest or score > self.buckets.fastest[bucket].fitness:
                        self.buckets.fastest[bucket] = Entry(r.candidate, ev, score=score)
        for _, _, p in store.events("bucket_champion"):
            try:
                record = store.get(str(p.get("id")))
            except KeyError:
                continue
            if not record.evaluation:
                continue
            ev = Evaluation.from_json(record.evaluation)
            score = self.plan.buckets.fitness(ev).get(p.get("bucket"))
            if score is not None:
                self.buckets.champions.setdefault(p["bucket"], Champion()).crown(Entry(record.candidate, ev,
                                                                                       score=score))

    def compared(self, job: Comparing, comparison) -> None:
        """A comparison's result (None: it could not be made)."""
        self.pipeline.pool.returned(job.evaluator)
        contest = self.champion if job.bucket is None else self.buckets.champions[job.bucket]
        challenger, champion = contest.pending, contest.current
        seconds = comparison.seconds if comparison is not None else 0.0
        self.champion.spent(comparing=seconds)
        if not self.finishing:                   # the finish's own comparison is not the search's time
            self.tally.stage_seconds["compare"] += seconds
        outcome = contest.settle(comparison)
        self.store.log_event(events.Compare(
            challenger=challenger.candidate.id, champion=champion.candidate.id, outcome=outcome,
            ratio=comparison and comparison.ratio, ci=comparison and comparison.ci,
            failure=comparison.failure if comparison else "the comparison could not be made",
            seconds=comparison and round(comparison.seconds, 1), bucket=job.bucket))
        if outcome == "replaced" and job.bucket is None:
            self.crowned(challenger.candidate, challenger.evaluation)
        elif outcome == "replaced":
            self.store.log_event(events.BucketChampion(bucket=job.bucket, id=challenger.candidate.id,
                                                       speedup=challenger.fitness))
        self.challenge()

    # ------------------------------------------------------------------ profiles
    def profile(self, proposal: Proposal) -> None:
        """Profiles the parent of an optimize or meta proposal once (`search.profile`: cuda, ncu found), on the
        least-loaded evaluator; this proposal goes without, later ones on that parent show it."""
        parent = proposal.parent
        if self.plan.ncu is None or proposal.operator not in PROFILED or parent is None or parent.id in self.profiles:
            return
        self.profiles[parent.id] = ""
        build_ref, lib = self.pipeline.build(parent.source)          # a hit in the build cache
        self.pipeline.send(*self.pipeline.pool.profile(parent, build_ref, lib, self.plan.ncu))

    def profiled(self, job: Profiling, found) -> None:
        """A profile's result (None: it could not be made)."""
        self.pipeline.pool.returned(job.evaluator, freed=False)
        self.profiles[job.candidate.id] = found.text if found is not None else ""
        self.store.log_event(events.Profile(id=job.candidate.id, text=found.text if found else "",
                                            failure=found.failure if found else "the profile could not be made"))
