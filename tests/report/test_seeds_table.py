"""`python -m kevolve.tasks seeds-table` (kevolve/cli/seeds_table.py) reads back what `python -m kevolve.evaluate`
prints: the per-configuration table
of `evaluation_report` and the summary JSON, for a correct and a rejected kernel."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from kevolve.cli import h200_report as h200
from kevolve.cli import seeds_table
from kevolve.judge.results import Evaluation, Measurement, Stats
from kevolve.report.tables import evaluation_report

ROOT = Path(__file__).resolve().parents[2]


def evaluation(correct: bool) -> Evaluation:
    """Two shapes; the first under two initialisations, the first of them the slower."""
    ms = (Measurement("B=8,(1,256,256)/tiny/s0", "B=8,(1,256,256)", "tiny", False, correct,
                      kernel=Stats(0.008, 0.0079, 0.0081, 9) if correct else None, eager=Stats(0.012, 0.011, 0.013, 9),
                      compile=Stats(0.0068, 0.0066, 0.007, 9), floor_ms=0.002),
          Measurement("B=8,(1,256,256)/random/s0", "B=8,(1,256,256)", "random", False, correct,
                      kernel=Stats(0.004, 0.0039, 0.0041, 9) if correct else None, eager=Stats(0.012, 0.011, 0.013, 9),
                      compile=Stats(0.0068, 0.0066, 0.007, 9), floor_ms=0.002, launch_bound=True),
          Measurement("B=8192,(4096,)/random/s0", "B=8192,(4096,)", "random", True, correct,
                      kernel=Stats(0.070, 0.069, 0.071, 9) if correct else None, eager=Stats(0.2, 0.19, 0.21, 9),
                      compile=Stats(0.0664, 0.066, 0.067, 9), floor_ms=0.064))
    return Evaluation("layernorm_fwd", "cuda", "c", "bench", True, correct, None if correct else "wrong answer at x",
                      measurements=ms, device="NVIDIA H200")


def log(tmp_path: Path, ev: Evaluation) -> Path:
    path = tmp_path / "layernorm_fwd__cuda_fast.txt"
    path.write_text("building...\n" + evaluation_report(ev) + "\n" + json.dumps(ev.summary()) + "\n")
    return path


def test_a_correct_seed_gives_a_row_per_configuration_and_its_geomeans(tmp_path):
    rows = seeds_table.table_rows(log(tmp_path, evaluation(True)))
    assert [r[2] for r in rows] == ["B=8,(1,256,256) *", "B=8192,(4096,) (held out)", "geomean"]
    assert rows[0][:8] == ["layernorm_fwd", "cuda_fast", "B=8,(1,256,256) *", "8.0us", "6.8us", "12.0us", "2.0us",
                           "25%"]
    assert rows[0][8:] == ["0.85x", "0.85x", "0.85x"]     # the first init's numbers (tiny), the worst init
    assert rows[1][3] == "70.0us" and rows[1][8:] == ["0.95x", "0.95x", "0.95x"]
    assert rows[2][8] == f"{(1.7 * 0.85 * 0.0664 / 0.070) ** (1 / 3):.2f}x"


def test_a_rejected_seed_gives_one_row_with_the_reason(tmp_path):
    rows = seeds_table.table_rows(log(tmp_path, evaluation(False)))
    assert rows[-1][2:4] == ["REJECTED", "wrong answer at x"]


def test_a_log_without_a_summary_says_so(tmp_path):
    path = tmp_path / "rmsnorm_fwd__cuda.txt"
    path.write_text("Traceback (most recent call last):\n  killed\n")
    assert seeds_table.table_rows(path) == [["rmsnorm_fwd", "cuda", "REJECTED",
                                             "no summary: see the log (timeout or crash)"] + [""] * 7]


def test_the_h200_report_keeps_each_tasks_fastest_correct_seed(tmp_path, capsys):
    """`kevolve.tasks h200-report` reads seeds_table's own output back: of a task's seeds it keeps the correct one
    with the best geomean over compile, lists every shape of it, and names the others and the tasks without one."""
    fast = log(tmp_path, evaluation(True))
    slow = tmp_path / "layernorm_fwd__cuda_split.txt"
    ev = evaluation(True)
    slower = tuple(dataclasses.replace(m, kernel=Stats(2 * m.kernel.median, 2 * m.kernel.p10, 2 * m.kernel.p90, 9))
                   for m in ev.measurements)
    ev2 = dataclasses.replace(ev, measurements=slower)
    slow.write_text(evaluation_report(ev2) + "\n" + json.dumps(ev2.summary()) + "\n")
    bad = tmp_path / "layernorm_fwd__cuda_bad.txt"
    bad.write_text(evaluation_report(evaluation(False)) + "\n" + json.dumps(evaluation(False).summary()) + "\n")
    seeds_table.main([str(fast), str(slow), str(bad)])
    table = tmp_path / "seeds.h200.txt"
    table.write_text("# what ran: bash experiments/gpu_seeds.sh\n" + capsys.readouterr().out)
    text = h200.report([table])
    summary = [line for line in text.splitlines() if line.startswith("| layernorm_fwd |") and "seeds.h200.txt" in line]
    assert len(summary) == 1 and "| cuda_fast.cu | 2 |" in summary[0], summary
    assert "### layernorm_fwd: cuda_fast.cu (other seeds, vs compile: cuda_split " in text
    assert "| B=8,(1,256,256) | 12.0us | 6.8us | 8.0us | 2.0us | 25% | 0.85x | 0.85x | 0.85x | yes |" in text
    assert "| B=8192,(4096,) (held out) | 200.0us | 66.4us | 70.0us |" in text
    assert "| rmsnorm_fwd | not judged correct on bench yet |" in text        # a shipped task with no rows
    assert "what ran: bash experiments/gpu_seeds.sh" in text                 # the commands behind the numbers


def test_the_h200_report_says_when_compile_was_not_timed(tmp_path, capsys):
    """A judgement whose torch.compile baseline failed on some shapes (on the H200, a seeded worker) has "-" there;
    the report says so beside the seed, since its "vs best torch" is over eager on those shapes."""
    ev = evaluation(True)
    ev = dataclasses.replace(ev, measurements=ev.measurements[:2] + (
        dataclasses.replace(ev.measurements[2], compile=None,
                            failure="compile: torch.compile failed: PermissionError"),))
    seeds_table.main([str(log(tmp_path, ev))])
    table = tmp_path / "seeds.h200.txt"
    table.write_text(capsys.readouterr().out)
    summary = [line for line in h200.report([table]).splitlines()
               if line.startswith("| layernorm_fwd |") and "seeds.h200.txt" in line]
    assert len(summary) == 1 and "compile not timed on 1 of 2 shapes" in summary[0], summary


def test_the_h200_report_keeps_a_seeds_latest_judgement_and_lists_the_best_kernels(tmp_path, capsys):
    """A seed judged twice (a second table appended to a results file) counts once, by its latest judgement; every
    tasks/<name>/best/cuda.md gives a row of the searched-kernels section, with its recorded numbers."""
    ev = evaluation(True)
    seeds_table.main([str(log(tmp_path, ev))])
    first = capsys.readouterr().out
    slower = tuple(dataclasses.replace(m, kernel=Stats(2 * m.kernel.median, 2 * m.kernel.p10, 2 * m.kernel.p90, 9))
                   for m in ev.measurements)
    seeds_table.main([str(log(tmp_path, dataclasses.replace(ev, measurements=slower)))])
    table = tmp_path / "seeds.h200.txt"
    table.write_text("# first\n" + first + "\n# again\n" + capsys.readouterr().out)
    text = h200.report([table])
    summary = [line for line in text.splitlines() if line.startswith("| layernorm_fwd |") and "seeds.h200.txt" in line]
    assert len(summary) == 1 and "| cuda_fast.cu | 2 |" in summary[0], summary     # two shapes, not four
    assert "| B=8,(1,256,256) | 12.0us | 6.8us | 16.0us |" in text                  # the second judgement's time
    shipped = sorted(p.parent.parent.name for p in (ROOT / "tasks").glob("*/best/cuda.md"))
    rows = [line for line in text.split("## Searched kernels", 1)[-1].splitlines() if "/best/cuda.md](" in line]
    assert [r.split(" | ")[0].lstrip("| ") for r in rows] == shipped
