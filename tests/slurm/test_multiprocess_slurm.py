"""Issue 9 acceptance on the real local SLURM: GRPO with two processes (one task each, gloo on CPU:
the code path of a `--gpus 2` job but for the device) through time-limit requeues and a requeue
forced from outside (`scontrol requeue`: SIGTERM, SIGKILL after KillWait, back in the queue),
equal to an uninterrupted two-process run; one rank killed in the middle of a checkpoint write;
and the job preempted by SLURM itself for a job of a higher-tier partition.

The jobs take the whole 2-CPU cluster, so they run one after the other; the uninterrupted
references run as local two-process runs (torch.distributed.run, the same config).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from rewards_for_tests import PACE_ENV, PACED_STARTS_ENV
from slurm_helpers import (
    assert_same_run,
    final_state,
    per_step,
    prebuild_tiny_model,
    sacct_history,
    scontrol,
    wait_until,
)

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent  # rewards_for_tests.py, put on the jobs' PYTHONPATH
# Steps counted, not time: each start of a paced job trains PACE steps, then its rank 0 waits in
# the reward of the next one until SLURM signals the job (rewards_for_tests.letter_e_paced), so
# a start ends after PACE + 1 steps on a fast or a loaded machine alike. Two-minute limits: the
# warning comes 80-110 s into a start, well after start-up and PACE + 1 steps even under load.
PACE = 10
TIME = "00:02:00"
# start 1 is requeued from outside (scontrol) after PACE + 1 steps, starts 2-4 by their time
# limit (three time-limit requeues), start 5 trains the rest
MAX_STEPS = 4 * (PACE + 1) + 6
SETTINGS = [
    f"train.max_steps={MAX_STEPS}",
    "train.save_steps=5",
    "train.logging_steps=1",
    "train.per_device_train_batch_size=2",
    "train.num_generations=4",
    "train.max_completion_length=16",
    "train.reward_funcs=[rewards_for_tests:letter_e_paced]",
]
COMPARED = ("loss", "reward", "grad_norm")
STALL = """
import os
if os.environ.get("VQA_R1_TEST_STALL") and os.environ.get("SLURM_PROCID") == "1":
    import time, torch
    _save, _step = torch.save, os.environ["VQA_R1_TEST_STALL"]

    def _stalled(obj, f, *args, **kwargs):  # rank 1 stops inside its part of checkpoint-N
        if f"checkpoint-{_step}" in str(f) and "rng_state" in str(f):
            with open(os.environ["VQA_R1_TEST_STALL_MARKER"], "w") as fh:
                fh.write(str(os.getpid()))
            time.sleep(600)
        return _save(obj, f, *args, **kwargs)

    torch.save = _stalled
"""


def job_env(*extra_paths: Path, pace: int | None = None, starts: int | None = None, **extra: str):
    """The submitting environment (sbatch exports it to the job): the test rewards on the path,
    and the reward's pacing: ``pace`` steps per start, for the first ``starts`` starts (None:
    every start); without ``pace`` the reward never waits."""
    paths = [str(p) for p in (*extra_paths, HERE)] + [os.environ.get("PYTHONPATH", "")]
    drop = ("RANK", "WORLD_SIZE", "LOCAL_RANK", PACE_ENV, PACED_STARTS_ENV)
    env = {k: v for k, v in os.environ.items() if k not in drop}
    if pace is not None:
        env[PACE_ENV] = str(pace)
    if starts is not None:
        env[PACED_STARTS_ENV] = str(starts)
    return {
        **env,
        "PYTHONPATH": os.pathsep.join(p for p in paths if p),
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        **extra,
    }


def settings(**train: object) -> list[str]:
    """SETTINGS with some train.* values changed (e.g. max_steps=15)."""
    changed = {f"train.{key}": value for key, value in train.items()}
    return [
        f"{key}={changed.pop(key)}" if key in changed else f"{key}={value}"
        for key, value in (s.split("=", 1) for s in SETTINGS)
    ] + [f"{key}={value}" for key, value in changed.items()]


def grpo_command(run_dir: Path, dataset: Path, time_limit: str, **train: object) -> list:
    command = [sys.executable, str(REPO / "slurm" / "launch.py"), "grpo"]
    command += ["--model", "tiny-qwen2.5-vl", "--cluster", "local-slurm", "--time", time_limit]
    command += ["--executor", "slurm", "--processes-per-node", "2"]
    command += ["--output-dir", str(run_dir), "--dataset", str(dataset)]
    return command + [x for s in settings(**train) for x in ("--set", s)]


def local_two_process_run(run_dir: Path, dataset: Path, log: Path, port: int, **train: object):
    """The uninterrupted reference: the same GRPO with two local processes (torch.distributed.run),
    no SLURM; returns the running process."""
    return subprocess.Popen(
        [
            sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
            "--master_port", str(port), "-m", "vqa_r1", "grpo", "--model", "tiny-qwen2.5-vl",
            "--dataset", str(dataset), "--output-dir", str(run_dir),
            *[x for s in settings(**train) for x in ("--set", s)],
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(log, "w"),  # noqa: SIM115 - closed with the process
        env=job_env(),
        cwd=REPO,
    )  # fmt: skip


def submit(command: list, env: dict) -> str:
    out = subprocess.run(command, capture_output=True, text=True, env=env, timeout=180)
    assert out.returncode == 0, f"{command}\n{out.stdout}\n{out.stderr[-3000:]}"
    found = re.search(r"as slurm job (\d+)", out.stdout)
    assert found, out.stdout
    return found.group(1)


def logs(run_dir: Path, job_id: str, tail: int | None = 3000) -> str:
    files = sorted((run_dir / "jobs").glob(f"{job_id}_*_log.*"))
    texts = [p.read_text(errors="replace") for p in files]
    return "\n".join(
        f"== {p.name}\n" + t[-tail if tail else 0 :] for p, t in zip(files, texts, strict=True)
    )


def describe(run_dir: Path, job_id: str) -> str:
    status = run_dir / "status.json"
    return (
        f"job {job_id}: sacct {sacct_history(job_id)}\nstatus.json "
        f"{status.read_text() if status.exists() else '-'}\n" + logs(run_dir, job_id)
    )


@pytest.fixture(scope="module")
def jobs(slurm_cluster, synthetic_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("multiprocess")
    prebuild_tiny_model()
    main = root / "main"
    main_id = submit(grpo_command(main, synthetic_dir, TIME), job_env(pace=PACE))
    ref = root / "reference"
    reference = local_two_process_run(ref, synthetic_dir, root / "reference.log", 29531)
    info = dict(root=root, main=main, main_id=main_id, ref=ref, reference=reference)
    info.update(synthetic=synthetic_dir, submitted=[main_id])
    yield info
    if reference.poll() is None:
        reference.kill()
    for job_id in info["submitted"]:  # nothing left behind when a test failed early
        subprocess.run(["scancel", job_id], capture_output=True, timeout=30, check=False)


def test_two_process_grpo_through_requeues_and_a_forced_requeue_equals_an_uninterrupted_run(jobs):
    main, job_id = jobs["main"], jobs["main_id"]

    def checkpointed(step: int) -> bool:
        return (
            main / "checkpoints" / f"checkpoint-{step}" / "CHECKPOINT_COMPLETE"
        ).exists() or any(
            int(p.name.split("-")[1]) >= step
            for p in (main / "checkpoints").glob("checkpoint-*")
            if (p / "trainer_state.json").exists()
        )

    # a requeue from outside in the middle of a run (SIGTERM, SIGKILL after KillWait, queued
    # again), while rank 0 waits after the first start's PACE steps
    wait_until(lambda: checkpointed(10), 300, lambda: describe(main, job_id))
    forced = subprocess.run(["scontrol", "requeue", job_id], capture_output=True, text=True)
    assert forced.returncode == 0, forced.stderr

    state = final_state(job_id, timeout_s=1200)
    assert state == "COMPLETED", describe(main, job_id)
    restarts = int(scontrol(job_id)["Restarts"])
    assert restarts >= 4, (restarts, sacct_history(job_id))  # the forced one and >= 3 timeouts
    status = json.loads((main / "status.json").read_text())
    assert status["state"] == "COMPLETED", status

    reference = jobs["reference"]
    assert reference.wait(timeout=900) == 0, (jobs["root"] / "reference.log").read_text()[-3000:]
    assert_same_run(jobs["ref"], main, MAX_STEPS, COMPARED)

    text = logs(main, job_id, tail=None)
    assert "rank 0 of 2" in text and "rank 1 of 2" in text, text[-2000:]
    # the run's side effects come from rank 0 alone (one metrics line per step: assert_same_run)
    assert status.get("written_by_rank") == 0, status  # status.json: rank 0 alone
    assert (main / "final" / "adapter_model.safetensors").exists()
    print(
        f"two-process job {job_id}: {restarts} restarts, sacct {[h['State'] for h in sacct_history(job_id)]}"
    )


def test_a_rank_killed_mid_checkpoint_resumes_from_the_previous_complete_one(jobs):
    # submitted after the two-process job ended: each takes the whole cluster
    root = jobs["root"]
    stall_dir = root / "stall"
    stall_dir.mkdir()
    (stall_dir / "sitecustomize.py").write_text(STALL)
    killed, marker = root / "killed", root / "stalled.pid"
    env = job_env(stall_dir, VQA_R1_TEST_STALL="10", VQA_R1_TEST_STALL_MARKER=str(marker))
    job_id = submit(grpo_command(killed, jobs["synthetic"], "00:10:00", max_steps=15), env)
    jobs["submitted"].append(job_id)
    wait_until(marker.exists, 900, lambda: describe(killed, job_id))
    os.kill(int(marker.read_text()), signal.SIGKILL)  # rank 1, inside its save of checkpoint-10
    state = final_state(job_id, timeout_s=120)
    assert state != "COMPLETED", describe(killed, job_id)
    checkpoints = killed / "checkpoints"
    assert (checkpoints / "checkpoint-5" / "CHECKPOINT_COMPLETE").exists()
    assert not (checkpoints / "checkpoint-10").exists()  # never renamed into place
    assert not (killed / "final").exists()

    again = submit(grpo_command(killed, jobs["synthetic"], "00:10:00", max_steps=15), job_env())
    jobs["submitted"].append(again)
    assert final_state(again, timeout_s=600) == "COMPLETED", describe(killed, again)
    text = logs(killed, again, tail=None)
    assert re.search(r"resuming from \S*checkpoint-5\b", text), text[-3000:]
    steps = [r["step"] for r in per_step(killed)]
    assert steps == list(range(1, 16)), steps


def test_a_job_preempted_by_a_higher_tier_partition_checkpoints_in_its_grace_time_and_resumes(
    jobs,
):
    """SLURM's own preemption. scripts/local-slurm gives the cluster a partition `urgent` whose
    jobs preempt those of `debug` (PreemptType=preempt/partition_prio, PreemptMode=REQUEUE,
    GraceTime=60): the preempted job's tasks get SIGTERM while it is still RUNNING, the ranks
    checkpoint at the next step boundary and rank 0 requeues. Periodic checkpoints come only every
    25 steps, so the step resumed from shows the checkpoint was the graceful one. The first start
    waits after PACE steps (steps counted), so the preemption meets it mid-run on any machine."""
    root, dataset = jobs["root"], jobs["synthetic"]
    run, steps, every = root / "preempted", 60, 25
    job_id = submit(
        grpo_command(run, dataset, "00:10:00", max_steps=steps, save_steps=every),
        job_env(pace=PACE, starts=1),
    )
    jobs["submitted"].append(job_id)
    # the uninterrupted reference trains meanwhile (its steps mostly sleep in the reward)
    ref, ref_log = root / "preempted-reference", root / "preempted-reference.log"
    reference = local_two_process_run(
        ref, dataset, ref_log, 29532, max_steps=steps, save_steps=every
    )
    metrics = run / "metrics.jsonl"
    wait_until(
        lambda: metrics.exists() and len(per_step(run)) >= 5, 600, lambda: describe(run, job_id)
    )
    urgent = subprocess.run(
        ["sbatch", "--parsable", "--partition", "urgent", "--ntasks", "1", "--cpus-per-task", "1"]
        + ["--time", "00:01:00", "--output", str(root / "urgent.out"), "--wrap", "sleep 5"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert urgent.returncode == 0, urgent.stderr
    urgent_id = urgent.stdout.strip().split(";")[0]
    jobs["submitted"].append(urgent_id)

    assert final_state(job_id, timeout_s=600) == "COMPLETED", describe(run, job_id)
    assert final_state(urgent_id, timeout_s=120) == "COMPLETED", sacct_history(urgent_id)
    history = [h["State"] for h in sacct_history(job_id)]
    assert history == ["REQUEUED", "COMPLETED"], history
    text = logs(run, job_id, tail=None)
    assert "SIGTERM: preempted; checkpoint at the next step boundary" in text, text[-3000:]
    resumed = re.findall(r"resuming from \S*checkpoint-(\d+)", text)
    assert len(resumed) == 2 and resumed[0] == resumed[1], resumed  # both ranks, the same one
    stopped = int(resumed[0])
    assert stopped >= 5 and stopped % every != 0, stopped  # the graceful checkpoint
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "COMPLETED" and status["requeues"] == 1, status
    assert status["resumed_from"].endswith(f"checkpoint-{stopped}"), status

    try:
        code = reference.wait(timeout=600)
    finally:
        if reference.poll() is None:
            reference.kill()
    assert code == 0, ref_log.read_text()[-3000:]
    assert_same_run(ref, run, steps, COMPARED)
    print(f"preempted job {job_id}: sacct {history}, checkpoint at step {stopped}, resumed there")
