"""Checkpoint-then-requeue on SLURM's warning signal, without corrupting training state.

submitit's own handler requeues the moment the warning signal (USR2) arrives. That signal
interrupts the training loop anywhere, possibly in the middle of an optimizer step, so saving from
inside the handler could write a state that never existed. Instead:

* the signal only sets a flag when the next step boundary plus a checkpoint save fit in the warning
  window (estimated from measured step and save times); a Trainer callback then saves a checkpoint
  at that boundary and stops training, and the task hands over to submitit's handler, which requeues;
* otherwise (or when a watchdog sees the window running out) submitit's handler runs at once and
  the job restarts from its latest periodic checkpoint. A save cut short by the kill leaves only a
  staging folder, which resume ignores (see train/checkpoints.py).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from transformers import TrainerCallback

log = logging.getLogger(__name__)
SAFETY_S = 5.0  # seconds kept free for submitit to requeue and exit


class RequeueController(TrainerCallback):
    """Installed in a SLURM job; also a Trainer callback that acts at step boundaries."""

    def __init__(self, signal_delay_s: float, requeue: Callable[[], None] | None = None):
        self.signal_delay_s = signal_delay_s
        self.requested = False
        self.handed_over = False
        self._requeue = requeue
        self._step_started = None
        self.step_seconds: deque[float] = deque(maxlen=20)
        self.save_seconds: float | None = None
        self._save_started = None
        self._lock = threading.Lock()

    # -- installation -----------------------------------------------------------------------
    def install(self) -> None:
        """Take over USR2 from submitit, keeping its handler to do the actual requeue."""
        original = signal.getsignal(signal.SIGUSR2)
        if not callable(original):
            log.info("no SLURM warning-signal handler installed; graceful requeue disabled")
            return
        self._requeue = lambda: original(signal.SIGUSR2, None)
        signal.signal(signal.SIGUSR2, self._on_signal)
        signal.signal(
            signal.SIGUSR1, lambda *_: self.requeue_now("the warning window is running out")
        )
        log.info(
            "graceful requeue armed (warning %.0f s before the time limit)", self.signal_delay_s
        )

    # -- decisions ----------------------------------------------------------------------------
    def expected_seconds(self) -> float:
        """Time to reach the next step boundary and write a checkpoint there (pessimistic)."""
        step = max(self.step_seconds) if self.step_seconds else float("inf")
        save = self.save_seconds if self.save_seconds is not None else 2 * step + 10
        return step + save

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self.requested:
            return
        self.requested = True
        budget = self.signal_delay_s - SAFETY_S
        needed = self.expected_seconds()
        if needed > budget:
            self.requeue_now(
                f"a checkpoint needs about {needed:.0f} s but {budget:.0f} s remain; "
                "resuming from the latest periodic checkpoint"
            )
            return
        log.warning(
            "SLURM warning signal: checkpoint at the next step boundary (about %.0f s), then requeue",
            needed,
        )
        watchdog = threading.Timer(budget, lambda: os.kill(os.getpid(), signal.SIGUSR1))
        watchdog.daemon = True
        watchdog.start()

    def requeue_now(self, reason: str) -> None:
        with self._lock:
            if self.handed_over:
                return
            self.handed_over = True
        log.warning("requeueing now: %s", reason)
        if self._requeue is None:
            raise SystemExit(-1)
        self._requeue()  # submitit: dump the checkpointed task, scontrol requeue, exit

    # -- Trainer callback ---------------------------------------------------------------------
    def on_step_begin(self, args, state, control, **kwargs):
        self._step_started = time.monotonic()

    def on_step_end(self, args, state, control, **kwargs):
        if self._step_started is not None:
            self.step_seconds.append(time.monotonic() - self._step_started)
        if self.requested:
            control.should_save = True
            control.should_training_stop = True
            self._save_started = time.monotonic()

    def on_save(self, args, state, control, **kwargs):
        if self._save_started is not None:
            self.save_seconds = time.monotonic() - self._save_started
            self._save_started = None


_CONTROLLER: RequeueController | None = None


def install_graceful_requeue(signal_delay_s: float | None) -> RequeueController | None:
    """Arm graceful requeue in a SLURM job; returns None elsewhere (local runs, tests)."""
    global _CONTROLLER
    if not os.environ.get("SLURM_JOB_ID") or not signal_delay_s:
        return None
    _CONTROLLER = RequeueController(signal_delay_s)
    _CONTROLLER.install()
    return _CONTROLLER


def time_save(trainer: Any, controller: RequeueController | None) -> None:
    """Measure how long a periodic save takes, so the first warning knows what fits."""
    if controller is None:
        return
    original = trainer._save_checkpoint

    def timed(*args, **kwargs):
        start = time.monotonic()
        out = original(*args, **kwargs)
        controller.save_seconds = max(controller.save_seconds or 0.0, time.monotonic() - start)
        return out

    trainer._save_checkpoint = timed
