"""Reward functions with TRL's signature, registered by name; weights live in recipes.

TRL calls ``fn(prompts=..., completions=..., **dataset_columns)`` and expects one float per
completion. Completions are plain strings or conversational lists; both are handled. A reward must
never raise (one exception kills hours of GRPO), so every function turns any input into one finite
float per completion, inside the range its docstring states (``REWARD_RANGES``): a malformed row, a
missing or short dataset column, or an exception scores 0.0.

Modules, by what they reward:

* ``text``: reading completions and dataset columns (``completion_text``), the never-raise wrapper.
* ``answer``: ``accuracy`` (final answer right), ``format`` (one think block, then one answer),
  ``format_thinking`` (the same after a think block the chat template opened: Qwen3-VL Thinking).
* ``choice``: ``choice`` (exact set of option letters), ``choice_partial`` (partial credit).
* ``count``: ``count`` (the final answer's number equals the solution's count).
* ``boxes``: ``iou`` (predicted boxes matched to ``gt_boxes``/``gt_box_labels`` by Hungarian IoU).
* ``edit``: ``edit_distance`` (gated progress from ``input_text`` towards ``target``).
* ``cryptogram``: visual cryptograms (``data/cryptogram.py``): ``cryptogram_format``,
  ``cryptogram_decoding``, ``cryptogram_correct`` and ``cryptogram_answer_partial`` (gated as
  Groundlight's r1_vlm gates them), ``cryptogram_decoding_ungated`` and
  ``cryptogram_correct_ungated`` (the same without the gate).
* ``reasoning``: ``reasoning_steps`` (the share of a row's reference ``reasoning`` steps stated in
  order: partial credit for each reading right).
* ``penalties``: ``length_penalty`` and ``repetition_penalty`` (non-positive shaping terms).

A reward outside this package is named ``"package.module:function"`` in ``train.reward_funcs``. It
is imported when the config is validated on the login node, so a typo fails before anything is
queued, and again in the job, which therefore needs the module on its PYTHONPATH too (the code
snapshot of a SLURM job holds only ``vqa_r1``). A job cannot see a reward registered at run time
(a monkeypatch in the submitting process), which is why this plug-in form exists.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

from vqa_r1.rewards.answer import accuracy_reward, format_reward, format_thinking_reward
from vqa_r1.rewards.boxes import iou_reward
from vqa_r1.rewards.choice import choice_partial_reward, choice_reward
from vqa_r1.rewards.count import count_reward
from vqa_r1.rewards.cryptogram import (
    cryptogram_answer_partial_reward,
    cryptogram_correct_reward,
    cryptogram_correct_ungated_reward,
    cryptogram_decoding_reward,
    cryptogram_decoding_ungated_reward,
    cryptogram_format_reward,
)
from vqa_r1.rewards.edit import edit_distance_reward
from vqa_r1.rewards.penalties import length_penalty, make_length_penalty, repetition_penalty
from vqa_r1.rewards.reasoning import reasoning_steps_reward
from vqa_r1.rewards.text import RewardFn, completion_text

__all__ = [
    "REWARDS",
    "REWARD_RANGES",
    "RewardFn",
    "accuracy_reward",
    "choice_partial_reward",
    "choice_reward",
    "completion_text",
    "cryptogram_answer_partial_reward",
    "cryptogram_correct_reward",
    "cryptogram_correct_ungated_reward",
    "cryptogram_decoding_reward",
    "cryptogram_decoding_ungated_reward",
    "cryptogram_format_reward",
    "count_reward",
    "edit_distance_reward",
    "format_reward",
    "format_thinking_reward",
    "get_rewards",
    "iou_reward",
    "length_penalty",
    "make_length_penalty",
    "reasoning_steps_reward",
    "repetition_penalty",
    "resolve_reward",
]

REWARDS: dict[str, RewardFn] = {
    "accuracy": accuracy_reward,
    "format": format_reward,
    "format_thinking": format_thinking_reward,
    "choice": choice_reward,
    "choice_partial": choice_partial_reward,
    "count": count_reward,
    "iou": iou_reward,
    "edit_distance": edit_distance_reward,
    "cryptogram_format": cryptogram_format_reward,
    "cryptogram_decoding": cryptogram_decoding_reward,
    "cryptogram_decoding_ungated": cryptogram_decoding_ungated_reward,
    "cryptogram_correct": cryptogram_correct_reward,
    "cryptogram_correct_ungated": cryptogram_correct_ungated_reward,
    "cryptogram_answer_partial": cryptogram_answer_partial_reward,
    "reasoning_steps": reasoning_steps_reward,
    "length_penalty": length_penalty,
    "repetition_penalty": repetition_penalty,
}

REWARD_RANGES: dict[str, tuple[float, float]] = {
    "accuracy": (0.0, 1.0),
    "format": (0.0, 1.0),
    "format_thinking": (0.0, 1.0),
    "choice": (0.0, 1.0),
    "choice_partial": (0.0, 1.0),
    "count": (0.0, 1.0),
    "iou": (0.0, 1.0),
    "edit_distance": (0.0, 1.0),
    "cryptogram_format": (0.0, 1.0),
    "cryptogram_decoding": (0.0, 1.0),
    "cryptogram_decoding_ungated": (0.0, 1.0),
    "cryptogram_correct": (0.0, 1.0),
    "cryptogram_correct_ungated": (0.0, 1.0),
    "cryptogram_answer_partial": (0.0, 1.0),
    "reasoning_steps": (0.0, 1.0),
    "length_penalty": (-1.0, 0.0),
    "repetition_penalty": (-1.0, 0.0),
}
"""The closed interval each registered reward's values lie in (rewards named as plug-ins have
none)."""


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
