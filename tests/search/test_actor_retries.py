"""kevolve/search/pipeline.py: a call lost with its actor's process (`RayActorError`: Ray restarts the actor) is
sent again `ACTOR_RETRIES` times at most, then the candidate ends `failed` with a reason naming the retries — one
verdict, never a candidate left in flight forever or judged twice. `test_chaos.py` reaches this path only at random;
here `Pipeline.lost` is fed the same error on every attempt at one candidate, deterministically, on a real store (no
Ray cluster: the pipeline is built with no actors, and a verdict goes to the population as the driver's does)."""
from __future__ import annotations

import pytest
import ray

from kevolve.messages import Candidate, Status
from kevolve.search.jobs import Building, Built, Judging, Tally, Verified
from kevolve.search.outcome import ACTOR_RETRIES
from kevolve.search.pipeline import Pipeline
from kevolve.search.pool import EvaluatorPool
from kevolve.search.population import Population
from kevolve.search.spend import Spend
from kevolve.record.store import Store


class Plan:
    evaluators, builders = 1, 1


def _pipeline(tmp_path) -> tuple[Pipeline, Population]:
    store = Store.create(tmp_path, {"task": "t", "target": "cpu"})
    population, tally = Population(), Tally()

    def conclude(c, outcome, evaluation=None):
        tally.finished += 1
        population.add(c, outcome, evaluation)
    return Pipeline(Plan(), store, None, EvaluatorPool([None]), None, Spend(None, 0.0), tally, conclude), population


def _candidate(p: Pipeline) -> Candidate:
    c = Candidate(id="c1", source="int c1;", parents=(), island=0, operator="knob", model="", created=1.0, meta={})
    p.store.add_candidate(c)
    return c


def _sent(p: Pipeline, waiting, step: str, c: Candidate):
    """What `dispatch` (evaluate) or `start_builds` (build) sends: the record of the call in flight."""
    if step == "evaluate":
        built = waiting.pop(0) if waiting else Built(c, None, None)
        p.pool.load[0] += 1
        return Judging(built, 0)
    return Building(waiting.pop(0) if waiting else Verified(c), None)


@pytest.mark.parametrize("step", ["evaluate", "build"])
def test_an_actor_lost_on_every_attempt_ends_failed_after_the_retries(tmp_path, step):
    p, population = _pipeline(tmp_path)
    c = _candidate(p)
    waiting = p.queue if step == "evaluate" else p.to_build
    error = ray.exceptions.RayActorError(error_msg="The actor died unexpectedly before finishing this task.")
    for attempt in range(1, ACTOR_RETRIES + 1):
        p.lost(_sent(p, waiting, step, c), error)
        assert len(waiting) == 1 and waiting[0].retries == attempt and waiting[0].candidate is c  # re-queued, once
        assert p.pool.load == [0] and p.store.get(c.id).status == Status.PENDING.value          # no verdict yet
    last = _sent(p, waiting, step, c)
    p.lost(last, error)                          # the (ACTOR_RETRIES + 1)-th loss: retries spent
    assert p.queue == p.to_build == [] and last.retries == ACTOR_RETRIES and p.pool.load == [0]
    retries = [e for _, _, e in p.store.events("retry")]
    assert [e["attempt"] for e in retries] == list(range(1, ACTOR_RETRIES + 1))
    assert all(e["id"] == "c1" and e["step"] == step and "RayActorError" in e["error"] for e in retries)
    r = p.store.get(c.id)
    assert r.status == Status.FAILED.value and not r.correct
    assert r.feedback.startswith(f"{step} failed: RayActorError: The actor died")
    assert r.feedback.endswith(f"(after {ACTOR_RETRIES} retries)")
    assert [f.candidate.id for f in p.store.finished()] == ["c1"] and p.store.unfinished() == []   # one verdict
    assert r.evaluation is None and p.tally.finished == 1 and p.store.counts() == {"failed": 1}
    assert population.get("c1") is not None and not population.best()              # ranked nowhere
    p.store.close()


def test_an_error_that_is_not_a_lost_actor_fails_at_once(tmp_path):
    p, _ = _pipeline(tmp_path)
    c = _candidate(p)
    p.lost(_sent(p, p.queue, "evaluate", c), ray.exceptions.RayError("the evaluator raised"))
    r = p.store.get(c.id)
    assert p.queue == [] and p.store.events("retry") == []
    assert r.status == Status.FAILED.value and "retries" not in r.feedback
    p.store.close()
