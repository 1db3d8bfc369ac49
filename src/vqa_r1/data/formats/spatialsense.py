"""SpatialSense as released: ``annotations.json`` plus ``images/`` (Flickr and NYU pictures).

Fields per the SpatialSense repository (princeton-vl/SpatialSense, README "Data Format" and
baselines/util.py): the file is a list of images with ``url``, ``height``, ``width``, ``split``
(``train``/``valid``/``test``; ``valid`` becomes our ``validation``) and ``annotations``, each a
relation with ``_id``, ``predicate``, ``subject`` and ``object`` (dicts with ``name``, ``x``, ``y``,
``bbox``) and ``label`` (true for a positive example). An image is ``images/flickr/<url's last
part>`` when its url starts with ``http``, else ``images/nyu/<url's last part>``, as the release's
loader reads them. The README spells the file both ``annotations.json`` and ``annotation.json``:
either is accepted.
"""

from __future__ import annotations

from pathlib import Path

from vqa_r1.data.formats.common import (
    check_labels,
    claim_features,
    claim_row,
    first_existing,
    name_of,
    read_json,
)

NAME = "spatialsense"
VERSION = 2  # 2: the report names the annotations file (split_file)
URL = "https://github.com/princeton-vl/SpatialSense (annotations.json and images.tar.gz)"
NEEDS = "annotations.json and images/flickr/, images/nyu/ (from images.tar.gz)"
LAYOUT = "<folder>/annotations.json, <folder>/images/flickr/*.jpg, <folder>/images/nyu/*"
SPLITS = {"train": "train", "valid": "validation", "test": "test"}
FILES = ("annotations.json", "annotation.json")
OPTIONS: dict = {}


def annotation_file(folder: Path) -> Path | None:
    return first_existing(folder / name for name in FILES)


def detect(folder: Path) -> bool:
    return annotation_file(folder) is not None


def sources(folder: Path) -> list[Path]:
    return [annotation_file(folder)]


def image_path(url: str, folder: Path) -> Path:
    source = "flickr" if url.startswith("http") else "nyu"
    return folder / "images" / source / url.rstrip("/").split("/")[-1]


def images_hint(folder: Path, report: dict) -> str:
    return (
        "SpatialSense's images come as images.tar.gz from its repository: extract it so that "
        f"{folder / 'images' / 'flickr'} and {folder / 'images' / 'nyu'} hold them"
    )


def read(folder: Path, options: dict) -> tuple[dict[str, list[dict]], dict]:
    splits: dict[str, list[dict]] = {split: [] for split in SPLITS.values()}
    annotations = annotation_file(folder)
    data = read_json(annotations)
    labels = (rel.get("label") for image in data for rel in image["annotations"])
    check_labels(labels, str(annotations))
    for image in data:
        split = SPLITS.get(image["split"])
        if split is None:
            continue
        path = image_path(image["url"], folder)
        for rel in image["annotations"]:
            splits[split].append(
                claim_row(
                    name_of(rel["subject"]),
                    rel["predicate"],
                    name_of(rel["object"]),
                    rel["label"],
                    path,
                )
            )
    # the file every split came from, named like Rel3D's (a biased set's card names it)
    return {k: v for k, v in splits.items() if v}, {"split_file": str(annotations)}


def features():
    return claim_features()
