"""The clock's contract on the CPU: timed calls are verified, not trusted (issue 9).

Every kernel here passes the three checking calls of `layernorm_one` (one configuration, B=16 × N=65536,
milliseconds per call) and then cheats while timed: works on some calls only, skips after the warm-up,
steers which call is last, memoises by address, hides the work in a thread, scribbles on its input or past
its output. Each must lose — rejected at stage `timing` with a reason that names the call — while honest
kernels (the tests' correct kernels and every CPU seed of every task) are still accepted. Also: timed
inputs are fresh for every call and every judgement, the repetition count does not depend on the kernel,
and the paired comparison tells a slower kernel from an equal one.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from kevolve.judge import build as builder
from kevolve.judge.evaluator import noise, timed
from kevolve.judge.evaluator.harness import compare, evaluate
from kevolve.judge.options import Options
from kevolve.judge.results import Evaluation
from kevolve.judge.worker.session import MAX_ROUNDS, WARMUP_SETS, plan_rounds
from kevolve.task import list_tasks, load_task

HERE = Path(__file__).resolve().parent.parent          # tests/
CPU_KERNELS = HERE / "kernels" / "cpu"
ONE = HERE / "kernels" / "tasks" / "layernorm_one"
# the timing layer alone: the configurations a judgement draws from the domain (a layer of their own,
# tests/adversarial/test_domain_attacks.py) catch some of these kernels first, at correctness
TIMED = Options(target="cpu", shapes="small", baselines=("eager",), reps=5, budget_s=0.02, timeout=60, domain="off")


pytestmark = pytest.mark.usefixtures("private_build_cache")   # tests/conftest.py


@pytest.fixture(scope="module")
def one():
    return load_task(ONE)


def source(name: str) -> str:
    return (CPU_KERNELS / name).read_text()


_judged: dict = {}


def judged(task, name: str, options: Options = TIMED) -> Evaluation:
    key = (task.dir, name, options)
    if key not in _judged:
        src = task.seed_path("cpu").read_text() if name == "seed" else source(name)
        _judged[key] = evaluate(task, src, options)
    return _judged[key]


NAMES_THE_CALL = re.compile(r"\((timed call, (round \d+ of \d+|outside-clock probe without [a-z ]+), call \d+ of \d+|"
                            r"warm-up, call \d+ of \d+)\)")

# (kernel, what the failure says) — every one passes the checking calls and cheats only while timed
CHEATS = [
    ("timing_every_other.cpp", "NaN"),               # (a) works on some calls only
    pytest.param("timing_after_warmup.cpp", "NaN", marks=pytest.mark.slow),  # (a) honest through the warm-up
    pytest.param("timing_steer_last.cpp", "NaN", marks=pytest.mark.slow),    # (c) bets on which call is last
    ("timing_memo_pointer.cpp", "outside tolerance"),  # (b, e) replays answers memoised by buffer address
    ("skip_unless_poisoned.cpp", None),              # computes only when its output is poisoned: now always
]


def test_a_kernel_that_leaves_work_to_a_thread_loses_at_every_layer(one, monkeypatch):
    """(d) `<memory>` brings libstdc++'s `__gthread_create`: the token rules now name it (stage verify). With
    the rules and the symbol layer both off, the clock alone still rejects it, naming the timed call."""
    from kevolve.judge import build as builder
    from kevolve.judge.evaluator import harness
    ev = judged(one, "timing_gthread.cpp")
    assert not ev.correct and ev.stage == "verify" and "thread" in ev.failure, (ev.stage, ev.failure)
    built = builder.build(source("timing_gthread.cpp"), "cpu")
    assert built.ok, built.error
    monkeypatch.setattr(harness.symbols, "check", lambda *a: None)
    ev = harness.judge(one, built.lib_path, TIMED)
    assert not ev.correct and ev.stage == "timing", (ev.stage, ev.failure)
    assert "NaN" in ev.failure and NAMES_THE_CALL.search(ev.failure), ev.failure


@pytest.mark.parametrize("name, says", CHEATS, ids=[(c.values if hasattr(c, "values") else c)[0] for c in CHEATS])
def test_a_kernel_that_cheats_while_timed_is_rejected_naming_the_call(one, name, says):
    honest = judged(one, "seed")
    assert honest.correct, honest.failure
    ev = judged(one, name)
    if says is None:                                  # honest under the new clock: it must compute every call
        assert_computes_every_call(one, ev)
        return
    assert not ev.correct and ev.stage == "timing", (ev.stage, ev.failure)
    assert says in ev.failure and NAMES_THE_CALL.search(ev.failure), ev.failure
    assert ev.speedup is None and ev.fitness == 0.0


@pytest.mark.parametrize("name, says", [("timing_input_scratch.cpp", "input x modified during timing"),
                                        ("timing_overrun.cpp", "wrote outside out (past its end) during timing")])
def test_a_timed_call_that_breaks_the_contract_is_rejected(one, name, says):
    ev = judged(one, name)
    assert not ev.correct and ev.stage == "timing" and says in ev.failure, (ev.stage, ev.failure)


def test_memoising_by_content_gains_nothing(one):
    """Sampled-content memoisation would skip every repeated input; timed inputs never repeat, so it
    computes every call (accepted, honestly timed)."""
    assert_computes_every_call(one, judged(one, "timing_memo_content.cpp"))


def assert_computes_every_call(one, ev: Evaluation) -> None:
    """Accepted with every timed call verified on fresh inputs (so each computed), and not timed like a
    kernel that skips: at least a tenth of a single-threaded kernel doing the work three times (a skipped
    call costs microseconds, this work milliseconds; the margin absorbs a loaded 2-core machine)."""
    assert ev.correct, ev.failure
    m, thrice = ev.measurements[0], judged(one, "timing_thrice.cpp").measurements[0]
    # the warm-up's calls, then every timed one, those that carried the canary (`judge.evaluator.canary`) too
    assert m.checked_calls == WARMUP_SETS + m.kernel.n + m.canary_calls and m.kernel.n + m.canary_calls >= TIMED.reps
    assert m.kernel.median >= 0.1 * thrice.kernel.median, (m.kernel, thrice.kernel)


def test_timed_inputs_are_fresh_for_every_call_and_every_judgement(one):
    """A witness kernel prints x[0] of each call: the timed and warm-up calls (after the 3 checking calls)
    never see the same input twice, and a second judgement sees none of the first's."""
    first = evaluate(one, source("timing_print_inputs.cpp"), TIMED)
    second = evaluate(one, source("timing_print_inputs.cpp"), TIMED)
    assert first.correct and second.correct, (first.failure, second.failure)
    seen = [re.findall(r"x0=(\S+)", ev.log)[3:] for ev in (first, second)]
    m = first.measurements[0]
    assert len(seen[0]) == m.checked_calls == WARMUP_SETS + m.kernel.n + m.canary_calls   # warm-up, then n timed
    assert len(set(seen[0])) == len(seen[0]) and not set(seen[0]) & set(seen[1]), seen


@pytest.mark.parametrize("name", ["good_openmp.cpp", "good_workspace.cpp", "good_printf.cpp", "timing_thrice.cpp"])
def test_honest_kernels_are_accepted_and_every_call_checked(one, name):
    ev = judged(one, name)
    assert ev.correct, ev.failure
    m = ev.measurements[0]
    assert m.kernel.n + m.canary_calls >= TIMED.reps
    assert m.checked_calls == WARMUP_SETS + m.kernel.n + m.canary_calls
    assert m.clock == {"kernel": "wall", "eager": "wall"} and m.latency == {} and not m.launch_bound


# by default three tasks (a further seed, a convolution, a block with a skip argument); every task with `-m slow`
# (the seeds' correctness on every task is in the default run: tests/task/test_seeds.py, in process)
DEFAULT_SEED_TASKS = ("mnist_conv_relu_pool_bwd", "resnet_block_fwd")


@pytest.mark.parametrize("task_name", [n if n in DEFAULT_SEED_TASKS else pytest.param(n, marks=pytest.mark.slow)
                                       for n in list_tasks()])
def test_every_cpu_seed_is_accepted_under_the_clock(task_name):
    task = load_task(task_name)
    if "cpu" not in task.seeds:
        pytest.skip(f"{task_name} has no CPU seed")
    options = Options(target="cpu", shapes="small", baselines=("eager",), reps=3, budget_s=0.01, timeout=120,
                      time_inits="first")
    for path in task.seed_paths("cpu"):
        ev = evaluate(task, path.read_text(), options)
        assert ev.correct, f"{path.name}: {ev.failure}"
        assert all(m.checked_calls > 0 for m in ev.measurements if m.kernel is not None)


def test_repetitions_do_not_depend_on_the_kernel(one):
    """The count is fixed before timing, from reps and the baselines' warm-up: a kernel three times as slow gets
    the same number of timed calls (it cannot end the loop early, nor choose the last call)."""
    fast, slow = judged(one, "seed"), judged(one, "timing_thrice.cpp")
    assert fast.measurements[0].kernel.n == slow.measurements[0].kernel.n == TIMED.reps
    assert slow.measurements[0].kernel.median > 1.3 * fast.measurements[0].kernel.median
    assert plan_rounds(100, 10, True, None, None) == 10 and plan_rounds(100, 10, True, 0.5, 100.0) == 3
    assert plan_rounds(100, 10, False, 0.5, 10.0) == 5 and plan_rounds(5, 5, False, 0.02, 1e3) == 1
    assert plan_rounds(50, 3, True, None, None) == MAX_ROUNDS == 10   # 3 calls per round (memory): 30 calls, not 51
    gib = 1 << 30                                                     # verification: 32 GiB (CUDA), 2 GiB (CPU)
    assert plan_rounds(100, 3, True, None, None, int(3.3 * gib)) == 3   # 3 × 3.3 GiB a round: the least, 3
    assert (plan_rounds(100, 10, True, None, None, int(0.4 * gib)) == 8
            and plan_rounds(100, 10, True, None, None, 1) == 10)
    assert plan_rounds(100, 10, False, None, None, 50 << 20) == 4 and plan_rounds(100, 10, False, None, None, gib) == 1


def test_speedup_carries_a_bootstrap_interval(one):
    ev = judged(one, "seed")
    lo, hi = ev.speedup_ci
    assert lo <= hi and lo > 0
    assert Evaluation.from_json(ev.to_json()) == ev


# ---------------------------------------------------------------------- paired comparison
def _built(src: str) -> str:
    built = builder.build(src, "cpu")
    assert built.ok, built.error
    return built.lib_path


def test_compare_tells_a_slower_kernel_from_an_equal_one(one):
    options = Options(target="cpu", shapes="small", reps=10, timeout=60)
    seed, twice = _built(source("timing_once.cpp")), _built(source("timing_thrice.cpp"))
    slower = compare(one, seed, twice, options)
    assert slower.failure is None, slower.failure
    assert slower.faster == "a" and slower.ratio < 0.7 and slower.ci[1] < 1.0, slower
    same = compare(one, seed, seed, options)
    assert same.failure is None, same.failure
    assert 0.75 < same.ratio < 1.33 and same.ci[0] < 1.2 and same.ci[1] > 0.83, same
    assert same.clock == {same.configs[0]: {"a": "wall", "b": "wall"}}


def test_compare_checks_every_call_of_both_kernels(one):
    options = Options(target="cpu", shapes="small", reps=10, timeout=60)
    c = compare(one, _built(source("timing_once.cpp")), _built(source("timing_every_other.cpp")), options)
    assert c.failure and "kernel b: " in c.failure and NAMES_THE_CALL.search(c.failure), c.failure
    assert c.faster is None and c.ratio is None


# ---------------------------------------------------------------------- pure parts
def test_bootstrap_interval_contains_one_for_equal_samples_and_excludes_it_for_different():
    import random
    rng = random.Random(1)
    a = [1.0 + 0.05 * rng.random() for _ in range(50)]
    b = [1.0 + 0.05 * rng.random() for _ in range(50)]
    lo, hi = noise.ratio_ci([(a, b)])
    assert lo <= 1.0 <= hi
    lo, hi = noise.ratio_ci([(a, [2 * x for x in b])])
    assert hi < 0.6 and noise.geomean_ratio([(a, [2 * x for x in b])]) == pytest.approx(0.5, rel=0.05)


def test_floor_rule():
    assert timed.floor_verdict(0.010, 0.050, "cuda") == "below"
    assert timed.floor_verdict(0.045, 0.050, "cuda") == "near"
    assert timed.floor_verdict(0.060, 0.050, "cuda") is None
    assert timed.floor_verdict(0.001, 0.010, "cuda") is None          # a floor under 20 µs means little
    assert timed.floor_verdict(0.010, 0.050, "cpu") is None           # caches beat DRAM on a CPU


def test_cli_accepts_the_max_autotune_baseline():
    from kevolve.cli.evaluate import UsageError, options_from
    task = load_task("layernorm_fwd")
    o = options_from({"target": "cpu", "baselines": "eager,compile,compile-max-autotune", "calls": "4"}, task)
    assert o.baselines == ("eager", "compile", "compile-max-autotune") and o.calls == 4
    with pytest.raises(UsageError):
        options_from({"target": "cpu", "baselines": "eager,max"}, task)


def test_graph_samples_lose_the_flushes_and_the_sync_cost():
    from kevolve.judge.worker.timing import per_call
    empty = [(1.0, 1.1), (1.0, 1.1), (1.0, 1.1)]                  # 10 flushes: 1 ms; sync: 0.1 ms
    assert per_call([(1.5, 1.6)], empty, 10, graph=True) == [pytest.approx(0.05)]
    assert per_call([(1.5, 2.6)], empty, 10, graph=True) == [pytest.approx(0.15)]   # work after the stream's end
    assert per_call([(1.5, 1.6)], empty, 1, graph=True) == [pytest.approx(0.5)]     # one call per graph
    assert per_call([(0.2, 0.3)], [(0.0, 0.1)]) == [pytest.approx(0.2)]             # queued: nothing to subtract


def test_cli_turns_the_strict_cuda_confinement_off_and_refuses_a_bad_value():
    from kevolve.cli.evaluate import UsageError, main, options_from
    task = load_task("layernorm_fwd")
    assert options_from({"target": "cuda"}, task).strict_cuda is True                    # the default
    assert options_from({"target": "cuda", "strict_cuda": "false"}, task).strict_cuda is False
    with pytest.raises(UsageError, match="strict_cuda=maybe"):
        options_from({"target": "cuda", "strict_cuda": "maybe"}, task)
    from kevolve import ROOT
    kernel = ROOT / "tasks" / "layernorm_fwd" / "best" / "cuda.cu"
    assert kernel.exists()                                  # so exit 2 is the value's, not a missing file's
    assert main(["task=layernorm_fwd", f"kernel={kernel}", "target=cuda", "strict_cuda=maybe"]) == 2
