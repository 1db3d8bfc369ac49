"""Classification metrics for True/False answers: accuracy with a Wilson interval, weighted P/R/F1.

Weighted P/R/F1 follow the usual definition (per-class scores weighted by class support, classes
taken from the reference labels), matching the study's scores.json so the numbers are comparable.
An unparseable prediction counts as wrong for accuracy and as its own class for P/R/F1.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence


def wilson_interval(correct: int, total: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """95 % Wilson score interval: sane at accuracies near 0 or 1 and for small n, unlike Wald."""
    if total <= 0:
        return (0.0, 0.0)
    p = correct / total
    denom = 1 + z * z / total
    centre = (p + z * z / (2 * total)) / denom
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / denom
    # exact at the ends (centre - half is 0 there only up to rounding: 5.55e-17 was printed)
    low = 0.0 if correct == 0 else max(0.0, centre - half)
    high = 1.0 if correct == total else min(1.0, centre + half)
    return (low, high)


def weighted_prf(references: Sequence[str], predictions: Sequence[str]) -> dict[str, float]:
    support = Counter(references)
    total = len(references)
    precision = recall = f1 = 0.0
    for cls, n in support.items():
        tp = sum(1 for r, p in zip(references, predictions, strict=True) if r == cls and p == cls)
        predicted = sum(1 for p in predictions if p == cls)
        prec = tp / predicted if predicted else 0.0
        rec = tp / n
        f = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
        precision += prec * n / total
        recall += rec * n / total
        f1 += f * n / total
    return {"precision_weighted": precision, "recall_weighted": recall, "f1_weighted": f1}


def classification_scores(
    references: Sequence[str], predictions: Sequence[str], groups: Sequence[str] | None = None
) -> dict:
    """The scores.json payload: accuracy, its CI, weighted P/R/F1, n, and per-group accuracy."""
    if len(references) != len(predictions):
        raise ValueError(f"{len(references)} references but {len(predictions)} predictions")
    n = len(references)
    correct = sum(1 for r, p in zip(references, predictions, strict=True) if p and r == p)
    scores: dict = {
        "accuracy": correct / n if n else 0.0,
        "accuracy_ci_95": list(wilson_interval(correct, n)),
        **(weighted_prf(references, predictions) if n else {}),
        "n": n,
        "correct": correct,
    }
    if groups is not None:
        per: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for r, p, g in zip(references, predictions, groups, strict=True):
            per[g][0] += int(bool(p) and r == p)
            per[g][1] += 1
        scores["per_relation"] = {
            g: {"accuracy": c / t, "n": t, "accuracy_ci_95": list(wilson_interval(c, t))}
            for g, (c, t) in sorted(per.items())
        }
    return scores


def two_proportion_p(k1: int, n1: int, k2: int, n2: int) -> float:
    """One-sided p-value that accuracy 1 exceeds accuracy 2 (pooled two-proportion z-test).

    Why a test and not only intervals: two overlapping 95 % intervals can still differ
    significantly; the demo and its test state how unlikely the measured gain is under no effect.
    """
    if n1 <= 0 or n2 <= 0:
        raise ValueError("both groups need at least one item")
    pooled = (k1 + k2) / (n1 + n2)
    var = pooled * (1 - pooled) * (1 / n1 + 1 / n2)
    diff = k1 / n1 - k2 / n2
    if var == 0:
        return 0.5 if diff == 0 else (0.0 if diff > 0 else 1.0)
    z = diff / math.sqrt(var)
    return 0.5 * math.erfc(z / math.sqrt(2))


def one_sided_binomial_p(k: int, n: int, p0: float = 0.5) -> float:
    """Exact P(X >= k) for X ~ Binomial(n, p0): is an accuracy of k/n above chance p0?"""
    if not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    if k == 0:
        return 1.0
    if p0 <= 0 or p0 >= 1:
        return float(p0 >= 1)
    log_terms = [
        math.lgamma(n + 1)
        - math.lgamma(i + 1)
        - math.lgamma(n - i + 1)
        + i * math.log(p0)
        + (n - i) * math.log1p(-p0)
        for i in range(k, n + 1)
    ]
    top = max(log_terms)
    return min(1.0, math.exp(top) * sum(math.exp(t - top) for t in log_terms))


def two_sided(p_one_sided: float) -> float:
    """The two-sided p-value of a symmetric test from its one-sided one."""
    return min(1.0, 2 * min(p_one_sided, 1 - p_one_sided))


def trend_test(xs: Sequence[float], correct: Sequence[int], totals: Sequence[int]) -> dict:
    """Cochran-Armitage test for a linear trend of a proportion over ordered levels ``xs``.

    Why this test: the bias study asks whether accuracy falls as the training set's bias rises,
    one ordered question over all levels, with more power than pairwise tests between levels.
    Returns the z statistic (negative: accuracy falls with x) and its two-sided p-value.
    """
    if not (len(xs) == len(correct) == len(totals)) or len(xs) < 2:
        raise ValueError("a trend test needs at least two levels with counts")
    n = sum(totals)
    k = sum(correct)
    if n == 0:
        raise ValueError("a trend test needs items")
    p = k / n
    x_mean = sum(x * t for x, t in zip(xs, totals, strict=True)) / n
    t_stat = sum((x - x_mean) * c for x, c in zip(xs, correct, strict=True))
    var = p * (1 - p) * sum(t * (x - x_mean) ** 2 for x, t in zip(xs, totals, strict=True))
    if var <= 0:
        return {"z": 0.0, "p": 1.0}
    z = t_stat / math.sqrt(var)
    return {"z": z, "p": math.erfc(abs(z) / math.sqrt(2))}


def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjustment of a family of p-values (None: no test, left None).

    Why Holm: a table declares 8-14 comparisons, and reading the smallest raw p of many as an
    effect is how single runs become claims; Holm (1979) keeps the family-wise error at the
    nominal level without assuming the tests independent, and rejects everything Bonferroni does
    and more. The i-th smallest of m p-values is multiplied by (m - i + 1), made monotone (never
    below the one before it) and capped at 1.
    """
    present = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    m = len(present)
    adjusted: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(present):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[i] = running
    return adjusted


def mcnemar_exact(only_first: int, only_second: int) -> float:
    """McNemar's exact two-sided p for paired yes/no outcomes: ``only_first`` items are yes for
    the first condition alone, ``only_second`` for the second alone (the discordant pairs); the
    binomial test of their split at 1/2. Why: two models answer the same items, so an item's
    difficulty is shared and only the items where they differ carry the comparison."""
    n = only_first + only_second
    if n == 0:
        return 1.0
    return min(1.0, 2 * one_sided_binomial_p(max(only_first, only_second), n, 0.5))
