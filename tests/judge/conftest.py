"""Fixtures for the judge tests: the loopback server, small response files, the study's data."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from loopback_server import LoopbackOpenAI  # noqa: E402

REPO = HERE.parents[1]
STUDY = Path(os.environ.get("VQA_R1_VSR_DATA", REPO.parent / "shared" / "realdata" / "vlm_r1_vsr"))
JUDGE_DIR = STUDY / "alignment-calculation_LLM-as-a-judge"
HUMAN = JUDGE_DIR / "simple-prompt" / "human-labeling" / "human_label_test_split_filled.json"


def checks_file(split: str) -> Path:
    return JUDGE_DIR / "taxonomy-prompt" / f"alignment_checks_{split.upper()}_o4-mini.json"


def responses_file(model: str, split: str) -> Path:
    return JUDGE_DIR / "responses" / model / f"generated_responses_{split.lower()}.json"


needs_study = pytest.mark.skipif(
    not JUDGE_DIR.is_dir(), reason=f"the study's data is not at {STUDY} (set VQA_R1_VSR_DATA)"
)


@pytest.fixture
def server() -> Iterator[LoopbackOpenAI]:
    with LoopbackOpenAI() as srv:
        yield srv


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


@pytest.fixture
def no_key_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No ambient key and an empty cwd, so that nothing real can ever be used."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path
