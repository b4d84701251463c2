"""What a search has spent on LLM calls, and what the calls still in flight may cost: the dollar budget's books.

Spend is the sum of every operator call's cost (`Mutation.cost_usd`, failures included) and every verifier call's
(`LLMVerdict.cost_usd`), priced from the token counts the service reported (kevolve.llm.pricing); a cached or
replayed reply costs 0. The budget (`search.dollars`) must count calls still in flight, whose cost is not known
until they return, so each is estimated conservatively:

    per call in flight = the most one call has cost so far in this run;
                         before any reply came back: a prompt of `PROMPT_TOKENS` tokens and a reply of
                         `llm.max_output_tokens` at the priciest configured model's rates (0 for unpriced models).

`room(calls)` says whether `calls` more calls fit: spent + (in flight + calls) × per call ≤ budget. The driver
asks it before each proposal (an LLM proposal's calls: 1, or 1 + meta_children for meta, plus one verifier call
per check for each child), so the budget is not overshot by more than one call's deviation from the estimate
per call in flight. Guarantees: plain arithmetic, no I/O. Not guaranteed: the provider's bill (see pricing).
"""
from __future__ import annotations

from kevolve.llm.config import LLMConfig
from kevolve.llm.pricing import Pricer

PROMPT_TOKENS = 8000         # a generous prompt: task, signature, rules, a parent kernel with its numbers


def prior_per_call(llm: LLMConfig) -> float:
    """The first estimate of one call's cost: a long prompt and a full reply at the priciest model's rates."""
    pricer = Pricer(llm.prices)
    costs = [pricer.cost(m.name, PROMPT_TOKENS, llm.max_output_tokens, provider="local") for m in llm.models]
    return max(costs, default=0.0)


class Spend:
    def __init__(self, budget: float | None, prior: float, spent: float = 0.0):
        self.budget, self.prior = budget, prior
        self.spent = spent                  # USD of calls that returned
        self.calls = 0                      # calls that returned (cached ones included)
        self.in_flight = 0                  # calls submitted and not returned
        self.max_call = 0.0                 # the costliest call so far

    @property
    def per_call(self) -> float:
        return self.max_call if self.calls and self.max_call > 0 else self.prior

    def estimate(self) -> float:
        """Spent, plus the calls in flight at `per_call` each."""
        return self.spent + self.in_flight * self.per_call

    def room(self, calls: int) -> bool:
        """Whether `calls` more calls fit the budget (always, without one)."""
        return self.budget is None or self.spent + (self.in_flight + calls) * self.per_call <= self.budget

    def reached(self) -> bool:
        return self.budget is not None and self.spent >= self.budget

    def start(self, calls: int) -> None:
        self.in_flight += calls

    def done(self, calls: int, cost_usd: float, made: int | None = None) -> None:
        """`calls` estimated calls returned, having made `made` calls (default: as many) costing `cost_usd`."""
        made = calls if made is None else made
        self.in_flight = max(0, self.in_flight - calls)
        self.calls += made
        self.spent += cost_usd
        if made:
            self.max_call = max(self.max_call, cost_usd / made)
