"""The fault script (issue 30): the writing verbs and the launcher met as a user meets them.

Four faults: a refused command, then the corrected one into the same folder; ``kill -9``, then
`status`, then the same command; one Ctrl-C; a full filesystem (a small tmpfs where this test may
mount one, else a fault hook that makes writes under the folder raise ENOSPC). Each asserts: no
traceback on the console, one line naming the cause and what to do, `status` agreeing with the
processes, and the user's files (``notes.txt`` beside the output folder) unchanged.

A refusal is a bad value of each verb's own; the corrected commands are the cheapest real runs
(one training step, two evaluated items). Ctrl-C through `slurm/launch.py --executor local` is
tests/test_sweep_pipeline.py's ``test_one_ctrl_c_through_the_launcher_...``.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_helpers import run_in_process

from vqa_r1 import claims
from vqa_r1.cli import main as vqa_main
from vqa_r1.cli.launch import main as launch_main

REPO = Path(__file__).resolve().parents[1]
TINY = ["--model", "tiny-qwen2.5-vl"]
ONE_STEP = ["--set", "train.max_steps=1", "--set", "train.save_steps=1",
            "--set", "train.per_device_train_batch_size=2", "--set", "data.num_samples=4"]  # fmt: skip
GRPO = [*ONE_STEP, "--set", "train.num_generations=2", "--set", "train.max_completion_length=8",
        "--set", "train.reward_funcs=[format]"]  # fmt: skip
EVAL = ["--limit", "2", "--batch-size", "2", "--set", "eval.max_new_tokens=4"]
PROMPT_TUNE = ["--model", "tiny-qwen2.5-vl-pretrained", "--mode", "answer",
               "--set", "data.synthetic_train=64", "--set", "eval.limit=4",
               "--set", "train.per_device_train_batch_size=4", "--set", "train.max_steps=1",
               "--set", "train.save_steps=1"]  # fmt: skip
PRETRAIN = ["--family", "qwen2.5-vl",
            *[x for s in ("max_steps=1", "examples=8", "save_steps=1", "eval_examples=1",
                          "hidden=32", "layers=1", "per_device_train_batch_size=2")
              for x in ("--set", s)]]  # fmt: skip
GEN = ["--train", "4", "--validation", "2", "--test", "2"]
DISTRIBUTED = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"}
NOTES = "a week of notes\n"


def user_folder(tmp_path: Path) -> Path:
    """A folder of the user's, holding a file the suite did not write; outputs go inside it."""
    mine = tmp_path / "mine"
    mine.mkdir(exist_ok=True)
    (mine / "notes.txt").write_text(NOTES)
    return mine


def run(entry: str, argv: list[str]):
    main = vqa_main if entry == "vqa-r1" else launch_main
    env = {k: v for k, v in os.environ.items() if k not in DISTRIBUTED}
    return run_in_process(main, [str(a) for a in argv], env=env)


def one_error_line(stderr: str) -> str:
    """The one line a failed command printed (stderr may carry progress bars and log lines)."""
    assert "Traceback" not in stderr, stderr[-3000:]
    # a progress bar the failure cut short leaves no newline before the line
    errors = re.findall(r"error: [^\r\n]*", stderr)
    assert len(errors) == 1, stderr[-3000:]
    return errors[0]


def responses(tmp_path: Path, n: int = 4) -> Path:
    rows = [{"question": f"The cat {i} is left of the dog.", "true_response": " True ",
             "predicted_response": "The cat sits left of the dog. Answer: True"}
            for i in range(n)]  # fmt: skip
    path = tmp_path / "generated_responses.json"
    path.write_text(json.dumps(rows))
    return path


def complete(out: Path) -> bool:
    """The command's output is complete: its folder, or every step of a launch of several (a
    judge's: the checks file it names)."""
    if out.suffix == ".json":
        return out.is_file() and bool(json.loads(out.read_text()))
    try:
        state = json.loads((out / "launch.json").read_text())
    except FileNotFoundError:
        return claims.is_complete(out)
    steps = [Path(s["run_dir"]) for s in state["steps"]]
    return len(steps) > 1 and all(claims.is_complete(d) for d in steps) or claims.is_complete(out)


def status_of(folder: Path) -> str:
    out = run("launch", ["status", str(folder)])
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    return out.stdout


# ----------------------------------------------------------------- refused, then corrected

# (id, entry, the command's words, the refused addition, the corrected addition, words of the
# refusal, the output flag)
REFUSALS = [
    ("sft", "vqa-r1", ["sft", *TINY, *ONE_STEP], ["--set", "train.learning_rate=0"], [],
     "train.learning_rate", "--output-dir"),
    ("grpo", "vqa-r1", ["grpo", *TINY, *GRPO], ["--set", "train.reward_weights=[1,2]"], [],
     "train.reward_weights", "--output-dir"),
    ("evaluate", "vqa-r1", ["evaluate", *TINY, *EVAL], ["--dataset", "no-such-folder"], [],
     "data.dataset", "--output-dir"),
    ("prompt-tune", "vqa-r1", ["prompt-tune", *PROMPT_TUNE], ["--set", "train.max_step=1"], [],
     "train.max_step", "--output-dir"),
    ("pretrain", "vqa-r1", ["pretrain", *PRETRAIN], ["--set", "max_step=1"], [],
     "max_step", "--out"),
    ("data-generate", "vqa-r1", ["data", "generate", *GEN], ["--min-objects", "0"], [],
     "--min-objects", "--out"),
    ("data-bias", "vqa-r1", ["data", "bias", "--kind", "text"], ["--target", "0.2"],
     ["--target", "0.7"], "cannot be reached", "--out"),
    ("data-counting", "vqa-r1", ["data", "counting", *GEN, "--test-b", "2"], ["--train", "-1"],
     [], "--train -1", "--out"),
    ("data-cryptogram", "vqa-r1", ["data", "cryptogram", *GEN], ["--word-lengths", "3"], [],
     "--word-lengths", "--out"),
    ("judge", "vqa-r1", ["judge", "run", "--backend", "heuristic", "--responses", "RESPONSES"],
     ["--limit", "0"], ["--limit", "2"], "--limit", "--out"),
    ("launch-sft", "launch", ["sft", *TINY, *ONE_STEP, "--executor", "inprocess"],
     ["--set", "train.learning_rate=0"], [], "train.learning_rate", "--output-dir"),
    ("launch-pipeline", "launch",
     ["pipeline", *TINY, *ONE_STEP, "--steps", "sft,evaluate", "--executor", "inprocess",
      "--set", "evaluate:eval.limit=2", "--set", "evaluate:eval.max_new_tokens=4"],
     ["--set", "sft:train.learning_rate=0"], [], "train.learning_rate", "--output-dir"),
]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(
    ("entry", "argv", "bad", "good", "words", "flag"),
    [pytest.param(*case[1:], id=case[0]) for case in REFUSALS],
)
def test_a_refused_command_writes_nothing_and_the_corrected_one_runs_there(
    tmp_path, entry, argv, bad, good, words, flag
):
    mine = user_folder(tmp_path)
    out = mine / "out"
    if "RESPONSES" in argv:  # a judge reads an evaluation's responses: a small file of them
        argv = [f"m={responses(tmp_path)}" if a == "RESPONSES" else a for a in argv]
        out = mine / "checks.json"
    refused = run(entry, [*argv, *bad, flag, str(out)])
    line = one_error_line(refused.stderr)
    assert refused.returncode == 2 and words in line, refused.stderr
    assert not out.exists(), sorted(p.name for p in mine.iterdir())
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]

    corrected = run(entry, [*argv, *good, flag, str(out)])
    assert corrected.returncode == 0, corrected.stderr[-3000:]
    assert "Traceback" not in corrected.stderr
    assert complete(out), sorted(p.name for p in out.iterdir())
    assert (mine / "notes.txt").read_text() == NOTES


# ----------------------------------------------------------------- kill -9, status, same command


def start(argv: list[str]) -> subprocess.Popen:
    """A command as a user starts it in a terminal: its own process group (the terminal's)."""
    env = {k: v for k, v in os.environ.items() if k not in DISTRIBUTED}
    return subprocess.Popen(
        argv, cwd=REPO, env=env, text=True, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip


def logged_step(run_dir: Path) -> int:
    """The last step a run logged; a pretraining (which logs none to a file while it runs): its
    newest checkpoint."""
    saved = [int(c.name.split("-")[1]) for c in (run_dir / "work" / "checkpoints").glob("ch*-*")]
    if saved:
        return max(saved) + 2
    try:
        return json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1]).get("step", 0)
    except (FileNotFoundError, IndexError, json.JSONDecodeError):
        return 0


def wait_for(what, process: subprocess.Popen, seconds: float = 240) -> None:
    deadline = time.monotonic() + seconds
    while not what():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


VQA = [sys.executable, "-m", "vqa_r1"]
LAUNCH = [sys.executable, str(REPO / "slurm" / "launch.py")]
TRAIN_40 = ["--set", "train.max_steps=40", "--set", "train.save_steps=5",
            "--set", "train.logging_steps=1"]  # fmt: skip
GRPO_40 = ["--set", "train.max_steps=40", "--set", "train.save_steps=5", "--set",
           "train.logging_steps=1", "--set", "train.num_generations=2", "--set",
           "train.max_completion_length=8", "--set", "train.reward_funcs=[format]"]  # fmt: skip
PRETRAIN_40 = ["--family", "qwen2.5-vl",
               *[x for s in ("max_steps=40", "examples=64", "save_steps=5", "eval_examples=1",
                             "hidden=32", "layers=1", "per_device_train_batch_size=2",
                             "logging_steps=1") for x in ("--set", s)]]  # fmt: skip


# commands a fault stops half-way: (words, output flag, what shows it is under way)
LONG = {
    "sft": (["sft", *TINY, *TRAIN_40], "--output-dir", "training"),
    "grpo": (["grpo", *TINY, *GRPO_40], "--output-dir", "training"),
    "pretrain": (["pretrain", *PRETRAIN_40], "--out", "training"),
    "evaluate": (["evaluate", *TINY, "--limit", "400", "--batch-size", "4"], "--output-dir",
                 "batches"),
    "data-generate": (["data", "generate", "--train", "3000", "--validation", "2", "--test", "2"],
                      "--out", "claimed"),
}  # fmt: skip


def under_way(kind: str, out: Path, step: int):
    """When a long command is far enough to be stopped: a training at ``step``, an evaluation
    with a batch written, a data build with its folder claimed."""
    return {
        "training": lambda: logged_step(out) >= step,
        "batches": lambda: (out / "batches.jsonl").exists(),
        "claimed": lambda: (out / claims.MARKER).exists() and (out / claims.LOCK).exists(),
    }[kind]


@pytest.mark.slow
@pytest.mark.parametrize("verb", list(LONG))
def test_kill_9_then_status_says_dead_and_the_same_command_completes(tmp_path, verb):
    """kill -9 (the OOM killer, a node's reboot): no word written. `status` says DEAD with what
    to do (a killed evaluation, which writes no status.json while it runs, showed NOT
    SUBMITTED), and the same command goes on (a training from a checkpoint) and completes."""
    mine = user_folder(tmp_path)
    out = mine / verb
    words, flag, kind = LONG[verb]
    argv = [*words, flag, str(out)]
    job = start([*VQA, *argv])
    wait_for(under_way(kind, out, 7), job)  # a training: checkpoint-5 written
    os.killpg(job.pid, signal.SIGKILL)
    job.communicate()
    report = status_of(out)
    assert "DEAD" in report and "run RUNNING" not in report, report
    assert "killed (SIGKILL, out of memory?)" in report and "the same command" in report
    again = run("vqa-r1", argv)
    assert again.returncode == 0, again.stderr[-3000:]
    assert claims.is_complete(out) and "DEAD" not in status_of(out)
    if kind == "training" and verb != "pretrain":  # a pretraining records no resumption
        state = json.loads((out / "status.json").read_text())
        assert "checkpoint-" in str(state.get("resumed_from")), state
    assert (mine / "notes.txt").read_text() == NOTES


@pytest.mark.slow
def test_kill_9_of_a_local_pipeline_launch_then_status_says_stopped_and_it_goes_on(tmp_path):
    """The launch killed while its sft job trains: the job finishes on its own; `status` says
    the launch is gone (not 'sft RUNNING' for good) and the same command runs the rest."""
    mine = user_folder(tmp_path)
    root = mine / "p"
    argv = [
        "pipeline", *TINY, "--executor", "local", "--time", "00:05:00", "--steps",
        "sft,evaluate", "--set", "sft:train.max_steps=30", "--set", "train.logging_steps=1",
        "--set", "evaluate:eval.limit=2", "--set", "evaluate:eval.max_new_tokens=4",
        "--output-dir", str(root),
    ]  # fmt: skip
    launcher = start([*LAUNCH, *argv])
    wait_for(lambda: logged_step(root / "sft") >= 2, launcher)
    launcher.kill()  # kill -9 of the launch alone: its local job runs on
    launcher.communicate()
    jobs = json.loads((root / "sft" / "jobs.json").read_text())["jobs"]
    pid = int(jobs[-1]["job_id"])
    deadline = time.monotonic() + 240
    while Path(f"/proc/{pid}").exists() and "Z" not in _state(pid):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    report = status_of(root)
    assert "sft" in report and "RUNNING" not in report, report
    assert "pipeline STOPPED: its launch" in report and "run the same command to go on" in report
    again = run("launch", argv)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert "sft: local job" not in again.stdout and "evaluate: local job" in again.stdout
    assert "pipeline COMPLETED" in status_of(root)
    assert (mine / "notes.txt").read_text() == NOTES


def _state(pid: int) -> str:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "Z"
    return text[text.rindex(")") + 2 :].split()[0]


# ----------------------------------------------------------------- one Ctrl-C


@pytest.mark.slow
@pytest.mark.parametrize(
    ("entry", "verb"),
    [
        ("vqa-r1", "sft"),
        ("vqa-r1", "grpo"),
        ("vqa-r1", "pretrain"),
        ("vqa-r1", "evaluate"),
        ("launch", "sft"),
    ],  # fmt: skip
)
def test_one_ctrl_c_stops_with_what_was_done_kept_and_the_same_command_goes_on(
    tmp_path, entry, verb
):
    """`slurm/launch.py ... --executor inprocess` here; its local executor is
    test_sweep_pipeline.py's ``test_one_ctrl_c_through_the_launcher_...``."""
    mine = user_folder(tmp_path)
    out = mine / verb
    words, flag, kind = LONG[verb]
    argv = [*words, flag, str(out)]
    if entry == "launch":
        argv.extend(["--executor", "inprocess"])
    job = start([*(VQA if entry == "vqa-r1" else LAUNCH), *argv])
    wait_for(under_way(kind, out, 3), job)
    os.killpg(job.pid, signal.SIGINT)  # one Ctrl-C in the terminal
    _, err = job.communicate(timeout=120)
    assert job.returncode == 130, err[-3000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-3000:]
    assert "interrupted" in err.splitlines()[-1], err[-3000:]  # said, as the last line
    state = json.loads((out / "status.json").read_text())
    assert state["state"] == "INTERRUPTED", state
    if kind == "training":
        step = state["global_step"]
        saved = out / ("work/checkpoints" if verb == "pretrain" else "checkpoints")
        assert (saved / f"checkpoint-{step}").is_dir(), state
        assert f"checkpoint-{step} saved; the same command resumes" in state["reason"]
        assert f"checkpoint-{step} saved" in err.splitlines()[-1]
    assert "INTERRUPTED" in status_of(out)
    again = run(entry, argv)
    assert again.returncode == 0, again.stderr[-3000:]
    assert claims.is_complete(out)
    assert (mine / "notes.txt").read_text() == NOTES


# ----------------------------------------------------------------- a full filesystem


@contextlib.contextmanager
def full_filesystem(tmp_path: Path, free_kib: int):
    """The user's folder (``notes.txt`` in it) on a filesystem with ``free_kib`` KiB left: a
    small tmpfs, filled up, where this process may mount one; else a fault hook that makes every
    file opened for writing under it raise ENOSPC. Yields (folder, free); ``free()`` gives the
    space back."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = False
    if not os.environ.get("VQA_R1_TEST_NO_MOUNT"):  # set: try the fault hook where mount works
        with contextlib.suppress(OSError):
            mounted = subprocess.run(
                ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(disk)], capture_output=True
            ).returncode == 0  # fmt: skip
    mine = user_folder(disk)
    if mounted:
        filler = disk / "filler"
        with open(filler, "wb") as f, contextlib.suppress(OSError):
            f.write(b"\0" * (8 * 1024 - free_kib) * 1024)
        try:
            yield mine, filler.unlink
        finally:
            subprocess.run(["umount", "-l", str(disk)], check=False)
        return
    real_open, io_open, full = builtins.open, io.open, [True]

    def full_open(file, mode="r", *args, **kwargs):
        path = os.fspath(file) if isinstance(file, (str, os.PathLike)) else ""
        writes = any(m in mode for m in "wax+")
        if full[0] and writes and str(path).startswith(str(mine)):
            raise OSError(errno.ENOSPC, "No space left on device", path)
        return real_open(file, mode, *args, **kwargs)

    real_os_open = os.open
    writing = os.O_WRONLY | os.O_RDWR | os.O_CREAT

    def full_os_open(path, flags, *args, **kwargs):  # tempfile.mkstemp and friends
        if full[0] and flags & writing and str(os.fspath(path)).startswith(str(mine)):
            raise OSError(errno.ENOSPC, "No space left on device", os.fspath(path))
        return real_os_open(path, flags, *args, **kwargs)

    builtins.open = io.open = full_open
    os.open = full_os_open
    try:
        yield mine, lambda: full.__setitem__(0, False)
    finally:
        builtins.open, io.open, os.open = real_open, io_open, real_os_open


FULL = [
    ("sft", "vqa-r1", ["sft", *TINY, *ONE_STEP], "--output-dir"),
    ("grpo", "vqa-r1", ["grpo", *TINY, *GRPO], "--output-dir"),
    ("evaluate", "vqa-r1", ["evaluate", *TINY, *EVAL], "--output-dir"),
    ("prompt-tune", "vqa-r1", ["prompt-tune", *PROMPT_TUNE], "--output-dir"),
    ("pretrain", "vqa-r1", ["pretrain", *PRETRAIN], "--out"),
    ("data-generate", "vqa-r1", ["data", "generate", *GEN], "--out"),
    ("data-bias", "vqa-r1", ["data", "bias", "--kind", "text", "--target", "0.7"], "--out"),
    ("data-counting", "vqa-r1", ["data", "counting", *GEN, "--test-b", "2"], "--out"),
    ("data-cryptogram", "vqa-r1", ["data", "cryptogram", *GEN], "--out"),
    (
        "judge",
        "vqa-r1",
        ["judge", "run", "--backend", "heuristic", "--no-cache", "--responses", "RESPONSES"],
        "--out",
    ),
    ("launch-sft", "launch", ["sft", *TINY, *ONE_STEP, "--executor", "inprocess"], "--output-dir"),
]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("entry", "argv", "flag"), [pytest.param(*case[1:], id=case[0]) for case in FULL]
)
def test_a_full_filesystem_is_one_line_and_the_same_command_resumes_once_freed(
    tmp_path, entry, argv, flag
):
    with full_filesystem(tmp_path, free_kib=24) as (mine, free):
        out = mine / "out"
        if "RESPONSES" in argv:  # more checks than the space left holds
            argv = [f"m={responses(tmp_path, 400)}" if a == "RESPONSES" else a for a in argv]
            out = mine / "checks.json"
        failed = run(entry, [*argv, flag, str(out)])
        line = one_error_line(failed.stderr)
        assert failed.returncode == 1, failed.stderr[-2000:]
        assert "no space left on device" in line and "then run the same command" in line, line
        assert (mine / "notes.txt").read_text() == NOTES
        free()
        if (out / "status.json").exists():  # where the run could record it: status agrees
            report = status_of(out)
            assert "FAILED" in report and "RUNNING" not in report, report
        again = run(entry, [*argv, flag, str(out)])
        assert again.returncode == 0, again.stderr[-3000:]
        assert complete(out)
        assert (mine / "notes.txt").read_text() == NOTES
