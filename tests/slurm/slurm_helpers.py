"""Helpers for the SLURM tests: is the cluster usable, what sacct says about a job, waiting."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable

import pytest

START_HINT = "run `scripts/local-slurm start` (as root) first"
USABLE_NODE_STATES = {"idle", "mixed", "allocated", "completing"}


def _run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)


def cluster_problem() -> str | None:
    """Why the local cluster cannot take jobs, or None when it can."""
    if shutil.which("sinfo") is None:
        return "sinfo not found, SLURM is not installed"
    sinfo = _run("sinfo", "-h", "-o", "%T")
    if sinfo.returncode != 0:
        return f"sinfo failed: {sinfo.stderr.strip()}"
    states = sinfo.stdout.split()
    if not USABLE_NODE_STATES.intersection(states):
        return f"no node takes jobs (node states: {', '.join(states) or 'none'})"
    sacct = _run("sacct", "-n", "-X", "-S", "now-1hours", "-o", "JobID")
    if sacct.returncode != 0:
        return f"sacct does not answer: {sacct.stderr.strip()}"
    return None


def sacct_history(job_id: str) -> list[dict[str, str]]:
    """Every run of a job, oldest first (`--duplicates` keeps the runs a requeue replaced)."""
    fields = ["JobID", "State", "Start", "End", "ExitCode"]
    result = _run("sacct", "-n", "-X", "-P", "--duplicates", "-j", job_id, "-o", ",".join(fields))
    assert result.returncode == 0, result.stderr
    return [
        dict(zip(fields, line.split("|"), strict=True))
        for line in result.stdout.splitlines()
        if line
    ]


def wait_until(
    condition: Callable[[], bool], timeout_s: float, describe: Callable[[], str]
) -> None:
    """Poll instead of blocking in submitit so that a stuck job fails with its logs attached."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:.0f} s\n{describe()}", pytrace=False)
        time.sleep(1)


def final_state(job_id: str, timeout_s: float = 30) -> str:
    """The accounting state once it is final; slurmctld reports to slurmdbd asynchronously."""
    pending = {"", "PENDING", "RUNNING", "REQUEUED", "COMPLETING"}

    def last_state() -> str:
        history = sacct_history(job_id)
        return history[-1]["State"] if history else ""

    wait_until(
        lambda: last_state() not in pending,
        timeout_s,
        lambda: f"sacct history of job {job_id}: {sacct_history(job_id)}",
    )
    return last_state()
