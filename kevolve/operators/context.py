"""What every LLM prompt states about the problem, computed from the task, the target and the judge's results.

`Context` names the task, the target (`cuda` on a named GPU and arch, or `cpu`), the shape set the run is judged
on, and the ABI. The functions below turn it into the prompt's facts: the exact C signature (`c_prototype`), the
shown configurations, the rules the harness enforces (read from `kevolve.judge.static.rules`, so the prompt lists what
the judge really forbids), and a parent's per-configuration numbers (from `kevolve.judge.results.Evaluation`).

Guarantees: no function here ever writes a held-out configuration (`Case.heldout`) into its text — the shown
configurations and the numbers table skip them (and so their scalar values), and `redact` rewrites harness
feedback that names one (its id or label, its sizes as `k=v`, and on those lines every index tuple and every
integer of three or more digits, which could be a size or an element count), nor the salt of the correctness
calls' inputs.
Not guaranteed: that redaction catches a held-out size spelled some other way in free text (the harness's own
messages are the ones it is written for).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from kevolve.judge.static import rules
from kevolve.judge.results import Evaluation, Measurement
from kevolve.task.abi import c_prototype
from kevolve.task.spec import Case, Task, show_scalar

HELDOUT = "a held-out configuration"


@dataclass(frozen=True)
class Context:
    """The fixed facts of a run's prompts. `device`: e.g. "NVIDIA H200, sm_90a", or a CPU's name."""
    task: Task
    target: str                  # cuda | cpu
    device: str
    shape_set: str = "bench"
    abi: str = "c"

    @property
    def signature(self) -> str:
        return c_prototype(self.task, self.target)

    @property
    def language(self) -> str:
        """The fence tag a kernel is written in: cuda or cpp."""
        return "cuda" if self.target == "cuda" else "cpp"

    @property
    def target_line(self) -> str:
        if self.target == "cuda":
            return (f"CUDA on {self.device}: one `.cu` file, built by nvcc -O3 -std=c++17 for this architecture "
                    f"into a shared library; launch every kernel on `stream`.")
        return (f"CPU ({self.device}): one `.cpp` file, built by g++ -O3 -march=native -fopenmp -std=c++17 into a "
                f"shared library; OpenMP threads are allowed, other threads are not.")

    def shown(self) -> tuple[Case, ...]:
        """The configurations a prompt may show: the shape set without its held-out ones."""
        return tuple(c for c in self.task.configs(self.shape_set) if not c.heldout)

    def heldout(self) -> tuple[Case, ...]:
        return tuple(c for c in self.task.configs(self.shape_set) if c.heldout)


def configurations(ctx: Context) -> str:
    """The shown shapes as a Markdown table: sizes, the scalars' values (a task with scalars: they change from
    configuration to configuration), initialisations, and the fewest bytes the operation moves."""
    rows, seen = [], {}
    with_scalars = bool(ctx.task.scalars)
    for c in ctx.shown():
        seen.setdefault(c.shape_id, (c, []))[1].append(c.init)
    for shape, (c, inits) in seen.items():
        cells = [shape, ", ".join(f"{k}={v}" for k, v in c.sizes)]
        if with_scalars:
            cells.append(", ".join(f"{k}={show_scalar(v)}" for k, v in ctx.task.scalar_values(c).items()))
        cells += [", ".join(dict.fromkeys(inits)), f"{ctx.task.floor(c.size_dict) / 1e6:.3g} MB"]
        rows.append("| " + " | ".join(cells) + " |")
    names = ["configuration", "sizes", *(["scalars"] if with_scalars else []), "initialisations",
             "fewest bytes moved"]
    head = "| " + " | ".join(names) + " |\n|" + "---|" * len(names)
    return head + "\n" + "\n".join(rows) + initialisations(ctx, {i for _, inits in seen.values() for i in inits})


def initialisations(ctx: Context, shown: set[str]) -> str:
    """What each shown initialisation draws, input by input (e.g. `offset: x ~ normal(60, 1)`), so that a kernel's
    numerics can be planned for it; empty for a task whose inputs name no initialisers."""
    lines = []
    for init in sorted(shown):
        draws = [f"{t.name} ~ {t.init[init]}" for t in ctx.task.inputs if init in t.init]
        if draws:
            lines.append(f"- {init}: " + ", ".join(draws))
    return "\n\nInitialisations (what the inputs are drawn from):\n" + "\n".join(lines) if lines else ""


def forbidden(ctx: Context) -> str:
    """What the static rules reject, one line per rule, and the headers a kernel may include."""
    lines = [f"- {name}: {reason}" for name, (reason, _, _) in rules.VOCABULARY.items()]
    lines += [f"- {name}: {reason}" for name, reason in rules.REASONS.items()
              if name not in ("inline-assembly", "preprocessor", "extern-c")]
    if ctx.abi == "torch":
        lines += [f"- {name}: {reason}" for name, _, reason in rules.TORCH_RULES]
    if ctx.target == "cpu":
        lines.append("- inline-assembly: no asm blocks in a CPU kernel")
    lines.append("- preprocessor: no token pasting (##), #import or push_macro/pop_macro")
    lines.append('- extern-c: only the entry point may be `extern "C"` (no `extern "C" { ... }` blocks, no C '
                 "declarations of your own)")
    headers = sorted(rules.C_INCLUDES | (rules.CUDA_INCLUDES if ctx.target == "cuda" else set()))
    allowed = ", ".join(f"<{h}>" for h in headers)
    if ctx.target == "cuda":
        allowed += ", and headers under " + ", ".join(f"<{p}...>" for p in rules.CUDA_INCLUDE_PREFIXES)
    lines.append(f'- include: only these headers, in angle brackets ("..." includes are refused): {allowed}')
    return "\n".join(lines)


def _ms(stats) -> str:
    return f"{stats.median:.4g}" if stats is not None else "-"


def _row(m: Measurement) -> str:
    speed = m.speedup("best")
    floor = m.floor_fraction
    state = "ok" if m.correct else f"FAILED: {m.failure or 'wrong'}"
    return (f"| {m.config} | {state} | {_ms(m.kernel)} | {_ms(m.eager)} | {_ms(m.compile)} | "
            f"{f'{speed:.3g}x' if speed else '-'} | {f'{floor:.1%}' if floor else '-'} |")


def numbers(ctx: Context, evaluation: Evaluation | None) -> str:
    """A parent's verdict and per-configuration times (ms, medians) on the shown configurations only."""
    if evaluation is None:
        return "Not judged yet."
    held = {c.id for c in ctx.heldout()}
    shown = [m for m in evaluation.measurements if not m.heldout and m.config not in held]
    if not evaluation.correct:
        head = f"Verdict: rejected at the {evaluation.stage} stage: {redact(ctx, evaluation.failure or 'wrong')}"
    else:
        def fmt(v, pct=False):
            return "-" if v is None else (f"{v:.0%}" if pct else f"{v:.3g}x")
        head = (f"Verdict: correct on every configuration. Over all configurations judged (shown or not), as geometric "
                f"means: speedup over the faster torch baseline "
                f"{fmt(evaluation.speedup)}, over eager {fmt(evaluation.speedup_eager)}, over torch.compile "
                f"{fmt(evaluation.speedup_compile)}; fraction of the memory floor "
                f"{fmt(evaluation.floor_fraction, True)}.")
    if not shown:
        return head
    table = ["| configuration | result | kernel ms | eager ms | compile ms | speedup | of memory floor |",
             "|---|---|---|---|---|---|---|"] + [_row(m) for m in shown]
    body = redact(ctx, "\n".join(table))
    return head + "\n\n" + body + ("\n\n(The kernel is also judged on configurations not shown here.)"
                                   if len(shown) < len(evaluation.measurements) else "")


SALTED = re.compile(r",? ?inputs \d+ of salt \d+")     # a correctness call's input variant (`judge.evaluator.checks`)


def redact(ctx: Context, text: str) -> str:
    """`text` with every mention of a held-out configuration replaced (see the module's guarantees), and without
    the correctness calls' input variants and salt, which a verdict names for a person to reproduce it
    (`KEVOLVE_INPUT_SALT`) and a prompt has no use for: "(call 3, inputs V of salt S)" becomes "(call 3)"."""
    text = SALTED.sub("", text or "")
    held = ctx.heldout()
    if not held or not text:
        return text
    markers = sorted({m for c in held for m in (c.id, c.shape_id, c.label, ",".join(f"{k}={v}" for k, v in c.sizes))
                      if m}, key=len, reverse=True)
    out = []
    for line in text.split("\n"):
        hit = any(m in line for m in markers)
        for m in markers:
            line = line.replace(m, HELDOUT)
        if hit:
            line = re.sub(r"\((\s*\d+\s*,)+\s*\d*\s*\)|\[(\s*\d+\s*,)+\s*\d+\s*\]", "(…)", line)
            line = re.sub(r"(?<![\w.])\d{3,}(?![\w.])", "…", line)
        out.append(line)
    return "\n".join(out)
