"""Reward functions with TRL's signature, registered by name; weights live in recipes.

TRL calls ``fn(prompts=..., completions=..., **dataset_columns)`` and expects one float per
completion. Completions are plain strings or conversational lists; both are handled. A reward must
never raise (one exception kills hours of GRPO), so every function turns any input into a float.

A reward outside this package is named ``"package.module:function"`` in ``train.reward_funcs``. It
is imported when the config is validated on the login node, so a typo fails before anything is
queued, and again in the job, which therefore needs the module on its PYTHONPATH too (the code
snapshot of a SLURM job holds only ``vqa_r1``). A job cannot see a reward registered at run time
(a monkeypatch in the submitting process), which is why this plug-in form exists.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Sequence
from typing import Any

from vqa_r1.answers import is_correct

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
            rewards.append(float(is_correct(completion_text(completion), reference, answer_rule)))
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


def resolve_reward(name: str) -> RewardFn:
    """A registered reward, or the function a ``"package.module:function"`` name points to."""
    if ":" not in name:
        if name not in REWARDS:
            raise KeyError(
                f"unknown reward {name!r}: registered are {sorted(REWARDS)}, "
                "or name a function as 'package.module:function'"
            )
        return REWARDS[name]
    module_name, _, attr = name.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise KeyError(
            f"reward {name!r}: cannot import {module_name!r} ({err}); the module must be "
            "importable here and in the job (e.g. on PYTHONPATH)"
        ) from None
    fn = getattr(module, attr, None)
    if not callable(fn) or not hasattr(fn, "__name__"):
        raise KeyError(f"reward {name!r}: {module_name} has no function {attr!r}")
    return fn


def get_rewards(names: Sequence[str]) -> list[RewardFn]:
    """All rewards of ``names``; every bad name is reported at once (KeyError)."""
    found, problems = [], []
    for name in names:
        try:
            found.append(resolve_reward(name))
        except KeyError as err:
            problems.append(err.args[0])
    if problems:
        raise KeyError("; ".join(problems))
    return found
