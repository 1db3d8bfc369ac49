"""Every image a dataset names is checked before anything trains on it or a cache keeps it.

Why: the published study's loader dropped a row whose image it could not open, which turns a
vision benchmark into a text-only one without anyone noticing. Here a missing or corrupt image is
an error that counts distinct images (a COCO picture behind twenty captions is one download, not
twenty) and says where that dataset's images come from. An image that opens but is larger than
PIL's decompression-bomb limit (``Image.MAX_IMAGE_PIXELS``) is a different problem with a
different fix, so it is reported as too large, not as missing.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from vqa_r1.errors import UserError

DEFAULT_HINT = (
    "Fix the image folder the image_path column points to (for a VSR folder: the COCO images) "
    "or drop those rows"
)


def check_image_paths(paths: Iterable[Any], where: str, hint: str = DEFAULT_HINT) -> None:
    """Open and read through every distinct image in ``paths`` (a row's path, or its list of
    paths for a row with several images); one error naming what failed."""
    from PIL import Image

    rows = 0
    distinct: dict[str, int] = {}  # each image, and how many rows name it
    for row in paths:
        rows += 1
        for p in row if isinstance(row, (list, tuple)) else [row]:
            distinct[str(p)] = distinct.get(str(p), 0) + 1
    bad: list[str] = []
    huge: dict[str, str] = {}  # image -> PIL's message
    for p in distinct:
        try:
            with Image.open(p) as img:
                img.verify()  # reads the file through: a truncated or corrupt image fails here
        except Image.DecompressionBombError as err:
            huge[p] = str(err)
        except Exception:
            bad.append(p)

    def counted(failed: Iterable[str]) -> str:  # the rows counted are those naming a failed image
        failed = list(failed)
        named = sum(distinct[f] for f in failed)
        return f"{len(failed)} of {len(distinct)} distinct images ({named} of {rows} rows)"

    if bad:
        raise UserError(
            f"{where}: {counted(bad)} are missing or unreadable, e.g. "
            f"{', '.join(bad[:3])}. {hint}; nothing is silently skipped."
        )
    if huge:
        limit = Image.MAX_IMAGE_PIXELS
        first = next(iter(huge))
        raise UserError(
            f"{where}: {counted(huge)} are larger than PIL's limit of {limit} pixels "
            f"(PIL.Image.MAX_IMAGE_PIXELS, twice that is refused as a possible decompression "
            f"bomb), e.g. {first} ({huge[first]}). Downscale them (the models see far fewer "
            "pixels anyway)."
        )


def row_images(ds: Any) -> list[Any]:
    """Each row's image paths: ``image_path`` (one) or ``image_paths`` (a list, in order)."""
    if "image_paths" in ds.column_names:
        return [list(paths) for paths in ds["image_paths"]]
    return [[p] for p in ds["image_path"]]


def image_column(ds: Any) -> str | None:
    """The column naming a row's images, or None for rows that carry them decoded."""
    for name in ("image_paths", "image_path"):
        if name in ds.column_names:
            return name
    return None
