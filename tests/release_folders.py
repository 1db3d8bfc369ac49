"""Small dataset folders in their authors' release layouts, for tests that open them as users do.

Each relation holds as many true as false claims (a text-only classifier starts at 0.5), and a
handful of small images stand behind all rows (several rows per picture, as in VSR).
"""

from __future__ import annotations

import json
from pathlib import Path

from PIL import Image

RELATIONS = ("on", "under", "left of", "in front of")
COLORS = ((200, 30, 30), (30, 160, 60), (30, 60, 200), (220, 200, 20), (140, 50, 170))


def draw(path: Path, size=(32, 24), color=(200, 30, 30)) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, color).save(path)
    return path.name


def claims(n_per_relation: int, relations=RELATIONS):
    """(index, relation, label) with labels balanced within each relation."""
    i = 0
    for relation in relations:
        for k in range(n_per_relation):
            yield i, relation, k % 2
            i += 1


def vsr_release(root: Path, n_per_relation: int = 60, images: bool = True) -> Path:
    """The VSR repository layout: data/splits/{random,zeroshot}/*.jsonl and data/images/."""
    data = root / "data"
    names = [f"0000000{i:05d}.jpg" for i in range(len(COLORS))]
    if images:
        for name, color in zip(names, COLORS, strict=True):
            draw(data / "images" / name, color=color)
    for variant in ("random", "zeroshot"):
        for split, n in (("train", n_per_relation), ("dev", 4), ("test", 6)):
            lines = [
                json.dumps(
                    {
                        "image": names[i % len(names)],
                        "image_link": f"http://images.cocodataset.org/train2017/{names[0]}",
                        "caption": f"The cat {i} is {relation} the dog.",
                        "label": label,
                        "relation": relation,
                        "annotator_id": 1,
                    }
                )
                for i, relation, label in claims(n)
            ]
            path = data / "splits" / variant / f"{split}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("\n".join(lines) + "\n")
    return root


def rel3d_release(root: Path, n_per_relation: int = 60, images: bool = True) -> Path:
    """The Rel3D repository layout: data/c_0.9_c_0.1.json, renders under data/20200223/."""
    names = [f"data/20200223/render_{i}.png" for i in range(len(COLORS))]
    if images:
        for name, color in zip(names, COLORS, strict=True):
            draw(root / name, color=color)

    def sample(i: int, relation: str, label: int) -> dict:
        box = {"top": 1, "left": 2, "height": 5, "width": 6}
        return {
            "rgb": names[i % len(names)],
            "subject": {"name": f"cup{i}", "bbox": box},
            "object": {"name": "table", "bbox": box},
            "predicate": relation,
            "label": bool(label),
        }

    split = {
        key: [sample(*c) for c in claims(n)]
        for key, n in (("train", n_per_relation), ("valid", 4), ("test", 6))
    }
    (root / "data").mkdir(parents=True, exist_ok=True)
    (root / "data" / "c_0.9_c_0.1.json").write_text(json.dumps(split))
    return root


def spatialsense_release(root: Path, n_per_relation: int = 60, images: bool = True) -> Path:
    """The SpatialSense layout: annotations.json and images/flickr/."""
    urls = [f"https://farm4.staticflickr.com/1/{i}_ab.jpg" for i in range(len(COLORS))]
    if images:
        for url, color in zip(urls, COLORS, strict=True):
            draw(root / "images" / "flickr" / url.split("/")[-1], color=color)
    entries = []
    for split, n in (("train", n_per_relation), ("valid", 4), ("test", 6)):
        for i, relation, label in claims(n):
            entries.append(
                {
                    "url": urls[i % len(urls)],
                    "height": 24,
                    "width": 32,
                    "split": split,
                    "annotations": [
                        {
                            "_id": f"{split}-{i}",
                            "predicate": relation,
                            "subject": {"name": f"cat{i}", "bbox": [0, 1, 0, 1]},
                            "object": {"name": "mat", "bbox": [0, 1, 0, 1]},
                            "label": bool(label),
                        }
                    ],
                }
            )
    root.mkdir(parents=True, exist_ok=True)
    (root / "annotations.json").write_text(json.dumps(entries))
    return root


RELEASES = {"vsr": vsr_release, "rel3d": rel3d_release, "spatialsense": spatialsense_release}
