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

Several processes (one per GPU; vqa_r1.ranks)
---------------------------------------------
Every process has a controller, and a signal may reach all of them or only some. Each only notes
what it received; at every step boundary the ranks share their notes (one all_reduce MAX of two
integers, only when the world size is above 1), rank 0 decides from its own step and save times
whether to stop there, and shares that decision (a second all_reduce, only once a signal is
known). So every rank sets ``should_save`` and ``should_training_stop`` at the same step and they
checkpoint together: a rank stopping alone would leave the others waiting in the first collective
of ``Trainer._save_checkpoint`` (``store_flos``) forever. Only rank 0 requeues: submitit's handler
checkpoints and calls ``scontrol requeue`` on rank 0 alone (``checkpoint_and_try_requeue`` returns
at once when SLURM_PROCID is not 0), and a requeue ends every task of the job. The other ranks
return from the task normally (exit 0) without touching final/ or status.json: a non-zero exit
could make srun end rank 0 before it requeues (``--kill-on-bad-exit`` / KillOnBadExit).

Preemption (SIGTERM)
--------------------
submitit ignores SIGTERM (``SignalHandler.bypass``) and the warning signal is tied to the job's end
time, which a preemption does not move, so a preempted job used to die without a checkpoint. Here
SIGTERM is told apart by the time left (``seconds_to_time_limit``): within ``TIME_LIMIT_MARGIN_S``
of the end it is the time-limit kill (the warning signal came earlier; nothing more to do); else,
unless SLURM already reports the job as ending (``scancel``: the job is CANCELLED/COMPLETING),
it is a preemption, and the ranks checkpoint at the next step boundary (no "one more step": the
grace time is not known to the job) and rank 0 requeues. A SIGTERM reaching only some ranks is
shared as the warning is. The cluster must be set up for this:

* ``PreemptMode=REQUEUE`` (slurm.conf, or the partition's/QOS's PreemptMode): a preempted job is
  requeued, not cancelled or suspended;
* ``GraceTime`` on the preempted partition or QOS, longer than one training step plus one
  checkpoint save: SLURM sends SIGTERM, waits GraceTime, then SIGKILL (without it the job gets
  only KillWait, 30 s by default, and restarts from its latest periodic checkpoint);
* ``JobRequeue=1`` (slurm.conf; the default): batch jobs may be requeued. submitit does not pass
  ``--requeue``; on a cluster with JobRequeue=0 add it through the executor's additional
  parameters, or neither a preemption nor ``scontrol requeue`` requeues the job.

If ``scontrol requeue`` fails during a preemption (the job is already being requeued), rank 0
exits anyway: SLURM requeues a preempted job itself under PreemptMode=REQUEUE.

What SLURM 22.05 does, as measured on the local cluster (tests/slurm/test_multiprocess_slurm.py):
when a job of a higher-tier partition needs the CPUs, the tasks of the preempted job's steps (our
srun tasks; not the batch script itself) get SIGTERM at once, squeue still says RUNNING and its
end time becomes now + GraceTime; once the grace time is over (at the controller's next check) the
job is cancelled "due to preemption" (SIGTERM again, state COMPLETING, SIGKILL after KillWait) and
queued again. Our requeue comes well before that: the job keeps its id, resumes from the
checkpoint of the step where it stopped and waits for the preempting job to finish.
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

from vqa_r1 import ranks

log = logging.getLogger(__name__)
SAFETY_S = 5.0  # seconds kept free for submitit to requeue and exit
# slurmctld sends the time-limit SIGTERM at the end time or after it (it checks limits
# periodically), never before; a few seconds of slack for whole-second end times. A SIGTERM with
# more time left is a preemption or an outside requeue, even in a one-minute job.
TIME_LIMIT_MARGIN_S = 5.0
STOP_WARNING, STOP_PREEMPTED = 1, 2  # why the ranks stop at a step boundary (stop_here)


class RequeueController(TrainerCallback):
    """Installed in a SLURM job; also a Trainer callback that acts at step boundaries.

    The launch layer hands it to training as one of its callbacks (train/runner.py knows nothing
    of SLURM): it measures step and save times, and after the warning signal or a preemption it
    asks the Trainer to save and stop at a step boundary, the same one on every rank. The task
    then sees an unfinished run and requeues (rank 0).

    ``requested``: a checkpoint-then-requeue was asked of this process (the warning signal, or a
    caller setting it: bench/requeue_restart.py); true on every rank once the ranks stopped for it.
    ``terminated``: a SIGTERM reached this process. ``preempted``: rank 0 judged a SIGTERM a
    preemption.
    """

    def __init__(self, signal_delay_s: float, requeue: Callable[[], None] | None = None):
        self.signal_delay_s = signal_delay_s
        self.requested = False
        self.terminated = False
        self.preempted = False
        self.stopped = False  # the ranks stopped training at a step boundary for a requeue
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
        """Take over USR2 (and SIGTERM) from submitit, keeping its handler to do the requeue."""
        original = signal.getsignal(signal.SIGUSR2)
        if not callable(original):
            log.info("no SLURM warning-signal handler installed; graceful requeue disabled")
            return
        self._requeue = lambda: original(signal.SIGUSR2, None)
        signal.signal(signal.SIGUSR2, self._on_signal)
        signal.signal(
            signal.SIGUSR1, lambda *_: self.requeue_now("the warning window is running out")
        )
        signal.signal(signal.SIGTERM, self._on_sigterm)
        log.info(
            "graceful requeue armed (warning %.0f s before the time limit; SIGTERM: preemption)",
            self.signal_delay_s,
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
        if ranks.is_main():
            self._plan_warning()
        else:
            log.info("rank %d: SLURM warning signal; rank 0 decides", ranks.rank())

    def _plan_warning(self) -> None:
        """Rank 0, once per warning: requeue at once, or set the deadline and arm the watchdog."""
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

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        if self.terminated or self.handed_over:
            return
        self.terminated = True
        if ranks.is_main():
            self._judge_sigterm()
        else:
            log.info("rank %d: SIGTERM; rank 0 decides whether it is a preemption", ranks.rank())

    def _judge_sigterm(self) -> None:
        """Rank 0, once per SIGTERM: a preemption, or the time-limit kill, or a job ending."""
        cause = sigterm_cause()
        if cause == "preempted":
            log.warning("SIGTERM: preempted; checkpoint at the next step boundary, then requeue")
            self.preempted = True
        else:
            log.warning("SIGTERM (%s): no checkpoint for it", cause)

    def should_stop_now(self) -> bool:
        """At a step boundary after the warning: stop unless one more step still leaves room
        for the save (the pessimistic estimates of ``expected_seconds``)."""
        if self.deadline is None or not self.step_seconds:
            return True
        one_more_step = max(self.step_seconds)
        return self.deadline - time.monotonic() < one_more_step + self.expected_seconds()

    def stop_here(self) -> int:
        """At a step boundary, in every rank (collectives): stop training here for a requeue?

        The ranks share which signals they received; rank 0 decides and shares its decision:
        0 (train on), ``STOP_WARNING`` or ``STOP_PREEMPTED``, the same in every rank. A single
        process decides alone, without collectives."""
        multi = ranks.world_size() > 1
        notes = [int(self.requested), int(self.terminated)]
        warned, termed = ranks.max_over_ranks(notes) if multi else notes
        if not (warned or termed):
            return 0
        stop = 0
        if ranks.is_main():
            if warned and not self.requested:  # the warning reached other ranks only
                self.requested = True
                self._plan_warning()
            if termed and not self.terminated:  # so did a SIGTERM
                self.terminated = True
                self._judge_sigterm()
            if self.preempted:
                stop = STOP_PREEMPTED
            elif self.requested and self.should_stop_now():
                stop = STOP_WARNING
        return ranks.max_over_ranks([stop])[0] if multi else stop

    def requeue_now(self, reason: str) -> None:
        """Hand over to submitit's handler: checkpoint the task, requeue, exit (rank 0; on other
        ranks submitit's handler does nothing)."""
        with self._lock:
            if self.handed_over:
                return
            self.handed_over = True
        log.warning("requeueing now: %s", reason)
        if self._requeue is None:
            raise SystemExit(-1)
        try:
            self._requeue()  # submitit: dump the checkpointed task, scontrol requeue, exit
        except (OSError, subprocess.SubprocessError) as err:
            if not self.preempted:
                raise
            log.warning(
                "scontrol requeue failed (%s); SLURM requeues a preempted job itself "
                "(PreemptMode=REQUEUE)",
                err,
            )
            raise SystemExit(-1) from None

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
        stop = self.stop_here()
        if stop:
            self.preempted = stop == STOP_PREEMPTED
            why = "preempted" if self.preempted else "time limit near"
            log.info("stopping at step %d (%s): checkpoint, then requeue", state.global_step, why)
            self.requested = self.stopped = True
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


def job_state() -> str | None:
    """This job's state as squeue reports it (RUNNING, COMPLETING, ...), or None."""
    try:
        out = subprocess.run(
            ["squeue", "-h", "-j", os.environ.get("SLURM_JOB_ID", ""), "-o", "%T"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        )
    except (OSError, subprocess.SubprocessError) as err:
        log.warning("could not read the job's state from squeue: %s", err)
        return None
    return out.stdout.strip() or None


def sigterm_cause() -> str:
    """Why SIGTERM came: "time-limit" (the end time is near: the time-limit kill), "ending" (SLURM
    already reports the job as ending: scancel, a failed node), else "preempted".

    A preempted job still shows RUNNING during its GraceTime. An unknown state (squeue failed)
    counts as a preemption: the checkpoint costs one save; if it was an scancel, the requeue may
    bring the job back, to be cancelled again.
    """
    left = seconds_to_time_limit()
    if left is not None and left < TIME_LIMIT_MARGIN_S:
        return "time-limit"
    state = job_state()
    if state is not None and state not in ("RUNNING", "PREEMPTED", "SUSPENDED"):
        return "ending"
    return "preempted"


_CONTROLLER: RequeueController | None = None


def install_graceful_requeue(signal_delay_s: float | None) -> RequeueController | None:
    """Arm graceful requeue in a SLURM job; returns None elsewhere (local runs, tests)."""
    global _CONTROLLER
    if not os.environ.get("SLURM_JOB_ID") or not signal_delay_s:
        return None
    _CONTROLLER = RequeueController(signal_delay_s)
    _CONTROLLER.install()
    return _CONTROLLER
