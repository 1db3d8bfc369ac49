"""The ``reasoning_steps`` reward: partial credit for each step of a reference reasoning stated.

Why: the accuracy reward pays a True/False answer, which a guess gets right half the time. On a
question that needs several readings (the two-image task: each image's layout, then the two end
colours), a completion that misreads an image still earns the accuracy reward on half the pairs,
so GRPO reinforces wrong readings as often as right ones and the group advantage says little about
which reading was right. Where a row carries the reasoning its label follows from (the dataset's
``reasoning`` column, e.g. ``data/two_image.py``'s ``left to right: red, blue. left to right:
green, red. left: red, green.``), each step read right is evidence GRPO can reward on its own.

The score is the share of the reference's steps whose reading the completion states at the same
place:

    steps(text)  = the think block's sentences (split after each ".", case-folded, whitespace
                   collapsed, the final "." dropped)
    reading(s)   = the part of step s after its last ":" (the whole step without one)
    reward       = #{i : reading(steps(completion)[i]) == reading(steps(reference)[i])}
                   / len(steps(reference))

A step is a label and what was read (``top to bottom: green, red``: the reading is ``green,
red``); the labels are the format, the readings are what can be right or wrong, so only the
readings are compared (a user's data may label its steps with words a model writes less surely
than its readings: with the first two-image data's ``first:`` / ``second:`` labels, a tiny model
sampled at temperature 0.3 wrote ``fir le:`` or ``secon=:`` in 73 of 80 logged completions, most
of them reading the colours as its greedy answer did). Position by position, not "somewhere in the
text": listing every possible reading earns no more than stating one. The think block is the
text between ``<think>`` (absent when a Thinking model's template opened it) and ``</think>``;
without ``</think>``, the text before ``<answer>``.
Range [0, 1]; a row without a reference reasoning scores 0.0.
"""

from __future__ import annotations

import re
from typing import Any

from vqa_r1.rewards.text import completion_text, score_rows

REASONING_REWARD = "reasoning_steps"  # its registered name (the launch checks its column)
MAX_STEP_CHARS = 4_000  # the part of a think block read: far beyond any reference here

_SENTENCE_END = re.compile(r"\.(?:\s+|$)")


def think_text(text: str) -> str:
    """The completion's reasoning: inside the think block, else before the answer block."""
    lowered = text.lower()
    start = lowered.find("<think>")
    start = 0 if start < 0 else start + len("<think>")
    end = lowered.find("</think>", start)
    if end < 0:
        end = lowered.find("<answer>", start)
    return text[start : end if end >= 0 else len(text)][:MAX_STEP_CHARS]


def steps(text: str) -> list[str]:
    """The sentences of a reasoning, normalised (case-folded, whitespace collapsed, no final ".")."""
    normal = " ".join(text.casefold().split())
    return [s.strip() for s in _SENTENCE_END.split(normal) if s.strip()]


def reading(step: str) -> str:
    """What a step read: the part after its last ":" (the label before it is format)."""
    return step.rpartition(":")[2].strip()


def steps_score(text: str, reference: Any) -> float:
    """The ``reasoning_steps`` reward of one completion text (see the module docstring)."""
    if not isinstance(reference, str) or not reference.strip():
        return 0.0
    wanted = [reading(s) for s in steps(think_text(reference))]
    if not wanted:
        return 0.0
    said = [reading(s) for s in steps(think_text(text))]
    return sum(a == b for a, b in zip(said, wanted, strict=False)) / len(wanted)


def reasoning_steps_reward(completions: Any, reasoning: Any = None, **_: Any) -> list[float]:
    """Share of the row's reference reasoning steps (``reasoning`` column) read right, in place.

    Range [0, 1]; see ``vqa_r1.rewards.reasoning``. A row without ``reasoning`` scores 0.0.
    """

    def score(completion: Any, reference: Any) -> float:
        return steps_score(completion_text(completion), reference)

    return score_rows(completions, [reasoning], score, 0.0, 1.0)


def has_reference(ds: Any) -> bool:
    """Whether a dataset split gives the reward something to compare: a ``reasoning`` column
    with at least one non-empty text."""
    return "reasoning" in ds.column_names and any(
        isinstance(r, str) and r.strip() for r in ds["reasoning"]
    )


def missing_reference(where: str) -> str:
    """The one-line refusal of a GRPO run whose training rows carry no reference reasoning."""
    return (
        f"train.reward_funcs names {REASONING_REWARD}, but {where} has no 'reasoning' column "
        "(or only empty ones): the reward would be 0 on every row. Add each row's reasoning "
        f"(docs/datasets.md) or drop {REASONING_REWARD} from train.reward_funcs"
    )
