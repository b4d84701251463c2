"""LLM verifiers in filter mode, and an LLM run killed and resumed, end to end on the CPU: `kevolve.search.run` with
`llm=openai` and the real `openai` client against the loopback server of tests/llm, scripted by prompt kind.

The run (its own driver process): the search task's seed, then optimize children scripted to teach the three
verifiers (compile, memory, numerics; filter mode, min_samples 1, audit share 0.5, aggregation any, precision bar
0.9) one right fail verdict each — a kernel that does not compile, one that writes past its output, one with wrong
values, each flagged by its verifier alone — while memory also calls the seed bad (its precision: 1/2). None has
earned the right to reject yet, so all are built and judged. The server holds the next children until those
verdicts are stored; then come five, flagged by all three verifiers, by compile and numerics (its numerics call
hangs), by numerics alone, by memory alone, by none. The driver is SIGKILLed with that one call in flight and
every other reply answered and cached. The run is then resumed twice, from two copies, with aggregation majority
and all and a precision bar of 0.5 (memory may reject too): each verifies the in-flight child again and makes the
four others again (new sources). Every child after the first three fails to compile: a built one costs a build,
no judgement.

Proven: before a verifier earns the right its verdict only orders the queue; afterwards rejected candidates are
dropped, not built, except the audited share (the run's seeded audit draws), which is built anyway; any, majority
and all decide as they say among the verifiers that earned the right, and a verifier below the bar has no vote;
precision, recall and accuracy against the judge (audited candidates weighted by 1 / audit share) and the
GPU-seconds saved are in the summary, its JSON and its table. The resume continues the same store, sends no call
already answered (the response cache), verifies the in-flight candidate once (its one unanswered call sent once),
restores the choice policy's records, and its spend is every reply the server sent in both runs, the answered
replies the killed driver never recorded included.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kevolve.config import VerifiersConfig, from_hydra
from kevolve.report.tables import summary_text
from kevolve.search import driver as search
from kevolve.record.store import TERMINAL, Store
from kevolve.search.verification import Verification
from llm_kit import (BROKEN, GOOD, OVERRUN, ROOT, TASK, WRONG, Script, cached_prompts, config_dict, decision, fenced,
                     kind, ray_with, records, rows, variant, verdict)
from llm_servers import OPENAI_KEY, Gate, Hang, LLMServer, Ok

PRICE = (2.0, 8.0)                                            # gpt-4.1, USD per million tokens
SEED = 3                                                      # the run's seed: its audit draws audit 1 rejection of 2
VERIFIERS = ("compile", "memory", "numerics")
BOOTSTRAP = {BROKEN: "compile", OVERRUN: "memory", WRONG: "numerics"}
MARKS = {"    return 0\n}": "compile", "out[B * N] = out[0]": "memory", "(sum + 1.0)": "numerics"}   # each one's flaw
FLAGS = {"P3": {"compile", "memory", "numerics"}, "P2": {"compile", "numerics"}, "P1": {"numerics"}, "PM": {"memory"},
         "P0": set()}                                         # who calls each later child bad
LATER = ("P3", "P1", "PM", "P0")                              # made by every run; P2 only by the killed one
IN_FLIGHT = variant(BROKEN, "P2_killed")
RUNS = {"any": ("any", 0.9), "majority": ("majority", 0.5), "all": ("all", 0.5)}     # aggregation, precision bar
REJECTED = {"any": {"P3", "P1"}, "majority": {"P3", "P2"}, "all": {"P3"}}
DRIVER = ("import json, sys; from pathlib import Path; from kevolve.config import from_hydra; "
          "from kevolve.search import run; run(from_hydra(json.loads(sys.argv[1])), Path(sys.argv[2]))")


def flagged(verifier: str, prompt: str) -> bool:
    """Whether the scripted `verifier` calls the kernel quoted in `prompt` bad."""
    for tag, who in FLAGS.items():
        if f"constexpr int {tag}_" in prompt:
            return verifier in who
    for mark, who in MARKS.items():
        if mark in prompt:
            return verifier == who
    return verifier == "memory"                               # the seed: a false alarm


def answer(trigger: threading.Event | None):
    def respond(k: str, prompt: str):
        if not k.startswith("verify_"):
            return Ok("I have no further ideas.", 800, 20)
        if trigger is not None and k == "verify_numerics" and "P2_killed" in prompt:
            trigger.set()
            return Hang(600)                                  # in flight until the driver is killed
        return Ok(verdict(not flagged(k.removeprefix("verify_"), prompt)), 2000, 300)
    return respond


def children(name: str) -> list[str]:
    return [variant(BROKEN, f"{tag}_{name}") for tag in LATER]


def settings(url: str, name: str, resume: Path | None, candidates: int) -> dict:
    aggregation, bar = RUNS[name]
    return config_dict(TASK, {"provider": "openai", "base_url": url + "/v1", "models": [{"name": "gpt-4.1"}],
                              "timeout_s": 300}, resume, candidates=candidates, seed=SEED,
                       population={"operators": {"knob": 0, "optimize": 1}},
                       verifiers={"checks": list(VERIFIERS), "mode": "filter", "aggregation": aggregation,
                                  "audit_share": 0.5, "precision_bar": bar, "min_samples": 1})


# ---------------------------------------------------------------------- the killed run
@pytest.fixture(scope="module")
def killed(tmp_path_factory):
    """The first run, in a driver process of its own, SIGKILLed once the in-flight call hangs and all else is
    answered: (run dir, its script, copies of the run dir to resume). Whatever that run started and is still
    alive at the module's end is ended then, by pid."""
    base = tmp_path_factory.mktemp("killed")
    run_dir, trigger, gate = base / "run", threading.Event(), threading.Event()
    later = [Gate(gate, Ok(fenced(s), 1500, 500)) for s in children("any") + [IN_FLIGHT]]
    script = Script({"optimize": [Ok(fenced(s), 1500, 500) for s in BOOTSTRAP] + later}, answer(trigger))
    server = LLMServer(respond=script)
    env = {**os.environ, "OPENAI_API_KEY": OPENAI_KEY, "KEVOLVE_CACHE": str(tmp_path_factory.mktemp("cache")),
           "PYTHONPATH": str(ROOT)}
    with open(base / "driver.log", "w") as log:
        proc = subprocess.Popen([sys.executable, "-c", DRIVER, json.dumps(settings(server.url, "any", None, 9)),
                                 str(run_dir)], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                                start_new_session=True)
    started: dict[int, str] = {}
    try:
        deadline = time.monotonic() + 300
        while not _quiet(run_dir, trigger, gate, server, script):
            assert proc.poll() is None, f"the driver ended first: {(base / 'driver.log').read_text()[-3000:]}"
            assert time.monotonic() < deadline, "the killed run never reached its kill point in 300 s"
            time.sleep(0.2)
        started = _descendants(proc.pid)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        server.stop()
    copies = {name: shutil.copytree(run_dir, base / f"resume-{name}") for name in RUNS if name != "any"}
    yield run_dir, script, copies
    for pid, cmd in started.items():       # the killed driver's Ray ends by itself; whatever has not yet, by pid
        if _cmdline(pid) == cmd:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _cmdline(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return None


def _descendants(root: int) -> dict[int, str]:
    """pid -> command line of every process `root` started, directly or not."""
    parent = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
                parent[int(d)] = int(stat[stat.rfind(")") + 2:].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    found, grew = {root}, True
    while grew:
        grew = False
        for pid, ppid in parent.items():
            if ppid in found and pid not in found:
                found.add(pid)
                grew = True
    return {pid: cmd for pid in found - {root} if (cmd := _cmdline(pid)) is not None}


def _quiet(run_dir: Path, trigger: threading.Event, gate: threading.Event, server: LLMServer, script: Script) -> bool:
    """Opens the gate once the seed and the bootstrap children have their verdicts; then the kill point: the
    in-flight call hangs, no other request is open, every reply handed out is in the response cache, and every
    candidate but the in-flight one has its verdict."""
    try:
        found = records(run_dir)
        cached = rows(run_dir / "llm_cache.sqlite", "SELECT COUNT(*) FROM replies")[0][0]
    except Exception:                       # the files are being created
        return False
    done = {r.candidate.source for r in found if r.status in TERMINAL}
    if {GOOD, *BOOTSTRAP} <= done:
        gate.set()
    return (trigger.is_set() and server.active == script.hung and cached == len(script.usage) and len(found) == 9
            and len(done) == 8)


def test_the_driver_was_killed_with_one_candidate_in_flight(killed):
    run_dir, script, _ = killed
    status = {r.candidate.source: r.status for r in records(run_dir)}
    assert status[IN_FLIGHT] == "pending" and script.hung == 1 and script.kinds["verify_numerics"] == 9
    assert {s for s, st in status.items() if st not in TERMINAL} == {IN_FLIGHT}


def test_before_a_verifier_earns_the_right_its_verdict_only_orders_the_queue(killed):
    run_dir, _, _ = killed
    found = {r.candidate.source: r for r in records(run_dir)}
    for source, who in {**BOOTSTRAP, GOOD: "memory"}.items():
        d = decision(found[source])
        assert d["build"] and not d["audited"] and d["rejected_by"] == [] and d["flagged_by"] == [who], d
        assert d["priority"] == pytest.approx(1 / 3)            # the share of verifiers saying fail: the queue order
    assert found[BROKEN].status == "build_failed" and not found[WRONG].correct
    assert "wrote outside out" in found[OVERRUN].feedback and not found[OVERRUN].correct


# ---------------------------------------------------------------------- the resumed runs
@pytest.fixture(scope="module")
def resumed(killed, tmp_path_factory):
    """Each copy of the killed run resumed: name -> (summary, run dir, its script, its server)."""
    out = {}
    with ray_with({"OPENAI_API_KEY": OPENAI_KEY}, tmp_path_factory.mktemp("cache")):
        for name, run_dir in killed[2].items():
            script = Script({"optimize": [Ok(fenced(s), 1500, 500) for s in children(name)]}, answer(None))
            server = LLMServer(respond=script)
            try:
                summary = search.run(from_hydra(settings(server.url, name, run_dir, 13)), run_dir)
            finally:
                server.stop()
            out[name] = (summary, run_dir, script, server)
    return out


def _tagged(run_dir: Path, name: str) -> dict:
    """tag -> record of the later children the run `name` decided: its own, and (resumed) the in-flight one."""
    out = {}
    for r in records(run_dir):
        src = r.candidate.source
        tag = next((t for t in FLAGS if f"constexpr int {t}_{name} " in src), None)
        if tag is None and src == IN_FLIGHT and name != "any":
            tag = "P2"
        if tag:
            out[tag] = r
    return out


@pytest.mark.parametrize("name", list(RUNS))
def test_rejections_follow_the_aggregation_among_verifiers_that_earned_the_right(name, killed, resumed):
    run_dir = killed[0] if name == "any" else resumed[name][1]
    tagged = _tagged(run_dir, name)
    assert set(tagged) == set(LATER) | ({"P2"} if name != "any" else set()), set(tagged)
    voters = {"compile", "numerics"} | ({"memory"} if RUNS[name][1] <= 0.5 else set())
    if name != "any":
        assert {v for v, s in resumed[name][0].verifiers.items() if s["earned"]} == voters
    audited = 0
    for tag, r in tagged.items():
        d = decision(r)
        assert set(d["flagged_by"]) == FLAGS[tag] and set(d["rejected_by"]) <= voters, (tag, d)
        assert bool(d["rejected_by"]) == (tag in REJECTED[name]), (name, tag, d)
        if d["rejected_by"] and not d["audited"]:           # dropped: never built
            assert not d["build"] and r.status == "rejected" and r.build is None and "build" not in r.timings
            assert r.feedback.startswith("rejected by LLM verifiers (")
        else:                                                # built (and judged by the build: none compiles)
            assert d["build"] and r.status == "build_failed" and r.build is not None, (tag, r.status, d)
        audited += d["audited"]
    # the run's audit draws, anew per run
    draws = Verification(VerifiersConfig(checks=[], audit_share=0.5), seed=SEED).rng
    assert audited == sum(draws.random() < 0.5 for _ in REJECTED[name])


@pytest.mark.parametrize("name", ["majority", "all"])
def test_precision_recall_accuracy_and_gpu_seconds_saved_are_reported(name, resumed):
    summary, run_dir, _, _ = resumed[name]
    done = [r for r in records(run_dir) if r.status in ("evaluated", "build_failed") and r.screening]
    v, expect = summary.verifiers, _confusion(done)
    assert v["compile"]["precision"] == 1.0 and v["compile"]["samples"] == len(done)
    assert v["compile"]["recall"] == pytest.approx(expect["recall"]) and expect["recall"] < 1
    assert v["compile"]["accuracy"] == pytest.approx(expect["accuracy"])
    # seed, ovr., wrong
    assert (v["memory"]["precision"], v["memory"]["recall"], v["memory"]["samples"]) == (0.5, 1.0, 3)
    assert (v["numerics"]["precision"], v["numerics"]["recall"], v["numerics"]["samples"]) == (1.0, 1.0, 2)
    assert v["numerics"]["unobserved"] == v["memory"]["unobserved"] + 1 == len(done) - 3 + 1   # not compiled; + overrun
    judged = [r.timings["evaluate"] for r in records(run_dir) if r.status == "evaluated"]
    dropped = sum(1 for r in records(run_dir) if r.status == "rejected")
    assert dropped > 0 and summary.gpu_seconds_saved == pytest.approx(dropped * sum(judged) / len(judged), abs=0.051)
    line = json.loads(json.dumps(summary.as_dict()))
    assert line["verifiers"]["compile"]["recall"] == pytest.approx(expect["recall"])
    assert line["gpu_seconds_saved"] == summary.gpu_seconds_saved
    text = summary_text(summary, run_dir)
    assert "LLM verifiers against the judge" in text
    row = next(line for line in text.splitlines() if line.strip().startswith("numerics"))
    assert "unobserved" in text and str(v["numerics"]["unobserved"]) in row.split()
    assert f"GPU-seconds saved by rejections not built: {summary.gpu_seconds_saved:.0f}" in text


def _confusion(done) -> dict:
    """The compile verifier's numbers from what the test knows: every kernel but the seed and the two that
    reached the worker fails to compile; an audited candidate weighs 1 / audit share."""
    tp = fp = fn = tn = 0.0
    for r in done:
        w = 2.0 if decision(r)["audited"] else 1.0
        bad = r.candidate.source not in (GOOD, OVERRUN, WRONG)
        said = "compile" in decision(r)["flagged_by"]
        tp, fp = tp + w * (bad and said), fp + w * (said and not bad)
        fn, tn = fn + w * (bad and not said), tn + w * (not bad and not said)
    assert fp == 0
    return {"recall": tp / (tp + fn), "accuracy": (tp + tn) / (tp + fp + fn + tn)}


@pytest.mark.parametrize("name", ["majority", "all"])
def test_the_resume_continues_the_store_and_sends_no_call_already_answered(name, resumed, killed):
    summary, run_dir, _, server = resumed[name]
    before = killed[0]
    first = {r.candidate.id: r for r in records(before)}
    after = {r.candidate.id: r for r in records(run_dir)}
    for cid, r in first.items():
        if r.status in TERMINAL:
            assert (after[cid].status, after[cid].evaluation, after[cid].updated) == (r.status, r.evaluation, r.updated)
    assert len(after) == summary.candidates == 13 and all(r.status in TERMINAL for r in after.values())
    with Store.open(run_dir, readonly=True) as store:
        assert store.integrity() == "ok" and [k for _, k, _ in store.events("resume")] == ["resume"]
        seqs = [s for (s,) in store._conn.execute("SELECT done_seq FROM candidates")]
    assert len(set(seqs)) == len(seqs) == 13                             # one verdict each
    answered = cached_prompts(before)               # a verifier's call is a function of the source (its seed too)
    sent = [r.body["messages"][-1]["content"] for r in server.requests if kind(r.body).startswith("verify_")]
    assert not answered & set(sent), "a verifier call answered before the kill was sent again"
    in_flight = [kind(r.body) for r in server.requests if "P2_killed" in r.body["messages"][-1]["content"]]
    assert in_flight == ["verify_numerics"]                              # its one unanswered call, sent once
    assert sorted(kind(r.body) for r in server.requests) == sorted(
        ["optimize"] * 4 + ["verify_compile", "verify_memory", "verify_numerics"] * 4 + ["verify_numerics"])


@pytest.mark.parametrize("name", ["majority", "all"])
def test_the_resume_continues_the_spend_and_the_choice_records(name, resumed, killed):
    summary, run_dir, script, _ = resumed[name]
    spent = killed[1].cost(PRICE) + script.cost(PRICE)
    assert summary.spend_usd == pytest.approx(spent, rel=1e-9)
    with Store.open(run_dir, readonly=True) as store:
        assert store.total_cost() == pytest.approx(spent, rel=1e-9)
        (finish,) = [p for _, _, p in store.events("finish")]
    assert summary.llm_calls == len(script.usage) + 2                   # + the two cached verdicts of P2
    assert finish["learning"]["policy"]["n"]["optimize"] == 12          # 7 children before the kill, 5 after
