"""Sweeps, pipelines and status/logs/cancel without SLURM: parsing, plans, scripts, sacct text."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_helpers import run_in_process

from vqa_r1.cli.launch import main as launch_main
from vqa_r1.errors import UserError
from vqa_r1.launch import monitor
from vqa_r1.launch.pipeline import parse_steps, split_overrides
from vqa_r1.launch.sweep import (
    array_spec,
    check_conflicts,
    config_differences,
    element_name,
    expand,
    parse_sweeps,
)

REPO = Path(__file__).resolve().parents[1]
LAUNCH = [sys.executable, str(REPO / "slurm" / "launch.py")]
TINY = ["--model", "tiny-qwen2.5-vl", "--cluster", "local-slurm", "--time", "00:05:00"]


# torch.distributed variables another test may have left in this process would make a local job
# wait for a rendezvous that never comes
DISTRIBUTED = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"}


def launch(*args: str, timeout: int = 120):
    """`slurm/launch.py ARGS` as typed, run in this process (tests/cli_helpers.py); its local
    jobs are subprocesses, started without those variables."""
    env = {k: v for k, v in os.environ.items() if k not in DISTRIBUTED}
    return run_in_process(launch_main, [str(a) for a in args], env=env)


# ------------------------------------------------------------------------------- sweeps


def test_sweep_values_expand_to_the_cartesian_product_in_the_given_order():
    keys = parse_sweeps(["train.seed=1,2,3", "lora.r=8, 16"])
    assert keys == {"train.seed": ["1", "2", "3"], "lora.r": ["8", "16"]}
    points = expand(keys)
    assert len(points) == 6
    assert points[0] == {"train.seed": "1", "lora.r": "8"}
    assert points[1] == {"train.seed": "1", "lora.r": "16"}
    assert [element_name(p) for p in points][-1] == "train.seed=3,lora.r=16"
    assert element_name({"data.dataset": "/a/b"}) == "data.dataset=_a_b"
    assert expand({}) == []


@pytest.mark.parametrize(
    "items, message",
    [
        (["train.seed"], "expected key=v1,v2"),
        (["=1,2"], "expected key=v1,v2"),
        (["train.seed="], "empty value"),
        (["train.seed=1,,2"], "empty value"),
        (["train.seed=1,1"], "repeated"),
        (["train.seed=1", "train.seed=2"], "given twice"),
    ],
)
def test_bad_sweeps_are_clear_errors(items, message):
    with pytest.raises(UserError, match=message):
        parse_sweeps(items)


def test_a_key_both_swept_and_set_is_refused():
    with pytest.raises(UserError, match="train.seed: given both"):
        check_conflicts({"train.seed": ["1", "2"]}, ["train.seed=3", "lora.r=4"])
    check_conflicts({"train.seed": ["1"]}, ["lora.r=4"])


def test_array_spec_and_config_differences():
    assert array_spec(3, None) == "0-2%3"
    assert array_spec(5, 2) == "0-4%2"
    configs = [
        {"train": {"seed": 1, "lr": 1.0}, "output_dir": "a"},
        {"train": {"seed": 2, "lr": 1.0}, "output_dir": "b"},
    ]
    assert config_differences(configs) == ["train.seed"]


def test_sweep_dry_run_prints_one_array_script_and_the_element_differences(tmp_path):
    out = launch(
        "sft",
        *TINY,
        "--sweep",
        "train.seed=1,2,3",
        "--sweep",
        "lora.r=4,8",
        "--parallel",
        "2",
        "--set",
        "train.max_steps=3",
        "--dry-run",
        "--output-dir",
        str(tmp_path / "sweep"),
    )
    assert out.returncode == 0, out.stderr
    script = out.stdout
    assert script.startswith("#!/bin/bash")
    assert "#SBATCH --array=0-5%2" in script
    assert f"{tmp_path}/sweep/jobs/%A_%a_0_log.out" in script
    assert "# configs differ in: lora.r, train.seed" in script
    assert f"[5] {tmp_path}/sweep/train.seed=3,lora.r=8: lora.r=8, train.seed=3" in script
    assert not (tmp_path / "sweep").exists()  # a dry run writes nothing


def test_sweep_elements_are_validated_before_anything_is_written(tmp_path):
    out = launch(
        "sft", *TINY, "--sweep", "train.sed=1,2", "--output-dir", str(tmp_path / "s"), "--dry-run"
    )
    assert out.returncode == 2 and "unknown key 'train.sed'" in out.stderr
    out = launch(
        "sft", *TINY, "--sweep", "train.seed=1,x", "--output-dir", str(tmp_path / "s"), "--dry-run"
    )
    assert out.returncode == 2 and "train.seed: expected int" in out.stderr
    out = launch(
        "sft",
        *TINY,
        "--sweep",
        "resources.mem_gb=4,8",
        "--output-dir",
        str(tmp_path / "s"),
        "--dry-run",
    )
    assert out.returncode == 2 and "one array shares one request" in out.stderr


@pytest.mark.slow
def test_local_sweep_runs_elements_one_after_another(tmp_path):
    root = tmp_path / "sweep"
    out = launch(
        "sft",
        *TINY,
        "--executor",
        "local",
        "--sweep",
        "train.seed=1,2",
        "--set",
        "train.max_steps=2",
        "--output-dir",
        str(root),
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "sweep completed: 2 of 2 steps" in out.stdout
    for seed in (1, 2):
        run = root / f"train.seed={seed}"
        assert (run / "final" / "adapter_config.json").exists()
        assert f"seed: {seed}" in (run / "config.yaml").read_text()
        assert json.loads((run / "jobs.json").read_text())["jobs"][0]["executor"] == "local"
    sweep = json.loads((root / "launch.json").read_text())
    assert sweep["kind"] == "sweep" and sweep["keys"] == {"train.seed": ["1", "2"]}
    assert [e["name"] for e in sweep["steps"]] == ["train.seed=1", "train.seed=2"]
    assert [e["state"] for e in sweep["steps"]] == ["COMPLETED", "COMPLETED"]
    status = launch("status", str(root))
    assert status.returncode == 0 and status.stdout.count("COMPLETED") >= 2, status.stdout


# ------------------------------------------------------------------------------- pipelines


def test_pipeline_steps_parse_in_order():
    assert parse_steps("sft,merge,grpo,evaluate") == ["sft", "merge", "grpo", "evaluate"]
    assert parse_steps("sft, grpo,evaluate") == ["sft", "grpo", "evaluate"]
    for text, message in [
        ("sft,train", "unknown step"),
        ("grpo,sft", "in the order"),
        ("sft,sft", "repeated"),
        ("merge,grpo", "merge needs an sft step"),
        ("", "at least one"),
    ]:
        with pytest.raises(UserError, match=message):
            parse_steps(text)


def test_step_prefixed_overrides_apply_to_one_step():
    per_step = split_overrides(["train.max_steps=3", "evaluate:eval.limit=16"], ["sft", "evaluate"])
    assert per_step == {
        "sft": ["train.max_steps=3"],
        "evaluate": ["train.max_steps=3", "eval.limit=16"],
    }
    with pytest.raises(UserError, match="not in --steps"):
        split_overrides(["grpo:train.seed=1"], ["sft"])
    with pytest.raises(UserError, match="not a step"):
        split_overrides(["sfx:train.seed=1"], ["sft"])


def plan(tmp_path: Path, steps: str, *overrides: str):
    """The steps the launcher builds for `pipeline --model tiny-qwen2.5-vl --steps STEPS ...`."""
    from vqa_r1.launch.build import pipeline_graph
    from vqa_r1.launch.request import JobOptions

    job = JobOptions(dry_run=True)
    return pipeline_graph("tiny-qwen2.5-vl", steps, list(overrides), str(tmp_path / "p"), job)


def test_pipeline_plan_wires_merge_into_grpo_and_evaluate(tmp_path):
    graph = plan(tmp_path, "sft,merge,grpo,evaluate", "train.seed=7")
    sft, merge, grpo, evaluate = graph.steps
    root = tmp_path / "p"
    # a line; evaluate reads the merged model as well as GRPO's adapter, and waits for both
    assert [s.after for s in graph.steps] == [(), ("sft",), ("merge",), ("grpo", "merge")]
    assert merge.request.task.adapter == str(root / "sft")
    assert merge.info["settings"]["verb"] == "merge"
    assert grpo.info["settings"]["model.path"] == str(root / "merge" / "merged")
    assert grpo.info["settings"]["init_adapter"] is None  # a fresh LoRA on the merged model
    assert evaluate.info["settings"]["model.path"] == str(root / "merge" / "merged")
    assert evaluate.request.task.adapter == str(root / "grpo")
    assert all(s.info["settings"]["train.seed"] == 7 for s in graph.steps)
    assert merge.request.resources.time == "01:00:00"  # the recipes give a merge an hour


def test_pipeline_without_merge_continues_the_sft_adapter(tmp_path):
    sft, grpo, evaluate = plan(tmp_path, "sft,grpo,evaluate").steps
    assert grpo.info["settings"]["init_adapter"] == str(tmp_path / "p" / "sft" / "final")
    assert grpo.info["settings"]["model.path"] is None
    assert evaluate.request.task.adapter == str(tmp_path / "p" / "grpo")


def test_pipeline_dry_run_chains_the_jobs_with_afterok(tmp_path):
    out = launch(
        "pipeline",
        *TINY,
        "--set",
        "train.max_steps=3",
        "--dry-run",
        "--output-dir",
        str(tmp_path / "p"),
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "# pipeline sft -> merge -> grpo -> evaluate" in text
    assert text.count("#!/bin/bash") == 4
    assert text.count("#SBATCH --kill-on-invalid-dep=yes") == 3
    assert "#SBATCH --dependency='afterok:<job id of merge>'" in text
    assert "# vqa-r1 merge --model tiny-qwen2.5-vl" in text
    assert not (tmp_path / "p").exists()


def test_pipeline_checks_everything_but_the_paths_earlier_steps_produce(tmp_path):
    out = launch("pipeline", *TINY, "--set", "grpo:train.nope=1", "--dry-run")
    assert out.returncode == 2 and "unknown key 'train.nope'" in out.stderr
    out = launch("pipeline", *TINY, "--dataset", str(tmp_path / "missing"), "--dry-run")
    assert out.returncode == 2 and "data.dataset" in out.stderr
    out = launch("pipeline", *TINY, "--steps", "evaluate,sft", "--dry-run")
    assert out.returncode == 2 and "in the order" in out.stderr


@pytest.mark.slow
def test_local_pipeline_stops_at_the_first_failure(tmp_path):
    empty = tmp_path / "not-a-model"
    empty.mkdir()  # exists (the login node cannot tell), but the sft job cannot load a model
    root = tmp_path / "p"
    out = launch(
        "pipeline",
        *TINY,
        "--executor",
        "local",
        "--steps",
        "sft,grpo,evaluate",
        "--set",
        f"sft:model.path={empty}",
        "--output-dir",
        str(root),
        timeout=300,
    )
    assert out.returncode == 1, out.stdout + out.stderr
    assert "pipeline stopped: step sft failed" in out.stdout
    assert "sft FAILED: " in out.stdout and "log: " in out.stdout
    assert "not run: grpo, evaluate" in out.stdout
    steps = json.loads((root / "launch.json").read_text())["steps"]
    assert [s["state"] for s in steps] == ["FAILED", "NOT RUN", "NOT RUN"]
    status = launch("status", str(root))
    assert "pipeline STOPPED: step sft ended FAILED" in status.stdout, status.stdout


def read_steps(root: Path) -> dict[str, str | None]:
    """Step name -> state, as the launch recorded them in launch.json (empty until written)."""
    try:
        return {
            s["name"]: s["state"] for s in json.loads((root / "launch.json").read_text())["steps"]
        }
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def ctrl_c_when(args: list[str], ready) -> tuple[int, str, str]:
    """`slurm/launch.py ARGS` started as in a terminal (its own process group), one Ctrl-C to
    that group (the launcher and whatever shares its group) once ``ready()``: exit status,
    stdout, stderr."""
    env = {k: v for k, v in os.environ.items() if k not in DISTRIBUTED}
    first = subprocess.Popen(
        [*LAUNCH, *args], cwd=REPO, env=env, text=True, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    deadline = time.monotonic() + 240
    while not ready():
        assert first.poll() is None, first.communicate()
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
    os.killpg(first.pid, signal.SIGINT)
    out, err = first.communicate(timeout=120)
    return first.returncode, out, err


@pytest.mark.slow
def test_a_local_pipeline_relaunched_after_its_first_step_skips_it(tmp_path):
    """Ctrl-C while evaluate runs, after sft finished: the same command again runs evaluate only
    (sft's job record, adapter and status untouched) and the pipeline completes."""
    root = tmp_path / "p"
    args = [
        "pipeline", *TINY, "--executor", "local", "--steps", "sft,evaluate",
        "--set", "train.max_steps=2", "--set", "evaluate:eval.limit=64", "--output-dir", str(root),
    ]  # fmt: skip
    code, out, err = ctrl_c_when(
        args, lambda: read_steps(root) == {"sft": "COMPLETED", "evaluate": "RUNNING"}
    )
    assert code == 130, out + err
    assert read_steps(root) == {"sft": "COMPLETED", "evaluate": "INTERRUPTED"}
    adapter = root / "sft" / "final" / "adapter_model.safetensors"
    sft_record = (root / "sft" / "jobs.json").read_text(), adapter.stat().st_mtime_ns

    again = launch(*args, timeout=300)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert "[1/1] evaluate: local job" in again.stdout and "sft: local job" not in again.stdout
    assert read_steps(root) == {"sft": "DONE EARLIER", "evaluate": "COMPLETED"}
    assert ((root / "sft" / "jobs.json").read_text(), adapter.stat().st_mtime_ns) == sft_record
    scores = json.loads((root / "evaluate" / "scores.json").read_text())
    assert scores["n"] == 64 and scores["adapter"] == str(root / "sft" / "final")
    assert "pipeline COMPLETED" in launch("status", str(root)).stdout


def last_logged_step(run: Path) -> int:
    try:
        return json.loads((run / "metrics.jsonl").read_text().splitlines()[-1]).get("step", 0)
    except (FileNotFoundError, IndexError, json.JSONDecodeError):
        return 0


@pytest.mark.slow
def test_one_ctrl_c_through_the_launcher_checkpoints_at_the_next_step_and_resumes(tmp_path):
    """A local job through the launcher, one Ctrl-C in the terminal at step ~22 with save_steps
    20: the job checkpoints where it stopped (before, submitit's controller sent it a second
    SIGINT and it stopped with checkpoint-20 the newest), the launcher says so in two lines
    without a traceback and exits 130, and the same command resumes from that checkpoint."""
    run = tmp_path / "sft"
    args = [
        "sft", *TINY, "--executor", "local", "--set", "train.max_steps=60",
        "--set", "train.save_steps=20", "--set", "train.logging_steps=1", "--output-dir", str(run),
    ]  # fmt: skip
    code, out, err = ctrl_c_when(args, lambda: last_logged_step(run) >= 22)
    assert code == 130, out + err
    assert "Traceback" not in out + err and "KeyboardInterrupt" not in out + err, err
    status = json.loads((run / "status.json").read_text())
    stopped = status["global_step"]
    assert status["state"] == "INTERRUPTED" and 22 <= stopped < 60, status
    newest = max(int(c.name.split("-")[1]) for c in (run / "checkpoints").glob("checkpoint-*"))
    assert newest == stopped, (newest, status)
    assert err.splitlines() == [
        "Ctrl-C: sft stops at its next step boundary with a checkpoint; waiting for it "
        "(Ctrl-C again: stop now, without a checkpoint)",
        f"sft interrupted: SIGINT at step {stopped}: checkpoint-{stopped} saved; the same command "
        f"resumes (python slurm/launch.py status {run})",
    ]
    job_log = "".join(p.read_text() for p in (run / "jobs").glob("*_log.err"))
    assert "SIGINT again" not in job_log, job_log[-2000:]

    again = launch(*args, timeout=300)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "COMPLETED" and status["global_step"] == 60, status
    assert status["resumed_from"].endswith(f"checkpoint-{stopped}"), status


def test_a_pipeline_on_a_folder_that_is_no_dataset_is_refused_before_it_runs(tmp_path):
    empty = tmp_path / "not-a-dataset"
    empty.mkdir()
    root = tmp_path / "p"
    out = launch(
        "pipeline", *TINY, "--executor", "local", "--steps", "sft,evaluate",
        "--dataset", str(empty), "--output-dir", str(root),
    )  # fmt: skip
    assert out.returncode == 2, out.stdout + out.stderr
    assert f"{empty}: holds no dataset this suite can read" in out.stderr
    assert not (root / "launch.json").exists() and not root.exists()


# ------------------------------------------------------------------------------- monitor

SACCT = """\
41_0|COMPLETED|00:00:31|vm|0:0|2026-01-01T10:00:00
41_[1-2%1]|PENDING|00:00:00|None assigned|0:0|Unknown
42|FAILED|00:00:12|vm|1:0|2026-01-01T10:00:05
43|CANCELLED by 0|00:00:00|None assigned|0:0|None
"""


def test_sacct_parsing_and_lookup_of_array_elements():
    rows = monitor.parse_sacct(SACCT + "garbage line\n")
    assert rows["42"]["State"] == "FAILED" and rows["42"]["ExitCode"] == "1:0"
    assert rows["43"]["State"] == "CANCELLED" and rows["43"]["Detail"] == "CANCELLED by 0"
    assert monitor.lookup(rows, "41_0")["State"] == "COMPLETED"
    assert monitor.lookup(rows, "41_2")["State"] == "PENDING"  # inside the pending range
    assert monitor.lookup(rows, "41_3") is None and monitor.lookup(rows, "44") is None
    command = monitor.sacct_command(["41_0", "41_1", "42"])
    assert command[:3] == ["sacct", "-j", "41,42"] and "-P" in command and "-X" in command


def test_restart_count_and_fields_from_scontrol_text():
    text = (
        "JobId=42 JobName=x\n   Restarts=3 BatchFlag=1 Reboot=0\n   StdOut=/r/jobs/42_0_log.out\n"
    )
    assert monitor.parse_restarts(text) == 3
    assert monitor.parse_restarts("") is None
    assert monitor.parse_scontrol_field(text, "StdOut") == "/r/jobs/42_0_log.out"


def write_run(run: Path, job_id: str, status: dict | None = None) -> None:
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("verb: sft\n")
    monitor.record_job(run, job_id, "slurm", run / "jobs", "slurm/launch.py sft")
    if status:
        (run / "status.json").write_text(json.dumps(status))


def test_a_stopped_chain_names_the_failed_step_and_the_steps_that_never_ran(tmp_path, monkeypatch):
    steps = []
    after: list[str] = []
    for name, job_id in (("sft", "42"), ("grpo", "43"), ("evaluate", "44")):
        write_run(
            tmp_path / name, job_id, {"state": "RUNNING", "starts": 1} if name == "sft" else None
        )
        steps.append(
            {"name": name, "run_dir": str(tmp_path / name), "job_id": job_id, "after": after}
        )
        after = [name]
    (tmp_path / "launch.json").write_text(json.dumps({"kind": "pipeline", "steps": steps}))
    sacct = SACCT + "44|CANCELLED by 0|00:00:00|None assigned|0:0|None\n"
    monkeypatch.setattr(monitor, "query_sacct", lambda ids: monitor.parse_sacct(sacct))
    monkeypatch.setattr(monitor, "scontrol_show", lambda job_id: "")
    report = monitor.status_report(str(tmp_path))
    assert (
        "pipeline STOPPED: step sft ended FAILED (exit 1:0); later steps not run: grpo, evaluate"
        in report
    )
    assert report.count("never ran: step sft ended FAILED") == 2
    data = json.loads(monitor.status_report(str(tmp_path), as_json=True))
    assert [j["state"] for j in data["jobs"]] == ["FAILED", "CANCELLED", "CANCELLED"]
    assert data["jobs"][0]["requeues"] == 0  # from status.json: one start, no requeue
    message = monitor.cancel(str(tmp_path))
    assert message.startswith("nothing to cancel") and "sft (job 42, FAILED)" in message


def test_logs_tail_the_submitit_log_of_the_recorded_job(tmp_path):
    run = tmp_path / "run"
    write_run(run, "7_2")
    (run / "jobs").mkdir()
    (run / "jobs" / "7_2_0_log.out").write_text("".join(f"line {i}\n" for i in range(100)))
    (run / "jobs" / "7_2_0_log.err").write_text("Traceback\nValueError: boom\n")
    out = monitor.logs_report(str(run), lines=3)
    assert out.endswith("line 97\nline 98\nline 99") and "7_2_0_log.out" in out
    assert "ValueError: boom" in monitor.logs_report(str(run), lines=1, stderr=True)


def test_unknown_targets_are_clear_errors(tmp_path, monkeypatch):
    with pytest.raises(UserError, match="not a launch folder or run directory"):
        monitor.resolve_target(str(tmp_path))
    with pytest.raises(UserError, match="no such run directory, and not a job id"):
        monitor.resolve_target(str(tmp_path / "nothing-here"))
    monkeypatch.setattr(monitor, "query_sacct", lambda ids: {})
    with pytest.raises(UserError, match="unknown job id 999999: sacct has no record of it"):
        monitor.resolve_target("999999")
    out = launch("status", str(tmp_path))
    assert out.returncode == 2 and "not a launch folder or run directory" in out.stderr


def test_no_wait_on_a_local_pipeline_says_it_runs_the_steps_and_waits(tmp_path, monkeypatch):
    """Issue 30, item 9: `--no-wait` on a local pipeline blocked to the end without a word (a
    local launch of several steps runs them from the command itself). Jobs are stand-ins here:
    what is proven is the note, before the first step starts."""
    from vqa_r1.launch import executor

    started = []

    class Job:
        job_id = str(os.getpid())

    def submit(request, kind, log_dir, waits=None):
        started.append(request.job_name)
        Path(log_dir).mkdir(parents=True, exist_ok=True)
        return Job()

    monkeypatch.setattr(executor, "submit", submit)
    monkeypatch.setattr(executor, "wait_through_ctrl_c", lambda name, job, *_: ("done", {}))
    root = tmp_path / "p"
    out = launch("pipeline", *TINY, "--executor", "local", "--steps", "sft,evaluate",
                 "--no-wait", "--output-dir", root)  # fmt: skip
    assert out.returncode == 0, out.stderr
    note = [line for line in out.stderr.splitlines() if "--no-wait" in line]
    assert note == [
        "note: --no-wait: a local pipeline runs its steps one after another from this command, "
        "which waits for them (to leave it running: nohup ... &, or a SLURM cluster, where the "
        "queue chains them)"
    ], out.stderr
    assert len(started) == 2 and "pipeline completed" in out.stdout


class StandInJob:
    """A local job that runs until the launcher passes a Ctrl-C on to it (``interrupt_local``),
    then ends INTERRUPTED as a training does; or, with ``runs_for`` polls, COMPLETED."""

    def __init__(self, runs_for: int | None = None) -> None:
        self.job_id = str(os.getpid())
        self.interrupted = 0
        self.polls = 0
        self.runs_for = runs_for

    def done(self) -> bool:
        self.polls += 1
        return bool(self.interrupted) or (self.runs_for is not None and self.polls > self.runs_for)

    def result(self) -> dict:
        if self.interrupted:
            return {"state": "INTERRUPTED", "reason": "Ctrl-C: checkpoint-3 saved"}
        return {"state": "COMPLETED"}


def ctrl_c_in_process(monkeypatch, tmp_path, jobs: list[StandInJob], when) -> tuple[object, Path]:
    """A local pipeline (sft, evaluate) of stand-in jobs, with one Ctrl-C (a real SIGINT to this
    process) sent from inside launch.json's writer once ``when(steps)`` is true of the states
    being written: the instants between starting a job and waiting for it, or between a step's
    end and the next step."""
    from vqa_r1.launch import executor

    queue = list(jobs)

    def submit(request, kind, log_dir, waits=None):
        Path(log_dir).mkdir(parents=True, exist_ok=True)
        return queue.pop(0)

    def interrupt(pid):
        started = [j for j in jobs if j not in queue]
        started[-1].interrupted += 1
        return True

    real_write_state = executor.write_state
    sent = []

    def write_state(graph, runs, *args, **kwargs):
        real_write_state(graph, runs, *args, **kwargs)
        if not sent and when({name: run.state for name, run in runs.items()}):
            sent.append(True)
            signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(executor, "submit", submit)
    monkeypatch.setattr(executor, "interrupt_local", interrupt)
    monkeypatch.setattr(executor, "write_state", write_state)
    root = tmp_path / "p"
    out = launch("pipeline", *TINY, "--executor", "local", "--steps", "sft,evaluate",
                 "--output-dir", root)  # fmt: skip
    assert sent, "the Ctrl-C was never sent"
    return out, root


def test_ctrl_c_between_starting_a_job_and_waiting_for_it_reaches_the_job(tmp_path, monkeypatch):
    """CI: a Ctrl-C 50 ms after launch.json said evaluate RUNNING raised KeyboardInterrupt
    before the launcher waited: exit 130, the job left running out of reach, launch.json saying
    RUNNING for good. Now the Ctrl-C is passed on to the job once the launcher waits, and the
    step is recorded INTERRUPTED with the job's own words."""
    sft, evaluate = StandInJob(runs_for=1), StandInJob()
    out, root = ctrl_c_in_process(
        monkeypatch, tmp_path, [sft, evaluate], lambda steps: steps["evaluate"] == "RUNNING"
    )
    assert out.returncode == 130, out.stdout + out.stderr
    assert evaluate.interrupted == 1 and sft.interrupted == 0
    assert read_steps(root) == {"sft": "COMPLETED", "evaluate": "INTERRUPTED"}
    assert "Ctrl-C: evaluate stops at its next step boundary with a checkpoint" in out.stderr
    assert "evaluate interrupted: Ctrl-C: checkpoint-3 saved" in out.stderr
    assert "Traceback" not in out.stderr


def test_ctrl_c_while_a_finished_step_is_recorded_stops_before_the_next(tmp_path, monkeypatch):
    """A Ctrl-C as sft's end is being recorded: sft stays COMPLETED, evaluate is not started,
    and the launcher says where it stopped (before, a KeyboardInterrupt out of the recording)."""
    sft, evaluate = StandInJob(runs_for=1), StandInJob(runs_for=1)
    out, root = ctrl_c_in_process(
        monkeypatch, tmp_path, [sft, evaluate], lambda steps: steps["sft"] == "COMPLETED"
    )
    assert out.returncode == 130, out.stdout + out.stderr
    assert evaluate.polls == 0 and sft.interrupted == 0
    assert read_steps(root) == {"sft": "COMPLETED", "evaluate": "NOT RUN"}
    assert f"Ctrl-C: stopped before evaluate (python slurm/launch.py status {root})" in out.stderr
    assert "Traceback" not in out.stderr
