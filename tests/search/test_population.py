"""Contracts of kevolve.search.population: duplicates, selection, proposals, archive, migration, restoration."""
from __future__ import annotations

import random
from collections import Counter

import pytest

from kevolve.config import PopulationConfig
from kevolve.messages import Candidate, Outcome, Proposal
from kevolve.record.dedupe import normalize_source, source_hash
from kevolve.search.population import Population

KERNEL = """\
#include <cstdint>
#define ROWS 4
constexpr int THREADS = 256;  // knob: 128, 256
__global__ void scale(const float* x, float* y, int64_t n) {
    int64_t i = blockIdx.x * THREADS + threadIdx.x;   // one element per thread
    if (i < n) y[i] = x[i] * 2.0f;
}
"""

SAME = [  # KERNEL, rewritten with other comments and whitespace only
    KERNEL.replace("// one element per thread", "/* one\n element per thread */"),
    KERNEL.replace("    ", "\t").replace(" = ", "="),
    "// a header comment\n" + KERNEL + "\n\n// trailing\n",
    KERNEL.replace("\n", "\r\n"),
    KERNEL.replace("if (i < n) ", "if(i<n)\n        "),
    KERNEL.replace("// knob: 128, 256", "// knob: 64, 128, 256, 512"),
    KERNEL.replace("#define ROWS 4", "#  define   ROWS   4   /* rows */"),
]

DIFFERENT = [  # KERNEL with one token of code changed
    KERNEL.replace("2.0f", "3.0f"),
    KERNEL.replace("i < n", "i <= n"),
    KERNEL.replace("THREADS = 256", "THREADS = 128"),
    KERNEL.replace("#define ROWS 4", "#define ROWS 8"),
    KERNEL.replace("x[i] * 2.0f", "x[i] * 2.0f * x[i]"),
]


def cand(cid: str, island: int = 0, parents: tuple[str, ...] = (), operator: str = "optimize", source=None):
    return Candidate(id=cid, source=source or f"int {cid};", parents=parents, island=island, operator=operator)


def ok(fitness: float) -> Outcome:
    return Outcome(fitness, True)


FAILED = Outcome(0.0, False, compiled=False, feedback="error: expected ';'")


def knob_only(**fields) -> PopulationConfig:
    """A population config with its weights resolved, as the plan hands it over (knob mutation alone)."""
    return PopulationConfig(operators={"knob": 1.0}, **fields)


# ---------------------------------------------------------------- duplicates
@pytest.mark.parametrize("variant", SAME)
def test_comments_and_whitespace_do_not_make_a_new_source(variant):
    assert source_hash(variant) == source_hash(KERNEL)


@pytest.mark.parametrize("variant", DIFFERENT)
def test_one_token_of_code_makes_a_new_source(variant):
    assert source_hash(variant) != source_hash(KERNEL)


@pytest.mark.parametrize("a, b", [
    ('const char* s = "a  b";', 'const char* s = "a b";'),             # spaces inside a string are code
    ('const char* s = "// no comment";', 'const char* s = "";'),        # so is a // inside a string
    ("y = a - -b;", "y = a--b;"),                                        # whitespace that separates tokens
    ("y = a + +b;", "y = a++b;"),
    ("#define F (x) x", "#define F(x) x"),                               # object-like vs function-like macro
    ("#define A 1\nint b;", "#define A 1 int b;"),                       # a newline ends a directive
    ("int d = 1'000;", "int d = 1000;"),                                 # digit separators are no quotes
])
def test_meaningful_differences_survive_normalisation(a, b):
    assert normalize_source(a) != normalize_source(b)


def test_a_multi_line_comment_inside_a_directive_continues_it():
    assert normalize_source("#define A 1 /* x\n y */ + 2") == normalize_source("#define A 1 + 2")


def test_seen_covers_scored_and_in_flight_sources():
    pop = Population()
    assert pop.reserve(KERNEL) and pop.seen(SAME[0])
    assert not pop.reserve(SAME[1])                  # a duplicate in flight is refused
    pop.release(KERNEL)
    assert not pop.seen(KERNEL)
    pop.add(cand("a", source=KERNEL), ok(1.0))
    assert pop.seen(SAME[2]) and not pop.seen(DIFFERENT[0])


# ---------------------------------------------------------------- messages and configuration
def test_candidate_round_trips_through_json_dicts():
    c = Candidate(id="k1", source=KERNEL, parents=("p", "q"), island=1, generation=3, operator="knob",
                  model=None, created=12.5, meta={"changes": {"THREADS": ["256", "512"]}, "n": 1})
    assert Candidate.from_dict(c.to_dict()) == c
    assert c.meta_dict()["n"] == 1


def test_candidate_meta_must_be_json():
    with pytest.raises(ValueError, match="JSON"):
        Candidate(id="x", source="", meta={"f": object()})


def test_an_incorrect_outcome_has_no_fitness():
    assert Outcome(3.0, False).fitness == 0.0
    assert Outcome(float("nan"), True).fitness == 0.0


@pytest.mark.parametrize("field, value", [("islands", 0), ("archive_size", 0), ("per_family", -1),
                                          ("migration_interval", 0), ("tournament", 1.5),
                                          ("usage_penalty", -0.1), ("inspirations", 0),
                                          ("inspiration_rate", 1.5), ("operators", {"knob": 0.0}),
                                          ("operators", {"telepathy": 1.0})])
def test_config_validation_names_the_field(field, value):
    with pytest.raises(ValueError, match=f"search.population.{field}"):
        PopulationConfig(**{field: value})


def test_adding_twice_or_to_a_missing_island_fails():
    pop = Population(knob_only(islands=2))
    pop.add(cand("a"), ok(1.0))
    with pytest.raises(ValueError, match="already"):
        pop.add(cand("a"), ok(1.0))
    with pytest.raises(ValueError, match="island 2"):
        pop.add(cand("b", island=2), ok(1.0))


# ---------------------------------------------------------------- proposals
def test_propose_waits_for_a_member_then_names_island_parent_operator():
    pop = Population(PopulationConfig(islands=2, operators={"knob": 1.0, "optimize": 3.0}, inspiration_rate=1.0,
                                      inspirations=2))
    assert pop.propose(random.Random(0)) is None               # nothing to be a parent yet
    for i, f in enumerate([1.0, 2.0, 3.0]):
        pop.add(cand(f"c{i}", island=i % 2), ok(f))
    rng = random.Random(1)
    proposals = [pop.propose(rng) for _ in range(200)]
    assert all(isinstance(p, Proposal) and p.island in (0, 1) for p in proposals)
    ops = Counter(p.operator for p in proposals)
    assert set(ops) == {"knob", "optimize"} and ops["optimize"] > 2 * ops["knob"]     # by weight
    assert all(p.parent.id not in {c.id for c in p.inspirations} for p in proposals)
    assert all(1 <= len(p.inspirations) <= 2 for p in proposals)


def test_propose_is_deterministic_given_the_rng():
    def run():
        pop = Population(PopulationConfig(islands=3, operators={"knob": 1.0, "optimize": 1.0}))
        for i, f in enumerate([1.0, 2.0, 3.0, 0.5]):
            pop.add(cand(f"c{i}", island=i % 3), ok(f))
        rng = random.Random(7)
        return [pop.propose(rng) for _ in range(50)]
    assert run() == run()


def test_no_inspirations_at_rate_zero():
    pop = Population(knob_only(islands=1, inspiration_rate=0.0))
    for i in range(4):
        pop.add(cand(f"c{i}"), ok(1.0 + i))
    rng = random.Random(0)
    assert all(pop.propose(rng).inspirations == () for _ in range(50))


# ---------------------------------------------------------------- selection
def test_selection_prefers_fitter_candidates_but_picks_others():
    pop = Population(knob_only(islands=1, usage_penalty=0.0, migration_interval=1000))
    for i, f in enumerate([1.0, 1.2, 1.5, 2.0, 4.0]):
        pop.add(cand(f"c{i}"), ok(f))
    rng = random.Random(0)
    counts = Counter(pop.select_parent(0, rng).id for _ in range(2000))
    assert counts["c4"] > counts["c3"] > counts["c0"]
    assert counts["c0"] > 0 and len(counts) == 5


def test_usage_penalty_spreads_selection():
    def spread(penalty):
        pop = Population(knob_only(islands=1, usage_penalty=penalty, tournament=5))
        for i, f in enumerate([1.0, 1.1, 1.2, 1.3, 1.4]):
            pop.add(cand(f"c{i}"), ok(f))
        rng = random.Random(1)
        return Counter(pop.select_parent(0, rng).id for _ in range(100))
    greedy, penalised = spread(0.0), spread(1.0)
    assert max(penalised.values()) < max(greedy.values()) / 2 and len(penalised) == 5


def test_a_child_arriving_turns_its_selection_into_a_use():
    pop = Population(knob_only(islands=1))
    pop.add(cand("p"), ok(1.0))
    assert pop.select_parent(0, random.Random(0)).id == "p" and pop.uses("p") == 1
    pop.add(cand("c", parents=("p",)), FAILED)
    assert pop.uses("p") == 1


def test_selection_is_deterministic_given_the_rng():
    def picks():
        pop = Population(knob_only(islands=1))
        for i in range(10):
            pop.add(cand(f"c{i}"), ok(1 + i / 10))
        rng = random.Random(7)
        return [pop.select_parent(0, rng).id for _ in range(20)]
    assert picks() == picks()


def test_selection_falls_back_when_nothing_is_correct():
    pop = Population(knob_only(islands=2))
    assert pop.select_parent(0, random.Random(0)) is None
    pop.add(cand("broken"), FAILED)
    pop.add(cand("wrong"), Outcome(0.0, False, compiled=True, feedback="max_rel_err 3.2"))
    assert pop.select_parent(0, random.Random(0)).id == "wrong"        # compiled: a parent for repair
    pop.add(cand("seed", operator="seed"), ok(1.0))
    assert pop.select_parent(1, random.Random(0)).id == "seed"         # an empty island starts from seeds


# ---------------------------------------------------------------- archive and inspirations
def family_pop(per_family=2, archive_size=16):
    """Three families (seed roots a, b, c), each with children of rising fitness."""
    pop = Population(knob_only(islands=1, per_family=per_family, archive_size=archive_size))
    for root, base in (("a", 1.0), ("b", 2.0), ("c", 3.0)):
        pop.add(cand(root, operator="seed"), ok(base))
        for j in range(4):
            pop.add(cand(f"{root}{j}", parents=(root,)), ok(base + 0.1 * (j + 1)))
    return pop


def test_archive_keeps_the_fittest_at_most_per_family():
    pop = family_pop(per_family=2)
    assert [m.candidate.id for m in pop.archive] == ["c3", "c2", "b3", "b2", "a3", "a2"]
    assert max(Counter(m.family for m in pop.archive).values()) == 2


def test_archive_is_bounded():
    assert len(family_pop(per_family=4, archive_size=5).archive) == 5


def test_inspirations_come_from_the_archive_one_per_family_first():
    pop = family_pop(per_family=2)
    archive = {m.candidate.id for m in pop.archive}
    for seed in range(20):
        got = pop.inspirations(0, 3, random.Random(seed), exclude=["c3"])
        assert {c.id for c in got} <= archive and "c3" not in {c.id for c in got}
        assert len({pop.get(c.id).family for c in got}) == 3
        assert [pop.get(c.id).fitness for c in got] == sorted((pop.get(c.id).fitness for c in got), reverse=True)


def test_inspirations_prefer_the_island():
    pop = Population(knob_only(islands=2, migration_interval=1000))
    for i in range(4):
        pop.add(cand(f"x{i}", island=0, operator="seed"), ok(1.0 + i))
        pop.add(cand(f"y{i}", island=1, operator="seed"), ok(0.5 + i / 10))
    got = pop.inspirations(1, 3, random.Random(0))
    assert all(c.id.startswith("y") for c in got)


# ---------------------------------------------------------------- migration
def test_migration_copies_each_islands_best_to_the_next():
    pop = Population(knob_only(islands=3, migration_interval=6))
    for i, f in enumerate([1.0, 2.0, 1.5, 3.0, 0.5]):
        pop.add(cand(f"c{i}", island=i % 3), ok(f))
    assert pop.migrations == 0
    pop.add(cand("c5", island=2), FAILED)                  # the 6th addition migrates
    assert pop.migrations == 1
    assert "c3" in {m.candidate.id for m in pop.island(1)}  # best of island 0 → island 1
    assert "c1" in {m.candidate.id for m in pop.island(2)}  # best of island 1 → island 2
    assert "c2" in {m.candidate.id for m in pop.island(0)}  # best of island 2 → island 0 (ring)


# ---------------------------------------------------------------- restoration
def test_restore_equals_sequential_adds():
    cfg = PopulationConfig(islands=2, migration_interval=5, per_family=2, archive_size=6)
    rng = random.Random(3)
    records = []
    for i in range(40):
        parents = (records[rng.randrange(len(records))][0].id,) if records else ()
        operator = "seed" if not parents else rng.choice(["optimize", "knob", "translate"])
        outcome = ok(rng.uniform(0.5, 3)) if rng.random() < 0.7 else FAILED
        records.append((cand(f"c{i}", island=rng.randrange(2), parents=parents, operator=operator), outcome))
    live = Population(cfg)
    for c, o in records:
        live.add(c, o)
    restored = Population.restore(cfg, records)
    assert restored.stats() == live.stats()
    assert [m.candidate.id for m in restored.archive] == [m.candidate.id for m in live.archive]
    assert [[m.candidate.id for m in restored.island(i)] for i in range(2)] == \
           [[m.candidate.id for m in live.island(i)] for i in range(2)]
    assert [restored.select_parent(0, random.Random(9)).id for _ in range(10)] == \
           [live.select_parent(0, random.Random(9)).id for _ in range(10)]


def test_best_and_stats():
    pop = family_pop()
    pop.add(cand("bad"), FAILED)
    assert pop.best().candidate.id == "c3"
    s = pop.stats()
    assert s["candidates"] == 16 and s["correct"] == 15 and s["best_fitness"] == pytest.approx(3.4)
    assert s["islands"][0]["members"] == 16


# ---------------------------------------------------------------- LLM operators and red team
def test_red_team_children_are_members_but_never_ranked_or_parents():
    pop = Population(PopulationConfig(islands=1, operators={"optimize": 1.0}, inspiration_rate=1.0))
    pop.add(cand("seed", operator="seed"), ok(1.0))
    red = Candidate(id="red", source="red", parents=("seed",), operator="red_team")
    pop.add(red, ok(50.0))
    assert "red" in pop and pop.best().candidate.id == "seed"
    assert all(m.candidate.id != "red" for m in pop.archive)
    rng = random.Random(0)
    for _ in range(50):
        p = pop.propose(rng)
        assert p.parent.id == "seed" and all(c.id != "red" for c in p.inspirations)


def test_operators_are_proposed_only_when_they_can_be_served():
    pop = Population(PopulationConfig(islands=1, operators={"translate": 1.0, "repair": 1.0, "crossover": 1.0}))
    rng = random.Random(0)
    first = [pop.propose(rng) for _ in range(20)]
    assert {p.operator for p in first} == {"translate"} and all(p.parent is None for p in first)
    pop.add(cand("a", operator="seed"), ok(1.0))
    pop.add(Candidate(id="bad", source="bad", operator="optimize", parents=("a",)),
            Outcome(0.0, False, True, "wrong answer"))
    ops = {p.operator: p for p in (pop.propose(rng) for _ in range(60))}
    assert set(ops) == {"translate", "repair"} and ops["repair"].parent.id == "bad"
    pop.add(Candidate(id="b", source="b2", operator="seed"), ok(2.0))
    ops = {p.operator: p for p in (pop.propose(rng) for _ in range(60))}
    assert ops["crossover"].inspirations and ops["crossover"].parent.id != ops["crossover"].inspirations[0].id


# ---------------------------------------------------------------- best-of-N: independent samples from the seeds
def evolved_pop(seeds_only: bool) -> Population:
    """Two seeds (one correct, one failing) and a much fitter evolved child, a failure, a second family."""
    pop = Population(PopulationConfig(islands=2, inspiration_rate=1.0, tournament=5,
                                      operators={"knob": 1.0, "optimize": 1.0, "repair": 1.0, "crossover": 1.0}),
                     seeds_only=seeds_only)
    pop.add(cand("s1", operator="seed"), ok(1.0))
    pop.add(cand("s2", island=1, operator="seed"), FAILED)
    pop.add(cand("child", parents=("s1",)), ok(9.0))
    pop.add(cand("other", island=1, operator="translate"), ok(5.0))
    pop.add(cand("broken", parents=("child",)), FAILED)
    return pop


def test_best_of_n_draws_every_parent_from_the_correct_seeds_without_inspirations_repair_or_crossover():
    pop, rng = evolved_pop(seeds_only=True), random.Random(0)
    proposals = [pop.propose(rng) for _ in range(200)]
    assert {p.parent.id for p in proposals} == {"s1"}                   # never the fitter child, never the archive
    assert all(p.inspirations == () for p in proposals)
    assert {p.operator for p in proposals} == {"knob", "optimize"}      # repair, crossover build on other samples


def test_evolution_draws_parents_inspirations_repair_and_crossover_from_the_population():
    """The same population in evolve mode: the contrast that makes the test above able to fail."""
    pop, rng = evolved_pop(seeds_only=False), random.Random(0)
    proposals = [pop.propose(rng) for _ in range(200)]
    assert {"child", "other"} <= {p.parent.id for p in proposals}
    assert any(p.inspirations for p in proposals) and {"repair", "crossover"} <= {p.operator for p in proposals}


def test_best_of_n_falls_back_to_a_failing_seed_and_restores_its_mode():
    pop = Population(knob_only(islands=1), seeds_only=True)
    pop.add(cand("s", operator="seed"), FAILED)
    pop.add(cand("c", parents=("s",), operator="knob"), ok(3.0))
    assert pop.propose(random.Random(1)).parent.id == "s"
    again = Population.restore(knob_only(islands=1), [(cand("s", operator="seed"), FAILED)], seeds_only=True)
    assert again.seeds_only and again.propose(random.Random(1)).parent.id == "s"


def test_a_request_carries_what_its_prompt_quotes_from_the_population_alone():
    """`Population.request`: the parent's and the inspirations' judgements and the parent's feedback travel with the
    proposal, from the members (no store is read); a member no evaluator judged has no evaluation to quote."""
    from kevolve.judge.results import Evaluation
    from kevolve.operators.strategies import Board
    ev = Evaluation(task="t", target="cpu", abi="c", shapes="small", compiled=True, correct=False,
                    failure="B=3/random/s0: wrong answer", stage="correctness")
    pop = Population(PopulationConfig(islands=1, operators={"optimize": 1.0}))
    parent, other, rejected = (Candidate.new(f"int v{i};", operator="seed") for i in range(3))
    pop.add(parent, Outcome(0.0, False, True, ev.failure), ev)
    pop.add(other, Outcome(1.5, True), None)
    pop.add(rejected, Outcome(0.0, False, False, "static rule: threads"))
    request = pop.request(Proposal(0, parent, "optimize", (other, rejected)), Board(), 3, 4, {parent.id: "a profile"})
    assert dict(request.evaluations) == {parent.id: ev} and request.feedback == ev.failure
    assert request.profile == "a profile" and request.count == 4 and request.proposal.parent is parent
    restored = Population.restore(pop.config, [(parent, Outcome(0.0, False, True, ev.failure), ev)])
    assert restored.request(Proposal(0, parent, "optimize"), Board(), 3, 4).evaluations == {parent.id: ev}
