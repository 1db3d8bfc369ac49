"""The launcher: dry-run job scripts, validation before submission, and a local run.

The commands are the launcher's as a user types them; `slurm/launch.py` itself starts as a
process in the first test and wherever the environment must differ at import (the Hugging Face
cache's location), the others run in this process (tests/cli_helpers.py)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from cli_helpers import run_in_process

from vqa_r1.cli.launch import main as launch_main

REPO = Path(__file__).resolve().parents[1]
LAUNCH = [sys.executable, str(REPO / "slurm" / "launch.py")]


def launch_process(*args, env=None, timeout=300):
    """`python slurm/launch.py ARGS` as its own process."""
    return subprocess.run(
        [*LAUNCH, *args], capture_output=True, text=True, cwd=REPO, timeout=timeout, env=env
    )


def launch(*args):
    """`slurm/launch.py ARGS`, run in this process."""
    return run_in_process(launch_main, [str(a) for a in args])


def test_grpo_3b_dry_run_requests_a_gpu_and_carries_the_recipe():
    out = launch_process(
        "grpo", "--model", "qwen2.5-vl-3b", "--dry-run", "--output-dir", "/tmp/vqa-r1-dry"
    )
    assert out.returncode == 0, out.stderr
    script = out.stdout
    assert script.startswith("#!/bin/bash")
    assert "#SBATCH --gpus-per-node=1" in script or "#SBATCH --gres=gpu" in script
    assert "#SBATCH --signal=USR2@" in script and "#SBATCH --time=" in script
    assert (
        "learning_rate: 1.0e-05" in script
        and "num_generations: 8" in script
        and "beta: 0.04" in script
    )
    assert "/tmp/vqa-r1-dry/jobs/%j_0_log.out" in script
    assert "submitit.core._submit" in script
    assert not Path("/tmp/vqa-r1-dry").exists()  # a dry run writes nothing


def test_the_launchers_help_names_every_declared_experiment():
    """`slurm/launch.py --help` (issue 30, item 10): every spec under experiments/specs, and
    each job verb's line in plain English."""
    from vqa_r1.experiments.spec import list_specs

    out = launch("--help")
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())  # argparse wraps the lines
    assert f"a declared study ({', '.join(list_specs())}) as a job chain" in text
    assert len(list_specs()) == 7
    assert "submit an evaluation job" in text and "submit a evaluate" not in text


def test_dry_run_with_overrides_and_cluster_profile():
    out = launch(
        "sft",
        "--model",
        "internvl3-1b",
        "--dry-run",
        "--cluster",
        "study-12h",
        "--gpus",
        "2",
        "--time",
        "02:00:00",
        "--set",
        "train.learning_rate=3e-4",
    )
    assert out.returncode == 0, out.stderr
    assert "#SBATCH --time=120" in out.stdout
    assert "learning_rate: 0.0003" in out.stdout
    config = yaml.safe_load(out.stdout.split("# ---- resolved configuration")[1].split("\n", 1)[1])
    assert config["model"]["name"] == "internvl3-1b" and config["resources"]["gpus"] == 2


@pytest.mark.parametrize(
    "args, message",
    [
        (["grpo", "--model", "qwen-9000", "--dry-run"], "Valid names"),
        (
            ["grpo", "--model", "tiny-qwen2.5-vl", "--set", "train.lr=1", "--dry-run"],
            "unknown key 'train.lr'",
        ),
        (["grpo", "--model", "qwen2.5-vl-3b", "--time", "soon", "--dry-run"], "time"),
        (["grpo", "--model", "qwen2.5-vl-3b", "--cluster", "nowhere", "--dry-run"], "nowhere"),
        (
            ["sft", "--model", "tiny-qwen2.5-vl", "--dataset", "/no/such/data", "--dry-run"],
            "data.dataset",
        ),
    ],
)
def test_bad_requests_fail_before_submission(args, message, tmp_path):
    out = launch(*args, "--output-dir", str(tmp_path / "run"))
    assert out.returncode == 2, out.stdout + out.stderr
    assert message in out.stderr
    assert not (tmp_path / "run" / "jobs").exists()  # nothing was submitted


def test_slurm_executor_without_sbatch_is_a_clear_error(monkeypatch):
    import shutil

    from vqa_r1.errors import UserError
    from vqa_r1.launch.job_script import pick_executor

    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(UserError, match="sbatch is not on PATH"):
        pick_executor("slurm")
    assert pick_executor("auto") == "local"
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/" + name)
    assert pick_executor("auto") == "slurm"


def test_uncached_hub_model_is_refused_before_queueing(tmp_path):
    import os

    env = {
        **os.environ,
        "HF_HOME": str(tmp_path / "hf"),
        "HF_HUB_CACHE": str(tmp_path / "hf" / "hub"),
    }
    out = launch_process(
        "grpo",
        "--model",
        "qwen2.5-vl-3b",
        "--executor",
        "local",
        "--output-dir",
        str(tmp_path / "r"),
        env=env,
    )
    assert out.returncode == 2
    assert "hf download Qwen/Qwen2.5-VL-3B-Instruct" in out.stderr


@pytest.mark.slow
def test_local_grpo_job_leaves_a_run_directory(tmp_path):
    run = tmp_path / "run"
    out = launch(
        "grpo",
        "--model",
        "tiny-qwen2.5-vl",
        "--executor",
        "local",
        "--output-dir",
        str(run),
        "--set",
        "train.max_steps=3",
        "--set",
        "train.save_steps=3",
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "state=COMPLETED" in out.stdout
    assert (run / "config.yaml").exists() and (run / "metrics.jsonl").read_text().strip()
    assert (run / "checkpoints" / "checkpoint-3" / "adapter_model.safetensors").exists()
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["verb"] == "grpo" and config["train"]["max_steps"] == 3
    # DeepSpeed is imported by the runs that use it only (train/deepspeed_import.py): importing
    # it says where it put its accelerator, and this job's log does not
    (log,) = (run / "jobs").glob("*_0_log.err")
    text = log.read_text()
    assert "real_accelerator" not in text and "vqa_r1.launch.task: task train in" in text
    assert "\r" not in text  # no progress bars off a terminal (weights loading, dataset maps)


def test_multi_node_deepspeed_and_vllm_server_dry_run():
    out = launch(
        "grpo",
        "--model",
        "qwen2.5-vl-7b",
        "--gpus",
        "4",
        "--nodes",
        "2",
        "--set",
        "train.deepspeed=zero3",
        "--set",
        "train.use_vllm=true",
        "--set",
        "train.vllm_mode=server",
        "--dry-run",
    )
    assert out.returncode == 0, out.stderr
    script = out.stdout
    assert "#SBATCH --nodes=2" in script and "#SBATCH --gpus-per-node=4" in script
    assert (
        "#SBATCH --ntasks-per-node=3" in script
    )  # one training process per GPU, the 4th serves vLLM
    # the cached model folder when there is one, else (not downloaded here) the hub id
    assert re.search(
        r"VLLM_SERVER_DEV_MODE=1 vllm serve \S*Qwen(/|--)Qwen2\.5-VL-7B-Instruct", script
    )
    # the training tasks drop the server's GPU themselves (srun steps reset CUDA_VISIBLE_DEVICES)
    assert "export VQA_R1_VLLM_GPUS=" in script and "VQA_R1_VLLM_URL" in script
    assert "export CUDA_VISIBLE_DEVICES" not in script
    assert "deepspeed: zero3" in script
    assert 'export PYTHONPATH="' in script and "/code/" in script  # the code snapshot


def test_zero2_multi_gpu_and_bad_deepspeed_name():
    out = launch(
        "sft",
        "--model",
        "qwen2.5-vl-3b",
        "--gpus",
        "2",
        "--set",
        "train.deepspeed=zero2",
        "--dry-run",
    )
    assert out.returncode == 0, out.stderr
    assert "#SBATCH --ntasks-per-node=2" in out.stdout and "vllm serve" not in out.stdout
    bad = launch("sft", "--model", "qwen2.5-vl-3b", "--set", "train.deepspeed=zero9", "--dry-run")
    assert bad.returncode == 2 and "zero2, zero3" in bad.stderr


def test_torch_distributed_environment_from_slurm(monkeypatch):
    import os

    from vqa_r1.launch.distributed import export_torch_distributed
    from vqa_r1.recipes import deepspeed_config

    for key in (
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
    ):
        # set then delete, so monkeypatch restores the absence after the test (no leak into
        # later tests that start local jobs, which would wait for a rendezvous)
        monkeypatch.setenv(key, "unset")
        monkeypatch.delenv(key)
    slurm = {
        "SLURM_JOB_ID": "4242",
        "SLURM_NTASKS": "8",
        "SLURM_PROCID": "5",
        "SLURM_LOCALID": "1",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_NNODES": "2",
        "SLURM_NODEID": "1",
        "SLURM_STEP_NODELIST": "gpu[01-02]",
        "SLURM_JOB_NODELIST": "gpu[01-02]",
        "SUBMITIT_EXECUTOR": "slurm",
        "SLURM_NTASKS_PER_NODE": "4",
    }
    for key, value in slurm.items():
        monkeypatch.setenv(key, value)
    env = export_torch_distributed()
    assert env["RANK"] == "5" and env["WORLD_SIZE"] == "8" and env["LOCAL_RANK"] == "1"
    assert env["MASTER_ADDR"] == "gpu01" and 20000 <= int(env["MASTER_PORT"]) <= 60000
    assert os.environ["RANK"] == "5"
    import json

    assert json.loads(open(deepspeed_config("zero3")).read())["zero_optimization"]["stage"] == 3


def test_judge_job_locally_and_vllm_judge_dry_run(realdata, tmp_path):
    import json

    base = realdata / "alignment-calculation_LLM-as-a-judge"
    responses = base / "responses/base/generated_responses_test.json"
    questions = base / "taxonomy-prompt/alignment_checks_TEST_o4-mini.json"
    common = ["--responses", f"base={responses}", "--questions", str(questions)]
    out = launch(
        "judge",
        *common,
        "--backend",
        "heuristic",
        "--limit",
        "20",
        "--out",
        str(tmp_path / "checks.json"),
        "--executor",
        "local",
        "--output-dir",
        str(tmp_path / "job"),
    )
    assert out.returncode == 0, out.stderr[-2000:]
    checks = json.loads((tmp_path / "checks.json").read_text())
    assert len(checks) == 20 and {"index", "model", "aligns", "type", "why"} <= checks[0].keys()
    dry = launch(
        "judge",
        *common,
        "--vllm-model",
        "Qwen/Qwen2.5-7B-Instruct",
        "--judge-model",
        "Qwen/Qwen2.5-7B-Instruct",
        "--out",
        str(tmp_path / "c2.json"),
        "--dry-run",
    )
    assert dry.returncode == 0, dry.stderr
    assert (
        "#SBATCH --gpus-per-node=1" in dry.stdout
        and "vllm serve Qwen/Qwen2.5-7B-Instruct" in dry.stdout
    )
    assert not (tmp_path / "c2.json").exists()


def _dataset_with_bad_images(tmp_path: Path) -> tuple[Path, list[Path]]:
    from vqa_r1.data.datasets import load_split
    from vqa_r1.data.synthetic import SyntheticSpec, write_dataset

    out = tmp_path / "data"
    write_dataset(out, SyntheticSpec(splits={"train": 6, "validation": 2, "test": 2}, seed=5))
    paths = [Path(p) for p in load_split(out, "train", check_images=False)["image_path"]]
    paths[0].unlink()  # missing
    paths[1].write_bytes(paths[1].read_bytes()[:60])  # truncated: its header still reads
    return out, paths


@pytest.mark.parametrize("verb", ["grpo", "evaluate"])
def test_dataset_images_are_checked_before_anything_is_queued(tmp_path, verb):
    data, paths = _dataset_with_bad_images(tmp_path)
    split = ["--set", "eval.split=train"] if verb == "evaluate" else []
    out = launch(
        verb, "--model", "tiny-qwen2.5-vl", "--dataset", str(data), "--dry-run", *split,
        "--output-dir", str(tmp_path / "run"),
    )  # fmt: skip
    assert out.returncode == 2, out.stdout[-500:]
    assert (
        f"{data} [train]: 2 of 6 distinct images (2 of 6 rows) are missing or unreadable"
        in out.stderr
    )
    assert str(paths[0]) in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "run").exists()


def test_an_adapter_to_evaluate_must_exist_when_submitting(tmp_path):
    out = launch(
        "evaluate", "--model", "tiny-qwen2.5-vl", "--adapter", str(tmp_path / "nope"),
        "--dry-run", "--output-dir", str(tmp_path / "run"),
    )  # fmt: skip
    assert out.returncode == 2 and "no LoRA adapter" in out.stderr, out.stderr[-500:]


def test_a_failed_local_job_is_reported_in_one_line(tmp_path):
    empty = tmp_path / "no-model"
    empty.mkdir()
    out = launch(
        "evaluate", "--model", "tiny-qwen2.5-vl", "--executor", "local",
        "--set", f"model.path={empty}", "--set", "eval.limit=2",
        "--output-dir", str(tmp_path / "run"),
    )  # fmt: skip
    assert out.returncode == 1, out.stdout[-500:]
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: evaluate failed: "), out.stderr
    assert "Traceback" not in out.stderr and "log: " in errors[0]
    log = errors[0].rsplit("log: ", 1)[1]
    assert Path(log).is_file()
    # the dead job is FAILED in status, with the exception's line and the log to read
    status = launch("status", str(tmp_path / "run"))
    assert status.returncode == 0, status.stderr
    first, reason = status.stdout.splitlines()[:2]
    assert " FAILED " in first and "run FAILED" in first and "RUNNING" not in status.stdout
    assert reason.strip() == f"model.path: {empty} has no config.json (expected a saved model " \
        f"folder); log: {log}"  # fmt: skip


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--generation-cache", "off"], "off"),
        (["--generation-cache", "on"], "on"),
        (["--set", "model.generation_cache=off"], "off"),
        (["--set", "model.generation_cache=on"], "on"),
    ],
)
def test_generation_cache_flag_as_typed_on_the_command_line(tmp_path, flags, expected):
    """on/off stay the strings the user typed (a YAML parser would make them booleans)."""
    out = launch(
        "evaluate", "--model", "tiny-smolvlm", *flags, "--dry-run",
        "--output-dir", str(tmp_path / "run"),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-500:]
    resolved = yaml.safe_load(out.stdout.split("written to the run directory on submit) ----\n")[1])
    assert resolved["model"]["generation_cache"] == expected


@pytest.mark.parametrize(
    "flags",
    [
        ["evaluate", "--limit", "0"],
        ["sft", "--set", "train.max_steps=0", "--set", "train.num_train_epochs=0"],
    ],
)
def test_degenerate_settings_are_refused_before_anything_is_written(tmp_path, flags):
    verb, *rest = flags
    out = launch(
        verb, "--model", "tiny-qwen2.5-vl", *rest, "--executor", "local",
        "--output-dir", str(tmp_path / "run"),
    )  # fmt: skip
    assert out.returncode == 2, out.stdout[-500:] + out.stderr[-500:]
    assert out.stderr.startswith("error: ") and "Traceback" not in out.stderr
    assert not (tmp_path / "run").exists()


def test_time_limits_a_local_job_too(tmp_path, monkeypatch):
    """--time is the local executor's limit as well (it was always 60 minutes, silently)."""
    from vqa_r1.launch import executor
    from vqa_r1.launch.build import RunSpec, job_graph
    from vqa_r1.launch.job_script import script_text
    from vqa_r1.launch.request import JobOptions

    job = JobOptions(executor="local", time="00:03:00")
    spec = RunSpec("sft", "tiny-qwen2.5-vl", None, (), str(tmp_path / "run"))
    graph, _ = job_graph(spec, job)
    request, run_dir = graph.steps[0].request, graph.root
    seen = {}

    class Executor:
        def submit(self, task):
            return type("Job", (), {"job_id": "1"})()

    def make_executor(kind, folder, params=None):
        seen.update(kind=kind, **(params or {}))
        return Executor()

    monkeypatch.setattr(executor, "make_executor", make_executor)
    executor.submit(request, "local", run_dir / "jobs")
    assert seen == {"kind": "local", "timeout_min": 3}
    assert "time limit 00:03:00 (3 min)" in script_text(request)


def test_a_refused_sbatch_is_one_line_with_slurms_message(tmp_path, monkeypatch, capsys):
    """sbatch's own refusal (a bad partition here) reaches the user as one line, no traceback."""
    import os

    import submitit

    from vqa_r1.cli.launch import main as launch_main

    said = "sbatch: error: Batch job submission failed: Invalid partition name specified"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(f"#!/bin/sh\necho '{said}' >&2\nexit 1\n")
    (bin_dir / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(submitit.SlurmExecutor, "affinity", classmethod(lambda cls: 2))
    run = tmp_path / "run"
    args = ["evaluate", "--model", "tiny-qwen2.5-vl", "--executor", "slurm", "--no-snapshot"]
    assert launch_main([*args, "--output-dir", str(run)]) == 2
    out = capsys.readouterr()
    assert out.err.count("\n") == 1 and out.err.startswith("error: sbatch refused job"), out.err
    assert said in out.err and str(run) in out.err and "cluster profile" in out.err


def test_a_step_completed_during_the_relaunchs_planning_is_not_submitted_again(tmp_path):
    """executor.finished_since_building: the previous job left the queue after building read the
    folder; a completion recorded after that read is that job's, one from before is not (a
    folder --overwrite moves aside)."""
    import json
    import time
    from types import SimpleNamespace

    from vqa_r1 import claims
    from vqa_r1.launch.executor import finished_since_building
    from vqa_r1.launch.graph import Step

    run_dir = tmp_path / "eval"
    run_dir.mkdir()
    request = SimpleNamespace(folder_state=claims.RESUME)  # not done when built
    step = Step("eval/base", run_dir, request)
    assert not finished_since_building(step)  # no marker: nothing to go on

    def completed(at: float) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(at))
        marker = {"verb": "evaluate", "settings": {}, "completed": stamp}
        (run_dir / claims.MARKER).write_text(json.dumps(marker))

    completed(time.time())
    assert finished_since_building(step)
    completed(step.checked_at - 3600)
    assert not finished_since_building(step)

    # a training run never marks its folder: its status.json says when it completed
    train_dir = tmp_path / "sft"
    train_dir.mkdir()
    marker = {"verb": "sft", "settings": {}, "created": "2026-01-01T00:00:00"}
    (train_dir / claims.MARKER).write_text(json.dumps(marker))
    step = Step("runs/sft", train_dir, request)

    def status(state: str, at: float) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(at))
        (train_dir / "status.json").write_text(json.dumps({"state": state, "updated": stamp}))

    status("RUNNING", time.time())
    assert not finished_since_building(step)
    status("COMPLETED", time.time())
    assert finished_since_building(step)
    status("COMPLETED", step.checked_at - 3600)
    assert not finished_since_building(step)
