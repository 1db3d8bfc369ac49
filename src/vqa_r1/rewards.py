"""Reward functions with TRL's signature, registered by name; weights live in recipes.

TRL calls ``fn(prompts=..., completions=..., **dataset_columns)`` and expects one float per
completion. Completions are plain strings or conversational lists; both are handled. A reward must
never raise (one exception kills hours of GRPO), so every function turns any input into a float.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from vqa_r1.answers import extract_answer, label_of

RewardFn = Callable[..., list[float]]
_FORMAT = re.compile(
    r"^\s*<think>(?:(?!</?think>|</?answer>).)*</think>\s*<answer>(?:(?!</?answer>|</?think>).)+</answer>\s*$",
    re.DOTALL | re.IGNORECASE,
)
_MAX_LEN = 100_000


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


def accuracy_reward(
    completions: Sequence[Any], solution: Sequence[Any], answer_rule: str = "robust", **_: Any
) -> list[float]:
    """1.0 when the completion's final answer equals the solution's, else 0.0."""
    rewards = []
    for completion, reference in zip(completions, solution, strict=False):
        try:
            answer = extract_answer(completion_text(completion), answer_rule)
            rewards.append(float(bool(answer) and answer == label_of(reference, answer_rule)))
        except Exception:
            rewards.append(0.0)
    return rewards


def format_reward(completions: Sequence[Any], **_: Any) -> list[float]:
    """1.0 for exactly one think block followed by one non-empty answer block, nothing around."""
    rewards = []
    for completion in completions:
        try:
            text = completion_text(completion)
            ok = len(text) <= _MAX_LEN and _FORMAT.match(text) is not None
            rewards.append(1.0 if ok else 0.0)
        except Exception:
            rewards.append(0.0)
    return rewards


REWARDS: dict[str, RewardFn] = {"accuracy": accuracy_reward, "format": format_reward}


def get_rewards(names: Sequence[str]) -> list[RewardFn]:
    unknown = [n for n in names if n not in REWARDS]
    if unknown:
        raise KeyError(f"unknown reward(s) {unknown}: registered are {sorted(REWARDS)}")
    return [REWARDS[n] for n in names]
