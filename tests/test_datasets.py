import os
import shutil

import pytest

from vqa_r1.data.datasets import load_split, subset, trainer_rows
from vqa_r1.errors import UserError
from vqa_r1.models.adapters import get_adapter


def test_missing_images_are_an_error_with_count_and_paths(synthetic_dir, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(synthetic_dir, copy)
    ds = load_split(synthetic_dir, "test")
    gone = ds["image_path"][:2]
    moved = tmp_path / "moved"
    moved.mkdir()
    for p in gone:
        shutil.move(p, moved / os.path.basename(p))
    try:
        with pytest.raises(UserError) as err:
            load_split(synthetic_dir, "test")
        message = str(err.value)
        assert "2 of 24 distinct images (2 of 24 rows)" in message and gone[0] in message
    finally:
        for p in gone:
            shutil.move(moved / os.path.basename(p), p)


def test_missing_split_and_not_a_dataset(synthetic_dir, tmp_path):
    with pytest.raises(UserError, match="no split 'dev'"):
        load_split(synthetic_dir, "dev")
    with pytest.raises(UserError, match="save_to_disk"):
        load_split(tmp_path, "train")


def test_a_saved_dataset_is_used_as_is(synthetic_dir):
    """The VSR-schema folder is not taken for a release format: nothing is converted beside it."""
    assert len(load_split(synthetic_dir, "test")) == 24
    assert not (synthetic_dir / ".vqa_r1").exists()
    assert not (synthetic_dir / "hf" / ".vqa_r1").exists()


def test_seeded_subset_is_stable(synthetic_dir):
    ds = load_split(synthetic_dir, "train")
    a = subset(ds, 10, seed=42)["caption"]
    assert a == subset(ds, 10, seed=42)["caption"]
    assert a != subset(ds, 10, seed=43)["caption"]


def test_trainer_rows(synthetic_dir):
    ds = load_split(synthetic_dir, "train")
    adapter = get_adapter("qwen2_5_vl")
    sft = trainer_rows(ds, adapter, "sft")
    row = sft[0]
    assert row["prompt"][0]["content"][1]["text"].startswith(
        "Is the following statement true: The "
    )
    target = row["completion"][0]["content"][0]["text"]
    assert target.startswith("<think> ") and target.endswith("</answer>")
    assert ("True" in target) == bool(row["label"])
    assert row["image"].size == (112, 112)
    grpo = trainer_rows(ds, adapter, "grpo")
    assert grpo[0]["solution"] in ("<answer> True </answer>", "<answer> False </answer>")
    assert "completion" not in grpo.column_names
