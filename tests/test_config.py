"""Contracts of kevolve.config and the Hydra groups in conf/: every option composes and validates; a bad value
stops at the entry point with a ConfigError naming the field (no Ray, nothing built)."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import DictConfig

from kevolve.config import Config, ConfigError, from_hydra
from kevolve.config.hydra import compose
from kevolve.task import TASKS_DIR, list_tasks

ROOT = Path(__file__).resolve().parent.parent
CONF = ROOT / "conf"
GROUPS = ("task", "search", "resources", "llm", "logger", "experiment")


def options(group: str) -> list[str]:
    """A group's options: its conf/ files; the `task` group's are the folders of tasks/
    (kevolve.config.register_tasks)."""
    if group == "task":
        return list_tasks()
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def composed(*overrides: str) -> DictConfig:
    return compose(*overrides)


def load(*overrides: str) -> Config:
    return from_hydra(composed(*overrides))


def test_every_group_has_options():
    for group in GROUPS:
        assert options(group), f"no option for group {group}"


def test_defaults_compose_and_validate():
    c = load()
    assert isinstance(c, Config)
    assert c.task.name in list_tasks()


@pytest.mark.parametrize("group,option", [(g, o) for g in GROUPS for o in options(g)])
def test_every_option_of_every_group_validates(group, option):
    c = load(f"{group}={option}")
    assert isinstance(c, Config)
    if group == "task":
        assert c.task.name == option


DEFAULT_TASKS = ("layernorm_bwd", "cross_entropy_fwd", "unet_conv2d_fwd")     # the others: slow (228 pairs, 27 s)


@pytest.mark.parametrize("task", [t if t in DEFAULT_TASKS else pytest.param(t, marks=pytest.mark.slow)
                                  for t in options("task")])
@pytest.mark.parametrize("group,option", [(g, o) for g in GROUPS if g != "task" for o in options(g)])
def test_every_option_validates_with_every_task(task, group, option):
    c = load(f"task={task}", f"{group}={option}")
    # an experiment may pin its own task (`override /task`); the command line wins over it
    assert c.task.name == task


def test_every_task_folder_is_a_task_option_without_a_conf_file():
    """Tasks are data: `task=NAME` composes for every folder of tasks/, and conf/task/ needs no file for it."""
    assert not list((CONF / "task").glob("*.yaml")), "conf/task/*.yaml are not needed: tasks/ folders are the options"
    for name in list_tasks():
        assert (TASKS_DIR / name / "task.yaml").is_file()
        assert load(f"task={name}").task.name == name


def test_a_task_option_composes_with_shapes_and_multirun_style_overrides():
    c = load("task=rmsnorm_fwd", "task.shapes=small")
    assert (c.task.name, c.task.shapes) == ("rmsnorm_fwd", "small")
    for name in list_tasks()[:2]:          # a sweep `-m task=a,b` composes each job with `task=<one of them>`
        assert load(f"task={name}", "search.seed=3").task.name == name


def test_task_may_be_a_folder_path_at_the_entry_point():
    from kevolve.cli.search import task_paths
    folder = str(ROOT / "tests" / "search_task")
    assert task_paths([f"task={folder}", "search.seed=1"]) == [f"task.name={folder}", "search.seed=1"]
    assert task_paths(["task=layernorm_fwd", "task=a,b", "task=/no/such/folder"]) == \
        ["task=layernorm_fwd", "task=a,b", "task=/no/such/folder"]


def test_cli_composes_a_task_given_by_its_path(tmp_path):
    folder = ROOT / "tests" / "search_task"
    out = _kevolve(tmp_path, "--cfg", "job", f"task={folder}")
    assert out.returncode == 0, out.stderr
    assert f"name: {folder}" in out.stdout


def test_experiment_overlays_take_effect():
    c = load("experiment=cpu_smoke")
    assert (c.task.name, c.resources.target, c.search.population.islands) == ("layernorm_fwd", "cpu", 1)
    assert c.search.baselines == ["eager"]


def test_task_name_may_be_a_folder_path():
    c = load(f"task.name={ROOT / 'tests' / 'search_task'}")
    assert c.task.name == str(ROOT / "tests" / "search_task")


@pytest.mark.parametrize("override,field", [
    ("search.candidates=0", "search.candidates"),
    ("search.candidates=abc", "search.candidates"),
    ("search.wall_time_s=-1", "search.wall_time_s"),
    ("search.timeout_s=0", "search.timeout_s"),
    ("search.population.islands=0", "search.population.islands"),
    ("search.in_flight=0", "search.in_flight"),
    ("search.dollars=-1", "search.dollars"),
    ("resources.target=tpu", "resources.target"),
    ("resources.evaluators=0", "resources.evaluators"),
    ("search.population.operators.optimize=1", "search.population.operators"),          # an LLM operator without an LLM
    ("++search.population.operators={optimize:1}", "search.population.operators"),
    ("+search.population.operators.bogus=1", "search.population.operators"),
    ("search.population.operators.knob=-1", "search.population.operators"),
    ("llm.provider=foo", "llm.provider"),
    ("+search.bogus=1", "search.bogus"),
    ("+resources.gpus=1", "resources.gpus"),
    ("task.name=nope", "task.name"),
    ("search.baselines=[fast]", "search.baselines"),
    ("logger.kind=comet", "logger.kind"),
    ("+logger.mode=cloud", "logger.mode"),
    ("search.seeds=newest", "search.seeds"),
])
def test_hostile_values_name_the_field(override, field):
    with pytest.raises(ConfigError) as e:
        load(override)
    assert f"'{field}'" in str(e.value)


def test_search_seeds_takes_all_listed_or_best_all_by_default():
    assert load().search.seeds == "all"
    for value in ("all", "listed", "best"):          # whether the task has a best/ kernel: the plan (test_plan.py)
        assert load(f"search.seeds={value}").search.seeds == value
    with pytest.raises(ConfigError, match="all .*listed.*best"):
        load("search.seeds=seeds")


def test_unknown_task_lists_the_known_ones():
    with pytest.raises(ConfigError) as e:
        load("task.name=nope")
    for name in list_tasks():
        assert name in str(e.value)


def test_from_hydra_accepts_a_plain_dict():
    c = from_hydra({"task": {"name": "layernorm_fwd"}, "search": {"candidates": 3}})
    assert (c.task.name, c.search.candidates) == ("layernorm_fwd", 3)
    with pytest.raises(ConfigError, match="search.population.operators"):
        from_hydra({"search": {"population": {"operators": {"optimize": 1}}}})


def _kevolve(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kevolve", *args, f"hydra.run.dir={tmp_path / 'hydra'}"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)


def test_cli_bad_value_exits_2_naming_the_field(tmp_path):
    proc = _kevolve(tmp_path, "search.candidates=0")
    assert proc.returncode == 2, proc.stderr
    assert "search.candidates" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not (tmp_path / "hydra" / "kevolve.db").exists()       # stopped before anything was written


def test_cli_dict_override_of_operators_is_a_config_error(tmp_path):
    """`search.population.operators={optimize:1}` is the natural spelling; Hydra refuses to merge a new key into the
    struct
    dict before kevolve sees it, and exits 1 — the status that means "no correct kernel was found"."""
    proc = _kevolve(tmp_path, "search.population.operators={optimize:1}")
    assert "search.population.operators" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert proc.returncode == 2, f"exit status {proc.returncode}: {proc.stderr}"


def test_cli_malformed_task_exits_2_naming_the_file_and_field(tmp_path):
    task = tmp_path / "broken_task"
    shutil.copytree(ROOT / "tests" / "search_task", task, ignore=shutil.ignore_patterns("__pycache__"))
    text = (task / "task.yaml").read_text()
    (task / "task.yaml").write_text(text.replace("direction: forward", "direction: sideways"))
    proc = _kevolve(tmp_path, f"task.name={task}", "resources.target=cpu")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "task.yaml" in proc.stderr and "direction" in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr + proc.stdout


def test_cli_run_dir_that_cannot_be_written_exits_2_saying_so(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    proc = _kevolve(tmp_path, f"task.name={ROOT / 'tests' / 'search_task'}", "resources.target=cpu",
                    f"run_dir={blocker / 'run'}")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "cannot create the run's database" in proc.stderr and "run_dir=" in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr + proc.stdout


def test_llm_operators_and_verifiers_need_an_llm_and_are_accepted_with_one():
    with pytest.raises(ConfigError, match="search.population.operators"):
        load("search.population.operators.optimize=1")
    with pytest.raises(ConfigError, match="search.verifiers.checks"):
        load("search.verifiers.checks=[memory]")
    c = load("llm=openai", "search.population.operators.optimize=3", "search.population.operators.red_team=1",
             "search.verifiers.checks=[compile,memory]", "search.verifiers.mode=filter", "search.choice=thompson")
    assert c.search.population.operators["red_team"] == 1 and c.search.verifiers.mode == "filter"
    for bad, field in (("search.choice=greedy", "search.choice"),
                       ("search.verifiers.mode=drop", "search.verifiers.mode"),
                       ("search.verifiers.checks=[speed]", "search.verifiers.checks"),
                       ("search.verifiers.audit_share=2", "search.verifiers.audit_share")):
        with pytest.raises(ConfigError, match=field):
            load("llm=openai", bad)
