"""Contracts of kevolve.search.profile (Nsight Compute profiles of parents for the optimize prompts): ncu's CSV
read into one row per candidate kernel, the worker's torch kernels left out; the table the prompt shows; the
configuration profiled is a shown one; the plan turns profiling on only for cuda with ncu found; the profile
reaches the optimize prompt through requests. On the CPU from ncu CSV text in the layout ncu 2023-2025 writes
with --csv (a log of `ncu --csv --metrics ...`); the `gpu` tests run the real ncu on the worker, and a search.
"""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from kevolve.config import from_hydra
from kevolve.judge.options import Options
from kevolve.messages import Candidate, Outcome, Proposal
from kevolve.operators.compose import messages
from kevolve.operators.context import Context
from kevolve.operators.strategies import Board
from kevolve.search import profile as ncu
from kevolve.search.plan import resolve
from kevolve.search.population import Population
from kevolve.record.store import Store
from kevolve.task import load_task

ROOT = Path(__file__).resolve().parents[2]
HEAD = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
        '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')
ROW = '"{id}","4242","python3","127.0.0.1","{name}","1","7","(256, 1, 1)","(1024, 1, 1)","0","9.0",' \
      '"Command line profiler metrics","{metric}","{unit}","{value}"'
OURS = "void layernorm_rows<256>(const float *, const float *, const float *, float *, long, long, float)"
TORCH = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int, T2, T3)"


def recorded() -> str:
    """A log of `ncu --csv --log-file ... --metrics METRICS`: ncu's messages, a torch fill kernel (the worker's
    poison), two launches of the candidate's kernel, one value ncu could not measure, a grouped number."""
    values = {0: {"gpu__time_duration.sum": ("nsecond", "3,520"),
                  "launch__registers_per_thread": ("register/thread", "16")},
              1: {"gpu__time_duration.sum": ("usecond", "12.40"),
                  "dram__throughput.avg.pct_of_peak_sustained_elapsed": ("%", "61.20"),
                  "sm__throughput.avg.pct_of_peak_sustained_elapsed": ("%", "20.10"),
                  "sm__warps_active.avg.pct_of_peak_sustained_active": ("%", "70.00"),
                  "lts__t_sector_hit_rate.pct": ("%", "n/a"),
                  "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct": ("%", "100"),
                  "launch__registers_per_thread": ("register/thread", "32")},
              2: {"gpu__time_duration.sum": ("usecond", "12.60"),
                  "dram__throughput.avg.pct_of_peak_sustained_elapsed": ("%", "62.80"),
                  "sm__throughput.avg.pct_of_peak_sustained_elapsed": ("%", "19.90"),
                  "sm__warps_active.avg.pct_of_peak_sustained_active": ("%", "71.00"),
                  "lts__t_sector_hit_rate.pct": ("%", "n/a"),
                  "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct": ("%", "100"),
                  "launch__registers_per_thread": ("register/thread", "32")}}
    rows = [ROW.format(id=i, name=TORCH if i == 0 else OURS, metric=m, unit=u, value=v)
            for i, metrics in values.items() for m, (u, v) in metrics.items()]
    return "\n".join(["==PROF== Connected to process 4242 (/usr/bin/python3.12)",
                      '==PROF== Profiling "vectorized_elementwise_kernel" - 0: 0%....50%....100% - 1 pass',
                      '==PROF== Profiling "layernorm_rows" - 1: 0%....50%....100% - 9 passes',
                      '==PROF== Profiling "layernorm_rows" - 2: 0%....50%....100% - 9 passes',
                      "==PROF== Disconnected from process 4242", HEAD, *rows]) + "\n"


def test_the_csv_gives_one_row_per_candidate_kernel_means_over_launches():
    (k,) = ncu.parse(recorded())
    assert k.name == OURS and k.launches == 2
    assert k.metrics["gpu__time_duration.sum"] == pytest.approx(12.5) and k.units["gpu__time_duration.sum"] == "usecond"
    assert k.metrics["dram__throughput.avg.pct_of_peak_sustained_elapsed"] == pytest.approx(62.0)
    assert k.metrics["launch__registers_per_thread"] == 32
    assert "lts__t_sector_hit_rate.pct" not in k.metrics                   # n/a: not measured, not zero


@pytest.mark.parametrize("text", ["", "==PROF== Connected to process 1\nno csv here\n", HEAD + "\n",
                                  HEAD + '\n"0","1","p","h","k","1","7","(1, 1, 1)","(1, 1, 1)"\n'])
def test_no_usable_csv_is_no_kernel_never_an_exception(text):
    assert ncu.parse(text) == ()


def test_grouped_numbers_and_nanoseconds_read_right():
    csv = "\n".join([HEAD, ROW.format(id=0, name="void k()", metric="gpu__time_duration.sum", unit="nsecond",
                                      value="1,234,500")])
    (k,) = ncu.parse(csv)
    assert k.metrics["gpu__time_duration.sum"] == 1234500
    assert "1234.5 us" in ncu.text((k,), "B=8")


def test_the_prompt_table_names_the_configuration_every_metric_and_the_kernel():
    text = ncu.Profile(ncu.parse(recorded()), "B=8,N=4096").text
    lines = text.splitlines()
    assert lines[0] == "Nsight Compute, one call on B=8,N=4096 (means over launches):"
    assert all(label in lines[1] for label in ncu.METRICS.values())
    row = lines[2]
    assert row.startswith("void layernorm_rows<256> ") and "12.5 us" in row and "62.0" in row and " 32" in row
    assert " - " in row                                                        # the L2 hit rate it could not read
    assert ncu.Profile((), "B=8", failure="no kernel").text == ""


def test_the_profiled_configuration_is_a_shown_one_with_the_largest_floor():
    task = load_task("layernorm_fwd")
    index, case = ncu.largest_shown(task, "bench")
    shown = [c for c in task.configs("bench") if not c.heldout]
    assert not case.heldout and task.configs("bench")[index] == case
    assert task.floor(case.size_dict) == max(task.floor(c.size_dict) for c in shown)


def test_the_plan_profiles_only_on_cuda_with_ncu_found_and_an_llm():
    task_dir = ROOT / "tests" / "search_task"
    llm = {"provider": "openai", "models": [{"name": "gpt-4.1"}]}
    info = {"device": "NVIDIA H200", "arch": "90a", "ncu": "/opt/nsight/ncu"}
    def plan(cluster, **cfg):
        return resolve(from_hydra({"task": {"name": str(task_dir)}, **cfg}), load_task(task_dir), cluster)
    assert plan({"CPU": 8, "GPU": 1}, llm=llm).with_device(info).ncu == "/opt/nsight/ncu"
    assert plan({"CPU": 8, "GPU": 1}, llm=llm).with_device({**info, "ncu": None}).ncu is None
    assert plan({"CPU": 8, "GPU": 1}, llm=llm, search={"profile": False}).with_device(info).ncu is None
    assert plan({"CPU": 8, "GPU": 1}).with_device(info).ncu is None                   # knob mutation only
    assert plan({"CPU": 8}, llm=llm).with_device({"cpu": "x", "ncu": "/opt/nsight/ncu"}).ncu is None


def test_a_parents_profile_reaches_its_optimize_prompt(tmp_path):
    task = load_task("layernorm_fwd")
    parent = Candidate.new(task.seed_path("cuda").read_text(), operator="seed")
    population = Population()
    population.add(parent, Outcome(1.0, True))
    text = ncu.Profile(ncu.parse(recorded()), "B=8").text
    proposal = Proposal(0, parent, "optimize")
    with_profile = population.request(proposal, Board(), 3, 4, {parent.id: text})
    without = population.request(proposal, Board(), 3, 4, {})
    ctx = Context(task, "cuda", "NVIDIA H200, sm_90a", "bench")
    prompt = messages(ctx, with_profile)[-1]["content"]
    assert "## A profile of it" in prompt and text in prompt
    assert "## A profile of it" not in messages(ctx, without)[-1]["content"]


def test_the_worker_runs_one_call_of_the_profiled_configuration(tmp_path):
    """What ncu wraps, without ncu: the worker (confined as in a judgement) runs one correctness call."""
    from kevolve.judge.build import build
    task = load_task(ROOT / "tests" / "search_task")
    b = build((task.dir / "seeds" / "cpu.cpp").read_text(), "cpu", "c", cache_dir=str(tmp_path / "cache"))
    assert b.ok, b.error
    options = Options(target="cpu", shapes="small")
    index, _ = ncu.largest_shown(task, "small")
    (tmp_path / "w").mkdir()
    assert ncu.one_call(task, b.lib_path, options, None, index, [], str(tmp_path / "w"), 120) is None
    (tmp_path / "v").mkdir()
    failure = ncu.one_call(task, str(tmp_path / "missing.so"), options, None, index, [], str(tmp_path / "v"), 120)
    assert failure.startswith("the worker failed: ") and "missing.so" in failure, failure


# ---------------------------------------------------------------------- on a GPU, with ncu
def _ncu() -> str:
    found = shutil.which("ncu")
    if found is None:
        pytest.skip("ncu is not on PATH (Nsight Compute; e.g. /usr/local/cuda/bin or /opt/nvidia/nsight-compute)")
    return found


@pytest.mark.gpu
@pytest.mark.parametrize("seed", ["cuda.cu", "cuda_split.cu"])
def test_ncu_profiles_a_cuda_seed_in_the_worker(seed, tmp_path):
    from kevolve.judge.build import build
    tool = _ncu()
    task = load_task("layernorm_fwd")
    b = build((task.dir / "seeds" / seed).read_text(), "cuda", "c", cache_dir=str(tmp_path))
    assert b.ok, b.error
    found = ncu.profile(task, b.lib_path, Options(target="cuda", shapes="bench"), b.module_name, tool)
    record = os.environ.get("KEVOLVE_NCU_RECORD")         # a folder: keep ncu's CSV as written (a recording)
    if record:
        Path(record, f"ncu_layernorm_fwd_{seed}.csv").write_text(found.raw)
    print(found.text or found.failure)
    assert found.failure is None and found.kernels, found.failure
    names = " ".join(k.name for k in found.kernels)
    expected = {"cuda.cu": ["layernorm_rows"], "cuda_split.cu": ["tile_stats", "row_finish", "normalize"]}[seed]
    assert all(n in names for n in expected) and "at::" not in names, names
    for k in found.kernels:
        assert set(ncu.METRICS) - {"lts__t_sector_hit_rate.pct"} <= set(k.metrics), (k.name, k.metrics)
    assert "Nsight Compute, one call on" in found.text



@pytest.mark.gpu
def test_a_cuda_search_shows_a_parents_profile_in_its_later_prompts(tmp_path):
    """llm=openai (the loopback server of tests/llm) on cuda: the first optimize proposal on a parent has it
    profiled on the evaluator; later optimize prompts on it carry the table."""
    import itertools
    from kevolve.search import driver as search
    from llm_kit import Script, config_dict, fenced, prompt_of, ray_with, variant
    from llm_servers import OPENAI_KEY, LLMServer, Ok
    _ncu()
    seed, n = (load_task("layernorm_fwd").dir / "seeds" / "cuda.cu").read_text(), itertools.count()
    script = Script({}, lambda k, prompt: Ok(fenced(variant(seed, f"V{next(n)}")), 1500, 300) if k == "optimize"
                    else Ok("No further ideas.", 100, 5))
    server = LLMServer(respond=script)
    cfg = config_dict("layernorm_fwd", {"provider": "openai", "base_url": server.url + "/v1",
                                         "models": [{"name": "gpt-4.1"}]}, candidates=8,
                      population={"operators": {"knob": 0, "optimize": 1}})
    cfg["resources"] = {"target": "cuda"}
    with ray_with({"OPENAI_API_KEY": OPENAI_KEY}, tmp_path / "cache"):
        try:
            search.run(from_hydra(cfg), tmp_path / "run")
        finally:
            server.stop()
    with Store.open(tmp_path / "run", readonly=True) as store:
        made = [p for _, _, p in store.events("profile")]
    assert made and all(p["failure"] is None for p in made), made
    seeds = (load_task("layernorm_fwd").dir / "seeds").glob("*.cu")      # the parent is whichever seed ranks first
    kernels = {m for f in seeds for m in re.findall(r"__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)",
                                                     f.read_text())}
    assert all(any(k in p["text"] for k in kernels) for p in made), [p["text"][:300] for p in made]
    shown = [r for r in server.requests if "## A profile of it" in prompt_of(r.body)]
    assert shown and all("Nsight Compute, one call on" in prompt_of(r.body) for r in shown), len(server.requests)
