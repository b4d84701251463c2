"""Meta-generation's strategies: parsed from good and malformed replies, scored by their children."""
from __future__ import annotations

import json

import pytest

from kevolve.operators.strategies import Board, Strategy, parse_strategies

GOOD = [{"name": "Split rows", "idea": "Cut each row into tiles reduced by many blocks."},
        {"name": "float4 loads", "idea": "Read x as float4 after a scalar head."}]


def test_fenced_json_after_reasoning():
    text = "The kernel is latency bound [see above].\n\n```json\n" + json.dumps(GOOD, indent=2) + "\n```\n"
    found, why = parse_strategies(text)
    assert why is None and found == [Strategy("Split rows", GOOD[0]["idea"]), Strategy("float4 loads", GOOD[1]["idea"])]


def test_bare_json_the_last_list_wins_and_limit():
    text = "draft: " + json.dumps(GOOD[:1]) + "\nfinal: " + json.dumps(GOOD + [{"name": "c", "idea": "d"}])
    found, _ = parse_strategies(text, limit=2)
    assert [s.name for s in found] == ["Split rows", "float4 loads"]


def test_bad_items_and_duplicates_are_dropped():
    items = GOOD + [{"name": "split  ROWS", "idea": "again"}, {"name": "", "idea": "x"}, {"name": "y"},
                    {"name": 3, "idea": "z"}]
    found, why = parse_strategies(json.dumps(items))
    assert why is None and [s.name for s in found] == ["Split rows", "float4 loads"]


@pytest.mark.parametrize("text", ["no json here", "[1, 2, 3]", '[{"name": "a"}]', "```json\n[{\"name\": \"a\",\n```",
                                  "", "[" * 500, '{"name": "a", "idea": "b"}'])
def test_malformed_replies_give_a_reason(text):
    found, why = parse_strategies(text)
    assert found == [] and why


def test_board_ranks_by_mean_reward_and_round_trips():
    b = Board()
    a, c = Strategy("Split rows", "tiles"), Strategy("float4", "vectors")
    for r in (1.0, 0.5):
        b.record(a, r)
    b.record(c, 0.9)
    b.record(Strategy("split rows", "same strategy, other spelling"), 0.0)
    assert [(s.name, round(m, 3), n) for s, m, n in b.best(2)] == [("float4", 0.9, 1), ("Split rows", 0.5, 3)]
    assert [s.name for s, _, _ in b.best(5, min_children=2)] == ["Split rows"]
    restored = Board.from_state(json.loads(json.dumps(b.state())))
    assert restored.best(5) == b.best(5) and restored.mean(a) == pytest.approx(0.5)
