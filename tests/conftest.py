"""Shared fixtures: one thread (3-40x faster on small CPUs), an isolated cache, the study's data;
and the order the suite runs in (scripts/test runs it on several pytest-xdist workers)."""

from __future__ import annotations

import os
import signal

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

# A process started in the background by a non-interactive shell (CI's, or a worker of
# pytest-xdist) may inherit SIGINT ignored, and every command a test starts would inherit that:
# the tests of Ctrl-C would then test nothing. Python's own handler here gives them the default.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config, items):
    """The SLURM tests share the local cluster (its two CPUs): one xdist worker runs them, one
    after another (``xdist_group``), while the others run the rest. They run first, and the
    modules with slow tests next: the long waits start early instead of ending the suite."""
    group = pytest.mark.xdist_group("slurm")
    for item in items:
        if item.get_closest_marker("slurm"):
            item.add_marker(group)
    rank: dict[str, int] = {}
    for item in items:
        module = str(item.path)
        level = (
            0 if item.get_closest_marker("slurm") else 1 if item.get_closest_marker("slow") else 2
        )
        rank[module] = min(rank.get(module, 2), level)
    items.sort(key=lambda item: rank[str(item.path)])  # stable: modules keep their order


@pytest.fixture(scope="session", autouse=True)
def _cache(tmp_path_factory):
    """Tiny models and synthetic data are built once per test session, outside the user's cache:
    under pytest-xdist once for all workers (the caches are written atomically, and a folder
    another worker finished first is kept)."""
    if "VQA_R1_CACHE" not in os.environ:
        base = tmp_path_factory.getbasetemp()
        if os.environ.get("PYTEST_XDIST_WORKER"):
            shared = base.parent / "vqa_r1_cache"
            shared.mkdir(exist_ok=True)
            os.environ["VQA_R1_CACHE"] = str(shared)
        else:
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
