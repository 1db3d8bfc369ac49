"""`slurm/launch.py doctor` as a real job on the local SLURM: the report comes back, and the
SLURM settings requeueing relies on are read from the controller by the job itself."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]


def test_the_doctor_job_reports_from_a_compute_node(tmp_path, slurm_cluster):
    out = subprocess.run(
        [sys.executable, "slurm/launch.py", "doctor", "--cluster", "local-slurm",
         "--executor", "slurm", "--model", "tiny-qwen2.5-vl", "--output-dir", str(tmp_path / "doc")],
        capture_output=True, text=True, cwd=REPO, timeout=600,
    )  # fmt: skip
    report = (tmp_path / "doc" / "doctor.txt").read_text()
    assert report.strip() in out.stdout, out.stdout + out.stderr
    lines = report.splitlines()
    assert any(line.startswith("OK    JobRequeue") for line in lines), report  # JobRequeue=1
    assert any(line.startswith(("OK    preemption", "WARN  preemption")) for line in lines)
    assert any(line.startswith("OK    offline: HF_HUB_OFFLINE=1") for line in lines)  # exported
    failed = any(line.startswith("FAIL") for line in lines)
    assert out.returncode == (1 if failed else 0)
