"""Contracts of kevolve.operators.knobs: the knob syntax, rewriting, mutation, crossover."""
from __future__ import annotations

import random

import pytest

from kevolve.operators import knobs
from kevolve.search.population import source_hash

KERNEL = """\
#include <cstdint>
#define ROWS_PER_BLOCK 4  // knob: 1, 2, 4, 8
constexpr int THREADS = 256;  // knob: 128, 256, 512, 1024
constexpr float ALPHA = 0.5f; // knob: 0.25f, 0.5f, 1.0f
static constexpr int VEC{4};  // knob: 1, 2, 4
constexpr int TILE = 32;      // knob: range(8, 128, *2)
constexpr int UNROLL = 1;     // knob: range(1, 4, +1)
// knob: a comment line like this one declares nothing
__global__ void k(float* y) { y[threadIdx.x] = ALPHA * THREADS * ROWS_PER_BLOCK; }
"""


def test_parse_reads_every_form():
    ks = knobs.parse(KERNEL)
    assert list(ks) == ["ROWS_PER_BLOCK", "THREADS", "ALPHA", "VEC", "TILE", "UNROLL"]
    assert (ks["ROWS_PER_BLOCK"].value, ks["ROWS_PER_BLOCK"].choices, ks["ROWS_PER_BLOCK"].line) == \
           ("4", ("1", "2", "4", "8"), 2)
    assert ks["THREADS"].value == "256" and ks["ALPHA"].choices == ("0.25f", "0.5f", "1.0f")
    assert ks["VEC"].value == "4"
    assert ks["TILE"].choices == ("8", "16", "32", "64", "128")
    assert ks["UNROLL"].choices == ("1", "2", "3", "4")


def test_apply_rewrites_only_the_values():
    out = knobs.apply(KERNEL, {"THREADS": 512, "ROWS_PER_BLOCK": "8", "ALPHA": "1.0f", "VEC": 2})
    assert "constexpr int THREADS = 512;  // knob: 128, 256, 512, 1024" in out
    assert "#define ROWS_PER_BLOCK 8  // knob: 1, 2, 4, 8" in out
    assert "constexpr float ALPHA = 1.0f; // knob:" in out and "VEC{2};" in out
    assert knobs.apply(out, {"THREADS": 256, "ROWS_PER_BLOCK": 4, "ALPHA": "0.5f", "VEC": 4}) == KERNEL


@pytest.mark.parametrize("values, message", [({"THREADS": 300}, "not one of"), ({"ALPHA": "0.5"}, "not one of"),
                                             ({"BLOCKS": 2}, "no knob")])
def test_apply_rejects_invalid_values(values, message):
    with pytest.raises(ValueError, match=message):
        knobs.apply(KERNEL, values)


@pytest.mark.parametrize("line", [
    "constexpr int T = 1;  // knob:",
    "constexpr int T = 1;  // knob: 1,, 2",
    "constexpr int T = 1;  // knob: range(64, 8, *2)",
    "constexpr int T = 1;  // knob: range(1, 100000, +1)",
    "for (int i = 0; i < 4; ++i) {  // knob: 1, 2",
    "constexpr int T = 1;  // knob: 1, 2\nconstexpr int T = 2;  // knob: 1, 2",
])
def test_malformed_knobs_raise_naming_the_line(line):
    with pytest.raises(ValueError, match="line"):
        knobs.parse(line)


def test_a_current_value_outside_the_choices_is_an_extra_choice():
    src = "constexpr int T = 96;  // knob: 64, 128\n"
    assert knobs.parse(src)["T"].choices == ("96", "64", "128")
    assert knobs.apply(src, {"T": 96}) == src
    assert {c["T"][1] for _, c in knobs.neighbours(src)} == {"64", "128"}


@pytest.mark.parametrize("src", ["int x = 1;\n", "", "// knob: 1, 2\n", "constexpr int T = 1;  // knob: 1\n"])
def test_without_knobs_to_change_mutation_returns_none(src):
    assert knobs.mutate(src, random.Random(0)) is None
    assert knobs.neighbours(src) == []


def test_mutate_changes_between_one_and_n_knobs_to_allowed_values():
    base = knobs.parse(KERNEL)
    rng = random.Random(0)
    for _ in range(50):
        out, changes = knobs.mutate(KERNEL, rng, n=2)
        assert 1 <= len(changes) <= 2
        after = knobs.parse(out)
        for name, knob in base.items():
            old, new = changes.get(name, (knob.value, knob.value))
            assert after[name].value == new and old == knob.value and new in knob.choices
            assert (name in changes) == (new != old)


def test_mutation_is_deterministic_given_the_rng():
    assert knobs.mutate(KERNEL, random.Random(5), n=3) == knobs.mutate(KERNEL, random.Random(5), n=3)


def test_crossover_takes_a_code_and_some_of_b_values():
    a = KERNEL.replace("ALPHA * THREADS", "THREADS * ALPHA")
    b = knobs.apply(KERNEL, {"THREADS": 1024, "TILE": 8, "VEC": 1})
    for seed in range(20):
        out, changes = knobs.crossover(a, b, random.Random(seed))
        assert changes and set(changes) <= {"THREADS", "TILE", "VEC"}
        assert knobs.apply(out, {n: old for n, (old, _) in changes.items()}) == a
        assert "THREADS * ALPHA" in out


def test_crossover_skips_knobs_outside_a_choices_and_returns_none_when_nothing_differs():
    a = "constexpr int T = 64;  // knob: 64, 128\n"
    assert knobs.crossover(a, "constexpr int T = 96;  // knob: 96, 192\n", random.Random(0)) is None
    assert knobs.crossover(a, a, random.Random(0)) is None
    assert knobs.crossover(a, "int x;\n", random.Random(0)) is None


def test_neighbours_are_every_single_knob_change():
    ns = knobs.neighbours(KERNEL)
    assert len(ns) == sum(len(k.choices) - 1 for k in knobs.parse(KERNEL).values()) == 3 + 3 + 2 + 2 + 4 + 3
    assert all(len(c) == 1 for _, c in ns) and len({s for s, _ in ns}) == len(ns)
    assert knobs.space_size(KERNEL) == 4 * 4 * 3 * 3 * 5 * 4


def test_knob_values_make_distinct_sources_knob_comments_do_not():
    other_values = knobs.apply(KERNEL, {"THREADS": 512})
    other_comment = KERNEL.replace("// knob: 128, 256, 512, 1024", "// knob: 256, 512")
    assert source_hash(other_values) != source_hash(KERNEL)
    assert source_hash(other_comment) == source_hash(KERNEL)


# ---- carry: markers an LLM's rewrite dropped

CARRIED = """constexpr int THREADS = 256;   // knob: 128, 256, 512
#define ROWS 4                 // knob: range(1, 16, *2)
constexpr int VEC = 4;         // knob: 1, 2, 4
"""


def test_carry_puts_back_dropped_markers_and_nothing_else():
    child = ("constexpr int THREADS = 512;\n#define ROWS 4\n"
             "constexpr int VEC = 2;   // fixed: the loads below assume pairs\nint main() { return 0; }\n")
    source, restored = knobs.carry(CARRIED, child)
    assert restored == ("THREADS", "ROWS")                    # VEC's line has a comment of the LLM's: left alone
    assert source.splitlines()[2:] == child.splitlines()[2:]
    found = knobs.parse(source)
    assert set(found) == {"THREADS", "ROWS"} and found["THREADS"].value == "512"
    assert found["THREADS"].choices == ("128", "256", "512") and len(found["ROWS"].choices) == 5


@pytest.mark.parametrize("child", [
    "constexpr int OTHER = 1;\n",                              # the name is gone
    "constexpr int THREADS = 256;\nTHREADS = 128;\n",          # declared twice: ambiguous
    "constexpr int THREADS = 256;  // knob: 64, 128\n",        # re-marked by the LLM: its list stands
])
def test_carry_leaves_what_it_cannot_place(child):
    source, restored = knobs.carry(CARRIED, child)
    assert source == child and "THREADS" not in restored


def test_carry_with_malformed_knob_lines_changes_nothing():
    assert knobs.carry("int x = 1;  // knob: 1 2\n", "int x = 1;\n") == ("int x = 1;\n", ())
