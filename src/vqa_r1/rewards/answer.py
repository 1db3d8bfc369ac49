"""The answer rewards: is the final answer right (``accuracy``), is the output well formed
(``format``; ``format_thinking`` for a model whose chat template opens the think block).

What the format reward expects, per family: Qwen2.5-VL, Qwen3-VL Instruct, InternVL and SmolVLM
write the whole ``<think> ... </think> <answer> ... </answer>``; a Qwen3-VL Thinking checkpoint's
template ends the prompt with ``<think>``, so its completion is ``... </think> <answer> ...
</answer>`` with no opening tag, and a second ``<think>`` (the prompt does not ask for one)
is malformed. The registry marks those checkpoints (ModelSpec.thinking), their recipe selects
``format_thinking``, and load_config refuses the other pairing."""

from __future__ import annotations

import re
from typing import Any

from vqa_r1.answers import is_correct
from vqa_r1.rewards.text import completion_text, score_rows

_FORMAT = re.compile(
    r"^\s*<think>(?:(?!</?think>|</?answer>).)*</think>\s*<answer>(?:(?!</?answer>|</?think>).)+</answer>\s*$",
    re.DOTALL | re.IGNORECASE,
)
_MAX_LEN = 100_000


def accuracy_reward(
    completions: Any, solution: Any = None, answer_rule: str = "robust", **_: Any
) -> list[float]:
    """1.0 when the completion's final answer equals the solution's, else 0.0.

    Range [0, 1]. The answer is read by ``vqa_r1.answers`` under ``answer_rule`` (``robust`` or
    ``study``); a row without a solution scores 0.0.
    """

    def score(completion: Any, reference: Any) -> float:
        if reference is None:
            return 0.0
        return float(is_correct(completion_text(completion), reference, answer_rule))

    return score_rows(completions, [solution], score, 0.0, 1.0)


def format_reward(completions: Any, **_: Any) -> list[float]:
    """1.0 for exactly one think block followed by one non-empty answer block, nothing around.

    Range {0, 1}; a completion over 100,000 characters scores 0.0 without being matched.
    """

    def score(completion: Any) -> float:
        text = completion_text(completion)
        return 1.0 if len(text) <= _MAX_LEN and _FORMAT.match(text) is not None else 0.0

    return score_rows(completions, [], score, 0.0, 1.0)


def format_thinking_reward(completions: Any, **_: Any) -> list[float]:
    """``format`` for a completion that continues a think block the prompt opened: its reasoning,
    ``</think>``, then one non-empty answer block; an opening ``<think>`` of its own scores 0.

    Range {0, 1}."""

    def score(completion: Any) -> float:
        text = completion_text(completion)
        if len(text) > _MAX_LEN or text.lstrip().lower().startswith("<think>"):
            return 0.0
        return 1.0 if _FORMAT.match(f"<think>{text}") is not None else 0.0

    return score_rows(completions, [], score, 0.0, 1.0)
