"""Contracts of `logger=wandb` on a real CPU search (tests/search_task), read back from W&B's own offline files:
every judged candidate is a history row; the lineage table rebuilds the store's family tree; the best kernel is
an artifact (its source and numbers); the config is the resolved one; `resume=RUN_DIR` continues the same W&B
run; no secret (from the environment or from a config field) reaches any file W&B or the report writes."""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest
import ray

from kevolve.config import from_hydra
from kevolve.cli.report import main as report_main
from kevolve.search import run as search
from kevolve.record.store import Store
from wandb_files import offline_runs

ROOT = Path(__file__).resolve().parents[2]
TASK = ROOT / "tests" / "search_task"
FAST = {"reps": 5, "budget_s": 0.02, "baselines": ["eager"], "timeout_s": 60}
FAKE_OPENAI = "sk-kevolve-FAKE-openai-0123456789abcdef"
FAKE_WANDB = "kevolvefakewandbkey0123456789abcdef01234"
SECRETS = (FAKE_OPENAI, FAKE_WANDB)
FIRST, TOTAL = 4, 6                                  # candidates before and after the resume

pytestmark = pytest.mark.slow                        # one search and a resume (~60 s); test_tracking.py is fast


def config(run_dir: Path | None, candidates: int):
    return from_hydra({"task": {"name": str(TASK)}, "progress": False,
                       "search": {**FAST, "population": {"islands": 1}, "candidates": candidates},
                       "resources": {"target": "cpu"}, "logger": {"kind": "wandb"},
                       "llm": {"base_url": f"http://127.0.0.1:9/v1?key={FAKE_OPENAI}"},   # a key pasted in a field
                       "resume": str(run_dir) if run_dir else None})


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    """A search of FIRST candidates, then resumed to TOTAL; W&B offline, every W&B directory under tmp."""
    tmp = tmp_path_factory.mktemp("wandb-search")
    env = {"WANDB_MODE": "offline", "WANDB_DIR": str(tmp / "wandb-dir"), "WANDB_DATA_DIR": str(tmp / "wandb-data"),
           "WANDB_CACHE_DIR": str(tmp / "wandb-cache"), "WANDB_CONFIG_DIR": str(tmp / "wandb-config"),
           "WANDB_API_KEY": FAKE_WANDB, "OPENAI_API_KEY": FAKE_OPENAI, "KEVOLVE_CACHE": str(tmp / "build-cache"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    started_ray = not ray.is_initialized()
    if started_ray:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING,
                 object_store_memory=200 << 20)
    try:
        run_dir = tmp / "run"
        first = search(config(None, FIRST), run_dir)
        resumed = search(config(run_dir, TOTAL), run_dir)
        assert report_main([str(run_dir), "-o", str(tmp / "report")]) == 0
        yield {"tmp": tmp, "run_dir": run_dir, "wandb_dir": Path(env["WANDB_DIR"]), "first": first,
               "summary": resumed, "runs": offline_runs(Path(env["WANDB_DIR"]))}
    finally:
        if started_ray:
            ray.shutdown()
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def store_of(searched) -> Store:
    return Store.open(searched["run_dir"], readonly=True)


def test_a_resumed_run_continues_the_same_wandb_run(searched):
    runs = searched["runs"]
    assert len(runs) == 2, [r.dir for r in runs]
    with store_of(searched) as store:
        run_id = store.meta()["wandb"]["id"]
        events = [p for _, _, p in store.events("tracker")]
    assert [r.run_id for r in runs] == [run_id, run_id]
    assert [e["resumed"] for e in events] == [False, True]
    steps = [[h["candidates"] for h in r.history if "candidate/id" in h] for r in runs]
    assert steps[0] and steps[1] and min(steps[1]) > max(steps[0]), steps


def test_every_judged_candidate_is_a_row(searched):
    rows = [h for r in searched["runs"] for h in r.history if "candidate/id" in h]
    with store_of(searched) as store:
        finished = {r.candidate.id: r for r in store.finished()}
    assert sorted(h["candidate/id"] for h in rows) == sorted(finished)
    for h in rows:
        r = finished[h["candidate/id"]]
        assert h["candidate/operator"] == r.candidate.operator
        assert h["candidate/parents"] == ",".join(r.candidate.parents)
        assert (h["candidate/island"], h["candidate/generation"]) == (r.candidate.island, r.candidate.generation)
        assert h["candidate/correct"] == bool(r.correct)
        if r.correct:
            speedups = [k for k in h if k.startswith("candidate/config/") and k.endswith("/speedup")]
            assert len(speedups) == 2 and all(h[k] > 0 for k in speedups), h
        for key in ("run/best_fitness", "run/correct_rate", "run/candidates_per_minute", "run/evaluator_busy",
                    "run/spend_usd"):
            assert key in h, key
    best = max(h["run/best_fitness"] for h in rows)
    assert best == pytest.approx(max(r.fitness for r in finished.values() if r.correct))


def test_the_lineage_table_rebuilds_the_family_tree(searched):
    table = searched["runs"][-1].table("lineage")
    cols = table["columns"]
    edges = {(row[cols.index("parent")], row[cols.index("child")], row[cols.index("operator")])
             for row in table["data"]}
    with store_of(searched) as store:
        expected = {(p, r.candidate.id, r.candidate.operator) for r in store.candidates()
                    for p in (r.candidate.parents or ("",))}
    assert edges == expected
    assert any(p == "" for p, _, _ in edges) and any(p for p, _, _ in edges)      # roots and children


def test_the_best_kernel_is_an_artifact(searched):
    kernels = [a for a in searched["runs"][-1].artifacts if a.type == "kernel"]
    assert len(kernels) == 1
    files = {c.path: c for c in kernels[0].manifest.contents}
    assert set(files) == {"best.cpp", "numbers.json"}
    best = searched["summary"].best
    source = Path(best.kernel).read_text()
    staged = Path(files["best.cpp"].local_path)
    assert staged.read_text() == source
    numbers = json.loads(Path(files["numbers.json"].local_path).read_text())
    assert numbers["id"] == best.id and numbers["summary"]["correct"]
    assert any(k.endswith("/speedup") for k in numbers["configurations"])
    assert json.loads(kernels[0].metadata)["speedup"] == pytest.approx(numbers["summary"]["speedup"])


def test_the_config_is_the_resolved_one(searched):
    cfg = searched["runs"][0].config
    assert cfg["task"]["name"] == str(TASK)
    assert cfg["search"]["candidates"] == FIRST and cfg["logger"]["kind"] == "wandb"
    assert "***" in cfg["llm"]["base_url"]


def test_no_secret_in_any_file_wandb_or_the_report_wrote(searched):
    scanned = 0
    for root in ("wandb-dir", "wandb-data", "wandb-cache", "wandb-config", "report"):
        for path in (searched["tmp"] / root).rglob("*"):
            if path.is_file():
                raw = path.read_bytes()
                scanned += 1
                for secret in SECRETS:
                    assert secret.encode() not in raw, f"{secret[:12]}… in {path}"
    assert scanned >= 8
