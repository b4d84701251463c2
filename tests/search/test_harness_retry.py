"""kevolve/search/pipeline.py and pool.py: a rejection that is the harness's own (`harness: …`, or the GPU out of
memory for other judgements' buffers) sends the candidate back to the queue, `ACTOR_RETRIES` times at most, instead
of giving a correct kernel fitness 0. On the H200 a correct seed was rejected "crash: OutOfMemoryError" while another
judgement held 80 GB, and was correct when judged again. (`Pipeline.judged` alone, on a real store: a harness
failure cannot be produced on purpose without a hook in the judge.)"""
from __future__ import annotations

from kevolve.judge.results import Evaluation
from kevolve.messages import Candidate
from kevolve.search.jobs import Built, Judging, Tally
from kevolve.search.outcome import ACTOR_RETRIES, harness_failure
from kevolve.search.pipeline import Pipeline
from kevolve.search.pool import EvaluatorPool
from kevolve.record.store import Store

OOM = ("BT=65536,(4096,)/identity/s0: crash: OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
       "GPU 0 has a total capacity of 139.80 GiB of which 1.99 GiB is free. Process 1634 has 80.54 GiB memory in use.")


def _ev(failure: str | None) -> Evaluation:
    return Evaluation(task="t", target="cuda", abi="c", shapes="bench", compiled=True, correct=failure is None,
                      failure=failure, stage="correctness", eval_seconds=2.0, phases={"check": 1.0})


class Finished(Exception):
    """Raised where `judged` goes on to record the verdict (the rest of the run is not built here)."""


class Plan:
    evaluators, builders = 1, 1


def _pipeline(tmp_path) -> Pipeline:
    store = Store.create(tmp_path, {"task": "t", "target": "cuda"})
    store.record_evaluation = lambda *a, **k: (_ for _ in ()).throw(Finished())
    return Pipeline(Plan(), store, None, EvaluatorPool([None]), None, None, Tally(), lambda *a: None)


def test_a_harness_failure_is_judged_again_then_its_verdict_stands(tmp_path):
    p = _pipeline(tmp_path)
    c = Candidate(id="c1", source="int c1;", parents=(), island=0, operator="knob", model="", created=1.0, meta={})
    p.store.add_candidate(c)
    built = Built(c, None, None)
    for attempt in range(1, ACTOR_RETRIES + 1):
        p.pool.load[0] = 1                                 # as `dispatch` hands it to an evaluator
        p.judged(Judging(built, 0), _ev(OOM))
        assert len(p.queue) == 1 and p.queue[0].retries == attempt and p.pool.load == [0]
        built = p.queue.pop()
    retries = [e for _, _, e in p.store.events("retry")]
    assert len(retries) == ACTOR_RETRIES and retries[0]["id"] == "c1" and "OutOfMemoryError" in retries[0]["error"]
    assert retries[0]["step"] == "evaluate"
    p.pool.load[0] = 1
    try:
        p.judged(Judging(built, 0), _ev(OOM))             # retries spent: the verdict is recorded as it is
        raise AssertionError("not recorded")
    except Finished:
        pass
    assert p.queue == [] and p.tally.judge_phases["check"] == 3.0     # every judgement's time counts, retries too
    p.store.close()


def test_a_kernels_own_failure_is_not_judged_again():
    assert not harness_failure(_ev("B=1/random/s0: wrong answer: max error 3.1 x the tolerance"))
    assert not harness_failure(_ev("load error: crash: SIGSEGV"))
    assert harness_failure(_ev("harness: the worker died compiling the torch baselines, before the kernel loaded"))
    assert harness_failure(_ev(OOM))
