"""`llm=gemini` end to end on the CPU, with the red-team operator weighted in: `kevolve.search.run` driving the real
`google-genai` client against the loopback Gemini REST server of tests/llm, scripted by the kind of prompt.

The task is tests/search_task with a deliberately slow seed. Optimize writes a serial kernel (far faster than the
seed, still ~N/8 passes per row, so that the OpenMP kernel beats it even on a loaded 2-core machine); red team
writes two kernels: the search task's own OpenMP kernel, correct and faster still, and one that normalises only
whole chunks of 4 (the odd width of the shape set catches it). Proven here: the Gemini search finds a kernel better
than its seed; its spend is the server's usageMetadata (thoughts billed as output) times the price table; a
red-team child is judged like any other; the accepted one is a suspected judge bug — saved with its verdict,
listed in the summary, never ranked, never a parent, never the best although it is the fastest; the rejected one
is recorded like any wrong kernel. One search (~50 s on 2 cores) serves every test.
"""
from __future__ import annotations

import json
import shutil

import pytest

from kevolve.report.tables import summary_text
from kevolve.search import driver as search
from kevolve.record.store import Store
from kevolve.search.suspects import FOLDER
from llm_kit import GOOD, SLOW, TASK, Script, config, fenced, ray_with, records
from llm_servers import GEMINI_KEY, LLMServer, Ok

MODEL, PRICE = "gemini-2.5-pro", (1.25, 10.0)                # kevolve/llm/prices.yaml, USD per million tokens
SERIAL = """// Scaled softmax forward: one thread, the row's max once, its sum again every 8 elements.
#include <cmath>
#include <cstdint>

extern "C" int forward(const float* x, float* out, int64_t B, int64_t N, float scale,
                       void* workspace, int64_t workspace_bytes) {
    for (int64_t b = 0; b < B; ++b) {
        const float* row = x + b * N;
        float* o = out + b * N;
        float m = -INFINITY;
        for (int64_t j = 0; j < N; ++j) m = std::fmax(m, scale * row[j]);
        double sum = 0.0;
        for (int64_t i = 0; i < N; ++i) {
            if (i % 8 == 0) {
                sum = 0.0;
                for (int64_t j = 0; j < N; ++j) sum += std::exp(scale * row[j] - m);
            }
            o[i] = (float)(std::exp(scale * row[i] - m) / sum);
        }
    }
    return 0;
}
"""
RT_ACCEPTED = "// Attacks nothing the harness checks: the plain fast kernel, to see it is never ranked.\n" + GOOD
RT_WRONG = ("// Attacks the shapes: normalises whole chunks of UNROLL only, hoping every width is a multiple.\n"
            + GOOD.replace("    for (; i < N; ++i) o[i] *= inv;\n", "").replace("UNROLL = 1;", "UNROLL = 4;"))
assert RT_WRONG.count("o[i] *= inv") == 0 and "o[i + u] *= inv" in RT_WRONG


@pytest.fixture(scope="module")
def gemini_run(tmp_path_factory):
    task = tmp_path_factory.mktemp("task") / "slow_task"
    shutil.copytree(TASK, task)
    (task / "seeds" / "cpu.cpp").write_text(SLOW)
    script = Script({"optimize": [Ok(fenced(SERIAL), 1200, 300, thoughts=250)],
                     "red_team": [Ok(fenced(RT_ACCEPTED), 1500, 700, thoughts=400),
                                  Ok(fenced(RT_WRONG), 1500, 650, thoughts=300)]},
                    default=lambda kind, prompt: Ok("I have no further ideas.", 900, 12, thoughts=30))
    server = LLMServer(respond=script)
    run_dir = tmp_path_factory.mktemp("gemini") / "run"
    with ray_with({"GEMINI_API_KEY": GEMINI_KEY}, tmp_path_factory.mktemp("kevolve-cache")):
        try:
            summary = search.run(config(task, {"provider": "gemini", "base_url": server.url, "thinking_budget": 1024,
                                               "models": [{"name": MODEL}]},
                                        candidates=4, population={"operators": {"knob": 0, "optimize": 1,
                                                                                "red_team": 1}}), run_dir)
        finally:
            server.stop()
    return summary, run_dir, script, server


def _ids(run_dir):
    found = {}
    for r in records(run_dir):
        src = r.candidate.source
        name = {SLOW: "seed", SERIAL: "serial", RT_ACCEPTED: "accepted", RT_WRONG: "wrong"}.get(src)
        assert name, f"a candidate the script never wrote: {r.candidate.operator} {src[:80]!r}"
        found[name] = r
    return found


def test_the_gemini_search_finds_a_kernel_better_than_its_seed(gemini_run):
    summary, run_dir, _, _ = gemini_run
    found = _ids(run_dir)
    assert set(found) == {"seed", "serial", "accepted", "wrong"}, set(found)
    assert summary.best is not None and summary.best.confirmed, summary
    assert summary.best.id == found["serial"].candidate.id and summary.best.operator == "optimize"
    assert summary.best.speedup > 3 * found["seed"].fitness, (summary.best.speedup, found["seed"].fitness)
    assert (run_dir / "best.cpp").read_text() == SERIAL
    llm_children = [r for r in found.values() if r.candidate.operator != "seed"]
    assert all(r.candidate.model == MODEL and r.candidate.parents == (found["seed"].candidate.id,)
               for r in llm_children)


def test_the_real_client_spoke_the_gemini_api(gemini_run):
    _, _, script, server = gemini_run
    assert server.requests and script.kinds["optimize"] >= 1 and script.kinds["red_team"] >= 2
    for req in server.requests:
        assert req.path.endswith(f"/models/{MODEL}:generateContent") and req.headers["x-goog-api-key"] == GEMINI_KEY
        assert req.body["systemInstruction"]["parts"][0]["text"] and req.body["contents"][-1]["role"] == "user"
        gen = req.body["generationConfig"]
        thinking = gen["thinkingConfig"]
        assert (gen["maxOutputTokens"] == 2000
                and (thinking.get("thinkingBudget") or thinking.get("thinking_budget")) == 1024)


def test_spend_is_the_usage_metadata_times_the_price(gemini_run):
    summary, run_dir, script, server = gemini_run
    assert len(script.usage) == len(server.requests) == summary.llm_calls
    assert summary.spend_usd == pytest.approx(script.cost(PRICE), rel=1e-9, abs=1e-12)
    with Store.open(run_dir, readonly=True) as store:
        assert store.total_cost() == pytest.approx(script.cost(PRICE), rel=1e-9)
    serial = _ids(run_dir)["serial"]
    assert serial.candidate.meta_dict()["tokens_out"] == 300 + 250       # thoughts count as output
    assert serial.cost_usd == pytest.approx((1200 * PRICE[0] + 550 * PRICE[1]) / 1e6)


def test_red_team_children_are_judged_like_any_other(gemini_run):
    _, run_dir, _, _ = gemini_run
    found = _ids(run_dir)
    for name in ("accepted", "wrong"):
        r = found[name]
        assert r.candidate.operator == "red_team" and r.candidate.meta_dict()["red_team"] is True
        assert r.status == "evaluated" and r.evaluation and r.arm == "red_team" and r.reward is not None
    assert found["accepted"].correct and found["accepted"].fitness > 0
    wrong = found["wrong"]
    assert not wrong.correct and wrong.compiled and "B=3,N=1001" in wrong.feedback, wrong.feedback


def test_an_accepted_red_team_kernel_is_a_suspect_saved_with_its_verdict(gemini_run):
    summary, run_dir, _, _ = gemini_run
    found = _ids(run_dir)
    accepted, wrong = found["accepted"].candidate, found["wrong"].candidate
    assert summary.suspected_judge_bugs == (accepted.id,)
    folder = run_dir / FOLDER
    assert sorted(p.name for p in folder.iterdir()) == sorted([f"{accepted.id}.cpp", f"{accepted.id}.json"])
    assert (folder / f"{accepted.id}.cpp").read_text() == RT_ACCEPTED
    saved = json.loads((folder / f"{accepted.id}.json").read_text())
    assert saved["candidate"]["id"] == accepted.id and saved["candidate"]["operator"] == "red_team"
    assert saved["candidate"]["parents"] == [found["seed"].candidate.id]
    assert saved["evaluation"]["correct"] is True and saved["evaluation"]["measurements"]
    with Store.open(run_dir, readonly=True) as store:
        assert [p["id"] for _, _, p in store.events("suspected_judge_bug")] == [accepted.id]
    assert "SUSPECTED JUDGE BUGS" in summary_text(summary, run_dir) and accepted.id in summary_text(summary, run_dir)
    assert json.loads(json.dumps(summary.as_dict()))["suspected_judge_bugs"] == [accepted.id]
    assert wrong.id not in summary.suspected_judge_bugs


def test_a_suspect_is_never_ranked_never_a_parent_never_the_best(gemini_run):
    """The accepted red-team kernel is the fastest correct kernel of the run, and still not the best."""
    summary, run_dir, _, _ = gemini_run
    found = _ids(run_dir)
    accepted = found["accepted"]
    assert accepted.fitness > found["serial"].fitness, "the test needs the suspect to be the fastest"
    assert summary.best.id != accepted.candidate.id and (run_dir / "best.cpp").read_text() != RT_ACCEPTED
    assert all(accepted.candidate.id not in r.candidate.parents for r in records(run_dir))
    with Store.open(run_dir, readonly=True) as store:
        assert accepted.candidate.id not in [r.candidate.id for r in store.best(10)]
        crowned = [p["id"] for _, _, p in store.events("champion")]
        challengers = [p["challenger"] for _, _, p in store.events("compare")]
        confirmed = [p["id"] for _, _, p in store.events("confirm")]
    assert accepted.candidate.id not in crowned + challengers + confirmed
    assert summary.correct == 2                                      # seed and serial: a suspect is not counted
