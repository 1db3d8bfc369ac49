"""Reading what TRL hands a reward: the text of a completion and dataset columns row by row.

TRL passes ``completions`` (strings or conversational lists) and every dataset column as a list
of the same length. Nothing here trusts that: :func:`rows` and :func:`column` turn any input into
aligned rows, and :func:`score_rows` turns one scoring function into a reward that returns exactly
one finite float per completion, inside a given range, whatever happens inside.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

MAX_CHARS = 200_000  # the part of a huge completion a reward reads (answers sit at the end)

RewardFn = Callable[..., list[float]]


def completion_text(completion: Any) -> str:
    """The assistant text of a completion, whatever shape TRL hands over."""
    try:
        if isinstance(completion, str):
            return completion
        if isinstance(completion, list):
            parts = []
            for message in completion:
                content = message.get("content", "") if isinstance(message, dict) else message
                if isinstance(content, list):
                    content = " ".join(
                        str(c.get("text", "")) for c in content if isinstance(c, dict)
                    )
                parts.append(str(content))
            return "\n".join(parts)
        return "" if completion is None else str(completion)
    except Exception:
        return ""


def rows(completions: Any) -> list[Any]:
    """The completions as a list: a list or tuple as given, one string (or other value) as one
    row, ``None`` or an unreadable iterable as none."""
    if isinstance(completions, list | tuple):
        return list(completions)
    if completions is None:
        return []
    if isinstance(completions, str | bytes | dict):
        return [completions]
    try:
        return list(completions)
    except Exception:
        return [completions]


def column(values: Any, n: int) -> list[Any]:
    """A dataset column aligned to ``n`` rows: a list (or array) is cut or padded with ``None``,
    ``None`` is ``None`` everywhere, and any other single value is broadcast to every row."""
    if values is None:
        return [None] * n
    if hasattr(values, "tolist") and not isinstance(values, str | bytes):
        try:
            values = values.tolist()
        except Exception:
            return [None] * n
    if isinstance(values, list | tuple):
        values = list(values[:n])
        return values + [None] * (n - len(values))
    return [values] * n


def score_rows(
    completions: Any,
    columns: Sequence[Any],
    score: Callable[..., float],
    low: float,
    high: float,
) -> list[float]:
    """``score(completion, *row_values)`` for every completion, as a reward's output.

    Exactly one float per completion; an exception, a non-number or a non-finite value scores 0.0
    and every value is clipped to ``[low, high]``, so the range a reward documents is guaranteed.
    """
    items = rows(completions)
    aligned = [column(values, len(items)) for values in columns]
    out = []
    for i, item in enumerate(items):
        try:
            value = float(score(item, *(values[i] for values in aligned)))
        except Exception:
            value = 0.0
        if not math.isfinite(value):
            value = 0.0
        out.append(min(high, max(low, value)))
    return out
