"""One run path: every verb a graph of the one builder (launch/build.py), run by the one executor
(launch/executor.py); one immutable request per job; one rule for "same settings" and one for
"complete" wherever a folder or a re-launch is judged."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path

import pytest

from vqa_r1 import claims
from vqa_r1.cli.launch import main as launch_main
from vqa_r1.errors import UserError
from vqa_r1.launch import build, executor
from vqa_r1.launch.request import JobOptions

TINY_JOB = ["--model", "tiny-qwen2.5-vl", "--cluster", "local-slurm", "--time", "00:05:00"]


@pytest.fixture
def fake_sbatch(tmp_path, monkeypatch):
    """An sbatch that takes any script and answers with the next job id (4001, 4002, ...), so
    that what the executor submits can be read back from submitit's submission files."""
    import submitit

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    counter = tmp_path / "next-id"
    counter.write_text("4001")
    script = f"""#!/bin/sh
id=$(cat {counter}); echo $((id + 1)) > {counter}
echo "Submitted batch job $id"
"""
    (bin_dir / "sbatch").write_text(script)
    (bin_dir / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(submitit.SlurmExecutor, "affinity", classmethod(lambda cls: 2))
    return bin_dir


def _submitted(folder: Path, job_id: str) -> str:
    return (folder / "jobs" / f"{job_id}_submission.sh").read_text()


def test_a_dry_run_prints_exactly_the_request_that_is_submitted(tmp_path, fake_sbatch, capsys):
    """The same graph: its dry run is the script sbatch receives, byte for byte, and submitting
    changes nothing in it (the requests are frozen: nothing is set after they are built)."""
    run = tmp_path / "run"
    spec = build.RunSpec("grpo", "tiny-qwen2.5-vl", None, ("train.max_steps=3",), str(run))
    job = JobOptions(executor="slurm", cluster="local-slurm", time="00:05:00")
    graph, _ = build.job_graph(spec, job)
    printed = executor.dry_run(graph)
    with pytest.raises(dataclasses.FrozenInstanceError):
        graph.steps[0].request.setup = ()  # type: ignore[misc]
    outcome = executor.execute(graph, "slurm/launch.py grpo ...")
    assert outcome.jobs["grpo"].job_id == "4001"
    assert _submitted(run, "4001") == printed
    assert executor.dry_run(graph) == printed  # submitting left the request as it was
    snapshot = graph.steps[0].request.snapshot
    assert snapshot is not None and (snapshot / "vqa_r1" / "launch" / "build.py").exists()
    assert f'export PYTHONPATH="{snapshot}' in printed  # the dry run names the real snapshot

    # a chain: each step's script as printed, the ids of the jobs it waits for filled in
    root = tmp_path / "pipeline"
    graph = build.pipeline_graph(
        "tiny-qwen2.5-vl", "sft,grpo,evaluate", ["train.max_steps=2"], str(root), job
    )
    chunks = executor.dry_run(graph).split("# ---- step ")[1:]
    printed = {c.split(" ----\n", 1)[0]: c.split(" ----\n", 1)[1].rstrip("\n") for c in chunks}
    outcome = executor.execute(graph, "slurm/launch.py pipeline ...")
    ids = {name: job.job_id for name, job in outcome.jobs.items()}
    assert ids == {"sft": "4002", "grpo": "4003", "evaluate": "4004"}
    for name, text in printed.items():
        for other, job_id in ids.items():  # a placeholder is quoted for the shell, an id is not
            text = text.replace(f"'afterok:<job id of {other}>'", f"afterok:{job_id}")
        assert _submitted(root / name, ids[name]).rstrip("\n") == text, name
    assert "#SBATCH --dependency=afterok:4003" in _submitted(root / "evaluate", "4004")


def test_a_job_the_cluster_profile_refuses_is_refused_before_any_folder_is_written(
    tmp_path, fake_sbatch, monkeypatch
):
    """The resources are fitted to the profile for every step before the launch's folder is
    claimed: a refusal leaves nothing behind (no pipeline folder, no step folder)."""
    root = tmp_path / "pipeline"
    job = JobOptions(executor="slurm", cluster="local-slurm", time="00:05:00")
    graph = build.pipeline_graph("tiny-qwen2.5-vl", "sft,evaluate", [], str(root), job)
    fitted = []

    def refuse_the_last(request, dependency=None):
        fitted.append(request.job_name)
        if len(fitted) == len(graph.steps):
            raise UserError("cpus: the profile cannot give each task one")
        return {}

    monkeypatch.setattr(executor, "slurm_parameters", refuse_the_last)
    with pytest.raises(UserError, match="the profile cannot"):
        executor.execute(graph, "slurm/launch.py pipeline ...")
    assert len(fitted) == 2 and not root.exists()


def test_the_launchers_dry_run_is_what_the_same_command_submits(tmp_path, fake_sbatch, capsys):
    """As a user types it: `--dry-run`, then the same command without it. Only the code
    snapshot's time stamp (the second each command ran) may differ."""
    run = tmp_path / "run"
    argv = ["evaluate", *TINY_JOB, "--executor", "slurm", "--output-dir", str(run)]
    assert launch_main([*argv, "--dry-run"]) == 0
    printed = capsys.readouterr().out.split("# ---- resolved configuration")[0]
    assert launch_main(argv) == 0
    assert "submitted evaluate as slurm job 4001" in capsys.readouterr().out
    stamp = re.compile(r"code/\d{8}-\d{6}")
    assert stamp.sub("code/T", _submitted(run, "4001")) == stamp.sub("code/T", printed)


def test_every_vqa_r1_verb_runs_its_graph_through_the_one_executor(tmp_path, monkeypatch):
    """`vqa-r1 sft|grpo|evaluate|prompt-tune|pretrain` build a one-step graph (launch/build.py)
    and hand it to executor.execute in process; nothing else runs them."""
    from vqa_r1.cli import main

    seen = []

    def record(graph, command, no_wait=False):
        seen.append((graph.steps[0].name, graph.steps[0].request.executor, command.split()[:2]))
        return executor.Outcome(0, "inprocess", nothing_to_do=True)

    monkeypatch.setattr(executor, "execute", record)
    out = str(tmp_path / "x")
    assert main(["sft", "--model", "tiny-qwen2.5-vl", "--output-dir", out + "1"]) == 0
    assert main(["grpo", "--model", "tiny-qwen2.5-vl", "--output-dir", out + "2"]) == 0
    assert main(["evaluate", "--model", "tiny-qwen2.5-vl", "--output-dir", out + "3"]) == 0
    assert main(["prompt-tune", "--model", "tiny-qwen2.5-vl", "--output-dir", out + "4"]) == 0
    assert main(["pretrain", "--family", "qwen2.5-vl", "--out", out + "5"]) == 0
    assert [s[0] for s in seen] == ["sft", "grpo", "evaluate", "prompt-tune", "pretrain"]
    assert {s[1] for s in seen} == {"inprocess"}


@pytest.mark.parametrize(
    "change, same",
    [
        ("train.num_threads=2", True),
        ("train.health_action=stop", True),
        ("train.health_window=3", True),
        ("resources.time=01:00:00", True),
        ("train.learning_rate=0.5", False),
        ("eval.batch_size=3", False),
    ],
)
def test_one_rule_for_the_same_settings_in_every_check(change, same, tmp_path):
    """A folder's claim (claims.check), a re-launch against the settings it recorded
    (GraphBuilder.check_relaunch) and the step settings launch.json records agree: threads, the
    health watch and resources may differ between launches of one run, nothing else may."""
    from vqa_r1.config import run_settings
    from vqa_r1.recipes import load_config

    before = load_config("grpo", "tiny-qwen2.5-vl")
    after = load_config("grpo", "tiny-qwen2.5-vl", overrides=[change])
    folder = tmp_path / "run"
    claims.claim(folder, "grpo", run_settings(before))
    b = build.GraphBuilder(JobOptions(dry_run=True))
    b.previous = {"runs/grpo": {"settings": build.step_settings(before.to_dict())}}
    recorded = build.step_settings(after.to_dict())
    if same:
        assert claims.check(folder, "grpo", run_settings(after)) == claims.RESUME
        b.check_relaunch("runs/grpo", recorded)
    else:
        key = change.split("=")[0]
        with pytest.raises(claims.FolderRefused, match=key):
            claims.check(folder, "grpo", run_settings(after))
        with pytest.raises(UserError, match=f"started with other settings: {key}"):
            b.check_relaunch("runs/grpo", recorded)


def test_complete_is_what_the_verb_recorded_and_nothing_else(tmp_path):
    """claims.is_complete: the marker's `completed` (every verb writes it when it ends well) with
    the outputs it named still there or, for a run from before it, a COMPLETED status.json; a
    scores.json or a final/ alone is not, and a deleted output is a step to redo."""
    folder = tmp_path / "eval"
    claims.claim(folder, "evaluate", {"a": 1})
    (folder / "scores.json").write_text("{}")
    (folder / "final").mkdir()
    assert claims.check(folder, "evaluate", {"a": 1}) == claims.RESUME
    claims.mark_complete(folder, outputs=("scores.json",))
    assert claims.check(folder, "evaluate", {"a": 1}) == claims.COMPLETE
    assert claims.completed_at(folder) is not None
    (folder / "scores.json").unlink()
    assert claims.check(folder, "evaluate", {"a": 1}) == claims.RESUME
    assert claims.completed_at(folder) is None
    legacy = tmp_path / "sft"
    legacy.mkdir()
    (legacy / "config.yaml").write_text("verb: sft\n")
    (legacy / "status.json").write_text(json.dumps({"state": "COMPLETED"}))
    assert claims.check(legacy, "sft", {"a": 1}) == claims.COMPLETE


@pytest.mark.slow
def test_an_unhealthy_grpo_step_of_an_experiment_goes_on_with_health_action_warn(tmp_path, capsys):
    """README, run health: an experiment whose GRPO step a health alarm stopped is re-launched
    with `--set grpo:train.health_action=warn` and goes on from its checkpoint (the health keys
    are not part of a step's settings, settings.py); the same command without it is refused."""
    root = tmp_path / "exp"
    argv = [
        "experiment", "demo", "--model", "tiny-qwen2.5-vl", "--executor", "inprocess",
        "--output-dir", str(root),
        "--set", "experiment.rows=[base,grpo]", "--set", "experiment.eval_split=validation",
        "--set", "data.synthetic_train=32", "--set", "data.synthetic_validation=8",
        "--set", "data.synthetic_test=8", "--set", "evaluate:eval.limit=4",
        "--set", "grpo:train.max_steps=6", "--set", "grpo:train.save_steps=100",
        "--set", "grpo:train.max_completion_length=8", "--set", "grpo:train.health_window=2",
    ]  # fmt: skip
    assert launch_main([*argv, "--set", "grpo:train.health_action=stop"]) == 1
    out = capsys.readouterr().out
    assert "runs/grpo UNHEALTHY" in out and "not run: eval/grpo" in out, out
    status = json.loads((root / "runs" / "grpo" / "status.json").read_text())
    stopped = status["global_step"]
    assert status["state"] == "UNHEALTHY" and stopped < 6, status
    assert (root / "tables" / "accuracy.md").exists()  # the tables run whatever happened

    assert launch_main([*argv, "--set", "grpo:train.health_action=stop"]) == 2
    assert "--set train.health_action=warn" in capsys.readouterr().err

    assert launch_main([*argv, "--set", "grpo:train.health_action=warn"]) == 0
    out = capsys.readouterr().out
    status = json.loads((root / "runs" / "grpo" / "status.json").read_text())
    assert status["state"] == "COMPLETED" and status["global_step"] == 6, status
    assert status["resumed_from"].endswith(f"checkpoint-{stopped}"), status
    assert (root / "eval" / "grpo" / "scores.json").exists()
    assert "eval/base (evaluate) after" not in out and "[complete: skipped]" in out
    record = json.loads((root / "experiment.json").read_text())
    grpo = next(s for s in record["steps"] if s["name"] == "runs/grpo")
    assert "train.health_action" not in grpo["settings"]
