"""Checkpoint-then-requeue on SLURM's warning signal, without corrupting training state.

submitit's own handler requeues the moment the warning signal (USR2) arrives. That signal
interrupts the training loop anywhere, possibly in the middle of an optimizer step, so saving from
inside the handler could write a state that never existed. Instead:

* the signal only sets a flag when the next step boundary plus a checkpoint save fit in the warning
  window (estimated from measured step and save times); training goes on while another step would
  still leave time for the save, then a Trainer callback saves a checkpoint at that boundary and
  stops training, and the task hands over to submitit's handler, which requeues;
* otherwise (or when a watchdog sees the window running out) submitit's handler runs at once and
  the job restarts from its latest periodic checkpoint. A save cut short by the kill leaves only a
  staging folder, which resume ignores (see train/trainer_hooks.py).

The window is the time actually left before the limit, asked from SLURM when the signal comes.
``--signal=USR2@N`` only promises "at least N seconds": slurmctld checks limits periodically (every
30 s on the local cluster), so the warning often comes much earlier. Assuming exactly N seconds threw
that time away; with one-minute test limits and a 20-30 s start-up, a job signalled before its first
measured step requeued at once, run after run, and never progressed.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from transformers import TrainerCallback

log = logging.getLogger(__name__)
SAFETY_S = 5.0  # seconds kept free for submitit to requeue and exit


class RequeueController(TrainerCallback):
    """Installed in a SLURM job; also a Trainer callback that acts at step boundaries.

    The launch layer hands it to training as one of its callbacks (train/runner.py knows nothing
    of SLURM): it measures step and save times, and after the warning signal it asks the Trainer
    to save and stop at a step boundary. The task then sees an unfinished run and requeues.
    """

    def __init__(self, signal_delay_s: float, requeue: Callable[[], None] | None = None):
        self.signal_delay_s = signal_delay_s
        self.requested = False
        self.handed_over = False
        self._requeue = requeue
        self.deadline: float | None = None  # monotonic time by which the job must hand over
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
        left = seconds_to_time_limit()
        if left is None:
            left = self.signal_delay_s  # what --signal promises at least
        budget = left - SAFETY_S
        self.deadline = time.monotonic() + budget
        needed = self.expected_seconds()
        if self.step_seconds and needed > budget:
            self.requeue_now(
                f"a checkpoint needs about {needed:.0f} s but {budget:.0f} s remain; "
                "resuming from the latest periodic checkpoint"
            )
            return
        # no step measured yet (still starting up): train on, the watchdog requeues in time if no
        # step boundary with room for a save comes
        log.warning(
            "SLURM warning signal, %.0f s before the time limit: checkpoint at the next step "
            "boundary that leaves time for the save (about %.0f s), then requeue",
            left,
            needed,
        )
        watchdog = threading.Timer(budget, lambda: os.kill(os.getpid(), signal.SIGUSR1))
        watchdog.daemon = True
        watchdog.start()

    def should_stop_now(self) -> bool:
        """At a step boundary after the warning: stop unless one more step still leaves room
        for the save (the pessimistic estimates of ``expected_seconds``)."""
        if self.deadline is None or not self.step_seconds:
            return True
        one_more_step = max(self.step_seconds)
        return self.deadline - time.monotonic() < one_more_step + self.expected_seconds()

    def requeue_now(self, reason: str) -> None:
        with self._lock:
            if self.handed_over:
                return
            self.handed_over = True
        log.warning("requeueing now: %s", reason)
        if self._requeue is None:
            raise SystemExit(-1)
        self._requeue()  # submitit: dump the checkpointed task, scontrol requeue, exit

    def finish(self) -> None:
        """The run is complete: a warning arriving now must neither requeue nor kill it.

        Python restores the default handlers while the interpreter shuts down, and USR2's default
        action kills the process, so a warning in the last seconds of a finished job turned it
        into FAILED in sacct (seen in tests/slurm/test_requeue_resume.py). An ignored signal
        stays ignored through shutdown.
        """
        with self._lock:
            self.handed_over = True  # a pending watchdog does nothing
        signal.signal(signal.SIGUSR2, signal.SIG_IGN)
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)

    # -- Trainer callback ---------------------------------------------------------------------
    def on_step_begin(self, args, state, control, **kwargs):
        self._step_started = time.monotonic()

    def on_step_end(self, args, state, control, **kwargs):
        if self._step_started is not None:
            self.step_seconds.append(time.monotonic() - self._step_started)
        if self.requested and self.should_stop_now():
            log.info("stopping at step %d: checkpoint, then requeue", state.global_step)
            control.should_save = True
            control.should_training_stop = True
        if control.should_save:  # periodic or ours: time it, so the first warning knows what fits
            self._save_started = time.monotonic()

    def on_save(self, args, state, control, **kwargs):
        if self._save_started is not None:
            took = time.monotonic() - self._save_started
            self.save_seconds = max(self.save_seconds or 0.0, took)
            self._save_started = None


def seconds_to_time_limit() -> float | None:
    """Seconds until SLURM ends this job, or None when SLURM cannot tell (then the signal delay
    is all that is known)."""
    end = os.environ.get("SLURM_JOB_END_TIME")  # set by SLURM >= 23.02
    if not (end and end.isdigit()):
        try:  # older SLURM: ask the controller (once per warning; about 50 ms)
            out = subprocess.run(
                ["squeue", "-h", "-j", os.environ.get("SLURM_JOB_ID", ""), "-o", "%e"],
                capture_output=True,
                text=True,
                timeout=5,
                check=True,
            )
            end = time.mktime(time.strptime(out.stdout.strip(), "%Y-%m-%dT%H:%M:%S"))
        except (OSError, ValueError, subprocess.SubprocessError) as err:
            log.warning("could not read the job's end time from squeue: %s", err)
            return None
    return float(end) - time.time()


_CONTROLLER: RequeueController | None = None


def install_graceful_requeue(signal_delay_s: float | None) -> RequeueController | None:
    """Arm graceful requeue in a SLURM job; returns None elsewhere (local runs, tests)."""
    global _CONTROLLER
    if not os.environ.get("SLURM_JOB_ID") or not signal_delay_s:
        return None
    _CONTROLLER = RequeueController(signal_delay_s)
    _CONTROLLER.install()
    return _CONTROLLER
