import json

import pytest

from vqa_r1.cli import main
from vqa_r1.data import bias
from vqa_r1.data.bias import build_biased_dataset, text_bias, visual_bias
from vqa_r1.data.datasets import load_split
from vqa_r1.data.synthetic import SceneConfig, SyntheticSpec, write_dataset
from vqa_r1.errors import UserError
from vqa_r1.metrics import one_sided_binomial_p


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """The demo's look (two objects, distinct colours, ramp), small."""
    scene = SceneConfig(max_objects=2, background_style="ramp", distinct_colors=True)
    out = tmp_path_factory.mktemp("bias") / "source"
    spec = SyntheticSpec(splits={"train": 400, "validation": 40, "test": 40}, seed=1, scene=scene)
    return write_dataset(out, spec)


def _check_card(card, out, source, recompute):
    train = load_split(out, "train")
    assert card["achieved"] == recompute(train)
    assert card["n"] == len(train) and card["achieved"] == card["correct"] / card["n"]
    assert card["p_value"] == one_sided_binomial_p(card["correct"], card["n"])
    assert json.loads((out / "bias_card.json").read_text()) == card
    assert str(card["achieved"])[:5] in (out / "README.md").read_text()
    per = {}
    for rel, label in zip(train["relation"], train["label"], strict=True):
        per.setdefault(rel, {"0": 0, "1": 0})[str(label)] += 1
    assert card["per_relation_label"] == per
    for split in ("validation", "test"):  # held-out splits untouched, image paths kept
        kept, orig = load_split(out, split), load_split(source, split)
        assert kept["image_path"] == orig["image_path"] and kept["caption"] == orig["caption"]
        assert card["sizes"][split] == len(orig)
    assert card["sizes"]["train"] == len(train) < 400
    assert set(train["image_path"]) <= set(load_split(source, "train")["image_path"])


@pytest.mark.parametrize("target", [0.6, 0.7, 0.9])
def test_text_bias_reaches_target(source, tmp_path, target):
    out = tmp_path / "biased"
    card = build_biased_dataset(source, out, "text", target, seed=0)
    assert abs(card["achieved"] - target) <= 0.01, card["achieved"]
    assert card["kind"] == "text" and card["target"] == target and card["seed"] == 0
    _check_card(card, out, source, text_bias)
    # labels stay near 50/50 overall: the shortcut is the relation, not a constant answer
    labels = load_split(out, "train")["label"]
    assert abs(sum(labels) / len(labels) - 0.5) < 0.05
    assert card["p_value"] < 1e-3


def test_visual_bias_reaches_target(source, tmp_path):
    out = tmp_path / "biased"
    card = build_biased_dataset(source, out, "visual", 0.7, seed=0)
    assert abs(card["achieved"] - 0.7) <= 0.01, card["achieved"]
    _check_card(card, out, source, visual_bias)
    assert set(card["keep_ratios"]) == {"visual-high", "visual-low"}
    # the source itself carries no such bias: the build made it
    assert visual_bias(load_split(source, "train")) < 0.6


@pytest.mark.parametrize("target", [0.3, 1.5])
def test_unreachable_targets_are_clear_errors(source, tmp_path, target):
    with pytest.raises(UserError, match=r"reaches 0\.5\d* to 1\.0"):
        build_biased_dataset(source, tmp_path / "x", "text", target)
    assert not (tmp_path / "x").exists()


def test_deterministic_from_the_seed(source, tmp_path):
    cards = [
        build_biased_dataset(source, tmp_path / f"s{i}", "text", 0.7, seed=i // 2) for i in range(3)
    ]
    rows = [load_split(tmp_path / f"s{i}", "train")["image_path"] for i in range(3)]
    assert rows[0] == rows[1] and cards[0] == cards[1]
    assert rows[0] != rows[2]


def test_same_parameters_reuse_the_folder(source, tmp_path, monkeypatch):
    out = tmp_path / "biased"
    first = build_biased_dataset(source, out, "text", 0.7, seed=0)
    stamp = (out / "hf" / "dataset_dict.json").stat().st_mtime_ns

    def no_rebuild(*args, **kwargs):
        raise AssertionError("rebuilt")

    monkeypatch.setattr(bias, "_solve", no_rebuild)
    assert build_biased_dataset(source, out, "text", 0.7, seed=0) == first
    assert (out / "hf" / "dataset_dict.json").stat().st_mtime_ns == stamp
    with pytest.raises(AssertionError, match="rebuilt"):  # other parameters: built anew
        build_biased_dataset(source, out, "text", 0.8, seed=0)


def test_cli(source, tmp_path, capsys):
    out = tmp_path / "cli"
    argv = ["data", "bias", "--kind", "text", "--target", "0.69", "--source", str(source)]
    assert main([*argv, "--out", str(out), "--seed", "3", "--split", "train"]) == 0
    printed = capsys.readouterr().out
    card = json.loads((out / "bias_card.json").read_text())
    assert card["seed"] == 3 and abs(card["achieved"] - 0.69) <= 0.01
    assert f"{card['achieved']:.4f}" in printed and f"p = {card['p_value']:.3g}" in printed
    assert main([*argv[:5], "0.2", *argv[6:], "--out", str(tmp_path / "bad")]) == 2
    assert "cannot be reached" in capsys.readouterr().err


def test_cli_source_synthetic_is_the_demo_data(source, tmp_path, monkeypatch):
    from vqa_r1.data import datasets

    seen = []

    def fake_dataset_dir(data_cfg):
        seen.append(data_cfg)
        return source

    monkeypatch.setattr(datasets, "dataset_dir", fake_dataset_dir)
    out = tmp_path / "syn"
    argv = ["data", "bias", "--kind", "text", "--target", "0.8", "--out", str(out)]
    assert main(argv) == 0
    (data,) = seen
    assert data.synthetic_train == 4000 and data.synthetic_max_objects == 2
    assert data.synthetic_background == "ramp" and data.synthetic_distinct_colors
    assert json.loads((out / "bias_card.json").read_text())["source"] == str(source.resolve())
