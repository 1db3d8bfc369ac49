"""Groundlight r1_vlm's message-decoding (cryptogram) dataset as its authors publish it.

r1_vlm trains on ``sunildkumar/message-decoding-words-and-sequences-r1`` (their README's dataset
link; ``message_decoding_sequences_env.py`` loads it). Its rows, as written by
``src/r1_vlm/datasets/message_decoding_words_and_sequences/message_decoding_words_and_sequences_r1.py``:
``coded_message`` (the code with its characters separated by spaces, ``_`` for a space),
``decoded_message`` (the plain words, lower case), ``mapping`` (coded letter -> plain letter, with
``_`` -> space), ``task`` (``word``, ``word_2``, ``word_3``), ``image`` (the decoder) and
``messages`` (their chat prompt, with an image placeholder). Splits ``train`` and ``test`` (their
``train_test_split(test_size=0.1, seed=42)``). The earlier one-word set
(``sunildkumar/message-decoding-words-r1``) has the same columns less ``task``, upper case words.
There is no separate specification: the scripts are the documentation.

Accepted, as for R1-V's rows (formats/r1v_clevr.py; both are read by formats/hub_rows.py): the
hub snapshot's parquet files (``huggingface-cli download ... --repo-type dataset --local-dir
DIR``: ``DIR/data/train-*.parquet``) or a ``save_to_disk`` folder of the loaded dataset. Each decoder image is written once, named by
its content's SHA-1, into ``<folder>/.vqa_r1/r1_vlm_cryptogram-images/``. The rows become the
generator's rows (data/cryptogram.py: our question with their coded message, ``solution``
``<answer> ... </answer>``, the ``<chars>`` reasoning); ``coded_message`` and ``decoded_message``
are kept exactly as released, so the cryptogram rewards read them as r1_vlm's did. Their prompt
(``messages``) is not used.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vqa_r1.data.cryptogram import decoded_row
from vqa_r1.data.formats import hub_rows
from vqa_r1.data.formats.common import notice
from vqa_r1.errors import UserError

NAME = "r1_vlm_cryptogram"
VERSION = 1
URL = (
    "https://huggingface.co/datasets/sunildkumar/message-decoding-words-and-sequences-r1 "
    "(groundlight/r1_vlm's README)"
)
NEEDS = "rows with coded_message, decoded_message, image: the hub snapshot or a save_to_disk"
LAYOUT = (
    "<folder>/data/{train,test}-*.parquet (huggingface-cli download --local-dir <folder>) or "
    "load_dataset(...).save_to_disk(<folder>)"
)
COLUMNS = ("coded_message", "decoded_message", "image")
OPTIONAL = ("mapping", "task")
OPTIONS: dict = {}
IMAGES = "r1_vlm_cryptogram-images"
ROW_COLUMNS = (
    "image_path",
    "caption",
    "label",
    "problem",
    "solution",
    "reasoning",
    "coded_message",
    "decoded_message",
    "mapping",
    "word_count",
    "task",
)


RELEASE = hub_rows.Release(COLUMNS, IMAGES, OPTIONAL)
# what the format registry (formats/__init__.py) calls
is_hub_save = RELEASE.is_hub_save
detect = RELEASE.detect
sources = hub_rows.sources
image_folder = RELEASE.image_folder


def images_hint(folder: Path, report: dict) -> str:
    return (
        "r1_vlm's decoder images are inside the dataset's rows (image column); convert again "
        "from a complete download of sunildkumar/message-decoding-words-and-sequences-r1 into "
        f"{folder} (images are written to {report.get('image_folder') or image_folder(folder)})"
    )


def _mapping(value: Any) -> dict:
    """The released mapping (a struct of letters, or JSON text), without empty entries."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    if not isinstance(value, dict):
        return {}
    return {str(k): str(v) for k, v in value.items() if v is not None}


def read(folder: Path, options: dict) -> tuple[dict[str, list[dict]], dict]:
    images = image_folder(folder)
    images.mkdir(parents=True, exist_ok=True)
    splits: dict[str, list[dict]] = {}
    dropped: dict[str, dict[str, int]] = {}
    for number, (split, row) in enumerate(RELEASE.rows(folder), 1):
        counts = dropped.setdefault(split, {"no_message": 0, "no_image": 0})
        splits.setdefault(split, [])
        coded = " ".join(str(row.get("coded_message") or "").split())
        message = " ".join(str(row.get("decoded_message") or "").split())
        if not coded or not message:
            counts["no_message"] += 1
            notice(f"{NAME}: dropped {split} row {number}: no coded or decoded message")
            continue
        try:
            path = hub_rows.write_image(images, row.get("image"))
        except ValueError:
            counts["no_image"] += 1
            notice(f"{NAME}: dropped {split} row {number}: no image in the row")
            continue
        out = decoded_row(coded, message, str(path), _mapping(row.get("mapping")))
        if row.get("task"):
            out["task"] = str(row["task"])
        splits[split].append(out)
    if not splits:
        raise UserError(f"{folder}: r1_vlm's rows were found but none could be read")
    return splits, {"image_folder": str(images), "dropped": dropped}


def features() -> Any:
    from datasets import Features, Value

    ints = ("label", "word_count")
    return Features({n: Value("int64" if n in ints else "string") for n in ROW_COLUMNS})
