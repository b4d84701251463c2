"""kevolve/search/driver.py: a rejection that is the harness's own (`harness: …`, or the GPU out of memory for other
judgements' buffers) sends the candidate back to the queue, `ACTOR_RETRIES` times at most, instead of giving a
correct kernel fitness 0. On the H200 a correct seed was rejected "crash: OutOfMemoryError" while another
judgement held 80 GB, and was correct when judged again. (The driver's `_judged` alone, on a real store: a harness
failure cannot be produced on purpose without a hook in the judge.)"""
from __future__ import annotations

from kevolve.judge.results import Evaluation
from kevolve.messages import Candidate
from kevolve.search import driver as drv
from kevolve.search.jobs import Job, Step
from kevolve.search.pacing import Builds
from kevolve.search.champion import Champion
from kevolve.record.store import Store

OOM = ("BT=65536,(4096,)/identity/s0: crash: OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
       "GPU 0 has a total capacity of 139.80 GiB of which 1.99 GiB is free. Process 1634 has 80.54 GiB memory in use.")


def _ev(failure: str | None) -> Evaluation:
    return Evaluation(task="t", target="cuda", abi="c", shapes="bench", compiled=True, correct=failure is None,
                      failure=failure, stage="correctness", eval_seconds=2.0, phases={"check": 1.0})


class Finished(Exception):
    """Raised where `_judged` goes on to record the verdict (the rest of the driver is not built here)."""


def _driver(tmp_path) -> drv.Driver:
    d = drv.Driver.__new__(drv.Driver)
    d.load, d.busy_seconds, d.stage_seconds, d.judge_phases = [1], 0.0, {"evaluate": 0.0}, {}
    d.queue, d.store, d.evaluated = [], Store.create(tmp_path, {"task": "t", "target": "cuda"}), 0
    d.builds = Builds(evaluators=1, builders=1)
    d.freed, d.champion = [0.0], Champion()
    d.store.record_evaluation = lambda *a, **k: (_ for _ in ()).throw(Finished())
    return d


def test_a_harness_failure_is_judged_again_then_its_verdict_stands(tmp_path):
    d = _driver(tmp_path)
    c = Candidate(id="c1", source="int c1;", parents=(), island=0, operator="knob", model="", created=1.0, meta={})
    d.store.add_candidate(c)
    job = Job(Step.EVALUATE, candidate=c, evaluator=0)
    for attempt in range(1, drv.ACTOR_RETRIES + 1):
        d.load[0], job.step = 1, Step.EVALUATE              # as `_dispatch` hands it to an evaluator
        d._judged(job, _ev(OOM))
        assert d.queue == [job] and job.step is Step.QUEUED and job.retries == attempt
        d.queue.clear()
    retries = [p for _, _, p in d.store.events("retry")]
    assert len(retries) == drv.ACTOR_RETRIES and retries[0]["id"] == "c1" and "OutOfMemoryError" in retries[0]["error"]
    assert retries[0]["step"] == "evaluate"
    d.load[0], job.step = 1, Step.EVALUATE
    try:
        d._judged(job, _ev(OOM))                       # retries spent: the verdict is recorded as it is
        raise AssertionError("not recorded")
    except Finished:
        pass
    assert d.queue == [] and d.judge_phases["check"] == 3.0       # every judgement's time counts, retries too
    d.store.close()


def test_a_kernels_own_failure_is_not_judged_again():
    assert not drv.harness_failure(_ev("B=1/random/s0: wrong answer: max error 3.1 x the tolerance"))
    assert not drv.harness_failure(_ev("load error: crash: SIGSEGV"))
    assert drv.harness_failure(_ev("harness: the worker died compiling the torch baselines, before the kernel loaded"))
    assert drv.harness_failure(_ev(OOM))
