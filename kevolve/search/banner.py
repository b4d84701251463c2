"""What a search says before it starts: which operators and verifiers are on, in which mode, and what a candidate
is expected to cost at the configured prices (kevolve.search.estimate); the dry run adds each first prompt's size.

`lines(plan, est, prompts=False)` is the text, `record(plan, est)` the same as JSON data for the store's `plan`
event (what the report's comparison reads); `announce` prints the one and stores the other at a run's start.
Formatting only: nothing here decides or calls anything.
"""
from __future__ import annotations

import sys

from kevolve.search.estimate import CHARS_PER_TOKEN, Estimate, estimate
from kevolve.search.resolved import values
from kevolve.record import events


def announce(plan, task, store) -> None:
    """At a run's start: the text on stderr, the `plan` event in the store."""
    est = estimate(plan, task)
    print("\n".join(lines(plan, est)), file=sys.stderr, flush=True)
    store.log_event(events.Plan(record(plan, est)))


def _usd(x: float) -> str:
    return f"${x:.4f}" if x < 1 else f"${x:.2f}"


def _weights(plan) -> str:
    ops = plan.population.operators
    on = [f"{op} {ops[op]:g}" for op in ops if ops[op] > 0]
    off = [op for op in ops if ops[op] <= 0]
    return ", ".join(on) + (f" (off: {', '.join(off)})" if off else "")


def lines(plan, est: Estimate, prompts: bool = False) -> list[str]:
    mode = ("best_of_n: every child an independent sample from the seeds (no archive parents, inspirations, repair "
            "or crossover)" if plan.mode == "best_of_n" else "evolve")
    out = [f"search: {plan.candidates} candidates, {plan.wall_time_s:.0f} s, "
           f"{'$' + format(plan.dollars, 'g') if plan.dollars is not None else 'no dollar limit'}; mode {mode}"]
    if plan.llm is None:
        out += [f"operators: {_weights(plan)} — no LLM (llm=none): the knob search; choose llm=openai|gemini|local "
                "for the paper's pipeline (translate, optimize, meta, repair, crossover, LLM verifiers)",
                "verifiers: none; LLM cost $0"]
        return out
    models = ", ".join(f"{m.name} (weight {m.weight:g})" for m in plan.llm.models)
    v = plan.verifiers
    out += [f"LLM: {plan.llm.provider}: {models}" + (f"; replayed from {plan.llm.replay} ($0)" if plan.llm.replay
                                                      else ""),
            f"operators (weights): {_weights(plan)}"
            + (f"; {plan.translations} translate founders at start" if plan.translations else ""),
            "verifiers: " + (f"{', '.join(v.checks)} ({v.mode}: "
                             + ("recorded beside the judge's verdicts, nothing dropped" if v.mode == "shadow"
                                else f"drop rejections once precision >= {v.precision_bar:g} over "
                                     f"{v.min_samples} fail verdicts") + ")" if v.checks else "none")]
    if prompts:
        out.append(f"first prompts (tokens in ~ characters / {CHARS_PER_TOKEN:g}; tokens out: a prior per reply):")
        width = max((len(c.name) for c in est.calls), default=10)
        out.append(f"  {'prompt'.ljust(width)}  {'chars':>7}  {'tokens in':>9}  {'tokens out':>10}  {'$ per call':>10}")
        out += [f"  {c.name.ljust(width)}  {c.chars:>7}  {c.tokens_in:>9}  {c.tokens_out:>10}  {_usd(c.usd):>10}"
                for c in est.calls]
        out.append("  $ per child, LLM calls only: "
                   + ", ".join(f"{op} {_usd(x)}" for op, x in est.per_child_usd.items()))
    out.append(f"expected cost per candidate: {_usd(est.llm_candidate_usd)} when the LLM writes it, "
               f"{_usd(est.knob_candidate_usd)} for a knob child (its verifier calls); per run expected "
               f"{_usd(est.run_usd)} ({plan.candidates} candidates, every one after the {len(plan.seeds)} seed(s) "
               f"by the LLM, replies of the sizes above), at most {_usd(est.run_max_usd)} (every reply "
               f"{plan.llm.max_output_tokens} tokens at the priciest model)"
               + (f"; search.dollars={plan.dollars:g} stops it there" if plan.dollars is not None else
                  "; cap it with search.dollars=..."))
    out.append(f"LLM calls: a request waits {plan.llm.timeout_s:g} s at most (llm.timeout_s) and a call gives up "
               f"after {plan.llm.call_timeout_s:g} s (llm.call_timeout_s, retries included); after "
               f"{plan.llm.down_after} failed calls in a row (llm.down_after) the run says so and goes on with knob "
               f"mutation, trying the LLM every {plan.llm.probe_s:g} s"
               + ("" if plan.population.operators.get("knob", 0) > 0
                  else " — knob is weighted 0 here, so it stops instead (exit status 2)"))
    out.append(f"the budget reserves {_usd(est.worst_call_usd)} per call in flight until replies come back "
               f"(a {plan.llm.max_output_tokens}-token reply at the priciest model)")
    if est.unpriced:
        out.append(f"WARNING: no price for {', '.join(est.unpriced)}: counted $0; price it with "
                   f"'++llm.prices={{{est.unpriced[0]}: {{input: USD_PER_M, output: USD_PER_M}}}}'")
    return out


def record(plan, est: Estimate) -> dict:
    """The `plan` event: what the run turned on and expected, for the store and the report."""
    return {"mode": plan.mode, "llm": plan.llm.provider if plan.llm else "none",
            "models": [m.name for m in plan.llm.models] if plan.llm else [],
            "operators": dict(plan.population.operators), "verifiers": list(plan.verifiers.checks),
            "verifier_mode": plan.verifiers.mode, "translations": plan.translations,
            "candidates": plan.candidates, "wall_time_s": plan.wall_time_s, "dollars": plan.dollars,
            "resolved": values(plan),
            "expected": {"llm_candidate_usd": round(est.llm_candidate_usd, 6),
                         "knob_candidate_usd": round(est.knob_candidate_usd, 6), "run_usd": round(est.run_usd, 6),
                         "run_max_usd": round(est.run_max_usd, 6),
                         "calls": [{"name": c.name, "tokens_in": c.tokens_in, "tokens_out": c.tokens_out,
                                    "usd": round(c.usd, 6)} for c in est.calls]}}
