"""Sweeps, chains and status/logs/cancel against the local SLURM, through `slurm/launch.py`.

Everything is submitted at once by one module fixture (a 3-seed sweep, a chain sft -> grpo ->
evaluate, a chain sft -> merge -> grpo -> evaluate, a chain whose first job fails, and a chain
sft -> evaluate whose evaluate job is held so that it is re-launched after its sft finished), so the
2-CPU cluster stays busy and each test only waits for its part. The failing chain's sft step points
at a model folder that exists at submission (the login node cannot tell it is empty) and fails in
the job, as a scratch purge would break a queued job. (A bad dataset is refused before submission.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from slurm_helpers import final_state, sacct_history, wait_until

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
JOB = ["--model", "tiny-qwen2.5-vl", "--cluster", "local-slurm", "--time", "00:05:00"]
SHORT = ["--set", "train.max_steps=3", "--set", "train.save_steps=3"]
DONE = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL"}


def launch(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(REPO / "slurm" / "launch.py"), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"},
    )


def launched(*args: str) -> str:
    out = launch(*args)
    assert out.returncode == 0, f"{args}\n{out.stdout}\n{out.stderr}"
    return out.stdout


def status(target: str | Path) -> dict:
    return json.loads(launched("status", str(target), "--json"))


def states(target: str | Path) -> list[str]:
    return [job["state"] for job in status(target)["jobs"]]


def wait_for(target: Path, timeout_s: float) -> None:
    """Until every job of the target has a final state in SLURM's accounting."""
    wait_until(
        lambda: all(s in DONE for s in states(target)),
        timeout_s,
        lambda: (
            f"every job of {target.name} to end; `status` and `logs --stderr` say:\n"
            + launch("status", str(target)).stdout
            + launch("logs", str(target), "--stderr").stdout
        ),
    )


def prebuild_shared_inputs() -> None:
    """Build the tiny model and synthetic data once here, not in every job at the same moment."""
    from vqa_r1.data.datasets import dataset_dir
    from vqa_r1.models.loading import load_model
    from vqa_r1.recipes import load_config

    config = load_config("sft", "tiny-qwen2.5-vl")
    dataset_dir(config.data)
    load_model(config)


@pytest.fixture(scope="module")
def submitted(slurm_cluster: None, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("sweep_chain")
    prebuild_shared_inputs()
    paths = {name: root / name for name in ("sweep", "chain", "merged", "broken", "relaunch")}
    launched(*RELAUNCH, "--output-dir", str(paths["relaunch"]))
    # held before its sft ends (3 steps), so the test re-launches while it is still queued
    held = step_jobs(paths["relaunch"])["evaluate"]
    subprocess.run(["scontrol", "hold", held], check=True, capture_output=True, timeout=30)
    launched(
        "sft", *JOB, *SHORT, "--sweep", "train.seed=1,2,3", "--output-dir", str(paths["sweep"])
    )
    launched(
        "pipeline",
        *JOB,
        "--steps",
        "sft,grpo,evaluate",
        *SHORT,
        "--set",
        "evaluate:eval.limit=16",
        "--output-dir",
        str(paths["chain"]),
    )
    launched(
        "pipeline",
        *JOB,
        *SHORT,
        "--set",
        "evaluate:eval.limit=16",
        "--output-dir",
        str(paths["merged"]),
    )
    # a model folder the login node cannot judge (it exists) and the sft job cannot load (empty);
    # a bad dataset would be refused before submission (tests/test_sweep_pipeline.py)
    scratch = root / "scratch-model"
    scratch.mkdir()
    launched(
        "pipeline",
        *JOB,
        "--steps",
        "sft,grpo,evaluate",
        *SHORT,
        "--set",
        f"sft:model.path={scratch}",
        "--output-dir",
        str(paths["broken"]),
    )
    return paths


def step_jobs(root: Path) -> dict[str, str | None]:
    """Step name -> job id, as the launch recorded them in launch.json."""
    steps = json.loads((root / "launch.json").read_text())["steps"]
    return {s["name"]: s["job_id"] for s in steps}


RELAUNCH = ("pipeline", *JOB, "--steps", "sft,evaluate", *SHORT, "--set", "evaluate:eval.limit=8")


def test_a_pipeline_relaunched_after_its_first_step_skips_it(submitted):
    """Re-launched while its evaluate job is queued: sft is skipped and the queued job kept;
    re-launched after that job was cancelled: sft is skipped again and evaluate submitted anew."""
    root = submitted["relaunch"]
    first = step_jobs(root)
    wait_until(
        lambda: states(root)[0] == "COMPLETED",
        300,
        lambda: f"sft to complete; `status` says:\n{launch('status', str(root)).stdout}",
    )
    out = launched(*RELAUNCH, "--output-dir", str(root))
    assert "DONE EARLIER" in out and "(from the previous launch)" in out, out
    assert step_jobs(root) == {"sft": None, "evaluate": first["evaluate"]}  # nothing resubmitted
    subprocess.run(["scancel", first["evaluate"]], check=True, capture_output=True, timeout=30)
    from vqa_r1.launch.executor import queued_states

    wait_until(lambda: first["evaluate"] not in queued_states(), 60, lambda: "scancel to end it")
    out = launched(*RELAUNCH, "--output-dir", str(root))
    again = step_jobs(root)
    assert again["sft"] is None and again["evaluate"] not in (None, first["evaluate"]), out
    wait_for(root, 240)
    assert states(root) == ["COMPLETED", "COMPLETED"], launched("status", root)
    assert [j["job_id"] for j in json.loads((root / "sft" / "jobs.json").read_text())["jobs"]] == [
        first["sft"]
    ]  # sft ran once, in the first launch's job
    assert json.loads((root / "evaluate" / "scores.json").read_text())["n"] == 8


def test_a_chain_whose_first_job_fails_stops_with_a_clear_status(submitted):
    broken = submitted["broken"]
    wait_for(broken, 240)
    assert states(broken) == ["FAILED", "CANCELLED", "CANCELLED"]
    text = launched("status", str(broken))
    assert (
        "pipeline STOPPED: step sft ended FAILED (exit 1:0); later steps not run: grpo, evaluate"
        in text
    ), text
    assert text.count("never ran: step sft ended FAILED") == 2
    assert not (broken / "grpo" / "status.json").exists()  # never started
    stderr = launched("logs", str(broken / "sft"), "--stderr", "-n", "5")
    assert "scratch-model has no config.json" in stderr and "sft (job" in stderr, stderr
    message = launched("cancel", str(broken))
    assert message.startswith("nothing to cancel") and "sft (job" in message


def test_a_sweep_over_three_seeds_runs_as_one_array(submitted):
    sweep = submitted["sweep"]
    wait_for(sweep, 300)
    array_id = json.loads((sweep / "launch.json").read_text())["array_job_id"]
    rows = sacct_history(array_id)
    assert sorted(r["JobID"] for r in rows) == [f"{array_id}_{i}" for i in range(3)]
    assert {r["State"] for r in rows} == {"COMPLETED"}, rows
    for seed in (1, 2, 3):
        run = sweep / f"train.seed={seed}"
        assert (run / "final" / "adapter_config.json").exists()
        assert f"seed: {seed}\n" in (run / "config.yaml").read_text()
        assert json.loads((run / "jobs.json").read_text())["jobs"][0]["job_id"].startswith(
            f"{array_id}_"
        )
    text = launched("status", str(sweep))
    assert "sweep: 3 COMPLETED" in text and "node vm" in text, text
    log = launched("logs", str(sweep / "train.seed=2"), "-n", "3")
    assert f"{array_id}_1_0_log.out" in log and "Exiting after successful completion" in log


def test_a_chain_runs_sft_then_grpo_then_evaluate(submitted):
    chain = submitted["chain"]
    wait_for(chain, 360)
    report = status(chain)
    assert [j["state"] for j in report["jobs"]] == ["COMPLETED"] * 3, launched("status", chain)
    assert report["verdict"].startswith("pipeline COMPLETED")
    runs = [sacct_history(j["job_id"])[-1] for j in report["jobs"]]
    assert runs[0]["End"] <= runs[1]["Start"] and runs[1]["End"] <= runs[2]["Start"], runs
    scores = json.loads((chain / "evaluate" / "scores.json").read_text())
    assert scores["n"] == 16 and scores["adapter"] == str(chain / "grpo" / "final")
    grpo_config = (chain / "grpo" / "config.yaml").read_text()
    assert f"init_adapter: {chain / 'sft' / 'final'}" in grpo_config
    pipeline = json.loads((chain / "launch.json").read_text())
    assert pipeline["kind"] == "pipeline"
    assert [s["name"] for s in pipeline["steps"]] == ["sft", "grpo", "evaluate"]
    by_id = launched("status", report["jobs"][2]["job_id"])
    assert "COMPLETED" in by_id


def test_a_chain_with_merge_trains_grpo_on_the_merged_model(submitted):
    root = submitted["merged"]
    wait_for(root, 420)
    assert states(root) == ["COMPLETED"] * 4, launched("status", root)
    merged = root / "merge" / "merged"
    assert (merged / "config.json").exists() and (merged / "model.safetensors").exists()
    assert f"path: {merged}" in (root / "grpo" / "config.yaml").read_text()
    assert "init_adapter: null" in (root / "grpo" / "config.yaml").read_text()  # a fresh LoRA
    scores = json.loads((root / "evaluate" / "scores.json").read_text())
    assert scores["n"] == 16 and scores["adapter"] == str(root / "grpo" / "final")


def test_cancel_stops_a_running_job(submitted, tmp_path):
    run = tmp_path / "long"
    launched("sft", *JOB, "--set", "train.max_steps=100000", "--output-dir", str(run))
    wait_until(
        lambda: states(run) == ["RUNNING"],
        240,
        lambda: f"the job to run; `status` says:\n{launch('status', str(run)).stdout}",
    )
    message = launched("cancel", str(run))
    job_id = json.loads((run / "jobs.json").read_text())["jobs"][0]["job_id"]
    assert f"cancelled job {job_id} (long, was RUNNING)" in message, message
    assert final_state(job_id, timeout_s=60).startswith("CANCELLED")  # "CANCELLED by 0"
    wait_until(
        lambda: states(run) == ["CANCELLED"],
        30,
        lambda: f"`status` to say CANCELLED; it says {states(run)}",
    )
    assert "nothing to cancel" in launched("cancel", job_id)


def test_status_of_an_unknown_job_id_is_a_clear_error(slurm_cluster):
    out = launch("status", "987654321")
    assert out.returncode == 2
    assert "unknown job id 987654321: sacct has no record of it" in out.stderr
