"""The README's main job, shortened: every stage runs and the table and the curve are written."""

import json
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_demo_smoke(tmp_path):
    out = tmp_path / "demo"
    cmd = [
        sys.executable,
        "-m",
        "vqa_r1",
        "demo",
        "--out",
        str(out),
        "--sft-steps",
        "2",
        "--grpo-steps",
        "1",
        "--eval-limit",
        "8",
        "--set",
        "data.synthetic_train=64",
        "--set",
        "data.synthetic_test=16",
        "--set",
        "data.synthetic_validation=8",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| base |" in done.stdout and "| grpo |" in done.stdout
    results = json.loads((out / "results.json").read_text())
    assert set(results["results"]) == {"base", "sft", "grpo"}
    assert all(r["n"] == 8 for r in results["results"].values())
    assert (out / "reward_curve.png").stat().st_size > 1000
    assert (out / "runs" / "grpo" / "final" / "adapter_model.safetensors").exists()
