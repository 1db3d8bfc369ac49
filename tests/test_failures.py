"""Failures reach status.json: an exception, Ctrl-C, SIGTERM, a full disk, a killed process."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vqa_r1 import run_dir as rd_module
from vqa_r1.errors import UserError
from vqa_r1.launch import monitor
from vqa_r1.run_dir import RunDir, Terminated, failure_reason, failures_recorded


def status(root: Path) -> dict:
    return json.loads((root / "status.json").read_text())


def test_an_exception_is_failed_with_its_line_and_log(tmp_path):
    (tmp_path / "config.yaml").write_text("verb: sft\n")
    RunDir(tmp_path).update_status(state="RUNNING")
    with pytest.raises(ValueError), failures_recorded(tmp_path, tmp_path / "job.err"):
        raise ValueError("bad value in row 3\nsecond line of detail")
    got = status(tmp_path)
    assert got["state"] == "FAILED"
    assert got["reason"] == "ValueError: bad value in row 3"
    assert got["log"] == str(tmp_path / "job.err")
    line = monitor.status_report(str(tmp_path))  # a local run: the state is the run's own
    assert "run FAILED" in line and "ValueError: bad value in row 3; log: " in line, line


def test_a_user_error_is_its_message_and_a_new_failure_replaces_an_old_one(tmp_path):
    RunDir(tmp_path).update_status(state="FAILED", reason="old")
    with pytest.raises(UserError), failures_recorded(tmp_path):
        raise UserError("model.path: /x has no config.json")
    assert status(tmp_path)["reason"] == "model.path: /x has no config.json"
    with failures_recorded(tmp_path):  # the same work ends well the next time
        pass
    assert status(tmp_path)["state"] == "COMPLETED" and status(tmp_path)["reason"] is None


def test_ctrl_c_and_sigterm_are_interrupted(tmp_path):
    with pytest.raises(KeyboardInterrupt), failures_recorded(tmp_path):
        raise KeyboardInterrupt
    assert status(tmp_path)["state"] == "INTERRUPTED"
    assert "Ctrl-C" in status(tmp_path)["reason"]
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Terminated), failures_recorded(tmp_path):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises here
    assert status(tmp_path)["reason"] == "interrupted by SIGTERM"
    assert signal.getsignal(signal.SIGTERM) == before  # the previous handler is back


def test_an_end_the_work_recorded_itself_is_kept(tmp_path):
    rd = RunDir(tmp_path)
    rd.update_status(state="RUNNING")
    with pytest.raises(SystemExit), failures_recorded(tmp_path):
        rd.update_status(state="REQUEUED")  # SLURM requeue: submitit exits after checkpoint()
        raise SystemExit(-1)
    assert status(tmp_path)["state"] == "REQUEUED"


def test_a_run_never_created_gets_no_folder(tmp_path):
    with pytest.raises(UserError), failures_recorded(tmp_path / "run"):
        raise UserError("refused")
    assert not (tmp_path / "run").exists()


def test_a_full_disk_says_so_and_where_never_torchs_source_file_alone(tmp_path, monkeypatch):
    """torch's writer on a full disk: the real error, from a file that can take no byte."""
    import torch

    target = tmp_path / "checkpoint-3" / "optimizer.pt"
    target.parent.mkdir()
    target.symlink_to("/dev/full")  # every write fails with ENOSPC
    with pytest.raises(RuntimeError) as caught:
        torch.save({"w": torch.zeros(1000)}, str(target))
    assert "inline_container.cc" in str(caught.value)
    free = {"bytes": 0}

    class Usage:
        def __init__(self, path):
            self.free = free["bytes"]

    monkeypatch.setattr(rd_module.shutil, "disk_usage", Usage)
    reason = failure_reason(caught.value, tmp_path)
    assert reason.startswith(f"no space left on device writing under {tmp_path} (0 B free")
    free["bytes"] = 50 * 2**30  # plenty of room: some other write failure, said as such
    reason = failure_reason(caught.value, tmp_path)
    assert "disk full or over quota? (50.0 GiB free there now)" in reason
    full = OSError(errno.ENOSPC, "No space left on device", str(target))
    assert failure_reason(full, tmp_path).startswith(
        f"no space left on device writing under {target}"
    )


def test_a_killed_run_is_not_shown_running(tmp_path):
    """SIGKILL leaves status.json RUNNING: its pid and host tell status that it is gone."""
    (tmp_path / "config.yaml").write_text("verb: sft\n")
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    RunDir(tmp_path).update_status(state="RUNNING", pid=int(gone.stdout), host=socket.gethostname())
    report = monitor.status_report(str(tmp_path))
    assert "run RUNNING" not in report and "run DEAD" in report and "is gone" in report, report
    RunDir(tmp_path).update_status(pid=os.getpid())  # this process runs: RUNNING it is
    assert "run RUNNING" in monitor.status_report(str(tmp_path))
    RunDir(tmp_path).update_status(state="RUNNING")  # every RUNNING names its process
    assert status(tmp_path)["pid"] == os.getpid()


def test_a_relaunch_by_hand_is_a_start_not_a_requeue(tmp_path, capsys):
    """Issue 30, item 10: `status` showed a run started twice by the same command as requeued
    once. A requeue is what a SLURM-requeued task recorded; starts are shown as starts."""
    from vqa_r1.cli.launch import main as launch_main

    (tmp_path / "config.yaml").write_text("verb: sft\n")
    RunDir(tmp_path).update_status(state="COMPLETED", starts=2, global_step=8)
    assert launch_main(["status", str(tmp_path)]) == 0
    line = capsys.readouterr().out
    assert "requeues 0" in line and "starts 2" in line and "run COMPLETED" in line, line
    RunDir(tmp_path).update_status(requeues=1, starts=3)  # one of them a requeue
    assert launch_main(["status", str(tmp_path)]) == 0
    line = capsys.readouterr().out
    assert "requeues 1" in line and "starts 3" in line, line


def test_any_running_state_names_its_process(tmp_path):
    """Every verb that writes RUNNING (training, merge, prompt tuning) goes through
    update_status: a process that wrote it and ended is shown DEAD."""
    (tmp_path / "config.yaml").write_text("verb: merge\n")
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from vqa_r1.run_dir import RunDir\n"
        "RunDir(Path(sys.argv[1])).update_status(state='RUNNING', verb='merge')\n"
    )
    subprocess.run([sys.executable, "-c", script, str(tmp_path)], check=True)
    report = monitor.status_report(str(tmp_path))
    assert "run DEAD" in report, report


def test_a_chain_step_recorded_running_shows_how_its_run_ended(tmp_path):
    """A local pipeline killed with its step: launch.json keeps RUNNING, the run knows better."""
    run = tmp_path / "sft"
    run.mkdir()
    (run / "config.yaml").write_text("verb: sft\n")
    RunDir(run).update_status(state="INTERRUPTED", reason="interrupted by SIGTERM")
    monitor.record_job(run, "1", "local", run / "jobs", "slurm/launch.py pipeline ...")
    steps = [{"name": "sft", "run_dir": str(run), "job_id": "1", "state": "RUNNING"}]
    (tmp_path / "launch.json").write_text(json.dumps({"kind": "pipeline", "steps": steps}))
    report = monitor.status_report(str(tmp_path))
    assert "pipeline STOPPED: step sft ended INTERRUPTED" in report, report


@pytest.mark.parametrize("entry", ["vqa-r1", "slurm/launch.py"])
def test_a_full_disk_is_one_line_on_the_console_and_a_failed_exit(entry, tmp_path, monkeypatch):
    """Issue 30, item 5: `vqa-r1 sft` and the launcher on a full disk print the line status.json
    holds, exit 1, no traceback: torch's own write failure (a checkpoint file that takes no
    byte, /dev/full) and an OSError ENOSPC."""
    import torch
    from cli_helpers import run_in_process

    from vqa_r1.cli import main
    from vqa_r1.cli.launch import main as launch_main
    from vqa_r1.train import runner

    def torch_write(config, *args, **kwargs):
        target = Path(config.output_dir) / "checkpoint-1.pt"
        target.symlink_to("/dev/full")  # every write fails with ENOSPC
        torch.save({"w": torch.zeros(1000)}, str(target))

    def os_write(config, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", f"{config.output_dir}/final/x")

    for name, fake, words in (
        ("torch", torch_write, "is the disk full or over quota?"),
        ("os", os_write, "no space left on device writing under"),
    ):
        monkeypatch.setattr(runner, "train", fake)
        run = tmp_path / f"{entry[:6]}-{name}"
        argv = ["sft", "--model", "tiny-qwen2.5-vl", "--output-dir", str(run)]
        if entry == "vqa-r1":
            out = run_in_process(main, argv)
        else:
            out = run_in_process(launch_main, [*argv, "--executor", "inprocess"])
        errors = [line for line in out.stderr.splitlines() if line.startswith("error: ")]
        assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
        assert len(errors) == 1 and words in errors[0], out.stderr
        assert "--output-dir, then run the same command" in errors[0] or "quota" in errors[0]


def test_in_process_verbs_record_their_failure(tmp_path, monkeypatch):
    """`vqa-r1 prompt-tune` writes status.json RUNNING itself; a failure must not leave it so."""
    from vqa_r1.cli import main
    from vqa_r1.launch import prompt_tuning

    def fails(cfg, run_dir, **kwargs):
        RunDir(Path(run_dir)).update_status(state="RUNNING", verb="prompt-tune")
        raise OSError(errno.ENOSPC, "No space left on device", str(Path(run_dir) / "x.pt"))

    monkeypatch.setattr(prompt_tuning, "run_prompt_tuning", fails)
    with contextlib.suppress(OSError):  # raised, or turned into a one-line error: either way
        assert main(["prompt-tune", "--output-dir", str(tmp_path / "pt")]) != 0
    got = status(tmp_path / "pt")
    assert got["state"] == "FAILED"
    assert got["reason"].startswith(f"no space left on device writing under {tmp_path / 'pt'}")


@pytest.mark.parametrize(("sacct", "run"), [("TIMEOUT", "DEAD"), ("OUT_OF_MEMORY", "DEAD"),
                                            ("RUNNING", "RUNNING"), ("PREEMPTED", "RUNNING")])  # fmt: skip
def test_a_slurm_job_that_ended_is_not_shown_running(tmp_path, monkeypatch, sacct, run):
    """SLURM killed the job (OOM, time limit without requeue) before it could write a word."""
    RunDir(tmp_path).update_status(state="RUNNING", host="a-compute-node")
    entry = monitor.Entry("sft", tmp_path, {"job_id": "42", "executor": "slurm", "log_dir": None})
    rows = {"42": {"State": sacct, "Elapsed": "1:00", "NodeList": "n1", "ExitCode": "0:9",
                   "Start": "2026-01-01T10:00:00"}}  # fmt: skip
    monkeypatch.setattr(monitor, "scontrol_show", lambda job_id: "")
    got = monitor.job_status(entry, rows)
    assert got.state == sacct and got.run_state == run
    assert (f"the job ended {sacct} while status.json said RUNNING" in got.note) == (run == "DEAD")


def test_a_local_job_killed_with_no_word_is_named_so_by_the_launch(tmp_path):
    """Issue 30, item 4: the local pipeline reported a SIGKILLed step as `FAILED: Error stream
    produced:;` (submitit's header line taken for an exception line)."""
    import subprocess
    import sys

    from submitit.core.utils import FailedJobError, UncompletedJobError

    from vqa_r1.launch.executor import failure_reason, job_failure

    no_result = UncompletedJobError(
        "Job 4823 (task: 0) with path /x/4823_0_result.pkl\nhas not produced any output (state: "
        "FINISHED)\nError stream produced:\n----------------------------------------\n"
        " 12%|#2        | 5/40 [00:01<00:07,  4.91it/s]\n"
    )
    assert job_failure(tmp_path, no_result) == (
        "the job ended without a result: killed (SIGKILL, out of memory?); the same command "
        "runs it again"
    )
    # a run that recorded RUNNING and whose process is gone: status's own DEAD line
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    RunDir(tmp_path).update_status(state="RUNNING", pid=int(gone.stdout), started=None)
    assert "is gone but status.json says RUNNING: killed (SIGKILL, out of memory?)" in (
        job_failure(tmp_path, no_result)
    )
    raised = FailedJobError("Job failed\nError stream produced:\nTraceback\nValueError: bad x\n")
    assert failure_reason(raised) == "ValueError: bad x"
