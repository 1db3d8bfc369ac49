"""Issue 21: `data bias` and `experiment text-bias` on the folders users have, the public releases
(VSR, Rel3D, SpatialSense), opened by the same loader as `--dataset`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from release_folders import RELEASES

from vqa_r1.cli import main
from vqa_r1.cli.launch import main as launch_main
from vqa_r1.data.bias import text_bias
from vqa_r1.data.datasets import load_split


@pytest.mark.parametrize("fmt", sorted(RELEASES))
def test_text_bias_on_a_release_folder_reaches_069_and_loads_through_dataset(fmt, tmp_path, capsys):
    source = RELEASES[fmt](tmp_path / fmt)
    out = tmp_path / "biased"
    argv = ["data", "bias", "--kind", "text", "--target", "0.69", "--source", str(source)]
    assert main([*argv, "--out", str(out)]) == 0, capsys.readouterr().err
    card = json.loads((out / "bias_card.json").read_text())
    assert abs(card["achieved"] - 0.69) <= 0.01
    train = load_split(out, "train")  # every image resolved (checked here)
    assert text_bias(train) == pytest.approx(card["achieved"])
    assert len(train) == card["n"] < len(load_split(source, "train"))
    for split in ("validation", "test"):  # copied untouched from the conversion
        assert load_split(out, split)["caption"] == load_split(source, split)["caption"]
    named = card["source_dataset"]
    assert named["folder"] == str(source.resolve()) and named["release_format"] == fmt
    if fmt == "vsr":
        assert named["split_folder"].endswith("data/splits/random")
    if fmt == "rel3d":
        assert named["split_file"].endswith("data/c_0.9_c_0.1.json")
    assert fmt in (out / "README.md").read_text()

    ev = tmp_path / "eval"
    dry = ["evaluate", "--model", "tiny-qwen2.5-vl", "--dataset", str(out), "--dry-run"]
    capsys.readouterr()
    assert launch_main([*dry, "--output-dir", str(ev)]) == 0, capsys.readouterr().err
    assert str(out) in capsys.readouterr().out


def test_visual_bias_on_a_release_folder(tmp_path):
    from vqa_r1.data.bias import build_biased_dataset, visual_bias

    source = RELEASES["vsr"](tmp_path / "vsr")
    card = build_biased_dataset(source, tmp_path / "visual", "visual", 0.6)
    assert abs(card["achieved"] - 0.6) <= 0.01
    assert visual_bias(load_split(tmp_path / "visual", "train")) == pytest.approx(card["achieved"])


def test_a_multiple_choice_source_is_refused_with_a_message(tmp_path, capsys):
    from vqa_r1.data.drivingvqa_standin import write_standin

    write_standin(tmp_path / "dvqa")
    argv = [
        "data",
        "bias",
        "--kind",
        "text",
        "--target",
        "0.69",
        "--source",
        str(tmp_path / "dvqa"),
    ]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 2
    assert "multiple-choice" in capsys.readouterr().err


def test_text_bias_experiment_dry_run_on_a_vsr_release_prints_the_chain(tmp_path, capsys):
    source = RELEASES["vsr"](tmp_path / "vsr")
    argv = [
        "experiment", "text-bias", "--model", "tiny-qwen2.5-vl", "--dry-run",
        "--set", f"experiment.dataset={source}", "--output-dir", str(tmp_path / "exp"),
    ]  # fmt: skip
    assert launch_main(argv) == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    for step in ("eval/base", "runs/sft-none", "runs/grpo-0.69", "eval/grpo-0.69", "tables"):
        assert step in printed
    assert f"dataset: {source.resolve()} (vsr release" in printed
    assert not (tmp_path / "exp").exists()  # a dry run writes nothing


@pytest.mark.slow
def test_text_bias_experiment_on_a_vsr_release_completes_with_its_table(tmp_path):
    import os
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[1]
    source = RELEASES["vsr"](tmp_path / "vsr")
    root = tmp_path / "exp"
    command = [
        sys.executable, "slurm/launch.py", "experiment", "text-bias", "--model", "tiny-qwen2.5-vl",
        "--executor", "local", "--output-dir", str(root),
        "--set", f"experiment.dataset={source}", "--set", "experiment.bias_levels=none,0.69",
        "--set", "experiment.methods=sft", "--set", "sft:train.max_steps=1",
        "--set", "evaluate:eval.limit=4", "--set", "evaluate:eval.max_new_tokens=4",
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in {"RANK", "WORLD_SIZE", "LOCAL_RANK"}}
    done = subprocess.run(command, capture_output=True, text=True, cwd=repo, env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    card = json.loads((root / "data/text-bias-0.69/bias_card.json").read_text())
    assert abs(card["achieved"] - 0.69) <= 0.01
    table = (root / "tables/accuracy.md").read_text()
    assert "| sft | 0.69 | 4 |" in table and "missing" not in table
