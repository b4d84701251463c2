"""Contracts of kevolve.search.champion: the reported best changes only on paired evidence beyond noise."""
from __future__ import annotations

from kevolve.judge.results import Comparison, Evaluation, Measurement, Stats
from kevolve.messages import Candidate
from kevolve.search.champion import Champion, Entry


def entry(cid: str, speedup: float) -> Entry:
    m = Measurement("c", "c", "random", False, True, kernel=Stats(1.0 / speedup, 0, 0, 1), eager=Stats(1.0, 0, 0, 1))
    return Entry(Candidate(id=cid, source=cid), Evaluation("t", "cpu", "c", "small", True, True, measurements=(m,)))


def comparison(lo: float, hi: float, failure: str | None = None) -> Comparison:
    return Comparison("t", "cpu", "small", ratio=(lo + hi) / 2, ci=(lo, hi), indistinguishable=lo <= 1.0 <= hi,
                      failure=failure)


def test_the_first_correct_kernel_is_crowned_and_a_weaker_one_never_challenges():
    ch = Champion()
    assert ch.offer(entry("a", 2.0)) and ch.current.candidate.id == "a"
    assert not ch.offer(entry("b", 1.5))
    assert ch.next_challenge() is None


def test_a_challenger_replaces_only_when_the_interval_lies_below_one():
    ch = Champion()
    ch.offer(entry("a", 2.0))
    ch.offer(entry("b", 2.2))
    assert ch.next_challenge().candidate.id == "b"
    assert ch.next_challenge() is None                       # one comparison at a time
    assert ch.settle(comparison(0.97, 1.02)) == "tie" and ch.current.candidate.id == "a" and ch.ties == ["b"]
    ch.offer(entry("c", 2.4))
    ch.next_challenge()
    assert ch.settle(comparison(0.80, 0.90)) == "replaced" and ch.current.candidate.id == "c" and ch.ties == []
    ch.offer(entry("d", 2.6))
    ch.next_challenge()
    assert ch.settle(comparison(1.05, 1.20)) == "kept"          # the champion is faster after all
    ch.offer(entry("e", 2.7))
    ch.next_challenge()
    assert ch.settle(comparison(0.5, 0.6, failure="kernel a: wrong on a timed call")) == "kept"
    ch.offer(entry("f", 2.8))
    ch.next_challenge()
    assert ch.settle(None) == "kept" and ch.current.candidate.id == "c" and ch.comparisons == 5


def test_challengers_wait_fittest_first_and_drop_out_once_beaten():
    ch = Champion()
    ch.offer(entry("a", 1.0))
    for cid, s in (("b", 1.2), ("c", 1.5), ("d", 1.1)):
        ch.offer(entry(cid, s))
    assert ch.next_challenge().candidate.id == "c"
    ch.settle(comparison(0.5, 0.6))                           # c is the champion at 1.5: b and d no longer beat it
    assert ch.next_challenge() is None and not ch.challengers


def test_a_cancelled_comparison_is_asked_again():
    ch = Champion()
    ch.offer(entry("a", 1.0))
    ch.offer(entry("b", 2.0))
    ch.next_challenge()
    ch.cancel()
    assert ch.pending is None and ch.next_challenge().candidate.id == "b"


def test_without_comparisons_a_fitter_candidate_takes_over_at_once():
    ch = Champion(paired=False)                 # a fixed stream (bench_throughput): fitness decides
    assert ch.offer(entry("a", 1.0)) and ch.offer(entry("b", 2.0)) and not ch.offer(entry("c", 1.5))
    assert ch.current.candidate.id == "b" and ch.next_challenge() is None and ch.comparisons == 0
