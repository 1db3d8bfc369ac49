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


def pytest_collection_modifyitems(config, items):
    """The SLURM tests run first, then the modules with slow tests, then the rest: the long
    waits start early instead of ending the suite (pytest-xdist hands out work in this order)."""
    rank: dict[str, int] = {}
    for item in items:
        module = str(item.path)
        level = (
            0 if item.get_closest_marker("slurm") else 1 if item.get_closest_marker("slow") else 2
        )
        rank[module] = min(rank.get(module, 2), level)
    items.sort(key=lambda item: rank[str(item.path)])  # stable: modules keep their order


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # also runs with -p no:xdist
def pytest_xdist_make_scheduler(config, log):
    """scripts/test's `--dist loadscope`: every test module one unit of work (its module-scoped
    fixtures built once), except the SLURM tests, which share the local cluster (its two CPUs)
    and so are one unit: one worker runs them one after another while the others run the rest.
    (xdist's own `loadgroup` cannot do it under pytest 9, whose node ids take no group suffix.)
    The units go out in the order above, not by size."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModulesAndTheCluster(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.startswith("tests/slurm/"):
                return "tests/slurm"
            return super()._split_scope(nodeid)

    config.option.loadscopereorder = False
    return ModulesAndTheCluster(config, log)


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
