"""Shared by the judge tests: the study's data paths, small response files, the CLI in-process.

(Kept out of conftest.py: several test folders have a conftest module, so importing names from
"conftest" would depend on collection order.)
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from vqa_r1.cli import main

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
STUDY = Path(os.environ.get("VQA_R1_REALDATA", REPO.parent / "shared" / "realdata" / "vlm_r1_vsr"))
JUDGE_DIR = STUDY / "alignment-calculation_LLM-as-a-judge"
HUMAN = JUDGE_DIR / "simple-prompt" / "human-labeling" / "human_label_test_split_filled.json"


def checks_file(split: str) -> Path:
    return JUDGE_DIR / "taxonomy-prompt" / f"alignment_checks_{split.upper()}_o4-mini.json"


def responses_file(model: str, split: str) -> Path:
    return JUDGE_DIR / "responses" / model / f"generated_responses_{split.lower()}.json"


# the root conftest's `realdata` fixture: missing data fails these tests (one variable,
# VQA_R1_REALDATA, for the whole suite), never skips them: a claim not run is not proven
needs_study = pytest.mark.usefixtures("realdata")


def write_responses(path: Path, n: int, tag: str = "", misaligned_every: int = 0) -> Path:
    """A responses file with claims; every ``misaligned_every``-th reasoning says MISALIGNED so
    the loopback judge returns a misaligned verdict for it."""
    records = []
    for i in range(n):
        flag = " MISALIGNED" if misaligned_every and i % misaligned_every == 0 else ""
        records.append(
            {
                "question": f"The cat {tag}{i} is left of the dog.",
                "true_response": " True " if i % 2 else " False ",
                "predicted_response": f"\nThe cat {tag}{i} sits left of the dog.{flag}\nAnswer: True\n",
            }
        )
    path.write_text(json.dumps(records), encoding="utf-8")
    return path


def cli(*args: object) -> int:
    """``vqa-r1`` in-process, with sys.argv restored afterwards."""
    saved = list(sys.argv)
    try:
        return main([str(a) for a in args])
    finally:
        sys.argv = saved
