"""Open a dataset folder in its public release format by converting it once, beside itself.

``data.dataset=<folder>`` may name a folder saved with ``save_to_disk`` in the VSR schema (used as
is) or a dataset as its authors publish it: VSR's split ``.jsonl`` files, Rel3D's split ``.json``,
SpatialSense's ``annotations.json``, DrivingVQA's ``train.json``/``test.json``, SuperCLEVR's
counting ``.jsonl`` (R1-V's evaluation file), R1-V's CLEVR training rows or r1_vlm's cryptogram
rows. Those are converted into ``<folder>/.vqa_r1/<format>-<key>/hf`` (one module per format, each
with its source cited) with a ``conversion_report.json`` next to ``hf``. The key hashes the
converter version, the format's own options (DrivingVQA's pixel limit and two-question rule; the
other formats have none), the folder's absolute path (image paths are absolute) and the size and
mtime of the release files, so an edited release or a moved folder converts again. The cache is
written through ``atomic_dir``: a killed conversion leaves no half cache, and a cache that exists
is complete. A read-only release folder is cached under the project cache instead.

Image locations are resolved when converting (each format looks in the places its authors'
README names), so a conversion checks every image it resolved before it writes anything: a
release whose images are not in place yet leaves no cache, and the error says, per format, where
its images come from. A cache whose images later fail the check at load is converted again
(``reconvert``): images put in place or moved since are found without deleting anything by hand.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from types import ModuleType
from typing import Any

from vqa_r1.data.formats import (
    drivingvqa,
    multi_image,
    r1_vlm_cryptogram,
    r1v_clevr,
    rel3d,
    spatialsense,
    superclevr,
    vsr,
)
from vqa_r1.data.images import check_image_paths
from vqa_r1.errors import UserError
from vqa_r1.io import atomic_dir, atomic_write_json
from vqa_r1.paths import cache_root

log = logging.getLogger(__name__)
# superclevr first: its rows (image_path, question, ground_truth) are told apart from VSR's even
# when its file is called test.jsonl
# multi_image before vsr: both read split .jsonl files, and only its rows list images
FORMATS: tuple[ModuleType, ...] = (
    multi_image,
    superclevr,
    vsr,
    rel3d,
    spatialsense,
    drivingvqa,
    r1v_clevr,
    r1_vlm_cryptogram,
)
DEFAULT_MAX_PIXELS = drivingvqa.DEFAULT_MAX_PIXELS
CACHE_DIR = ".vqa_r1"
REPORT = "conversion_report.json"


def is_saved_dataset(folder: Path) -> bool:
    """A save_to_disk folder used as is (R1-V's and r1_vlm's hub rows saved so are a release:
    converted)."""
    saved = any((folder / name).exists() for name in ("hf", "dataset_dict.json", "state.json"))
    return saved and not (r1v_clevr.is_hub_save(folder) or r1_vlm_cryptogram.is_hub_save(folder))


def detect(folder: Path) -> ModuleType | None:
    """The release format of ``folder``, or None (a saved dataset is not a release format)."""
    if not folder.is_dir():
        return None
    return next((fmt for fmt in FORMATS if fmt.detect(folder)), None)


def describe(folder: str | Path) -> str:
    """What a dataset folder is, in a few words (for dry runs); an error when it is none."""
    folder = Path(folder)
    if is_saved_dataset(folder):
        return f"{folder} (saved with save_to_disk)"
    fmt = detect(folder)
    if fmt is None:
        raise UserError(not_found_message(folder))
    if fmt is vsr:
        vsr.announce(folder)
        return f"{folder} (vsr release, split files in {vsr.split_dir(folder)})"
    return f"{folder} ({fmt.NAME} release, converted at submission)"


def format_options(fmt: ModuleType, options: dict | None) -> dict:
    """The options this format reads (its defaults filled in); the others do not split its cache."""
    given = options or {}
    return {k: given.get(k, default) for k, default in fmt.OPTIONS.items()}


def resolve(folder: str | Path, options: dict | None = None) -> Path:
    """A folder ``load_from_disk`` can open: ``folder`` itself, or the (cached) conversion."""
    folder = Path(folder)
    if is_saved_dataset(folder):
        return folder
    fmt = detect(folder)
    if fmt is None:
        raise UserError(not_found_message(folder))
    if fmt is vsr:
        vsr.announce(folder)
    opts = format_options(fmt, options)
    target = cache_dir(fmt, folder, opts)
    if not (target / "hf").exists():
        convert(fmt, folder, opts, target)
    return target


def reconvert(folder: str | Path, options: dict | None = None) -> Path:
    """Convert again (the image locations resolved anew), replacing the cache atomically; a
    conversion whose image check fails removes the stale cache too (the suite wrote it)."""
    import shutil

    folder = Path(folder)
    fmt = detect(folder)
    opts = format_options(fmt, options)
    target = cache_dir(fmt, folder, opts)
    try:
        convert(fmt, folder, opts, target)
    except UserError:
        if (target / REPORT).exists():
            shutil.rmtree(target, ignore_errors=True)
        raise
    return target


def cache_key(fmt: ModuleType, folder: Path, options: dict) -> str:
    files = []
    for path in fmt.sources(folder):
        stat = path.stat()
        files.append([str(path.resolve()), stat.st_size, stat.st_mtime_ns])
    key = json.dumps([fmt.NAME, fmt.VERSION, str(folder.resolve()), options, files])
    return hashlib.sha256(key.encode()).hexdigest()[:12]


def cache_dir(fmt: ModuleType, folder: Path, options: dict) -> Path:
    name = f"{fmt.NAME}-{cache_key(fmt, folder, options)}"
    if os.access(folder, os.W_OK):
        return folder / CACHE_DIR / name
    return cache_root() / "data" / "formats" / name


def convert(fmt: ModuleType, folder: Path, options: dict, target: Path) -> None:
    from datasets import Dataset, DatasetDict

    log.info("converting %s (%s release format) into %s", folder, fmt.NAME, target)
    splits, report = fmt.read(folder, options)
    # before anything is written: a release whose images are not in place leaves no cache
    check_image_paths(
        (row.get("image_paths") or row["image_path"] for rows in splits.values() for row in rows),
        f"{folder} ({fmt.NAME} release)",
        fmt.images_hint(folder, report),
    )
    features = fmt.features()
    # from columns, not from_list: an empty list of rows would lose the schema
    dd = DatasetDict(
        {
            name: Dataset.from_dict({k: [r[k] for r in rows] for k in features}, features=features)
            for name, rows in splits.items()
        }
    )
    report = {
        "format": fmt.NAME,
        "source": str(folder.resolve()),
        "options": options,
        "rows": {name: len(rows) for name, rows in splits.items()},
        **report,
    }
    with atomic_dir(target) as tmp:
        # one shard per split: the rows are text, and an empty split saved in zero shards
        # does not load back
        dd.save_to_disk(str(tmp / "hf"), num_shards={name: 1 for name in dd})
        atomic_write_json(tmp / REPORT, report)
    dropped = report.get("dropped")
    if dropped and any(n for counts in dropped.values() for n in counts.values()):
        log.info("%s conversion report (%s): dropped %s", fmt.NAME, target / REPORT, dropped)


def images_hint(converted: Path) -> str | None:
    """Where the images of a converted release come from (None for a saved dataset)."""
    report = report_of(converted)
    fmt = next((f for f in FORMATS if report and f.NAME == report.get("format")), None)
    return None if fmt is None else fmt.images_hint(Path(report["source"]), report)


def report_of(converted: Path) -> dict[str, Any] | None:
    """The conversion report of a resolved folder; None for a folder that was not converted."""
    path = Path(converted) / REPORT
    return json.loads(path.read_text()) if path.exists() else None


def not_found_message(folder: Path) -> str:
    state = "does not exist" if not folder.exists() else "holds no dataset this suite can read"
    lines = [
        f"{folder}: {state}. Looked for these formats:",
        "  - a folder saved with datasets' save_to_disk in the VSR schema (image_path, caption, "
        "label, relation, subj, obj), as the synthetic data is: "
        "<folder>/hf/ or <folder>/dataset_dict.json",
    ]
    for fmt in FORMATS:
        lines.append(
            f"  - {fmt.NAME}: needs {fmt.NEEDS}; get it from {fmt.URL}; put it as {fmt.LAYOUT}"
        )
    return "\n".join(lines)
