"""launch/monitor.py on top of submitit: log paths, sacct parsing and scancel, without a cluster.

A stand-in `scancel` on PATH records what it was asked to cancel; sacct's answers are canned.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vqa_r1.errors import UserError
from vqa_r1.launch import monitor
from vqa_r1.run_dir import RunDir, process_identity, process_started


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
        "not stopped: this host cannot tell whether the recorded process is still that job "
        "(another host, or recorded by an older version): d (pid 4321)",
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


# ------------------------------------------------------------------------------- local processes


def as_typed(verb: str, folder: Path) -> str:
    """`slurm/launch.py VERB FOLDER` as a user types it (in this process): what it printed."""
    from cli_helpers import run_in_process

    from vqa_r1.cli.launch import main

    out = run_in_process(main, [verb, str(folder)])
    assert out.returncode == 0 and not out.stderr, out.stderr
    return out.stdout.rstrip("\n")


# a stand-in for submitit's controller: it starts a task that writes down the signal it gets
TASK = """
import signal, sys, time
def got(signum, frame):
    open(sys.argv[1], "w").write(signal.Signals(signum).name)
    sys.exit(0)
signal.signal(signal.SIGINT, got)
open(sys.argv[1] + ".ready", "w").close()
time.sleep(60)
"""
CONTROLLER = f"""
import subprocess, sys
sys.exit(subprocess.call([sys.executable, "-c", {TASK!r}, sys.argv[1]]))
"""


def test_cancel_sends_ctrl_c_to_a_running_local_job_and_never_signals_a_reused_pid(tmp_path):
    """Issue 30, item 9: `cancel` on a running local job stopped nothing (it said "stop it with
    kill"), and on a finished one named pids that may belong to other processes by now."""
    got, driver_got = tmp_path / "got", tmp_path / "driver-got"
    controller = subprocess.Popen([sys.executable, "-c", CONTROLLER, str(got)],
                                  start_new_session=True)  # fmt: skip
    # an in-process launch: its steps run in the launch's own process (launch.json `driver`)
    driver = subprocess.Popen([sys.executable, "-c", TASK, str(driver_got)],
                              start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 30
    while not (Path(f"{got}.ready").exists() and Path(f"{driver_got}.ready").exists()):
        assert time.monotonic() < deadline and controller.poll() is None
        time.sleep(0.05)
    root = tmp_path / "pipeline"
    steps = []
    for name, pid, process in (
        ("running", controller.pid, process_identity(controller.pid)),
        # this test's own pid with another start time: a pid the recorded job left, reused
        ("reused", os.getpid(), {**process_identity(os.getpid()),
                                 "started": (process_started(os.getpid()) or 0) + 1}),
    ):  # fmt: skip
        run = root / name
        run.mkdir(parents=True)
        monitor.record_job(run, str(pid), "local", run / "jobs", "launch.py", process=process)
        steps.append({"name": name, "run_dir": str(run), "job_id": str(pid), "state": "RUNNING"})
    RunDir(root / "reused").update_status(state="COMPLETED")
    (root / "inproc").mkdir()
    steps.append({"name": "inproc", "run_dir": str(root / "inproc"), "job_id": None,
                  "state": "RUNNING"})  # fmt: skip
    launch = {"kind": "pipeline", "driver": process_identity(driver.pid), "steps": steps}
    (root / "launch.json").write_text(json.dumps(launch))

    message = as_typed("cancel", root)
    assert message.splitlines() == [
        f"sent Ctrl-C to local job {controller.pid} (running, was RUNNING): it checkpoints at "
        "its next step boundary and stops; the same command resumes",
        f"sent Ctrl-C to the launch (pid {driver.pid}) (inproc, was RUNNING): it checkpoints "
        "at its next step boundary and stops; the same command resumes",
        f"already finished, not cancelled: reused (local job {os.getpid()}, COMPLETED)",
    ]
    assert controller.wait(timeout=30) == 0 and got.read_text() == "SIGINT"
    assert driver.wait(timeout=30) == 0 and driver_got.read_text() == "SIGINT"


def test_a_local_state_is_checked_against_its_process(tmp_path):
    """Issue 30, item 4: a step recorded RUNNING whose launch and job were killed shows how its
    run ended (the job finished on its own), a killed evaluation shows DEAD with what to do
    (it showed UNKNOWN with no note), and a pipeline whose launch is gone is STOPPED (it was IN
    PROGRESS for good)."""
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    dead = {"pid": int(gone.stdout), "host": socket.gethostname(), "started": 1}
    root = tmp_path / "p"
    steps = []
    for name, state in (("sft", "RUNNING"), ("evaluate", "RUNNING"), ("grpo", "NOT RUN")):
        run = root / name
        run.mkdir(parents=True)
        if state == "RUNNING":
            monitor.record_job(run, "99", "local", run / "jobs", "launch.py", process=dead)
        job_id = "99" if state == "RUNNING" else None
        steps.append({"name": name, "run_dir": str(run), "job_id": job_id, "state": state})
    RunDir(root / "sft").update_status(state="COMPLETED", global_step=80)
    launch = {"kind": "pipeline", "driver": dead, "steps": steps}
    (root / "launch.json").write_text(json.dumps(launch))
    report = as_typed("status", root)
    lines = report.splitlines()
    assert lines[0].split()[:4] == ["sft", "job", "99", "COMPLETED"], report
    assert lines[1].split()[:4] == ["evaluate", "job", "99", "DEAD"], report
    assert (f"local job 99 (pid {dead['pid']} on {dead['host']}) is gone and the run recorded "
            "no end: killed (SIGKILL, out of memory?); the same command resumes") in report  # fmt: skip
    assert "RUNNING" not in report
    assert lines[-1].startswith("pipeline STOPPED: step evaluate ended DEAD"), report
    # the launch gone with every started step ended well: STOPPED, with what to do
    RunDir(root / "evaluate").update_status(state="COMPLETED")
    report = as_typed("status", root)
    assert report.splitlines()[-1] == (
        f"pipeline STOPPED: its launch (pid {dead['pid']} on {dead['host']}) is gone (killed?); "
        "2 of 3 steps completed; not run: grpo; run the same command to go on"
    ), report


def test_a_sacct_that_cannot_be_run_is_named_not_a_folder_to_write(tmp_path, monkeypatch):
    """Issue 30, item 9: a sacct on PATH that cannot be run (no execute permission) was reported
    as "choose a folder you can write"."""
    from cli_helpers import run_in_process

    from vqa_r1.cli.launch import main

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sacct").write_text("#!/bin/sh\nexit 0\n")  # not executable
    monkeypatch.setenv("PATH", str(bin_dir))  # the only sacct there is
    out = run_in_process(main, ["status", "1234"])
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.startswith("error: sacct cannot be run (Permission denied)"), out.stderr
    assert "folder" not in out.stderr and "SLURM" in out.stderr
