"""VSR (Visual Spatial Reasoning) as released: split ``.jsonl`` files plus a folder of COCO images.

Fields per the VSR repository's data/README.md (cambridgeltl/visual-spatial-reasoning): each line
has ``image`` (a COCO file name), ``image_link``, ``caption``, ``label`` (1 true, 0 false) and
``relation``; there is no ``subj``/``obj`` field, so both are read back from the caption, which the
annotators wrote as "The {subj} is {relation} the {obj}." (empty when a caption does not parse).
Splits are the release's ``splits/random`` or ``splits/zeroshot`` files ``train.jsonl``,
``dev.jsonl`` (our ``validation``) and ``test.jsonl``; images live in ``data/images/`` (the
release's layout) or ``images/`` beside the split files. Handed the repository root, ``data/`` or
``data/splits/``, the random split is read and a note says so and names the zeroshot folder to
pass instead (both are the paper's headline splits; neither is a silent default).
"""

from __future__ import annotations

import re
from pathlib import Path

from vqa_r1.data.formats.common import check_labels, first_existing, notice, string_features
from vqa_r1.errors import UserError
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


OPTIONS: dict = {}
# handed the repository root, data/ or data/splits/: the variant folder read
_VARIANT_PARENTS = (Path("."), Path("splits"), Path("data") / "splits")


def _has_splits(folder: Path) -> bool:
    return any((folder / f"{name}.jsonl").is_file() for name in SPLITS)


def split_dir(folder: Path) -> Path | None:
    """The folder holding the split files; the random split when handed the release's root."""
    if _has_splits(folder):
        return folder
    for parent in _VARIANT_PARENTS:
        if _has_splits(folder / parent / "random"):
            return folder / parent / "random"
    return None


def announce(folder: Path) -> None:
    """Say which split a folder holding both VSR splits stands for, and how to pick the other."""
    base = split_dir(folder)
    if base is None or base == folder:
        return
    other = base.parent / "zeroshot"
    how = (
        f"for the zeroshot split pass {other} instead"
        if _has_splits(other)
        else "the zeroshot split is splits/zeroshot/ in the release"
    )
    notice(f"vsr: {folder} holds VSR's split folders; using the random split ({base}); {how}")


def detect(folder: Path) -> bool:
    return split_dir(folder) is not None


def sources(folder: Path) -> list[Path]:
    base = split_dir(folder)
    return [base / f"{name}.jsonl" for name in SPLITS if (base / f"{name}.jsonl").is_file()]


def image_dir(folder: Path, base: Path) -> Path:
    release_images = base.parent.parent / "images"  # data/splits/random -> data/images
    candidates = [folder / "images", base / "images", release_images, folder / "data" / "images"]
    default = release_images if base.parent.name == "splits" else folder / "images"
    return first_existing(candidates, default)


def images_hint(folder: Path, report: dict) -> str:
    where = report.get("image_folder") or str(folder / "images")
    return (
        "VSR's images are COCO 2017 pictures: get them as VSR's data/README.md says (COCO "
        f"train2017 + val2017, or vsr_images.zip) and put them in {where}"
    )


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
        items = list(read_jsonl(path))
        for number, item in enumerate(items, 1):
            check_fields(path, number, item)
        check_labels((item.get("label") for item in items), str(path))
        rows = []
        for item in items:
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


FIELDS = ("image", "caption", "label", "relation")


def check_fields(path: Path, number: int, item: object) -> None:
    """A row without one of the fields read here is an error naming the file, row and field."""
    missing = [f for f in FIELDS if f not in item] if isinstance(item, dict) else list(FIELDS)
    if missing:
        raise UserError(
            f"{path}: row {number} has no {', '.join(repr(f) for f in missing)}; every VSR row "
            f"needs {', '.join(FIELDS)} (as in the release's data/README.md)"
        )


def features():
    return string_features("image_path", "caption", "label", "relation", "subj", "obj")
