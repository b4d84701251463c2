"""How sure a ratio of times is: a bootstrap confidence interval over paired samples.

`ratio_ci(pairs)` takes, per configuration, two lists of per-call times (numerator, denominator) and gives
the 95% interval of the geometric mean over configurations of median(numerator) / median(denominator).
Samples of equal length are resampled with the same indices (they were taken in the same rounds,
interleaved, so slow moments of the machine affect both alike); otherwise each list on its own.
Guarantees: deterministic (a fixed generator seed). Not guaranteed: coverage with very few samples (fewer
than ~5 per configuration gives an interval narrower than the truth).
"""
from __future__ import annotations

import math


def ratio_ci(pairs: list[tuple[list[float], list[float]]], level: float = 0.95, iters: int = 2000,
             seed: int = 0) -> tuple[float, float] | None:
    """(lo, hi) of geomean_c median(a_c) / median(b_c) by bootstrap; None without samples."""
    import numpy as np
    pairs = [(a, b) for a, b in pairs if a and b]
    if not pairs:
        return None
    rng = np.random.default_rng(seed)
    logs = np.zeros(iters)
    for a, b in pairs:
        a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
        ia = rng.integers(0, len(a), (iters, len(a)))
        ib = ia if len(a) == len(b) else rng.integers(0, len(b), (iters, len(b)))
        logs += np.log(np.median(a[ia], axis=1) / np.median(b[ib], axis=1))
    logs /= len(pairs)
    lo, hi = np.quantile(logs, [(1 - level) / 2, 1 - (1 - level) / 2])
    return math.exp(float(lo)), math.exp(float(hi))


def geomean_ratio(pairs: list[tuple[list[float], list[float]]]) -> float | None:
    """The point estimate: geomean over configurations of median(a) / median(b)."""
    import numpy as np
    logs = [math.log(float(np.median(a)) / float(np.median(b))) for a, b in pairs if a and b]
    return math.exp(sum(logs) / len(logs)) if logs else None
