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


def test_a_tie_raises_the_bar_to_the_tied_fitness():
    """The champion was shown as fast as a kernel judged 2.2x: a later candidate judged 2.1x (above the champion's own
    first, low 1.8x) is no evidence of being faster, and is not compared."""
    ch = Champion()
    ch.offer(entry("a", 1.8))
    ch.offer(entry("b", 2.2))
    ch.next_challenge()
    assert ch.settle(comparison(0.95, 1.05)) == "tie" and ch.bar == 2.2
    ch.offer(entry("c", 2.1))
    assert ch.next_challenge() is None
    ch.offer(entry("d", 2.3))
    assert ch.next_challenge().candidate.id == "d"
    assert ch.settle(comparison(0.8, 0.9)) == "replaced" and ch.bar == 2.3    # a new champion: its own fitness


def test_comparisons_keep_to_their_share_of_the_evaluators_time_until_the_finish():
    ch = Champion(share=0.25)
    ch.offer(entry("a", 1.0))
    ch.spent(judging=10.0)
    ch.offer(entry("b", 1.5))
    assert ch.next_challenge().candidate.id == "b"
    ch.spent(comparing=20.0)                                  # 20 of 30 s: past a quarter
    ch.settle(comparison(0.95, 1.05))
    ch.offer(entry("c", 1.6))
    assert ch.next_challenge() is None and [e.candidate.id for e in ch.challengers] == ["c"]
    ch.spent(judging=50.0)                                    # 20 of 80 s: within it again
    assert ch.next_challenge().candidate.id == "c"
    ch.spent(comparing=40.0)
    ch.settle(comparison(0.95, 1.05))
    ch.offer(entry("d", 1.7))
    assert ch.next_challenge() is None
    assert ch.next_challenge(finishing=True).candidate.id == "d"   # the finish compares the fittest left
