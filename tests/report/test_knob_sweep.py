"""`python -m kevolve.tasks knob-sweep` (kevolve/cli/knob_sweep.py): the seed and its knob variants judged side by
side by one evaluator."""
from __future__ import annotations

from pathlib import Path

import pytest

from kevolve.cli import knob_sweep as sweep

ROOT = Path(__file__).resolve().parents[2]
FUSED = ROOT / "tasks" / "layernorm_fwd" / "seeds" / "cpu_fused.cpp"

pytestmark = pytest.mark.usefixtures("private_build_cache")


def test_each_gives_every_other_choice_and_a_variant_its_values():
    todo = sweep.variants(FUSED.read_text(), ["FBLOCK"], ["TILE=4096,PAR_MIN=0"])
    assert todo == [("as is", {}), ("FBLOCK=64", {"FBLOCK": "64"}), ("FBLOCK=1024", {"FBLOCK": "1024"}),
                    ("TILE=4096,PAR_MIN=0", {"TILE": "4096", "PAR_MIN": "0"})]


@pytest.mark.parametrize("each, given, says", [(["NOPE"], [], "no knob NOPE"), ([], ["TILE"], "NAME=VALUE"),
                                               ([], ["TILE=3"], "TILE")])
def test_a_bad_knob_or_value_is_an_error_before_anything_builds(each, given, says, capsys):
    argv = ["--task", "layernorm_fwd", "--kernel", str(FUSED)] + [a for e in each for a in ("--each", e)] + \
           [a for g in given for a in ("--variant", g)]
    assert sweep.main(argv) == 2
    assert says in capsys.readouterr().err


def test_a_sweep_judges_each_variant_and_tabulates_them(tmp_path, capsys):
    out = tmp_path / "sweep.txt"
    rc = sweep.main(["--task", str(ROOT / "tests" / "kernels" / "tasks" / "layernorm_tiny"), "--kernel", str(FUSED),
                     "--variant", "FBLOCK=64", "--baselines", "eager", "--reps", "3", "--budget", "0.02",
                     "--out", str(out)])
    assert rc == 0
    text = out.read_text()
    assert "as is" in text and "FBLOCK=64" in text and "geomean vs best torch" in text
    assert text.count("correct") >= 2 and "B=3,N=1001/random" in text
