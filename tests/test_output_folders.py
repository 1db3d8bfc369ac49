"""Your files are safe: the one rule for output folders (vqa_r1/claims.py), for every verb.

For each verb, run as a user types it into a folder holding (a) a file the suite did not write:
the file survives and the command refuses; (b) a run of another verb: untouched, refused; (c) a
finished run of the same command: unchanged (hashes and mtimes of every file) and the command
says it is complete. Two writers into one folder: one is refused. ``--overwrite`` moves aside.
Nothing is written before every check has passed (a refused local GPU job, a refused sbatch), and
a killed ``data generate``'s temporary folder is removed by the next run.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vqa_r1 import claims
from vqa_r1.claims import LOCK, MARKER, FolderLock, FolderRefused

REPO = Path(__file__).resolve().parents[1]
SFT_SETS = [
    "--set", "train.max_steps=1", "--set", "train.save_steps=1",
    "--set", "train.per_device_train_batch_size=2", "--set", "data.num_samples=4",
]  # fmt: skip
GRPO_SETS = [
    *SFT_SETS, "--set", "train.num_generations=2", "--set", "train.max_completion_length=8",
    "--set", "train.reward_funcs=[format]",
]  # fmt: skip
EVAL_SETS = ["--limit", "2", "--batch-size", "2", "--set", "eval.max_new_tokens=4"]
PT_SETS = [
    "--model", "tiny-qwen2.5-vl-pretrained", "--mode", "answer",
    "--set", "data.synthetic_train=64", "--set", "eval.limit=4",
    "--set", "train.per_device_train_batch_size=4", "--set", "train.max_steps=1",
    "--set", "train.save_steps=1",
]  # fmt: skip
PRETRAIN_SETS = [
    "--family", "qwen2.5-vl",
    *[x for s in ("max_steps=1", "examples=8", "save_steps=1", "eval_examples=1", "hidden=32",
                  "layers=1", "per_device_train_batch_size=2") for x in ("--set", s)],
]  # fmt: skip
GEN = ["--train", "4", "--validation", "2", "--test", "2"]


def vqa(*argv) -> int:
    from vqa_r1.cli import main

    return main([str(a) for a in argv])


def launch(*argv) -> int:
    from vqa_r1.cli.launch import main

    return main([str(a) for a in argv])


def snapshot(folder: Path) -> dict[str, tuple[str, int]]:
    """Every file under ``folder`` with its hash and mtime (ns)."""
    return {
        str(p.relative_to(folder)): (
            hashlib.sha256(p.read_bytes()).hexdigest(),
            p.stat().st_mtime_ns,
        )
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def foreign(tmp_path: Path, name: str = "mine") -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "notes.txt").write_text("a week of notes\n")
    return folder


def assert_refused(code: int, capsys, *words: str) -> str:
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    for word in words:
        assert word in err, err
    return err


# ------------------------------------------------------------------------ the rule, unit level


def test_rule_new_foreign_other_verb_other_settings_complete(tmp_path):
    settings = {"a": 1, "b": {"c": 2}}
    assert claims.check(tmp_path / "none", "sft", settings) == claims.NEW
    (tmp_path / "empty").mkdir()
    assert claims.check(tmp_path / "empty", "sft", settings) == claims.NEW
    with pytest.raises(FolderRefused, match=r"did not write \(notes.txt\).*--overwrite"):
        claims.check(foreign(tmp_path), "sft", settings)
    run = tmp_path / "run"
    assert claims.claim(run, "sft", settings) == claims.NEW
    assert claims.check(run, "sft", settings) == claims.RESUME
    with pytest.raises(FolderRefused, match="holds a sft run, not grpo"):
        claims.check(run, "grpo", settings)
    with pytest.raises(FolderRefused, match=r"other settings \(b.c: 2 there, 3 now\)"):
        claims.check(run, "sft", {"a": 1, "b": {"c": 3}})
    claims.mark_complete(run)
    assert claims.check(run, "sft", settings) == claims.COMPLETE


def test_overwrite_moves_aside_and_deletes_nothing(tmp_path, capsys):
    mine = foreign(tmp_path)
    assert claims.make_way(mine, "sft", {}, overwrite=True) == claims.NEW
    moved = [p for p in tmp_path.iterdir() if p.name.startswith("mine.old-")]
    assert len(moved) == 1 and (moved[0] / "notes.txt").read_text() == "a week of notes\n"
    assert not mine.exists() and f"moved {mine} to {moved[0]}" in capsys.readouterr().err


def test_a_refused_folder_gets_no_status(tmp_path):
    """failures_recorded writes FAILED into the run's folder, never into one it was refused."""
    from vqa_r1.run_dir import failures_recorded

    other = tmp_path / "other"
    claims.claim(other, "sft", {})
    with pytest.raises(FolderRefused), failures_recorded(other):
        claims.check(other, "grpo", {})
    assert not (other / "status.json").exists()


# ------------------------------------------------------------------------------- the lock

HOLD = """
import sys, time
from vqa_r1.claims import FolderLock
with FolderLock(sys.argv[1], "test"):
    print("held", flush=True)
    time.sleep(60)
"""


def hold_lock(folder: Path) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(folder)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_writer_is_refused_naming_the_holder(tmp_path):
    """Also while the holder writes its marker (CI, under load: the second command found the
    marker's temporary file beside the lock and called it a file this suite did not write)."""
    folder = tmp_path / "run"
    proc = hold_lock(folder)
    being_written = folder / f".{MARKER}.jais4o69"  # io.atomic_write_json's temporary name
    try:
        with pytest.raises(FolderRefused, match=rf"pid {proc.pid}@{socket.gethostname()} since"):
            with FolderLock(folder):
                pass
        being_written.write_text("{")
        with pytest.raises(FolderRefused, match=rf"is being written by pid {proc.pid}@"):
            claims.check(folder, "data generate", {})
    finally:
        proc.kill()
        proc.wait()
    # the holder was killed (SIGKILL: no release): its lock is stale and taken over, and what
    # it left half-written is the suite's own
    assert claims.check(folder, "data generate", {}) == claims.NEW
    with FolderLock(folder):
        assert json.loads((folder / LOCK).read_text())["pid"] == os.getpid()
        assert sorted(p.name for p in folder.iterdir()) == sorted([LOCK, being_written.name])
    assert not (folder / LOCK).exists()


def test_stale_locks_are_taken_over_with_a_note(tmp_path, monkeypatch, capsys):
    def lock(folder: Path, age_s: float, **fields) -> None:
        folder.mkdir()
        (folder / LOCK).write_text(json.dumps({"started": "earlier", **fields}))
        then = time.time() - age_s
        os.utime(folder / LOCK, (then, then))

    # another host, heartbeat fresh: refused; older than the timeout: taken over
    lock(tmp_path / "fresh", 5, pid=1, host="node-b")
    with pytest.raises(FolderRefused, match="pid 1@node-b"):
        FolderLock(tmp_path / "fresh").__enter__()
    lock(tmp_path / "old", 700, pid=1, host="node-b")
    with FolderLock(tmp_path / "old"):
        pass
    assert "no heartbeat for" in capsys.readouterr().err
    # the same SLURM job after a requeue takes over its own lock; two live commands of one
    # allocation (same job, same restart count, the holder's pid alive here) do not
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    alive = {"pid": os.getppid(), "host": socket.gethostname(), "slurm_job": "4242"}
    lock(tmp_path / "salloc", 1, **alive, restarts=0)
    with pytest.raises(FolderRefused, match="SLURM job 4242"):
        FolderLock(tmp_path / "salloc").__enter__()
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    lock(tmp_path / "requeued", 1, **alive, restarts=0)
    with FolderLock(tmp_path / "requeued"):
        pass
    assert "earlier run of this SLURM job" in capsys.readouterr().err
    monkeypatch.setenv("VQA_R1_LOCK_STALE_S", "2")
    assert claims.stale_after_s() == 2


def test_only_rank_zero_locks_and_claims(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with claims.writing(tmp_path / "run", "sft", {}) as state:
        assert state == claims.NEW
    assert not (tmp_path / "run").exists()
    rank0 = hold_lock(tmp_path / "shared")  # rank 0 holds the lock: rank 1 goes on
    try:
        with claims.writing(tmp_path / "shared", "sft", {}) as state:
            assert state == claims.NEW
    finally:
        rank0.kill()
        rank0.wait()


# --------------------------------------------------------------------------- data generate


def test_data_generate(tmp_path, capsys):
    mine = foreign(tmp_path)
    assert_refused(vqa("data", "generate", "--out", mine, *GEN), capsys, "notes.txt", "--out")
    assert snapshot(mine) and (mine / "notes.txt").exists() and len(list(mine.iterdir())) == 1

    other = tmp_path / "other"
    claims.claim(other, "sft", {})
    before = snapshot(other)
    assert_refused(vqa("data", "generate", "--out", other, *GEN), capsys, "sft run")
    assert snapshot(other) == before

    out = tmp_path / "data"
    killed = tmp_path / ".data.tmp-killed"  # what a killed run of io.atomic_dir leaves
    killed.mkdir()
    (killed / "images").mkdir()
    assert vqa("data", "generate", "--out", out, *GEN) == 0
    assert not killed.exists() and "left by an interrupted run" in capsys.readouterr().err
    done = snapshot(out)
    assert vqa("data", "generate", "--out", out, *GEN) == 0
    assert "is complete with these settings: nothing to do" in capsys.readouterr().out
    assert snapshot(out) == done
    err = assert_refused(vqa("data", "generate", "--out", out, *GEN[2:], "--train", "5"), capsys)
    assert "other settings (spec.splits.train: 4 there, 5 now)" in err, err

    assert vqa("data", "generate", "--out", mine, *GEN, "--overwrite") == 0
    assert "nothing deleted" in capsys.readouterr().err
    (aside,) = tmp_path.glob("mine.old-*")
    assert (aside / "notes.txt").read_text() == "a week of notes\n"
    assert (mine / "hf").exists() and not (mine / LOCK).exists()


def test_two_data_generate_runs_into_one_folder_one_is_refused(tmp_path, capsys):
    out = tmp_path / "data"
    sizes = ["--train", "400", "--validation", "2", "--test", "2"]
    cmd = [sys.executable, "-m", "vqa_r1", "data", "generate", "--out", str(out), *sizes]
    first = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120  # a loaded machine starts Python slowly
        while time.monotonic() < deadline:
            if (out / LOCK).exists() or first.poll() is not None:
                break
            time.sleep(0.02)
        assert (out / LOCK).exists(), first.communicate()
        err = assert_refused(vqa("data", "generate", "--out", out, *sizes), capsys)
        assert f"is being written by pid {first.pid}@" in err
    finally:
        _, first_err = first.communicate(timeout=120)
    assert first.returncode == 0, first_err
    assert (out / "hf" / "dataset_dict.json").exists() and not (out / LOCK).exists()


# ------------------------------------------------------------------------------- data bias


def test_data_bias(synthetic_dir, tmp_path, capsys):
    args = ["--kind", "text", "--target", "0.73", "--source", synthetic_dir]
    before = snapshot(synthetic_dir)
    for inside in (synthetic_dir, synthetic_dir / "sub"):
        assert_refused(vqa("data", "bias", *args, "--out", inside), capsys, "--source")
    assert snapshot(synthetic_dir) == before

    mine = foreign(tmp_path)
    assert_refused(vqa("data", "bias", *args, "--out", mine), capsys, "notes.txt")
    other = tmp_path / "other"
    claims.claim(other, "data generate", {})
    assert_refused(vqa("data", "bias", *args, "--out", other), capsys, "data generate run")

    out = tmp_path / "biased"
    assert vqa("data", "bias", *args, "--out", out) == 0
    capsys.readouterr()
    done = snapshot(out)
    assert vqa("data", "bias", *args, "--out", out) == 0
    assert "is complete with these settings" in capsys.readouterr().out
    assert snapshot(out) == done


# -------------------------------------------------------------------------------- judge


def test_judge(tmp_path, capsys):
    responses = tmp_path / "responses.json"
    items = [
        {"question": "The cat is left of the dog.", "true_response": "True",
         "predicted_response": "<think>The cat is left of the dog.</think><answer>True</answer>"},
    ]  # fmt: skip
    responses.write_text(json.dumps(items))
    args = ["judge", "run", "--backend", "heuristic", "--responses", f"m={responses}"]
    notes = tmp_path / "notes.json"
    notes.write_text("[1, 2, 3]\n")
    assert_refused(vqa(*args, "--out", notes), capsys, "not written by judge", "--overwrite")
    assert notes.read_text() == "[1, 2, 3]\n"

    out = tmp_path / "checks.json"
    assert vqa(*args, "--out", out) == 0
    done = (out.read_bytes(), out.stat().st_mtime_ns)
    capsys.readouterr()
    assert vqa(*args, "--out", out) == 0
    seen = capsys.readouterr()
    assert "is complete with these settings" in seen.out
    assert (seen.out + seen.err).count("nothing to do") == 1  # said once (issue 30, item 10)
    assert (out.read_bytes(), out.stat().st_mtime_ns) == done
    assert_refused(vqa(*args, "--limit", "1", "--out", out), capsys, "other settings")

    assert vqa(*args, "--out", notes, "--overwrite") == 0
    (aside,) = tmp_path.glob("notes.json.old-*")
    assert aside.read_text() == "[1, 2, 3]\n" and json.loads(notes.read_text())[0]["model"] == "m"


# ---------------------------------------------------------- training, evaluation, launcher


@pytest.fixture(scope="module")
def sft_run(synthetic_dir, tmp_path_factory):
    """A finished SFT run made as a user makes it (vqa-r1 sft)."""
    run = tmp_path_factory.mktemp("runs") / "sft"
    argv = ["sft", "--dataset", synthetic_dir, *SFT_SETS, "--output-dir", run]
    assert vqa(*argv) == 0
    return run, argv


@pytest.mark.slow
def test_sft(sft_run, tmp_path, capsys):
    run, argv = sft_run
    capsys.readouterr()
    done = snapshot(run)
    assert json.loads((run / "status.json").read_text())["global_step"] == 1
    assert vqa(*argv) == 0  # the same command again: nothing trained, final/ untouched
    assert "is complete with these settings: nothing to do" in capsys.readouterr().out
    assert snapshot(run) == done
    assert launch(*argv, "--executor", "local") == 0  # the launcher: nothing submitted
    assert "nothing submitted" in capsys.readouterr().out
    assert snapshot(run) == done

    mine = foreign(tmp_path)
    assert_refused(vqa(*argv[:-1], mine), capsys, "notes.txt", "--output-dir")
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
    changed = [*argv[:-2], "--set", "train.learning_rate=1e-3", "--output-dir", run]
    assert_refused(vqa(*changed), capsys, "other settings", "train.learning_rate")
    assert snapshot(run) == done

    held = hold_lock(tmp_path / "locked")
    try:
        err = assert_refused(vqa(*argv[:-1], tmp_path / "locked"), capsys)
        assert f"pid {held.pid}@" in err
        err = assert_refused(launch(*argv[:-1], tmp_path / "locked", "--executor", "local"), capsys)
        assert f"pid {held.pid}@" in err and not (tmp_path / "locked" / "jobs").exists()
    finally:
        held.kill()
        held.wait()


@pytest.mark.slow
def test_grpo_into_a_finished_sft_run_is_refused_and_a_finished_grpo_is_complete(
    sft_run, synthetic_dir, tmp_path, capsys
):
    run, _ = sft_run
    done = snapshot(run)
    grpo = ["grpo", "--dataset", synthetic_dir, *GRPO_SETS, "--output-dir"]
    assert_refused(vqa(*grpo, run), capsys, "holds a sft run, not grpo")
    assert_refused(launch(*grpo, run, "--dry-run"), capsys, "holds a sft run, not grpo")
    assert snapshot(run) == done
    assert_refused(vqa(*grpo, foreign(tmp_path)), capsys, "notes.txt")

    out = tmp_path / "grpo"
    assert vqa(*grpo, out) == 0
    assert json.loads((out / "status.json").read_text())["state"] == "COMPLETED"
    capsys.readouterr()
    finished = snapshot(out)
    assert vqa(*grpo, out) == 0
    assert "is complete" in capsys.readouterr().out and snapshot(out) == finished


@pytest.mark.slow
def test_evaluate(sft_run, synthetic_dir, tmp_path, capsys):
    run, _ = sft_run
    done = snapshot(run)
    ev = ["evaluate", "--dataset", synthetic_dir, *EVAL_SETS, "--adapter", run, "--output-dir"]
    assert_refused(vqa(*ev, run), capsys, "holds a sft run, not evaluate")
    assert snapshot(run) == done  # its config.yaml was overwritten before
    mine = foreign(tmp_path)
    assert_refused(vqa(*ev, mine), capsys, "notes.txt")

    out = tmp_path / "eval"
    assert vqa(*ev, out) == 0
    capsys.readouterr()
    finished = snapshot(out)
    assert vqa(*ev, out) == 0
    assert "is complete" in capsys.readouterr().out and snapshot(out) == finished
    # other settings: refused, nothing written (config.yaml was rewritten first before)
    assert_refused(vqa(*ev[:-1], "--limit", "1", "--output-dir", out), capsys, "eval.limit")
    assert snapshot(out) == finished

    assert vqa(*ev, mine, "--overwrite") == 0
    (aside,) = tmp_path.glob("mine.old-*")
    assert (aside / "notes.txt").exists() and (mine / "scores.json").exists()


@pytest.mark.slow
def test_merge_through_the_launcher(sft_run, tmp_path, capsys):
    run, _ = sft_run
    merge = ["merge", "--model", "tiny-qwen2.5-vl", "--adapter", run, "--executor", "local"]
    done = snapshot(run)
    assert_refused(launch(*merge, "--output-dir", run), capsys, "holds a sft run, not merge")
    assert snapshot(run) == done
    mine = foreign(tmp_path)
    assert_refused(launch(*merge, "--output-dir", mine), capsys, "notes.txt")
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]

    out = tmp_path / "merge"
    assert launch(*merge, "--output-dir", out) == 0
    assert (out / "merged" / "config.json").exists()
    capsys.readouterr()
    finished = snapshot(out)
    assert launch(*merge, "--output-dir", out) == 0
    assert "is complete" in capsys.readouterr().out and snapshot(out) == finished


@pytest.mark.slow
def test_prompt_tune(sft_run, tmp_path, capsys):
    run, _ = sft_run
    done = snapshot(run)
    pt = ["prompt-tune", *PT_SETS, "--output-dir"]
    assert_refused(vqa(*pt, run), capsys, "holds a sft run, not prompt-tune")
    assert snapshot(run) == done
    assert_refused(vqa(*pt, foreign(tmp_path)), capsys, "notes.txt")

    out = tmp_path / "pt"
    assert vqa(*pt, out) == 0
    capsys.readouterr()
    finished = snapshot(out)
    assert vqa(*pt, out) == 0  # not trained nor evaluated again
    assert "is complete" in capsys.readouterr().out and snapshot(out) == finished

    assert_refused(vqa(*pt, out, "--base"), capsys, "holds a prompt-tune run, not prompt-tune")
    base = tmp_path / "base"
    assert vqa(*pt, base, "--base") == 0
    capsys.readouterr()
    scored = snapshot(base)
    assert vqa(*pt, base, "--base") == 0  # the base model is not scored again
    assert "is complete" in capsys.readouterr().out and snapshot(base) == scored
    assert snapshot(out) == finished


@pytest.mark.slow
def test_pretrain(sft_run, tmp_path, capsys):
    run, _ = sft_run
    done = snapshot(run)
    pre = ["pretrain", *PRETRAIN_SETS, "--out"]
    assert_refused(vqa(*pre, run), capsys, "holds a sft run, not pretrain", "--out")
    assert_refused(launch(*pre, run, "--dry-run"), capsys, "holds a sft run, not pretrain")
    assert snapshot(run) == done
    assert_refused(vqa(*pre, foreign(tmp_path)), capsys, "notes.txt")

    out = tmp_path / "model"
    assert vqa(*pre, out) == 0
    capsys.readouterr()
    finished = snapshot(out)
    assert vqa(*pre, out) == 0  # not trained again from scratch
    assert "is complete" in capsys.readouterr().out and snapshot(out) == finished


# ------------------------------------------------------- experiment, pipeline and sweep roots


@pytest.mark.parametrize(
    "argv",
    [
        ["experiment", "text-bias", "--model", "tiny-qwen2.5-vl"],
        ["pipeline", "--model", "tiny-qwen2.5-vl"],
        ["sft", "--model", "tiny-qwen2.5-vl", "--sweep", "train.learning_rate=1e-4,1e-3"],
        ["judge", "--backend", "heuristic", "--responses", "m=x.json", "--out", "c.json"],
    ],
    ids=["experiment", "pipeline", "sweep", "judge-job"],
)
def test_launcher_roots_refuse_foreign_and_other_runs(argv, tmp_path, capsys):
    mine = foreign(tmp_path)
    if argv[0] == "judge":
        (tmp_path / "x.json").write_text("[]")
        argv = [a.replace("x.json", str(tmp_path / "x.json")) for a in argv]
    code = launch(*argv, "--output-dir", mine, "--executor", "local")
    assert_refused(code, capsys, "notes.txt", "--overwrite")
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
    other = tmp_path / "other"
    claims.claim(other, "evaluate", {})
    before = snapshot(other)
    code = launch(*argv, "--output-dir", other, "--executor", "local")
    assert_refused(code, capsys, "holds an evaluate run")
    assert snapshot(other) == before


@pytest.mark.slow
def test_a_finished_pipeline_and_sweep_are_complete(synthetic_dir, tmp_path, capsys):
    """Run once as local jobs; the same command again submits nothing and changes nothing."""
    data = ["--dataset", synthetic_dir, *SFT_SETS, "--executor", "local"]
    commands = {
        "pipeline": ["pipeline", "--model", "tiny-qwen2.5-vl", "--steps", "sft", *data],
        "sweep": ["sft", *data, "--sweep", "train.learning_rate=1e-4"],
    }
    for name, argv in commands.items():
        root = tmp_path / name
        assert launch(*argv, "--output-dir", root) == 0, capsys.readouterr().err
        capsys.readouterr()
        finished = snapshot(root)
        assert any(path.endswith("final/adapter_model.safetensors") for path in finished)
        assert launch(*argv, "--output-dir", root) == 0
        assert "is complete with these settings: nothing submitted" in capsys.readouterr().out
        assert snapshot(root) == finished


def test_launcher_overwrite_as_a_user_types_it(tmp_path, capsys):
    mine = foreign(tmp_path)
    assert launch("sft", "--dry-run", "--overwrite", "--output-dir", mine) == 0
    assert "will be moved aside" in capsys.readouterr().err
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]  # a dry run moves nothing
    responses = tmp_path / "r.json"
    responses.write_text(json.dumps([{"question": "A is left of B.", "true_response": "True",
                                      "predicted_response": "<answer>True</answer>"}]))  # fmt: skip
    argv = ["judge", "--backend", "heuristic", "--responses", f"m={responses}",
            "--out", tmp_path / "checks.json", "--executor", "local"]  # fmt: skip
    assert_refused(launch(*argv, "--output-dir", mine), capsys, "notes.txt", "--overwrite")
    assert launch(*argv, "--output-dir", mine, "--overwrite") == 0, capsys.readouterr().err
    assert "nothing deleted" in capsys.readouterr().err
    (aside,) = tmp_path.glob("mine.old-*")
    assert sorted(p.name for p in aside.iterdir()) == ["notes.txt"]
    assert (mine / MARKER).exists() and (tmp_path / "checks.json").exists()


# ------------------------------------------------------------- nothing written before checks


def test_a_refused_local_gpu_job_writes_nothing(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine can run the GPU job")
    run = tmp_path / "run"
    code = launch("sft", "--executor", "local", "--gpus", "1", "--output-dir", run)
    assert_refused(code, capsys, "CUDA")
    assert not run.exists()
    # a launch's own folder too (issue 30, item 7): no claim is left to refuse the corrected
    # command as "a run with other settings"
    for argv in (
        ["pipeline", "--model", "tiny-qwen2.5-vl", "--steps", "sft,evaluate"],
        ["experiment", "counting", "--model", "tiny-qwen2.5-vl"],
    ):
        root = tmp_path / argv[0]
        assert_refused(
            launch(*argv, "--executor", "local", "--gpus", "1", "--output-dir", root), capsys,
            "CUDA",
        )  # fmt: skip
        assert not root.exists()
    # in process, a model.device of cuda: refused before the claim, then the corrected command
    # runs in the same folder
    run = tmp_path / "eval"
    argv = ["evaluate", "--model", "tiny-qwen2.5-vl", "--limit", "2", "--output-dir", run]
    assert_refused(vqa(*argv, "--set", "model.device=cuda"), capsys, "model.device=cuda")
    assert not run.exists()
    assert vqa(*argv, "--set", "model.device=cpu") == 0, capsys.readouterr().err
    assert (run / "scores.json").is_file()


def test_a_refused_sbatch_leaves_nothing(tmp_path, monkeypatch, capsys):
    import submitit

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(
        "#!/bin/sh\necho 'sbatch: error: Invalid account' >&2\nexit 1\n"
    )
    (bin_dir / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(submitit.SlurmExecutor, "affinity", classmethod(lambda cls: 2))
    run = tmp_path / "run"
    code = launch("evaluate", "--executor", "slurm", "--output-dir", run)  # with a code snapshot
    assert_refused(code, capsys, "sbatch refused")
    assert not run.exists()
    sweep = ["evaluate", "--executor", "slurm", "--sweep", "eval.limit=1,2"]
    assert_refused(launch(*sweep, "--output-dir", run), capsys, "sbatch refused", "Invalid account")
    assert not run.exists()


def test_evaluate_refused_by_its_batch_log_writes_no_config(synthetic_dir, tmp_path):
    """Point 12: config.yaml was written before the batch log's fingerprint refused the run."""
    from vqa_r1.config import run_settings
    from vqa_r1.errors import UserError
    from vqa_r1.eval.evaluate import evaluate
    from vqa_r1.recipes import load_config

    config = load_config("evaluate", "tiny-qwen2.5-vl", None, [f"data.dataset={synthetic_dir}"])
    out = tmp_path / "eval"
    claims.claim(out, "evaluate", run_settings(config))
    (out / "batches.jsonl").write_text('{"fingerprint": "another evaluation"}\n')
    with pytest.raises(UserError, match="generated with other settings"):
        evaluate(config, out)
    assert sorted(p.name for p in out.iterdir()) == [MARKER, "batches.jsonl"]


@pytest.mark.parametrize(
    "argv",
    [
        ["sft"], ["grpo"], ["evaluate"], ["prompt-tune"], ["pretrain"],
        ["data", "generate"], ["data", "bias"], ["judge", "run"],
    ],
    ids=lambda a: "-".join(a),
)  # fmt: skip
def test_every_writing_verb_lists_overwrite_in_help(argv, capsys):
    with pytest.raises(SystemExit):
        vqa(*argv, "--help")
    assert "--overwrite" in capsys.readouterr().out


@pytest.mark.parametrize("verb", ["sft", "evaluate", "merge", "pretrain", "judge", "pipeline",
                                  "experiment"])  # fmt: skip
def test_every_launcher_verb_lists_overwrite_in_help(verb):
    done = subprocess.run(
        [sys.executable, str(REPO / "slurm" / "launch.py"), verb, "--help"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert "--overwrite" in done.stdout, done.stderr


def test_marker_is_hidden_and_recorded(tmp_path):
    claims.claim(tmp_path / "r", "sft", {"x": (1, 2)}, command="vqa-r1 sft")
    marker = json.loads((tmp_path / "r" / MARKER).read_text())
    assert marker["verb"] == "sft" and marker["settings"] == {"x": [1, 2]}
    assert claims.check(tmp_path / "r", "sft", {"x": (1, 2)}) == claims.RESUME
