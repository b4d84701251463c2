"""The LLM proposals in flight, end to end on the CPU: `kevolve.search.run` with `llm=openai` (the real `openai`
client, the loopback server of tests/llm) and `search.llm_calls` unset, so the plan sizes them and the driver adapts
them (kevolve/search/pacing.py).

The seed's one knob is a wrong offset in every value but its own, so knob children are judged quickly (wrong, so
never timed against the champion) and so are the LLM's (a wrong kernel). The server holds every optimize reply
until two knob children of the seed have their verdicts. Proven: the calls
in flight never pass `llm.concurrency` (the bound the plan resolves) and the server never sees more at once;
meanwhile knob mutation keeps the evaluator fed (the knob children are judged while every LLM proposal waits on
the network); the driver records its target at the start and its measurements at the finish — each LLM
proposal's latency (the hold included) and each judgement.
"""
from __future__ import annotations

import shutil
import threading
import time

import pytest

from kevolve.search import driver as search
from kevolve.record.store import TERMINAL, Store
from llm_kit import GOOD, TASK, WRONG, Script, config, fenced, ray_with, records, variant
from llm_servers import OPENAI_KEY, Gate, LLMServer, Ok

CONCURRENCY = 2
HOLD_MIN_S = 1.0
SEED = (GOOD.replace("// knob: 1, 2, 4", "").replace("// knob: 1, 4, 8", "").replace("// knob: 1, 2", "")
        .replace("constexpr int UNROLL = 1;",
                 "constexpr int UNROLL = 1;\nconstexpr int OFF = 0;    // knob: 0, 1, 2, 3")
        .replace("(float)(1.0 / sum);", "(float)(1.0 / (sum + OFF));"))
assert SEED.count("// knob:") == 1 and "(sum + OFF)" in SEED


def _open_when_knobs_judged(run_dir, gate: threading.Event, opened: list, stop: threading.Event) -> None:
    deadline = time.monotonic() + 240
    while not stop.is_set() and time.monotonic() < deadline:
        try:
            knob = [r for r in records(run_dir) if r.candidate.operator == "knob" and r.status in TERMINAL]
        except Exception:                    # the store is being created
            knob = []
        if len(knob) >= 2:
            break
        time.sleep(0.2)
    opened.append(time.time())
    gate.set()


@pytest.mark.slow
def test_llm_calls_are_bounded_and_knob_mutation_fills_the_wait(tmp_path):
    task = tmp_path / "task"
    shutil.copytree(TASK, task)
    (task / "seeds" / "cpu.cpp").write_text(SEED)
    gate, stop, opened = threading.Event(), threading.Event(), []
    n = iter(range(1000))
    script = Script({}, lambda k, prompt: Gate(gate, Ok(fenced(variant(WRONG, f"LLM{next(n)}")), 1500, 400))
                    if k == "optimize" else Ok("No further ideas.", 100, 5))
    server = LLMServer(respond=script)
    run_dir = tmp_path / "run"
    watcher = threading.Thread(target=_open_when_knobs_judged, args=(run_dir, gate, opened, stop), daemon=True)
    cfg = config(task, {"provider": "openai", "base_url": server.url + "/v1", "models": [{"name": "gpt-4.1"}],
                        "concurrency": CONCURRENCY, "timeout_s": 300}, candidates=5,
                 population={"operators": {"knob": 1, "optimize": 100}})
    cfg.search.llm_calls = cfg.search.in_flight = None          # sized by the plan, adapted by the driver
    with ray_with({"OPENAI_API_KEY": OPENAI_KEY}, tmp_path / "cache"):
        watcher.start()
        try:
            summary = search.run(cfg, run_dir)
        finally:
            stop.set()
            gate.set()
            server.stop()
    with Store.open(run_dir, readonly=True) as store:
        pacing = [p for _, _, p in store.events("pacing")]
        (finish,) = [p for _, _, p in store.events("finish")]
        found = store.candidates()
    assert summary.best is not None and opened, summary
    start = pacing[0]
    assert (start["least"], start["most"]) == (1, CONCURRENCY) and 1 <= start["llm_calls"] <= CONCURRENCY
    assert all(1 <= p["llm_calls"] <= CONCURRENCY for p in pacing)
    assert 1 <= server.max_active <= CONCURRENCY
    # knob children were judged while the LLM proposals were held
    knob = [r for r in found if r.candidate.operator == "knob" and r.status == "evaluated"]
    llm = [r for r in found if r.candidate.operator == "optimize"]
    assert len(knob) >= 2 and llm, [(r.candidate.operator, r.status) for r in found]
    assert sum(r.updated < opened[0] for r in knob) >= 2
    assert all(r.candidate.created >= opened[0] for r in llm)
    # the driver fed the pacer: every LLM proposal's latency, every judgement
    measured = finish["pacing"]
    assert measured["proposals_measured"] == script.kinds["optimize"] >= len(llm)
    assert measured["judgements_measured"] >= len(knob) + 1 and measured["judge_s"] > 0
    assert measured["latency_s"] >= HOLD_MIN_S and measured["candidates_per_call"] > 0
