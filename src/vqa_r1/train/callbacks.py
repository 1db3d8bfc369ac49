"""Trainer callbacks and reward wrappers that write a run's metrics and sampled completions."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from vqa_r1 import ranks
from vqa_r1.rewards import completion_text


class JsonlMetrics(TrainerCallback):
    """Append each logging step's metrics to metrics.jsonl (flushed: a kill loses nothing logged)."""

    def __init__(self, path: Path):
        self.path = path

    def on_log(self, args, state, control, logs=None, **kwargs):  # noqa: D401 - Trainer hook
        if not state.is_world_process_zero or not logs:
            return
        record = {"step": state.global_step, "epoch": state.epoch}
        for key, value in logs.items():
            if isinstance(value, (int, float)) and not (
                isinstance(value, float) and math.isnan(value)
            ):
                record[key] = value
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")


def recording_reward(fn: Callable, path: Path, every: int, **fixed: Any) -> Callable:
    """Wrap a reward so every ``every``-th call saves its first completions with their rewards.

    The wrapper keeps ``__name__`` because TRL names its reward metrics after it. With several
    processes each rank scores its own share of the completions; rank 0 records from its share
    (one writer: lines of different ranks would interleave in one file).
    """
    calls = {"n": 0}

    def wrapped(prompts=None, completions=None, **kwargs):
        rewards = fn(prompts=prompts, completions=completions, **{**kwargs, **fixed})
        calls["n"] += 1
        record = every > 0 and (calls["n"] - 1) % every == 0 and completions
        if record and ranks.is_main():
            with open(path, "a", encoding="utf-8") as fh:
                for i in range(min(4, len(completions))):
                    fh.write(
                        json.dumps(
                            {
                                "call": calls["n"],
                                "reward": fn.__name__,
                                "value": rewards[i],
                                "completion": completion_text(completions[i]),
                                "solution": (kwargs.get("solution") or [None] * (i + 1))[i],
                            }
                        )
                        + "\n"
                    )
        return rewards

    wrapped.__name__ = fn.__name__
    return wrapped
