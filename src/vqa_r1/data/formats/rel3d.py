"""Rel3D as released: one ``<split>.json`` per split scheme, with rendered RGB images.

Fields per the Rel3D repository (princeton-vl/Rel3D, README "Data Organization" and dataloader.py):
the file is a dict whose ``train``, ``valid`` and ``test`` keys hold the samples (``valid`` becomes
our ``validation``); a sample has ``rgb`` (image path), ``subject`` and ``object`` (dicts with
``name`` and ``bbox``), ``predicate`` and ``label`` (whether the relation holds). Split files are
named ``<c|nc>_<fraction>_<c|nc>_<fraction>.json``; the README's Table 1 uses ``c_0.9_c_0.1.json``,
which is preferred when several are present (otherwise the first by name, logged).

The images are the renders ``./download.sh data_raw`` puts in ``data/20200223/`` (README "Download
Datasets"); ``data_min`` and ``data`` bring the split files and ``.h5`` crops only, so the ``rgb``
paths of a ``data_min`` download point at nothing until ``data_raw`` is fetched.

Not documented: the base of the ``rgb`` path. The release's dataloader opens it relative to the
repository root while the split files sit in ``data/``, so it is looked up beside the folder, in
its parent and beside the split file, in that order (assumption).
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from vqa_r1.data.formats.common import (
    check_labels,
    claim_features,
    claim_row,
    first_existing,
    name_of,
    read_json,
)

log = logging.getLogger(__name__)
NAME = "rel3d"
VERSION = 1
URL = "https://github.com/princeton-vl/Rel3D (./download.sh data_min, then ./download.sh data_raw)"
NEEDS = (
    "c_0.9_c_0.1.json (or another <c|nc>_<x>_<c|nc>_<y>.json) and the renders its rgb paths name "
    "(data/20200223/, from ./download.sh data_raw)"
)
LAYOUT = "<folder>/c_0.9_c_0.1.json or <folder>/data/c_0.9_c_0.1.json, images at the rgb paths"
OPTIONS: dict = {}
PRIMARY = "c_0.9_c_0.1.json"
SPLITS = {"train": "train", "valid": "validation", "test": "test"}
_SPLIT_FILE = re.compile(r"^n?c_[0-9.]+_n?c_[0-9.]+\.json$")


def split_file(folder: Path) -> Path | None:
    found = sorted(
        p
        for base in (folder, folder / "data")
        if base.is_dir()
        for p in base.iterdir()
        if _SPLIT_FILE.match(p.name)
    )
    if not found:
        return None
    primary = [p for p in found if p.name == PRIMARY]
    if not primary and len(found) > 1:
        log.info("rel3d: no %s; using %s of %d split files", PRIMARY, found[0].name, len(found))
    return (primary or found)[0]


def detect(folder: Path) -> bool:
    return split_file(folder) is not None


def sources(folder: Path) -> list[Path]:
    return [split_file(folder)]


def image_path(rgb: str, folder: Path, json_dir: Path) -> Path:
    path = Path(rgb)
    if path.is_absolute():
        return path
    bases = (folder, folder.parent, json_dir, json_dir.parent)
    return first_existing((base / path for base in bases), folder / path)


def images_hint(folder: Path, report: dict) -> str:
    split = Path(report.get("split_file") or folder / "data" / PRIMARY)
    root = split.parent.parent if split.parent.name == "data" else split.parent
    return (
        "Rel3D's rgb paths point at the renders in data/20200223/, which `./download.sh data_raw` "
        f"puts there (run it in {root}; data_min and data bring only the split files and .h5 "
        "crops)"
    )


def read(folder: Path, options: dict) -> tuple[dict[str, list[dict]], dict]:
    path = split_file(folder)
    data = read_json(path)
    splits = {}
    for key, split in SPLITS.items():
        if key not in data:
            continue
        check_labels((s.get("label") for s in data[key]), f"{path} [{key}]")
        splits[split] = [
            claim_row(
                name_of(s["subject"]),
                s["predicate"],
                name_of(s["object"]),
                s["label"],
                image_path(s["rgb"], folder, path.parent),
            )
            for s in data[key]
        ]
    return splits, {"split_file": str(path)}


def features():
    return claim_features()
