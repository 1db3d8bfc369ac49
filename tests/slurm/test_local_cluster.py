"""Submitit against the local SLURM: a job completes, and a job cut by its time limit
checkpoints, requeues itself under the same job id and completes. The training task's automatic
requeue relies on exactly these mechanics."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from itertools import pairwise
from pathlib import Path

import cloudpickle
import pytest
import submitit
from slurm_helpers import final_state, sacct_history, wait_until

from vqa_r1.launch.clusters import load_cluster, to_submitit_params

pytestmark = pytest.mark.slurm

# The job's Python cannot import this test module (pytest put its folder on sys.path, the job
# does not), so the functions and classes below travel by value inside the pickles.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def add(a: int, b: int) -> int:
    return a + b


class RestartRecorder:
    """Sleeps through its first `requeues` runs so the time limit interrupts them.

    Each run appends (job id, SLURM_RESTART_COUNT, start time) before sleeping; `checkpoint`
    hands submitit this object, so the list survives into the next run and comes back as the
    result.
    """

    def __init__(self, requeues: int) -> None:
        self.requeues = requeues
        self.starts: list[tuple[str, int, float]] = []

    def __call__(self) -> list[tuple[str, int, float]]:
        restart = int(os.environ.get("SLURM_RESTART_COUNT", "0"))
        self.starts.append((os.environ["SLURM_JOB_ID"], restart, time.time()))
        if len(self.starts) <= self.requeues:
            time.sleep(3600)  # ended by the warning signal, not here
        return self.starts

    def checkpoint(self, *args: object, **kwargs: object) -> submitit.helpers.DelayedSubmission:
        return submitit.helpers.DelayedSubmission(self)


def make_executor(folder: Path, time_minutes: int) -> submitit.AutoExecutor:
    # Limits under ~50 minutes make submitit count every signal as a timeout, not a preemption.
    executor = submitit.AutoExecutor(folder=folder, cluster="slurm", slurm_max_num_timeout=10)
    params = to_submitit_params(load_cluster("local-slurm"), time_minutes=time_minutes)
    executor.update_parameters(name="vqa-r1-test", **params)
    return executor


def describe(job: submitit.Job) -> str:
    return (
        f"job {job.job_id}: sacct {sacct_history(job.job_id)}\n"
        f"--- stdout ---\n{job.stdout() or ''}\n--- stderr ---\n{job.stderr() or ''}"
    )


def test_trivial_job_completes(submitit_folder: Path) -> None:
    job = make_executor(submitit_folder, time_minutes=2).submit(add, 2, 3)
    wait_until(job.done, 90, lambda: describe(job))
    assert job.result() == 5
    assert final_state(job.job_id) == "COMPLETED"


def test_timed_out_job_requeues_and_completes(submitit_folder: Path) -> None:
    requeues = 2
    started = time.time()
    job = make_executor(submitit_folder, time_minutes=1).submit(RestartRecorder(requeues))
    wait_until(job.done, 150 * requeues + 60, lambda: describe(job))
    starts = job.result()

    assert [restart for _, restart, _ in starts] == list(range(requeues + 1))
    assert {job_id for job_id, _, _ in starts} == {job.job_id}
    assert final_state(job.job_id) == "COMPLETED"
    states = [run["State"] for run in sacct_history(job.job_id)]
    assert states.count("REQUEUED") == requeues, states

    times = [t for _, _, t in starts]
    gaps = ", ".join(f"{b - a:.0f} s" for a, b in pairwise(times))
    print(f"requeue cycle (start to restart): {gaps}; total {time.time() - started:.0f} s")


def test_the_node_offers_every_processor_for_multi_process_jobs(slurm_cluster):
    """A two-process job needs two CPUs on the node; `nproc` under OMP_NUM_THREADS=1 (as the test
    script exports) says 1, which once made the node a one-CPU node."""
    cpus = subprocess.run(["sinfo", "-h", "-o", "%c"], capture_output=True, text=True, timeout=30)
    assert cpus.returncode == 0, cpus.stderr
    assert int(cpus.stdout.split()[0]) == os.cpu_count() >= 2
