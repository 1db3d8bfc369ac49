"""Issue 3 acceptance against the real local SLURM: a GRPO job cut by its time limits requeues
itself at least three times and ends where an uninterrupted run ends; a requeued job runs the
code as submitted; a job that needs more requeues than allowed stops with a clear status.

Everything is submitted at once by one module fixture (two SLURM jobs, the local cluster's two
slots, plus the uninterrupted reference run as a local subprocess) because the requeue cycles, not
the computation, set the duration. Steps are counted, not timed: each start of a job trains PACE
steps, then waits in its reward for SLURM's warning (rewards_for_tests.letter_e_paced), so the
number of time-limit windows is the same on a fast and on a loaded machine.

* main job: `slurm/launch.py grpo` from this checkout, enough steps for at least 3 requeues;
* snapshot job: `slurm/launch.py grpo --max-requeues 1` from a temporary copy of the repository
  whose `vqa_r1/__init__.py` writes a marker; the copy is changed right after submission, so the
  requeued run's marker tells which code it imported. Its second warning signal then meets the
  requeue limit, which is what the max-requeues test checks (a separate job would wait for a slot).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rewards_for_tests import PACE_ENV, PACED_STARTS_ENV
from slurm_helpers import (
    assert_same_run,
    final_state,
    prebuild_tiny_model,
    sacct_history,
    scontrol,
    wait_until,
)

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent  # holds rewards_for_tests.py, put on the jobs' PYTHONPATH
# A start trains PACE + 1 steps (the last one waits for the warning, which comes 80-110 s into a
# two-minute start, after start-up and PACE steps even on a loaded machine): three full starts
# and a short fourth, i.e. three time-limit requeues.
PACE = 10
TIME = "00:02:00"
MAX_STEPS = 3 * (PACE + 1) + 5
SETTINGS = [
    f"train.max_steps={MAX_STEPS}",
    "train.save_steps=5",
    "train.logging_steps=1",
    "train.per_device_train_batch_size=4",
    "train.num_generations=4",
    "train.max_completion_length=16",
    "train.reward_funcs=[rewards_for_tests:letter_e_paced]",
]
COMPARED = ("loss", "reward", "grad_norm")
GRACEFUL = "checkpoint at the next step boundary"
SAVED = "saved at the step boundary"
IMMEDIATE = "requeueing now: a checkpoint needs about"
WATCHDOG = "requeueing now: the warning window is running out"
MARKER_CODE = """
import os as _os

if _os.environ.get("SLURM_JOB_ID"):  # test marker: which copy of the code did this job import?
    with open({marker!r}, "a") as _fh:
        _fh.write(f"{version} {{_os.environ.get('SLURM_RESTART_COUNT', '0')}} {{__file__}}\\n")
"""
REFERENCE = """
import sys
from vqa_r1.config import read_config
from vqa_r1.logging_setup import setup_logging
from vqa_r1.train.runner import train

setup_logging()
print(train(read_config(sys.argv[1]), sys.argv[2])["state"], flush=True)
"""


def job_env() -> dict[str, str]:
    """The submitting environment; sbatch exports it to the job (the tiny-model cache included),
    with the reward's pacing (PACE steps per start)."""
    path = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p)
    env = {k: v for k, v in os.environ.items() if k != PACED_STARTS_ENV}
    return {**env, "PYTHONPATH": path, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
            PACE_ENV: str(PACE)}  # fmt: skip


def launch(launcher: Path, run_dir: Path, dataset: Path, *extra: str) -> str:
    command = [sys.executable, str(launcher), "grpo", "--model", "tiny-qwen2.5-vl"]
    command += ["--cluster", "local-slurm", "--time", TIME, "--executor", "slurm"]
    command += ["--output-dir", str(run_dir), "--dataset", str(dataset), *extra]
    for setting in SETTINGS:
        command += ["--set", setting]
    out = subprocess.run(command, capture_output=True, text=True, env=job_env(), timeout=180)
    assert out.returncode == 0, f"{command}\n{out.stdout}\n{out.stderr[-3000:]}"
    found = re.search(r"as slurm job (\d+)", out.stdout)
    assert found, out.stdout
    return found.group(1)


def job_log(run_dir: Path, job_id: str) -> str:
    """stdout and stderr of all runs of the job (submitit opens them in append mode)."""
    logs = [run_dir / "jobs" / f"{job_id}_0_log.{ext}" for ext in ("out", "err")]
    return "\n".join(p.read_text(errors="replace") for p in logs if p.exists())


def describe(run_dir: Path, job_id: str) -> str:
    status = run_dir / "status.json"
    return (
        f"job {job_id}: sacct {sacct_history(job_id)}\nstatus.json "
        f"{status.read_text() if status.exists() else '-'}\n--- log tail ---\n"
        + job_log(run_dir, job_id)[-4000:]
    )


def copy_repository(target: Path, marker: Path) -> Path:
    """The launcher and library in a scratch folder, with the import marker as submitted."""
    shutil.copytree(REPO / "slurm", target / "slurm")
    shutil.copytree(REPO / "src", target / "src", ignore=shutil.ignore_patterns("__pycache__"))
    init = target / "src" / "vqa_r1" / "__init__.py"
    init.write_text(init.read_text() + MARKER_CODE.format(marker=str(marker), version="submitted"))
    return init


@pytest.fixture(scope="module")
def jobs(slurm_cluster, synthetic_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("requeue")
    prebuild_tiny_model()
    t0 = time.monotonic()
    main = root / "main"
    main_id = launch(REPO / "slurm" / "launch.py", main, synthetic_dir)

    marker = root / "marker.txt"
    init = copy_repository(root / "copy", marker)
    snap = root / "snapshot"
    snap_id = launch(
        root / "copy" / "slurm" / "launch.py", snap, synthetic_dir, "--max-requeues", "1"
    )
    # the working tree changes while the job is queued or running; its requeue must not notice
    init.write_text(init.read_text().replace('f"submitted ', 'f"changed-after-submission '))
    submitted = time.monotonic() - t0

    ref = root / "reference"
    ref.mkdir()
    (ref / "driver.py").write_text(REFERENCE)
    reference = subprocess.Popen(
        [sys.executable, str(ref / "driver.py"), str(main / "config.yaml"), str(ref / "run")],
        stdout=subprocess.PIPE,
        stderr=open(ref / "log.txt", "w"),  # noqa: SIM115 - closed with the process
        text=True,
        env=job_env(),
    )
    info = dict(
        t0=t0,
        submitted_s=submitted,
        main=main,
        main_id=main_id,
        snap=snap,
        snap_id=snap_id,
        marker=marker,
        init=init,
        reference=reference,
        ref=ref,
        timings={},
    )
    yield info
    if reference.poll() is None:
        reference.kill()
    for job_id in (main_id, snap_id):  # nothing left behind when a test failed early
        subprocess.run(["scancel", job_id], capture_output=True, timeout=30, check=False)
    print("timings (s from first submission): " + json.dumps(info["timings"]))


def test_requeued_job_runs_the_code_as_submitted(jobs):
    marker, snap, job_id = jobs["marker"], jobs["snap"], jobs["snap_id"]

    def restarted() -> bool:
        return marker.exists() and any(
            line.split()[1] == "1" for line in marker.read_text().splitlines()
        )

    wait_until(restarted, 420, lambda: describe(snap, job_id))
    jobs["timings"]["snapshot_restart_seen"] = round(time.monotonic() - jobs["t0"])
    assert "changed-after-submission" in jobs["init"].read_text()
    runs = [line.split() for line in marker.read_text().splitlines()]
    assert {restart for _, restart, _ in runs} >= {"0", "1"}
    for version, restart, path in runs:
        assert version == "submitted", f"run {restart} imported the changed tree: {runs}"
        assert Path(path).is_relative_to(snap / "code"), f"run {restart} imported {path}"


def test_max_requeues_stops_the_job_with_a_clear_status(jobs):
    snap, job_id = jobs["snap"], jobs["snap_id"]
    state = final_state(job_id, timeout_s=600)
    jobs["timings"]["max_requeues_job_done"] = round(time.monotonic() - jobs["t0"])
    assert state != "COMPLETED", describe(snap, job_id)
    status = json.loads((snap / "status.json").read_text())
    assert status["state"] == "MAX_REQUEUES_REACHED", status
    assert status["requeues"] == 1 and "maximum of 1 requeues" in status["message"], status
    assert not (snap / "final").exists()
    assert scontrol(job_id).get("Restarts") == "1"
    assert "not requeueing: the maximum of 1 requeues was reached" in job_log(snap, job_id)
    print(f"max-requeues job {job_id}: sacct state {state}, status {status['message']!r}")


def test_requeued_grpo_equals_uninterrupted_run(jobs):
    main, job_id, reference = jobs["main"], jobs["main_id"], jobs["reference"]
    out, _ = reference.communicate(timeout=600)
    jobs["timings"]["reference_done"] = round(time.monotonic() - jobs["t0"])
    assert reference.returncode == 0, (jobs["ref"] / "log.txt").read_text()[-3000:]
    assert out.strip().splitlines()[-1] == "COMPLETED"

    state = final_state(job_id, timeout_s=900)
    jobs["timings"]["main_job_done"] = round(time.monotonic() - jobs["t0"])
    assert state == "COMPLETED", describe(main, job_id)
    restarts = int(scontrol(job_id)["Restarts"])
    status = json.loads((main / "status.json").read_text())
    history = [run["State"] for run in sacct_history(job_id)]
    assert restarts >= 3 and history.count("REQUEUED") == restarts, (restarts, history)
    assert status["state"] == "COMPLETED" and status["requeues"] == restarts, status

    assert_same_run(jobs["ref"] / "run", main, MAX_STEPS, COMPARED)

    log = job_log(main, job_id)
    counts = {
        key: log.count(text)
        for key, text in (("graceful", SAVED), ("immediate", IMMEDIATE), ("watchdog", WATCHDOG))
    }
    resumed = re.findall(r"resuming from \S*checkpoint-(\d+)", log)
    assert GRACEFUL in log and counts["graceful"] >= 1, describe(main, job_id)
    print(
        f"main job {job_id}: {restarts} restarts, sacct {history}; requeues: {counts['graceful']} "
        f"with a checkpoint at a step boundary, {counts['immediate'] + counts['watchdog']} from the "
        f"latest periodic checkpoint ({counts['watchdog']} by the watchdog), the rest before the "
        f"controller was armed; resumed from steps {resumed}"
    )
