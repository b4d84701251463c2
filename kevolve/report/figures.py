"""The report's pictures, drawn with matplotlib (Agg: no display needed) from `kevolve.report.data`.

Each function takes plain data and returns a `Figure`, or None when the run has nothing to draw (no correct
kernel, no LLM verdicts); `png(fig)` gives its PNG bytes and closes it.
- `progress(runs)`: best speedup so far against candidates, wall time and dollars (one line per run: it is also
  the comparison plot); a single run also shows every correct candidate as a dot;
- `configurations(ev)`: per timed configuration, the median times of torch eager, torch.compile, the best
  kernel and the memory floor (log scale);
- `lineage(run, id)`: the ancestry of a candidate, generation by generation, the operator on each edge;
- `rates(run)`: per operator and per model, the share of candidates in each outcome, with counts;
- `confusion(counts)`: one 2×2 matrix per LLM verifier (its verdict against the judge's);
- `op(op, ev)`: the assembled op per timed configuration: the library kernel's speedup over the faster torch
  baseline with its 95% interval, coloured by what runs the size (its kernel, or torch), torch's 1x line.

Guaranteed: pure functions of their arguments; no file written, no network. Not guaranteed: legibility of a
lineage hundreds of generations deep (it is drawn, small).
"""
from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from kevolve.judge.results import Evaluation  # noqa: E402
from kevolve.report import data  # noqa: E402
from kevolve.record.rows import label  # noqa: E402

COLORS = {"correct": "#2a9d8f", "incorrect": "#e9c46a", "build_failed": "#f4a261", "rejected": "#e76f51",
          "failed": "#8d99ae", "eager": "#8d99ae", "compile": "#457b9d", "kernel": "#2a9d8f", "floor": "#264653"}


def png(fig: Figure, dpi: int = 110) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def progress(runs: list[data.Run]) -> Figure | None:
    curves = [(run, data.curve(run)) for run in runs]
    if not any(points for _, points in curves):
        return None
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2), sharey=True)
    xs = (("candidates", "candidates judged"), ("seconds", "wall time (s)"), ("dollars", "LLM spend (USD)"))
    spent = any(p.dollars > 0 for _, pts in curves for p in pts)
    for ax, (attr, title) in zip(axes, xs):
        for run, points in curves:
            if not points or (attr == "dollars" and not spent):
                continue
            x = [getattr(p, attr) for p in points]
            ax.step(x, [p.best for p in points], where="post", label=run.name if len(runs) > 1 else "best so far")
            if len(runs) == 1:
                ax.scatter([xi for xi, p in zip(x, points) if p.fitness > 0],
                           [p.fitness for p in points if p.fitness > 0],
                           s=10, color="grey", alpha=0.5, label="correct candidates")
        ax.set_xlabel(title)
        ax.grid(alpha=0.3)
        if attr == "dollars" and not spent:
            ax.text(0.5, 0.5, "no LLM spend recorded", transform=ax.transAxes, ha="center", color="grey")
    axes[0].set_ylabel("speedup over the faster torch baseline")
    axes[0].axhline(1.0, color="black", lw=0.6, ls=":")
    axes[0].legend(fontsize=8, loc="lower right")
    fig.suptitle("best speedup so far")
    return fig


def configurations(ev: Evaluation | None) -> Figure | None:
    timed = [m for m in ev.measurements if m.kernel is not None] if ev and ev.correct else []
    if not timed:
        return None
    series = [("eager", lambda m: m.eager and m.eager.median), ("compile", lambda m: m.compile and m.compile.median),
              ("kernel", lambda m: m.kernel.median), ("floor", lambda m: m.floor_ms)]
    series = [(name, f) for name, f in series if any(f(m) for m in timed)]
    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(timed) + 2), 4.2))
    for i, (name, f) in enumerate(series):
        xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(timed))]
        ax.bar(xs, [f(m) or 0 for m in timed], width, label={"kernel": "best kernel", "floor": "memory floor",
                                                             "compile": "torch.compile", "eager": "torch eager"}[name],
               color=COLORS[name])
    ax.set_xticks(range(len(timed)), [label(m.config).rsplit(":s", 1)[0] + (" (held out)" if m.heldout else "")
                                      for m in timed], rotation=30, ha="right", fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("median time (ms, log)")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    ax.set_title(f"per configuration ({ev.device or ev.target})")
    return fig


def lineage(run: data.Run, cid: str | None) -> Figure | None:
    if cid is None:
        return None
    nodes, edges = data.ancestry(run, cid)
    gens = sorted({r.candidate.generation for r in nodes})
    col = {g: i for i, g in enumerate(gens)}
    rows: dict[int, int] = {}
    pos = {}
    for r in nodes:
        c = col[r.candidate.generation]
        pos[r.candidate.id] = (c, rows.get(c, 0))
        rows[c] = rows.get(c, 0) + 1
    height = max(rows.values())
    fig, ax = plt.subplots(figsize=(min(48, max(6, 1.9 * len(gens))), max(2.2, 1.1 * height)))
    for parent, child, op in edges:
        (x0, y0), (x1, y1) = pos[parent], pos[child]
        ax.annotate("", (x1 - 0.28, y1), (x0 + 0.28, y0), arrowprops=dict(arrowstyle="->", color="#555", lw=0.9))
        ax.text((x0 + x1) / 2, (y0 + y1) / 2 + 0.12, op, ha="center", fontsize=7, color="#b5651d")
    for r in nodes:
        x, y = pos[r.candidate.id]
        fit = f"{r.fitness:.2f}x" if r.correct else data.outcome(r) or r.status
        ax.text(x, y, f"{r.candidate.id[:8]}\n{r.candidate.operator}\n{fit}", ha="center", va="center", fontsize=7,
                bbox=dict(boxstyle="round", fc="#e8f4f2" if r.candidate.id != cid else "#ffd166",
                          ec=COLORS["correct"] if r.correct else COLORS["failed"]))
    ax.set_xlim(-0.6, len(gens) - 0.4)
    ax.set_ylim(height - 0.4, -0.6)
    ax.axis("off")
    ax.set_title(f"lineage of the best kernel {cid[:8]} ({len(nodes)} candidates, {len(gens)} generations)")
    return fig


def rates(run: data.Run) -> Figure | None:
    groups = [("operator", data.rates(run, "operator")), ("model", data.rates(run, "model"))]
    if not any(g for _, g in groups):
        return None
    fig, axes = plt.subplots(1, 2, figsize=(12, max(2.5, 0.5 * max(len(g) for _, g in groups) + 1.5)))
    for ax, (key, counts) in zip(axes, groups):
        names = list(counts)
        left = [0.0] * len(names)
        for outcome in data.STATUS_ORDER:
            share = [counts[n][outcome] / max(1, sum(counts[n].values())) for n in names]
            ax.barh(names, share, left=left, color=COLORS[outcome], label=outcome.replace("_", " "))
            left = [a + b for a, b in zip(left, share)]
        for i, n in enumerate(names):
            ax.text(1.01, i, f"n={sum(counts[n].values())}", va="center", fontsize=8)
        ax.set_xlim(0, 1.15)
        ax.set_title(f"outcomes per {key}")
        ax.set_xlabel("share of candidates")
    axes[0].legend(fontsize=7, loc="lower center", bbox_to_anchor=(0.5, -0.45), ncol=5)
    return fig


def op(op, ev: Evaluation | None) -> Figure | None:
    """The assembled op per size (see the module)."""
    if op is None or not op.correct or ev is None:
        return None
    bucket_of = {c: r for r in op.routes for c in r.configs}
    timed = [(m, bucket_of[m.shape]) for m in ev.measurements if m.kernel is not None and m.shape in bucket_of
             and m.speedup("best")]
    if not timed:
        return None
    timed.sort(key=lambda mr: (op.routes.index(mr[1]), mr[0].shape))
    fig, ax = plt.subplots(figsize=(max(6, 0.55 * len(timed) + 3), 4.2))
    for i, (m, r) in enumerate(timed):
        s = m.speedup("best")
        lo, hi = m.speedup_ci or (s, s)
        ax.bar(i, s, 0.7, color=COLORS["kernel"] if r.kernel else COLORS["eager"])
        ax.errorbar(i, s, yerr=[[max(0.0, s - lo)], [max(0.0, hi - s)]], color="black", capsize=3, lw=0.8)
        ax.text(i, max(s, hi) * 1.02, r.kernel[:6] if r.kernel else "torch", ha="center", fontsize=7, rotation=90)
    ax.axhline(1.0, color="black", lw=0.8, ls=":")
    ax.set_ylim(0, 1.3 * max(max(m.speedup_ci or (0, m.speedup("best"))) for m, _ in timed))
    ax.set_xticks(range(len(timed)), [f"{m.shape} [{r.bucket}]" for m, r in timed], rotation=40, ha="right",
                  fontsize=7)
    ax.set_ylabel("library kernel over the faster torch baseline")
    ax.set_title(f"the assembled op per size: {op.speedup:.2f}x geomean (torch 1x where grey), best single kernel "
                 f"{op.best_speedup or 0:.2f}x", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    return fig


def confusion(counts: dict[str, dict[str, int]]) -> Figure | None:
    if not counts:
        return None
    n = len(counts)
    fig, axes = plt.subplots(1, n, figsize=(3.2 * n, 3.2), squeeze=False)
    for ax, (verifier, c) in zip(axes[0], counts.items()):
        matrix = [[c["tp"], c["fp"]], [c["fn"], c["tn"]]]
        ax.imshow(matrix, cmap="Blues", vmin=0, vmax=max(1, max(max(r) for r in matrix)))
        for i in range(2):
            for j in range(2):
                ax.text(j, i, str(matrix[i][j]), ha="center", va="center", fontsize=11)
        ax.set_xticks([0, 1], ["judge: bad", "judge: good"])
        ax.set_yticks([0, 1], ["said fail", "said pass"])
        said = c["tp"] + c["fp"]
        prec = f"precision {c['tp'] / said:.2f}" if said else "no fail verdicts"
        ax.set_title(f"{verifier}\n{prec}; {c['no_verdict']} no verdict", fontsize=9)
    fig.suptitle("LLM verifiers against the judge")
    return fig
