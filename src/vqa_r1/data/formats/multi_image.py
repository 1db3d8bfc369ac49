"""Questions over several images, as JSONL: one row per question, its images listed in order.

Why a format of its own: the VSR schema names one image per row, and TRL's multi-image convention
is an ``images`` list. A folder holding ``train.jsonl``, ``validation.jsonl`` (or ``val`` /
``dev``) and ``test.jsonl`` whose rows carry

    {"images": ["a.png", "b.png"], "question": "Is the red circle in <image> left of where the
     blue square is in <image>?", "label": true, "reasoning": "..."}

is converted once into the saved schema: ``image_paths`` (absolute, in order), ``problem`` and
``caption`` (the question), ``label`` (true/false, 1/0) and ``reasoning`` (optional: the SFT
target's think block; empty gives the answer alone). Each ``<image>`` in the question marks where
its image goes (one per image, in order); a question without any gets its images in front. Paths
are relative to the folder (or absolute). A row whose placeholders do not match its images is an
error naming the file and line; `vqa-r1 data two-image` writes such a folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vqa_r1.data.formats.common import check_labels, first_existing
from vqa_r1.data.prompts import IMAGE_PLACEHOLDER, placeholder_count
from vqa_r1.errors import UserError
from vqa_r1.io import read_jsonl

NAME = "multi_image"
VERSION = 1
URL = "this suite's own (data/formats/multi_image.py; TRL's `images` list convention)"
NEEDS = "train/validation/test .jsonl rows with images (a list of paths), question, label"
LAYOUT = "<folder>/{train,validation,test}.jsonl (validation may be val or dev) + the images"
FIELDS = ("images", "question", "label")
SPLITS = {"train": "train", "validation": "validation", "val": "validation", "dev": "validation"}
SPLITS["test"] = "test"
OPTIONS: dict = {}


def _first_row(path: Path) -> Any:
    import json

    try:
        with path.open(encoding="utf-8") as fh:
            first = next((line for line in fh if line.strip()), "")
        return json.loads(first)
    except (OSError, ValueError, UnicodeDecodeError):
        return None


def split_files(folder: Path) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for name, split in SPLITS.items():
        path = folder / f"{name}.jsonl"
        if path.is_file() and split not in found:
            found[split] = path
    return found


def detect(folder: Path) -> bool:
    files = split_files(folder)
    if not files:
        return False
    row = _first_row(next(iter(files.values())))
    return isinstance(row, dict) and isinstance(row.get("images"), list)


def sources(folder: Path) -> list[Path]:
    return list(split_files(folder).values())


def images_hint(folder: Path, report: dict) -> str:
    return (
        f"the images a row lists are read relative to {folder} (or as absolute paths): put them "
        "there, or fix the row's images list"
    )


def read(folder: Path, options: dict) -> tuple[dict[str, list[dict]], dict]:
    splits: dict[str, list[dict]] = {}
    most = 0
    for split, path in split_files(folder).items():
        items = read_jsonl(path)
        rows = []
        for number, item in enumerate(items, 1):
            rows.append(_row(folder, path, number, item))
            most = max(most, len(rows[-1]["image_paths"]))
        check_labels((item["label"] for item in items), str(path))
        splits[split] = rows
    return splits, {"most_images_per_row": most}


def _row(folder: Path, path: Path, number: int, item: Any) -> dict:
    where = f"{path}: row {number}"
    if not isinstance(item, dict):
        raise UserError(f"{where} is not an object; every row needs {', '.join(FIELDS)}")
    missing = [f for f in FIELDS if f not in item]
    if missing:
        raise UserError(f"{where} has no {', '.join(missing)}; every row needs {', '.join(FIELDS)}")
    images = item["images"]
    if not isinstance(images, list) or not images or not all(isinstance(p, str) for p in images):
        raise UserError(f"{where}: images must be a non-empty list of paths, got {images!r}")
    question = str(item["question"])
    marks = placeholder_count(question)
    if marks and marks != len(images):
        raise UserError(
            f"{where}: {len(images)} image(s) and {marks} {IMAGE_PLACEHOLDER} placeholder(s) in "
            "its question; give one per image, in order, or none"
        )
    label = item["label"]
    if isinstance(label, str) and label.strip().lower() in ("true", "false"):
        label = label.strip().lower() == "true"
    paths = []
    for written in images:
        given = Path(written)
        candidates = [given] if given.is_absolute() else [folder / given, path.parent / given]
        paths.append(str(first_existing(candidates, candidates[0])))
    item["label"] = label
    return {
        "image_paths": paths,
        "problem": question,
        "caption": question,
        "label": int(label) if isinstance(label, (bool, int)) else label,
        "reasoning": str(item.get("reasoning") or ""),
        "relation": str(item.get("relation") or ""),
    }


def features() -> Any:
    from datasets import Features, Sequence, Value

    return Features(
        {
            "image_paths": Sequence(Value("string")),
            "problem": Value("string"),
            "caption": Value("string"),
            "label": Value("int64"),
            "reasoning": Value("string"),
            "relation": Value("string"),
        }
    )
