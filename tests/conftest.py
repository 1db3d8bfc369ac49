"""Shared fixtures: one thread (3-40x faster on small CPUs), an isolated cache, the study's data."""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
REALDATA = Path(
    os.environ.get("VQA_R1_REALDATA", REPO.parent / "shared" / "realdata" / "vlm_r1_vsr")
)
RESPONSES = REALDATA / "alignment-calculation_LLM-as-a-judge" / "responses"


@pytest.fixture(scope="session", autouse=True)
def _cache(tmp_path_factory):
    """Tiny models and synthetic data are built once per test session, outside the user's cache."""
    if "VQA_R1_CACHE" not in os.environ:
        os.environ["VQA_R1_CACHE"] = str(tmp_path_factory.mktemp("vqa_r1_cache"))
    import torch

    torch.set_num_threads(1)
    yield


@pytest.fixture(scope="session")
def realdata() -> Path:
    if not RESPONSES.exists():
        pytest.fail(f"the study's data is missing: expected {REALDATA} (set VQA_R1_REALDATA)")
    return REALDATA


@pytest.fixture(scope="session")
def synthetic_dir(tmp_path_factory) -> Path:
    """A small synthetic dataset shared by the end-to-end tests."""
    from vqa_r1.data.synthetic import SyntheticSpec, write_dataset

    out = tmp_path_factory.mktemp("data") / "synthetic"
    write_dataset(out, SyntheticSpec(splits={"train": 64, "validation": 16, "test": 24}, seed=3))
    return out
