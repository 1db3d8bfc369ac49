"""The one final-answer extractor shared by rewards, evaluation, scoring and judge statistics.

Two rules exist because they answer different questions:

* ``robust`` (default) is what we trust for our own numbers. It reads the last ``<answer>`` block
  (an unclosed one too: generation often stops before the closing tag), else the word after the last
  ``Answer:``, else the last non-empty line, and normalises case, whitespace and punctuation. Small
  models such as SmolVLM answer Yes/No, so those read as True/False.
* ``study`` reproduces the published VSR study's scoring to the letter, so that our figures on its
  response files can be compared with the ones it published: the first word after ``Answer:``, else
  the last non-empty line (minus an ``Answer`` prefix), compared after ``strip().lower()`` only.

Nothing here raises on any string: reward functions call it on arbitrary model output.
"""

from __future__ import annotations

import re
import string
from typing import Literal

AnswerRule = Literal["robust", "study"]
ANSWER_RULES: tuple[str, ...] = ("robust", "study")

_ANSWER_OPEN = re.compile(r"<answer>", re.IGNORECASE)
_ANSWER_CLOSE = re.compile(r"</answer>", re.IGNORECASE)
_ANSWER_COLON = re.compile(r"answer\s*:\s*([^\s]*)", re.IGNORECASE)
_STUDY_ANSWER = re.compile(r"Answer:\s*(\w+)", re.IGNORECASE)
_TAG = re.compile(r"</?\s*(?:think|answer)\s*>", re.IGNORECASE)
_SYNONYMS = {"yes": "true", "no": "false", "correct": "true", "incorrect": "false"}
_PUNCT = string.punctuation + "“”‘’«»。，！？"
_MAX_SCAN = 200_000  # answers sit at the end; bounding the scan keeps huge strings cheap


def check_rule(rule: str) -> AnswerRule:
    if rule not in ANSWER_RULES:
        raise ValueError(f"unknown answer rule {rule!r}: use one of {', '.join(ANSWER_RULES)}")
    return rule  # type: ignore[return-value]


def _last_nonempty_line(text: str) -> str:
    for line in reversed(text.splitlines()):
        if line.strip():
            return line.strip()
    return ""


def _robust_raw(text: str) -> str:
    opens = list(_ANSWER_OPEN.finditer(text))
    if opens:
        tail = text[opens[-1].end() :]
        close = _ANSWER_CLOSE.search(tail)
        inner = tail[: close.start()] if close else tail
        if inner.strip():
            return inner
    colons = list(_ANSWER_COLON.finditer(text))
    for match in reversed(colons):
        if match.group(1).strip(_PUNCT):
            return match.group(1)
    return _last_nonempty_line(_TAG.sub("\n", text))


def normalize(answer: str) -> str:
    """Case-, whitespace- and punctuation-insensitive form; Yes/No read as True/False."""
    words = [w.strip(_PUNCT) for w in answer.lower().split()]
    words = [w for w in words if w]
    if not words:
        return ""
    if len(words) == 1 or words[0] in ("true", "false", "yes", "no"):
        word = _SYNONYMS.get(words[0], words[0])
        if word in ("true", "false"):
            return word
    return " ".join(words)


def _study_raw(text: str) -> str:
    match = _STUDY_ANSWER.search(text)
    if match:
        return match.group(1).strip()
    last = _last_nonempty_line(text)
    if last.lower().startswith("answer"):
        parts = last.split(":", 1)
        return parts[1].strip() if len(parts) == 2 else last
    return last


def extract_answer(text: object, rule: str = "robust") -> str:
    """Return the final answer of a completion in comparable form ("true", "false", or other text)."""
    check_rule(rule)
    if not isinstance(text, str):
        text = "" if text is None else str(text)
    if len(text) > _MAX_SCAN:
        text = text[-_MAX_SCAN:]
    if rule == "study":
        return _study_raw(text).strip().lower()
    return normalize(_robust_raw(text))


def label_of(reference: object, rule: str = "robust") -> str:
    """Comparable form of a reference label ("  True ", "<answer> False </answer>", True, 1)."""
    check_rule(rule)
    if isinstance(reference, bool):
        return "true" if reference else "false"
    if isinstance(reference, int):
        return "true" if reference == 1 else "false"
    text = "" if reference is None else str(reference)
    if rule == "study":
        return text.strip().lower()
    return extract_answer(text, "robust")


def is_correct(prediction: object, reference: object, rule: str = "robust") -> bool:
    answer = extract_answer(prediction, rule)
    return bool(answer) and answer == label_of(reference, rule)


_CHOICE_LETTERS = re.compile(r"(?<![A-Za-z])([A-Z])(?![A-Za-z])")


def extract_choices(text: object) -> frozenset[str]:
    """The set of option letters a multiple-choice answer names ("A, C" -> {"A", "C"}).

    Reads the robust rule's final answer text (last ``<answer>`` block, else ``Answer:``, else the
    last line) before case folding, and keeps single capital letters standing alone, so "A and C",
    "(A) (C)" and "A,C" agree while the words of a sentence ("A car") are not options beyond "A".
    An empty set means no answer; nothing here raises.
    """
    try:
        if not isinstance(text, str):
            text = "" if text is None else str(text)
        raw = _robust_raw(text[-_MAX_SCAN:])
        return frozenset(_CHOICE_LETTERS.findall(raw[:1000]))
    except Exception:
        return frozenset()
