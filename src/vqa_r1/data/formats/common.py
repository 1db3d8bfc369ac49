"""Pieces every release reader shares: the True/False claim row and tolerant file look-ups.

Why the claim row has both ``caption`` and ``problem``: the VSR-schema code builds its question as
``problem_text(caption)``; a claim assembled from (subject, predicate, object) has no sentence of its
own, so its caption is "{subject} {predicate} {object}?" and ``problem`` holds the same question
spelled out, which generic code can print without knowing the prompt wording.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from vqa_r1.errors import UserError

CLAIM_PREFIX = "Is the following statement true: "
CLAIM_COLUMNS = (
    "image_path",
    "caption",
    "problem",
    "label",
    "relation",
    "subj",
    "obj",
    "subject",
    "predicate",
    "object",
)


LABELS_ACCEPTED = "0/1 integers or booleans (true/false)"


def is_label(value: Any) -> bool:
    """A True/False label as the releases and save_to_disk folders store it: 0, 1, True, False.

    Strings ("yes", "True", "0") and other numbers (2) are not: ``bool("False")`` is True and a
    label 2 read as ``label == 1`` is False, both silently wrong.
    """
    return isinstance(value, bool) or (isinstance(value, int) and value in (0, 1))


def check_labels(values: Iterable[Any], where: str, column: str = "label") -> None:
    """One error naming the column, the values found that are not labels, and what is accepted."""
    found: dict[str, int] = {}
    for value in values:
        if not is_label(value):
            key = repr(value)
            found[key] = found.get(key, 0) + 1
    if found:
        listed = ", ".join(f"{v} ({n} rows)" for v, n in list(found.items())[:8])
        more = f" and {len(found) - 8} more values" if len(found) > 8 else ""
        raise UserError(
            f"{where}: column {column!r} holds values that are not True/False labels: "
            f"{listed}{more}. Accepted: {LABELS_ACCEPTED}; map the column to those first "
            '(nothing is guessed: 2 or "no" is not read as False).'
        )


def claim_row(subject: str, predicate: str, obj: str, label: Any, image_path: Path | str) -> dict:
    """One True/False claim; ``label`` already passed ``check_labels``."""
    caption = f"{subject.strip()} {predicate.strip()} {obj.strip()}?"
    return {
        "image_path": str(image_path),
        "caption": caption,
        "problem": CLAIM_PREFIX + caption,
        "label": int(label),
        "relation": predicate,
        "subj": subject,
        "obj": obj,
        "subject": subject,
        "predicate": predicate,
        "object": obj,
    }


def string_features(*names: str, ints: tuple[str, ...] = ("label",)) -> Any:
    """Explicit column types, so that an empty split is saved (and typed) like a full one."""
    from datasets import Features, Value

    return Features({n: Value("int64" if n in ints else "string") for n in names})


def claim_features() -> Any:
    return string_features(*CLAIM_COLUMNS)


def first_existing(candidates: Iterable[Path], default: Path | None = None) -> Path | None:
    """The first candidate that exists, else ``default``: a missing image is reported later, by
    ``check_image_paths``, with the count and the paths (nothing is dropped here)."""
    for path in candidates:
        if path.exists():
            return path
    return default


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise UserError(f"{path}: not valid JSON ({err})") from None


def name_of(entity: Any) -> str:
    """An object's name whether the release stores a dict with ``name`` or the bare string."""
    if isinstance(entity, dict):
        return str(entity.get("name", ""))
    return str(entity)


_NOTICED: set[str] = set()


def notice(message: str) -> None:
    """A remark the user must see (which split was chosen, which item was dropped), on stderr,
    once per process: printed, not only logged or written to a report nobody opens."""
    if message not in _NOTICED:
        _NOTICED.add(message)
        print(f"note: {message}", file=sys.stderr, flush=True)


COUNT_COLUMNS = (
    "image_path",
    "problem",
    "caption",
    "solution",
    "label",
    "answer_type",
    "relation",
)


def count_row(
    question: str, count: int, image_path: Path | str, solution: str | None = None
) -> dict:
    """One counting question: ``solution`` "<answer> N </answer>" (R1-V's training form unless the
    release has its own), ``label`` the count as text, ``answer_type`` "number" (scored by the
    counting rules, answers.py) and ``relation`` "count N", so per-relation accuracy is per count."""
    return {
        "image_path": str(image_path),
        "problem": question,
        "caption": question,
        "solution": solution if solution is not None else f"<answer> {count} </answer>",
        "label": str(count),
        "answer_type": "number",
        "relation": f"count {count}",
    }


def count_features() -> Any:
    return string_features(*COUNT_COLUMNS, ints=())
