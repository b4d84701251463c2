"""Contracts of kevolve.search.assemble: one source holds every chosen kernel (names and macros apart), its dispatch
sends each bucket's sizes to that bucket's kernel — proven by the harness, which rejects a wrong kernel exactly
where it is dispatched — and a bucket runs its kernel only when confirmed faster than torch on every size."""
from __future__ import annotations

from pathlib import Path

import pytest

from kevolve.judge.evaluator.harness import evaluate
from kevolve.judge.options import Options
from kevolve.judge.results import Evaluation, Measurement, Stats
from kevolve.judge.static import rules
from kevolve.messages import Candidate
from kevolve.search import assemble, buckets
from kevolve.task.load import load_task

TASK = Path(__file__).resolve().parents[1] / "search_task"
SEED = (TASK / "seeds" / "cpu.cpp").read_text()
# right on rows of fewer than 1000 elements only: zeros beyond (a wrong kernel the dispatch must keep away from them)
SHORT_ONLY = SEED.replace("    const int64_t blocks", "    if (N >= 1000) { for (int64_t i = 0; i < B * N; ++i) "
                                                    "out[i] = 0.f; return 0; }\n    const int64_t blocks")


def kernel(cid: str, source: str) -> Candidate:
    return Candidate(id=cid, source=source, operator="knob")


def test_a_kernel_in_a_namespace_keeps_its_includes_on_top_and_its_macros_inside():
    text = ('#include <cmath>\n#ifdef __CUDACC__\n#include <cuda_fp16.h>\n#endif\n#define ROWS 4\n'
            'extern "C" { static int helper() { return ROWS; } }\nextern "C" int forward(int x) { return x; }\n')
    includes, body = assemble.namespaced(text, "kevolve_k3")
    assert includes == ["#include <cmath>"]                        # a conditional include stays where it is,
    assert "#ifdef __CUDACC__\n}  // namespace kevolve_k3\n#include <cuda_fp16.h>\nnamespace kevolve_k3 {\n#endif" \
        in body and 'extern "C"' not in body                       # outside the namespace in either branch
    assert body.startswith("namespace kevolve_k3 {") and body.rstrip().endswith("#undef ROWS")
    assert "inline namespace kevolve_c {" in body


def test_two_variants_of_one_kernel_with_the_same_names_build_as_one_library():
    from kevolve.judge import build
    task = load_task(TASK)
    b = buckets.of(task, "small")
    variant = SEED.replace("constexpr int CHUNK = 4;", "constexpr int CHUNK = 8;")
    variant = variant.replace("#include <cmath>", "#include <cmath>\n#define X 1")
    choice = assemble.choose(b, {b.judged()[1]: [(kernel("v", variant), 1.0)]}, kernel("s", SEED))
    text = assemble.source(task, "cpu", b, choice)
    assert text.count('extern "C" int forward(') == 1 and "kevolve_k1::forward" in text
    assert rules.check(text, "cpu").ok
    assert build.build(text, "cpu", "c").ok


def test_the_harness_proves_the_dispatch_a_wrong_kernel_fails_exactly_where_it_is_sent():
    task = load_task(TASK)
    b = buckets.of(task, "small")
    short, long_ = b.judged()                                      # N<1000 and N>=1000
    options = Options(target="cpu", shapes="small", time_kernel=False, reps=5)

    def judged(routes: dict[str, Candidate]) -> Evaluation:
        choice = assemble.choose(b, {k: [(c, 1.0)] for k, c in routes.items()}, kernel("seed", SEED))
        return evaluate(task, assemble.source(task, "cpu", b, choice), options)
    assert judged({short: kernel("short", SHORT_ONLY)}).correct            # short rows only: right there
    wrong = judged({long_: kernel("short", SHORT_ONLY)})                   # sent the long rows: caught there
    assert not wrong.correct and "N=1001" in wrong.failure


def judgement(speedups: dict[str, tuple[float, float, float]]) -> Evaluation:
    """A correct op judgement: per shape, (speedup, interval low, interval high) over torch (1 ms)."""
    ms = tuple(Measurement(f"{s}/random/s0", s, "random", False, True, kernel=Stats(1.0 / x, 0, 0, 1),
                           eager=Stats(1.0, 0, 0, 1), speedup_ci=(lo, hi)) for s, (x, lo, hi) in speedups.items())
    return Evaluation("t", "cpu", "c", "small", True, True, measurements=ms)


@pytest.mark.parametrize("numbers, runs", [
    ({"B=1,N=100": (1.5, 1.2, 1.8)}, "kernel"),                   # confirmed faster
    ({"B=1,N=100": (1.5, 0.9, 2.1)}, "torch"),                    # the interval holds 1
    ({"B=1,N=100": (0.9, 0.8, 0.95)}, "torch"),                   # slower
])
def test_a_bucket_runs_its_kernel_only_when_confirmed_faster(numbers, runs):
    b = Buckets_of({"B=1,N=100": {"B": 1, "N": 100}})
    routes = assemble.decide(b, assemble.choose(b, {}, kernel("k", "")), judgement(numbers))
    assert (routes[0].kernel is not None) == (runs == "kernel")


def test_one_size_under_the_floor_sends_its_whole_bucket_to_torch_and_the_op_is_never_under_it():
    shapes = {"B=1,N=100": {"B": 1, "N": 100}, "B=2,N=200": {"B": 2, "N": 200}, "B=1,N=5000": {"B": 1, "N": 5000}}
    b = Buckets_of(shapes)
    ev = judgement({"B=1,N=100": (3.0, 2.5, 3.5), "B=2,N=200": (0.95, 0.9, 1.0), "B=1,N=5000": (2.0, 1.5, 2.5)})
    routes = {r.bucket: r for r in assemble.decide(b, assemble.choose(b, {}, kernel("k", "")), ev)}
    small, large = routes["N<1000"], routes["N>=1000"]
    assert small.kernel is None and "0.95x" in small.why and small.ci[0] > 1      # fast on the geomean, yet torch
    assert large.kernel == "k"
    assert assemble.op_speedup(b, tuple(routes.values()), ev) == pytest.approx((1.0 * 1.0 * 2.0) ** (1 / 3))


def Buckets_of(shapes: dict[str, dict[str, int]]) -> buckets.Buckets:
    edges = (("B", ()), ("N", (1000,)))
    probe = buckets.Buckets(edges)
    return buckets.Buckets(edges, tuple((s, probe.name(z)) for s, z in shapes.items()),
                           sizes_of=tuple((s, tuple(z.items())) for s, z in shapes.items()))


@pytest.mark.slow
@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_every_tasks_seeds_assemble_into_one_library_that_builds(target):
    """Each task's seeds for `target`, one per bucket in turn, in one op source: the static rules pass and g++ or
    nvcc (sm_90a; it builds here without a GPU) builds it — namespaces, includes under conditionals, macros."""
    import shutil
    from kevolve.config.tasks import list_tasks
    from kevolve.judge import build
    if target == "cuda" and shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    failed = []
    for name in list_tasks():
        task = load_task(name)
        if target not in task.seeds or len(task.seeds[target]) < 2:
            continue
        shapes = "bench" if target == "cuda" else "small"
        b = buckets.of(task, shapes)
        seeds = [Candidate(id=f"k{i}", source=p.read_text(), operator="seed")
                 for i, p in enumerate(task.seed_paths(target))]
        choice = assemble.choose(b, {bk: [(seeds[i % len(seeds)], 1.0)] for i, bk in enumerate(b.judged())}, seeds[0])
        text = assemble.source(task, target, b, choice)
        verdict = rules.check(text, target)
        built = build.build(text, target, "c", arch="90a" if target == "cuda" else None) if verdict.ok else None
        if not verdict.ok or not built.ok:
            failed.append(f"{name}: {verdict.reason if not verdict.ok else built.error[:500]}")
    assert not failed, "\n".join(failed)


def test_a_buckets_interval_narrows_with_its_configurations_as_a_joint_bootstrap_would():
    one = assemble.bucket_interval([1.2], [(1.0, 1.4)])
    assert one == (1.0, 1.4)                                       # a single configuration: its own interval
    four = assemble.bucket_interval([1.2] * 4, [(1.0, 1.44)] * 4)
    assert 1.0 < four[0] < 1.2 < four[1] < 1.44                    # independent noise: half the log-width
    import math
    assert math.log(four[1] / four[0]) == pytest.approx(math.log(1.44 / 1.0) / 2, rel=1e-6)
    assert assemble.bucket_interval([1.2, 1.3], [(1.0, 1.4), None]) is None


def test_each_bucket_takes_the_fastest_of_its_options_the_first_among_equals():
    b = Buckets_of({"B=1,N=100": {"B": 1, "N": 100}, "B=1,N=5000": {"B": 1, "N": 5000}})
    best, champ, quick = kernel("best", "a"), kernel("champ", "b"), kernel("quick", "c")
    choice = assemble.choose(b, {"N<1000": [(champ, 1.2), (quick, 1.5), (best, 1.1)],
                                 "N>=1000": [(champ, 1.3), (best, 1.3)]}, best)
    assert choice.kernel_of("N<1000").id == "quick" and choice.kernel_of("N>=1000").id == "champ"
    assert choice.kernels[0].id == "best" and choice.kernel_of("no such bucket").id == "best"
