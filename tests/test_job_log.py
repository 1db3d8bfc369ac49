"""What a person reads of a running job: one line per logged step in its log (train/step_line.py),
progress in `status`, `logs --follow` (issue 34, items 1 and 2)."""

from __future__ import annotations

import json
import os
import re
import time

import pytest
from cli_helpers import run_in_process

from vqa_r1.cli.launch import main as launch_main
from vqa_r1.clock import duration
from vqa_r1.launch import monitor
from vqa_r1.train.step_line import Progress, format_line, more_jobs

TINY = ["--model", "tiny-qwen2.5-vl-pretrained", "--executor", "local"]
GRPO_LOG = {  # one step of TRL 1.16's GRPO log, as metrics.jsonl holds it
    "loss": 0.0225, "grad_norm": 0.022, "learning_rate": 3.3e-4, "num_tokens": 4176.0,
    "completions/mean_length": 55.0, "completions/clipped_ratio": 0.0625,
    "rewards/accuracy_reward/mean": 1.0, "rewards/accuracy_reward/std": 0.0,
    "rewards/format_reward/mean": 0.9375, "rewards/format_reward/std": 0.25,
    "reward": 1.46875, "reward_std": 0.125, "kl": 0.0012, "entropy": 0.0151,
}  # fmt: skip


def launch(*args):
    return run_in_process(launch_main, [str(a) for a in args])


def test_a_grpo_step_reads_as_one_line_with_every_field():
    progress = Progress(step=12, max_steps=60, seconds_per_step=2.5, left_s=120.0, more_jobs=1,
                        reward=1.46875, reward_std=0.125, health="ok", updated=0.0)  # fmt: skip
    assert format_line("grpo", progress, GRPO_LOG) == (
        "grpo step 12/60 (20%) | reward 1.47±0.12 (accuracy 1.00±0.00, format 0.94±0.25) | "
        "loss 0.0225 | kl 0.0012 | entropy 0.015 | len 55.0 | clipped 6% | 2.5 s/step | "
        "left 0:02:00 (+1 requeued job) | health ok"
    )
    sft = {"loss": 1.25, "mean_token_accuracy": 0.8125, "entropy": 1.5}
    unknown = Progress(3, 0, None, None, None, None, None, "truncation", 0.0)
    assert format_line("sft", unknown, sft) == (
        "sft step 3/? | loss 1.25 | token acc 0.812 | entropy 1.500 | left ? | health truncation"
    )
    assert (duration(3725), duration(90061), duration(None)) == ("1:02:05", "1d 01:01:01", "?")


def test_an_evaluation_off_a_terminal_logs_a_line_per_batch(capsys):
    from vqa_r1.eval.evaluate import _progress

    advance = _progress(24, "evaluate m", True)  # pytest's stderr is not a terminal
    for n in (8, 8, 8):  # the first call: what an earlier attempt did (here 8), not timed
        advance(n)
    out = capsys.readouterr().out.splitlines()
    assert [line.split(" | ")[0] for line in out] == [
        "evaluate m: 16/24 items (67%)", "evaluate m: 24/24 items (100%)"
    ]  # fmt: skip
    assert all(re.search(r"\| [\d.e+]+ items/s \| left \d+:\d\d:\d\d$", line) for line in out)


def test_the_requeued_jobs_still_needed_follow_slurms_job_times(monkeypatch):
    """A 12-hour job 10 hours in (2 h left): 5 h of work needs 1 more job, 15 h needs 2."""
    monkeypatch.setenv("SLURM_JOB_START_TIME", "0")
    monkeypatch.setenv("SLURM_JOB_END_TIME", str(12 * 3600))
    now = 10 * 3600
    assert more_jobs(3600, now=now) == 0
    assert more_jobs(5 * 3600, now=now) == 1 and more_jobs(15 * 3600, now=now) == 2
    monkeypatch.delenv("SLURM_JOB_END_TIME")
    assert more_jobs(5 * 3600, now=now) is None


def test_status_shows_the_progress_of_a_running_run_and_json_has_the_same_fields(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    progress = {"step": 7, "max_steps": 40, "seconds_per_step": 1.5, "left_s": 49.5,
                "more_jobs": 0, "reward": 0.75, "reward_std": 0.25, "health": "no_signal",
                "updated": time.time()}  # fmt: skip
    (run / "status.json").write_text(json.dumps({"state": "RUNNING", "global_step": 7,
                                                 "progress": progress}))  # fmt: skip
    out = launch("status", run)
    assert out.returncode == 0, out.stderr
    assert "step 7/40  left 0:00:50  reward 0.75  health no_signal" in out.stdout, out.stdout
    as_json = json.loads(launch("status", run, "--json").stdout)
    assert as_json["jobs"][0]["progress"] == progress
    # a run that ended keeps step/max, without the time left
    (run / "status.json").write_text(json.dumps({"state": "COMPLETED", "global_step": 40,
                                                 "progress": {**progress, "step": 40}}))  # fmt: skip
    out = launch("status", run).stdout
    assert "step 40/40" in out and "left" not in out


@pytest.mark.slow
def test_a_local_grpo_job_logs_one_line_per_step_and_status_shows_its_progress(tmp_path):
    """Issue 34's acceptance: a tiny GRPO job through `slurm/launch.py --executor local`: its log
    has exactly one line per logged step with the fields, no carriage return and no TRL dict;
    `status` shows step/max and time left while it runs; `logs --follow` ends with the job."""
    run = tmp_path / "grpo"
    steps = 16
    args = ["grpo", *TINY, "--set", f"train.max_steps={steps}", "--set", "train.logging_steps=1",
            "--set", "train.save_steps=100", "--output-dir", run, "--no-wait"]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    started = run_in_process(launch_main, [str(a) for a in args], env=env)
    assert started.returncode == 0, started.stderr
    seen = None
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        status = launch("status", run).stdout
        if re.search(rf"step (\d+)/{steps}  left \d+:\d\d:\d\d  reward [\d.]+  health ok", status):
            seen = status
            break
        if "run COMPLETED" in status or "FAILED" in status:
            break
        time.sleep(0.2)
    assert seen, f"status never showed the progress while the job ran:\n{status}"
    followed: list[str] = []
    monitor.follow_logs(str(run), lines=0, poll_s=0.2, write=followed.append)
    final = json.loads((run / "status.json").read_text())
    assert final["state"] == "COMPLETED" and final["progress"]["step"] == steps

    record = monitor.read_jobs(run)[-1]
    out, err = monitor.log_path(record).read_text(), monitor.log_path(record, True).read_text()
    lines = [line for line in out.splitlines() if line.startswith("grpo step ")]
    assert [int(re.match(r"grpo step (\d+)/", line)[1]) for line in lines] == list(
        range(1, steps + 1)
    ), out
    for line in lines:
        for field in ("reward ", "(accuracy ", "format ", "entropy ", "len ", "clipped ",
                      " s/step", "left ", "health ok"):  # fmt: skip
            assert field in line, (field, line)
    assert "\r" not in out + err and "{'loss'" not in out + err and "'reward':" not in out
    # `logs --follow` printed the log's lines from its start on (lines=0), then ended with the job
    shown = [ln for chunk in followed for ln in chunk.splitlines() if ln.startswith("grpo step ")]
    assert shown == lines


def test_the_launcher_off_a_terminal_turns_the_libraries_bars_off(capsys):
    """A launch whose output goes to a file (nohup, a batch script) made its datasets at
    submission with `datasets`' progress bars in the file ("Saving the dataset (0/1 shards) ..."
    once per split); the launcher now turns them off as every verb does."""
    import datasets

    from vqa_r1.cli.launch import main as launch_main

    before = os.environ.pop("HF_DATASETS_DISABLE_PROGRESS_BARS", None)
    datasets.enable_progress_bars()
    try:
        assert launch_main(["sft", "--model", "tiny-qwen2.5-vl-pretrained", "--dry-run"]) == 0
        assert not datasets.is_progress_bar_enabled()
        assert os.environ["HF_DATASETS_DISABLE_PROGRESS_BARS"] == "1"
    finally:
        os.environ.pop("HF_DATASETS_DISABLE_PROGRESS_BARS", None)
        if before is not None:
            os.environ["HF_DATASETS_DISABLE_PROGRESS_BARS"] = before
