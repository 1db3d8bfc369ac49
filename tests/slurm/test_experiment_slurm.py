"""A reduced experiment as a graph of jobs on the local SLURM: dependencies, the tables job after
all others, and a re-launch while jobs are queued that reuses them instead of submitting twice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from slurm_helpers import sacct_history, wait_until

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
DONE = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL"}
ARGS = [
    "experiment", "text-bias", "--model", "tiny-qwen2.5-vl-pretrained",
    "--cluster", "local-slurm", "--time", "00:10:00", "--executor", "slurm",
    "--set", "experiment.bias_levels=none", "--set", "experiment.methods=sft",
    "--set", "data.synthetic_train=120", "--set", "data.synthetic_validation=8",
    "--set", "data.synthetic_test=16", "--set", "sft:train.max_steps=3",
    "--set", "experiment.seeds=1",  # one chain: the spec runs 3 seeds
]  # fmt: skip


def launch(*args: str) -> str:
    out = subprocess.run(
        [sys.executable, str(REPO / "slurm" / "launch.py"), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=180,
        env={**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"},
    )
    assert out.returncode == 0, f"{args}\n{out.stdout}\n{out.stderr}"
    return out.stdout


def steps(root: Path) -> dict[str, dict]:
    return {s["name"]: s for s in json.loads((root / "launch.json").read_text())["steps"]}


def test_an_experiment_runs_as_dependent_jobs_and_a_relaunch_reuses_queued_ones(
    slurm_cluster, tmp_path
):
    root = tmp_path / "text-bias"
    launch(*ARGS, "--output-dir", str(root))
    first = {name: s["job_id"] for name, s in steps(root).items()}
    assert set(first) == {"eval/base", "runs/sft-none", "eval/sft-none", "tables"}

    # the jobs held in the queue while the same command runs again (on a loaded machine they could
    # otherwise end during its checks): it must keep them, not submit a second job for a step
    subprocess.run(["scontrol", "hold", *first.values()], capture_output=True, text=True)
    try:
        again = launch(*ARGS, "--output-dir", str(root))
    finally:
        subprocess.run(["scontrol", "release", *first.values()], capture_output=True, text=True)
    second = steps(root)
    unfinished = [n for n, s in second.items() if s["state"] != "DONE EARLIER"]
    assert unfinished, again
    for name in unfinished:
        assert second[name]["job_id"] == first[name], again  # the same job, not a second one
        assert "previous launch" in second[name]["state"], again

    def ended() -> bool:
        return all(
            (sacct_history(j) or [{"State": ""}])[-1]["State"].split(" ")[0] in DONE
            for j in first.values()
        )

    wait_until(ended, 600, lambda: launch("status", str(root)))
    history = {name: sacct_history(job)[-1] for name, job in first.items()}
    assert {h["State"] for h in history.values()} == {"COMPLETED"}, history
    # each job started after the ones it waits for had ended (SLURM's own record)
    assert history["eval/sft-none"]["Start"] >= history["runs/sft-none"]["End"]
    assert history["tables"]["Start"] >= max(h["End"] for n, h in history.items() if n != "tables")
    table = (root / "tables" / "accuracy.md").read_text()
    assert "| sft | none | 16 |" in table and "| base | - | 16 |" in table
    assert "experiment COMPLETED: 4 of 4 steps completed" in launch("status", str(root))
