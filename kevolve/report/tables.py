"""Tables for people: one row per configuration, numbers in the units a kernel engineer reads.

Pure formatting of `Evaluation`s; nothing here measures or decides.
"""
from __future__ import annotations

from pathlib import Path

from kevolve.judge.results import Evaluation
from kevolve.messages import Op, RunSummary


def _ms(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x * 1e3:.1f}us" if x < 1 else f"{x:.3f}ms"


def _x(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    def line(r: list) -> str:
        return "  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


def config_rows(ev: Evaluation, label: str = "kernel") -> tuple[list[str], list[list[str]]]:
    """One row per timed configuration: device (or wall) time per call of each contender, the kernel's
    synced latency, speedups, the floor, the clock and the error. `*`: launch-bound (see Measurement)."""
    autotune = any(m.autotune for m in ev.measurements)
    synced = any(m.latency for m in ev.measurements)
    header = (["configuration", "eager", "compile"] + (["max-autotune"] if autotune else []) + [label]
              + ([f"{label} synced"] if synced else [])
              + ["vs eager", "vs compile", "vs best", "floor", "of floor", "clock", "max err/tol"])
    rows = []
    for m in ev.measurements:
        if m.kernel is None and m.correct:
            continue                          # seeds beyond the first are checked, not timed
        lat = m.latency.get("kernel")
        name = m.config.rsplit("/s", 1)[0] + (" (held out)" if m.heldout else "") + (" *" if m.launch_bound else "")
        rows.append([name,
                     _ms(m.eager and m.eager.median), _ms(m.compile and m.compile.median)]
                    + ([_ms(m.autotune and m.autotune.median)] if autotune else [])
                    + [_ms(m.kernel and m.kernel.median) if m.correct else "FAIL"]
                    + ([_ms(lat and lat.median)] if synced else [])
                    + [_x(m.speedup("eager")), _x(m.speedup("compile")), _x(m.speedup("best")), _ms(m.floor_ms),
                       _pct(m.floor_fraction), _clock(m.clock),
                       f"{m.max_rel_err:.3f}" if m.max_rel_err != float("inf") else "inf"])
    return header, rows


def _clock(clock: dict) -> str:
    """The kernel's clock, and any contender timed on another one (a baseline that could not be captured)."""
    mine = clock.get("kernel", "-")
    others = [f"{n}:{c}" for n, c in clock.items() if n != "kernel" and c != mine]
    return ", ".join([mine] + others)


def baseline_notes(ev: Evaluation) -> list[str]:
    """What went wrong beside a correct kernel (a baseline that failed to compile, one timed on another clock),
    each once; a configuration that lacks a baseline is counted, since its "vs best" is over the others only."""
    notes = sorted({m.failure for m in ev.measurements if m.correct and m.failure})
    lines = [f"note: {n}" for n in notes]
    timed = [m for m in ev.measurements if m.correct and m.kernel is not None]
    wanted = {n for n in ("eager", "compile") if any(m.baseline(n) for m in timed)
              or any((m.failure or "").startswith(f"{n}: ") for m in timed)}
    lacking = [m for m in timed if not all(m.baseline(n) for n in wanted)]
    if lacking:
        lines.append(f"WARNING: {len(lacking)} of {len(timed)} timed configurations lack a torch baseline (a '-' "
                     f"above): their 'vs best' and the speedup below are over the baselines that were timed")
    return lines


def evaluation_report(ev: Evaluation) -> str:
    header, rows = config_rows(ev)
    lines = [f"{ev.task} on {ev.device or ev.target} ({ev.shapes} shapes, abi={ev.abi}); times per call: "
             + ("device time, launch overhead removed (CUDA graph replay, L2 flushed); synced: one call waited on"
                if ev.target == "cuda" else "wall time, its buffers evicted from the caches first")]
    if rows:
        lines.append(table(rows, header))
    if any(m.launch_bound for m in ev.measurements):
        lines.append("*: launch-bound — a device time under 5 us or under its own launch cost; a caller that "
                     "waits for each call sees the synced column")
    lines += baseline_notes(ev)
    if ev.correct:
        ci = f" (95% CI {ev.speedup_ci[0]:.2f}-{ev.speedup_ci[1]:.2f})" if ev.speedup_ci else ""
        lines.append(f"correct on all {len(ev.measurements)} configurations; speedup {_x(ev.speedup)}{ci} over the "
                     f"faster torch baseline (eager {_x(ev.speedup_eager)}, compile {_x(ev.speedup_compile)}), "
                     f"{_pct(ev.floor_fraction)} of the memory floor"
                     + (f" (copy bandwidth {ev.bandwidth_gbs:.0f} GB/s)" if ev.bandwidth_gbs else ""))
    else:
        lines.append(f"REJECTED at {ev.stage}: {ev.failure}")
    return "\n".join(lines)


def op_rows(op: Op, ev: Evaluation | None) -> tuple[list[str], list[list[str]]]:
    """The assembled op per size: one row per timed configuration of its judgement — its bucket, what runs it (a
    kernel, or torch), the op's speedup over the faster torch baseline (1.00x where torch runs) and the kernel's
    own with its 95% interval (the library's kernel, measured also where torch was chosen)."""
    header = ["bucket", "configuration", "runs", "op", "kernel", "kernel 95%", "decided"]
    bucket_of = {c: r for r in op.routes for c in r.configs}
    rows = []
    for m in (ev.measurements if ev is not None else ()):
        r = bucket_of.get(m.shape)
        if m.kernel is None or r is None:
            continue
        s = m.speedup("best")
        ci = f"{m.speedup_ci[0]:.2f}-{m.speedup_ci[1]:.2f}" if m.speedup_ci else "-"
        rows.append([r.bucket, m.shape + (" (held out)" if m.heldout else ""), r.kernel or "torch",
                     _x(s if r.kernel else 1.0), _x(s), ci, r.why])
    return header, rows


def op_text(op: Op, ev: Evaluation | None) -> list[str]:
    """The lines the summary prints for the assembled op."""
    if not op.correct:
        return [f"assembled op ({op.source}): not used — {(op.failure or '')[:400]}; the best kernel stands alone"]
    header, rows = op_rows(op, ev)
    kernels = sorted({r.kernel for r in op.routes if r.kernel})
    lines = [f"the assembled op ({op.source}), judged as a whole ({len(op.kernels)} kernel(s) in its library), "
             f"baselines interleaved: per size, its bucket's kernel where that kernel is confirmed faster than the "
             f"faster torch baseline (interval above 1, every size >= 0.98x), else torch:", table(rows, header)]
    lines.append(f"op {_x(op.speedup)} over the faster torch baseline (geomean over {len(rows)} sizes, torch's "
                 f"1.00x where it runs; kernels {', '.join(kernels) or 'none'}), against {_x(op.best_speedup)} for the "
                 f"best single kernel")
    return lines


def llm_failure_lines(health: dict) -> list[str]:
    """The LLM's failed calls, by cause and by provider/model (kevolve/search/llm_health.py `summary`): none when
    every call came back."""
    if not health or not health.get("failed"):
        return []
    causes = "; ".join(f"{cause} ({n})" for cause, n in health["causes"].items())
    models = ", ".join(f"{m} {c['failed']} of {c['calls']}" for m, c in health["models"].items() if c["failed"])
    return [f"LLM: {health['failed']} of {health['calls']} calls failed: {causes}; by model: {models}"
            + (f"; paused {health['pauses']} time(s), knob mutation meanwhile" if health.get("pauses") else "")]


def summary_text(summary: RunSummary, store_dir: Path) -> str:
    """The table people read at the end: the best kernel per configuration, then where things are."""
    lines = []
    best = summary.best
    if best:
        from kevolve.record.store import Store
        with Store.open(store_dir, readonly=True) as store:
            confirmed = [p for _, _, p in store.events("confirm")      # the judgement with baselines interleaved
                         if p.get("id") == best.id and p.get("correct")] if best.confirmed else []
            ev = Evaluation.from_json(confirmed[-1]["evaluation"] if confirmed else store.get(best.id).evaluation)
        header, rows = config_rows(ev, label="best")
        how = ("judged again, baselines interleaved" if best.confirmed
               else "not confirmed: " + "; ".join(best.not_confirmed or ["baselines from the search"])[:300])
        lines += [f"best kernel {best.id} ({best.operator}) on {ev.device}, {how}:", table(rows, header),
                  *baseline_notes(ev),
                  f"speedup {best.speedup:.2f}x"
                  + (f" [{best.speedup_ci[0]:.2f}, {best.speedup_ci[1]:.2f}] (95%)" if best.speedup_ci else "")
                  + f" over the faster torch baseline (eager {_x(best.speedup_eager)}, "
                  f"compile {_x(best.speedup_compile)})"]
        if best.release:
            lines.append(best.release)
        if best.ties:
            lines.append(f"indistinguishable from it when timed paired ({best.comparisons} comparisons in all): "
                         + ", ".join(best.ties))
        if best.not_confirmed and best.confirmed:
            lines.append("better candidates failed when judged again: " + "; ".join(best.not_confirmed)[:600])
        if summary.op is not None:
            lines += op_text(summary.op, _op_evaluation(store_dir))
    elif summary.not_released:
        lines.append("no kernel was released: every candidate tried failed the release check or its confirmation: "
                     + "; ".join(summary.not_released)[:1200])
    else:
        lines.append("no correct kernel was found"
                     + (" (no judgement finished before the budget ended)" if not summary.candidates else ""))
    if summary.unfinished and not summary.candidates:      # (in the JSON summary always)
        lines += ["cut off by the budget: " + line for line in summary.unfinished]
    part = (f"; this part: {summary.candidates - summary.earlier} in {summary.search_seconds:.0f} s of search"
            if summary.earlier else f" in {summary.search_seconds:.0f} s of search")
    lines += [f"candidates {summary.candidates} ({summary.correct} correct"
              + (f", {summary.earlier} before this part" if summary.earlier else "") + f"){part} "
              f"({summary.seconds:.0f} s in all): {summary.candidates_per_minute:.1f}/min, evaluators busy "
              f"{100 * summary.evaluator_busy:.0f}%; "
              f"stopped: {summary.stopped}",
              f"run dir: {summary.run_dir}"]
    if summary.llm_calls or summary.spend_usd:
        lines.append(f"LLM: {summary.llm_calls} calls, ${summary.spend_usd:.4f} spent")
    lines += llm_failure_lines(summary.llm_health)
    if summary.rejections:
        lines.append(f"rejected {sum(summary.rejections.values())}: "
                     + ", ".join(f"{n} {reason}" for reason, n in summary.rejections.items())
                     + " (each with its text: the report's failures table, `python -m kevolve.report RUN_DIR`)")
    if summary.verifiers:
        rows = [[name, _pct(v["precision"]), _pct(v["recall"]), _pct(v["accuracy"]), str(v["samples"]),
                 str(v["rejections"]), str(v["no_verdict"]), str(v.get("unobserved", 0)),
                 "yes" if v["earned"] else "no"] for name, v in summary.verifiers.items()]
        lines += ["LLM verifiers against the judge (a positive is a fail verdict; unobserved: the judge could not "
                  "see the verifier's property, e.g. numerics of a kernel that crashed):",
                  table(rows, ["verifier", "precision", "recall", "accuracy", "judged", "said fail", "no verdict",
                               "unobserved", "may reject"]),
                  f"GPU-seconds saved by rejections not built: {summary.gpu_seconds_saved:.0f}"]
    if summary.suspected_judge_bugs:
        lines.append(f"SUSPECTED JUDGE BUGS: red-team kernels the judge accepted: "
                     f"{', '.join(summary.suspected_judge_bugs)} (saved in {summary.run_dir}/suspected_judge_bugs/)")
    if best:
        lines.append(f"best kernel: {best.kernel}")
    if summary.op is not None and summary.op.correct:
        lines.append(f"assembled op: {summary.op.source} (python -m kevolve.export {summary.run_dir} -o DIR: a "
                     "torch op package)")
    return "\n".join(lines)


def _op_evaluation(store_dir: Path) -> Evaluation | None:
    """The op's judgement, from the run's last `assembled` event."""
    from kevolve.record.store import Store
    with Store.open(store_dir, readonly=True) as store:
        found = [p for _, _, p in store.events("assembled")]
    text = found[-1].get("evaluation") if found else None
    return Evaluation.from_json(text) if text else None
