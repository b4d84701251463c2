"""LLM verifiers: verdicts parsed from good and malformed replies; aggregation, filter / shadow / audit decisions;
precision, recall and accuracy on a known confusion; the right to reject earned by measured precision."""
from __future__ import annotations

import json
import random

import pytest

from kevolve.operators.screening import Screen, VerifierStats, decide, rejects, truth
from kevolve.operators.verifiers import LLMVerdict, parse_verdict


@pytest.mark.parametrize("text,passed,reason", [
    ('Line 12 reads x[i] for i < N.\n{"verdict": "pass", "reason": "all indices bounded by N"}', True,
     "all indices bounded by N"),
    ('Reasoning...\n```json\n{"verdict": "FAIL", "reason": "reads x[N] in the tail loop"}\n```', False,
     "reads x[N] in the tail loop"),
    ('I first thought {"verdict": "fail", "reason": "x"} but no.\n{"verdict": "pass", "reason": "fine"}', True, "fine"),
    ("All good.\nVERDICT: pass", True, ""),
    ("**Verdict:** FAIL — the float sum loses precision", False, "the float sum loses precision"),
])
def test_verdicts_are_parsed(text, passed, reason):
    v = parse_verdict("memory", text, cost_usd=0.01, model="gpt-5")
    assert (v.verifier, v.passed, v.cost_usd, v.model) == ("memory", passed, 0.01, "gpt-5")
    assert reason in v.reason


@pytest.mark.parametrize("text", ["", "It looks fine to me.", '{"verdict": "maybe", "reason": "unsure"}',
                                  '{"verdict": ', "{" * 300, '{"reason": "no verdict key"}'])
def test_malformed_replies_are_no_verdict(text):
    v = parse_verdict("numerics", text)
    assert v.passed is None and v.reason.startswith("no verdict")


def verdicts(*passed) -> list[LLMVerdict]:
    return [LLMVerdict(name, p) for name, p in zip(("compile", "memory", "numerics"), passed)]


@pytest.mark.parametrize("passed,any_,majority,all_", [
    ((True, True, True), False, False, False),
    ((False, True, True), True, False, False),
    ((False, False, True), True, True, False),
    ((False, False, False), True, True, True),
    ((False, None, None), True, True, True),          # no-verdicts do not count
    ((None, None, None), False, False, False),
])
def test_aggregation(passed, any_, majority, all_):
    v = verdicts(*passed)
    assert (rejects(v, "any"), rejects(v, "majority"), rejects(v, "all")) == (any_, majority, all_)


def test_shadow_builds_everything_in_order():
    d = decide(verdicts(False, False, False), Screen(mode="shadow"), {"compile", "memory", "numerics"},
               random.Random(0))
    assert d.build and d.priority == 0 and d.flagged_by == ("compile", "memory", "numerics") and not d.rejected_by


def test_filter_only_verifiers_that_earned_it_reject_the_rest_order_the_queue():
    screen = Screen(mode="filter", audit_share=0.0)
    d = decide(verdicts(True, False, True), screen, earned=set(), rng=random.Random(0))
    assert d.build and d.priority == pytest.approx(1 / 3) and d.flagged_by == ("memory",)
    d = decide(verdicts(True, False, True), screen, earned={"memory"}, rng=random.Random(0))
    assert not d.build and d.rejected_by == ("memory",) and not d.audited


def test_audit_share_judges_a_fraction_of_rejected_candidates():
    screen, rng = Screen(mode="filter", audit_share=0.25), random.Random(0)
    ds = [decide(verdicts(False, True, True), screen, {"compile"}, rng) for _ in range(4000)]
    audited = [d for d in ds if d.build]
    assert all(d.audited for d in audited) and 0.22 < len(audited) / len(ds) < 0.28


def test_truth_per_verifier():
    assert truth("compile", compiled=False, correct=False) is True
    assert truth("memory", compiled=False, correct=False) is None                  # never ran
    assert truth("memory", True, False, "B=8/random/s0: crash: illegal memory access") is True
    assert truth("memory", True, False, "output out: 3 of 9 elements outside tolerance") is False
    assert truth("numerics", True, False, "output out: 3 of 9 elements outside tolerance") is True
    assert truth("numerics", True, False, "crash: illegal memory access") is None  # values never seen
    assert truth("numerics", True, False, "timed out after 60 s") is None
    assert truth("numerics", True, True) is False and truth("compile", True, True) is False


@pytest.mark.parametrize("failure", [               # the judge's own words (kevolve.judge.evaluator.checks, .timed)
    "B=3,N=1001/random/s0: wrote outside out (past its end) (call 2, aligned buffers)",
    "B=4,N=256/random/s0: wrote outside out (before its start), grad_x (past its end) (call 1, skewed buffers)",
    "B=4,N=256/random/s0: kernel wrote outside out during timing (call 3)",
    "B=4,N=256/random/s0: input x modified by the kernel (call 1)",
    "B=4,N=256/random/s0: input x modified during timing (call 2, input set 1)",
    "B=4,N=256/random/s0: crash: the worker process died (killed by signal SIGSEGV)"])
def test_the_judges_memory_faults_are_memory_faults(failure):
    """A kernel caught writing outside its buffers or into its inputs proves the memory verifier right and says
    nothing of its values (an overrun reported as a numerics failure made memory's right verdicts false alarms)."""
    assert truth("memory", True, False, failure) is True
    assert truth("numerics", True, False, failure) is None


def test_stats_on_a_known_confusion_and_the_right_to_reject():
    stats = VerifierStats(Screen(precision_bar=0.75, min_samples=8))
    #              said fail & bad, said fail & good, said pass & bad, said pass & good
    for passed, bad, n in ((False, True, 6), (False, False, 2), (True, True, 3), (True, False, 9)):
        for _ in range(n):
            stats.add(LLMVerdict("memory", passed), bad)
    stats.add(LLMVerdict("memory", None), True)
    stats.add(LLMVerdict("memory", False), None)
    c = stats.confusion("memory")
    assert (c.tp, c.fp, c.fn, c.tn, c.no_verdict, c.unobserved) == (6, 2, 3, 9, 1, 1)
    assert c.precision == pytest.approx(0.75) and c.recall == pytest.approx(6 / 9)
    assert c.accuracy == pytest.approx(15 / 20)
    assert stats.earned("memory") and stats.earned_set() == {"memory"}
    stats.add(LLMVerdict("memory", False), False)                          # precision 6/9 < 0.75
    assert not stats.earned("memory")
    s = stats.summary()["memory"]
    assert s["rejections"] == 9 and s["earned"] is False
    restored = VerifierStats.from_state(json.loads(json.dumps(stats.state())), stats.screen)
    assert restored.summary() == stats.summary()


def test_too_few_rejections_earn_nothing_however_precise():
    stats = VerifierStats(Screen(precision_bar=0.5, min_samples=20))
    for _ in range(19):
        stats.add(LLMVerdict("compile", False), True)
    assert stats.confusion("compile").precision == 1.0 and not stats.earned("compile")


def test_audited_candidates_weigh_for_the_rejections_not_judged():
    stats = VerifierStats(Screen(mode="filter", audit_share=0.25))
    stats.add_outcome([LLMVerdict("numerics", False)], compiled=True, correct=True, audited=True)   # a false reject
    stats.add_outcome([LLMVerdict("numerics", True)], compiled=True, correct=True)
    c = stats.confusion("numerics")
    assert (c.fp, c.tn, c.rejections) == (4.0, 1.0, 1) and c.accuracy == pytest.approx(1 / 5)


def test_screen_is_validated():
    with pytest.raises(ValueError, match="mode"):
        Screen(mode="strict")
    with pytest.raises(ValueError, match="aggregation"):
        Screen(aggregation="some")
    with pytest.raises(ValueError, match="audit_share"):
        Screen(audit_share=1.5)


# ---- against the loopback OpenAI server, real openai client

def test_llm_verifier_end_to_end(server, sleeps, ctx, parent):
    from kevolve.llm import make_provider
    from kevolve.operators.verifiers import LLMVerifier
    from llm_servers import ENV, Ok, Status, openai_config
    server.then(Ok('The tail loop is bounded by N.\n{"verdict": "pass", "reason": "indices < N"}', 2000, 300),
                Ok("Looks plausible.", 2000, 50), Status(401, "bad key"))
    v = LLMVerifier(make_provider(openai_config(server), env=ENV, sleep=sleeps), ctx)
    ok, vague, failed = (v.verify(name, parent.source, seed=i) for i, name in enumerate(("memory", "numerics",
                                                                                          "compile")))
    assert (ok.verifier, ok.passed, ok.reason, ok.model) == ("memory", True, "indices < N", "gpt-4.1")
    assert ok.cost_usd == pytest.approx((2000 * 2.0 + 300 * 8.0) / 1e6)
    assert vague.passed is None and vague.cost_usd > 0
    assert failed.passed is None and "LLM call failed" in failed.reason and failed.cost_usd == 0
    user = server.requests[0].body["messages"][1]["content"]
    assert "is every memory access in bounds" in user and parent.source.rstrip() in user
