"""Writes one translate, one optimize and one verifier prompt for layernorm_fwd on an H200 exactly as the model sees
them, into experiments/prompts/. The optimize prompt's parent is the plain CUDA seed with its measured H200 numbers
(experiments/results/seed_layernorm_fwd.h200.txt, held-out rows included, as the judge reports them: the prompt
must not show those). Usage, from the repository root: PYTHONPATH=. python experiments/render_prompts.py"""
from __future__ import annotations

import re
from pathlib import Path

from kevolve.judge.results import Evaluation, Measurement, Stats
from kevolve.messages import Candidate, Proposal
from kevolve.operators import verifiers
from kevolve.operators.compose import Request, messages
from kevolve.operators.context import Context
from kevolve.task.spec import load_task

HERE = Path(__file__).resolve().parent
ROW = re.compile(r"^(?P<cfg>\S+)/(?P<init>\w+)(?P<held> \(held out\))?\s+(?P<eager>\S+)\s+(?P<compile>\S+)\s+"
                 r"(?P<kernel>\S+)\s+\S+\s+\S+\s+(?P<floor>\S+)\s+\S+\s+(?P<err>\S+)$")


def ms(text: str) -> float:
    return float(text[:-2]) / 1000 if text.endswith("us") else float(text[:-2])


def measured(task, path: Path) -> Evaluation:
    """The judge's table of one evaluation read back into an Evaluation (medians only)."""
    cases = {(c.shape_id, c.init): c for c in task.configs("bench")}
    out = []
    for line in path.read_text().splitlines():
        m = ROW.match(line)
        if not m:
            continue
        c = cases[(m["cfg"], m["init"])]
        st = lambda t: Stats(ms(t), ms(t), ms(t), 0)  # noqa: E731
        out.append(Measurement(c.id, c.shape_id, c.init, c.heldout, True, kernel=st(m["kernel"]),
                               eager=st(m["eager"]), compile=st(m["compile"]), floor_ms=ms(m["floor"])))
    return Evaluation(task.name, "cuda", "c", "bench", True, True, measurements=tuple(out), device="NVIDIA H200")


def write(name: str, msgs: list[dict]) -> None:
    parts = [f"<!-- message {i} of {len(msgs)}: role={m['role']} -->\n{m['content']}" for i, m in enumerate(msgs, 1)]
    (HERE / "prompts").mkdir(exist_ok=True)
    (HERE / "prompts" / name).write_text("\n".join(parts))
    print(f"experiments/prompts/{name}: {sum(len(m['content']) for m in msgs)} characters")


def main() -> None:
    task = load_task("layernorm_fwd")
    ctx = Context(task, "cuda", "NVIDIA H200, sm_90a", "bench")
    seed = Candidate(id="seed", source=task.seed_path("cuda").read_text(), operator="seed")
    ev = measured(task, HERE / "results" / "seed_layernorm_fwd.h200.txt")
    assert len(ev.measurements) == len(task.configs("bench"))
    write("translate.layernorm_fwd.h200.md", messages(ctx, Request("translate")))
    write("optimize.layernorm_fwd.h200.md",
          messages(ctx, Request("optimize", Proposal(0, seed, "optimize"), {seed.id: ev})))
    write("verify_memory.layernorm_fwd.h200.md", verifiers.messages(ctx, "memory", seed.source))


if __name__ == "__main__":
    main()
