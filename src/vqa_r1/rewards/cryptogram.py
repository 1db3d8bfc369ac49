"""The visual cryptogram rewards (data/cryptogram.py): format, decoding, correctness and partial
answer credit, each with the gate of Groundlight's r1_vlm, and the decoding and correctness
rewards without it.

The completion r1_vlm asks for (``message_decoding_sequences_env.py``, its ``check_format``)::

    <think> ... <chars> c a t _ d o g </chars> ... </think>
    <answer> cat dog </answer>

Dataset columns read by name: ``decoded_message`` (the plain message, ``cat dog``; else the text
of the ``<answer>`` block of ``solution``) and ``coded_message`` (as shown, ``x q z _ r b m``;
spaces between characters do not matter). With ``d`` the Levenshtein distance, ``truth`` the
decoded characters in the ``<chars>`` shape (``c a t _ d o g``), ``coded`` the coded message in
that shape and ``chars`` the text of the completion's ``<chars>`` block:

* ``cryptogram_format``: 1.0 when the completion is one ``<think>`` block holding exactly one
  non-empty ``<chars>`` block, then one non-empty ``<answer>`` block, nothing else around (white
  space aside), else 0.0.
* ``cryptogram_decoding``: ``1 - d(chars, truth) / max(len(truth), len(chars))``, but 0.0 when the
  decoding is closer to the coded message than to the answer (``d(chars, coded) < d(chars,
  truth)``, r1_vlm's ``chars_intermediate_reward_func``). Without the gate, copying the coded
  message into ``<chars>`` is paid for every separator and underscore it shares with the truth
  (about half the reward on a three-word message); the gate pays it nothing, and a partial
  decoding earns only once it is nearer the answer than the code.
* ``cryptogram_correct``: 1.0 when the ``<answer>`` text equals the decoded message *and*
  ``cryptogram_decoding`` paid in full, else 0.0 (r1_vlm's ``correctness_reward_func``).
* ``cryptogram_answer_partial``: r1_vlm's fourth reward (``correctness_intermediate_reward_func``,
  weighted like the others in their ``train.py``): ``1 - d(answer, message) / max(len(message),
  len(answer))`` for an answer of letters and spaces that is closer to the message than the
  ``<chars>`` form is, paid only when ``cryptogram_decoding`` paid in full.
* ``cryptogram_decoding_ungated`` and ``cryptogram_correct_ungated``: the same scores without the
  gate (no coded-message test; the answer alone): what an experiment compares against.

Reading, identical in all six: a block is read only when the completion holds exactly one opening
and one closing tag of its kind (several, or an unclosed one, score 0.0: a hedge between two
decodings is never read; r1_vlm's parser took the first block); its text is stripped and runs of
white space become one space; comparisons are case-sensitive, as r1_vlm's. A ``<chars>`` block,
truth or coded message over 512 characters scores 0.0 (a three-word message is about 50), which
bounds the quadratic distance. Every reward returns one float in [0, 1] per completion and never
raises (``rewards.text.score_rows``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import partial
from typing import Any

from vqa_r1.rewards.edit import levenshtein
from vqa_r1.rewards.text import completion_text, score_rows

MAX_DECODE_CHARS = 512
_MAX_LEN = 100_000
_TAG = "(?:think|chars|answer)"
_FORMAT = re.compile(
    rf"^\s*<think>(?:(?!</?{_TAG}>).)*"
    rf"<chars>(?:(?!</?{_TAG}>).)*\S(?:(?!</?{_TAG}>).)*</chars>"
    rf"(?:(?!</?{_TAG}>).)*</think>\s*"
    rf"<answer>(?:(?!</?{_TAG}>).)*\S(?:(?!</?{_TAG}>).)*</answer>\s*$",
    re.DOTALL,
)


def _collapse(text: str) -> str:
    return " ".join(text.split())


def block(text: str, tag: str) -> str | None:
    """The text of the one ``<tag>`` block of ``text`` (stripped, white space collapsed), or None
    when there is not exactly one opening and one closing tag, in that order."""
    opening, closing = f"<{tag}>", f"</{tag}>"
    if text.count(opening) != 1 or text.count(closing) != 1:
        return None
    start = text.index(opening) + len(opening)
    end = text.index(closing)
    if end < start:
        return None
    return _collapse(text[start:end])


def spaced(text: str) -> str:
    """A coded message in the ``<chars>`` shape: every character once, separated by spaces."""
    return " ".join("".join(text.split()))


def message_of(decoded: Any, solution: Any) -> str | None:
    """The plain message of a row: ``decoded_message``, else the answer block of ``solution``."""
    if decoded is not None:
        return _collapse(decoded if isinstance(decoded, str) else str(decoded))
    if solution is None:
        return None
    text = solution if isinstance(solution, str) else str(solution)
    inner = block(text, "answer")
    return inner if inner is not None else _collapse(text)


def chars_truth(message: str) -> str:
    """``cat dog`` -> ``c a t _ d o g``, the ``<chars>`` a right decoding holds."""
    return " _ ".join(" ".join(word) for word in message.split())


def decoding_score(text: str, message: str | None, coded: Any, gated: bool = True) -> float:
    """The (gated) decoding reward of one completion text; see the module docstring."""
    chars = block(text, "chars")
    if message is None or chars is None:
        return 0.0
    truth = chars_truth(message)
    if not truth or max(len(truth), len(chars)) > MAX_DECODE_CHARS:
        return 0.0
    distance = levenshtein(chars, truth)
    if gated:
        if coded is None:
            return 0.0
        code = spaced(coded if isinstance(coded, str) else str(coded)[: 2 * MAX_DECODE_CHARS])
        if len(code) > MAX_DECODE_CHARS or levenshtein(chars, code) < distance:
            return 0.0
    return max(0.0, 1.0 - distance / max(len(truth), len(chars)))


def correct_score(text: str, message: str | None, coded: Any, gated: bool = True) -> float:
    """1.0 when the answer is the decoded message (and, gated, the decoding paid in full)."""
    answer = block(text, "answer")
    if not message or answer is None or answer != message:
        return 0.0
    if gated and decoding_score(text, message, coded, gated=True) != 1.0:
        return 0.0
    return 1.0


def answer_partial_score(text: str, message: str | None, coded: Any) -> float:
    """Partial credit for the answer once the decoding is exactly right; see the module."""
    answer = block(text, "answer")
    if not message or not answer or max(len(answer), len(message)) > MAX_DECODE_CHARS:
        return 0.0
    if not all(c.isalpha() or c == " " for c in answer):
        return 0.0
    distance = levenshtein(answer, message)
    if levenshtein(chars_truth(message), message) <= distance:
        return 0.0
    if decoding_score(text, message, coded, gated=True) != 1.0:
        return 0.0
    return max(0.0, 1.0 - distance / max(len(message), len(answer)))


def _score_messages(
    completions: Any,
    decoded_message: Any,
    solution: Any,
    coded_message: Any,
    score: Callable[[str, str | None, Any], float],
) -> list[float]:
    """``score(text, message, coded)`` for every completion: its text, the row's plain message
    (``message_of``) and coded message (``None`` for the ungated rewards); range [0, 1]."""

    def row(completion: Any, decoded: Any, reference: Any, coded: Any) -> float:
        return score(completion_text(completion), message_of(decoded, reference), coded)

    return score_rows(completions, [decoded_message, solution, coded_message], row, 0.0, 1.0)


def cryptogram_format_reward(completions: Any, **_: Any) -> list[float]:
    """1.0 for ``<think> ... <chars> ... </chars> ... </think> <answer> ... </answer>``, else 0.0.

    Range {0, 1}: one think block holding exactly one non-empty chars block, then one non-empty
    answer block, nothing around; a completion over 100,000 characters scores 0.0.
    """

    def score(completion: Any) -> float:
        text = completion_text(completion)
        return 1.0 if len(text) <= _MAX_LEN and _FORMAT.match(text) is not None else 0.0

    return score_rows(completions, [], score, 0.0, 1.0)


def cryptogram_decoding_reward(
    completions: Any,
    decoded_message: Any = None,
    coded_message: Any = None,
    solution: Any = None,
    **_: Any,
) -> list[float]:
    """Gated decoding credit; range [0, 1].

    ``1 - d(chars, truth) / max(len(truth), len(chars))``, or 0.0 when the ``<chars>`` block is
    closer to the coded message than to the truth (``d(chars, coded) < d(chars, truth)``) or
    there is no coded message to check; see ``vqa_r1.rewards.cryptogram``.
    """
    return _score_messages(completions, decoded_message, solution, coded_message, decoding_score)


def cryptogram_decoding_ungated_reward(
    completions: Any, decoded_message: Any = None, solution: Any = None, **_: Any
) -> list[float]:
    """Decoding credit without the gate; range [0, 1].

    ``1 - d(chars, truth) / max(len(truth), len(chars))``: copying the coded message earns the
    characters it shares with the truth (the hack the gate closes).
    """
    score = partial(decoding_score, gated=False)
    return _score_messages(completions, decoded_message, solution, None, score)


def cryptogram_correct_reward(
    completions: Any,
    decoded_message: Any = None,
    coded_message: Any = None,
    solution: Any = None,
    **_: Any,
) -> list[float]:
    """Gated correctness; range {0, 1}.

    1.0 iff the ``<answer>`` block equals the decoded message and ``cryptogram_decoding`` pays
    1.0 (the ``<chars>`` block is exactly right), else 0.0.
    """
    return _score_messages(completions, decoded_message, solution, coded_message, correct_score)


def cryptogram_correct_ungated_reward(
    completions: Any, decoded_message: Any = None, solution: Any = None, **_: Any
) -> list[float]:
    """Correctness without the gate; range {0, 1}: 1.0 iff the ``<answer>`` block equals the
    decoded message, whatever the ``<chars>`` block says."""
    score = partial(correct_score, gated=False)
    return _score_messages(completions, decoded_message, solution, None, score)


def cryptogram_answer_partial_reward(
    completions: Any,
    decoded_message: Any = None,
    coded_message: Any = None,
    solution: Any = None,
    **_: Any,
) -> list[float]:
    """Partial answer credit, gated on an exactly right decoding; range [0, 1].

    ``1 - d(answer, message) / max(len(message), len(answer))`` when ``cryptogram_decoding`` pays
    1.0, the answer holds only letters and spaces, and it is closer to the message than the
    ``<chars>`` form of it is; else 0.0 (r1_vlm's ``correctness_intermediate_reward_func``).
    """
    return _score_messages(
        completions, decoded_message, solution, coded_message, answer_partial_score
    )
