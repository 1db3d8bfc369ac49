"""Blind controls: the same rows with the image taken away, for a model trained and evaluated
without seeing anything.

A trained model that beats the base model may have learned the answers' distribution from the
questions alone (counting: "how many objects" -> the commonest total). Its blind twin trains and
evaluates the same way on the same rows with ``data.images=blank`` (every image a plain grey
image of the same size, so the prompt holds as many image tokens) or ``shuffled`` (each row gets
another row's image: the scene statistics stay, the link to the question goes). What the real
model scores above its blind twin is what the image adds.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from vqa_r1.errors import UserError

MODES = ("real", "blank", "shuffled")
BLANK = (128, 128, 128)  # mid-grey: no edge, no colour


def blank_image(size: tuple[int, int], root: Path | None = None) -> Path:
    """A grey PNG of ``size`` in the cache, written once (atomically: jobs share it)."""
    from PIL import Image

    from vqa_r1.io import atomic_write_bytes
    from vqa_r1.paths import cache_root

    width, height = size
    path = (root or cache_root() / "blank-images") / f"{width}x{height}.png"
    if not path.exists():
        import io

        buffer = io.BytesIO()
        Image.new("RGB", (width, height), BLANK).save(buffer, format="PNG")
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, buffer.getvalue(), fsync=False)
    return path


def blind_split(ds: Any, mode: str, seed: int, where: str = "data.images") -> Any:
    """``ds`` with its images replaced as ``mode`` says (``real``: unchanged)."""
    if mode == "real":
        return ds
    if mode not in MODES:
        raise UserError(f"{where}: {mode!r} is not one of {', '.join(MODES)}")
    column = "image_paths" if "image_paths" in ds.column_names else "image_path"
    if column not in ds.column_names:
        raise UserError(f"{where}={mode} needs rows with an image_path (or image_paths) column")
    rows = [list(p) if column == "image_paths" else [p] for p in ds[column]]
    if mode == "blank":  # each image its own grey one of its size: as many image tokens
        from PIL import Image

        sizes: dict[str, tuple[int, int]] = {}
        for p in dict.fromkeys(p for row in rows for p in row):
            with Image.open(p) as image:
                sizes[p] = image.size
        new = [[str(blank_image(sizes[p])) for p in row] for row in rows]
    else:  # a random cycle through the rows: each gets the next one's images, none its own
        order = list(range(len(rows)))
        random.Random(seed).shuffle(order)
        new = list(rows)
        for i, row in enumerate(order):
            new[row] = rows[order[(i + 1) % len(order)]]
    values = new if column == "image_paths" else [row[0] for row in new]
    return ds.remove_columns(column).add_column(column, values)
