"""P5: a requeued job's restart to its first training step against a cold start; steps lost.

In process, without SLURM. A cold start is ``train()`` on a fresh run directory, timed from the
call to the end of its first step. The run then goes on until the requeue controller of SLURM jobs
(launch/requeue.py, the real ``RequeueController``, its signal handlers not installed) is told the
warning came at step ``stop_at``: at that step boundary it asks the Trainer to save and stop, the
way a job hands over before its time limit. A restart is ``train()`` again on the same directory,
timed the same way (it resumes from the checkpoint: adapter, optimizer, scheduler, RNG, sampler).

A hard stop is the other case: training stops at ``hard_stop_at`` with no save (a job killed
without warning, or the warning came too late), so the restart goes back to the latest periodic
checkpoint. Steps lost are read from the run directory, never assumed: the last step logged in
metrics.jsonl (one line per step) minus the step of the checkpoint the restart resumes from, which
must also be the step before the restart's first one.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from benchmarks import Result, Timing
from vqa_r1.config import RunConfig
from vqa_r1.io import read_jsonl
from vqa_r1.launch.requeue import RequeueController
from vqa_r1.recipes import load_config
from vqa_r1.run_dir import RunDir, checkpoint_step, latest_checkpoint
from vqa_r1.train.runner import train

MODEL = (
    "tiny-qwen2.5-vl-pretrained"  # the demo's model and recipe (qwen2_5_vl/tiny-pretrained_grpo)
)


@dataclass(frozen=True)
class Size:
    max_steps: int
    save_steps: int  # the checkpoint interval
    stop_at: int  # the graceful stop (the requeue controller's step boundary)
    hard_stop_at: int  # the stop without a save (between two periodic checkpoints)
    num_samples: int


FULL = Size(max_steps=20, save_steps=5, stop_at=10, hard_stop_at=9, num_samples=256)
QUICK = Size(max_steps=8, save_steps=2, stop_at=3, hard_stop_at=3, num_samples=64)


class FirstStep(TrainerCallback):
    """When training began and the first step of this call ended (and its number); optionally
    stops training there."""

    def __init__(self, stop: bool = False) -> None:
        self.stop = stop
        self.begin: float | None = None
        self.at: float | None = None
        self.step: int | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        self.begin = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        if self.at is None:
            self.at, self.step = time.perf_counter(), state.global_step
            if self.stop:  # the timing is taken: no need to train on (no save either)
                control.should_training_stop = True


class WarningAt(TrainerCallback):
    """SLURM's warning signal, delivered at a step: what ``RequeueController._on_signal`` records
    when no time limit is near (it sets ``requested``; the controller then stops at the boundary).
    Placed before the controller, so the controller acts at this same step's end."""

    def __init__(self, step: int, controller: RequeueController) -> None:
        self.step, self.controller = step, controller

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step >= self.step:
            self.controller.requested = True


class HardStopAt(TrainerCallback):
    """Stop at a step boundary without saving: what survives is the latest periodic checkpoint."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step >= self.step:
            control.should_training_stop = True


@dataclass
class Interruption:
    cold: float  # call to the end of the first step, fresh run directory
    restart: float  # call to the end of the first step after the restart
    cold_begin: float  # call to on_train_begin (model, data, trainer), fresh run directory
    restart_begin: float  # the same for the restart
    stopped: dict[str, Any]  # status after the interrupted run
    logged_until: int  # last step in metrics.jsonl before the restart
    checkpoint: int | None  # latest complete checkpoint before the restart
    resumed_from: int | None  # the checkpoint the restart's status names
    first_step_after: int  # the restart's first finished step
    starts: int  # status "starts" after the restart

    @property
    def lost(self) -> int:
        """Steps trained before the stop that the restart trains again."""
        return self.logged_until - (self.resumed_from or 0)

    @property
    def consistent(self) -> bool:
        """The restart resumed from the latest checkpoint and went on at the step after it."""
        return (
            self.resumed_from == self.checkpoint
            and self.first_step_after == (self.checkpoint or 0) + 1
        )


def bench_config(size: Size) -> RunConfig:
    return load_config(
        "grpo",
        MODEL,
        overrides=[
            f"train.max_steps={size.max_steps}",
            f"train.save_steps={size.save_steps}",
            "train.logging_steps=1",
            f"data.num_samples={size.num_samples}",
        ],
    )


def _timed(
    config: RunConfig, run_dir: Path, callbacks: list[Any], first: FirstStep
) -> tuple[float, float, dict]:
    """Seconds from the call to on_train_begin and to the first step's end; the final status."""
    called = time.perf_counter()
    status = train(config, run_dir, callbacks=[first, *callbacks])
    assert first.at is not None and first.begin is not None
    return first.begin - called, first.at - called, status


def interrupt_and_restart(
    config: RunConfig, run_dir: Path, stop_at: int, graceful: bool
) -> Interruption:
    """Cold start, stop at ``stop_at`` (gracefully or hard), restart; times and steps lost."""
    if graceful:
        controller = RequeueController(signal_delay_s=120)  # no install(): no signal handlers
        stoppers: list[Any] = [WarningAt(stop_at, controller), controller]
    else:
        stoppers = [HardStopAt(stop_at)]
    cold_begin, cold, stopped = _timed(config, run_dir, stoppers, FirstStep())
    if stopped["state"] != "STOPPED":
        raise RuntimeError(f"P5: the interrupted run ended {stopped['state']}, not STOPPED")
    rd = RunDir(run_dir)
    logged_until = max(r["step"] for r in read_jsonl(rd.metrics) if "loss" in r)
    latest = latest_checkpoint(rd.checkpoints)
    first = FirstStep(stop=True)
    restart_begin, restart, status = _timed(config, run_dir, [], first)
    resumed = status.get("resumed_from")
    return Interruption(
        cold=cold,
        restart=restart,
        cold_begin=cold_begin,
        restart_begin=restart_begin,
        stopped=stopped,
        logged_until=logged_until,
        checkpoint=checkpoint_step(latest) if latest else None,
        resumed_from=checkpoint_step(Path(resumed)) if resumed else None,
        first_step_after=first.step or 0,
        starts=status.get("starts", 0),
    )


def measure(size: Size, repeats: int) -> Result:
    config = bench_config(size)
    with tempfile.TemporaryDirectory(prefix="vqa-r1-bench-p5-") as tmp:
        # the hard stop first: untimed, it is also the warm-up (imports, first model load)
        hard = interrupt_and_restart(config, Path(tmp) / "hard", size.hard_stop_at, graceful=False)
        graceful = [
            interrupt_and_restart(config, Path(tmp) / f"graceful-{i}", size.stop_at, graceful=True)
            for i in range(repeats)
        ]
    restart = Timing("restart after a requeue, to the first step", [g.restart for g in graceful])
    cold = Timing("cold start, to the first step", [g.cold for g in graceful])
    return Result(
        id="P5",
        title="requeue: restart to first step vs a cold start",
        ours=restart,
        baseline=cold,
        kind="overhead",
        goal=1.5,
        floor=2.0,
        checks={
            "lost steps, graceful": max(g.lost for g in graceful),
            "lost steps, hard stop": hard.lost,
            "checkpoint interval": size.save_steps,
            "resumed at the step after the checkpoint": hard.consistent
            and all(g.consistent for g in graceful),
        },
        details={
            "model / recipe": f"{MODEL} / {config.recipe}",
            "graceful": f"the requeue controller stops at step {size.stop_at} with a checkpoint; "
            f"restarts resumed from step {sorted({g.resumed_from for g in graceful})}",
            "hard stop": f"stopped after step {hard.logged_until} without a save; the latest "
            f"checkpoint was step {hard.checkpoint}, so {hard.lost} steps were trained again",
            "call to on_train_begin (s), restart / cold": (
                f"{statistics.median(g.restart_begin for g in graceful):.3f} / "
                f"{statistics.median(g.cold_begin for g in graceful):.3f}"
            ),
            "first step alone (s), restart / cold": (
                f"{statistics.median(g.restart - g.restart_begin for g in graceful):.3f} / "
                f"{statistics.median(g.cold - g.cold_begin for g in graceful):.3f} (different "
                "prompts: the restart's first step is the step after the checkpoint)"
            ),
            "restart after the hard stop, to the first step (s)": round(hard.restart, 3),
            "data": f"seeded subset of {size.num_samples} rows; max_steps {size.max_steps}",
        },
        notes=[
            "in process, no SLURM: the graceful stop is launch/requeue.py's RequeueController "
            "(signal handlers not installed) told of the warning at a step; the restart is "
            "train() again on the same run directory, as the requeued TrainTask does",
            "both timings run from the train() call to the end of the first step of that call: "
            "model and data loading, trainer construction, for the restart the checkpoint load",
            "cold and restart alternate (cold, restart, cold, ...); the untimed hard-stop case "
            "runs first and warms up",
        ],
    )


def run(quick: bool, repeats: int) -> Result:
    return measure(QUICK if quick else FULL, repeats)
