"""The chat messages of each LLM operator: a `Request` and the run's `Context` in, [system, user] messages out.

Operators: `translate` (the torch reference → a first C-ABI kernel, or a torch-extension kernel → the C ABI when
`Request.torch_source` is given), `optimize` (a parent, its numbers, the harness's feedback, inspirations, the
strategies that worked; with `Request.strategy` it is a meta child's implementation prompt), `crossover` (the
parent and the first inspiration), `repair` (a parent and its error, verbatim), `meta` (K strategies for a
parent, as a JSON list) and `red_team` (a kernel that earns a verdict it does not deserve; off by default).

Guarantees: every prompt is rendered from the files of `kevolve/operators/prompts/` and shows the task's
description (prompt.md), the exact C signature, the target, the shown configurations (never a held-out one —
numbers and feedback go through `context.redact`), the harness's rules and the knob syntax. `messages` is a
pure function of (context, request). Not guaranteed: a size limit (long kernels make long prompts).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from kevolve.judge.results import Evaluation
from kevolve.messages import Candidate, Proposal
from kevolve.operators import context as facts
from kevolve.operators.context import Context
from kevolve.operators.registry import LLM_OPERATORS, SPECS, where
from kevolve.operators.strategies import Strategy
from kevolve.operators.template import render

OPERATORS = LLM_OPERATORS                 # the operators with a prompt (registry.SPECS: llm)
EDITING = where(edits=True)               # operators whose reply may be edit blocks on the parent
KINDS = {"cuda": "CUDA", "cpu": "C++ CPU"}


@dataclass(frozen=True)
class Request:
    """One operator's call (`registry.Operator.apply`): the proposal and, for an LLM operator, its prompt's facts.
    `evaluations` holds the judgements the prompt may quote, by candidate id (the parent's, the inspirations');
    `feedback` is the harness's text on the parent (Outcome.feedback), verbatim;
    `strategies` are the best so far with their mean reward (strategies.Board.best)."""
    operator: str
    proposal: Proposal | None = None
    evaluations: Mapping[str, Evaluation] = field(default_factory=dict)
    feedback: str = ""
    profile: str = ""
    strategy: Strategy | None = None
    strategies: tuple[tuple[Strategy, float, int], ...] = ()
    torch_source: str | None = None
    count: int = 4

    def __post_init__(self):
        if self.operator not in SPECS:
            raise ValueError(f"operator {self.operator!r}: expected one of {tuple(SPECS)}")
        spec = SPECS[self.operator]
        if spec.needs_parent and self.proposal is None:
            raise ValueError(f"operator {self.operator} needs a proposal with a parent")
        if spec.second_parent and not self.proposal.inspirations:
            raise ValueError("crossover needs a second parent (the proposal's first inspiration)")

    @property
    def parent(self) -> Candidate | None:
        return self.proposal.parent if self.proposal is not None else None


def system(ctx: Context) -> str:
    return render("system", kind=KINDS[ctx.target], target_line=ctx.target_line, signature=ctx.signature,
                  stream_note=_stream_note(ctx), forbidden=facts.forbidden(ctx))


def _stream_note(ctx: Context) -> str:
    return ", and last the `cudaStream_t stream` to launch on" if ctx.target == "cuda" else ""


def _task(ctx: Context) -> str:
    return render("parts/task", name=ctx.task.name, description=ctx.task.prompt().strip(),
                  configurations=facts.configurations(ctx)).rstrip()


def _reply(ctx: Context, edits: bool) -> str:
    return render("parts/reply_edits" if edits else "parts/reply_kernel", language=ctx.language,
                  direction=ctx.task.direction).rstrip()


def _reference(ctx: Context) -> str:
    return (ctx.task.dir / "reference.py").read_text().strip()


def _numbers(ctx: Context, request: Request, c: Candidate) -> str:
    return facts.numbers(ctx, request.evaluations.get(c.id))


def _part(template: str, text: str, /, **values) -> str:
    """An optional section: rendered with `text`, or nothing when it is empty."""
    return "\n" + render(template, **values) if text and text.strip() else ""


def _feedback(ctx: Context, request: Request) -> str:
    text = facts.redact(ctx, request.feedback.strip())
    return _part("parts/feedback", text, feedback=text)


def _inspirations(ctx: Context, request: Request) -> str:
    kernels = []
    for i, c in enumerate(request.proposal.inspirations, start=1):
        ev = request.evaluations.get(c.id)
        how = f"{ev.speedup:.3g}x the faster torch baseline" if ev is not None and ev.speedup else "not timed"
        kernels.append(render("parts/inspiration", title=f"Kernel {i} ({how})", language=ctx.language,
                              source=c.source.rstrip()))
    text = "\n".join(kernels)
    return _part("parts/inspirations", text, kernels=text)


def _strategies(request: Request) -> str:
    lines = "\n".join(f"- **{s.name}** ({mean:.2f} over {n} child{'ren' if n != 1 else ''}): {s.idea}"
                      for s, mean, n in request.strategies)
    return _part("parts/strategies", lines, strategies=lines)


def translate(ctx: Context, request: Request) -> str:
    if request.torch_source:
        return render("translate_torch", task=_task(ctx), direction=ctx.task.direction, language=ctx.language,
                      source=request.torch_source.rstrip(), reply=_reply(ctx, False))
    return render("translate", task=_task(ctx), reference=_reference(ctx), reply=_reply(ctx, False))


def optimize(ctx: Context, request: Request) -> str:
    parent = request.parent
    s = request.strategy
    return render("optimize", task=_task(ctx), language=ctx.language, parent=parent.source.rstrip(),
                  numbers=_numbers(ctx, request, parent), feedback=_feedback(ctx, request),
                  profile=_part("parts/profile", request.profile, profile=request.profile.strip()),
                  inspirations=_inspirations(ctx, request) if s is None else "",
                  strategies=_strategies(request) if s is None else "",
                  strategy=_part("parts/strategy", s.name if s else "", name=s.name, idea=s.idea) if s else "",
                  reply=_reply(ctx, True))


def crossover(ctx: Context, request: Request) -> str:
    a, b = request.parent, request.proposal.inspirations[0]
    return render("crossover", task=_task(ctx), language=ctx.language, a=a.source.rstrip(),
                  numbers_a=_numbers(ctx, request, a), b=b.source.rstrip(), numbers_b=_numbers(ctx, request, b),
                  reply=_reply(ctx, False))


def repair(ctx: Context, request: Request) -> str:
    ev = request.evaluations.get(request.parent.id)
    error = request.feedback.strip() or (ev.failure if ev is not None and ev.failure else "") or "(no message)"
    return render("repair", task=_task(ctx), language=ctx.language, parent=request.parent.source.rstrip(),
                  error=facts.redact(ctx, error), reply=_reply(ctx, True))


def meta(ctx: Context, request: Request) -> str:
    parent = request.parent
    return render("meta", task=_task(ctx), language=ctx.language, parent=parent.source.rstrip(),
                  numbers=_numbers(ctx, request, parent), feedback=_feedback(ctx, request),
                  profile=_part("parts/profile", request.profile, profile=request.profile.strip()),
                  strategies=_strategies(request), count=request.count)


def red_team(ctx: Context, request: Request) -> str:
    start = request.parent.source.rstrip() if request.parent is not None else ""
    return render("red_team", task=_task(ctx), reference=_reference(ctx),
                  parent=_part("parts/start_from", start, language=ctx.language, source=start),
                  reply=_reply(ctx, False))


_USER = {"translate": translate, "optimize": optimize, "crossover": crossover, "repair": repair, "meta": meta,
         "red_team": red_team}


def messages(ctx: Context, request: Request) -> list[dict[str, str]]:
    """The chat messages for one call: the shared system prompt, then the operator's prompt."""
    if request.operator == "meta" and request.strategy is not None:     # a meta child: implement one strategy
        user = optimize(ctx, request)
    else:
        user = _USER[request.operator](ctx, request)
    return [{"role": "system", "content": system(ctx)}, {"role": "user", "content": user}]
