"""Task filters (`kevolve.task.filters`) and the tasks CLI: planted degenerate tasks (tiny folders written here)
fail exactly the filter that names their flaw and pass the others; every shipped task passes every filter on its
`small` set; the harness's comparison is what the filters use; `python -m kevolve.tasks` lists and checks.
"""
from __future__ import annotations

import pytest
import torch

from kevolve.task import filters
from kevolve.cli.tasks import main
from kevolve.config.tasks import list_tasks
from kevolve.task.load import load_task

CHEAP = tuple(f for f in filters.FILTERS if f != "compile")

TASK_YAML = """name: {name}
direction: forward
sizes: [B, N]
inputs:
  - {{name: x, shape: [B, N], init: {x_init}}}
  - {{name: y, shape: [N], init: {y_init}}}
outputs:
  - {{name: out, shape: [B, N]}}
inits: {inits}
floor_bytes: "4 * (2 * B * N + N)"
tolerance: {{atol: 1.0e-5, rtol: 1.0e-5}}
{extra}
domain: {{sizes: {{B: {{min: 1, max: 8}}, N: {{min: 1, max: 64}}}}, max_bytes: {{cpu: 1 MiB, cuda: 1 MiB}}}}
shapes:
  small:
    configs: [{{B: 4, N: 33}}]
    heldout: [{{B: 3, N: 17}}]
"""

REFERENCE_PY = """import torch


def reference(x, y, *, B, N):
    return {expr}


def baseline(x, y, *, B, N):
    return {baseline}
"""

HONEST = "x * y + x"
# name -> (reference, task.yaml fields, the filters it must fail)
PLANTED = {
    "honest": (HONEST, {}, set()),
    "constant": ("torch.ones_like(x)", {}, {"output_std", "output_axes", "input_impact"}),
    "tiny": ("(x * y + x) * 1e-9", {}, {"output_std", "output_range", "output_axes", "input_impact"}),
    "ignores_y": ("x * 2", {}, {"input_impact"}),
    "ignores_y_declared": ("x * 2", {"extra": 'unused_inputs: {y: "planted"}'}, set()),
    "constant_y": (HONEST, {"y_init": "ones"}, {"input_impact"}),
    "same_along_rows": ("(x.sum(0, keepdim=True) * y).expand(B, N)", {}, {"output_axes"}),
    "identical_inits": (HONEST, {"inits": "[a, b]", "x_init": "{a: normal, b: normal}"}, {"init_impact"}),
    "two_of_three_inits_alike": (HONEST, {"inits": "[a, b, c]", "x_init": '{a: normal, b: normal, c: "normal(0, 3)"}'},
                                 set()),
    "distinct_inits": (HONEST, {"inits": "[a, b]", "x_init": '{a: normal, b: "normal(2, 1)"}'}, set()),
    "eager_off": (HONEST, {"baseline": "(x * y + x) * (1 + 1e-3)"}, {"eager"}),
}


def planted(tmp_path, name: str, expr: str = HONEST, x_init: str = "normal", y_init: str = "normal",
            inits: str = "[random]", extra: str = "", baseline: str | None = None):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "task.yaml").write_text(TASK_YAML.format(name=name, x_init=x_init, y_init=y_init, inits=inits,
                                                       extra=extra))
    (folder / "reference.py").write_text(REFERENCE_PY.format(expr=expr, baseline=baseline or expr))
    return load_task(folder)


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def failed(results) -> set[str]:
    return {r.name for r in results if not r.passed}


# ---------------------------------------------------------------- planted flaws
@pytest.mark.parametrize("name", sorted(PLANTED))
def test_a_planted_flaw_fails_exactly_its_filters(tmp_path, name):
    expr, fields, expected = PLANTED[name]
    results = filters.run(planted(tmp_path, name, expr, **fields), "small", "cpu", CHEAP)
    assert [r.name for r in results] == list(CHEAP)
    assert failed(results) == expected, [r for r in results if not r.passed]
    for r in results:
        assert isinstance(r, filters.FilterResult) and r.detail


def test_details_name_the_flaw(tmp_path):
    by_name = {r.name: r for r in filters.run(planted(tmp_path, "ignores", "x * 2"), "small", "cpu", CHEAP)}
    assert "input y" in by_name["input_impact"].detail and "B=4,N=33" in by_name["input_impact"].detail
    rows = {r.name: r for r in filters.run(planted(tmp_path, "rows", PLANTED["same_along_rows"][0]), "small", "cpu",
                                           ("output_axes",))}
    assert "axis 0" in rows["output_axes"].detail and "axis 1" not in rows["output_axes"].detail
    alike = filters.run(planted(tmp_path, "alike", HONEST, **PLANTED["two_of_three_inits_alike"][1]), "small", "cpu",
                        ("init_impact",))[0]
    assert alike.passed and "a=b" in alike.detail
    declared = filters.run(planted(tmp_path, "declared", "x * 2", extra='unused_inputs: {y: "planted"}'), "small",
                           "cpu", ("input_impact",))[0]
    assert "y accepted as unused: planted" in declared.detail


def test_an_unused_input_declaration_must_name_an_input(tmp_path):
    with pytest.raises(ValueError, match="not inputs"):
        filters.run(planted(tmp_path, "typo", "x * 2", extra='unused_inputs: {z: "typo"}'), "small", "cpu",
                    ("input_impact",))


def test_compile_filter_catches_a_baseline_that_differs_when_compiled(tmp_path):
    sly = "x * y + x + (1.0 if torch.compiler.is_compiling() else 0.0)"
    results = filters.run(planted(tmp_path, "sly", baseline=sly), "small", "cpu", ("eager", "compile"), max_shapes=1)
    assert failed(results) == {"compile"}
    assert "compile's result is" in results[1].detail
    assert not failed(filters.run(planted(tmp_path, "plain"), "small", "cpu", ("compile",), max_shapes=1))


def test_torch_runs_in_ieee_float32_as_in_the_worker_and_the_callers_settings_come_back(tmp_path):
    """The judge's worker computes its baselines with TF32 off (cuDNN allows it by default); the filters must
    compute the same numbers, inside a process whose own settings they leave as they were."""
    from kevolve.task import precision
    strict = ("torch.backends.cudnn.allow_tf32 is False and torch.backends.cuda.matmul.allow_tf32 is False "
              "and torch.get_float32_matmul_precision() == 'highest'")
    task = planted(tmp_path, "strict", baseline=f"(x * y + x) * (1.0 if {strict} else 1.01)")
    before = precision.settings()
    torch.backends.cudnn.allow_tf32 = True
    torch.set_float32_matmul_precision("high")                     # TF32 allowed for matmuls too
    try:
        tf32 = precision.settings()
        assert tf32[:2] == (True, True)
        assert not failed(filters.run(task, "small", "cpu", ("eager",)))
        assert precision.settings() == tf32
        with pytest.raises(ValueError, match="unknown filters"):
            filters.run(task, "small", "cpu", ("nope",))
        precision.set_strict_float32()                             # what the worker runs before its baselines
        assert precision.settings() == (False, False, "highest")
    finally:
        torch.set_float32_matmul_precision(before[2])
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before[:2]


def test_a_run_holds_one_configuration_at_a_time_and_nothing_after(tmp_path, monkeypatch):
    """The GPU run of every task on `bench` must fit beside other processes: while a configuration is drawn, no
    input of another configuration and no tensor of another shape is alive, and once the run returns, none."""
    import dataclasses
    import gc
    import weakref
    from kevolve.task.spec import Task
    alive: list[tuple[tuple, str, str, weakref.ref]] = []          # (shape, configuration, kind, tensor)

    def live(keep):
        gc.collect()
        return [(s, c, k) for s, c, k, r in alive if r() is not None and keep(s, c, k)]

    draw = Task.make_inputs

    def make_inputs(self, case, device, variant=0):
        stale = live(lambda s, c, k: s != case.sizes or (k == "input" and c != case.id))
        assert not stale, f"drawing {case.id}, still alive: {stale}"
        out = draw(self, case, device, variant)
        alive.extend((case.sizes, case.id, "input", weakref.ref(t)) for t in out.values())
        return out
    monkeypatch.setattr(Task, "make_inputs", make_inputs)
    task = planted(tmp_path, "held", inits="[a, b]", x_init='{a: normal, b: "normal(2, 1)"}')
    reference = task.reference

    def recorded(x, y, *, B, N):
        out = reference(x, y, B=B, N=N)
        shape = next(c.sizes for c in task.configs("small") if c.size_dict == {"B": B, "N": N})
        alive.append((shape, "", "output", weakref.ref(out)))
        return out
    results = filters.run(dataclasses.replace(task, reference=recorded), "small", "cpu", CHEAP)
    assert not failed(results), results
    assert {s for s, _, _, _ in alive} == {c.sizes for c in task.configs("small")} and len(alive) > 20
    assert not live(lambda s, c, k: True)


def test_bad_arguments_say_what_to_do(tmp_path):
    t = planted(tmp_path, "args")
    with pytest.raises(ValueError, match="unknown filters"):
        filters.run(t, "small", "cpu", ("output_std", "nope"))
    with pytest.raises(ValueError, match="at least 2"):
        filters.run(t, "small", "cpu", ("output_std",), variants=1)


# ---------------------------------------------------------------- the comparison
def test_ratio_is_the_harness_comparison():
    from types import SimpleNamespace
    t = SimpleNamespace(atol=1e-3, rtol=1e-2)
    ref = torch.tensor([1.0, -2.0, float("inf"), 0.0], dtype=torch.float64)
    assert filters.ratio(ref.clone(), ref, t) == 0
    assert filters.ratio(torch.tensor([1.011, -2.0, 5.0, 0.0]), ref, t) == pytest.approx(0.011 / 0.011, rel=1e-3)
    assert filters.ratio(torch.tensor([1.0, float("nan"), 0.0, 0.0]), ref, t) == float("inf")
    ints = torch.tensor([1, 2, 3])
    assert filters.ratio(ints.clone(), ints, t) == 0 and filters.ratio(ints + 1, ints, t) == float("inf")


# ---------------------------------------------------------------- every shipped task
@pytest.mark.parametrize("name", list_tasks())
def test_shipped_task_passes_the_filters_on_its_cheapest_small_shapes(name):
    results = filters.run(load_task(name), "small", "cpu", CHEAP, max_shapes=3)
    assert not failed(results), [r for r in results if not r.passed]


@pytest.mark.slow
@pytest.mark.parametrize("name", list_tasks())
def test_shipped_task_passes_the_filters_on_the_whole_small_set(name):
    """torch.compile over every shipped shape takes minutes on a CPU: `python -m kevolve.tasks check` runs it."""
    results = filters.run(load_task(name), "small", "cpu", CHEAP)
    assert not failed(results), [r for r in results if not r.passed]


@pytest.mark.gpu
@pytest.mark.parametrize("name", list_tasks())
def test_shipped_task_passes_every_filter_on_the_bench_set_on_a_gpu(name):
    torch.set_num_threads(4)
    results = filters.run(load_task(name), "bench", "cuda")
    assert not failed(results), [r for r in results if not r.passed]


# ---------------------------------------------------------------- the CLI
def test_cli_check_prints_the_table_and_fails_on_a_flaw(tmp_path, capsys):
    honest, flawed = planted(tmp_path, "honest"), planted(tmp_path, "flawed", "torch.ones_like(x)")
    assert main(["check", "--filters", "output_std,eager", str(honest.dir)]) == 0
    assert main(["check", "--filters", "output_std,eager", str(honest.dir), str(flawed.dir)]) == 1
    out = capsys.readouterr().out
    assert "flawed" in out and "FAIL" in out and "flawed output_std: FAIL: out at" in out
    assert main(["check", "--filters", "output_std,nope", str(honest.dir)]) == 2
    assert main(["check", "no_such_task"]) == 2


def test_cli_list_shows_every_task_with_sets_floors_and_seeds(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in list_tasks():
        t = load_task(name)
        line = next(line for line in out.splitlines() if line.startswith(name + " "))
        assert t.direction in line and ",".join(t.sizes) in line
        n = len(t.configs("small"))
        assert f"= {n}" in line
        for key, seeds in t.seeds.items():
            assert f"{key} {len(seeds)}" in line


def test_an_input_accepted_as_unused_only_where_its_condition_holds(tmp_path):
    """resnet_block_fwd's projection is unused on identity-shortcut shapes only: on the others a kernel that
    ignored it would be caught, so dropping the condition there is what input_impact must flag."""
    import shutil
    import yaml
    from kevolve.task.unused import unused_inputs
    t = load_task("resnet_block_fwd")
    assert unused_inputs(t)["downsample_weight"].holds({"C": 16, "K": 16, "STRIDE": 1})
    assert not unused_inputs(t)["downsample_weight"].holds({"C": 16, "K": 32, "STRIDE": 1})
    folder = tmp_path / t.name
    shutil.copytree(t.dir, folder)
    raw = yaml.safe_load((folder / "task.yaml").read_text())
    raw["unused_inputs"]["downsample_weight"]["when"] = "C == K and STRIDE == 2"     # wrong: flags identity shapes
    (folder / "task.yaml").write_text(yaml.safe_dump(raw))
    wrong = load_task(folder)
    result = filters.run(wrong, "small", "cpu", ("input_impact",))[0]
    assert not result.passed and "downsample_weight" in result.detail
    raw["unused_inputs"]["downsample_weight"]["when"] = "C === K"
    (folder / "task.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(ValueError, match="unused_inputs.downsample_weight: condition 'C === K' does not parse"):
        unused_inputs(load_task(folder))
