"""A proposal as an LLM operator's `Request`, filled from the store: the judgements the prompt may quote (the
parent's and each inspiration's `Evaluation`), the harness's feedback on the parent verbatim, the best strategies
so far, and the parent's Nsight Compute profile when the run has one (`profiles`, from the store's `profile`
events). Prompts thus depend only on what the store holds and on the proposal (which the rng chose).

`founders(task, target, n)`: what the n translate founders of a run start from — the torch reference (None), and,
when the task has seed kernels in the torch-extension format for the target (robust-kbench's and KernelBench's
format, `seeds: torch-cuda:` in task.yaml), every second one from one of those kernels in turn, translated into
the C ABI.
"""
from __future__ import annotations

from kevolve.judge.results import Evaluation
from kevolve.messages import Proposal
from kevolve.operators.compose import Request
from kevolve.operators.strategies import Board
from kevolve.task.spec import TaskError


def founders(task, target: str, n: int) -> list[str | None]:
    """The torch-extension source each translate founder starts from, None for the torch reference."""
    try:
        kernels = [p.read_text() for p in task.seed_paths(target, "torch")]
    except TaskError:
        kernels = []
    return [kernels[(i // 2) % len(kernels)] if kernels and i % 2 else None for i in range(n)]


def request(proposal: Proposal, store, board: Board, strategies_shown: int, meta_children: int,
            profiles: dict[str, str] | None = None, torch_source: str | None = None) -> Request:
    evaluations, feedback = {}, ""
    members = ([proposal.parent] if proposal.parent is not None else []) + list(proposal.inspirations)
    for c in members:
        try:
            record = store.get(c.id)
        except KeyError:
            continue
        if record.evaluation:
            evaluations[c.id] = Evaluation.from_json(record.evaluation)
        if c is proposal.parent:
            feedback = record.feedback or ""
    profile = (profiles or {}).get(proposal.parent.id, "") if proposal.parent is not None else ""
    return Request(proposal.operator, proposal, evaluations, feedback, profile=profile,
                   strategies=tuple(board.best(strategies_shown)), count=meta_children, torch_source=torch_source)
