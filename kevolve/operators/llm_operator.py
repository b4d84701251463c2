"""An LLM operator end to end: a `Request` → messages → one LLM call → the reply parsed → a `Mutation`.

`apply(ctx, request, reply)` is the pure half: a reply (text or `kevolve.llm.Reply`) in, a `Mutation` out — the
child source, or `source=None` and the failure with its reason. `LLMOperator` is the thin impure half: it holds
the LLM (an `Ensemble` from `kevolve.llm.make_provider`, or a `Pool` around one) and makes the call.

Mutation.meta records: `operator`, `form` (kernel | edits), `edits` (blocks applied), `strategy` / `idea` (a meta
child), `second_parent` (crossover), `seed`, the reply's `tokens_in` / `tokens_out` / `finish_reason` /
`cached`, `call` (the response-cache key, for replay), `red_team: true` for red-team children, `knob_error` when the
child's knob lines are malformed (the kernel is kept; knob mutation will refuse it with that reason), and
`llm_error` ({provider, cause}) when the call failed (the search counts it: kevolve/search/llm_health.py), and
`knobs_restored`: the parent's knob markers a whole-kernel reply dropped and `knobs.carry` put back, so knob
mutation keeps working on LLM children (edit blocks keep every line they do not match). Mutation.model and .cost_usd
come from the Reply.

Guarantees: neither `apply` nor `LLMOperator.run` / `meta` raises for a bad reply or a failed call: a reply
without a usable kernel, an edit that does not apply, a child identical to its parent, an `LLMError` after the
LLM layer's retries — each is a Mutation with `failure` and (for a reply that came back) its cost. A call's
model and sampling parameters are a function of (seed, model): `model=None` lets the LLM layer draw it from the
configured weights; a named model (a bandit's choice) is drawn with the same seed for temperature and effort.
Not guaranteed: that the child compiles or is correct — verifiers and the judge decide.
"""
from __future__ import annotations

import random
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from kevolve.llm.cache import cache_key
from kevolve.llm.errors import LLMError
from kevolve.llm.messages import Reply, as_messages
from kevolve.llm.pool import Pool
from kevolve.messages import Mutation
from kevolve.operators import knobs
from kevolve.operators.compose import EDITING, Request, messages
from kevolve.operators.context import Context
from kevolve.operators.parse import parse_reply
from kevolve.operators.registry import spec
from kevolve.operators.strategies import Strategy, parse_strategies


def _reply_meta(reply: Reply | None) -> dict[str, Any]:
    if reply is None:
        return {}
    return {"tokens_in": reply.tokens_in, "tokens_out": reply.tokens_out, "finish_reason": reply.finish_reason,
            "cached": reply.cached}


def _base_meta(request: Request) -> dict[str, Any]:
    meta: dict[str, Any] = {"operator": request.operator}
    if request.strategy is not None:
        meta.update(strategy=request.strategy.name, idea=request.strategy.idea)
    if request.operator == "crossover":
        meta["second_parent"] = request.proposal.inspirations[0].id
    if request.operator == "translate" and request.torch_source:
        meta["from"] = "torch-extension"
    if not spec(request.operator).ranked:
        meta["red_team"] = True
    return meta


def apply(ctx: Context, request: Request, reply: str | Reply) -> Mutation:
    """The child a reply makes of a request, or the reason it makes none."""
    text = reply.text if isinstance(reply, Reply) else reply
    r = reply if isinstance(reply, Reply) else None
    meta = {**_base_meta(request), **_reply_meta(r)}
    cost, model, seconds = (r.cost_usd, r.model, r.seconds) if r else (0.0, None, 0.0)

    def fail(why: str) -> Mutation:
        if r is not None and r.finish_reason in ("length", "MAX_TOKENS"):
            why += f" (the reply stopped at the output token limit: finish_reason={r.finish_reason})"
        return Mutation(None, meta, seconds, failure=f"{request.operator}: {why}", cost_usd=cost, model=model)

    parent = request.parent.source if request.parent is not None and request.operator in EDITING else None
    parsed = parse_reply(text or "", ctx.task.direction, parent)
    meta.update(form=parsed.form, edits=parsed.edits)
    if parsed.source is None:
        return fail(parsed.failure)
    source = parsed.source
    if request.parent is not None and parsed.form == "kernel":     # a rewrite may drop the parent's knob markers
        source, restored = knobs.carry(request.parent.source, source)
        if restored:
            meta["knobs_restored"] = list(restored)
    if request.parent is not None and source.strip() == request.parent.source.strip():
        return fail("the reply's kernel is the parent unchanged")
    try:
        meta["knobs"] = len(knobs.parse(source))
    except ValueError as e:
        meta["knob_error"] = str(e)
    return Mutation(source, meta, seconds, cost_usd=cost, model=model)


def call_key(msgs: list[dict[str, str]], reply: Reply, seed: int) -> str:
    """The response-cache key of the call that gave `reply` (kevolve.llm.cache.cache_key): a recorded run's
    children are replayed by it (llm.replay)."""
    return cache_key(reply.provider, reply.model, as_messages(msgs), reply.params, seed)


class LLMOperator:
    """Makes the calls. `llm`: an Ensemble (kevolve.llm.make_provider) or a Pool (its provider is used; calls run
    on this operator's own threads, `workers` of them, default the provider's concurrency)."""

    def __init__(self, llm: Any, ctx: Context, workers: int | None = None):
        self.provider = llm.provider if isinstance(llm, Pool) else llm
        self.ctx = ctx
        self._workers = workers or max(1, getattr(self.provider, "slots", 1))
        self._executor: ThreadPoolExecutor | None = None

    def call(self, msgs: list[dict[str, str]], seed: int, model: str | None = None) -> Reply:
        """One reply; raises LLMError (and LLMConfigError when the LLM is switched off)."""
        if model is None:
            return self.provider.sample(msgs, seed)
        d = self.provider.draw(random.Random(seed))
        return self.provider.complete(msgs, model=model, temperature=d.temperature,
                                      reasoning_effort=d.reasoning_effort, seed=seed)

    def _failed(self, request: Request, seed: int, start: float, e: LLMError) -> Mutation:
        meta = {**_base_meta(request), "seed": seed, "llm_error": {"provider": e.provider, "cause": e.cause}}
        return Mutation(None, meta, time.perf_counter() - start, failure=f"{request.operator}: LLM call failed: {e}",
                        model=e.model or None)

    def apply(self, request: Request, seed: int, model: str | None = None) -> list[Mutation]:
        """The `registry.Operator` interface: a request of an operator that gives several children (meta) without
        its strategy is the whole step (`meta`); any other gives one child (`run`)."""
        if spec(request.operator).many and request.strategy is None:
            return self.meta(request, seed, model)
        return [self.run(request, seed, model)]

    def run(self, request: Request, seed: int, model: str | None = None) -> Mutation:
        """One child (for a meta request: only with its `strategy` set; use `meta` for the whole step)."""
        if spec(request.operator).many and request.strategy is None:
            raise ValueError("a meta request without a strategy makes strategies, not a child: call meta()")
        start = time.perf_counter()
        msgs = messages(self.ctx, request)
        try:
            reply = self.call(msgs, seed, model)
        except LLMError as e:
            return self._failed(request, seed, start, e)
        m = apply(self.ctx, request, reply)
        return replace(m, meta={**m.meta, "seed": seed, "call": call_key(msgs, reply, seed)})

    def strategies(self, request: Request, seed: int, model: str | None = None
                   ) -> tuple[list[Strategy], Mutation | None, Reply | None]:
        """Meta's first step: (strategies, None, reply), or ([], a failure Mutation, reply or None)."""
        start = time.perf_counter()
        try:
            reply = self.call(messages(self.ctx, request), seed, model)
        except LLMError as e:
            return [], self._failed(request, seed, start, e), None
        found, why = parse_strategies(reply.text, limit=request.count)
        if not found:
            meta = {**_base_meta(request), **_reply_meta(reply), "seed": seed, "form": "strategies"}
            return [], Mutation(None, meta, reply.seconds, failure=f"meta: {why}", cost_usd=reply.cost_usd,
                                model=reply.model), reply
        return found, None, reply

    def meta(self, request: Request, seed: int, model: str | None = None) -> list[Mutation]:
        """Meta-generation: K strategies, then one child per strategy (calls in parallel, seeds seed+1…seed+K).
        The strategy call's cost is shared equally by the children (recorded as meta.strategy_cost_usd)."""
        found, failure, reply = self.strategies(request, seed, model)
        if failure is not None:
            return [failure]
        share = reply.cost_usd / len(found)
        futures = [self.submit(replace(request, strategy=s), seed + 1 + i, model) for i, s in enumerate(found)]
        children = []
        for f in futures:
            m = f.result()
            children.append(replace(m, cost_usd=m.cost_usd + share,
                                    meta={**m.meta, "strategy_cost_usd": share, "strategy_seed": seed}))
        return children

    def submit(self, request: Request, seed: int, model: str | None = None) -> "Future[Mutation]":
        """`run` on this operator's threads."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self._workers, thread_name_prefix="kevolve-op")
        return self._executor.submit(self.run, request, seed, model)

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
