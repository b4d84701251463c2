"""Configurations drawn from a task's domain (`kevolve.task.domain`): the few every judgement checks, the wide
sweep a result must pass before it is released, the corners, and the smaller neighbours a failure shrinks to.

Every draw takes a `random.Random` the caller seeded with a secret (the judge draws a salt per judgement), so
which configurations a kernel meets cannot be known beforehand; a size's value is drawn across its decades with
what trips kernels mixed in (1, odd, prime, a power of two and its neighbours, a residue mod 8 or 16 that is not
0), scalars across their decades with their extremes often, and the largest configurations the target's byte
budget allows, few rows long where the cost is the row's length.

- `for_judgement`: a handful, their bytes bounded by the budget: small sizes with the scalars at or near their
  extremes under every init family, one size at its largest value (the others drawn and the whole fitted to the
  budget), and a few drawn across the whole domain. Over a run every size's and scalar's extremes appear.
- `sweep`: hundreds (`count`): the corners under every init family, then draws of every kind (small and
  interior ones mostly: the corners hold the largest configurations already).
- `corners`: every size at its smallest and at its largest (the others at their smallest), every scalar at both
  ends, under every init family the domain allows there.
- `shrink`: the smallest configuration that still fails, size by size (bisected), within a number of tries.

Guarantees: every configuration returned lies in the domain for the target (`domain.outside` is None), is a
`Case` marked `drawn` (its id names every size, every scalar that differs from its default, its init and seed),
and has a seed from the caller's generator. Not guaranteed: that a kernel wrong somewhere in the domain meets a
failing configuration in one judgement (the sweep before release is the wide net).
"""
from __future__ import annotations

import math
import random
from typing import Callable

from kevolve.task.domain import Domain, SizeRange, config_bytes, fits, outside
from kevolve.task.spec import Case, Task

SMALL_BYTES = 256 << 10        # the small probes' budget: the per-call cost, not the bytes, dominates there
INTERIOR_BYTES = 64 << 20      # the interior draws' budget at most (an eighth of the target's, else)
INTERIOR = 2                   # configurations drawn across the whole domain per judgement
TRIES = 64                     # draws before a kind gives up on meeting the domain's conditions


def case(task: Task, sizes: dict[str, int], scalars: dict, init: str, seed: int) -> Case:
    """A drawn configuration: `sizes`, the task's scalars with `scalars` over the defaults, `init`, `seed`."""
    defaults = task.scalar_values()
    values = {**defaults, **scalars}
    custom = tuple(n for n in defaults if values[n] != defaults[n])
    return Case(tuple((n, int(sizes[n])) for n in task.sizes), init, seed, "", True,
                tuple(values.items()), custom, (), True)


def as_message(c: Case) -> dict:
    """A drawn configuration as JSON data (what the evaluator sends its worker with the configuration's first
    call: `protocol.Check.case`)."""
    return {"sizes": dict(c.sizes), "scalars": dict(c.scalars), "init": c.init, "seed": c.seed}


def from_message(task: Task, d: dict) -> Case:
    """`as_message`'s configuration back, checked: every size an int, every scalar a number, a known init."""
    sizes, scalars = d.get("sizes"), d.get("scalars")
    if not isinstance(sizes, dict) or sorted(sizes) != sorted(task.sizes) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in sizes.values()):
        raise ValueError(f"a drawn configuration's sizes must be ints for {list(task.sizes)}, got {sizes!r}")
    defaults = task.scalar_values()
    if not isinstance(scalars, dict) or sorted(scalars) != sorted(defaults) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in scalars.values()):
        raise ValueError(f"a drawn configuration's scalars must be numbers for {list(defaults)}, got {scalars!r}")
    if d.get("init") not in task.init_sets or not isinstance(d.get("seed"), int):
        raise ValueError(f"a drawn configuration's init must be one of {list(task.init_sets)} and its seed an int")
    return case(task, sizes, scalars, d["init"], d["seed"])


# ---------------------------------------------------------------- values
def _textured(rng: random.Random, v: int, r: SizeRange) -> int:
    """`v` moved to something kernels trip on, now and then: odd, prime, a power of two or beside one, a
    residue mod 16 that is not 0."""
    roll = rng.random()
    if roll < 0.2:
        v |= 1
    elif roll < 0.35:
        v = _next_prime(v)
    elif roll < 0.5:
        p = 1 << max(0, round(math.log2(max(v, 1))))
        v = p + rng.choice((-1, 0, 1))
    elif roll < 0.65:
        v = (v // 16) * 16 + rng.randrange(1, 16)
    return min(max(v, r.lo), r.hi)


def _next_prime(n: int) -> int:
    n = max(n, 2)
    while any(n % p == 0 for p in range(2, int(n ** 0.5) + 1)):
        n += 1
    return n


def _log_int(rng: random.Random, lo: int, hi: int) -> int:
    a, b = math.log(max(lo, 1)), math.log(max(hi, 1) + 1)
    return min(max(int(math.exp(rng.uniform(a, b))), lo), hi)


def _size(rng: random.Random, r: SizeRange, hi: int | None = None) -> int:
    if r.values:
        return rng.choice([v for v in r.values if hi is None or v <= hi] or [r.values[0]])
    top = r.hi if hi is None else max(r.lo, min(r.hi, hi))
    return _textured(rng, _log_int(rng, r.lo, top), SizeRange(r.name, r.lo, top))


def _scalar(rng: random.Random, dom: Domain, name: str, edge: float) -> float | int:
    """A scalar at one of its ends (probability `edge` each side) or across its range (decades when `log`)."""
    r = next(s for s in dom.scalars if s.name == name)
    roll = rng.random()
    if roll < edge:
        return r.lo
    if roll < 2 * edge:
        return r.hi
    if r.type == "int":
        return rng.randint(int(r.lo), int(r.hi))
    if r.log:
        return float(f"{math.exp(rng.uniform(math.log(r.lo), math.log(r.hi))):.3g}")
    return float(f"{rng.uniform(r.lo, r.hi):.4g}")


# ---------------------------------------------------------------- fitting to the budget
def fit(task: Task, target: str, sizes: dict[str, int], budget: int, pinned: tuple[str, ...] = ()
        ) -> dict[str, int] | None:
    """`sizes` made to fit `budget` bytes (and the target's FLOPs, `domain.fits`): the unpinned sizes halved,
    largest first, down to their smallest; then each pinned size the largest value that fits. None when even that
    cannot fit."""
    dom, sizes = task.domain, dict(sizes)
    ok = lambda s: fits(task, s, target, budget)       # noqa: E731
    while not ok(sizes):
        free = [s for s in dom.sizes if s.name not in pinned and sizes[s.name] > s.lo]
        if not free:
            break
        big = max(free, key=lambda s: sizes[s.name] / max(s.lo, 1))
        sizes[big.name] = _smaller(big, sizes[big.name])
    for name in pinned:
        if ok(sizes):
            break
        r = dom.size(name)
        options = [v for v in r.values if v <= sizes[name]] if r.values else None
        lo, hi = r.lo, sizes[name]
        while lo < hi:                           # the largest value of `name` that fits
            mid = (lo + hi + 1) // 2
            if options is not None:
                mid = max([v for v in options if v <= mid] or [r.lo])
            if ok({**sizes, name: mid}):
                lo = mid
            else:
                hi = mid - 1 if options is None else max([v for v in options if v < mid] or [r.lo])
        sizes[name] = lo
    return sizes if ok(sizes) else None


def _smaller(r: SizeRange, v: int) -> int:
    if r.values:
        lower = [x for x in r.values if x < v]
        return lower[-1] if lower else r.values[0]
    return max(r.lo, v // 2)


# ---------------------------------------------------------------- the kinds of draw
def _inits(task: Task, sizes: dict[str, int]) -> list[str]:
    return [i for i, _ in task.domain.inits if task.domain.init_allowed(i, sizes)]


def _budgets(task: Task, target: str) -> tuple[int, int, int]:
    """The byte budgets of the three kinds of draw on `target`: small (the smallest configuration's bytes, its
    workspace mostly, plus `SMALL_BYTES`), interior (an eighth of the target's up to `INTERIOR_BYTES`, at least
    small's), whole."""
    whole = task.domain.budget(target)
    lowest = {s.name: s.lo for s in task.domain.sizes}
    small = min(whole, config_bytes(task, lowest) + SMALL_BYTES)
    return small, max(small, min(whole // 8, INTERIOR_BYTES)), whole


def listed_points(task: Task, most: int = 100_000) -> list[dict[str, int]]:
    """When every size of the domain takes listed values only (an imported task's domain is its configurations),
    the combinations that meet its conditions; else (or when there are more than `most`) none."""
    import itertools
    dom = task.domain
    if not all(s.values for s in dom.sizes) or math.prod(len(s.values) for s in dom.sizes) > most:
        return []
    combos = ({s.name: v for s, v in zip(dom.sizes, c)} for c in itertools.product(*[s.values for s in dom.sizes]))
    return [p for p in combos if dom.violation(p, task.scalar_values()) is None]


def _draw(task: Task, target: str, rng: random.Random, budget: int, pinned: tuple[str, ...] = (),
          small: bool = False, edge: float = 0.2, points: list[dict[str, int]] | None = None
          ) -> tuple[dict, dict] | None:
    """Sizes (the pinned ones at their largest) and scalars that meet the domain, or None. `points`: the task's
    `listed_points`, when the caller draws many times."""
    dom = task.domain
    points = listed_points(task) if points is None else points
    if points and pinned:                       # the points where the pinned size takes its largest value
        top = max(q[pinned[0]] for q in points)
        points = [q for q in points if q[pinned[0]] == top]
    # a size's share of the small budget, in elements: for the small probe, and for the sizes beside a pinned one
    # (a row of the largest length, not a matrix of them)
    cap = max(1, int((SMALL_BYTES / 4) ** (1 / max(1, len(dom.sizes)))) * 4) if small or pinned else None
    for _ in range(TRIES):
        if points:                              # every size takes listed values: one of the points that qualify
            sizes = fit(task, target, dict(rng.choice(points)), budget)
            scalars = {r.name: _scalar(rng, dom, r.name, edge) for r in dom.scalars}
            if sizes is not None and dom.violation(sizes, scalars) is None and _inits(task, sizes):
                return sizes, scalars
            continue
        sizes = {s.name: (s.hi if s.name in pinned else _size(rng, s, cap)) for s in dom.sizes}
        sizes = fit(task, target, sizes, budget, pinned)
        if sizes is None:
            continue
        scalars = {r.name: _scalar(rng, dom, r.name, edge) for r in dom.scalars}
        if dom.violation(sizes, scalars) is None and _inits(task, sizes):
            return sizes, scalars
    return None


def for_judgement(task: Task, target: str, rng: random.Random) -> tuple[Case, ...]:
    """The configurations one judgement checks beside the fixed ones (see the module's docstring)."""
    dom, out, points = task.domain, [], listed_points(task)
    small_budget, interior, budget = _budgets(task, target)
    small = _draw(task, target, rng, small_budget, small=True, edge=0.35, points=points)
    if small:                                    # the scalars near their ends, under every init family
        out += [case(task, small[0], small[1], i, rng.randrange(1 << 31)) for i in _inits(task, small[0])]
    ranged = [s.name for s in dom.sizes if s.lo < s.hi]
    if ranged:                                   # one size at its largest, the rest fitted around it
        big = _draw(task, target, rng, budget, pinned=(rng.choice(ranged),), points=points)
        if big:
            out.append(case(task, big[0], big[1], rng.choice(_inits(task, big[0])), rng.randrange(1 << 31)))
    for _ in range(INTERIOR):                    # across the whole domain, at most an eighth of the budget
        got = _draw(task, target, rng, interior, points=points)
        if got:
            out.append(case(task, got[0], got[1], rng.choice(_inits(task, got[0])), rng.randrange(1 << 31)))
    return _unique(out)


def smallest(task: Task) -> dict[str, int]:
    """The smallest sizes that meet the domain's conditions: every size at its least, the listed values of the
    others tried in turn, then the ranged sizes raised together a step at a time."""
    import itertools
    dom = task.domain
    listed = [s for s in dom.sizes if s.values]
    for step in range(64):
        ranged = {s.name: min(s.hi, s.lo + step) for s in dom.sizes if not s.values}
        for combo in itertools.islice(itertools.product(*[s.values for s in listed]), 256):
            sizes = {**ranged, **{s.name: v for s, v in zip(listed, combo)}}
            if dom.violation(sizes, task.scalar_values()) is None:
                return sizes
    return {s.name: s.lo for s in dom.sizes}


def moderate(task: Task, target: str, size: int = 13) -> dict[str, int]:
    """Sizes a little above the least (13, an odd prime, where the range allows; a listed size its first value)
    that meet the domain's conditions and fit the small budget; the least sizes where none do. Where a scalar's ends
    are checked: on one element a variance is 0 and eps changes nothing."""
    dom, lowest = task.domain, smallest(task)
    sizes = {s.name: (lowest[s.name] if s.values else min(s.hi, max(s.lo, size))) for s in dom.sizes}
    sizes = fit(task, target, sizes, _budgets(task, target)[0])
    return sizes if sizes is not None and dom.violation(sizes, task.scalar_values()) is None else lowest


def corners(task: Task, target: str, seed: int = 0) -> tuple[Case, ...]:
    """Every size at its smallest and at its largest that fits (the others at their smallest), every scalar at
    both ends (on `moderate` sizes), under every init family allowed there; `seed` for all."""
    dom, budget = task.domain, task.domain.budget(target)
    lowest = smallest(task)
    points: list[tuple[dict, dict]] = [(lowest, {})]
    for s in dom.sizes:
        if s.lo < s.hi:
            top = fit(task, target, {**lowest, s.name: s.hi}, budget, (s.name,))
            if top:
                points.append((top, {}))
    near = moderate(task, target)                 # the scalars' ends where they matter: not on one element
    for r in dom.scalars:
        points += [(near, {r.name: r.lo}), (near, {r.name: r.hi})]
    out = []
    for sizes, scalars in points:
        if dom.violation(sizes, {**task.scalar_values(), **scalars}) is None:
            out += [case(task, sizes, scalars, i, seed) for i in _inits(task, sizes)]
    return _unique(out)


def sweep(task: Task, target: str, rng: random.Random, count: int = 200) -> tuple[Case, ...]:
    """`corners` under every init family, then draws of every kind until `count` configurations."""
    out = list(corners(task, target, rng.randrange(1 << 31)))
    small, interior, budget = _budgets(task, target)
    kinds = [dict(budget=small, small=True, edge=0.35), dict(budget=interior)] * 4 + [dict(budget=budget)]
    ranged = [s.name for s in task.domain.sizes if s.lo < s.hi]
    misses, points = 0, listed_points(task)
    while len(out) < count and misses < count:
        k = dict(kinds[len(out) % len(kinds)])     # the corners hold the largest already: a ninth more at the top
        if k["budget"] == budget and ranged:
            k["pinned"] = (rng.choice(ranged),)
        got = _draw(task, target, rng, points=points, **k)
        if got is None:
            misses += 1
            continue
        before, inits = len(out), _inits(task, got[0])
        out = list(_unique(out + [case(task, got[0], got[1], i, rng.randrange(1 << 31))
                                  for i in rng.sample(inits, min(2, len(inits)))]))
        misses += len(out) == before
    return tuple(out[:count])


def _unique(cases: list[Case]) -> tuple[Case, ...]:
    seen, out = set(), []
    for c in cases:
        key = (c.sizes, c.scalars, c.init)
        if key not in seen:
            seen.add(key)
            out.append(c)
    return tuple(out)


# ---------------------------------------------------------------- shrinking
def shrink(task: Task, target: str, c: Case, fails: Callable[[Case], str | None], tries: int = 40
           ) -> tuple[Case, str | None, int]:
    """The smallest configuration found that still fails, from `c` (`fails` returns why, or None when it passes),
    within `tries` calls of `fails`: each size, largest first, to its smallest value if that fails, else bisected
    (geometrically) between its smallest, which passes, and its value, which fails, to within a quarter; each
    scalar to its default if that fails, else halfway there; again while anything shrank. Same init and seed.
    Returns it, why it failed (None when nothing smaller failed: the caller keeps its own reason), the tries used."""
    dom, defaults = task.domain, task.scalar_values()
    sizes, scalars, why, used = c.size_dict, c.scalar_dict, None, 0

    def attempt(new_sizes: dict, new_scalars: dict) -> bool:
        nonlocal used, why, sizes, scalars
        if used >= tries or outside(task, new_sizes, new_scalars, c.init, target) is not None:
            return False
        used += 1
        got = fails(case(task, new_sizes, new_scalars, c.init, c.seed))
        if got is not None:
            sizes, scalars, why = dict(new_sizes), dict(new_scalars), got
        return got is not None

    shrank = True
    while shrank and used < tries:
        before = (dict(sizes), dict(scalars))
        for r in sorted(dom.sizes, key=lambda r: -sizes[r.name] / max(r.lo, 1)):
            v = sizes[r.name]
            if r.values:
                any(attempt({**sizes, r.name: x}, scalars) for x in r.values if x < v)
                continue
            if v == r.lo or attempt({**sizes, r.name: r.lo}, scalars):
                continue
            good, bad = r.lo, v                   # good passes, bad fails
            while bad > good + 1 and bad > 1.25 * good and used < tries:
                mid = min(bad - 1, max(good + 1, int(math.sqrt(max(good, 1) * bad))))
                if attempt({**sizes, r.name: mid}, scalars):
                    bad = mid
                else:
                    good = mid
        for r in dom.scalars:
            v, d = scalars[r.name], defaults[r.name]
            if v == d or attempt(sizes, {**scalars, r.name: d}):
                continue
            half = (int(d + (v - d) // 2) if r.type == "int" else
                    float(f"{math.sqrt(v * d):.3g}") if r.log and v > 0 and d > 0 else float(f"{(v + d) / 2:.4g}"))
            if half not in (v, d):
                attempt(sizes, {**scalars, r.name: half})
        shrank = (sizes, scalars) != before
    return case(task, sizes, scalars, c.init, c.seed), why, used
