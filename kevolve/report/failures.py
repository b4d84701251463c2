"""The report's failures section: every candidate that was not correct — candidate, operator, stage, reason, the
configuration it failed on, and the failure's text — with the count per reason, and the proposals that gave no
candidate (an LLM call that failed, a reply without a kernel, a duplicate) per operator and reason.

`section(run)` is the HTML (rows from kevolve/record/failures.py, read as the console and W&B read them). Every text
is HTML-escaped and scrubbed of secrets; the table shows the last `SHOWN` failures (the counts are over all).
"""
from __future__ import annotations

import html
from collections import Counter

from kevolve.record import failures
from kevolve.record.scrub import scrub_text

SHOWN = 200
COLUMNS = ("candidate", "operator", "stage", "reason", "configuration", "detail")


def section(run) -> str:
    rows = failures.rows(run.finished)
    proposals = Counter((p.get("operator") or "?", failures.reason_of(p.get("reason") or ""))
                        for _, kind, p in run.events if kind == "mutation_failed")
    if not rows and not proposals:
        return "<h3>Failures</h3><p>none: every judged candidate was correct and every proposal gave one</p>"
    out = [f"<h3>Failures</h3><p>{len(rows)} of {len(run.finished)} judged candidates failed: "
           + ", ".join(f"{n} {_e(reason)}" for reason, n in failures.counts(rows).items())
           + (f" (the last {SHOWN} below)" if len(rows) > SHOWN else "") + "</p>"]
    if rows:
        out.append(_table(list(COLUMNS), [[r[c] for c in COLUMNS] for r in rows[-SHOWN:]], "failures"))
    if proposals:
        out.append(f"<p>{sum(proposals.values())} proposals gave no candidate:</p>"
                   + _table(["operator", "reason", "proposals"],
                            [[op, reason, n] for (op, reason), n in proposals.most_common()], "proposals-failed"))
    return "".join(out)


def _table(columns: list[str], rows: list[list], name: str) -> str:
    head = "<tr>" + "".join(f"<th>{_e(c)}</th>" for c in columns) + "</tr>"
    body = "".join("<tr>" + "".join(f'<td style="text-align:left">{_e(scrub_text(str(c)))}</td>' for c in r)
                    + "</tr>" for r in rows)
    return f'<table data-table="{name}">{head}{body}</table>'


def _e(text) -> str:
    return html.escape(str(text), quote=True)
