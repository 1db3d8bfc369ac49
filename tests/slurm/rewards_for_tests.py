"""Test-only GRPO rewards, named in configs as ``rewards_for_tests:<function>``.

A SLURM job cannot see a reward monkeypatched into the submitting process, so the tests put this
folder on PATH for Python (PYTHONPATH; the job inherits it) and name the rewards through the
plug-in form of ``train.reward_funcs`` (see vqa_r1/rewards/__init__.py).
"""

from __future__ import annotations

import os
import signal
import threading

from vqa_r1.rewards import completion_text

# A random-init model earns no accuracy reward, so GRPO would have zero gradients and a
# comparison of weights could not fail; the share of "e" varies between samples, so the sampling
# RNG and every update matter.
# letter_e_paced: steps a SLURM job's rank 0 trains in each start of the job before it waits, and
# how many starts are paced so (the others run freely; unset: every start)
PACE_ENV = "VQA_R1_TEST_STEPS_PER_START"
PACED_STARTS_ENV = "VQA_R1_TEST_PACED_STARTS"


def letter_e(completions, **_):
    texts = [completion_text(c) for c in completions]
    return [t.count("e") / max(1, len(t)) for t in texts]


class _Pace:
    """Per process: reward calls so far, and whether SLURM has signalled this start of the job."""

    calls = 0
    signalled = threading.Event()
    armed = False


def _arm() -> None:
    """Note SLURM's warning (USR2) and SIGTERM (a preemption, `scontrol requeue`), then let the
    handlers already installed (the requeue controller's) act as they would."""
    for signum in (signal.SIGUSR2, signal.SIGTERM):
        previous = signal.getsignal(signum)

        def noted(number, frame, previous=previous):
            _Pace.signalled.set()
            if callable(previous):
                previous(number, frame)

        signal.signal(signum, noted)
    _Pace.armed = True


def _controller_signalled() -> bool:
    """A signal that came before this reward first ran: the requeue controller noted it."""
    from vqa_r1.launch import requeue

    controller = requeue._CONTROLLER
    return controller is not None and (controller.requested or controller.terminated)


def letter_e_paced(completions, **kwargs):
    """``letter_e``; in a SLURM job, rank 0 trains ``$VQA_R1_TEST_STEPS_PER_START`` steps per
    start of the job (of its first ``$VQA_R1_TEST_PACED_STARTS`` starts; unset: all), then its
    next reward call waits (using no CPU) until SLURM signals the job:
    the time-limit warning or a SIGTERM. So every time-limit window of a requeue test trains the
    same number of steps on a fast or a slow, loaded machine (steps counted, not time), and a
    preemption meets the job at a known step. Elsewhere (the uninterrupted reference runs, other
    ranks) it never waits, and the rewards, hence the runs, are the same."""
    steps = int(os.environ.get(PACE_ENV, "0") or 0)
    rank0 = os.environ.get("SLURM_PROCID", "0") == "0"
    start = int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)
    paced = start < int(os.environ.get(PACED_STARTS_ENV, "1000000") or 0)
    main_thread = threading.current_thread() is threading.main_thread()  # signals live there
    if steps and paced and os.environ.get("SLURM_JOB_ID") and rank0 and main_thread:
        if not _Pace.armed:
            _arm()
        _Pace.calls += 1
        if _Pace.calls > steps:
            while not (_Pace.signalled.wait(0.2) or _controller_signalled()):
                pass
    return letter_e(completions, **kwargs)
