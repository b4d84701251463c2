"""Discoverability of the commands: `kevolve` (the console script: the search, and evaluate, tasks and report as
subcommands) with Hydra's tab completion; `--help [PREFIX]` gives every field with its meaning; `--resolved` the
values a run will use; `target=` spelled the same for the search and the judge; multirun jobs named by what they
sweep."""
from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from kevolve.cli.evaluate import parse
from kevolve.cli.search import task_paths
from kevolve.config.describe import fields
from kevolve.config.hydra import swept, sweeps

ROOT = Path(__file__).resolve().parents[2]


def kevolve(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "from kevolve.cli.main import main; main()", *args],
                          capture_output=True, text=True, timeout=300, cwd=ROOT, env={**os.environ, **(env or {})})


def test_the_console_script_is_installed():
    (script,) = [e for e in entry_points(group="console_scripts") if e.name == "kevolve"]
    assert script.value == "kevolve.cli.main:main"


def test_every_field_has_a_meaning_and_help_shows_them():
    missing = [name for name, _, meaning in fields() if not meaning]
    assert not missing, f"fields without a comment in the schema: {missing}"
    out = kevolve("--help").stdout
    assert "search.wall_time_s=480.0" in out and "budget: seconds of wall time" in out
    assert "llm.down_after=8" in out and "groups (GROUP=OPTION)" in out and "prices" not in out.split("fields")[0]
    only = kevolve("--help", "llm.vertex").stdout
    assert "llm.vertex.project=null" in only and "search.candidates" not in only


def test_tab_completion_knows_the_tasks_groups_and_fields():
    def complete(line: str) -> list[str]:
        return kevolve("-sc", "query=bash", env={"COMP_LINE": line, "COMP_POINT": str(len(line))}).stdout.split()
    assert complete("kevolve task=rmsnorm_") == ["task=rmsnorm_bwd", "task=rmsnorm_fwd"]
    assert complete("kevolve llm=") == ["llm=gemini", "llm=local", "llm=none", "llm=openai"]
    assert complete("kevolve search.wall") == ["search.wall_time_s="]
    script = Path(sys.executable).with_name("kevolve")              # `pip install -e .` put it beside python
    installed = subprocess.run([str(script), "-sc", "install=bash"], capture_output=True, text=True, timeout=120)
    assert "complete -o nospace -o default -F hydra_bash_completion kevolve" in installed.stdout


def test_subcommands_run_the_other_commands():
    assert "`python -m kevolve.evaluate task=NAME kernel=PATH" in kevolve("evaluate", "--help").stderr
    listed = kevolve("tasks", "list")
    assert listed.returncode == 0 and "layernorm_fwd" in listed.stdout


def test_target_is_spelled_the_same_for_the_search_and_the_judge():
    assert task_paths(["target=cuda", "shapes=small"]) == ["resources.target=cuda", "task.shapes=small"]
    assert parse(["task=t", "kernel=k", "resources.target=cpu", "task.shapes=small"])["target"] == "cpu"


def test_resolved_shows_the_values_a_run_will_use():
    out = kevolve("task=layernorm_fwd", "llm=openai", "--resolved")
    assert out.returncode == 0, out.stderr
    assert "#   resources.target: cpu" in out.stdout or "#   resources.target: cuda" in out.stdout
    assert "#   resources.evaluators: " in out.stdout and "#   search.verifiers.checks: ['compile'" in out.stdout
    assert "\n  target: null" not in out.stdout and "\n  evaluators: null" not in out.stdout


@pytest.mark.parametrize("value,swept_", [("0,1", True), ("[1,2]", False), ("range(0,3)", True), ("'a,b'", False),
                                          ("none", False), ("choice(a,b)", True)])
def test_what_sweeps(value, swept_):
    assert sweeps(value) is swept_


def test_a_multirun_job_is_named_by_what_it_sweeps():
    argv = ["-m", "task.name=/x/my_task", "search.seed=0,1", "llm=none,openai", "search.candidates=2"]
    job = ["task.name=/x/my_task", "search.seed=1", "llm=openai", "search.candidates=2"]
    assert swept(job, argv) == "seed=1,llm=openai"
    assert swept(job, ["-m", "task.name=/x/a,/y/b"]) == "name=my_task"
    assert swept(job, ["search.candidates=2"]) == "job"
