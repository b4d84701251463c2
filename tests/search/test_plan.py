"""Contracts of kevolve.search.plan: every default resolved once, from the config and the cluster, and a
configuration the cluster cannot serve refused there, naming the field."""
from __future__ import annotations

from pathlib import Path

import pytest

from kevolve.config import ConfigError, from_hydra
from kevolve.search.plan import resolve
from kevolve.task import load_task

TASK = Path(__file__).resolve().parents[1] / "search_task"


def config(**sections):
    return from_hydra({"task": {"name": str(TASK)}, **sections})


@pytest.fixture(scope="module")
def task():
    return load_task(TASK)


def test_cpu_defaults(task):
    plan = resolve(config(), task, {"CPU": 8})
    assert (plan.target, plan.shapes, plan.evaluators, plan.builders, plan.in_flight) == ("cpu", "small", 1, 7, 4)
    assert plan.baseline_refresh_s == 300.0 and plan.reference_bytes == 2 << 30
    assert plan.options.target == "cpu" and plan.options.shapes == "small" and plan.options.abi == "c"
    assert "num_gpus" not in plan.evaluator_placement and plan.arch is None


def test_gpu_defaults(task):
    plan = resolve(config(), task, {"CPU": 32, "GPU": 2})
    assert (plan.target, plan.shapes, plan.evaluators, plan.builders, plan.in_flight) == ("cuda", "bench", 2, 30, 34)
    assert plan.baseline_refresh_s == 300.0 and plan.reference_bytes is None     # sized by each evaluator to its GPU
    assert plan.evaluator_placement == {"num_cpus": 1.0, "num_gpus": 1}
    assert plan.with_arch("90a").arch == "90a"


def test_on_cuda_without_an_llm_every_builder_has_a_candidate_and_each_evaluator_two(task):
    """The H200 host (16 CPUs, one GPU): 15 builders, so 17 in flight, not 4 — nvcc, not the judge, set the pace
    of its knob searches when 4 were in flight."""
    plan = resolve(config(), task, {"CPU": 16, "GPU": 1})
    assert (plan.builders, plan.in_flight) == (15, 17)


def test_in_flight_is_never_under_four_per_evaluator(task):
    plan = resolve(config(resources={"builders": 1}), task, {"CPU": 32, "GPU": 2})
    assert (plan.builders, plan.in_flight) == (1, 8)


def test_on_the_cpu_in_flight_stays_four_per_evaluator_whatever_the_builders(task):
    """g++ builds in a fraction of a CPU judgement: more in flight would only queue children of older verdicts."""
    plan = resolve(config(), task, {"CPU": 64})
    assert (plan.target, plan.builders, plan.in_flight) == ("cpu", 63, 4)


def test_with_llm_operators_in_flight_is_four_per_evaluator_and_the_llm_calls_not_the_builders(task):
    cfg = config(search={"population": {"operators": {"optimize": 1}}},
                 llm={"provider": "local", "base_url": "http://127.0.0.1:9/v1", "models": [{"name": "m"}]})
    plan = resolve(cfg, task, {"CPU": 16, "GPU": 1})
    assert plan.llm_calls > 0 and plan.in_flight == 4 + plan.llm_calls and plan.in_flight_follows_llm


def test_more_evaluators_than_gpus_share_them(task):
    """Three evaluators on two GPUs: half a GPU each (Ray puts two on one GPU, one on the other); their timed
    rounds take turns on a shared GPU through the device lock (tests/judge/test_gpu_lock.py)."""
    plan = resolve(config(resources={"evaluators": 3}), task, {"CPU": 32, "GPU": 2})
    assert plan.evaluators == 3 and plan.evaluator_placement["num_gpus"] == 0.5
    assert resolve(config(resources={"evaluators": 2}), task,
                   {"CPU": 8, "GPU": 1}).evaluator_placement["num_gpus"] == 0.5


def test_configured_values_win(task, monkeypatch):
    monkeypatch.delenv("KEVOLVE_CUDA_ARCH", raising=False)
    plan = resolve(config(resources={"builders": 3, "evaluators": 1, "cuda_arch": "80", "exchange": "files",
                                     "reference_cache_gb": 0.5, "evaluator_resources": {"gpu_node": 1},
                                     "compiled_checks": "off"},
                          search={"in_flight": 2, "baseline_refresh_s": 5}), task, {"CPU": 32, "GPU": 2})
    assert (plan.builders, plan.evaluators, plan.in_flight, plan.baseline_refresh_s) == (3, 1, 2, 5)
    assert plan.arch == "80" and plan.with_arch("90a").arch == "80"      # configured beats detected
    assert plan.options.exchange == "files" and plan.reference_bytes == 1 << 29
    assert plan.options.compiled_checks == "off"
    assert plan.evaluator_placement["resources"] == {"gpu_node": 1}


def test_the_environment_overrides_the_configured_arch(task, monkeypatch):
    monkeypatch.setenv("KEVOLVE_CUDA_ARCH", "100a")
    assert resolve(config(resources={"cuda_arch": "80"}), task, {"CPU": 4, "GPU": 1}).arch == "100a"


@pytest.mark.parametrize("sections, cluster, field", [
    ({"resources": {"target": "cuda"}}, {"CPU": 4}, "resources.target"),
    ({"task": {"name": str(TASK), "shapes": "huge"}}, {"CPU": 4}, "task.shapes"),
])
def test_what_the_cluster_cannot_serve_is_refused_naming_the_field(task, sections, cluster, field):
    with pytest.raises(ConfigError, match=field):
        resolve(config(**sections), task, cluster)


@pytest.mark.parametrize("sections, field", [
    ({"resources": {"exchange": "pigeon"}}, "resources.exchange"),
    ({"resources": {"cuda_arch": "hopper"}}, "resources.cuda_arch"),
    ({"resources": {"compiled_checks": "yes"}}, "resources.compiled_checks"),
])
def test_new_settings_are_checked(sections, field):
    with pytest.raises(ConfigError, match=field):
        config(**sections)


# ---------------------------------------------------------------- search.seeds: what a new run starts from
def best_copy(tmp_path: Path) -> Path:
    """The search task copied with a best/cpu.cpp (its seed with a knob changed: another source) and its .md."""
    import shutil
    from kevolve.operators import knobs
    folder = tmp_path / "search_task"
    shutil.copytree(TASK, folder, ignore=shutil.ignore_patterns("__pycache__"))
    seed = (TASK / "seeds" / "cpu.cpp").read_text()
    knob = next(iter(knobs.parse(seed).values()))
    (folder / "best").mkdir()
    (folder / "best" / "cpu.cpp").write_text(knobs.apply(seed, {knob.name: knob.alternatives[0]}))
    (folder / "best" / "cpu.md").write_text("---\ntask: search_task\ntarget: cpu\nspeedup: 1.2\n---\n")
    return folder


@pytest.mark.parametrize("which, labels", [("all", ["cpu.cpp", "best/cpu.cpp"]), ("listed", ["cpu.cpp"]),
                                           ("best", ["best/cpu.cpp"])])
def test_search_seeds_chooses_the_listed_seeds_the_best_kernel_or_both(tmp_path, which, labels):
    folder = best_copy(tmp_path)
    cfg = from_hydra({"task": {"name": str(folder)}, "search": {"seeds": which}})
    plan = resolve(cfg, load_task(folder), {"CPU": 4})
    assert [label for label, _ in plan.seeds] == labels
    files = {"cpu.cpp": folder / "seeds" / "cpu.cpp", "best/cpu.cpp": folder / "best" / "cpu.cpp"}
    assert [Path(p) for _, p in plan.seeds] == [files[label] for label in labels]


def test_search_seeds_takes_kernel_files_of_your_own(tmp_path, task):
    """A task without seeds (an import the naive writer could not follow) starts from files given by path."""
    mine = tmp_path / "mine.cpp"
    mine.write_text((TASK / "seeds" / "cpu.cpp").read_text())
    plan = resolve(config(search={"seeds": f"{mine},{TASK / 'seeds' / 'cpu.cpp'}"}), task, {"CPU": 4})
    assert plan.seeds == (("mine.cpp", str(mine)), ("cpu.cpp", str(TASK / "seeds" / "cpu.cpp")))
    with pytest.raises(ConfigError, match=r"config field 'search.seeds'.*kernel files, comma-separated"):
        config(search={"seeds": str(tmp_path / "missing.cpp")})


def test_without_a_best_kernel_all_is_the_listed_seeds_and_best_is_a_config_error(task):
    assert [label for label, _ in resolve(config(), task, {"CPU": 4}).seeds] == ["cpu.cpp"]
    with pytest.raises(ConfigError) as e:
        resolve(config(search={"seeds": "best"}), task, {"CPU": 4})
    message = str(e.value)
    assert "'search.seeds'" in message and str(TASK / "best" / "cpu.cpp") in message
    assert "python -m kevolve.tasks best RUN_DIR" in message and "search.seeds=all|listed" in message


def test_best_for_another_target_is_no_best_for_this_one(tmp_path):
    folder = best_copy(tmp_path)                   # a cpu best only: a cuda search with seeds=best is refused
    with pytest.raises(ConfigError, match=r"no best kernel for target=cuda .*best/cuda.cu is missing"):
        resolve(from_hydra({"task": {"name": str(folder)}, "search": {"seeds": "best"}}), load_task(folder),
                {"CPU": 4, "GPU": 1})


def test_a_replay_takes_the_recorded_runs_seeds_so_best_needs_no_best_kernel(task, tmp_path):
    (tmp_path / "llm_cache.sqlite").write_text("")             # what llm.replay checks for
    cfg = config(search={"seeds": "best"}, llm={"provider": "openai", "replay": str(tmp_path),
                                                "models": [{"name": "gpt-5"}]})
    assert resolve(cfg, task, {"CPU": 4}).seeds == ()


def test_an_evaluators_default_references_are_a_quarter_of_its_share_of_the_gpu():
    from kevolve.search.actors import REFERENCE_FALLBACK, reference_budget
    h200 = 150_000_000_000                                         # torch's total_memory of an H200, about
    assert reference_budget(h200) == h200 // 4 > 22.1 * (1 << 30)   # layernorm_bwd's bench references fit
    assert reference_budget(h200, 0.5) == h200 // 8                # two evaluators on one GPU: half each
    assert reference_budget(24 << 30) == 6 << 30                   # a 24 GB card keeps less than the old 16 GiB
    assert reference_budget(None) == REFERENCE_FALLBACK            # its memory could not be read
