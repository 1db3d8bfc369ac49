"""The dry-run script is the script submitit submits (launch/sbatch_preview.py, submitit's private API).

`render` reaches into submitit's executor; these tests fail when a submitit upgrade renames what it
uses, or when what `submit`/`map_array` hand to sbatch stops being what `render` shows. No cluster
is needed: a stand-in `sbatch` on PATH accepts the script, and submitit keeps it in the job folder.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import submitit

from vqa_r1.launch.sbatch_preview import render

FAKE_JOB_ID = "4242"


@pytest.fixture
def executor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> submitit.AutoExecutor:
    """A SLURM executor that submits to a stand-in sbatch; works without srun or a cluster."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sbatch = bin_dir / "sbatch"
    sbatch.write_text(f"#!/bin/sh\necho 'Submitted batch job {FAKE_JOB_ID}'\n")
    sbatch.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    # SlurmExecutor refuses to exist without srun on PATH; affinity() is its public probe
    monkeypatch.setattr(submitit.SlurmExecutor, "affinity", classmethod(lambda cls: 2))
    ex = submitit.AutoExecutor(folder=tmp_path / "jobs", cluster="slurm")
    ex.update_parameters(
        name="preview-probe",
        timeout_min=7,
        slurm_partition="debug",
        slurm_setup=["echo setup-line"],
        slurm_array_parallelism=2,
    )
    return ex


def test_submitit_still_has_the_private_names_sbatch_preview_uses(executor):
    slurm = getattr(executor, "_executor", None)
    assert isinstance(slurm, submitit.SlurmExecutor), (
        f"submitit {submitit.__version__}: AutoExecutor._executor is gone or no SlurmExecutor; "
        "update vqa_r1/launch/sbatch_preview.py"
    )
    for name in ("_make_submission_file_text", "_submitit_command_str"):
        assert hasattr(slurm, name), (
            f"submitit {submitit.__version__}: SlurmExecutor.{name} is gone; "
            "update vqa_r1/launch/sbatch_preview.py"
        )
    assert isinstance(slurm.parameters, dict)


def test_the_script_carries_the_sbatch_lines_logs_setup_and_command(executor, tmp_path):
    folder = tmp_path / "jobs"
    text = render(executor)
    assert text.startswith("#!/bin/bash\n"), text
    assert "#SBATCH --job-name=preview-probe\n" in text, text
    assert "#SBATCH --partition=debug\n" in text and "#SBATCH --time=7\n" in text, text
    assert f"#SBATCH --output={folder}/%j_0_log.out\n" in text, text
    assert f"#SBATCH --error={folder}/%j_0_log.err\n" in text, text
    assert "\necho setup-line\n" in text, text
    assert re.search(rf"srun .* -u -m submitit\.core\._submit {re.escape(str(folder))}\n", text), (
        text
    )
    assert "--array" not in text and "DRYRUN" not in text
    assert not folder.exists()  # rendering writes nothing


def test_an_array_script_has_the_range_and_per_element_logs(executor, tmp_path):
    folder = tmp_path / "jobs"
    text = render(executor, array_size=3)
    assert "#SBATCH --array=0-2%2\n" in text, text
    assert f"#SBATCH --output={folder}/%A_%a_0_log.out\n" in text, text
    assert "map_count" not in executor._executor.parameters  # the executor can still submit


def test_what_submit_hands_to_sbatch_is_what_render_shows(executor):
    preview = render(executor)
    job = executor.submit(print, "hello")
    assert job.job_id == FAKE_JOB_ID
    assert job.paths.submission_file.read_text() == preview


def test_what_map_array_hands_to_sbatch_is_what_render_shows(executor):
    preview = render(executor, array_size=3)
    jobs = executor.map_array(print, [1, 2, 3])
    assert [job.job_id for job in jobs] == [f"{FAKE_JOB_ID}_{i}" for i in range(3)]
    assert jobs[0].paths.submission_file.read_text() == preview
