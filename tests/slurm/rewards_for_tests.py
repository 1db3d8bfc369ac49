"""Test-only GRPO rewards, named in configs as ``rewards_for_tests:<function>``.

A SLURM job cannot see a reward monkeypatched into the submitting process, so the tests put this
folder on PATH for Python (PYTHONPATH; the job inherits it) and name the rewards through the
plug-in form of ``train.reward_funcs`` (see vqa_r1/rewards/__init__.py).
"""

from __future__ import annotations

import os
import sys
import threading
import time

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
    """Per process: reward calls so far, and whether the start was described in the log."""

    calls = 0
    said = False


def _start_ends() -> bool:
    """SLURM is ending this start gracefully: its time-limit warning came, or a SIGTERM the
    requeue controller judged a preemption (launch/requeue.py). Either way the controller
    checkpoints at the next step boundary, so the waiting step must finish. (A SIGTERM that ends
    the job, `scontrol requeue` or the time-limit kill, gets no checkpoint: the wait goes on
    until SLURM kills the start.)"""
    from vqa_r1.launch import requeue

    controller = requeue._CONTROLLER
    return controller is not None and (controller.requested or controller.preempted)


def letter_e_paced(completions, **kwargs):
    """``letter_e``; in a SLURM job, rank 0 trains ``$VQA_R1_TEST_STEPS_PER_START`` steps per
    start of the job (of its first ``$VQA_R1_TEST_PACED_STARTS`` starts; unset: all), then its
    next reward call waits (using no CPU) until SLURM ends the start: its time-limit warning or a
    preemption (the requeue controller then checkpoints at the step boundary), or a kill. So
    every time-limit window of a requeue test trains the same number of steps on a fast or a
    slow, loaded machine (steps counted, not time), and a preemption meets the job at a known
    step. Elsewhere (the uninterrupted reference runs, other ranks) it never waits, and the
    rewards, hence the runs, are the same."""
    steps = int(os.environ.get(PACE_ENV, "0") or 0)
    rank0 = os.environ.get("SLURM_PROCID", "0") == "0"
    start = int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)
    paced = start < int(os.environ.get(PACED_STARTS_ENV, "1000000") or 0)
    main_thread = threading.current_thread() is threading.main_thread()  # signals live there
    pacing = bool(steps and paced and os.environ.get("SLURM_JOB_ID") and rank0 and main_thread)
    if not _Pace.said:  # once per process, in the job's log: what the test relies on
        _Pace.said = True
        print(f"letter_e_paced: {steps or 'no'} steps per start (start {start}, rank 0: "
              f"{rank0}, main thread: {main_thread}, paced: {pacing})", file=sys.stderr)  # fmt: skip
    if pacing:
        _Pace.calls += 1
        if _Pace.calls > steps:
            while not _start_ends():
                time.sleep(0.2)
    return letter_e(completions, **kwargs)
