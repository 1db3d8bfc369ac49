"""Fixtures for tests that submit jobs to a real SLURM, the one `scripts/local-slurm start` runs.

The cluster is required rather than faked because the behaviour under test (warning signal,
requeue under the same job id, restart count, accounting) lives in slurmctld, not in submitit.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from slurm_helpers import START_HINT, cluster_problem


@pytest.fixture(scope="session")
def slurm_cluster() -> None:
    """Fail under CI (a silent skip would pass a run that tested nothing); skip elsewhere."""
    problem = cluster_problem()
    if problem is None:
        return
    message = f"local SLURM cluster not usable: {problem}; {START_HINT}"
    if os.environ.get("CI", "").strip().lower() not in {"", "0", "false", "no"}:
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@pytest.fixture
def submitit_folder(tmp_path: Path, slurm_cluster: None) -> Path:
    """A folder per test: job ids restart at 1 when the cluster state is purged, so a shared
    folder could hand a test another run's logs and results."""
    folder = tmp_path / "submitit"
    folder.mkdir()
    return folder
