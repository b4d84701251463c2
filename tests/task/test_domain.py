"""A task's domain (kevolve/task/domain.py): every shipped task declares one its fixed configurations lie in, and a
malformed one is refused with a message naming the field and what to write."""
from __future__ import annotations

import shutil

import pytest
import yaml

from kevolve.config.tasks import list_tasks
from kevolve.task import load_task
from kevolve.task.domain import config_bytes, outside, parse_bytes
from kevolve.task.expr import TaskError
from kevolve.task.load import _parse  # noqa: F401  (the loader's checks are what is tested, through load_task)


@pytest.mark.parametrize("name", list_tasks())
def test_every_shipped_task_declares_a_domain_its_fixed_configurations_lie_in(name):
    task = load_task(name)
    dom = task.domain
    assert {s.name for s in dom.sizes} == set(task.sizes)
    assert {r.name for r in dom.scalars} == {s.name for s in task.scalars}
    for cases in task.shape_sets.values():
        for c in cases:
            assert dom.violation(c.size_dict, task.scalar_values(c), c.init) is None, c.id
    for target in ("cpu", "cuda"):
        assert dom.budget(target) > 0 and dom.describe(target)
    # the CPU's largest configuration stays small enough for a judgement on 2 cores
    assert dom.budget("cpu") <= 32 << 20


def _copy(tmp_path, name="layernorm_fwd"):
    folder = tmp_path / name
    shutil.copytree(load_task(name).dir, folder, ignore=shutil.ignore_patterns("best"))
    return folder, yaml.safe_load((folder / "task.yaml").read_text())


def _write(folder, raw):
    (folder / "task.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))


@pytest.mark.parametrize("change, says", [
    (lambda d: d.clear(), "missing field 'domain'"),
    (lambda d: d["domain"]["sizes"].pop("N"), "domain.sizes: give every size"),
    (lambda d: d["domain"]["sizes"].update(N={"min": 5, "max": 4}), "domain.sizes.N: min 5 > max 4"),
    (lambda d: d["domain"]["sizes"].update(N={"min": 1}), "domain.sizes.N: {min: A, max: B}"),
    (lambda d: d["domain"]["sizes"].update(N={"min": 1.5, "max": 8}), "a size is an integer"),
    (lambda d: d["domain"]["scalars"].update(eps={"min": 1e-3, "max": 0.1}), "the default 1e-05 lies outside"),
    (lambda d: d["domain"]["scalars"].update(eps={"min": "1e-8", "max": 0.1}), "write 1.0e-6"),
    (lambda d: d["domain"].update(max_bytes={"cpu": "32 MiB"}), "one budget per target"),
    (lambda d: d["domain"].update(max_bytes={"cpu": "lots", "cuda": "2 GiB"}), "is not a size in bytes"),
    (lambda d: d["domain"].update(max_bytes={"cpu": "1 KiB", "cuda": "2 GiB"}), "does not hold even the smallest"),
    (lambda d: d["domain"].update(inits={"gaussian": "N > 1"}), "'gaussian' is not an init family"),
    (lambda d: d["domain"].update(where=["M > 1"]), "unknown size 'M'"),
    (lambda d: d["domain"].update(colour="red"), "unknown key 'colour'"),
    (lambda d: d["domain"]["sizes"].update(N={"min": 1, "max": 1000}), "lies outside the domain: N=65536"),
    (lambda d: d["domain"].update(inits={"tiny": "N <= 100"}), "init 'tiny' is not in the domain here"),
])
def test_a_malformed_domain_is_refused_naming_the_field(tmp_path, change, says):
    folder, raw = _copy(tmp_path)
    if says.startswith("missing"):
        raw.pop("domain")
    else:
        change(raw)
    _write(folder, raw)
    with pytest.raises(TaskError) as e:
        load_task(folder)
    assert says in str(e.value), str(e.value)
    if says.startswith("missing"):
        assert "max_bytes" in str(e.value)          # the error shows an example to copy


def test_outside_names_the_budget_that_a_configuration_exceeds():
    task = load_task("layernorm_fwd")
    assert outside(task, {"B": 1, "N": 4096}, {"eps": 1e-5}, "random", "cpu") is None
    assert "over the domain's 32 MiB on cpu" in outside(task, {"B": 4096, "N": 4096}, {"eps": 1e-5}, "random", "cpu")
    assert outside(task, {"B": 4096, "N": 4096}, {"eps": 1e-5}, "random", "cuda") is None
    assert "eps=0.5 is outside" in outside(task, {"B": 1, "N": 8}, {"eps": 0.5}, "random", "cuda")
    assert "only where 13 <= N <= 1048576" in outside(task, {"B": 1, "N": 2 << 20}, {"eps": 1e-5}, "offset", "cuda")
    assert "N == 1 or N >= 4" in outside(task, {"B": 5, "N": 2}, {"eps": 1e-5}, "random", "cpu")
    flops = load_task("mnist_linear_fwd")
    assert "max_flops" in outside(flops, {"B": 1024, "IN": 1024, "OUT": 1024}, {}, "normal", "cpu")
    assert config_bytes(task, {"B": 1, "N": 4}) == 4 * (4 + 4 + 4 + 4) + task.workspace({"B": 1, "N": 4})


def test_byte_sizes_parse_as_written():
    assert parse_bytes("32 MiB", "x") == 32 << 20 and parse_bytes("2GiB", "x") == 2 << 30
    assert parse_bytes(4096, "x") == 4096 and parse_bytes("1.5 KiB", "x") == 1536
    with pytest.raises(TaskError):
        parse_bytes(0, "x")
