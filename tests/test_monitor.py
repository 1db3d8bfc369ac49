"""launch/monitor.py on top of submitit: log paths, sacct parsing and scancel, without a cluster.

A stand-in `scancel` on PATH records what it was asked to cancel; sacct's answers are canned.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from vqa_r1.errors import UserError
from vqa_r1.launch import monitor


def rows(text: str) -> dict[str, dict[str, str]]:
    return monitor.parse_sacct(text)


def test_sacct_ranges_are_split_into_elements():
    parsed = rows(
        "12_[1,3-4%2]|PENDING|00:00:00|None assigned|0:0|Unknown\n"
        "12_0|RUNNING|00:01:00|vm|0:0|2026-01-01T10:00:00\n"
        "\n"
        "13|CANCELLED by 0|00:00:00|None assigned|0:0|None\n"
    )
    assert sorted(parsed) == ["12_0", "12_1", "12_3", "12_4", "13"]
    assert parsed["12_4"]["State"] == "PENDING" and parsed["12_4"]["NodeList"] == "None assigned"
    assert parsed["12_0"]["Elapsed"] == "00:01:00" and parsed["12_0"]["Start"].startswith("2026")
    assert parsed["13"]["State"] == "CANCELLED" and parsed["13"]["Detail"] == "CANCELLED by 0"
    assert monitor.lookup(parsed, "12_2") is None and rows("") == {}


def test_log_paths_are_submitits(tmp_path):
    jobs = tmp_path / "jobs"
    assert monitor.log_path({"job_id": "41", "log_dir": str(jobs)}) == jobs / "41_0_log.out"
    array_element = {"job_id": "41_2", "executor": "slurm", "log_dir": str(jobs)}
    assert monitor.log_path(array_element, stderr=True) == jobs / "41_2_0_log.err"
    local = {"job_id": "9876", "executor": "local", "log_dir": str(jobs)}
    assert monitor.log_path(local) == jobs / "9876_0_log.out"
    assert monitor.log_path({"job_id": "41", "log_dir": None}) is None
    assert monitor.log_path({}) is None


def test_a_log_cut_mid_character_is_still_shown(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("verb: sft\n")
    monitor.record_job(run, "5", "slurm", run / "jobs", "slurm/launch.py sft")
    (run / "jobs").mkdir()
    (run / "jobs" / "5_0_log.out").write_bytes(b"step 1\nstep 2 \xc3")
    assert monitor.logs_report(str(run), lines=1).endswith("step 2 \ufffd")


@pytest.fixture
def scancel_calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in scancel that records its arguments and refuses job 666."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "scancel-calls"
    scancel = bin_dir / "scancel"
    scancel.write_text(
        f'#!/bin/sh\necho "$@" >> {calls}\n'
        '[ "$1" = 666 ] && { echo "scancel: error: Access/permission denied" >&2; exit 1; }\n'
        "exit 0\n"
    )
    scancel.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(monitor, "scontrol_show", lambda job_id: "")
    return calls


def sweep(tmp_path: Path, elements: dict[str, tuple[str, str]]) -> Path:
    """A sweep folder whose elements (name -> (job id, executor)) each recorded one job."""
    root = tmp_path / "sweep"
    entries = []
    for name, (job_id, executor) in elements.items():
        run = root / name
        run.mkdir(parents=True)
        monitor.record_job(run, job_id, executor, run / "jobs", "slurm/launch.py sft")
        entries.append({"name": name, "run_dir": str(run), "job_id": job_id})
    (root / "launch.json").write_text(json.dumps({"kind": "sweep", "steps": entries}))
    return root


def test_cancel_scancels_unfinished_slurm_jobs_only(tmp_path, monkeypatch, scancel_calls):
    sacct = "30_0|RUNNING|00:05:00|vm|0:0|2026-01-01T10:00:00\n30_[1-2]|PENDING||||Unknown\n"
    sacct += "31|COMPLETED|00:01:00|vm|0:0|2026-01-01T09:00:00\n"
    monkeypatch.setattr(monitor, "query_sacct", lambda ids: monitor.parse_sacct(sacct))
    root = sweep(
        tmp_path,
        {
            "a": ("30_0", "slurm"),
            "b": ("30_2", "slurm"),
            "c": ("31", "slurm"),
            "d": ("4321", "local"),
        },
    )
    message = monitor.cancel(str(root))
    assert scancel_calls.read_text().split() == ["30_0", "30_2"]
    assert message.splitlines() == [
        "cancelled job 30_0 (a, was RUNNING)",
        "cancelled job 30_2 (b, was PENDING)",
        "already finished, not cancelled: c (job 31, COMPLETED)",
        "not SLURM jobs: d (local pid 4321: stop it with kill)",
    ]


def test_a_failed_scancel_is_an_error_that_says_what_was_cancelled(
    tmp_path, monkeypatch, scancel_calls
):
    sacct = "665|RUNNING|00:05:00|vm|0:0|2026-01-01T10:00:00\n"
    sacct += "666|RUNNING|00:05:00|vm|0:0|2026-01-01T10:00:00\n"
    monkeypatch.setattr(monitor, "query_sacct", lambda ids: monitor.parse_sacct(sacct))
    root = sweep(tmp_path, {"ok": ("665", "slurm"), "theirs": ("666", "slurm")})
    with pytest.raises(UserError) as err:
        monitor.cancel(str(root))
    assert "cancelled job 665 (ok, was RUNNING)" in str(err.value)
    assert "scancel 666 (theirs) failed" in str(err.value)
    assert scancel_calls.read_text().split() == ["665", "666"]
