"""Fixtures for tests that submit jobs to a real SLURM, the one `scripts/local-slurm start` runs.

The cluster is required rather than faked because the behaviour under test (warning signal,
requeue under the same job id, restart count, accounting) lives in slurmctld, not in submitit.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

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


@pytest.fixture(scope="session")
def slurm_cluster() -> None:
    """Fail under CI (a silent skip would pass a run that tested nothing); skip elsewhere."""
    problem = cluster_problem()
    if problem is None:
        return
    message = f"local SLURM cluster not usable: {problem}; {START_HINT}"
    if os.environ.get("CI"):
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@pytest.fixture
def submitit_folder(tmp_path: Path, slurm_cluster: None) -> Path:
    """A folder per test: job ids restart at 1 when the cluster state is purged, so a shared
    folder could hand a test another run's logs and results."""
    folder = tmp_path / "submitit"
    folder.mkdir()
    return folder


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
