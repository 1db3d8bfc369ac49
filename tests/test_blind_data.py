"""Blind controls' data (data/blind.py, ``data.images``): the rows a blind twin trains and is
evaluated on, and the setting as a user types it."""

from __future__ import annotations

import pytest
from PIL import Image

from vqa_r1.data.blind import BLANK, blind_split
from vqa_r1.errors import UserError


def _rows(tmp_path, sizes):
    from datasets import Dataset

    paths = []
    for i, size in enumerate(sizes):
        path = tmp_path / f"{i}.png"
        Image.new("RGB", size, (10 * i, 200, 30)).save(path)
        paths.append(str(path))
    return Dataset.from_dict({"image_path": paths, "caption": [f"c{i}" for i in range(len(sizes))]})


def test_blank_images_keep_each_size_and_show_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("VQA_R1_CACHE", str(tmp_path / "cache"))
    ds = _rows(tmp_path, [(112, 112), (300, 200), (112, 112)])
    blank = blind_split(ds, "blank", seed=0)
    assert blank["caption"] == ds["caption"]  # the rows themselves unchanged
    for original, path in zip(ds["image_path"], blank["image_path"], strict=True):
        with Image.open(original) as a, Image.open(path) as b:
            assert b.size == a.size  # as many image tokens as the real image
            assert b.convert("RGB").getextrema() == tuple((v, v) for v in BLANK)
    assert blank["image_path"][0] == blank["image_path"][2]  # one file per size, shared
    assert blind_split(ds, "real", seed=0) is ds


def test_shuffled_images_give_every_row_another_rows_image(tmp_path):
    ds = _rows(tmp_path, [(32, 32)] * 7)
    shuffled = blind_split(ds, "shuffled", seed=3)
    moved = shuffled["image_path"]
    assert sorted(moved) == sorted(ds["image_path"])  # the same images, scene statistics kept
    assert all(a != b for a, b in zip(moved, ds["image_path"], strict=True))  # none its own
    assert blind_split(ds, "shuffled", seed=3)["image_path"] == moved  # the seed fixes it
    assert blind_split(ds, "shuffled", seed=4)["image_path"] != moved


def test_a_wrong_value_is_one_line_naming_the_key(capsys):
    from vqa_r1.cli import main

    code = main(["config", "--model", "tiny-qwen2.5-vl-pretrained", "--verb", "sft",
                 "--set", "data.images=hidden"])  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "data.images" in err[0] and "blank" in err[0], err
    with pytest.raises(UserError, match="image_path"):
        from datasets import Dataset

        blind_split(Dataset.from_dict({"caption": ["x"]}), "blank", seed=0)
