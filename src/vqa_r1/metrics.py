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
    return (max(0.0, centre - half), min(1.0, centre + half))


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
