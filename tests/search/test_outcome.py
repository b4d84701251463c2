"""kevolve/search/outcome.py: every verdict phrased in one place — the population's `Outcome` and the feedback the
store records say the same, fitness 0 unless correct, `compiled` only for what reached an evaluator."""
from __future__ import annotations

import ray

from kevolve.judge.results import Evaluation
from kevolve.search import outcome


def test_each_stage_phrases_its_verdict():
    assert outcome.static_rejection("threads").feedback == "static rule: threads"
    said = outcome.screened_out(("compile", "correct"), "both said fail")
    assert said.feedback == "rejected by LLM verifiers (compile, correct): both said fail" and not said.compiled
    assert outcome.build_failure("x.cu:3: error: expected ';'").feedback == "x.cu:3: error: expected ';'"
    for said in (outcome.static_rejection("x"), outcome.build_failure("y")):
        assert (said.fitness, said.correct, said.compiled) == (0.0, False, False)


def test_a_judgement_is_its_evaluation_and_a_loss_names_its_step():
    ev = Evaluation(task="t", target="cpu", abi="c", shapes="small", compiled=True, correct=False,
                    failure="B=3/random/s0: wrong answer", stage="correctness")
    said = outcome.judged(ev)
    assert (said.fitness, said.correct, said.compiled, said.feedback) == (0.0, False, True, ev.failure)
    lost = outcome.lost("evaluate", ray.exceptions.RayActorError(error_msg="died\nmore"), retries=2)
    assert lost.feedback.startswith("evaluate failed: RayActorError: ") and lost.feedback.endswith("(after 2 retries)")
    assert lost.compiled and not outcome.lost("build", ValueError("x")).compiled
    assert outcome.lost("verify", ValueError("bad")).feedback == "verify failed: ValueError: bad"
