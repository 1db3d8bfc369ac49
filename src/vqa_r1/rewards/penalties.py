"""Non-positive shaping terms: ``length_penalty`` and ``repetition_penalty``.

Words are whitespace-separated runs of characters (a cheap, tokenizer-free stand-in for tokens: one
English word is about 1.3 tokens). Both read at most the first 200,000 characters of a completion.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

from vqa_r1.rewards.text import MAX_CHARS, RewardFn, completion_text, score_rows

DEFAULT_LENGTH_LIMIT = 200
"""Soft limit in words: ~260 tokens, half the 512-token ``max_completion_length`` of the GRPO
recipes, so the penalty reaches -1 about where generation is cut off."""

NGRAM = 4


def _limit(value: Any, default: float) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return default
    value = float(value)
    return value if math.isfinite(value) and value >= 1 else default


def length_score(text: str, limit: float) -> float:
    """0.0 up to ``limit`` words, then linearly down to -1.0 at ``2 * limit`` words and beyond."""
    words = len(text[:MAX_CHARS].split())
    return -min(1.0, max(0.0, (words - limit) / limit))


def make_length_penalty(limit: float = DEFAULT_LENGTH_LIMIT) -> RewardFn:
    """A ``length_penalty`` with soft limit ``limit`` words (an invalid limit raises ValueError).

    The function is named ``length_penalty`` for the default limit and ``length_penalty_<limit>``
    otherwise (TRL names its reward metrics after ``__name__``). A dataset column
    ``length_limit`` (a positive number per row) overrides the limit row by row.
    """
    checked = _limit(limit, math.nan)
    if math.isnan(checked):
        raise ValueError(f"length limit must be a finite number >= 1, got {limit!r}")

    def length_penalty(completions: Any, length_limit: Any = None, **_: Any) -> list[float]:
        def score(completion: Any, row_limit: Any) -> float:
            return length_score(completion_text(completion), _limit(row_limit, checked))

        return score_rows(completions, [length_limit], score, -1.0, 0.0)

    shown = f"{checked:g}"
    if checked != DEFAULT_LENGTH_LIMIT:
        length_penalty.__name__ = length_penalty.__qualname__ = f"length_penalty_{shown}"
    length_penalty.__doc__ = (
        f"Length penalty; range [-1, 0]. 0.0 up to N = {shown} words (or the row's "
        "``length_limit``), then -(words - N) / N, reaching -1.0 at 2N words and staying there."
    )
    return length_penalty


length_penalty = make_length_penalty()


def repetition_score(text: str, n: int = NGRAM) -> float:
    """Minus the share of the word n-grams that repeat an earlier one (0.0 below n words)."""
    words = text[:MAX_CHARS].casefold().split()
    total = len(words) - n + 1
    if total <= 0:
        return 0.0
    distinct = len(set(zip(*(words[i:] for i in range(n)), strict=False)))  # shifted copies
    return -(total - distinct) / total


def repetition_penalty(completions: Any, **_: Any) -> list[float]:
    """Repetition penalty; range (-1, 0].

    -(repeated 4-grams / all 4-grams) over the case-folded words of the completion, where an n-gram
    is repeated when the same four words occurred earlier. 0.0 for text without repeats or shorter
    than four words; a loop of one phrase approaches -1.0 (k >= 2 copies of a 4-word phrase:
    -(4k - 7) / (4k - 3)). Degenerate loops are a common GRPO failure, and n = 4 lets ordinary reasoning reuse
    short phrases ("the red circle") without cost.
    """

    def score(completion: Any) -> float:
        return repetition_score(completion_text(completion))

    return score_rows(completions, [], score, -1.0, 0.0)
