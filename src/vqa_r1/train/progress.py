"""Readable console output for a person: one progress bar per stage and one summary line.

TRL and transformers print a dict per logging step and a bar per weight file, dataset save and
shard; useful in a job log, noise in a demo. The numbers are not lost: the run's ``metrics.jsonl``
keeps every logged value.
"""

from __future__ import annotations

import logging
from typing import Any

from transformers import TrainerCallback


def quiet_libraries() -> None:
    """Silence library progress bars, info chatter and deprecation notes (weights loading, dataset
    saves, renamed arguments): a person running the demo cannot act on them."""
    import warnings

    import datasets
    import transformers

    for module in ("transformers", "trl", "peft", "accelerate", "torch"):
        warnings.filterwarnings("ignore", category=FutureWarning, module=module)
        warnings.filterwarnings("ignore", category=UserWarning, module=module)
    datasets.disable_progress_bars()
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    datasets.logging.set_verbosity_error()
    logging.getLogger("vqa_r1").setLevel(logging.WARNING)


class StageProgress(TrainerCallback):
    """One tqdm bar for a training stage, with the latest loss or reward in its postfix."""

    KEYS = ("loss", "reward", "rewards/accuracy_reward/mean")

    def __init__(self, label: str):
        self.label = label
        self.bar: Any = None
        self.last: dict[str, float] = {}

    def on_train_begin(self, args, state, control, **kwargs):
        from tqdm.auto import tqdm

        if state.is_world_process_zero:
            self.bar = tqdm(total=state.max_steps, initial=state.global_step, desc=self.label)

    def on_step_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.update(state.global_step - self.bar.n)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.bar is None or not logs:
            return
        for key in self.KEYS:
            if isinstance(logs.get(key), (int, float)):
                self.last[key] = float(logs[key])
        short = {k.split("/")[-2] if "/" in k else k: f"{v:.3f}" for k, v in self.last.items()}
        self.bar.set_postfix(short, refresh=False)

    def on_train_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def make_quiet(trainer: Any, label: str) -> StageProgress:
    """Replace the trainer's console callbacks (dict printer, its own bar) with one StageProgress."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    progress = StageProgress(label)
    trainer.add_callback(progress)
    return progress
