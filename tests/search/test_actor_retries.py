"""kevolve/search/driver.py: a call lost with its actor's process (`RayActorError`: Ray restarts the actor) is sent
again `ACTOR_RETRIES` times at most, then the candidate ends `failed` with a reason naming the retries — one verdict,
never a candidate left in flight forever or judged twice. `test_chaos.py` reaches this path only at random; here
`Driver._lost` is fed the same error on every attempt at one candidate, deterministically, on a real store (no Ray
cluster: the driver's fields `_lost` and `_finish` use are built as `Driver.__init__` builds them)."""
from __future__ import annotations

import pytest
import ray

from kevolve.messages import Candidate, Status
from kevolve.search import driver as drv
from kevolve.search.jobs import Job, Step
from kevolve.search.population import Population
from kevolve.search.spend import Spend
from kevolve.record.store import Store
from kevolve.tracking import make_tracker


def _driver(tmp_path) -> drv.Driver:
    d = drv.Driver.__new__(drv.Driver)         # no actors: `_lost` never calls one on these steps
    d.store = Store.create(tmp_path, {"task": "t", "target": "cpu"})
    d.population, d.spend, d.tracker = Population(), Spend(None, 0.0), make_tracker("none")
    d.load, d.queue, d.to_build, d.jobs, d.freed = [0], [], [], {}, [0.0]
    d.arm_of, d.misses, d.finished, d.proposing = {}, {"knob": 0, "llm": 0}, 0, 0
    return d


def _candidate(d: drv.Driver) -> Candidate:
    c = Candidate(id="c1", source="int c1;", parents=(), island=0, operator="knob", model="", created=1.0, meta={})
    d.store.add_candidate(c)
    return c


def _sent(d: drv.Driver, job: Job, step: Step) -> None:
    """What `_dispatch` (evaluate) or `_start_builds` (build) does before the call goes to an actor."""
    job.step = step
    if step is Step.EVALUATE:
        job.evaluator = 0
        d.load[0] += 1


@pytest.mark.parametrize("step", [Step.EVALUATE, Step.BUILD])
def test_an_actor_lost_on_every_attempt_ends_failed_after_the_retries(tmp_path, step):
    d = _driver(tmp_path)
    c = _candidate(d)
    job = Job(step, candidate=c)
    waiting = d.queue if step is Step.EVALUATE else d.to_build
    error = ray.exceptions.RayActorError(error_msg="The actor died unexpectedly before finishing this task.")
    for attempt in range(1, drv.ACTOR_RETRIES + 1):
        _sent(d, job, step)
        d._lost(job, error)
        assert waiting == [job] and job.step is Step.QUEUED and job.retries == attempt   # re-queued, once
        assert d.load == [0] and d.store.get(c.id).status == Status.PENDING.value        # no verdict yet
        waiting.clear()                                                                  # taken to be sent again
    _sent(d, job, step)
    d._lost(job, error)                          # the (ACTOR_RETRIES + 1)-th loss: retries spent
    assert d.queue == d.to_build == [] and job.retries == drv.ACTOR_RETRIES and d.load == [0]
    retries = [p for _, _, p in d.store.events("retry")]
    assert [p["attempt"] for p in retries] == list(range(1, drv.ACTOR_RETRIES + 1))
    assert all(p["id"] == "c1" and p["step"] == step.value and "RayActorError" in p["error"] for p in retries)
    r = d.store.get(c.id)
    assert r.status == Status.FAILED.value and not r.correct
    assert r.feedback.startswith(f"{step.value} failed: RayActorError: The actor died")
    assert r.feedback.endswith(f"(after {drv.ACTOR_RETRIES} retries)")
    assert [f.candidate.id for f in d.store.finished()] == ["c1"] and d.store.unfinished() == []   # one verdict
    assert r.evaluation is None and d.finished == 1 and d.store.counts() == {"failed": 1}
    assert d.population.get("c1") is not None and not d.population.best()              # ranked nowhere
    d.store.close()


def test_an_error_that_is_not_a_lost_actor_fails_at_once(tmp_path):
    d = _driver(tmp_path)
    c = _candidate(d)
    job = Job(Step.EVALUATE, candidate=c)
    _sent(d, job, Step.EVALUATE)
    d._lost(job, ray.exceptions.RayError("the evaluator raised"))
    r = d.store.get(c.id)
    assert d.queue == [] and job.retries == 0 and d.store.events("retry") == []
    assert r.status == Status.FAILED.value and "retries" not in r.feedback
    d.store.close()
