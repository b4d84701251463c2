"""Chaos: a CPU search while a fault injector kills its processes at random — evaluator, verifier, mutator
and build processes (Ray restarts the actors; the driver re-sends what was lost, a bounded number of times)
and the worker processes candidates run in (a crash verdict). Every candidate must end with exactly one
verdict, the store must pass its consistency checks, and the search must reach its budget."""
from __future__ import annotations

import logging
import os
import random
import signal
import threading
from pathlib import Path

import pytest
import ray

from kevolve.config import from_hydra
from kevolve.search import run
from kevolve.record.store import TERMINAL, Store

TASK = Path(__file__).resolve().parents[1] / "search_task"
TARGETS = ("ray::Evaluator", "ray::Verifier", "ray::Mutator", "ray::build_task", "kevolve.judge.worker")


def _descendants(root: int) -> dict[int, str]:
    """This test's processes only (Ray's raylet and workers, and their workers, descend from it): pid -> command
    line. Other programs on the machine, other test runs' workers included, are never touched."""
    procs: dict[int, tuple[int, str]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = open(f"/proc/{d}/stat").read()
                ppid = int(stat[stat.rfind(")") + 2:].split()[1])
                cmd = open(f"/proc/{d}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
                procs[int(d)] = (ppid, cmd)
            except (OSError, ValueError, IndexError):
                continue
    found, grew = {root}, True
    while grew:
        grew = False
        for pid, (ppid, _) in procs.items():
            if pid not in found and ppid in found:
                found.add(pid)
                grew = True
    return {pid: procs[pid][1] for pid in found - {root}}


class FaultInjector(threading.Thread):
    """Every 1–3 s (after a start-up grace), SIGKILLs one process of a random kind among those running."""

    def __init__(self, seed: int, kills: int, grace_s: float = 8.0):
        super().__init__(daemon=True)
        self.rng, self.kills, self.grace_s = random.Random(seed), kills, grace_s
        self.done = threading.Event()
        self.killed: list[str] = []

    def run(self) -> None:
        if self.done.wait(self.grace_s):
            return
        while len(self.killed) < self.kills and not self.done.wait(self.rng.uniform(1.0, 3.0)):
            by_kind: dict[str, list[int]] = {}
            for pid, cmd in _descendants(os.getpid()).items():
                kind = next((t for t in TARGETS if t in cmd), None)
                if kind:
                    by_kind.setdefault(kind, []).append(pid)
            if by_kind:                            # a kind first, so the rarer ones are hit too
                kind = self.rng.choice(sorted(by_kind))
                pid = self.rng.choice(sorted(by_kind[kind]))
                try:
                    os.kill(pid, signal.SIGKILL)
                    self.killed.append(kind)
                except ProcessLookupError:
                    pass


@pytest.mark.slow
def test_every_candidate_ends_with_one_verdict_under_random_kills(tmp_path, monkeypatch):
    monkeypatch.setenv("KEVOLVE_CACHE", str(tmp_path / "cache"))
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING,
             object_store_memory=200 << 20)
    injector = FaultInjector(seed=3, kills=10)
    try:
        cfg = from_hydra({"task": {"name": str(TASK)}, "resources": {"target": "cpu"}, "progress": False,
                          "search": {"candidates": 14, "wall_time_s": 400, "reps": 5, "budget_s": 0.02,
                                     "baselines": ["eager"], "timeout_s": 60, "population": {"islands": 1}}})
        injector.start()
        summary = run(cfg, tmp_path / "run")
    finally:
        injector.done.set()
        injector.join()
        ray.shutdown()
    print(f"killed: {injector.killed}; summary: {summary}")
    assert len(injector.killed) >= 5 and "ray::Evaluator" in injector.killed, injector.killed
    with Store.open(tmp_path / "run", readonly=True) as store:
        assert store.integrity() == "ok"
        records = store.candidates()
        assert records and all(r.status in TERMINAL for r in records), [(r.candidate.id, r.status) for r in records]
        seqs = [row[0] for row in store._conn.execute("SELECT done_seq FROM candidates")]
        assert None not in seqs and len(set(seqs)) == len(seqs)            # one verdict each, in one order
        measured = {row[0] for row in store._conn.execute("SELECT DISTINCT candidate_id FROM measurements")}
        assert measured <= {r.candidate.id for r in records if r.status == "evaluated"}
        retries = [p for _, _, p in store.events("retry")]
    assert summary.candidates == len(records) == 14, summary
    assert summary.best is not None, summary
    print(f"retries: {len(retries)}; statuses: {sorted(r.status for r in records)}")
