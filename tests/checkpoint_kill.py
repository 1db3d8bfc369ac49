"""SIGKILL a training process while it writes a checkpoint (a job's time limit, a node failure).

A driver script starts with ``STALL_SAVE``: the checkpoint of step ``$STALL_CHECKPOINT`` stalls
after its adapter is written, before its optimizer state; ``kill_while_writing`` waits for that
moment and kills the process. Used for SFT (test_kill_during_checkpoint.py) and prompt tuning
(test_prompt_tuning.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import time

STALL_SAVE = """
import os as _os, time as _time, torch as _torch

_original_save = _torch.save


def _stalled_save(obj, f, *args, **kwargs):
    step = _os.environ.get("STALL_CHECKPOINT", "0")
    if step != "0" and f"checkpoint-{step}" in str(f) and "optimizer" in str(f):
        print("WRITING-CHECKPOINT", flush=True)
        _time.sleep(120)
    return _original_save(obj, f, *args, **kwargs)


_torch.save = _stalled_save
"""


def kill_while_writing(argv: list[str], env: dict, step: int, timeout_s: float = 240) -> None:
    """Run ``argv`` (a driver with STALL_SAVE) and SIGKILL it while it writes checkpoint-``step``."""
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**env, "STALL_CHECKPOINT": str(step)},
    )
    deadline = time.time() + timeout_s
    for line in proc.stdout:
        if "WRITING-CHECKPOINT" in line:
            break
        assert time.time() < deadline, f"the driver never reached checkpoint-{step}"
    else:
        proc.wait(timeout=30)
        raise AssertionError(f"the driver ended (exit {proc.returncode}) before checkpoint-{step}")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
