"""Writes one translate, one optimize and one verifier prompt for layernorm_fwd on an H200 exactly as the model sees
them, into experiments/prompts/. The optimize prompt's parent is the split CUDA seed with its H200 device times
(graph clock) from experiments/results/bench_clock.h200.txt, held-out rows included (the prompt must not show
those). Usage: python -m kevolve.tasks render-prompts"""
from __future__ import annotations

import sys
from pathlib import Path

from kevolve import ROOT
from kevolve.judge.results import Evaluation, Measurement, Stats
from kevolve.messages import Candidate, Proposal
from kevolve.operators import verifiers
from kevolve.operators.compose import Request, messages
from kevolve.operators.context import Context
from kevolve.task.load import load_task

HERE = ROOT / "experiments"                 # the prompts go to experiments/prompts/, the times come from results/
def measured(task, path: Path) -> Evaluation:
    """layernorm_fwd's rows of bench_clock's table read back into an Evaluation: the graph clock's eager,
    compile and kernel µs per call as medians (the configurations that table holds, by label: tables written
    before scalars varied name a configuration without its eps)."""
    cases = {k: c for c in task.configs("bench") if c.init == task.init_sets[0] for k in (c.label, c.shape_id) if k}
    text = path.read_text()
    section = text[text.index("## layernorm_fwd"):text.index("## layernorm_bwd")]
    out = []
    for line in section.splitlines():
        cells = [x.strip() for x in line.split("|")]
        if len(cells) < 10 or cells[0] not in cases:
            continue
        c = cases[cells[0]]
        eager, compiled, kernel = (float(x) / 1000 for x in cells[7:10])      # graph clock, µs -> ms
        st = lambda v: Stats(v, v, v, 0)  # noqa: E731
        out.append(Measurement(c.id, c.shape_id, c.init, c.heldout, True, kernel=st(kernel), eager=st(eager),
                               compile=st(compiled)))
    return Evaluation(task.name, "cuda", "c", "bench", True, True, measurements=tuple(out), device="NVIDIA H200")


def write(name: str, msgs: list[dict]) -> None:
    parts = [f"<!-- message {i} of {len(msgs)}: role={m['role']} -->\n{m['content']}" for i, m in enumerate(msgs, 1)]
    (HERE / "prompts").mkdir(exist_ok=True)
    (HERE / "prompts" / name).write_text("\n".join(parts))
    print(f"experiments/prompts/{name}: {sum(len(m['content']) for m in msgs)} characters")


def main(argv: list[str] | None = None) -> int:
    if argv:
        print("usage: python -m kevolve.tasks render-prompts (no arguments)", file=sys.stderr)
        return 2
    task = load_task("layernorm_fwd")
    ctx = Context(task, "cuda", "NVIDIA H200, sm_90a", "bench")
    seed = Candidate(id="seed", source=(task.dir / "seeds" / "cuda_split.cu").read_text(), operator="seed")
    ev = measured(task, HERE / "results" / "bench_clock.h200.txt")
    assert ev.measurements, "no layernorm_fwd rows in bench_clock.h200.txt"
    write("translate.layernorm_fwd.h200.md", messages(ctx, Request("translate")))
    write("optimize.layernorm_fwd.h200.md",
          messages(ctx, Request("optimize", Proposal(0, seed, "optimize"), {seed.id: ev})))
    write("verify_memory.layernorm_fwd.h200.md", verifiers.messages(ctx, "memory", seed.source))
    return 0
