"""One readable line per logged step in a job log, and the same progress in status.json.

Why: a job log held one raw TRL dict per logged step (about 800 characters, values quoted, no
step number, no time left) and tqdm bars redrawn with carriage returns (a 1,500-step job: 1.1 MB
of dicts, 284 kB of ``\\r``). A person checking a 12-hour job from a phone wants one line: where
it is, how the rewards move, whether it is healthy and when it ends. The raw values are not lost:
``metrics.jsonl`` keeps every one (train/callbacks.py ``JsonlMetrics``). `launch.py status` reads
the ``progress`` this writes into status.json.
"""

from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any, TextIO

from transformers import TrainerCallback

from vqa_r1.clock import duration

# (label, key in TRL's logs, format): shown when the step logged it, in this order
SCALARS = (
    ("loss", "loss", "{:.4g}"),
    ("token acc", "mean_token_accuracy", "{:.3f}"),
    ("kl", "kl", "{:.4g}"),
    ("entropy", "entropy", "{:.3f}"),
    ("len", "completions/mean_length", "{:.1f}"),
)
SUMMARY_KEYS = ("train_runtime", "train_loss")  # the Trainer's end-of-training summary, not a step


@dataclass
class Progress:
    """What `status` shows of a running training (status.json ``progress``)."""

    step: int
    max_steps: int
    seconds_per_step: float | None
    left_s: float | None  # compute time to the last step at the measured pace
    more_jobs: int | None  # requeued jobs still needed after this one (SLURM time limit)
    reward: float | None
    reward_std: float | None
    health: str  # "ok", or the codes of the run-health alarms raised so far
    updated: float  # time.time() of the line


def reward_parts(logs: dict) -> list[tuple[str, float, float | None]]:
    """(name, mean, std) of each reward function TRL logged (``rewards/NAME/mean``), the
    ``_reward`` suffix of the suite's function names dropped."""
    parts = []
    for key, value in logs.items():
        if key.startswith("rewards/") and key.endswith("/mean") and _number(value):
            name = key[len("rewards/") : -len("/mean")]
            std = logs.get(f"rewards/{name}/std")
            parts.append((name.removesuffix("_reward"), float(value), _float(std)))
    return parts


def format_line(label: str, progress: Progress, logs: dict) -> str:
    """The line of one logged step, e.g. ``grpo step 12/60 (20%) | reward 1.44±0.25 (accuracy
    0.94±0.25, format 1.00±0.00) | kl 0.0012 | entropy 0.021 | len 51.0 | clipped 6% |
    0.57 s/step | left 0:00:27 | health ok``."""
    done = f" ({100 * progress.step / progress.max_steps:.0f}%)" if progress.max_steps else ""
    fields = [f"{label} step {progress.step}/{progress.max_steps or '?'}{done}"]
    if progress.reward is not None:
        text = f"reward {progress.reward:.3g}"
        if progress.reward_std is not None:
            text += f"±{progress.reward_std:.2g}"
        parts = reward_parts(logs)
        if parts:
            text += " (" + ", ".join(f"{n} {m:.2f}" + (f"±{s:.2f}" if s is not None else "")
                                     for n, m, s in parts) + ")"  # fmt: skip
        fields.append(text)
    for name, key, fmt in SCALARS:
        if _number(logs.get(key)):
            fields.append(f"{name} {fmt.format(float(logs[key]))}")
    if _number(logs.get("completions/clipped_ratio")):
        fields.append(f"clipped {100 * float(logs['completions/clipped_ratio']):.0f}%")
    if progress.seconds_per_step is not None:
        fields.append(f"{progress.seconds_per_step:.3g} s/step")
    left = f"left {duration(progress.left_s)}"
    if progress.more_jobs:
        left += f" (+{progress.more_jobs} requeued job{'s' if progress.more_jobs > 1 else ''})"
    fields.append(left)
    fields.append(f"health {progress.health}")
    return " | ".join(fields)


class StepLine(TrainerCallback):
    """Rank 0: per logged step, one line on ``stream`` (``echo``) and ``progress`` in status.json.

    The pace is measured from this start's first logged step on (loading, compiling and the first
    step's warm-up left out); before a second log, from the start of training."""

    def __init__(
        self,
        label: str,
        run_dir: Any = None,
        echo: bool = True,
        stream: TextIO | None = None,
        clock: Any = time.monotonic,
    ) -> None:
        self.label = label
        self.run_dir = run_dir  # a vqa_r1.run_dir.RunDir, or None (nothing recorded)
        self.echo = echo
        self.stream = stream
        self.clock = clock
        self._began: tuple[float, int] | None = None
        self._first_log: tuple[float, int] | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        self._began = (self.clock(), state.global_step)
        self._first_log = None

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs or any(k in logs for k in SUMMARY_KEYS):
            return
        now, step = self.clock(), state.global_step
        pace = self._pace(now, step)
        if self._first_log is None:
            self._first_log = (now, step)
        left = (state.max_steps - step) * pace if pace is not None else None
        progress = Progress(
            step=step,
            max_steps=state.max_steps,
            seconds_per_step=None if pace is None else round(pace, 4),
            left_s=None if left is None else round(left, 1),
            more_jobs=more_jobs(left),
            reward=_float(logs.get("reward")),
            reward_std=_float(logs.get("reward_std")),
            health=self._health(),
            updated=round(time.time(), 1),
        )
        if self.run_dir is not None:
            self.run_dir.update_status(progress=asdict(progress))
        if self.echo:
            print(format_line(self.label, progress, logs), file=self.stream or sys.stdout,
                  flush=True)  # fmt: skip

    def _pace(self, now: float, step: int) -> float | None:
        for start in (self._first_log, self._began):
            if start is not None and step > start[1]:
                return (now - start[0]) / (step - start[1])
        return None

    def _health(self) -> str:
        if self.run_dir is None:
            return "ok"
        alarms = self.run_dir.status().get("health") or []
        codes = [str(a.get("code")) for a in alarms if isinstance(a, dict) and a.get("code")]
        return ", ".join(dict.fromkeys(codes)) or "ok"


def more_jobs(left_s: float | None, now: float | None = None) -> int | None:
    """SLURM jobs still needed after this one at the measured pace: the work left beyond this
    job's end, over the length of a job (SLURM_JOB_START_TIME to SLURM_JOB_END_TIME, as SLURM set
    them: >= 23.02). None outside SLURM or without the times."""
    start, end = os.environ.get("SLURM_JOB_START_TIME"), os.environ.get("SLURM_JOB_END_TIME")
    if left_s is None or not (start and end):
        return None
    try:
        start_s, end_s = float(start), float(end)
    except ValueError:
        return None
    length = end_s - start_s
    window_left = end_s - (time.time() if now is None else now)
    if length <= 0 or left_s <= window_left:
        return 0
    return math.ceil((left_s - max(window_left, 0)) / length)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _float(value: Any) -> float | None:
    return float(value) if _number(value) else None
