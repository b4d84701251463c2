"""LLM verifiers: an LLM reads a kernel and predicts, without compiling it, whether it passes one check.

Three verifiers, as in robust-kbench: `compile` (does it build and export the signature), `memory` (every access
in bounds, aligned, race-free) and `numerics` (the right values within tolerance). Each prompt
(`prompts/verify_<name>.md` after `prompts/verifier_system.md`) states the contract, the guarantees the harness
gives the kernel (so that a verifier does not reject for argument checks the harness makes needless — the
failure robust-kbench's memory verifier showed), the task and the shown configurations, and asks for reasoning
that ends with a JSON verdict line `{"verdict": "pass"|"fail", "reason": ...}`.

Guarantees: `parse_verdict` never raises: it takes the last JSON object in the reply with a `verdict` key (or a
last `verdict: pass|fail` line), and anything else is `passed=None` ("no verdict") with the reason; `LLMVerifier`
turns a failed call (`LLMError`) into a no-verdict `LLMVerdict` too. A verdict is data: what to do with it
(filter, shadow, audit, order the queue) is kevolve.operators.screening's. Not guaranteed: that a verdict is
right — that is measured (screening.VerifierStats).
"""
from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass

from kevolve.llm.errors import LLMError
from kevolve.operators import context as facts
from kevolve.operators.compose import KINDS
from kevolve.operators.context import Context
from kevolve.operators.template import render

VERIFIERS = ("compile", "memory", "numerics")
_VERDICT_LINE = re.compile(r"^\W*verdict\W*[:=]\W*(pass|fail)\b\W*(.*)$", re.I | re.M)


@dataclass(frozen=True)
class LLMVerdict:
    """One verifier's prediction: passed True (pass), False (fail) or None (no verdict: malformed, failed call).
    `error`: a failed call's cause (`LLMError.cause`), None when a reply came back."""
    verifier: str
    passed: bool | None
    reason: str = ""
    cost_usd: float = 0.0
    model: str | None = None
    error: str | None = None

    def to_dict(self) -> dict:
        return {"verifier": self.verifier, "passed": self.passed, "reason": self.reason, "cost_usd": self.cost_usd,
                "model": self.model, **({"error": self.error} if self.error else {})}

    @staticmethod
    def from_dict(d: dict) -> "LLMVerdict":
        return LLMVerdict(d["verifier"], d["passed"], d.get("reason", ""), d.get("cost_usd", 0.0), d.get("model"),
                          d.get("error"))


def system(ctx: Context) -> str:
    t = ctx.task
    stream = ", and last the `cudaStream_t stream` to launch on" if ctx.target == "cuda" else ""
    return render("verifier_system", kind=KINDS[ctx.target], target_line=ctx.target_line, signature=ctx.signature,
                  stream_note=stream, description=t.prompt().strip(), configurations=facts.configurations(ctx),
                  atol=f"{t.atol:g}", rtol=f"{t.rtol:g}")


def messages(ctx: Context, verifier: str, source: str) -> list[dict[str, str]]:
    if verifier not in VERIFIERS:
        raise ValueError(f"verifier {verifier!r}: expected one of {VERIFIERS}")
    user = render(f"verify_{verifier}", language=ctx.language, source=source.rstrip(),
                  verdict=render("parts/verdict"))
    return [{"role": "system", "content": system(ctx)}, {"role": "user", "content": user}]


def _objects(text: str) -> list[dict]:
    decoder, found = json.JSONDecoder(), []
    for m in re.finditer(r"\{", text):
        try:
            value, _ = decoder.raw_decode(text[m.start():])
        except ValueError:
            continue
        if isinstance(value, dict) and "verdict" in value:
            found.append(value)
    return found


def parse_verdict(verifier: str, text: str, cost_usd: float = 0.0, model: str | None = None) -> LLMVerdict:
    """The verdict at the end of a reply (see the module's guarantees)."""
    def verdict(passed, reason):
        return LLMVerdict(verifier, passed, str(reason).strip()[:500], cost_usd, model)

    objects = _objects(text or "")
    if objects:
        v = objects[-1]
        word = str(v.get("verdict", "")).strip().lower()
        if word in ("pass", "fail"):
            return verdict(word == "pass", v.get("reason", ""))
        return verdict(None, f"no verdict: the verdict is {v.get('verdict')!r}, not pass or fail")
    lines = _VERDICT_LINE.findall(text or "")
    if lines:
        word, reason = lines[-1]
        return verdict(word.lower() == "pass", reason)
    return verdict(None, "no verdict: the reply has no {\"verdict\": \"pass\"|\"fail\"} object")


class LLMVerifier:
    """Runs the verifiers with an LLM (an Ensemble from kevolve.llm.make_provider)."""

    def __init__(self, llm, ctx: Context):
        self.llm, self.ctx = llm, ctx

    def verify(self, verifier: str, source: str, seed: int, model: str | None = None) -> LLMVerdict:
        msgs = messages(self.ctx, verifier, source)
        try:
            if model is None:
                reply = self.llm.sample(msgs, seed)
            else:
                d = self.llm.draw(random.Random(seed))
                reply = self.llm.complete(msgs, model=model, temperature=d.temperature,
                                          reasoning_effort=d.reasoning_effort, seed=seed)
        except LLMError as e:
            return LLMVerdict(verifier, None, f"no verdict: LLM call failed: {e}", 0.0, e.model or None,
                              error=e.cause)
        return parse_verdict(verifier, reply.text, reply.cost_usd, reply.model)
