"""Conditions trained with several seeds: their spread, and a comparison that accounts for it.

With ``experiment.seeds=N`` a trained condition is N models (train.seed = s, s+1, ...), each
evaluated on the same test items; an evaluation-only condition (the base model, greedy decoding)
is one. Two sources of noise stand between a table's difference and the truth: which seed was
drawn (a training run is one draw of many) and which items the test split happens to hold. A
two-proportion test on one run sees only the items; a t-test on the N seed accuracies against
the base row's accuracy sees only the seeds (and, with N = 3, has 2 degrees of freedom and
treats the base accuracy, itself measured on the same 400 items, as exact).

The test used here is a **two-way bootstrap over seeds and items**. Every replicate draws the
seeds of each condition with replacement and, once for both conditions, the items with
replacement (every model answered the same items, so the comparison stays paired on items; a
condition with one run, such as base, keeps its one run), and recomputes the difference of the
mean accuracies. The 2.5 and 97.5 percentiles give the 95 % interval of the difference; the
two-sided p is twice the smaller share of replicates on either side of 0 (at least
1/(replicates+1), never 0). Resampling seeds from N of them shrinks their variance by (N-1)/N
(a third with N = 3, which made the test reject an equal difference too often): each run's
deviation from the mean of its condition's runs, item by item, is widened by sqrt(N/(N-1))
before resampling, so the seed part of the variance is unbiased. The p-value is approximate:
with N = 3 the seed part has very few degrees of freedom, and when the seeds' spread dominates
the items' noise the interval stays somewhat too narrow; tests/test_report_seeds.py measures
the false-positive rate on synthetic data with a known answer in both regimes.

Why not a paired test over seeds: the reference row (base) has no seeds to pair with; why not a
t-test of the seed accuracies against base: it ignores the item sampling shared by both rows and
with three seeds it can barely reject anything. The bootstrap uses both sources, with the items
paired as they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

REPLICATES = 10_000
SEED = 0  # the bootstrap's own random seed: the same files give the same table


def summary(accuracies: Sequence[float]) -> dict[str, float | None]:
    """Mean, sample standard deviation (None for one run), min and max of per-seed accuracies."""
    values = [float(a) for a in accuracies]
    if not values:
        return {"mean": None, "sd": None, "min": None, "max": None}
    mean = sum(values) / len(values)
    sd = None
    if len(values) > 1:
        sd = (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5
    return {"mean": mean, "sd": sd, "min": min(values), "max": max(values)}


def _widened(runs: Any) -> Any:
    """Runs x items (0/1) with each run's deviation from the runs' mean widened by
    sqrt(N/(N-1)), so that resampling N runs has the runs' variance, not (N-1)/N of it."""
    import numpy as np

    runs = np.asarray(runs, dtype=float)
    k = runs.shape[0]
    if k < 2:
        return runs
    centre = runs.mean(axis=0, keepdims=True)
    return centre + (runs - centre) * np.sqrt(k / (k - 1))


def _resampled_means(runs: Any, seed_draws: Any, item_draws: Any) -> Any:
    """Each replicate's mean over its drawn runs (counts per run) and items (counts per item)."""
    k, n = runs.shape
    per_item = seed_draws @ runs  # replicates x items: the drawn runs' sum per item
    return (per_item * item_draws).sum(axis=1) / (k * n)


def bootstrap_difference(
    condition: Any,
    reference: Any,
    replicates: int = REPLICATES,
    seed: int = SEED,
    paired: bool = True,
) -> dict[str, float]:
    """Difference of mean accuracy, ``condition`` minus ``reference``, each runs x items of 0/1
    (correct or not; one run: a 1 x items array), by the two-way bootstrap of this module's
    docstring. ``paired``: both were evaluated on the same items in the same order (then one
    item draw serves both); otherwise each row's items are drawn on their own.

    Returns the observed difference, the 95 % percentile interval and the two-sided p."""
    import numpy as np

    a = np.atleast_2d(np.asarray(condition, dtype=float))
    b = np.atleast_2d(np.asarray(reference, dtype=float))
    if paired and a.shape[1] != b.shape[1]:
        raise ValueError(f"paired rows need the same items: {a.shape[1]} and {b.shape[1]}")
    rng = np.random.default_rng(seed)
    observed = float(a.mean() - b.mean())
    wa, wb = _widened(a), _widened(b)

    def seeds(k: int) -> Any:
        return rng.multinomial(k, [1.0 / k] * k, size=replicates).astype(float)

    def items(n: int) -> Any:
        return rng.multinomial(n, [1.0 / n] * n, size=replicates).astype(float)

    draws_a = seeds(a.shape[0])
    draws_b = seeds(b.shape[0])
    items_a = items(a.shape[1])
    items_b = items_a if paired else items(b.shape[1])
    diffs = _resampled_means(wa, draws_a, items_a) - _resampled_means(wb, draws_b, items_b)
    low, high = np.percentile(diffs, [2.5, 97.5])
    below = int((diffs <= 0).sum())
    above = int((diffs >= 0).sum())
    p = min(1.0, 2 * (min(below, above) + 1) / (replicates + 1))
    return {"difference": observed, "ci_low": float(low), "ci_high": float(high), "p": p}


def bootstrap_above(
    condition: Any, level: float, replicates: int = REPLICATES, seed: int = SEED
) -> float:
    """One-sided p of the mean accuracy above a constant ``level`` (chance), by the same
    bootstrap over seeds and items: the share of replicates at or below ``level``."""
    import numpy as np

    a = np.atleast_2d(np.asarray(condition, dtype=float))
    rng = np.random.default_rng(seed)
    k, n = a.shape
    draws = rng.multinomial(k, [1.0 / k] * k, size=replicates).astype(float)
    items = rng.multinomial(n, [1.0 / n] * n, size=replicates).astype(float)
    means = _resampled_means(_widened(a), draws, items)
    return min(1.0, (int((means <= level).sum()) + 1) / (replicates + 1))


def bootstrap_trend(
    levels: Sequence[Any], xs: Sequence[float], replicates: int = REPLICATES, seed: int = SEED
) -> dict[str, float]:
    """The least-squares slope of mean accuracy over ordered levels ``xs`` (each level runs x
    items of 0/1), with its 95 % interval and two-sided p by the bootstrap over seeds and items.

    Why: the Cochran-Armitage trend test counts items of one run per level, so on seeded rows it
    would read one training draw per level as the truth; here every replicate draws each level's
    seeds (widened as in ``bootstrap_difference``) and, once for all levels when they answered
    the same items, the items, and refits the slope."""
    import numpy as np

    arrays = [np.atleast_2d(np.asarray(a, dtype=float)) for a in levels]
    if len(arrays) != len(xs) or len(arrays) < 2:
        raise ValueError("a trend needs at least two levels, one x each")
    x = np.asarray(xs, dtype=float)
    centred = x - x.mean()
    if not (centred**2).sum():
        raise ValueError("a trend needs at least two different x")
    rng = np.random.default_rng(seed)
    sizes = {a.shape[1] for a in arrays}
    shared = None  # the same items at every level: one item draw serves them all (paired)
    if len(sizes) == 1:
        n = sizes.pop()
        shared = rng.multinomial(n, [1.0 / n] * n, size=replicates)
    means = []
    for runs in arrays:
        k, n = runs.shape
        draws = rng.multinomial(k, [1.0 / k] * k, size=replicates).astype(float)
        items = shared if shared is not None else rng.multinomial(n, [1.0 / n] * n, replicates)
        means.append(_resampled_means(_widened(runs), draws, np.asarray(items, dtype=float)))
    slopes = np.stack(means, axis=1) @ centred / (centred**2).sum()
    observed = float(np.array([a.mean() for a in arrays]) @ centred / (centred**2).sum())
    low, high = np.percentile(slopes, [2.5, 97.5])
    below, above = int((slopes <= 0).sum()), int((slopes >= 0).sum())
    p = min(1.0, 2 * (min(below, above) + 1) / (replicates + 1))
    return {"slope": observed, "ci_low": float(low), "ci_high": float(high), "p": p}
