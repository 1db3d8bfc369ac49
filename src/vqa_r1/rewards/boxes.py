"""The ``iou`` reward: boxes named in a completion, matched one-to-one to the ground truth.

**Reading boxes.** The whole completion (think and answer blocks alike, at most its first 200,000
characters) is scanned for two forms:

* JSON-like objects, alone or inside a list, as Qwen2.5-VL writes them:
  ``{"bbox_2d": [x1, y1, x2, y2], "label": "cat"}``. The box is read from the key ``bbox_2d``,
  ``bbox`` or ``box`` and the name from ``label``, ``name`` or ``category`` (first found, in that
  order). Quotes may be double or single and the object need not be valid JSON otherwise.
* Brackets outside such objects: ``[x1, y1, x2, y2] name`` or ``(x1, y1, x2, y2) name``, ints or
  floats; the name is the words after the box up to the end of the line or a punctuation mark
  (at most six words), and may be absent.

A box is valid when its four numbers are finite, at most 1e7 in magnitude, and ``x1 <= x2``,
``y1 <= y2``. An invalid box (``x2 < x1``, strings, an object whose box key has no four numbers)
still counts as a prediction with IoU 0, so it cannot dodge the cost of an extra box. Boxes that
repeat exactly (same coordinates and name, e.g. once in the reasoning and once in the answer)
count once.

**Matching.** Ground truth comes from the dataset columns ``gt_boxes`` (a list of
``[x1, y1, x2, y2]`` per row; a single box is read as a list of one) and, optionally,
``gt_box_labels`` (a list of names, as long as ``gt_boxes``; otherwise the names are ignored).
With names, a pair can match only when the names agree: the ground-truth name's words are the
first words of the predicted name, compared case-insensitively with ``_``/``-`` read as spaces and
a leading "a"/"an"/"the" dropped ("[..] traffic light on the left" agrees with "traffic light"). A
prediction without a name agrees with no named ground-truth box; a ground-truth box whose name is
empty or missing agrees with every prediction. The one-to-one matching that maximises the summed
IoU of agreeing pairs is found exactly by the Hungarian algorithm (written out below: scipy is not a
dependency of the project). Only the first 50 distinct predicted and ground-truth boxes take part in
the matching (a cap on its cubic cost), but every distinct prediction counts in the denominator.

**Reward** = (sum of the matched IoUs) / max(number of predictions, number of ground-truth
boxes), in [0, 1]: 1.0 only when every ground-truth box is predicted exactly and nothing else is,
and each missing or extra box lowers it. A row without valid ground-truth boxes (``gt_boxes``
missing, ``None``, empty or all malformed; malformed ground-truth boxes are dropped) scores 0.0:
there is nothing to localise, so this reward teaches nothing there.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Sequence
from typing import Any

from vqa_r1.rewards.text import MAX_CHARS, completion_text, score_rows

MAX_COORD = 1e7
MAX_MATCHED = 50

Box = tuple[float, float, float, float]

_NUM = r"[-+]?(?:\d{1,20}(?:\.\d{0,20})?|\.\d{1,20})(?:[eE][-+]?\d{1,4})?"
_FOUR = rf"\s*({_NUM})\s*,\s*({_NUM})\s*,\s*({_NUM})\s*,\s*({_NUM})\s*"
_BRACKET = re.compile(rf"[\[(]{_FOUR}[\])][ \t]*([^\W\d_][\w'\- \t]{{0,80}})?")
_OBJECT = re.compile(r"\{[^{}]{0,1000}\}")
_BOX_KEY = re.compile(r"""["']?\b(bbox_2d|bbox|box)\b["']?\s*:""", re.IGNORECASE)
_BOX_VALUE = re.compile(rf"\s*[\[(]{_FOUR}[\])]")
_LABEL_KEYS = ("label", "name", "category")
_LABEL = {
    key: re.compile(rf"""["']?\b{key}\b["']?\s*:\s*(?:"([^"]{{0,200}})"|'([^']{{0,200}})')""", re.I)
    for key in _LABEL_KEYS
}
_ARTICLES = ("a", "an", "the")


def _words(name: Any) -> tuple[str, ...]:
    if name is None:
        return ()
    text = re.sub(r"[_\-]", " ", str(name)[:200]).casefold()
    words = [w.strip("'\".,;:!?") for w in text.split()]
    return tuple(w for w in words if w)


def _pred_name(name: str | None) -> tuple[str, ...]:
    words = _words(name)[:6]
    return words[1:] if words and words[0] in _ARTICLES else words


def _box(values: Sequence[Any]) -> Box | None:
    """Four finite, moderate numbers with x1 <= x2 and y1 <= y2, else None."""
    try:
        if isinstance(values, str | bytes | dict) or len(values) != 4:
            return None
        nums = []
        for v in values:
            if isinstance(v, bool) or not isinstance(v, numbers.Real | str):
                return None
            f = float(v)
            if not math.isfinite(f) or abs(f) > MAX_COORD:
                return None
            nums.append(f)
    except Exception:
        return None
    x1, y1, x2, y2 = nums
    if x2 < x1 or y2 < y1:
        return None
    return (x1, y1, x2, y2)


def parse_boxes(text: str) -> list[tuple[Box | None, tuple[str, ...]]]:
    """Every box of ``text`` with its name's words, in order of appearance, repeats removed.

    A box is None when it was written but is invalid (it still counts as a prediction).
    """
    text = text[:MAX_CHARS]
    found: list[tuple[int, Box | None, tuple[str, ...]]] = []
    masked = list(text) if "{" in text else None
    for obj in _OBJECT.finditer(text):
        body = obj.group(0)
        key = _BOX_KEY.search(body)
        if key is None:
            continue
        value = _BOX_VALUE.match(body, key.end())
        box = _box(value.groups()) if value else None
        name: tuple[str, ...] = ()
        for label_key in _LABEL_KEYS:
            label = _LABEL[label_key].search(body)
            if label:
                name = _pred_name(label.group(1) if label.group(1) is not None else label.group(2))
                break
        found.append((obj.start(), box, name))
        if masked is not None:
            masked[obj.start() : obj.end()] = " " * (obj.end() - obj.start())
    scan = "".join(masked) if masked is not None and found else text
    for match in _BRACKET.finditer(scan):
        found.append((match.start(), _box(match.groups()[:4]), _pred_name(match.group(5))))
    found.sort(key=lambda item: item[0])
    seen, out = set(), []
    for _, box, name in found:
        key = (box, name) if box is not None else None
        if key is not None and key in seen:
            continue
        if key is not None:
            seen.add(key)
        out.append((box, name))
    return out


def _gt_boxes(values: Any) -> list[Box | None]:
    """The ground-truth boxes of a row (None where one is malformed), [] when there are none."""
    if values is None or isinstance(values, str | bytes | dict):
        return []
    try:
        values = list(values)
    except Exception:
        return []
    if len(values) == 4 and all(isinstance(v, numbers.Real) for v in values):
        return [_box(values)]  # one box, not a list of boxes
    return [_box(v) for v in values[:10_000]]


def iou(a: Box, b: Box) -> float:
    """Intersection over union of two valid boxes; 1.0 for identical boxes (even of no area)."""
    if a == b:
        return 1.0
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    if w <= 0 or h <= 0:
        return 0.0
    inter = w * h
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def max_weight_matching(weights: list[list[float]]) -> list[tuple[int, int]]:
    """The one-to-one (row, column) pairs with the largest summed weight (Hungarian algorithm).

    Shortest augmenting paths with row and column potentials on costs ``-weight``: O(n^2 m) for
    n <= m. Every row is assigned when rows <= columns (and every column otherwise).
    """
    if not weights or not weights[0]:
        return []
    if len(weights) > len(weights[0]):
        transposed = [list(col) for col in zip(*weights, strict=True)]
        return [(r, c) for c, r in max_weight_matching(transposed)]
    n, m = len(weights), len(weights[0])
    u = [0.0] * (n + 1)
    v = [0.0] * (m + 1)
    owner = [0] * (m + 1)  # owner[j]: the row (1-based) holding column j; 0 = free
    way = [0] * (m + 1)
    for i in range(1, n + 1):
        owner[0] = i
        j0 = 0
        minv = [math.inf] * (m + 1)
        used = [False] * (m + 1)
        while True:
            used[j0] = True
            i0 = owner[j0]
            row = weights[i0 - 1]
            delta, j1 = math.inf, 0
            for j in range(1, m + 1):
                if not used[j]:
                    cur = -row[j - 1] - u[i0] - v[j]
                    if cur < minv[j]:
                        minv[j], way[j] = cur, j0
                    if minv[j] < delta:
                        delta, j1 = minv[j], j
            for j in range(m + 1):
                if used[j]:
                    u[owner[j]] += delta
                    v[j] -= delta
                else:
                    minv[j] -= delta
            j0 = j1
            if owner[j0] == 0:
                break
        while j0:
            j1 = way[j0]
            owner[j0] = owner[j1]
            j0 = j1
    return [(owner[j] - 1, j - 1) for j in range(1, m + 1) if owner[j]]


def _agree(pred: tuple[str, ...], gt: tuple[str, ...] | None) -> bool:
    if not gt:
        return True
    return pred[: len(gt)] == gt


def box_score(text: str, gt_boxes: Any, gt_labels: Any = None) -> float:
    """The ``iou`` reward of one completion text (see the module docstring)."""
    matched, predicted, truth = box_matches(text, gt_boxes, gt_labels)
    return sum(matched) / max(predicted, truth) if truth else 0.0


def box_matches(text: str, gt_boxes: Any, gt_labels: Any = None) -> tuple[list[float], int, int]:
    """The IoUs of the one-to-one matching of ``text``'s boxes to the valid ground-truth boxes,
    with how many distinct boxes were predicted and how many ground-truth boxes there are (the
    reward's sum, denominator parts; evaluation's grounding: entities matched at IoU >= 0.5)."""
    truth = _gt_boxes(gt_boxes)
    names: list[tuple[str, ...] | None] = [None] * len(truth)
    if gt_labels is not None and not isinstance(gt_labels, str | bytes | dict):
        try:
            labels = list(gt_labels)
        except Exception:
            labels = []
        if len(labels) == len(truth):
            names = [_words(label) if label is not None else None for label in labels]
    kept = [(box, name) for box, name in zip(truth, names, strict=True) if box is not None]
    if not kept:
        return [], 0, 0
    preds = parse_boxes(text)
    predicted, total_truth = len(preds), len(kept)
    valid = [(box, name) for box, name in preds if box is not None][:MAX_MATCHED]
    kept = kept[:MAX_MATCHED]
    weights = [[iou(p, g) if _agree(pn, gn) else 0.0 for g, gn in kept] for p, pn in valid]
    # rows and columns that overlap nothing cannot add to the sum: leave them out of the matching
    live_rows = [i for i, row in enumerate(weights) if any(row)]
    live_cols = [j for j in range(len(kept)) if any(weights[i][j] for i in live_rows)]
    sub = [[weights[i][j] for j in live_cols] for i in live_rows]
    return [sub[r][c] for r, c in max_weight_matching(sub)], predicted, total_truth


def iou_reward(
    completions: Any, gt_boxes: Any = None, gt_box_labels: Any = None, **_: Any
) -> list[float]:
    """Mean IoU of the completion's boxes matched one-to-one to ``gt_boxes``; range [0, 1].

    Sum of matched IoUs over max(#predicted, #ground-truth boxes), so extra and missing boxes cost;
    with ``gt_box_labels`` only pairs whose names agree match. Rows without ground-truth boxes
    score 0.0. Formats, name agreement and caps: see the module ``vqa_r1.rewards.boxes``.
    """

    def score(completion: Any, boxes: Any, labels: Any) -> float:
        return box_score(completion_text(completion), boxes, labels)

    return score_rows(completions, [gt_boxes, gt_box_labels], score, 0.0, 1.0)
