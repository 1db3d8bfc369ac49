"""VSR (Visual Spatial Reasoning) as released: split ``.jsonl`` files plus a folder of COCO images.

Fields per the VSR repository's data/README.md (cambridgeltl/visual-spatial-reasoning): each line
has ``image`` (a COCO file name), ``image_link``, ``caption``, ``label`` (1 true, 0 false) and
``relation``; there is no ``subj``/``obj`` field, so both are read back from the caption, which the
annotators wrote as "The {subj} is {relation} the {obj}." (empty when a caption does not parse).
Splits are the release's ``splits/random`` or ``splits/zeroshot`` files ``train.jsonl``,
``dev.jsonl`` (our ``validation``) and ``test.jsonl``; images live in ``data/images/`` (the
release's layout) or ``images/`` beside the split files.
"""

from __future__ import annotations

import re
from pathlib import Path

from vqa_r1.data.formats.common import first_existing, string_features
from vqa_r1.io import read_jsonl

NAME = "vsr"
VERSION = 1
URL = "https://github.com/cambridgeltl/visual-spatial-reasoning (data/README.md)"
NEEDS = "train.jsonl / dev.jsonl / test.jsonl (rows with image, caption, label, relation)"
LAYOUT = (
    "<folder>/splits/random/{train,dev,test}.jsonl (or splits/zeroshot; or the three files "
    "directly in <folder>) and <folder>/images/<COCO file name>"
)
SPLITS = {"train": "train", "dev": "validation", "test": "test"}


def split_dir(folder: Path) -> Path | None:
    """The folder holding the split files; the random split when handed the release's root."""
    for cand in (folder, folder / "splits" / "random", folder / "data" / "splits" / "random"):
        if any((cand / f"{name}.jsonl").is_file() for name in SPLITS):
            return cand
    return None


def detect(folder: Path) -> bool:
    return split_dir(folder) is not None


def sources(folder: Path) -> list[Path]:
    base = split_dir(folder)
    return [base / f"{name}.jsonl" for name in SPLITS if (base / f"{name}.jsonl").is_file()]


def image_dir(folder: Path, base: Path) -> Path:
    candidates = [
        folder / "images",
        base / "images",
        base.parent.parent / "images",  # data/splits/random -> data/images
        folder / "data" / "images",
    ]
    return first_existing(candidates, folder / "images")


def subject_object(caption: str, relation: str) -> tuple[str, str]:
    pattern = (
        rf"^\s*the\s+(.+?)\s+(?:is\s+|are\s+)?{re.escape(relation)}\s+(?:the\s+)?(.+?)\s*\.?\s*$"
    )
    found = re.match(pattern, caption, flags=re.IGNORECASE)
    return (found.group(1), found.group(2)) if found else ("", "")


def read(folder: Path, options: dict) -> tuple[dict[str, list[dict]], dict]:
    base = split_dir(folder)
    images = image_dir(folder, base)
    splits: dict[str, list[dict]] = {}
    for name, split in SPLITS.items():
        path = base / f"{name}.jsonl"
        if not path.is_file():
            continue
        rows = []
        for item in read_jsonl(path):
            subj, obj = subject_object(item["caption"], item["relation"])
            rows.append(
                {
                    "image_path": str(images / item["image"]),
                    "caption": item["caption"],
                    "label": int(item["label"]),
                    "relation": item["relation"],
                    "subj": subj,
                    "obj": obj,
                }
            )
        splits[split] = rows
    return splits, {"split_folder": str(base), "image_folder": str(images)}


def features():
    return string_features("image_path", "caption", "label", "relation", "subj", "obj")
