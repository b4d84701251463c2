"""Kernels right on every listed configuration and wrong elsewhere in the task's domain (issue 46): accepted when
only the shape set is checked, rejected by the configurations every judgement draws and by the release check, with
the smallest failing configuration named; their honest twins (the seeds they were made from) accepted.

The hostile kernels (tests/adversarial/domain/) special-case what task.yaml shows: eps capped at the largest listed
value, a one-pass float variance on rows longer than the longest listed one, bfloat16 column sums beyond the largest
listed batch. The tasks are copies of layernorm_fwd/bwd whose `small` set keeps one cheap configuration (the
kernels' thresholds stay those of the shipped sets, inside the domain and beyond the listed rows either way)."""
from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest
import yaml

from kevolve.judge import build as builder
from kevolve.judge.evaluator.harness import judge, release
from kevolve.judge.options import Options
from kevolve.task import draw, load_task

HERE = Path(__file__).resolve().parent / "domain"
SEEDS = Path(__file__).resolve().parents[2] / "tasks"
HOSTILE = {"eps_capped.cpp": "layernorm_fwd", "onepass_long_rows.cpp": "layernorm_fwd",
           "lowprec_big_batch.cpp": "layernorm_bwd"}
CHECK = Options(target="cpu", shapes="small", time_kernel=False, timeout=60)


def _copy(root: Path, name: str, small: dict | None) -> Path:
    folder = root / name
    shutil.copytree(SEEDS / name, folder, ignore=shutil.ignore_patterns("best"))
    raw = yaml.safe_load((folder / "task.yaml").read_text())
    if small is None:                   # every listed shape, one seed and the inits the attacks would meet
        raw["shapes"]["small"].update(seeds=[0], inits=["random", "tiny"])
        for c in raw["shapes"]["small"]["configs"] + raw["shapes"]["small"]["heldout"]:
            c.pop("inits", None)
    else:
        raw["shapes"]["small"] = small
    (folder / "task.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    return folder


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    """layernorm_fwd/bwd with one cheap configuration in `small`."""
    one = {"configs": [{"B": 2, "N": 1025}], "inits": ["random", "tiny"], "seeds": [0]}
    return {name: load_task(_copy(tmp_path_factory.mktemp("tasks"), name, one))
            for name in ("layernorm_fwd", "layernorm_bwd")}


@pytest.fixture(scope="module")
def listed(tmp_path_factory):
    """layernorm_fwd/bwd with every shape of the shipped `small` set (one seed, two inits)."""
    return {name: load_task(_copy(tmp_path_factory.mktemp("tasks"), name, None))
            for name in ("layernorm_fwd", "layernorm_bwd")}


def _lib(path: Path) -> builder.Build:
    b = builder.build(path.read_text(), "cpu")
    assert b.ok, b.error
    return b


@pytest.mark.parametrize("kernel", list(HOSTILE))
def test_the_hostile_kernel_passes_every_listed_configuration(listed, kernel):
    """What the judge checked before domains: every shape of the shipped small set, with the kernels' thresholds."""
    task = listed[HOSTILE[kernel]]
    b = _lib(HERE / kernel)
    ev = judge(task, b.lib_path, Options(target="cpu", shapes="small", time_kernel=False, timeout=60, domain="off"),
               module=b.module_name)
    assert ev.correct and not ev.drawn, ev.failure


@pytest.mark.parametrize("kernel", list(HOSTILE))
def test_the_release_check_rejects_it_naming_the_smallest_failing_configuration(tasks, kernel):
    task = tasks[HOSTILE[kernel]]
    b = _lib(HERE / kernel)
    checked = release(task, b.lib_path, CHECK, 60, module=b.module_name, salt=1)
    assert not checked.passed, checked
    assert checked.failure.startswith("drawn:") and "a configuration drawn from the task's domain" in checked.failure
    where = checked.failure.split(" ")[0]
    sizes = dict(kv.split("=") for kv in where.removeprefix("drawn:").split("/")[0].split(","))
    if kernel == "eps_capped.cpp":
        assert float(sizes["eps"]) > 0.01                  # what the cap breaks, and only there
    if kernel == "onepass_long_rows.cpp":
        assert 262147 < int(sizes["N"]) <= 1.25 * 262148 and sizes["B"] == "1"   # shrunk to just past the switch
    if kernel == "lowprec_big_batch.cpp":
        assert int(sizes["B"]) > 1000
    assert "shrunk from" in checked.failure or kernel == "eps_capped.cpp", checked.failure


@pytest.mark.parametrize("name", ["layernorm_fwd", "layernorm_bwd"])
def test_the_honest_twins_pass_the_release_check(tasks, name):
    task = tasks[name]
    b = _lib(SEEDS / name / "seeds" / "cpu.cpp")
    checked = release(task, b.lib_path, CHECK, 60, module=b.module_name, salt=1)
    assert checked.passed and checked.checked == checked.planned == 60, checked.failure
    assert "N in [" in checked.proven and "(cpu)" in checked.proven


def _salt_that_draws(task, wanted) -> int:
    return next(s for s in range(10_000) if any(wanted(c) for c in draw.for_judgement(task, "cpu", random.Random(s))))


def test_a_judgement_rejects_the_capped_eps_on_a_drawn_configuration_and_accepts_the_seed(tasks, monkeypatch):
    """Every judgement draws configurations (KEVOLVE_DOMAIN_SALT fixes which, to reproduce a verdict): with a salt
    whose draws hold eps above the cap under the tiny init, the capped kernel is rejected there, the seed is not."""
    task = tasks["layernorm_fwd"]
    salt = _salt_that_draws(task, lambda c: c.scalar_dict["eps"] > 0.02 and c.init == "tiny")
    monkeypatch.setenv("KEVOLVE_DOMAIN_SALT", str(salt))
    bad, good = _lib(HERE / "eps_capped.cpp"), _lib(SEEDS / "layernorm_fwd" / "seeds" / "cpu.cpp")
    ev = judge(task, bad.lib_path, CHECK, module=bad.module_name)
    assert not ev.correct and ev.stage == "correctness" and ev.failure.startswith("drawn:"), ev.failure
    assert "eps=" in ev.failure.split(" ")[0]
    ev = judge(task, good.lib_path, CHECK, module=good.module_name)
    assert ev.correct and ev.drawn and all(m.correct and m.kernel is None for m in ev.drawn), ev.failure
    assert ev.summary()["drawn"] == len(ev.drawn) and ev.summary()["configs"] == len(task.configs("small"))


def test_two_judgements_draw_different_configurations(tasks, monkeypatch):
    monkeypatch.delenv("KEVOLVE_DOMAIN_SALT", raising=False)
    task = tasks["layernorm_fwd"]
    good = _lib(SEEDS / "layernorm_fwd" / "seeds" / "cpu.cpp")
    a, b = (judge(task, good.lib_path, CHECK, module=good.module_name) for _ in range(2))
    assert a.correct and b.correct
    assert {m.config for m in a.drawn} != {m.config for m in b.drawn}
    assert not {m.config for m in a.drawn} & {c.id for c in task.configs("small")}


def test_the_corners_alone_catch_the_capped_scalar(tasks):
    """The sweep's corners put each scalar at both ends on sizes where it matters (13 x 13, not one element, whose
    variance is 0 and on which eps changes nothing): a release check of the corners alone rejects the capped eps."""
    task = tasks["layernorm_fwd"]
    b = _lib(HERE / "eps_capped.cpp")
    corners = len(draw.corners(task, "cpu"))
    checked = release(task, b.lib_path, CHECK, corners, module=b.module_name, salt=3)
    assert not checked.passed and "eps=0.1" in checked.failure.split(" ")[0], checked.failure
