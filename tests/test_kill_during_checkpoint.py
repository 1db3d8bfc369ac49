"""SIGKILL while a checkpoint is being written: the next start resumes from the previous one."""

import json
import os
import subprocess
import sys

import pytest
from checkpoint_kill import STALL_SAVE, kill_while_writing

from vqa_r1.run_dir import latest_checkpoint

DRIVER = STALL_SAVE + (
    """
import sys
from vqa_r1.recipes import load_config
from vqa_r1.logging_setup import setup_logging
from vqa_r1.train import runner

setup_logging()

data, run_dir = sys.argv[1], sys.argv[2]
config = load_config("sft", "tiny-qwen2.5-vl", overrides=[
    f"data.dataset={data}", "train.max_steps=6", "train.save_steps=2", "train.per_device_train_batch_size=4"])
print(runner.train(config, run_dir)["global_step"], flush=True)
"""
)


@pytest.mark.slow
def test_sigkill_mid_checkpoint_resumes_from_previous(synthetic_dir, tmp_path):
    run = tmp_path / "run"
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    kill_while_writing([sys.executable, str(driver), str(synthetic_dir), str(run)], env, step=4)

    half = run / "checkpoints" / ".staging" / "checkpoint-4"
    assert (half / "adapter_model.safetensors").exists() and not (half / "optimizer.pt").exists()
    assert latest_checkpoint(run / "checkpoints").name == "checkpoint-2"

    out = subprocess.run(
        [sys.executable, str(driver), str(synthetic_dir), str(run)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "resuming from" in out.stderr and "checkpoint-2" in out.stderr
    assert out.stdout.strip().splitlines()[-1] == "6"
    steps = [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()]
    per_step = [s for s in steps if s is not None]
    assert sorted(set(per_step)) == list(range(1, 7))
    assert not (run / "checkpoints" / ".staging").exists()
