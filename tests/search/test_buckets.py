"""Contracts of kevolve.search.buckets and the population's bucket champions: every size falls in one bucket, the
fastest kernel per bucket is kept whatever its geomean, and parents are drawn from bucket champions too."""
from __future__ import annotations

import random
from collections import Counter

import pytest

from kevolve.config import PopulationConfig
from kevolve.judge.results import Evaluation, Measurement, Stats
from kevolve.messages import Candidate, Outcome
from kevolve.search import buckets
from kevolve.search.buckets import BucketError, Buckets
from kevolve.search.population import Population
from kevolve.task.load import load_task

SHAPES = {"B=1,N=100": {"B": 1, "N": 100}, "B=4,N=5000": {"B": 4, "N": 5000}, "B=64,N=5000": {"B": 64, "N": 5000}}
EDGES = (("B", (10,)), ("N", (1000,)))


def make_buckets() -> Buckets:
    probe = Buckets(EDGES)
    return Buckets(EDGES, tuple((s, probe.name(z)) for s, z in SHAPES.items()),
                   sizes_of=tuple((s, tuple(z.items())) for s, z in SHAPES.items()))


def evaluation(speedups: dict[str, float]) -> Evaluation:
    """A correct judgement with these speedups over torch per shape (torch takes 1 ms)."""
    ms = tuple(Measurement(f"{s}/random/s0", s, "random", False, True, kernel=Stats(1.0 / x, 0, 0, 1),
                           eager=Stats(1.0, 0, 0, 1)) for s, x in speedups.items())
    return Evaluation("t", "cpu", "c", "small", True, True, measurements=ms)


def test_every_size_falls_in_exactly_one_bucket_named_by_its_intervals():
    b = Buckets((("B", (10, 100)), ("N", (1000,))))
    assert b.name({"B": 9, "N": 999}) == "B<10 N<1000"
    assert b.name({"B": 10, "N": 1000}) == "10<=B<100 N>=1000"
    assert b.name({"B": 100, "N": 10**9}) == "B>=100 N>=1000"
    assert b.index({"B": 99, "N": 5}) == (1, 0)


def test_derived_buckets_are_decades_of_the_judged_sizes():
    task = load_task("layernorm_bwd")
    b = buckets.of(task, "small")
    assert not b.stated
    assert dict(b.edges)["N"] == (10, 100, 1000, 10_000, 100_000)        # N up to 262147
    assert dict(b.edges)["B"] == (10, 100, 1000)                         # B up to 1000
    assert b.of_shape["B=1000,N=33"] == "B>=1000 10<=N<100"
    assert set(b.of_shape) == {c.shape_id for c in task.configs("small")}
    assert len(b.judged()) == len(set(b.of_shape.values()))


def test_a_stated_buckets_field_is_used_and_a_malformed_one_named(tmp_path):
    import shutil
    folder = tmp_path / "task"
    shutil.copytree(load_task("layernorm_fwd").dir, folder)
    text = (folder / "task.yaml").read_text()
    (folder / "task.yaml").write_text(text + "\nbuckets: {N: [1024]}\n")
    b = buckets.of(load_task(folder), "small")
    assert b.stated and dict(b.edges) == {"B": (), "N": (1024,)}
    assert set(b.of_shape.values()) == {"N<1024", "N>=1024"}
    for bad, why in [("{N: [1024, 512]}", "not strictly ascending"), ("{M: [4]}", "not a size"),
                     ("[4, 8]", "not a mapping"), ("{N: [0]}", "positive integers")]:
        (folder / "task.yaml").write_text(text + f"\nbuckets: {bad}\n")
        with pytest.raises(BucketError, match=why) as e:
            buckets.of(load_task(folder), "small")
        assert "task.yaml" in str(e.value)


def test_bucket_fitness_is_the_geomean_over_the_buckets_timed_configurations():
    b = make_buckets()
    got = b.fitness(evaluation({"B=1,N=100": 2.0, "B=4,N=5000": 0.5, "B=64,N=5000": 3.0}))
    assert got == {"B<10 N<1000": pytest.approx(2.0), "B<10 N>=1000": pytest.approx(0.5),
                   "B>=10 N>=1000": pytest.approx(3.0)}
    assert b.fitness(Evaluation("t", "cpu", "c", "small", True, False)) == {}


def population(rate: float = 0.25) -> Population:
    return Population(PopulationConfig(operators={"knob": 1.0}, islands=1, bucket_parents=rate), buckets=make_buckets())


def add(pop: Population, cid: str, speedups: dict[str, float]) -> None:
    ev = evaluation(speedups)
    pop.add(Candidate(id=cid, source=f"int {cid};", operator="seed"), Outcome(ev.fitness, True), ev)


def test_a_kernel_that_wins_one_bucket_is_kept_as_its_champion_whatever_its_geomean():
    pop = population()
    add(pop, "all", {"B=1,N=100": 2.0, "B=4,N=5000": 2.0, "B=64,N=5000": 2.0})
    add(pop, "small", {"B=1,N=100": 3.0, "B=4,N=5000": 0.5, "B=64,N=5000": 0.5})     # geomean 0.91: ranked lower
    champs = {b: m.candidate.id for b, (m, _) in pop.bucket_champions().items()}
    assert pop.best().candidate.id == "all"
    assert champs == {"B<10 N<1000": "small", "B<10 N>=1000": "all", "B>=10 N>=1000": "all"}
    add(pop, "tie", {"B=1,N=100": 3.0, "B=4,N=5000": 0.1, "B=64,N=5000": 0.1})         # equal: the earlier stays
    assert pop.bucket_champions()["B<10 N<1000"][0].candidate.id == "small"


def test_parents_are_drawn_from_bucket_champions_too():
    def picks(rate: float) -> Counter:
        pop = population(rate)
        add(pop, "all", {"B=1,N=100": 2.0, "B=4,N=5000": 2.0, "B=64,N=5000": 2.0})
        add(pop, "small", {"B=1,N=100": 3.0, "B=4,N=5000": 0.5, "B=64,N=5000": 0.5})
        for i in range(20):                                   # members the tournament would rather pick
            add(pop, f"mid{i}", {"B=1,N=100": 1.5, "B=4,N=5000": 1.5, "B=64,N=5000": 1.5})
        rng = random.Random(0)
        return Counter(pop.select_parent(0, rng).id for _ in range(400))
    assert picks(0.5)["small"] > 60                           # half the draws, split between two champions: ~100
    assert picks(0.0)["small"] < 30                           # the tournament alone (its usage penalty: a few)


def test_restore_keeps_the_bucket_champions():
    pop = population()
    records = []
    for cid, sp in [("all", {"B=1,N=100": 2.0, "B=4,N=5000": 2.0, "B=64,N=5000": 2.0}),
                    ("small", {"B=1,N=100": 3.0, "B=4,N=5000": 0.5, "B=64,N=5000": 0.5})]:
        ev = evaluation(sp)
        c = Candidate(id=cid, source=f"int {cid};", operator="seed")
        records.append((c, Outcome(ev.fitness, True), ev))
        pop.add(*records[-1])
    again = Population.restore(pop.config, records, buckets=make_buckets())
    assert {b: m.candidate.id for b, (m, _) in again.bucket_champions().items()} == \
        {b: m.candidate.id for b, (m, _) in pop.bucket_champions().items()}


# ---------------------------------------------------------------- a champion per bucket (paired evidence)
def test_each_bucket_has_its_champion_replaced_only_on_paired_evidence_and_challenges_go_in_turn():
    from kevolve.judge.results import Comparison
    from kevolve.search.champion import Entry, PerBucket

    def entry(cid: str, score: float) -> Entry:
        return Entry(Candidate(id=cid, source=cid), evaluation({"B=1,N=100": 1.0}), score=score)

    def faster(yes: bool) -> Comparison:
        ci = (0.8, 0.9) if yes else (0.95, 1.05)
        return Comparison("t", "cpu", "small", ratio=sum(ci) / 2, ci=ci, indistinguishable=not yes)

    per = PerBucket()
    assert per.offer("small", entry("a", 1.0)) and per.offer("large", entry("a", 2.0))   # the first: crowned
    assert not per.offer("small", entry("b", 1.5))          # beats a on small sizes: a challenger there
    assert not per.offer("large", entry("b", 1.5))          # slower on large ones: never challenges
    assert not per.offer("small", entry("c", 1.2)) and not per.offer("large", entry("c", 2.5))
    assert {k: e.candidate.id for k, e in per.fastest.items()} == {"small": "b", "large": "c"}   # compared or not
    first = per.next_challenge()
    assert first is not None and per.pending() == first[0] and per.next_challenge() is None   # one at a time
    per.champions[first[0]].settle(faster(True))
    second = per.next_challenge()
    assert second is not None and second[0] != first[0]      # the other bucket's turn
    per.champions[second[0]].settle(faster(False))           # a tie: kept
    current = {b: e.candidate.id for b, e in per.current().items()}
    assert current[first[0]] == first[1].candidate.id and current[second[0]] == "a"
    assert current == {"small": "b", "large": "a"} or current == {"small": "a", "large": "c"}


# ---------------------------------------------------------------- end to end: a search's buckets and its op
@pytest.mark.slow
def test_a_search_keeps_bucket_champions_and_hands_back_an_op_judged_as_a_whole(tmp_path, monkeypatch):
    """A CPU search of tests/search_task (two buckets: rows under and over 1000): each bucket's champion is recorded,
    and the run's result is an op whose library is the source it wrote, judged correct, decided per bucket."""
    import json
    import logging
    from pathlib import Path

    import ray

    from kevolve.config import from_hydra
    from kevolve.record.store import Store
    from kevolve.search import run as search
    task = Path(__file__).resolve().parents[1] / "search_task"
    monkeypatch.setenv("KEVOLVE_CACHE", str(tmp_path / "cache"))
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING,
                 object_store_memory=200 << 20)
    try:
        cfg = from_hydra({"task": {"name": str(task)}, "progress": False, "resources": {"target": "cpu"},
                          "search": {"reps": 5, "budget_s": 0.02, "baselines": ["eager"], "timeout_s": 60,
                                     "candidates": 5, "population": {"islands": 1}}})
        summary = search(cfg, tmp_path / "run")
    finally:
        if started:
            ray.shutdown()
    op = summary.op
    assert op is not None and op.correct, op
    assert {r.bucket for r in op.routes} == {"100<=N<1000", "N>=1000"}
    assert all((r.kernel is None) == r.why.startswith("torch") for r in op.routes)
    with Store.open(tmp_path / "run", readonly=True) as store:
        crowned = {p["bucket"] for _, _, p in store.events("bucket_champion")}
        record = [p for _, _, p in store.events("assembled")][-1]
    assert crowned == {"100<=N<1000", "N>=1000"}
    assert record["source_text"] == (tmp_path / "run" / "op.cpp").read_text()
    assert json.loads((tmp_path / "run" / "op.json").read_text())["op"]["correct"]
    assert json.loads(record["evaluation"])["correct"]


def test_a_buckets_comparison_times_that_buckets_configurations_alone():
    from pathlib import Path

    from kevolve.judge import build
    from kevolve.judge.evaluator.harness import compare
    from kevolve.judge.options import Options
    task = load_task(Path(__file__).resolve().parents[1] / "search_task")
    lib = build.build((task.dir / "seeds" / "cpu.cpp").read_text(), "cpu", "c").lib_path
    options = Options(target="cpu", shapes="small", baselines=("eager",), reps=5, budget_s=0.02)
    got = compare(task, lib, lib, options, only=("B=4,N=256",))
    assert got.failure is None and got.configs == ("B=4,N=256/random/s0",), got
    nothing = compare(task, lib, lib, options, only=("B=9,N=9",))
    assert nothing.failure and "no configuration" in nothing.failure


def test_every_judgement_counts_toward_the_time_comparisons_may_take_a_share_of():
    """The comparisons' share (`search.compare_share`) is of the evaluators' judging time: a search whose contest
    never counted it made one comparison and no more (compare_s > share × (compare_s + 0))."""
    from kevolve.config import from_hydra
    from kevolve.search.champion import Champion
    from kevolve.search.contest import Contest
    from kevolve.search.jobs import Built, Judging, Tally
    from kevolve.search.plan import resolve
    task = load_task("layernorm_bwd")
    plan = resolve(from_hydra({"task": {"name": "layernorm_bwd"}, "resources": {"target": "cpu"}}), task, {"CPU": 2})
    champion = Champion(share=0.25)
    champion.spent(comparing=40.0)
    assert not champion.within_share()
    contest = Contest(plan, None, None, None, champion, Tally(), lambda c, e: None)
    failed = Evaluation("layernorm_bwd", "cpu", "c", "small", True, False, "wrong", eval_seconds=30.0)
    for _ in range(5):
        contest.judged(Judging(Built(Candidate(id="x", source=""), None, None), 0), failed)
    assert champion.judge_s == 150.0 and champion.within_share()        # 40 <= 0.25 * 190
