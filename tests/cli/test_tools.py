"""The tools of `python -m kevolve.tasks` (kevolve/cli/): each subcommand reaches its module with its own arguments,
`--help` lists them, and the experiment scripts call them by subcommand, not by a file under experiments/."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kevolve.cli.tasks import TOOLS, main

ROOT = Path(__file__).resolve().parents[2]


def test_every_tool_is_a_module_of_the_cli_with_a_main():
    import importlib
    for name, module in TOOLS.items():
        assert callable(importlib.import_module(f"kevolve.cli.{module}").main), name
        assert not (ROOT / "experiments" / f"{module}.py").exists(), f"experiments/{module}.py came back"


def test_help_lists_the_tools(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for name in TOOLS:
        assert name in out


def test_a_tool_gets_its_own_arguments(capsys):
    assert main(["seeds-table"]) == 2                                # no logs: its usage line, exit 2
    assert "seeds-table" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["check-seeds", "--bogus"])
    assert e.value.code == 2


def test_ceilings_reads_the_shipped_best_kernels(capsys):
    shipped = sorted(p.parent.parent.name for p in (ROOT / "tasks").glob("*/best/cuda.md"))
    if not shipped:
        pytest.skip("no task has a best/cuda.md")
    assert main(["ceilings", shipped[0]]) == 0
    assert shipped[0] in capsys.readouterr().out


def test_scripts_call_tools_by_subcommand():
    for script in (ROOT / "experiments").glob("*.sh"):
        text = script.read_text()
        for module in TOOLS.values():
            assert f"experiments/{module}.py" not in text, f"{script.name} runs experiments/{module}.py"


def test_the_entry_point_runs_a_tool(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "kevolve.tasks", "ceilings", "--help"], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode in (0, 2), proc.stderr
