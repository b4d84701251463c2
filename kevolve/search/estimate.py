"""What a search's LLM calls are expected to cost, before one is made: the first prompts composed, their tokens
counted, priced at the configured prices and mixed by the operator and model weights.

`estimate(plan, task)` composes, with the prompt code the operators use (kevolve.operators.compose, .verifiers),
the first prompt of each LLM operator the plan weights — translate from the torch reference; optimize, meta (its
strategies call and one strategy's child), repair (with a one-line stand-in error), crossover and red_team on the
first seed — and each verifier's prompt on the first seed. Prompt tokens are estimated as characters /
`CHARS_PER_TOKEN` (no tokenizer is called: none ships with the clients, and the dry run reaches no network);
reply tokens are `REPLY_TOKENS` priors by kind of reply (reasoning included). A call's cost is the expectation
over `llm.models` by weight, each model priced by kevolve.llm.pricing (long-context tiers included).

Per candidate: an LLM-made child costs its operator's calls divided by its children (meta: 1 strategies call and
K child calls for K children), mixed by operator weight × children per proposal, plus one call per verifier; a
knob-made child costs the verifiers' calls only. Per run, expected: every candidate after the seeds made by the
LLM, and every candidate (seeds included) verified. `worst_call_usd` is what the dollar budget reserves per call
in flight before any reply (kevolve.search.spend.prior_per_call): a long prompt and a full `llm.max_output_tokens`
reply at the priciest model; the ceiling (`run_max_usd`) is the run's calls — the LLM operator that makes the most
calls per child, and every verifier, for every candidate — each at that price. Neither counts failed calls (not
billed) or `search.dollars`, which stops the run at its own bound.

Guarantees: pure — no network, no Ray, no file written; a model without a price is listed in `unpriced` (its
calls count $0 here as in the run). Not guaranteed: the bill. Real replies vary (reasoning models think for
thousands of tokens; a verifier may answer in a hundred); the run's summary reports what was spent, and
`search.dollars` caps it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from kevolve.llm.config import provider_of
from kevolve.llm.pricing import Pricer
from kevolve.messages import Candidate, Proposal
from kevolve.operators import verifiers
from kevolve.operators.compose import Request, messages
from kevolve.operators.context import Context
from kevolve.operators.strategies import Strategy
from kevolve.search.spend import prior_per_call

CHARS_PER_TOKEN = 3.5        # code and Markdown: ~3.7 measured on a layernorm prompt (13 kB, ~3.5k tokens); rounded
                             # down, so prompts are over- rather than under-counted
REPLY_TOKENS = {"kernel": 8000, "strategies": 3000, "verdict": 1500}   # priors per reply, reasoning included
STAND_IN_ERROR = "error: expected ';' before '}' token"                # what the repair prompt quotes here


@dataclass(frozen=True)
class Call:
    """One composed prompt: what it is for, its size, the reply expected, its expected cost."""
    name: str                    # e.g. "optimize", "meta: strategies", "verify_compile"
    operator: str                # the operator it serves, or "verify"
    chars: int
    tokens_in: int
    tokens_out: int              # REPLY_TOKENS prior
    usd: float                   # expected over the models by weight


@dataclass(frozen=True)
class Estimate:
    calls: tuple[Call, ...]
    per_child_usd: dict          # operator -> expected $ of the LLM calls per child it makes
    verify_usd: float            # the verifiers' calls on one candidate
    llm_candidate_usd: float     # an LLM-made candidate: operators mixed by weight × children, verifiers included
    knob_candidate_usd: float    # a knob-made candidate: the verifiers' calls only
    run_usd: float               # expected, for the run's candidate budget (every candidate after the seeds by the LLM)
    worst_call_usd: float        # per call in flight before any reply (the dollar budget's reservation)
    unpriced: tuple[str, ...]    # models with no price: counted $0
    run_max_usd: float = 0.0     # the ceiling: the same calls, each at `worst_call_usd`


def tokens(msgs: list[dict[str, str]]) -> int:
    return math.ceil(sum(len(m["content"]) for m in msgs) / CHARS_PER_TOKEN)


def call_usd(llm, tokens_in: int, tokens_out: int) -> float:
    """The expected cost of one call: each model's price at these tokens, weighted as the LLM layer draws them."""
    pricer, total = Pricer(llm.prices), sum(m.weight for m in llm.models) or 1.0
    return sum(m.weight / total * pricer.cost(m.name, tokens_in, tokens_out, provider="local") for m in llm.models)


def prompts(plan, task) -> list[tuple[str, str, str, list[dict[str, str]]]]:
    """(name, operator, reply kind, messages) of the first prompt of each weighted LLM operator and verifier."""
    ctx = Context(task, plan.target, plan.device or ("a CUDA GPU" if plan.target == "cuda" else "a CPU"), plan.shapes)
    seeds = [Candidate(id=f"seed{i}", source=open(path).read(), operator="seed") for i, (_, path) in
             enumerate(plan.seeds)]
    weighted = set(plan.llm_operators)
    out = []
    if "translate" in weighted or plan.translations:
        out.append(("translate", "translate", "kernel", messages(ctx, Request("translate"))))
    if "red_team" in weighted:
        out.append(("red_team", "red_team", "kernel", messages(ctx, Request("red_team"))))
    if seeds:
        seed, other = seeds[0], seeds[1] if len(seeds) > 1 else seeds[0]
        on = lambda op, **kw: Request(op, Proposal(0, seed, op, kw.pop("inspirations", ())), **kw)  # noqa: E731
        if "optimize" in weighted:
            out.append(("optimize", "optimize", "kernel", messages(ctx, on("optimize"))))
        if "meta" in weighted:
            out.append(("meta: strategies", "meta", "strategies", messages(ctx, on("meta", count=plan.meta_children))))
            child = on("meta", strategy=Strategy("one strategy", "a one-paragraph idea"), count=plan.meta_children)
            out.append(("meta: one strategy's child", "meta", "kernel", messages(ctx, child)))
        if "repair" in weighted:
            out.append(("repair", "repair", "kernel", messages(ctx, on("repair", feedback=STAND_IN_ERROR))))
        if "crossover" in weighted:
            out.append(("crossover", "crossover", "kernel", messages(ctx, on("crossover", inspirations=(other,)))))
        for name in plan.verifiers.checks:
            out.append((f"verify_{name}", "verify", "verdict", verifiers.messages(ctx, name, seed.source)))
    return out


def estimate(plan, task) -> Estimate:
    """The expected costs of `plan`'s search of `task` (see the module's docstring)."""
    if plan.llm is None:
        return Estimate((), {}, 0.0, 0.0, 0.0, 0.0, 0.0, ())
    calls = []
    for name, operator, kind, msgs in prompts(plan, task):
        t_in, t_out = tokens(msgs), REPLY_TOKENS[kind]
        calls.append(Call(name, operator, sum(len(m["content"]) for m in msgs), t_in, t_out,
                          call_usd(plan.llm, t_in, t_out)))
    by_op: dict[str, float] = {}
    for c in calls:
        by_op[c.operator] = by_op.get(c.operator, 0.0) + c.usd
    k = plan.meta_children
    per_child = {op: (usd if op != "meta" else (by_op["meta"] - _usd(calls, "meta: one strategy's child")) / k
                      + _usd(calls, "meta: one strategy's child"))
                 for op, usd in by_op.items() if op != "verify"}
    verify = by_op.get("verify", 0.0)
    weights = {op: plan.population.operators[op] * (k if op == "meta" else 1)
               for op in per_child if plan.population.operators.get(op, 0) > 0}
    total = sum(weights.values())
    llm_child = (sum(w * per_child[op] for op, w in weights.items()) / total if total
                 else per_child.get("translate", 0.0)) + verify
    made = max(0, plan.candidates - len(plan.seeds))
    run = len(plan.seeds) * verify + made * (llm_child if total or plan.translations else verify)
    pricer = Pricer(plan.llm.prices)
    unpriced = tuple(m.name for m in plan.llm.models
                     if pricer.price(m.name) is None and provider_of(plan.llm, m) != "local")
    worst = prior_per_call(plan.llm)
    k_calls = max([(1 + k) / k if op == "meta" else 1.0 for op in weights] or [1.0 if plan.translations else 0.0])
    checks = len(plan.verifiers.checks or ())
    ceiling = worst * (len(plan.seeds) * checks + made * ((k_calls if total or plan.translations else 0) + checks))
    return Estimate(tuple(calls), per_child, verify, llm_child, verify, run, worst, unpriced, ceiling)


def _usd(calls: list[Call], name: str) -> float:
    return next((c.usd for c in calls if c.name == name), 0.0)
