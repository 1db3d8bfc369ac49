"""SuperCLEVR counting problems as R1-V releases them: a ``.jsonl`` of problems plus ``images/``.

Fields per R1-V's evaluation file (Deep-Agent/R1-V, src/eval/prompts/
superclevr_test200_counting_problems.jsonl, read by src/eval/test_qwen2vl_counting_superclevr.py):
each line has ``image_path`` ("./images/superCLEVR_new_025000.png", relative to src/eval/, where
R1-V's README unzips SuperCLEVR's ``images.zip``), ``question`` ("How many different items are
there in the image?") and ``ground_truth`` (an integer). Accepted layouts: the ``.jsonl`` in the
folder itself or in its ``prompts/`` (R1-V's src/eval/), with the images in ``<folder>/images/``.
An image path is taken as written (relative paths from the folder, then from the ``.jsonl``'s
folder); a path that is not there (the logs carry their authors' absolute paths) is looked up by
its file name in ``<folder>/images/``.

Rows: ``problem`` is the question as released (R1-V appends ``QUESTION_TEMPLATE`` when it asks;
our prompt adds the run's instruction), ``solution`` "<answer> N </answer>", ``answer_type``
"number". A file's split is named by its file name (train, val/dev -> validation, otherwise test:
the released file is a test set).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vqa_r1.data.formats.common import count_features, count_row, first_existing
from vqa_r1.errors import UserError
from vqa_r1.io import read_jsonl

NAME = "superclevr"
VERSION = 1
URL = (
    "https://github.com/Deep-Agent/R1-V (src/eval/prompts/superclevr_test200_counting_problems."
    "jsonl; images: the SuperCLEVR images.zip its README names)"
)
NEEDS = "a .jsonl of counting problems (rows with image_path, question, ground_truth) + images"
LAYOUT = "<folder>/<name>.jsonl (or <folder>/prompts/<name>.jsonl) and <folder>/images/"
FIELDS = ("image_path", "question", "ground_truth")
OPTIONS: dict = {}
# R1-V's evaluation prompt (test_qwen2vl_counting_superclevr.py), for runs that ask as they did
QUESTION_TEMPLATE = (
    "{Question} First output the thinking process in <think> </think> and final answer (number) "
    "in <answer> </answer> tags."
)


def _is_problem_file(path: Path) -> bool:
    try:
        with path.open(encoding="utf-8") as fh:
            first = next((line for line in fh if line.strip()), "")
        row = json.loads(first)
    except (OSError, ValueError, UnicodeDecodeError):
        return False
    return isinstance(row, dict) and set(FIELDS) <= set(row)


def problem_files(folder: Path) -> list[Path]:
    for base in (folder, folder / "prompts"):
        if base.is_dir():
            found = sorted(p for p in base.glob("*.jsonl") if _is_problem_file(p))
            if found:
                return found
    return []


def detect(folder: Path) -> bool:
    return bool(problem_files(folder))


def sources(folder: Path) -> list[Path]:
    return problem_files(folder)


def split_of(path: Path) -> str:
    name = path.stem.lower()
    if "train" in name:
        return "train"
    if "val" in name or "dev" in name:
        return "validation"
    return "test"


def image_path(folder: Path, jsonl: Path, written: str) -> Path:
    given = Path(written)
    candidates = [given] if given.is_absolute() else [folder / given, jsonl.parent / given]
    return first_existing([*candidates, folder / "images" / given.name], candidates[0])


def images_hint(folder: Path, report: dict) -> str:
    return (
        "SuperCLEVR's images come in the images.zip R1-V's README names (Evaluation, SuperCLEVR): "
        f"unzip it into {folder} so that {folder / 'images'} holds superCLEVR_new_*.png"
    )


def ground_truth(value: Any, where: str) -> int:
    if isinstance(value, bool) or not (
        isinstance(value, int) or (isinstance(value, str) and value.strip().isdigit())
    ):
        raise UserError(f"{where}: ground_truth {value!r} is not a count (a whole number >= 0)")
    count = int(value)
    if count < 0:
        raise UserError(f"{where}: ground_truth {value!r} is not a count (a whole number >= 0)")
    return count


def read(folder: Path, options: dict) -> tuple[dict[str, list[dict]], dict]:
    splits: dict[str, list[dict]] = {}
    files: dict[str, str] = {}
    for path in problem_files(folder):
        split = split_of(path)
        if split in splits:
            raise UserError(
                f"{folder}: {files[split]} and {path.name} are both read as the {split} split; "
                "keep one, or name them by split (train, val, test)"
            )
        rows = []
        for number, item in enumerate(read_jsonl(path), 1):
            missing = [f for f in FIELDS if f not in item] if isinstance(item, dict) else FIELDS
            if missing:
                raise UserError(f"{path}: row {number} has no {', '.join(missing)}")
            count = ground_truth(item["ground_truth"], f"{path}: row {number}")
            image = image_path(folder, path, str(item["image_path"]))
            rows.append(count_row(str(item["question"]), count, image))
        splits[split] = rows
        files[split] = path.name
    return splits, {"files": files, "image_folder": str(folder / "images")}


def features() -> Any:
    return count_features()
