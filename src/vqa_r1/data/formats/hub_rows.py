"""Reading a Hugging Face hub dataset of rows with an image column, as its authors publish it.

R1-V's CLEVR rows (formats/r1v_clevr.py) and r1_vlm's cryptogram rows (formats/r1_vlm_cryptogram.py)
are both such releases, downloaded the same two ways on a login node (compute nodes are often
offline), so both formats read them here and keep only what differs (the columns they need, the
name of their image folder, their rows' meaning) as parameters:

* the hub snapshot: ``huggingface-cli download <repo> --repo-type dataset --local-dir DIR`` gives
  ``DIR/data/<split>-*.parquet`` (image cells are ``{bytes, path}``); parquet files directly in
  DIR are read too; a file's split is the start of its name (``train`` when it names none);
* a ``save_to_disk`` folder of the loaded dataset (a ``DatasetDict`` or a single ``Dataset``,
  whose split is ``train``).

Each image is written once, named by its content's SHA-1, into ``<folder>/.vqa_r1/<images>/`` (the
project cache for a read-only folder).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vqa_r1.io import atomic_write_bytes

SPLITS = ("train", "validation", "test")


def parquet_files(folder: Path) -> list[Path]:
    """The snapshot's parquet files: ``<folder>/data/*.parquet``, else ``<folder>/*.parquet``."""
    for base in (folder / "data", folder):
        found = sorted(base.glob("*.parquet")) if base.is_dir() else []
        if found:
            return found
    return []


def parquet_columns(path: Path) -> set[str]:
    try:
        import pyarrow.parquet as pq

        return set(pq.read_schema(path).names)
    except Exception:
        return set()


def saved_splits(folder: Path) -> dict[str, Path]:
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


def saved_columns(split_dir: Path) -> set[str]:
    try:
        info = json.loads((split_dir / "dataset_info.json").read_text())
        return set(info.get("features") or {})
    except (OSError, ValueError, AttributeError):
        return set()


def sources(folder: Path) -> list[Path]:
    files = parquet_files(folder)
    if files:
        return files
    found = [folder / "dataset_dict.json"] if (folder / "dataset_dict.json").is_file() else []
    for split_dir in saved_splits(folder).values():
        found += sorted(split_dir.glob("*.arrow")) + [split_dir / "dataset_info.json"]
    return found


def split_of(path: Path, splits: tuple[str, ...] = SPLITS) -> str:
    prefix = path.name.split("-")[0].split(".")[0].lower()
    return prefix if prefix in splits else "train"


@dataclass(frozen=True)
class Release:
    """What differs between two such releases: the ``columns`` a row needs, the ``optional`` ones
    read where present, the name of the folder its ``images`` are written to and the ``splits`` a
    parquet file's name may start with."""

    columns: tuple[str, ...]
    images: str
    optional: tuple[str, ...] = ()
    splits: tuple[str, ...] = SPLITS

    def is_hub_save(self, folder: Path) -> bool:
        """A save_to_disk folder whose every split has the columns and no VSR caption."""
        splits = saved_splits(folder)
        return bool(splits) and all(
            set(self.columns) <= (cols := saved_columns(d)) and "caption" not in cols
            for d in splits.values()
        )

    def detect(self, folder: Path) -> bool:
        """The release's rows: parquet files (the first one's schema) or a save_to_disk folder."""
        files = parquet_files(folder)
        if files:
            return set(self.columns) <= parquet_columns(files[0])
        return self.is_hub_save(folder)

    def image_folder(self, folder: Path) -> Path:
        """Where the images of ``folder`` are written: ``<folder>/.vqa_r1/<images>``, or the
        project cache when ``folder`` is read-only."""
        from vqa_r1.paths import cache_root

        if os.access(folder, os.W_OK):
            return folder / ".vqa_r1" / self.images
        key = hashlib.sha256(str(folder.resolve()).encode()).hexdigest()[:12]
        return cache_root() / "data" / "formats" / f"{self.images}-{key}"

    def rows(self, folder: Path) -> Iterator[tuple[str, dict]]:
        """(split, row) for every row, read with the columns and those optional ones a file or
        split has; image cells undecoded (``{bytes, path}``)."""

        def wanted(available: set[str]) -> list[str]:
            return list(self.columns) + [c for c in self.optional if c in available]

        files = parquet_files(folder)
        if files:
            import pyarrow.parquet as pq

            for path in files:
                names = wanted(parquet_columns(path))
                for batch in pq.ParquetFile(path).iter_batches(batch_size=256, columns=names):
                    for row in batch.to_pylist():
                        yield split_of(path, self.splits), row
            return
        from datasets import Image, load_from_disk

        for split, split_dir in saved_splits(folder).items():
            ds = load_from_disk(str(split_dir)).cast_column("image", Image(decode=False))
            for row in ds.select_columns(wanted(set(ds.column_names))):
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


def write_image(images: Path, cell: Any) -> Path:
    """The image of a cell written once into ``images``, named by its content's SHA-1 (raises
    ValueError when the cell holds none)."""
    data, suffix = image_bytes(cell)
    path = images / f"{hashlib.sha1(data).hexdigest()}{suffix.lower()}"
    if not path.exists():
        atomic_write_bytes(path, data, fsync=False)
    return path
