"""Contracts of a task's best/ kernels around a real CPU search (tests/search_task, copied): with `search.seeds=all`
a run starts from the listed seeds, then the best/ kernel (its candidate's meta file `best/cpu.cpp`); `python -m
kevolve.tasks best RUN_DIR` writes the run's confirmed best byte for byte and a .md of its numbers and command
that holds no secret, and keeps a best with a higher recorded speedup unless --force. (Which seeds each value of
`search.seeds` picks, and `best` without a best kernel: tests/search/test_plan.py; the loader: tests/task.)"""
from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import pytest
import ray

from kevolve.config import from_hydra
from kevolve.operators import knobs
from kevolve.search import run as search
from kevolve.search.plan import resolve
from kevolve.record.store import Store
from kevolve.task import load_task
from kevolve.report.best import PromotionError, numbers, promote
from kevolve.cli.tasks import main

ROOT = Path(__file__).resolve().parents[2]
TASK = ROOT / "tests" / "search_task"
FAST = {"reps": 5, "budget_s": 0.02, "baselines": ["eager"], "timeout_s": 60}
FAKE_OPENAI = "sk-kevolve-FAKE-openai-0123456789abcdef"          # in the environment and pasted in a config field
FAKE_FLAG = "sk-kevolve-FAKE-flag-fedcba9876543210"              # on the command line only, under a secret's key
CLAIMED = "---\ntask: search_task\ntarget: cpu\nspeedup: 1000.0\ndevice: a faster machine\n---\n# by hand\n"


def task_copy(folder: Path, best: bool) -> Path:
    shutil.copytree(TASK, folder, ignore=shutil.ignore_patterns("__pycache__"))
    if best:                                   # a best that is not the seed: the seed with a knob changed
        seed = (TASK / "seeds" / "cpu.cpp").read_text()
        knob = next(iter(knobs.parse(seed).values()))
        (folder / "best").mkdir()
        (folder / "best" / "cpu.cpp").write_text(knobs.apply(seed, {knob.name: knob.alternatives[0]}))
        (folder / "best" / "cpu.md").write_text(CLAIMED)
    return folder


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    """One search of the task's two seeds (listed, then best/) on a copy whose best/ claims 1000x."""
    tmp = tmp_path_factory.mktemp("best-search")
    env = {"OPENAI_API_KEY": FAKE_OPENAI, "KEVOLVE_CACHE": str(tmp / "build-cache")}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    started_ray = not ray.is_initialized()
    if started_ray:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING,
                 object_store_memory=200 << 20)
    try:
        folder = task_copy(tmp / "search_task", best=True)
        base_url = f"http://127.0.0.1:9/v1?key={FAKE_OPENAI}"
        cfg = from_hydra({"task": {"name": str(folder)}, "progress": False, "llm": {"base_url": base_url},
                          "search": {**FAST, "population": {"islands": 1}, "candidates": 2},
                          "resources": {"target": "cpu"}})
        command = [f"task.name={folder}", "resources.target=cpu", "search.candidates=2", f"llm.base_url={base_url}",
                   f"+llm.api_key={FAKE_FLAG}"]
        summary = search(cfg, tmp / "run", command=command)
        yield {"tmp": tmp, "task": folder, "run_dir": tmp / "run", "summary": summary}
    finally:
        if started_ray:
            ray.shutdown()
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_search_seeds_all_starts_from_the_listed_seeds_then_the_best_kernel(searched):
    folder = searched["task"]
    with Store.open(searched["run_dir"], readonly=True) as store:
        seeds = [r.candidate for r in store.candidates() if r.candidate.operator == "seed"]
    assert [c.meta_dict()["file"] for c in seeds] == ["cpu.cpp", "best/cpu.cpp"]
    assert [c.source for c in seeds] == [(folder / "seeds" / "cpu.cpp").read_text(),
                                         (folder / "best" / "cpu.cpp").read_text()]
    assert searched["summary"].best is not None and searched["summary"].best.confirmed


def test_a_best_with_a_higher_recorded_speedup_is_kept_without_force(searched, capsys):
    best = searched["task"] / "best"
    before = {p.name: p.read_bytes() for p in best.iterdir()}
    with pytest.raises(PromotionError, match=r"already a best with speedup 1000.000x \(on a faster machine\).*--force"):
        promote(searched["run_dir"])
    assert main(["best", str(searched["run_dir"])]) == 1
    assert "--force" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in best.iterdir()} == before


def test_promotion_writes_the_runs_best_byte_for_byte_and_its_numbers_without_secrets(searched, tmp_path, capsys):
    run_dir, summary = searched["run_dir"], searched["summary"]
    folder = task_copy(tmp_path / "search_task", best=False)
    assert main(["best", str(run_dir), "--task", str(folder)]) == 0
    kernel, md = folder / "best" / "cpu.cpp", folder / "best" / "cpu.md"
    assert str(kernel) in capsys.readouterr().out
    assert sorted(p.name for p in (folder / "best").iterdir()) == ["cpu.cpp", "cpu.md", "op"]
    assert kernel.read_bytes() == (run_dir / "best.cpp").read_bytes()
    assert (folder / "best" / "op" / "cpu.cpp").read_bytes() == (run_dir / "op.cpp").read_bytes()   # the run's op
    op_record = (folder / "best" / "op" / "cpu.json").read_text()
    assert FAKE_OPENAI not in op_record and FAKE_FLAG not in op_record and '"correct": true' in op_record
    with Store.open(run_dir, readonly=True) as store:
        assert kernel.read_text() == store.get(summary.best.id).candidate.source

    got = numbers(md)
    assert (got["task"], got["target"], got["shapes"]) == ("search_task", "cpu", "small")
    assert got["candidate"] == summary.best.id
    assert got["speedup"] == pytest.approx(summary.best.speedup, abs=1e-4) and got["run_dir"] == str(run_dir.resolve())
    assert got["device"] and got["promoted"] and got["run_started"]
    text = md.read_text()
    assert FAKE_OPENAI not in text and FAKE_FLAG not in text and "***" in text
    assert "python -m kevolve task.name=" in text and "search.candidates=2" in text      # the command, the overrides
    rows = [ln for ln in text.splitlines() if ln.startswith("| B=")]
    assert len(rows) == 2 and any(ln.startswith("| geomean |") for ln in text.splitlines())

    t = load_task(folder)                      # the task now has a best, and a search can start from it
    assert t.best_paths("cpu") == [kernel]
    plan = resolve(from_hydra({"task": {"name": str(folder)}, "search": {"seeds": "best"}}), t, {"CPU": 2})
    assert plan.seeds == (("best/cpu.cpp", str(kernel)),)

    promote(run_dir, task=folder)              # the same speedup again: replaced
    md.write_text(md.read_text().replace(f"speedup: {got['speedup']}", "speedup: 99.0", 1))
    with pytest.raises(PromotionError, match="speedup 99.000x"):
        promote(run_dir, task=folder)
    assert promote(run_dir, force=True, task=folder).replaced == 99.0
    assert numbers(md)["speedup"] == got["speedup"]
