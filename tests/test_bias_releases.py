"""Issue 21: `data bias` and `experiment text-bias` on the folders users have, the public releases
(VSR, Rel3D, SpatialSense), opened by the same loader as `--dataset`."""

from __future__ import annotations

import json

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
    if fmt == "spatialsense":
        assert named["split_file"] == str(source.resolve() / "annotations.json")
    readme = (out / "README.md").read_text()
    assert fmt in readme and (named.get("split_folder") or named["split_file"]) in readme

    ev = tmp_path / "eval"
    dry = ["evaluate", "--model", "tiny-qwen2.5-vl", "--dataset", str(out), "--dry-run"]
    capsys.readouterr()
    assert launch_main([*dry, "--output-dir", str(ev)]) == 0, capsys.readouterr().err
    assert str(out) in capsys.readouterr().out


@pytest.mark.parametrize("fmt", sorted(RELEASES))
def test_visual_bias_on_a_release_folder_reaches_069_and_loads_through_dataset(
    fmt, tmp_path, capsys
):
    from vqa_r1.data.bias import visual_bias

    source = RELEASES[fmt](tmp_path / fmt)
    out = tmp_path / "visual"
    argv = ["data", "bias", "--kind", "visual", "--target", "0.69", "--source", str(source)]
    assert main([*argv, "--out", str(out)]) == 0, capsys.readouterr().err
    card = json.loads((out / "bias_card.json").read_text())
    assert abs(card["achieved"] - 0.69) <= 0.01
    assert f"{card['achieved']:.4f}" in capsys.readouterr().out
    train = load_split(out, "train")  # every image resolved (checked here)
    assert visual_bias(train) == pytest.approx(card["achieved"])
    assert len(train) == card["n"] < len(load_split(source, "train"))
    named = card["source_dataset"]
    assert named["release_format"] == fmt and (named.get("split_folder") or named["split_file"])

    dry = ["evaluate", "--model", "tiny-qwen2.5-vl", "--dataset", str(out), "--dry-run"]
    assert launch_main([*dry, "--output-dir", str(tmp_path / "eval")]) == 0, capsys.readouterr().err
    assert str(out) in capsys.readouterr().out


@pytest.mark.parametrize("name", ["synthetic", *sorted(RELEASES)])
def test_data_show_takes_what_dataset_takes(name, tmp_path, capsys, monkeypatch, synthetic_dir):
    """`data show` opens its folder as --dataset does: 'synthetic' (the demo's data, the one
    `data bias --source synthetic` reads; its generation stood in by a small set here) and every
    release folder."""
    from vqa_r1.data import datasets

    seen = []

    def demo_data(data_cfg):
        seen.append(data_cfg)
        return synthetic_dir

    if name == "synthetic":
        monkeypatch.setattr(datasets, "dataset_dir", demo_data)
        path, first = name, load_split(synthetic_dir, "test")[0]
    else:
        path = str(RELEASES[name](tmp_path / name))
        first = load_split(path, "test")[0]
    assert main(["data", "show", path, "--split", "test"]) == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    assert "num_rows" in printed and first["caption"] in printed
    if name == "synthetic":
        (data,) = seen
        assert data.dataset == "synthetic" and data.synthetic_train == 4000


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
    from test_experiments_e2e import experiment

    source = RELEASES["vsr"](tmp_path / "vsr")
    root = tmp_path / "exp"
    experiment(
        "text-bias", "--model", "tiny-qwen2.5-vl", "--output-dir", str(root),
        "--set", f"experiment.dataset={source}", "--set", "experiment.bias_levels=none,0.69",
        "--set", "experiment.methods=sft", "--set", "sft:train.max_steps=1",
        "--set", "experiment.seeds=1", "--set", "evaluate:eval.limit=4", "--set", "evaluate:eval.max_new_tokens=4",
    )  # fmt: skip
    card = json.loads((root / "data/text-bias-0.69/bias_card.json").read_text())
    assert abs(card["achieved"] - 0.69) <= 0.01
    table = (root / "tables/accuracy.md").read_text()
    assert "| sft | 0.69 | 4 |" in table and "missing" not in table
