"""The ``edit_distance`` reward for visual cryptograms (unscramble, decode, spell from an image).

It is gated: it pays only when the answer is closer to the target than the starting text was, so
copying the input (or any answer no better than it) earns nothing. With ``d`` the Levenshtein
distance (insertions, deletions and substitutions of characters, each costing 1):

    reward = (d(input, target) - d(answer, target)) / max(1, d(input, target))   if positive
             0.0                                                                 otherwise

in [0, 1], and 1.0 exactly when the answer equals the target (and the input did not).

* ``answer``: the completion's final answer, read by the robust reader of ``vqa_r1.answers`` (the
  last ``<answer>`` block, an unclosed one too, else the word after the last ``Answer:``, else the
  last non-empty line).
* ``target``: the dataset column ``target``, else ``solution``; when it holds an ``<answer>`` block,
  that block's text.
* ``input``: the dataset column ``input_text`` (e.g. the scrambled word).

All three are case-folded with whitespace runs collapsed to one space and the ends stripped, then
cut to their first 256 characters, which bounds the work (the quadratic distance is computed on at
most 256 x 256 cells and stops early once it cannot beat the input). A row without a target or an
input, or whose input already equals the target, scores 0.0.
"""

from __future__ import annotations

from typing import Any

from vqa_r1.answers import _robust_raw
from vqa_r1.rewards.text import MAX_CHARS, completion_text, score_rows

MAX_EDIT_CHARS = 256


def _normal(text: str) -> str:
    return " ".join(text.casefold().split())[:MAX_EDIT_CHARS]


def _target_text(value: Any) -> str:
    text = value if isinstance(value, str) else str(value)
    if "<answer>" in text.lower():
        text = _robust_raw(text[-MAX_CHARS:])
    return _normal(text)


def levenshtein(a: str, b: str, limit: int | None = None) -> int:
    """Edit distance of ``a`` and ``b``; with ``limit``, any result above it is ``limit + 1``."""
    if len(a) < len(b):
        a, b = b, a
    if limit is not None and len(a) - len(b) > limit:
        return limit + 1
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        if limit is not None and min(current) > limit:
            return limit + 1
        previous = current
    return previous[-1] if limit is None else min(previous[-1], limit + 1)


def edit_score(text: str, target: Any, input_text: Any) -> float:
    """The ``edit_distance`` reward of one completion text (see the module docstring)."""
    if target is None or input_text is None:
        return 0.0
    goal = _target_text(target)
    start = _normal(input_text if isinstance(input_text, str) else str(input_text))
    base = levenshtein(start, goal)
    if base == 0:
        return 0.0
    answer = _normal(_robust_raw(text[-MAX_CHARS:]))
    distance = levenshtein(answer, goal, limit=base - 1)
    return max(0.0, (base - distance) / max(1, base))


def edit_distance_reward(
    completions: Any, target: Any = None, input_text: Any = None, solution: Any = None, **_: Any
) -> list[float]:
    """Gated edit-distance progress; range [0, 1].

    (d(input, target) - d(answer, target)) / max(1, d(input, target)) when the answer is closer to
    ``target`` (else ``solution``) than ``input_text`` is, else 0.0; see ``vqa_r1.rewards.edit``.
    """
    targets = target if target is not None else solution

    def score(completion: Any, goal: Any, start: Any) -> float:
        return edit_score(completion_text(completion), goal, start)

    return score_rows(completions, [targets, input_text], score, 0.0, 1.0)
