"""Trainer callbacks and reward wrappers that write a run's metrics and sampled completions, and
stop a run at a step boundary on Ctrl-C."""

from __future__ import annotations

import json
import logging
import math
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from vqa_r1 import ranks
from vqa_r1.rewards import completion_text
from vqa_r1.run_dir import Terminated

log = logging.getLogger(__name__)


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


class StopOnInterrupt(TrainerCallback):
    """Ctrl-C (and SIGTERM outside SLURM) stops training at the next step boundary with a
    checkpoint there, as SLURM's warning signal does (launch/requeue.py): the signal only sets a
    flag, since stopping inside an optimizer step could save a state that never existed. A second
    signal stops at once (KeyboardInterrupt or ``Terminated``; the latest periodic checkpoint is
    then where a re-run resumes). Several processes share the flag at each boundary, so all stop
    at the same step. ``stopped_by``: the signal that stopped training, once it has.
    """

    def __init__(self, sigterm: bool = True):
        self.signals = (signal.SIGINT, signal.SIGTERM) if sigterm else (signal.SIGINT,)
        self.received: str | None = None
        self.stopped_by: str | None = None
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers belong to the main thread
        for signum in self.signals:
            self._previous[signum] = signal.signal(signum, self._on_signal)

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _on_signal(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if self.received is not None:
            log.warning("%s again: stopping now, without a checkpoint", name)
            raise KeyboardInterrupt if signum == signal.SIGINT else Terminated(name)
        self.received = name
        log.warning(
            "%s: checkpoint at the next step boundary, then stop (%s again: stop at once)",
            name,
            "Ctrl-C" if signum == signal.SIGINT else "the signal",
        )

    def on_step_end(self, args, state, control, **kwargs):
        received = self.received is not None
        if ranks.world_size() > 1:
            received = ranks.any_rank(received)
        if received and not control.should_training_stop:
            self.stopped_by = self.received or "a signal to another process"
            log.info("stopping at step %d (%s): checkpoint", state.global_step, self.stopped_by)
            control.should_save = True
            control.should_training_stop = True


class StopAfter(TrainerCallback):
    """Stop at step ``step`` with a checkpoint there, as a run killed just after it would have
    left it (``vqa-r1 prompt-tune --stop-after``: the same command later resumes)."""

    def __init__(self, step: int):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step >= self.step and not control.should_training_stop:
            log.info("stopping at step %d as asked: checkpoint", state.global_step)
            control.should_save = True
            control.should_training_stop = True
