"""Failures shown, end to end on the CPU: a task with a second seed that writes nothing. The console says that
seed's rejection as it happens (its file, stage, configuration, reason and the judge's text), the progress line
counts rejections by reason, the summary has the counts, and the HTML report has the failures table."""
from __future__ import annotations

import shutil

import pytest

from kevolve.cli.report import main as report_main
from kevolve.search import driver as search
from llm_kit import TASK, config, ray_with

BAD = """#include <cstdint>
extern "C" int forward(const float* x, float* out, int64_t B, int64_t N, float scale,
                       void* workspace, int64_t workspace_bytes) {
    return 0;                                 // forgets to write out
}
"""


@pytest.mark.slow
def test_a_rejected_seed_is_said_on_the_console_and_in_the_report(tmp_path, capfd):
    task = tmp_path / "task"
    shutil.copytree(TASK, task)
    (task / "seeds" / "forgets.cpp").write_text(BAD)
    yaml = (task / "task.yaml").read_text()
    (task / "task.yaml").write_text(yaml.replace("  cpu: [cpu.cpp]", "  cpu: [cpu.cpp, forgets.cpp]"))
    cfg = config(task, {}, candidates=4)
    cfg.progress = True
    run_dir = tmp_path / "run"
    with ray_with({}, tmp_path / "cache"):
        summary = search.run(cfg, run_dir)
    err = capfd.readouterr().err
    said = [line for line in err.splitlines() if line.startswith("seed forgets.cpp")]
    assert len(said) == 1, err[-3000:]
    assert "rejected at correctness on B=4,N=256/random/s0: outputs not written — " in said[0]
    assert "elements NaN — not written?" in said[0]
    assert any(line.startswith("[") and "rejected 1: 1 outputs not written" in line for line in err.splitlines())
    assert summary.rejections == {"outputs not written": 1}
    assert report_main([str(run_dir), "-o", str(tmp_path / "report")]) == 0
    html = (tmp_path / "report" / "report.html").read_text()
    assert 'data-table="failures"' in html and "seed (forgets.cpp)" in html and "outputs not written" in html
