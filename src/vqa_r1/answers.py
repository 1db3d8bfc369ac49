"""The one final-answer extractor shared by rewards, evaluation, scoring and judge statistics.

Two rules exist because they answer different questions:

* ``robust`` (default) is what we trust for our own numbers. It reads the last ``<answer>`` block
  (an unclosed one too: generation often stops before the closing tag), else the word after the last
  ``Answer:``, else the last non-empty line, and normalises case, whitespace and punctuation. Small
  models such as SmolVLM answer Yes/No, so those read as True/False.
* ``study`` reproduces the published VSR study's scoring to the letter, so that our figures on its
  response files can be compared with the ones it published: the first word after ``Answer:``, else
  the last non-empty line (minus an ``Answer`` prefix), compared after ``strip().lower()`` only.

Counting answers have two rules of their own (``NUMBER_RULES``; answers are canonical integer
strings such as "3", "" when none is read):

* ``number`` is the robust rule for our counts: the robust rule's final answer text (last
  ``<answer>`` block, else ``Answer:``, else the last line), in which the last number written in
  digits or words ("3", "3.0", "three", "twenty-one", "none") is the answer; "3 objects",
  "<answer> 3 </answer> hope this helps" and "There are three." all read "3".
* ``r1v_count`` is R1-V's evaluation rule to the letter (Deep-Agent/R1-V,
  src/eval/test_qwen2vl_counting_superclevr.py, ``extract_number_answer``): the first match of
  ``<answer>\\s*(\\d+)\\s*</answer>``, case-sensitive, read with ``int``. Quirks kept: only the
  first such block counts, a block holding anything besides one run of digits ("3 objects",
  "three", "-3", "3.0", "<answer>3, 4</answer>") is skipped, an unclosed block or no block reads
  nothing (wrong), "007" reads 7. Their script reads at most the first 200,000 characters here
  (their outputs are at most 256 tokens) and never raises on a digit run Python's ``int`` refuses.

Nothing here raises on any string: reward functions call it on arbitrary model output.
"""

from __future__ import annotations

import re
import string
from typing import Literal

AnswerRule = Literal["robust", "study", "number", "r1v_count"]
ANSWER_RULES: tuple[str, ...] = ("robust", "study", "number", "r1v_count")
NUMBER_RULES: tuple[str, ...] = ("number", "r1v_count")

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
    """Return the final answer of a completion in comparable form ("true", "false", or other text;
    a canonical integer string such as "3" under the counting rules, "" when none is read)."""
    check_rule(rule)
    if not isinstance(text, str):
        text = "" if text is None else str(text)
    if rule == "r1v_count":
        return _r1v_count(text[:_MAX_SCAN])
    if len(text) > _MAX_SCAN:
        text = text[-_MAX_SCAN:]
    if rule == "study":
        return _study_raw(text).strip().lower()
    if rule == "number":
        return read_number(_robust_raw(text))
    return normalize(_robust_raw(text))


def label_of(reference: object, rule: str = "robust") -> str:
    """Comparable form of a reference label ("  True ", "<answer> False </answer>", True, 1)."""
    check_rule(rule)
    if rule in NUMBER_RULES:
        return number_label(reference)
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


# --- counting answers -------------------------------------------------------------------------

_R1V_ANSWER = re.compile(r"<answer>\s*(\d+)\s*</answer>")
_UNITS = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen"
).split()
_TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()
_WORDS = {w: i for i, w in enumerate(_UNITS)} | {w: 20 + 10 * i for i, w in enumerate(_TENS)}
_WORDS |= {"none": 0, "no objects": 0, "a dozen": 12, "dozen": 12}
_WORD_PATTERN = "|".join(sorted((re.escape(w) for w in _WORDS), key=len, reverse=True))
_NUMBER = re.compile(
    rf"(?<![\w.])(-?\d+(?:\.\d+)?)(?![\w])|\b((?:{_WORD_PATTERN})(?:[\s-]+(?:{_WORD_PATTERN}))?)\b",
    re.IGNORECASE,
)
_MAX_NUMBER_SCAN = 10_000  # a final answer is short; a huge one is read from its end


def canonical_number(digits: str) -> str:
    """ "007" -> "7", "3.0" -> "3", "-0" -> "0", "2.50" -> "2.5", as text (no ``int``: a number of
    any length is canonicalised without Python's digit limit)."""
    sign = "-" if digits.startswith("-") else ""
    whole, _, frac = digits.lstrip("-").partition(".")
    whole = whole.lstrip("0") or "0"
    frac = frac.rstrip("0")
    out = f"{whole}.{frac}" if frac else whole
    return "" if not out else ("" if out == "0" else sign) + out


def _words_value(text: str) -> int | None:
    parts = [p for p in re.split(r"[\s-]+", text.lower()) if p]
    joined = " ".join(parts)
    if joined in _WORDS:
        return _WORDS[joined]
    if len(parts) == 2 and parts[0] in _TENS and parts[1] in _UNITS[1:10]:
        return _WORDS[parts[0]] + _WORDS[parts[1]]
    return None


def read_number(text: object) -> str:
    """The last number in ``text`` (digits, or words up to ninety-nine), canonical; "" for none."""
    try:
        if not isinstance(text, str):
            text = "" if text is None else str(text)
        found = ""
        for match in _NUMBER.finditer(text[-_MAX_NUMBER_SCAN:]):
            if match.group(1) is not None:
                found = canonical_number(match.group(1))
                continue
            value = _words_value(match.group(2))
            if value is None:  # "twenty three" not read as one: its last word
                value = _words_value(re.split(r"[\s-]+", match.group(2))[-1])
            if value is not None:
                found = str(value)
        return found
    except Exception:
        return ""


def _r1v_count(text: str) -> str:
    match = _R1V_ANSWER.search(text)
    if match is None:
        return ""
    try:
        return str(int(match.group(1)))
    except ValueError:  # more digits than int() reads: the same value, as text
        return canonical_number("".join(str(int(c)) for c in match.group(1)))


def number_label(reference: object) -> str:
    """A count reference (4, "4", "<answer> 4 </answer>", 4.0) as a canonical integer string."""
    if isinstance(reference, bool):
        return ""
    if isinstance(reference, int):
        return canonical_number(str(reference))
    if isinstance(reference, float):
        return canonical_number(repr(reference)) if reference == reference else ""
    return extract_answer(reference, "number")
