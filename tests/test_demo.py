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
    for row in ("base", "sft", "grpo", "sft+grpo"):
        assert f"| {row} |" in done.stdout
    results = json.loads((out / "results.json").read_text())
    assert list(results["results"]) == ["base", "sft", "grpo", "sft+grpo"]
    assert results["model"] == "tiny-qwen2.5-vl-pretrained"
    assert all(r["n"] == 8 for r in results["results"].values())
    assert set(results["seconds"]) >= {"data", "sft", "grpo", "sft+grpo", "eval_base"}
    assert set(results["comparisons"]["grpo"]) == {"vs_chance_p", "vs_base_p"}
    assert (out / "reward_curve.png").stat().st_size > 1000
    for run in ("sft", "grpo", "sft+grpo"):
        assert (out / "runs" / run / "final" / "adapter_model.safetensors").exists()
    # GRPO from base is a fresh LoRA; SFT-then-GRPO continues the SFT adapter
    grpo_config = (out / "runs" / "grpo" / "config.yaml").read_text()
    assert "init_adapter: null" in grpo_config
    assert "sft/final" in (out / "runs" / "sft+grpo" / "config.yaml").read_text()
    # a person reads one line per stage, not TRL's dict logs
    assert "{'loss'" not in done.stdout + done.stderr
    assert "sft: 2 steps" in done.stdout and "evaluate grpo: accuracy" in done.stdout


SMALL = ["--set", "data.synthetic_train=64", "--set", "data.synthetic_test=16"]
SMALL += ["--set", "data.synthetic_validation=8", "--eval-limit", "4"]


def _demo(*args):
    cmd = [sys.executable, "-m", "vqa_r1", "demo", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


def test_demo_rejects_unknown_rows_and_splits_before_any_work(tmp_path):
    done = _demo("--out", str(tmp_path), "--rows", "base,foo")
    assert done.returncode == 2 and "--rows: unknown ['foo']; choose from" in done.stderr
    done = _demo("--out", str(tmp_path), "--split", "tset")
    assert done.returncode == 2 and "invalid choice: 'tset'" in done.stderr
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_demo_fresh_clears_earlier_runs_and_verbose_shows_library_logs(tmp_path):
    old = tmp_path / "runs" / "old-run"
    old.mkdir(parents=True)
    done = _demo("--out", str(tmp_path), "--rows", "base", "--fresh", "--verbose", *SMALL)
    assert done.returncode == 0, done.stderr[-3000:]
    assert not old.exists() and "| base |" in done.stdout
    assert "Loading weights" in done.stderr  # transformers' own progress, silenced by default
    quiet = _demo("--out", str(tmp_path / "quiet"), "--rows", "base", *SMALL)
    assert quiet.returncode == 0 and "Loading weights" not in quiet.stderr
    # no GRPO row asked for: no empty reward plot
    assert not (tmp_path / "quiet" / "reward_curve.png").exists()
