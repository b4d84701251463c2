"""Every verdict phrased in one place: what the population (`messages.Outcome`) and the store's feedback say of a
candidate that a stage stopped or the evaluator judged. The feedback is what the next prompt on that candidate
quotes, so each stage says the same thing the same way; `python -m kevolve.evaluate` phrases one kernel's verdict
with `judged` too.

Guarantees: fitness is 0 unless correct (`Outcome`); `compiled` is True only for a candidate that reached an
evaluator; a failure's text is kept verbatim after its stage's prefix.
"""
from __future__ import annotations

from kevolve.messages import Outcome

ACTOR_RETRIES = 2            # a call lost with its actor's process, or a harness failure, is sent again this many times


def static_rejection(reason: str) -> Outcome:
    """The static rules refused the source (`judge.static.rules.Verdict.reason`)."""
    return Outcome(0.0, False, False, f"static rule: {reason}")


def screened_out(rejected_by, reason: str) -> Outcome:
    """The LLM verifiers, in filter mode, refused to let it be built (`verification.Decision`)."""
    return Outcome(0.0, False, False, f"rejected by LLM verifiers ({', '.join(rejected_by)}): {reason}")


def build_failure(error: str) -> Outcome:
    """The compiler refused it: its message (trimmed by the builder) verbatim, as the store records it."""
    return Outcome(0.0, False, False, error or "")


def judged(ev) -> Outcome:
    """An evaluator's verdict (`judge.results.Evaluation`): its fitness, correctness and failure as they are."""
    return Outcome(ev.fitness, ev.correct, ev.compiled, ev.failure or "")


def lost(step: str, error: BaseException, retries: int | None = None) -> Outcome:
    """A stage's actor or task failed (not the candidate) at `step`; `retries`: the calls sent again, when they
    were sent again (a lost actor's), else None."""
    reason = f"{step} failed: {first_line(error)}" + (f" (after {retries} retries)" if retries is not None else "")
    return Outcome(0.0, False, step == "evaluate", reason)


def harness_failure(ev) -> bool:
    """A rejection that says nothing of the kernel: the harness's own failure (`harness: …`) or the device out of
    memory (on a GPU that other evaluators share, their buffers and cached references count; `judge` already tried
    once more in a fresh worker). The search judges such a candidate again, `ACTOR_RETRIES` times at most, so a
    kernel that does exhaust the memory itself still ends with its verdict."""
    failure = ev.failure or ""
    return "harness: " in failure or "OutOfMemoryError" in failure


def first_line(error: BaseException) -> str:
    return f"{type(error).__name__}: {str(error).splitlines()[0][:300] if str(error) else ''}"


def describe_unfinished(evaluator: int, kind: str, seconds: float, status: dict | None) -> str:
    """One line for a judgement (or comparison) cut off by the budget: how long it ran, the phase it was in, what
    it had done (`Evaluator.status`)."""
    text = f"evaluator {evaluator}: a {kind} cut off after {seconds:.0f} s"
    if not status:
        return text
    if status.get("in"):
        phase, what, for_s = status["in"][-1]
        text += f", in phase '{phase}'" + (f" ({what})" if what else "") + f" for {for_s:.0f} s"
    done = sorted(((s, p) for p, s in (status.get("done") or {}).items() if s >= 0.5), reverse=True)[:5]
    if done:
        text += "; so far " + ", ".join(f"{p} {s:.0f} s" for s, p in done)
    return text
