"""R1-V's CLEVR counting training set as its authors publish it on the Hugging Face hub.

R1-V trains on ``leonardPKU/clevr_cogen_a_train`` (Deep-Agent/R1-V README, "Supported Training
Datasets"; src/r1-v/src/open_r1/grpo.py loads it with ``load_dataset``): 70,000 CLEVR-CoGenT
condition-A rows with ``image`` (an image feature), ``problem`` (the question, e.g. "How many
items are there in the image?") and ``solution`` ("<answer> 3 </answer>", the form ms-swift's R1-V
counting walk-through shows; grpo.py's ``accuracy_reward`` reads the text between the answer tags).
There is one split, ``train``.

What a cluster user has after downloading on the login node (compute nodes are often offline),
both accepted:

* the hub snapshot: ``huggingface-cli download leonardPKU/clevr_cogen_a_train --repo-type
  dataset --local-dir DIR`` gives ``DIR/data/train-*.parquet`` (image cells are
  ``{bytes, path}``); parquet files directly in DIR are read too;
* a ``save_to_disk`` folder of the loaded dataset: ``load_dataset(...).save_to_disk(DIR)``.

Both are read by formats/hub_rows.py, as r1_vlm's cryptogram rows are.

The converter writes each image once, named by its content's SHA-1, into
``<folder>/.vqa_r1/r1v_clevr-images/`` (the project cache for a read-only folder), about the size
of the download again, and keeps ``solution`` exactly as released; ``label`` is its count (the
``number`` rule of answers.py), ``answer_type`` "number". A row whose solution holds no count is
dropped, counted and printed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vqa_r1.answers import extract_answer
from vqa_r1.data.formats import hub_rows
from vqa_r1.data.formats.common import count_features, count_row, notice
from vqa_r1.errors import UserError

NAME = "r1v_clevr"
VERSION = 1
URL = "https://huggingface.co/datasets/leonardPKU/clevr_cogen_a_train (R1-V's README)"
NEEDS = "rows with image, problem, solution: the hub snapshot's parquet files or a save_to_disk"
LAYOUT = (
    "<folder>/data/train-*.parquet (huggingface-cli download --local-dir <folder>) or "
    "load_dataset(...).save_to_disk(<folder>)"
)
COLUMNS = ("image", "problem", "solution")
OPTIONS: dict = {}
IMAGES = "r1v_clevr-images"
RELEASE = hub_rows.Release(COLUMNS, IMAGES)
# what the format registry (formats/__init__.py) calls
is_hub_save = RELEASE.is_hub_save
detect = RELEASE.detect
sources = hub_rows.sources
image_folder = RELEASE.image_folder


def images_hint(folder: Path, report: dict) -> str:
    return (
        "R1-V's CLEVR images are inside the dataset's rows (image column); convert again from a "
        f"complete download of leonardPKU/clevr_cogen_a_train into {folder} (images are written "
        f"to {report.get('image_folder') or image_folder(folder)})"
    )


def read(folder: Path, options: dict) -> tuple[dict[str, list[dict]], dict]:
    images = image_folder(folder)
    images.mkdir(parents=True, exist_ok=True)
    splits: dict[str, list[dict]] = {}
    dropped: dict[str, dict[str, int]] = {}
    for number, (split, row) in enumerate(RELEASE.rows(folder), 1):
        counts = dropped.setdefault(split, {"no_count": 0, "no_image": 0})
        splits.setdefault(split, [])
        solution = str(row.get("solution") or "")
        count = extract_answer(solution, "number")
        if not count.isdigit():
            counts["no_count"] += 1
            notice(
                f"r1v_clevr: dropped {split} row {number}: solution {solution[:60]!r} has no count"
            )
            continue
        try:
            path = hub_rows.write_image(images, row.get("image"))
        except ValueError:
            counts["no_image"] += 1
            notice(f"r1v_clevr: dropped {split} row {number}: no image in the row")
            continue
        question = str(row.get("problem") or "").strip()
        splits[split].append(count_row(question, int(count), path, solution))
    if not splits:
        raise UserError(f"{folder}: R1-V's rows were found but none could be read")
    return splits, {"image_folder": str(images), "dropped": dropped}


def features() -> Any:
    return count_features()
