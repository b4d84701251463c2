"""Contracts of `python -m kevolve.report`: from a store alone (synthetic here: seeds, knob and LLM children,
a crossover, failures, spend, a final judgement) it writes one self-contained HTML file and the PNGs; the page
renders in headless Chromium with no console error, no request beyond the file itself, every figure decoded;
the lineage, the seed diff and the rates say what the store says; several runs (or a multirun directory) give
a comparison; a directory without runs is a usage error."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import chromium
from kevolve.judge.results import Evaluation, Measurement, Stats
from kevolve.messages import Candidate, Status
from kevolve.progress import bar
from kevolve.report import data, figures
from kevolve.cli.report import main
from kevolve.record import read
from kevolve.record.store import Store
from kevolve.record import events

ROOT = Path(__file__).resolve().parents[2]
SEED = "#include <cstdint>\nconstexpr int ROWS = 1;   // knob: 1, 2, 4\nint forward() { return 0; }\n"
SINGLE = {"progress", "configurations", "lineage", "rates", "op"}


def evaluation(speed: float, correct: bool = True) -> Evaluation:
    ms = tuple(Measurement(f"B={b},N={n}/random/s0", f"B={b},N={n}", "random", n == 1001, correct,
                           kernel=Stats(1.0 / speed, 0.9 / speed, 1.1 / speed, 5) if correct else None,
                           eager=Stats(1.0, 0.9, 1.1, 5), compile=Stats(0.8, 0.7, 0.9, 5), floor_ms=0.05)
               for b, n in ((4, 256), (3, 1001)))
    return Evaluation("search_task", "cpu", "c", "small", True, correct, None if correct else "wrong answer",
                      measurements=ms, device="test CPU")


def make_run(run_dir: Path, gain: float = 1.0) -> dict[str, str]:
    """seed → knob → (optimize by a model, with cost) → crossover(optimize, knob2); a build failure, a rejection."""
    ids = {}
    with Store.create(run_dir, {"task": "search_task", "config": {"resources": {"target": "cpu"},
                                                                   "llm": {"api_key": "sk-secret-in-config"}}}) as s:
        def add(name, source, op, parents=(), gen=0, model=None, cost=0.0, speed=None, status=None):
            c = Candidate.new(source, operator=op, parents=tuple(ids[p] for p in parents), generation=gen, model=model)
            ids[name] = c.id
            s.add_candidate(c, cost_usd=cost)
            if status:
                s.set_stage(c.id, status, feedback="static rule: threads" if status is Status.REJECTED else None,
                            build={"ok": False, "error": "expected ;"} if status is Status.BUILD_FAILED else None)
            else:
                s.record_evaluation(c.id, evaluation(speed * gain, speed > 0) if speed else evaluation(1, False), 1.0)
        add("seed", SEED, "seed", speed=1.2)
        add("knob", SEED.replace("ROWS = 1", "ROWS = 2"), "knob", ("seed",), 1, speed=1.5)
        add("opt", SEED.replace("return 0", "return 0; /* fused */"), "optimize", ("knob",), 2, "gpt-x", 0.02, 2.0)
        add("knob2", SEED.replace("ROWS = 1", "ROWS = 4"), "knob", ("seed",), 1, speed=1.4)
        add("cross", SEED.replace("ROWS = 1", "ROWS = 4").replace("return 0", "return 0; /* fused */"),
            "crossover", ("opt", "knob2"), 3, "gpt-x", 0.03, 2.5)
        add("wrong", SEED + "// wrong\n", "optimize", ("knob",), 2, "gpt-y", 0.01, speed=-1)
        add("broken", SEED + "oops", "repair", ("wrong",), 3, "gpt-y", 0.01, status=Status.BUILD_FAILED)
        add("bad", SEED + "// thread", "optimize", ("knob",), 2, "gpt-x", 0.01, status=Status.REJECTED)
        s.log_event(events.MutationFailed(cost_usd=0.05, reason="no code"))
        s.log_event(events.Confirm(id=ids["cross"], correct=True, evaluation=evaluation(2.4 * gain).to_json()))
        s.log_event(events.Assembled(assembled(ids, gain)))
        s.log_event(events.Finish({"stopped": "budget of candidates spent"}))
    return ids


def assembled(ids: dict[str, str], gain: float) -> dict:
    """The `assembled` event of a run whose op runs the crossover child on short rows and torch on long ones."""
    ev = evaluation(2.4 * gain)
    ev = Evaluation(**{**ev.__dict__, "measurements": tuple(
        Measurement(**{**m.__dict__, "speedup_ci": (2.0, 2.6) if m.shape == "B=4,N=256" else (0.8, 1.3)})
        for m in ev.measurements)})
    routes = [{"bucket": "100<=N<1000", "configs": ["B=4,N=256"], "kernel": ids["cross"],
               "library_kernel": ids["cross"], "speedup": 3.0, "ci": [2.0, 2.6], "worst": 3.0,
               "why": "kernel: faster, [2.00, 2.60]"},
              {"bucket": "N>=1000", "configs": ["B=3,N=1001"], "kernel": None, "library_kernel": ids["cross"],
               "speedup": 3.0, "ci": [0.8, 1.3], "worst": 3.0, "why": "torch: the interval [0.80, 1.30] does not lie "
                                                                        "above 1"}]
    op = {"correct": True, "source": "op.cpp", "kernels": [ids["cross"]], "routes": routes, "speedup": 1.73,
          "best_speedup": 2.4 * gain, "failure": None, "seconds": 3.0}
    return {"task": "search_task", "target": "cpu", "shapes": "small", "op": op, "evaluation": ev.to_json()}


def test_the_report_shows_the_op_per_size_what_runs_it_and_why(run, tmp_path):
    r, ids = run
    assert main([str(r.dir), "-o", str(tmp_path / "out")]) == 0
    text = (tmp_path / "out" / "report.html").read_text()
    assert (tmp_path / "out" / "op.png").is_file()
    assert "The assembled op" in text and "<b>1.73x</b>" in text
    assert f"<td>{ids['cross']}</td>" in text and "<td>torch</td>" in text
    assert "torch: the interval [0.80, 1.30] does not lie above 1" in text


@pytest.fixture
def run(tmp_path):
    ids = make_run(tmp_path / "run")
    return data.load(tmp_path / "run"), ids


def test_the_store_tells_the_lineage_the_seed_and_the_rates(run):
    r, ids = run
    assert data.best(r).candidate.id == ids["cross"]
    assert data.best_evaluation(r).speedup_eager == pytest.approx(2.4)  # the final judgement's numbers
    nodes, edges = data.ancestry(r, ids["cross"])
    assert {n.candidate.id for n in nodes} == {ids[k] for k in ("seed", "knob", "opt", "knob2", "cross")}
    assert (ids["opt"], ids["cross"], "crossover") in edges and (ids["knob2"], ids["cross"], "crossover") in edges
    assert data.founder(r, ids["cross"]).candidate.id == ids["seed"]
    rates = data.rates(r, "model")
    assert rates["gpt-x"] == {"correct": 2, "rejected": 1} and rates["gpt-y"] == {"incorrect": 1, "build_failed": 1}
    points = data.curve(r)
    # over compile, the faster
    assert [p.best for p in points] == sorted(p.best for p in points) and points[-1].best == pytest.approx(2.5 * 0.8)
    assert points[-1].dollars == pytest.approx(0.08)                     # spent by the last verdict
    assert data.summary_row(r)["dollars"] == pytest.approx(0.13)         # and in all, events included


def test_verifier_confusion_counts_verdicts_against_the_judge():
    def rec(passed, correct, status="evaluated"):
        return SimpleNamespace(status=status, compiled=True, correct=correct, feedback=None if correct else "wrong",
                               screening={"verdicts": [{"verifier": "numerics", "passed": passed}]})
    counts = read.confusion([rec(False, False), rec(False, True), rec(True, False), rec(True, True), rec(True, True),
                             rec(None, True), rec(False, False, "rejected")])
    assert counts == {"numerics": dict(tp=1, fp=1, fn=1, tn=2, no_verdict=1, unobserved=0)}
    assert figures.confusion(counts) is not None and figures.confusion({}) is None


def test_the_report_renders_in_chromium_with_every_figure(run, tmp_path):
    assert chromium.binary(), "chromium is missing: apt-get install -y chromium (.ci/run installs it)"
    r, ids = run
    assert main([str(r.dir), "-o", str(tmp_path / "out")]) == 0
    page = tmp_path / "out" / "report.html"
    assert {p.stem for p in (tmp_path / "out").glob("*.png")} == SINGLE
    text = page.read_text()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", text), "the report must not need the network"
    assert "sk-secret-in-config" not in text
    assert "+constexpr int ROWS = 4;" in text and "-constexpr int ROWS = 1;" in text        # the diff against the seed
    seen = chromium.inspect(page, tmp_path / "shot.png")
    assert seen["errors"] == []
    assert {i["figure"] for i in seen["images"]} == SINGLE
    assert all(i["complete"] and i["width"] > 100 and i["height"] > 100 for i in seen["images"]), seen["images"]
    assert all(u.startswith(("file:", "data:")) for u in seen["requests"]), seen["requests"]
    assert (tmp_path / "shot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_multirun_directory_gives_a_comparison(tmp_path):
    make_run(tmp_path / "multirun" / "0_search_task_seed0")
    make_run(tmp_path / "multirun" / "1_search_task_seed1", gain=1.5)
    proc = subprocess.run([sys.executable, "-m", "kevolve.report", str(tmp_path / "multirun")], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    out = Path(proc.stdout.strip())
    assert out == tmp_path / "multirun" / "report" / "report.html"
    pngs = {p.stem for p in out.parent.glob("*.png")}
    assert "comparison" in pngs and {f"run{i}_{f}" for i in (0, 1) for f in SINGLE} <= pngs
    html = out.read_text()
    # each run's confirmed speedup over eager
    assert "Runs compared" in html and "3.60x" in html and "2.40x" in html


def test_a_directory_without_runs_is_a_usage_error(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    assert "no kevolve.db" in capsys.readouterr().err


def test_progress_bars_are_quiet_off_a_terminal():
    items = [1, 2, 3]
    assert bar(items, "x") is items          # pytest captures stdout: not a terminal
