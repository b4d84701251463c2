"""Contracts of a task's best/ kernels (kevolve.task.spec, kevolve.report.best) without a search: `Task.best_paths`
finds a best kernel by its target's name and nothing else; a best kernel without its .md, or misnamed, is a
TaskError that says what to do; `python -m kevolve.tasks list` shows each best with its recorded speedup; `best`
refuses a run that is not a run, that has not finished or that found no correct kernel. (A promotion from a real
search, and a search seeded from best/: tests/search/test_promotion.py.)"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kevolve.record.store import Store
from kevolve.task import TaskError, list_tasks, load_task
from kevolve.config import tasks as shipped
from kevolve.report.best import PromotionError, numbers, promote, recorded_speedup
from kevolve.cli.tasks import main
from kevolve.record.events import Finish

SEARCH_TASK = Path(__file__).resolve().parents[1] / "search_task"
NOTES = "---\ntask: search_task\ntarget: cpu\nspeedup: 1.5\ndevice: a CPU\n---\n# search_task: the best cpu kernel\n"


def task_copy(tmp_path: Path, best: dict[str, str] | None = None) -> Path:
    """tests/search_task copied to tmp_path/search_task, with best/ holding `best` (file name -> text)."""
    folder = tmp_path / "search_task"
    shutil.copytree(SEARCH_TASK, folder, ignore=shutil.ignore_patterns("__pycache__"))
    if best is not None:
        (folder / "best").mkdir()
        for name, text in best.items():
            (folder / "best" / name).write_text(text)
    return folder


def seed_source() -> str:
    return (SEARCH_TASK / "seeds" / "cpu.cpp").read_text()


def test_no_best_folder_no_best_paths(tmp_path):
    t = load_task(task_copy(tmp_path))
    assert t.best == () and t.best_paths("cpu") == [] and t.best_paths("cuda") == []
    for name in list_tasks():                 # shipped tasks: best_paths lists only files that are there
        assert all(p.is_file() for target in ("cpu", "cuda") for p in load_task(name).best_paths(target))


def test_a_best_kernel_is_found_by_its_targets_name(tmp_path):
    t = load_task(task_copy(tmp_path, {"cpu.cpp": seed_source(), "cpu.md": NOTES, "notes.txt": "kept aside"}))
    assert t.best == ("cpu",)
    assert t.best_paths("cpu") == [t.dir / "best" / "cpu.cpp"]
    assert t.best_paths("cuda") == [] and t.best_paths("cpu", "torch") == []     # C ABI only
    assert numbers(t.dir / "best" / "cpu.md")["speedup"] == 1.5 and recorded_speedup(t, "cpu") == 1.5


@pytest.mark.parametrize("files,match", [
    ({"cpu.cpp": "int x;"}, r"best/cpu.cpp has no best/cpu.md .*python -m kevolve.tasks best RUN_DIR"),
    ({"fast.cpp": "int x;", "fast.md": NOTES}, r"best/fast.cpp: a best kernel is named by its target"),
    ({"cuda.cu": "int x;", "cpu.cpp": "int x;", "cpu.md": NOTES}, r"best/cuda.cu has no best/cuda.md"),
])
def test_a_malformed_best_folder_is_a_task_error(tmp_path, files, match):
    with pytest.raises(TaskError, match=match):
        load_task(task_copy(tmp_path, files))


def test_numbers_of_notes_without_front_matter_are_empty(tmp_path):
    md = tmp_path / "cpu.md"
    md.write_text("# written by hand\nfast.\n")
    assert numbers(md) == {} and numbers(tmp_path / "missing.md") == {}
    md.write_text("---\n: [unbalanced\n---\n")
    assert numbers(md) == {}


def test_cli_list_shows_best_kernels_with_their_speedup(tmp_path, monkeypatch, capsys):
    task_copy(tmp_path, {"cpu.cpp": seed_source(), "cpu.md": NOTES})
    monkeypatch.setattr(shipped, "TASKS_DIR", tmp_path)          # tasks/ is tmp_path: its one task has a best
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    header, line = out.splitlines()[0], next(ln for ln in out.splitlines() if ln.startswith("search_task "))
    assert header.split()[-1] == "best" and line.endswith("cpu 1.50x")


def test_cli_list_shows_no_best_as_a_dash(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in list_tasks():
        line = next(ln for ln in out.splitlines() if ln.startswith(name + " "))
        assert line.endswith(" -") == (not load_task(name).best)


# ---------------------------------------------------------------- refusals (stores made by the Store's own API)
def test_promoting_what_is_not_a_run_is_refused(tmp_path, capsys):
    with pytest.raises(PromotionError, match="not a run directory"):
        promote(tmp_path)
    assert main(["best", str(tmp_path)]) == 1
    assert "refused:" in capsys.readouterr().err


@pytest.mark.parametrize("events,match", [
    ([], "has not finished"),
    ([("finish", {"best": None, "correct": 0})], "found no correct kernel"),
    ([("finish", {"best": {"id": "abc", "confirmed": False, "not_confirmed": ["abc: wrong on B=3"]}})],
     "was not confirmed by its final judgement .*wrong on B=3"),
])
def test_a_run_without_a_confirmed_correct_best_is_refused(tmp_path, events, match):
    folder = task_copy(tmp_path)
    run_dir = tmp_path / "run"
    with Store.create(run_dir, {"task": "search_task", "config": {"task": {"name": str(folder)}}}) as store:
        for kind, payload in events:
            store.log_event(Finish(payload))
    with pytest.raises(PromotionError, match=match):
        promote(run_dir)
    assert not (folder / "best").exists()


def test_the_reproducing_overrides_are_what_differs_from_the_defaults_without_the_runs_directory():
    from kevolve.report.best import _defaults, overrides
    config = _defaults()
    config["search"]["wall_time_s"] = 320.0
    config["resources"]["target"] = "cuda"
    config["run_dir"], config["resume"] = "/tmp/somewhere/run", "/tmp/somewhere/run"
    assert overrides(config) == ["search.wall_time_s=320.0", "resources.target=cuda"]
