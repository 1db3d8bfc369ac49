"""The README's main job, shortened: every stage runs as a step of the demo experiment, and the
table, the tests and the reward curves are written through report/."""

import csv
import json
import subprocess
import sys

import pytest

SMALL = ["--set", "data.synthetic_train=64", "--set", "data.synthetic_test=16"]
SMALL += ["--set", "data.synthetic_validation=8", "--set", "evaluate:eval.limit=4"]


def _demo(*args, timeout=600):
    cmd = [sys.executable, "-m", "vqa_r1", "demo", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_demo_smoke(tmp_path):
    out = tmp_path / "demo"
    steps = ["--set", "sft:train.max_steps=2", "--set", "grpo:train.max_steps=1"]
    done = _demo("--out", str(out), *steps, *SMALL[:-2], "--set", "evaluate:eval.limit=8")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for row in ("base", "sft", "grpo", "sft+grpo"):
        assert f"| {row} |" in done.stdout
    with (out / "tables" / "accuracy.csv").open() as f:
        table = list(csv.DictReader(f))
    assert [r["model"] for r in table] == ["base", "sft", "grpo", "sft+grpo"]
    assert all(r["n"] == "8" and r["status"] == "ok" for r in table)
    assert all(r["p vs chance (one-sided)"] for r in table)
    assert [bool(r["p vs model=base"]) for r in table] == [False, True, True, True]
    declared = json.loads((out / "experiment.json").read_text())
    assert declared["kind"] == "demo" and declared["model"] == "tiny-qwen2.5-vl-pretrained"
    assert (out / "reward_curve.png").stat().st_size > 1000
    assert (out / "plots" / "accuracy.png").stat().st_size > 1000
    for run in ("sft", "grpo", "sft+grpo"):
        assert (out / "runs" / run / "final" / "adapter_model.safetensors").exists()
    # GRPO from base is a fresh LoRA; SFT-then-GRPO continues the SFT adapter
    grpo_config = (out / "runs" / "grpo" / "config.yaml").read_text()
    assert "init_adapter: null" in grpo_config
    assert "sft/final" in (out / "runs" / "sft+grpo" / "config.yaml").read_text()
    # a person reads one line per step, not TRL's dict logs (those are in each job's log)
    assert "{'loss'" not in done.stdout + done.stderr
    assert "runs/sft finished in" in done.stdout and "eval/grpo finished in" in done.stdout
    launch = json.loads((out / "launch.json").read_text())
    assert {s["state"] for s in launch["steps"]} == {"COMPLETED"} and len(launch["steps"]) == 8
    # the same command again trains and evaluates nothing: only the tables are rebuilt
    again = _demo("--out", str(out), *steps, *SMALL[:-2], "--set", "evaluate:eval.limit=8")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "[1/1] tables: local job" in again.stdout and "runs/sft: local job" not in again.stdout


def test_demo_rejects_unknown_rows_and_splits_before_any_work(tmp_path):
    done = _demo("--out", str(tmp_path / "d"), "--rows", "base,foo")
    assert done.returncode == 2 and "experiment.rows: unknown ['foo']; choose from" in done.stderr
    done = _demo("--out", str(tmp_path / "d"), "--split", "tset")
    assert done.returncode == 2 and "invalid choice: 'tset'" in done.stderr
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_demo_refuses_a_folder_of_other_files_and_overwrite_moves_it_aside(tmp_path):
    out = tmp_path / "demo"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    refused = _demo("--out", str(out), "--rows", "base", *SMALL)
    assert refused.returncode == 2 and "holds files this suite did not write" in refused.stderr
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    done = _demo("--out", str(out), "--rows", "base", "--overwrite", *SMALL)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "| base |" in done.stdout
    (aside,) = tmp_path.glob("demo.old-*")
    assert (aside / "notes.txt").read_text() == "mine"  # moved, never deleted
    # no GRPO row asked for: no empty reward plot
    assert not (out / "reward_curve.png").exists()
