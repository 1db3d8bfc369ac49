"""Evaluation continues after the last complete batch: a kill -9 half-way, then the same command,
gives the files of an uninterrupted run; the batch log never counts a torn line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vqa_r1.errors import UserError
from vqa_r1.eval.evaluate import BATCHES, BatchLog

REPO = Path(__file__).resolve().parents[1]
# wall-clock keys: the only ones of scores.json a resumed run may not share
TIMINGS = ("seconds", "items_per_second")


def _batch(start: int, n: int) -> dict:
    return {
        "start": start,
        "outputs": [f"text {start + i}" for i in range(n)],
        "truncated": [False] * n,
    }


def test_a_torn_last_line_is_not_a_batch_and_is_removed_before_appending(tmp_path):
    log = BatchLog(tmp_path / BATCHES, "abc")
    assert log.read(batch_size=2, total=5) == []
    log.append(_batch(0, 2))
    log.append(_batch(2, 2))
    with open(log.path, "ab") as fh:  # a kill in the middle of the third append
        fh.write(json.dumps(_batch(4, 1)).encode()[:20])
    done = log.read(batch_size=2, total=5)
    assert [b["start"] for b in done] == [0, 2]
    log.append(_batch(4, 1))  # the next append starts on a fresh line
    assert [b["start"] for b in log.read(batch_size=2, total=5)] == [0, 2, 4]


def test_a_batch_log_of_other_settings_is_refused_and_kept(tmp_path):
    BatchLog(tmp_path / BATCHES, "abc").read(2, 4)
    BatchLog(tmp_path / BATCHES, "abc").append(_batch(0, 2))
    before = (tmp_path / BATCHES).read_bytes()
    with pytest.raises(UserError, match="other settings"):
        BatchLog(tmp_path / BATCHES, "xyz").read(2, 4)
    assert (tmp_path / BATCHES).read_bytes() == before
    # another batch size: the lines are not batches of this run
    assert BatchLog(tmp_path / BATCHES, "abc").read(3, 4) == []


def _evaluate_command(out: Path) -> list[str]:
    return [
        sys.executable, "-m", "vqa_r1", "evaluate", "--model", "tiny-qwen2.5-vl",
        "--set", "eval.limit=48", "--set", "eval.batch_size=4", "--output-dir", str(out),
    ]  # fmt: skip


def _batches(out: Path) -> list[dict]:
    path = out / BATCHES
    if not path.exists():
        return []
    lines = path.read_bytes().split(b"\n")[1:-1]  # the header, and a line still being written
    return [json.loads(line) for line in lines]


@pytest.mark.slow
def test_kill_9_half_way_then_the_same_command_equals_an_uninterrupted_run(tmp_path):
    from vqa_r1.eval.evaluate import evaluate
    from vqa_r1.recipes import load_config

    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    out = tmp_path / "killed"
    proc = subprocess.Popen(
        _evaluate_command(out), cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 240
    while len(_batches(out)) < 3 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    first = _batches(out)
    assert 3 <= len(first) < 12, "the run ended before it could be killed half-way"
    assert not (out / "scores.json").exists()

    again = subprocess.run(
        _evaluate_command(out), cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert again.returncode == 0, again.stderr[-2000:]
    done = len(first) * 4
    assert f"{done} of 48 items done by an earlier attempt; generating the other {48 - done}" in (
        again.stderr
    )
    batches = _batches(out)
    # every batch once: the first attempt's kept, only the missing ones generated
    assert [b["start"] for b in batches] == list(range(0, 48, 4))
    assert batches[: len(first)] == first

    config = load_config(
        "evaluate", "tiny-qwen2.5-vl", overrides=["eval.limit=48", "eval.batch_size=4"]
    )
    reference = tmp_path / "uninterrupted"
    evaluate(config, reference, progress=False)
    for name in ("predictions.jsonl", "generated_responses.json"):
        assert (out / name).read_bytes() == (reference / name).read_bytes(), name
    got, want = (json.loads((d / "scores.json").read_text()) for d in (out, reference))
    assert {k: v for k, v in got.items() if k not in TIMINGS} == {
        k: v for k, v in want.items() if k not in TIMINGS
    }
    # the random-init model never ends an answer: every generation is counted and warned about
    assert got["truncated"] == 48 and got["device"] == "cpu"
    assert "warning: 48 of 48 generations stopped at eval.max_new_tokens=32" in again.stderr
