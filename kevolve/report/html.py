"""The HTML report: one self-contained file for one run or several, and every figure beside it as a PNG.

`render(runs, out_dir)` writes `out_dir/report.html` and `out_dir/*.png` and returns their paths. Per run: the
facts (task, device, candidates, correct, best speedups, spend, why it stopped), the progress, per-configuration,
lineage, outcome-rate and (when the run has LLM verdicts) verifier figures, the failures (kevolve/report/failures.py:
each failed candidate's stage, reason and configuration), the best kernel's numbers as a table,
the diff of the best kernel against its founding ancestor (its seed), and the resolved configuration. Several
runs add a comparison table and the best-so-far curves of all runs in one plot, first.

Guaranteed: the file needs no network and no other file to open (figures are base64 PNG data URIs, the style is
inline, there is no script); every text from the store is HTML-escaped and scrubbed of secrets
(`record.scrub`); reading is read-only (a running search is not disturbed). Not guaranteed: that a run still
being written is reported to its last candidate (it is as of the moment it was read).
"""
from __future__ import annotations

import base64
import difflib
import html
import json
import time
from pathlib import Path
from typing import Callable

from kevolve.progress import bar
from kevolve.report import data, failures, figures
from kevolve.report.tables import config_rows, op_rows
from kevolve.record import read
from kevolve.search.resolved import fill
from kevolve.record.scrub import scrub, scrub_text

STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2em auto;max-width:1200px;color:#222;
padding:0 1em}h1{font-size:1.6em}h2{border-bottom:2px solid #2a9d8f;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse;font-size:.85em;margin:.6em 0}td,th{border:1px solid #ddd;padding:.25em .6em;
text-align:right}td:first-child,th:first-child{text-align:left}th{background:#f3f6f8}figure{margin:1em 0}
img{max-width:100%;height:auto;border:1px solid #eee}figcaption{font-size:.85em;color:#555}
pre{background:#f8f8f8;padding:.6em;overflow-x:auto;font-size:.78em;line-height:1.3}
.add{background:#e6ffed;display:block}.del{background:#ffeef0;display:block}.hunk{color:#6f42c1;display:block}
.muted{color:#777}details{margin:1em 0}
"""


class Page:
    """The HTML being written and the PNGs beside it."""

    def __init__(self, out_dir: Path):
        self.out_dir, self.parts, self.pngs = out_dir, [], []

    def add(self, text: str) -> None:
        self.parts.append(text)

    def figure(self, name: str, fig, caption: str) -> None:
        if fig is None:
            return
        raw = figures.png(fig)
        path = self.out_dir / f"{name}.png"
        path.write_bytes(raw)
        self.pngs.append(path)
        b64 = base64.b64encode(raw).decode()
        self.add(f'<figure><img data-figure="{_e(name)}" alt="{_e(caption)}" src="data:image/png;base64,{b64}">'
                 f"<figcaption>{_e(caption)}</figcaption></figure>")


def render(runs: list[data.Run], out_dir: Path) -> tuple[Path, list[Path]]:
    out_dir.mkdir(parents=True, exist_ok=True)
    page = Page(out_dir)
    title = f"kevolve report: {runs[0].task}" if len({r.task for r in runs}) == 1 else "kevolve report"
    page.add(f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{_e(title)}</title>"
             f"<style>{STYLE}</style></head><body><h1>{_e(title)}</h1>"
             f"<p class=muted>{len(runs)} run(s), read {time.strftime('%Y-%m-%d %H:%M:%S')} from their stores</p>")
    steps: list[tuple[str, Callable[[], None]]] = []
    if len(runs) > 1:
        steps.append(("comparison", lambda: _comparison(page, runs)))
    for i, run in enumerate(runs):
        steps.append((run.name, lambda i=i, run=run: _run(page, run, f"run{i}_" if len(runs) > 1 else "")))
    for _, step in bar(steps, "rendering report"):
        step()
    page.add("</body></html>")
    path = out_dir / "report.html"
    path.write_text("\n".join(page.parts), encoding="utf-8")
    return path, page.pngs


def _comparison(page: Page, runs: list[data.Run]) -> None:
    n, rows, differ = data.compared(runs)
    page.add("<h2>Runs compared</h2>"
             f"<p>Side by side at the same budget: <b>best at {n}</b> is each run's best fitness (speedup over the "
             f"faster torch baseline, from the search) among its first {n} judged candidates — the most every run "
             "reached — so a run that went on longer is not favoured. Evolution against best-of-N: "
             "<code>search.mode=evolve,best_of_n</code>; LLM against knob only: <code>llm=openai,none</code> (a "
             "Hydra sweep, <code>-m</code>, then this report of its directory).</p>" + _table(
        ["run", "search", "budget (candidates, s, $)", "candidates", "correct", f"best at {n}", "speedup",
         "vs eager", "vs compile", "of floor", "LLM calls", "LLM-made judged (correct)", "spend", "wall time",
         "stopped"],
        [[Path(r["run"]).name, r["search"], _budget(r["budget"]), r["candidates"], r["correct"],
          _x(r["best_at_n"] or None), _x(r["speedup"]), _x(r["speedup_eager"]), _x(r["speedup_compile"]),
          _pct(r["floor_fraction"]), "-" if r["llm_calls"] is None else r["llm_calls"],
          f"{r['llm_made']} ({r['llm_made_correct']})", f"${r['dollars']:.2f}", f"{r['seconds']:.0f} s", r["stopped"]]
         for r in rows]))
    if len({r["budget"] for r in rows}) > 1:
        page.add("<p><b>The runs had different budgets</b> (candidates, wall time, dollars): compare them at "
                 f"best at {n}, or run them again with the same search.candidates, wall_time_s and dollars.</p>")
    if differ:
        page.add("<details open><summary>configuration that differs between the runs</summary>" + _table(
            ["key"] + [Path(r["run"]).name for r in rows], [[k] + [json.dumps(v) for v in vs] for k, vs in differ])
            + "</details>")
    page.figure("comparison", figures.progress(runs), "best speedup so far of each run, against candidates, wall "
                "time and dollars")


def _budget(b) -> str:
    candidates, seconds, dollars = b
    return f"{candidates if candidates is not None else '-'}, {seconds or '-'}, {'-' if dollars is None else dollars}"


def _run(page: Page, run: data.Run, prefix: str) -> None:
    best, ev = data.best(run), data.best_evaluation(run)
    counts = {o: sum(1 for r in run.finished if data.outcome(r) == o) for o in data.STATUS_ORDER}
    page.add(f"<h2 id='{_e(prefix or 'run')}'>{_e(run.task)}: {_e(str(run.dir))}</h2>")
    facts = [["target", run.target()], ["device", ev.device if ev else "-"],
             ["candidates judged", f"{len(run.finished)} of {len(run.records)} created"],
             ["outcomes", ", ".join(f"{n} {o.replace('_', ' ')}" for o, n in counts.items() if n)],
             ["best kernel", f"{best.candidate.id} ({best.candidate.operator}, generation {best.candidate.generation})"
              if best else "none correct"],
             ["speedup over the faster torch baseline", _x(ev.speedup if ev else None)],
             ["over eager / compile", f"{_x(ev.speedup_eager if ev else None)} / "
                                      f"{_x(ev.speedup_compile if ev else None)}"],
             ["fraction of the memory floor", _pct(ev.floor_fraction if ev else None)],
             ["numbers from", "the final judgement, baselines interleaved" if data._confirmed(run) else "the search"],
             ["proven on", _released(run, best)],
             ["stopped", data.summary_row(run)["stopped"]]]
    page.add(_table(["", ""], facts, header=False))
    page.figure(f"{prefix}progress", figures.progress([run]),
                "best speedup so far (line) and every correct candidate (dots), against candidates, wall time, dollars")
    page.figure(f"{prefix}configurations", figures.configurations(ev),
                "median time per configuration: torch eager, torch.compile, the best kernel, the memory floor")
    if ev and ev.correct:
        header, rows = config_rows(ev, label="best")
        page.add(_table(header, rows))
    _op(page, run, prefix)
    page.figure(f"{prefix}lineage", figures.lineage(run, best.candidate.id if best else None),
                "where the best kernel came from: its ancestors by generation, the operator on each edge")
    page.figure(f"{prefix}rates", figures.rates(run), "outcomes per operator and per model (n: candidates judged)")
    page.figure(f"{prefix}verifiers", figures.confusion(read.confusion(run.records)),
                "each LLM verifier's verdicts against the judge's outcome")
    page.add(failures.section(run))
    if best:
        _diff(page, run, best)
    plans = [p for _, kind, p in run.events if kind == "plan" and p.get("resolved")]
    config = scrub(fill(run.meta.get("config") or {}, plans[-1]["resolved"]) if plans else run.meta.get("config") or {})
    page.add("<details><summary>resolved configuration" + (" (nulls as the run resolved them)" if plans else "")
             + f"</summary><pre>{_e(json.dumps(config, indent=1))}</pre></details>")


def _released(run, best) -> str:
    """The release check's line for the report: the domain and the configurations swept."""
    checked = data.released(run, best.candidate.id) if best else None
    if checked is None:
        return "the shape set only (no release check recorded: search.release=0, or an older run)"
    return f"{checked['checked']} configurations swept over the task's domain: {checked['proven']}"


def _op(page: Page, run: data.Run, prefix: str) -> None:
    """The assembled op: per size, its bucket, what runs it (a kernel or torch) and the numbers that decided it."""
    found = data.op(run)
    if found is None:
        return
    op, ev = found
    page.add("<h3>The assembled op</h3>")
    if not op.correct:
        page.add(f"<p>Not used: {_e(scrub_text(op.failure or ''))}; the best kernel stands alone.</p>")
        return
    page.add(f"<p>The run's result: one library ({len(op.kernels)} kernel(s)), judged as a whole with the baselines "
             f"interleaved; each size bucket runs its kernel where the 95% interval of its speedup over the faster "
             f"torch baseline lies above 1 and every size is at least 0.98x, torch elsewhere. Geomean "
             f"<b>{_x(op.speedup)}</b> (1.00x where torch runs) against <b>{_x(op.best_speedup)}</b> for the best "
             f"single kernel.</p>")
    page.figure(f"{prefix}op", figures.op(op, ev), "the assembled op per size: the library kernel's speedup over the "
                "faster torch baseline with its 95% interval; teal: the kernel runs these sizes, grey: torch does")
    header, rows = op_rows(op, ev)
    page.add(_table(header, rows))


def _diff(page: Page, run: data.Run, best) -> None:
    seed = data.founder(run, best.candidate.id)
    page.add("<h3>The best kernel against its seed</h3>")
    if seed is None or seed.candidate.id == best.candidate.id:
        page.add(f"<p>The best kernel is a founder ({_e(best.candidate.operator)}): its source</p>"
                 f"<pre>{_e(scrub_text(best.candidate.source))}</pre>")
        return
    lines = difflib.unified_diff(seed.candidate.source.splitlines(), best.candidate.source.splitlines(),
                                 f"{seed.candidate.id} ({seed.candidate.operator})",
                                 f"{best.candidate.id} (best)", lineterm="", n=3)
    out = []
    for ln in lines:
        cls = ("hunk" if ln.startswith(("@@", "---", "+++")) else "add" if ln.startswith("+")
               else "del" if ln.startswith("-") else "")
        text = _e(scrub_text(ln))
        out.append(f'<span class="{cls}">{text}</span>' if cls else text + "\n")
    page.add(f"<p>diff of {_e(seed.candidate.id)} (the founding ancestor) → {_e(best.candidate.id)}</p>"
             f"<pre>{''.join(out)}</pre>")


def _table(columns: list[str], rows: list[list], header: bool = True) -> str:
    head = "<tr>" + "".join(f"<th>{_e(str(h))}</th>" for h in columns) + "</tr>" if header else ""
    body = "".join("<tr>" + "".join(f"<td>{_e(scrub_text(str(c)))}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table>{head}{body}</table>"


def _e(text: str) -> str:
    return html.escape(str(text), quote=True)


def _x(v) -> str:
    return "-" if v is None else f"{v:.2f}x"


def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"
