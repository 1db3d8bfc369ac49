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

The converter writes each image once, named by its content's SHA-1, into
``<folder>/.vqa_r1/r1v_clevr-images/`` (the project cache for a read-only folder), about the size
of the download again, and keeps ``solution`` exactly as released; ``label`` is its count (the
``number`` rule of answers.py), ``answer_type`` "number". A row whose solution holds no count is
dropped, counted and printed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from vqa_r1.answers import extract_answer
from vqa_r1.data.formats.common import count_features, count_row, notice
from vqa_r1.errors import UserError
from vqa_r1.io import atomic_write_bytes

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
SPLITS = ("train", "validation", "test")
IMAGES = "r1v_clevr-images"


def parquet_files(folder: Path) -> list[Path]:
    for base in (folder / "data", folder):
        found = sorted(base.glob("*.parquet")) if base.is_dir() else []
        if found:
            return found
    return []


def _parquet_columns(path: Path) -> set[str]:
    try:
        import pyarrow.parquet as pq

        return set(pq.read_schema(path).names)
    except Exception:
        return set()


def _saved_features(folder: Path) -> dict[str, Path]:
    """Split name -> folder of a save_to_disk folder (or a single saved Dataset: "train")."""
    listing = folder / "dataset_dict.json"
    if listing.is_file():
        try:
            names = json.loads(listing.read_text()).get("splits", [])
        except (OSError, ValueError):
            return {}
        return {str(n): folder / str(n) for n in names if (folder / str(n)).is_dir()}
    if (folder / "state.json").is_file():
        return {"train": folder}
    return {}


def _saved_columns(split_dir: Path) -> set[str]:
    try:
        info = json.loads((split_dir / "dataset_info.json").read_text())
        return set(info.get("features") or {})
    except (OSError, ValueError, AttributeError):
        return set()


def is_hub_save(folder: Path) -> bool:
    """A save_to_disk folder of R1-V's rows (image, problem, solution; no VSR caption)."""
    splits = _saved_features(folder)
    return bool(splits) and all(
        set(COLUMNS) <= (cols := _saved_columns(d)) and "caption" not in cols
        for d in splits.values()
    )


def detect(folder: Path) -> bool:
    files = parquet_files(folder)
    if files:
        return set(COLUMNS) <= _parquet_columns(files[0])
    return is_hub_save(folder)


def sources(folder: Path) -> list[Path]:
    files = parquet_files(folder)
    if files:
        return files
    found = [folder / "dataset_dict.json"] if (folder / "dataset_dict.json").is_file() else []
    for split_dir in _saved_features(folder).values():
        found += sorted(split_dir.glob("*.arrow")) + [split_dir / "dataset_info.json"]
    return found


def image_folder(folder: Path) -> Path:
    import os

    from vqa_r1.paths import cache_root

    if os.access(folder, os.W_OK):
        return folder / ".vqa_r1" / IMAGES
    key = hashlib.sha256(str(folder.resolve()).encode()).hexdigest()[:12]
    return cache_root() / "data" / "formats" / f"{IMAGES}-{key}"


def images_hint(folder: Path, report: dict) -> str:
    return (
        "R1-V's CLEVR images are inside the dataset's rows (image column); convert again from a "
        f"complete download of leonardPKU/clevr_cogen_a_train into {folder} (images are written "
        f"to {report.get('image_folder') or image_folder(folder)})"
    )


def _split_of(path: Path) -> str:
    prefix = path.name.split("-")[0].split(".")[0].lower()
    return prefix if prefix in SPLITS else "train"


def _parquet_rows(folder: Path) -> Iterator[tuple[str, dict]]:
    import pyarrow.parquet as pq

    for path in parquet_files(folder):
        for batch in pq.ParquetFile(path).iter_batches(batch_size=256, columns=list(COLUMNS)):
            for row in batch.to_pylist():
                yield _split_of(path), row


def _saved_rows(folder: Path) -> Iterator[tuple[str, dict]]:
    from datasets import Image, load_from_disk

    for split, split_dir in _saved_features(folder).items():
        ds = load_from_disk(str(split_dir)).cast_column("image", Image(decode=False))
        for row in ds.select_columns(list(COLUMNS)):
            yield split, row


def image_bytes(cell: Any) -> tuple[bytes, str]:
    """The encoded image of a cell (``{bytes, path}`` or raw bytes) and its file suffix."""
    if isinstance(cell, bytes | bytearray):
        return bytes(cell), ".png"
    if isinstance(cell, dict):
        suffix = Path(str(cell.get("path") or "x.png")).suffix or ".png"
        if cell.get("bytes"):
            return bytes(cell["bytes"]), suffix
        if cell.get("path") and Path(cell["path"]).is_file():
            return Path(cell["path"]).read_bytes(), suffix
    raise ValueError("no image bytes")


def read(folder: Path, options: dict) -> tuple[dict[str, list[dict]], dict]:
    images = image_folder(folder)
    images.mkdir(parents=True, exist_ok=True)
    rows_of = _parquet_rows if parquet_files(folder) else _saved_rows
    splits: dict[str, list[dict]] = {}
    dropped: dict[str, dict[str, int]] = {}
    for number, (split, row) in enumerate(rows_of(folder), 1):
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
            data, suffix = image_bytes(row.get("image"))
        except ValueError:
            counts["no_image"] += 1
            notice(f"r1v_clevr: dropped {split} row {number}: no image in the row")
            continue
        path = images / f"{hashlib.sha1(data).hexdigest()}{suffix.lower()}"
        if not path.exists():
            atomic_write_bytes(path, data, fsync=False)
        question = str(row.get("problem") or "").strip()
        splits[split].append(count_row(question, int(count), path, solution))
    if not splits:
        raise UserError(f"{folder}: R1-V's rows were found but none could be read")
    return splits, {"image_folder": str(images), "dropped": dropped}


def features() -> Any:
    return count_features()
